"""metrics.prom: the judged run as Prometheus series (text format 0.0.4, or OpenMetrics 1.0 on request).

Pure: the report's value in, bytes out. What the series are, their labels and how many there are is
documented in docs/prometheus.md; in short, every series has the ``fleet`` label and

- per run: ``sb_fleet_run_info`` (run id, config hash, source, version), the run's start and end time,
  its hosts per verdict and pass ratio, the gate (passed, failing hosts, allowed);
- per host: ``sb_fleet_host_verdict`` (one 0/1 series per verdict), ``sb_fleet_host_info`` (verdict,
  outcome, GPU model, top finding), ``sb_fleet_host_gate_failed`` (the gate's policy counts it), and with a
  history store ``sb_fleet_host_gate_failed_runs_in_a_row``;
- per host and health check: ``sb_fleet_health_check_status`` (0 pass, 1 warn, 2 fail), per host
  ``sb_fleet_health_host_status`` (3: no result);
- per host and benchmark metric: its value in base units, ``sb_fleet_benchmark_<unit>`` (seconds, bytes,
  bytes_per_second, flop_per_second ...; :func:`sb_fleet.exposition.base_unit`), the host's ranks pooled
  by their median (``per_rank``: one series per rank, with a ``rank`` label), and each benchmark's worst
  return code.

Cardinality: hosts x (about 10 + health checks + metrics + benchmarks); x ranks only with ``per_rank``.
"""

from __future__ import annotations

import datetime as _dt
import warnings
from collections.abc import Callable, Mapping, Sequence, Sized
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from sb_fleet import __version__
from sb_fleet.analysis.superbench.metric_names import parse_metric
from sb_fleet.analysis.verdict import FLAKY, OUT_OF_SERVICE, UNCONFIRMED, VERDICTS
from sb_fleet.exposition import DEFAULT_FLEET, Series, base_unit
from sb_fleet.history.record import run_meta
from sb_fleet.report.writers.report_json import top_finding

if TYPE_CHECKING:
    from sb_fleet.analysis.fleet_results import Fleet
    from sb_fleet.report.report_result import ReportResult

FILE = "metrics.prom"
HOST_VERDICTS = (*VERDICTS, FLAKY, UNCONFIRMED, OUT_OF_SERVICE)
HEALTH_CODES = {"pass": 0, "warn": 1, "fail": 2, "unknown": 3}
# Bounds on what hosts and configs can add (their names are untrusted): beyond them, names are left out
# and counted in sb_fleet_exposition_left_out.
MAX_METRICS = 4096  # benchmark metrics of a run (ranks pooled)
MAX_BENCHMARKS = 512  # benchmarks of a run (return codes)
MAX_CHECKS = 256  # health checks of a host


@dataclass(frozen=True)
class PromSettings:
    """How a run is exposed: its ``fleet`` label (and Pushgateway group), per-rank series, the format."""

    fleet: str = DEFAULT_FLEET
    per_rank: bool = False
    openmetrics: bool = False


@dataclass(frozen=True)
class RunIdentity:
    run_id: str
    config_hash: str | None
    start: float | None  # Unix seconds
    end: float  # Unix seconds: when the report was made


def identity(result: ReportResult, generated: _dt.datetime) -> RunIdentity:
    """The run's id, config hash and start time (history's :func:`run_meta`: the run directory's manifest,
    or a results file's digest), and ``generated`` as its end."""
    meta = run_meta(result.source, result.fleet.run_dir, [])
    start = meta.time.replace(tzinfo=_dt.timezone.utc).timestamp() if meta.time else None
    return RunIdentity(meta.run_key, meta.config_digest, start, generated.timestamp())


