"""Slurm, pure parts: hostlists (Slurm's documented forms), the -i slurm: spec, sinfo's lines, the
inventory written from them, and which nodes a verdict drains, resumes or leaves alone."""

from __future__ import annotations

import pytest
import yaml

from sb_fleet.config.hostlist import compress, expand, is_hostlist, split_top
from sb_fleet.config.slurm_inventory import SlurmSettings, inventory_yaml, parse_sinfo, parse_spec
from sb_fleet.errors import InventoryError, UsageError
from sb_fleet.fleet.slurm_drain import (
    MAX_REASON,
    NodeState,
    drain_reason,
    parse_node_states,
    plan_actions,
    top_finding,
)


@pytest.mark.parametrize(
    "text,names",
    [
        ("gpu[001-004,010]", ["gpu001", "gpu002", "gpu003", "gpu004", "gpu010"]),  # sinfo(1), scontrol(1)
        ("tux[0-2],linux", ["tux0", "tux1", "tux2", "linux"]),
        ("rack[1-2]-n[8-9]", ["rack1-n8", "rack1-n9", "rack2-n8", "rack2-n9"]),
        ("x[8-10]", ["x8", "x9", "x10"]),
        ("plain", ["plain"]),
    ],
)
def test_hostlists_expand(text, names):
    assert expand(text) == names
    assert expand(compress(names)) == names


def test_compress_is_short_and_keeps_widths():
    assert compress(["gpu001", "gpu002", "gpu004", "cpu7"]) == "gpu[001-002,004],cpu7"
    assert compress(["n1"]) == "n1"


@pytest.mark.parametrize("bad", ["a[3-1]", "a[1-2", "a]1[", "a[x-y]", "a[1-9999999]", "a[1-2]b"])
def test_bad_hostlists_are_one_clear_error(bad):
    with pytest.raises(UsageError, match="hostlist"):
        expand(bad)


def test_a_glob_class_is_not_a_hostlist():
    assert is_hostlist("gpu[001-004]") and is_hostlist("n[1,3]")
    assert not is_hostlist("gpu[12]") and not is_hostlist("gpu*") and not is_hostlist("n[ab]")
    assert split_top("a[1-2,4],b,c[3]") == ["a[1-2,4]", "b", "c[3]"]


def test_the_spec_names_partition_nodes_and_states():
    s = parse_spec("slurm:partition=gpu,state=idle,state=drained,nodes=gpu[001-004,010]")
    assert s.partitions == ("gpu",) and s.states == ("idle", "drained") and s.nodes == "gpu[001-004,010]"
    assert s.sinfo_argv()[-6:] == ["-p", "gpu", "-n", "gpu[001-004,010]", "-t", "idle,drained"]
    assert parse_spec("slurm:gpu[1-2]").nodes == "gpu[1-2]"
    assert parse_spec("slurm:") == parse_spec("slurm:")  # everything sinfo lists


@pytest.mark.parametrize(
    "bad,why",
    [
        ("slurm:colour=red", "unknown key"),
        ("slurm:partition=", "empty"),
        ("slurm:partition=$(id)", "odd characters"),
        ("slurm:nodes=gpu[3-1]", "backwards"),
    ],
)
def test_bad_specs_are_refused(bad, why):
    with pytest.raises(InventoryError, match=why.replace("(", r"\(")):
        parse_spec(bad)


def test_sinfo_lines_become_nodes_and_an_inventory():
    out = "n1|10.0.0.1|idle|gpu*|none\nn1|10.0.0.1|idle|debug|none\nn2|n2|drained|gpu*|bad fan|really\n"
    nodes = parse_sinfo(out)
    assert [(n.name, n.addr, n.partitions) for n in nodes] == [
        ("n1", "10.0.0.1", ("gpu", "debug")),
        ("n2", "n2", ("gpu",)),
    ]
    assert nodes[1].reason == "bad fan|really"
    inv = yaml.safe_load(inventory_yaml(nodes, {"ansible_user": "ops"}))
    assert inv["all"]["children"]["slurm_gpu"]["hosts"]["n1"] == {
        "ansible_user": "ops",
        "ansible_host": "10.0.0.1",
    }
    assert inv["all"]["children"]["slurm_debug"]["hosts"]["n1"]["ansible_host"] == "10.0.0.1"
    assert inv["all"]["children"]["slurm_gpu"]["hosts"]["n2"] == {"ansible_user": "ops"}


