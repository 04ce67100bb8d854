"""The Prometheus exposition of a run (metrics.prom), its ways out (textfile directory, Pushgateway) and the
history's trends, on real report values: names and units, hostile host and metric names, NaN and inf,
health checks, runs in a row from a real history store, and ``promtool check metrics`` on every
exposition where the Debian package ``prometheus`` is installed."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import socket
import stat
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families

from sb_fleet.cli.history_command import history_cmd
from sb_fleet.cli.report_command import report_cmd
from sb_fleet.errors import UsageError
from sb_fleet.exposition import MAX_LABEL, NAME_RE, Series, base_unit, fleet_name, label_value
from sb_fleet.fleet.prometheus_outputs import (
    PromOutputs,
    check_textfile_dir,
    publish,
    push,
    textfile_targets,
    write_textfiles,
)
from sb_fleet.report.analyse import report
from sb_fleet.report.writers.report_prometheus import (
    PromSettings,
    RunIdentity,
    host_series,
    series,
    streak,
)

PROMTOOL = shutil.which("promtool")
NOW = dt.datetime(2026, 11, 27, 3, 0, tzinfo=dt.timezone.utc)
NASTY = [
    'quo"te',
    "new\nline",
    "back\\slash",
    "ünï-cødé-节点",
    "ctl\x00\x1b\r",
    "sep\u2028x",
    "h" * 5000,
    "{brace}=,",
]


def promtool_check(text: bytes) -> None:
    """``promtool check metrics`` accepts the exposition (lint included); skipped without promtool."""
    if PROMTOOL is None:
        return
    p = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, timeout=60)
    assert p.returncode == 0, (p.stdout + p.stderr).decode()[:2000]


def samples(text: bytes) -> dict[str, list]:
    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(text.decode()):
        for s in fam.samples:
            out.setdefault(s.name, []).append(s)
    return out


def write_results(path: Path, rows: dict[str, dict[str, object]], metrics: dict | None = None) -> Path:
    """A run in SuperBench's results-summary.jsonl (values written as given: NaN and Infinity too)."""
    path.mkdir(parents=True, exist_ok=True)
    lines = []
    for host, vals in rows.items():
        body = ", ".join(f"{json.dumps(k)}: {v}" for k, v in vals.items())
        lines.append("{" + f'"node": {json.dumps(host)}' + (", " + body if body else "") + "}")
    f = path / "results-summary.jsonl"
    f.write_text("\n".join(lines) + "\n")
    return f


def gemm_row(v: float) -> dict[str, object]:
    return {
        "gemm-flops/fp32_flops:0": v,
        "gemm-flops/fp32_flops:1": v * 1.02,
        "gemm-flops/return_code:0": 0,
        "gemm-flops/return_code:1": 0,
        "kernel-launch/event_time": 0.005,
        "kernel-launch/return_code": 0,
    }


def run_series(f: Path, **kw: object) -> tuple[Series, object]:
    result = report(f, **kw)  # type: ignore[arg-type]
    return series(result, PromSettings(fleet="t"), RunIdentity("r1", "abc", None, NOW.timestamp())), result


# --- names, units, label values ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "unit,expect",
    [
        ("GFLOPS", ("flop_per_second", 1e9)),
        ("TFLOPS", ("flop_per_second", 1e12)),
        ("TFLOP/s", ("flop_per_second", 1e12)),
        ("GIOPS", ("operations_per_second", 1e9)),
        ("GB/s", ("bytes_per_second", 1e9)),
        ("MB/s", ("bytes_per_second", 1e6)),
        ("GiB/s", ("bytes_per_second", 2.0**30)),
        ("Gb/s", ("bytes_per_second", 1e9 / 8)),  # a small b is a bit
        ("Gbps", ("bytes_per_second", 1e9 / 8)),
        ("ms", ("seconds", 1e-3)),
        ("us", ("seconds", 1e-6)),
        ("ns", ("seconds", 1e-9)),
        ("GiB", ("bytes", 2.0**30)),
        ("%", ("ratio", 0.01)),
        ("C", ("celsius", 1.0)),
        ("W", ("watts", 1.0)),
        ("MHz", ("hertz", 1e6)),
        ("samples/s", ("samples_per_second", 1.0)),
        ("GFLOPS/W", ("flop_per_joule", 1e9)),
        ("samples/s/W", ("samples_per_joule", 1.0)),
        ("count", None),
        ("furlongs/fortnight", None),
        ("", None),
        (None, None),
    ],
)
def test_base_units(unit: str | None, expect: tuple[str, float] | None) -> None:
    got = base_unit(unit)
    assert got == expect if expect is None else (got is not None and got[0] == expect[0])
    if expect is not None and got is not None:
        assert got[1] == pytest.approx(expect[1])
        assert NAME_RE.match(f"sb_fleet_benchmark_{got[0]}")


