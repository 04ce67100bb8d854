"""The exposition written straight from tables (``Series.add_table``, ``Series.render``) against an
independent oracle: ``prometheus_client``'s own ``generate_latest`` of the same series added one by one
(``Series.add``), byte for byte, in the text format and OpenMetrics, with hostile host, metric and check
names (quotes, backslashes, newlines, ``%``, control and private-use characters, lone surrogates, 5,000
characters) and values across every magnitude; the run's series as ``report_prometheus`` makes them; the
per-host split; the Pushgateway's body."""

from __future__ import annotations

import json
import math
import random
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString

from sb_fleet import exposition
from sb_fleet.exposition import Series, go_float, label_value
from sb_fleet.fleet.prometheus_outputs import push, write_textfiles
from sb_fleet.report.analyse import report
from sb_fleet.report.writers.report_prometheus import (
    PromSettings,
    RunIdentity,
    every_host_series,
    host_series,
    series,
)

from .test_prometheus_export import NASTY, promtool_check, write_results

HOSTILE = [
    *NASTY,
    "pct%s%d%%",
    "\ue000mark\ue001",  # the writer's own marks: escaped like any other character that is not printable
    "lone\udcffsurrogate",
    "tab\there",
    "",
    "plain-host-01",
]
VALUES = [0.0, -0.0, 1.0, 1e-9, -3.5e-7, 1e-5, 1.2345e-4, 1e-4, 0.1, 1 / 3, 123456.75, 999999.9999999999]
VALUES += [1e6, 1234567.0, 123456789.125, -98765432.5, 2.0**53, 9999999999999998.0, 1e15, 1e16, 2.5e17]
VALUES += [1e22, 1.7976931348623157e308, 5e-324, 42.0, -7.0]


def oracle_equal(fast: Series, slow: Series) -> None:
    """``fast`` renders as prometheus_client renders ``slow`` (and itself), in both formats."""
    for om, gen in ((False, generate_latest), (True, generate_openmetrics)):
        want = gen(slow)
        assert fast.render(openmetrics=om) == want
        assert gen(fast) == want  # its own samples, collected, are the same too


def tables_and_samples(values: np.ndarray, hosts: list[str], metrics: list[str]) -> tuple[Series, Series]:
    """The same table of samples, added as a table and one by one."""
    fast, slow = Series(), Series()
    for s in (fast, slow):
        s.declare(
            "sb_fleet_x_bytes", 'help with "quotes", a \\ and\na newline', ("fleet", "host", "metric", "unit")
        )
        s.declare("sb_fleet_y", "the other help", ("host",))
        s.declare("sb_fleet_z", "no labels", ())
        s.declare("sb_fleet_t", "timestamps", ("fleet", "host"))
    fast.add_table(
        "sb_fleet_x_bytes",
        values,
        {"host": hosts},
        {"metric": metrics, "unit": [f"u{m}" for m in metrics]},
        {"fleet": "f"},
    )
    fast.add_table("sb_fleet_y", values[:, :1], {"host": hosts})
    fast.add_table("sb_fleet_z", np.array([[3.0]]), {})
    for r, h in enumerate(hosts):
        for c, m in enumerate(metrics):
            slow.add(
                "sb_fleet_x_bytes", {"fleet": "f", "host": h, "metric": m, "unit": f"u{m}"}, values[r, c]
            )
        slow.add("sb_fleet_y", {"host": h}, values[r, 0])
    slow.add("sb_fleet_z", {}, 3.0)
    for s in (fast, slow):  # one by one on both: points with timestamps, two in a series
        for t in (1795741200.25, 1795741100.0):
            s.add("sb_fleet_t", {"fleet": "f", "host": hosts[0]}, 7.5, t)
    return fast, slow


def test_table_render_is_prometheus_clients_own() -> None:
    rng = np.random.default_rng(49)
    hosts = HOSTILE
    metrics = [f"m/{h}" for h in HOSTILE[:7]] + ["m/%%", "m/\\"]
    values = rng.choice(VALUES, size=(len(hosts), len(metrics))) * rng.choice(
        [1, -1], size=(len(hosts), len(metrics))
    )
    values[1, 2] = np.nan  # not a number: no sample, in both
    values[3, :] = np.inf
    values[4, 0] = -np.inf
    fast, slow = tables_and_samples(values, hosts, metrics)
    oracle_equal(fast, slow)
    assert len(fast) == len(slow)
    text = fast.render().decode()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    got = {(s.labels["host"], s.labels["metric"]) for s in fams["sb_fleet_x_bytes"].samples}
    assert ("\\ue000mark\\ue001" in {h for h, _ in got}) and label_value("pct%s%d%%") in {h for h, _ in got}
    assert len(got) == len(hosts) * len(metrics) - 1 - len(metrics) - 1
    promtool_check(fast.render())


