"""Gates: absolute limits per GPU model, baseline regression, fleet settings, the pass/fail policy."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from sb_fleet.analysis.gates import apply_limits, decide
from sb_fleet.config.gatespec import Gates, Policy
from sb_fleet.report.analyse import report


def test_absent_section_is_the_default_policy() -> None:
    g = Gates()
    assert g.limits == [] and g.fleet.enabled and g.baseline.max_regression is None
    assert Gates.model_validate({}) == g
    res = decide(g.policy, ["pass", "pass", "missing"])
    assert not res.passed and res.counted == 1 and res.allowed_hosts == 0


@pytest.mark.parametrize(
    "bad",
    [
        {"limit": []},
        {"limits": [{"metric": "a/b"}]},
        {"limits": [{"metric": "a/b", "min": 2, "max": 1}]},
        {"limits": [{"metric": "a/(", "min": 1}]},
        {"policy": {"max_failed_percent": 150}},
        {"policy": {"count": ["fail", "bad"]}},
        {"fleet": {"treshold": 3}},
    ],
)
def test_typos_and_nonsense_are_errors(bad: dict) -> None:
    with pytest.raises(ValidationError):
        Gates.model_validate(bad)


def test_policy_hosts_and_percent() -> None:
    verdicts = ["pass"] * 95 + ["fail"] * 3 + ["incomplete"] + ["missing"]
    assert decide(Policy(max_failed_hosts=5), verdicts).passed
    assert not decide(Policy(max_failed_hosts=4), verdicts).passed
    assert decide(Policy(max_failed_percent=5), verdicts).passed
    assert not decide(Policy(max_failed_percent=4), verdicts).passed
    assert decide(Policy(count=["fail"], max_failed_hosts=3), verdicts).passed
    both = decide(Policy(max_failed_hosts=10, max_failed_percent=2), verdicts)
    assert not both.passed and both.allowed_hosts == 2


def test_limits_apply_per_gpu_model() -> None:
    g = Gates.model_validate(
        {
            "limits": [
                {"metric": "gemm-flops/fp16_tc_flops", "min": 250000, "gpu_model": "*A100*"},
                {"metric": "gemm-flops/fp16_tc_flops", "min": 600000, "gpu_model": "*H100*"},
                {"metric": "kernel-launch/event_time", "max": 0.008},
            ]
        }
    )
    cols = ["gemm-flops/fp16_tc_flops:0", "kernel-launch/event_time:0"]
    vals = np.array([[260000.0, 0.006], [260000.0, 0.006], [240000.0, 0.009], [240000.0, 0.006]])
    models = ["NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", None]
    issues = apply_limits(g, cols, vals, models)
    assert sorted(issues) == [1, 2]
    assert [i.check for i in issues[1]] == ["floor"] and issues[1][0].reference == 600000
    assert sorted(i.check for i in issues[2]) == ["ceiling", "floor"]
    assert "for GPU model *A100*" in next(i.detail for i in issues[2] if i.check == "floor")


def _rows(n: int) -> list[dict]:
    return [
        {"node": f"h{i}", "mem-bw/h2d_bw:0": 26.0 - (3.0 if i == 0 else 0.0), "mem-bw/return_code": 0}
        for i in range(n)
    ]


def test_baseline_gate_defaults_to_5pct_without_rules(tmp_path: Path) -> None:
    src = tmp_path / "r.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in _rows(3)))
    base = tmp_path / "b.json"
    base.write_text(json.dumps({"mem-bw/h2d_bw": 26.0}))
    r = report(src, baseline=base)
    v = {h.name: h.verdict for h in r.hosts}
    assert v == {"h0": "fail", "h1": "pass", "h2": "pass"}
    i = r.hosts[0].issues[0]
    assert (i.check, i.reference) == ("baseline", 26.0) and i.deviation == pytest.approx(-3 / 26)
    # Without fleet detection (h0 is also the odd one of three by majority agreement: issue 22).
    loose = report(
        src,
        baseline=base,
        gates=Gates.model_validate({"baseline": {"max_regression": 0.2}, "fleet": {"enabled": False}}),
    )
    assert all(h.verdict == "pass" for h in loose.hosts)


def test_fleet_detection_can_be_switched_off(tmp_path: Path) -> None:
    rows = _rows(50)
    rows[0]["mem-bw/h2d_bw:0"] = 5.0
    src = tmp_path / "r.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert report(src).hosts[0].verdict == "fail"
    off = report(src, gates=Gates.model_validate({"fleet": {"enabled": False}}))
    assert off.hosts[0].verdict == "pass" and off.gate.passed
