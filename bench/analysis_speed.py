"""Speed of ``sb-fleet report`` on large fleets: wall time and peak memory, all outputs written.

Each size runs the installed command in a fresh process (start-up and imports
included), on a SuperBench results-summary.jsonl of ~150 metrics per host
with planted faults, and reads the child's peak RSS from wait4(). Generation
is not timed. Python's bytecode caches are allowed (PYTHONDONTWRITEBYTECODE is
dropped for the child) and one untimed run comes first, as on a user's
install, where pip compiles the package once. Usage::

    python bench/analysis_speed.py [--sizes 1000,5000,10000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.synth.fleet import generate  # noqa: E402


def command() -> list[str]:
    exe = Path(sys.executable).parent / "sb-fleet"
    if exe.is_file():
        return [str(exe)]
    return [sys.executable, "-c", "from sb_fleet.cli.main import main; main()"]


def run_once(src: Path, out: Path) -> tuple[float, float, float]:
    if out.exists():
        shutil.rmtree(out)
    t0 = time.perf_counter()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    proc = subprocess.Popen([*command(), "report", str(src), "--out", str(out), "-q"], env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"sb-fleet report failed with exit code {proc.returncode}")
    return wall, usage.ru_maxrss / 1024.0, usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,5000,10000")
    ap.add_argument(
        "--repeat", type=int, default=3, help="runs per size; the best wall and cpu time are shown"
    )
    ap.add_argument("--seed", type=int, default=20261122)
    args = ap.parse_args()
    sizes = [int(x) for x in args.sizes.split(",")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="sb-fleet-bench-") as d:
        for n in sizes:
            fleet = generate(n, seed=args.seed + n)
            src = Path(d) / f"fleet-{n}.jsonl"
            src.write_text(fleet.text)
            metrics = len(json.loads(fleet.lines[0])) - 1
            run_once(src, Path(d) / f"out-{n}")  # untimed: bytecode caches written, files in the page cache
            runs = [run_once(src, Path(d) / f"out-{n}") for _ in range(args.repeat)]
            best = min(r[0] for r in runs)
            peak = max(r[1] for r in runs)
            cpu = min(r[2] for r in runs)
            size_mb = src.stat().st_size / 1e6
            out_mb = sum(p.stat().st_size for p in (Path(d) / f"out-{n}").iterdir()) / 1e6
            rows.append((n, metrics, size_mb, best, cpu, peak, out_mb))
    load = os.getloadavg()[0]
    print(
        f"load average at the end: {load:.1f} on {os.cpu_count()} cores (other work on the machine inflates wall time)"
    )
    print(
        f"{'hosts':>7} {'metrics':>8} {'input MB':>9} {'wall s':>8} {'cpu s':>7} {'peak RSS MB':>12} "
        f"{'cpu us/host':>12} {'outputs MB':>11}"
    )
    for n, m, size_mb, wall, cpu, peak, out_mb in rows:
        print(
            f"{n:>7} {m:>8} {size_mb:>9.1f} {wall:>8.2f} {cpu:>7.2f} {peak:>12.0f} "
            f"{cpu / n * 1e6:>12.0f} {out_mb:>11.1f}"
        )
    if len(rows) >= 2:
        first, last = rows[0], rows[-1]
        # Cost per extra host: the slope between the smallest and largest fleet (start-up cancels out).
        slope = (last[4] - first[4]) / (last[0] - first[0]) * 1e6
        print(
            f"growth: {last[0] / first[0]:.0f}x hosts -> {last[4] / first[4]:.1f}x cpu; {slope:.0f} us cpu per extra host"
        )


if __name__ == "__main__":
    main()
