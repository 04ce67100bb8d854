"""Energy efficiency on a real loopback fleet (issue 31): gemm-flops on CPU reads each host's powercap
counter through its ``sb_path_sysfs``; the counters are fake sysfs trees whose package counter a
process per host answers with the energy at a fixed power (tests/fleetlib/powercap.py). One host's
counter reports 30% more energy for the same work: it is flagged, the others pass. One host has no
counter: its figures come with the reason.

Twelve hosts (one sshd answering them all) and the default gates but for the population split (below): the fleet-relative detector sets a
single outlier aside from its spread estimate only with ten other values in the family. The power is
exact here, so it is the power that must flag the host; the efficiency's spread is the CPU GEMM's
throughput spread on a shared two-core machine (up to 2x under load), which the planted 23% drop
may or may not leave."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import SB_FLEET, started_fleet

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
WATTS = 50.0
EXCESS = 1.3

CONFIG = """\
version: v0.4
fleet:
  known_hosts: @KNOWN_HOSTS@
  python: /usr/bin/python3
  venv: false
  install_requirements: never
  min_free_disk_gb: 0
  default_timeout: 300
  forks: 12
superbench:
  benchmarks:
    gemm-flops:
      enable: true
      timeout: 300
      modes: [{name: local, proc_num: 1, env: {OMP_NUM_THREADS: 1}}]
      parameters: {m: 128, n: 128, k: 128, num_warmup: 2, duration: 2.0, precision: [fp64, fp32]}
# Twelve CPU GEMMs on two shared cores run in waves: their throughput (and so their efficiency) can fall
# into two groups 10% apart, which the population check would take for two kinds of host and then judge
# each group alone (a run here put the hungry host in a group of two, where no majority names it).
gates:
  populations: {min_gap: 0.5}
