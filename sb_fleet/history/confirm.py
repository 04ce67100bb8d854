"""Confirm before condemning (``validate --confirm``), as pure functions.

1. :func:`plan_confirmation`: which benchmarks to run again on which flagged host (the benchmarks
   its findings came from), plus the union of them on a few healthy *control* hosts of the same GPU
   model, so that a change of the whole environment between the two runs is seen and taken out.
2. :func:`judge_confirmation`: for every flagged host, did its findings reproduce in the second run?
   A numeric finding reproduces when the re-run value is again on the bad side of the reference
   (scaled by how much the controls moved between the runs) beyond the limit that flagged it, that
   limit computed under the re-run's own noise (:func:`rerun_limit`), and beyond the controls'
   run-to-run noise; a failed benchmark reproduces when it fails again or reports nothing.
   A host none of whose findings reproduce is ``flaky``, not failed; one whose re-run says nothing
   (unreachable, no results) stays ``confirmed``: a host is never cleared without evidence.
   A combined finding (``majority-combined``, ``fleet-combined``, ``sibling-combined``: the metrics
   of one benchmark on one GPU or host together) is seen again as the mean of those metrics.

What plain ``validate`` confirms (the default; ``--confirm`` re-runs every failing host):
:func:`select_for_confirmation` picks the hosts that fail on the fleet's statistics alone
(:data:`INFERRED_CHECKS`; no rule, baseline, limit, SKU, history, return code or missing result says
so), worst first by their findings' noise sigmas, at most :func:`confirm_limit` of them.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from sb_fleet.analysis.issues import FlagLimit
from sb_fleet.analysis.majority import disagreement_key, inconsistency_key
from sb_fleet.analysis.populations import split_key
from sb_fleet.analysis.stats import MAD_TO_SIGMA
from sb_fleet.analysis.superbench.metric_names import parse_metric
from sb_fleet.analysis.verdict import INFERRED_CHECKS

CONFIRMED, FLAKY = "confirmed", "flaky"
DEFAULT_CONTROLS = 3
# Checks whose findings are measurements a re-run can repeat (not "missing-host" or "outcome").
_NOT_REPEATABLE = {"missing-host", "outcome"}
# The checks that infer a fault from the fleet's own statistics: a host failed by these alone is what
# plain validate confirms before it condemns (every other check names an explicit reason).
DEFAULT_MAX_PERCENT = 5.0
DEFAULT_MIN_HOSTS = 2
DEFAULT_ALL_BELOW = 20  # a fleet of fewer hosts has every candidate re-run (majority agreement's range)
# A finding reproduces only beyond the run-to-run noise the control hosts measured: the healthy controls'
# own moves between the two runs (after the common shift) give that noise, and the flagged host's repeat
# must lie this many of its sigmas beyond the reference (3: one-sided 0.13% for a healthy host).
RERUN_SIGMAS = 3.0
_D2 = {2: 1.128, 3: 1.693}  # expected range of n normal values, in sigmas


class FindingLike(Protocol):
    @property
    def metric(self) -> str: ...
    @property
    def flag_limit(self) -> FlagLimit | None: ...
    @property
    def value(self) -> float | None: ...
    @property
    def reference(self) -> float | None: ...
    @property
    def deviation(self) -> float | None: ...
    @property
    def check(self) -> str: ...


class HostLike(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def verdict(self) -> str: ...
    @property
    def gpu_model(self) -> str | None: ...
    @property
    def issues(self) -> Sequence[Any]: ...


def benchmark_of(metric: str) -> str:
    """The config's benchmark name of a results column: its first path part
    (``gemm-flops/fp16_tc_flops:3`` -> ``gemm-flops``; ``model-benchmarks:bert/pytorch-bert/...`` ->
    ``model-benchmarks:bert``)."""
    return metric.split("/", 1)[0]


@dataclass(frozen=True)
class ConfirmPlan:
    benchmarks: dict[str, list[str]]  # flagged host -> benchmarks to run again
    controls: list[str]  # healthy hosts that run the union of those benchmarks

    @property
    def all_benchmarks(self) -> list[str]:
        return sorted({b for bs in self.benchmarks.values() for b in bs})

    @property
    def hosts(self) -> list[str]:
        return [*self.benchmarks, *self.controls]

    def to_json(self) -> dict[str, Any]:
        return {"benchmarks": self.benchmarks, "controls": self.controls}


def plan_confirmation(
    hosts: Sequence[HostLike],
    controls: int = DEFAULT_CONTROLS,
    verdicts: Sequence[str] = ("fail",),
    only: Collection[str] | None = None,
) -> ConfirmPlan:
    """The re-runs: each flagged host's benchmarks (of the hosts in ``only`` when given), and
    ``controls`` passing hosts per GPU model of the flagged ones, spread evenly over the sorted passing
    hosts (deterministic: the same run gives the same plan)."""
    todo: dict[str, list[str]] = {}
    models: set[str | None] = set()
    for h in hosts:
        if h.verdict not in verdicts or (only is not None and h.name not in only):
            continue
        benches = sorted(
            {benchmark_of(i.metric) for i in h.issues if i.metric and i.check not in _NOT_REPEATABLE}
        )
        if benches:
            todo[h.name] = benches
            models.add(h.gpu_model)
    chosen: list[str] = []
    if todo and controls > 0:
        for model in sorted(models, key=lambda m: m or ""):
            pool = sorted(h.name for h in hosts if h.verdict == "pass" and h.gpu_model == model)
            if not pool:
                continue
            k = min(controls, len(pool))
            picks = [pool[(2 * i + 1) * len(pool) // (2 * k)] for i in range(k)]
            chosen += [p for p in picks if p not in chosen]
    return ConfirmPlan(benchmarks=todo, controls=chosen)


def on_statistics_alone(h: HostLike) -> bool:
    """A failing host every finding of which comes from the fleet's statistics (:data:`INFERRED_CHECKS`):
    no rule, baseline, limit, SKU reference, history, return code, missing result or outcome says so."""
    return h.verdict == "fail" and bool(h.issues) and all(i.check in INFERRED_CHECKS for i in h.issues)


def confirm_limit(
    n_hosts: int,
    max_percent: float = DEFAULT_MAX_PERCENT,
    min_hosts: int = DEFAULT_MIN_HOSTS,
    max_hosts: int | None = None,
    all_below: int = DEFAULT_ALL_BELOW,
) -> int:
    """How many hosts plain validate re-runs at most: every one in a fleet of fewer than ``all_below``
    hosts (a rack: its re-run costs one benchmark pass), else max(min_hosts, max_percent of the hosts,
    rounded down); never more than ``max_hosts`` when given."""
    limit = n_hosts if n_hosts < all_below else max(min_hosts, math.floor(n_hosts * max_percent / 100 + 1e-9))
    return limit if max_hosts is None else min(limit, max_hosts)


def _worst_first(h: HostLike) -> tuple[float, float, str]:
    sigmas = [getattr(i, "sigmas", None) for i in h.issues]
    devs = [i.deviation for i in h.issues]
    s = max((float(x) for x in sigmas if x is not None and math.isfinite(x)), default=0.0)
    d = max((abs(float(x)) for x in devs if x is not None and math.isfinite(x)), default=0.0)
    return (-s, -d, h.name)


@dataclass(frozen=True)
class Selection:
    """The hosts plain validate confirms (worst first), those over the bound, and the failing hosts
    left alone because an explicit check says they fail."""

    chosen: tuple[str, ...]
    beyond: tuple[str, ...]
    explicit: tuple[str, ...]
    limit: int

    def to_json(self) -> dict[str, Any]:
        return {
            "chosen": list(self.chosen),
            "not_confirmed": list(self.beyond),
            "explicit": list(self.explicit),
            "limit": self.limit,
        }


def select_for_confirmation(hosts: Sequence[HostLike], limit: int) -> Selection:
    """The failing hosts on the fleet's statistics alone, worst first (the largest noise sigmas of their
    findings, then the largest deviation, then the name): the first ``limit`` are re-run, the rest keep
    their first verdict."""
    alone = sorted((h for h in hosts if on_statistics_alone(h)), key=_worst_first)
    names = tuple(h.name for h in alone)
    explicit = tuple(sorted(h.name for h in hosts if h.verdict == "fail" and h.name not in set(names)))
    k = max(0, limit)
    return Selection(chosen=names[:k], beyond=names[k:], explicit=explicit, limit=k)


@dataclass(frozen=True)
class Replay:
    """One finding seen again: did it reproduce?"""

    metric: str
    check: str
    first: float | None  # the first run's deviation (or value, for a return code)
    again: float | None  # the re-run's deviation against the control-scaled reference (or value)
    reproduced: bool
    why: str
    first_value: float | None = None  # the measured values of both runs (None for a combined finding)
    again_value: float | None = None
    reference: float | None = None  # what the re-run was judged against (the control-scaled reference)
    limit: float | None = None  # the deviation the re-run had to clear (signed: the bad side's sign)
    first_limit: float | None = None  # the limit that flagged it in the first run (None: not recorded)
    limit_basis: str = ""  # how ``limit`` was set, in words


@dataclass(frozen=True)
class Confirmation:
    host: str
    result: str  # confirmed | flaky
    replays: tuple[Replay, ...]

    def sentence(self) -> str:
        seen = "; ".join(f"{r.metric}: {r.why}" for r in self.replays[:3])
        if self.result == FLAKY:
            return f"did not reproduce in the confirmation run ({seen})"
        return f"reproduced in the confirmation run ({seen})"


def control_ratio(
    metric: str, first: Mapping[str, Mapping[str, float]], again: Mapping[str, Mapping[str, float]]
) -> float:
    """Median over the control hosts of (re-run / first run) for ``metric``'s family; 1 without data."""
    fam = parse_metric(metric).family
    ratios: list[float] = []
    for host, vals in again.items():
        before = first.get(host, {})
        for m, v in vals.items():
            if parse_metric(m).family != fam:
                continue
            b = before.get(m)
            if b is not None and b != 0 and math.isfinite(b) and math.isfinite(v):
                ratios.append(v / b)
    if not ratios:
        return 1.0
    ratios.sort()
    mid = len(ratios) // 2
    return ratios[mid] if len(ratios) % 2 else (ratios[mid - 1] + ratios[mid]) / 2


