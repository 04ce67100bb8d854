"""Loading results: malformed lines are reported per line and the rest is analysed; run directories."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sb_fleet.analysis.fleet_results import load_fleet
from sb_fleet.analysis.superbench.metric_names import (
    Directions,
    MetricInfo,
    direction_from_name,
    parse_metric,
)
from sb_fleet.errors import ResultsError
from sb_fleet.report.analyse import report


def test_malformed_lines_are_reported_and_the_rest_is_analysed(tmp_path: Path) -> None:
    lines = [
        json.dumps({"node": "a", "gemm-flops/fp16_flops:0": 1.0, "gemm-flops/return_code": 0}),
        '{"node": "b", "gemm-flops/fp16_flops:0": 2.0, "gemm-fl',  # truncated
        json.dumps({"node": "c", "gemm-flops/fp16_flops:0": "fast", "gemm-flops/fp32_flops:0": 3.0}),
        json.dumps({"node": "a", "gemm-flops/fp16_flops:0": 9.0}),  # duplicate
        json.dumps({"gemm-flops/fp16_flops:0": 1.0}),  # no node
        "[1, 2]",
        "",
        json.dumps({"node": "d", "gemm-flops/fp16_flops:0": True, "x/y": None}),
        '{"node": "e", "gemm-flops/fp16_flops:0": Infinity}',
        json.dumps({"node": "f", "gemm-flops/fp16_flops:0": 4.0}),
    ]
    p = tmp_path / "results-summary.jsonl"
    p.write_text("\n".join(lines) + "\n")
    fleet = load_fleet(p)
    assert fleet.hosts == ["a", "c", "d", "e", "f"]
    by_line = {pr.line: pr.message for pr in fleet.problems}
    assert set(by_line) == {2, 3, 4, 5, 6, 8, 9}
    assert "not valid JSON" in by_line[2]
    assert "invalid value" in by_line[3] and "'fast'" in by_line[3]
    assert "duplicate node 'a' (first seen on line 1)" in by_line[4]
    assert 'no "node"' in by_line[5]
    assert "not a JSON object" in by_line[6]
    assert "True" in by_line[8]
    assert "inf" in by_line[9]
    idx = fleet.column_index()
    v = fleet.values
    assert v[0, idx["gemm-flops/fp16_flops:0"]] == 1.0  # the first line of a duplicated node wins
    assert np.isnan(v[1, idx["gemm-flops/fp16_flops:0"]]) and v[1, idx["gemm-flops/fp32_flops:0"]] == 3.0
    assert np.isnan(v[2, idx["gemm-flops/fp16_flops:0"]])
    assert v[4, idx["gemm-flops/fp16_flops:0"]] == 4.0
    assert fleet.invalid == {
        "c": {"gemm-flops/fp16_flops:0": "'fast'"},
        "d": {"gemm-flops/fp16_flops:0": "True"},
        "e": {"gemm-flops/fp16_flops:0": "inf"},
    }
    r = report(p)
    assert len(r.problems) == 7 and {h.name for h in r.hosts} == {"a", "c", "d", "e", "f"}
    by_host = {h.name: h for h in r.hosts}
    for name in ("c", "d", "e"):  # an invalid value fails its host, naming the metric and the value
        h = by_host[name]
        assert h.verdict == "fail", h
        assert any(i.check == "invalid-value" and i.metric == "gemm-flops/fp16_flops:0" for i in h.issues)
        assert fleet.invalid[name]["gemm-flops/fp16_flops:0"] in h.issues[0].detail


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_blank_lines_are_skipped_and_line_numbers_kept_with_any_line_ending(
    tmp_path: Path, newline: str
) -> None:
    lines = [
        json.dumps({"node": "a", "m/x:0": 1.0}),
        "",
        "   \t ",
        " " * 200,  # a long blank line
        '  {"node": "b", "m/x:0": 2.0}',  # data after leading blanks
        "{broken",
        json.dumps({"node": "c", "m/x:0": 3.0}),
    ]
    p = tmp_path / "r.jsonl"
    p.write_bytes(newline.join(lines).encode())  # no line ending after the last line
    fleet = load_fleet(p)
    assert fleet.hosts == ["a", "b", "c"]
    assert [(pr.line, "not valid JSON" in pr.message) for pr in fleet.problems] == [(6, True)]
    assert fleet.values[:, fleet.column_index()["m/x:0"]].tolist() == [1.0, 2.0, 3.0]


def test_nan_written_by_python_json_is_an_invalid_value(tmp_path: Path) -> None:
    """NaN (as Python's json writes it) is not "absent": the host did not measure the metric."""
    p = tmp_path / "r.jsonl"
    p.write_text('{"node": "a", "m/x:0": NaN, "m/y:0": 1}\n{"node": "b", "m/x:0": 2, "m/y:0": 1}\n')
    fleet = load_fleet(p)
    assert np.isnan(fleet.values[0, 0]) and fleet.values[0, 1] == 1
    assert len(fleet.problems) == 1 and "'m/x:0'=nan" in fleet.problems[0].message
    assert fleet.invalid == {"a": {"m/x:0": "nan"}}
    by_host = {h.name: h for h in report(p).hosts}
    assert by_host["a"].verdict == "fail" and by_host["a"].issues[0].metric == "m/x:0"
    assert by_host["b"].verdict == "pass"


def test_numbers_of_any_size_and_any_depth_never_raise(tmp_path: Path) -> None:
    """1e400, a 5,000-digit integer, a line nested 100,000 deep: problems of their line, no traceback."""
    p = tmp_path / "r.jsonl"
    lines = [
        '{"node": "a", "m/x:0": 1e400, "m/y:0": 1}',
        '{"node": "b", "m/x:0": ' + "9" * 5000 + ', "m/y:0": 1}',
        '{"node": "c", "m/x:0": ' + "[" * 100_000 + "]" * 100_000 + "}",
        '{"node": "d", "m/x:0": -' + "9" * 350 + ', "m/y:0": 1}',
        '{"node": "e", "m/x:0": 2, "m/y:0": 1}',
    ]
    p.write_text("\n".join(lines) + "\n")
    fleet = load_fleet(p)
    assert fleet.hosts == ["a", "b", "d", "e"]
    assert fleet.invalid == {"a": {"m/x:0": "inf"}, "b": {"m/x:0": "inf"}, "d": {"m/x:0": "-inf"}}
    assert any(pr.line == 3 and "nested deeper" in pr.message for pr in fleet.problems)
    verdicts = {h.name: h.verdict for h in report(p).hosts}
    assert verdicts == {"a": "fail", "b": "fail", "d": "fail", "e": "pass"}


def test_missing_or_foreign_source_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ResultsError, match="no such file"):
        load_fleet(tmp_path / "nope.jsonl")
    with pytest.raises(ResultsError, match="not a run directory"):
        load_fleet(tmp_path)