def _declare_run(s: Series) -> None:
    s.declare(
        "sb_fleet_run_info",
        "The run sb-fleet last judged: its id, config hash (sha256 of config.json), source, version (always 1).",
        ("fleet", "run_id", "config_hash", "source", "version"),
    )
    s.declare("sb_fleet_run_start_timestamp_seconds", "When the run was created (Unix time).", ("fleet",))
    s.declare("sb_fleet_run_end_timestamp_seconds", "When the run's report was made (Unix time).", ("fleet",))
    s.declare("sb_fleet_run_hosts", "Hosts judged in the run (every inventory host).", ("fleet",))
    s.declare("sb_fleet_run_verdict_hosts", "Hosts of the run per verdict.", ("fleet", "verdict"))
    s.declare(
        "sb_fleet_run_pass_ratio", "Share of the run's hosts whose verdict is pass (0 to 1).", ("fleet",)
    )
    s.declare("sb_fleet_gate_passed", "1 when the run's gate passed, 0 when it failed.", ("fleet",))
    s.declare("sb_fleet_gate_failing_hosts", "Hosts the gate's policy counts as failing.", ("fleet",))
    s.declare("sb_fleet_gate_allowed_failing_hosts", "Failing hosts the gate's policy allows.", ("fleet",))
    s.declare(
        "sb_fleet_gate_failed_by",
        "What failed the run's gate (always 1, one series a reason): its kind (hosts, populations, "
        "disagreements, inconsistent, too_noisy, fabric, history) and the report's sentence.",
        ("fleet", "kind", "reason"),
    )
    s.declare(
        "sb_fleet_exposition_left_out",
        "Names left out of this exposition beyond its bounds: benchmark metrics (4096 a run), benchmarks "
        "(512), health checks (256 a host).",
        ("fleet", "kind"),
    )


def _declare_hosts(s: Series) -> None:
    s.declare(
        "sb_fleet_host_verdict",
        "1 for the host's verdict in the run, 0 for the other verdicts (pass, fail, incomplete, missing, flaky, "
        "unconfirmed).",
        ("fleet", "host", "verdict"),
    )
    s.declare(
        "sb_fleet_host_info",
        "The host's verdict, outcome, GPU model and top finding in the run, or what failed the gate that "
        "names it (a disagreement, a population split) (always 1).",
        ("fleet", "host", "verdict", "outcome", "gpu_model", "finding"),
    )
    s.declare(
        "sb_fleet_host_gate_failed",
        "1 when the gate's policy counts the host as failing in the run (gates.policy.count), else 0.",
        ("fleet", "host"),
    )
    s.declare(
        "sb_fleet_host_gate_failed_runs_in_a_row",
        "Runs in a row, up to this one, in which the gate counted the host as failing (from the history "
        "store; only with --history).",
        ("fleet", "host"),
    )
    s.declare(
        "sb_fleet_health_host_status",
        "The host's health verdict before the benchmarks: 0 pass, 1 warn, 2 fail, 3 no result.",
        ("fleet", "host"),
    )
    s.declare(
        "sb_fleet_health_check_status",
        "A health check's verdict on the host: 0 pass, 1 warn, 2 fail (the worst of its records).",
        ("fleet", "host", "check"),
    )


def vocabulary() -> list[str]:
    """The names of the run and host series a run's exposition can hold (the benchmark families aside:
    ``sb_fleet_benchmark_<unit>``); the alert rules and the dashboard use only these."""
    s = Series()
    _declare_run(s)
    _declare_hosts(s)
    return [*s.names(), "sb_fleet_benchmark_return_code"]


def streak(verdicts: Sequence[str], counted: Sequence[str]) -> int:
    """How many runs in a row, up to the last, have a verdict the gate counts."""
    n = 0
    for v in reversed(verdicts):
        if v not in counted:
            break
        n += 1
    return n