def test_table_with_repeated_labels_keeps_the_first_as_add_does() -> None:
    """Two hosts whose names are one label value once made safe: the first's samples are the series."""
    hosts = ["a\n", "a\\x0a", "b", "a\n"]
    metrics = ["m1", "m1", "m2"]
    values = np.arange(12, dtype=float).reshape(4, 3)
    values[0, 0] = np.nan  # the first host has no m1: the next one's is the series
    fast, slow = tables_and_samples(values, hosts, metrics)
    oracle_equal(fast, slow)
    samples = [s for f in text_string_to_metric_families(fast.render().decode()) for s in f.samples]
    x = {(s.labels["host"], s.labels["metric"]): s.value for s in samples if s.name == "sb_fleet_x_bytes"}
    assert x == {("a\\x0a", "m1"): 1.0, ("a\\x0a", "m2"): 2.0, ("b", "m1"): 6.0, ("b", "m2"): 8.0}


def test_values_are_written_as_go_writes_them(monkeypatch: pytest.MonkeyPatch) -> None:
    rnd = random.Random(49)
    values = [*VALUES, *(-v for v in VALUES)]
    values += [rnd.uniform(1, 10) * 10.0 ** rnd.randint(-30, 30) * rnd.choice((1, -1)) for _ in range(20000)]
    values += [round(rnd.uniform(0, 1e7), rnd.randint(0, 6)) for _ in range(5000)]
    want = [floatToGoString(v) for v in values]
    assert [go_float(v) for v in values] == want
    assert [b.decode() for b in exposition._go_floats(np.array(values))] == want
    monkeypatch.setattr(exposition, "_orjson_is_repr", lambda: False)  # an orjson that writes otherwise
    assert [b.decode() for b in exposition._go_floats(np.array(values))] == want
    for v in (math.inf, -math.inf, math.nan):
        assert go_float(v) == floatToGoString(v)


def _nasty_run(tmp_path: Path) -> Path:
    """A run directory of hostile hosts and metrics, with units (values in base units: large numbers)."""
    rows: dict[str, dict[str, object]] = {}
    # (A lone surrogate stays out: a run directory's per-host file names cannot hold one, see safe_name.)
    hosts = [h for h in HOSTILE[:-2] if "\udcff" not in h] + [f"n{i:02d}" for i in range(12)]
    for i, host in enumerate(hosts):
        rows[host] = {
            "gemm-flops/fp32_flops:0": 18000.0 + i * 37.25,
            "gemm-flops/fp32_flops:1": 18100.0 - i * 11.5,
            "gemm-flops/return_code:0": 0,
            "gemm-flops/return_code:1": 1 if i == 3 else 0,
            "mem-bw/h2d_bw": 25.5 + i / 7,
            'evil/na"me\\with\nnewline%s': 1.0 + i,
            "evil/" + "m" * 3000: 2.0,
            "lat/p99": 3.25e-6 * (i + 1),
            "nan-bench/x": "NaN" if i % 2 else 1.0,
        }
    rows["n03"]["mem-bw/h2d_bw"] = 2.0  # a slow host: the gate fails, a finding in its info
    run_dir = tmp_path / "run"
    write_results(run_dir, rows)
    (run_dir / "manifest.json").write_text(
        json.dumps({"schema_version": 2, "run_id": "r-test", "created": "2026-11-27T02:00:00+00:00"})
    )
    (run_dir / "metrics.json").write_text(
        json.dumps(
            {
                "gemm-flops/fp32_flops": {"unit": "GFLOPS", "higher_is_better": True},
                "mem-bw/h2d_bw": {"unit": "GB/s", "higher_is_better": True},
                "lat/p99": {"unit": "ms", "higher_is_better": False},
            }
        )
    )
    return run_dir


