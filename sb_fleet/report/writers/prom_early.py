"""metrics.prom's benchmark families rendered in a forked child while the parent judges the run.

At 10,000 hosts x 150 metrics metrics.prom is ~70 MB, nearly all of it the benchmark families (each
host's value of each metric, each benchmark's return code): about 0.35 s of one core to build, render
and write, after an analysis of about 0.5 s that runs on the other. Those families need the results
only, not the judgement, so once the results are loaded :func:`started` forks a child that renders them
into metrics.prom's temporary file (``.metrics.prom.<random>.tmp`` beside it, which this process made and
owns) while this process analyses; :meth:`BenchmarkPart.finish` then appends the rest (the run, the gate,
the hosts' verdicts, the health checks: :func:`report_prometheus.series` with ``benchmarks=False``),
fsyncs and renames it over metrics.prom. The families come benchmark first; the text is otherwise what
one process writes (each family whole, with its HELP and TYPE; OpenMetrics' ``# EOF`` last).

Only for large results, with ``fork`` and no other thread running (forking a threaded process is
unsafe). A child that fails, dies or does not answer in time costs nothing but its time:
:meth:`finish` says so and the caller writes metrics.prom in-process; the temporary file is removed
whatever happens (Ctrl-C included) and the child is killed if it still runs.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from sb_fleet.errors import InfraError

if TYPE_CHECKING:
    from sb_fleet.analysis.fleet_results import Fleet
    from sb_fleet.report.writers.report_prometheus import PromSettings

LARGE_CELLS = 300_000  # hosts x result columns (2,000 hosts of 150 metrics): rendering outlasts a fork
ANSWER_S = 120.0  # the longest wait for the child once the parent needs its part


class BenchmarkPart:
    """The child rendering the benchmark families into ``tmp`` (metrics.prom's temporary file)."""

    def __init__(self, pid: int, ready: int, tmp: Path, path: Path) -> None:
        self.pid = pid
        self.ready = ready  # the read end of the child's pipe: b"ok" once its part is written
        self.tmp = tmp
        self.path = path
        self.done = False  # finish renamed tmp over path
        self.reaped = False

    def _reap(self, kill: bool) -> int | None:
        """The child's exit status (None: it had to be killed, or was gone already)."""
        if self.reaped:
            return None
        self.reaped = True
        if kill:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        try:
            _, status = os.waitpid(self.pid, 0)
        except ChildProcessError:
            return None
        return None if kill else os.waitstatus_to_exitcode(status)

    def _answered(self) -> bool:
        """Whether the child wrote its part and exited 0, waiting up to :data:`ANSWER_S`."""
        deadline = time.monotonic() + ANSWER_S
        got = b""
        while len(got) < 2:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.ready], [], [], left)[0]:
                self._reap(kill=True)
                return False
            chunk = os.read(self.ready, 2 - len(got))
            if not chunk:  # the child died without a word
                break
            got += chunk
        return got == b"ok" and self._reap(kill=False) == 0

    def finish(self, rest: bytes) -> bool:
        """Append ``rest`` (the other families) to the child's part, fsync and rename it to metrics.prom;
        False when the child's part did not come (the caller writes the whole file itself)."""
        if not self._answered():
            return False
        try:
            fd = os.open(self.tmp, os.O_WRONLY | os.O_APPEND)
            try:
                view = memoryview(rest)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(self.tmp, self.path)
        except OSError as exc:
            raise InfraError(f"{self.path}: cannot write ({exc.strerror})") from exc
        self.done = True
        return True

    def close(self) -> None:
        self._reap(kill=True)
        os.close(self.ready)
        if not self.done:
            with contextlib.suppress(OSError):
                os.unlink(self.tmp)


def worth_it(fleet: Fleet) -> bool:
    return fleet.values.size >= LARGE_CELLS and (os.cpu_count() or 1) > 1


def _child(fleet: Fleet, settings: PromSettings, fd: int, ready: int) -> None:
    """In the forked child: render, write, say so; never returns (``os._exit``: no atexit, no cleanup of
    what the parent owns)."""
    code = 1
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's: it kills this child
        from sb_fleet.report.writers.report_prometheus import benchmark_series

        view = memoryview(benchmark_series(fleet, settings).render(settings.openmetrics, end=False))
        while view:
            view = view[os.write(fd, view) :]
        # Its ~70 MB go to disk here, beside the parent's work: the parent's fsync has only its own tail.
        os.fsync(fd)
        os.write(ready, b"ok")
        code = 0
    finally:
        os._exit(code)


@contextlib.contextmanager
def started(fleet: Fleet, settings: PromSettings, path: Path) -> Iterator[BenchmarkPart | None]:
    """A child rendering ``fleet``'s benchmark families for metrics.prom at ``path``, when worth it and
    safe; None otherwise. Leaving the block kills a child still running and removes what is unused."""
    if not worth_it(fleet) or not hasattr(os, "fork") or threading.active_count() != 1:
        yield None
        return
    made = [p for p in (path.parent, *path.parent.parents) if not p.exists()]  # removed again, if unused
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError:
        _remove_empty(made)
        yield None  # the writers say what is wrong with the directory
        return
    part = None
    try:
        os.fchmod(fd, 0o644)
        ready, tell = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            os.close(ready)
            os.close(tell)
            raise
        if pid == 0:  # pragma: no cover - the child: coverage does not follow it
            os.close(ready)
            _child(fleet, settings, fd, tell)
        os.close(tell)
        part = BenchmarkPart(pid, ready, Path(tmp), path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    finally:
        os.close(fd)
    if part is None:
        _remove_empty(made)
        yield None
        return
    try:
        yield part
    finally:
        part.close()
        _remove_empty(made)  # a report that failed before its files leaves no empty directory behind


def _remove_empty(made: list[Path]) -> None:
    """The directories :func:`started` made (deepest first), where nothing else was put in them."""
    for d in made:
        try:
            d.rmdir()
        except OSError:
            return
