"""SuperBench's analyzer tests (rule base, rule ops, diagnosis, multi rules, failure check), run through sb-fleet.

Every expectation below is an assertion of SuperBench's own tests (microsoft/superbenchmark
tests/analyzer/test_rulebase.py, test_ruleop.py, test_data_diagnosis.py) on their data
(tests/unit/superbench/data/, see its README); the code under test is sb-fleet's.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from sb_fleet.analysis.fleet_results import load_fleet
from sb_fleet.analysis.superbench.rules import (
    apply_rules,
    baseline_of,
    load_rules,
    match_metrics,
    sb_benchmark,
)
from sb_fleet.errors import RulesError

EV = "kernel-launch/event_overhead:\\d+"


def rules_file(**rules: dict) -> dict:
    return {"superbench": {"rules": rules}}


def run_file(data_dir: Path, rules: str, baseline: str | None):
    fleet = load_fleet(data_dir / "test_results.jsonl")
    base = json.loads((data_dir / baseline).read_text()) if baseline else None
    out = apply_rules(load_rules(data_dir / rules), fleet.columns, fleet.values, base)
    return fleet, out


# --- rule base ---------------------------------------------------------------------------------


def test_benchmark_of_a_metric_or_pattern() -> None:
    # SuperBench's _get_metrics_by_benchmarks: before the first '/', then before ':'; no '/' is no benchmark.
    assert sb_benchmark("gemm-flops/FP64") == "gemm-flops"
    assert sb_benchmark("bert_models/pytorch-bert-base/steptime_train_float32") == "bert_models"
    assert sb_benchmark("kernel-launch:*.*/.*_time") == "kernel-launch"
    assert sb_benchmark("nccl-bw:allreduce-run0/allreduce_1073741824_busbw") == "nccl-bw"


def test_rule_patterns_cover_sixteen_metrics_each(data_dir: Path) -> None:
    fleet = load_fleet(data_dir / "test_results.jsonl")
    assert len(fleet.hosts) == 3
    rs = load_rules(data_dir / "test_rules.yaml")
    by_name = {r.name: r for r in rs.rules}
    for name in ("rule0", "rule1"):
        assert len(match_metrics(by_name[name], fleet.columns)) == 16


def test_annotated_benchmark_names_in_patterns_match(tmp_path: Path, data_dir: Path) -> None:
    # SuperBench's generate-baseline rules write 'kernel-launch:*.*/.*_time': cut at ':' before matching.
    rs = load_rules(data_dir / "test_generate_baseline_diagnosis_rules.yaml")
    fleet = load_fleet(data_dir / "test_generate_baseline_results.jsonl")
    got = {r.name: sorted(fleet.columns[c] for c in match_metrics(r, fleet.columns)) for r in rs.rules}
    assert got["rule0"] == sorted(f"kernel-launch/{m}_time:{g}" for m in ("event", "wall") for g in range(8))
    assert got["rule1"] == sorted(f"mem-bw/{m}_bw:{g}" for m in ("h2d", "d2h") for g in range(8))
    assert len(got["failure_rule"]) == 16


# --- checking rules ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "rule",
    [
        {"criteria": "lambda x:x>0", "categories": "KernelLaunch", "metrics": [EV]},  # no function
        {"criteria": "lambda x:x>0", "function": "variance", "metrics": [EV]},  # no categories
        {"categories": "KernelLaunch", "function": "variance", "metrics": [EV]},  # no criteria
        {"criteria": "lambda x:x>0", "function": "abb", "categories": "KernelLaunch", "metrics": [EV]},
        {"criteria": "lambda x:x>0", "function": "abb", "categories": "KernelLaunch"},
        {"criteria": "x>5", "function": "abb", "categories": "KernelLaunch", "metrics": [EV]},
        {"criteria": "x>5", "function": "value", "categories": "KernelLaunch", "metrics": [EV]},
        {"criteria": "lambda x:x>0", "categories": "KernelLaunch", "store": "true", "metrics": [EV]},
    ],
)
def test_invalid_rules_are_refused(tmp_path: Path, rule: dict) -> None:
    p = tmp_path / "r.yaml"
    p.write_text(yaml.safe_dump(rules_file(fake=rule)))
    with pytest.raises(RulesError) as exc:
        load_rules(p)
    assert "superbench.rules.fake" in str(exc.value)


def test_store_must_be_a_boolean(tmp_path: Path) -> None:
    p = tmp_path / "r.yaml"
    p.write_text(
        yaml.safe_dump(
            rules_file(
                r={
                    "criteria": "lambda x:x>0",
                    "function": "value",
                    "categories": "K",
                    "store": "true",
                    "metrics": [EV],
                }
            )
        )
    )
    with pytest.raises(RulesError, match=r"superbench\.rules\.r\.store: must be a YAML boolean"):
        load_rules(p)


@pytest.mark.parametrize(
    "rule",
    [
        {
            "categories": "KernelLaunch",
            "criteria": "lambda x:x>0.05",
            "function": "variance",
            "metrics": [EV],
        },
        {"categories": "KernelLaunch", "criteria": "lambda x:x<-0.05", "function": "variance", "metrics": EV},
        {"categories": "KernelLaunch", "criteria": "lambda x:x>0", "function": "value", "metrics": [EV]},
        {
            "categories": "K",
            "criteria": "lambda x:x>0.05",
            "store": True,
            "function": "variance",
            "metrics": [EV],
        },
        {"categories": "K", "store": True, "metrics": [EV]},
    ],
)
def test_valid_rules_load(tmp_path: Path, rule: dict) -> None:
    p = tmp_path / "r.yaml"
    p.write_text(yaml.safe_dump(rules_file(r=rule)))
    (r,) = load_rules(p).rules
    assert r.patterns == (EV,)


def test_var_section_with_yaml_anchors_is_accepted(tmp_path: Path) -> None:
    p = tmp_path / "r.yaml"
    p.write_text(
        "version: v0.8\nsuperbench:\n  var:\n    default_variance: &variance\n      function: variance\n"
        "      criteria: 'lambda x:x<-0.05'\n  rules:\n    mem:\n      <<: *variance\n      categories: Mem\n"
        "      metrics: [mem-bw/h2d_bw]\n"
    )
    (r,) = load_rules(p).rules
    assert (r.function, r.criteria.text if r.criteria else None) == ("variance", "lambda x:x<-0.05")


# --- baseline lookup ---------------------------------------------------------------------------


def test_baseline_of_a_metric(data_dir: Path) -> None:
    baseline = json.loads((data_dir / "test_baseline.json").read_text())
    assert baseline_of(baseline, "kernel-launch/event_overhead:0") == 0.00596
    assert baseline_of(baseline, "kernel-launch/return_code") == 0
    assert baseline_of(baseline, "mem-bw/H2D:0") is None
    # Without a rank, SuperBench falls back to the benchmark's name.
    assert baseline_of({"mem-bw": 7.0}, "mem-bw/H2D") == 7.0
    assert baseline_of({"mem-bw": 7.0}, "mem-bw/H2D:0") is None


# --- data diagnosis on SuperBench's data ---------------------------------------------------------


def test_data_diagnosis(data_dir: Path) -> None:
    fleet, out = run_file(data_dir, "test_rules.yaml", "test_baseline.json")
    d = out.diagnosis
    assert d is not None
    label = dict(zip(fleet.hosts, d.defective.tolist(), strict=True))
    assert label == {"sb-validation-01": True, "sb-validation-02": False, "sb-validation-03": True}
    r1, r3 = fleet.hosts.index("sb-validation-01"), fleet.hosts.index("sb-validation-03")
    assert 2 + len(d.metrics) == 36  # a 'Not Accept' row: Category, Defective Details, the rules' metrics
    assert d.category_text(r1) == "KernelLaunch"
    assert (
        d.details_text(r1)
        == "kernel-launch/event_overhead:0(B/L: 0.0060 VAL: 0.1000 VAR: 1577.85% Rule:lambda x:x>0.05)"
    )
    assert "FailedTest" in d.category_text(r3)
    assert "mem-bw/return_code(VAL: 1.0000 Rule:lambda x:x>0)" in d.details_text(r3)
    assert "mem-bw/H2D_Mem_BW:0_miss" in d.details_text(r3)
    assert [d.issue_count(r) for r in range(3)] == [1, 0, 17]


def test_data_diagnosis_without_baseline_runs(data_dir: Path) -> None:
    # A value rule, a store-only rule and a multi rule over its values: no baseline needed.
    fleet, out = run_file(data_dir, "test_rules_without_baseline.yaml", None)
    assert out.diagnosis is not None
    # rule0 'value' x>0 on every overhead: every node that has them violates it.
    assert out.diagnosis.defective.tolist() == [True, True, True]


def test_node_whose_kernel_launch_doubled_and_d2h_halved_is_defective(tmp_path: Path, data_dir: Path) -> None:
    # The issue's case: SuperBench's generate-baseline rules, one node 2x slower launch, half D2H bandwidth.
    rows = [
        json.loads(line)
        for line in (data_dir / "test_generate_baseline_results.jsonl").read_text().splitlines()
    ]
    bad = dict(rows[0], node="bad")
    for k in list(bad):
        if k.startswith("kernel-launch/event_time"):
            bad[k] *= 2
        if k.startswith("mem-bw/d2h_bw"):
            bad[k] /= 2
    src = tmp_path / "results-summary.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in [*rows, bad]))
    base = {
        "kernel-launch/event_time": 0.0055,
        "kernel-launch/wall_time": 0.009,
        "mem-bw/d2h_bw": 26.22,
        "mem-bw/h2d_bw": 26.07,
    }
    fleet = load_fleet(src)
    out = apply_rules(
        load_rules(data_dir / "test_generate_baseline_diagnosis_rules.yaml"),
        fleet.columns,
        fleet.values,
        base,
    )
    assert out.diagnosis is not None
    # sb-validation-03's GPU 2 is itself >5% slow on both launch times (the outlier fix_threshold set aside).
    assert out.diagnosis.defective.tolist() == [False, False, True, True]
    assert out.diagnosis.category_text(2) == "KernelLaunch"
    assert out.diagnosis.category_text(3) == "KernelLaunch,Mem"
    assert out.unmatched == {}


# --- rule ops ----------------------------------------------------------------------------------

KL = "kernel-launch/event_overhead"


def test_variance_rule_op(diagnose) -> None:
    rules = rules_file(
        r={
            "categories": "KernelLaunch",
            "criteria": "lambda x:x>0.5",
            "function": "variance",
            "metrics": [f"{KL}:0", f"{KL}:1"],
        }
    )
    d = diagnose(rules, {"n": {f"{KL}:0": 3.1, f"{KL}:1": 2}}, {f"{KL}:0": 2, f"{KL}:1": 2})
    assert d.out.summaries[0].hosts_violating == 1
    assert d.categories("n") == "KernelLaunch"
    assert d.details("n") == f"{KL}:0(B/L: 2.0000 VAL: 3.1000 VAR: 55.00% Rule:lambda x:x>0.5)"
    rules = rules_file(
        r={
            "categories": "KernelLaunch",
            "criteria": "lambda x:x<-0.5",
            "function": "variance",
            "metrics": [f"{KL}:0", f"{KL}:1"],
        }
    )
    d = diagnose(rules, {"n": {f"{KL}:0": 1.5, f"{KL}:1": 1.5}}, {f"{KL}:0": 2, f"{KL}:1": 2})
    assert not d.defective("n") and d.categories("n") == ""


def test_value_rule_op(diagnose) -> None:
    rules = rules_file(
        a={
            "categories": "KernelLaunch",
            "criteria": "lambda x:x>0.5",
            "function": "variance",
            "metrics": [f"{KL}:0"],
        },
        b={
            "categories": "KernelLaunch2",
            "criteria": "lambda x:x>0",
            "function": "value",
            "metrics": [f"{KL}:0"],
        },
    )
    d = diagnose(rules, {"n": {f"{KL}:0": 3.1}, "m": {f"{KL}:0": 1.5}}, {f"{KL}:0": 2})
    assert d.categories("n") == "KernelLaunch,KernelLaunch2"
    assert f"{KL}:0(VAL: 1.5000 Rule:lambda x:x>0)" in d.details("m")
    assert f"{KL}:0(B/L: 2.0000 VAL: 3.1000 VAR: 55.00% Rule:lambda x:x>0.5)" in d.details("n")


@pytest.mark.parametrize("baseline", [{f"{KL}:0": 0}, {}])
def test_variance_with_a_zero_or_missing_baseline_is_an_error_naming_the_metric(diagnose, baseline) -> None:
    rules = rules_file(
        r={"categories": "K", "criteria": "lambda x:x>0.5", "function": "variance", "metrics": [f"{KL}:0"]}
    )
    with pytest.raises(RulesError) as exc:
        diagnose(rules, {"n": {f"{KL}:0": 3.1}}, baseline)
    assert f"metric {KL}:0" in str(exc.value) and "rule 'r'" in str(exc.value)


@pytest.mark.parametrize("criteria", [">", "5", ">5", "lambda x:x+1"])
def test_criteria_that_are_not_a_predicate_are_refused(tmp_path: Path, criteria: str) -> None:
    p = tmp_path / "r.yaml"
    p.write_text(
        yaml.safe_dump(
            rules_file(
                r={"categories": "K", "criteria": criteria, "function": "variance", "metrics": [f"{KL}:0"]}
            )
        )
    )
    with pytest.raises(RulesError, match="criteria"):
        load_rules(p)


RN = "resnet_models/pytorch-resnet152/throughput_train_float32"
VG = "vgg_models/pytorch-vgg11/throughput_train_float32"
TMP_RULES = rules_file(
    rule1={
        "categories": "TMP",
        "criteria": "lambda x:x<-0.5",
        "store": True,
        "function": "variance",
        "metrics": [RN],
    },
    rule2={
        "categories": "TMP",
        "criteria": "lambda x:x<-0.5",
        "store": True,
        "function": "variance",
        "metrics": [VG],
    },
    rule3={
        "categories": "CNN",
        "criteria": 'lambda label:True if label["rule1"]+label["rule2"]>=2 else False',
        "store": False,
        "function": "multi_rules",
    },
)


def test_multi_rules_op(diagnose) -> None:
    d = diagnose(TMP_RULES, {"one": {RN: 300, VG: 100}, "two": {RN: 100, VG: 100}}, {RN: 300, VG: 300})
    assert not d.defective("one")
    assert d.defective("two")
    assert d.categories("two") == "CNN"  # the store rules' 'TMP' does not leak
    assert d.diag.details[d.row("two")] == [
        f"{RN}(B/L: 300.0000 VAL: 100.0000 VAR: -66.67% Rule:lambda x:x<-0.5)",
        f"{VG}(B/L: 300.0000 VAL: 100.0000 VAR: -66.67% Rule:lambda x:x<-0.5)",
        'rule3:lambda label:True if label["rule1"]+label["rule2"]>=2 else False',
    ]


def test_multi_rule_reading_a_missing_rule_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "r.yaml"
    p.write_text(
        yaml.safe_dump(
            rules_file(
                m={
                    "categories": "K",
                    "criteria": 'lambda label:True if label["rule2"]>=2 else False',
                    "function": "multi_rules",
                }
            )
        )
    )
    with pytest.raises(RulesError, match="'rule2', which is not a rule with 'store: true'"):
        load_rules(p)


def test_multi_rule_before_the_store_rules_it_reads(diagnose) -> None:
    # Item 7: order in the file does not matter; the multi rule reads the real counts, not zeros.
    rules = {
        "superbench": {
            "rules": {
                "rule3": TMP_RULES["superbench"]["rules"]["rule3"],
                **{k: v for k, v in TMP_RULES["superbench"]["rules"].items() if k != "rule3"},
            }
        }
    }
    d = diagnose(rules, {"two": {RN: 100, VG: 100}}, {RN: 300, VG: 300})
    assert d.defective("two") and d.categories("two") == "CNN"


def test_multi_rules_in_a_cycle_are_refused(tmp_path: Path) -> None:
    p = tmp_path / "r.yaml"
    p.write_text(
        yaml.safe_dump(
            rules_file(
                a={
                    "categories": "K",
                    "criteria": 'lambda l: l["b"] > 0',
                    "function": "multi_rules",
                    "store": True,
                },
                b={
                    "categories": "K",
                    "criteria": 'lambda l: l["a"] > 0',
                    "function": "multi_rules",
                    "store": True,
                },
            )
        )
    )
    with pytest.raises(RulesError, match="cycle"):
        load_rules(p)


# --- test_data_diagnosis.test_mutli_rules ---------------------------------------------------------


def test_multi_rules_on_two_nodes(diagnose) -> None:
    rules = rules_file(
        rule1={
            "categories": "CNN",
            "criteria": "lambda x:x<-0.5",
            "store": True,
            "function": "variance",
            "metrics": ["mem-bw/D2H_Mem_BW"],
        },
        rule2={
            "categories": "CNN",
            "criteria": "lambda x:x<-0.5",
            "function": "variance",
            "store": True,
            "metrics": ["kernel-launch/wall_overhead"],
        },
        rule3={
            "categories": "CNN",
            "function": "multi_rules",
            "criteria": 'lambda label:True if label["rule1"]+label["rule2"]>=2 else False',
        },
    )
    baseline = {"kernel-launch/wall_overhead": 0.01026, "mem-bw/D2H_Mem_BW": 24.3}
    rows = {
        "sb-validation-04": {"kernel-launch/wall_overhead": 0.005, "mem-bw/D2H_Mem_BW": 25},
        "sb-validation-05": {"kernel-launch/wall_overhead": 0.005, "mem-bw/D2H_Mem_BW": 10},
    }
    d = diagnose(rules, rows, baseline)
    assert not d.defective("sb-validation-04")
    assert d.defective("sb-validation-05")
    assert "CNN" in d.categories("sb-validation-05")
    assert d.details("sb-validation-05") == (
        "kernel-launch/wall_overhead(B/L: 0.0103 VAL: 0.0050 VAR: -51.27% Rule:lambda x:x<-0.5),"
        "mem-bw/D2H_Mem_BW(B/L: 24.3000 VAL: 10.0000 VAR: -58.85% Rule:lambda x:x<-0.5),"
        'rule3:lambda label:True if label["rule1"]+label["rule2"]>=2 else False'
    )


NCCL = [f"nccl-bw:allreduce-run{i}/allreduce_1073741824_busbw" for i in range(3)]


def test_multi_rule_over_stored_values(diagnose) -> None:
    rules = rules_file(
        rule1={"categories": "NCCL_DIS", "store": True, "metrics": NCCL},
        rule2={
            "categories": "NCCL_DIS",
            "criteria": 'lambda label:True if min(label["rule1"].values())/max(label["rule1"].values())<0.95 else False',
            "function": "multi_rules",
        },
    )
    rows = {
        "sb-validation-04": dict(zip(NCCL, [10, 23, 22], strict=True)),
        "sb-validation-05": dict(zip(NCCL, [22, 23, 22], strict=True)),
        "sb-validation-06": dict(zip(NCCL, [10, None, None], strict=True)),
    }
    d = diagnose(rules, rows, {})
    assert d.defective("sb-validation-04") and "NCCL_DIS" in d.categories("sb-validation-04")
    assert not d.defective("sb-validation-05")
    assert not d.defective("sb-validation-06")


# --- failure check -----------------------------------------------------------------------------

RC = [
    "gemm-flops/return_code:0",
    "gemm-flops/return_code:1",
    "gemm-flops/return_code:2",
    "resnet_models/pytorch-resnet152/return_code",
]


def test_failure_check(diagnose) -> None:
    rules = rules_file(
        rule1={
            "categories": "FailedTest",
            "criteria": "lambda x:x!=0",
            "function": "failure_check",
            "metrics": RC,
        }
    )
    rows = {
        "sb-validation-04": {RC[0]: 0, RC[1]: 0, RC[3]: 0},
        "sb-validation-05": {RC[0]: -1, RC[1]: None, RC[3]: -1},
    }
    d = diagnose(rules, rows, {})
    assert d.defective("sb-validation-04") and "FailedTest" in d.categories("sb-validation-04")
    assert d.details("sb-validation-04") == "gemm-flops/return_code:2_miss"
    assert d.defective("sb-validation-05") and "FailedTest" in d.categories("sb-validation-05")
    assert d.details("sb-validation-05") == (
        "gemm-flops/return_code:0(VAL: -1.0000 Rule:lambda x:x!=0),"
        "gemm-flops/return_code:1_miss,"
        "gemm-flops/return_code:2_miss,"
        "resnet_models/pytorch-resnet152/return_code(VAL: -1.0000 Rule:lambda x:x!=0)"
    )


def test_failure_check_op(diagnose) -> None:
    three = RC[:2] + RC[3:]
    rules = rules_file(
        rule1={
            "categories": "FailedTest",
            "criteria": "lambda x:x!=0",
            "function": "failure_check",
            "metrics": three,
        }
    )
    d = diagnose(rules, {"ok": dict.fromkeys(three, 0), "bad": {RC[0]: 0, RC[1]: -1, RC[3]: -1}}, {})
    assert not d.defective("ok") and d.out.summaries[0].hosts_violating == 1
    assert d.categories("bad") == "FailedTest"
    assert d.diag.details[d.row("bad")] == [
        "gemm-flops/return_code:1(VAL: -1.0000 Rule:lambda x:x!=0)",
        "resnet_models/pytorch-resnet152/return_code(VAL: -1.0000 Rule:lambda x:x!=0)",
    ]
    rules = rules_file(
        rule2={
            "categories": "FailedTest",
            "criteria": "lambda x:x!=0",
            "function": "failure_check",
            "metrics": RC,
        }
    )
    d = diagnose(rules, {"ok": dict.fromkeys(three, 0)}, {})
    assert d.defective("ok") and d.categories("ok") == "FailedTest"
    assert d.diag.details[0] == ["gemm-flops/return_code:2_miss"]


# --- sb-fleet's verdicts on the same data --------------------------------------------------------


def test_missing_metric_is_no_violation_and_cannot_fire_a_multi_rule(diagnose) -> None:
    # Item 2: a store rule's missing metrics are recorded as '_miss' but not counted.
    rules = rules_file(
        s1={
            "categories": "A",
            "criteria": "lambda x:x<-0.5",
            "store": True,
            "function": "variance",
            "metrics": ["mem-bw/a", "mem-bw/b"],
        },
        m={"categories": "M", "criteria": 'lambda label: label["s1"] >= 1', "function": "multi_rules"},
    )
    d = diagnose(
        rules,
        {"gone": {"mem-bw/a": None, "mem-bw/b": None}, "ok": {"mem-bw/a": 1, "mem-bw/b": 1}},
        {"mem-bw/a": 1, "mem-bw/b": 1},
    )
    assert not d.defective("gone")
    assert d.diag.details[0] == ["mem-bw/a_miss", "mem-bw/b_miss"]
    # sb-fleet: a missed test makes the host incomplete, never fail.
    assert {i.severity for i in d.out.issues.get(0, [])} <= {"incomplete"}


def test_rule_matching_nothing_is_reported(diagnose) -> None:
    rules = rules_file(
        t={
            "categories": "TensorCore",
            "criteria": "lambda x:x<-0.1",
            "function": "value",
            "metrics": ["gemm-flops/*_tc_.*:\\d*"],
        }
    )
    d = diagnose(rules, {"n": {"gemm-flops/fp16_tc_flops:0": 1.0}}, {})
    assert d.out.unmatched == {"t": ["gemm-flops/*_tc_.*:\\d*"]}
    assert np.isnan(d.diag.values).all() or d.diag.values.size == 0
