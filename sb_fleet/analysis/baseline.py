"""Baselines: read one, or make one from a fleet's results.

A baseline is SuperBench's: a JSON object of metric name -> number, usually
without ranks (``"gemm-flops/fp16_tc_flops": 280435.1``).

Generation is robust: a host whose run of a benchmark failed is left out
of that benchmark, ranks are pooled (unless asked per rank), and the value
is the median of what remains after dropping values more than 5 robust
sigmas from it (``median``) or their mean (``trimmed-mean``). A few bad hosts
move neither.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Literal

import numpy as np

from sb_fleet.analysis.names import parse_metric
from sb_fleet.analysis.results import Fleet
from sb_fleet.analysis.stats import MAD_TO_SIGMA, column_stats
from sb_fleet.errors import RulesError

TRIM_SIGMAS = 5.0


def load_baseline(path: Path) -> dict[str, float]:
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise RulesError(path, None, f"cannot read the baseline ({exc.strerror})") from exc
    except ValueError as exc:
        raise RulesError(
            path, None, f"not valid JSON ({exc})", "a baseline is an object of metric -> number"
        ) from exc
    if not isinstance(data, dict):
        raise RulesError(path, None, "expected a JSON object of metric name -> number")
    out: dict[str, float] = {}
    for k, v in data.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
            raise RulesError(path, k, f"baseline value {v!r} is not a finite number")
        out[str(k)] = float(v)
    return out


def _usable(fleet: Fleet) -> np.ndarray:
    """The values with every failed benchmark run blanked out."""
    vals = fleet.values.copy()
    rc_of: dict[str, list[int]] = {}
    for i, c in enumerate(fleet.columns):
        name = parse_metric(c)
        if name.is_return_code:
            rc_of.setdefault(name.group, []).append(i)
    failed = {g: (fleet.values[:, cols] != 0).any(axis=1) for g, cols in rc_of.items()}  # NaN != 0: not run
    for i, c in enumerate(fleet.columns):
        name = parse_metric(c)
        if name.group in failed and not name.is_return_code:
            vals[failed[name.group], i] = np.nan
    return vals


def _robust_value(x: np.ndarray, statistic: str) -> float | None:
    x = x[~np.isnan(x)]
    if x.size == 0:
        return None
    med = float(np.median(x))
    sigma = float(np.median(np.abs(x - med))) * MAD_TO_SIGMA
    if sigma > 0:
        x = x[np.abs(x - med) <= TRIM_SIGMAS * sigma]
    if statistic == "trimmed-mean":
        return float(np.mean(x))
    return float(np.median(x))


def make_baseline(
    fleet: Fleet,
    statistic: Literal["median", "trimmed-mean"] = "median",
    per_rank: bool = False,
    digits: int = 6,
) -> dict[str, float]:
    vals = _usable(fleet)
    keys: dict[str, list[int]] = {}
    for i, c in enumerate(fleet.columns):
        name = parse_metric(c)
        if name.is_return_code:
            keys.setdefault(c if per_rank else name.base, [])
            continue
        keys.setdefault(c if per_rank else name.base, []).append(i)
    out: dict[str, float] = {}
    for key, cols in sorted(keys.items()):
        if parse_metric(key).is_return_code:
            out[key] = 0
            continue
        v = _robust_value(vals[:, cols].ravel(), statistic)
        if v is not None:
            out[key] = float(f"{v:.{digits}g}")
    return out


def summarize(fleet: Fleet) -> dict[str, dict]:
    """Per-metric statistics across the fleet (every column, ranks separate)."""
    st = column_stats(fleet.values)
    return {c: st.row(i) for i, c in enumerate(fleet.columns)}
