"""Slurm for real: Debian's slurmctld and four slurmd on loopback (tests/fleetlib/slurm.py), whose nodes'
NodeAddr are the addresses of a real sshd fleet. sb-fleet takes the fleet from Slurm, validates it over
SSH and with ``launcher: slurm`` (srun in an allocation it makes in a reservation), drains the planted
bad node with its reason, leaves an admin's drained node alone, resumes the node once it passes again,
and makes srun's failures and hangs that node's outcome."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from sb_fleet.config.hostlist import expand
from sb_fleet.errors import UsageError

from .conftest import SB_FLEET, sb_fleet, started_fleet

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
      parameters: {m: 64, n: 64, k: 64, num_warmup: 1, num_steps: 2, min_time: 0.1, precision: [fp32]}
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
    if ws.exists():  # what an earlier run on this machine left
        shutil.rmtree(ws)
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
    # the admin's node is out of service: not benchmarked (--include-drained would), not counted, not touched
    oc = json.loads((tmp_path / "r1" / "outcomes.json").read_text())["hosts"]["slnode4"]
    assert oc["outcome"] == "out-of-service" and oc["reason"].startswith(
        "slurm: node is drained (admin maintenance): out of service, not tested"
    ), oc
    actions = json.loads((tmp_path / "r1" / "slurm-actions.json").read_text())["actions"]
    assert [(a["node"], a["verb"]) for a in actions] == [("slnode3", "drain")]
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


def _launcher_config(cfg: Path, out: Path, **slurm: object) -> Path:
    """The cluster's config with ``launcher: slurm`` and ``slurm`` settings added."""
    doc = yaml.safe_load(cfg.read_text())
    doc["fleet"]["launcher"] = "slurm"
    doc["fleet"]["deploy_timeout"] = 120
    doc["slurm"].update(slurm)
    doc["health"] = {"enabled": False}
    out.write_text(yaml.safe_dump(doc))
    return out


def _idle(c) -> None:  # noqa: ANN001
    for n, (state, _) in c.states().items():
        if not state.startswith("idle"):
            c.sh("scontrol", "update", f"nodename={n}", "state=resume")


