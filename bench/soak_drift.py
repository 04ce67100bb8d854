"""How well the soak's drift rule tells a step and a slope from noise, on real rounds (issue 55).

The rounds are tests/corpus's: 20 consecutive real ``sb-fleet validate`` runs of each no-fault case and the
slow-host case (3 to 8 loopback hosts, 2026-11-27), each host's ``gemm-flops/fp32_flops``. Every window of
``--rounds`` consecutive runs of every host is one soak. Planted into it (sizes from the issue, not tuned
to the rule): a step to half speed from the middle round, and a slope of -4% a round. Judged:

* as recorded (5-10% noise a round, heavy tails, slowdowns every host shared), as measured and relative to
  the fleet's median of each round (the other hosts of the same run, the fault planted before the median);
* scaled to a GPU figure's noise (the window's log-deviations over its MAD, times 0.5%, 1%, 2%).

Each with the rule of sb_fleet.analysis.soak (a step and a trend, Student's t, the split corrected) and the
rule before it (a least-squares line, its residuals as the noise, k normal sigmas), ``k`` 3 and
``min_change`` as given. Prints, per case, the healthy windows failed and the faults caught.

    .venv/bin/python bench/soak_drift.py [--rounds 8] [--min-change 0.05]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from datetime import datetime, timedelta, timezone
from pathlib import Path

from sb_fleet.analysis import change_point
from sb_fleet.analysis.change_point import trend_change
from sb_fleet.analysis.soak import SoakCriteria, SoakRound, judge_node

ROOT = Path(__file__).resolve().parents[1]
GEMM = "gemm-flops/fp32_flops"
T0 = datetime(2026, 12, 7, tzinfo=timezone.utc)


def cases() -> dict[str, dict[str, list[float]]]:
    out: dict[str, dict[str, list[float]]] = {}
    for case in sorted((ROOT / "tests" / "corpus").iterdir()):
        runs = sorted(p for p in case.glob("r*") if p.is_dir())
        if len(runs) < 20:
            continue
        by: dict[str, list[float]] = {}
        for run in runs:
            for line in (run / "results-summary.jsonl").read_text().splitlines():
                row = json.loads(line)
                if isinstance(row.get(GEMM), (int, float)):
                    by.setdefault(row["node"], []).append(float(row[GEMM]))
        out[case.name] = {h: v for h, v in by.items() if len(v) == len(runs)}
    return out


def factor(i: int, n: int, fault: str) -> float:
    if fault == "step":
        return 0.5 if i >= n // 2 else 1.0
    if fault == "step+1":  # the step to half, one round inside it at a quarter (issue 55's missed soak)
        return 0.25 if i == n // 2 + 1 else 0.5 if i >= n // 2 else 1.0
    return 0.96**i if fault == "slope" else 1.0


def rounds_of(values: list[float]) -> list[SoakRound]:
    return [
        SoakRound(i + 1, T0 + timedelta(hours=i), T0 + timedelta(hours=i, minutes=50), metrics={GEMM: v})
        for i, v in enumerate(values)
    ]


def old_rule_fails(values: list[float], k: float, min_change: float) -> bool:
    med = statistics.median(values)
    ch = trend_change([float(i) for i in range(len(values))], [math.log(v / med) for v in values], 0.0, k)
    return ch.change < 0 and abs(ch.change) > max(k * ch.stderr, math.log1p(min_change))


def windows(data: dict[str, dict[str, list[float]]], n: int, fault: str, basis: str, sigma: float | None):
    for hosts in data.values():
        names = sorted(hosts)
        runs = len(hosts[names[0]])
        for s in range(runs - n + 1):
            for h in names:
                own = [hosts[h][s + i] * factor(i, n, fault) for i in range(n)]
                if basis == "relative":
                    med = [
                        statistics.median([own[i] if g == h else hosts[g][s + i] for g in names])
                        for i in range(n)
                    ]
                    own = [v / m for v, m in zip(own, med, strict=True)]
                if sigma is not None:  # the window's shape at a GPU figure's noise, the fault kept as planted
                    clean = [v / factor(i, n, fault) for i, v in enumerate(own)]
                    cmed = statistics.median(clean)
                    y = [math.log(v / cmed) for v in clean]
                    mad = statistics.median(abs(a) for a in y) * 1.4826 or 1.0
                    own = [40000.0 * math.exp(sigma * a / mad) * factor(i, n, fault) for i, a in enumerate(y)]
                yield own


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--min-change", type=float, default=0.05)
    ap.add_argument("--k", type=float, default=3.0)
    a = ap.parse_args()
    data = cases()
    crit = SoakCriteria(drift_k=a.k, drift_min_change=a.min_change, drift_min_rounds=min(6, a.rounds))
    print(f"{a.rounds}-round windows of tests/corpus, k {a.k:g}, min_change {a.min_change:.0%}")
    print("rules: new (step, step with one round left out, trend), plain (step and trend), old (trend alone)")
    print(
        f"{'noise':>12} {'basis':>9} {'rule':>5} | {'healthy failed':>15} {'step caught':>12} "
        f"{'step+1 caught':>14} {'slope caught':>13}"
    )
    loo = change_point.LEAVE_ONE_OUT_MAX
    for sigma in (None, 0.005, 0.01, 0.02):
        for basis in ("measured", "relative") if sigma is None else ("measured",):
            for rule in ("new", "plain", "old"):
                change_point.LEAVE_ONE_OUT_MAX = loo if rule == "new" else 0
                row = []
                for fault in ("none", "step", "step+1", "slope"):
                    ws = list(windows(data, a.rounds, fault, basis, sigma))
                    if rule != "old":
                        bad = sum(not judge_node("n", rounds_of(w), crit).passed for w in ws)
                    else:
                        bad = sum(old_rule_fails(w, a.k, a.min_change) for w in ws)
                    row.append(f"{bad}/{len(ws)}")
                label = "as recorded" if sigma is None else f"{sigma:.1%}"
                print(
                    f"{label:>12} {basis:>9} {rule:>5} | {row[0]:>15} {row[1]:>12} {row[2]:>14} {row[3]:>13}"
                )
    change_point.LEAVE_ONE_OUT_MAX = loo


if __name__ == "__main__":
    main()
