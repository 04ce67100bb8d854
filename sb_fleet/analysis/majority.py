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

**Measured noise.** Where the run measured it (``noise``: each value's relative robust sigma over
its timed samples, :mod:`sb_bench.core.samples`, from the run's ``noise-summary.jsonl``), the noise
of a value is the largest of the prior (or the family's pooled spread), the other hosts' spread on
the metric, the host's own measured noise and the other hosts' own measured noise (their median).
What decides is always what the run shows, never less than the prior.

**What cannot be judged is said** (:class:`NoisyMetric`): where that noise makes the smallest
deviation the check could flag (``max(min_deviation, threshold x noise x inflation)``) more than
``too_noisy_factor`` times the one it flags at the prior, a host that is not flagged is *too noisy
to judge* down to the gate's promise; the report lists those metrics, hosts and figures.
A metric on which every host reports the very same figure (a collective measured across all of
them: every rank of an all-node ``nccl-bw`` reports the group's bandwidth) tells no host from another:
no host is judged on it and it is not reported too noisy (the fabric's analysis localises links).
**Inconsistent** (:class:`Inconsistency`): hosts that each measured steadily (every host's own noise
known) but disagree beyond it, with no majority that agrees within it, are no reference for each
other: no host is judged on the metric, and the groups are named.

With two hosts there is no majority: every metric on which they disagree by more than
``threshold`` times their noise (the prior or their own measured noise, whichever is larger) is a
:class:`Disagreement` naming both, and neither host is marked (the gate fails on it;
:mod:`sb_fleet.report.analyse`). Two hosts that differ within their measured noise are no finding.
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from sb_fleet.analysis import evidence as ev
from sb_fleet.analysis.detect import category_of
from sb_fleet.analysis.issues import FAIL, FlagLimit, Issue, flag_limit
from sb_fleet.analysis.noise_priors import noise_prior
from sb_fleet.analysis.stats import MAD_TO_SIGMA, shared_columns
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
    # what flagged it: each host's noise (the prior or its own, the larger), the threshold in noise
    # sigmas and the practical margin (NaN threshold: a record from before these were kept)
    noise: tuple[float, float] = (math.nan, math.nan)
    threshold: float = math.nan
    min_deviation: float = 0.0
    # validate's re-run: None (none ran), or whether the two hosts disagreed the same way again, and how
    # (a disagreement found inside a population split that did not show again is not confirmed either)
    confirmed: bool | None = None
    confirmation: str = ""

    @property
    def key(self) -> str:
        """Its identity across two analyses of one run: the metric and the two hosts."""
        return disagreement_key(self.metric, self.hosts)

    @property
    def standing(self) -> bool:
        """Not cleared by a re-run (a finding, unless it did not show again)."""
        return self.confirmed is not False

    @property
    def groups(self) -> tuple[tuple[str], tuple[str]]:
        """The two hosts as groups, the lower value first (as :class:`Inconsistency`'s)."""
        a, b = self.hosts
        return ((a,), (b,)) if self.values[0] <= self.values[1] else ((b,), (a,))

    @property
    def apart(self) -> float:
        lo, hi = sorted(self.values)
        return hi / lo - 1 if lo > 0 else math.inf

    def rerun_need(self, rerun_noise: Sequence[float | None]) -> float | None:
        """How far apart (relative) the two hosts must be again in a re-run: the limit that flagged
        them, under each host's noise in the re-run where that is the larger; None without a limit."""
        first = self.noise if self.values[0] <= self.values[1] else self.noise[::-1]
        return _need(first, rerun_noise, self.threshold, self.min_deviation)

    def sentence(self) -> str:
        a, b = self.hosts
        va, vb = self.values
        head = f"{self.metric}: {a} {va:.4g} vs {b} {vb:.4g} ({self.deviation * 100:+.1f}%, {self.sigmas:.1f} noise sigmas)"
        if self.confirmed is False:
            return f"{head}; {self.confirmation}: not a finding"
        checked = f"; validate's re-run {self.confirmation}" if self.confirmed else ""
        return f"{head}: two hosts and no majority, so neither is named the faulty one{checked}"

    def to_json(self) -> dict:
        return {
            "metric": self.metric,
            "hosts": list(self.hosts),
            "values": list(self.values),
            "deviation": round(self.deviation, 6),
            "noise_sigmas": round(self.sigmas, 3),
            **(
                {"confirmed": self.confirmed, "confirmation": self.confirmation}
                if self.confirmed is not None
                else {}
            ),
        }


def disagreement_key(metric: str, hosts: Sequence[str]) -> str:
    """A disagreement's identity (:attr:`Disagreement.key`), also from report.json's fields."""
    return "|".join(["disagreement", metric, *sorted(hosts)])


@dataclass(frozen=True)
class NoisyMetric:
    """One metric that the noise of the run keeps from being judged down to the gate's promise."""

    metric: str
    hosts: tuple[str, ...]
    noise: tuple[float, ...]  # the noise each host was judged with (relative sigma)
    source: tuple[str, ...]  # what set it: "own samples", "other hosts' samples", "spread across hosts", ...
    catchable: tuple[float, ...]  # the smallest deviation that would have been flagged on each host
    promised: float  # the deviation flagged at the prior, times too_noisy_factor (the largest of the hosts)

    def sentence(self) -> str:
        worst = max(range(len(self.hosts)), key=lambda i: self.noise[i])
        shown = ", ".join(self.hosts[:4]) + (
            f" and {len(self.hosts) - 4} more" if len(self.hosts) > 4 else ""
        )
        return (
            f"{self.metric} is too noisy to judge on {len(self.hosts)} host(s) ({shown}): noise up to "
            f"{self.noise[worst] * 100:.1f}% ({self.source[worst]}), so only deviations beyond "
            f"{self.catchable[worst] * 100:.0f}% could be flagged, where the gate promises "
            f"{self.promised * 100:.0f}%; re-run on a quieter fleet (or validate --confirm)"
        )

    def to_json(self) -> dict:
        return {
            "metric": self.metric,
            "hosts": [
                {
                    "name": h,
                    "noise": round(self.noise[i], 6),
                    "source": self.source[i],
                    "smallest_flagged_deviation": round(self.catchable[i], 6),
                }
                for i, h in enumerate(self.hosts)
            ],
            "promised_deviation": round(self.promised, 6),
        }


@dataclass(frozen=True)
class Inconsistency:
    """Hosts that each measured steadily but disagree beyond their noise, with no majority."""

    metric: str
    groups: tuple[tuple[str, ...], ...]  # lowest value first
    centers: tuple[float, ...]  # each group's median
    noise: tuple[float, ...]  # each group's median own noise
    # the threshold in noise sigmas and the practical margin two hosts were told apart by (NaN: a record
    # from before these were kept)
    threshold: float = math.nan
    min_deviation: float = 0.0
    # validate's re-run of the metric's benchmark on these hosts: None (none ran), or whether the
    # groups showed again, and how
    confirmed: bool | None = None
    confirmation: str = ""

    @property
    def key(self) -> str:
        """Its identity across two analyses of one run: the metric and the groups."""
        return inconsistency_key(self.metric, self.groups)

    @property
    def apart(self) -> float:
        """How far the highest group's centre lies above the lowest's (relative)."""
        lo, hi = self.centers[0], self.centers[-1]
        return hi / lo - 1 if lo > 0 else math.inf

    @property
    def standing(self) -> bool:
        """Not cleared by a re-run (a finding, unless it did not show again)."""
        return self.confirmed is not False

    def rerun_need(self, rerun_noise: Sequence[float | None]) -> float | None:
        """How far apart (relative) the lowest and highest groups' centres must be again in a re-run:
        the limit two hosts were told apart by, under the groups' noise in the re-run where that is the
        larger (never less than the first run asked); None without a limit."""
        return _need((self.noise[0], self.noise[-1]), rerun_noise, self.threshold, self.min_deviation)

    def sentence(self) -> str:
        parts = "; ".join(
            f"{', '.join(g[:3])}{' ...' if len(g) > 3 else ''} at {c:.4g} (noise {s * 100:.1f}%)"
            for g, c, s in zip(self.groups, self.centers, self.noise, strict=True)
        )
        head = f"{self.metric}: the hosts measured steadily but disagree beyond their noise and no majority agrees: {parts}"
        if self.confirmed is False:
            return (
                f"{head}; validate's re-run {self.confirmation}: the disagreement moves between runs, so the "
                "metric is too noisy here to judge (not a finding)"
            )
        if self.confirmed:
            return f"{head}; validate's re-run {self.confirmation}: check the hosts of both groups"
        return f"{head}; re-run them (validate --confirm) before trusting either group"

    def to_json(self) -> dict:
        return {
            "metric": self.metric,
            "groups": [
                {"hosts": list(g), "center": c, "noise": round(s, 6)}
                for g, c, s in zip(self.groups, self.centers, self.noise, strict=True)
            ],
            **(
                {"confirmed": self.confirmed, "confirmation": self.confirmation}
                if self.confirmed is not None
                else {}
            ),
        }


def _need(
    first: Sequence[float], rerun: Sequence[float | None], threshold: float, min_deviation: float
) -> float | None:
    if not math.isfinite(threshold):
        return None
    sig = [max(f, r) if r is not None and math.isfinite(r) else f for f, r in zip(first, rerun, strict=True)]
    return max(min_deviation, threshold * math.hypot(*sig))


def inconsistency_key(metric: str, groups: Sequence[Sequence[str]]) -> str:
    """An inconsistency's identity (:attr:`Inconsistency.key`), also from report.json's fields."""
    return "|".join(["inconsistent", metric, *(",".join(sorted(g)) for g in groups)])


@dataclass
class MajorityResult:
    issues: dict[int, list[Issue]] = field(default_factory=dict)
    disagreements: list[Disagreement] = field(default_factory=list)
    noisy: list[NoisyMetric] = field(default_factory=list)
    inconsistent: list[Inconsistency] = field(default_factory=list)
    # what each judged metric's verdict used: values, noise, references, limits (analysis.evidence)
    evidence: list[ev.MetricEvidence] = field(default_factory=list)


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
    noise: np.ndarray | None = None,
) -> MajorityResult:
    """Judge each host against the others (see the module's text). ``noise``: the measured noise of each
    value (same shape as ``values``, NaN where unknown), or None."""
    settings = settings or DetectionSettings()
    out = MajorityResult()
    n = values.shape[0]
    keep = [c for c, name in enumerate(columns) if not parse_metric(name).is_return_code]
    if n < 2 or not keep:
        return out
    names = [columns[c] for c in keep]
    v = values[:, keep].astype(float)
    own = noise[:, keep].astype(float) if noise is not None else np.full(v.shape, np.nan)
    prior = np.array([noise_prior(c).sigma for c in names])
    direc = np.array([directions.of(c) for c in names])
    if n == 2:
        _two_hosts(names, v, prior, own, hosts, settings, out)
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
        # The other hosts' own measured noise: the reference is no steadier than what it is made of.
        xo = np.broadcast_to(own, (n, n, own.shape[1])).copy()
        xo[idx, idx, :] = np.nan
        others_own = _nanmedian(xo, axis=1)
        # A value with no timed samples of its own where the other hosts measured theirs (a window that
        # collapsed to one figure: one stall can be all of it): its own noise is UNKNOWN. It never takes
        # the other hosts' spread or samples as its own noise, and gets no count of noise sigmas.
        own_unknown = np.isnan(own) & np.isfinite(others_own)
        candidates = np.stack(
            [
                np.broadcast_to(fam_sigma[None, :], v.shape),
                np.nan_to_num(spread, nan=np.inf),
                np.nan_to_num(own, nan=0.0),
                np.nan_to_num(others_own, nan=0.0),
            ]
        )
        which = np.where(own_unknown, _OWN_UNKNOWN, np.argmax(candidates, axis=0))
        sigma = np.max(candidates, axis=0)
        bad = np.where(direc > 0, -dev, np.where(direc < 0, dev, np.abs(dev)))
        # Judged on the log of the ratio (relative noise is the spread of the log): a host at half the
        # throughput is as far off as one taking twice the time, not -50% against +100%.
        ratio = v / ref
        logdev = np.where(ratio > 0, np.log(np.where(ratio > 0, ratio, 1.0)), dev)
        bad_log = np.where(direc > 0, -logdev, np.where(direc < 0, logdev, np.abs(logdev)))
        z = bad_log / (sigma * infl)
        usable = np.isfinite(z) & (m_others >= 2) & (ref != 0)
        incons = _inconsistent(names, v, own, prior, hosts, settings, out)
        usable &= ~incons[None, :]
        # One figure for every host (a collective measured across them all): nothing tells one host from
        # another, so no host is judged on it, and it is not "too noisy" either (the fabric's analysis is)
        shared = shared_columns(v)
        usable &= ~shared[None, :]
        z = np.where(usable, z, np.nan)
        hit = (z > settings.threshold) & (bad > settings.min_deviation)
        catchable = np.maximum(settings.min_deviation, settings.threshold * sigma * infl)
        promised = settings.too_noisy_factor * np.maximum(
            settings.min_deviation, settings.threshold * prior[None, :] * infl
        )
        noisy = usable & ~hit & (catchable > promised)
        lim, lim_hi = ev.limits(
            ref, settings.threshold * sigma * infl, settings.min_deviation, direc[None, :]
        )

    for j, name in enumerate(names):
        if shared[j]:
            continue
        status = [
            ev.FLAGGED
            if hit[r, j]
            else ev.TOO_NOISY
            if noisy[r, j]
            else ev.OK
            if usable[r, j]
            else ev.UNJUDGED
            for r in range(n)
        ]
        found = ev.metric_evidence(
            name,
            "",
            int(direc[j]),
            hosts,
            v[:, j],
            own[:, j],
            sigma[:, j],
            ref[:, j],
            lim[:, j],
            lim_hi[:, j],
            status,
            bool(incons[j]),
        )
        if found is not None:
            out.evidence.append(found)
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
                sigmas=None if own_unknown[r, j] else float(z[r, j]),
                flag_limit=flag_limit(
                    float(dev[r, j]) if direc[j] == 0 else float(-direc[j]),  # the bad side
                    float(sigma[r, j]),
                    float(fam_sigma[j]),
                    settings.threshold * float(infl[r, j]),
                    settings.min_deviation,
                    log=True,
                ),
                detail=(
                    f"{dev[r, j] * 100:+.1f}% from the median {ref[r, j]:.4g} of the {int(m_others[r, j])} "
                    + (
                        "other hosts (its own noise unknown: the value has no timed samples of its own; "
                        f"the other hosts' noise is {sigma[r, j] * 100:.1f}%)"
                        if own_unknown[r, j]
                        else f"other hosts ({z[r, j]:.1f} noise sigmas; noise {sigma[r, j] * 100:.1f}%, "
                        f"{_source(int(which[r, j]), fam_sigma[j] > prior[j])})"
                    )
                ),
            )
        )
    for jj in np.nonzero(noisy.any(axis=0))[0]:
        j = int(jj)
        rows = np.nonzero(noisy[:, j])[0]
        out.noisy.append(
            NoisyMetric(
                metric=names[j],
                hosts=tuple(hosts[r] for r in rows),
                noise=tuple(float(sigma[r, j]) for r in rows),
                source=tuple(_source(int(which[r, j]), fam_sigma[j] > prior[j]) for r in rows),
                catchable=tuple(float(catchable[r, j]) for r in rows),
                promised=float(promised[rows, j].max()),
            )
        )
    _combine(
        names,
        v,
        dev,
        bad,
        np.where(own_unknown, np.nan, z),
        direc,
        settings,
        out,
        sigma,
        np.broadcast_to(fam_sigma[None, :], v.shape),
    )
    return out


_SOURCES = ("prior", "spread across hosts", "own samples", "other hosts' samples", "own noise unknown")
_OWN_UNKNOWN = 4


def _source(which: int, family_measured: bool) -> str:
    if which == 0:
        return "family spread across hosts" if family_measured else "prior"
    return _SOURCES[which]


def _agree(a: float, b: float, sa: float, sb: float, settings: DetectionSettings) -> bool:
    """Two values agree within their noise (or within the practical margin)."""
    lo = min(abs(a), abs(b))
    if lo == 0:
        return a == b
    diff = abs(a - b) / lo
    return diff <= max(settings.min_deviation, settings.threshold * math.hypot(sa, sb))


def _inconsistent(
    names: list[str],
    v: np.ndarray,
    own: np.ndarray,
    prior: np.ndarray,
    hosts: list[str],
    settings: DetectionSettings,
    out: MajorityResult,
) -> np.ndarray:
    """Columns where every host measured its own noise, and no majority agrees within it: recorded in
    ``out.inconsistent`` (one per metric, its ranks pooled); the mask of those columns."""
    mask = np.zeros(v.shape[1], dtype=bool)
    found: dict[str, Inconsistency] = {}
    for j in range(v.shape[1]):
        rows = np.nonzero(np.isfinite(v[:, j]))[0]
        if rows.size < 3 or not np.isfinite(own[rows, j]).all():
            continue
        vals = v[rows, j]
        sig = np.maximum(prior[j], own[rows, j])
        agree = np.array(
            [
                [_agree(vals[a], vals[b], sig[a], sig[b], settings) for b in range(rows.size)]
                for a in range(rows.size)
            ]
        )
        if (agree.sum(axis=1) * 2 > rows.size).any():
            continue  # a majority agrees within its noise: judged against it
        mask[j] = True
        order = np.argsort(vals)
        groups: list[list[int]] = [[int(order[0])]]
        for a, b in zip(order[:-1], order[1:], strict=True):
            if agree[a, b]:
                groups[-1].append(int(b))
            else:
                groups.append([int(b)])
        base = parse_metric(names[j]).base
        if base not in found:  # one finding per metric: its first rank that shows it
            found[base] = Inconsistency(
                metric=names[j],
                groups=tuple(tuple(hosts[rows[i]] for i in g) for g in groups),
                centers=tuple(float(np.median(vals[g])) for g in groups),
                noise=tuple(float(np.median(sig[g])) for g in groups),
                threshold=settings.threshold,
                min_deviation=settings.min_deviation,
            )
    out.inconsistent.extend(found.values())
    return mask


def _combine(
    names: list[str],
    v: np.ndarray,
    dev: np.ndarray,
    bad: np.ndarray,
    z: np.ndarray,
    direc: np.ndarray,
    settings: DetectionSettings,
    out: MajorityResult,
    noise: np.ndarray | None = None,
    floor: np.ndarray | None = None,
) -> None:
    """``noise``: the noise each value was judged with, ``floor``: the part of it the prior or the
    family's spread set (for the combined finding's :class:`FlagLimit`)."""
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
            cols = [j for js in meas.values() for j in js]
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
                    flag_limit=_combined_limit(
                        float(mean_bad[r]),
                        float(score[r]),
                        settings,
                        None if noise is None else noise[r, cols],
                        None if floor is None else floor[r, cols],
                    ),
                    detail=(
                        f"{int(k[r])} measurements of {group} on {where} are on average "
                        f"{mean_bad[r] * 100:.1f}% worse than the other hosts' medians "
                        f"(combined {score[r]:.1f} noise sigmas)"
                    ),
                )
            )


