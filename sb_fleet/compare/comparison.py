"""Two fleets side by side: SuperBench's speedup, per metric, per model and per model group.

``speedup = target / baseline`` for a higher-is-better metric and ``baseline / target`` for a
lower-is-better one, so that > 1 always means the target is better (SuperBench's headline:
training throughput of the target SKU over the baseline SKU).

* **Observations**: each host's value of each rank (``:rank`` pooled, as SuperBench's name
  without it). A host's values of a benchmark that did not end with return code 0 are left out.
  Where runs repeat (SuperBench's ``<bench>/<run>/<metric>`` columns, or the per-run values of
  sb-fleet's result files in a run directory), each host and rank is first reduced by MLPerf's
  rule: drop the highest and the lowest run, average the rest (the plain mean with two runs).
* **Fleet statistic**: the median of the observations (robust to a few bad hosts).
* **95% confidence interval of the speedup**: a percentile bootstrap of the ratio of medians
  (:data:`BOOTSTRAP` resamples of each side's observations, fixed seed: the same inputs give the
  same file) when both sides have at most :data:`BOOTSTRAP_MAX` observations; above that, each
  median's distribution-free interval (binomial order statistics) combined on the log scale.
  None with a single observation on a side (no spread to measure).
* **Models**: per model and precision, the training throughput (else inference throughput, else
  step time) speedup; models grouped as SuperBench's seeds group them (GPT-2, BERT, LSTM, CNNs) with
  the geometric mean of the group's speedups.
* Metrics only one side has are listed, not dropped.

Pure apart from :func:`load_side` (reads a run directory or a results-summary.jsonl).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sb_fleet.analysis.figures.figures import model_group, model_metric, split_run
from sb_fleet.analysis.figures.measured import MAX_RAW_HOSTS, load_run_files
from sb_fleet.analysis.fleet_results import Fleet, load_fleet
from sb_fleet.analysis.superbench.metric_names import Directions, parse_metric
from sb_fleet.errors import ResultsError

SCHEMA_VERSION = 1
BOOTSTRAP = 2000
BOOTSTRAP_MAX = 500
SEED = 20261123
Z95 = 1.959963984540054
MODEL_PREFERENCE = ("train_throughput", "inference_throughput", "train_step_time", "inference_step_time")


@dataclass(frozen=True)
class Side:
    """One fleet's observations per metric (name without rank), ready to compare."""

    source: str
    hosts: int
    values: dict[str, np.ndarray]  # metric -> observations (host x rank, runs reduced)
    hosts_of: dict[str, int]  # metric -> hosts with an observation
    runs: dict[str, int]  # metric -> most runs seen per observation (1: not repeated)
    directions: Directions
    units: dict[str, str | None]


@dataclass(frozen=True)
class MetricComparison:
    metric: str
    unit: str | None
    direction: str  # higher | lower | unknown (unknown: speedup is target / baseline)
    baseline: float
    target: float
    speedup: float | None
    ci_low: float | None
    ci_high: float | None
    ci_method: str
    baseline_hosts: int
    target_hosts: int
    baseline_values: int
    target_values: int
    statistic: str  # "median" or "median of MLPerf-trimmed runs"


@dataclass(frozen=True)
class ModelComparison:
    model: str
    group: str
    precision: str
    metric: str
    baseline: float
    target: float
    speedup: float | None
    ci_low: float | None
    ci_high: float | None


@dataclass(frozen=True)
class GroupComparison:
    group: str
    models: int
    geomean_speedup: float | None


