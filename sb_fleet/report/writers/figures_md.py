"""The results section of report.md: every measured figure with its unit, against its peak."""

from __future__ import annotations

from sb_fleet.analysis.figures.figures import CV_LIMIT, Figures, MetricFigure

MAX_RANKS_SHOWN = 8
CONV_NOTE = (
    "Convolutions (cudnn-function, one point per call timed): FLOPs per call 2·n·k·c·r·s·out_h·out_w "
    "from the shape in the metric's name, over the time per call (effective FLOPS: a Winograd or FFT "
    "algorithm does fewer operations and can sit above its roof); intensity over the compulsory traffic "
    "(input, weights and output moved once at the datatype's size, so an upper bound). Compute roof: "
    "the GEMM peak of the datatype: half fp16_tc; float tf32_tc on NVIDIA GPUs that have it (cuDNN runs "
    "float as TF32 by default), else fp32 (CPUs: the fp32 peak; half has none)."
)
MODEL_NOTE = (
    "Precisions as the suite names them: fp32 on NVIDIA GPUs is computed with TF32 allowed (cuBLAS and "
    "cuDNN round fp32 inputs to TF32 on tensor cores), as SuperBench does, unless the benchmark ran with "
    "force_fp32: true (IEEE fp32). Device busy: the share of the timed loop's wall time the device spent on "
    "the steps' work; below 90% the figure is host-bound and measures the host."
)
MODEL_COLUMNS = (
    ("train_throughput", "Train throughput"),
    ("train_step_time", "Train step time"),
    ("inference_throughput", "Inference throughput"),
    ("inference_step_time", "Inference step time"),
    ("inference_step_time_p50", "p50"),
    ("inference_step_time_p90", "p90"),
    ("inference_step_time_p95", "p95"),
    ("inference_step_time_p99", "p99"),
    ("inference_step_time_p99.9", "p99.9"),
)


def num(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.4g}"


def pct(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:.1f}%"


def cv_text(f: MetricFigure) -> str:
    if f.cv is None:
        return "-"
    mark = " ⚠ too noisy" if f.noisy else ""
    return f"{f.cv * 100:.1f}% ({f.runs} runs){mark}"


def ranks_text(f: MetricFigure) -> str:
    if not f.per_rank:
        return ""
    shown = ", ".join(f"{r}: {num(v)}" for r, v, _ in f.per_rank[:MAX_RANKS_SHOWN])
    more = f", … {len(f.per_rank) - MAX_RANKS_SHOWN} more" if len(f.per_rank) > MAX_RANKS_SHOWN else ""
    return shown + more


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


ENERGY_NOTE = (
    "Each compute figure with the mean power of its own timed window (energy counter read just before "
    "and after it: NVML, amdsmi or powercap; docs/energy.md) and its efficiency = figure ÷ power."
)


def energy_lines(figs: Figures) -> list[str]:
    """The "Power and efficiency" table: each compute figure beside its window's power and efficiency."""
    if not figs.energy:
        return []
    lines = ["### Power and efficiency", "", ENERGY_NOTE, ""]
    lines += ["| Figure | Median | Unit | Power (W) | Per watt | Unit |", "|---|---|---|---|---|---|"]
    for e in figs.energy:
        lines.append(
            f"| `{_cell(e.metric)}` | {num(e.median)} | {_cell(e.unit or '-')} | {num(e.power)} | "
            f"{num(e.per_watt)} | {_cell(e.per_watt_unit or '-')} |"
        )
    pp = figs.power_plot
    if pp is not None:
        worst = min(pp.points, key=lambda p: p.throughput / p.power)
        lines += [
            "",
            f"Power against throughput per host for `{_cell(pp.metric)}` (plot in report.html): fleet median "
            f"{num(pp.median_per_watt)} {_cell(pp.unit or '')}/W; least efficient `{_cell(worst.host)}` at "
            f"{num(worst.throughput / worst.power)} ({num(worst.throughput)} at {num(worst.power)} W).",
        ]
    lines.append("")
    return lines


