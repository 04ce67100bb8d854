"""SuperBench rule semantics against hand-computed cases."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sb_fleet.analysis.superbench.metric_names import baseline_of
from sb_fleet.analysis.superbench.rules import apply_rules, load_rules, match_metrics
from sb_fleet.errors import RulesError
from sb_fleet.report.analyse import report

REF = Path(__file__).resolve().parents[4] / "shared" / "reference" / "superbench-ndv4-quickscan"


def write(tmp: Path, name: str, text: str) -> Path:
    p = tmp / name
    p.write_text(text)
    return p


def jsonl(tmp: Path, rows: list[dict]) -> Path:
    return write(tmp, "results-summary.jsonl", "".join(json.dumps(r) + "\n" for r in rows))


ROWS = [
    {
        "node": "a",
        "mem-bw/h2d_bw:0": 26.0,
        "mem-bw/h2d_bw:1": 20.0,
        "kernel-launch/event_time:0": 0.0057,
        "mem-bw/return_code": 0,
        "kernel-launch/return_code": 0,
    },
    {
        "node": "b",
        "mem-bw/h2d_bw:0": 23.0,
        "mem-bw/h2d_bw:1": 18.5,
        "kernel-launch/event_time:0": 0.0058,
        "mem-bw/return_code": 0,
        "kernel-launch/return_code": 0,
    },
    {
        "node": "c",
        "mem-bw/h2d_bw:0": 26.5,
        "kernel-launch/event_time:0": 1.5,
        "mem-bw/return_code": 0,
        "kernel-launch/return_code": 0,
    },
]
BASELINE = {"mem-bw/h2d_bw": 26.0, "mem-bw/h2d_bw:1": 20.0, "kernel-launch/event_time": 0.0057}
RULES = """
version: v0.4
superbench:
  rules:
    mem_bw:
      function: variance
      criteria: 'lambda x:x<-0.1'
      categories: Mem
      metrics:
        - mem-bw/h2d_bw:\\d*
    kernel_launch:
      function: value
      criteria: 'lambda x:x>1'
      categories: KernelLaunch
      metrics:
        - kernel-launch/.*_time:\\d*
"""


def issues_of(result, host: str) -> list:
    return next(h for h in result.hosts if h.name == host).issues


def test_variance_and_value_rules(tmp_path: Path) -> None:
    src = jsonl(tmp_path, ROWS)
    rules = write(tmp_path, "rule.yaml", RULES)
    base = write(tmp_path, "baseline.json", json.dumps(BASELINE))
    r = report(src, rules=rules, baseline=base)
    verdicts = {h.name: h.verdict for h in r.hosts}
    assert verdicts == {"a": "pass", "b": "fail", "c": "fail"}
    b = [i for i in issues_of(r, "b") if i.check == "rule:mem_bw"]
    # (23 - 26) / 26 = -0.11538 < -0.1; rank 1 uses its exact baseline 20: (18.5-20)/20 = -0.075, no violation
    assert [i.metric for i in b] == ["mem-bw/h2d_bw:0"]
    assert b[0].deviation == pytest.approx(-3 / 26)
    assert b[0].reference == 26.0
    assert b[0].category == "Mem"
    c = issues_of(r, "c")
    kl = [i for i in c if i.check == "rule:kernel_launch"]
    assert len(kl) == 1 and kl[0].value == 1.5 and kl[0].category == "KernelLaunch"
    # The metric c lacks is a missed test (FailedTest), as in SuperBench.
    miss = [i for i in c if i.check == "rule:mem_bw"]
    assert [(i.metric, i.category, i.severity) for i in miss] == [
        ("mem-bw/h2d_bw:1", "FailedTest", "incomplete")
    ]
    summary = {s.name: s for s in r.rule_summaries}
    # As in SuperBench, c's missing metric is recorded (mem-bw/h2d_bw:1_miss) but is no violation of the rule.
    assert summary["mem_bw"].metrics == 2 and summary["mem_bw"].hosts_violating == 1
    assert summary["kernel_launch"].hosts_violating == 1


def test_baseline_lookup_exact_then_without_rank() -> None:
    assert baseline_of(BASELINE, "mem-bw/h2d_bw:1") == 20.0
    assert baseline_of(BASELINE, "mem-bw/h2d_bw:7") == 26.0
    assert baseline_of(BASELINE, "mem-bw/d2h_bw:0") is None


def test_store_and_multi_rules(tmp_path: Path) -> None:
    rows = [
        {"node": "both", "mem-bw/h2d_bw:0": 20.0, "kernel-launch/event_time:0": 2.0},
        {"node": "mem_only", "mem-bw/h2d_bw:0": 20.0, "kernel-launch/event_time:0": 0.0057},
        {"node": "none", "mem-bw/h2d_bw:0": 26.0, "kernel-launch/event_time:0": 0.0057},
    ]
    rules = write(
        tmp_path,
        "rule.yaml",
        """
