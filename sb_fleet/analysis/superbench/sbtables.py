"""Tables in the shapes SuperBench's analyzer writes them: markdown, HTML, JSON values and xlsx.

SuperBench builds these with pandas; the rules it follows are carried over here:

- a numeric column whose values (on the rows written) are all whole numbers is written
  as integers, any other as floats; JSON floats carry 10 decimal places at most;
- "significant rounding" to ``digits``: ``%.{digits}g`` below 1 in magnitude, else
  ``digits`` decimal places;
- a missing value is ``N/A`` in markdown, HTML and JSON, an empty cell in xlsx;
- HTML is the markdown table rendered (``<table><thead><tr><th>..``), text escaped.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NA = "N/A"
JSON_DECIMALS = 10

Cell = float | int | str | bool | None


def is_missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def whole_column(values: Iterable[Any]) -> bool:
    """pandas' convert_dtypes: a float column of whole numbers (missing values aside) becomes integers."""
    seen = False
    for v in values:
        if is_missing(v):
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return False
        if isinstance(v, float) and not (math.isfinite(v) and v == int(v)):
            return False
        seen = True
    return seen


def significant(x: float, digits: int) -> float:
    """SuperBench's rounding: ``digits`` significant digits below 1 in magnitude, else ``digits`` decimals."""
    if abs(x) < 1:
        return float(f"%.{digits}g" % x)
    return round(x, digits)


@dataclass
class Table:
    """Rows of cells under a header; ``index`` is the first column (the node)."""

    header: list[str]  # without the index column
    index: list[str]
    rows: list[list[Cell]]
    index_name: str = "index"
    whole: list[bool] = field(default_factory=list)  # per column: written as integers

    def __post_init__(self) -> None:
        if not self.whole:
            self.whole = [whole_column(r[i] for r in self.rows) for i in range(len(self.header))]

    def json_cell(self, col: int, v: Cell) -> Cell:
        if is_missing(v):
            return NA
        if isinstance(v, (bool, str)):
            return v
        assert v is not None
        if self.whole[col]:
            return int(v)
        return round(float(v), JSON_DECIMALS)

    def records(
        self, first: str | None = None, rename: dict[str, str] | None = None
    ) -> list[dict[str, Cell]]:
        """One dict per row; ``first``: the index key leads (json), else it trails (jsonl)."""
        rename = rename or {}
        out = []
        for name, row in zip(self.index, self.rows, strict=True):
            rec: dict[str, Cell] = {first: name} if first else {}
            for i, (h, v) in enumerate(zip(self.header, row, strict=True)):
                rec[rename.get(h, h)] = self.json_cell(i, v)
            if not first:
                rec[self.index_name] = name
            out.append(rec)
        return out


def md_lines(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A markdown table as SuperBench writes it: '| a | b |', '| --- | --- |', one line per row."""
    width = max([len(header), *(len(r) for r in rows)]) if rows else len(header)
    head = list(header) + [" "] * (width - len(header))
    lines = ["| {} |\n".format(" | ".join(head)), "| {} |\n".format(" | ".join(["---"] * width))]
    for r in rows:
        cells = [str(c) for c in r] + [" "] * (width - len(r))
        lines.append("| {} |\n".format(" | ".join(cells)))
    return lines


def html_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """The markdown table rendered as Python-Markdown's table extension does."""
    esc = lambda s: html.escape(str(s), quote=False)  # noqa: E731
    out = ["<table>", "<thead>", "<tr>"]
    out += [f"<th>{esc(h)}</th>" for h in header]
    out += ["</tr>", "</thead>", "<tbody>"]
    for r in rows:
        out.append("<tr>")
        out += [f"<td>{esc(c)}</td>" for c in r]
        out.append("</tr>")
    out += ["</tbody>", "</table>"]
    return "\n".join(out)


def write_xlsx(path: Path, sheets: list[tuple[str, list[list[Cell]]]], styles: Any = None) -> None:
    """Write sheets of plain cells (None: empty) with openpyxl; ``styles(ws, name)`` may format a sheet."""
    from openpyxl import Workbook  # a heavy import, only when an xlsx is asked for

    wb = Workbook()
    first = True
    for name, rows in sheets:
        ws = wb.active if first else wb.create_sheet()
        first = False
        ws.title = name
        for row in rows:
            ws.append([None if is_missing(v) else v for v in row])
        if styles is not None:
            styles(ws, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    wb.save(tmp)
    tmp.replace(path)