def test_label_values_are_one_line_utf8_and_bounded() -> None:
    for raw in NASTY:
        v = label_value(raw)
        assert v.isprintable() or " " in v, repr(v)
        assert "\n" not in v and "\r" not in v and "\x00" not in v and "\u2028" not in v
        assert len(v) <= MAX_LABEL
        v.encode("utf-8")  # never raises
    assert label_value("a\udcffb") == "a\\udcffb"  # a lone surrogate (undecodable file name) is shown
    long_a, long_b = label_value("x" * 300 + "a"), label_value("x" * 300 + "b")
    assert long_a != long_b and long_a.startswith("x" * 100)  # two long names stay two series


def test_fleet_names() -> None:
    assert fleet_name(None) == "default" and fleet_name("prod-a100.eu:1") == "prod-a100.eu:1"
    for bad in ("", "a b", "x/y", "-x", "a" * 65, 'q"', "é"):
        if bad == "":
            continue
        with pytest.raises(UsageError, match="fleet name"):
            fleet_name(bad)


def test_series_drops_duplicates_and_nonfinite() -> None:
    s = Series()
    s.declare("x_seconds", "help", ("host",))
    assert s.add("x_seconds", {"host": "a"}, 1.0)
    assert not s.add("x_seconds", {"host": "a"}, 2.0)  # the same series twice: the first stays
    assert not s.add("x_seconds", {"host": "b"}, float("nan"))
    assert not s.add("x_seconds", {"host": "c"}, float("inf"))
    assert not s.add("x_seconds", {"host": "d"}, "not a number")  # type: ignore[arg-type]
    assert len(s) == 1
    with pytest.raises(ValueError):
        s.declare("bad-name", "help", ())
    with pytest.raises(ValueError):
        s.declare("ok", "help", ("bad-label",))


# --- the run's exposition ----------------------------------------------------------------------------


