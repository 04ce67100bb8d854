"""Majority agreement: in a small fleet, the host that disagrees with all the others is the odd one.

A rack at bring-up has 4-16 hosts: too few to measure a distribution, enough to vote. For each
metric, each host is judged against the median of the *other* hosts (leave-one-out: an extreme
value never sits in its own reference, so it cannot hide itself, at any fleet size from 3), in
units of that metric's run-to-run noise:

* the noise is the larger of the suite's prior for the metric (:mod:`.noise_priors`), the fleet's
  own pooled spread of the metric's family (measured, when the fleet is noisier than the prior),
  and the spread of the other hosts on this very metric (when they disagree among themselves
  there is no majority to side with);
* the reference's own noise is counted: the median of ``m`` others moves by about
  ``sqrt(pi / 2 / m)`` noise units (``1 / sqrt(m)`` for one or two others), so a deviation is
  divided by ``sqrt(1 + that squared)`` before it is compared with the threshold.

A value is flagged (check ``majority``) when it is on the bad side by more than ``threshold`` noise
units **and** by the practical ``min_deviation``. The metrics of one benchmark on one GPU, NIC or
host are also combined (check ``majority-combined``): their signed noise units are summed and
divided by the square root of their number (Stouffer), so several small consistent deviations
count as one clear one. Metrics that are one measurement in several units (NCCL's ``busbw``,
``algbw`` and ``time`` of one operation and size) count once, and metrics of unknown direction
stay out of the sum (their absolute deviation would always add). A combined score is flagged above
``combined_threshold`` when the mean deviation is also beyond ``min_deviation``.

With two hosts there is no majority: every metric on which they disagree by far more than the
noise is a :class:`Disagreement` naming both, and neither host is marked (the gate fails on it;
:mod:`sb_fleet.report.analyse`).
"""

from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass, field

import numpy as np

from sb_fleet.analysis.detect import category_of
from sb_fleet.analysis.issues import FAIL, Issue
from sb_fleet.analysis.noise_priors import noise_prior
from sb_fleet.analysis.stats import MAD_TO_SIGMA
from sb_fleet.analysis.superbench.metric_names import Directions, parse_metric
from sb_fleet.config.gatespec import DetectionSettings

# One measurement reported in several units: NCCL/RCCL's <op>_<size>_{busbw,algbw,time}.
_SAME_MEASUREMENT = re.compile(r"^(.*?)_(busbw|algbw|time)$")
POOL_MIN_CELLS = 12  # the family's own pooled spread is trusted from this many values


@dataclass(frozen=True)
class Disagreement:
    """Two hosts, one metric, no majority: which one is right is unknown."""

    metric: str
    hosts: tuple[str, str]
    values: tuple[float, float]
    deviation: float  # (second - first) / first
    sigmas: float  # |difference| in noise units of one value

    def sentence(self) -> str:
        a, b = self.hosts
        va, vb = self.values
        return (
            f"{self.metric}: {a} {va:.4g} vs {b} {vb:.4g} ({self.deviation * 100:+.1f}%, "
            f"{self.sigmas:.1f} noise sigmas): two hosts and no prior, so neither is named the faulty one"
        )

    def to_json(self) -> dict:
        return {
            "metric": self.metric,
            "hosts": list(self.hosts),
            "values": list(self.values),
            "deviation": round(self.deviation, 6),
            "noise_sigmas": round(self.sigmas, 3),
        }


@dataclass
class MajorityResult:
    issues: dict[int, list[Issue]] = field(default_factory=dict)
    disagreements: list[Disagreement] = field(default_factory=list)


def _nanmedian(a: np.ndarray, axis: int) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmedian(a, axis=axis)


def _measurement(name: str) -> str:
    pm = parse_metric(name)
    m = _SAME_MEASUREMENT.match(pm.leaf)
    return f"{pm.group}/{m.group(1)}" if m and ("nccl" in pm.group or "rccl" in pm.group) else pm.base


def ref_inflation(m_others: np.ndarray) -> np.ndarray:
    """sqrt(1 + var(reference) / var(value)) for a reference that is the median of ``m`` others."""
    m = np.maximum(m_others, 1).astype(float)
    var = np.where(m <= 2, 1.0 / m, math.pi / 2 / m)
    return np.sqrt(1.0 + var)


