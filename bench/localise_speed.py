"""How long localisation takes on a synthetic pair-wise matrix of a large fleet.

Builds every pair of N hosts (default 1,000: 499,500 pairs, 999 rounds of a pair-wise pattern) with
2% run-to-run spread and planted faults (two slow nodes, three slow links, one failed pair), then
times: scheduling the pair-wise rounds, localisation, the second-pass plan and the heatmap. Prints the
verdicts against the planted truth, and the machine's load. Usage::

    python bench/localise_speed.py [--hosts 1000] [--seed 42]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sb_fleet.analysis.crossnode.localise import localise, second_pass  # noqa: E402
from sb_fleet.analysis.crossnode.pair_map import render_pair_heatmap  # noqa: E402
from sb_fleet.config.traffic_patterns import estimate_cost, pair_wise  # noqa: E402
from tests.synth.pairs import Faults, pair_matrix  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=42)
    a = ap.parse_args()
    hosts = [f"gpu{i:04d}" for i in range(a.hosts)]
    n = len(hosts)
    truth = Faults(
        nodes={hosts[n // 7]: 0.5, hosts[n // 2]: 0.3},
        links={
            frozenset((hosts[3], hosts[n - 5])): 0.4,
            frozenset((hosts[10], hosts[11])): 0.25,
            frozenset((hosts[n // 3], hosts[2 * n // 3])): 0.5,
        },  # fmt: skip
        failed={frozenset((hosts[20], hosts[n - 20]))},
    )
    t0 = time.perf_counter()
    sched = pair_wise(hosts)
    t_sched = time.perf_counter() - t0
    pairs = [g for rnd in sched.rounds for g in rnd]
    matrix = pair_matrix(hosts, truth, seed=a.seed, pairs=pairs)  # type: ignore[arg-type]
    t0 = time.perf_counter()
    loc = localise(matrix)
    t_loc = time.perf_counter() - t0
    t0 = time.perf_counter()
    plan = second_pass(loc, hosts)
    t_second = time.perf_counter() - t0
    t0 = time.perf_counter()
    html = render_pair_heatmap(matrix, loc)
    t_map = time.perf_counter() - t0
    named = {(c.kind, c.hosts) for c in loc.culprits}
    want = {("node", (h,)) for h in truth.nodes} | {
        ("link", tuple(sorted(k))) for k in [*truth.links, *truth.failed]
    }
    got = {(k, tuple(sorted(h))) for k, h in named}
    print(f"hosts {n}, pairs {len(matrix.pairs)}, pair-wise rounds {len(sched.rounds)}")
    print(f"  schedule pair-wise   {t_sched:7.3f} s")
    print(f"  localise             {t_loc:7.3f} s")
    print(f"  second-pass plan     {t_second:7.3f} s  ({len(plan)} round(s))")
    print(f"  heatmap              {t_map:7.3f} s  ({len(html) / 1e6:.1f} MB of HTML)")
    print(f"  planted {len(want)}, named {len(got)}, found {len(want & got)}, false {len(got - want)}")
    for c in loc.culprits:
        print(f"    {c.kind:<5} {c.target:<28} {c.confidence:<6} {c.summary[:90]}")
    print(f"  cost at 60 s per round: {estimate_cost(sched, 60, 'assumed').describe()}")
    print(f"  load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    return 0 if want == got else 1


if __name__ == "__main__":
    sys.exit(main())
