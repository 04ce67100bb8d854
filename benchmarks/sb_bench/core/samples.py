"""Timed samples and the spread they measure: how steady a figure was on the host that measured it.

The harness times a case's steps in *laps* (at most :data:`MAX_LAPS` clock or CUDA-event readings
inside the timed loop, so the loop itself is unchanged) and merges consecutive laps into *samples*
of at least :data:`MIN_SAMPLE_SECONDS` of timed work each where the window allows
:data:`MIN_SAMPLES` of them (a shorter window is cut in :data:`MIN_SAMPLES`), and at most
:data:`MAX_SAMPLES`. A long sample averages over many scheduler slices and GPU clock steps: a host
that is steadily slow (a busy process beside its benchmark) gives steady samples, while a host whose
work is interrupted in bursts gives scattered ones. A window of fewer than two laps gives none;
repeated runs (``run_count``) are then the samples.

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

MAX_LAPS = 256  # clock readings inside one timed loop
MAX_SAMPLES = 32  # samples kept per metric and run
MIN_SAMPLE_SECONDS = 0.02  # timed work per sample: a few scheduler periods ...
MIN_SAMPLES = 8  # ... unless the window is shorter than this many of them
MAD_TO_SIGMA = 1.4826
# Expected range of n normal values in sigmas (d2 of quality control charts).
_RANGE_TO_SIGMA = {2: 1.128, 3: 1.693}


def lap_every(steps: int) -> int:
    """Steps between two clock readings so that a loop of ``steps`` takes at most MAX_LAPS of them."""
    return max(1, -(-int(steps) // MAX_LAPS))


def merge_laps(laps: Sequence[tuple[float, int]]) -> list[float]:
    """Seconds per step of each sample made of consecutive ``(seconds, steps)`` laps.

    Laps are merged until a sample holds at least ``max(min(MIN_SAMPLE_SECONDS, total / MIN_SAMPLES),
    total / MAX_SAMPLES)``; a short remainder joins the sample before it. Fewer than two samples: none
    (the window was too short to say anything about its own steadiness)."""
    total = sum(s for s, _ in laps)
    if not laps or not total > 0:
        return []
    want = max(min(MIN_SAMPLE_SECONDS, total / MIN_SAMPLES), total / MAX_SAMPLES)
    out: list[list[float]] = []
    sec, steps = 0.0, 0
    for s, n in laps:
        sec += s
        steps += n
        if sec >= want:
            out.append([sec, steps])
            sec, steps = 0.0, 0
    if steps and out:
        out[-1][0] += sec
        out[-1][1] += steps
    if len(out) < 2:
        return []
    return [s / n for s, n in out if n > 0]


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
