"""The alert rules and the Grafana dashboard in monitoring/: ``promtool check rules`` accepts the rules,
their own ``promtool test rules`` file passes, and the two-nights alert fires on series recorded from two
real expositions of sb-fleet (a passing night, then a night a host fails, twice). The dashboard queries
only series the exporter writes. Skipped where the Debian package ``prometheus`` (promtool) is absent."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from sb_fleet.report.analyse import report
from sb_fleet.report.writers.report_prometheus import PromSettings, RunIdentity, series, vocabulary

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "monitoring" / "prometheus" / "sb-fleet-rules.yml"
RULES_TEST = ROOT / "monitoring" / "prometheus" / "sb-fleet-rules.test.yml"
DASHBOARD = ROOT / "monitoring" / "grafana" / "sb-fleet-dashboard.json"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (Debian package prometheus; CI installs it)"
)


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


@needs_promtool
def test_rules_check() -> None:
    p = promtool("check", "rules", str(RULES))
    assert p.returncode == 0 and "SUCCESS" in p.stdout, p.stdout + p.stderr


@needs_promtool
def test_rules_own_tests() -> None:
    p = promtool("test", "rules", RULES_TEST.name, cwd=RULES_TEST.parent)
    assert p.returncode == 0 and "SUCCESS" in p.stdout, p.stdout + p.stderr


def _exposition(tmp: Path, name: str, slow: float) -> str:
    """A real report's series: six hosts, n5 at ``slow`` against 100 for the others."""
    d = tmp / name
    d.mkdir()
    lines = []
    for i in range(6):
        v = slow if i == 5 else 100.0
        lines.append(json.dumps({"node": f"n{i}", "gemm-flops/fp32_flops": v, "gemm-flops/return_code": 0}))
    (d / "results-summary.jsonl").write_text("\n".join(lines) + "\n")
    result = report(d / "results-summary.jsonl")
    return series(result, PromSettings(fleet="prod"), RunIdentity(name, None, None, 3600.0)).render().decode()


def _series_of(text: str) -> dict[str, float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}"] = s.value
    return out


def _annotations(rule: str, labels: dict[str, str]) -> dict[str, str]:
    """The rule's annotations with its ``{{ $labels.x }}`` filled in (the templates this rule uses)."""
    doc = yaml.safe_load(RULES.read_text())
    r = next(r for g in doc["groups"] for r in g["rules"] if r.get("alert") == rule)
    return {
        k: re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], v)
        for k, v in r["annotations"].items()
    }


@needs_promtool
def test_two_nights_alert_fires_on_recorded_series(tmp_path: Path) -> None:
    """Night 0 every host passes; nights 1 and 2 n5 fails. The exporter's own series, recorded as a
    Pushgateway holds them (each night's value until the next push), fire the alert for n5 on night 2
    only."""
    nights = [
        _series_of(_exposition(tmp_path, f"night{i}", slow)) for i, slow in enumerate((100.0, 40.0, 40.0))
    ]
    keys = sorted(set().union(*nights))
    inputs = []
    for k in keys:
        vals = " ".join(f"{n[k]}x23" if k in n else "_x23" for n in nights)
        inputs.append(
            {"series": k.replace("}", ',job="sb-fleet"}') if k.endswith("}") else k, "values": vals}
        )
    assert any(
        'host="n5"' in i["series"] and i["series"].startswith("sb_fleet_host_gate_failed{") for i in inputs
    )
    labels = {"fleet": "prod", "host": "n5"}
    test = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1h",
                "input_series": inputs,
                "alert_rule_test": [
                    {"eval_time": "30h", "alertname": "SbFleetHostFailedTwoRunsInARow", "exp_alerts": []},
                    {
                        "eval_time": "50h",
                        "alertname": "SbFleetHostFailedTwoRunsInARow",
                        "exp_alerts": [
                            {
                                "exp_labels": {"severity": "page", **labels},
                                "exp_annotations": _annotations("SbFleetHostFailedTwoRunsInARow", labels),
                            }
                        ],
                    },
                    {"eval_time": "10h", "alertname": "SbFleetPassRateLow", "exp_alerts": []},
                ],
            }
        ],
    }
    f = tmp_path / "recorded.test.yml"
    f.write_text(yaml.safe_dump(test, sort_keys=False))
    p = promtool("test", "rules", str(f))
    assert p.returncode == 0 and "SUCCESS" in p.stdout, p.stdout + p.stderr


def test_dashboard_queries_only_exported_series() -> None:
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] == "sb-fleet" and dash["templating"]["list"][0]["type"] == "datasource"
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 10
    names = set(re.findall(r"sb_fleet_[a-z_]+", " ".join(exprs)))
    known = set(vocabulary()) | {"sb_fleet_benchmark_"}  # every name the exporter can write
    assert names <= known, names - known
    assert all(p.get("title") for p in dash["panels"])
    titles = " ".join(p["title"] for p in dash["panels"])
    for want in ("Gate", "Failing hosts", "distribution", "across nights", "health"):
        assert want.lower() in titles.lower(), want
