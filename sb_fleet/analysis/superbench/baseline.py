"""Baselines: read one, or make one from a fleet's results.

A baseline is SuperBench's: a JSON object of metric name -> number, usually
without ranks (``"gemm-flops/fp16_tc_flops": 280435.1``).

SuperBench's own algorithms (``fix_threshold``, ``mean``, driven by summary and
diagnosis rules, with its rounding and a previous baseline merged) are at the end;
sb-fleet's robust generation stays the default.

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

from sb_fleet.analysis.fleet_results import Fleet
from sb_fleet.analysis.stats import MAD_TO_SIGMA, column_stats
from sb_fleet.analysis.superbench.criteria import Criteria
from sb_fleet.analysis.superbench.metric_names import baseline_of, parse_metric
from sb_fleet.analysis.superbench.rules import RuleSet, match_patterns
from sb_fleet.analysis.superbench.sbsummary import SummaryRule, pooled_name
from sb_fleet.config.yamlsrc import read_capped
from sb_fleet.errors import RulesError, UsageError

TRIM_SIGMAS = 5.0


def load_baseline(path: Path) -> dict[str, float]:
    path = Path(path)
    try:
        data = json.loads(read_capped(path, "baseline", RulesError))
    except RecursionError:
        raise RulesError(path, None, "the baseline is nested too deeply", "a baseline is flat") from None
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


# --- SuperBench's generate-baseline (sb result generate-baseline) ---------------------------------

SB_ALGORITHMS = ("fix_threshold", "mean")
SB_DIGITS = 2


def aggregate_for_baseline(
    rules: list[SummaryRule], columns: list[str], values: np.ndarray
) -> dict[str, np.ndarray]:
    """The data SuperBench makes a baseline from: each summary rule's metrics, pooled as the rule says.

    ``aggregate: true`` pools the ranks under the name without ``:rank``; a regex pools the metrics it
    matches, and every one of them keeps its own name with the pooled data (as SuperBench restores them).
    """
    out: dict[str, np.ndarray] = {}
    for rule in rules:
        cols = match_patterns(rule.patterns, rule.compiled, columns)
        if not rule.aggregate:
            for c in cols:
                out[columns[c]] = values[:, c]
            continue
        pools: dict[str, list[np.ndarray]] = {}
        for c in cols:
            pools.setdefault(pooled_name(columns[c], rule.aggregate), []).append(values[:, c])
        pooled = {k: np.concatenate(v) for k, v in pools.items()}
        if rule.aggregate is True:
            out.update(pooled)
        else:
            for c in cols:
                out[columns[c]] = pooled[pooled_name(columns[c], rule.aggregate)]
    return out


def fix_threshold(data: np.ndarray, function: str, criteria: Criteria) -> float:
    """SuperBench's fix-threshold outlier removal: the mean, recomputed until no value violates the rule.

    Each round takes the mean of the values left and drops every value the rule flags against it
    (``variance``: (value - mean) / mean; ``value``: the value itself); missing values are ignored.
    A zero mean stops there (a variance cannot be computed against it).
    """
    x = data[~np.isnan(data)]
    while x.size:
        centre = float(np.mean(x))
        if centre == 0:
            return centre
        arg = (x - centre) / centre if function == "variance" else x
        bad = np.broadcast_to(np.asarray(criteria.evaluate(arg), dtype=bool), x.shape)
        if not bad.any():
            return centre
        x = x[~bad]
    return float("nan")


def sb_format(metric: str, value: float, sample: np.ndarray, digits: int) -> float:
    """SuperBench's rounding of a baseline value by the kind of data it came from.

    Measured (non-integer) data: ``%.{digits}g`` below 1 in magnitude, else ``digits`` decimals; a
    metric named ``*deterministic*`` keeps full precision; integer data (return codes, counts) too.
    """
    present = sample[~np.isnan(sample)]
    whole = present.size > 0 and bool(np.all(present == np.round(present)))
    if "deterministic" in metric or whole:
        return float(value)
    text = f"%.{digits}g" % value if abs(value) < 1 else f"%.{digits}f" % value
    return float(text)


def sb_generate_baseline(
    algorithm: str,
    summary_rules: list[SummaryRule],
    columns: list[str],
    values: np.ndarray,
    diagnosis_rules: RuleSet | None = None,
    previous: dict[str, float] | None = None,
    digits: int = SB_DIGITS,
) -> tuple[dict[str, float], list[str]]:
    """SuperBench's ``generate-baseline``: returns the baseline (sorted by name) and warnings.

    ``mean``: the mean of every metric of the summary rules (pooled as they say). ``fix_threshold``:
    for every metric a ``variance`` or ``value`` diagnosis rule covers, :func:`fix_threshold` with that
    rule's criteria. A ``previous`` baseline is merged: its values win for the metrics it has (found
    with SuperBench's lookup: exact, without ``:rank``, or the benchmark), and its other metrics are kept.
    """
    data = aggregate_for_baseline(summary_rules, columns, values)
    previous = dict(previous or {})
    out: dict[str, float] = dict(previous)
    warnings: list[str] = []
    raw: dict[str, float] = {}
    if algorithm == "mean":
        for metric, x in data.items():
            present = x[~np.isnan(x)]
            if present.size:
                raw[metric] = float(np.mean(present))
    elif algorithm == "fix_threshold":
        if diagnosis_rules is None:
            raise UsageError("the fix_threshold algorithm needs the diagnosis rules (--diagnosis-rules)")
        names = list(data)
        for rule in diagnosis_rules.rules:
            if rule.function not in ("variance", "value") or rule.criteria is None:
                continue
            for i in match_patterns(rule.patterns, rule.compiled, names):
                raw[names[i]] = fix_threshold(data[names[i]], rule.function, rule.criteria)
    else:
        raise UsageError(f"unknown baseline algorithm {algorithm!r} (one of {', '.join(SB_ALGORITHMS)})")
    for metric, v in raw.items():
        kept = baseline_of(previous, metric)
        if kept is not None:
            out[metric] = kept
            continue
        if not np.isfinite(v):
            warnings.append(f"{metric}: no value left to make a baseline from; left out")
            continue
        out[metric] = sb_format(metric, v, data[metric], digits)
    return dict(sorted(out.items())), warnings


def build_baseline(
    fleet: Fleet,
    algorithm: str = "robust",
    statistic: Literal["median", "trimmed-mean"] = "median",
    per_rank: bool = False,
    summary_rules: Path | None = None,
    diagnosis_rules: Path | None = None,
    previous: Path | None = None,
    digits: int | None = None,
) -> tuple[dict[str, float], list[str]]:
    """What ``sb-fleet baseline`` writes: sb-fleet's robust baseline (default) or SuperBench's algorithms.

    ``previous`` is merged either way: its values win for the metrics it has, its other metrics are kept.
    """
    from sb_fleet.analysis.superbench.rules import load_rules
    from sb_fleet.analysis.superbench.sbsummary import load_summary_rules

    prev = load_baseline(previous) if previous is not None else {}
    if algorithm == "robust":
        if summary_rules is not None or diagnosis_rules is not None:
            raise UsageError(
                "--summary-rules and --diagnosis-rules go with --algorithm fix_threshold or mean"
            )
        made = make_baseline(fleet, statistic=statistic, per_rank=per_rank, digits=digits or 6)
        merged = dict(prev)
        for k, v in made.items():
            kept = baseline_of(prev, k)
            merged[k] = kept if kept is not None else v
        return dict(sorted(merged.items())), []
    if summary_rules is None:
        raise UsageError(f"--algorithm {algorithm} needs --summary-rules (which metrics, pooled how)")
    rules = load_summary_rules(summary_rules)
    diag = load_rules(diagnosis_rules) if diagnosis_rules is not None else None
    return sb_generate_baseline(
        algorithm,
        rules,
        fleet.columns,
        fleet.values,
        diag,
        prev,
        SB_DIGITS if digits is None else digits,
    )
