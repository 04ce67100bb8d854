"""sb-fleet summary against SuperBench's result-summary tests (tests/analyzer/test_result_summary.py there)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from sb_fleet.analysis.fleet_results import load_fleet
from sb_fleet.analysis.superbench.sbsummary import load_summary_rules, pooled_name, summarize
from sb_fleet.cli.summary_command import summary_cmd
from sb_fleet.errors import RulesError

EXPECTED = [
    ["KernelLaunch", "kernel-launch/event_overhead", "mean", 0.0097],
    ["KernelLaunch", "kernel-launch/event_overhead", "p90", 0.006],
    ["KernelLaunch", "kernel-launch/event_overhead", "min", 0.0055],
    ["KernelLaunch", "kernel-launch/event_overhead", "max", 0.1],
    ["KernelLaunch", "kernel-launch/wall_overhead", "mean", 0.01],
    ["KernelLaunch", "kernel-launch/wall_overhead", "p90", 0.011],
    ["KernelLaunch", "kernel-launch/wall_overhead", "min", 0.01],
    ["KernelLaunch", "kernel-launch/wall_overhead", "max", 0.011],
    ["NCCL", "nccl-bw/allreduce_8388608_busbw:0", "mean", 89.51],
    ["RDMA", "ib-loopback/IB_write_8388608_Avg_*:0", "mean", 23925.84],
]


def run(data_dir: Path, rules: Path | None = None):
    fleet = load_fleet(data_dir / "test_results.jsonl")
    parsed = load_summary_rules(rules or data_dir / "test_summary_rules.yaml")
    return summarize(parsed, fleet.columns, fleet.values, 2)


def test_summary_lines(data_dir: Path) -> None:
    summary, warns = run(data_dir)
    assert len(summary) == 3 and warns == []
    got = [[ln.category, ln.metric, ln.statistic, ln.value] for lines in summary.values() for ln in lines]
    assert got == EXPECTED


def test_rule_matching_nothing(tmp_path: Path, data_dir: Path) -> None:
    p = tmp_path / "r.yaml"
    rule = {
        "categories": "FAKE",
        "statistics": ["mean", "max"],
        "metrics": ["abb/fake:\\d+"],
        "aggregate": True,
    }
    p.write_text(yaml.safe_dump({"superbench": {"rules": {"fake": rule}}}))
    summary, warns = run(data_dir, p)
    assert [[ln.category, ln.metric, ln.statistic, ln.value] for ln in summary["FAKE"]] == [
        ["FAKE", "", "mean", ""],
        ["FAKE", "", "max", ""],
    ]
    assert "match no metric" in warns[0]


@pytest.mark.parametrize(
    "rule",
    [
        {"categories": "KernelLaunch", "metrics": ["kernel-launch/event_overhead:\\d+"]},
        {"categories": "KernelLaunch", "statistics": "abb", "metrics": ["kernel-launch/event_overhead:\\d+"]},
        {
            "categories": "K",
            "statistics": "mean",
            "metrics": ["kernel-launch/event_overhead:\\d+"],
            "aggregate": "abb",
        },
        {"categories": "K", "statistics": "p100", "metrics": ["kernel-launch/event_overhead"]},
        {"statistics": "mean", "metrics": ["kernel-launch/event_overhead"]},
    ],
)
def test_invalid_summary_rules(tmp_path: Path, rule: dict) -> None:
    p = tmp_path / "r.yaml"
    p.write_text(yaml.safe_dump({"superbench": {"rules": {"fake": rule}}}))
    with pytest.raises(RulesError, match="superbench.rules.fake"):
        load_summary_rules(p)


@pytest.mark.parametrize(
    "rule",
    [
        {
            "categories": "KernelLaunch",
            "statistics": "mean",
            "metrics": ["kernel-launch/event_overhead:\\d+"],
            "aggregate": True,
        },
        {
            "categories": "KernelLaunch",
            "statistics": ["mean", "p50"],
            "metrics": ["kernel-launch/event_overhead:\\d+"],
        },
        {
            "categories": "KernelLaunch",
            "statistics": "mean",
            "metrics": ["kernel-launch/event_overhead:\\d+"],
            "aggregate": "kernel-launch/event_overhead(:\\d+)",
        },
    ],
)
def test_valid_summary_rules(tmp_path: Path, rule: dict) -> None:
    p = tmp_path / "r.yaml"
    p.write_text(yaml.safe_dump({"superbench": {"rules": {"ok": rule}}}))
    (r,) = load_summary_rules(p)
    assert r.categories == "KernelLaunch"


def test_pooled_names() -> None:
    import re

    assert pooled_name("kernel-launch/event_overhead:3", True) == "kernel-launch/event_overhead"
    rx = re.compile(r"ib-loopback/IB_write_.*_Avg_(\d+)")
    assert pooled_name("ib-loopback/IB_write_8388608_Avg_3:0", rx) == "ib-loopback/IB_write_8388608_Avg_*:0"
    assert pooled_name(
        "kernel-launch/event_overhead:3", re.compile(r"kernel-launch/event_overhead(:\d+)")
    ) == ("kernel-launch/event_overhead*")


def test_statistics_skip_missing_values(tmp_path: Path) -> None:
    from sb_fleet.analysis.superbench.sbsummary import statistic

    x = np.array([1.0, 2.0, np.nan, 4.0])
    assert statistic("count", x) == 3
    assert statistic("mean", x) == pytest.approx(7 / 3)
    assert statistic("std", x) == pytest.approx(np.std([1, 2, 4], ddof=1))
    assert statistic("p50", x) == 2.0
    assert math.isnan(statistic("std", np.array([1.0])))


def _sheet(path: Path, name: str) -> list[list]:
    from openpyxl import load_workbook

    return [list(r) for r in load_workbook(path)[name].iter_rows(values_only=True)]


def test_summary_command_writes_superbench_s_files(tmp_path: Path, data_dir: Path) -> None:
    out = tmp_path / "o"
    res = CliRunner().invoke(
        summary_cmd,
        [
            str(data_dir / "test_results.jsonl"),
            "--rules",
            str(data_dir / "test_summary_rules.yaml"),
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    assert (out / "results-summary.md").read_text() == (data_dir / "results_summary.md").read_text()
    assert (out / "results-summary.html").read_text() == (data_dir / "results_summary.html").read_text()
    assert _sheet(out / "results-summary.xlsx", "Summary") == _sheet(
        data_dir / "results_summary.xlsx", "Summary"
    )
    from openpyxl import load_workbook

    ws = load_workbook(out / "results-summary.xlsx")["Summary"]
    assert [str(r) for r in ws.merged_cells.ranges] == ["A1:A8"]
    assert len(_sheet(out / "results-summary.xlsx", "Raw Data")) == 4


def test_summary_command_bad_rules_exit_2(tmp_path: Path, data_dir: Path) -> None:
    p = tmp_path / "r.yaml"
    p.write_text(
        "superbench:\n  rules:\n    x:\n      statistics: median\n      categories: C\n      metrics: [a/b]\n"
    )
    res = CliRunner().invoke(summary_cmd, [str(data_dir / "test_results.jsonl"), "--rules", str(p)])
    assert res.exit_code == 2
    assert "superbench.rules.x.statistics" in res.stderr and "median" in res.stderr


def test_summary_ops_on_superbench_s_table() -> None:
    # test_summaryop.py: columns a..d of [[1, 2, 3, 4], [4, 5, 6], [7, 8]] (missing cells are NaN).
    from sb_fleet.analysis.superbench.sbsummary import statistic

    nan = float("nan")
    table = np.array([[1, 2, 3, 4], [4, 5, 6, nan], [7, 8, nan, nan]], dtype=float)
    col = [table[:, j] for j in range(4)]
    assert [statistic("mean", c) for c in col] == [4.0, 5.0, 4.5, 4.0]
    assert [statistic("min", c) for c in col] == [1, 2, 3, 4]
    assert [statistic("max", c) for c in col] == [7, 8, 6, 4]
    std = [statistic("std", c) for c in col]
    assert std[:3] == pytest.approx([3.0, 3.0, 2.1213203435596424]) and math.isnan(std[3])
    assert [statistic("count", c) for c in col] == [3, 3, 2, 1]
    assert [statistic("p50", c) for c in col] == [4.0, 5.0, 4.5, 4.0]
