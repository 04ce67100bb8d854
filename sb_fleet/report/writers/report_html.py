"""report.html: one self-contained page that opens offline.

The page carries its data as JSON inside a ``<script type="application/json">``
tag and draws everything with a small inline script: a summary, one
distribution plot per metric family (histogram of the fleet, the median,
the flag limit, flagged hosts as red marks) and a per-host drill-down.
No external file, font or library is loaded.
"""

from __future__ import annotations

import html as _html
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from sb_fleet.analysis.order_stats import quantiles
from sb_fleet.report.writers.html_page import PAGE

if TYPE_CHECKING:
    from sb_fleet.analysis.figures.figures import Figures
    from sb_fleet.report.report_result import ReportResult
    from sb_fleet.report.writers.figures_html import Plot

BINS = 40
MAX_MARKERS = 300
MAX_BAD_HOSTS = 5000


def _family_plots(result: ReportResult) -> list[dict[str, Any]]:
    fleet = result.fleet
    by_col: dict[int, list[int]] = {}
    for row, col in result.flagged_cells:
        by_col.setdefault(col, []).append(row)
    plots: list[dict[str, Any]] = []
    for fam in result.families:
        cols = list(fam.columns)
        rows = result.partitions.get(fam.partition)
        if rows is None:
            rows = np.arange(len(fleet.hosts))
        block = fleet.values[np.ix_(rows, np.asarray(cols, dtype=np.int64))]
        flat = block[~np.isnan(block)]
        if flat.size == 0:
            continue
        lo, hi = quantiles(flat, (0.001, 0.999))
        if hi <= lo:
            lo, hi = float(flat.min()), float(flat.max())
        if hi <= lo:
            hi = lo + (abs(lo) * 0.01 or 1.0)
        pad = (hi - lo) * 0.05
        lo, hi = float(lo - pad), float(hi + pad)
        counts, _ = np.histogram(np.clip(flat, lo, hi), bins=BINS, range=(lo, hi))
        in_part = set(rows.tolist()) if fam.partition else None
        markers: list[dict[str, Any]] = []
        for c in cols:
            for row in by_col.get(c, ()):
                if in_part is not None and row not in in_part:
                    continue
                v = float(fleet.values[row, c])
                if np.isfinite(v):
                    markers.append({"h": fleet.hosts[row], "v": v, "m": fleet.columns[c]})
        markers.sort(key=lambda m: m["v"])
        limit = None
        if fam.direction >= 0:
            limit = fam.center * (1 - fam.fleet_limit)
        limit_hi = fam.center * (1 + fam.fleet_limit) if fam.direction <= 0 else None
        plots.append(
            {
                "family": fam.family + (f" [{fam.partition}]" if fam.partition else ""),
                "direction": fam.direction,
                "center": fam.center,
                "limit": limit,
                "limit_hi": limit_hi,
                "lo": lo,
                "hi": hi,
                "counts": counts.tolist(),
                "n": int(flat.size),
                "markers": markers[:MAX_MARKERS],
                "more_markers": max(0, len(markers) - MAX_MARKERS),
            }
        )
    plots.sort(key=lambda p: (-len(p["markers"]), p["family"]))
    return plots


def data(result: ReportResult, doc: dict[str, Any]) -> dict[str, Any]:
    bad = [h for h in doc["hosts"] if h["verdict"] != "pass"]
    return {
        "source": doc["source"],
        "generated": doc["generated"],
        "summary": doc["summary"],
        "gate": doc["gate"],
        "bad_hosts": bad[:MAX_BAD_HOSTS],
        "more_bad_hosts": max(0, len(bad) - MAX_BAD_HOSTS),
        "pass_hosts": [h["name"] for h in doc["hosts"] if h["verdict"] == "pass"],
        "plots": _family_plots(result),
        "problems": doc["problems"][:200],
        "warnings": doc["warnings"],
        "rules": doc["rules"],
    }


def _embed(obj: Any) -> str:
    text = orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY).decode()
    # Inside <script>, "</" could close the tag; U+2028/9 break older parsers.
    return text.replace("</", "<\\/").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def headline(result: ReportResult) -> str:
    """The page's title: the gate, and what could not be judged (never a bare "passed" over it)."""
    head = f"sb-fleet report: gate {'passed' if result.gate.passed else 'failed'}"
    notes = []
    if result.too_noisy:
        notes.append(f"{len(result.too_noisy)} metric(s) too noisy to judge")
    if result.inconsistent:
        notes.append(f"{len(result.inconsistent)} inconsistent")
    return f"{head} ({', '.join(notes)})" if notes else head


def render(
    result: ReportResult,
    doc: dict[str, Any],
    figures: Figures | None = None,
    figure_plots: list[Plot] | None = None,
) -> str:
    title = headline(result)
    page = PAGE.replace("@@TITLE@@", _html.escape(title)).replace(
        "@@DATA@@", _embed({**data(result, doc), "headline": title})
    )
    if figures is not None:  # the measured figures: static tables and matplotlib plots
        from sb_fleet.report.writers.figures_html import render as render_figures

        anchor = "<section><h2>Metric distributions</h2>"  # the numbers first, then their spread
        head, mark, tail = page.partition(anchor)
        page = head + render_figures(figures, figure_plots) + "\n" + mark + tail
    if result.health is not None:  # the checks before the benchmarks
        from sb_fleet.report.writers.health_section import html as health_html

        head, body_end, tail = page.rpartition("</body>")
        page = head + health_html(result.health) + body_end + tail
    if result.history is not None:  # trend plots of flagged hosts and fleet medians (sb_fleet.history)
        from sb_fleet.history.trend_plots import html_section

        head, body_end, tail = page.rpartition("</body>")
        page = head + html_section(result.history) + body_end + tail
    from sb_fleet.analysis.crossnode.pair_map import (
        pair_sections,  # a pattern run: pair heatmaps and verdicts
    )

    pairs = pair_sections(result.source)
    if pairs:
        head, body_end, tail = page.rpartition("</body>")
        page = head + pairs + body_end + tail
    return page