superbench:
  rules:
    r_mem:
      function: variance
      criteria: 'lambda x:x<-0.05'
      categories: Mem
      store: true
      metrics: [mem-bw/h2d_bw]
    r_kl:
      function: value
      criteria: 'lambda x:x>1'
      categories: KernelLaunch
      store: true
      metrics: kernel-launch/event_time
    combined:
      function: multi_rules
      criteria: 'lambda label:True if label["r_mem"]+label["r_kl"]>=2 else False'
      categories: Combined
""",
    )
    base = write(tmp_path, "baseline.json", json.dumps(BASELINE))
    r = report(jsonl(tmp_path, rows), rules=rules, baseline=base)
    verdicts = {h.name: h.verdict for h in r.hosts}
    # Stored rules never fail a host by themselves; only the multi rule does.
    assert verdicts == {"both": "fail", "mem_only": "pass", "none": "pass"}
    checks = sorted(i.check for i in issues_of(r, "both"))
    assert checks == ["rule:combined", "rule:r_kl", "rule:r_mem"]
    cats = {i.category for i in issues_of(r, "both")}
    assert "Combined" in cats


def test_failure_check(tmp_path: Path) -> None:
    rows = [
        {"node": "ok", "gemm-flops/return_code": 0, "mem-bw/return_code": 0},
        {"node": "timeout", "gemm-flops/return_code": 124, "mem-bw/return_code": 0},
        {"node": "absent", "mem-bw/return_code": 0},
    ]
    rules = write(
        tmp_path,
        "rule.yaml",
        """
superbench:
  rules:
    failure:
      function: failure_check
      criteria: 'lambda x:x>0'
      categories: FailedTest
      metrics: [gemm-flops/return_code, mem-bw/return_code]
""",
    )
    r = report(jsonl(tmp_path, rows), rules=rules)
    verdicts = {h.name: h.verdict for h in r.hosts}
    assert verdicts == {"ok": "pass", "timeout": "incomplete", "absent": "incomplete"}
    t = [i for i in issues_of(r, "timeout") if i.check == "rule:failure"]
    assert t[0].metric == "gemm-flops/return_code" and t[0].value == 124


def test_failure_check_pattern_matching_nothing_is_a_miss_for_every_host(tmp_path: Path) -> None:
    rules = write(
        tmp_path,
        "rule.yaml",
        """
superbench:
  rules:
    failure:
      function: failure_check
      criteria: 'lambda x:x>0'
      categories: MissTest
      metrics: [nccl-bw/return_code]