def majority_check(
    columns: list[str],
    values: np.ndarray,
    directions: Directions,
    hosts: list[str],
    settings: DetectionSettings | None = None,
) -> MajorityResult:
    settings = settings or DetectionSettings()
    out = MajorityResult()
    n = values.shape[0]
    keep = [c for c, name in enumerate(columns) if not parse_metric(name).is_return_code]
    if n < 2 or not keep:
        return out
    names = [columns[c] for c in keep]
    v = values[:, keep].astype(float)
    prior = np.array([noise_prior(c).sigma for c in names])
    direc = np.array([directions.of(c) for c in names])
    if n == 2:
        _two_hosts(names, v, prior, hosts, settings, out)
        return out

    with np.errstate(all="ignore"):
        x = np.broadcast_to(v, (n, n, v.shape[1])).copy()
        idx = np.arange(n)
        x[idx, idx, :] = np.nan  # row i: every host but i
        ref = _nanmedian(x, axis=1)  # n x k: the other hosts' median
        m_others = np.count_nonzero(~np.isnan(x), axis=1)
        spread = _nanmedian(np.abs(x - ref[:, None, :]), axis=1) * MAD_TO_SIGMA / np.abs(ref)
        dev = (v - ref) / np.abs(ref)
        infl = ref_inflation(m_others)
        # The family's own pooled spread, when it is noisier than the prior says.
        fam_sigma = prior.copy()
        families: dict[str, list[int]] = {}
        for j, name in enumerate(names):
            families.setdefault(parse_metric(name).family, []).append(j)
        for cols in families.values():
            z = (dev[:, cols] / infl[:, cols]).ravel()
            z = z[np.isfinite(z)]
            if z.size >= POOL_MIN_CELLS:
                mad = float(np.median(np.abs(z - np.median(z)))) * MAD_TO_SIGMA
                fam_sigma[cols] = np.maximum(prior[cols], mad)
        sigma = np.maximum(fam_sigma[None, :], np.nan_to_num(spread, nan=np.inf))
        bad = np.where(direc > 0, -dev, np.where(direc < 0, dev, np.abs(dev)))
        z = bad / (sigma * infl)
        usable = np.isfinite(z) & (m_others >= 2) & (ref != 0)
        z = np.where(usable, z, np.nan)
        hit = (z > settings.threshold) & (bad > settings.min_deviation)

    for r, j in zip(*np.nonzero(hit), strict=True):
        out.issues.setdefault(int(r), []).append(
            Issue(
                metric=names[j],
                value=float(v[r, j]),
                reference=float(ref[r, j]),
                deviation=float(dev[r, j]),
                check="majority",
                category=category_of(names[j]),
                severity=FAIL,
                sigmas=float(z[r, j]),
                detail=(
                    f"{dev[r, j] * 100:+.1f}% from the median {ref[r, j]:.4g} of the {int(m_others[r, j])} "
                    f"other hosts ({z[r, j]:.1f} noise sigmas; noise {sigma[r, j] * 100:.1f}%)"
                ),
            )
        )
    _combine(names, v, dev, bad, z, direc, settings, out)
    return out


def _combine(
    names: list[str],
    v: np.ndarray,
    dev: np.ndarray,
    bad: np.ndarray,
    z: np.ndarray,
    direc: np.ndarray,
    settings: DetectionSettings,
    out: MajorityResult,
) -> None:
    # (benchmark, unit) -> measurement -> columns
    units: dict[tuple[str, str], dict[str, list[int]]] = {}
    for j, name in enumerate(names):
        if direc[j] == 0:
            continue
        pm = parse_metric(name)
        units.setdefault((pm.group, pm.unit), {}).setdefault(_measurement(name), []).append(j)
    for (group, unit), meas in units.items():
        if len(meas) < 2:
            continue
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)
            zm = np.column_stack([np.nanmean(z[:, cols], axis=1) for cols in meas.values()])
            bm = np.column_stack([np.nanmean(bad[:, cols], axis=1) for cols in meas.values()])
            k = np.count_nonzero(np.isfinite(zm), axis=1)
            score = np.nansum(zm, axis=1) / np.sqrt(np.maximum(k, 1))
            mean_bad = np.nanmean(bm, axis=1)
        hit = (k >= 2) & (score > settings.combined_threshold) & (mean_bad > settings.min_deviation)
        for r in np.nonzero(hit)[0]:
            where = f"GPU/NIC {unit}" if unit else "the host"
            out.issues.setdefault(int(r), []).append(
                Issue(
                    metric=f"{group}/*" + (f":{unit}" if unit else ""),
                    value=None,
                    reference=None,
                    deviation=-float(mean_bad[r]),
                    check="majority-combined",
                    category=category_of(f"{group}/x"),
                    severity=FAIL,
                    sigmas=float(score[r]),
                    detail=(
                        f"{int(k[r])} measurements of {group} on {where} are on average "
                        f"{mean_bad[r] * 100:.1f}% worse than the other hosts' medians "
                        f"(combined {score[r]:.1f} noise sigmas)"
                    ),
                )
            )


def _two_hosts(
    names: list[str],
    v: np.ndarray,
    prior: np.ndarray,
    hosts: list[str],
    settings: DetectionSettings,
    out: MajorityResult,
) -> None:
    with np.errstate(all="ignore"):
        a, b = v[0], v[1]
        dev = (b - a) / np.abs(a)
        # The difference of two values has sqrt(2) noise sigmas; measured against the smaller one.
        diff = np.abs(b - a) / np.minimum(np.abs(a), np.abs(b))
        sig = diff / (prior * math.sqrt(2))
        hit = np.isfinite(sig) & (sig > settings.threshold) & (diff > settings.min_deviation)
    for j in np.nonzero(hit)[0]:
        out.disagreements.append(
            Disagreement(
                metric=names[j],
                hosts=(hosts[0], hosts[1]),
                values=(float(a[j]), float(b[j])),
                deviation=float(dev[j]),
                sigmas=float(sig[j]),
            )
        )
    out.disagreements.sort(key=lambda d: -d.sigmas)