@pytest.mark.parametrize("per_rank", [False, True])
def test_run_series_are_what_one_by_one_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, per_rank: bool
) -> None:
    """The run's series (report_prometheus) from tables, and again with every table added one by one
    (as if each had repeated labels): prometheus_client's text of the second is the first's, byte for byte."""
    result = report(_nasty_run(tmp_path))
    result.health = {
        "hosts": {
            h.name: {
                "verdict": ("pass", "warn", "fail", "unknown")[i % 4],
                "checks": [
                    {"check": f"c{(i + j) % 5}%", "verdict": ("pass", "warn", "fail")[j % 3]}
                    for j in range(3)
                ],
                "findings": [{"check": 'x"\n\\', "verdict": "fail"}] if i % 3 == 0 else [],
            }
            for i, h in enumerate(result.hosts)
        }
    }
    run = RunIdentity("r\n1", 'h"', 1795741200.0, 1795744800.5)
    settings = PromSettings(fleet="prod-1", per_rank=per_rank)
    streaks = {result.hosts[0].name: 2}
    fast = series(result, settings, run, streaks)
    monkeypatch.setattr(exposition._Table, "distinct", lambda self, unique=None: False)
    slow = series(result, settings, run, streaks)
    assert not slow._tables and fast._tables  # the second: every sample one by one
    oracle_equal(fast, slow)
    text = fast.render()
    promtool_check(text)
    fams = {f.name: f for f in text_string_to_metric_families(text.decode())}
    flops = fams["sb_fleet_benchmark_flop_per_second"].samples
    assert min(s.value for s in flops) > 1e12 and b"e+13" in text  # base units, as Go writes them
    assert {s.labels["check"] for s in fams["sb_fleet_health_check_status"].samples} >= {"c0%", 'x"\\x0a\\'}


def test_every_host_series_is_each_hosts_select(tmp_path: Path) -> None:
    result = report(_nasty_run(tmp_path))
    s = series(result, PromSettings(fleet="t"), RunIdentity("r", None, None, 0.0))
    split = every_host_series(s)
    assert set(split) == {label_value(h.name) for h in result.hosts}
    for h in result.hosts:
        assert split[label_value(h.name)].render() == host_series(s, h.name).render()
        assert split[label_value(h.name)].names() == host_series(s, h.name).names()
    per = tmp_path / "tf" / "{host}"
    (tmp_path / "tf").mkdir()
    names = [h.name for h in result.hosts]
    warned = write_textfiles(s, str(per), "t", names)  # the 5,000-character name: too long for a directory
    assert len(warned) == 1 and "File name too long" in warned[0], warned
    files = sorted((tmp_path / "tf").rglob("*.prom"))
    assert len(files) == len(set(names)) - 1
    for f in files:
        promtool_check(f.read_bytes())


def test_pushgateway_gets_the_rendered_text(tmp_path: Path) -> None:
    got: list[tuple[str, str, bytes]] = []

    class Gateway(BaseHTTPRequestHandler):
        def do_PUT(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            got.append((self.path, self.headers.get("Content-Type", ""), body))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Gateway)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        result = report(_nasty_run(tmp_path))
        s = series(result, PromSettings(fleet="a.b-c:d"), RunIdentity("r", None, None, 0.0))
        assert push(s, f"127.0.0.1:{srv.server_address[1]}/", "a.b-c:d", timeout=5) is None
    finally:
        srv.shutdown()
        srv.server_close()
    path, ctype, body = got[0]
    assert path == "/metrics/job/sb-fleet/fleet/a.b-c%3Ad"  # as prometheus_client's push_to_gateway
    assert ctype == "text/plain; version=0.0.4; charset=utf-8"
    assert body == s.render() == generate_latest(s)


def test_run_identity_worked_out_beside_is_asked_at_the_first_read(tmp_path: Path) -> None:
    """write_and_expose digests the results file in a thread: the series take a function for the run's
    identity, asked when they are first read, and give the same text as with the identity itself."""
    result = report(_nasty_run(tmp_path))
    run = RunIdentity("r1", "abc", 1795741200.0, 1795744800.5)
    asked: list[int] = []

    def later() -> RunIdentity:
        asked.append(1)
        return run

    deferred = series(result, PromSettings(), later)
    assert asked == []
    assert deferred.render() == series(result, PromSettings(), run).render()
    assert len(asked) == 1 and deferred.render(openmetrics=True).endswith(b"# EOF\n") and len(asked) == 1

    def fails() -> RunIdentity:
        raise OSError("the results file went away")

    broken = series(result, PromSettings(), fails)
    for _ in range(2):  # never a text without the run's identity
        with pytest.raises(OSError, match="went away"):
            broken.render()
