"""Every stage ends on time, and a stop leaves nothing running: a real loopback SSH fleet (127.0.15.x).

A host hung at its health checks ends ``unhealthy``, one hung at deploy and one hung in its first run
step (which validate starts in deploy's exec) end ``timeout`` naming the stage, each within its deadline
plus 30 s; the healthy host is judged and validate returns. After SIGTERM in the middle of each stage, no process of the run is left, on the
control node or on any host (listed by the run's tags and names before and after; hosts and control node
share this machine). The hangs are planted in the hosts' Python, and collect's in the hosts' sha256sum
(tests/fleetlib/hangs.py).
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.fleetlib.hangs import (
    hang_python,
    hang_tools,
    hung,
    run_id_of,
    run_processes,
    wait_for,
    wait_run_gone,
)

from .conftest import ROOT, SB_FLEET, started_fleet

pytestmark = pytest.mark.integration

CONFIG = """\
version: v0.4
fleet:
  known_hosts: @KNOWN_HOSTS@
  python: /usr/bin/python3
  venv: false
  install_requirements: never
  min_free_disk_gb: 0
  forks: 8
  ssh_connect_timeout: 5
  deploy_timeout: @DEPLOY@
  step_margin: 5
health:
  exec_timeout: @CHECK@
superbench:
  benchmarks:
    noop:
      timeout: @BENCH@
      modes: [{name: local, proc_num: 1}]
      parameters: {sleep: 0}
gates:
  fleet: {enabled: false}
