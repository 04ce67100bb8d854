"""The evidence a small fleet's verdict used, per metric: what a person needs to see why a host failed.

Majority agreement (:mod:`.majority`) judges each host of a rack-sized fleet against the median of the
other hosts, in units of the noise it measured. A report that only names the failed hosts leaves out
why; this module keeps, for every judged metric, each host's value, its own measured noise, the noise
it was judged with, its reference and the value beyond which it is flagged (its *limit*), so the
report can draw them (one dot per host, its noise as an error bar, the reference and the limits) and
tabulate them. Values only: no judgement is made here.

The limit is where both conditions of the majority check meet: the host is flagged when its log
ratio to the reference is beyond ``threshold x sigma x inflation`` on the bad side **and** the
relative deviation beyond ``min_deviation``, so on the bad side the limit is the farther of
``reference x exp(-+threshold x sigma x inflation)`` and ``reference x (1 -+ min_deviation)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

# Per-host and per-metric status words (the report colours them; the order is the report's order).
FLAGGED, TOO_NOISY, INCONSISTENT, OK, UNJUDGED = "flagged", "too_noisy", "inconsistent", "ok", "unjudged"
_STATUS_ORDER = {FLAGGED: 0, TOO_NOISY: 1, INCONSISTENT: 2, OK: 3, UNJUDGED: 4}


@dataclass(frozen=True)
class HostEvidence:
    name: str
    value: float
    noise: float | None  # the host's own measured relative noise (None: not measured)
    sigma: float | None  # the relative noise it was judged with (None: not judged)
    reference: float | None  # its leave-one-out reference (the other hosts' median)
    limit: float | None  # flagged beyond this value on the bad side (direction 0: the lower limit)
    limit_hi: float | None  # direction 0 only: the upper limit
    status: str  # FLAGGED, TOO_NOISY, OK or UNJUDGED
    rerun: float | None = None  # validate's re-run of the metric on this host, when one ran

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "value": _num(self.value),
            "noise": _num(self.noise),
            "sigma": _num(self.sigma),
            "reference": _num(self.reference),
            "limit": _num(self.limit),
            "limit_hi": _num(self.limit_hi),
            "status": self.status,
            "rerun": _num(self.rerun),
        }


@dataclass(frozen=True)
class MetricEvidence:
    metric: str
    partition: str  # the population judged ("" = the whole fleet)
    direction: int  # 1 higher is better, -1 lower is better, 0 unknown
    status: str  # FLAGGED, TOO_NOISY, INCONSISTENT or OK
    reference: float  # the median of the population's values
    hosts: tuple[HostEvidence, ...]

    def to_json(self) -> dict:
        return {
            "metric": self.metric,
            "partition": self.partition,
            "direction": self.direction,
            "status": self.status,
            "reference": _num(self.reference),
            "hosts": [h.to_json() for h in self.hosts],
        }

    def with_reruns(self, reruns: Mapping[str, Mapping[str, float]]) -> MetricEvidence:
        """The same, with each host's re-run value of the metric (``reruns``: host -> metric -> value)."""
        if not reruns:
            return self
        hosts = tuple(
            replace(h, rerun=reruns[h.name][self.metric]) if self.metric in reruns.get(h.name, {}) else h
            for h in self.hosts
        )
        return replace(self, hosts=hosts)


def limits(
    ref: np.ndarray, width: np.ndarray, min_deviation: float, direction: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(limit, limit_hi) of each value: ``width`` is ``threshold x sigma x inflation`` (log units).
    ``limit`` is the bad-side limit (the lower one for direction 0), ``limit_hi`` only for direction 0;
    NaN where there is none."""
    with np.errstate(all="ignore"):
        low = np.minimum(ref * np.exp(-width), ref * (1 - min_deviation))
        high = np.maximum(ref * np.exp(width), ref * (1 + min_deviation))
    lim = np.where(direction < 0, high, low)
    lim_hi = np.where(direction == 0, high, np.nan)
    return lim, lim_hi


def metric_evidence(
    metric: str,
    partition: str,
    direction: int,
    hosts: list[str],
    values: np.ndarray,
    own: np.ndarray,
    sigma: np.ndarray,
    ref: np.ndarray,
    limit: np.ndarray,
    limit_hi: np.ndarray,
    status: list[str],
    inconsistent: bool,
) -> MetricEvidence | None:
    """One metric's evidence from its column's arrays (one entry per host, NaN where unknown); None
    when no host reported a finite value."""
    rows = [r for r in range(len(hosts)) if math.isfinite(float(values[r]))]
    if not rows:
        return None
    per = tuple(
        HostEvidence(
            name=hosts[r],
            value=float(values[r]),
            noise=_opt(own[r]),
            sigma=_opt(sigma[r]) if status[r] != UNJUDGED else None,
            reference=_opt(ref[r]),
            limit=_opt(limit[r]) if status[r] != UNJUDGED else None,
            limit_hi=_opt(limit_hi[r]) if status[r] != UNJUDGED else None,
            status=status[r],
        )
        for r in rows
    )
    if any(h.status == FLAGGED for h in per):
        overall = FLAGGED
    elif inconsistent:
        overall = INCONSISTENT
    elif any(h.status == TOO_NOISY for h in per):
        overall = TOO_NOISY
    else:
        overall = OK
    return MetricEvidence(
        metric=metric,
        partition=partition,
        direction=direction,
        status=overall,
        reference=float(np.median(values[rows])),
        hosts=per,
    )


def ordered(found: list[MetricEvidence]) -> list[MetricEvidence]:
    """Flagged metrics first, then too noisy, inconsistent and the rest; by metric name within each."""
    return sorted(found, key=lambda e: (_STATUS_ORDER.get(e.status, 9), e.metric, e.partition))


def _opt(x: float) -> float | None:
    f = float(x)
    return f if math.isfinite(f) else None


def _num(v: float | None) -> float | None:
    if v is None or not math.isfinite(v):
        return None
    return float(f"{v:.7g}")
