"""The measured figures of a run: every metric with its unit and direction, against its peak.

For each metric (SuperBench's name without ``:rank``; the GPUs or NICs of a host pooled, as
:mod:`sb_fleet.analysis.superbench.metric_names` groups them into families) the fleet's median, p5/p25/p75/p95,
min and max and how many hosts reported it; for one host its value. Per-GPU metrics keep a
per-rank drill-down (the median of each rank across the fleet). Also, from the same numbers:

* **efficiency**: measured / nominal peak (:mod:`sb_fleet.analysis.figures.peaks`) wherever the host's facts give one;
* **valid FLOPS** (HPC AI500): a GEMM whose result check failed (``gemm-flops`` return code 3)
  counts zero, and the figure says on how many hosts;
* **repeatability**: where a benchmark ran ``run_count`` > 1 (SuperBench's ``<bench>/<run>/<metric>``
  columns, or the per-run values of sb-fleet's result files), the run-to-run coefficient of
  variation; a figure whose median CV is above :data:`CV_LIMIT` is marked too noisy to trust;
* **model tables**: per model and precision, train/inference throughput, step time and the
  inference latency percentiles;
* **collective curves**: busbw and algbw against message size, per benchmark and operation;
* **rooflines** (HPC AI500's view): each GEMM precision's attained rate at its arithmetic
  intensity, under the memory roof and its compute roof, so "compute-bound at 62% of peak" is one line;
  beside them each convolution ``cudnn-function`` timed (:mod:`sb_fleet.analysis.figures.convshapes`: FLOPs
  per call from the shape in the metric's name, over the time per call; intensity over the compulsory
  traffic), against the GEMM roof of its datatype. These are *effective* FLOPS (a direct
  convolution's count): a Winograd or FFT algorithm does fewer operations and can sit above its roof.
  Valid FLOPS again: where the benchmark's result check failed (return code 3), the host's
  convolutions count zero.

Pure: arrays and facts in, frozen values out.
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from sb_fleet.analysis.figures.convshapes import ConvCall, conv_call, is_conv_benchmark
from sb_fleet.analysis.figures.model_checks import busy_figures, expected_for, host_bound
from sb_fleet.analysis.figures.peaks import (
    PRECISION_BYTES,
    HostPeaks,
    above_peak_reason,
    default_unit,
    gemm_precision,
    peak_for_metric,
    unit_scale,
)
from sb_fleet.analysis.figures.power import EnergyFigure, PowerPlot, energy_figures, power_plot
from sb_fleet.analysis.order_stats import median, quantiles
from sb_fleet.analysis.superbench.metric_names import Directions, parse_metric

CV_LIMIT = 0.05  # run-to-run coefficient of variation above which a figure is not trusted
QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)
MAX_ROOFLINE_HOSTS = 19  # a rack: every host its points (the report draws one plot a model); more: medians
INVALID_RC = 3  # SuperBench's INVALID_BENCHMARK_RESULT: the result check failed
_RUN_RE = re.compile(r"^(.*)/(\d+)/([^/]+)$")
_MODEL_RE = re.compile(
    r"^(?P<prec>fp64|fp32|fp16|bf16|tf32|fp8\w*?|int8|float32|float16|bfloat16)_"
    r"(?P<action>train|inference)_(?P<kind>throughput|step_time)(?:_(?P<pct>\d+(?:\.\d+)?))?$"
)
_COLL_RE = re.compile(r"^(?P<op>[a-z][a-z0-9_]*?)_(?P<size>\d+)_(?P<kind>busbw|algbw)$")
MODEL_GROUPS = (  # as SuperBench's default config groups its model benchmarks
    ("GPT-2", re.compile(r"gpt", re.I)),
    ("BERT", re.compile(r"bert", re.I)),
    ("LSTM", re.compile(r"lstm", re.I)),
    ("CNNs", re.compile(r"resnet|densenet|vgg|cnn|mobilenet|efficientnet|inception|alexnet", re.I)),
    ("LLaMA", re.compile(r"llama", re.I)),
    ("Mixtral", re.compile(r"mixtral", re.I)),
)


def split_run(base: str) -> tuple[str, int | None]:
    """``gemm-flops/2/fp16_flops`` -> (``gemm-flops/fp16_flops``, 2): SuperBench's run index, if any."""
    m = _RUN_RE.match(base)
    if m:
        return f"{m.group(1)}/{m.group(3)}", int(m.group(2))
    return base, None