def _robust_scale(xs: Sequence[float]) -> float | None:
    """The sigma of ``xs``: the range over d2 for 2-3 values, 1.4826 x MAD from 4; None below 2."""
    ok = sorted(x for x in xs if math.isfinite(x))
    if len(ok) < 2:
        return None
    if len(ok) in _D2:
        return (ok[-1] - ok[0]) / _D2[len(ok)]
    med = statistics.median(ok)
    return MAD_TO_SIGMA * statistics.median(abs(x - med) for x in ok)


def _log_moves(
    keep: Callable[[str], bool],
    controls_first: Mapping[str, Mapping[str, float]],
    controls_rerun: Mapping[str, Mapping[str, float]],
) -> list[float]:
    """Each control host's move between the runs: the mean of ln(re-run / first) over its metrics that
    ``keep`` accepts (positive, finite values only)."""
    moves: list[float] = []
    for host, vals in controls_rerun.items():
        before = controls_first.get(host, {})
        xs = [
            math.log(v / b)
            for m, v in vals.items()
            if keep(m)
            and (b := before.get(m)) is not None
            and b > 0
            and v > 0
            and math.isfinite(b)
            and math.isfinite(v)
        ]
        if xs:
            moves.append(statistics.fmean(xs))
    return moves


def rerun_noise(
    keep: Callable[[str], bool],
    controls_first: Mapping[str, Mapping[str, float]],
    controls_rerun: Mapping[str, Mapping[str, float]],
) -> tuple[float, int] | None:
    """The run-to-run noise of the metrics ``keep`` accepts, measured on the control hosts: the robust
    sigma of their moves between the two runs (in log units: relative), and how many controls gave one;
    None with fewer than two. The common shift of all controls (the environment) does not count."""
    moves = _log_moves(keep, controls_first, controls_rerun)
    sigma = _robust_scale(moves)
    return None if sigma is None else (sigma, len(moves))


