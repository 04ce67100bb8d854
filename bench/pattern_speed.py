"""Pattern-run speed: ``sb-fleet validate`` of a pair-wise ``tcp-bw`` (mpi mode) on N loopback hosts.

A pattern starts fresh ranks every round (``mpirun`` per group), so what a rank does before it measures
is paid once per round. This prints, per run: validate's wall time, the run stage's, the run stage per
round, and the CPU the whole machine used meanwhile (/proc/stat: the control node and every simulated
host's processes, which share its cores here). With ``--before DIR`` (another checkout, e.g. ``git worktree add /tmp/before
<commit>``) the two trees' runs alternate on the same fleet, so the ratio is taken in one run:

    .venv/bin/python bench/pattern_speed.py --hosts 8
    .venv/bin/python bench/pattern_speed.py --hosts 8 --before /tmp/before --rounds 2

No second pass (``--no-second-pass``): its rounds depend on what the first found. Needs root and Open
MPI's mpirun, as the pattern tests do.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))
from fleetlib import PAIR_WISE_TCP, SshFleet, mpi_login_key  # noqa: E402
from scale import STAGE_RE, wait_quiet  # noqa: E402

CONFIG = PAIR_WISE_TCP.replace("@PORT@", "31411").replace("@TIMEOUT@", "120")


def machine_cpu_s() -> float:
    """CPU seconds the machine has spent busy since boot (every core; /proc/stat's first line)."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    busy = sum(f[:8]) - f[3] - f[4]  # user nice system idle iowait irq softirq steal: all but idle and iowait
    return busy / os.sysconf("SC_CLK_TCK")


def one_run(fleet: SshFleet, tree: Path, run_dir: Path, rounds: int) -> dict:
    waited = wait_quiet()
    inv, cfg = fleet.inventory(), fleet.config(CONFIG, name=f"{run_dir.name}.yaml")
    cpu0 = machine_cpu_s()
    t0 = time.monotonic()
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from sb_fleet.cli.main import main; sys.argv[0] = 'sb-fleet'; main()",
        ]
        + ["validate", "-i", str(inv), "-c", str(cfg), "--run-dir", str(run_dir), "--no-second-pass"],
        capture_output=True,
        text=True,
        cwd=str(tree),
        env={**os.environ, "COLUMNS": "200"},
    )
    wall = time.monotonic() - t0
    stages = {}
    for line in r.stderr.splitlines():
        m = STAGE_RE.match(line.strip())
        if m:
            stages[m.group(1)] = float(m.group(5))
    run_s = stages.get("run")
    return {
        "exit": r.returncode,
        "validate_s": round(wall, 1),
        "run_s": run_s,
        "per_round_s": round(run_s / rounds, 2) if run_s else None,
        "machine_cpu_s": round(machine_cpu_s() - cpu0, 1),
        "waited_s": round(waited, 1),
        "tail": "" if (run_dir / "pairs" / "tcp-bw.json").exists() else r.stderr[-1500:],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=1, help="runs of each tree (alternating with --before)")
    ap.add_argument("--before", type=Path, help="another checkout to time beside this one")
    args = ap.parse_args()
    if not shutil.which("mpirun"):
        print("pattern_speed: Open MPI's mpirun is missing (apt: openmpi-bin)", file=sys.stderr)
        return 2
    n = args.hosts
    pattern_rounds = n - 1 if n % 2 == 0 else n  # pair-wise: N-1 rounds (N even), N (odd)
    trees = {"this": ROOT} | ({"before": args.before.resolve()} if args.before else {})
    print(f"pair-wise tcp-bw over {n} loopback hosts ({pattern_rounds} rounds), load {os.getloadavg()}")
    fleet = SshFleet(n, base=10, subnet="127.0.46")
    fleet.start()
    mpi_login_key(fleet)
    out = Path(tempfile.mkdtemp(prefix="sbf-pattern-speed-"))
    got: dict[str, list[dict]] = {k: [] for k in trees}
    try:
        for i in range(args.rounds):
            for name, tree in trees.items():
                res = one_run(fleet, tree, out / f"{name}-{i}", pattern_rounds)
                got[name].append(res)
                print(
                    f"  {name:6} run {i + 1}: " + ", ".join(f"{k} {v}" for k, v in res.items() if k != "tail")
                )
                if res["tail"]:
                    print(res["tail"])
    finally:
        fleet.cleanup()
        shutil.rmtree(out, ignore_errors=True)
    for name, runs in got.items():
        med = statistics.median(r["validate_s"] for r in runs)
        per = [r["per_round_s"] for r in runs if r["per_round_s"]]
        cpu = statistics.median(r["machine_cpu_s"] for r in runs)
        print(
            f"{name:6} median: validate {med:.1f} s, run stage per round "
            f"{statistics.median(per) if per else float('nan'):.2f} s, machine CPU {cpu:.1f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