def test_launcher_slurm_validates_in_an_allocation_drains_the_bad_node_and_retests_it(cluster, tmp_path):
    """launcher: slurm: every step an srun step in the job sb-fleet allocates in the nightly reservation;
    the planted bad node (its workspace path is a file: deploy fails there) is drained with the reason,
    the admin's node is neither allocated nor touched, out of service and not counted by the gate; two
    nights without the reservation, the drained node cannot be re-tested: out of service too, the gate passes
    on the nodes tested and its first reason stays word for word; fixed, the next run re-tests it in the
    reservation and resumes it (issue 56)."""
    c, _, cfg = cluster
    _idle(c)
    c.sh(
        "scontrol", "create", "reservation", "reservationname=sbnightly", "users=root",
        "nodes=slnode[1-4]", "starttime=now", "duration=120", "flags=maint,ignore_jobs",
    )  # fmt: skip
    c.sh("scontrol", "update", "nodename=slnode4", "state=drain", "reason=admin maintenance")
    lcfg = _launcher_config(cfg, tmp_path / "slurm-launch.yaml", reservation="sbnightly", grant_timeout=60)
    bad = Path("/root/.sb-fleet/hosts/slnode3")
    bad.parent.mkdir(parents=True, exist_ok=True)
    if bad.is_dir():
        shutil.rmtree(bad)
    bad.write_text("not a directory\n")
    try:
        t0 = time.monotonic()
        r = sb_fleet(
            "validate", "-i", "slurm:partition=gpu", "-c", str(lcfg), "--run-dir", str(tmp_path / "r1"),
            "--drain", env=c.env, timeout=900,
        )  # fmt: skip
        first_s = time.monotonic() - t0
    finally:
        bad.unlink()
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    launch = json.loads((tmp_path / "r1" / "slurm-launch.json").read_text())["allocations"]
    assert len(launch) == 1 and launch[0]["job_id"].isdigit() and launch[0]["made_by_sb_fleet"]
    assert launch[0]["nodes"] == ["slnode1", "slnode2", "slnode3"]
    assert "admin maintenance" in launch[0]["left_out"]["slnode4"]
    # the steps ran through srun as the submitting user (root), not over SSH as the inventory's sbtest:
    # validate's one exec per node as sb-fleet's own srun steps (read as they come: each phase keeps its
    # deadline), every playbook through the sb_srun connection
    assert (tmp_path / "r1" / "ansible" / "deploy" / "direct-exec.json").is_file()
    plays = list((tmp_path / "r1" / "ansible").glob("*/extravars.yml"))
    assert all("sb_srun" in p.read_text() for p in plays), plays
    assert Path("/root/.sb-fleet/hosts/slnode1/suite").exists()
    outcomes = json.loads((tmp_path / "r1" / "outcomes.json").read_text())["hosts"]
    assert outcomes["slnode3"]["outcome"] == "failed", outcomes["slnode3"]
    assert outcomes["slnode4"] == {  # not failing: out of service, with Slurm's state and reason as they are
        "outcome": "out-of-service",
        "reason": "slurm: node is drained (admin maintenance): out of service, not tested",
        "stages": outcomes["slnode4"]["stages"],
    }, outcomes["slnode4"]
    report = json.loads((tmp_path / "r1" / "report.json").read_text())
    verdicts = {h["name"]: h["verdict"] for h in report["hosts"]}
    assert verdicts["slnode4"] == "out_of_service" and report["summary"]["out_of_service"] == 1, verdicts
    for n in ("slnode1", "slnode2"):
        assert outcomes[n]["outcome"] == "ok", outcomes[n]
        assert (tmp_path / "r1" / "raw" / n / "results" / "gemm-flops" / "rank0.json").is_file()
    states = c.states()
    assert states["slnode3"][0].startswith("drain") and states["slnode3"][1].startswith("sb-fleet r1-")
    assert states["slnode4"] == ("drained", "admin maintenance")
    # maint: idle in the maintenance reservation
    assert states["slnode1"][0] in ("idle", "maint") and states["slnode2"][0] in ("idle", "maint"), states
    assert c.sh("squeue", "-h").stdout.strip() == ""  # the allocation is gone
    first_reason = states["slnode3"][1]

    # Two nights without the reservation: slnode3 (sb-fleet's drain) cannot be re-tested, slnode4 is the
    # admin's: both out of service, the gate passes on the two nodes tested, and neither reason changes.
    c.sh("scontrol", "delete", "reservationname=sbnightly")
    plain = _launcher_config(cfg, tmp_path / "slurm-plain.yaml", reservation=None, grant_timeout=60)
    for night in ("n1", "n2"):
        r = sb_fleet(
            "validate", "-i", "slurm:partition=gpu", "-c", str(plain), "--run-dir", str(tmp_path / night),
            "--drain", env=c.env, timeout=900,
        )  # fmt: skip
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        outcomes = json.loads((tmp_path / night / "outcomes.json").read_text())["hosts"]
        why = outcomes["slnode3"]["reason"]
        assert outcomes["slnode3"]["outcome"] == "out-of-service", outcomes["slnode3"]
        assert why.startswith(f"drained by sb-fleet since {first_reason[len('sb-fleet ') :]}"), why
        assert c.states()["slnode3"] == (states["slnode3"][0], first_reason)  # word for word
        assert c.states()["slnode4"] == ("drained", "admin maintenance")
    c.sh(
        "scontrol", "create", "reservation", "reservationname=sbnightly", "users=root",
        "nodes=slnode[1-4]", "starttime=now", "duration=120", "flags=maint,ignore_jobs",
    )  # fmt: skip

    # Fixed: re-tested inside the reservation although drained (it was ours), passes, is resumed.
    r = sb_fleet(
        "validate", "-i", "slurm:partition=gpu", "-c", str(lcfg), "--run-dir", str(tmp_path / "r2"),
        "--drain", env=c.env, timeout=900,
    )  # fmt: skip
    # slnode4 is still the admin's: out of service, not counted; every node tested passes
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    launch = json.loads((tmp_path / "r2" / "slurm-launch.json").read_text())["allocations"]
    assert launch[0]["nodes"] == ["slnode1", "slnode2", "slnode3"]
    assert launch[0]["retested_drained"]["slnode3"].startswith("sb-fleet r1-")
    outcomes = json.loads((tmp_path / "r2" / "outcomes.json").read_text())["hosts"]
    assert outcomes["slnode3"]["outcome"] == "ok", outcomes["slnode3"]
    states = c.states()
    assert states["slnode3"][0] in ("idle", "maint"), states
    assert states["slnode4"] == ("drained", "admin maintenance")
    c.sh("scontrol", "delete", "reservationname=sbnightly")
    c.sh("scontrol", "update", "nodename=slnode4", "state=resume")
    print(f"launcher slurm: 4-node validate (3 allocated) {first_s:.1f} s")