def _rerun_need(noise: tuple[float, int] | None) -> float:
    """The smallest repeat (|ln(re-run / reference)|) beyond the controls' run-to-run noise; 0 unmeasured."""
    if noise is None:
        return 0.0
    sigma, n = noise
    return RERUN_SIGMAS * sigma * math.sqrt(1 + 1 / n)


UNDER_RERUN_NOISE = "under the re-run's noise"
FIRST_NOISE = "as in the first run: the re-run measured no noise"
NO_FLAG_LIMIT = "half the first deviation: the finding carries no flag limit"


def judge_confirmation(
    findings: Mapping[str, Sequence[FindingLike]],
    rerun: Mapping[str, Mapping[str, float]],
    controls_first: Mapping[str, Mapping[str, float]],
    controls_rerun: Mapping[str, Mapping[str, float]],
    min_deviation: float = 0.02,
    firsts: Mapping[str, Mapping[str, float]] | None = None,
    direction: Callable[[str], int] | None = None,
    noise: Mapping[str, Mapping[str, float]] | None = None,
) -> dict[str, Confirmation]:
    """Each flagged host: ``confirmed`` when any finding reproduced (or the re-run has nothing to say),
    ``flaky`` when every repeatable finding was measured again and none reproduced. ``firsts`` (every
    host's first-run values) and ``direction`` (1: higher is better, -1: lower) let a combined finding
    be seen again; without them it counts as reproduced (never cleared without evidence). ``noise``:
    the re-run's own measured noise (host -> metric -> relative sigma of its timed samples, flagged
    hosts and controls), which the limit each finding must clear again is computed under
    (:func:`rerun_limit`); ``min_deviation``: the margin of a finding that carries no flag limit."""
    out: dict[str, Confirmation] = {}
    measured = noise or {}
    for host, issues in findings.items():
        values = rerun.get(host)
        replays: list[Replay] = []
        for i in issues:
            if not i.metric or i.check in _NOT_REPEATABLE:
                continue
            if i.check.endswith("-combined") and firsts is not None and direction is not None:
                replays.append(
                    _combined_replay(
                        i,
                        host,
                        values,
                        firsts,
                        controls_first,
                        controls_rerun,
                        direction,
                        min_deviation,
                        measured,
                    )
                )
                continue
            sigma = rerun_sigma(i.check, i.metric, measured, controls_rerun)
            replays.append(_replay(i, values, controls_first, controls_rerun, min_deviation, sigma))
        if not replays:
            continue
        flaky = all(not r.reproduced for r in replays)
        out[host] = Confirmation(host, FLAKY if flaky else CONFIRMED, tuple(replays))
    return out


