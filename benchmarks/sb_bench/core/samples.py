"""Timed samples and the spread they measure: how steady a figure was on the host that measured it.

The harness times a case's steps in *laps* (at most :data:`MAX_LAPS` clock or CUDA-event readings
inside the timed loop, so the loop itself is unchanged) and merges consecutive laps into *samples*
of at least :data:`MIN_SAMPLE_SECONDS` of timed work each where the window allows
:data:`MIN_SAMPLES` of them (a shorter window is cut in :data:`MIN_SAMPLES`), and at most
:data:`MAX_SAMPLES`. A long sample averages over many scheduler slices and GPU clock steps: a host
that is steadily slow (a busy process beside its benchmark) gives steady samples, while a host whose
work is interrupted in bursts gives scattered ones. A window of fewer than two laps gives none;
repeated runs (``run_count``) are then the samples.

**A stalled lap never swallows its window.** How long a sample should be is set by the window's
*pace* (the step-weighted median seconds per step of its laps: what the window takes without its
stalls, :func:`pace`), not by its total: one lap stalled by a preemption (a time slice of another
process, a few to tens of ms, against a kernel-launch window of under 1 ms) then closes a sample of
its own and the laps around it make the others, so a window gives as many samples as its laps allow
whatever one lap did. Before, the stalled lap set the sample length, became the only sample, and the
figure was left with none: no spread and no noise of its own (issue 47: 0.109 ms against 0.004 ms,
``raw_data`` ``[[0.1093]]``). Where that makes more than :data:`MAX_SAMPLES` (a window slower than
its pace throughout), the sample length grows until they fit; where laps worth more than a
sample each (a slow phase, a shorter stall) leave fewer than :data:`MIN_SAMPLES`, it shrinks until
the laps give them.

A window that one lap *dominates* (:func:`stalled_lap`: the lap's time beyond the window's pace is
more than :data:`STALL_SHARE` of the window's time, so the figure is over twice its pace) is timed
again by the harness (:meth:`sb_bench.core.harness.Harness.timed_window`), at most
:data:`MAX_RETRIES` times, where its pace-time is at most :data:`RETRY_WINDOW_SECONDS` (a longer
window is dominated only by a stall of seconds: a host fault to report, and re-timing it would eat
into the benchmark's timeout) and the rank times alone (ranks that time a collective together must
run the same windows). The result's ``reason`` says so (``torch_launch: re-timed 1x, one lap (lap 93
of 200) held 89% of the window: a 8.48 ms stall``); a window stalled in every attempt is reported as
measured, its stall in the figure and in one outlying sample, and the reason says that too.

Measured on a 2-core machine: alone, the largest lap of a 200-step kernel-launch window held at most
11% of it (500 windows); beside five busy processes, 22% of 1,200 windows had one lap holding 82-94%
of the window and none held between 25% and 82% (the share is bimodal; 0.5 divides it; three
retries leave 0.22^4 = 0.2% of windows stalled). On a loopback fleet of 4 hosts sharing one home
and 2 cores, whose kernel-launch processes all start in the same second (the nccl-bw across all
nodes before it ends on every host at once), a figure collapsed to one to three samples on some
host in each of 3 rounds before this; after it, in 4 rounds, every figure had 8-10 samples and its
noise, 0-4 windows a round were re-timed (stalls of 1.8-9.3 ms at laps 23-190: anywhere in the
window, not a first-call warm-up).

Two figures per metric, over the samples of every run pooled (so a shift between runs counts):

* the *spread*, how much one sample scatters: the robust relative sigma ``1.4826 * MAD / |median|``
  (with two or three values: the range over the mean divided by the expected range of a normal
  sample, 1.128 for two, 1.693 for three). "Steady 3%" or "steps that varied by 5x".
* the *noise* of the figure: the robust standard error of the samples' centre, ``spread /
  sqrt(n)``: how far another window of the same host would put the figure. This is what a deviation
  of the figure is compared with (``noise-summary.jsonl``; :mod:`sb_fleet.analysis.majority`). A
  host steadily 2x slow behind a busy process (its samples scattering by tens of percent, in every
  window) is known to a few percent and found. A rare outlying sample (one preemption) does not raise
  it: a figure moved by a burst is flagged on the first pass and cleared by ``validate``'s
  confirmation run, where the burst does not repeat (confirm before condemn).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

MAX_LAPS = 256  # clock readings inside one timed loop
MAX_SAMPLES = 32  # samples kept per metric and run
MIN_SAMPLE_SECONDS = 0.02  # timed work per sample: a few scheduler periods ...
MIN_SAMPLES = 8  # ... unless the window is shorter than this many of them
STALL_SHARE = 0.5  # one lap whose time beyond the window's pace exceeds this share of it dominates it
MAX_RETRIES = 3  # re-timings of a dominated window (22% of windows stalled under 3x CPU oversubscription)
RETRY_WINDOW_SECONDS = 2.0  # only windows whose pace-time is at most this are re-timed
MAD_TO_SIGMA = 1.4826
# Expected range of n normal values in sigmas (d2 of quality control charts).
_RANGE_TO_SIGMA = {2: 1.128, 3: 1.693}

Lap = tuple[float, int]  # (seconds, steps)


def lap_every(steps: int) -> int:
    """Steps between two clock readings so that a loop of ``steps`` takes at most MAX_LAPS of them."""
    return max(1, -(-int(steps) // MAX_LAPS))


def pace(laps: Sequence[Lap]) -> float | None:
    """The window's seconds per step without its stalls: the step-weighted median of its laps' seconds
    per step (the rate at which half its steps ran faster). None without a lap of steps."""
    rates = sorted((s / n, n) for s, n in laps if n > 0 and s >= 0)
    half = sum(n for _, n in rates) / 2
    acc = 0
    for rate, n in rates:
        acc += n
        if acc >= half:
            return rate
    return None


@dataclass(frozen=True)
class Stall:
    """The one lap that dominates a timed window (:func:`stalled_lap`)."""

    lap: int  # its index
    laps: int  # the window's laps
    seconds: float  # the lap's time beyond the window's pace
    share: float  # that time's share of the window's

    def describe(self) -> str:
        return (
            f"one lap (lap {self.lap + 1} of {self.laps}) held {self.share:.0%} of the window: "
            f"a {self.seconds * 1e3:.3g} ms stall"
        )


def stalled_lap(laps: Sequence[Lap]) -> Stall | None:
    """The lap whose time beyond the window's :func:`pace` is more than :data:`STALL_SHARE` of the
    window's time (the figure is then more than twice what the window's steps ran at), or None. A
    window of fewer than two laps has no pace of its own to compare with: None."""
    total = sum(s for s, _ in laps)
    p = pace(laps)
    if len(laps) < 2 or p is None or not total > 0:
        return None
    excess = [s - p * n for s, n in laps]
    i = max(range(len(laps)), key=excess.__getitem__)
    if excess[i] > STALL_SHARE * total:
        return Stall(i, len(laps), excess[i], excess[i] / total)
    return None


def merge_laps(laps: Sequence[Lap]) -> list[float]:
    """Seconds per step of each sample made of consecutive ``(seconds, steps)`` laps.

    Laps are merged until a sample holds at least ``max(min(MIN_SAMPLE_SECONDS, typical / MIN_SAMPLES),
    typical / MAX_SAMPLES)``, where ``typical`` is the window's steps at its :func:`pace` (never more
    than its total): a stalled lap closes a sample of its own and does not set the others' length. A
    short remainder joins the sample before it. Where that makes more than MAX_SAMPLES (a window
    slower than its pace throughout), the sample length grows in proportion until they fit; where
    laps worth more than one sample (a slow phase, a shorter stall) leave fewer than MIN_SAMPLES
    (or one per lap), it shrinks until the laps give them. Fewer than two laps: none (the window was
    too short to say anything about its own steadiness)."""
    total = sum(s for s, _ in laps)
    if len(laps) < 2 or not total > 0:
        return []
    p = pace(laps)
    typical = min(total, p * sum(n for _, n in laps)) if p else total
    if not typical > 0:
        typical = total
    want = max(min(MIN_SAMPLE_SECONDS, typical / MIN_SAMPLES), typical / MAX_SAMPLES)
    out = _group(laps, want)
    while len(out) > MAX_SAMPLES:
        want *= len(out) / MAX_SAMPLES * 1.01
        out = _group(laps, want)
    # Laps worth more than one sample (a slow phase, a stall under STALL_SHARE) each take a sample's
    # place: shorter samples, until the window gives the MIN_SAMPLES its laps allow.
    floor = min(MIN_SAMPLES, len(laps))
    for _ in range(128):  # 3% at a time, so that equal laps stop at the first length that gives them
        if len(out) >= floor:
            break
        want *= 0.97
        more = _group(laps, want)
        if len(more) > MAX_SAMPLES:
            break
        out = more
    if len(out) < 2:
        return []
    return [s / n for s, n in out]


def _group(laps: Sequence[Lap], want: float) -> list[tuple[float, int]]:
    """Consecutive laps grouped into ``(seconds, steps)`` of at least ``want`` seconds each (a short
    remainder joins the last group)."""
    out: list[tuple[float, int]] = []
    sec, steps = 0.0, 0
    for s, n in laps:
        sec += s
        steps += n
        if sec >= want and steps > 0:
            out.append((sec, steps))
            sec, steps = 0.0, 0
    if (steps or sec) and out:
        out[-1] = (out[-1][0] + sec, out[-1][1] + steps)
    return out


def thin(values: Sequence[float], n: int = MAX_SAMPLES) -> list[float]:
    """At most ``n`` of ``values``, evenly spaced in sorted order (the quantiles, ends included)."""
    if len(values) <= n:
        return list(values)
    xs = sorted(values)
    return [xs[round(i * (len(xs) - 1) / (n - 1))] for i in range(n)]


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    h = len(s) // 2
    return s[h] if len(s) % 2 else (s[h - 1] + s[h]) / 2


def _finite(values: Sequence[float]) -> list[float]:
    return [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]


def robust_spread(values: Sequence[float]) -> float | None:
    """How much one sample scatters: the robust relative sigma of ``values`` (``1.4826 * MAD /
    |median|``; two or three values: range / mean / d2). None for fewer than two finite values or a
    zero centre."""
    xs = _finite(values)
    if len(xs) < 2:
        return None
    mean = sum(xs) / len(xs)
    med = _median(xs)
    if not med or not mean:
        return None
    if len(xs) in _RANGE_TO_SIGMA:
        return (max(xs) - min(xs)) / _RANGE_TO_SIGMA[len(xs)] / abs(mean)
    mad = _median([abs(x - med) for x in xs])
    return MAD_TO_SIGMA * mad / abs(med)


def figure_noise(values: Sequence[float]) -> float | None:
    """How uncertain the figure made of ``values`` is, relative: the robust standard error of their
    centre, ``robust_spread / sqrt(n)``. Rare outlying samples (a preemption) do not count here: a
    figure they moved is flagged on the first pass and cleared by validate's confirmation run, where
    the burst does not repeat; what they cannot hide is a host whose every window is slow. None where
    :func:`robust_spread` is None."""
    xs = _finite(values)
    scatter = robust_spread(xs)
    if scatter is None:
        return None
    return scatter / math.sqrt(len(xs))