def _health(s: Series, fleet: str, health: Mapping[str, Any]) -> int:
    """The health series; how many check names were left out (beyond :data:`MAX_CHECKS` a host)."""
    left = 0
    hosts = health.get("hosts")
    names: list[str] = []
    codes: list[int] = []
    kept_of: list[list[tuple[str, int]]] = []
    for host, doc in hosts.items() if isinstance(hosts, dict) else ():
        if not isinstance(doc, dict):
            continue
        names.append(host)
        codes.append(HEALTH_CODES.get(str(doc.get("verdict")), HEALTH_CODES["unknown"]))
        worst: dict[str, int] = {}
        records = [*(doc.get("checks") or []), *(doc.get("findings") or [])]
        for r in records:
            if not isinstance(r, dict) or r.get("verdict") not in ("pass", "warn", "fail"):
                continue
            check = str(r.get("check"))
            worst[check] = max(worst.get(check, 0), HEALTH_CODES[r["verdict"]])
        kept = sorted(worst.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_CHECKS]  # the worst first
        left += len(worst) - len(kept)
        kept_of.append(sorted(kept))
    fixed = {"fleet": fleet}
    s.add_table(
        "sb_fleet_health_host_status", np.array(codes, float).reshape(-1, 1), {"host": names}, None, fixed
    )
    checks = sorted({check for kept in kept_of for check, _ in kept})
    total = sum(len(kept) for kept in kept_of)
    if len(checks) * len(names) <= max(1 << 20, 8 * total):  # a table: hosts x every check named
        at = {check: i for i, check in enumerate(checks)}
        table = np.full((len(names), len(checks)), np.nan)
        for r, kept in enumerate(kept_of):
            for check, c in kept:
                table[r, at[check]] = c
        s.add_table("sb_fleet_health_check_status", table, {"host": names}, {"check": checks}, fixed)
    else:  # every host its own checks: one by one
        for host, kept in zip(names, kept_of, strict=True):
            for check, c in kept:
                s.add("sb_fleet_health_check_status", {"fleet": fleet, "host": host, "check": check}, c)
    return left


def _worst_codes(block: np.ndarray) -> np.ndarray:
    """Per row (host) of a benchmark's return-code columns: its worst code (a failing one before 0);
    NaN where none is known."""
    known = np.isfinite(block)
    bad = np.where(known & (block != 0), block, -np.inf).max(axis=1, initial=-np.inf)
    return np.where(np.isfinite(bad), bad, np.where(known.any(axis=1), 0.0, np.nan))


def _pooled(block: np.ndarray) -> np.ndarray:
    """Per row (host): the median of its ranks' values; NaN where it has none."""
    if block.shape[1] == 1:
        return block[:, 0]
    out = np.median(block, axis=1)  # NaN where a rank has none: those rows again, without it
    holes = np.flatnonzero(np.isnan(out))
    if holes.size:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a host without any of the ranks: NaN
            out[holes] = np.nanmedian(block[holes], axis=1)
    return out


def _table(columns: list[np.ndarray], n: int) -> np.ndarray:
    """Columns (one value per host) side by side: hosts x columns."""
    return np.column_stack(columns) if columns else np.empty((n, 0))


def _metric_groups(f: Fleet) -> tuple[dict[tuple[str, str], list[int]], dict[str, list[int]]]:
    """The results' columns by (benchmark, metric) (a metric's ranks) and by benchmark (its return codes)."""
    groups: dict[tuple[str, str], list[int]] = {}  # (benchmark, metric) -> columns (ranks)
    codes: dict[str, list[int]] = {}  # benchmark -> its return-code columns
    for c, col in enumerate(f.columns):
        mn = parse_metric(col)
        if mn.is_return_code:
            codes.setdefault(mn.group, []).append(c)
        else:
            groups.setdefault((mn.group, mn.base), []).append(c)
    return groups, codes


def _left_out(groups: Sized, codes: Sized) -> dict[str, int]:
    return {
        "metrics": max(0, len(groups) - MAX_METRICS),
        "benchmarks": max(0, len(codes) - MAX_BENCHMARKS),
    }


def benchmark_names_left_out(f: Fleet) -> dict[str, int]:
    """How many metric and benchmark names of the results the benchmark families leave out (their bounds)."""
    return _left_out(*_metric_groups(f))


def benchmark_series(f: Fleet, settings: PromSettings) -> Series:
    """The benchmark families alone (each metric's values, each benchmark's return codes): they need the
    results, not the judgement, so a large report renders them beside its analysis
    (:mod:`sb_fleet.report.writers.prom_early`), and :func:`series` then leaves them out."""
    s = Series()
    _benchmarks(s, settings.fleet, f, settings.per_rank)
    return s