def rerun_sigma(
    check: str,
    metric: str,
    noise: Mapping[str, Mapping[str, float]],
    controls_rerun: Mapping[str, Mapping[str, float]],
) -> float | None:
    """The noise of ``metric`` in the re-run, as its healthy control hosts measured it, of the kinds
    ``check``'s limit is made of: the controls' own measured noise (their median) and, for majority
    agreement, whose limit also holds the other hosts' spread, the controls' spread on the metric.
    None where the re-run measured neither, or for a check whose noise is the fleet's alone (the
    fleet-wide combined checks). The flagged host's own noise in the re-run is not counted: a fault
    that makes a host's samples scatter (a busy neighbour) would widen the very limit it must clear."""
    if check not in ("majority", "majority-combined", "fleet", "sibling"):
        return None
    parts: list[float] = []
    own = [n for c in controls_rerun if (n := noise.get(c, {}).get(metric)) is not None and math.isfinite(n)]
    if own:
        parts.append(statistics.median(own))
    if check.startswith("majority"):
        vals = [
            v for c in controls_rerun if (v := controls_rerun[c].get(metric)) is not None and math.isfinite(v)
        ]
        if len(vals) >= 2 and (med := statistics.median(vals)) != 0:
            parts.append(MAD_TO_SIGMA * statistics.median(abs(v - med) for v in vals) / abs(med))
    return max(parts) if parts else None


def rerun_limit(i: FindingLike, sigma: float | None) -> tuple[float, str] | None:
    """The deviation a finding's re-run must clear (signed: the bad side's sign) and how it was set:
    the limit that flagged it (:class:`~sb_fleet.analysis.issues.FlagLimit`) computed under the
    re-run's noise ``sigma`` where that is the larger, so never less than the first run asked (a
    re-run of a few hosts is quieter than the whole fleet's run); where the re-run measured no noise
    (``sigma`` None), the first run's limit. None where the finding carries no limit (a record from
    before limits were kept)."""
    fl = getattr(i, "flag_limit", None)
    if fl is None or not math.isfinite(fl.deviation):
        return None
    if sigma is None or not math.isfinite(sigma):
        return fl.deviation, FIRST_NOISE
    return fl.under(max(fl.noise, sigma)), UNDER_RERUN_NOISE


def _replay(
    i: FindingLike,
    values: Mapping[str, float] | None,
    controls_first: Mapping[str, Mapping[str, float]],
    controls_rerun: Mapping[str, Mapping[str, float]],
    min_deviation: float,
    sigma: float | None = None,
) -> Replay:
    if values is None:
        return Replay(i.metric, i.check, i.deviation, None, True, "no results in the re-run", i.value)
    v = values.get(i.metric)
    name = parse_metric(i.metric)
    if name.is_return_code:
        ok = v is not None and v == 0
        why = "passed this time" if ok else "failed again"
        return Replay(i.metric, i.check, i.value, v, not ok, why, i.value, v)
    if v is None or not math.isfinite(v):
        return Replay(i.metric, i.check, i.deviation, None, True, "not reported again", i.value)
    if i.reference is None or i.deviation is None or i.reference == 0 or not math.isfinite(i.reference):
        return Replay(i.metric, i.check, i.deviation, None, True, "no reference to compare with", i.value, v)
    ref = i.reference * control_ratio(i.metric, controls_first, controls_rerun)
    again = (v - ref) / abs(ref)
    fl = getattr(i, "flag_limit", None)
    limit, basis = rerun_limit(i, sigma) or (
        math.copysign(max(min_deviation, abs(i.deviation) / 2), i.deviation),
        NO_FLAG_LIMIT,
    )
    noise = rerun_noise(lambda m: m == i.metric, controls_first, controls_rerun)
    if noise is None:  # the metric itself on too few controls: its family's
        fam = name.family
        noise = rerun_noise(lambda m: parse_metric(m).family == fam, controls_first, controls_rerun)
    enough = (again < 0) == (limit < 0) and abs(again) > abs(limit)
    reproduced = enough and again > -1 and abs(math.log1p(again)) >= _rerun_need(noise)
    why = f"{i.deviation:+.1%} then {again:+.1%} (needed {limit:+.1%} {basis})" + (
        f", {_within(noise)}" if enough and not reproduced else ""
    )
    return Replay(
        i.metric,
        i.check,
        i.deviation,
        again,
        reproduced,
        why,
        i.value,
        v,
        ref,
        limit,
        None if fl is None else fl.deviation,
        basis,
    )


