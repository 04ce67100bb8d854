"""The results section of report.html: static markup (tables and matplotlib SVG plots), no script."""

from __future__ import annotations

import html
import statistics
from collections.abc import Callable

import sb_fleet.report.writers.figure_plots as plots
from sb_fleet.analysis.figures.figures import CV_LIMIT, Curve, Figures, Roofline, RoofPoint
from sb_fleet.report.writers.figures_md import ENERGY_NOTE, MODEL_COLUMNS, cv_text, num, pct
from sb_fleet.report.writers.plot_worker import submit

MAX_RANK_ROWS = 64


def _e(text: object) -> str:
    return html.escape(str(text))


def _plot(svg: str, caption: str, more: str = "") -> str:
    return (
        f'<figure class="fig-plot">{svg}<figcaption class="muted">{_e(caption)}{more}</figcaption></figure>'
    )


def conv_summary(points: list[RoofPoint]) -> str:
    """``36 convolutions: 20 compute-bound (median 45% of peak), 16 memory-bound (...)``."""
    parts = []
    for regime, against in (("compute-bound", "peak"), ("memory-bound", "the memory roof")):
        effs = sorted(
            p.efficiency for p in points if p.valid and p.regime == regime and p.efficiency is not None
        )
        if effs:
            parts.append(f"{len(effs)} {regime} (median {statistics.median(effs):.0%} of {against})")
    failed = sum(not p.valid for p in points)
    if failed:
        parts.append(f"{failed} with a failed result check, counted as 0 FLOPS (valid FLOPS)")
    unknown = sum(p.valid and p.efficiency is None for p in points)
    if unknown:
        parts.append(f"{unknown} without a peak")
    return f"{len(points)} convolution(s): " + ", ".join(parts)


Plot = tuple[Callable[[], str], str, str]  # (its SVG, when drawn; caption; more markup)


def start_plots(figs: Figures) -> list[Plot]:
    """Ask for every plot of the section now (a helper process draws them while the report goes on)."""
    out: list[Plot] = []
    by_bench: dict[str, list[Curve]] = {}
    for c in figs.curves:
        by_bench.setdefault(c.benchmark, []).append(c)
    for _bench, curves in by_bench.items():
        out.append(
            (
                submit(plots.collective_svg, curves),
                "busbw (solid, p5–p95 band) and algbw (dashed) vs message size",
                "",
            )
        )
    by_device: dict[str, list[Roofline]] = {}  # one plot per hardware model, every host a dot
    for rl in figs.rooflines:
        by_device.setdefault(rl.device, []).append(rl)
    for device, rls in by_device.items():
        convs = [p for p in rls[0].points if p.kind == "conv"]
        bw = next((rl for rl in rls if rl.bandwidth), None)
        roof = (
            f"memory roof: {bw.bandwidth_source}"
            if bw is not None
            else "no memory roof: no memory bandwidth known (none in the facts, none measured); "
            "the compute roofs only"
        )
        if len(rls) == 1:
            rl = rls[0]
            said = [p.sentence for p in rl.points if p.kind != "conv"] + (
                [conv_summary(convs)] if convs else []
            )
            caption = "; ".join(said) + f" — {roof}"
            svg = submit(plots.roofline_svg, rl)
        else:
            caption = (
                f"{device or 'device unknown'}: {len(rls)} hosts, each a dot per GEMM precision"
                + (" and convolution" if convs else "")
                + "; the % is the hosts' median share of the roof; a host more than 10% off the median is "
                f"named — {roof}"
            )
            svg = submit(plots.roofline_fleet_svg, rls)
        more = ""
        if convs:
            more = (
                f"<details><summary>{len(convs)} convolution(s)</summary><ul>"
                + "".join(
                    f"<li>{_e(p.sentence)}: {num(p.attained / 1e9)} GFLOPS, intensity {p.intensity:.3g} FLOP/byte</li>"
                    for p in convs
                )
                + "</ul></details>"
            )
        if len(rls) > 1:
            rows = "".join(
                f'<tr><td class="mono">{_e(rl.host)}</td>'
                + "".join(
                    f"<td>{_e(p.label)}: {num(p.attained / 1e9)} GFLOPS ({pct(p.efficiency)})</td>"
                    for p in rl.points
                    if p.kind != "conv"
                )
                + (
                    f"<td>{_e(conv_summary(cs))}</td>"
                    if (cs := [p for p in rl.points if p.kind == "conv"])
                    else ""
                )
                + "</tr>"
                for rl in rls
            )
            more += (
                f'<details><summary>each host\'s points</summary><table class="figs">{rows}</table></details>'
            )
        out.append((svg, caption, more))
    if figs.power_plot is not None:
        out.append(
            (
                submit(plots.power_svg, figs.power_plot),
                f"{figs.power_plot.metric}: each host's window power against its throughput; the dashed "
                "line is the fleet's median efficiency (a host right of it needs more power for the same work)",
                "",
            )
        )
    return out