def _combined_limit(
    mean_bad: float,
    score: float,
    settings: DetectionSettings,
    noises: np.ndarray | None,
    floor: np.ndarray | None,
) -> FlagLimit | None:
    """A combined finding's limit on its mean deviation: where the score, linear in the deviations at
    their noise, would meet ``combined_threshold`` (at least ``min_deviation``); its noise the mean
    noise of the metrics combined. None where that cannot be told."""
    if noises is None or floor is None or not score > 0 or not math.isfinite(mean_bad):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        noise, low = float(np.nanmean(noises)), float(np.nanmean(floor))
    if not (math.isfinite(noise) and noise > 0):
        return None
    sigmas = mean_bad * settings.combined_threshold / score / noise
    return flag_limit(
        -1.0, noise, min(low, noise) if math.isfinite(low) else noise, sigmas, settings.min_deviation
    )


def _two_hosts(
    names: list[str],
    v: np.ndarray,
    prior: np.ndarray,
    own: np.ndarray,
    hosts: list[str],
    settings: DetectionSettings,
    out: MajorityResult,
) -> None:
    with np.errstate(all="ignore"):
        a, b = v[0], v[1]
        dev = (b - a) / np.abs(a)
        # The difference of two values: each with the prior or its own measured noise, the larger.
        sa = np.fmax(prior, own[0])
        sb = np.fmax(prior, own[1])
        diff = np.abs(b - a) / np.minimum(np.abs(a), np.abs(b))
        sig = diff / np.hypot(sa, sb)
        hit = np.isfinite(sig) & (sig > settings.threshold) & (diff > settings.min_deviation)
    for j in np.nonzero(hit)[0]:
        out.disagreements.append(
            Disagreement(
                metric=names[j],
                hosts=(hosts[0], hosts[1]),
                values=(float(a[j]), float(b[j])),
                deviation=float(dev[j]),
                sigmas=float(sig[j]),
                noise=(float(sa[j]), float(sb[j])),
                threshold=settings.threshold,
                min_deviation=settings.min_deviation,
            )
        )
    out.disagreements.sort(key=lambda d: -d.sigmas)
