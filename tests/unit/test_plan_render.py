"""Plan and rendering: pure, checked against golden files (``pytest --update-goldens`` rewrites them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from sb_fleet.config.fleet_config import load_config
from sb_fleet.config.inventory import load_inventory
from sb_fleet.plan.render import render_playbooks, suite_archive_bytes
from sb_fleet.plan.run_plan import build_plan

GOLDEN = Path(__file__).parent / "golden"

CONFIG = """\
version: v0.4
fleet: {workspace: /scratch/sbf, python: /opt/conda/bin/python, master_port: 29600, env: {GLOO_SOCKET_IFNAME: ib0}}
superbench:
  var:
    local: &local
      modes: [{name: local, proc_num: 2, prefix: "CUDA_VISIBLE_DEVICES={proc_rank}"}]
  benchmarks:
    gemm-flops:
      <<: *local
      timeout: 60
      parameters: {m: 64}
    fake-bench: {enable: true}
    gpt_models:
      timeout: 100
      modes: [{name: torch.distributed, proc_num: 8, node_num: 2}]
      models: [gpt2-small]
    other-gemm:
      <<: *local
      enable: false
    mpi-thing:
      modes: [{name: mpi, proc_num: 8}]
"""

INVENTORY = """\
[gpu]
gpu[01:05] ansible_host=10.0.0.1
[gpu:vars]
ansible_user=v
"""


@pytest.fixture
def inputs(tmp_path):
    c = tmp_path / "c.yaml"
    c.write_text(CONFIG)
    i = tmp_path / "inv.ini"
    i.write_text(INVENTORY)
    return load_config(c), load_inventory(i)


def test_plan_groups_entries_into_steps(inputs):
    config, inv = inputs
    plan = build_plan(config, inv, known={"gemm-flops", "pytorch-gpt2-small"})
    assert plan.hosts == ("gpu01", "gpu02", "gpu03", "gpu04", "gpu05")
    assert [s.id for s in plan.steps] == ["step01", "step02"]
    first, second = plan.steps
    assert [e.key for e in first.entries] == ["gemm-flops"]
    assert first.timeout == 60 + 60
    assert second.multi_node and [e.key for e in second.entries] == ["gpt_models/pytorch-gpt2-small"]
    assert [g.hosts for g in second.groups] == [("gpu01", "gpu02"), ("gpu03", "gpu04")]
    assert second.left_out == ("gpu05",)
    assert plan.unsupported == {
        "fake-bench": "benchmark 'fake-bench' is not in this suite (see: sb-fleet bench list)",
        "mpi-thing": "benchmark 'mpi-thing' is not in this suite (see: sb-fleet bench list)",
    }
    assert "other-gemm" not in plan.benchmarks
    assert plan.host_setup["gpu01"].workspace == "/scratch/sbf"
    assert "not run: fake-bench" in plan.describe()


def test_rendered_playbooks_match_golden_files(inputs, tmp_path, golden):
    config, inv = inputs
    plan = build_plan(config, inv, known={"gemm-flops", "pytorch-gpt2-small"})
    out = tmp_path / "pb"
    r = render_playbooks(plan, config, inv, "RUNID", out)
    norm = lambda s: s.replace(str(out.resolve()), "<OUT>").replace(r.suite_digest, "<DIGEST>")  # noqa: E731
    golden(GOLDEN / "deploy.yml", norm(r.deploy.read_text()))
    golden(GOLDEN / "step01.yml", norm(r.runs["step01"].read_text()))
    golden(GOLDEN / "step02.yml", norm(r.runs["step02"].read_text()))
    nodes = yaml.safe_load((out / "step02-nodes.yml").read_text())["sb_node_args"]
    assert nodes["gpu02"][:4] == ["--node-rank", "1", "--nnodes", "2"]
    assert nodes["gpu03"][nodes["gpu03"].index("--master-addr") + 1] == "10.0.0.1"
    for p in (r.deploy, *r.runs.values()):
        assert isinstance(yaml.safe_load(p.read_text()), list)
    spec = json.loads((out / "step01.json").read_text())
    assert spec["entries"][0]["params"] == {"m": 64} and spec["entries"][0]["timeout"] == 60


def test_hostile_config_values_cannot_break_the_playbook(tmp_path):
    c = tmp_path / "c.yaml"
    c.write_text(
        'fleet: {workspace: "/x\\"\\n- hosts: evil\\n#", python: "py\' {{ lookup(1) }}"}\n'
        "superbench:\n  benchmarks:\n    gemm-flops: {}\n"
    )
    i = tmp_path / "i.ini"
    i.write_text("h1\n")
    config, inv = load_config(c), load_inventory(i)
    r = render_playbooks(build_plan(config, inv, known={"gemm-flops"}), config, inv, "R", tmp_path / "o")
    plays = yaml.safe_load(r.deploy.read_text())
    assert len(plays) == 1  # the newline did not add a play
    assert plays[0]["vars"]["sb_default_workspace"] == '/x"\n- hosts: evil\n#'


def test_suite_archive_is_reproducible():
    a, da = suite_archive_bytes()
    b, db = suite_archive_bytes()
    assert a == b and da == db and len(da) == 16
