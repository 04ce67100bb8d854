"""The six report files and the two commands."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from sb_fleet.cli.report_command import baseline_cmd, report_cmd
from sb_fleet.report.analyse import report, write_reports
from tests.synth.fleet import generate

ROOT = Path(__file__).resolve().parents[3]


def fleet_run(tmp: Path, n: int = 300, seed: int = 5) -> tuple[Path, object]:
    fleet = generate(n, seed=seed)
    run = tmp / "run"
    run.mkdir()
    (run / "manifest.json").write_text('{"schema_version": 1}')
    (run / "results-summary.jsonl").write_text(fleet.text + '{"node": "broken", "x/y":\n')
    (run / "hosts.json").write_text(
        json.dumps({"schema_version": 1, "hosts": [{"name": h} for h in fleet.hosts]})
    )
    return run, fleet


def test_all_six_files_agree(tmp_path: Path) -> None:
    run, fleet = fleet_run(tmp_path)
    r = report(run)
    paths = write_reports(r, tmp_path / "out")
    assert [p.name for p in paths] == [
        "report.json",
        "report.md",
        "report.html",
        "junit.xml",
        "quarantine.txt",
        "metrics.prom",
    ]
    doc = json.loads((tmp_path / "out" / "report.json").read_text())
    assert doc["schema_version"] == 1
    hosts = {h["name"]: h for h in doc["hosts"]}
    assert set(hosts) == set(fleet.hosts)
    for h in doc["hosts"]:
        assert set(h) >= {"name", "outcome", "verdict", "issues"}
        assert h["verdict"] in ("pass", "fail", "incomplete", "missing")
        for i in h["issues"]:
            assert set(i) >= {"metric", "value", "reference", "deviation", "check", "category"}
    bad = {n for n, h in hosts.items() if h["verdict"] != "pass"}
    assert set(fleet.faults) <= bad
    assert doc["gate"]["passed"] is False and doc["gate"]["failing_hosts"] == len(bad)
    assert doc["summary"]["hosts"] == len(fleet.hosts)
    m = doc["metrics"]["gemm-flops/fp16_tc_flops:0"]
    assert {"count", "mean", "std", "min", "max", "p5", "p50", "p95", "direction", "flagged_hosts"} <= set(m)
    assert m["direction"] == "higher"
    assert doc["problems"] and doc["problems"][0]["line"] == len(fleet.lines) + 1

    quarantine = (tmp_path / "out" / "quarantine.txt").read_text().split()
    assert set(quarantine) == bad

    prom = text_string_to_metric_families((tmp_path / "out" / "metrics.prom").read_text())
    failing = {
        s.labels["host"]
        for f in prom
        for s in f.samples
        if s.name == "sb_fleet_host_gate_failed" and s.value == 1
    }
    assert failing == bad

    tree = ET.parse(tmp_path / "out" / "junit.xml")
    cases = tree.getroot().findall(".//testcase")
    assert len(cases) == len(fleet.hosts)
    failed = {c.get("name") for c in cases if c.find("failure") is not None}
    assert failed == bad
    some = next(c for c in cases if c.get("name") in bad)
    assert some.find("failure").get("type") in ("fail", "incomplete", "missing")

    md = (tmp_path / "out" / "report.md").read_text()
    assert md.startswith("# sb-fleet report: gate FAILED")
    assert f"## Hosts to act on ({len(bad)}: {len(bad)} counted by the gate, 0 allowed: they fail it)" in md
    assert "## Input problems (1)" in md
    html = (tmp_path / "out" / "report.html").read_text()
    assert (
        "<script src" not in html
        and "<link" not in html
        and "http://" not in html.replace("http://www.w3.org/2000/svg", "")
    )
    assert '"plots":' in html


def test_html_escapes_script_breakers(tmp_path: Path) -> None:
    src = tmp_path / "r.jsonl"
    src.write_text('{"node": "</script><script>alert(1)</script>", "m/x:0": 1}\n')
    r = report(src)
    write_reports(r, tmp_path / "o")
    html = (tmp_path / "o" / "report.html").read_text()
    assert "</script><script>alert(1)" not in html


def test_report_command_exit_codes_and_default_out(tmp_path: Path) -> None:
    run, _ = fleet_run(tmp_path, n=120, seed=6)
    res = CliRunner().invoke(report_cmd, [str(run)])
    assert res.exit_code == 1, res.output
    assert (run / "report.json").is_file()  # default --out is the run directory
    clean = tmp_path / "clean.jsonl"
    clean.write_text(
        "".join(json.dumps({"node": f"h{i}", "mem-bw/h2d_bw:0": 26.0}) + "\n" for i in range(20))
    )
    res = CliRunner().invoke(report_cmd, [str(clean), "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    assert "gate passed" in res.output


def test_report_command_usage_errors_exit_2(tmp_path: Path) -> None:
    rules = tmp_path / "rule.yaml"
    rules.write_text(
        "superbench:\n  rules:\n    r:\n      function: value\n      criteria: 'lambda x: x.__class__'\n"
        "      categories: C\n      metrics: [a/b]\n"
    )
    src = tmp_path / "r.jsonl"
    src.write_text('{"node": "a", "a/b": 1}\n')
    res = CliRunner().invoke(report_cmd, [str(src), "--rules", str(rules), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2
    assert "rule 'r'" in res.output and "attribute access" in res.output
    res = CliRunner().invoke(report_cmd, [str(tmp_path / "missing.jsonl")])
    assert res.exit_code == 2


def test_report_command_reads_gates_from_the_config(tmp_path: Path) -> None:
    cfg_src = ROOT / "configs" / "cpu.yaml"
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        cfg_src.read_text()
        + "gates:\n  policy:\n    max_failed_percent: 50\n  limits:\n    - metric: mem-bw/h2d_bw\n      min: 25\n"
        # 3 hosts at 24 and 7 at 26 with no noise are two populations 8% apart (issue 22): said expected here
        + "  populations:\n    expected_mix: true\n"
    )
    src = tmp_path / "r.jsonl"
    src.write_text(
        "".join(
            json.dumps({"node": f"h{i}", "mem-bw/h2d_bw:0": 24.0 if i < 3 else 26.0}) + "\n"
            for i in range(10)
        )
    )
    res = CliRunner().invoke(report_cmd, [str(src), "-c", str(cfg), "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output  # 3 of 10 below the floor: within 50%
    doc = json.loads((tmp_path / "o" / "report.json").read_text())
    assert [h["verdict"] for h in doc["hosts"]][:4] == ["fail", "fail", "fail", "pass"]
    bad = tmp_path / "bad.yaml"
    bad.write_text(cfg_src.read_text() + "gates:\n  polcy: {}\n")
    res = CliRunner().invoke(report_cmd, [str(src), "-c", str(bad), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "polcy" in res.output


def test_baseline_command(tmp_path: Path) -> None:
    run, _ = fleet_run(tmp_path, n=100, seed=8)
    out = tmp_path / "baseline.json"
    summary = tmp_path / "summary.json"
    res = CliRunner().invoke(baseline_cmd, [str(run), "--out", str(out), "--summary", str(summary)])
    assert res.exit_code == 0, res.output
    b = json.loads(out.read_text())
    assert abs(b["gemm-flops/fp16_tc_flops"] / 280435.0 - 1) < 0.02
    s = json.loads(summary.read_text())
    assert s["gemm-flops/fp16_tc_flops:0"]["count"] >= 90
    # The baseline feeds straight back into a variance rule.
    r = (
        report(run, rules=ROOT.parent / "shared/reference/superbench-ndv4-quickscan/rule.yaml", baseline=out)
        if (ROOT.parent / "shared/reference/superbench-ndv4-quickscan/rule.yaml").is_file()
        else None
    )
    if r is not None:
        assert any(s.name == "gflops" and s.metrics > 0 for s in r.rule_summaries)