def model_group(model: str) -> str:
    for name, pattern in MODEL_GROUPS:
        if pattern.search(model):
            return name
    return "other"


@dataclass(frozen=True)
class ModelMetric:
    model: str  # the benchmark path: "gpt_models/pytorch-gpt2-large"
    precision: str
    action: str  # train | inference
    kind: str  # throughput | step_time
    percentile: str | None  # "99.9" for ..._step_time_99.9

    @property
    def column(self) -> str:
        return f"{self.action}_{self.kind}" + (f"_p{self.percentile}" if self.percentile else "")


def model_metric(metric: str) -> ModelMetric | None:
    """What a model benchmark's metric (name without rank) measures, or None for other metrics."""
    bench, _, leaf = metric.rpartition("/")
    m = _MODEL_RE.match(leaf)
    if not m or not bench:
        return None
    return ModelMetric(bench, m.group("prec"), m.group("action"), m.group("kind"), m.group("pct"))


@dataclass(frozen=True)
class MetricFigure:
    metric: str  # SuperBench's name without rank (device indexes as "#": the GPUs/NICs pooled)
    benchmark: str
    unit: str | None
    direction: int  # +1 higher is better, -1 lower, 0 unknown
    hosts: int  # hosts that reported it
    values: int  # values pooled (hosts x ranks)
    median: float
    p5: float
    p25: float
    p75: float
    p95: float
    min: float
    max: float
    per_rank: tuple[tuple[str, float, int], ...] = ()  # (rank or device, median, hosts)
    peak: float | None = None  # nominal peak in the metric's unit (the median host's)
    peak_source: str = ""
    peak_unit: str | None = None  # the metric's unit, or SuperBench's where the results do not say
    efficiency: float | None = None  # measured / peak (median over hosts with a peak)
    above_peak: str = ""  # why the figure is above its peak (efficiency > 1), never a bare >100%
    cv: float | None = None  # run-to-run coefficient of variation (median over hosts and ranks)
    cv_max: float | None = None
    runs: int = 0  # most runs seen per value
    noisy: bool = False  # cv > CV_LIMIT: not to be trusted
    invalid_hosts: int = 0  # hosts whose GEMM result check failed: counted as zero

    @property
    def direction_word(self) -> str:
        return {1: "higher", -1: "lower", 0: "unknown"}[self.direction]


@dataclass(frozen=True)
class ModelRow:
    model: str
    group: str
    precision: str
    values: dict[str, float]  # column (ModelMetric.column) -> fleet median
    units: dict[str, str | None]
    busy: dict[str, float] = field(default_factory=dict)  # action -> device busy % (fleet median)
    host_bound: dict[str, str] = field(default_factory=dict)  # action -> why its figures measure the host
    expected: dict[str, tuple[float, str]] = field(default_factory=dict)  # column -> (published, source)


@dataclass(frozen=True)
class Curve:
    benchmark: str
    op: str
    unit: str | None
    sizes: tuple[int, ...]
    busbw: tuple[float | None, ...]
    algbw: tuple[float | None, ...]
    busbw_p5: tuple[float | None, ...]
    busbw_p95: tuple[float | None, ...]
    peak: float | None = None  # busbw's nominal peak in ``unit`` (NVLink), when known
    peak_source: str = ""


@dataclass(frozen=True)
class RoofPoint:
    precision: str  # a GEMM precision ("fp16_tc"), or a convolution's datatype ("float", "half")
    intensity: float  # FLOP per byte moved (a GEMM reads A and B and writes C once; a convolution
    # its input, weights and output: the compulsory traffic)
    attained: float  # FLOP/s (0 when the result check failed)
    peak: float | None  # the compute roof, FLOP/s
    bound: float | None  # min(peak, intensity x bandwidth)
    efficiency: float | None  # attained / bound
    regime: str  # compute-bound | memory-bound | unknown
    valid: bool
    sentence: str
    kind: str = "gemm"  # gemm | conv
    roof: str = ""  # the GEMM precision whose peak is the compute roof ("tf32_tc" for a float convolution)
    label: str = ""  # what was measured: the precision, or "conv fwd n32 c64 56x56 k64 3x3 pad 1 float"
    metric: str = ""  # the metric the point comes from (name without rank)


