"""Slurm for real: Debian's slurmctld and four slurmd on loopback (tests/fleetlib/slurm.py), whose nodes'
NodeAddr are the addresses of a real sshd fleet. sb-fleet takes the fleet from Slurm, validates it over
SSH, drains the planted bad node with its reason, leaves an admin's drained node alone, and resumes the
node once it passes again."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from sb_fleet.config.hostlist import expand
from sb_fleet.errors import UsageError

from .conftest import sb_fleet, started_fleet

pytestmark = pytest.mark.integration

CONFIG = """\
version: v0.4
fleet:
  known_hosts: @KNOWN_HOSTS@
  python: /usr/bin/python3
  install_requirements: never
  default_timeout: 120
superbench:
  benchmarks:
    gemm-flops:
      modes: [{name: local, proc_num: 1, parallel: no, env: {OMP_NUM_THREADS: 1}}]
      parameters: {m: 64, n: 64, k: 64, num_warmup: 1, num_steps: 2, precision: [fp32]}
# The planted faults are a failed deploy and a failed health check: a tiny GEMM on a shared 2-core
# machine is too noisy to judge against the fleet's median (it drained a good node in CI).
gates:
  fleet: {enabled: false}
"""


@pytest.fixture(scope="module")
def cluster():
    if shutil.which("slurmctld") is None or shutil.which("munged") is None:
        pytest.fail(
            "Slurm's daemons are missing: install slurmctld slurmd slurm-client munge (.ci/apt-packages.txt)"
        )
    from tests.fleetlib.slurm import SlurmCluster

    with started_fleet(4, "127.0.12", shared_sshd=True) as fleet:
        c = SlurmCluster([h.addr for h in fleet.hosts]).start()
        try:
            cfg = yaml.safe_load(fleet.config(CONFIG).read_text())
            cfg["slurm"] = {
                "host_vars": {
                    "ansible_user": "sbtest",
                    "ansible_port": fleet.hosts[0].port,
                    "ansible_ssh_private_key_file": str(fleet.client_key),
                    "ansible_python_interpreter": "/usr/bin/python3",
                    "sb_python": fleet.python,
                }
            }
            path = fleet.dir / "slurm-config.yaml"
            path.write_text(yaml.safe_dump(cfg))
            yield c, fleet, path
        finally:
            c.stop()


def test_hostlists_expand_as_scontrol_does(cluster):
    c, _, _ = cluster
    for hl in ("gpu[001-004,010]", "rack[1-2]-gpu[08-10]", "a1,b[3-4],a1", "n[7]", "x[01-3]", "a[1-2]b[3-4]"):
        want = c.sh("scontrol", "show", "hostnames", hl).stdout.split()
        assert expand(hl) == want, hl
    for bad in ("x[099-101]y", "x[3-1]"):
        r = c.sh("scontrol", "show", "hostnames", bad, check=False)
        assert "Invalid" in r.stdout + r.stderr, bad
        with pytest.raises(UsageError):
            expand(bad)


def test_a_fleet_from_a_partition_a_hostlist_and_a_state(cluster, tmp_path):
    c, fleet, cfg = cluster
    r = sb_fleet(
        "deploy",
        "--dry-run",
        "-i",
        "slurm:partition=gpu",
        "-c",
        str(cfg),
        "--run-dir",
        str(tmp_path / "a"),
        env=c.env,
    )
    assert r.returncode == 0, r.stderr
    hosts = json.loads((tmp_path / "a" / "inventory" / "hosts.json").read_text())["hosts"]
    assert [h["name"] for h in hosts] == c.names
    assert [h["vars"]["ansible_host"] for h in hosts] == [h.addr for h in fleet.hosts]
    assert all(h["groups"] == ["slurm_gpu"] for h in hosts)
    query = json.loads((tmp_path / "a" / "inventory" / "slurm-query.json").read_text())
    assert query["argv"][:2] == ["sinfo", "-h"] and len(query["nodes"]) == 4

    r = sb_fleet(
        "deploy",
        "--dry-run",
        "-i",
        "slurm:slnode[2-3]",
        "-c",
        str(cfg),
        "--run-dir",
        str(tmp_path / "b"),
        env=c.env,
    )
    assert r.returncode == 0, r.stderr
    assert [h["name"] for h in json.loads((tmp_path / "b" / "hosts.json").read_text())["hosts"]] == [
        "slnode2",
        "slnode3",
    ]

    r = sb_fleet(
        "deploy",
        "--dry-run",
        "-i",
        "slurm:partition=gpu",
        "-c",
        str(cfg),
        "--limit",
        "slnode[1,4]",
        "--run-dir",
        str(tmp_path / "c"),
        env=c.env,
    )
    assert r.returncode == 0, r.stderr
    assert [h["name"] for h in json.loads((tmp_path / "c" / "hosts.json").read_text())["hosts"]] == [
        "slnode1",
        "slnode4",
    ]

    r = sb_fleet(
        "deploy",
        "--dry-run",
        "-i",
        "slurm:partition=gpu,state=drained",
        "-c",
        str(cfg),
        "--run-dir",
        str(tmp_path / "d"),
        env=c.env,
    )
    assert (
        r.returncode == 2
        and "Slurm lists no node for this spec" in r.stderr
        and not (tmp_path / "d").exists()
    )
    r = sb_fleet("deploy", "--dry-run", "-i", "slurm:colour=red", "-c", str(cfg), env=c.env)
    assert r.returncode == 2 and "unknown key 'colour'" in r.stderr and "Traceback" not in r.stderr


def test_validate_drains_the_bad_node_leaves_the_admins_and_resumes_it_when_fixed(cluster, tmp_path):
    c, fleet, cfg = cluster
    c.sh("scontrol", "update", "nodename=slnode4", "state=drain", "reason=admin maintenance")
    # The planted fault: slnode3's workspace is a directory of root's, which the login user cannot make
    # its own (deploy's hostprep fails on that host alone).
    home = Path(fleet.user.pw_dir)
    ws = home / ".sb-fleet" / "hosts" / "slnode3"
    for d in (home / ".sb-fleet", home / ".sb-fleet" / "hosts"):
        d.mkdir(exist_ok=True)
        shutil.chown(d, "sbtest", "sbtest")
    ws.mkdir(mode=0o755)
    try:
        r = sb_fleet(
            "validate",
            "-i",
            "slurm:partition=gpu",
            "-c",
            str(cfg),
            "--run-dir",
            str(tmp_path / "r1"),
            "--drain",
            env=c.env,
            timeout=900,
        )
    finally:
        shutil.rmtree(ws)
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    states = c.states()
    assert states["slnode3"][0].startswith("drain"), states
    assert states["slnode3"][1].startswith("sb-fleet r1-") and len(states["slnode3"][1]) < 256
    assert states["slnode4"] == ("drained", "admin maintenance")
    assert states["slnode1"][0] == "idle" and states["slnode2"][0] == "idle", (states, r.stdout[-4000:])
    assert "slnode4: left alone: passes, but drained for another reason (admin maintenance)" in r.stdout
    actions = json.loads((tmp_path / "r1" / "slurm-actions.json").read_text())["actions"]
    assert [(a["node"], a["verb"]) for a in actions] == [("slnode3", "drain"), ("slnode4", "leave")]
    assert actions[0]["user"] and actions[0]["time"] and actions[0]["rc"] == 0

    # Fixed: the next night's run passes slnode3 and resumes it; the admin's node stays drained.
    r = sb_fleet(
        "validate",
        "-i",
        "slurm:partition=gpu",
        "-c",
        str(cfg),
        "--run-dir",
        str(tmp_path / "r2"),
        "--drain",
        env=c.env,
        timeout=900,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    states = c.states()
    assert states["slnode3"][0] == "idle", states
    assert states["slnode4"] == ("drained", "admin maintenance")

    # --dry-run prints scontrol's commands and changes nothing.
    c.sh("scontrol", "update", "nodename=slnode4", "state=resume")
    r = sb_fleet("drain", str(tmp_path / "r1"), "--dry-run", env=c.env)
    assert r.returncode == 0, r.stderr
    assert "scontrol update nodename=slnode3 state=drain 'reason=sb-fleet r1-" in r.stdout
    assert c.states()["slnode3"][0] == "idle"


def test_the_health_checks_as_healthcheckprogram_drain_and_resume_only_their_own(cluster, tmp_path):
    import subprocess
    import sys

    c, _, _ = cluster
    for n in ("slnode1", "slnode2"):  # whatever an earlier test left: start from idle nodes
        if not c.states()[n][0].startswith("idle"):
            c.sh("scontrol", "update", f"nodename={n}", "state=resume")
    want8 = tmp_path / "expect.json"
    want8.write_text(json.dumps({"gpu": {"count": 8}}))  # this machine has no GPU: gpu.count fails

    def health(node: str, *extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "sb_bench", "health", "--slurm", "--node", node, *extra],
            capture_output=True, text=True, timeout=300, env=c.env,
        )  # fmt: skip

    r = health("slnode2", "--expect", str(want8))
    assert r.returncode == 1 and "slurm: slnode2 drained: sb-fleet health: gpu.count" in r.stdout, (
        r.stdout + r.stderr
    )
    state, reason = c.states()["slnode2"]
    assert state.startswith("drain") and reason.startswith("sb-fleet health: gpu.count") and len(reason) < 256

    c.sh("scontrol", "update", "nodename=slnode1", "state=drain", "reason=admin: new PSU")
    r = health("slnode1", "--expect", str(want8))
    assert "left as it is: failing, but already" in r.stdout and c.states()["slnode1"] == (
        "drained",
        "admin: new PSU",
    )
    r = health("slnode1")
    assert "left as it is" in r.stdout and c.states()["slnode1"][1] == "admin: new PSU"

    r = health("slnode2")  # passes again: the drain was ours, so it is resumed
    assert r.returncode == 0 and "slurm: slnode2 resumed" in r.stdout, r.stdout + r.stderr
    assert c.states()["slnode2"][0] == "idle"
    c.sh("scontrol", "update", "nodename=slnode1", "state=resume")
