"""Plots of the measured figures as inline SVG, drawn with matplotlib (no script, no network at view time).

Deterministic output (fixed hash salt, no date), so a page can be compared with a golden file.
"""

from __future__ import annotations

import io
import math
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sb_fleet.analysis.figures.figures import Curve, Roofline, RoofPoint
    from sb_fleet.analysis.figures.power import PowerPlot

MAX_POWER_LABELS = 12  # more hosts: only those furthest below the fleet's line are named

_COLORS = ("#1f5fa8", "#d9730d", "#2e8540", "#8e44ad", "#b3261e", "#5b5b9a", "#00838f", "#6d4c41")


def _figure(width: float = 5.0, height: float = 3.3) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.rcParams["svg.hashsalt"] = "sb-fleet"  # stable element ids: the same data, the same file
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: smaller, searchable
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=96)
    ax = fig.add_subplot()
    ax.grid(True, which="major", color="#e3e6ea", linewidth=0.6)
    ax.tick_params(labelsize=8)
    return fig, ax


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    # Fixed margins, not tight_layout: measuring every label's extent costs more than the whole plot.
    fig.subplots_adjust(left=0.14, right=0.97, top=0.9, bottom=0.22)
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": "sb-fleet (matplotlib)"})
    text = buf.getvalue()
    text = text[text.index("<svg") :]  # drop the XML prologue and doctype: inline in HTML
    # No namespace URIs but SVG's own: the RDF metadata goes, and HTML needs no xlink declaration.
    text = re.sub(r"\s*<metadata>.*?</metadata>", "", text, flags=re.S)
    return text.replace(' xmlns:xlink="http://www.w3.org/1999/xlink"', "")