@dataclass(frozen=True)
class Comparison:
    baseline: Side
    target: Side
    metrics: list[MetricComparison]
    models: list[ModelComparison]
    groups: list[GroupComparison]
    only_baseline: list[str]
    only_target: list[str]
    notes: list[str] = field(default_factory=list)
    health: list[dict[str, Any]] | None = None  # two run directories with health checks: what changed

    def to_json(self) -> dict[str, Any]:
        def clean(v: Any) -> Any:
            if isinstance(v, float):
                return round(v, 9) if math.isfinite(v) else None
            if isinstance(v, dict):
                return {k: clean(x) for k, x in v.items()}
            if isinstance(v, list):
                return [clean(x) for x in v]
            return v

        speedups = [m.speedup for m in self.metrics if m.speedup is not None and m.direction != "unknown"]
        metrics = []
        for m in self.metrics:
            d = asdict(m)
            d["ci"] = [m.ci_low, m.ci_high] if m.ci_low is not None else None
            metrics.append(d)
        return clean(
            {
                "schema_version": SCHEMA_VERSION,
                "tool": "sb-fleet compare",
                "baseline": {"source": self.baseline.source, "hosts": self.baseline.hosts},
                "target": {"source": self.target.source, "hosts": self.target.hosts},
                "speedup": "target / baseline (baseline / target for lower-is-better metrics): > 1 means the target is better",
                "statistic": "median of the hosts' values (ranks pooled); repeated runs first reduced by "
                "MLPerf's rule (drop the highest and the lowest, average the rest)",
                "ci": f"95%: percentile bootstrap of the ratio of medians ({BOOTSTRAP} resamples, seed {SEED}) "
                f"up to {BOOTSTRAP_MAX} values a side; above, distribution-free median intervals combined "
                "on the log scale",
                "summary": {
                    "metrics": len(self.metrics),
                    "target_better": sum(1 for s in speedups if s > 1),
                    "target_worse": sum(1 for s in speedups if s < 1),
                    "geomean_speedup": geomean(speedups),
                    "only_baseline": len(self.only_baseline),
                    "only_target": len(self.only_target),
                },
                "groups": [asdict(g) for g in self.groups],
                "models": [asdict(m) for m in self.models],
                "metrics": metrics,
                "only_baseline": self.only_baseline,
                "only_target": self.only_target,
                "notes": self.notes,
                **({"health_changes": self.health} if self.health is not None else {}),
            }
        )


def geomean(xs: Sequence[float | None]) -> float | None:
    vals = [x for x in xs if x is not None and x > 0 and math.isfinite(x)]
    if not vals:
        return None
    return math.exp(sum(math.log(x) for x in vals) / len(vals))


def mlperf_mean(runs: np.ndarray) -> np.ndarray:
    """Per row: drop the highest and the lowest run, average the rest (mean of two; NaN ignored)."""
    out = np.full(runs.shape[0], np.nan)
    s = np.sort(runs, axis=1)  # NaN sort last
    n = np.sum(np.isfinite(runs), axis=1)
    for k in np.unique(n):
        rows = n == k
        if k == 0:
            continue
        if k <= 2:
            out[rows] = np.mean(s[rows, :k], axis=1)
        else:
            out[rows] = np.mean(s[rows, 1 : k - 1], axis=1)
    return out


def side_of(fleet: Fleet, per_run: Mapping[str, Mapping[str, Sequence[float]]] | None = None) -> Side:
    """Observations per metric of one fleet (see the module doc). ``per_run``: host -> summary column ->
    its per-run values (sb-fleet's result files), reduced by MLPerf's rule in place of the summary's mean."""
    cols = fleet.columns
    vals = fleet.values
    repeated: dict[int, int] = {}  # column -> most runs behind one of its values
    if per_run:
        vals = vals.copy()
        col_of, row_of = fleet.column_index(), fleet.host_index()
        for host, per in per_run.items():
            row = row_of.get(host)
            for name_, xs in per.items():
                ci = col_of.get(name_)
                if row is None or ci is None or len(xs) < 2:
                    continue
                vals[row, ci] = mlperf_mean(np.asarray([xs], dtype=float))[0]
                repeated[ci] = max(repeated.get(ci, 1), len(xs))
    failed: dict[str, np.ndarray] = {}  # benchmark -> rows whose run of it failed
    groups: dict[str, dict[str, list[tuple[int, int | None]]]] = {}  # metric -> rank -> [(col, run)]
    for i, c in enumerate(cols):
        name = parse_metric(c)
        base, run = split_run(name.base)
        bench = base.rpartition("/")[0] or base
        if name.is_return_code:
            bad = np.isfinite(vals[:, i]) & (vals[:, i] != 0)
            failed[bench] = failed.get(bench, np.zeros(len(fleet.hosts), dtype=bool)) | bad
            continue
        groups.setdefault(base, {}).setdefault(name.unit, []).append((i, run))
    values: dict[str, np.ndarray] = {}
    hosts_of: dict[str, int] = {}
    runs: dict[str, int] = {}
    units: dict[str, str | None] = {}
    for metric, by_rank in groups.items():
        bench = metric.rpartition("/")[0] or metric
        keep = ~failed.get(bench, np.zeros(len(fleet.hosts), dtype=bool))
        blocks = []
        most = 1
        for members in by_rank.values():
            idx = np.asarray([c for c, _ in members], dtype=np.int64)
            block = vals[:, idx]
            if len(members) > 1 and any(r is not None for _, r in members):
                most = max(most, len(members))
                col = mlperf_mean(block)
            else:
                col = block[:, 0]
                most = max(most, repeated.get(int(idx[0]), 1))
            blocks.append(np.where(keep, col, np.nan))
        obs = np.stack(blocks, axis=1)
        finite = np.isfinite(obs)
        if not finite.any():
            continue
        values[metric] = obs[finite]
        hosts_of[metric] = int(finite.any(axis=1).sum())
        runs[metric] = most
        units[metric] = fleet.directions.unit(metric)
    return Side(fleet.source, len(fleet.hosts), values, hosts_of, runs, fleet.directions, units)


