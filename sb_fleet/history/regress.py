"""Regressions against history, as pure functions over arrays and verdict lists (no store, no I/O).

- :func:`own_regressions`: every cell against its component's own trailing window (robust centre
  and spread per metric), flagged on the bad side by both a statistical and a practical margin.
- :func:`fleet_drift`: the fleet median of a metric family against its own trailing window.
- :func:`repeat_offenders`, :func:`flapping`, :func:`back_to_healthy`: verdict sequences.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

# IQR of a normal distribution in sigmas: a robust spread from the quartiles.
IQR_SIGMAS = 1.349
# Ten nights estimate a component's spread poorly, and over a fleet's 10^6 cells the ones that
# happened to look tight (or loose) would raise false alarms (or miss regressions) every night. So a
# component's own spread is pooled with the fleet's typical (median) own spread of the same metric,
# weighted as if the fleet's were PRIOR_RUNS runs, and never taken below the fleet's typical spread:
# a genuinely noisier component keeps most of its own, a quiet one gets the fleet's.
PRIOR_RUNS = 10
# ... nor below this fraction of the centre (identical values would give a zero spread).
RELATIVE_FLOOR = 1e-4


@dataclass(frozen=True)
class OwnBaseline:
    """Each cell's own past: centre (median), robust sigma and number of healthy runs, NaN when none."""

    center: np.ndarray  # float [hosts, columns]
    sigma: np.ndarray  # float [hosts, columns]
    count: np.ndarray  # int [hosts, columns]


def robust_sigma(q25: np.ndarray, q75: np.ndarray) -> np.ndarray:
    return (np.asarray(q75, dtype=float) - np.asarray(q25, dtype=float)) / IQR_SIGMAS


def pooled_sigma(center: np.ndarray, sigma: np.ndarray, count: np.ndarray | None = None) -> np.ndarray:
    """The spread used for judging: per cell, ``max(typical, sqrt((n own^2 + PRIOR_RUNS typical^2) /
    (n + PRIOR_RUNS)))`` where ``typical`` is the median relative own spread of the column over the
    fleet (times the cell's centre), and at least a tiny fraction of the centre."""
    with np.errstate(invalid="ignore", divide="ignore"):
        scale = np.abs(center)
        rel = sigma / scale
        rel = np.where(np.isfinite(rel), rel, np.nan)
        typical = np.full(rel.shape[1], np.nan)
        has = np.isfinite(rel).any(axis=0)
        if has.any():
            typical[has] = np.nanmedian(rel[:, has], axis=0)
        typ = np.maximum(np.nan_to_num(typical, nan=0.0)[None, :], RELATIVE_FLOOR) * scale
        n = np.zeros_like(sigma) if count is None else np.asarray(count, dtype=float)
        own = np.where(np.isfinite(sigma), sigma, typ)
        pooled = np.sqrt((n * own**2 + PRIOR_RUNS * typ**2) / (n + PRIOR_RUNS))
        return np.fmax(pooled, typ)


@dataclass(frozen=True)
class Regressions:
    flagged: np.ndarray  # bool [hosts, columns]
    deviation: np.ndarray  # (value - centre) / |centre|
    sigmas: np.ndarray  # (value - centre) / sigma


def own_regressions(
    values: np.ndarray,
    base: OwnBaseline,
    directions: Sequence[int],
    threshold: float,
    min_deviation: float,
    min_runs: int,
) -> Regressions:
    """Cells whose value is ``threshold`` of their own sigmas and ``min_deviation`` (relative) away
    from their own centre, on the bad side (both sides when the direction is unknown), with at least
    ``min_runs`` healthy runs behind them. NaN anywhere: not flagged."""
    values = np.asarray(values, dtype=float)
    sign = np.asarray(directions, dtype=float)[None, :] if len(directions) else np.zeros((1, 0))
    sigma = pooled_sigma(base.center, base.sigma, base.count)
    with np.errstate(invalid="ignore", divide="ignore"):
        dev = (values - base.center) / np.abs(base.center)
        z = (values - base.center) / sigma
        bad_z = np.where(sign == 0, np.abs(z), -sign * z)
        bad_dev = np.where(sign == 0, np.abs(dev), -sign * dev)
        flagged = (
            (base.count >= min_runs)
            & np.isfinite(bad_z)
            & np.isfinite(bad_dev)
            & (bad_z > threshold)
            & (bad_dev > min_deviation)
        )
    return Regressions(flagged=flagged, deviation=dev, sigmas=z)