def _size_label(b: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= scale:
            return f"{b / scale:g} {unit}"
    return f"{b:g} B"


def collective_svg(curves: list[Curve]) -> str:
    """busbw (solid, with the fleet's p5-p95 band) and algbw (dashed) against message size."""
    fig, ax = _figure()
    peak = None
    for i, c in enumerate(curves):
        color = _COLORS[i % len(_COLORS)]
        xs = list(c.sizes)
        bus = [v if v is not None else math.nan for v in c.busbw]
        alg = [v if v is not None else math.nan for v in c.algbw]
        lo = [v if v is not None else math.nan for v in c.busbw_p5]
        hi = [v if v is not None else math.nan for v in c.busbw_p95]
        ax.fill_between(xs, lo, hi, color=color, alpha=0.15, linewidth=0)
        ax.plot(xs, bus, marker="o", markersize=3, color=color, label=f"{c.op} busbw")
        ax.plot(xs, alg, linestyle="--", color=color, linewidth=1, label=f"{c.op} algbw")
        peak = peak or c.peak
    if peak:
        ax.axhline(peak, color="#b3261e", linestyle=":", linewidth=1, label="nominal peak")
    ax.set_xscale("log", base=2)
    ticks = sorted({s for c in curves for s in c.sizes})
    if len(ticks) > 8:
        ticks = ticks[:: math.ceil(len(ticks) / 8)]
    ax.set_xticks(ticks, [_size_label(t) for t in ticks], rotation=30)
    ax.set_xlabel("message size", fontsize=8)
    ax.set_ylabel(curves[0].unit or "bandwidth", fontsize=8)
    ax.set_title(curves[0].benchmark, fontsize=9)
    ax.legend(fontsize=7, ncol=2)
    return _svg(fig)


def roofline_svg(rl: Roofline) -> str:
    """Log-log roofline: the memory roof's slope, each compute roof once (GEMM precisions, and the ones
    convolutions are held against), GEMM points (circles, labelled with their % of the roof) and
    convolution points (triangles); a failed result check is a cross at 0 FLOPS (drawn at the floor)."""
    from matplotlib.lines import Line2D

    fig, ax = _figure()
    pts = list(rl.points)
    ais = [p.intensity for p in pts] or [1.0]
    peaks = [p.peak for p in pts if p.peak]
    lo_x = min(ais + [1.0]) / 8
    hi_x = max(ais) * 8
    if rl.bandwidth and peaks:
        lo_x = min(lo_x, min(peaks) / rl.bandwidth / 8)
    xs = [lo_x * (hi_x / lo_x) ** (i / 60) for i in range(61)]
    color_of: dict[str, str] = {}  # compute roof (or the precision where none is known) -> colour
    for p in pts:
        key = p.roof or p.precision
        if key not in color_of:
            color_of[key] = _COLORS[len(color_of) % len(_COLORS)]
            if p.peak:
                roof = [min(p.peak, x * rl.bandwidth) if rl.bandwidth else p.peak for x in xs]
                ax.plot(xs, [r / 1e9 for r in roof], color=color_of[key], linewidth=1.2, label=f"{key} roof")
    floor = 1e-3
    for p in pts:
        color = color_of[p.roof or p.precision]
        y = max(p.attained / 1e9, floor)
        if p.kind == "conv":
            ax.plot(
                [p.intensity],
                [y],
                marker="^" if p.valid else "x",
                markersize=5,
                color=color,
                linestyle="none",
                alpha=0.8,
            )
            continue
        ax.plot(
            [p.intensity], [y], marker="o" if p.valid else "x", markersize=7, color=color, linestyle="none"
        )
        label = f"{p.efficiency:.0%}" if p.efficiency is not None else f"{p.attained / 1e9:.3g}"
        ax.annotate(label, (p.intensity, y), textcoords="offset points", xytext=(6, -10), fontsize=7)
    grey = "#5a6270"
    if rl.bandwidth and not peaks:
        ax.plot(xs, [x * rl.bandwidth / 1e9 for x in xs], color=grey, linewidth=1, label="memory roof")
    handles, labels = ax.get_legend_handles_labels()
    kinds = {p.kind for p in pts}
    if "conv" in kinds:  # marker keys: what a circle and a triangle are
        if "gemm" in kinds:
            handles.append(Line2D([], [], marker="o", color=grey, linestyle="none"))
            labels.append("GEMM")
        handles.append(Line2D([], [], marker="^", color=grey, linestyle="none"))
        labels.append("convolution")
    if any(not p.valid for p in pts):
        handles.append(Line2D([], [], marker="x", color=grey, linestyle="none"))
        labels.append("check failed (0 FLOPS)")
    return _roofline_axes(ax, fig, f"{rl.host}: {rl.device}", handles, labels)


def roofline_fleet_svg(rls: list[Roofline], outlier: float = 0.1) -> str:
    """One hardware model's roofline with every host as a dot: the roofs once (from the first host
    that has them), each host's GEMM points (circles) and convolutions (triangles) in its roof's
    colour, a failed result check as a cross at the floor; the hosts more than ``outlier`` off the
    median of a point are named, the median's % of the roof is written once per point."""
    import statistics

    from matplotlib.lines import Line2D

    fig, ax = _figure()
    pts = [(rl.host, p) for rl in rls for p in rl.points]
    ais = [p.intensity for _, p in pts] or [1.0]
    peaks = [p.peak for _, p in pts if p.peak]
    bw = next((rl.bandwidth for rl in rls if rl.bandwidth), None)
    lo_x = min(ais + [1.0]) / 8
    hi_x = max(ais) * 8
    if bw and peaks:
        lo_x = min(lo_x, min(peaks) / bw / 8)
    xs = [lo_x * (hi_x / lo_x) ** (i / 60) for i in range(61)]
    color_of: dict[str, str] = {}
    for _, p in pts:
        key = p.roof or p.precision
        if key not in color_of:
            color_of[key] = _COLORS[len(color_of) % len(_COLORS)]
            if p.peak:
                roof = [min(p.peak, x * bw) if bw else p.peak for x in xs]
                ax.plot(xs, [r / 1e9 for r in roof], color=color_of[key], linewidth=1.2, label=f"{key} roof")
    floor = 1e-3
    by_label: dict[tuple[str, str], list[tuple[str, RoofPoint]]] = {}
    for host, p in pts:
        by_label.setdefault((p.kind, p.label), []).append((host, p))
    for group in by_label.values():
        ps = [p for _, p in group]
        p0 = ps[0]
        color = color_of[p0.roof or p0.precision]
        marker = "^" if p0.kind == "conv" else "o"
        ok = [p for p in ps if p.valid]
        bad = [p for p in ps if not p.valid]
        size = 5 if p0.kind == "conv" else 6
        if ok:
            ax.plot(
                [p.intensity for p in ok],
                [max(p.attained / 1e9, floor) for p in ok],
                marker=marker,
                markersize=size,
                color=color,
                linestyle="none",
                alpha=0.55,
                markeredgecolor="white",
                markeredgewidth=0.5,
            )
        if bad:
            ax.plot([p.intensity for p in bad], [floor] * len(bad), marker="x", color=color, linestyle="none")
        med = statistics.median(p.attained for p in ps)
        if p0.kind != "conv":
            effs = [p.efficiency for p in ok if p.efficiency is not None]
            label = f"{statistics.median(effs):.0%}" if effs else f"{med / 1e9:.3g}"
            ax.annotate(
                label,
                (p0.intensity, max(med / 1e9, floor)),
                textcoords="offset points",
                xytext=(7, -3),
                fontsize=7,
            )
        if len(ps) > 2 and med > 0:
            for host, p in group:
                if p.valid and abs(p.attained / med - 1) > outlier:  # a failed check: its cross says so
                    ax.annotate(
                        host,
                        (p.intensity, max(p.attained / 1e9, floor)),
                        textcoords="offset points",
                        xytext=(-6, -11),
                        fontsize=7,
                        color="#b3261e",
                        ha="right",
                    )
    grey = "#5a6270"
    if bw and not peaks:
        ax.plot(xs, [x * bw / 1e9 for x in xs], color=grey, linewidth=1, label="memory roof")
    handles, labels = ax.get_legend_handles_labels()
    kinds = {p.kind for _, p in pts}
    if "conv" in kinds:
        if "gemm" in kinds:
            handles.append(Line2D([], [], marker="o", color=grey, linestyle="none"))
            labels.append("GEMM")
        handles.append(Line2D([], [], marker="^", color=grey, linestyle="none"))
        labels.append("convolution")
    if any(not p.valid for _, p in pts):
        handles.append(Line2D([], [], marker="x", color=grey, linestyle="none"))
        labels.append("check failed (0 FLOPS)")
    return _roofline_axes(ax, fig, f"{rls[0].device or 'device unknown'}: {len(rls)} hosts", handles, labels)


def _roofline_axes(ax: Any, fig: Any, title: str, handles: list, labels: list[str]) -> str:
    """A roofline's log axes (plain numbers, no mathtext: "1e+06", not a typeset power), labels, title
    and legend; the figure as SVG."""
    from matplotlib.ticker import FuncFormatter

    ax.set_xscale("log")
    ax.set_yscale("log")
    plain = FuncFormatter(lambda v, _pos: f"{v:g}")
    ax.xaxis.set_major_formatter(plain)
    ax.yaxis.set_major_formatter(plain)
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _pos: ""))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _pos: ""))
    ax.set_xlabel("arithmetic intensity (FLOP/byte)", fontsize=8)
    ax.set_ylabel("GFLOPS", fontsize=8)
    ax.set_title(title[:70], fontsize=9)
    if handles:
        ax.legend(handles, labels, fontsize=7)
    return _svg(fig)