def load_side(source: Path | str, label: str) -> Side:
    """A run directory or results-summary.jsonl as one side; bad input is one ResultsError."""
    fleet = load_fleet(Path(source))
    if not fleet.hosts:
        first = f" ({fleet.problems[0]})" if fleet.problems else ""
        raise ResultsError(
            fleet.source,
            None,
            f"the {label} has no host results{first}",
            "give a run directory or results file with host lines",
        )
    per_run = None
    if fleet.run_dir is not None and len(fleet.hosts) <= MAX_RAW_HOSTS:  # sb-fleet's per-run values
        per_run, _ = load_run_files(fleet.run_dir, fleet.hosts, fleet.columns)
    side = side_of(fleet, per_run)
    if not side.values:
        raise ResultsError(fleet.source, None, f"the {label} has no numeric metric", "check the results file")
    return side


def _median_interval(x: np.ndarray) -> tuple[float, float] | None:
    """Distribution-free 95% interval of a median from order statistics (normal approximation)."""
    n = len(x)
    if n < 6:
        return None
    s = np.sort(x)
    half = Z95 * math.sqrt(n) / 2
    lo = max(0, int(math.floor(n / 2 - half)))
    hi = min(n - 1, int(math.ceil(n / 2 + half)))
    return float(s[lo]), float(s[hi])


