"""``sb-fleet report --superbench-output``: SuperBench's diagnosis files beside sb-fleet's, loud unmatched rules."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from sb_fleet.cli.report_command import report_cmd


def test_superbench_output_beside_the_report(tmp_path: Path, data_dir: Path) -> None:
    out = tmp_path / "o"
    args = [str(data_dir / "test_results.jsonl"), "--rules", str(data_dir / "test_rules.yaml")]
    args += [
        "--baseline",
        str(data_dir / "test_baseline.json"),
        "--out",
        str(out),
        "--superbench-output",
        "--output-all",
    ]
    res = CliRunner().invoke(report_cmd, args)
    assert res.exit_code == 1, res.output
    for fmt in ("json", "jsonl", "md", "html", "xlsx"):
        assert (out / f"diagnosis_summary.{fmt}").is_file()
    assert (out / "diagnosis_summary.json").read_text() == (data_dir / "diagnosis_summary.json").read_text()
    assert (out / "report.json").is_file()
    # sb-fleet's own verdicts on the same nodes: 01 fails (launch +1578%), 03 fails (mem-bw return code 1).
    rep = json.loads((out / "report.json").read_text())
    assert {h["name"]: h["verdict"] for h in rep["hosts"]} == {
        "sb-validation-01": "fail",
        "sb-validation-02": "pass",
        "sb-validation-03": "fail",
    }
    # Issues counted as SuperBench counts them: 03's failed mem-bw return code is one finding, not two.
    assert [len(h["issues"]) for h in rep["hosts"]] == [1, 0, 17]


def test_rules_matching_nothing_are_loud(tmp_path: Path, data_dir: Path) -> None:
    rules = tmp_path / "r.yaml"
    rules.write_text(
        "superbench:\n  rules:\n    tc:\n      function: value\n      criteria: 'lambda x:x<0'\n"
        "      categories: TensorCore\n      metrics: ['gemm-flops/*_tc_.*:\\d*']\n"
    )
    res = CliRunner().invoke(
        report_cmd,
        [str(data_dir / "test_results.jsonl"), "--rules", str(rules), "--out", str(tmp_path / "o"), "-q"],
    )
    assert "WARNING: rule 'tc': patterns match no metric" in res.stderr
    head = (tmp_path / "o" / "report.md").read_text().split("## ")[0]  # the header, before any section
    assert "**WARNING: rule `tc` matches no metric**" in head


def test_superbench_output_needs_rules(tmp_path: Path, data_dir: Path) -> None:
    res = CliRunner().invoke(report_cmd, [str(data_dir / "test_results.jsonl"), "--superbench-output"])
    assert res.exit_code == 2 and "needs --rules" in res.stderr


def test_missing_baseline_for_a_variance_rule_is_exit_2(tmp_path: Path, data_dir: Path) -> None:
    # Item 6: no silent skip. SuperBench stops with an error naming the metric; so does sb-fleet (exit 2).
    base = json.loads((data_dir / "test_baseline.json").read_text())
    del base["mem-bw/D2H_Mem_BW"]
    b = tmp_path / "baseline.json"
    b.write_text(json.dumps(base))
    args = [
        str(data_dir / "test_results.jsonl"),
        "--rules",
        str(data_dir / "test_rules.yaml"),
        "--baseline",
        str(b),
    ]
    res = CliRunner().invoke(report_cmd, [*args, "--out", str(tmp_path / "o")])
    assert res.exit_code == 2
    assert "variance rule 'rule1': no baseline for metric mem-bw/D2H_Mem_BW:" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