def render(figs: Figures) -> str:
    """The "Measured figures" section (markdown), empty when nothing was measured."""
    if not figs.metrics:
        return ""
    one = figs.hosts == 1
    lines = [
        "## Measured figures",
        "",
        (
            "One host: its values (GPUs/NICs pooled: their median; per rank in the last column)."
            if one
            else f"{figs.hosts} hosts: the fleet's median, p5/p95, min/max of every value (GPUs/NICs pooled); "
            "hosts = how many reported it; per rank: the median of each rank."
        )
        + f" % of peak: measured ÷ the nominal peak. Run-to-run CV above {CV_LIMIT:.0%} is marked too noisy.",
        "",
    ]
    if one:
        head = "| Metric | Unit | Better | Value | % of peak | Run-to-run CV | Per rank |"
        rule = "|---|---|---|---|---|---|---|"
    else:
        head = "| Metric | Unit | Better | Median | p5 | p95 | Min | Max | Hosts | % of peak | Run-to-run CV | Per rank |"
        rule = "|---|---|---|---|---|---|---|---|---|---|---|---|"
    for bench, rows in figs.by_benchmark().items():
        lines += [f"### {bench}", "", head, rule]
        for f in rows:
            leaf = f.metric[len(bench) + 1 :] if f.metric.startswith(bench + "/") else f.metric
            invalid = f" ({f.invalid_hosts} failed check: 0)" if f.invalid_hosts else ""
            cells = [f"`{_cell(leaf)}`{invalid}", _cell(f.unit or "-"), f.direction_word]
            if one:
                cells.append(num(f.median))
            else:
                cells += [num(f.median), num(f.p5), num(f.p95), num(f.min), num(f.max), str(f.hosts)]
            eff = pct(f.efficiency) + (" (above peak: see notes)" if f.above_peak else "")
            cells += [eff, cv_text(f), _cell(ranks_text(f))]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    lines += energy_lines(figs)
    if figs.models:
        present = [(k, t) for k, t in MODEL_COLUMNS if any(k in r.values for r in figs.models)]
        busy = any(r.busy for r in figs.models)
        expected = any(r.expected for r in figs.models)
        extra = (" Device busy |" if busy else "") + (" % of expected |" if expected else "")
        lines += [
            "### Models (per model and precision)",
            "",
            MODEL_NOTE,
            "",
            "| Model | Group | Precision | " + " | ".join(t for _, t in present) + " |" + extra,
            "|---|---|---|" + "---|" * len(present) + ("---|" if busy else "") + ("---|" if expected else ""),
        ]
        bound_notes = []
        for r in figs.models:
            vals = [
                f"{num(r.values[k])} {r.units.get(k) or ''}".strip() if k in r.values else "-"
                for k, _ in present
            ]
            prec = r.precision + (" **host-bound**" if r.host_bound else "")
            row = f"| `{_cell(r.model)}` | {r.group} | {prec} | " + " | ".join(vals) + " |"
            if busy:
                row += " " + (", ".join(f"{a} {v:.0f}%" for a, v in sorted(r.busy.items())) or "-") + " |"
            if expected:
                row += (
                    " "
                    + (
                        ", ".join(
                            f"{col.split('_')[0]} {pct(r.values[col] / v)} of {num(v)}"
                            for col, (v, _) in sorted(r.expected.items())
                        )
                        or "-"
                    )
                    + " |"
                )
            lines.append(row)
            bound_notes += [
                f"- `{_cell(r.model)}` {r.precision} {a}: host-bound: {why}"
                for a, why in sorted(r.host_bound.items())
            ]
            bound_notes += [
                f"- `{_cell(r.model)}` {r.precision} {col.split('_')[0]}: expected {num(v)} samples/s per GPU ({src})"
                for col, (v, src) in sorted(r.expected.items())
            ]
        lines.append("")
        if bound_notes:
            lines += bound_notes + [""]
    if figs.rooflines:
        lines += ["### Roofline", ""]
        if any(p.kind == "conv" for rl in figs.rooflines for p in rl.points):
            lines += [CONV_NOTE, ""]
        by_device: dict[str, list] = {}  # one block per hardware model: its roofs said once
        for rl in figs.rooflines:
            by_device.setdefault(rl.device, []).append(rl)
        for device, rls in by_device.items():
            first = next((rl for rl in rls if rl.bandwidth), rls[0])
            bw = f"{first.bandwidth / 1e9:.4g} GB/s" if first.bandwidth else "unknown"
            notes = sorted({rl.shape_note for rl in rls if rl.shape_note})
            hosts = _cell(rls[0].host) if len(rls) == 1 else f"{len(rls)} hosts"
            lines.append(
                f"- **{_cell(device or 'device unknown')}** ({hosts}): memory roof {bw} "
                f"({first.bandwidth_source})" + (f"; {_cell('; '.join(notes))}" if notes else "")
            )
            if len(rls) == 1:
                for p in rls[0].points:
                    peak = f" of {p.peak / 1e9:.4g} GFLOPS peak" if p.peak else ""
                    lines.append(
                        f"  - {p.sentence}: {p.attained / 1e9:.4g} GFLOPS{peak}, "
                        f"intensity {p.intensity:.3g} FLOP/byte"
                    )
                continue
            lines += [
                "",
                "| Host | Point | GFLOPS | Peak GFLOPS | Intensity (FLOP/byte) |",
                "|---|---|---|---|---|",
            ]
            for rl in rls:
                for p in rl.points:
                    peak = f"{p.peak / 1e9:.4g}" if p.peak else "-"
                    lines.append(
                        f"| {_cell(rl.host)} | {_cell(p.sentence)} | {p.attained / 1e9:.4g} | {peak} "
                        f"| {p.intensity:.3g} |"
                    )
            lines.append("")
        if lines[-1]:
            lines.append("")
    peaks = sorted(
        {(f.metric, f.peak, f.peak_unit, f.peak_source) for f in figs.metrics if f.peak is not None}
    )
    if peaks:
        lines += ["### Peaks used", ""]
        lines += [f"- `{m}`: {num(p)} {u or ''} ({s})" for m, p, u, s in peaks]
        lines.append("")
    if figs.notes:
        lines += ["### Notes on the figures", ""]
        lines += [f"- {n}" for n in figs.notes]
        lines.append("")
    return "\n".join(lines)