def render(figs: Figures, started: list[Plot] | None = None) -> str:
    """A ``<section id="figures">`` for the page; empty when nothing was measured. ``started``: the
    section's plots from :func:`start_plots` (asked for now when not given)."""
    if not figs.metrics:
        return ""
    one = figs.hosts == 1
    out = [
        '<section id="figures"><h2>Measured figures</h2>',
        f'<p class="muted">{"One host: its values" if one else f"{figs.hosts} hosts: fleet median, p5/p95, min/max"}'
        " (GPUs/NICs pooled; open a row for each rank). % of peak = measured ÷ nominal peak. "
        f"Run-to-run CV above {CV_LIMIT:.0%} is marked too noisy.</p>",
    ]
    plots_html = [_plot(svg(), caption, more) for svg, caption, more in started or start_plots(figs)]
    if plots_html:
        out.append('<div class="figplots" id="figure-plots">' + "".join(plots_html) + "</div>")
    head = ["Metric", "Unit", "Better"]
    head += ["Value"] if one else ["Median", "p5", "p95", "Min", "Max", "Hosts"]
    head += ["% of peak", "Run-to-run CV"]
    for bench, rows in figs.by_benchmark().items():
        out.append(f'<h3>{_e(bench)}</h3><table class="figs"><thead><tr>')
        out.append("".join(f"<th>{_e(h)}</th>" for h in head) + "</tr></thead><tbody>")
        for f in rows:
            leaf = f.metric[len(bench) + 1 :] if f.metric.startswith(bench + "/") else f.metric
            cells = [
                f'<td class="mono">{_e(leaf)}'
                + (f" ({f.invalid_hosts} failed check: 0)" if f.invalid_hosts else "")
            ]
            if f.per_rank:
                ranks = "".join(
                    f"<tr><td>{_e(r)}</td><td>{num(v)}</td><td>{n}</td></tr>"
                    for r, v, n in f.per_rank[:MAX_RANK_ROWS]
                )
                cells[0] += (
                    f'<details><summary>{len(f.per_rank)} ranks</summary><table class="ranks">'
                    f"<tr><th>Rank</th><th>{'Value' if one else 'Median'}</th><th>Hosts</th></tr>{ranks}</table></details>"
                )
            cells[0] += "</td>"
            cells += [f"<td>{_e(f.unit or '-')}</td>", f"<td>{f.direction_word}</td>"]
            stats = [f.median] if one else [f.median, f.p5, f.p95, f.min, f.max]
            cells += [f"<td>{num(v)}</td>" for v in stats]
            if not one:
                cells.append(f"<td>{f.hosts}</td>")
            title = (
                f' title="{_e(f.peak_source)}: {num(f.peak)} {_e(f.peak_unit or "")}"'
                if f.peak is not None
                else ""
            )
            cells.append(f"<td{title}>{pct(f.efficiency)}</td>")
            cls = ' class="v-fail"' if f.noisy else ""
            cells.append(f"<td{cls}>{_e(cv_text(f))}</td>")
            out.append("<tr>" + "".join(cells) + "</tr>")
        out.append("</tbody></table>")
    if figs.energy:
        out.append(
            f'<h3>Power and efficiency</h3><p class="muted">{_e(ENERGY_NOTE)}</p><table class="figs"><thead><tr>'
        )
        out.append(
            "".join(
                f"<th>{_e(h)}</th>" for h in ("Figure", "Median", "Unit", "Power (W)", "Per watt", "Unit")
            )
        )
        out.append("</tr></thead><tbody>")
        for e in figs.energy:
            out.append(
                f'<tr><td class="mono">{_e(e.metric)}</td><td>{num(e.median)}</td><td>{_e(e.unit or "-")}</td>'
                f"<td>{num(e.power)}</td><td>{num(e.per_watt)}</td><td>{_e(e.per_watt_unit or '-')}</td></tr>"
            )
        out.append("</tbody></table>")
    if figs.models:
        present = [(k, t) for k, t in MODEL_COLUMNS if any(k in r.values for r in figs.models)]
        out.append('<h3>Models (per model and precision)</h3><table class="figs"><thead><tr>')
        out.append(
            "".join(f"<th>{_e(h)}</th>" for h in ["Model", "Group", "Precision", *(t for _, t in present)])
        )
        out.append("</tr></thead><tbody>")
        for r in figs.models:
            vals = "".join(
                f"<td>{num(r.values[k])} {_e(r.units.get(k) or '')}</td>" if k in r.values else "<td>-</td>"
                for k, _ in present
            )
            out.append(
                f'<tr><td class="mono">{_e(r.model)}</td><td>{_e(r.group)}</td><td>{_e(r.precision)}</td>{vals}</tr>'
            )
        out.append("</tbody></table>")
    if figs.notes:
        out.append(
            "<h3>Notes on the figures</h3><ul>" + "".join(f"<li>{_e(n)}</li>" for n in figs.notes) + "</ul>"
        )
    out.append("</section>")
    return "\n".join(out)
