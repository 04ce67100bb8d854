"""Did every host run everything? Failed benchmarks, missing benchmarks, missing metrics.

- A ``<bench>/return_code`` other than 0 is a failed benchmark (124: timed out).
- A benchmark expected on every host (from ``plan.json``, or else reported by
  at least half of the hosts) with no result on a host is a missing benchmark.
- A metric that a majority (more than half, and at least two) of the hosts
  of this host's population whose run of that benchmark succeeded report, but
  this host does not (absent or ``null``), is a missing metric: "<metric>
  missing" (a GPU that fell off the bus shows up this way; SuperBench's
  diagnosis says ``<metric>_miss``). Populations are the fact groups (GPU
  model, driver, firmware): an A100 lacking an H100-only metric is not missing it.

All three make a host ``incomplete`` rather than ``fail``.
"""

from __future__ import annotations

import numpy as np

from sb_fleet.analysis.issues import INCOMPLETE, Issue
from sb_fleet.analysis.superbench.metric_names import parse_metric

MISSING_METRIC_PRESENCE = 0.5  # more than this share of the population reports it
INFERRED_BENCHMARK_PRESENCE = 0.5


def _rc_text(rc: float) -> str:
    if rc == 124:
        return "timed out (return code 124)"
    return f"failed with return code {rc:g}"


def check_completeness(
    columns: list[str],
    values: np.ndarray,
    expected_benchmarks: list[str] | None,
    populations: list[np.ndarray] | None = None,
) -> dict[int, list[Issue]]:
    """Failed, missing benchmarks and missing metrics per host row. ``populations``: the rows of each
    population (missing metrics are judged within it); None: the fleet is one."""
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

    pops = populations if populations is not None else [np.arange(n_hosts)]
    for g, cols in groups.items():
        for rows in pops:
            _missing_metrics(columns, present, ok[g], g, cols, rc_cols.get(g, []), rows, issues)
    return issues


def _missing_metrics(
    columns: list[str],
    present: np.ndarray,
    ok: np.ndarray,
    group: str,
    cols: list[int],
    rc_cols: list[int],
    rows: np.ndarray,
    issues: dict[int, list[Issue]],
) -> None:
    good = np.zeros(present.shape[0], dtype=bool)
    good[rows] = ok[rows]
    n_good = int(good.sum())
    if n_good < 2:
        return
    for c in cols:
        if c in rc_cols:
            continue
        col_present = present[:, c]
        k = int(np.count_nonzero(col_present & good))
        if k < 2 or k / n_good <= MISSING_METRIC_PRESENCE:
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
                    detail=(
                        f"{columns[c]} missing: {group} succeeded, and {k} of the {n_good} hosts of its "
                        f"population where it succeeded report it"
                    ),
                )
            )


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