def power_svg(pp: PowerPlot) -> str:
    """Each host's mean power (x) against its throughput (y) for one GEMM precision, with the fleet's
    median efficiency as a line through the origin: a host that needs more power for the same work
    sits right of (below) the line."""
    fig, ax = _figure()
    xs = [p.power for p in pp.points]
    ys = [p.throughput for p in pp.points]
    top = max(xs) * 1.15
    ax.plot(
        [0, top],
        [0, top * pp.median_per_watt],
        color="#5a6270",
        linewidth=1,
        linestyle="--",
        label=f"fleet median {pp.median_per_watt:.4g} {pp.unit or ''}/W".replace(" /W", "/W"),
    )
    ax.plot(xs, ys, marker="o", markersize=5, linestyle="none", color=_COLORS[0], label="host")
    worst = sorted(pp.points, key=lambda p: p.throughput / p.power)[:MAX_POWER_LABELS]
    for p in worst:
        ax.annotate(p.host, (p.power, p.throughput), textcoords="offset points", xytext=(5, -9), fontsize=7)
    ax.set_xlim(min(xs) * 0.8, top)
    ax.set_ylim(min(ys) * 0.8, max(ys) * 1.15)
    ax.set_xlabel("mean power of the timed window (W)", fontsize=8)
    ax.set_ylabel(pp.unit or "throughput", fontsize=8)
    ax.set_title(f"{pp.metric}: power vs throughput per host"[:70], fontsize=9)
    ax.legend(fontsize=7)
    return _svg(fig)
