"""A soak that burns: ``sb-fleet accept`` with ``load: cpu-gemm`` on a real loopback fleet of 3 nodes (one sshd
each, each its own fake 8x H100 machine, tests/healthfake.py), 3 rounds of 30 s.

- every round, after its benchmarks, the load (sb_bench.host.burn) runs on every node until the round's end
  less its margin: the round's benchmarks and its load together cover at least 90% of every round, for every
  node, by the round's record and each node's own times (load.json);
- a throttle planted in one node's nvidia-smi for a few seconds while round 2's load runs is counted for
  that node and that round only (throttled windows), and the soak rejects it for that (max 0);
- another node's GPUs report 93 C and a 1,200 MHz SM clock for a few seconds of round 2's load: its round 2
  fails for both (load.max_temp_c 87, load.min_clock_ratio 0.9 of the fleet's 1,980 MHz) and it is rejected;
- SIGTERM to accept while round 3's load runs: exit 130, nothing of the load left on the hosts; SIGKILL
  of accept's whole process group while the re-run round's load runs: the hosts' load ends by itself by the
  round's end; ``accept --resume`` then finishes the soak.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest

from sb_fleet.campaign.soak_load import host_entries
from tests.fleetlib.hangs import run_id_of, run_processes, wait_for, wait_run_gone

from .conftest import ROOT, SB_FLEET, sb_fleet, started_fleet

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from healthfake import make_machine, plant_readings, plant_throttle  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROUND = 30.0  # the records' times are to the second: 1 s is 3% of a round
ROUNDS = 3
NAMES: list[str] = []  # the fleet's nodes, once it is up
THROTTLED_FOR = 4.0  # seconds of a planted hardware thermal slowdown, inside round 2's load
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
  env: {OMP_NUM_THREADS: 1}
superbench:
  benchmarks:
    noop:
      timeout: 60
      modes: [{name: local, proc_num: 1}]
      parameters: {num_warmup: 0, num_steps: 1}
gates:
  fleet: {enabled: false}
health:
  profile: h100-sxm-8x-ib400
"""
CAMPAIGN = f"""\
version: 1
stages:
  - name: soak
    kind: soak
    benchmarks: [noop]
    duration: {int(ROUND * ROUNDS)}s
    round: {int(ROUND)}s
    max_failed_rounds: 0
    load: {{kind: cpu-gemm, interval: 1s, margin: 1s, threads: 1, size: 256, max_temp_c: 87, min_clock_ratio: 0.9}}
"""


def _state(d: Path) -> dict:
    try:
        return json.loads((d / "campaign-state.json").read_text())
    except (OSError, ValueError):
        return {}


