"""Fleet-relative detection: a healthy fleet is its own reference.

No rules and no baseline are needed. For every *family* of metrics (one
measurement, pooled over the GPUs or NICs of each host; see ``names``):

1. **fleet check** - each value against the fleet's median of the family.
2. **sibling check** - each GPU/NIC against the median of its siblings on
   the same host (at least three). Host-wide differences (a firmware batch,
   a warmer rack) cancel out, so one GPU 4% slower than its seven siblings
   stands out even when the fleet spread is wider.
3. **combined checks** - the standardised deviations of all metrics of one
   benchmark on one GPU (or on the host) are averaged, so a GPU a little low
   on every tensor-core precision is caught although no single metric is
   conclusive. The spread of the combined score is measured on the fleet
   itself, so correlated metrics (busbw and algbw) do not inflate it.

Every check is direction-aware (only the bad side counts; both sides when
the direction is unknown) and needs two things at once: a statistical
threshold (``threshold`` robust sigmas) and a practical one (a minimum
relative deviation), so a tight metric does not flag harmless wiggles.

The practical floor of the combined sibling check follows the measured noise of
the metrics it combines: ``floor_sigmas`` times their mean robust sibling sigma,
between ``min_floor`` and the configured floor. A GPU a few percent low on every
tensor-core GEMM of a family with 0.3% noise is then found (the other GEMMs on the
GPU dilute the average below the fixed 2%), while noisy families keep their floor.
The single-metric checks keep their fixed floors, which guard against one wild
value; the fleet checks too: a benign batch of hosts shifts every metric of a host
together, and only a fixed floor tells it from a fault when the batch is too rare
to widen the measured tail.

The spread is the larger of the MAD-based sigma and a tail-based sigma read
from the 2% quantile on the bad side. A benign sub-population (say a tenth
of the hosts 1.5% slower) widens that tail, so its members are not flagged,
while a small number of faulty hosts does not move it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from sb_fleet.analysis.issues import FAIL, FlagLimit, Issue, flag_limit
from sb_fleet.analysis.order_stats import median, quantiles, row_nanmedian
from sb_fleet.analysis.stats import MAD_TO_SIGMA, shared_columns
from sb_fleet.analysis.superbench.metric_names import Directions, parse_metric
from sb_fleet.config.gatespec import DetectionSettings

TAIL_Q = 0.02
TAIL_Z = 2.0537  # the standard normal's 98% quantile
GROSS_SIGMAS = 8.0
MIN_SIBLINGS = 3


@dataclass(frozen=True)
class FamilyStats:
    """What the fleet looks like for one family of metrics (the report shows these)."""

    family: str
    direction: int
    columns: tuple[int, ...]
    center: float  # fleet median, ranks pooled
    sigma: float  # robust relative sigma of the fleet check
    sibling_sigma: float | None  # robust relative sigma of the sibling check
    fleet_limit: float  # the relative deviation beyond which the fleet check flags
    sibling_limit: float | None
    partition: str = ""  # the GPU model whose hosts these statistics describe ("" = the whole fleet)


@dataclass
class Detection:
    issues: dict[int, list[Issue]]
    families: list[FamilyStats] = field(default_factory=list)
    flagged_cells: set[tuple[int, int]] = field(default_factory=set)  # (host row, column)
    # Cells whose own measured noise raised the fleet check's limit past too_noisy_factor times the
    # fleet's: column -> [(row, own noise, the limit it was judged with, too_noisy_factor x the fleet's)]
    noisy_cells: dict[int, list[tuple[int, float, float, float]]] = field(default_factory=dict)


def category_of(metric: str) -> str:
    """A SuperBench-style category for a metric, from its benchmark."""
    name = parse_metric(metric)
    bench = name.base.split("/")[0]
    table = {
        "kernel-launch": "KernelLaunch",
        "mem-bw": "Mem",
        "ib-loopback": "RDMA",
        "ib-traffic": "RDMA",
        "nccl-bw": "NCCL",
        "rccl-bw": "NCCL",
        "gpu-copy-bw": "Mem",
        "cpu-memory-bw-latency": "CPUMem",
        "disk-benchmark": "Disk",
    }
    if bench == "gemm-flops":
        return "TensorCore" if "_tc_" in name.leaf else "GFLOPS"
    if bench in table:
        return table[bench]
    if bench.endswith("_models") or bench == "model-benchmarks" or "pytorch-" in name.base:
        return "Model"
    return bench


def _quiet_nanmedian(a: np.ndarray) -> float:
    """The median of every value of ``a`` that is not NaN (NaN when there is none)."""
    flat = a.ravel()
    nan = np.isnan(flat)
    return median(flat[~nan] if nan.any() else flat)


def _spread(signed: np.ndarray, direction: int, gross: float = 0.0) -> float:
    """Robust sigma of signed deviations: the larger of the MAD sigma and a bad-tail sigma.

    The tail sigma is read from the 2% quantile on the bad side, after setting aside gross
    outliers (beyond ``GROSS_SIGMAS`` MAD sigmas and beyond ``gross``): a benign sub-population
    stays in and widens the tail, while the faults themselves, even when many hosts have them,
    do not.
    """
    flat = signed[~np.isnan(signed)]
    if flat.size == 0:
        return float("nan")
    med = median(flat)
    dev = flat - med
    mad = median(np.abs(dev)) * MAD_TO_SIGMA
    cut = max(GROSS_SIGMAS * mad, gross)
    if cut > 0:
        bad = -dev if direction > 0 else (dev if direction < 0 else np.abs(dev))
        kept = dev[bad <= cut]
        if kept.size >= max(3, flat.size // 2 + 1):  # at every size: an extreme value cannot hide itself
            dev = kept
    lo, hi = quantiles(dev, (TAIL_Q, 1 - TAIL_Q))
    tails = []
    if direction >= 0:
        tails.append(-float(lo) / TAIL_Z)
    if direction <= 0:
        tails.append(float(hi) / TAIL_Z)
    return max(mad, max(tails), 1e-9)


def _badness(signed: np.ndarray, direction: int) -> np.ndarray:
    if direction > 0:
        return -signed
    if direction < 0:
        return signed
    return np.abs(signed)


def detect(
    columns: list[str],
    values: np.ndarray,
    directions: Directions,
    settings: DetectionSettings | None = None,
    noise: np.ndarray | None = None,
) -> Detection:
    """``noise``: each value's own measured noise (NaN where unknown): a value is judged against the
    larger of the fleet's limit and ``threshold`` times its own noise (a host whose own samples
    scatter is not condemned on a deviation inside its scatter; it is said too noisy instead)."""
    settings = settings or DetectionSettings()
    n_hosts = values.shape[0]
    out = Detection(issues={})
    if n_hosts < settings.min_hosts:
        return out
    families: dict[str, list[int]] = {}
    for i, col_name in enumerate(columns):
        name = parse_metric(col_name)
        if name.is_return_code:
            continue
        families.setdefault(name.family, []).append(i)

    # Standardised badness per (group, unit) for the combined checks: (z, relative badness, family sigma).
    comb_fleet: dict[tuple[str, str], list[tuple[np.ndarray, np.ndarray, float]]] = {}
    comb_sib: dict[tuple[str, str], list[tuple[np.ndarray, np.ndarray, float]]] = {}

    def add_issue(row: int, issue: Issue) -> None:
        out.issues.setdefault(row, []).append(issue)

    with np.errstate(all="ignore"):
        for fam, cols in families.items():
            direction = directions.of(columns[cols[0]])
            block = values[:, cols]  # H x U
            center = _quiet_nanmedian(block)
            if not np.isfinite(center) or center == 0:
                continue
            signed = (block - center) / abs(center)
            sigma = _spread(signed, direction, 2 * settings.min_deviation)
            bad = _badness(signed, direction)
            limit = max(settings.threshold * sigma, settings.min_deviation)
            own = np.nan_to_num(noise[:, cols], nan=0.0) if noise is not None else np.zeros(block.shape)
            cell_limit = np.maximum(limit, settings.threshold * own)
            hit = bad > cell_limit
            # one figure on every host (an all-node collective): no host told apart, none too noisy
            shared = shared_columns(block)
            for r, u in zip(
                *np.nonzero(~hit & ~shared[None, :] & (cell_limit > settings.too_noisy_factor * limit)),
                strict=True,
            ):
                out.noisy_cells.setdefault(cols[u], []).append(
                    (int(r), float(own[r, u]), float(cell_limit[r, u]), settings.too_noisy_factor * limit)
                )
            for r, u in zip(*np.nonzero(hit), strict=True):
                c = cols[u]
                v = float(block[r, u])
                add_issue(
                    int(r),
                    Issue(
                        metric=columns[c],
                        value=v,
                        reference=center,
                        deviation=float(signed[r, u]),
                        check="fleet",
                        category=category_of(columns[c]),
                        severity=FAIL,
                        sigmas=float(bad[r, u] / max(sigma, own[r, u])),
                        flag_limit=flag_limit(
                            float(signed[r, u]),
                            float(max(sigma, own[r, u])),
                            sigma,
                            settings.threshold,
                            settings.min_deviation,
                        ),
                        detail=(
                            f"{signed[r, u] * 100:+.1f}% from the fleet median {center:.4g} "
                            f"(limit {cell_limit[r, u] * 100:.1f}%, {bad[r, u] / sigma:.1f} robust sigmas)"
                        ),
                    ),
                )
                out.flagged_cells.add((int(r), c))
            for u, c in enumerate(cols):
                name = parse_metric(columns[c])
                comb_fleet.setdefault((name.group, name.unit), []).append(
                    (bad[:, u] / sigma, bad[:, u], sigma)
                )

            sib_sigma: float | None = None
            sib_limit: float | None = None
            if len(cols) >= MIN_SIBLINGS:
                present = np.count_nonzero(~np.isnan(block), axis=1)
                host_med = row_nanmedian(block)
                host_med = np.where((present >= MIN_SIBLINGS) & (host_med != 0), host_med, np.nan)
                rel = (block - host_med[:, None]) / np.abs(host_med)[:, None]
                sib_sigma = _spread(rel, direction, 2 * settings.sibling_min_deviation)
                if np.isfinite(sib_sigma):
                    sbad = _badness(rel, direction)
                    sib_limit = max(settings.threshold * sib_sigma, settings.sibling_min_deviation)
                    shit = sbad > np.maximum(sib_limit, settings.threshold * own)
                    for r, u in zip(*np.nonzero(shit), strict=True):
                        c = cols[u]
                        add_issue(
                            int(r),
                            Issue(
                                metric=columns[c],
                                value=float(block[r, u]),
                                reference=float(host_med[r]),
                                deviation=float(rel[r, u]),
                                check="sibling",
                                category=category_of(columns[c]),
                                severity=FAIL,
                                sigmas=float(sbad[r, u] / sib_sigma),
                                flag_limit=flag_limit(
                                    float(rel[r, u]),
                                    float(max(sib_sigma, own[r, u])),
                                    sib_sigma,
                                    settings.threshold,
                                    settings.sibling_min_deviation,
                                ),
                                detail=(
                                    f"{rel[r, u] * 100:+.1f}% from the median {host_med[r]:.4g} of its "
                                    f"{int(present[r]) - 1} siblings on this host (limit {sib_limit * 100:.1f}%)"
                                ),
                            ),
                        )
                        out.flagged_cells.add((int(r), c))
                    for u, c in enumerate(cols):
                        name = parse_metric(columns[c])
                        comb_sib.setdefault((name.group, name.unit), []).append(
                            (sbad[:, u] / sib_sigma, sbad[:, u], sib_sigma)
                        )
                else:
                    sib_sigma = None
            out.families.append(
                FamilyStats(
                    family=fam,
                    direction=direction,
                    columns=tuple(cols),
                    center=center,
                    sigma=sigma,
                    sibling_sigma=sib_sigma,
                    fleet_limit=limit,
                    sibling_limit=sib_limit,
                )
            )
        # Against the fleet, a benign sub-population shifts every metric of its hosts together, which
        # averaging does not shrink: the combined fleet check keeps the single fleet check's limits.
        fleet_min = max(settings.combined_min_deviation, settings.min_deviation)
        fleet_k = settings.combined_threshold
        cap = settings.threshold  # one wild value counts in a combination as much as a flagged one, no more
        _combined(comb_fleet, "fleet-combined", "the fleet", fleet_k, lambda _s: fleet_min, add_issue, cap)
        _combined(
            comb_sib,
            "sibling-combined",
            "its siblings on this host",
            settings.combined_threshold,
            lambda s: noise_floor(s, settings.combined_min_deviation, settings),
            add_issue,
            cap,
        )
    return out


def noise_floor(sigma: float, configured: float, settings: DetectionSettings) -> float:
    """The practical floor for a family with robust relative sigma ``sigma``.

    ``floor_sigmas`` x sigma, kept between ``min_floor`` and the configured floor; with
    ``floor_sigmas: 0`` the configured floor itself (sb-fleet's earlier fixed floors).
    """
    if settings.floor_sigmas <= 0 or not np.isfinite(sigma):
        return configured
    return min(configured, max(settings.floor_sigmas * sigma, settings.min_floor))


def scan_score(z: np.ndarray, cap: float = np.inf) -> tuple[np.ndarray, np.ndarray]:
    """The combined score of one unit's metrics (rows) on each host (columns): the best subset.

    For each host the metrics are ranked by standardised badness ``z`` (each counted at most ``cap``)
    and, for every k of at least two (or all there are), the k worst give Stouffer's sum
    ``sum(z) / sqrt(k)``; the score is the largest. A GPU low on two of nine GEMM precisions scores as
    high as the two deserve, where the mean of all nine would dilute them to noise; a GPU low on all
    nine keeps the mean's evidence (k = 9). The score's spread is measured on the fleet, so the search
    over k costs no false alarms beyond what the fleet's own healthy units show. Returns the score and
    k for each host (NaN and 0 where a host has no value). NaNs are ignored.
    """
    m, h = z.shape
    # Hosts in rows from here: each host's few metrics are contiguous, so the sorts are short.
    zt = np.ascontiguousarray(z.T)
    missing = np.isnan(zt)
    present = m - np.count_nonzero(missing, axis=1)
    zs = -np.sort(np.where(missing, np.inf, -np.minimum(zt, cap)), axis=1)  # worst first, NaNs last
    zs[np.isneginf(zs)] = 0.0
    ks = np.arange(1, m + 1, dtype=float)
    sums = np.cumsum(zs, axis=1) / np.sqrt(ks)
    # k from 2 (one metric alone is the single-metric checks' business), up to what the host has.
    allowed = (ks[None, :] <= present[:, None]) & ((ks[None, :] >= 2) | (present[:, None] < 2))
    sums[~allowed] = -np.inf
    best = np.argmax(sums, axis=1)
    has = present > 0
    score = np.where(has, sums[np.arange(h), best], np.nan)
    return score, np.where(has, best + 1, 0)


def top_mean(z: np.ndarray, rel: np.ndarray, k: np.ndarray, cap: float = np.inf) -> np.ndarray:
    """The mean of ``rel`` over each host's (column's) ``k`` worst metrics by ``z``, as ranked by
    ``scan_score``; for the few hosts whose score is high enough to matter."""
    zt = np.where(np.isnan(z), np.inf, -np.minimum(z, cap)).T
    order = np.argsort(zt, axis=1, kind="stable")
    rs = np.take_along_axis(np.nan_to_num(rel.T, nan=0.0), order, axis=1)
    sums = np.cumsum(rs, axis=1)
    kk = np.maximum(np.asarray(k, dtype=int), 1)
    return np.where(np.asarray(k) > 0, sums[np.arange(len(kk)), kk - 1] / kk, np.nan)


def _combined(
    parts: dict[tuple[str, str], list[tuple[np.ndarray, np.ndarray, float]]],
    check: str,
    against: str,
    threshold: float,
    floor_of: Callable[[float], float],
    add_issue: object,
    cap: float = np.inf,
) -> None:
    # Group the (group, unit) keys by group, so the combined score's spread is pooled over units.
    by_group: dict[str, list[tuple[str, list[tuple[np.ndarray, np.ndarray, float]]]]] = {}
    for (group, unit), lst in parts.items():
        if len(lst) >= 2:
            by_group.setdefault(group, []).append((unit, lst))
    for group, units in by_group.items():
        zs = [np.vstack([p[0] for p in lst]) for _unit, lst in units]
        scored = [scan_score(z, cap) for z in zs]
        score = np.vstack([sc for sc, _k in scored])  # units x H
        used = np.vstack([k for _sc, k in scored])
        # Larger is worse: the bad tail of the score is the lower tail of its negation.
        sigma = _spread(-score, 1)
        if not np.isfinite(sigma):
            continue
        score = score - _quiet_nanmedian(score)
        # The practical floor, on the mean deviation of the metrics the score combined (only where the
        # score passes): it follows the noise of the metrics combined (their mean family sigma).
        mean = np.full(score.shape, np.nan)
        for ui, (_unit, lst) in enumerate(units):
            rows = np.nonzero(score[ui] > threshold * sigma)[0]
            if len(rows):
                rel = np.vstack([p[1] for p in lst])
                mean[ui, rows] = top_mean(zs[ui][:, rows], rel[:, rows], used[ui, rows], cap)
        floors = np.array([floor_of(float(np.mean([p[2] for p in lst]))) for _unit, lst in units])
        hit = (score > threshold * sigma) & (mean > floors[:, None])
        for ui, r in zip(*np.nonzero(hit), strict=True):
            unit, lst = units[ui]
            where = f"GPU/NIC {unit}" if unit else "the host"
            n = int(used[ui, r])
            of = f"{n} of the {len(lst)}" if n < len(lst) else f"all {n}"
            add_issue(  # type: ignore[operator]
                int(r),
                Issue(
                    metric=f"{group}/*" + (f":{unit}" if unit else ""),
                    value=None,
                    reference=None,
                    deviation=-float(mean[ui, r]),
                    check=check,
                    category=category_of(f"{group}/x"),
                    severity=FAIL,
                    sigmas=float(score[ui, r] / sigma),
                    flag_limit=_combined_limit(
                        float(mean[ui, r]), float(score[ui, r] / sigma), threshold, lst, float(floors[ui])
                    ),
                    detail=(
                        f"{of} metrics of {group} on {where} are on average {mean[ui, r] * 100:.1f}% worse than "
                        f"{against} (combined {score[ui, r] / sigma:.1f} robust sigmas)"
                    ),
                ),
            )


def _combined_limit(
    mean: float,
    score: float,
    threshold: float,
    parts: list[tuple[np.ndarray, np.ndarray, float]],
    floor: float,
) -> FlagLimit | None:
    """A combined finding's limit on its mean deviation: where its score (linear in the deviations)
    would meet ``threshold``, at least ``floor``; its noise the mean sigma of the families combined
    (the fleet's: no re-run of a few hosts measures it again)."""
    noise = float(np.mean([p[2] for p in parts]))
    if not (score > 0 and np.isfinite(mean) and np.isfinite(noise) and noise > 0):
        return None
    return flag_limit(-1.0, noise, noise, mean * threshold / score / noise, floor)
