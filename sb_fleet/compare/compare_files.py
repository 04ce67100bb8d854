"""compare.json, compare.md and compare.html: two fleets side by side (see :mod:`sb_fleet.compare.comparison`)."""

from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from sb_fleet.safe_files import atomic_write_bytes

if TYPE_CHECKING:
    from sb_fleet.compare.comparison import Comparison, GroupComparison, ModelComparison

FILES = ("compare.json", "compare.md", "compare.html")
MAX_MD_METRICS = 400


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}x"


def _ci(lo: float | None, hi: float | None) -> str:
    return "-" if lo is None or hi is None else f"[{lo:.3f}, {hi:.3f}]"


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_md(c: Comparison, doc: dict[str, Any]) -> str:
    s = doc["summary"]
    lines = [
        "# sb-fleet compare",
        "",
        f"- Baseline: `{c.baseline.source}` ({c.baseline.hosts} hosts)",
        f"- Target: `{c.target.source}` ({c.target.hosts} hosts)",
        f"- Speedup: {doc['speedup']}",
        f"- Statistic: {doc['statistic']}",
        f"- Confidence interval: {doc['ci']}",
        f"- {s['metrics']} metrics in both: target better on {s['target_better']}, worse on {s['target_worse']}; "
        f"geometric-mean speedup {_x(s['geomean_speedup'])}; only in the baseline: {s['only_baseline']}, "
        f"only in the target: {s['only_target']}",
        "",
    ]
    if c.groups:
        lines += ["## Model groups (geometric mean)", "", "| Group | Models | Speedup |", "|---|---|---|"]
        lines += [f"| {g.group} | {g.models} | {_x(g.geomean_speedup)} |" for g in c.groups]
        lines.append("")
        lines += [
            "## Models",
            "",
            "| Group | Model | Precision | Metric | Baseline | Target | Speedup | 95% CI |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for mc in c.models:
            leaf = mc.metric.rpartition("/")[2]
            lines.append(
                f"| {mc.group} | `{_cell(mc.model)}` | {mc.precision} | {leaf} | {_num(mc.baseline)} | "
                f"{_num(mc.target)} | {_x(mc.speedup)} | {_ci(mc.ci_low, mc.ci_high)} |"
            )
        lines.append("")
    lines += [
        "## Metrics",
        "",
        "| Metric | Unit | Better | Baseline | Target | Speedup | 95% CI | Hosts (b/t) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for m in c.metrics[:MAX_MD_METRICS]:
        lines.append(
            f"| `{_cell(m.metric)}` | {_cell(m.unit or '-')} | {m.direction} | {_num(m.baseline)} | "
            f"{_num(m.target)} | {_x(m.speedup)} | {_ci(m.ci_low, m.ci_high)} | {m.baseline_hosts}/{m.target_hosts} |"
        )
    if len(c.metrics) > MAX_MD_METRICS:
        lines.append(f"| ... | | | | | | | {len(c.metrics) - MAX_MD_METRICS} more in compare.json |")
    lines.append("")
    for title, names in (("Only in the baseline", c.only_baseline), ("Only in the target", c.only_target)):
        if names:
            lines += [f"## {title} ({len(names)})", ""]
            lines += [f"- `{n}`" for n in names]
            lines.append("")
    if c.health is not None:
        lines += [f"## Health changes ({len(c.health)})", ""]
        if c.health:
            lines += ["| Host | Check | Change | Baseline | Target |", "|---|---|---|---|---|"]
            for ch in c.health[:MAX_MD_METRICS]:
                b, a = ch.get("before") or {}, ch.get("after") or {}
                lines.append(
                    f"| {_cell(ch['host'])} | {_cell(ch['check'])} | {ch['change']} | "
                    f"{_cell(b.get('verdict', ''))} {_cell(str(b.get('value', ''))[:80])} | "
                    f"{_cell(a.get('verdict', ''))} {_cell(str(a.get('evidence') or a.get('value', ''))[:160])} |"
                )
        lines.append("")
    if c.notes:
        lines += ["## Notes", ""] + [f"- {n}" for n in c.notes] + [""]
    return "\n".join(lines)


def _speedup_svg(rows: list[tuple[str, float | None, float | None, float | None]], title: str) -> str:
    """Horizontal bars of speedups (log scale) with their 95% intervals; 1x marked."""
    import io
    import re

    import matplotlib

    matplotlib.rcParams["svg.hashsalt"] = "sb-fleet"
    matplotlib.rcParams["svg.fonttype"] = "none"
    from matplotlib.figure import Figure

    rows = [r for r in rows if r[1] is not None]
    fig = Figure(figsize=(6.4, max(1.6, 0.28 * len(rows) + 0.9)), dpi=96)
    ax = fig.add_subplot()
    ys = list(range(len(rows)))
    vals = [float(r[1] or 0.0) for r in rows]
    colors = ["#2e8540" if v >= 1 else "#b3261e" for v in vals]
    ax.barh(ys, [v - 1 for v in vals], left=1, color=colors, height=0.6)
    for y, (_, v, lo, hi) in zip(ys, rows, strict=True):
        if lo is not None and hi is not None and v is not None:
            ax.plot([lo, hi], [y, y], color="#1d2430", linewidth=1)
    ax.axvline(1, color="#1d2430", linewidth=0.8)
    ax.set_yticks(ys, [r[0][-48:] for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.tick_params(labelsize=7)
    ax.set_xlabel("speedup (target vs baseline; > 1: target better)", fontsize=8)
    ax.set_title(title, fontsize=9)
    ax.grid(True, axis="x", color="#e3e6ea", linewidth=0.6)
    from matplotlib.ticker import FuncFormatter

    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    height = fig.get_figheight()
    fig.subplots_adjust(left=0.42, right=0.97, top=1 - 0.35 / height, bottom=0.55 / height)
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": "sb-fleet (matplotlib)"})
    text = buf.getvalue()
    text = text[text.index("<svg") :]
    text = re.sub(r"\s*<metadata>.*?</metadata>", "", text, flags=re.S)
    return text.replace(' xmlns:xlink="http://www.w3.org/1999/xlink"', "")


def _e(v: object) -> str:
    return html.escape(str(v))


def render_html(c: Comparison, doc: dict[str, Any]) -> str:
    s = doc["summary"]
    plots: list[str] = []
    if c.groups:
        plots.append(_speedup_svg(_group_rows(c.groups), "Model groups: geometric-mean speedup"))
        plots.append(_speedup_svg(_model_rows(c.models), "Models: training throughput speedup"))
    worst = sorted((m for m in c.metrics if m.speedup is not None), key=lambda m: m.speedup or 0.0)
    shown = worst[:15] + [m for m in worst[-15:] if m not in worst[:15]]
    if shown:
        plots.append(
            _speedup_svg(
                [(m.metric, m.speedup, m.ci_low, m.ci_high) for m in shown], "Metrics: the largest changes"
            )
        )
    rows = "".join(
        f'<tr><td class="mono">{_e(m.metric)}</td><td>{_e(m.unit or "-")}</td><td>{m.direction}</td>'
        f"<td>{_num(m.baseline)}</td><td>{_num(m.target)}</td>"
        f'<td class="{"good" if (m.speedup or 1) >= 1 else "bad"}">{_x(m.speedup)}</td>'
        f"<td>{_ci(m.ci_low, m.ci_high)}</td><td>{m.baseline_hosts}/{m.target_hosts}</td></tr>"
        for m in c.metrics
    )
    models = "".join(
        f'<tr><td>{_e(m.group)}</td><td class="mono">{_e(m.model)}</td><td>{_e(m.precision)}</td>'
        f"<td>{_num(m.baseline)}</td><td>{_num(m.target)}</td><td>{_x(m.speedup)}</td>"
        f"<td>{_ci(m.ci_low, m.ci_high)}</td></tr>"
        for m in c.models
    )
    one_sided = "".join(
        f"<h3>{t} ({len(names)})</h3><ul>"
        + "".join(f'<li class="mono">{_e(n)}</li>' for n in names)
        + "</ul>"
        for t, names in (("Only in the baseline", c.only_baseline), ("Only in the target", c.only_target))
        if names
    )
    return f"""<!DOCTYPE html>
<html lang="en" data-plots="{len(plots)}"><head><meta charset="utf-8"><title>sb-fleet compare</title>
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #1d2430; background: #f6f7f9; }}
header {{ padding: 16px 24px; background: #1f5fa8; color: #fff; }} main {{ padding: 16px 24px; }}
section {{ background: #fff; border-radius: 6px; padding: 12px 16px; margin-bottom: 16px; box-shadow: 0 1px 2px #0002; }}
table {{ border-collapse: collapse; width: 100%; }} th, td {{ text-align: left; padding: 3px 8px; border-bottom: 1px solid #e3e6ea; }}
.mono {{ font-family: ui-monospace, monospace; font-size: 12px; }} .good {{ color: #1e7d3b; }} .bad {{ color: #b3261e; }}
.figplots {{ display: flex; flex-wrap: wrap; gap: 12px; }} figure {{ margin: 0; }}
</style></head><body>
<header><h1>sb-fleet compare</h1>
<div>baseline {_e(c.baseline.source)} ({c.baseline.hosts} hosts) &rarr; target {_e(c.target.source)} ({c.target.hosts} hosts)</div></header>
<main>
<section><h2>Summary</h2><p>{_e(doc["speedup"])}. {_e(doc["statistic"])}. Confidence interval: {_e(doc["ci"])}.</p>
<p>{s["metrics"]} metrics in both: the target is better on {s["target_better"]}, worse on {s["target_worse"]};
geometric-mean speedup {_x(s["geomean_speedup"])}. Only in the baseline: {s["only_baseline"]}; only in the target: {s["only_target"]}.</p>
<div class="figplots">{"".join(f'<figure class="fig-plot">{p}</figure>' for p in plots)}</div></section>
<section><h2>Models</h2><table><thead><tr><th>Group</th><th>Model</th><th>Precision</th><th>Baseline</th><th>Target</th><th>Speedup</th><th>95% CI</th></tr></thead>
<tbody>{models}</tbody></table></section>
<section><h2>Metrics</h2><table><thead><tr><th>Metric</th><th>Unit</th><th>Better</th><th>Baseline</th><th>Target</th><th>Speedup</th><th>95% CI</th><th>Hosts (b/t)</th></tr></thead>
<tbody>{rows}</tbody></table>{one_sided}</section>
</main></body></html>
"""


def _group_rows(groups: list[GroupComparison]) -> list[tuple[str, float | None, float | None, float | None]]:
    return [(g.group, g.geomean_speedup, None, None) for g in groups]


def _model_rows(models: list[ModelComparison]) -> list[tuple[str, float | None, float | None, float | None]]:
    return [(f"{m.model.rpartition('/')[2]} {m.precision}", m.speedup, m.ci_low, m.ci_high) for m in models]


def write_compare(c: Comparison, out_dir: Path) -> list[Path]:
    """Render the three files, then write each atomically."""
    doc = c.to_json()
    rendered = {
        "compare.json": orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n",
        "compare.md": render_md(c, doc).encode(),
        "compare.html": render_html(c, doc).encode(),
    }
    paths = []
    for name in FILES:
        p = Path(out_dir) / name
        atomic_write_bytes(p, rendered[name], mode=0o644)
        paths.append(p)
    return paths
