"""Real soaks with a step and a slope planted: does ``sb-fleet accept`` reject exactly the faulty nodes?

Issue 55's done-when, on this machine's real noise. Each run is a real ``sb-fleet accept`` of a soak-only
campaign on a loopback fleet of six sshd hosts (127.0.74.10-15, one interpreter each, torch on CPU), a
small CPU GEMM a round, ``gemm-flops/fp32_flops`` judged for drift (``k`` 3, ``min_change`` as given, the
config's fleet statistics off as in tests/integration/test_accept.py, so the drift rule alone decides).
host005's sshd and everything it runs is in a cpu cgroup at its share of the machine, halved from the
middle round on (round 5 of 8): a step to half speed. host006's quota falls by 4% a round
(0.96^(round-1)): a slope. host001-004 are healthy. With ``--busy N``, N busy loops run on the control node
the whole run (other work beside the soak). Prints each run's verdicts and the rejected nodes' reasons,
then the counts.

    .venv/bin/python bench/soak_faults.py --runs 10 [--busy 2] [--rounds 8 --round 20s] [--min-change 0.2]

Needs root (the fleet's sshd, the cgroup v1 cpu controller at /sys/fs/cgroup/cpu).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from tests.fleetlib import SshFleet  # noqa: E402
from tests.fleetlib.corpus import BusyLoops, CpuGroup  # noqa: E402

SB_FLEET = str(ROOT / ".venv" / "bin" / "sb-fleet")
PERIOD_US = 10_000
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
    gemm-flops:
      timeout: 300
      modes: [{name: local, proc_num: 1}]
      parameters: {m: 256, n: 256, k: 256, num_warmup: 2, duration: 1.0, precision: [fp32]}
gates:
  fleet: {enabled: false}
"""
CAMPAIGN = """\
version: 1
description: step and slope planted (bench/soak_faults.py)
stages:
  - name: soak
    kind: soak
    benchmarks: [gemm-flops]
    duration: @DURATION@
    round: @ROUND@
    max_failed_rounds: 0
    drift: {k: 3, min_change: @MIN_CHANGE@, min_rounds: 6, metrics: [gemm-flops/fp32_flops]}
"""