def make_run(tmp: Path, rows: list[dict], hosts: list[str], **extra: object) -> Path:
    run = tmp / "run"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"schema_version": 1}))
    (run / "results-summary.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "hosts.json").write_text(
        json.dumps({"schema_version": 1, "hosts": [{"name": h, "groups": ["gpu"]} for h in hosts]})
    )
    for name, obj in extra.items():
        (run / name.replace("_json", ".json")).write_text(json.dumps(obj))
    return run


def test_run_directory_accounts_for_every_host(tmp_path: Path) -> None:
    rows = [
        {
            "node": "gpu001",
            "gemm-flops/fp16_flops:0": 1.0,
            "gemm-flops/return_code": 0,
            "mem-bw/return_code": 0,
        },
        {"node": "gpu002", "gemm-flops/fp16_flops:0": 1.0, "gemm-flops/return_code": 124},
        {
            "node": "gpu003",
            "gemm-flops/fp16_flops:0": 1.0,
            "gemm-flops/return_code": 0,
            "mem-bw/return_code": 0,
        },
    ]
    outcomes = {
        "schema_version": 1,
        "hosts": {
            "gpu001": {"outcome": "ok", "reason": ""},
            "gpu002": {"outcome": "timeout", "reason": "gemm-flops exceeded 600 s"},
            "gpu003": {"outcome": "failed", "reason": "collect: file truncated"},
            "gpu004": {"outcome": "unreachable", "reason": "ssh: connection refused"},
        },
    }
    run = make_run(
        tmp_path,
        rows,
        ["gpu001", "gpu002", "gpu003", "gpu004"],
        outcomes_json=outcomes,
        plan_json={"benchmarks": ["gemm-flops", "mem-bw"]},
    )
    (run / "facts").mkdir()
    (run / "facts" / "gpu001.json").write_text(json.dumps({"gpu_model": "NVIDIA A100-SXM4-80GB"}))
    r = report(run)
    hosts = {h.name: h for h in r.hosts}
    assert [h.name for h in r.hosts] == ["gpu001", "gpu002", "gpu003", "gpu004"]
    assert hosts["gpu001"].verdict == "pass" and hosts["gpu001"].gpu_model == "NVIDIA A100-SXM4-80GB"
    assert hosts["gpu002"].verdict == "incomplete" and hosts["gpu002"].outcome == "timeout"
    checks = {i.check for i in hosts["gpu002"].issues}
    assert {"return_code", "missing-benchmark", "outcome"} <= checks  # mem-bw is in the plan but absent
    assert hosts["gpu003"].verdict == "incomplete" and hosts["gpu003"].outcome == "failed"
    assert hosts["gpu004"].verdict == "missing" and hosts["gpu004"].outcome == "unreachable"
    assert "connection refused" in hosts["gpu004"].issues[0].detail
    assert not r.gate.passed and r.gate.counted == 3


