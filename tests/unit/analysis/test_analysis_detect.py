"""Fleet-relative detection on generated fleets: every planted fault found, healthy hosts left alone."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from sb_fleet.analysis.detect import detect
from sb_fleet.analysis.superbench.metric_names import Directions
from sb_fleet.report.analyse import report
from tests.synth.fleet import FAULTS, generate


def flagged_rows(columns: list[str], values: np.ndarray) -> dict[int, list]:
    return detect(columns, values, Directions()).issues


def per_gpu_fleet(
    rng: np.random.Generator, n_hosts: int, metric: str, base: float, host_sigma: float, gpu_sigma: float
):
    host = rng.normal(0, host_sigma, size=(n_hosts, 1))
    gpu = rng.normal(0, gpu_sigma, size=(n_hosts, 8))
    cols = [f"{metric}:{g}" for g in range(8)]
    return cols, base * (1 + host + gpu)


@pytest.mark.parametrize("seed", [101, 202])
def test_generated_fleet_recall_and_false_positives(tmp_path: Path, seed: int) -> None:
    fleet = generate(1600, seed=seed)
    (tmp_path / "manifest.json").write_text('{"schema_version": 1}')
    (tmp_path / "results-summary.jsonl").write_text(fleet.text)
    hosts = [{"name": h, "groups": ["gpu"]} for h in fleet.hosts]
    (tmp_path / "hosts.json").write_text(json.dumps({"schema_version": 1, "hosts": hosts}))
    r = report(tmp_path)
    verdict = {h.name: h.verdict for h in r.hosts}
    assert len(verdict) == 1600
    found = Counter(kind for h, kind in fleet.faults.items() if verdict[h] != "pass")
    planted = Counter(fleet.faults.values())
    assert set(planted) == set(FAULTS)
    assert found == planted, f"missed: {planted - found}"
    for h, kind in fleet.faults.items():
        if kind == "missing_host":
            assert verdict[h] == "missing"
        elif kind == "failed_benchmark":
            assert verdict[h] == "incomplete"
        else:
            assert verdict[h] == "fail", (h, kind)
    healthy = fleet.healthy()
    fp = [h for h in healthy if verdict[h] != "pass"]
    assert len(fp) <= 0.001 * len(healthy), fp


def test_one_gpu_4pct_slower_than_its_siblings_is_found_despite_a_wide_fleet_spread() -> None:
    rng = np.random.default_rng(7)
    cols, vals = per_gpu_fleet(
        rng, 400, "gemm-flops/fp16_tc_flops", 280000.0, host_sigma=0.04, gpu_sigma=0.003
    )
    vals[17, 5] *= 0.96
    issues = flagged_rows(cols, vals)
    assert list(issues) == [17]
    checks = {i.check for i in issues[17]}
    assert "sibling" in checks
    i = next(i for i in issues[17] if i.check == "sibling")
    assert i.metric == "gemm-flops/fp16_tc_flops:5"
    assert i.deviation == pytest.approx(-0.04, abs=0.01)
    assert "siblings" in i.detail


def test_a_gpu_slightly_low_on_every_precision_is_found_by_combining_evidence() -> None:
    rng = np.random.default_rng(8)
    cols: list[str] = []
    blocks = []
    for prec in ("fp64", "fp32", "fp16", "fp64_tc", "tf32_tc", "bf16_tc", "fp16_tc", "int8_tc"):
        c, v = per_gpu_fleet(rng, 500, f"gemm-flops/{prec}_flops", 1000.0, host_sigma=0.005, gpu_sigma=0.012)
        cols += c
        blocks.append(v)
    vals = np.hstack(blocks)
    for k in range(8):
        vals[42, k * 8 + 2] *= 0.965  # 3.5%: under any single metric's limit, clear in combination
    issues = flagged_rows(cols, vals)
    assert 42 in issues
    assert any(i.check.endswith("combined") and i.metric == "gemm-flops/*:2" for i in issues[42])
    assert list(issues) == [42]  # nobody else


def test_a_gpu_low_on_two_of_eight_precisions_is_found_where_the_mean_of_all_eight_dilutes_them() -> None:
    # Two precisions (fp64 and fp64_tc, one GPU) 7% low at 1.5% noise: each is under the single-metric
    # limit (5.5 sigmas) and the mean over eight precisions is ~1.7%, under every combined floor. The two
    # worst together are ~6.6 sigmas: the best-subset score finds them, and names how many it combined.
    rng = np.random.default_rng(9)
    cols: list[str] = []
    blocks = []
    precs = ("fp64", "fp32", "fp16", "fp64_tc", "tf32_tc", "bf16_tc", "fp16_tc", "int8_tc")
    for prec in precs:
        c, v = per_gpu_fleet(rng, 800, f"gemm-flops/{prec}_flops", 1000.0, host_sigma=0.004, gpu_sigma=0.015)
        cols += c
        blocks.append(v)
    vals = np.hstack(blocks)
    for prec in ("fp64", "fp64_tc"):
        vals[77, precs.index(prec) * 8 + 3] *= 0.93
    issues = flagged_rows(cols, vals)
    assert list(issues) == [77], {r: [i.metric for i in v] for r, v in issues.items()}
    comb = [i for i in issues[77] if i.check.endswith("combined")]
    assert comb and all(i.metric == "gemm-flops/*:3" for i in comb)
    assert any("2 of the 8 metrics" in i.detail for i in comb), [i.detail for i in comb]
    assert all(
        not i.check.endswith("combined") or i.deviation == pytest.approx(-0.07, abs=0.02) for i in comb
    )


def test_scan_score_takes_the_best_subset_and_ignores_missing_values() -> None:
    from sb_fleet.analysis.detect import scan_score, top_mean

    z = np.array([[3.0, 1.0, np.nan, 0.0], [3.0, 1.0, 2.0, np.nan], [-1.0, 1.0, np.nan, np.nan]])
    rel = np.array([[0.05, 0.01, np.nan, 0.0], [0.07, 0.01, 0.03, np.nan], [-0.01, 0.01, np.nan, np.nan]])
    score, k = scan_score(z)
    mean = top_mean(z, rel, k)
    # host 0: the two 3s (6/sqrt 2) beat all three (5/sqrt 3); host 1: all three ones (3/sqrt 3 > 2/sqrt 2)
    assert score[0] == pytest.approx(6 / np.sqrt(2)) and k[0] == 2 and mean[0] == pytest.approx(0.06)
    assert score[1] == pytest.approx(np.sqrt(3)) and k[1] == 3 and mean[1] == pytest.approx(0.01)
    # host 2 has one value: it is its own score; host 3 one too (0.0)
    assert score[2] == pytest.approx(2.0) and k[2] == 1 and mean[2] == pytest.approx(0.03)
    assert score[3] == pytest.approx(0.0) and k[3] == 1
    # a cap: one wild value counts as much as the cap, so a wild 40 and a harmless 0.5 stay modest
    wild, kw = scan_score(np.array([[40.0], [0.5], [0.0]]), cap=5.5)
    assert wild[0] == pytest.approx(6.0 / np.sqrt(2)) and kw[0] == 2
    none, k0 = scan_score(np.full((2, 1), np.nan))
    assert np.isnan(none[0]) and k0[0] == 0
    assert np.isnan(top_mean(np.full((2, 1), np.nan), np.full((2, 1), np.nan), k0)[0])


def test_harmless_wiggle_on_a_tight_metric_is_not_flagged() -> None:
    rng = np.random.default_rng(9)
    vals = 100.0 * (1 + rng.normal(0, 0.0005, size=(300, 1)))
    vals[3, 0] *= 0.998  # 0.2% low: 4 sigmas, but of no practical consequence
    vals[4, 0] *= 0.95
    issues = flagged_rows(["nccl-bw/allreduce_8589934592_busbw:0"], vals)
    assert list(issues) == [4]


def test_benign_sub_population_is_not_flagged() -> None:
    rng = np.random.default_rng(10)
    n = 2000
    batch = rng.random(n) < 0.08  # a small second firmware batch, 1.5% slower
    perf = np.where(batch, 0.985, 1.0) * (1 + rng.normal(0, 0.002, size=n))
    vals = np.column_stack([27.2 * perf, 41.8 * perf * (1 + rng.normal(0, 0.002, size=n))])
    cols = [
        "gpt_models/pytorch-gpt2-large/fp32_train_throughput",
        "gpt_models/pytorch-gpt2-large/fp16_train_throughput",
    ]
    vals[5] *= 0.9
    issues = flagged_rows(cols, vals)
    assert list(issues) == [5]


def test_direction_only_the_bad_side_counts() -> None:
    rng = np.random.default_rng(11)
    vals = 0.0057 * (1 + rng.normal(0, 0.003, size=(300, 8)))
    vals[10, 1] *= 0.5  # faster launches: fine
    vals[11, 2] *= 2.0  # slower launches: a fault
    issues = flagged_rows([f"kernel-launch/event_time:{g}" for g in range(8)], vals)
    assert list(issues) == [11]


def test_missing_values_do_not_break_detection() -> None:
    rng = np.random.default_rng(12)
    cols, vals = per_gpu_fleet(rng, 300, "mem-bw/h2d_bw", 26.0, host_sigma=0.003, gpu_sigma=0.003)
    vals[rng.random(vals.shape) < 0.1] = np.nan
    vals[20, :] = np.nan
    vals[21, :6] = np.nan  # too few siblings left for the sibling check
    vals[30, 4] = 13.0  # half-speed PCIe
    issues = flagged_rows(cols, vals)
    assert list(issues) == [30]


def test_too_few_hosts_means_no_fleet_statistics() -> None:
    vals = np.array([[1.0], [2.0], [100.0]])
    assert flagged_rows(["mem-bw/h2d_bw:0"], vals) == {}


def test_many_hosts_with_the_same_fault_do_not_hide_each_other() -> None:
    rng = np.random.default_rng(13)
    n = 1000
    vals = 235.0 * (1 + rng.normal(0, 0.01, size=(n, 1)))
    sick = rng.choice(n, size=60, replace=False)  # 6% of the fleet: slow all-reduce
    vals[sick, 0] *= rng.uniform(0.6, 0.88, size=60)
    issues = flagged_rows(["nccl-bw/allreduce_8589934592_busbw:0"], vals)
    assert set(issues) == set(sick.tolist())
