"""Did every host run everything? Failed benchmarks, missing benchmarks, missing metrics.

- A ``<bench>/return_code`` other than 0 is a failed benchmark (124: timed out).
- A benchmark expected on every host (from ``plan.json``, or else reported by
  at least half of the hosts) with no result on a host is a missing benchmark.
- A metric that at least 90% of the hosts whose run of that benchmark
  succeeded report, but this host does not, is a missing metric (a GPU that
  fell off the bus shows up this way).

All three make a host ``incomplete`` rather than ``fail``.
"""

from __future__ import annotations

import numpy as np

from sb_fleet.analysis.issues import INCOMPLETE, Issue
from sb_fleet.analysis.superbench.metric_names import parse_metric

MISSING_METRIC_PRESENCE = 0.9
INFERRED_BENCHMARK_PRESENCE = 0.5


def _rc_text(rc: float) -> str:
    if rc == 124:
        return "timed out (return code 124)"
    return f"failed with return code {rc:g}"


def check_completeness(
    columns: list[str], values: np.ndarray, expected_benchmarks: list[str] | None
) -> dict[int, list[Issue]]:
    n_hosts = values.shape[0]
    issues: dict[int, list[Issue]] = {}
    if n_hosts == 0:
        return issues
    groups: dict[str, list[int]] = {}
    rc_cols: dict[str, list[int]] = {}  # one per rank when the suite writes ranked return codes
    for i, col_name in enumerate(columns):
        name = parse_metric(col_name)
        groups.setdefault(name.group, []).append(i)
        if name.is_return_code:
            rc_cols.setdefault(name.group, []).append(i)

    present = ~np.isnan(values)
    ran: dict[str, np.ndarray] = {g: present[:, cols].any(axis=1) for g, cols in groups.items()}
    ok: dict[str, np.ndarray] = {}
    for g in groups:
        if g not in rc_cols:
            ok[g] = ran[g]
            continue
        rcs = values[:, rc_cols[g]]
        bad = ~np.isnan(rcs) & (rcs != 0)
        ok[g] = ~bad.any(axis=1) & (~np.isnan(rcs)).any(axis=1)
        for r, j in zip(*np.nonzero(bad), strict=True):
            v = float(rcs[r, j])
            issues.setdefault(int(r), []).append(
                Issue(
                    metric=columns[rc_cols[g][j]],
                    value=v,
                    reference=0.0,
                    deviation=None,
                    check="return_code",
                    category="FailedTest",
                    severity=INCOMPLETE,
                    detail=f"benchmark {g} {_rc_text(v)}",
                )
            )

    # Expected benchmarks: a plan name matches a group equal to it or below it ("gpt_models" -> "gpt_models/...").
    if expected_benchmarks is not None:
        for b in expected_benchmarks:
            matching = [g for g in groups if g == b or g.startswith(b + "/")]
            has = np.zeros(n_hosts, dtype=bool)
            for g in matching:
                has |= ran[g]
            for r in np.nonzero(~has)[0]:
                issues.setdefault(int(r), []).append(_missing_bench(b, "is in the plan"))
    else:
        for g in groups:
            frac = float(ran[g].mean())
            if frac >= INFERRED_BENCHMARK_PRESENCE:
                for r in np.nonzero(~ran[g])[0]:
                    issues.setdefault(int(r), []).append(
                        _missing_bench(g, f"was reported by {frac * 100:.0f}% of the hosts")
                    )

    for g, cols in groups.items():
        good = ok[g]
        n_good = int(good.sum())
        if n_good == 0:
            continue
        for c in cols:
            if c in rc_cols.get(g, ()):
                continue
            col_present = present[:, c]
            frac = float(np.count_nonzero(col_present & good)) / n_good
            if frac < MISSING_METRIC_PRESENCE:
                continue
            for r in np.nonzero(good & ~col_present)[0]:
                issues.setdefault(int(r), []).append(
                    Issue(
                        metric=columns[c],
                        value=None,
                        reference=None,
                        deviation=None,
                        check="missing-metric",
                        category="MissingMetric",
                        severity=INCOMPLETE,
                        detail=f"{columns[c]} is missing although {g} succeeded ({frac * 100:.0f}% of hosts report it)",
                    )
                )
    return issues


def _missing_bench(bench: str, why: str) -> Issue:
    return Issue(
        metric=f"{bench}/return_code",
        value=None,
        reference=None,
        deviation=None,
        check="missing-benchmark",
        category="MissTest",
        severity=INCOMPLETE,
        detail=f"benchmark {bench} has no result on this host although it {why}",
    )