def _within(noise: tuple[float, int] | None) -> str:
    sigma, n = noise if noise is not None else (0.0, 0)
    need = math.expm1(_rerun_need(noise))
    return (
        f"within the run-to-run noise the {n} control host(s) measured ({sigma * 100:.1f}% between the runs: "
        f"needed {need:+.1%} from the reference)"
    )


def _median(xs: Sequence[float]) -> float | None:
    ok = [x for x in xs if math.isfinite(x)]
    return statistics.median(ok) if ok else None


def _combined_replay(
    i: FindingLike,
    host: str,
    values: Mapping[str, float] | None,
    firsts: Mapping[str, Mapping[str, float]],
    controls_first: Mapping[str, Mapping[str, float]],
    controls_rerun: Mapping[str, Mapping[str, float]],
    direction: Callable[[str], int],
    min_deviation: float,
    measured: Mapping[str, Mapping[str, float]] | None = None,
) -> Replay:
    """A combined finding (``<benchmark>/*`` or ``<benchmark>/*:<unit>``) seen again: the mean badness of
    that benchmark's metrics on that unit, against the median of the other hosts' first values (scaled
    by the controls) or, for ``sibling-combined``, of the host's own other units in the same run. It
    must clear its flag limit under the mean of the re-run's noise of those metrics."""
    if values is None:
        return Replay(i.metric, i.check, i.deviation, None, True, "no results in the re-run")
    group, _, rest = i.metric.partition("/*")
    unit = rest[1:] if rest.startswith(":") else ""
    mine = firsts.get(host, {})
    sibling = i.check.startswith("sibling")
    first_bad: list[float] = []
    again_bad: list[float] = []
    sigmas: list[float] = []
    for m, v1 in mine.items():
        pm = parse_metric(m)
        d = direction(m)
        if pm.group != group or pm.unit != unit or d == 0 or pm.is_return_code:
            continue
        v2 = values.get(m)
        if v2 is None or not math.isfinite(v2):
            continue
        if sibling:
            r1 = _median([x for k, x in mine.items() if parse_metric(k).family == pm.family])
            r2 = _median([x for k, x in values.items() if parse_metric(k).family == pm.family])
        else:
            r1 = _median([vals[m] for h, vals in firsts.items() if h != host and m in vals])
            r2 = None if r1 is None else r1 * control_ratio(m, controls_first, controls_rerun)
        if not r1 or not r2:
            continue
        first_bad.append(-d * (v1 - r1) / abs(r1))
        again_bad.append(-d * (v2 - r2) / abs(r2))
        if (sm := rerun_sigma(i.check, m, measured or {}, controls_rerun)) is not None:
            sigmas.append(sm)
    if not again_bad:
        return Replay(i.metric, i.check, i.deviation, None, True, "not reported again")
    b1, b2 = statistics.fmean(first_bad), statistics.fmean(again_bad)
    fl = getattr(i, "flag_limit", None)
    found = rerun_limit(i, statistics.fmean(sigmas) if sigmas else None)
    need, basis = (abs(found[0]), found[1]) if found else (max(min_deviation, b1 / 2), NO_FLAG_LIMIT)

    def in_group(m: str) -> bool:
        pm = parse_metric(m)
        return pm.group == group and pm.unit == unit and direction(m) != 0 and not pm.is_return_code

    noise = None if sibling else rerun_noise(in_group, controls_first, controls_rerun)
    # the mean badness as a ratio, its smaller reading
    enough = b2 > need
    reproduced = enough and math.log1p(abs(b2)) >= _rerun_need(noise)
    why = (
        f"{-b1:+.1%} then {-b2:+.1%} on average over {len(again_bad)} metric(s) (needed {-need:+.1%} {basis})"
        + (f", {_within(noise)}" if enough and not reproduced else "")
    )
    return Replay(
        i.metric,
        i.check,
        -b1,
        -b2,
        reproduced,
        why,
        limit=-need,
        first_limit=None if fl is None else fl.deviation,
        limit_basis=basis,
    )