@pytest.mark.parametrize("line", ["n{{x}}|a|idle|gpu|", "n1|$(id)|idle|gpu|", "n1 n2|a|idle|gpu|", "n1"])
def test_odd_names_from_slurm_are_refused_with_the_line(line):
    with pytest.raises(InventoryError, match="line 1"):
        parse_sinfo(line)


def test_host_vars_are_plain_data():
    with pytest.raises(ValueError, match="template"):
        SlurmSettings.model_validate({"host_vars": {"ansible_user": "{{ lookup('pipe','id') }}"}})
    with pytest.raises(ValueError, match="variable name"):
        SlurmSettings.model_validate({"host_vars": {"Bad-Name": "x"}})


NODES = {
    "n1": NodeState("n1", "idle"),
    "n2": NodeState("n2", "drained", "admin maintenance"),
    "n3": NodeState("n3", "drained", "sb-fleet r0: old finding"),
    "n4": NodeState("n4", "down", "Not responding"),
    "n5": NodeState("n5", "mixed"),
}


def test_failed_hosts_are_drained_unless_another_owns_the_node():
    acts = plan_actions(
        "r1", {"n1": "slow GEMM", "n2": "x", "n3": "new", "n4": "x", "n9": "x"}, set(), NODES, resume=False
    )
    verbs = {a.node: a.verb for a in acts}
    assert verbs == {"n1": "drain", "n2": "leave", "n3": "drain", "n4": "leave", "n9": "leave"}
    n1 = next(a for a in acts if a.node == "n1")
    assert n1.argv == ("scontrol", "update", "nodename=n1", "state=drain", "reason=sb-fleet r1: slow GEMM")


def test_resume_only_what_sb_fleet_drained_and_now_passes():
    acts = plan_actions("r2", {}, {"n1", "n2", "n3", "n4", "n5"}, NODES, resume=True)
    assert {(a.node, a.verb) for a in acts} == {("n3", "resume"), ("n2", "leave"), ("n4", "leave")}
    assert plan_actions("r2", {}, {"n3"}, NODES, resume=False) == []


def test_the_reason_is_one_line_under_256_characters():
    r = drain_reason("20261125-0101-abcd", "x\ny " * 400)
    assert len(r) <= MAX_REASON and "\n" not in r and r.startswith("sb-fleet 20261125-0101-abcd: x y")
    host = {
        "issues": [
            {"severity": "warn", "metric": "a"},
            {
                "severity": "fail",
                "category": "Perf",
                "metric": "gemm/x",
                "value": 1.0,
                "reference": 2.0,
                "detail": "slow",
            },
        ]
    }
    assert top_finding(host) == "Perf gemm/x 1 vs 2 slow"


def test_sinfo_states_and_none_reasons():
    st = parse_node_states("a|idle|none\nb|drained|sb-fleet r: x|y\na|idle|none\n")
    assert st["a"] == NodeState("a", "idle", "") and st["b"].reason == "sb-fleet r: x|y" and st["b"].ours


def test_healthcheckprogram_reads_scontrol_and_owns_only_its_reason():
    from sb_bench.health.slurm_hook import decide, parse_show_node, reason_of

    line = "NodeName=gpu1 Arch=x86_64 State=IDLE+DRAIN ThreadsPerCore=1 Reason=sb-fleet health: gpu.count: 7 of 8 [root@2026-11-25T07:00:00]"
    assert parse_show_node(line) == ("IDLE+DRAIN", "sb-fleet health: gpu.count: 7 of 8")
    fail = {
        "verdict": "fail",
        "checks": [{"check": "gpu.count", "verdict": "fail", "evidence": "7 of 8 " * 80}],
    }
    ok = {"verdict": "pass", "checks": []}
    assert len(reason_of(fail)) <= 255 and reason_of(fail).startswith("sb-fleet health: gpu.count: 7 of 8")
    assert decide(fail, "IDLE", "")[0] == "drain"
    assert decide(fail, "IDLE+DRAIN", "admin: bios")[0] == "leave"
    assert decide(ok, "IDLE+DRAIN", "sb-fleet health: x")[0] == "resume"
    assert decide(ok, "IDLE+DRAIN", "admin: bios")[0] == "leave"
    assert decide(ok, "IDLE", "")[0] == "leave"
