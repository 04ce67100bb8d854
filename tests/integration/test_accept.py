"""``sb-fleet accept`` on a real loopback fleet (127.0.71.10-14, one sshd each) with planted faults, each a
machine of its own (tests/healthfake.py: fake sysfs, procfs and nvidia-smi) and its own interpreter (a
wrapper script as ``sb_python`` that runs the real one, or fails where the fault is planted):

- host002 fails every exec but the health checks' inline one: it passes sanity and fails single-node
  (twice: the stage is ``retry_once``), so it must never enter the fabric stage;
- host003 fails the soak's round 2 only (its interpreter refuses that round's run id): intermittent;
- host004's InfiniBand symbol-error counter grows during the soak (its interpreter bumps the fake sysfs
  counter when round 2 starts, before the health checks read it);
- host001 and host005 are healthy and accepted.

The benchmark is ``noop`` (no figure is judged: the fleet statistics are off), so the test judges the
campaign's flow, not performance. In the middle of the soak the accept process (and everything it started
here) is killed with SIGKILL, as a control node that dies; the resumed campaign is then stopped with SIGTERM
while a round runs on the hosts (exit 130, nothing of the round left running); ``accept --resume`` again
finishes the campaign with the verdicts above, every round recorded once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fleetlib.hangs import run_id_of, run_processes, wait_for, wait_run_gone

from .conftest import ROOT, SB_FLEET, sb_fleet, started_fleet

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from healthfake import make_machine  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CONFIG = """\
version: v0.4
fleet:
  known_hosts: @KNOWN_HOSTS@
  python: /usr/bin/python3
  venv: false
  install_requirements: never
  min_free_disk_gb: 0
  forks: 16
  master_port: @MASTER_PORT@
  env: {GLOO_SOCKET_IFNAME: lo, OMP_NUM_THREADS: 1}
superbench:
  benchmarks:
    noop:
      timeout: 60
      modes: [{name: local, proc_num: 1}]
      parameters: {num_warmup: 0, num_steps: 1}
    noop:soak:
      timeout: 60
      modes: [{name: local, proc_num: 1}]
      parameters: {num_warmup: 0, num_steps: 1, sleep: 3}
    noop:fabric:
      timeout: 60
      modes: [{name: torch.distributed, proc_num: 1}]
      parameters: {num_warmup: 0, num_steps: 1}
gates:
  fleet: {enabled: false}
health:
  profile: h100-sxm-8x-ib400
"""

CAMPAIGN = """\
version: 1
description: loopback acceptance test
stages:
  - {name: sanity, kind: sanity}
  - {name: single-node, kind: single_node, benchmarks: [noop], on_failure: retry_once}
  - {name: fabric, kind: fabric, benchmarks: ["noop:fabric"], patterns: [all-nodes], on_failure: quarantine}
  - name: soak
    kind: soak
    benchmarks: ["noop:soak"]
    duration: 40s
    round: 10s
    watch: [gpu.xid, gpu.row_remap, ib.symbol_error, ib.link_downed]
    max_failed_rounds: 0