@dataclass(frozen=True)
class Roofline:
    host: str  # a host name, or "fleet median"
    device: str
    bandwidth: float | None  # bytes/s of the memory roof
    bandwidth_source: str
    points: tuple[RoofPoint, ...]
    shape_note: str


@dataclass(frozen=True)
class Figures:
    hosts: int
    metrics: tuple[MetricFigure, ...]
    models: tuple[ModelRow, ...] = ()
    curves: tuple[Curve, ...] = ()
    rooflines: tuple[Roofline, ...] = ()
    notes: tuple[str, ...] = ()
    energy: tuple[EnergyFigure, ...] = ()  # each compute figure's window power and efficiency
    power_plot: PowerPlot | None = None  # power against throughput per host, main GEMM precision

    def by_benchmark(self) -> dict[str, list[MetricFigure]]:
        """Metrics per benchmark; benchmarks measured against a peak first, then in the results' order."""
        out: dict[str, list[MetricFigure]] = {}
        for m in self.metrics:
            out.setdefault(m.benchmark, []).append(m)
        ranked = sorted(out.items(), key=lambda kv: all(f.efficiency is None for f in kv[1]))
        return dict(ranked)

    def to_json(self) -> dict[str, Any]:
        def clean(v: Any) -> Any:
            if isinstance(v, float):
                return v if math.isfinite(v) else None
            if isinstance(v, dict):
                return {k: clean(x) for k, x in v.items()}
            if isinstance(v, (list, tuple)):
                return [clean(x) for x in v]
            return v

        metrics = []
        for m in self.metrics:
            d = asdict(m)
            d["direction"] = m.direction_word
            d["per_rank"] = [{"rank": r, "median": v, "hosts": n} for r, v, n in m.per_rank]
            metrics.append(d)
        doc: dict[str, Any] = {
            "hosts": self.hosts,
            "cv_limit": CV_LIMIT,
            "metrics": metrics,
            "models": [asdict(r) for r in self.models],
            "collectives": [asdict(c) for c in self.curves],
            "rooflines": [asdict(r) for r in self.rooflines],
            "notes": list(self.notes),
        }
        if self.energy:
            doc["energy"] = [asdict(e) for e in self.energy]
        if self.power_plot is not None:
            doc["power_plot"] = asdict(self.power_plot)
        return clean(doc)


@dataclass
class _Group:
    metric: str
    cols: list[int] = field(default_factory=list)
    units: list[str] = field(default_factory=list)  # rank/device of each column
    runs: list[int | None] = field(default_factory=list)


def _groups(columns: Sequence[str]) -> dict[str, _Group]:
    out: dict[str, _Group] = {}
    for i, c in enumerate(columns):
        name = parse_metric(c)
        if name.is_return_code:
            continue
        family, run = split_run(name.family)
        g = out.get(family)
        if g is None:
            g = out[family] = _Group(family)
        g.cols.append(i)
        g.units.append(name.unit)
        g.runs.append(run)
    return out


def _rc_rows(columns: Sequence[str], values: np.ndarray, benchmark: str) -> np.ndarray:
    """Rows (hosts) where a rank of ``benchmark`` ended with the failed-check return code."""
    cols = [
        i
        for i, c in enumerate(columns)
        if parse_metric(c).is_return_code and split_run(parse_metric(c).base)[0] == f"{benchmark}/return_code"
    ]
    if not cols:
        return np.zeros(values.shape[0], dtype=bool)
    return np.any(values[:, cols] == INVALID_RC, axis=1)


def _collapse_runs(block: np.ndarray, g: _Group) -> tuple[np.ndarray, list[str], np.ndarray | None, int]:
    """Columns differing only in the run index become one (their mean); per-value CV across runs."""
    if all(r is None for r in g.runs):
        return block, list(g.units), None, 0
    order: dict[str, list[int]] = {}
    for j, u in enumerate(g.units):
        order.setdefault(u, []).append(j)
    units = list(order)
    out = np.full((block.shape[0], len(units)), np.nan)
    cv = np.full((block.shape[0], len(units)), np.nan)
    most = 0
    for k, u in enumerate(units):
        sub = block[:, order[u]]
        most = max(most, sub.shape[1])
        n = np.sum(np.isfinite(sub), axis=1)
        with np.errstate(all="ignore"):
            mean = np.nanmean(sub, axis=1) if sub.shape[1] else np.full(sub.shape[0], np.nan)
            std = np.nanstd(sub, axis=1, ddof=1) if sub.shape[1] > 1 else np.full(sub.shape[0], np.nan)
        out[:, k] = np.where(n > 0, mean, np.nan)
        cv[:, k] = np.where((n > 1) & (mean != 0), std / np.abs(mean), np.nan)
    return out, units, cv, most


