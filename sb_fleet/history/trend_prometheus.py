"""``sb-fleet history PATH --prometheus``: the store's trends as OpenMetrics with a timestamp per run, to
backfill Prometheus (``promtool tsdb create-blocks-from openmetrics FILE DIR``) and so a dashboard's past.

Per run, at the run's time: the gate (``sb_fleet_gate_passed``), the hosts per verdict and the pass ratio,
under the names of a run's own metrics.prom (:mod:`sb_fleet.report.writers.report_prometheus`). With
``host``: that host's verdicts (``sb_fleet_host_verdict``) and its values as the store keeps them
(``sb_fleet_history_value``, SuperBench's names with their ranks, in the benchmark's own unit: the store
keeps no units). With ``metric``: the fleet median of the metric or family and how many values it pools
(``sb_fleet_history_fleet_median``, ``sb_fleet_history_fleet_values``).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence

from sb_fleet.exposition import Series
from sb_fleet.history.history_store import RunInfo, Store

VERDICTS = (
    "pass",
    "fail",
    "incomplete",
    "missing",
    "flaky",
    "unconfirmed",
    "out_of_service",
)  # analysis.verdict's words


def _ts(t: _dt.datetime) -> float:
    """A stored (naive UTC) run time as Unix seconds."""
    return t.replace(tzinfo=_dt.timezone.utc).timestamp() if t.tzinfo is None else t.timestamp()


def _declare(s: Series) -> None:
    s.declare("sb_fleet_gate_passed", "1 when the run's gate passed, 0 when it failed.", ("fleet",))
    s.declare("sb_fleet_run_hosts", "Hosts judged in the run (every inventory host).", ("fleet",))
    s.declare("sb_fleet_run_verdict_hosts", "Hosts of the run per verdict.", ("fleet", "verdict"))
    s.declare(
        "sb_fleet_run_pass_ratio", "Share of the run's hosts whose verdict is pass (0 to 1).", ("fleet",)
    )
    s.declare(
        "sb_fleet_host_verdict",
        "1 for the host's verdict in the run, 0 for the other verdicts (pass, fail, incomplete, missing, flaky, "
        "unconfirmed).",
        ("fleet", "host", "verdict"),
    )
    s.declare(
        "sb_fleet_history_value",
        "A host's value of a metric in a recorded run, as the history store keeps it (the benchmark's unit).",
        ("fleet", "host", "metric"),
    )
    s.declare(
        "sb_fleet_history_fleet_median",
        "The fleet median of a metric or metric family in a recorded run (the benchmark's unit).",
        ("fleet", "metric"),
    )
    s.declare(
        "sb_fleet_history_fleet_values",
        "Values pooled in the fleet median of a recorded run.",
        ("fleet", "metric"),
    )


def trend_series(
    store: Store, runs: Sequence[RunInfo], fleet: str, host: str | None = None, metric: str | None = None
) -> Series:
    """The runs' series, each sample at its run's time."""
    s = Series()
    _declare(s)
    when = {r.run_key: _ts(r.time) for r in runs}
    counts = store.verdict_counts()
    for r in runs:
        t = when[r.run_key]
        if r.gate_passed is not None:
            s.add("sb_fleet_gate_passed", {"fleet": fleet}, 1 if r.gate_passed else 0, t)
        c = counts.get(r.run, {})
        s.add("sb_fleet_run_hosts", {"fleet": fleet}, r.hosts, t)
        for v in VERDICTS:
            s.add("sb_fleet_run_verdict_hosts", {"fleet": fleet, "verdict": v}, c.get(v, 0), t)
        if r.hosts:
            s.add("sb_fleet_run_pass_ratio", {"fleet": fleet}, c.get("pass", 0) / r.hosts, t)
    if host is not None:
        for key, (verdict, _) in store.host_verdicts(host, runs).items():
            for v in VERDICTS:
                s.add(
                    "sb_fleet_host_verdict",
                    {"fleet": fleet, "host": host, "verdict": v},
                    v == verdict,
                    when[key],
                )
        for m, seq in store.host_trend(host, metric, runs).items():
            for key, value in seq:
                s.add("sb_fleet_history_value", {"fleet": fleet, "host": host, "metric": m}, value, when[key])
    elif metric is not None:
        for key, median, n in store.metric_trend(metric, runs):
            s.add("sb_fleet_history_fleet_median", {"fleet": fleet, "metric": metric}, median, when[key])
            s.add("sb_fleet_history_fleet_values", {"fleet": fleet, "metric": metric}, n, when[key])
    return s
