"""Is a figure's change over an ordered series of rounds beyond its noise? A step and a trend, both (pure).

A soak's figure can change two ways: a **step** (a fan dies, a GPU drops to a lower clock, a DIMM
retrains: the rounds after it sit at a new level) and a **trend** (a node that heats, a filling disk). A
line fitted through a step takes the step itself as scatter: the residual noise of a node that fell to half
speed in round 4 of 8 came out at 45%, so however large the step, the trend stayed within about 1.3 of its
own threshold. So each series is judged with both models and fails where either does:

* trend: least squares of ``y`` (log of value / median) on ``x`` (hours); the change is the slope times the
  span, its noise the fit's residuals (``n - 2`` degrees of freedom);
* step: every split into a before and an after of at least :data:`MIN_SEGMENT` rounds each; the change is
  the after's mean minus the before's, its noise taken *within* the two segments (``n - 2`` degrees of
  freedom), so the step does not inflate the noise it is judged against. The split with the largest
  t-statistic on the worse side is the one reported, with the round where the change began.

A trend fails beyond ``k`` of its standard errors, as before. A step is the best of ``n - 2 m + 1`` splits,
so it must be as improbable as ``k`` sigmas of a normal variable (one sided; 0.13% for 3) after the splits
tried (Bonferroni) with its noise measured from ``n - 2`` degrees of freedom (Student's t; within 2% of the
exact scan's critical value at 8 to 20 rounds, simulated): 6.69 at 8 rounds, 4.75 at 20, ~5 at 4,320.
Both also need ``min_change``: beyond the noise, and large enough to matter. Each model's noise is never below the
values' own measured noise (their timed samples). docs/campaigns.md, "Judging a soak", has the rule and the
figures it was chosen on (tests/corpus's real rounds).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Literal

MIN_SEGMENT = 2  # a step's before and after each hold at least this many rounds: one bad round is a failed round's business
NoiseSource = Literal["residuals", "within segments", "within segments, one round left out", "own samples"]
# Up to this many rounds a step is also judged with each round left out in turn (below; 1.5 ms a series at
# 24 rounds on this project's 2-core machine, 9 ms at 64: the cost is n squared); past it one round's
# outlier moves the within-segment noise of so many rounds too little to hide a step (a quarter-speed round
# among 24 with 5% noise: noise ~15%, and a step to half is still t ~ 8 against a critical t of ~5).
LEAVE_ONE_OUT_MAX = 24
_NORMAL_DOF = 300  # past this many degrees of freedom Student's t is the normal's, to 4 digits at 3 sigmas


def t_sf(t: float, dof: int) -> float:
    """P(T > t) for Student's t with ``dof`` (an integer >= 1) degrees of freedom and ``t >= 0``: the
    finite series of Abramowitz and Stegun 26.7.3/26.7.4 (exact for integer dof), the normal's past 300."""
    if dof > _NORMAL_DOF:
        return NormalDist().cdf(-t)
    theta = math.atan(t / math.sqrt(dof))
    c2 = math.cos(theta) ** 2
    term = acc = 1.0
    if dof % 2:
        for j in range(1, (dof - 1) // 2):
            term *= 2 * j / (2 * j + 1) * c2
            acc += term
        inner = acc * math.sin(theta) * math.cos(theta) if dof > 1 else 0.0
        a = 2 / math.pi * (theta + inner)
    else:
        for j in range(1, dof // 2):
            term *= (2 * j - 1) / (2 * j) * c2
            acc += term
        a = math.sin(theta) * acc
    return max(0.0, (1 - a) / 2)


def t_isf(p: float, dof: int) -> float:
    """The t beyond which Student's t with ``dof`` degrees of freedom lies with probability ``p`` (0 < p < 0.5)."""
    lo, hi = 0.0, 1.0
    while t_sf(hi, dof) > p:
        hi *= 2
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_sf(mid, dof) > p else (lo, mid)
    return hi


def critical_t(k: float, n: int, model: Literal["trend", "step", "step-1"]) -> float:
    """The t-statistic a change over ``n`` rounds must exceed. A trend: ``k`` (its standard error from the
    residuals, as the rule has been since 2026-11-29; tests/corpus's real rounds bear it out). A step: as
    improbable as ``k`` sigmas of a normal variable (one sided), for the best of the ``n - 2 m + 1`` splits
    tried (Bonferroni) and a noise measured with ``n - 2`` degrees of freedom (Student's t): without the
    correction, noise alone puts the best split of 8 Gaussian rounds past 3 sigmas 5% of the time."""
    if model == "trend":
        return k
    if model == "step-1":  # each of the n rounds left out in turn, then the splits of the n - 1 others
        p = NormalDist().cdf(-k) / (n * max(1, n - 1 - 2 * MIN_SEGMENT + 1))
        return t_isf(p, max(1, n - 3))
    p = NormalDist().cdf(-k) / max(1, n - 2 * MIN_SEGMENT + 1)
    return t_isf(p, max(1, n - 2))


@dataclass(frozen=True)
class Change:
    """One model's reading of a series: the change (in log units), its standard error, the per-round noise
    that gave it (and where from), the t-statistic the worse side is read with, the critical t, and for a
    step the position (0-based) of the first round after it."""

    model: Literal["trend", "step"]
    change: float  # log units: log(after / before) for a step, slope x span for a trend
    stderr: float
    noise: float
    noise_source: NoiseSource
    critical: float  # the critical t
    at: int | None = None  # a step: the position of the first round after it

    def threshold(self, min_change: float) -> float:
        """The size (log units, positive) a change must exceed: both beyond its noise and ``min_change``."""
        return max(self.critical * self.stderr, math.log1p(min_change))

    def fails(self, direction: int, min_change: float) -> bool:
        worse = self.change < 0 if direction > 0 else self.change > 0 if direction < 0 else True
        return worse and abs(self.change) > self.threshold(min_change)

    def badness(self, direction: int) -> float:
        """The t-statistic on the worse side (0 where the change is the better way)."""
        if self.stderr <= 0:
            return math.inf if self.change != 0 else 0.0
        t = self.change / self.stderr
        return -t if direction > 0 else t if direction < 0 else abs(t)


def _floor(noise: float, source: NoiseSource, own: float) -> tuple[float, NoiseSource]:
    return (noise, source) if noise >= own else (own, "own samples")


def trend_change(xs: Sequence[float], ys: Sequence[float], own: float, k: float) -> Change:
    """The least-squares trend of ``ys`` on ``xs`` (at least 3 points, ``xs`` not all equal)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    ss = sum((y - my - slope * (x - mx)) ** 2 for x, y in zip(xs, ys, strict=True))
    noise, source = _floor(math.sqrt(ss / (n - 2)) if n > 2 else 0.0, "residuals", own)
    span = max(xs) - min(xs)
    return Change(
        "trend",
        slope * span,
        noise * span / math.sqrt(sxx),
        noise,
        source,
        critical_t(k, n, "trend"),
    )


def step_change(
    ys: Sequence[float],
    own: float,
    k: float,
    direction: int,
    critical: float | None = None,
    source: NoiseSource = "within segments",
) -> Change | None:
    """The split into a before and an after (each at least :data:`MIN_SEGMENT` rounds) whose step is the
    largest on the worse side, in t; None where the series is too short to split. ``critical``: the
    critical t (default :func:`critical_t`'s for a step of ``len(ys)`` rounds)."""
    n = len(ys)
    if n < 2 * MIN_SEGMENT + 1:
        return None
    prefix = [0.0]
    prefix2 = [0.0]
    for y in ys:
        prefix.append(prefix[-1] + y)
        prefix2.append(prefix2[-1] + y * y)
    if critical is None:
        critical = critical_t(k, n, "step")
    best: Change | None = None
    best_t = -math.inf
    for c in range(MIN_SEGMENT, n - MIN_SEGMENT + 1):
        n1, n2 = c, n - c
        s1, s2 = prefix[c], prefix[n] - prefix[c]
        ss = (prefix2[c] - s1 * s1 / n1) + (prefix2[n] - prefix2[c] - s2 * s2 / n2)
        noise, where = _floor(math.sqrt(max(ss, 0.0) / (n - 2)), source, own)
        cand = Change(
            "step",
            s2 / n2 - s1 / n1,
            noise * math.sqrt(1 / n1 + 1 / n2),
            noise,
            where,
            critical,
            at=c,
        )
        t = cand.badness(direction)
        if t > best_t:
            best, best_t = cand, t
    return best


def step_one_left_out(ys: Sequence[float], own: float, k: float, direction: int) -> Change | None:
    """A step judged with each round left out in turn (series of :data:`MIN_SEGMENT` x 2 + 2 to
    :data:`LEAVE_ONE_OUT_MAX` rounds): one round far off inside a step (a quarter speed among half-speed
    rounds) puts the within-segment noise so high that no step is seen, and that round is a failed round's
    business, not a reason to pass the step. The critical t counts every round left out and every split
    of the others (Bonferroni, ``n - 3`` degrees of freedom): as improbable as the plain step's ``k``."""
    n = len(ys)
    if n < 2 * MIN_SEGMENT + 2 or n > LEAVE_ONE_OUT_MAX:
        return None
    critical = critical_t(k, n, "step-1")
    best: Change | None = None
    best_t = -math.inf
    for j in range(n):
        cand = step_change(
            [y for i, y in enumerate(ys) if i != j],
            own,
            k,
            direction,
            critical,
            "within segments, one round left out",
        )
        if cand is None:
            continue
        t = cand.badness(direction)
        if t > best_t:
            at = cand.at if cand.at is None or j >= cand.at else cand.at + 1
            best, best_t = (
                Change(cand.model, cand.change, cand.stderr, cand.noise, cand.noise_source, critical, at),
                t,
            )
    return best


def own_noise(noises: Sequence[float | None]) -> float:
    """The median of the values' own measured relative noise (0 where none was measured)."""
    own = [x for x in noises if x is not None and math.isfinite(x) and x >= 0]
    return statistics.median(own) if own else 0.0


def judge_changes(
    xs: Sequence[float],
    values: Sequence[float],
    noises: Sequence[float | None],
    direction: int,
    k: float,
    min_change: float,
) -> tuple[Change, bool]:
    """Both models over one series of positive ``values`` at times ``xs`` (at least 3): the change reported
    (a failing one where either fails, the one further beyond its critical t where both do, else the one
    closer to failing: the larger share of its threshold on the worse side) and whether it fails."""
    med = statistics.median(values)
    ys = [math.log(v / med) for v in values]
    if max(xs) - min(xs) <= 0:  # no time spread (timestamps missing): the rounds are evenly spaced
        xs = [float(i) for i in range(len(values))]
    own = own_noise(noises)
    models = [trend_change(xs, ys, own, k)]
    for step in (step_one_left_out(ys, own, k, direction), step_change(ys, own, k, direction)):
        if step is not None:
            models.insert(0, step)
    failing = [m for m in models if m.fails(direction, min_change)]
    if failing:  # the one the series bears out more: a line's trend, a step's step
        return max(failing, key=lambda m: m.badness(direction) / m.critical), True

    def share(m: Change) -> float:
        worse = m.change < 0 if direction > 0 else m.change > 0 if direction < 0 else True
        return abs(m.change) / m.threshold(min_change) if worse else 0.0

    return max(models, key=share), False