def rerun_values(hosts: Sequence[str], columns: Sequence[str], values: Any) -> dict[str, dict[str, float]]:
    """Host -> metric -> value from a results matrix (NaN left out)."""
    out: dict[str, dict[str, float]] = {}
    for r, h in enumerate(hosts):
        row = values[r]
        out[h] = {c: float(row[k]) for k, c in enumerate(columns) if math.isfinite(float(row[k]))}
    return out


__all__ = [
    "CONFIRMED",
    "FLAKY",
    "INFERRED_CHECKS",
    "ConfirmPlan",
    "Confirmation",
    "Replay",
    "Selection",
    "benchmark_of",
    "confirm_config",
    "confirm_limit",
    "confirmation_json",
    "control_ratio",
    "judge_confirmation",
    "on_statistics_alone",
    "plan_confirmation",
    "rerun_limit",
    "rerun_noise",
    "rerun_sigma",
    "rerun_values",
    "inconsistency_shows_again",
    "recheck",
    "select_for_confirmation",
    "split_shows_again",
]


def split_shows_again(sp: Any, rerun: Mapping[str, Mapping[str, float]]) -> tuple[bool, str]:
    """Did a population split (:class:`~sb_fleet.analysis.populations.PopulationSplit`) show again in
    the confirmation run? Each host's median over the family's values in the re-run (``rerun``: host ->
    metric -> value); every host of the lower side must stay below every host of the upper side, with a
    hole between them as wide as the split had to clear (:meth:`rerun_need`, under the sides' spread in
    the re-run). A split's limit is made of the sides' spread, not their samples' noise."""
    keep = _family(sp.family)
    meds = _group_medians(keep, sp.groups, rerun)
    if meds is None:
        return True, STANDS
    lo, hi = meds[0], meds[-1]
    if max(lo) >= min(hi):
        return False, _not_again(lo, hi, sp.apart, "the groups overlap")
    if min(lo) <= 0:
        return True, STANDS
    logs_lo, logs_hi = [math.log(v) for v in lo], [math.log(v) for v in hi]
    within = [x - statistics.median(logs_lo) for x in logs_lo] + [
        x - statistics.median(logs_hi) for x in logs_hi
    ]
    spread = MAD_TO_SIGMA * statistics.median(abs(x) for x in within)
    need = sp.rerun_need(spread)
    hole = math.log(min(hi) / max(lo))
    if need is None:
        return _half_the_first(lo, hi, sp.apart)
    if hole > need:
        return True, (
            f"showed again: {_apart(lo, hi) * 100:.0f}% apart (first {sp.apart * 100:.0f}%), a gap of "
            f"{math.expm1(hole) * 100:.1f}% (needed {math.expm1(need) * 100:.1f}%)"
        )
    return False, _not_again(
        lo,
        hi,
        sp.apart,
        f"a gap of {math.expm1(hole) * 100:.1f}% where the split needed {math.expm1(need) * 100:.1f}%",
    )


def inconsistency_shows_again(
    finding: Any,
    rerun: Mapping[str, Mapping[str, float]],
    noise: Mapping[str, Mapping[str, float]] | None = None,
) -> tuple[bool, str]:
    """Did steady hosts that disagreed with no majority (``majority.Inconsistency``, or the two hosts of
    a ``majority.Disagreement``) disagree the same way in the re-run? Each host's value of the finding's
    metric: every host of the lowest group still below every host of the highest, and their centres as
    far apart as the limit that told them apart, under the groups' own noise in the re-run (``noise``:
    host -> metric -> relative sigma of its timed samples) where that is the larger (:meth:`rerun_need`):
    as much as the first run asked, never half of it."""
    metric = finding.metric
    meds = _group_medians(lambda m: m == metric, finding.groups, rerun)
    if meds is None:
        return True, STANDS
    lo, hi = meds[0], meds[-1]
    if max(lo) >= min(hi):
        return False, _not_again(lo, hi, finding.apart, "the groups overlap")
    sigmas = [_group_noise(metric, g, noise) for g in (finding.groups[0], finding.groups[-1])]
    need = finding.rerun_need(sigmas)
    if need is None:
        return _half_the_first(lo, hi, finding.apart)
    again = _apart(lo, hi)
    shown = [f"{s * 100:.1f}%" for s in sigmas if s is not None]
    under = f" under the re-run's noise ({', '.join(shown)})" if shown else ""
    if again > need:
        return True, (
            f"showed again: {again * 100:.0f}% apart (first {finding.apart * 100:.0f}%; needed "
            f"{need * 100:.1f}%{under})"
        )
    return False, _not_again(
        lo, hi, finding.apart, f"closer than the {need * 100:.1f}% that told them apart{under}"
    )


