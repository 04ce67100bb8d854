"""metrics.prom written by two processes (the benchmark families by a forked child during the analysis,
the rest appended after it: sb_fleet/report/writers/prom_early.py) against the file one process writes:
the same samples, each family whole and once, valid for Prometheus's own parser (and promtool where
installed), OpenMetrics' ``# EOF`` once and last, with hostile host and metric names; a child that fails
leaves the whole file written in-process; leaving early (Ctrl-C, an error) kills the child and leaves no
temporary file and no empty directory."""

from __future__ import annotations

import datetime as dt
import os
import threading
import time
from pathlib import Path

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_families
from prometheus_client.parser import text_string_to_metric_families

from sb_fleet.analysis.fleet_results import load_fleet
from sb_fleet.report.analyse import report, write_reports
from sb_fleet.report.writers import prom_early
from sb_fleet.report.writers import report_prometheus as prom

from .test_prometheus_export import NASTY, gemm_row, promtool_check, write_results


@pytest.fixture
def run(tmp_path: Path) -> Path:
    rows = {f"host-{i:03d}": gemm_row(100.0 + i % 7) for i in range(40)}
    for i, name in enumerate(NASTY):
        rows[name] = gemm_row(90.0 + i) | {'odd/"metric"\\x:0': 1.5, "kernel-launch/return_code": 0}
    return write_results(tmp_path / "run", rows)


def lines(text: bytes) -> set[str]:
    """Every line but the run's end time (each file is made at its own moment)."""
    return {ln for ln in text.decode().splitlines() if not ln.startswith("sb_fleet_run_end_timestamp")}


def whole(src: Path, settings: prom.PromSettings) -> bytes:
    """The file as one process writes it."""
    result = report(src)
    return prom.render(result, settings, dt.datetime.now(dt.timezone.utc))


def alone_in_this_process(limit: float = 30.0) -> None:
    """Wait for other tests' threads to end: the child is forked only from a process with one thread (a
    fork copies no other thread; CI, 2026-11-29: an earlier test's thread still ending made it None)."""
    deadline = time.monotonic() + limit
    while threading.active_count() != 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    others = [t.name for t in threading.enumerate() if t is not threading.main_thread()]
    assert not others, f"threads still running in this test process after {limit:g} s: {others}"


def two_processes(src: Path, out: Path, settings: prom.PromSettings) -> bytes:
    fleet = load_fleet(src)
    alone_in_this_process()
    with prom_early.started(fleet, settings, out / "metrics.prom") as part:
        assert part is not None
        result = report(src, loaded=fleet)
        write_reports(result, out, settings, None, part)
    return (out / "metrics.prom").read_bytes()


@pytest.mark.parametrize("openmetrics", [False, True], ids=["text", "openmetrics"])
def test_two_processes_write_the_file_one_writes(run, tmp_path, monkeypatch, openmetrics):
    monkeypatch.setattr(prom_early, "LARGE_CELLS", 1)
    settings = prom.PromSettings(openmetrics=openmetrics)
    got = two_processes(run, tmp_path / "out", settings)
    want = whole(run, settings)
    assert lines(got) == lines(want) and len(got.splitlines()) == len(want.splitlines())
    names = [ln.split()[2] for ln in got.decode().splitlines() if ln.startswith("# TYPE ")]
    assert len(names) == len(set(names)) and "sb_fleet_benchmark_value" in names  # each family whole, once
    assert names.index("sb_fleet_benchmark_return_code") < names.index(
        "sb_fleet_run_info"
    )  # the child's first
    if openmetrics:
        assert got.endswith(b"\n# EOF\n") and got.count(b"# EOF") == 1
        families = list(om_families(got.decode()))
    else:
        families = list(text_string_to_metric_families(got.decode()))
        promtool_check(got)
    assert sum(len(f.samples) for f in families) == sum(
        1 for ln in got.splitlines() if not ln.startswith(b"#")
    )
    assert [p.name for p in (tmp_path / "out").iterdir() if p.name.startswith(".")] == []
    assert oct((tmp_path / "out" / "metrics.prom").stat().st_mode & 0o777) == oct(0o644)


def test_a_child_that_fails_leaves_the_file_written_here(run, tmp_path, monkeypatch):
    monkeypatch.setattr(prom_early, "LARGE_CELLS", 1)

    def broken(*_a: object) -> None:
        raise MemoryError("the child ran out of memory")

    monkeypatch.setattr(prom, "benchmark_series", broken)  # the forked child inherits it
    settings = prom.PromSettings()
    fleet = load_fleet(run)
    out = tmp_path / "out"
    alone_in_this_process()
    with prom_early.started(fleet, settings, out / "metrics.prom") as part:
        assert part is not None
        result = report(run, loaded=fleet)
        monkeypatch.undo()  # this process renders the whole file itself now
        write_reports(result, out, settings, None, part)
    assert not part.done
    assert lines((out / "metrics.prom").read_bytes()) == lines(whole(run, settings))
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []


def test_leaving_early_kills_the_child_and_leaves_nothing(run, tmp_path, monkeypatch):
    monkeypatch.setattr(prom_early, "LARGE_CELLS", 1)
    out = tmp_path / "deep" / "out"
    fleet = load_fleet(run)
    alone_in_this_process()
    with (
        pytest.raises(KeyboardInterrupt),
        prom_early.started(fleet, prom.PromSettings(), out / "metrics.prom") as part,
    ):
        assert part is not None and part.tmp.parent == out
        raise KeyboardInterrupt
    assert not (tmp_path / "deep").exists()  # the directories it made, empty, are gone
    with pytest.raises(ChildProcessError):
        os.waitpid(part.pid, os.WNOHANG)  # reaped


def test_small_results_or_another_thread_render_in_process(run, tmp_path, monkeypatch):
    fleet = load_fleet(run)
    with prom_early.started(fleet, prom.PromSettings(), tmp_path / "o" / "metrics.prom") as part:
        assert part is None  # 51 hosts: below the size where a fork pays off
    assert not (tmp_path / "o").exists()
    monkeypatch.setattr(prom_early, "LARGE_CELLS", 1)
    monkeypatch.setattr(prom_early.threading, "active_count", lambda: 2)
    with prom_early.started(fleet, prom.PromSettings(), tmp_path / "o" / "metrics.prom") as part:
        assert part is None  # forking a process with threads is unsafe