def test_run_exposition(tmp_path: Path) -> None:
    rows = {f"n{i}": gemm_row(100.0) for i in range(6)}
    rows["n5"] = gemm_row(40.0)  # far below the others: fails
    write_results(tmp_path / "r", rows)
    run_dir = tmp_path / "r"  # a run directory: its manifest names the run, metrics.json the units
    (run_dir / "manifest.json").write_text(
        json.dumps({"schema_version": 2, "run_id": "r-test", "created": "2026-11-27T02:00:00+00:00"})
    )
    (run_dir / "config.json").write_text("{}")
    (run_dir / "metrics.json").write_text(
        json.dumps(
            {
                "gemm-flops/fp32_flops": {"unit": "GFLOPS", "higher_is_better": True},
                "kernel-launch/event_time": {"unit": "ms", "higher_is_better": False},
            }
        )
    )
    s, result = run_series(run_dir)
    from sb_fleet.report.writers.report_prometheus import identity

    ident = identity(result, NOW)  # the run's own identity: the manifest's id and time, config.json's hash
    assert (
        ident.run_id == "r-test"
        and ident.start == dt.datetime(2026, 11, 27, 2, tzinfo=dt.timezone.utc).timestamp()
    )
    assert ident.config_hash == "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
    text = s.render()
    promtool_check(text)
    got = samples(text)
    verdicts = {(x.labels["host"], x.labels["verdict"]): x.value for x in got["sb_fleet_host_verdict"]}
    assert verdicts[("n5", "fail")] == 1 and verdicts[("n0", "pass")] == 1 and verdicts[("n0", "fail")] == 0
    assert (
        len(verdicts) == 6 * 7
    )  # hosts x verdicts (pass, fail, incomplete, missing, flaky, unconfirmed, out_of_service)
    gate = {x.labels["host"]: x.value for x in got["sb_fleet_host_gate_failed"]}
    assert gate == {**{f"n{i}": 0 for i in range(5)}, "n5": 1}
    info = {x.labels["host"]: x.labels for x in got["sb_fleet_host_info"]}
    assert "fp32_flops" in info["n5"]["finding"] and info["n0"]["finding"] == ""
    assert got["sb_fleet_gate_passed"][0].value == 0
    assert got["sb_fleet_run_pass_ratio"][0].value == pytest.approx(5 / 6)
    run = got["sb_fleet_run_info"][0].labels
    assert run["run_id"] == "r1" and run["config_hash"] == "abc" and run["fleet"] == "t"
    assert got["sb_fleet_run_end_timestamp_seconds"][0].value == NOW.timestamp()
    # values in base units, the host's two ranks pooled by their median
    flops = {x.labels["host"]: x.value for x in got["sb_fleet_benchmark_flop_per_second"]}
    assert flops["n0"] == pytest.approx(101e9) and flops["n5"] == pytest.approx(40.4e9)
    assert all(
        x.labels["metric"] == "gemm-flops/fp32_flops" for x in got["sb_fleet_benchmark_flop_per_second"]
    )
    secs = {x.labels["host"]: x.value for x in got["sb_fleet_benchmark_seconds"]}
    assert secs["n0"] == pytest.approx(5e-6)
    rc = {(x.labels["host"], x.labels["benchmark"]) for x in got["sb_fleet_benchmark_return_code"]}
    assert ("n0", "gemm-flops") in rc and ("n0", "kernel-launch") in rc
    # per rank on request: a rank label, no pooling
    per = series(result, PromSettings(fleet="t", per_rank=True), RunIdentity("r1", None, None, 0.0)).render()
    promtool_check(per)
    ranks = {(x.labels["host"], x.labels["rank"]) for x in samples(per)["sb_fleet_benchmark_flop_per_second"]}
    assert ("n0", "0") in ranks and ("n0", "1") in ranks and len(ranks) == 12
    # OpenMetrics when asked: the same series, ending in # EOF
    om = s.render(openmetrics=True).decode()
    assert om.endswith("# EOF\n")
    assert {f.name for f in parse_openmetrics(om)} >= {
        "sb_fleet_host_verdict",
        "sb_fleet_benchmark_flop_per_second",
    }


def test_hostile_names_and_values(tmp_path: Path) -> None:
    """Host and metric names from the hosts themselves, NaN and inf: escaped, valid, never a crash."""
    rows: dict[str, dict[str, object]] = {}
    for i, host in enumerate(NASTY):
        rows[host] = {
            "gemm-flops/fp32_flops": 100.0 + i,
            'evil/na"me\\with\nnewline': 1.0,
            "evil/" + "m" * 3000: 2.0,
            "evil/ünï_节点": 3.0,
            "nan-bench/x": "NaN",
            "inf-bench/x": "Infinity",
            "huge/x": "1e400",
        }
    f = write_results(tmp_path / "r", rows)
    s, _ = run_series(f)
    for text in (s.render(), s.render(openmetrics=True)):
        promtool_check(text)
    text = s.render()
    got = samples(text)
    hosts = {x.labels["host"] for x in got["sb_fleet_host_verdict"]}
    assert hosts == {label_value(h) for h in NASTY}
    metrics = {x.labels["metric"] for x in got["sb_fleet_benchmark_value"]}
    assert label_value('evil/na"me\\with\nnewline') in metrics
    assert label_value("evil/ünï_节点") in metrics
    assert all(len(m) <= MAX_LABEL for m in metrics)
    # not finite numbers are no value: no series for them, and never NaN or inf in the file
    assert b"NaN" not in text and b"Inf" not in text
    assert not any("nan-bench" in m or "inf-bench" in m for m in metrics)
    om = s.render(openmetrics=True).decode()
    assert {x.labels["host"] for f in parse_openmetrics(om) for x in f.samples if "host" in x.labels} == hosts