"""


@pytest.fixture(scope="module")
def efleet():
    with started_fleet(12, "127.0.31", shared_sshd=True) as f:
        yield f


def _start_counters(fleet, watts: dict[str, float]) -> list[subprocess.Popen]:  # noqa: ANN001
    procs = []
    for name, w in watts.items():
        root = fleet.dir / f"sysfs-{name}"
        procs.append(
            subprocess.Popen([sys.executable, str(ROOT / "tests/fleetlib/powercap.py"), str(root), str(w)])
        )
    deadline = time.monotonic() + 120
    for name in watts:
        while not (fleet.dir / f"sysfs-{name}" / "ready").exists():
            assert time.monotonic() < deadline, f"the fake counter of {name} never started"
            time.sleep(0.05)
    return procs


def test_a_host_drawing_30_percent_more_for_the_same_work_is_flagged(efleet, tmp_path: Path) -> None:
    hosts = [h.name for h in efleet.hosts]
    hungry, bare = hosts[1], hosts[-1]
    watts = {h: WATTS * (EXCESS if h == hungry else 1.0) for h in hosts if h != bare}
    host_vars = {h: {"sb_path_sysfs": str(efleet.dir / f"sysfs-{h}")} for h in hosts}
    # the bare host's sysfs root has no powercap at all
    (efleet.dir / f"sysfs-{bare}").mkdir(exist_ok=True)
    procs = _start_counters(efleet, watts)
    run_dir = tmp_path / "run"
    try:
        r = subprocess.run(
            [
                SB_FLEET,
                "validate",
                "-i",
                str(efleet.inventory(host_vars=host_vars)),
                "-c",
                str(efleet.config(CONFIG, "energy.yaml")),
                "--run-dir",
                str(run_dir),
                "--quiet",
            ],
            capture_output=True,
            text=True,
            timeout=900,
        )
    finally:
        for p in procs:
            os.kill(p.pid, signal.SIGTERM)
            p.wait()
    assert (run_dir / "report.json").is_file(), (r.returncode, r.stdout[-3000:], r.stderr[-3000:])
    doc = json.loads((run_dir / "report.json").read_text())
    verdicts = {h["name"]: h["verdict"] for h in doc["hosts"]}
    issues = {h["name"]: {i["metric"] for i in h["issues"]} for h in doc["hosts"]}

    # The planted fault is in the power; a CPU GEMM's throughput on a shared two-core machine under twelve
    # concurrent hosts is not controlled (CI once failed a good host on fp32_flops alone). A throughput
    # finding is set aside as noise here, and only there: every energy verdict must be exact.
    # (and the efficiency of a flagged throughput, which is that throughput over an exact power)
    # An efficiency is that throughput over the power: where the host's power is not flagged (exact here),
    # an efficiency finding is its throughput's noise even when the throughput itself stayed just inside
    # its bound (CI, 11-28: a good host flagged on fp64_flops_per_watt alone, its fp64_power 50.02 W).
    def _noise(found: set[str]) -> set[str]:
        name = {m: m.split(":")[0] for m in found}
        bases = {n for n in name.values() if n.endswith("_flops")}  # flagged throughputs
        names = set(name.values())
        return {
            m
            for m, n in name.items()
            if n in bases
            or n.removesuffix("_per_watt") in bases
            or (n.endswith("_flops_per_watt") and n.replace("_flops_per_watt", "_power") not in names)
        }

    noise = {h: _noise(issues[h]) for h in hosts}
    assert verdicts[hungry] == "fail", (r.stdout[-3000:], r.stderr[-3000:], issues)
    flagged = {m.split(":")[0] for m in issues[hungry] - noise[hungry]}
    # Flagged on the power of at least one precision's window (each reading is exact to the scheduling
    # delay of a read, which on a machine at load 50 can hide one of the two).
    assert flagged & {"gemm-flops/fp32_power", "gemm-flops/fp64_power"}, issues[hungry]
    assert all("power" in m or "per_watt" in m or m == "gemm-flops/*" for m in flagged), issues[hungry]
    for h in hosts:
        if h not in (hungry, bare):  # a good host passes, or fails on throughput noise alone
            real = {m for m in issues[h] - noise[h] if not m.startswith("gemm-flops/*")}
            # (validate re-runs a host failed on fleet statistics alone: noise that did not show again is
            # flaky; CI, 11-28)
            assert not real and verdicts[h] in (("fail", "flaky") if noise[h] else ("pass",)), (
                h,
                issues[h],
                r.stdout[-3000:],
            )
    # Without a counter among peers that have one: incomplete (its energy metrics are missing), not failed
    # (failed only where its throughput was also out of line, which the noise above allows).
    missing = {m.split(":")[0] for m in issues[bare] - noise[bare] if not m.startswith("gemm-flops/*")}
    assert missing and all(m.endswith(("_power", "_per_watt")) for m in missing), issues[bare]
    # (noise that did not show again in the confirmation run leaves it incomplete, never flaky)
    want = ("fail", "incomplete") if noise[bare] else ("incomplete",)
    assert verdicts[bare] in want, (issues[bare], r.stdout[-3000:])
    # The measured power is the planted one (the counters advance at a known rate).
    summary = [json.loads(line) for line in (run_dir / "results-summary.jsonl").read_text().splitlines()]
    by_node = {row["node"]: row for row in summary}
    for h, w in watts.items():
        assert by_node[h]["gemm-flops/fp32_power"] == pytest.approx(w, rel=0.1), by_node[h]
        eff = by_node[h]["gemm-flops/fp32_flops"] / by_node[h]["gemm-flops/fp32_power"]
        assert by_node[h]["gemm-flops/fp32_flops_per_watt"] == pytest.approx(eff)
    # No counter: the figure is there, the efficiency is not, and the host's result says why.
    assert by_node[bare]["gemm-flops/fp32_flops"] > 0
    assert "gemm-flops/fp32_power" not in by_node[bare]
    raw = run_dir / "raw" / bare / "results" / "gemm-flops" / "rank0.json"
    reason = json.loads(raw.read_text())["reason"]
    assert "no energy counter on this host" in reason, reason
