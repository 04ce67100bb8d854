"""validate --confirm as pure functions: what to run again where, and whether a finding reproduced."""

from __future__ import annotations

import numpy as np

from sb_fleet.analysis.issues import INCOMPLETE, Issue
from sb_fleet.analysis.verdict import judge
from sb_fleet.history.confirm import (
    CONFIRMED,
    FLAKY,
    benchmark_of,
    control_ratio,
    judge_confirmation,
    plan_confirmation,
    rerun_values,
)

GEMM = "gemm-flops/fp16_tc_flops:3"
NCCL = "nccl-bw/allreduce_8589934592_busbw"
RC = "kernel-launch/return_code"


def _slow(metric: str, value: float, reference: float, check: str = "fleet") -> Issue:
    return Issue(metric, value, reference, (value - reference) / reference, check, "GEMM")


def _hosts():  # noqa: ANN202
    hosts = [judge(f"node{i:02d}", True, [], "ok", gpu_model="A100") for i in range(10)]
    hosts[2] = judge(
        "node02",
        True,
        [_slow(GEMM, 90.0, 100.0), _slow(NCCL, 150.0, 180.0, "history")],
        "ok",
        gpu_model="A100",
    )
    hosts[5] = judge(
        "node05", True, [Issue(RC, 1.0, None, None, "rule:rc", "RC", INCOMPLETE)], "ok", gpu_model="A100"
    )
    hosts[7] = judge("node07", False, [], "unreachable", gpu_model="A100")  # missing: nothing to re-run
    hosts.append(judge("h100-0", True, [], "ok", gpu_model="H100"))
    return hosts


def test_benchmark_of_a_column() -> None:
    assert benchmark_of(GEMM) == "gemm-flops"
    assert (
        benchmark_of("model-benchmarks:bert/pytorch-bert-large/fp16_train_throughput")
        == "model-benchmarks:bert"
    )


def test_plan_reruns_the_findings_benchmarks_and_a_few_controls_of_the_same_model() -> None:
    plan = plan_confirmation(_hosts(), controls=3)
    assert plan.benchmarks == {"node02": ["gemm-flops", "nccl-bw"]}  # fail only by default
    assert len(plan.controls) == 3 and all(c.startswith("node") for c in plan.controls)
    assert not {"node02", "node05", "node07"} & set(plan.controls)
    assert plan == plan_confirmation(_hosts(), controls=3)  # deterministic
    both = plan_confirmation(_hosts(), controls=2, verdicts=("fail", "incomplete"))
    assert both.benchmarks == {"node02": ["gemm-flops", "nccl-bw"], "node05": ["kernel-launch"]}
    assert both.all_benchmarks == ["gemm-flops", "kernel-launch", "nccl-bw"]
    assert plan_confirmation([h for h in _hosts() if h.verdict == "pass"]).benchmarks == {}


def test_a_finding_that_does_not_reproduce_is_flaky_and_one_that_does_is_confirmed() -> None:
    findings = {
        "a": [_slow(GEMM, 90.0, 100.0)],  # -10% ...
        "b": [_slow(GEMM, 90.0, 100.0)],
        "c": [_slow(GEMM, 90.0, 100.0), _slow(NCCL, 150.0, 180.0)],
    }
    rerun = {"a": {GEMM: 99.5}, "b": {GEMM: 91.0}, "c": {GEMM: 99.0, NCCL: 151.0}}
    got = judge_confirmation(findings, rerun, {}, {})
    assert got["a"].result == FLAKY  # ... then -0.5%
    assert got["b"].result == CONFIRMED  # ... then -9%
    assert got["c"].result == CONFIRMED  # the GEMM was flaky, the all-reduce was not
    assert [r.reproduced for r in got["c"].replays] == [False, True]
    assert "did not reproduce" in got["a"].sentence()


def test_controls_take_out_a_change_of_the_whole_environment() -> None:
    findings = {"a": [_slow(GEMM, 90.0, 100.0)]}
    rerun = {"a": {GEMM: 91.0}}
    # every control is 9% slower in the re-run (a throttled room): a stays at its first relative place
    first = {f"c{i}": {f"gemm-flops/fp16_tc_flops:{g}": 100.0 + g for g in range(8)} for i in range(3)}
    again = {h: {m: v * 0.91 for m, v in vals.items()} for h, vals in first.items()}
    assert abs(control_ratio(GEMM, first, again) - 0.91) < 1e-12
    got = judge_confirmation(findings, rerun, first, again)
    assert got["a"].result == FLAKY  # 91 against 91: nothing specific to a
    assert control_ratio(GEMM, {}, {}) == 1.0


def test_no_evidence_never_clears_a_host() -> None:
    findings = {"gone": [_slow(GEMM, 90.0, 100.0)], "silent": [_slow(GEMM, 90.0, 100.0)]}
    got = judge_confirmation(findings, {"silent": {}}, {}, {})
    assert got["gone"].result == CONFIRMED and got["gone"].replays[0].why == "no results in the re-run"
    assert got["silent"].result == CONFIRMED and got["silent"].replays[0].why == "not reported again"


def test_return_codes_reproduce_when_the_benchmark_fails_again() -> None:
    findings = {
        "a": [Issue(RC, 1.0, None, None, "rule:rc", "RC", INCOMPLETE)],
        "b": [Issue(RC, 124.0, None, None, "completeness", "RC", INCOMPLETE)],
    }
    got = judge_confirmation(findings, {"a": {RC: 0.0}, "b": {RC: 124.0}}, {}, {})
    assert got["a"].result == FLAKY and got["b"].result == CONFIRMED


def test_rerun_values_from_a_matrix() -> None:
    vals = rerun_values(["x", "y"], [GEMM, NCCL], np.array([[1.0, np.nan], [2.0, 3.0]]))
    assert vals == {"x": {GEMM: 1.0}, "y": {GEMM: 2.0, NCCL: 3.0}}


def test_confirm_config_narrows_the_run_to_the_findings_benchmarks() -> None:
    from sb_fleet.history.confirm import confirm_config

    cfg = {
        "version": "v0.4",
        "superbench": {"enable": None, "benchmarks": {"gemm-flops": {}, "nccl-bw": {}, "noop": {}}},
    }
    out = confirm_config(cfg, ["nccl-bw", "gemm-flops", "not-in-config"])
    assert out is not None and out["superbench"]["enable"] == ["nccl-bw", "gemm-flops"]
    assert (
        out["superbench"]["benchmarks"] == cfg["superbench"]["benchmarks"]
        and cfg["superbench"]["enable"] is None
    )
    assert confirm_config(cfg, ["other"]) is None