def _runs_cv(
    hosts: Sequence[str], columns: Sequence[str], g: _Group, runs: Mapping[str, Mapping[str, Sequence[float]]]
) -> tuple[np.ndarray | None, int]:
    """CV of sb-fleet's per-run values (from the result files) for the columns of ``g``."""
    if not runs:
        return None, 0
    cv = np.full((len(hosts), len(g.cols)), np.nan)
    most = 0
    for r, h in enumerate(hosts):
        per = runs.get(h)
        if not per:
            continue
        for j, c in enumerate(g.cols):
            xs = [
                float(x) for x in per.get(columns[c], ()) if isinstance(x, (int, float)) and math.isfinite(x)
            ]
            if len(xs) > 1:
                most = max(most, len(xs))
                mean = sum(xs) / len(xs)
                if mean:
                    var = sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)
                    cv[r, j] = math.sqrt(var) / abs(mean)
    return (cv, most) if most else (None, 0)


def build_figures(
    hosts: Sequence[str],
    columns: Sequence[str],
    values: np.ndarray,
    directions: Directions,
    peaks: Mapping[str, HostPeaks] | None = None,
    runs: Mapping[str, Mapping[str, Sequence[float]]] | None = None,
    gemm_shapes: Mapping[str, tuple[int, int, int]] | None = None,
) -> Figures:
    """The results section of a report: see the module doc.

    ``peaks``: host -> its nominal figures; ``runs``: host -> column -> per-run values (sb-fleet's
    result files); ``gemm_shapes``: host -> (m, n, k) of its GEMMs (for the roofline's intensity).
    """
    with warnings.catch_warnings():
        # NaN-aware reductions over a column or host with nothing in it warn ("Mean of empty slice");
        # their NaN is handled where it lands.
        warnings.simplefilter("ignore", RuntimeWarning)
        return _figures(hosts, columns, values, directions, peaks, runs, gemm_shapes)


