"""Plots drawn in a helper process that imports matplotlib while the report is being analysed.

Importing matplotlib costs about half a second, as much as analysing 5,000 hosts. For a large run
the report command starts one helper process first (``started``); it imports matplotlib and the
plot functions while the parent parses and judges the results, so on any machine with two cores the
import costs no wall time. ``submit`` sends a plot's data there as soon as it is known and returns a
function that reads its SVG when the page needs it, so the helper draws while the parent renders the
other files; ``draw`` is both at once. With no helper (small runs, library callers, the tests'
in-process reports) plots are drawn in-process. A helper
that cannot start, dies or does not answer in time never costs the report: the plot is drawn here.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, cast

LARGE_BYTES = 4_000_000  # results of about 600 hosts: their analysis outlasts the import
ANSWER_S = 120.0  # one plot's longest wait for the helper, its start-up included


class _Helper:
    def __init__(self, process: Any, conn: Connection) -> None:
        self.process = process
        self.conn = conn

    def stop(self) -> None:
        self.conn.close()
        self.process.kill()
        self.process.join(5)


_helper: _Helper | None = None


def warm() -> None:
    """What drawing needs, imported up front: matplotlib, the plots, their data types."""
    import matplotlib.figure  # noqa: F401

    import sb_fleet.analysis.figures.figures  # noqa: F401  (unpickling the plots' data)
    import sb_fleet.analysis.figures.power  # noqa: F401
    import sb_fleet.report.writers.figure_plots  # noqa: F401


def serve(conn: Connection) -> None:
    """The helper: imports, then draws each (plot, args) it receives until the pipe closes."""
    # Ctrl-C reaches the whole process group: the parent handles it and stops the helper.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(Exception):
        warm()  # a failed import shows when a plot fails: the parent then draws it (and fails) itself
    while True:
        try:
            plot, args = conn.recv()
        except (EOFError, OSError):
            return
        try:
            answer: tuple[bool, Any] = (True, plot(*args))
        except Exception as exc:  # noqa: BLE001 - the parent draws it again and sees the error itself
            answer = (False, repr(exc))
        conn.send(answer)


def worth_it(source: Path) -> bool:
    """A helper pays off when the results to analyse are large (a file, or a run directory's)."""
    path = source / "results-summary.jsonl" if source.is_dir() else source
    try:
        return path.stat().st_size >= LARGE_BYTES and (os.cpu_count() or 1) > 1
    except OSError:
        return False


@contextlib.contextmanager
def started(source: Path) -> Iterator[None]:
    """Within this block, ``draw`` uses a helper process started now (only for large results)."""
    global _helper
    # fork: the helper starts as a copy of this process (nothing imported twice, no script run again);
    # only while this process has one thread, as forking a threaded process is unsafe.
    if (
        _helper is not None
        or not worth_it(source)
        or "fork" not in multiprocessing.get_all_start_methods()
        or threading.active_count() != 1
    ):
        yield
        return
    ctx = multiprocessing.get_context("fork")
    mine, theirs = ctx.Pipe()
    try:
        process = ctx.Process(target=serve, args=(theirs,), name="sb-fleet-plots", daemon=True)
        process.start()
    except OSError:
        yield
        return
    finally:
        theirs.close()
    helper = _helper = _Helper(process, mine)
    try:
        yield
    finally:
        _helper = None
        _waiting.clear()
        helper.stop()


class _Ticket:
    """One plot asked of the helper; its answer arrives in the order the plots were sent."""

    def __init__(self, plot: Callable[..., str], args: tuple[Any, ...]) -> None:
        self.plot = plot
        self.args = args
        self.answered = False
        self.ok = False
        self.svg = ""


_waiting: list[_Ticket] = []  # sent to the helper, answer not yet read (oldest first)


def _give_up() -> None:
    """The helper died or hung: stop it; the plots still waiting are drawn here."""
    global _helper
    helper, _helper = _helper, None
    if helper is not None:
        helper.stop()
    _waiting.clear()


def _answer(ticket: _Ticket) -> None:
    """Read the helper's answers, oldest first, until ``ticket``'s has come (or the helper failed)."""
    helper = _helper
    while not ticket.answered and helper is not None and _waiting:
        try:
            if not helper.conn.poll(ANSWER_S):  # too slow: no more plots go there
                _give_up()
                return
            ok, answer = helper.conn.recv()
        except (OSError, EOFError, ValueError):
            _give_up()
            return
        first = _waiting.pop(0)
        first.answered, first.ok = True, bool(ok)
        if ok:
            first.svg = cast(str, answer)


def submit(plot: Callable[..., str], *args: Any) -> Callable[[], str]:
    """Ask for ``plot(*args)`` now; the returned function gives its SVG. With a helper running, the
    plot is drawn there while this process goes on (the function then waits for it); otherwise, or
    when the helper fails, the function draws it here."""
    ticket = _Ticket(plot, args)
    helper = _helper
    if helper is not None:
        try:
            helper.conn.send((plot, args))
            _waiting.append(ticket)
        except (OSError, EOFError, ValueError):  # the helper died: the rest are drawn here
            _give_up()

    def svg() -> str:
        if ticket in _waiting:
            _answer(ticket)
        if ticket.answered and ticket.ok:
            return ticket.svg
        return plot(*args)

    return svg


def draw(plot: Callable[..., str], *args: Any) -> str:
    """``plot(*args)``: in the helper when one is running, else (or if it fails) here."""
    return submit(plot, *args)()
