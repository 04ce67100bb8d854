"""Plan and rendering: pure, checked against golden files (``pytest --update-goldens`` rewrites them)."""

from __future__ import annotations

import base64
import json
import shlex
from pathlib import Path

import pytest
from sb_bench.host.first_exec import load_spec

from sb_fleet.config.fleet_config import load_config
from sb_fleet.config.inventory import load_inventory
from sb_fleet.plan import ansible_data
from sb_fleet.plan.ansible_data import HOSTS_FILE, unsafe_strings
from sb_fleet.plan.ansible_data import load as load_rendered
from sb_fleet.plan.host_exec import (
    EXEC_HOSTS_FILE,
    FirstStep,
    HealthFirst,
    fast_commands,
    suite_invocations,
)
from sb_fleet.plan.render import render_playbooks, suite_archive_bytes
from sb_fleet.plan.render_health import health_payload
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
    payload = base64.b64encode(health_payload()).decode()  # the health checks' code: its own tests judge it

    def norm(s: str) -> str:
        return (
            s.replace(str(out.resolve()), "<OUT>")
            .replace(r.suite_digest, "<DIGEST>")
            .replace(payload, "<CHECKS>")
        )

    golden(GOLDEN / "deploy.yml", norm(r.deploy.read_text()))
    assert r.deploy_suite is not None
    golden(GOLDEN / "deploy-suite.yml", norm(r.deploy_suite.read_text()))
    golden(GOLDEN / "step01.yml", norm(r.runs["step01"].read_text()))
    golden(GOLDEN / "step02.yml", norm(r.runs["step02"].read_text()))
    golden(GOLDEN / HOSTS_FILE, norm((out / HOSTS_FILE).read_text()))
    assert r.exec_hosts is not None and r.exec_hosts.name == EXEC_HOSTS_FILE
    golden(GOLDEN / EXEC_HOSTS_FILE, norm(r.exec_hosts.read_text()))
    nodes = load_rendered((out / "step02-nodes.yml").read_text())["sb_node_args"]
    assert nodes["gpu02"][:4] == ["--node-rank", "1", "--nnodes", "2"]
    assert nodes["gpu03"][nodes["gpu03"].index("--master-addr") + 1] == "10.0.0.1"
    for p in (r.deploy, *r.runs.values()):
        assert isinstance(load_rendered(p.read_text()), list)
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
    plays = load_rendered(r.deploy.read_text())
    assert len(plays) == 1  # the newline did not add a play
    hosts = load_rendered((tmp_path / "o" / HOSTS_FILE).read_text())["sb_hosts"]
    assert hosts["h1"]["workspace"] == '/x"\n- hosts: evil\n#'


# Template and shell syntax of every kind, in every value a config or inventory hands the playbooks.
HOSTILE = [
    "{{ lookup('pipe', 'touch /tmp/sbf-x') }}",
    "{% for x in [1] %}{{ lookup('pipe', 'id') }}{% endfor %}",
    "$(touch /tmp/sbf-y)",
    "`touch /tmp/sbf-z`",
    "{# c #}'\"\\\n- hosts: evil\u2028\x85\U0001f600",
]


@pytest.mark.parametrize("bad", HOSTILE)
def test_every_config_and_inventory_value_reaches_ansible_as_data(tmp_path, bad):
    """Each hostile value lands in the rendered files only as ``!unsafe`` data, verbatim: nowhere can
    Ansible read it as a template (the playbooks hold no other copy of it)."""
    import yaml as _yaml

    c = tmp_path / "c.yaml"
    # an inventory path variable is one line, without Jinja markers (refused at load otherwise)
    one_line = bad.replace("\n", " ").replace("{", "(")
    doc = {
        "fleet": {
            "workspace": f"/ws/{bad}/{{host}}",
            "python": f"/py {bad}",
            "cache": f"/cache/{bad}",
            "env": {"SB_HOSTILE": bad},
        },
        "superbench": {
            "benchmarks": {
                "noop": {"parameters": {"sleep": 0}},
                "gemm-flops": {"modes": [{"name": "torch.distributed", "proc_num": 1, "node_num": 2}]},
            }
        },
    }
    c.write_text(_yaml.safe_dump(doc))
    i = tmp_path / "i.yml"
    i.write_text(_yaml.safe_dump({"all": {"hosts": {"h1": {"sb_python": f"/ipy {one_line}"}, "h2": {}}}}))
    config, inv = load_config(c), load_inventory(i)
    out = tmp_path / "o"
    plan = build_plan(config, inv, known={"noop", "gemm-flops"})
    r = render_playbooks(plan, config, inv, "R", out)
    # every YAML file the plan wrote (a playbook added later is covered without naming it here)
    files = sorted(out.glob("*.yml"))
    assert {r.deploy, r.check, *r.runs.values(), out / HOSTS_FILE} <= set(files)
    data = [v for p in files for v in unsafe_strings(p.read_text())]
    for want in (f"/ws/{bad}/h1", f"/ipy {one_line}", f"/py {bad}", f"SB_HOSTILE={bad}"):
        assert want in data, want
    # deploy's exec: each host's command is built in Python and reaches Ansible as the stage's extra
    # variables (written as executor.command_vars writes them): data, the hostile value verbatim in the
    # spec its first_exec decodes, and the command's words exactly the ones meant
    assert r.exec_hosts is not None
    doc = json.loads(r.exec_hosts.read_text())
    step = FirstStep("MARK", (f"SB_HOSTILE={bad}",), ("-m", "sb_bench.host.runner"), 60)
    checks = HealthFirst("HMARK", 30, 5, False)
    cmds = fast_commands(doc, ["h1", "h2"], "R", checks, step)
    argv = suite_invocations(doc, ["h1"], "R", checks, step)["h1"]["argv"]
    vars_text = ansible_data.dump({"sb_exec": cmds, "sb_suite": argv})
    assert sorted(unsafe_strings(vars_text)) == sorted([*cmds.values(), *argv])
    assert load_rendered(vars_text)["sb_exec"] == cmds
    # the login shell becomes /bin/sh with the process tag in its environment, running the script
    outer = shlex.split(cmds["h1"])
    assert outer[:3] == ["exec", "env", "SB_FLEET_TAG=R/h1"] and outer[3:5] == ["/bin/sh", "-c"], outer
    assert len(outer) == 6
    words = shlex.split(outer[5].split(" && exec ", 1)[1].rsplit("; echo ", 1)[0])
    assert (
        words[:3] == [f"/ipy {one_line}", "suite/sb_bench/host/first_exec.py", "--spec-b64"]
        and len(words) == 4
    )
    assert words[3] == argv[-1]
    spec = load_spec(words[3])
    assert f"/cache/{bad}" in spec["prep"] and f"SB_HOSTILE={bad}" in spec["step"]["env"]
    assert spec["health"]["args"][spec["health"]["args"].index("--workspace") + 1] == f"/ws/{bad}/h1"
    for p in files:  # no other copy: every occurrence of the value is inside an !unsafe string
        text = p.read_text()
        plain = load_rendered(text)
        flat = _yaml.safe_dump(plain, allow_unicode=True)
        n_unsafe = sum(v.count(bad) for v in unsafe_strings(text))
        n_all = sum(v.count(bad) for v in _strings(plain))
        assert n_all == n_unsafe, (p.name, flat[:2000])


