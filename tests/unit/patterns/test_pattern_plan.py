"""Patterns in the plan: one multi-node step per round, node arguments per group, mpi launched from
each group's first node with the fleet's host-key policy, the cost in --dry-run's plan."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from sb_fleet.config.fleet_config import load_config
from sb_fleet.config.inventory import load_inventory
from sb_fleet.errors import ConfigError
from sb_fleet.plan.run_plan import Plan, build_plan

DATA = Path(__file__).parent / "data"

INVENTORY = """\
[gpu]
node[0:5] ansible_host=10.0.0.1
[gpu:vars]
ansible_user=v
"""


def plan_for(tmp_path, body: str, inventory: str = INVENTORY, given=None) -> Plan:  # noqa: ANN001
    c = tmp_path / "c.yaml"
    c.write_text(
        'version: v0.4\nfleet: {workspace: "/ws/{host}", master_port: 29600}\nsuperbench:\n  benchmarks:\n'
        + body
    )
    i = tmp_path / "inv.ini"
    i.write_text(inventory)
    return build_plan(load_config(c), load_inventory(i), known={"tcp-bw", "nccl-bw"}, given=given)


def test_pair_wise_in_mpi_mode_is_one_step_per_round(tmp_path):
    plan = plan_for(
        tmp_path,
        "    tcp-bw:\n      timeout: 30\n      modes: [{name: mpi, proc_num: 1, pattern: {type: pair-wise}}]\n",
    )
    assert len(plan.steps) == 5  # 6 hosts: 5 rounds of 3 disjoint pairs
    keys = [s.entries[0].key for s in plan.steps]
    assert keys == [f"tcp-bw@{r}" for r in range(5)]
    pairs = {frozenset(g.hosts) for s in plan.steps for g in s.groups}
    assert len(pairs) == 15
    first = plan.steps[0]
    assert first.label == "tcp-bw pair-wise round 1/5" and first.timeout == 30 + 60
    g = first.groups[1]
    assert g.targets == g.hosts[:1]  # mpirun runs on the group's first node only
    assert g.mode_index == "0,1" and g.parallel == 1
    # the plan survives its JSON file
    again = Plan.from_json(json.loads(json.dumps(plan.to_json())))
    assert again == plan
    assert "5 round(s) of 15 group(s)" in plan.describe()
    assert plan.patterns["tcp-bw"]["mpi_pattern"].startswith(
        "benchmark_name: tcp-bw pattern_type: pair-wise\n"
    )


def test_mpi_head_gets_its_group_with_the_fleet_host_key_policy(tmp_path):
    kh = tmp_path / "known_hosts"
    kh.write_text(
        "[10.0.0.1]:2201 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTests0000000000000000000000000\n"
    )
    inv = "[gpu]\na ansible_host=10.0.0.1 ansible_port=2200\nb ansible_host=10.0.0.1 ansible_port=2201\n[gpu:vars]\nansible_user=v\n"
    plan = plan_for(
        tmp_path,
        "    tcp-bw:\n      modes: [{name: mpi, proc_num: 2, mca: {btl: self}, pattern: {type: all-nodes}}]\n",
        inv,
    )
    c = tmp_path / "c.yaml"
    c.write_text(
        c.read_text().replace(
            "master_port: 29600", f"master_port: 29600, known_hosts: {kh}, host_key_checking: accept-new"
        )
    )
    plan = build_plan(load_config(c), load_inventory(tmp_path / "inv.ini"), known={"tcp-bw"})
    (step,) = plan.steps
    (group,) = step.groups
    args = group.node_args(load_inventory(tmp_path / "inv.ini"), 29600)
    assert list(args) == ["a"]
    head = args["a"]
    g = json.loads(base64.b64decode(head[head.index("--mpi-group-b64") + 1]))
    assert g["policy"] == "accept-new"
    assert [m["port"] for m in g["members"]] == [2200, 2201]
    assert [m["workspace"] for m in g["members"]] == ["/ws/a", "/ws/b"]
    assert g["known_hosts"].startswith("[10.0.0.1]:2201 ssh-ed25519")
    assert head[head.index("--mode-index") + 1] == "0,0"
    assert step.entries[0].modes[0]["mca"] == {"btl": "self"}


def test_torch_distributed_pattern_and_k_batch(tmp_path):
    plan = plan_for(
        tmp_path,
        "    nccl-bw:\n      modes: [{name: torch.distributed, proc_num: 2, pattern: {type: k-batch, batch: 4}}]\n",
    )
    (step,) = plan.steps
    assert [g.hosts for g in step.groups] == [("node0", "node1", "node2", "node3")]
    assert step.left_out == ("node4", "node5")
    args = step.groups[0].node_args(load_inventory(tmp_path / "inv.ini"), 29600)
    assert list(args) == ["node0", "node1", "node2", "node3"]  # torchrun on every node
    assert args["node2"][args["node2"].index("--mode-index") + 1] == "0,0"
    assert plan.patterns["nccl-bw"]["unused"]["node5"].startswith("the last 2 host(s)")


def test_mpi_without_pattern_runs_once_across_every_node_and_node_num_1_locally(tmp_path):
    plan = plan_for(
        tmp_path,
        "    tcp-bw:\n      modes: [{name: mpi, proc_num: 8}]\n"
        "    nccl-bw:\n      modes: [{name: mpi, proc_num: 8, node_num: 1}]\n",
    )
    across = [s for s in plan.steps if s.multi_node]
    local = [s for s in plan.steps if not s.multi_node]
    assert len(across) == 1 and across[0].groups[0].hosts == tuple(f"node{i}" for i in range(6))
    assert across[0].entries[0].key == "tcp-bw" and across[0].groups[0].mode_index is None
    assert [e.key for e in local[0].entries] == ["nccl-bw"]


def test_topo_aware_reads_the_captured_fabric(tmp_path):
    hosts = (DATA / "ib_traffic_topo_aware_hostfile").read_text().split()
    inv = "[gpu]\n" + "".join(f"{h} ansible_host=10.1.0.{i}\n" for i, h in enumerate(hosts))
    body = (
        "    tcp-bw:\n      modes: [{name: mpi, proc_num: 1, pattern: {type: topo-aware, "
        f"ibnetdiscover: {DATA / 'ib_traffic_topo_aware_ibnetdiscover.txt'}, ibstat: {DATA / 'ib_traffic_topo_aware_ibstat.txt'}, "
        "min_dist: 2, max_dist: 6}}]\n"
    )
    plan = plan_for(tmp_path, body, inv)
    assert [s.label.split("(")[1] for s in plan.steps] == ["distance 2)", "distance 4)", "distance 6)"]
    assert [len(s.groups) for s in plan.steps] == [5, 4, 4]


def test_pattern_errors_name_the_field(tmp_path):
    with pytest.raises(ConfigError, match=r"pattern.*batch"):
        plan_for(tmp_path, "    tcp-bw:\n      modes: [{name: mpi, pattern: {type: k-batch}}]\n")
    body = "    tcp-bw:\n      modes: [{name: mpi, pattern: {type: topo-aware, ibnetdiscover: /nope, ibstat: /nope2}}]\n"
    with pytest.raises(ConfigError, match="cannot read the pattern's ibnetdiscover file"):
        plan_for(tmp_path, body)