def _figures(
    hosts: Sequence[str],
    columns: Sequence[str],
    values: np.ndarray,
    directions: Directions,
    peaks: Mapping[str, HostPeaks] | None = None,
    runs: Mapping[str, Mapping[str, Sequence[float]]] | None = None,
    gemm_shapes: Mapping[str, tuple[int, int, int]] | None = None,
) -> Figures:
    peaks = peaks or {}
    notes: list[str] = []
    figures: list[MetricFigure] = []
    invalid_by_bench: dict[str, np.ndarray] = {}
    host_list = list(hosts)
    peak_rows = [peaks.get(h) for h in host_list] if any(not p.empty() for p in peaks.values()) else []
    for g in _groups(columns).values():
        block = values[:, g.cols]
        block, units, cv, most = _collapse_runs(block, g)
        if cv is None:
            cv, most = _runs_cv(host_list, columns, g, runs or {})
        bench = g.metric.rpartition("/")[0] or g.metric
        invalid_hosts = 0
        if gemm_precision(g.metric) is not None:
            bad = invalid_by_bench.get(bench)
            if bad is None:
                bad = invalid_by_bench[bench] = _rc_rows(columns, values, bench)
            if bad.any():
                block = block.copy()
                block[bad, :] = 0.0  # valid FLOPS: a wrong product is worth nothing
                invalid_hosts = int(bad.sum())
        finite = np.isfinite(block)
        flat = block[finite]
        if flat.size == 0:
            continue
        q = quantiles(flat, QUANTILES)
        host_has = finite.any(axis=1)
        per_rank: list[tuple[str, float, int]] = []
        if len(units) > 1:
            n_of = finite.sum(axis=0)
            dense = bool(finite.all())
            for k, u in enumerate(units):
                if n_of[k]:
                    med = median(block[:, k] if dense else block[finite[:, k], k])
                    per_rank.append((u, med, int(n_of[k])))
        probe = split_run(parse_metric(columns[g.cols[0]]).base)[0]  # as metrics.json names it
        unit = directions.unit(probe)
        peak_val, peak_src, eff, peak_unit = _efficiency(g.metric, unit, block, host_has, peak_rows)
        cv_med = cv_max = None
        if cv is not None and np.isfinite(cv).any():
            cv_med = float(np.nanmedian(cv))
            cv_max = float(np.nanmax(cv))
        figures.append(
            MetricFigure(
                metric=g.metric,
                benchmark=bench,
                unit=unit,
                direction=directions.of(probe),
                hosts=int(host_has.sum()),
                values=int(flat.size),
                median=float(q[2]),
                p5=float(q[0]),
                p25=float(q[1]),
                p75=float(q[3]),
                p95=float(q[4]),
                min=float(flat.min()),
                max=float(flat.max()),
                per_rank=tuple(per_rank),
                peak=peak_val,
                peak_source=peak_src,
                peak_unit=peak_unit,
                efficiency=eff,
                above_peak=_above_peak(g.metric, eff, peak_src, peak_rows),
                cv=cv_med,
                cv_max=cv_max,
                runs=most,
                noisy=cv_med is not None and cv_med > CV_LIMIT,
                invalid_hosts=invalid_hosts,
            )
        )
    for bench, bad in invalid_by_bench.items():
        if bad.any():
            notes.append(
                f"{bench}: the result check failed on {int(bad.sum())} host(s); their FLOPS count as zero "
                "(valid FLOPS)"
            )
    for bench in _conv_benchmarks(columns):
        bad = _rc_rows(columns, values, bench)
        if bad.any():
            notes.append(
                f"{bench}: the result check failed on {int(bad.sum())} host(s); their convolutions count as "
                "zero FLOPS on the roofline (valid FLOPS)"
            )
    for f in figures:
        if f.above_peak:
            notes.append(f"{f.metric}: {f.efficiency:.0%} of peak, {f.above_peak}")
    noisy = [f.metric for f in figures if f.noisy]
    if noisy:
        notes.append(
            f"{len(noisy)} figure(s) vary by more than {CV_LIMIT:.0%} (coefficient of variation) from run "
            f"to run and are not to be trusted: {', '.join(noisy[:5])}{' ...' if len(noisy) > 5 else ''}"
        )
    by_name = {f.metric: f for f in figures}
    rooflines = _rooflines(host_list, columns, values, directions, by_name, peaks, gemm_shapes or {})
    energy = energy_figures(
        [(f.metric, f.unit, f.median) for f in figures], {f.metric: (f.unit, f.median) for f in figures}
    )
    pplot = power_plot(host_list, columns, values, {f.metric: f.unit for f in figures}) if energy else None
    return Figures(
        hosts=len(host_list),
        metrics=tuple(figures),
        models=tuple(_models(figures, peaks)),
        curves=tuple(_curves(figures, peaks)),
        rooflines=tuple(rooflines),
        notes=tuple(notes),
        energy=tuple(energy),
        power_plot=pplot,
    )


def _efficiency(
    metric: str,
    unit: str | None,
    block: np.ndarray,
    host_has: np.ndarray,
    peak_rows: list[HostPeaks | None],
) -> tuple[float | None, str, float | None, str | None]:
    if not peak_rows:  # no host has a nominal figure
        return None, "", None, None
    host_val = np.full(block.shape[0], np.nan)
    with np.errstate(all="ignore"):
        ok_rows = np.flatnonzero(host_has)
        host_val[ok_rows] = np.nanmedian(block[ok_rows], axis=1)
    peak_of = np.full(block.shape[0], np.nan)
    sources: dict[str, int] = {}
    used: str | None = unit
    for r, hp in enumerate(peak_rows):
        if hp is None or not host_has[r]:
            continue
        pk = peak_for_metric(metric, hp)
        if pk is not None and unit is None:
            used = default_unit(metric, pk)
        v = pk.in_unit(unit or used) if pk is not None else None
        if v:
            peak_of[r] = v
            assert pk is not None
            sources[pk.source] = sources.get(pk.source, 0) + 1
    ok = np.isfinite(peak_of) & np.isfinite(host_val)
    if not ok.any():
        return None, "", None, None
    eff = float(np.median(host_val[ok] / peak_of[ok]))
    source = max(sources, key=lambda s: sources[s])
    if len(sources) > 1:
        source += f" (and {len(sources) - 1} other peak(s) in a mixed fleet)"
    return float(np.median(peak_of[ok])), source, eff, used