FAKE_SRUN = """#!/bin/sh
# A planted srun fault for one node, read from {ctl}: "fail:NODE" (srun cannot start the step) or
# "hang:NODE" (srun never returns); every other step is the real srun's.
mode=$(cat {ctl} 2>/dev/null)
for a in "$@"; do case "$a" in --nodelist=*) node=${{a#--nodelist=}} ;; esac; done
case "$mode" in
  "fail:$node") echo "srun: error: Unable to create step for job 1: Requested node configuration is not available" >&2; exit 1 ;;
  "hang:$node") exec sleep 3600 ;;
esac
exec {srun} "$@"
"""


def test_srun_failures_and_timeouts_are_that_hosts_outcome(cluster, tmp_path):
    c, _, cfg = cluster
    _idle(c)
    ctl = tmp_path / "srun-fault"
    fake = tmp_path / "srun"
    fake.write_text(FAKE_SRUN.format(ctl=ctl, srun=shutil.which("srun")))
    fake.chmod(0o755)
    lcfg = _launcher_config(cfg, tmp_path / "fault.yaml", srun=str(fake), grant_timeout=60)
    ctl.write_text("fail:slnode2")
    r = sb_fleet(
        "validate", "-i", "slurm:partition=gpu", "-c", str(lcfg), "--run-dir", str(tmp_path / "f"),
        env=c.env, timeout=900,
    )  # fmt: skip
    assert r.returncode == 3, r.stdout[-3000:] + r.stderr[-3000:]  # srun could not reach it: infrastructure
    outcomes = json.loads((tmp_path / "f" / "outcomes.json").read_text())["hosts"]
    assert outcomes["slnode2"]["outcome"] == "unreachable", outcomes["slnode2"]
    assert "Unable to create step" in outcomes["slnode2"]["reason"]
    assert [n for n, o in outcomes.items() if o["outcome"] == "ok"] == ["slnode1", "slnode3", "slnode4"]

    # srun hangs on slnode3: deploy's task timeout ends it (the step is killed), the others go on
    doc = yaml.safe_load(lcfg.read_text())
    doc["fleet"]["deploy_timeout"] = 15
    lcfg.write_text(yaml.safe_dump(doc))
    ctl.write_text("hang:slnode3")
    t0 = time.monotonic()
    r = sb_fleet(
        "deploy", "-i", "slurm:partition=gpu", "-c", str(lcfg), "--run-dir", str(tmp_path / "h"),
        env=c.env, timeout=600,
    )  # fmt: skip
    took = time.monotonic() - t0
    deploy = json.loads((tmp_path / "h" / "outcomes" / "deploy.json").read_text())["hosts"]
    outcome = {o["host"]: o for o in deploy}
    assert r.returncode != 0 and took < 300, (took, r.stdout[-2000:], r.stderr[-2000:])
    assert outcome["slnode3"]["outcome"] == "timeout", outcome
    assert [h for h, o in outcome.items() if o["outcome"] == "ok"] == ["slnode1", "slnode2", "slnode4"], (
        outcome
    )
    assert c.sh("squeue", "-h").stdout.strip() == ""  # the allocation is gone
    assert subprocess.run(["pgrep", "-f", f"{fake}"], capture_output=True).returncode == 1  # nothing left