""",
    )
    r = report(jsonl(tmp_path, [{"node": "a", "mem-bw/return_code": 0}]), rules=rules)
    assert r.hosts[0].verdict == "incomplete"
    assert r.hosts[0].issues[0].metric == "nccl-bw/return_code"


def test_metric_matching_is_superbench_regex_search_within_the_benchmark() -> None:
    ruleset_text = "superbench:\n  rules:\n    t:\n      function: value\n      criteria: 'lambda x:x>0'\n      categories: C\n      metrics: ['gemm-flops/.*_tc_.*:\\d*', 'gemm-flops/*_tc_.*:\\d*']\n"
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "r.yaml"
        p.write_text(ruleset_text)
        rs = load_rules(p)
    cols = [
        "gemm-flops/fp16_tc_flops:0",
        "gemm-flops/fp16_flops:0",
        "mem-bw/fp16_tc_flops:0",
        "gemm-flops/fp16_tc_flops",
    ]
    assert match_metrics(rs.rules[0], cols) == [0]


def test_reference_rules_file_loads_and_runs(tmp_path: Path) -> None:
    if not (REF / "rule.yaml").is_file():
        pytest.skip(f"reference data not found at {REF}")
    rs = load_rules(REF / "rule.yaml")
    assert [r.name for r in rs.rules] == [
        "kernel_launch",
        "mem_bw",
        "gflops",
        "tensor_core",
        "rdma_loopback",
        "nccl",
        "model_throughput",
        "failure",
    ]
    baseline = json.loads((REF / "baseline.json").read_text())
    row = {"node": "n1"}
    for k, v in baseline.items():
        if k.endswith("return_code") or k.startswith(("ib-loopback", "gpt_models")):
            row[k] = v
        else:
            for g in range(8):
                row[f"{k}:{g}"] = v
    slow = dict(row, node="n2")
    slow["gemm-flops/fp16_flops:3"] = baseline["gemm-flops/fp16_flops"] * 0.8
    r = report(jsonl(tmp_path, [row, slow]), rules=REF / "rule.yaml", baseline=REF / "baseline.json")
    assert {h.name: h.verdict for h in r.hosts} == {"n1": "pass", "n2": "fail"}
    assert [i.metric for i in r.hosts[1].issues] == ["gemm-flops/fp16_flops:3"]
    # SuperBench's own pattern 'gemm-flops/*_tc_.*' searches for "gemm-flops" followed by slashes and "_tc_",
    # which no metric name has: the rule matches nothing there too, and sb-fleet says so.
    assert any("tensor_core" in w for w in r.warnings)


@pytest.mark.parametrize(
    ("text", "where", "msg"),
    [
        (
            "superbench:\n  rules:\n    r:\n      function: value\n      criteria: 'lambda x: __import__(\"os\")'\n      categories: C\n      metrics: [a/b]\n",
            "superbench.rules.r.criteria",
            "rule 'r'",
        ),
        (
            "superbench:\n  rules:\n    r:\n      function: vairance\n      criteria: 'lambda x:x>0'\n      categories: C\n      metrics: [a/b]\n",
            "superbench.rules.r.function",
            "Input should be",
        ),
        (
            "superbench:\n  rules:\n    r:\n      function: value\n      criteria: 'lambda x:x>0'\n      categories: C\n      metrics: [a/b]\n      stroe: true\n",
            "superbench.rules.r.stroe",
            "Extra inputs",
        ),
        (
            "superbench:\n  rules:\n    r:\n      function: value\n      criteria: 'lambda x:x>0'\n      metrics: [a/b]\n",
            "superbench.rules.r.categories",
            "Field required",
        ),
        (
            "superbench:\n  rules:\n    m:\n      function: multi_rules\n      criteria: 'lambda l: l[\"nope\"] > 0'\n      categories: C\n",
            "superbench.rules.m.criteria",
            "not a rule with 'store: true'",
        ),
        (
            "superbench:\n  rules:\n    r:\n      function: value\n      criteria: 'lambda x:x>0'\n      categories: C\n      metrics: ['a/(']\n",
            "superbench.rules.r.metrics",
            "bad pattern",
        ),
        ("superbench: [1, 2\n", "line", "not valid YAML"),
    ],
)
def test_bad_rules_files_name_the_place(tmp_path: Path, text: str, where: str, msg: str) -> None:
    p = write(tmp_path, "rule.yaml", text)
    with pytest.raises(RulesError) as exc:
        load_rules(p)
    s = str(exc.value)
    assert str(p) in s and where in s and msg in s


def test_variance_rule_without_baseline_is_an_error(tmp_path: Path) -> None:
    rules = write(tmp_path, "rule.yaml", RULES)
    with pytest.raises(RulesError, match="needs a baseline"):
        report(jsonl(tmp_path, ROWS), rules=rules)


def test_apply_rules_is_vectorised_over_hosts(tmp_path: Path) -> None:
    rules = load_rules(write(tmp_path, "rule.yaml", RULES))
    cols = ["mem-bw/h2d_bw:0"]
    vals = np.array([[26.0], [20.0], [np.nan]])
    out = apply_rules(rules, cols, vals, BASELINE)
    assert sorted(out.issues) == [1, 2]
    assert out.issues[1][0].deviation == pytest.approx(-6 / 26)