def test_health_checks_worst_record_per_check(tmp_path: Path) -> None:
    f = write_results(tmp_path / "r", {"a": gemm_row(100.0), "b": gemm_row(100.0)})
    result = report(f)
    result.health = {
        "hosts": {
            "a": {
                "verdict": "fail",
                "checks": [
                    {"check": "gpu.ecc", "verdict": "pass"},
                    {"check": "gpu.ecc", "verdict": "fail"},  # another GPU's record of the same check
                    {"check": "ib.state", "verdict": "warn"},
                    {"check": "garbage"},  # no verdict: left out
                ],
                "findings": [{"check": "drift.driver", "verdict": "fail"}],
            },
            "b": {"verdict": "unknown", "problem": "no result", "checks": [], "findings": []},
            "c": "not a mapping",
        }
    }
    text = series(result, PromSettings(), RunIdentity("r", None, None, 0.0)).render()
    promtool_check(text)
    got = samples(text)
    checks = {(x.labels["host"], x.labels["check"]): x.value for x in got["sb_fleet_health_check_status"]}
    assert checks == {("a", "gpu.ecc"): 2, ("a", "ib.state"): 1, ("a", "drift.driver"): 2}
    hosts = {x.labels["host"]: x.value for x in got["sb_fleet_health_host_status"]}
    assert hosts == {"a": 2, "b": 3}


def test_streak() -> None:
    counted = ("fail", "incomplete", "missing")
    assert streak(["pass", "fail", "fail"], counted) == 2
    assert streak(["fail", "pass", "fail"], counted) == 1
    assert streak(["fail", "missing", "incomplete"], counted) == 3
    assert streak(["fail", "flaky"], counted) == 0
    assert streak([], counted) == 0


def _night(tmp: Path, name: str, day: int, slow: float) -> Path:
    rows = {f"n{i}": gemm_row(100.0) for i in range(6)}
    rows["n5"] = gemm_row(slow)
    rows["n0"]["kernel-launch/event_time"] = 0.005 + day * 1e-5  # each night's file differs
    f = write_results(tmp / name, rows)
    t = dt.datetime(2026, 11, 20 + day, 2, 0, tzinfo=dt.timezone.utc).timestamp()
    os.utime(f, (t, t))
    return f