def test_launcher_slurm_runs_a_collective_across_two_nodes(cluster, tmp_path):
    """node_num 2 under launcher: slurm: each node's runner is an srun step; torchrun on the two nodes
    rendezvous at the first one's address (gloo on CPU), as over SSH."""
    c, _, cfg = cluster
    _idle(c)
    lcfg = _launcher_config(cfg, tmp_path / "multi.yaml", grant_timeout=60)
    doc = yaml.safe_load(lcfg.read_text())
    doc["fleet"].update({"master_port": 29711, "env": {"GLOO_SOCKET_IFNAME": "lo"}})
    doc["superbench"]["benchmarks"] = {
        "nccl-bw": {
            "timeout": 180,
            "modes": [{"name": "torch.distributed", "proc_num": 1, "node_num": 2, "env": {"OMP_NUM_THREADS": 1}}],
            "parameters": {"operation": ["allreduce"], "minbytes": "64K", "maxbytes": "64K", "num_warmup": 1,
                           "num_steps": 4},
        }
    }  # fmt: skip
    lcfg.write_text(yaml.safe_dump(doc))
    run_dir = tmp_path / "multi"
    r = sb_fleet(
        "validate", "-i", "slurm:slnode[1-2]", "-c", str(lcfg), "--run-dir", str(run_dir), env=c.env, timeout=600
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert json.loads((run_dir / "slurm-launch.json").read_text())["allocations"][0]["nodes"] == [
        "slnode1",
        "slnode2",
    ]
    for node, rank in (("slnode1", 0), ("slnode2", 1)):
        doc = json.loads((run_dir / "raw" / node / "results" / "nccl-bw" / f"rank{rank}.json").read_text())
        assert doc["world_size"] == 2 and doc["return_code"] == 0, doc
    assert c.sh("squeue", "-h").stdout.strip() == ""


def _hang_config(cfg: Path, out: Path, wrapper: Path, check: int, deploy: int, bench: int) -> Path:
    """launcher: slurm, the hosts' Python the planted-hang wrapper, small deadlines, fresh workspaces."""
    doc = yaml.safe_load(cfg.read_text())
    doc["fleet"].update(
        {
            "launcher": "slurm",
            "deploy_timeout": deploy,
            "step_margin": 5,
            "venv": False,
            "min_free_disk_gb": 0,
        }
    )
    doc["slurm"]["host_vars"]["sb_python"] = str(wrapper)
    doc["slurm"]["grant_timeout"] = 60
    doc["health"] = {"exec_timeout": check}
    doc["superbench"]["benchmarks"] = {
        "noop": {"timeout": bench, "modes": [{"name": "local", "proc_num": 1}], "parameters": {"sleep": 0}}
    }
    out.write_text(yaml.safe_dump(doc))
    for n in ("slnode1", "slnode2", "slnode3", "slnode4"):  # deploy pushes the suite in its own task
        shutil.rmtree(f"/root/.sb-fleet/hosts/{n}", ignore_errors=True)
    return out


def test_launcher_slurm_each_stage_ends_its_hung_node_on_time(cluster, tmp_path):
    """Issue 36's reproduction, planted: a node whose interpreter hangs at its health checks ends
    unhealthy and is not deployed; one hung at deploy and one hung in its first run step (started in
    deploy's exec) end timeout naming the stage, each within its deadline + 30 s; the healthy node is judged, validate returns, and neither an
    srun step nor any process of the run is left."""
    from tests.fleetlib.hangs import hang_python, hung, run_id_of, run_processes, wait_for

    c, _, cfg = cluster
    _idle(c)
    wrapper, ctl = hang_python(tmp_path)
    ctl.write_text("slnode2 check\nslnode3 deploy\nslnode4 run\n")
    lcfg = _hang_config(cfg, tmp_path / "hang.yaml", wrapper, 15, 15, 5)
    run_dir = tmp_path / "hang"
    t0 = time.monotonic()
    p = subprocess.Popen(
        [SB_FLEET, "validate", "-i", "slurm:partition=gpu", "-c", str(lcfg), "--run-dir", str(run_dir), "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **c.env},
    )  # fmt: skip
    run_id = run_id_of(run_dir)
    life: dict[str, list[float]] = {}
    while p.poll() is None:
        now = time.monotonic()
        for n in ("slnode2", "slnode3", "slnode4"):
            if hung(run_id, n):
                life.setdefault(n, [now, now])[1] = now
        time.sleep(0.2)
    took = time.monotonic() - t0
    out, err = p.communicate()
    assert p.returncode == 1, out[-2000:] + err[-3000:]
    assert set(life) == {"slnode2", "slnode3", "slnode4"}, life
    # the checks are bounded at 15 s; hostprep and the first step ride in one exec with the checks (a cold
    # node: the suite's transfer), each phase with its own deadline, read from the srun step's output as it
    # comes: hostprep (installing: fleet.deploy_timeout) 15 s, the first step 5 + 5 s
    for n, limit in (("slnode2", 15), ("slnode3", 15), ("slnode4", 10)):
        assert life[n][1] - life[n][0] <= limit + 30, (n, life[n])
    oc = json.loads((run_dir / "outcomes.json").read_text())["hosts"]
    assert oc["slnode1"]["outcome"] == "ok", oc["slnode1"]
    assert oc["slnode2"]["outcome"] == "unhealthy", oc["slnode2"]
    assert "health checks: no end within its deadline of 15 s" in oc["slnode2"]["reason"]
    assert oc["slnode2"]["stages"]["deploy"]["outcome"] == "skipped"
    # cold nodes: the suite's transfer (after validate's one exec said the node lacks the suite) ends in the
    # same first_exec as that exec; the phase that hangs ends at its own deadline, named
    for n, phase in (
        ("slnode3", "hostprep (installing): no end within 15 s"),
        ("slnode4", "step01: no end within 10 s"),
    ):
        d = oc[n]["stages"]["deploy"]
        assert d["outcome"] == "timeout", (n, d)
        assert d["reason"].startswith(phase), (n, d)
    r = oc["slnode4"]["stages"]["run"]
    assert r["outcome"] == "timeout" and r["reason"].startswith(
        "lost during deploy, which starts step01 in the same exec"
    ), r
    verdicts = {h["name"]: h["verdict"] for h in json.loads((run_dir / "report.json").read_text())["hosts"]}
    assert verdicts["slnode1"] == "pass", verdicts
    assert took < 15 + 15 + 10 + 4 * 30 + 60, took
    assert c.sh("squeue", "-h").stdout.strip() == ""  # the allocation is gone
    wait_for(lambda: not run_processes(run_id, run_dir), 20, "every process of the run to be gone")
    print(f"launcher slurm: hung nodes at check, deploy and run: validate {took:.1f} s")


NEVER_STARTS = """#!/bin/sh
# sb-fleet test: on {victim}, an interpreter that never runs a line of Python (a dead NFS mount, a stuck
# site-packages import); the real one everywhere else
case "${{SB_FLEET_TAG##*/}}" in {victim}) exec sleep 100000 ;; esac
exec {python} "$@"
"""


def _sleepers() -> list[str]:
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True).stdout
    return [ln for ln in ps.splitlines() if "sleep 100000" in ln]


@pytest.mark.parametrize("warmth", ["warm", "cold"])
def test_launcher_slurm_an_interpreter_that_never_starts_is_unhealthy_within_the_checks_deadline(
    cluster, tmp_path, warmth
):
    """Issue 48 under ``launcher: slurm``, warm (the suite in place: the nightly case) and cold (the suite
    sent first; the checks' phase starts once it is unpacked): slnode2's Python is a wrapper that sleeps
    before any Python runs, so the host-side bound of the checks never starts. The
    one exec is an srun step that sb-fleet reads as it comes (its phases' deadlines from the control
    node): validate returns within health.exec_timeout + 5 s + 60 s although fleet.deploy_timeout is
    300 s, slnode2 ``unhealthy`` with the phase's reason, the others judged, the allocation released and
    nothing of the run left on the nodes (the wrapper's sleep included) or here."""
    from tests.fleetlib.hangs import run_polled, run_processes, wait_for

    c, fleet, cfg = cluster
    _idle(c)
    check_s = 10
    plain = _hang_config(cfg, tmp_path / "plain.yaml", Path(fleet.python), check_s, 300, 5)
    if warmth == "warm":
        r = sb_fleet(
            "deploy", "-i", "slurm:partition=gpu", "-c", str(plain), "--run-dir", str(tmp_path / "deploy"),
            env=c.env, timeout=300,
        )  # fmt: skip
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    wrapper = tmp_path / "never-python"
    wrapper.write_text(NEVER_STARTS.format(victim="slnode2", python=fleet.python))
    wrapper.chmod(0o755)
    doc = yaml.safe_load(plain.read_text())
    doc["slurm"]["host_vars"]["sb_python"] = str(wrapper)  # the workspaces stay: the suite is in place
    hang_cfg = tmp_path / "never.yaml"
    hang_cfg.write_text(yaml.safe_dump(doc))
    assert not _sleepers(), _sleepers()
    dry = sb_fleet(
        "validate", "--dry-run", "-i", "slurm:partition=gpu", "-c", str(hang_cfg),
        "--run-dir", str(tmp_path / "dry"), env=c.env,
    )  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    assert "its phases are not watched apart" not in dry.stdout, dry.stdout
    run_dir = tmp_path / "never"
    limit = check_s + 5 + 60
    argv = [SB_FLEET, "validate", "-i", "slurm:partition=gpu", "-c", str(hang_cfg), "--run-dir", str(run_dir)]
    r = run_polled([*argv, "--quiet"], run_dir, limit, lambda _: _sleepers(), env={**os.environ, **c.env})
    run_id, took, out, err = r.run_id, r.took, r.out, r.err
    print(f"launcher slurm, slnode2's interpreter never starts ({warmth}): validate {took:.1f} s")
    assert took < limit, f"validate ran {took:.0f} s (limit {limit} s)\n{err[-3000:]}"
    assert r.seen, "the planted hang never ran"
    assert r.returncode == 1, out[-2000:] + err[-3000:]
    oc = json.loads((run_dir / "outcomes.json").read_text())["hosts"]
    v = oc["slnode2"]
    assert v["outcome"] == "unhealthy", v
    assert f"health checks: no end within {check_s + 5} s" in v["reason"], v
    assert v["stages"]["deploy"]["outcome"] == "skipped", v
    for n in ("slnode1", "slnode3", "slnode4"):
        assert oc[n]["outcome"] == "ok", (n, oc[n])
    transfer = (run_dir / "ansible" / "deploy-suite").exists()
    assert transfer == (warmth == "cold"), "the suite's transfer ran on a warm fleet, or not on a cold one"
    verdicts = {h["name"]: h["verdict"] for h in json.loads((run_dir / "report.json").read_text())["hosts"]}
    assert all(verdicts[n] == "pass" for n in ("slnode1", "slnode3", "slnode4")), verdicts
    wait_for(lambda: not _sleepers(), 20, "the hung interpreter's sleep to be gone from slnode2")
    wait_for(lambda: c.sh("squeue", "-h").stdout.strip() == "", 30, "the allocation to be released")
    wait_for(lambda: not run_processes(run_id, run_dir), 20, "every process of the run to be gone")


@pytest.mark.parametrize("stage", ["check", "deploy", "run"])
def test_launcher_slurm_sigterm_in_each_stage_leaves_nothing(cluster, tmp_path, stage):
    """SIGTERM while a node hangs in a stage: sb-fleet stops, and neither ansible-playbook, srun, an srun
    step nor the hung process is left (the issue: all of them lived on); the allocation is released."""
    from tests.fleetlib.hangs import hang_python, hung, run_id_of, run_processes, wait_for, wait_run_gone

    c, _, cfg = cluster
    _idle(c)
    wrapper, ctl = hang_python(tmp_path)
    ctl.write_text(f"slnode2 {stage}\n")
    lcfg = _hang_config(cfg, tmp_path / "term.yaml", wrapper, 300, 300, 300)
    run_dir = tmp_path / "term"
    p = subprocess.Popen(
        [SB_FLEET, "validate", "-i", "slurm:partition=gpu", "-c", str(lcfg), "--run-dir", str(run_dir), "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **c.env},
    )  # fmt: skip
    run_id = run_id_of(run_dir)
    wait_for(lambda: hung(run_id, "slnode2") or p.poll() is not None, 120, f"slnode2 to hang at {stage}")
    assert p.poll() is None, p.communicate()
    before = run_processes(run_id, run_dir)
    comms = {x.comm for x in before}
    # srun steps (validate's one exec per node is sb-fleet's own srun client since 2026-11-29; a playbook
    # adds ansible-playbook and its workers) and the hung process on the node
    assert {"sleep", "srun"} <= comms, "\n".join(map(str, before))
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=90)
    assert p.returncode in (1, 3, 130), out[-2000:] + err[-3000:]
    wait_run_gone(run_id, run_dir, err)
    wait_for(lambda: c.sh("squeue", "-h").stdout.strip() == "", 30, "the allocation to be released")


def test_sigterm_while_salloc_waits_withdraws_the_request(cluster, tmp_path):
    """SIGTERM while sb-fleet's salloc waits for nodes another job holds: salloc is gone, and so is its
    request (a killed salloc cannot withdraw it: it would be granted later, to no one)."""
    from tests.fleetlib.hangs import run_id_of, wait_for

    c, _, cfg = cluster
    _idle(c)
    held = c.sh(
        "salloc", "--no-shell", "--nodes=4", "--nodelist=slnode[1-4]", "--time=5", "--job-name=holder"
    )
    holder = re.search(r"Granted job allocation (\d+)", held.stderr + held.stdout)
    assert holder, held.stderr
    try:
        lcfg = _launcher_config(cfg, tmp_path / "wait.yaml", grant_timeout=120)
        run_dir = tmp_path / "wait"
        p = subprocess.Popen(
            [SB_FLEET, "validate", "-i", "slurm:partition=gpu", "-c", str(lcfg), "--run-dir", str(run_dir), "--quiet"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **c.env},
        )  # fmt: skip

        def ours() -> list[str]:
            out = c.sh("squeue", "-h", "-o", "%j|%T").stdout.split()
            return [line for line in out if line.startswith("sb-fleet-")]

        wait_for(lambda: bool(ours()) or p.poll() is not None, 60, "sb-fleet's request to wait in the queue")
        assert p.poll() is None, p.communicate()
        run_id = run_id_of(run_dir)
        assert ours() == [f"sb-fleet-{run_id}|PENDING"], ours()
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
        assert p.returncode in (3, 130), out[-2000:] + err[-3000:]
        wait_for(lambda: not ours(), 20, "the pending request to be withdrawn")
        left = subprocess.run(["pgrep", "-f", f"salloc .*sb-fleet-{run_id}"], capture_output=True, text=True)
        assert left.stdout.strip() == "", left.stdout
    finally:
        c.sh("scancel", holder.group(1), check=False)
    wait_for(lambda: c.sh("squeue", "-h").stdout.strip() == "", 30, "the holder's allocation to end")


ON_REJECT = """\
version: 1
drain: on_reject
stages:
  - {name: single, kind: single_node, benchmarks: [gemm-flops]}
  - {name: again, kind: single_node, benchmarks: [gemm-flops]}
"""


def test_accept_drain_on_reject_drains_a_node_when_its_stage_rejects_it_and_only_once(cluster, tmp_path):
    """``drain: on_reject``: the nodes the first stage rejects (their workspace is root's: hostprep fails)
    are handled before the second stage starts: slnode3 drained with ``sb-fleet accept-<dir>: <stage>:
    <finding>``, slnode4 (drained by an admin) left alone; every action in DIR/slurm-actions.json.
    ``sb-fleet drain DIR`` afterwards drains nothing twice."""
    c, fleet, cfg = cluster
    _idle(c)
    c.sh("scontrol", "update", "nodename=slnode4", "state=drain", "reason=admin maintenance")
    home = Path(fleet.user.pw_dir)
    for d in (home / ".sb-fleet", home / ".sb-fleet" / "hosts"):
        d.mkdir(exist_ok=True)
        shutil.chown(d, "sbtest", "sbtest")
    planted = [home / ".sb-fleet" / "hosts" / n for n in ("slnode3", "slnode4")]
    camp = tmp_path / "on-reject.yaml"
    camp.write_text(ON_REJECT)
    d = tmp_path / "rack7"
    try:
        for ws in planted:
            if ws.exists():
                shutil.rmtree(ws)
            ws.mkdir(mode=0o755)
        r = sb_fleet(
            "accept", "-c", str(cfg), "-i", "slurm:partition=gpu", "--campaign", str(camp), "--dir", str(d),
            env=c.env, timeout=900,
        )  # fmt: skip
        assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
        states = c.states()
        state, reason = states["slnode3"]
        assert state.startswith("drain"), states
        assert reason.startswith("sb-fleet accept-rack7: single: ") and len(reason) < 256, reason
        assert states["slnode4"] == ("drained", "admin maintenance"), states
        assert states["slnode1"][0] == "idle" and states["slnode2"][0] == "idle", states
        log = json.loads((d / "slurm-actions.json").read_text())["actions"]
        assert [(a["node"], a["verb"], a["by"]) for a in log] == [
            ("slnode3", "drain", "accept drain on_reject"),
            ("slnode4", "leave", "accept drain on_reject"),
        ], log
        assert log[0]["rc"] == 0 and "slurm-actions" not in r.stderr
        # drained as soon as the stage decided: before the next stage started on the other nodes
        timeline = json.loads((d / "campaign-state.json").read_text())["hosts"]["slnode1"]["timeline"]
        again = next(t for t in timeline if t["stage"] == "again")
        assert log[0]["time"] <= again["start"], (log[0], again)
        said = "drain on_reject: slnode3: drained (sb-fleet accept-rack7: single: "
        assert said in r.stderr, r.stderr[-3000:]
        # the drain command after the campaign: nothing drained twice, the admin's node still alone
        r = sb_fleet("drain", str(d), env=c.env)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "slnode3: left alone: already drained by sb-fleet accept-rack7" in r.stdout, r.stdout
        log = json.loads((d / "slurm-actions.json").read_text())["actions"]
        assert [(a["node"], a["verb"]) for a in log[2:]] == [("slnode3", "leave"), ("slnode4", "leave")], log
        assert c.states()["slnode3"] == (state, reason)
    finally:
        for ws in planted:
            shutil.rmtree(ws, ignore_errors=True)
        _idle(c)