def _accept(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        [SB_FLEET, "accept", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=str(ROOT),
        start_new_session=True,  # its own process group: a kill takes everything it started here
    )


def _burning(run_id: str, host: str | None = None) -> list:
    """The load's processes on the hosts (tagged with the run; each names its machine's directory)."""
    return [
        p
        for p in run_processes(run_id)
        if p.why == "host tag"
        and p.cmdline.split()[1:3] == ["-m", "sb_bench.host.burn"]
        and (host is None or f"/load-machines/{host}/" in p.cmdline)
    ]


def _nodes_burning(run_id: str) -> set[str]:
    return {n for n in NAMES if _burning(run_id, n)}


def _ts(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


@pytest.fixture(scope="module")
def lfleet():
    with started_fleet(3, "127.0.72") as f:
        yield f


def test_the_load_burns_every_round_counts_a_throttle_and_ends_on_any_stop(lfleet, tmp_path):
    names = [h.name for h in lfleet.hosts]
    NAMES[:] = names
    machines = lfleet.dir / "load-machines"
    host_vars = {
        n: make_machine(machines / n, python="/usr/bin/python3") | {"sb_python": lfleet.python} for n in names
    }
    inv = lfleet.inventory(host_vars=host_vars)
    cfg = lfleet.config(CONFIG)
    campaign = tmp_path / "campaign.yaml"
    campaign.write_text(CAMPAIGN)
    d = tmp_path / "campaign"
    hot, warm = names[1], names[2]

    p = _accept(["-c", str(cfg), "-i", str(inv), "--campaign", str(campaign), "--dir", str(d)])
    try:
        # round 2's load running on the hot node: its GPUs report a thermal slowdown for a few seconds
        r2 = d / "runs" / "soak-round-02"
        wait_for(r2.exists, 180, "round 2")
        run2 = run_id_of(r2)
        wait_for(lambda: _burning(run2, hot), 60, "round 2's load on the hot node")
        plant_throttle(Path(host_vars[hot]["sb_tool_dir"]), time.time(), THROTTLED_FOR, gpus=[0, 3])
        wait_for(lambda: _burning(run2, warm), 60, "round 2's load on the warm node")
        readings = {"temperature.gpu": 93, "clocks.sm": 1200}
        plant_readings(Path(host_vars[warm]["sb_tool_dir"]), time.time(), THROTTLED_FOR, readings, gpus=[5])
        # round 3's load running: SIGTERM stops accept and the load on every host
        r3 = d / "runs" / "soak-round-03"
        wait_for(r3.exists, 60, "round 3")
        run3 = run_id_of(r3)
        wait_for(lambda: len(_nodes_burning(run3)) == 3, 60, "round 3's load on every node")
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    assert p.returncode == 130, out[-2000:] + err[-3000:]
    wait_run_gone(run3, r3, err)
    assert [r["index"] for r in _state(d)["soak_rounds"]["soak"]] == [1, 2]

    # resumed; SIGKILL of accept's whole group while the re-run round's load runs: the hosts' load ends by
    # itself (its own deadline) by the round's end
    p = _accept(["--resume", str(d), "--quiet"])
    try:
        r3b = d / "runs" / "soak-round-03.2"
        wait_for(r3b.exists, 120, "round 3 again")
        run3b = run_id_of(r3b)
        wait_for(lambda: len(_nodes_burning(run3b)) == 3, 90, "the re-run round's load")
        killed = time.time()
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=30)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    wait_for(
        lambda: not [x for x in run_processes(run3b) if x.why == "host tag"],
        ROUND + 40,
        "the killed round's load to end by itself",
    )
    print(f"after SIGKILL of accept, the hosts' load was gone {time.time() - killed:.1f} s later")

    r = sb_fleet("accept", "--resume", str(d), "--quiet", timeout=300)
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-3000:]  # the hot node rejected
    state = _state(d)
    rounds = state["soak_rounds"]["soak"]
    assert [x["index"] for x in rounds] == [1, 2, 3] and rounds[2]["run_dir"] == "runs/soak-round-03.3"

    # every round: its benchmarks, then the load on every node, together >= 90% of the round
    for rec in rounds:
        assert rec.get("load"), rec
        doc = json.loads((d / rec["run_dir"] / "load.json").read_text())
        entries = host_entries(doc)
        assert doc["kind"] == "cpu-gemm" and set(entries) == set(names), doc
        bench = _ts(rec["end"]) - _ts(rec["start"])
        for h, e in entries.items():
            assert e["outcome"] == "ok" and e["ended_by"] == "deadline", (rec["index"], h, e)
            assert e["gemms"] > 0 and e["samples"] >= 3 and e["telemetry_source"] == "nvidia-smi", e
            covered = bench + (e["end"] - e["start"])
            working = bench + (e["end"] - e["working_from"])
            print(
                f"round {rec['index']} {h}: benchmarks {bench:.1f} s + load {e['end'] - e['start']:.1f} s "
                f"(computing {e['end'] - e['working_from']:.1f} s) = {covered / ROUND:.0%} of the round "
                f"({working / ROUND:.0%} computing); throttled windows {e['throttled_windows']}, "
                f"max {e['max_temp_c']} C, min SM {e['min_sm_mhz']} MHz"
            )
            assert covered >= 0.9 * ROUND, (rec["index"], h, bench, e)
            assert working >= 0.8 * ROUND, (rec["index"], h, bench, e)  # computing, not starting up

    # the planted throttle: counted for the hot node in round 2, for no other node or round
    columns = {
        row["host"]: row for row in map(json.loads, (d / "soak-soak-rounds.jsonl").read_text().splitlines())
    }
    assert {h: c["throttled_windows"] for h, c in columns.items()} == {
        names[0]: {},
        hot: {"2": columns[hot]["throttled_windows"].get("2", 0)},
        names[2]: {},
    }, columns
    windows = columns[hot]["throttled_windows"]["2"]
    assert 2 <= windows <= THROTTLED_FOR + 1, windows
    soak = json.loads((d / "soak-soak.json").read_text())["nodes"]
    found = [f for f in soak[hot]["findings"] if f["kind"] == "throttled"]
    assert found and found[0]["fails"] and list(found[0]["rounds"]) == [2], soak[hot]["findings"]
    assert state["hosts"][hot]["status"] != "accepted"
    # the warm node: round 2 failed for its heat and its clock under the load, and only round 2
    failed = columns[warm]["reasons"]
    assert columns[warm]["ok"] == [True, False, True] and list(failed) == ["2"], columns[warm]
    assert "a GPU at 93 C under the load (load.max_temp_c 87)" in failed["2"], failed
    assert "its lowest SM clock under the load 1200 MHz, below 90% of the fleet's 1980 MHz" in failed["2"]
    assert state["hosts"][warm]["status"] != "accepted"
    assert state["hosts"][names[0]]["status"] == "accepted", state["hosts"]
