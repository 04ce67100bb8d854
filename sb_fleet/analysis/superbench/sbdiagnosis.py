"""SuperBench's diagnosis files: ``diagnosis_summary.{json,jsonl,md,html,xlsx}``, as ``sb result diagnosis`` writes them.

They say what SuperBench says about each node, beside sb-fleet's own report files:

- by default, one row per *defective* node (a non-store rule violated), sorted by
  category and details (descending, as SuperBench does), with ``Category``,
  ``Defective Details`` and, per metric a rule covers, the variance (shown as a
  percentage in md/html/xlsx) or the value the rule judged;
- with ``output_all`` (SuperBench's ``--output-all``), every node: ``Accept``,
  ``Number Of Issues`` (the comma-separated parts of the details), ``Category``,
  ``Defective Details`` and the node's raw results.

A ``failure_check`` finding marks the node defective here, as in SuperBench, although
sb-fleet's own verdict for it is ``incomplete``. One deliberate difference: with
``output_all``, md/html show a variance rule's metrics as the raw values they are,
not multiplied by 100 with a ``%`` sign (SuperBench formats them as if they were
variances).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from sb_fleet.analysis.superbench.rules import Diagnosis
from sb_fleet.analysis.superbench.sbtables import (
    NA,
    Cell,
    Table,
    html_table,
    is_missing,
    md_lines,
    significant,
    whole_column,
    write_xlsx,
)

FORMATS = ("json", "jsonl", "md", "html", "xlsx")
JSON_NAMES = {
    "Defective Details": "diagnosis/issue_details",
    "Category": "diagnosis/category",
    "Number Of Issues": "diagnosis/issue_num",
    "Accept": "diagnosis/accept",
}


def _cells(a: np.ndarray) -> list[Cell]:
    return [None if np.isnan(x) else float(x) for x in a.tolist()]


def diagnosis_table(
    hosts: list[str], columns: list[str], values: np.ndarray, diag: Diagnosis, output_all: bool = False
) -> Table:
    """SuperBench's 'Not Accept' table, or with ``output_all`` its every-node table."""
    if output_all:
        rows: list[list[Cell]] = []
        for r in range(len(hosts)):
            bad = bool(diag.defective[r])
            head: list[Cell] = [
                not bad,
                diag.issue_count(r),
                diag.category_text(r) if bad else None,
                diag.details_text(r) if bad else None,
            ]
            rows.append(head + _cells(values[r]))
        header = ["Accept", "Number Of Issues", "Category", "Defective Details", *columns]
        return Table(header=header, index=list(hosts), rows=rows)
    picked = [r for r in range(len(hosts)) if diag.defective[r]]
    picked.sort(key=lambda r: (diag.category_text(r), diag.details_text(r)), reverse=True)
    rows = [[diag.category_text(r), diag.details_text(r), *_cells(diag.values[r])] for r in picked]
    return Table(
        header=["Category", "Defective Details", *diag.metrics], index=[hosts[r] for r in picked], rows=rows
    )


def md_rows(table: Table, diag: Diagnosis, digits: int | None, output_all: bool) -> list[list[str]]:
    """The table's cells as SuperBench's md/html show them (N/A, rounding, percentages)."""
    cols: list[list[Cell]] = [[row[i] for row in table.rows] for i in range(len(table.header))]
    shown: list[list[str]] = []
    for name, col in zip(table.header, cols, strict=True):
        if name in diag.variance_metrics and not output_all:
            vals = [None if is_missing(v) else float(v) * 100 for v in col]  # type: ignore[arg-type]
            if digits:
                vals = [None if v is None else significant(v, digits) for v in vals]
            shown.append([NA if v is None else f"{v}%" for v in vals])
            continue
        if digits and (name in diag.value_metrics or (output_all and name in diag.variance_metrics)):
            col = [None if is_missing(v) else significant(float(v), digits) for v in col]  # type: ignore[arg-type]
        whole = whole_column(col)
        shown.append([_md_cell(v, whole) for v in col])
    return [[name, *(c[i] for c in shown)] for i, name in enumerate(table.index)]