def _above_peak(metric: str, eff: float | None, source: str, peak_rows: list[HostPeaks | None]) -> str:
    if eff is None or eff <= 1.0:
        return ""
    for hp in peak_rows:
        pk = peak_for_metric(metric, hp) if hp is not None else None
        if pk is not None and pk.source and pk.source in source:
            return above_peak_reason(metric, pk)
    return ""


def _models(figures: list[MetricFigure], peaks: Mapping[str, HostPeaks] | None = None) -> list[ModelRow]:
    rows: dict[tuple[str, str], tuple[dict[str, float], dict[str, str | None]]] = {}
    for f in figures:
        mm = model_metric(f.metric)
        if mm is None:
            continue
        vals, units = rows.setdefault((mm.model, mm.precision), ({}, {}))
        vals[mm.column] = f.median
        units[mm.column] = f.unit
    busy = busy_figures((f.metric, f.median) for f in figures)
    bound = {(h.model, h.precision, h.action): h.reason for h in host_bound(busy)}
    gpus = [p.device for p in (peaks or {}).values() if p.gpu]
    out = []
    for (model, prec), (vals, units) in sorted(rows.items()):
        expected = {}
        for action in ("train", "inference"):
            e = expected_for(model, prec, action, gpus)
            if e is not None and f"{action}_throughput" in vals:
                expected[f"{action}_throughput"] = (e.value, e.source)
        out.append(
            ModelRow(
                model,
                model_group(model.rpartition("/")[2] or model),
                prec,
                vals,
                units,
                busy={a: v for (m, p, a), v in busy.items() if m == model and p == prec},
                host_bound={a: r for (m, p, a), r in bound.items() if m == model and p == prec},
                expected=expected,
            )
        )
    return out


def _curves(figures: list[MetricFigure], peaks: Mapping[str, HostPeaks]) -> list[Curve]:
    found: dict[tuple[str, str], dict[int, dict[str, MetricFigure]]] = {}
    for f in figures:
        leaf = f.metric.rpartition("/")[2]
        m = _COLL_RE.match(leaf)
        if not m:
            continue
        found.setdefault((f.benchmark, m.group("op")), {}).setdefault(int(m.group("size")), {})[
            m.group("kind")
        ] = f
    out = []
    some_peaks = next((p for p in peaks.values() if p.nvlink is not None), None)
    for (bench, op), by_size in sorted(found.items()):
        sizes = sorted(by_size)
        if len(sizes) < 2:
            continue

        def get(size: int, kind: str, attr: str, by_size: dict = by_size) -> float | None:
            f = by_size[size].get(kind)
            return getattr(f, attr) if f is not None else None

        first = next(iter(by_size[sizes[0]].values()))
        peak_val = peak_src = None
        if (
            some_peaks is not None
            and some_peaks.nvlink is not None
            and peak_for_metric(f"{bench}/{op}_{sizes[-1]}_busbw", some_peaks) is some_peaks.nvlink
        ):
            peak_val = some_peaks.nvlink.in_unit(first.unit or "GB/s")
            peak_src = some_peaks.nvlink.source
        out.append(
            Curve(
                benchmark=bench,
                op=op,
                unit=first.unit,
                sizes=tuple(sizes),
                busbw=tuple(get(s, "busbw", "median") for s in sizes),
                algbw=tuple(get(s, "algbw", "median") for s in sizes),
                busbw_p5=tuple(get(s, "busbw", "p5") for s in sizes),
                busbw_p95=tuple(get(s, "busbw", "p95") for s in sizes),
                peak=peak_val,
                peak_source=peak_src or "",
            )
        )
    return out


_MEMORY_BW = re.compile(r"^(cpu-memory-bw-latency/mem_max_bandwidth_.*|mem-bw/d2d_bw|gpu-stream/.*_bw)$")
_TIME_SCALE = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "\u00b5s": 1e-6, "usec": 1e-6, "ns": 1e-9}
_AMD = re.compile(r"\b(AMD|Instinct|MI\d{3}\w*)\b", re.I)


