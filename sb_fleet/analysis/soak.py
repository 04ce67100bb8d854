"""Judgement across a soak's rounds, per node: what a single run cannot see (pure, no I/O).

A soak runs the same benchmarks round after round for hours. Per node, :func:`judge_node` reads its
ordered rounds and finds:

* ``counter_growth``: a watched counter (XIDs, ECC, row remaps, InfiniBand symbol errors and link-downs,
  NVLink replays) that grew during the soak, between its first and last reading and between any two
  readings, with the values and the rounds and times where it grew (``counter_reset``: one that went
  down, which a healthy soak never shows either: cleared by hand, or the node rebooted; reported, not failed);
* ``throttled``: windows in which the GPU reported a slowdown (thermal, power brake);
* ``drift``: a figure whose least-squares slope over the soak, times the soak's span, is a loss beyond
  ``k`` standard errors *and* beyond ``min_change``; the standard error comes from the round-to-round
  noise (the fit's residuals, never below the values' own measured noise), so a flat noisy series passes;
* ``failed_rounds``: rounds the node failed (an intermittent node: round 3 of 5), ``missing_rounds``:
  rounds it has no record of, ``no_rounds``: none at all.

Every finding carries its kind, the metric or counter, the measured values, the criterion and the rounds.
docs/campaigns.md, "Judging a soak", states the rules and their reasons.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from sb_fleet.analysis.change_point import NoiseSource, judge_changes
from sb_fleet.analysis.superbench.metric_names import direction_from_name, parse_metric
from sb_fleet.config.campaign_spec import Stage

FindingKind = Literal[
    "counter_growth", "counter_reset", "throttled", "drift", "failed_rounds", "missing_rounds", "no_rounds"
]


@dataclass(frozen=True)
class Measurement:
    """One figure of one round, with its own relative noise where the benchmark measured it (the relative
    standard deviation of its timed samples, as ``noise-summary.jsonl`` holds it)."""

    value: float
    noise: float | None = None


@dataclass(frozen=True)
class SoakRound:
    """One node's round. Round indices are 1-based (round 7 of 10). ``counters`` are read at the round's end,
    ``counters_start`` at its start where the runner read them (then growth within the first round counts
    too); a counter of one GPU, port or link is ``name[instance]`` (``ib.symbol_error[mlx5_0/1]``)."""

    index: int
    start: datetime
    end: datetime
    ok: bool = True
    reason: str = ""
    metrics: Mapping[str, Measurement | float] = field(default_factory=dict)
    counters: Mapping[str, float] = field(default_factory=dict)
    counters_start: Mapping[str, float] | None = None
    throttled_windows: int = 0
    run_dir: str | None = None


@dataclass(frozen=True)
class SoakCriteria:
    """What a node's soak must hold to; :meth:`from_stage` reads it from the campaign file's soak stage."""

    counters: tuple[str, ...] | None = None  # watched counter names; None: every counter the rounds carry
    counter_max_growth: float = 0.0
    max_failed_rounds: int = 0
    max_throttled_windows: int = 0
    drift_k: float = 3.0
    drift_min_change: float = 0.03
    drift_min_rounds: int = 6
    drift_metrics: tuple[str, ...] = ()  # empty: every metric the rounds report
    expected_rounds: int | None = None  # rounds 1..n every node should have; a missing one fails

    @classmethod
    def from_stage(cls, stage: Stage) -> SoakCriteria:
        drift = stage.drift_settings
        return cls(
            counters=stage.counters,
            counter_max_growth=float(stage.counter_max_growth),
            max_failed_rounds=stage.max_failed_rounds,
            max_throttled_windows=stage.max_throttled_windows,
            drift_k=drift.k,
            drift_min_change=drift.min_change,
            drift_min_rounds=drift.min_rounds,
            drift_metrics=tuple(drift.metrics),
            expected_rounds=stage.rounds or None,
        )


@dataclass(frozen=True)
class SoakFinding:
    kind: FindingKind
    subject: str  # the metric, the counter (with its instance), or "rounds"
    fails: bool
    message: str  # one line a person acts on
    criterion: str
    values: Mapping[str, Any]  # the measured values (JSON-able)
    rounds: tuple[int, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "subject": self.subject,
            "fails": self.fails,
            "message": self.message,
            "criterion": self.criterion,
            "values": dict(self.values),
            "rounds": list(self.rounds),
        }


@dataclass(frozen=True)
class Trend:
    """One figure's change over the soak, in relative terms (log of value / median): a trend (the
    least-squares slope times the span) or a step (the level after a round against the level before),
    whichever fails, else the one closer to failing (:mod:`sb_fleet.analysis.change_point`)."""

    metric: str
    direction: int  # +1 higher is better, -1 lower, 0 unknown (a change either way counts)
    rounds: tuple[int, ...]
    values: tuple[float, ...]
    change: float  # relative change over the soak (-0.09: 9% lower at the end, or after the step)
    stderr: float  # of the change, in the same (log) units
    noise: float  # the per-round relative noise the stderr used
    noise_source: NoiseSource
    threshold: float  # the relative change beyond which it fails, signed the way that is worse (-0.31: a loss of 31%)
    fails: bool
    model: Literal["trend", "step"] = "trend"
    since_round: int | None = None  # a step: the first round at the new level
    critical: float = 0.0  # the t-statistic the change had to exceed (k sigmas, for the rounds judged)

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "direction": self.direction,
            "rounds": list(self.rounds),
            "values": list(self.values),
            "change": self.change,
            "stderr": self.stderr,
            "noise": self.noise,
            "noise_source": self.noise_source,
            "threshold": self.threshold,
            "fails": self.fails,
            "model": self.model,
            "since_round": self.since_round,
            "critical": self.critical,
        }


@dataclass(frozen=True)
class NodeSoak:
    host: str
    passed: bool
    rounds: int
    failed_rounds: tuple[int, ...]
    findings: tuple[SoakFinding, ...]
    trends: tuple[Trend, ...]
    not_judged: Mapping[str, str]  # metric -> why its drift was not judged

    @property
    def failures(self) -> tuple[SoakFinding, ...]:
        return tuple(f for f in self.findings if f.fails)

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "passed": self.passed,
            "rounds": self.rounds,
            "failed_rounds": list(self.failed_rounds),
            "findings": [f.to_dict() for f in self.findings],
            "trends": [t.to_dict() for t in self.trends],
            "not_judged": dict(self.not_judged),
        }


def _iso(t: datetime) -> str:
    return t.isoformat(timespec="seconds")


def _rounds_text(rounds: Sequence[int]) -> str:
    shown = ", ".join(str(r) for r in rounds[:10])
    return shown + (f" and {len(rounds) - 10} more" if len(rounds) > 10 else "")


def _watched(key: str, counters: tuple[str, ...] | None) -> bool:
    return counters is None or key.split("[", 1)[0] in counters


def _counter_findings(rounds: Sequence[SoakRound], crit: SoakCriteria) -> list[SoakFinding]:
    readings: dict[str, list[tuple[int, datetime, float]]] = {}
    for r in rounds:
        for when, reading in ((r.start, r.counters_start), (r.end, r.counters)):
            for key, v in (reading or {}).items():
                if _watched(key, crit.counters) and isinstance(v, (int, float)) and math.isfinite(v):
                    readings.setdefault(key, []).append((r.index, when, float(v)))
    out: list[SoakFinding] = []
    for key in sorted(readings):
        series = readings[key]
        steps: list[dict[str, Any]] = []
        resets: list[dict[str, Any]] = []
        growth = 0.0
        for (_i0, t0, v0), (i1, t1, v1) in zip(series, series[1:], strict=False):
            if v1 > v0:
                growth += v1 - v0
                steps.append({"round": i1, "from": v0, "to": v1, "between": [_iso(t0), _iso(t1)]})
            elif v1 < v0:
                resets.append({"round": i1, "from": v0, "to": v1, "between": [_iso(t0), _iso(t1)]})
        first, last = series[0], series[-1]
        values: dict[str, Any] = {
            "first": first[2],
            "first_time": _iso(first[1]),
            "last": last[2],
            "last_time": _iso(last[1]),
            "growth": growth,
            "steps": steps,
        }
        criterion = f"grows by at most {crit.counter_max_growth:g} over the soak"
        if growth > crit.counter_max_growth:
            grew = sorted({s["round"] for s in steps})
            detail = "; ".join(
                f"round {s['round']}: {s['from']:g} -> {s['to']:g} ({s['between'][1]})" for s in steps[:5]
            )
            out.append(
                SoakFinding(
                    kind="counter_growth",
                    subject=key,
                    fails=True,
                    message=(
                        f"{key} grew by {growth:g} during the soak ({first[2]:g} at {values['first_time']} -> "
                        f"{last[2]:g} at {values['last_time']}): {detail}"
                    ),
                    criterion=criterion,
                    values=values,
                    rounds=tuple(grew),
                )
            )
        if resets:
            out.append(
                SoakFinding(
                    kind="counter_reset",
                    subject=key,
                    fails=False,
                    message=(
                        f"{key} went down in round {_rounds_text([x['round'] for x in resets])} "
                        f"({resets[0]['from']:g} -> {resets[0]['to']:g}): cleared by hand, or the node restarted"
                    ),
                    criterion="a counter never goes down during a soak",
                    values={**values, "resets": resets},
                    rounds=tuple(sorted({x["round"] for x in resets})),
                )
            )
    return out


def _round_findings(rounds: Sequence[SoakRound], crit: SoakCriteria) -> list[SoakFinding]:
    out: list[SoakFinding] = []
    n = len(rounds)
    if n == 0:
        return [
            SoakFinding(
                kind="no_rounds",
                subject="rounds",
                fails=True,
                message="no soak round of this node was recorded",
                criterion="every node runs every round",
                values={"rounds": 0, "expected": crit.expected_rounds},
                rounds=(),
            )
        ]
    failed = [r for r in rounds if not r.ok]
    if failed:
        idx = [r.index for r in failed]
        reasons = {str(r.index): r.reason for r in failed}
        first = failed[0]
        out.append(
            SoakFinding(
                kind="failed_rounds",
                subject="rounds",
                fails=len(failed) > crit.max_failed_rounds,
                message=(
                    f"failed {len(failed)} of {n} rounds: round {_rounds_text(idx)}"
                    + (f" (round {first.index}: {first.reason})" if first.reason else "")
                ),
                criterion=f"at most {crit.max_failed_rounds} failed round(s)",
                values={"failed": len(failed), "rounds": n, "reasons": reasons},
                rounds=tuple(idx),
            )
        )
    if crit.expected_rounds:
        have = {r.index for r in rounds}
        missing = [i for i in range(1, crit.expected_rounds + 1) if i not in have]
        if missing:
            out.append(
                SoakFinding(
                    kind="missing_rounds",
                    subject="rounds",
                    fails=True,
                    message=f"no record of {len(missing)} of {crit.expected_rounds} rounds: round {_rounds_text(missing)}",
                    criterion="every node runs every round",
                    values={"missing": len(missing), "expected": crit.expected_rounds},
                    rounds=tuple(missing),
                )
            )
    throttled = [(r.index, r.throttled_windows) for r in rounds if r.throttled_windows > 0]
    total = sum(w for _i, w in throttled)
    if throttled:
        out.append(
            SoakFinding(
                kind="throttled",
                subject="throttled_windows",
                fails=total > crit.max_throttled_windows,
                message=(
                    f"{total} throttled window(s) in {len(throttled)} of {n} rounds: "
                    + ", ".join(f"round {i}: {w}" for i, w in throttled[:10])
                ),
                criterion=f"at most {crit.max_throttled_windows} throttled window(s) over the soak",
                values={"total": total, "per_round": {str(i): w for i, w in throttled}},
                rounds=tuple(i for i, _w in throttled),
            )
        )
    return out


def _value(m: Measurement | float) -> tuple[float, float | None]:
    if isinstance(m, Measurement):
        return float(m.value), m.noise
    return float(m), None


def _selected(metric: str, wanted: tuple[str, ...]) -> bool:
    if not wanted:
        return not parse_metric(metric).is_return_code
    base = parse_metric(metric).base
    return metric in wanted or base in wanted


def trend(
    metric: str,
    points: Sequence[tuple[int, float, float, float | None]],
    direction: int,
    k: float,
    min_change: float,
) -> Trend:
    """The drift judgement of one figure from ``(round, time in hours, value, own relative noise)`` points
    (at least 3, every value > 0): a step and a trend, both judged (:func:`change_point.judge_changes`)."""
    rounds = tuple(p[0] for p in points)
    vals = [p[2] for p in points]
    ch, fails = judge_changes([p[1] for p in points], vals, [p[3] for p in points], direction, k, min_change)
    threshold_log = ch.threshold(min_change)
    # The limit on the side that is worse, as a relative change as `change` is: a loss of log-size t is
    # expm1(-t) (-36.9% for t = log 1.584), a gain expm1(t) (+58.4%).
    down = direction > 0 or (direction == 0 and ch.change < 0)
    return Trend(
        metric=metric,
        direction=direction,
        rounds=rounds,
        values=tuple(vals),
        change=math.expm1(ch.change),
        stderr=ch.stderr,
        noise=ch.noise,
        noise_source=ch.noise_source,
        threshold=math.expm1(-threshold_log if down else threshold_log),
        fails=fails,
        model=ch.model,
        since_round=rounds[ch.at] if ch.at is not None else None,
        critical=ch.critical,
    )


def _drift(
    rounds: Sequence[SoakRound], crit: SoakCriteria, direction: Callable[[str], int]
) -> tuple[list[Trend], dict[str, str]]:
    ok = [r for r in rounds if r.ok]
    t0 = min((r.start for r in ok), default=None)
    series: dict[str, list[tuple[int, float, float, float | None]]] = {}
    bad: dict[str, str] = {}
    for r in ok:
        mid = r.start + (r.end - r.start) / 2
        hours = (mid - t0).total_seconds() / 3600 if t0 is not None else 0.0
        for name, m in r.metrics.items():
            if not _selected(name, crit.drift_metrics):
                continue
            v, noise = _value(m)
            if not math.isfinite(v) or v <= 0:
                bad[name] = f"round {r.index}: value {v!r} is not a positive number"
                continue
            series.setdefault(name, []).append((r.index, hours, v, noise))
    trends: list[Trend] = []
    not_judged: dict[str, str] = {}
    for name in sorted(set(series) | set(bad)):
        pts = series.get(name, [])
        if name in bad:
            not_judged[name] = bad[name]
        elif len(pts) < crit.drift_min_rounds:
            not_judged[name] = f"{len(pts)} round(s) with a value, drift needs {crit.drift_min_rounds}"
        else:
            trends.append(trend(name, pts, direction(name), crit.drift_k, crit.drift_min_change))
    for name in crit.drift_metrics:
        if not any(_selected(s, (name,)) for s in series) and name not in not_judged:
            not_judged[name] = "no round reported it"
    return trends, not_judged


def _drift_finding(t: Trend, crit: SoakCriteria) -> SoakFinding:
    way = "higher is better" if t.direction > 0 else "lower is better" if t.direction < 0 else "either way"
    if t.model == "step" and t.since_round is not None:
        at = t.rounds.index(t.since_round)
        what = (
            f"a step from round {t.since_round} ({len(t.rounds)} rounds judged; median "
            f"{statistics.median(t.values[:at]):.6g} before, {statistics.median(t.values[at:]):.6g} from it; {way})"
        )
        source = {
            "within segments": "within the two segments",
            "within segments, one round left out": ("within the two segments, one round left out"),
        }.get(t.noise_source, f"from its {t.noise_source}")
    else:
        what = f"a trend over {len(t.rounds)} rounds ({t.values[0]:.6g} -> {t.values[-1]:.6g}; {way})"
        source = f"from its {t.noise_source}"
    return SoakFinding(
        kind="drift",
        subject=t.metric,
        fails=True,
        message=(
            f"{t.metric} drifted {t.change:+.1%}: {what}, beyond {t.threshold:+.1%} "
            f"(per-round noise {t.noise:.1%}, {source})"
        ),
        criterion=(
            f"neither a step nor a trend over the soak beyond max({crit.drift_k:g} sigmas of its noise, "
            f"{crit.drift_min_change:.0%})"
        ),
        values={
            "change": t.change,
            "threshold": t.threshold,
            "stderr": t.stderr,
            "noise": t.noise,
            "noise_source": t.noise_source,
            "model": t.model,
            "since_round": t.since_round,
            "critical_t": t.critical,
            "values": list(t.values),
        },
        rounds=t.rounds if t.since_round is None else tuple(r for r in t.rounds if r >= t.since_round),
    )


def judge_node(
    host: str,
    rounds: Sequence[SoakRound],
    criteria: SoakCriteria,
    direction: Callable[[str], int] = direction_from_name,
) -> NodeSoak:
    """One node's soak: its rounds (any order; sorted by index here) against ``criteria``.
    ``direction(metric)`` is +1 where higher is better, -1 where lower is (``*_time``, latency), 0 unknown."""
    ordered = sorted(rounds, key=lambda r: r.index)
    findings = _round_findings(ordered, criteria)
    findings += _counter_findings(ordered, criteria)
    trends, not_judged = _drift(ordered, criteria, direction)
    findings += [_drift_finding(t, criteria) for t in trends if t.fails]
    return NodeSoak(
        host=host,
        passed=not any(f.fails for f in findings),
        rounds=len(ordered),
        failed_rounds=tuple(r.index for r in ordered if not r.ok),
        findings=tuple(findings),
        trends=tuple(trends),
        not_judged=not_judged,
    )


def judge_soak(
    rounds_by_host: Mapping[str, Sequence[SoakRound]],
    criteria: SoakCriteria,
    direction: Callable[[str], int] = direction_from_name,
) -> dict[str, NodeSoak]:
    """Every node's soak judgement (:func:`judge_node`), by host."""
    return {host: judge_node(host, rounds, criteria, direction) for host, rounds in rounds_by_host.items()}