"""


@pytest.fixture(scope="module")
def dfleet():
    root = Path(tempfile.mkdtemp(prefix="sbf-fleet-"))  # the fleet's directory, removed by its cleanup
    with started_fleet(4, "127.0.15", check_torch=False, root=root, path_prefix=str(root / "bin")) as f:
        wrapper, ctl = hang_python(f.dir)
        hang_tools(root / "bin", ctl)
        yield f, wrapper, ctl


def _setup(
    dfleet,  # noqa: ANN001
    name: str,
    check: int,
    deploy: int,
    bench: int,
    hangs: list[str],
    extra_vars: dict[str, dict[str, str]] | None = None,
) -> tuple[Path, Path]:
    fleet, wrapper, ctl = dfleet
    ctl.write_text("".join(f"{h}\n" for h in hangs))
    for h in fleet.hosts:  # a fresh workspace: deploy pushes the suite (its own task, not the first step's)
        shutil.rmtree(h.workspace, ignore_errors=True)
    inv = fleet.inventory(
        name=f"{name}.ini",
        host_vars={
            h.name: {"sb_python": str(wrapper), **(extra_vars or {}).get(h.name, {})} for h in fleet.hosts
        },
    )
    body = (
        CONFIG.replace("@CHECK@", str(check)).replace("@DEPLOY@", str(deploy)).replace("@BENCH@", str(bench))
    )
    return inv, fleet.config(body, f"{name}.yaml")


def _validate(inv: Path, cfg: Path, run_dir: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [SB_FLEET, "validate", "-i", str(inv), "-c", str(cfg), "--run-dir", str(run_dir), "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(ROOT),
    )


def _outcomes(run_dir: Path) -> dict[str, dict]:
    return json.loads((run_dir / "outcomes.json").read_text())["hosts"]


def test_each_stage_ends_its_hung_host_on_time_and_the_healthy_host_is_judged(dfleet, tmp_path):
    fleet = dfleet[0]
    good, at_check, at_deploy, at_run = (h.name for h in fleet.hosts)
    check_s, deploy_s, step_s = 15, 15, 5 + 5  # the step: noop's timeout + fleet.step_margin
    inv, cfg = _setup(
        dfleet, "dl", check_s, deploy_s, 5, [f"{at_check} check", f"{at_deploy} deploy", f"{at_run} run"]
    )
    run_dir = tmp_path / "dl"
    t0 = time.monotonic()
    p = _validate(inv, cfg, run_dir)
    run_id = run_id_of(run_dir)
    life: dict[str, list[float]] = {}  # host -> [first seen hung, last seen hung]
    while p.poll() is None:
        now = time.monotonic()
        for h in (at_check, at_deploy, at_run):
            if hung(run_id, h):
                life.setdefault(h, [now, now])[1] = now
        time.sleep(0.2)
    took = time.monotonic() - t0
    out, err = p.communicate()
    assert p.returncode == 1, out[-2000:] + err[-3000:]
    assert set(life) == {at_check, at_deploy, at_run}, life  # each hang happened, at its stage
    # validate's one exec per host (here the suite's transfer: the fleet is cold) runs the checks, hostprep
    # and the first step: each phase of it keeps its own deadline, watched from the control node by the
    # lines the exec prints between them (sb_fleet/fleet/exec_phases.py)
    for h, limit in ((at_check, check_s), (at_deploy, deploy_s), (at_run, step_s)):
        assert life[h][1] - life[h][0] <= limit + 30, (h, life[h])
    oc = _outcomes(run_dir)
    assert oc[good]["outcome"] == "ok", oc[good]
    c = oc[at_check]
    assert c["outcome"] == "unhealthy", c
    assert "health checks: no end within its deadline of 15 s (health.exec_timeout)" in c["reason"], c
    assert c["stages"]["deploy"]["outcome"] == "skipped"  # not benchmarked
    # the fleet is cold: after validate's one exec per host said it lacks the suite, the suite's transfer
    # (a play of its own) ends in the same first_exec: its hostprep is an install (fleet.deploy_timeout),
    # its first step has the step's deadline, each from the line that opened it
    phase_reasons = {
        at_deploy: f"hostprep (installing): no end within {deploy_s} s (fleet.deploy_timeout",
        at_run: f"step01: no end within {step_s} s (its benchmarks' timeouts + fleet.step_margin)",
    }
    for h, why in phase_reasons.items():
        d = oc[h]["stages"]["deploy"]
        assert d["outcome"] == "timeout", (h, d)
        assert d["reason"].startswith(why) and "stopped on the host" in d["reason"], (h, d)
    r = oc[at_run]["stages"]["run"]
    assert r["outcome"] == "timeout" and r["reason"].startswith(
        "lost during deploy, which starts step01 in the same exec"
    ), r
    assert oc[at_deploy]["outcome"] == "timeout" and oc[at_run]["outcome"] == "timeout", oc
    # their checks had ended on the host (bounded there, shorter than the exec's deadline), their output
    # lost with the exec's: no check verdict is made up for them, and collect still reads what the step left
    for h in (at_deploy, at_run):
        assert "check" not in oc[h]["stages"], oc[h]
        assert oc[h]["stages"]["collect"]["outcome"] != "skipped", oc[h]
    verdicts = {h["name"]: h["verdict"] for h in json.loads((run_dir / "report.json").read_text())["hosts"]}
    assert verdicts[good] == "pass", verdicts
    # validate's wall time within the bound that --dry-run states (3 stages' deadlines + collect, + margins)
    assert took < check_s + deploy_s + step_s + 4 * 30 + 60, took
    # What is left after a run that ended by itself: at most OpenSSH's ControlPersist masters, idle, which
    # end by themselves (ControlPersist=120s; a stop ends them at once: the test below)
    wait_for(
        lambda: all(
            x.cmdline.startswith("ssh: ") and "[mux]" in x.cmdline for x in run_processes(run_id, run_dir)
        ),
        15,
        "every process of the run but the idle ssh masters to be gone",
    )


@pytest.mark.parametrize("stage", ["check", "deploy", "run", "collect"])
def test_sigterm_in_each_stage_leaves_no_process_of_the_run(dfleet, tmp_path, stage):
    fleet = dfleet[0]
    victim = fleet.hosts[1].name
    # collect's hang is in the host's sha256sum: the victim's exec goes through Ansible's playbook (an
    # ansible_* setting sb-fleet's own client does not apply), which sends no results on its stdout, so
    # validate's collect reads it over SSH; the other hosts' results ride their execs
    extra = {victim: {"ansible_ssh_pipelining": "true"}} if stage == "collect" else None
    inv, cfg = _setup(dfleet, f"term-{stage}", 300, 300, 300, [f"{victim} {stage}"], extra)
    run_dir = tmp_path / f"term-{stage}"
    p = _validate(inv, cfg, run_dir)
    run_id = run_id_of(run_dir)
    wait_for(lambda: hung(run_id, victim) or p.poll() is not None, 120, f"{victim} to hang at {stage}")
    assert p.poll() is None, p.communicate()
    before = run_processes(run_id, run_dir)
    comms = {x.comm for x in before}
    assert "sleep" in comms, "\n".join(map(str, before))
    if stage != "collect":  # collect reads the hosts over its own connections (paramiko), no Ansible
        # the check play's Ansible, or validate's one exec per host over sb-fleet's own ssh clients
        assert any("ansible" in c or c == "ssh" for c in comms), "\n".join(map(str, before))
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=90)
    assert p.returncode in (1, 3, 130), out[-2000:] + err[-3000:]
    wait_run_gone(run_id, run_dir, err)


def test_fleet_run_timeout_is_one_deadline_for_every_host_s_runs(dfleet, tmp_path):
    """A campaign stage's timeout (fleet.run_timeout) on the real fleet: each host's benchmarks together
    end at it. noop:a (3 s) ends within it; noop:b (30 s, its own timeout 60 s) is killed at it; noop:c
    never starts; every host's results say so, and validate ends near the deadline, not after 60 s."""
    fleet = dfleet[0]
    inv, cfg = _setup(dfleet, "rt", 30, 120, 60, [])
    body = cfg.read_text().replace("  step_margin: 5\n", "  step_margin: 5\n  run_timeout: 8\n")
    body = body.replace(
        "    noop:\n      timeout: 60\n      modes: [{name: local, proc_num: 1}]\n      parameters: {sleep: 0}\n",
        "".join(
            f"    noop:{k}:\n      timeout: 60\n      modes: [{{name: local, proc_num: 1}}]\n"
            f"      parameters: {{sleep: {s}}}\n"
            for k, s in (("a", 3), ("b", 30), ("c", 0))
        ),
    )
    assert "noop:c" in body
    cfg.write_text(body)
    run_dir = tmp_path / "rt"
    t0 = time.monotonic()
    p = _validate(inv, cfg, run_dir)
    out, err = p.communicate(timeout=240)
    took = time.monotonic() - t0
    assert p.returncode == 1, out[-2000:] + err[-3000:]
    for h in fleet.hosts:
        res = run_dir / "raw" / h.name / "results"
        status = json.loads((res / "status.json").read_text())["entries"]
        assert status["noop:a"]["status"] == "ok", (h.name, status)
        assert status["noop:b"]["status"] == "timeout", (h.name, status)
        assert status["noop:c"]["status"] == "timeout", (h.name, status)
        b = json.loads((res / "noop:b" / "rank0.json").read_text())
        c = json.loads((res / "noop:c" / "rank0.json").read_text())
        assert b["reason"].startswith("killed: this host's deadline for all of the run's benchmarks (8 s"), b
        assert c["reason"].startswith("not started: this host's deadline"), c
    assert took < 60, took  # noop:b's own timeout alone is 60 s