def test_runs_in_a_row_and_history_backfill(tmp_path: Path) -> None:
    """Three nights recorded in a real history store: n5 passes, then fails twice; metrics.prom counts
    the runs in a row, and ``history --prometheus`` gives OpenMetrics with a timestamp per run that
    promtool turns into TSDB blocks (the backfill)."""
    store = tmp_path / "h.duckdb"
    out = tmp_path / "out"
    for day, slow in ((0, 100.0), (1, 40.0), (2, 40.0)):
        f = _night(tmp_path, f"night{day}", day, slow)
        res = CliRunner().invoke(report_cmd, [str(f), "--history", str(store), "--out", str(out), "-q"])
        assert res.exit_code in (0, 1), res.output
        got = samples((out / "metrics.prom").read_bytes())
        row = {x.labels["host"]: x.value for x in got["sb_fleet_host_gate_failed_runs_in_a_row"]}
        assert row["n5"] == day and row["n0"] == 0, (day, row)
    res = CliRunner().invoke(history_cmd, [str(store), "--prometheus", "--host", "n5", "--fleet", "prod"])
    assert res.exit_code == 0, res.output
    om = res.stdout
    assert om.endswith("# EOF\n")
    fams = {f.name: f for f in parse_openmetrics(om)}
    fails = [s for s in fams["sb_fleet_host_verdict"].samples if s.labels["verdict"] == "fail"]
    assert [s.value for s in fails] == [0, 1, 1]
    assert [s.timestamp for s in fails] == sorted(s.timestamp for s in fails)
    assert all(s.labels["fleet"] == "prod" for s in fails)
    assert len(fams["sb_fleet_gate_passed"].samples) == 3
    assert any(
        s.labels["metric"] == "gemm-flops/fp32_flops:0" for s in fams["sb_fleet_history_value"].samples
    )
    res = CliRunner().invoke(history_cmd, [str(store), "--prometheus", "--metric", "gemm-flops/fp32_flops"])
    assert res.exit_code == 0 and "sb_fleet_history_fleet_median" in res.stdout, res.output
    res = CliRunner().invoke(history_cmd, [str(store), "--prometheus", "--host", "nobody"])
    assert res.exit_code == 1 and "nobody" in res.stderr
    res = CliRunner().invoke(history_cmd, [str(store), "--prometheus", "--fleet", "a b"])
    assert res.exit_code == 2 and "fleet name" in res.stderr
    if PROMTOOL is not None:
        (tmp_path / "n5.om").write_text(om)
        p = subprocess.run(
            [
                PROMTOOL,
                "tsdb",
                "create-blocks-from",
                "openmetrics",
                str(tmp_path / "n5.om"),
                str(tmp_path / "tsdb"),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert p.returncode == 0, p.stdout + p.stderr
        assert any((tmp_path / "tsdb").iterdir())


# --- the ways out ------------------------------------------------------------------------------------


def _small_series(tmp_path: Path) -> Series:
    f = write_results(tmp_path / "r", {"a": gemm_row(100.0), "b/../x": gemm_row(101.0)})
    s, _ = run_series(f)
    return s


def test_textfile_per_fleet_and_per_host(tmp_path: Path) -> None:
    s = _small_series(tmp_path)
    tf = tmp_path / "textfile"
    tf.mkdir()
    check_textfile_dir(str(tf))
    assert write_textfiles(s, str(tf), "t", ["a", "b/../x"]) == []
    fleet_file = tf / "sb_fleet_t.prom"
    assert stat.S_IMODE(fleet_file.stat().st_mode) == 0o644
    assert [p.name for p in tf.iterdir()] == ["sb_fleet_t.prom"]  # no temp file left behind
    promtool_check(fleet_file.read_bytes())
    (tf / "hosts").mkdir()
    per = str(tf / "hosts" / "{host}")
    check_textfile_dir(per)  # the directory above {host} exists: each host's directory is made
    assert write_textfiles(s, per, "t", ["a", "b/../x"]) == []
    targets = textfile_targets(per, "t", ["a", "b/../x"])
    assert all(p.is_relative_to(tf / "hosts") for p in targets)  # a hostile name stays inside
    for path, host in targets.items():
        assert host is not None
        text = path.read_bytes()
        promtool_check(text)
        got = samples(text)
        assert {x.labels["host"] for x in got["sb_fleet_host_verdict"]} == {host}
        assert "sb_fleet_run_info" in got and "sb_fleet_gate_passed" not in got  # no fleet-wide series
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o755
    assert "sb_fleet_gate_passed" not in host_series(s, "a").names()


def test_textfile_dir_checks_and_failures(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not a directory"):
        check_textfile_dir(str(tmp_path / "missing"))
    with pytest.raises(UsageError, match="only field"):
        check_textfile_dir(str(tmp_path / "{node}"))
    with pytest.raises(UsageError, match="not a directory"):
        check_textfile_dir(str(tmp_path / "missing" / "{host}"))
    s = _small_series(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    warnings = write_textfiles(s, str(blocker), "t", ["a"])  # a file where the directory should be
    assert len(warnings) == 1 and "not written" in warnings[0] and "verdict" in warnings[0]


def _closed_port() -> int:
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


def test_unreachable_gateway_is_a_warning(tmp_path: Path) -> None:
    s = _small_series(tmp_path)
    w = push(s, f"http://127.0.0.1:{_closed_port()}", "t", timeout=5)
    assert w is not None and "not pushed" in w and "refused" in w.lower(), w
    assert push(s, "http://[::1", "t") is not None  # a malformed URL: a warning too
    with socket.socket() as silent:  # accepts the connection, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        w = push(s, f"127.0.0.1:{silent.getsockname()[1]}", "t", timeout=0.5)
        assert w is not None and "timed out" in w, w
    out = publish(s, PromOutputs(pushgateway=f"http://127.0.0.1:{_closed_port()}", push_timeout=2), ["a"])
    assert len(out) == 1


def test_report_exit_code_stands_when_the_gateway_is_down(tmp_path: Path) -> None:
    rows = {f"n{i}": gemm_row(100.0) for i in range(6)}
    rows["n5"] = gemm_row(40.0)
    f = write_results(tmp_path / "r", rows)
    base = CliRunner().invoke(report_cmd, [str(f), "--out", str(tmp_path / "o1"), "-q"])
    down = CliRunner().invoke(
        report_cmd,
        [str(f), "--out", str(tmp_path / "o2"), "-q", "--pushgateway", f"http://127.0.0.1:{_closed_port()}"],
    )
    assert base.exit_code == down.exit_code == 1, (base.output, down.output)
    assert "WARNING: pushgateway" in down.stderr and "the verdict and exit code stand" in down.stderr
    assert (tmp_path / "o2" / "metrics.prom").is_file()
    bad = CliRunner().invoke(
        report_cmd, [str(f), "--out", str(tmp_path / "o3"), "--textfile-dir", "/nonexistent/x"]
    )
    assert bad.exit_code == 2 and "--textfile-dir" in bad.stderr and "Traceback" not in bad.output
    om = CliRunner().invoke(report_cmd, [str(f), "--out", str(tmp_path / "o4"), "-q", "--openmetrics"])
    assert om.exit_code == 1 and (tmp_path / "o4" / "metrics.prom").read_text().endswith("# EOF\n")


def test_bounded_cardinality(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Names beyond the bounds are left out, and counted; the worst health checks are kept."""
    from sb_fleet.report.writers import report_prometheus as rp

    monkeypatch.setattr(rp, "MAX_METRICS", 2)
    monkeypatch.setattr(rp, "MAX_BENCHMARKS", 1)
    monkeypatch.setattr(rp, "MAX_CHECKS", 1)
    row: dict[str, object] = {f"b{j}/m{k}": 1.0 for j in range(3) for k in range(2)}
    row.update({f"b{j}/return_code": 0 for j in range(3)})
    f = write_results(tmp_path / "r", {"a": row, "b": row})
    result = report(f)
    result.health = {
        "hosts": {
            "a": {
                "verdict": "fail",
                "checks": [{"check": "x", "verdict": "pass"}, {"check": "y", "verdict": "fail"}],
            }
        }
    }
    got = samples(series(result, PromSettings(), RunIdentity("r", None, None, 0.0)).render())
    left = {x.labels["kind"]: x.value for x in got["sb_fleet_exposition_left_out"]}
    assert left == {"metrics": 4, "benchmarks": 2, "health_checks": 1}
    assert len({x.labels["metric"] for x in got["sb_fleet_benchmark_value"]}) == 2
    assert [x.labels["check"] for x in got["sb_fleet_health_check_status"]] == ["y"]  # the failing one


def test_validate_refuses_bad_prometheus_options_before_any_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sb_fleet.cli.main import main

    monkeypatch.chdir(tmp_path)  # a run directory would appear here: none must
    bad_fleet = CliRunner().invoke(main, ["validate", "--fleet", "a b", "--quiet"])
    assert bad_fleet.exit_code == 2 and "fleet name" in bad_fleet.stderr, bad_fleet.output
    no_dir = CliRunner().invoke(main, ["validate", "--textfile-dir", str(tmp_path / "nope"), "--quiet"])
    assert no_dir.exit_code == 2 and "--textfile-dir" in no_dir.stderr, no_dir.output
    assert "Traceback" not in bad_fleet.output + no_dir.output
    assert not (tmp_path / "runs").exists()


def test_push_credentials_are_basic_auth_and_never_shown(tmp_path: Path) -> None:
    """A real HTTP server on loopback that wants basic authentication, as a Pushgateway behind a proxy."""
    import base64
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen: list[tuple[str, str, str | None]] = []

    class Gateway(BaseHTTPRequestHandler):
        def do_PUT(self) -> None:  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            auth = self.headers.get("Authorization")
            seen.append(("PUT", self.path, auth))
            ok = auth == "Basic " + base64.b64encode(b"ops:s3cr@t").decode()
            self.send_response(200 if ok else 401)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Gateway)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        s = _small_series(tmp_path)
        port = srv.server_address[1]
        assert push(s, f"http://ops:s3cr%40t@127.0.0.1:{port}", "prod", timeout=5) is None
        assert seen[-1][1] == "/metrics/job/sb-fleet/fleet/prod"  # the group: job and fleet
        w = push(s, f"http://ops:wrong@127.0.0.1:{port}", "prod", timeout=5)
        assert w is not None and "401" in w and "wrong" not in w and "ops" not in w, w
    finally:
        srv.shutdown()
        srv.server_close()
