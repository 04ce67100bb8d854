"""sb-fleet's verdicts where ops look, for real: a loopback fleet (real sshd hosts, each a machine of its own
for the health checks: tests/healthfake.py) is validated with ``--textfile-dir`` and ``--pushgateway``; a
real Prometheus scrapes a real Pushgateway and a real node_exporter reading the textfile directory, and
PromQL queries over its HTTP API return the run's failing host, a metric's per-host values and the
health checks' results, from both ways in. The repository's alert rules load and evaluate there, and the
dashboard's queries run. The Debian packages prometheus, prometheus-pushgateway and
prometheus-node-exporter must be installed (CI installs them: .ci/apt-packages.txt); else the test skips
saying which is missing."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from .conftest import ROOT, sb_fleet, started_fleet

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fleetlib import free_port  # noqa: E402
from fleetlib.promstack import BackfilledPrometheus, PromStack, http_get, missing  # noqa: E402
from healthfake import make_machine  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RULES = ROOT / "monitoring" / "prometheus" / "sb-fleet-rules.yml"
DASHBOARD = ROOT / "monitoring" / "grafana" / "sb-fleet-dashboard.json"
FLEET = "itest"
METRIC = "noop/step_time"

CONFIG = """\
version: v0.4
fleet:
  known_hosts: @KNOWN_HOSTS@
  python: /usr/bin/python3
  venv: false
  install_requirements: never
  min_free_disk_gb: 0
  forks: 16
superbench:
  benchmarks:
    noop:
      timeout: 60
      modes: [{name: local, proc_num: 1}]
      parameters: {num_warmup: 0, num_steps: 1, sleep: 0.05}
gates:
  fleet: {enabled: false}
health:
  profile: h100-sxm-8x-ib400
"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    gone = missing()
    if gone:
        pytest.skip(
            f"not installed: {', '.join(gone)} (Debian packages; CI installs them from .ci/apt-packages.txt)"
        )
    root = tmp_path_factory.mktemp("promstack")
    textfile = root / "textfile"
    textfile.mkdir()
    textfile.chmod(0o755)
    s = PromStack(root, textfile, [RULES])
    s.start()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def run(stack, tmp_path_factory):
    """One real validate of four hosts, one of them with a GPU missing (unhealthy: it fails)."""
    with started_fleet(4, "127.0.38", check_torch=False) as f:
        names = [h.name for h in f.hosts]
        sick = names[2]
        host_vars = {
            n: make_machine(
                f.dir / "machines" / n, python="/usr/bin/python3", **({"gpus": 7} if n == sick else {})
            )
            for n in names
        }
        inv = f.inventory(host_vars=host_vars)
        rd = tmp_path_factory.mktemp("prom-run") / "run"
        args = ["-i", str(inv), "-c", str(f.config(CONFIG)), "--run-dir", str(rd), "--fleet", FLEET]
        args += ["--textfile-dir", str(stack.textfile_dir), "--pushgateway", stack.pushgateway_url]
        p = sb_fleet("validate", *args, timeout=600)
        yield {"p": p, "rd": rd, "names": names, "sick": sick}


def _values(text: str, name: str, key: str) -> dict[str, float]:
    return {
        s.labels[key]: s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == name and s.labels.get("fleet") == FLEET
    }


def test_validate_exposes_the_run(run, stack):
    p, rd = run["p"], run["rd"]
    assert p.returncode == 1, p.stdout + p.stderr  # the unhealthy host fails the run, as without Prometheus
    assert "WARNING: pushgateway" not in p.stderr and "WARNING: textfile" not in p.stderr, p.stderr
    textfile = stack.textfile_dir / f"sb_fleet_{FLEET}.prom"
    promtool = shutil.which("promtool")
    for f in (rd / "metrics.prom", textfile):
        assert f.is_file(), f
        if promtool:
            c = subprocess.run(
                [promtool, "check", "metrics"], input=f.read_bytes(), capture_output=True, timeout=60
            )
            assert c.returncode == 0, (f, c.stdout + c.stderr)
    # the textfile and metrics.prom hold the same run
    assert _values(textfile.read_text(), "sb_fleet_host_gate_failed", "host") == _values(
        (rd / "metrics.prom").read_text(), "sb_fleet_host_gate_failed", "host"
    )
    # the Pushgateway holds the group job="sb-fleet", fleet="itest"
    pushed = http_get(f"{stack.pushgateway_url}/metrics").decode()
    assert re.search(r'sb_fleet_gate_passed\{[^}]*fleet="itest"[^}]*job="sb-fleet"[^}]*\} 0', pushed), pushed[
        :2000
    ]