def _benchmarks(s: Series, fleet: str, f: Fleet, per_rank: bool) -> dict[str, int]:
    """The benchmark series, a table per family (hosts x metrics, in the report's order); how many metric
    and benchmark names were left out (beyond the bounds)."""
    labels = ("fleet", "host", "benchmark", "metric", *(("rank",) if per_rank else ()))
    declared: set[str] = set()

    def family(unit: str | None) -> tuple[str, float, str | None]:
        base = base_unit(unit)
        name, scale, shown = (
            (f"sb_fleet_benchmark_{base[0]}", base[1], None)
            if base
            else ("sb_fleet_benchmark_value", 1.0, unit or "")
        )
        if name not in declared:
            declared.add(name)
            if base:
                s.declare(
                    name, f"A benchmark metric's value on the host, in {base[0].replace('_', ' ')}.", labels
                )
            else:
                s.declare(
                    name,
                    "A benchmark metric's value on the host as measured, in the unit its label names (no base unit).",
                    (*labels, "unit"),
                )
        return name, scale, shown

    s.declare(
        "sb_fleet_benchmark_return_code",
        "A benchmark's return code on the host (the worst of its ranks; 0: it ran).",
        ("fleet", "host", "benchmark"),
    )
    groups, codes = _metric_groups(f)
    left = _left_out(groups, codes)
    codes = dict(list(codes.items())[:MAX_BENCHMARKS])
    values = np.asarray(f.values, dtype=float)
    n = values.shape[0]
    rows = {"host": list(f.hosts)}
    fixed = {"fleet": fleet}
    worst = [_worst_codes(values[:, cols]) for cols in codes.values()]
    s.add_table("sb_fleet_benchmark_return_code", _table(worst, n), rows, {"benchmark": list(codes)}, fixed)
    # Per family: its columns (a metric pooled over its ranks, or one a rank) and their labels.
    tables: dict[str, tuple[list[np.ndarray], dict[str, list[str]]]] = {}
    for (bench, metric), cols in list(groups.items())[:MAX_METRICS]:
        name, scale, unit = family(f.directions.unit(f.columns[cols[0]]))
        columns, col_labels = tables.setdefault(
            name, ([], {"benchmark": [], "metric": [], "unit": [], "rank": []})
        )
        if per_rank:
            ranks = [parse_metric(f.columns[c]).rank for c in cols]
            each = [
                (values[:, c] * scale, "" if rank is None else str(rank))
                for c, rank in zip(cols, ranks, strict=True)
            ]
        else:
            each = [(_pooled(values[:, cols]) * scale, "")]
        for column, rank in each:
            columns.append(column)
            col_labels["benchmark"].append(bench)
            col_labels["metric"].append(metric)
            col_labels["unit"].append(unit or "")
            col_labels["rank"].append(rank)
    for name, (columns, col_labels) in tables.items():
        s.add_table(name, _table(columns, n), rows, col_labels, fixed)
    return left


def _run(s: Series, fleet: str, result: ReportResult, run: RunIdentity) -> None:
    """The run's identity: its info, start and end."""
    s.add(
        "sb_fleet_run_info",
        {
            "fleet": fleet,
            "run_id": run.run_id,
            "config_hash": run.config_hash or "",
            "source": result.source,
            "version": __version__,
        },
        1,
    )
    if run.start is not None:
        s.add("sb_fleet_run_start_timestamp_seconds", {"fleet": fleet}, run.start)
    s.add("sb_fleet_run_end_timestamp_seconds", {"fleet": fleet}, run.end)