def _md_cell(v: Cell, whole: bool) -> str:
    if is_missing(v):
        return NA
    if isinstance(v, (bool, str)):
        return str(v)
    assert v is not None
    return str(int(v)) if whole else str(float(v))


def write_diagnosis(
    out_dir: Path,
    hosts: list[str],
    columns: list[str],
    values: np.ndarray,
    diag: Diagnosis,
    output_all: bool = False,
    formats: tuple[str, ...] = FORMATS,
    digits: int = 2,
) -> list[Path]:
    """Write ``diagnosis_summary.<format>`` for each format into ``out_dir``; returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    table = diagnosis_table(hosts, columns, values, diag, output_all)
    paths = []
    for fmt in formats:
        path = out_dir / f"diagnosis_summary.{fmt}"
        if fmt == "json":
            _write(path, json.dumps(table.records(first="index", rename=JSON_NAMES), indent=4))
        elif fmt == "jsonl":
            _write(path, "".join(json.dumps(rec) + "\n" for rec in table.records()))
        elif fmt in ("md", "html"):
            rows = md_rows(table, diag, digits, output_all)
            header = [table.index_name, *table.header]
            if not rows:
                text = ""
            elif fmt == "md":
                text = "".join(md_lines(header, rows))
            else:
                text = html_table(header, rows)
            _write(path, text)
        elif fmt == "xlsx":
            _write_xlsx(path, hosts, columns, values, table, diag, output_all)
        else:  # pragma: no cover - the command offers only FORMATS
            raise ValueError(f"unknown format {fmt!r}")
        paths.append(path)
    return paths


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _write_xlsx(
    path: Path,
    hosts: list[str],
    columns: list[str],
    values: np.ndarray,
    table: Table,
    diag: Diagnosis,
    output_all: bool,
) -> None:
    raw: list[list[Cell]] = [[None, *columns]]
    raw += [[h, *_cells(values[r])] for r, h in enumerate(hosts)]
    sheet: list[list[Cell]] = [[None, *table.header]]
    for name, row in zip(table.index, table.rows, strict=True):
        sheet.append([name, *(_xlsx_cell(table, i, v) for i, v in enumerate(row))])
    violated = _violated_cells(table, diag, hosts, output_all)

    def styles(ws: Any, name: str) -> None:
        if name != "Not Accept" or output_all:
            return
        from openpyxl.styles import Font, PatternFill

        red_fill = PatternFill("solid", start_color="FFC7CE", end_color="FFC7CE")
        red_font = Font(color="9C0006")
        for j, metric in enumerate(table.header):
            if metric in diag.variance_metrics:
                for i in range(len(table.rows)):
                    ws.cell(row=i + 2, column=j + 2).number_format = "0.00%"
        for i, j in violated:
            cell = ws.cell(row=i + 2, column=j + 2)
            cell.fill = red_fill
            cell.font = red_font

    write_xlsx(path, [("Raw Data", raw), ("Not Accept", sheet)], styles)


def _xlsx_cell(table: Table, col: int, v: Cell) -> Cell:
    if is_missing(v) or isinstance(v, (bool, str)):
        return v
    assert v is not None
    return int(v) if table.whole[col] else float(v)


def _violated_cells(
    table: Table, diag: Diagnosis, hosts: list[str], output_all: bool
) -> list[tuple[int, int]]:
    if output_all:
        return []
    at = {m: 2 + i for i, m in enumerate(diag.metrics)}
    row_of = {h: i for i, h in enumerate(table.index)}
    out = []
    for r, m in diag.violated_cells:
        i = row_of.get(hosts[r])
        if i is not None:
            out.append((i, at[diag.metrics[m]]))
    return out