STANDS = "did not measure every host again: it stands"


def _family(family: str) -> Callable[[str], bool]:
    return lambda m: parse_metric(m).family == family


def _group_medians(
    keep: Callable[[str], bool], groups: Sequence[Sequence[str]], rerun: Mapping[str, Mapping[str, float]]
) -> list[list[float]] | None:
    """Each group's hosts' medians over the metrics ``keep`` accepts in the re-run; None unless every
    host of the lowest and the highest group was measured again."""
    meds: list[list[float]] = []
    for g in groups:
        vals: list[float] = []
        for h in g:
            xs = [v for m, v in rerun.get(h, {}).items() if keep(m) and math.isfinite(v)]
            if xs:
                vals.append(statistics.median(xs))
        meds.append(vals)
    if len(meds[0]) < len(groups[0]) or len(meds[-1]) < len(groups[-1]) or not meds[0] or not meds[-1]:
        return None
    return meds


def _group_noise(
    metric: str, group: Sequence[str], noise: Mapping[str, Mapping[str, float]] | None
) -> float | None:
    """The median of a group's hosts' own measured noise of ``metric`` in the re-run; None unmeasured."""
    xs = [n for h in group if (n := (noise or {}).get(h, {}).get(metric)) is not None and math.isfinite(n)]
    return statistics.median(xs) if xs else None


def _apart(lo: Sequence[float], hi: Sequence[float]) -> float:
    c_lo, c_hi = statistics.median(lo), statistics.median(hi)
    return c_hi / c_lo - 1 if c_lo > 0 else math.inf


def _not_again(lo: Sequence[float], hi: Sequence[float], first: float, why: str) -> str:
    return f"did not show again: {_apart(lo, hi) * 100:+.0f}% apart (first {first * 100:.0f}%), {why}"


def _half_the_first(lo: Sequence[float], hi: Sequence[float], first: float) -> tuple[bool, str]:
    """A record from before limits were kept: the centres at least half as far apart as they were."""
    again = _apart(lo, hi)
    if again >= first / 2:
        return True, f"showed again: {again * 100:.0f}% apart (first {first * 100:.0f}%; {NO_FLAG_LIMIT})"
    return False, _not_again(lo, hi, first, "closer than half the first gap (the finding carries no limit)")


def recheck(
    splits: Sequence[Any],
    metric_findings: Sequence[Any],
    rerun: Mapping[str, Mapping[str, float]],
    noise: Mapping[str, Mapping[str, float]] | None = None,
) -> dict[str, tuple[bool, str]]:
    """Did each finding show again in the re-run? ``splits``: population splits; ``metric_findings``:
    inconsistencies and disagreements; ``noise``: the re-run's measured noise (host -> metric ->
    relative sigma); key -> (showed again, how)."""
    out = {sp.key: split_shows_again(sp, rerun) for sp in splits}
    out.update({f.key: inconsistency_shows_again(f, rerun, noise) for f in metric_findings})
    return out


def confirm_config(config: Mapping[str, Any], benchmarks: Sequence[str]) -> dict[str, Any] | None:
    """The run's config (as loaded from its YAML) narrowed to ``benchmarks`` for the confirmation run,
    or None when none of them is a benchmark of the config."""
    sb = dict(config.get("superbench") or {})
    known = set((sb.get("benchmarks") or {}).keys())
    keep = [b for b in benchmarks if b in known]
    if not keep:
        return None
    sb["enable"] = keep
    return {**config, "superbench": sb}


def confirmation_json(
    plan: ConfirmPlan,
    result: Mapping[str, Confirmation],
    sub_run: Any,
    mode: str = "explicit",
    seconds: float | None = None,
    selection: Selection | None = None,
) -> dict[str, Any]:
    """confirm.json (and report.json's ``confirmation``): how it was chosen (``mode``: ``auto``, plain
    validate; ``explicit``, --confirm), the plan, the sub-run, how long it took and every host's replays
    with both runs' values."""
    return {
        "schema_version": 1,
        "mode": mode,
        "seconds": None if seconds is None else round(seconds, 3),
        **({"selection": selection.to_json()} if selection is not None else {}),
        "plan": plan.to_json(),
        "run_dir": str(sub_run),
        "hosts": {
            h: {
                "result": c.result,
                "detail": c.sentence(),
                "replays": [
                    {
                        "metric": r.metric,
                        "check": r.check,
                        "first": r.first,
                        "again": r.again,
                        "first_value": _finite(r.first_value),
                        "again_value": _finite(r.again_value),
                        "reference": _finite(r.reference),
                        "reproduced": r.reproduced,
                        "why": r.why,
                        "limit": _finite(r.limit),
                        "first_limit": _finite(r.first_limit),
                        "limit_basis": r.limit_basis,
                    }
                    for r in c.replays
                ],
            }
            for h, c in result.items()
        },
    }