def series(
    result: ReportResult,
    settings: PromSettings,
    run: RunIdentity | Callable[[], RunIdentity],
    streaks: Mapping[str, int] | None = None,
    benchmarks: bool = True,
) -> Series:
    """Every series of the run. ``streaks`` (host -> runs in a row the gate counted it failing) defaults to
    what the run's history view says, when it has one. The per-host series are tables (hosts x verdicts,
    hosts x metrics): each host's and metric's label values made safe and escaped once. ``run`` may be a
    function that waits for the run's identity (worked out beside the rest): it is asked when the series
    are first read. ``benchmarks=False``: without the benchmark families (:func:`benchmark_series` has
    them)."""
    fleet = settings.fleet
    s = Series()
    _declare_run(s)
    _declare_hosts(s)
    if isinstance(run, RunIdentity):
        _run(s, fleet, result, run)
    else:
        identity_of = run
        s.defer(lambda: _run(s, fleet, result, identity_of()))
    counts = result.counts()
    total = len(result.hosts)
    s.add("sb_fleet_run_hosts", {"fleet": fleet}, total)
    for verdict in HOST_VERDICTS:
        s.add("sb_fleet_run_verdict_hosts", {"fleet": fleet, "verdict": verdict}, counts.get(verdict, 0))
    if total:
        s.add("sb_fleet_run_pass_ratio", {"fleet": fleet}, counts.get("pass", 0) / total)
    gate = result.gate
    s.add("sb_fleet_gate_passed", {"fleet": fleet}, 1 if gate.passed else 0)
    s.add("sb_fleet_gate_failing_hosts", {"fleet": fleet}, gate.counted)
    s.add("sb_fleet_gate_allowed_failing_hosts", {"fleet": fleet}, gate.allowed_hosts)
    named: dict[str, str] = {}  # a host a gate-level finding names: that finding, where it has none
    for reason in gate.reasons:
        s.add("sb_fleet_gate_failed_by", {"fleet": fleet, "kind": reason.kind, "reason": reason.sentence}, 1)
        if reason.kind != "hosts":
            for name in reason.hosts:
                named.setdefault(name, f"gate failed: {reason.sentence}")
    counted = tuple(result.gates.policy.count)
    if streaks is None and result.history is not None:
        streaks = {h: streak(v, counted) for h, v in result.history.verdicts.items()}
    hosts = result.hosts
    n = len(hosts)
    rows = {"host": [h.name for h in hosts]}
    fixed = {"fleet": fleet}
    which = {v: i for i, v in enumerate(HOST_VERDICTS)}
    onehot = np.zeros((n, len(HOST_VERDICTS)))
    for r, h in enumerate(hosts):
        if h.verdict in which:
            onehot[r, which[h.verdict]] = 1
    s.add_table("sb_fleet_host_verdict", onehot, rows, {"verdict": HOST_VERDICTS}, fixed)
    info = {
        **rows,
        "verdict": [h.verdict for h in hosts],
        "outcome": [h.outcome for h in hosts],
        "gpu_model": [h.gpu_model or "" for h in hosts],
        "finding": [top_finding(h.to_json()) if h.issues else named.get(h.name, "") for h in hosts],
    }
    s.add_table("sb_fleet_host_info", np.ones((n, 1)), info, None, fixed)
    failed = np.array([[1.0 if h.verdict in counted else 0.0] for h in hosts]).reshape(n, 1)
    s.add_table("sb_fleet_host_gate_failed", failed, rows, None, fixed)
    if streaks is not None:
        runs = np.array([float(streaks.get(h.name, 0)) for h in hosts]).reshape(n, 1)
        s.add_table("sb_fleet_host_gate_failed_runs_in_a_row", runs, rows, None, fixed)
    if benchmarks:
        left = _benchmarks(s, fleet, result.fleet, settings.per_rank)
    else:
        left = benchmark_names_left_out(result.fleet)
    left["health_checks"] = _health(s, fleet, result.health) if result.health is not None else 0
    for kind, k in left.items():
        s.add("sb_fleet_exposition_left_out", {"fleet": fleet, "kind": kind}, k)
    return s


HOST_FILE_FAMILIES = ("sb_fleet_run_info", "sb_fleet_run_end_timestamp_seconds")


def host_series(all_series: Series, host: str) -> Series:
    """One host's series (for a textfile directory of its own), with the run's id and end time."""
    return all_series.select({"host": host}, always=HOST_FILE_FAMILIES)


def every_host_series(all_series: Series) -> dict[str, Series]:
    """:func:`host_series` of every host at once: its ``host`` label's value -> its series."""
    return all_series.split("host", always=HOST_FILE_FAMILIES)


def render(
    result: ReportResult, settings: PromSettings, generated: _dt.datetime, made: Series | None = None
) -> bytes:
    """metrics.prom's content (``made``: the run's series, when the caller made them already)."""
    s = made if made is not None else series(result, settings, identity(result, generated))
    return s.render(settings.openmetrics)