def fleet_scale(
    families: Sequence[str],
    current: Mapping[str, float],
    past: Mapping[str, Sequence[tuple[str, float]]],
    min_runs: int,
) -> np.ndarray:
    """Per column: tonight's fleet median of its family over the median of the family's fleet medians
    in the window (1 where either is unknown). Own references are scaled by it, so a shift of the whole
    fleet (a driver update) is one fleet drift finding, not a regression of every host."""
    out = np.ones(len(families))
    cache: dict[str, float] = {}
    for i, fam in enumerate(families):
        if fam not in cache:
            seq = [v for _, v in past.get(fam, ()) if np.isfinite(v)]
            now = current.get(fam)
            ref = float(np.median(seq)) if len(seq) >= min_runs else 0.0
            ok = now is not None and np.isfinite(now) and ref != 0 and now / ref > 0
            cache[fam] = float(now / ref) if ok and now is not None else 1.0
        out[i] = cache[fam]
    return out


@dataclass(frozen=True)
class Drift:
    """The fleet median of one metric family moved against its own trailing window."""

    family: str
    current: float
    reference: float  # the median of the window's fleet medians
    deviation: float  # (current - reference) / |reference|
    since: str | None  # the first run of the current streak beyond half the margin
    runs: int  # runs in the window


def fleet_drift(
    current: Mapping[str, float],
    past: Mapping[str, Sequence[tuple[str, float]]],
    directions: Mapping[str, int],
    min_deviation: float,
    threshold: float,
    min_runs: int,
) -> list[Drift]:
    """Families whose fleet median tonight is worse than the median of their last runs' fleet
    medians by ``min_deviation`` and by ``threshold`` robust sigmas of those medians.

    ``past[family]`` is ``(run label, fleet median)`` oldest first. ``since`` walks back from tonight
    over the runs already beyond half the margin: the drift began there."""
    out: list[Drift] = []
    for fam, now in current.items():
        seq = [(r, v) for r, v in past.get(fam, ()) if np.isfinite(v)]
        if len(seq) < min_runs or not np.isfinite(now):
            continue
        vals = np.array([v for _, v in seq], dtype=float)
        ref = float(np.median(vals))
        if ref == 0:
            continue
        q25, q75 = np.percentile(vals, [25, 75])
        sigma = max(float(q75 - q25) / IQR_SIGMAS, abs(ref) * RELATIVE_FLOOR)
        sign = directions.get(fam, 0)
        dev = (now - ref) / abs(ref)
        bad = abs(dev) if sign == 0 else -sign * dev
        z = abs(now - ref) / sigma
        if bad <= min_deviation or z <= threshold:
            continue
        since = None
        for run, v in reversed(seq):
            d = (v - ref) / abs(ref)
            if (abs(d) if sign == 0 else -sign * d) > min_deviation / 2:
                since = run
            else:
                break
        out.append(Drift(fam, float(now), ref, float(dev), since, len(seq)))
    return sorted(out, key=lambda d: -abs(d.deviation))


def repeat_offenders(
    verdicts: Mapping[str, Sequence[str]], k: int, n: int, bad: Sequence[str] = ("fail",)
) -> dict[str, int]:
    """Hosts with a bad verdict in at least ``k`` of their last ``n`` runs (sequences oldest first,
    tonight last) -> how many."""
    out: dict[str, int] = {}
    for host, seq in verdicts.items():
        hits = sum(1 for v in list(seq)[-n:] if v in bad)
        if hits >= k:
            out[host] = hits
    return out


def flapping(
    verdicts: Mapping[str, Sequence[str]], n: int, min_flips: int, bad: Sequence[str] = ("fail",)
) -> dict[str, int]:
    """Hosts whose last ``n`` runs switch between pass and a bad verdict at least ``min_flips`` times
    (other verdicts, such as missing, neither count nor break a sequence) -> flips."""
    out: dict[str, int] = {}
    for host, seq in verdicts.items():
        states = [v in bad for v in list(seq)[-n:] if v == "pass" or v in bad]
        flips = sum(1 for a, b in zip(states, states[1:], strict=False) if a != b)
        if flips >= min_flips:
            out[host] = flips
    return out


def back_to_healthy(verdicts: Mapping[str, Sequence[str]], bad: Sequence[str] = ("fail",)) -> dict[str, int]:
    """Hosts that pass tonight after bad verdicts in the runs just before -> how many bad runs in a row."""
    out: dict[str, int] = {}
    for host, seq in verdicts.items():
        s = list(seq)
        if len(s) < 2 or s[-1] != "pass":
            continue
        streak = 0
        for v in reversed(s[:-1]):
            if v in bad:
                streak += 1
            else:
                break
        if streak:
            out[host] = streak
    return out