"""

# A host's interpreter: the real one, after the planted fault's lines. The health checks' inline exec
# (sb-fleet check) runs it with -c; every exec of a run exports SB_FLEET_TAG=<run id>/<host>, and a soak
# round's run id names its round (soak-round-02-<hex>).
WRAPPER = """#!/bin/sh
@FAULT@
exec @PYTHON@ "$@"
"""
REFUSE = 'echo "planted fault: this interpreter refuses the run" >&2; exit 3'


def _wrapper(path: Path, python: str, fault: str) -> str:
    path.write_text(WRAPPER.replace("@FAULT@", fault).replace("@PYTHON@", python))
    path.chmod(0o755)
    return str(path)


@pytest.fixture(scope="module")
def afleet():
    with started_fleet(5, "127.0.71") as f:
        yield f


@pytest.fixture(scope="module")
def setup(afleet):
    names = [h.name for h in afleet.hosts]
    machines = afleet.dir / "machines"
    host_vars: dict[str, dict[str, str]] = {}
    for n in names:
        host_vars[n] = make_machine(machines / n, python="/usr/bin/python3")
    py = afleet.python
    counter = machines / names[3] / "sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error"
    # host002: only the health checks' inline exec runs
    host_vars[names[1]]["sb_python"] = _wrapper(
        machines / "py-single", py, f'[ "$1" = -c ] || {{ {REFUSE}; }}'
    )
    # host003: the soak's round 2 fails
    round2 = 'case "$SB_FLEET_TAG" in soak-round-02-*) @DO@ ;; esac'
    host_vars[names[2]]["sb_python"] = _wrapper(machines / "py-flaky", py, round2.replace("@DO@", REFUSE))
    # host004: round 2 starts with 7 symbol errors on port mlx5_0/1 (0 before)
    host_vars[names[3]]["sb_python"] = _wrapper(
        machines / "py-counter", py, round2.replace("@DO@", f"echo 7 > {counter}")
    )
    counter.chmod(0o666)
    inv = afleet.inventory(host_vars=host_vars)
    cfg = afleet.config(CONFIG)
    campaign = afleet.dir / "campaign.yaml"
    campaign.write_text(CAMPAIGN)
    return inv, cfg, campaign, names


def _state(d: Path) -> dict:
    try:
        return json.loads((d / "campaign-state.json").read_text())
    except (OSError, ValueError):
        return {}


def test_a_campaign_gates_soaks_and_survives_a_kill(setup, tmp_path):
    inv, cfg, campaign, names = setup
    good1, single, flaky, counter, good2 = names
    d = tmp_path / "campaign"
    store = tmp_path / "history.duckdb"
    t0 = time.monotonic()
    p = subprocess.Popen(
        [SB_FLEET, "accept", "-c", str(cfg), "-i", str(inv), "--campaign", str(campaign), "--dir", str(d)]
        + ["--history", str(store)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(ROOT),
        start_new_session=True,  # its own process group: the kill takes everything it started here
    )
    try:
        # killed while round 3 runs: rounds 1 and 2 recorded, round 3's run directory made
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and p.poll() is None:
            rounds = _state(d).get("soak_rounds", {}).get("soak", [])
            if len(rounds) == 2 and (d / "runs" / "soak-round-03").exists():
                break
            time.sleep(0.1)
        assert p.poll() is None, "accept ended before the soak's round 3:\n" + p.stderr.read()[-4000:]
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    killed_at = time.monotonic() - t0
    before = _state(d)
    assert [r["index"] for r in before["soak_rounds"]["soak"]] == [1, 2]
    assert before["stages_done"] == ["sanity", "single-node", "fabric"]

    # resumed; then stopped with SIGTERM while round 4 runs on the hosts: exit 130, nothing of the round
    # left running (here or on the hosts), the state as it was after round 3
    p = subprocess.Popen(
        [SB_FLEET, "accept", "--resume", str(d), "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(ROOT),
    )
    try:
        round4 = d / "runs" / "soak-round-04"
        wait_for(round4.exists, 90, "round 4 of the resumed soak")
        run_id = run_id_of(round4)
        wait_for(  # the benchmark (noop sleeping 3 s) running on a host
            lambda: any("sb_bench exec noop" in x.cmdline for x in run_processes(run_id)),
            60,
            "round 4's benchmark running on the hosts",
        )
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130, out[-2000:] + err[-3000:]
    assert f"sb-fleet accept --resume {d}" in err, err[-2000:]
    wait_run_gone(run_id, round4, err)
    stopped = _state(d)
    assert [x["index"] for x in stopped["soak_rounds"]["soak"]] == [1, 2, 3]
    assert json.loads((d / "acceptance" / f"{good1}.json").read_text())["verdict"] == "in_progress"

    r = sb_fleet("accept", "--resume", str(d), "--quiet", timeout=240)
    took = time.monotonic() - t0
    print(f"accept: killed at {killed_at:.1f} s, stopped and resumed again, finished at {took:.1f} s")
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-4000:]  # nodes rejected: exit 1

    state = _state(d)
    assert state["finished"] is True
    rounds = state["soak_rounds"]["soak"]
    assert [x["index"] for x in rounds] == [1, 2, 3, 4], rounds  # each round once, none repeated
    # the rounds cut off ran again, each in a new directory
    assert [x["run_dir"] for x in rounds][2:] == ["runs/soak-round-03.2", "runs/soak-round-04.2"]
    assert state["stages_done"] == ["sanity", "single-node", "fabric", "soak"]

    records = {n: json.loads((d / "acceptance" / f"{n}.json").read_text()) for n in names}
    verdicts = {n: rec["verdict"] for n, rec in records.items()}
    assert verdicts == {
        good1: "accepted",
        single: "rejected",
        flaky: "rejected",
        counter: "rejected",
        good2: "accepted",
    }, {n: (rec["verdict"], rec["failed_stage"], rec["reason"]) for n, rec in records.items()}

    s = records[single]
    assert s["failed_stage"] == "single-node" and s["stage_reached"] == "single-node", s
    attempts = [(t["stage"], t["attempt"], t["outcome"]) for t in s["timeline"]]
    assert attempts == [
        ("sanity", 1, "passed"),
        ("single-node", 1, "retry"),
        ("single-node", 2, "held_out"),
    ], attempts
    # the fabric stage never included it: its run's hosts are the others
    fabric_hosts = json.loads((d / "runs" / "fabric-all-nodes" / "hosts.json").read_text())["hosts"]
    assert sorted(h["name"] for h in fabric_hosts) == sorted([good1, flaky, counter, good2])

    f = records[flaky]
    assert f["failed_stage"] == "soak" and "round 2" in f["reason"], f
    fr = [c for c in f["criteria"] if c["stage"] == "soak" and c["name"] == "rounds"]
    assert fr and fr[0]["passed"] is False and fr[0]["rounds"] == [2], f["criteria"]

    c = records[counter]
    assert c["failed_stage"] == "soak" and "ib.symbol_error[mlx5_0/1]" in c["reason"], c
    grew = [x for x in c["criteria"] if x["name"] == "ib.symbol_error[mlx5_0/1]"]
    assert grew and grew[0]["passed"] is False and grew[0]["rounds"] == [2], grew

    for g in (good1, good2):
        rec = records[g]
        assert rec["stages_passed"] == ["sanity", "single-node", "fabric", "soak"], rec
        assert rec["evidence"] and all((d / e).exists() for e in rec["evidence"]), rec["evidence"]

    summary = json.loads((d / "campaign-summary.json").read_text())
    assert summary["verdicts"] == {"accepted": 2, "rejected": 3}
    md = (d / "campaign.md").read_text()
    assert "| " + single + " | **rejected** | single-node | single-node |" in md
    page = (d / "campaign.html").read_text()
    assert f"{counter}: per round" in page and "0 → 7" in page  # the counter plotted over the rounds
    assert (
        "<svg" in page
        and good1 in page
        and "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    )
    assert took < 150, f"the campaign took {took:.0f} s"

    # every round that finished is in the history store (--history, kept across the resumes)
    listed = sb_fleet("history", str(store), "--last", "100")
    assert listed.returncode == 0, listed.stderr
    for x in rounds:
        run_id = json.loads((d / x["run_dir"] / "manifest.json").read_text())["run_id"]
        assert run_id in listed.stdout, (run_id, listed.stdout[-3000:])

    # a finished campaign resumed again does nothing more and says the same
    again = sb_fleet("accept", "--resume", str(d), "--quiet", timeout=60)
    assert again.returncode == 1, again.stderr[-2000:]
    assert [x["index"] for x in _state(d)["soak_rounds"]["soak"]] == [1, 2, 3, 4]


def test_bad_input_is_one_line(setup, tmp_path):
    inv, cfg, campaign, _ = setup
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        campaign.read_text().replace("benchmarks: [noop], on_failure", "benchmarks: [nope], on_failure")
    )
    r = sb_fleet(
        "accept", "-c", str(cfg), "-i", str(inv), "--campaign", str(bad), "--dir", str(tmp_path / "x")
    )
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "line 5" in lines[0] and "'nope'" in lines[0], r.stderr
    r = sb_fleet("accept", "--resume", str(tmp_path / "nothing"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
