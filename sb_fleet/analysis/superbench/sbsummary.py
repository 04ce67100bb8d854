"""``sb-fleet summary``: SuperBench's ``sb result summary`` (results-summary.{md,html,xlsx}).

A summary rules file (schema in :mod:`sb_fleet.config.rulespec`) names, per category, the
metrics to summarise and the statistics to show: ``mean``, ``std`` (sample, n-1),
``min``, ``max``, ``count`` (values present) and ``p1``..``p99`` (linear
interpolation), all skipping missing values. ``aggregate: true`` pools the ranks
of a metric (``event_overhead:0..7`` -> ``event_overhead``); a regex pools the
metrics it matches with each of its groups masked by ``*``
(``ib-loopback/IB_write_.*_Avg_(\\d+)`` turns ``IB_write_8388608_Avg_3:0`` into
``IB_write_8388608_Avg_*:0``). Metrics are matched as in the diagnosis rules.
Values are rounded to ``digits`` (SuperBench's rounding: significant digits below
1, decimals above).

Two deliberate differences from SuperBench: rules that share a category are
listed one after the other (SuperBench keeps only the last one's lines), and with
``aggregate: true`` a metric without a rank keeps its name (SuperBench pools every
such metric of the rule into one nameless column).
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sb_fleet.analysis.superbench.rules import match_patterns
from sb_fleet.analysis.superbench.sbtables import Cell, html_table, md_lines, significant, write_xlsx
from sb_fleet.config.rulespec import SummaryRuleSpec, load_summary_spec
from sb_fleet.errors import RulesError

FORMATS = ("md", "html", "xlsx")
_RANK = re.compile(r":\d+$")


@dataclass(frozen=True)
class SummaryRule:
    name: str
    categories: str
    statistics: tuple[str, ...]
    patterns: tuple[str, ...]
    compiled: tuple[re.Pattern[str], ...]
    aggregate: bool | re.Pattern[str]


def load_summary_rules(path: Path) -> list[SummaryRule]:
    spec = load_summary_spec(path)
    out = []
    for name, r in spec.superbench.rules.items():
        out.append(_rule(path, name, r))
    return out


def _rule(path: Path, name: str, r: SummaryRuleSpec) -> SummaryRule:
    compiled = []
    for pat in r.metrics:
        if "/" not in pat:
            raise RulesError(
                path,
                f"superbench.rules.{name}.metrics",
                f"pattern {pat!r} has no benchmark",
                "write '<benchmark>/<regex>'",
            )
        try:
            compiled.append(re.compile(pat))
        except re.error as exc:
            raise RulesError(
                path, f"superbench.rules.{name}.metrics", f"bad pattern {pat!r} ({exc})"
            ) from None
    agg: bool | re.Pattern[str] = re.compile(r.aggregate) if isinstance(r.aggregate, str) else r.aggregate
    return SummaryRule(name, r.categories, tuple(r.statistics), tuple(r.metrics), tuple(compiled), agg)


def pooled_name(metric: str, aggregate: bool | re.Pattern[str]) -> str:
    """The name a metric is pooled under: without its rank, or with the pattern's groups masked by '*'."""
    short = _RANK.sub("", metric)
    if isinstance(aggregate, re.Pattern):
        m = aggregate.search(metric)
        if m:
            chars = list(metric)
            for g in range(len(m.groups()), 0, -1):
                if m.start(g) >= 0:
                    chars[m.start(g) : m.end(g)] = "*"
            short = "".join(chars)
    return short


def statistic(name: str, x: np.ndarray) -> float:
    """One of SuperBench's summary statistics of the values present in ``x``."""
    x = x[~np.isnan(x)]
    if name == "count":
        return float(x.size)
    if x.size == 0:
        return float("nan")
    if name == "mean":
        return float(np.mean(x))
    if name == "min":
        return float(np.min(x))
    if name == "max":
        return float(np.max(x))
    if name == "std":
        return float(np.std(x, ddof=1)) if x.size > 1 else float("nan")
    return float(np.quantile(x, int(name[1:]) / 100))