def test_metrics_json_overrides_the_name_table(tmp_path: Path) -> None:
    run = make_run(
        tmp_path,
        [{"node": "a", "x/score:0": 1.0}],
        ["a"],
        metrics_json={"x/score": {"unit": "s", "higher_is_better": False}},
    )
    fleet = load_fleet(run)
    assert fleet.directions.of("x/score:3") == -1
    assert fleet.directions.unit("x/score:0") == "s"
    assert direction_from_name("x/score:3") == 1


@pytest.mark.parametrize(
    ("name", "direction"),
    [
        ("kernel-launch/event_time:0", -1),
        ("kernel-launch/wall_time", -1),
        ("gemm-flops/fp16_tc_flops:3", 1),
        ("gemm-flops/int8_tc_iops:3", 1),
        ("mem-bw/h2d_bw:1", 1),
        ("ib-loopback/ib_write_8388608_ib0_bw", 1),
        ("nccl-bw/allreduce_8589934592_busbw:0", 1),
        ("nccl-bw/allreduce_8589934592_algbw:0", 1),
        ("nccl-bw/allreduce_8589934592_time:0", -1),
        ("model-benchmarks/pytorch-resnet50/fp32_train_throughput", 1),
        ("cpu-memory-bw-latency/mem_read_lat_ns", -1),
        ("gpt_models/pytorch-gpt2-large/return_code", -1),
        ("foo/bar", 0),
    ],
)
def test_direction_table(name: str, direction: int) -> None:
    assert Directions().of(name) == direction
    # The suite's metadata wins over the name table: declare the opposite and it is obeyed.
    assert Directions({name: MetricInfo("x", direction < 0)}).of(name) == (1 if direction < 0 else -1)


def test_metric_name_parts() -> None:
    m = parse_metric("ib-loopback/ib_write_8388608_ib3_bw:0")
    assert (m.base, m.rank, m.family, m.unit, m.group) == (
        "ib-loopback/ib_write_8388608_ib3_bw",
        0,
        "ib-loopback/ib_write_8388608_ib#_bw",
        "ib3:0",
        "ib-loopback",
    )
    m = parse_metric("gpt_models/pytorch-gpt2-large/fp32_train_throughput")
    assert (m.rank, m.unit, m.group, m.leaf) == (
        None,
        "",
        "gpt_models/pytorch-gpt2-large",
        "fp32_train_throughput",
    )