def speedup_ci(
    base: np.ndarray, target: np.ndarray, direction: int, rng: np.random.Generator
) -> tuple[float | None, float | None, str]:
    """95% interval of the speedup (see the module doc) and the method's name."""
    nb, nt = len(base), len(target)
    if nb < 2 or nt < 2:
        return None, None, "none: a single value on a side"

    def orient(b: np.ndarray, t: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return b / t if direction < 0 else t / b

    if nb <= BOOTSTRAP_MAX and nt <= BOOTSTRAP_MAX:
        mb = np.median(base[rng.integers(0, nb, (BOOTSTRAP, nb))], axis=1)
        mt = np.median(target[rng.integers(0, nt, (BOOTSTRAP, nt))], axis=1)
        r = orient(mb, mt)
        r = r[np.isfinite(r)]
        if not len(r):
            return None, None, "none: zero medians"
        lo, hi = np.quantile(r, [0.025, 0.975])
        return float(lo), float(hi), "bootstrap"
    ib, it = _median_interval(base), _median_interval(target)
    mb, mt = float(np.median(base)), float(np.median(target))
    if ib is None or it is None or min(ib[0], it[0], mb, mt) <= 0:
        return None, None, "none: non-positive values"
    se_b = (math.log(ib[1]) - math.log(ib[0])) / (2 * Z95)
    se_t = (math.log(it[1]) - math.log(it[0])) / (2 * Z95)
    se = math.sqrt(se_b**2 + se_t**2)
    s = float(orient(np.array([mb]), np.array([mt]))[0])
    return s * math.exp(-Z95 * se), s * math.exp(Z95 * se), "order statistics"


def compare(baseline: Side, target: Side) -> Comparison:
    rng = np.random.default_rng(SEED)
    metrics: list[MetricComparison] = []
    common = [m for m in baseline.values if m in target.values]
    for m in sorted(common):
        b, t = baseline.values[m], target.values[m]
        sample = m  # direction: the target's declaration, then the baseline's, then the name
        d = target.directions.of(sample) or baseline.directions.of(sample)
        mb, mt = float(np.median(b)), float(np.median(t))
        speedup = None
        with np.errstate(all="ignore"):
            if d < 0 and mt > 0:
                speedup = mb / mt
            elif d >= 0 and mb > 0:
                speedup = mt / mb
        lo, hi, method = speedup_ci(b, t, d, rng) if speedup is not None else (None, None, "none")
        runs = max(baseline.runs.get(m, 1), target.runs.get(m, 1))
        metrics.append(
            MetricComparison(
                metric=m,
                unit=target.units.get(m) or baseline.units.get(m),
                direction={1: "higher", -1: "lower", 0: "unknown"}[d],
                baseline=mb,
                target=mt,
                speedup=speedup,
                ci_low=lo,
                ci_high=hi,
                ci_method=method,
                baseline_hosts=baseline.hosts_of[m],
                target_hosts=target.hosts_of[m],
                baseline_values=len(b),
                target_values=len(t),
                statistic="median of MLPerf-trimmed runs" if runs > 1 else "median",
            )
        )
    models = _models(metrics)
    groups: dict[str, list[float | None]] = {}
    for mc in models:
        groups.setdefault(mc.group, []).append(mc.speedup)
    order = {"GPT-2": 0, "BERT": 1, "LSTM": 2, "CNNs": 3}
    group_rows = [
        GroupComparison(g, len(v), geomean(v))
        for g, v in sorted(groups.items(), key=lambda kv: (order.get(kv[0], 9), kv[0]))
    ]
    notes = []
    unknown = [m.metric for m in metrics if m.direction == "unknown"]
    if unknown:
        notes.append(
            f"{len(unknown)} metric(s) of unknown direction: speedup is target / baseline there "
            f"(e.g. {', '.join(unknown[:3])})"
        )
    return Comparison(
        baseline=baseline,
        target=target,
        metrics=metrics,
        models=models,
        groups=group_rows,
        only_baseline=sorted(m for m in baseline.values if m not in target.values),
        only_target=sorted(m for m in target.values if m not in baseline.values),
        notes=notes,
        health=_health_changes(baseline.source, target.source),
    )


def _health_changes(baseline: str, target: str) -> list[dict[str, Any]] | None:
    """Both sources run directories with health.json: what changed (analysis.health_verdict), else None."""
    import json

    from sb_fleet.analysis.health_verdict import health_changes

    docs = []
    for src in (baseline, target):
        p = Path(src) / "health.json"
        try:
            d = json.loads(p.read_text()) if p.is_file() else None
        except (OSError, ValueError):
            d = None
        if not isinstance(d, dict):
            return None
        docs.append(d)
    return health_changes(docs[0], docs[1])


def _models(metrics: list[MetricComparison]) -> list[ModelComparison]:
    best: dict[tuple[str, str], tuple[int, MetricComparison]] = {}
    for m in metrics:
        mm = model_metric(m.metric)
        if mm is None or mm.percentile is not None:
            continue
        key = f"{mm.action}_{mm.kind}"
        if key not in MODEL_PREFERENCE:
            continue
        rank = MODEL_PREFERENCE.index(key)
        cur = best.get((mm.model, mm.precision))
        if cur is None or rank < cur[0]:
            best[(mm.model, mm.precision)] = (rank, m)
    out = []
    for (model, prec), (_, m) in sorted(best.items()):
        out.append(
            ModelComparison(
                model=model,
                group=model_group(model.rpartition("/")[2] or model),
                precision=prec,
                metric=m.metric,
                baseline=m.baseline,
                target=m.target,
                speedup=m.speedup,
                ci_low=m.ci_low,
                ci_high=m.ci_high,
            )
        )
    order = {"GPT-2": 0, "BERT": 1, "LSTM": 2, "CNNs": 3}
    out.sort(key=lambda r: (order.get(r.group, 9), r.group, r.model, r.precision))
    return out
