"""A host's categories under multi rules that read store rules: SuperBench's, never the store rules'.

The oracle is SuperBench's own test (microsoft/superbenchmark tests/analyzer/test_ruleop.py,
``test_multi_rules_op``): two ``store: true`` variance rules of category ``TMP`` (ResNet-152 and
VGG-11 training throughput against a baseline of 300, ``x < -0.5``) and a multi rule of category
``CNN`` that fires when both are violated. Its expected values, re-typed here as data: with
ResNet at 300 and VGG at 100 the multi rule passes (0 violations); with both at 100 it is violated,
``CNN`` is among the categories and ``TMP`` is not, and the details are the two variance lines
and the multi rule's. sb-fleet's host view (the report's categories column) must say the same as
SuperBench's diagnosis files: ``CNN``.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from sb_fleet.analysis.superbench.rules import apply_rules, load_rules
from sb_fleet.analysis.verdict import judge
from tests.unit.superbench.conftest import rows_to_matrix

RN = "resnet_models/pytorch-resnet152/throughput_train_float32"
VG = "vgg_models/pytorch-vgg11/throughput_train_float32"
MULTI = 'lambda label:True if label["rule1"]+label["rule2"]>=2 else False'

# SuperBench's test data: rules, baseline, the two data rows and what SuperBench expects of each.
SB_RULES = {
    "rule1": {
        "categories": "TMP",
        "criteria": "lambda x:x<-0.5",
        "store": True,
        "function": "variance",
        "metrics": [RN],
    },
    "rule2": {
        "categories": "TMP",
        "criteria": "lambda x:x<-0.5",
        "store": True,
        "function": "variance",
        "metrics": [VG],
    },
    "rule3": {"categories": "CNN", "criteria": MULTI, "store": False, "function": "multi_rules"},
}
SB_BASELINE = {RN: 300.0, VG: 300.0}
SB_CASES = {
    # node: (data row, violated, categories SuperBench shows, details SuperBench shows)
    "passes": ({RN: 300, VG: 100}, False, "", None),
    "violates": (
        {RN: 100, VG: 100},
        True,
        "CNN",
        [
            f"{RN}(B/L: 300.0000 VAL: 100.0000 VAR: -66.67% Rule:lambda x:x<-0.5)",
            f"{VG}(B/L: 300.0000 VAL: 100.0000 VAR: -66.67% Rule:lambda x:x<-0.5)",
            f"rule3:{MULTI}",
        ],
    ),
}


def run(tmp_path: Path):
    p = tmp_path / "rules.yaml"
    p.write_text(yaml.safe_dump({"superbench": {"rules": SB_RULES}}))
    nodes, cols, m = rows_to_matrix({n: c[0] for n, c in SB_CASES.items()})
    return nodes, apply_rules(load_rules(p), cols, m, SB_BASELINE)


def test_host_categories_are_superbenchs(tmp_path: Path) -> None:
    nodes, out = run(tmp_path)
    assert out.diagnosis is not None
    for row, node in enumerate(nodes):
        _data, violated, categories, details = SB_CASES[node]
        host = judge(node, True, out.issues.get(row, []), "ok")
        # SuperBench's diagnosis files and sb-fleet's host view agree, with SuperBench's values
        assert bool(out.diagnosis.defective[row]) is violated, node
        assert out.diagnosis.category_text(row) == categories, node
        assert ",".join(host.categories) == categories, node
        assert "TMP" not in host.categories
        assert (host.verdict == "fail") is violated, node
        if details is not None:
            assert out.diagnosis.details[row] == details


def test_store_rule_violations_stay_as_the_multi_rules_evidence(tmp_path: Path) -> None:
    nodes, out = run(tmp_path)
    issues = out.issues[nodes.index("violates")]
    # both throughput drops are still named (the why), under the multi rule's category
    assert {i.metric for i in issues} == {RN, VG, "rule3"}
    assert {i.category for i in issues} == {"CNN"}
    by = {i.metric: i for i in issues}
    assert by[RN].value == 100 and by[RN].reference == 300 and by[RN].check == "rule:rule1"