def test_ranked_return_codes_any_failure_counts(tmp_path: Path) -> None:
    rows = [
        {
            "node": f"h{i}",
            "kernel-launch/event_time:0": 0.0057,
            "kernel-launch/event_time:1": 0.0057,
            "kernel-launch/return_code:0": 0,
            "kernel-launch/return_code:1": 0,
        }
        for i in range(4)
    ]
    rows[2]["kernel-launch/return_code:0"] = 124  # rank 0 timed out, rank 1 fine
    p = tmp_path / "r.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = report(p)
    v = {h.name: h.verdict for h in r.hosts}
    assert v == {"h0": "pass", "h1": "pass", "h2": "incomplete", "h3": "pass"}
    i = r.hosts[2].issues[0]
    assert (i.metric, i.check, i.value) == ("kernel-launch/return_code:0", "return_code", 124)
    assert "timed out" in i.detail


def test_gpu_models_are_never_compared_with_each_other(tmp_path: Path) -> None:
    rows, hosts = [], []
    for i in range(40):
        model = "NVIDIA A100" if i % 2 else "NVIDIA H100"
        base = 280000.0 if model == "NVIDIA A100" else 750000.0
        hosts.append((f"h{i:02d}", model))
        rows.append(
            {
                "node": f"h{i:02d}",
                **{f"gemm-flops/fp16_tc_flops:{g}": base * (1 + 0.001 * ((i + g) % 3)) for g in range(8)},
            }
        )
    rows[5]["gemm-flops/fp16_tc_flops:0"] = 200000.0  # an A100 GPU far below its kind
    run = make_run(tmp_path, rows, [h for h, _ in hosts])
    (run / "facts").mkdir()
    for h, model in hosts:
        (run / "facts" / f"{h}.json").write_text(json.dumps({"gpu_model": model}))
    r = report(run)
    bad = {h.name for h in r.hosts if h.verdict != "pass"}
    assert bad == {"h05"}  # pooled together, every A100 would look 60% slow
    assert {f.partition for f in r.families} == {"NVIDIA A100", "NVIDIA H100"}


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.one_of(st.text(max_size=60), st.binary(max_size=60).map(lambda b: b.decode("latin-1"))), max_size=8
    )
)
def test_any_garbage_lines_are_reported_never_fatal(
    tmp_path_factory: pytest.TempPathFactory, junk: list[str]
) -> None:
    p = tmp_path_factory.mktemp("junk") / "r.jsonl"
    good = json.dumps({"node": "ok-host", "m/x:0": 1.0})
    p.write_text(
        "\n".join([good, *(j.replace("\n", " ").replace("\r", " ") for j in junk)]) + "\n", encoding="utf-8"
    )
    fleet = load_fleet(p)
    assert "ok-host" in fleet.hosts
    assert len(fleet.hosts) <= 1 + len(junk)
    assert all(2 <= pr.line <= 1 + len(junk) for pr in fleet.problems)


def test_an_empty_run_never_passes_the_gate(tmp_path: Path) -> None:
    p = tmp_path / "r.jsonl"
    p.write_text("garbage\n")
    with pytest.raises(ResultsError, match="nothing to judge.*line 1|nothing to judge.*:1:"):
        report(p)


def test_name_table_never_contradicts_the_suite() -> None:
    # The control node does not import the suite; its metric declarations are read from `bench list`.
    import subprocess
    import sys

    exe = Path(sys.executable).parent / "sb-fleet"
    if not exe.is_file():
        pytest.skip("the sb-fleet console script is not installed")
    res = subprocess.run(
        [str(exe), "bench", "list", "--json"], capture_output=True, text=True, timeout=300, check=False
    )
    if res.returncode != 0:
        pytest.skip(f"sb-fleet bench list failed: {res.stderr[-300:]}")
    declared = [
        (f"{b['name']}/{m['name']}", m.get("higher_is_better"))
        for b in json.loads(res.stdout)
        for m in b.get("metrics", [])
        if isinstance(m, dict) and m.get("higher_is_better") is not None
    ]
    assert len(declared) > 50
    wrong = [(n, hib) for n, hib in declared if direction_from_name(n) == (-1 if hib else 1)]
    assert wrong == []
    known = sum(1 for n, hib in declared if direction_from_name(n) == (1 if hib else -1))
    assert known / len(declared) > 0.97
