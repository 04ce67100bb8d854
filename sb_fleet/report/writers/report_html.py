"""report.html: one self-contained page that opens offline.

The page carries its data as JSON inside a ``<script type="application/json">``
tag and draws everything with a small inline script: a summary, one
distribution plot per metric family (histogram of the fleet, the median,
the flag limit, flagged hosts as red marks) and a per-host drill-down.
No external file, font or library is loaded.
"""

from __future__ import annotations

import html as _html
import re
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson

from sb_fleet.analysis.order_stats import quantiles
from sb_fleet.report.headline import headline
from sb_fleet.report.writers.html_page import PAGE

if TYPE_CHECKING:
    from sb_fleet.analysis.figures.figures import Figures
    from sb_fleet.report.report_result import ReportResult
    from sb_fleet.report.writers.figures_html import Plot

BINS = 40
MAX_MARKERS = 300
MAX_BAD_HOSTS = 5000
SMALL_FLEET = 20  # a partition of fewer hosts is judged by majority agreement: a dot per host
MAX_EVIDENCE = 400  # metrics drawn as dot plots at most (the rest: report.json)


def _family_plots(result: ReportResult, small: bool = False) -> list[dict[str, Any]]:
    """One histogram per family; with ``small``, none of a population of fewer than SMALL_FLEET hosts
    (their evidence draws every host as a dot instead)."""
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
        if small and len(rows) < SMALL_FLEET:
            continue
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


def _evidence(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """report.json's per-metric evidence of the partitions judged by majority agreement (fewer than
    SMALL_FLEET hosts: one dot per host), in its order (flagged first); larger partitions are drawn as
    histograms."""
    return [e for e in doc.get("evidence") or () if 0 < len(e.get("hosts") or ()) < SMALL_FLEET]


def _findings(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Population splits, two-host disagreements, inconsistent and too-noisy metrics, each with what it
    did to the gate: ``fails`` the gate, did ``not_again`` (a re-run did not show it: no failure) or a
    ``warning``."""
    gates = doc.get("gates") or {}
    fleet_gate = gates.get("fleet") or {}
    expected_mix = bool((gates.get("populations") or {}).get("expected_mix"))
    kinds = {r.get("kind") for r in (doc["gate"].get("reasons") or ())}

    def effect(f: dict[str, Any], fails: bool) -> str:
        if f.get("confirmed") is False:
            return "not_again"
        return "fails" if fails else "warning"

    out: list[dict[str, Any]] = []
    for sp in doc.get("populations") or ():
        fails = "populations" in kinds if kinds else not expected_mix
        out.append({"kind": "populations", "effect": effect(sp, fails), **sp})
    for d in doc.get("disagreements") or ():
        out.append({"kind": "disagreements", "effect": effect(d, True), **d})
    for inc in doc.get("inconsistent") or ():
        fails = "inconsistent" in kinds if kinds else fleet_gate.get("inconsistent", "fail") == "fail"
        out.append({"kind": "inconsistent", "effect": effect(inc, fails), **inc})
    for m in doc.get("too_noisy") or ():
        fails = "too_noisy" in kinds if kinds else fleet_gate.get("too_noisy") == "fail"
        out.append({"kind": "too_noisy", "effect": "fails" if fails else "warning", **m})
    order = {"fails": 0, "warning": 1, "not_again": 2}
    out.sort(key=lambda f: order[f["effect"]])  # stable: the kinds keep their order within each
    return out


def data(result: ReportResult, doc: dict[str, Any]) -> dict[str, Any]:
    bad = [h for h in doc["hosts"] if h["verdict"] != "pass"]
    evidence = _evidence(doc)
    return {
        "source": doc["source"],
        "generated": doc["generated"],
        "summary": doc["summary"],
        "gate": doc["gate"],
        "head": doc.get("headline") or headline(result).to_json(),
        "bad_hosts": bad[:MAX_BAD_HOSTS],
        "more_bad_hosts": max(0, len(bad) - MAX_BAD_HOSTS),
        "pass_hosts": [h["name"] for h in doc["hosts"] if h["verdict"] == "pass"],
        "plots": _family_plots(result, small=bool(evidence)),
        "evidence": evidence[:MAX_EVIDENCE],
        "more_evidence": max(0, len(evidence) - MAX_EVIDENCE),
        "counted": list(
            ((doc.get("gates") or {}).get("policy") or {}).get("count") or ("fail", "incomplete", "missing")
        ),
        "findings": _findings(doc),
        "problems": doc["problems"][:200],
        "warnings": doc["warnings"],
        "rules": doc["rules"],
    }


def _embed(obj: Any) -> str:
    text = orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY).decode()
    # Inside <script>, "</" could close the tag; U+2028/9 break older parsers.
    return text.replace("</", "<\\/").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def render(
    result: ReportResult,
    doc: dict[str, Any],
    figures: Figures | None = None,
    figure_plots: list[Plot] | None = None,
) -> str:
    d = data(result, doc)
    title = "sb-fleet report: " + d["head"]["text"]
    # Static sections, each where it belongs and only with content (the script fills the rest).
    health = ""
    if result.health is not None and result.health.get("hosts"):  # the checks before the benchmarks
        from sb_fleet.report.writers.health_section import html as health_html

        health = health_html(result.health)
    figs = ""
    if figures is not None:  # the measured figures: static tables and matplotlib plots
        from sb_fleet.report.writers.figures_html import render as render_figures

        figs = render_figures(figures, figure_plots)
    more = []
    if result.history is not None:  # trend plots of flagged hosts and fleet medians (sb_fleet.history)
        from sb_fleet.history.trend_plots import html_section

        more.append(html_section(result.history))
    from sb_fleet.analysis.crossnode.pair_map import (
        pair_sections,  # a pattern run: pair heatmaps and verdicts
    )

    pairs = pair_sections(result.source)
    if pairs:
        more.append(pairs)
    parts = {
        "@@TITLE@@": _html.escape(title),
        "@@DATA@@": _embed(d),
        "<!--@@HEALTH@@-->": health,
        "<!--@@FIGURES@@-->": figs,
        "<!--@@MORE@@-->": "\n".join(more),
    }
    # one pass: what one part brings in is never taken for another part's marker
    return re.sub("|".join(re.escape(k) for k in parts), lambda m: parts[m.group(0)], PAGE)