def test_promql_over_both_ways_in(run, stack):
    names, sick = run["names"], run["sick"]
    healthy = sorted(set(names) - {sick})
    metrics_prom = (run["rd"] / "metrics.prom").read_text()
    for job in ("sb-fleet", "node"):  # the Pushgateway (honor_labels) and the node_exporter textfile
        sel = f'fleet="{FLEET}", job="{job}"'
        stack.wait_query(f"sb_fleet_run_info{{{sel}}}", 1)
        # the run's failing hosts
        failing = stack.query(f'sb_fleet_host_verdict{{{sel}, verdict="fail"}} == 1')
        assert sorted(r["metric"]["host"] for r in failing) == [sick], (job, failing)
        info = stack.query(f'sb_fleet_host_info{{{sel}, verdict="fail"}}')
        assert [r["metric"]["outcome"] for r in info] == ["unhealthy"], info
        assert "gpu.count" in info[0]["metric"]["finding"], info
        # a metric's value on every host that ran it (the unhealthy host was not benchmarked), in seconds
        vals = stack.query(f'sb_fleet_benchmark_seconds{{{sel}, metric="{METRIC}"}}')
        got = {r["metric"]["host"]: float(r["value"][1]) for r in vals}
        assert sorted(got) == healthy, (job, vals)
        assert all(0.04 < v < 30 for v in got.values()), got  # a 50 ms sleep, in seconds
        want = {
            s.labels["host"]: s.value
            for fam in text_string_to_metric_families(metrics_prom)
            for s in fam.samples
            if s.name == "sb_fleet_benchmark_seconds" and s.labels["metric"] == METRIC
        }
        assert got == pytest.approx(want)
        # the health checks' results: gpu.count fails on the sick host only
        checks = stack.query(f'sb_fleet_health_check_status{{{sel}, check="gpu.count"}}')
        status = {r["metric"]["host"]: float(r["value"][1]) for r in checks}
        assert status == {**dict.fromkeys(healthy, 0.0), sick: 2.0}, status
        bad = stack.query(f"sb_fleet_health_check_status{{{sel}}} == 2")
        assert {r["metric"]["host"] for r in bad} == {sick}, bad
        # the gate and the pass ratio
        assert float(stack.query(f"sb_fleet_gate_passed{{{sel}}}")[0]["value"][1]) == 0
        assert float(stack.query(f"sb_fleet_run_pass_ratio{{{sel}}}")[0]["value"][1]) == pytest.approx(0.75)


def test_alert_rules_evaluate_and_fire(run, stack):
    stack.wait_query(f'sb_fleet_run_info{{fleet="{FLEET}"}}', 2)
    groups = stack.api("rules")["groups"]
    rules = {r["name"]: r for g in groups for r in g["rules"]}
    assert {"SbFleetHostFailedTwoRunsInARow", "SbFleetPassRateLow", "SbFleetHealthCheckFailing"} <= set(rules)
    deadline = time.monotonic() + 60
    firing: set[tuple[str, str]] = set()
    while time.monotonic() < deadline:
        alerts = stack.api("alerts")["alerts"]
        firing = {
            (a["labels"]["alertname"], a["labels"].get("host", "")) for a in alerts if a["state"] == "firing"
        }
        if {("SbFleetPassRateLow", ""), ("SbFleetHealthCheckFailing", run["sick"])} <= firing:
            break
        time.sleep(0.5)
    assert ("SbFleetPassRateLow", "") in firing, firing  # 3 of 4 hosts passed: below 95%
    assert ("SbFleetHealthCheckFailing", run["sick"]) in firing, firing
    assert not any(a == "SbFleetHostFailedTwoRunsInARow" for a, _ in firing)  # one night only
    assert not any(a == "SbFleetNoRecentRun" for a, _ in firing)
    for r in rules.values():
        assert r["health"] == "ok", r  # every rule evaluated without error on the real series