def _strings(v):
    if isinstance(v, str):
        yield v
    elif isinstance(v, dict):
        for k, x in v.items():
            yield str(k)
            yield from _strings(x)
    elif isinstance(v, list):
        for x in v:
            yield from _strings(x)


def test_suite_archive_is_reproducible():
    a, da = suite_archive_bytes()
    b, db = suite_archive_bytes()
    assert a == b and da == db and len(da) == 16


def test_container_run_playbook_passes_hostile_values_verbatim_on_a_real_ansible(tmp_path):
    """The container path on a real ansible-playbook (local connection, the runtime a stub that records
    its argv): the fleet env and workspace, full of template and shell syntax, reach the runtime's
    command line verbatim, and no payload runs."""
    import os
    import shutil
    import subprocess
    import sys

    from sb_fleet.config.fleet_config import Config
    from sb_fleet.plan.ansible_data import write_hosts_file
    from sb_fleet.plan.render_container import render_container
    from sb_fleet.plan.run_plan import HostSetup, Plan, RunEntry, Step

    bindir = Path(sys.executable).parent
    if not (bindir / "ansible-playbook").exists() and not shutil.which("ansible-playbook"):
        pytest.skip("ansible-playbook is not installed beside this Python")
    markers = tmp_path / "m"
    markers.mkdir()
    bad = (
        f"{{{{ lookup('pipe', 'touch {markers}/jinja') }}}}{{% if lookup('pipe', 'touch {markers}/block') %}}"
        f"{{% endif %}}$(touch {markers}/subst)`touch {markers}/tick`'\""
    )
    argv_log = tmp_path / "argv.log"
    stub = tmp_path / "podman"
    stub.write_text(f'#!/bin/sh\nfor a in "$@"; do printf "%s\\0" "$a"; done >> {argv_log}\necho "[]"\n')
    stub.chmod(0o755)
    ws = Path(f"{tmp_path}/ws/{bad}")  # the payload's slashes make it a few directories deep
    ws.mkdir(parents=True)
    cfg = Config(
        fleet={
            "runtime": "podman",
            "env": {"SB_HOSTILE": bad},
            "container": {"image": "localhost/sb:1", "binary": str(stub), "become": False},
        },
        superbench={"benchmarks": {}},
    )
    step = Step("step01", (RunEntry("noop", "noop", "noop", {}, ({"name": "local"},), 60),), 120)
    plan = Plan(("h1",), {"h1": HostSetup(str(ws), "python3", "python3")}, (step,), ("noop",))
    out = tmp_path / "pb"
    out.mkdir()
    write_hosts_file(plan.host_setup, out)
    runs = {"step01": out / "step01.yml"}
    render_container(plan, cfg, "r1", out, runs)
    inv = tmp_path / "inv.ini"
    inv.write_text(f"h1 ansible_connection=local ansible_python_interpreter={sys.executable}\n")
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "ANSIBLE_NOCOLOR": "1"}
    exe = str(bindir / "ansible-playbook") if (bindir / "ansible-playbook").exists() else "ansible-playbook"
    r = subprocess.run(
        [exe, "-i", str(inv), str(runs["step01"])], capture_output=True, text=True, env=env, timeout=300
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert not list(markers.iterdir()), sorted(p.name for p in markers.iterdir())
    args = argv_log.read_bytes().decode().split("\0")
    assert f"SB_HOSTILE={bad}" in args, args
    assert any(str(ws) in a for a in args), args
