"""Power and energy efficiency beside the compute figures (docs/energy.md).

The suite reports, for a compute figure ``<figure>`` (``fp16_tc_flops``, ``fp32_train_throughput``),
``<figure>_per_watt`` (its unit per watt) and ``<stem>_power`` (W: the mean power of the figure's
timed window), ``<stem>`` being the figure's name without its unit word. This module pairs them
again for the report: each figure's fleet medians of power and efficiency, and per host the power
against the throughput of the main GEMM precision (a host that needs more power for the same work
stands apart from the fleet's line). Pure.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sb_fleet.analysis.superbench.metric_names import parse_metric

# Kept in step with sb_bench.core.energy.energy_names (tests/suite/test_energy.py checks both agree).
_UNIT_WORDS = ("flops", "iops", "throughput", "gflops", "tflops", "gbps", "bw")
# The GEMM precision the power plot shows: the first one measured with its power.
MAIN_GEMM = ("fp16_tc", "bf16_tc", "tf32_tc", "fp8e4m3_tc", "int8_tc", "fp32", "fp64_tc", "fp64", "fp16")
_GEMM_BENCH = re.compile(r"(^|/)gemm-flops(:[^/]*)?$")


def energy_names(figure: str) -> tuple[str, str]:
    """(efficiency, power) metric leaf names of a compute figure's leaf name."""
    stem = figure
    for word in _UNIT_WORDS:
        if stem.endswith("_" + word):
            stem = stem[: -len(word) - 1]
            break
        if stem == word:
            stem = ""
            break
    return f"{figure}_per_watt", (f"{stem}_power" if stem else "power")


@dataclass(frozen=True)
class EnergyFigure:
    """A compute figure with the fleet medians of its window's power and its efficiency."""

    metric: str  # the figure (rank-less, as in the measured figures)
    unit: str | None
    median: float
    power: float | None  # W
    per_watt: float | None
    per_watt_unit: str | None


@dataclass(frozen=True)
class PowerPoint:
    host: str
    throughput: float  # the host's median over its GPUs
    power: float  # W, the host's median over its GPUs


@dataclass(frozen=True)
class PowerPlot:
    metric: str  # the GEMM figure, e.g. gemm-flops/fp16_tc_flops
    unit: str | None
    points: tuple[PowerPoint, ...]
    median_per_watt: float  # the fleet's median efficiency: the line throughput = this x power


def energy_figures(
    figures: Sequence[tuple[str, str | None, float]], medians: dict[str, tuple[str | None, float]]
) -> list[EnergyFigure]:
    """Each figure (metric, unit, median) whose efficiency or power was measured; ``medians`` holds every
    measured metric's (unit, median)."""
    out = []
    for metric, unit, median in figures:
        bench, _, leaf = metric.rpartition("/")
        eff, power = energy_names(leaf)
        e = medians.get(f"{bench}/{eff}" if bench else eff)
        p = medians.get(f"{bench}/{power}" if bench else power)
        if e is None and p is None:
            continue
        if leaf.endswith("_per_watt") or leaf.endswith("_power"):
            continue
        out.append(
            EnergyFigure(metric, unit, median, p[1] if p else None, e[1] if e else None, e[0] if e else None)
        )
    return out


def power_plot(
    hosts: Sequence[str], columns: Sequence[str], values: np.ndarray, units: dict[str, str | None]
) -> PowerPlot | None:
    """Power against throughput per host for the main GEMM precision (None: no GEMM power measured)."""
    by_base: dict[str, list[int]] = {}
    for c, col in enumerate(columns):
        name = parse_metric(col)
        if _GEMM_BENCH.search(name.group):
            by_base.setdefault(name.base, []).append(c)
    benches = sorted({b.rpartition("/")[0] for b in by_base})
    for prec in MAIN_GEMM:
        for bench in benches:
            fig = next(
                (f"{bench}/{prec}_{w}" for w in ("flops", "iops") if f"{bench}/{prec}_{w}" in by_base), None
            )
            pw = f"{bench}/{prec}_power"
            if fig is None or pw not in by_base:
                continue
            pts = _points(hosts, columns, values, by_base[fig], by_base[pw])
            if pts:
                eff = float(np.median([p.throughput / p.power for p in pts]))
                return PowerPlot(fig, units.get(fig), tuple(pts), eff)
    return None


def _points(
    hosts: Sequence[str], columns: Sequence[str], values: np.ndarray, fig_cols: list[int], pw_cols: list[int]
) -> list[PowerPoint]:
    # Pair a figure and a power column of the same GPU (rank) before taking a host's median.
    pw_by_unit = {parse_metric(columns[c]).unit: c for c in pw_cols}
    pairs = [(c, pw_by_unit[u]) for c in fig_cols if (u := parse_metric(columns[c]).unit) in pw_by_unit]
    out = []
    for h, host in enumerate(hosts):
        tp = [values[h, a] for a, b in pairs if np.isfinite(values[h, a]) and np.isfinite(values[h, b])]
        pw = [values[h, b] for a, b in pairs if np.isfinite(values[h, a]) and np.isfinite(values[h, b])]
        if tp and float(np.median(pw)) > 0:
            out.append(PowerPoint(host, float(np.median(tp)), float(np.median(pw))))
    return out