def conv_roof(datatype: str, hp: HostPeaks | None) -> str:
    """The GEMM precision whose peak is the compute roof of a convolution in ``datatype``; "" if none.

    GPUs: half runs on the tensor cores (``fp16_tc``; ``fp16`` where the table has no tensor-core
    figure). Float runs as TF32 on NVIDIA GPUs of sm_80 and newer (torch's default,
    ``cudnn.allow_tf32``), so its roof is ``tf32_tc`` where the peak table gives one (an upper bound
    where cuDNN picks a float kernel), ``fp32`` otherwise and on AMD GPUs (MIOpen runs float as float).
    CPUs: the fp32 peak the facts give for float; none for half (no fp16 CPU peak is derived).
    """
    if hp is None:
        return ""
    if hp.gpu:
        if datatype == "half":
            order: tuple[str, ...] = ("fp16_tc", "fp16")
        elif _AMD.search(hp.device):
            order = ("fp32",)
        else:
            order = ("tf32_tc", "fp32")
    else:
        order = ("fp32",) if datatype == "float" else ()
    return next((prec for prec in order if prec in hp.gemm), "")


def _conv_benchmarks(columns: Sequence[str]) -> list[str]:
    """The cudnn-function benchmarks (and their modes) among the columns, return codes included."""
    found = {split_run(parse_metric(c).base)[0].rpartition("/")[0] for c in columns}
    return sorted(b for b in found if is_conv_benchmark(b))


def _roof_point(
    kind: str,
    label: str,
    precision: str,
    roof: str,
    metric: str,
    intensity: float,
    attained: float,
    hp: HostPeaks | None,
    bw: float | None,
    invalid: bool,
) -> RoofPoint:
    pk = hp.gemm.get(roof) if hp is not None and roof else None
    peak = pk.value if pk is not None else None
    bound = None
    if peak is not None:
        bound = min(peak, intensity * bw) if bw else peak
    eff = attained / bound if bound else None
    regime = "unknown"
    if peak is not None and bw:
        regime = "compute-bound" if intensity * bw >= peak else "memory-bound"
    if invalid:
        sentence = f"{label}: result check failed, counted as 0 FLOPS (valid FLOPS)"
    elif eff is not None and regime == "unknown":
        sentence = f"{label}: at {eff:.0%} of peak (no memory roof known)"
    elif eff is not None:
        against = "peak" if regime != "memory-bound" else "the memory roof"
        sentence = f"{label}: {regime} at {eff:.0%} of {against}"
        if kind == "conv":
            sentence += f" (compute roof {roof}" + (
                "; above the roof: FLOPs are counted as a direct convolution's, and a Winograd or FFT "
                "algorithm does fewer)"
                if eff > 1
                else ")"
            )
    else:
        sentence = f"{label}: {attained / 1e9:.4g} GFLOPS (no peak known)"
    return RoofPoint(
        precision,
        intensity,
        attained,
        peak,
        bound,
        eff,
        regime,
        not invalid,
        sentence,
        kind,
        roof,
        label,
        metric,
    )


