"""SuperBench's generate-baseline tests (tests/analyzer/test_generate_baseline.py there), through sb-fleet baseline."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from sb_fleet.analysis.superbench.baseline import fix_threshold, sb_format
from sb_fleet.analysis.superbench.criteria import parse_criteria
from sb_fleet.cli.report_command import baseline_cmd

EXPECTED = {
    "kernel-launch/event_time": 0.0055,
    "kernel-launch/wall_time": 0.009,
    "mem-bw/d2h_bw": 26.22,
    "mem-bw/h2d_bw": 26.07,
}


def generate(data_dir: Path, out: Path, *extra: str) -> dict:
    args = [str(data_dir / "test_generate_baseline_results.jsonl"), "--algorithm", "fix_threshold"]
    args += ["--summary-rules", str(data_dir / "test_generate_baseline_summary_rules.yaml")]
    args += ["--diagnosis-rules", str(data_dir / "test_generate_baseline_diagnosis_rules.yaml")]
    args += ["--digits", "2", "--out", str(out), *extra]
    res = CliRunner().invoke(baseline_cmd, args)
    assert res.exit_code == 0, res.output
    return json.loads(out.read_text())


def test_fix_threshold_baseline(tmp_path: Path, data_dir: Path) -> None:
    assert generate(data_dir, tmp_path / "baseline.json") == EXPECTED


def test_fix_threshold_baseline_merges_a_previous_one(tmp_path: Path, data_dir: Path) -> None:
    pre = tmp_path / "pre_baseline.json"
    pre.write_text(json.dumps({"gemm-flops/FP32": 18318.4, "gemm-flops/FP16": 33878}))
    got = generate(data_dir, tmp_path / "baseline.json", "--previous", str(pre))
    assert got == {**EXPECTED, "gemm-flops/FP32": 18318.4, "gemm-flops/FP16": 33878}


def test_previous_values_win(tmp_path: Path, data_dir: Path) -> None:
    pre = tmp_path / "pre.json"
    pre.write_text(json.dumps({"mem-bw/d2h_bw": 25.0}))
    got = generate(data_dir, tmp_path / "baseline.json", "--previous", str(pre))
    assert got == {**EXPECTED, "mem-bw/d2h_bw": 25.0}


def test_mean_baseline_is_the_pooled_mean(tmp_path: Path, data_dir: Path) -> None:
    out = tmp_path / "b.json"
    args = [str(data_dir / "test_generate_baseline_results.jsonl"), "--algorithm", "mean", "--out", str(out)]
    args += ["--summary-rules", str(data_dir / "test_generate_baseline_summary_rules.yaml")]
    res = CliRunner().invoke(baseline_cmd, args)
    assert res.exit_code == 0, res.output
    got = json.loads(out.read_text())
    rows = [
        json.loads(line)
        for line in (data_dir / "test_generate_baseline_results.jsonl").read_text().splitlines()
    ]
    d2h = np.mean([v for r in rows for k, v in r.items() if k.startswith("mem-bw/d2h_bw:")])
    assert sorted(got) == sorted(EXPECTED)
    assert got["mem-bw/d2h_bw"] == float(f"{d2h:.2f}")


def test_fix_threshold_drops_violators_until_clean() -> None:
    crit = parse_criteria("lambda x:x>0.05")
    x = np.array([1.0, 1.0, 1.0, 1.0, 2.0, np.nan])
    assert fix_threshold(x, "variance", crit) == 1.0  # mean 1.2: 2.0 is +67% -> dropped; then clean
    assert fix_threshold(np.array([0.0, 0.0]), "variance", crit) == 0.0


def test_superbench_rounding() -> None:
    sample = np.array([0.1, 0.2])
    assert sb_format("a/x", 0.005512, sample, 2) == 0.0055
    assert sb_format("a/x", 26.2166, sample, 2) == 26.22
    assert sb_format("a/deterministic_loss", 0.0055123, sample, 2) == 0.0055123
    assert sb_format("a/return_code", 0.25, np.array([0.0, 1.0]), 2) == 0.25


def test_superbench_algorithms_need_their_rules(tmp_path: Path, data_dir: Path) -> None:
    src = str(data_dir / "test_generate_baseline_results.jsonl")
    res = CliRunner().invoke(baseline_cmd, [src, "--algorithm", "mean", "--out", str(tmp_path / "b.json")])
    assert res.exit_code == 2 and "--summary-rules" in res.stderr
    res = CliRunner().invoke(
        baseline_cmd,
        [
            src,
            "--algorithm",
            "fix_threshold",
            "--summary-rules",
            str(data_dir / "test_generate_baseline_summary_rules.yaml"),
        ],
    )
    assert res.exit_code == 2 and "--diagnosis-rules" in res.stderr


@pytest.mark.parametrize("algorithm", ["robust"])
def test_robust_default_merges_previous(tmp_path: Path, data_dir: Path, algorithm: str) -> None:
    pre = tmp_path / "pre.json"
    pre.write_text(json.dumps({"mem-bw/d2h_bw": 25.0, "other/x": 1.0}))
    out = tmp_path / "b.json"
    res = CliRunner().invoke(
        baseline_cmd,
        [str(data_dir / "test_generate_baseline_results.jsonl"), "--previous", str(pre), "--out", str(out)],
    )
    assert res.exit_code == 0, res.output
    got = json.loads(out.read_text())
    assert got["mem-bw/d2h_bw"] == 25.0 and got["other/x"] == 1.0 and "mem-bw/h2d_bw" in got
