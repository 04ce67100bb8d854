"""Per-metric statistics across a fleet, computed for all metrics at once.

Missing values (NaN) are ignored. Each column is sorted once and every
percentile is read off by linear interpolation (numpy's default method).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PERCENTILES = (1, 5, 25, 50, 75, 95, 99)
MAD_TO_SIGMA = 1.4826


@dataclass(frozen=True)
class ColumnStats:
    count: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    min: np.ndarray
    max: np.ndarray
    percentiles: dict[int, np.ndarray]

    def row(self, i: int) -> dict[str, float | int | None]:
        def num(a: np.ndarray) -> float | None:
            v = float(a[i])
            return None if not np.isfinite(v) else v

        out: dict[str, float | int | None] = {
            "count": int(self.count[i]),
            "mean": num(self.mean),
            "std": num(self.std),
            "min": num(self.min),
            "max": num(self.max),
        }
        for p, arr in self.percentiles.items():
            out[f"p{p}"] = num(arr)
        return out


def sorted_quantiles(sorted_cols: np.ndarray, counts: np.ndarray, qs: list[float]) -> list[np.ndarray]:
    """Quantiles (0..1) of each column of a matrix sorted along axis 0 with NaNs last."""
    out = []
    n_cols = sorted_cols.shape[1]
    idx_cols = np.arange(n_cols)
    last = np.maximum(counts - 1, 0)
    for q in qs:
        pos = q * last
        lo = np.floor(pos).astype(np.int64)
        hi = np.minimum(lo + 1, last)
        frac = pos - lo
        if sorted_cols.shape[0] == 0:
            out.append(np.full(n_cols, np.nan))
            continue
        a = sorted_cols[lo, idx_cols]
        b = sorted_cols[hi, idx_cols]
        v = a + (b - a) * frac
        v = np.where(counts > 0, v, np.nan)
        out.append(v)
    return out


def column_stats(values: np.ndarray) -> ColumnStats:
    counts = np.count_nonzero(~np.isnan(values), axis=0)
    with np.errstate(all="ignore"):
        s = np.sort(values, axis=0)
        safe = np.maximum(counts, 1)
        total = np.nansum(values, axis=0)
        mean = np.where(counts > 0, total / safe, np.nan)
        dev = np.where(np.isnan(values), 0.0, values - mean)
        var = (dev * dev).sum(axis=0) / np.maximum(counts - 1, 1)
        std = np.where(counts > 1, np.sqrt(var), np.where(counts == 1, 0.0, np.nan))
    qs = sorted_quantiles(s, counts, [p / 100 for p in PERCENTILES])
    mn = np.where(counts > 0, s[0] if s.shape[0] else np.nan, np.nan)
    mx = sorted_quantiles(s, counts, [1.0])[0]
    return ColumnStats(
        count=counts, mean=mean, std=std, min=mn, max=mx, percentiles=dict(zip(PERCENTILES, qs, strict=True))
    )


def shared_columns(values: np.ndarray) -> np.ndarray:
    """Columns on which every host that reported a value reported the very same one (at least two): a
    figure every host shares, such as an all-node collective's one figure on every rank."""
    return (np.fmax.reduce(values, axis=0) == np.fmin.reduce(values, axis=0)) & (
        np.count_nonzero(np.isfinite(values), axis=0) >= 2
    )
