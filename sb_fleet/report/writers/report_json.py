"""report.json: the machine-readable report.

Other tools rely on these names: top-level ``hosts`` (each with ``name``,
``outcome``, ``verdict`` and ``issues`` of ``{metric, value, reference,
deviation, check, category}``), ``metrics`` (per-metric fleet statistics)
and ``gate``.
"""

from __future__ import annotations

import datetime as _dt
import math
from typing import TYPE_CHECKING, Any

import orjson

from sb_fleet import __version__
from sb_fleet.report.headline import headline
from sb_fleet.report.writers.health_section import summary as health_summary

if TYPE_CHECKING:
    from sb_fleet.analysis.figures.figures import Figures
    from sb_fleet.report.report_result import ReportResult

SCHEMA_VERSION = 1


def _num(v: float | None) -> float | None:
    if v is None or not math.isfinite(v):
        return None
    return v


def build(result: ReportResult, figures: Figures | None = None) -> dict[str, Any]:
    """The report as JSON; with ``figures``, the measured figures under ``figures``."""
    fleet = result.fleet
    flagged: dict[int, set[int]] = {}
    for row, col in result.flagged_cells:
        flagged.setdefault(col, set()).add(row)
    metrics: dict[str, Any] = {}
    for i, c in enumerate(fleet.columns):
        m: dict[str, Any] = dict(result.stats.row(i))
        m["direction"] = {1: "higher", -1: "lower", 0: "unknown"}[fleet.directions.of(c)]
        m["unit"] = fleet.directions.unit(c)
        m["flagged_hosts"] = len(flagged.get(i, ()))
        metrics[c] = m
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": "sb-fleet",
        "sb_fleet_version": __version__,
        "generated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "source": result.source,
        "inputs": result.inputs,
        "summary": {"hosts": len(result.hosts), **result.counts()},
        "gate": result.gate.to_json(),
        "headline": headline(result).to_json(),
        "hosts": [h.to_json() for h in result.hosts],
        "metrics": metrics,
        "families": [
            {
                "family": f.family,
                "gpu_model": f.partition or None,  # the population (GPU model, driver, firmware or a split)
                "population": f.partition or None,
                "direction": {1: "higher", -1: "lower", 0: "unknown"}[f.direction],
                "columns": [fleet.columns[c] for c in f.columns],
                "center": _num(f.center),
                "sigma": _num(f.sigma),
                "fleet_limit": _num(f.fleet_limit),
                "sibling_sigma": _num(f.sibling_sigma),
                "sibling_limit": _num(f.sibling_limit),
            }
            for f in result.families
        ],
        "rules": [
            {
                "name": s.name,
                "function": s.function,
                "criteria": s.criteria,
                "categories": s.categories,
                "store": s.store,
                "metrics": s.metrics,
                "hosts_violating": s.hosts_violating,
            }
            for s in result.rule_summaries
        ],
        "problems": [{"file": p.path, "line": p.line, "message": p.message} for p in result.problems],
        "warnings": list(result.warnings),
        "populations": [sp.to_json() for sp in result.populations],
        "disagreements": [d.to_json() for d in result.disagreements],
        "too_noisy": [m.to_json() for m in result.too_noisy],
        "inconsistent": [m.to_json() for m in result.inconsistent],
        "evidence": [e.to_json() for e in result.evidence],
        "gates": result.gates.model_dump(mode="json"),
        "seconds": round(result.seconds, 3),
        **({"history": result.history.to_json()} if result.history is not None else {}),
        **({"fabric": result.fabric.to_json()} if result.fabric is not None else {}),
        **({"health": health_summary(result.health)} if result.health is not None else {}),
        **({"confirmation": result.confirmation} if result.confirmation is not None else {}),
        **({"figures": figures.to_json()} if figures is not None else {}),
    }


def top_finding(host: dict[str, Any]) -> str:
    """The first failing issue of a report.json host, as a short sentence (and how many more)."""
    issues = host.get("issues") or []
    fails = [i for i in issues if i.get("severity") == "fail"] or issues
    if not fails:
        return f"verdict {host.get('verdict', '?')}" + (f" ({host['reason']})" if host.get("reason") else "")
    i = fails[0]
    parts = [str(i.get("category") or i.get("check") or ""), str(i.get("metric") or "")]
    if i.get("value") is not None and i.get("reference") is not None:
        parts.append(f"{i['value']:.4g} vs {i['reference']:.4g}")
    if i.get("detail"):
        parts.append(str(i["detail"]))
    more = f" (+{len(fails) - 1} more)" if len(fails) > 1 else ""
    return " ".join(p for p in parts if p) + more


def dumps(doc: dict[str, Any]) -> bytes:
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY) + b"\n"
