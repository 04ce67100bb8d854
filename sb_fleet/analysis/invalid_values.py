"""Invalid values are findings: a metric whose value is not a finite number fails its host.

A host that reports NaN, ±inf, a string, or a number past the double range (``1e400``) for a
metric did not measure it. Dropping the value would let the host pass on the metrics it has left; so
each such metric is one ``fail`` issue of the host, naming the metric and the value as it was
written (:attr:`sb_fleet.analysis.fleet_results.Fleet.invalid`, filled from the results summary and
from the normaliser's ``invalid-values.json``).
"""

from __future__ import annotations

from sb_fleet.analysis.fleet_results import Fleet
from sb_fleet.analysis.issues import FAIL, Issue

CHECK = "invalid-value"
CATEGORY = "InvalidValue"


def invalid_value_issue(metric: str, value: str) -> Issue:
    return Issue(
        metric=metric,
        value=None,
        reference=None,
        deviation=None,
        check=CHECK,
        category=CATEGORY,
        severity=FAIL,
        detail=f"invalid value {value} for {metric}: not a finite number, so the metric was not measured",
    )


def invalid_value_issues(fleet: Fleet) -> dict[str, list[Issue]]:
    """Host name -> one failing issue per invalid metric (sorted by metric name)."""
    return {
        host: [invalid_value_issue(m, v) for m, v in sorted(metrics.items())]
        for host, metrics in fleet.invalid.items()
        if metrics
    }