def test_dashboard_queries_run(run, stack):
    stack.wait_query(f'sb_fleet_run_info{{fleet="{FLEET}"}}', 2)
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    answered = 0
    for e in exprs:
        q = e.replace("$fleet", FLEET).replace("$metric", METRIC)
        answered += bool(stack.query(q))  # a query Prometheus refuses raises
    assert answered >= len(exprs) - 3, answered  # the streak panel and empty tables may be empty


def test_push_replaces_the_group_and_a_dead_gateway_is_a_warning(run, stack, tmp_path):
    # a run of one other host pushed to the same fleet replaces last night's group
    (tmp_path / "results-summary.jsonl").write_text(
        json.dumps({"node": "other", "noop/step_time": 1.0}) + "\n"
    )
    r = sb_fleet(
        "report", str(tmp_path / "results-summary.jsonl"), "--out", str(tmp_path / "o"), "-q",
        "--fleet", FLEET, "--pushgateway", stack.pushgateway_url,
    )  # fmt: skip
    assert r.returncode in (0, 1) and "WARNING" not in r.stderr, r.stdout + r.stderr
    pushed = http_get(f"{stack.pushgateway_url}/metrics").decode()
    hosts = set(re.findall(r'sb_fleet_host_verdict\{fleet="itest",host="([^"]*)"', pushed))
    assert hosts == {"other"}, hosts
    # a gateway nobody listens on: a warning with the reason, the same exit code as without it
    r1 = sb_fleet("report", str(run["rd"]), "--out", str(tmp_path / "a"), "-q")
    r2 = sb_fleet(
        "report", str(run["rd"]), "--out", str(tmp_path / "b"), "-q",
        "--pushgateway", f"http://127.0.0.1:{free_port()}",
    )  # fmt: skip
    assert r1.returncode == r2.returncode == 1, r1.stderr + r2.stderr
    assert "WARNING: pushgateway" in r2.stderr and "refused" in r2.stderr.lower(), r2.stderr


def test_history_backfills_prometheus(tmp_path):
    """Three nights recorded in a history store (n5 passes, then fails twice), exported with
    ``history --prometheus``, turned into TSDB blocks by promtool, served by a real Prometheus: the
    verdicts are there at each night's time."""
    if missing():
        pytest.skip(f"not installed: {', '.join(missing())} (Debian packages; CI installs them)")
    promtool = shutil.which("promtool")
    assert promtool, "the prometheus package ships promtool"
    now = time.time()
    nights = [now - (3 - d) * 86400 for d in range(3)]
    store = tmp_path / "history.duckdb"
    for d, t in enumerate(nights):
        f = tmp_path / f"night{d}" / "results-summary.jsonl"
        f.parent.mkdir()
        rows = [
            {"node": f"n{i}", "gemm-flops/fp32_flops": (40.0 if i == 5 and d else 100.0) + d * 0.01}
            for i in range(6)
        ]
        f.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        os.utime(f, (t, t))
        r = sb_fleet("report", str(f), "--history", str(store), "--out", str(tmp_path / f"o{d}"), "-q")
        assert r.returncode in (0, 1), r.stderr
    r = sb_fleet("history", str(store), "--prometheus", "--host", "n5", "--fleet", "bf")
    assert r.returncode == 0 and r.stdout.endswith("# EOF\n"), r.stderr
    om = tmp_path / "n5.om"
    om.write_text(r.stdout)
    tsdb = tmp_path / "tsdb"
    c = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(om), str(tsdb)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert c.returncode == 0, c.stdout + c.stderr
    prom = BackfilledPrometheus(tmp_path, tsdb).start()
    try:
        got = []
        for t in nights:
            res = prom.query_at('sb_fleet_host_verdict{fleet="bf", host="n5", verdict="fail"}', t + 60)
            got.append([float(x["value"][1]) for x in res])
        assert got == [[0.0], [1.0], [1.0]], got
        ratio = prom.query_at('sb_fleet_run_pass_ratio{fleet="bf"}', nights[-1] + 60)
        assert float(ratio[0]["value"][1]) == pytest.approx(5 / 6), ratio
    finally:
        prom.stop()