def _finite(v: float | None) -> float | None:
    return None if v is None or not math.isfinite(v) else float(v)


@dataclass(frozen=True)
class Recorded:
    """What validate's re-runs recorded in a run directory (confirm.json, confirm-splits.json), so that
    ``sb-fleet report RUN`` judges the run as validate did."""

    confirmations: dict[str, Confirmation]
    split_checks: dict[str, tuple[bool, str]]
    unconfirmed: tuple[str, ...]  # over validate's bound (not when the confirmation could not run)
    document: dict[str, Any] | None  # confirm.json's document, or None

    @property
    def any(self) -> bool:
        return bool(self.confirmations or self.split_checks or self.unconfirmed or self.document)


def recorded(confirm_doc: Mapping[str, Any] | None, splits_doc: Mapping[str, Any] | None) -> Recorded:
    """The re-runs' outcomes from confirm.json's and confirm-splits.json's documents (None: absent).
    Malformed entries are left out: a finding they would have cleared stands."""
    confirmations: dict[str, Confirmation] = {}
    unconfirmed: tuple[str, ...] = ()
    if isinstance(confirm_doc, Mapping):
        for host, h in (confirm_doc.get("hosts") or {}).items():
            if not isinstance(h, Mapping) or h.get("result") not in (CONFIRMED, FLAKY):
                continue
            replays = tuple(
                Replay(
                    metric=str(r.get("metric", "")),
                    check=str(r.get("check", "")),
                    first=_num_or_none(r.get("first")),
                    again=_num_or_none(r.get("again")),
                    reproduced=bool(r.get("reproduced")),
                    why=str(r.get("why", "")),
                    first_value=_num_or_none(r.get("first_value")),
                    again_value=_num_or_none(r.get("again_value")),
                    reference=_num_or_none(r.get("reference")),
                    limit=_num_or_none(r.get("limit")),
                    first_limit=_num_or_none(r.get("first_limit")),
                    limit_basis=str(r.get("limit_basis", "")),
                )
                for r in h.get("replays") or []
                if isinstance(r, Mapping)
            )
            confirmations[str(host)] = Confirmation(str(host), str(h["result"]), replays)
        sel = confirm_doc.get("selection")
        if isinstance(sel, Mapping) and not confirm_doc.get("not_run"):
            unconfirmed = tuple(str(x) for x in sel.get("not_confirmed") or [])
    checks: dict[str, tuple[bool, str]] = {}
    if isinstance(splits_doc, Mapping):
        for kind, key_of in (
            ("splits", lambda d: split_key(str(d.get("scope", "")), str(d.get("family", "")), d["groups"])),
            (
                "inconsistent",
                lambda d: inconsistency_key(str(d["metric"]), [g["hosts"] for g in d["groups"]]),
            ),
            ("disagreements", lambda d: disagreement_key(str(d["metric"]), d["hosts"])),
        ):
            for d in splits_doc.get(kind) or []:
                try:
                    if isinstance(d.get("showed_again"), bool):
                        checks[key_of(d)] = (d["showed_again"], str(d.get("how", "")))
                except (KeyError, TypeError, AttributeError):
                    continue
    doc = dict(confirm_doc) if isinstance(confirm_doc, Mapping) else None
    return Recorded(confirmations, checks, unconfirmed, doc)


def _num_or_none(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def rerun_values_in(run_dir: Path) -> dict[str, dict[str, float]]:
    """validate's re-run values (host -> metric -> value) from its confirmation sub-runs in ``run_dir``
    (``confirm-splits/``, ``confirm/``; a host's value from the confirmation of its own findings before
    one from a re-run split); a sub-run that left no results adds nothing."""
    from sb_fleet.analysis.fleet_results import load_fleet
    from sb_fleet.errors import ResultsError

    out: dict[str, dict[str, float]] = {}
    for sub in ("confirm-splits", "confirm"):
        summary = run_dir / sub / "results-summary.jsonl"  # what a kept run directory always holds
        if summary.is_file() or (run_dir / sub).is_dir():
            try:
                again = load_fleet(summary if summary.is_file() else run_dir / sub)
            except ResultsError:
                continue
            for host, vals in rerun_values(again.hosts, again.columns, again.values).items():
                out.setdefault(host, {}).update(vals)
    return out
