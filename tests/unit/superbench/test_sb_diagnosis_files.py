"""diagnosis_summary.{json,jsonl,md,html,xlsx} against the files SuperBench's own tests expect, byte for byte.

SuperBench's test_data_diagnosis.py runs ``DataDiagnosis().run(test_results.jsonl, test_rules.yaml,
test_baseline.json, ...)`` and compares each output with tests/data/diagnosis_summary*.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from sb_fleet.analysis.fleet_results import load_fleet
from sb_fleet.analysis.superbench.rules import apply_rules, load_rules
from sb_fleet.analysis.superbench.sbdiagnosis import write_diagnosis


def diagnose_files(data_dir: Path, out: Path, output_all: bool, rules: str = "test_rules.yaml") -> list[Path]:
    fleet = load_fleet(data_dir / "test_results.jsonl")
    base = json.loads((data_dir / "test_baseline.json").read_text())
    res = apply_rules(load_rules(data_dir / rules), fleet.columns, fleet.values, base)
    assert res.diagnosis is not None
    return write_diagnosis(
        out, fleet.hosts, fleet.columns, fleet.values, res.diagnosis, output_all=output_all
    )


@pytest.mark.parametrize(
    ("mine", "theirs"),
    [
        ("diagnosis_summary.md", "diagnosis_summary.md"),
        ("diagnosis_summary.html", "diagnosis_summary.html"),
        ("diagnosis_summary.jsonl", "diagnosis_summary.jsonl"),
        ("diagnosis_summary.json", "diagnosis_summary_json.json"),
    ],
)
def test_defective_nodes_files_are_superbench_s(
    tmp_path: Path, data_dir: Path, mine: str, theirs: str
) -> None:
    diagnose_files(data_dir, tmp_path, output_all=False)
    assert (tmp_path / mine).read_text() == (data_dir / theirs).read_text()


def test_output_all_json_is_superbench_s(tmp_path: Path, data_dir: Path) -> None:
    diagnose_files(data_dir, tmp_path, output_all=True)
    got = (tmp_path / "diagnosis_summary.json").read_text()
    assert got == (data_dir / "diagnosis_summary.json").read_text()
    rows = {r["index"]: r for r in json.loads(got)}
    assert [rows[n]["diagnosis/accept"] for n in sorted(rows)] == [False, True, False]
    assert [rows[n]["diagnosis/issue_num"] for n in sorted(rows)] == [1, 0, 17]


def _sheet(path: Path, name: str) -> list[list]:
    from openpyxl import load_workbook

    ws = load_workbook(path)[name]
    return [list(r) for r in ws.iter_rows(values_only=True)]


def _same(a: object, b: object) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(float(a), float(b), rel_tol=1e-12, abs_tol=1e-15)
    return a == b


def test_xlsx_sheets_hold_superbench_s_values(tmp_path: Path, data_dir: Path) -> None:
    diagnose_files(data_dir, tmp_path, output_all=False)
    for sheet in ("Raw Data", "Not Accept"):
        mine = _sheet(tmp_path / "diagnosis_summary.xlsx", sheet)
        theirs = [
            r for r in _sheet(data_dir / "diagnosis_summary.xlsx", sheet) if any(v is not None for v in r)
        ]
        assert len(mine) == len(theirs)
        for a, b in zip(mine, theirs, strict=True):
            assert len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True)), (a[:3], b[:3])


def test_xlsx_marks_variances_as_percent_and_violations_red(tmp_path: Path, data_dir: Path) -> None:
    from openpyxl import load_workbook

    diagnose_files(data_dir, tmp_path, output_all=False)
    ws = load_workbook(tmp_path / "diagnosis_summary.xlsx")["Not Accept"]
    header = [c.value for c in ws[1]]
    col = header.index("kernel-launch/event_overhead:0") + 1
    assert ws.cell(row=2, column=col).number_format == "0.00%"
    assert ws.cell(row=2, column=col).fill.start_color.rgb.endswith("FFC7CE")
    assert not ws.cell(row=3, column=col).fill.start_color.rgb.endswith("FFC7CE")


def test_no_defective_node_writes_empty_files(tmp_path: Path, data_dir: Path) -> None:
    fleet = load_fleet(data_dir / "test_results.jsonl")
    keep = [fleet.hosts.index("sb-validation-02")]
    base = json.loads((data_dir / "test_baseline.json").read_text())
    res = apply_rules(load_rules(data_dir / "test_rules.yaml"), fleet.columns, fleet.values[keep], base)
    assert res.diagnosis is not None
    write_diagnosis(tmp_path, ["sb-validation-02"], fleet.columns, fleet.values[keep], res.diagnosis)
    assert (tmp_path / "diagnosis_summary.jsonl").read_text() == ""
    assert (tmp_path / "diagnosis_summary.md").read_text() == ""
    assert json.loads((tmp_path / "diagnosis_summary.json").read_text()) == []
    write_diagnosis(
        tmp_path, ["sb-validation-02"], fleet.columns, fleet.values[keep], res.diagnosis, output_all=True
    )
    (row,) = json.loads((tmp_path / "diagnosis_summary.json").read_text())
    assert (row["diagnosis/accept"], row["diagnosis/issue_num"], row["diagnosis/category"]) == (
        True,
        0,
        "N/A",
    )


def test_without_baseline_rules_write_every_format(tmp_path: Path, data_dir: Path) -> None:
    paths = diagnose_files(data_dir, tmp_path, output_all=False, rules="test_rules_without_baseline.yaml")
    assert all(p.is_file() for p in paths)
    md = (tmp_path / "diagnosis_summary.md").read_text()
    # The store-only rule's metrics have no judged value: N/A.
    assert "| N/A |" in md and np.any([line.startswith("| sb-validation-0") for line in md.splitlines()])