def _rooflines(
    hosts: list[str],
    columns: Sequence[str],
    values: np.ndarray,
    directions: Directions,
    by_name: Mapping[str, MetricFigure],
    peaks: Mapping[str, HostPeaks],
    shapes: Mapping[str, tuple[int, int, int]],
) -> list[Roofline]:
    gemm_cols: dict[str, list[int]] = {}
    conv_cols: dict[str, tuple[ConvCall, list[int]]] = {}  # metric (no rank) -> its call, its columns
    bw_cols: list[int] = []
    for i, c in enumerate(columns):
        name = parse_metric(c)
        if name.is_return_code:
            continue
        base = split_run(name.base)[0]
        prec = gemm_precision(base)
        if prec is not None:
            gemm_cols.setdefault(prec, []).append(i)
        elif _MEMORY_BW.match(base):
            bw_cols.append(i)
        else:
            call = conv_call(base)
            if call is not None:
                conv_cols.setdefault(base, (call, []))[1].append(i)
    if not (gemm_cols or conv_cols) or not any(hp.gemm for hp in peaks.values()):
        return []  # no compute roof anywhere: nothing to draw a roofline against
    bad = _rc_rows(columns, values, "gemm-flops")
    conv_bad = {b: _rc_rows(columns, values, b) for b in {m.rpartition("/")[0] for m in conv_cols}}

    def scale(col: int, kind: str, default: str) -> float:
        return (
            unit_scale(directions.unit(split_run(parse_metric(columns[col]).base)[0]) or default, kind) or 0.0
        )

    def one(
        label: str, rows: np.ndarray, hp: HostPeaks | None, shape: tuple[int, int, int] | None
    ) -> Roofline:
        with np.errstate(all="ignore"):
            bw_measured = max(
                (float(np.nanmedian(values[rows, c])) * scale(c, "bytes", "GB/s") for c in bw_cols),
                default=float("nan"),
            )
        if hp is not None and hp.memory is not None:
            bw, bw_src = hp.memory.value, hp.memory.source
        elif math.isfinite(bw_measured) and bw_measured > 0:
            bw, bw_src = bw_measured, "best measured memory bandwidth (no nominal figure in the facts)"
        else:
            bw, bw_src = None, "no memory bandwidth known"
        gpu = hp is not None and hp.gpu
        if not gemm_cols:
            note = ""
        elif shape is None:
            side = 8192 if gpu else 1024
            shape, note = (
                (side, side, side),
                f"GEMM shape not given (m = 0 or no result file): the suite's default {side}^3",
            )
        else:
            note = f"GEMM shape {shape[0]}x{shape[1]}x{shape[2]}"
        pts = []
        for prec, cols in sorted(gemm_cols.items()):
            assert shape is not None
            m, n, k = shape
            block = values[np.ix_(rows, np.asarray(cols, dtype=np.int64))].copy()
            invalid = bool(np.all(bad[rows]))
            block[bad[rows], :] = 0.0  # valid FLOPS: a failed result check counts zero
            with np.errstate(all="ignore"):
                v = float(np.nanmedian(block))
            if not math.isfinite(v):
                continue
            attained = v * scale(cols[0], "flops", "GFLOPS")
            nbytes = PRECISION_BYTES.get(prec, 4)
            ai = 2.0 * m * n * k / (nbytes * (m * k + k * n + m * n))
            metric = split_run(parse_metric(columns[cols[0]]).base)[0]
            pts.append(_roof_point("gemm", prec, prec, prec, metric, ai, attained, hp, bw, invalid))
        for metric, (call, cols) in conv_cols.items():
            seconds = _TIME_SCALE.get((directions.unit(metric) or "us").lower())
            if seconds is None:  # not a time per call: no rate to derive
                continue
            cbad = conv_bad[metric.rpartition("/")[0]][rows]
            block = values[np.ix_(rows, np.asarray(cols, dtype=np.int64))]
            with np.errstate(all="ignore"):
                rate = np.where(block > 0, call.flops / (block * seconds), np.nan)
            rate[cbad, :] = 0.0  # valid FLOPS: a failed result check counts zero
            with np.errstate(all="ignore"):
                v = float(np.nanmedian(rate))
            if not math.isfinite(v):
                continue
            roof = conv_roof(call.datatype, hp)
            pts.append(
                _roof_point(
                    "conv",
                    f"conv {call.label}",
                    call.datatype,
                    roof,
                    metric,
                    call.intensity,
                    v,
                    hp,
                    bw,
                    bool(np.all(cbad)),
                )
            )
        device = hp.device if hp is not None else ""
        return Roofline(label, device, bw, bw_src, tuple(pts), note)

    out = []
    if len(hosts) <= MAX_ROOFLINE_HOSTS:
        for r, h in enumerate(hosts):
            rl = one(h, np.array([r]), peaks.get(h), shapes.get(h))
            if rl.points and any(p.peak for p in rl.points):
                out.append(rl)
    else:  # one roofline of the medians per hardware model, the most common model first
        by_device: dict[str, list[int]] = {}
        for r, h in enumerate(hosts):
            hp = peaks.get(h)
            by_device.setdefault(hp.device if hp is not None and hp.device else "", []).append(r)
        known = {d: rows for d, rows in by_device.items() if d}
        groups = known or by_device  # hosts of no known model join no model's medians
        shape = next(iter(shapes.values()), None)
        for _device, rows_list in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            rep = next((peaks[hosts[r]] for r in rows_list if hosts[r] in peaks), None)
            rl = one(f"fleet median ({len(rows_list)} hosts)", np.array(rows_list), rep, shape)
            if rl.points and any(p.peak for p in rl.points):  # without a compute roof there is no roofline
                out.append(rl)
    return out