@dataclass
class SummaryLine:
    category: str
    metric: str
    statistic: str
    value: float | str  # '' when the rule matched nothing


def summarize(
    rules: list[SummaryRule], columns: list[str], values: np.ndarray, digits: int | None = 2
) -> tuple[dict[str, list[SummaryLine]], list[str]]:
    """Lines per category, in rule order; and warnings for rules that match nothing."""
    out: dict[str, list[SummaryLine]] = {}
    warns: list[str] = []
    for rule in rules:
        cols = match_patterns(rule.patterns, rule.compiled, columns)
        lines = out.setdefault(rule.categories, [])
        if not cols:
            warns.append(
                f"summary rule {rule.name!r}: its metric patterns match no metric: {list(rule.patterns)}"
            )
            lines += [SummaryLine(rule.categories, "", s, "") for s in rule.statistics]
            continue
        pools: dict[str, list[np.ndarray]] = {}
        for c in cols:
            key = pooled_name(columns[c], rule.aggregate) if rule.aggregate else columns[c]
            pools.setdefault(key, []).append(values[:, c])
        for metric in sorted(pools):
            data = np.concatenate(pools[metric])
            for s in rule.statistics:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    v = statistic(s, data)
                if digits and np.isfinite(v):
                    v = significant(v, digits)
                lines.append(SummaryLine(rule.categories, metric, s, v))
    return out, warns


def _text(v: float | str) -> str:
    return v if isinstance(v, str) else str(v)


def md_text(summary: dict[str, list[SummaryLine]]) -> str:
    out: list[str] = []
    for cat, lines in summary.items():
        out.append(f"## {cat}\n")
        out += md_lines(
            ["metric", "statistics", "values"], [[ln.metric, ln.statistic, _text(ln.value)] for ln in lines]
        )
        out.append("\n")
    return "".join(out)


def html_text(summary: dict[str, list[SummaryLine]]) -> str:
    parts = []
    for cat, lines in summary.items():
        parts.append(f"<h2>{_esc(cat)}</h2>")
        parts.append(
            html_table(
                ["metric", "statistics", "values"],
                [[ln.metric, ln.statistic, _text(ln.value)] for ln in lines],
            )
        )
    return "\n".join(parts)


def _esc(s: str) -> str:
    import html

    return html.escape(s, quote=False)


def write_summary(
    out_dir: Path,
    summary: dict[str, list[SummaryLine]],
    hosts: list[str],
    columns: list[str],
    values: np.ndarray,
    formats: tuple[str, ...] = FORMATS,
) -> list[Path]:
    """Write ``results-summary.<format>`` for each format; returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in formats:
        path = out_dir / f"results-summary.{fmt}"
        if fmt == "md":
            _write(path, md_text(summary))
        elif fmt == "html":
            _write(path, html_text(summary))
        elif fmt == "xlsx":
            raw: list[list[Cell]] = [[None, *columns]]
            raw += [
                [h, *(None if np.isnan(x) else float(x) for x in values[r].tolist())]
                for r, h in enumerate(hosts)
            ]
            rows: list[list[Cell]] = [
                [ln.category, ln.metric, ln.statistic, ln.value] for lines in summary.values() for ln in lines
            ]
            write_xlsx(path, [("Raw Data", raw), ("Summary", rows)], _merge_categories)
        else:  # pragma: no cover - the command offers only FORMATS
            raise ValueError(f"unknown format {fmt!r}")
        paths.append(path)
    return paths


def _merge_categories(ws: Any, name: str) -> None:
    """SuperBench's Summary sheet: each category's run of rows merged into one centred cell."""
    if name != "Summary":
        return
    from openpyxl.styles import Alignment

    start = 1
    rows = ws.max_row
    for r in range(2, rows + 2):
        same = r <= rows and ws.cell(r, 1).value == ws.cell(start, 1).value
        if same:
            continue
        if r - 1 > start:
            ws.merge_cells(start_row=start, start_column=1, end_row=r - 1, end_column=1)
        start = r
    for r in range(1, rows + 1):
        ws.cell(row=r, column=1).alignment = Alignment(horizontal="center", vertical="center")


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)
