"""The report's plot helper process: used for large results only, and never costs a plot when it fails."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sb_fleet.report.writers import plot_worker

TWO_CORES = pytest.mark.skipif(
    (os.cpu_count() or 1) < 2, reason="the helper is used on machines with two cores or more"
)


def pid() -> str:
    return str(os.getpid())


def hangs_in_the_helper(parent: int) -> str:
    if os.getpid() != parent:
        threading.Event().wait(60)  # the helper hangs; the parent draws at once
    return str(os.getpid())


def pid_and(x: str) -> str:
    return f"{os.getpid()}:{x}"


def pid_and_hangs_in_the_helper(parent: int, x: str) -> str:
    if os.getpid() != parent:
        threading.Event().wait(60)
    return pid_and(x)


def _results(tmp_path: Path, size: int) -> Path:
    p = tmp_path / "results-summary.jsonl"
    with p.open("wb") as f:
        f.truncate(size)  # sparse: only its size matters here
    return p


@pytest.fixture
def ran_apart(request: pytest.FixtureRequest) -> bool:
    """The helper is forked only from a process with one thread (as the CLI is); a pytest process that
    other tests left threads in runs this test in a fresh pytest process instead. True when it did."""
    if threading.active_count() == 1:
        return False
    node = f"{Path(__file__).resolve()}::{request.node.name}"
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", node],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    return True


def test_a_process_with_threads_draws_here(tmp_path: Path) -> None:
    stop = threading.Event()
    t = threading.Thread(target=stop.wait, daemon=True)
    t.start()
    try:
        with plot_worker.started(_results(tmp_path, plot_worker.LARGE_BYTES)):
            assert plot_worker.draw(pid) == pid()  # forking a threaded process is unsafe: no helper
    finally:
        stop.set()
        t.join()


def test_small_results_draw_in_this_process(tmp_path: Path) -> None:
    src = _results(tmp_path, 1000)
    with plot_worker.started(src):
        assert plot_worker.draw(pid) == pid()
    with plot_worker.started(tmp_path / "absent.jsonl"):  # a missing file: no helper, no error
        assert plot_worker.draw(pid) == pid()


@TWO_CORES
def test_large_results_draw_in_the_helper_and_a_dead_helper_costs_nothing(
    tmp_path: Path, ran_apart: bool
) -> None:
    if ran_apart:
        return
    src = _results(tmp_path, plot_worker.LARGE_BYTES)
    with plot_worker.started(tmp_path):  # a run directory: its results-summary.jsonl decides
        helper = plot_worker.draw(pid)
        assert helper != pid()
        os.kill(int(helper), signal.SIGKILL)  # the helper dies: the next plot is drawn here
        assert plot_worker.draw(pid) == pid()
    assert plot_worker.draw(pid) == pid()  # after the block: no helper
    with plot_worker.started(src):  # a fresh block starts a fresh helper
        assert plot_worker.draw(pid) != pid()


@TWO_CORES
def test_plots_asked_for_together_each_get_their_own_answer_read_in_any_order(
    tmp_path: Path, ran_apart: bool
) -> None:
    if ran_apart:
        return
    with plot_worker.started(_results(tmp_path, plot_worker.LARGE_BYTES)):
        asked = [plot_worker.submit(pid_and, x) for x in ("a", "b", "c")]  # all sent before any is read
        answers = [asked[i]() for i in (2, 0, 1)]
        helper = answers[0].split(":")[0]
        assert helper != pid()
        assert answers == [f"{helper}:c", f"{helper}:a", f"{helper}:b"]
        assert asked[2]() == f"{helper}:c"  # read again: the same answer
        waiting = [plot_worker.submit(pid_and_hangs_in_the_helper, os.getpid(), "d")]
        waiting.append(plot_worker.submit(pid_and, "e"))
        os.kill(int(helper), signal.SIGKILL)  # dies with two plots unanswered: both are drawn here
        assert [w() for w in waiting] == [pid_and("d"), pid_and("e")]


@TWO_CORES
def test_a_hung_helper_is_stopped_and_the_plot_drawn_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ran_apart: bool
) -> None:
    if ran_apart:
        return
    with plot_worker.started(_results(tmp_path, plot_worker.LARGE_BYTES)):
        assert plot_worker.draw(pid) != pid()  # the helper answers (its imports done, whatever the load)
        monkeypatch.setattr(plot_worker, "ANSWER_S", 1.0)
        t0 = time.monotonic()
        assert plot_worker.draw(hangs_in_the_helper, os.getpid()) == pid()
        assert time.monotonic() - t0 < 30
        assert plot_worker.draw(pid) == pid()  # no more plots go to it


def test_a_real_plot_is_the_same_from_the_helper(tmp_path: Path, ran_apart: bool) -> None:
    if ran_apart:
        return
    pytest.importorskip("matplotlib")
    from sb_fleet.analysis.figures.figures import Curve
    from sb_fleet.report.writers.figure_plots import collective_svg

    curve = Curve(
        benchmark="nccl-bw",
        op="allreduce",
        unit="GB/s",
        sizes=(1024, 1 << 20, 1 << 30),
        busbw=(1.0, 50.0, 180.0),
        algbw=(0.6, 28.0, 100.0),
        busbw_p5=(0.9, 45.0, 170.0),
        busbw_p95=(1.1, 55.0, 185.0),
        peak=None,
    )
    here = collective_svg([curve])
    with plot_worker.started(_results(tmp_path, plot_worker.LARGE_BYTES)):
        assert plot_worker.draw(collective_svg, [curve]) == here
