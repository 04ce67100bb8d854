"""Two checkouts' nightly gate on one simulated fleet, interleaved: the ratio to one SSH round, each run.

On a shared or virtual machine the same work's CPU time drifts by up to 20% within an hour, and two
``bench/scale.py`` runs of the same code differ by ~5%: a change worth a few percent shows only when the
code before it and after it run on the same fleet, alternately, within minutes. This script makes one
fleet (bench/scale.py's), validates it cold once with each checkout (each deploys its own suite, so
both are in place), then runs ``--rounds`` rounds of nightly validates (every SSH master closed first),
the two checkouts in turn (A B, then B A, ...), and prints each run and each checkout's mean ratio.

    git worktree add /tmp/before <commit>
    .venv/bin/python bench/nightly_ab.py /tmp/before . --hosts 64 --rounds 3

A checkout is a directory holding ``sb_fleet/`` and ``benchmarks/``: its sb-fleet runs from it (the
working directory comes first on sys.path), with this venv's interpreter. Needs root, as bench/scale.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scale  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "checkouts", nargs=2, type=Path, help="A and B: directories with sb_fleet/ and benchmarks/"
    )
    ap.add_argument("--hosts", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--forks", type=int, default=256)
    ap.add_argument("--host-python", choices=scale.HOST_PYTHONS, default="bare", help="as bench/scale.py's")
    args = ap.parse_args()
    roots = [p.resolve() for p in args.checkouts]
    for r in roots:
        if not (r / "sb_fleet").is_dir() or not (r / "benchmarks").is_dir():
            ap.error(f"{r}: not a checkout of sb-fleet (no sb_fleet/ and benchmarks/ in it)")
    ratios: dict[Path, list[float]] = {r: [] for r in roots}
    fleet = scale.shared_fleet(args.hosts, "127.0.6", "sbf-ab-", scale.host_python(args.host_python))
    code = 0
    try:
        for i, r in enumerate(roots):
            c = scale.time_validate(fleet, fleet.dir / f"run-cold-{i}", args.forks, "cheap-first", r)
            print(
                f"cold    {r}: validate {c['validate_s']:.2f} s, ratio {c['ratio']:.2f}, ok {c['hosts_ok']}"
            )
        for n in range(args.rounds):
            for i, r in sorted(enumerate(roots), reverse=n % 2 == 1):
                scale.close_masters()
                v = scale.time_validate(fleet, fleet.dir / f"run-{n}-{i}", args.forks, "cheap-first", r)
                code = max(code, v["exit_code"])
                stages = " ".join(f"{k} {x['s']:.1f}" for k, x in v["stages"].items())
                ratios[r].append(v["ratio"])
                print(
                    f"nightly {r}: round {v['ssh_round_s']:.2f} s, validate {v['validate_s']:.2f} s, ratio "
                    f"{v['ratio']:.2f}, CPU hosts {v['hosts_cpu_s']:.1f} s control {v['control_cpu_s']:.1f} s "
                    f"(sb-fleet's own {v['self_cpu_s']}), ok {v['hosts_ok']}/{args.hosts} [{stages}]",
                    flush=True,
                )
    finally:
        fleet.cleanup()
    for r, xs in ratios.items():
        print(f"{r}: nightly ratios {xs}, mean {sum(xs) / len(xs):.2f}")
    return code


if __name__ == "__main__":
    sys.exit(main())