def duration_s(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    return float(text[:-1]) * units[text[-1]]


class Planted:
    """host005 halved from the middle round, host006 -4% a round, set as each round's run directory appears."""

    def __init__(self, step: CpuGroup, slope: CpuGroup, share: float, rounds: int, runs: Path):
        self.step, self.slope, self.share, self.rounds, self.runs = step, slope, share, rounds, runs
        self.done = threading.Event()
        self.applied: dict[int, tuple[float, float]] = {}
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def fractions(self, k: int) -> tuple[float, float]:
        return (0.5 if k > self.rounds // 2 else 1.0), 0.96 ** (k - 1)

    def set(self, k: int) -> None:
        for group, f in zip((self.step, self.slope), self.fractions(k), strict=True):
            (group.path / "cpu.cfs_quota_us").write_text(str(max(1000, int(PERIOD_US * self.share * f))))
        self.applied[k] = self.fractions(k)

    def _watch(self) -> None:
        pattern = re.compile(r"^soak-round-(\d+)(?:\.\d+)?$")
        while not self.done.is_set():
            try:
                seen = [int(m.group(1)) for e in os.listdir(self.runs) if (m := pattern.match(e))]
            except OSError:
                seen = []
            if seen and max(seen) not in self.applied:
                self.set(max(seen))
            time.sleep(0.02)

    def __enter__(self) -> Planted:
        self.set(1)
        self.applied.clear()
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join(timeout=5)
        self.set(1)


def one_run(fleet: SshFleet, inv: Path, cfg: Path, campaign: Path, groups, share, rounds, work: Path) -> dict:
    d = work / f"campaign-{int(time.time() * 1000)}"
    t0 = time.monotonic()
    with Planted(*groups, share, rounds, d / "runs"):
        r = subprocess.run(
            [
                SB_FLEET,
                "accept",
                "-c",
                str(cfg),
                "-i",
                str(inv),
                "--campaign",
                str(campaign),
                "--dir",
                str(d),
                "--quiet",
            ],
            capture_output=True,
            text=True,
            cwd=str(ROOT),
        )
    wall = time.monotonic() - t0
    out = {"exit": r.returncode, "wall_s": round(wall, 1), "dir": str(d), "nodes": {}}
    for rec in sorted((d / "acceptance").glob("*.json")):
        doc = json.loads(rec.read_text())
        out["nodes"][rec.stem] = (doc.get("verdict"), doc.get("reason") or "")
    if not out["nodes"]:
        out["stderr"] = r.stderr[-2000:]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--round", default="20s")
    ap.add_argument("--min-change", type=float, default=0.2)
    ap.add_argument("--busy", type=int, default=0, help="busy loops on the control node during every run")
    ap.add_argument("--json", type=Path, help="write every run's outcome here")
    a = ap.parse_args()
    share = (os.cpu_count() or 1) / 6
    dur = f"{a.rounds * duration_s(a.round):g}s"
    work = Path(tempfile.mkdtemp(prefix="sbf-soak-faults-"))
    runs: list[dict] = []
    fleet = SshFleet(6, base=10, subnet="127.0.74")
    fleet.start()
    busy = BusyLoops(a.busy).start() if a.busy else None
    try:
        names = [h.name for h in fleet.hosts]
        inv = fleet.inventory()
        cfg = fleet.config(CONFIG)
        campaign = fleet.dir / "campaign.yaml"
        campaign.write_text(
            CAMPAIGN.replace("@DURATION@", dur)
            .replace("@ROUND@", a.round)
            .replace("@MIN_CHANGE@", str(a.min_change))
        )
        with (
            CpuGroup("sb-bench-soak-step", cpus=share, period_us=PERIOD_US) as step,
            CpuGroup("sb-bench-soak-slope", cpus=share, period_us=PERIOD_US) as slope,
        ):
            step.add_tree(fleet.hosts[4].proc.pid)
            slope.add_tree(fleet.hosts[5].proc.pid)
            print(
                f"{a.runs} runs, {a.rounds} rounds of {a.round}, min_change {a.min_change:g}, busy loops {a.busy}; "
                f"step: {names[4]}, slope: {names[5]}, healthy: {', '.join(names[:4])}",
                flush=True,
            )
            for i in range(a.runs):
                load = os.getloadavg()[0]
                res = one_run(fleet, inv, cfg, campaign, (step, slope), share, a.rounds, work)
                res["load_before"] = round(load, 2)
                runs.append(res)
                verdicts = " ".join(f"{h}={v[0]}" for h, v in res["nodes"].items())
                print(
                    f"run {i + 1}: exit {res['exit']}, {res['wall_s']} s, load {load:.1f}: {verdicts}",
                    flush=True,
                )
                for h, (v, why) in res["nodes"].items():
                    if v != "accepted":
                        print(f"    {h}: {why[:200]}", flush=True)
                if "stderr" in res:
                    print("    " + res["stderr"].replace("\n", "\n    "), flush=True)
    finally:
        if busy is not None:
            busy.stop()
        fleet.cleanup()
    step_caught = sum(r["nodes"].get(names[4], ("",))[0] == "rejected" for r in runs)
    slope_caught = sum(r["nodes"].get(names[5], ("",))[0] == "rejected" for r in runs)
    healthy = [(r["nodes"].get(h, ("missing",))[0]) for r in runs for h in names[:4]]
    print(
        f"step caught {step_caught}/{len(runs)}, slope caught {slope_caught}/{len(runs)}, "
        f"healthy rejected {sum(v != 'accepted' for v in healthy)}/{len(healthy)} node-soaks"
    )
    if a.json:
        a.json.write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
