"""The narrow entry points the analysis calls with ``--history PATH``.

1. :func:`assess` (before the verdicts): every host's values against its components' own trailing
   window of healthy runs, and the fleet medians against theirs. Findings are issues with
   ``check: "history"``, ``reference`` = the component's own median over the window, and the
   deviation; with ``gates.history.regression: warn`` they are warnings instead.
2. :func:`conclude` (after the verdicts): records the run (idempotently), then repeat offenders,
   flapping and back-to-healthy hosts from the verdicts of the last runs, and the trends to plot.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sb_fleet.analysis.issues import FAIL, Issue
from sb_fleet.analysis.superbench.metric_names import Directions, parse_metric
from sb_fleet.config.gatespec import HistorySettings
from sb_fleet.history.components import ComponentMap, keys_digest, map_components
from sb_fleet.history.history_store import LOCK_WAIT_S, RunInfo, open_store
from sb_fleet.history.record import JudgedHost, RunMeta, build_record, fleet_medians, run_meta
from sb_fleet.history.regress import (
    Drift,
    OwnBaseline,
    back_to_healthy,
    flapping,
    fleet_drift,
    fleet_scale,
    own_regressions,
    repeat_offenders,
    robust_sigma,
)
from sb_fleet.history.view import HistoryView, Regression

CHECK = "history"
CATEGORY = "HistoryRegression"
TREND_RUNS = 30  # runs shown in a trend plot
TREND_HOSTS = 12  # flagged hosts plotted
TREND_METRICS = 3  # metrics plotted per flagged host
TREND_FAMILIES = 8  # fleet-median plots
MIN_HOSTS_TO_SCALE = 8  # own references follow the fleet median only in fleets of at least this many hosts


@dataclass
class Assessment:
    path: Path
    settings: HistorySettings
    meta: RunMeta
    cmap: ComponentMap
    window: list[RunInfo]
    issues: dict[int, list[Issue]] = field(default_factory=dict)  # fleet row -> history issues
    regressions: list[Regression] = field(default_factory=list)
    drifts: list[Drift] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    cells: np.ndarray | None = None  # tonight's stored cell ids (-1: new), reused when recording
    laps: dict[str, float] = field(default_factory=dict)  # seconds per step (report.json history.seconds)
    keys: str | None = None  # digest of tonight's component keys
    seen: np.ndarray | None = None  # [cells, window runs]: the healthy values the references came from
    seconds: float = 0.0  # the store's queries and the regression arithmetic
    prepare_seconds: float = 0.0  # reading the facts and keying every value by component
    # Each cell's night-to-night variation (relative robust sigma of its healthy past values, where it
    # has at least min_runs of them; NaN elsewhere): a noise the fleet analysis judges with (issue 35)
    own_noise: np.ndarray | None = None


def assess(
    path: Path | str,
    source: Path | str,
    run_dir: Path | None,
    hosts: Sequence[str],
    columns: Sequence[str],
    values: np.ndarray,
    directions: Directions,
    settings: HistorySettings,
    lock_wait: float = LOCK_WAIT_S,
) -> Assessment:
    """Judge tonight's values against each component's own past and the fleet medians against theirs."""
    t0 = time.perf_counter()
    path = Path(path)
    meta = run_meta(source, run_dir, hosts)
    cmap = map_components(hosts, columns, meta.facts)
    keys = keys_digest(cmap)
    prepared = time.perf_counter()
    lap = _Laps()
    with open_store(path, lock_wait=lock_wait) as st:
        lap("open")
        window = st.window(meta.time, settings.window, exclude_key=meta.run_key)
        cells = st.tonight_cells(cmap.components, cmap.metrics, cmap.comp, cmap.metric, keys)
        lap("cells")
        q25, q50, q75, count, seen = st.own_baseline(window, cells, cmap.comp.shape)
        lap("baselines")
        past = st.fleet_medians(window)
    a = Assessment(
        path, settings, meta, cmap, window, prepare_seconds=prepared - t0, cells=cells, laps=lap.laps
    )
    a.keys, a.seen = keys, seen
    with np.errstate(invalid="ignore", divide="ignore"):
        rel = robust_sigma(q25, q75) / np.abs(q50)
    a.own_noise = np.where((count >= settings.min_runs) & np.isfinite(rel), rel, np.nan)
    if not window:
        a.warnings.append(f"history: {path} has no earlier run; this run starts its history")
        a.seconds = time.perf_counter() - prepared
        return a
    dirs = [directions.of(c) for c in columns]
    families = [parse_metric(c).family for c in columns]
    now = {k: v for k, (v, _) in fleet_medians(columns, values).items()}
    # Own references move with the whole fleet (a fleet-wide shift is one drift finding, below); a
    # fleet too small for a stable median is not scaled.
    scale = (
        fleet_scale(families, now, past, settings.min_runs)
        if len(hosts) >= MIN_HOSTS_TO_SCALE
        else np.ones(len(columns))
    )
    center = q50 * scale[None, :]
    if settings.regression != "off":
        reg = own_regressions(
            values,
            OwnBaseline(center=center, sigma=robust_sigma(q25, q75) * scale[None, :], count=count),
            dirs,
            settings.threshold,
            settings.min_deviation,
            settings.min_runs,
        )
        rows, cols = np.nonzero(reg.flagged)
        for r, c in zip(rows.tolist(), cols.tolist(), strict=True):
            comp = cmap.components[int(cmap.comp[r, c])]
            g = Regression(
                host=hosts[r],
                metric=columns[c],
                component=comp,
                value=float(values[r, c]),
                reference=float(center[r, c]),
                deviation=float(reg.deviation[r, c]),
                sigmas=float(reg.sigmas[r, c]),
                runs=int(count[r, c]),
                fleet_shift=float(scale[c] - 1.0),
            )
            a.regressions.append(g)
            if settings.regression == "fail":
                a.issues.setdefault(r, []).append(
                    Issue(
                        metric=g.metric,
                        value=g.value,
                        reference=g.reference,
                        deviation=g.deviation,
                        check=CHECK,
                        category=CATEGORY,
                        severity=FAIL,
                        detail=g.sentence(),
                    )
                )
        if settings.regression == "warn" and a.regressions:
            shown = ", ".join(f"{g.host} {g.metric} {g.deviation:+.1%}" for g in a.regressions[:5])
            more = f" and {len(a.regressions) - 5} more" if len(a.regressions) > 5 else ""
            a.warnings.append(f"history: {len(a.regressions)} regression(s) against own past: {shown}{more}")
    if settings.drift != "off":
        fam_dir = dict(zip(families, dirs, strict=True))
        a.drifts = fleet_drift(
            now, past, fam_dir, settings.drift_min_deviation, settings.drift_threshold, settings.min_runs
        )
        for d in a.drifts:
            since = f" since run {d.since}" if d.since else ""
            a.warnings.append(
                f"history: fleet median of {d.family} {d.deviation:+.1%} against its median over the "
                f"last {d.runs} runs{since}"
                + (" (fails the gate: gates.history.drift)" if settings.drift == "fail" else "")
            )
    lap("judge")
    a.seconds = time.perf_counter() - prepared
    return a


def conclude(
    a: Assessment,
    hosts: Sequence[str],
    columns: Sequence[str],
    values: np.ndarray,
    judged: Sequence[JudgedHost],
    gate_passed: bool,
    lock_wait: float = LOCK_WAIT_S,
) -> HistoryView:
    """Record the run, then judge the verdict sequences and fetch the trends to plot."""
    t0 = time.perf_counter()
    s = a.settings
    drift_fails = s.drift == "fail" and bool(a.drifts)
    final_gate = gate_passed and not drift_fails
    rec = build_record(a.meta, hosts, columns, values, a.cmap, judged, final_gate)
    rec.cells, rec.keys = a.cells, a.keys
    t_build = time.perf_counter() - t0
    names = [j.name for j in judged]
    tonight = {j.name: j.verdict for j in judged}
    with open_store(a.path, lock_wait=lock_wait) as st:
        t_rec = time.perf_counter()
        status = st.record(rec)
        t_rec = time.perf_counter() - t_rec
        before = st.window(a.meta.time, max(s.offenders_n, TREND_RUNS) - 1, exclude_key=a.meta.run_key)
        lap = _Laps()
        seqs = st.verdicts(before[-(s.offenders_n - 1) :] if s.offenders_n > 1 else [], names)
        lap("verdicts")
        trend_runs = [*before[-(TREND_RUNS - 1) :], *st.window_of(a.meta.run_key)]
        flagged = _trend_hosts(a, judged)
        trends = _window_trends(a, hosts, columns, values, dict(flagged))
        lap("host trends")
        fams = [d.family for d in a.drifts]
        fams += [parse_metric(m).family for _, ms in flagged for m in ms]
        fams = list(dict.fromkeys(fams))[:TREND_FAMILIES] or _default_families(columns)
        fleet_trends = {f: [(k, m) for k, m, _ in st.metric_trend(f, trend_runs)] for f in fams}
        lap("fleet trends")
    for h in names:
        seqs[h] = [*seqs.get(h, []), tonight[h]]
    offenders = repeat_offenders(seqs, s.offenders_k, s.offenders_n)
    flaps = flapping(seqs, s.offenders_n, s.flapping_min_flips)
    healed = back_to_healthy(seqs)
    warnings: list[str] = []
    if offenders:
        warnings.append(
            f"history: {len(offenders)} repeat offender(s) (failed in {s.offenders_k}+ of their last "
            f"{s.offenders_n} runs): {_names(offenders)}"
            + (" (quarantined: gates.history.offenders)" if s.offenders == "quarantine" else "")
        )
    if flaps:
        warnings.append(f"history: {len(flaps)} host(s) flapping between pass and fail: {_names(flaps)}")
    if healed:
        warnings.append(f"history: {len(healed)} host(s) back to healthy after failing: {_names(healed)}")
    return HistoryView(
        path=str(a.path),
        run_key=a.meta.run_key,
        recorded=status,
        window=[r.run_key for r in a.window],
        settings=s,
        regressions=a.regressions,
        drifts=a.drifts,
        offenders=offenders,
        flapping=flaps,
        back_to_healthy=healed,
        quarantine=sorted(offenders) if s.offenders == "quarantine" else [],
        verdicts=seqs,
        gate_failure=(
            f"fleet-median drift in {len(a.drifts)} metric famil{'y' if len(a.drifts) == 1 else 'ies'}"
            if drift_fails
            else None
        ),
        warnings=warnings,
        host_trends=trends,
        fleet_trends=fleet_trends,
        query_seconds=a.seconds + (time.perf_counter() - t0 - t_build - t_rec),
        record_seconds=t_build + t_rec,
        prepare_seconds=a.prepare_seconds,
        laps={**a.laps, **lap.laps, "record": t_build + t_rec},
    )


class _Laps:
    """Seconds since the previous call, by name."""

    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._t = time.perf_counter()

    def __call__(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = round(now - self._t, 3)
        self._t = now


def _window_trends(
    a: Assessment,
    hosts: Sequence[str],
    columns: Sequence[str],
    values: np.ndarray,
    wanted: dict[str, list[str]],
) -> dict[str, dict[str, list[tuple[str, float]]]]:
    """Each wanted (host, metric): its healthy values over the window, from the rows the references were
    computed from (no further query), and tonight's value last."""
    out: dict[str, dict[str, list[tuple[str, float]]]] = {}
    row = {h: i for i, h in enumerate(hosts)}
    col = {c: i for i, c in enumerate(columns)}
    keys = [r.run_key for r in a.window]
    for host, metrics in wanted.items():
        for m in metrics:
            r, c = row.get(host), col.get(m)
            if r is None or c is None:
                continue
            seq: list[tuple[str, float]] = []
            if a.seen is not None and a.seen.shape[1] == len(keys):
                past = a.seen[r * len(columns) + c]
                seq = [(k, float(v)) for k, v in zip(keys, past, strict=True) if np.isfinite(v)]
            seq.append((a.meta.run_key, float(values[r, c])))
            out.setdefault(host, {})[m] = seq
    return out


def _names(d: dict[str, int]) -> str:
    hosts = sorted(d)
    return ", ".join(hosts[:8]) + (f" and {len(hosts) - 8} more" if len(hosts) > 8 else "")


def _trend_hosts(a: Assessment, judged: Sequence[JudgedHost]) -> list[tuple[str, list[str]]]:
    """The hosts to plot and their metrics: history findings first, then other failing hosts."""
    out: dict[str, list[str]] = {}
    for g in sorted(a.regressions, key=lambda g: -abs(g.sigmas)):
        ms = out.setdefault(g.host, [])
        if len(ms) < TREND_METRICS and g.metric not in ms:
            ms.append(g.metric)
    for j in judged:
        if j.verdict != "fail" or j.name in out:
            continue
        ms = [i.metric for i in j.issues if getattr(i, "metric", "")][:TREND_METRICS]
        if ms:
            out[j.name] = list(dict.fromkeys(ms))
    return list(out.items())[:TREND_HOSTS]


def _default_families(columns: Sequence[str]) -> list[str]:
    fams = [parse_metric(c).family for c in columns if not parse_metric(c).is_return_code]
    return list(dict.fromkeys(fams))[:TREND_FAMILIES]
