"""Where log records go: sb-fleet's own to the console, every library's to the run directory.

The console is for sb-fleet's own lines (one per host and problem). What libraries log (paramiko's
``paramiko.transport`` tracebacks when an sshd resets a connection, ansible-runner, urllib3, the warnings
they raise through :mod:`warnings` ...) goes to
``<run>/logs/libraries.log`` (private: the directory 0700, the file 0600), with its time, level, logger
and thread, and the console gets one line at the end saying how many warning and error lines are there.

:func:`install` (the CLI's ``main``) sets this up on the root logger. Library records are held in memory
(the last :data:`BUFFER` of them) until the command's run directory is known: :func:`attach`, called
when a run is created or opened for a command (:mod:`sb_fleet.rundir.runinputs`), writes them to the
file and sends every later one there; the first run directory of a command keeps the log (a sub-run
such as ``confirm/`` lies inside it). :func:`finish` (the CLI guard, when the command ends) closes the
file and prints the one line; a command that never had a run directory (``report``, ``compare`` ...)
prints its held library records on stderr then, as they would have been printed before.

Without :func:`install` (sb-fleet used as a library, the unit tests), nothing here touches logging.
"""

from __future__ import annotations

import collections
import logging
import os
import sys
import threading
from pathlib import Path
from typing import IO

LIBRARY_LOG = "logs/libraries.log"
OWN = ("sb_fleet", "sb_bench")  # sb-fleet's own loggers (and their children): the console's
BUFFER = 10_000  # library records held before the run directory is known
MAX_BYTES = 64 << 20  # the log file's size limit: records past it are counted, not written
CONSOLE_FORMAT = "%(levelname)s %(name)s: %(message)s"
FILE_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(threadName)s]: %(message)s"


def is_own(record: logging.LogRecord) -> bool:
    return any(record.name == o or record.name.startswith(o + ".") for o in OWN)


class _Console(logging.StreamHandler):
    """sb-fleet's own records on stderr (looked up when emitting: click's test runner swaps it)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter(CONSOLE_FORMAT))
        self.addFilter(is_own)

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


class LibraryLog(logging.Handler):
    """Every record that is not sb-fleet's own: held, then written to the run directory's log file."""

    def __init__(self) -> None:
        super().__init__()
        self.addFilter(lambda r: not is_own(r))
        self.setFormatter(logging.Formatter(FILE_FORMAT))
        self.held: collections.deque[logging.LogRecord] = collections.deque(maxlen=BUFFER)
        self.path: Path | None = None
        self.stream: IO[str] | None = None
        self.written = 0
        self.dropped = 0  # records past MAX_BYTES, or held records pushed out of the buffer
        self.loud: collections.Counter[str] = collections.Counter()  # library -> warning/error lines
        self.guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            with self.guard:
                if record.levelno >= logging.WARNING:  # counted per library ("paramiko.transport")
                    self.loud[".".join(record.name.split(".")[:2])] += 1
                if self.stream is None:
                    if len(self.held) == self.held.maxlen:
                        self.dropped += 1
                    self.held.append(record)
                    return
                self._write(record)
        except Exception:  # noqa: BLE001 - logging must never break the command
            self.handleError(record)

    def _write(self, record: logging.LogRecord) -> None:
        assert self.stream is not None
        text = self.format(record) + "\n"
        if self.written + len(text) > MAX_BYTES:
            self.dropped += 1
            return
        self.stream.write(text)
        self.stream.flush()
        self.written += len(text)

    def attach(self, run_dir: Path) -> None:
        """Write the held records, and every later one, to ``run_dir/logs/libraries.log``."""
        with self.guard:
            if self.stream is not None:
                return
            path = Path(run_dir) / LIBRARY_LOG
            try:
                path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
            except OSError as exc:  # the records stay held and reach stderr at the end
                print(f"sb-fleet: warning: cannot write {path} ({exc.strerror})", file=sys.stderr)
                return
            os.fchmod(fd, 0o600)
            self.stream = os.fdopen(fd, "a", encoding="utf-8", errors="replace")
            self.path = path
            while self.held:
                self._write(self.held.popleft())

    def finish(self) -> str | None:
        """Close the file; the console's line about it (None: nothing to say). Records still held (no
        run directory was attached) go to stderr."""
        with self.guard:
            stream, self.stream = self.stream, None
            held, self.held = list(self.held), collections.deque(maxlen=BUFFER)
        if stream is not None:
            stream.close()
        if held:
            fmt = logging.Formatter(CONSOLE_FORMAT)
            for r in held:
                print(fmt.format(r), file=sys.stderr)
            return None
        if self.path is None or not self.loud:
            return None
        n = sum(self.loud.values())
        names = ", ".join(name for name, _ in self.loud.most_common(3))
        more = f" and {len(self.loud) - 3} more" if len(self.loud) > 3 else ""
        cut = f" ({self.dropped} past its {MAX_BYTES >> 20} MiB limit not written)" if self.dropped else ""
        return f"sb-fleet: libraries logged {n} warning/error line(s) ({names}{more}): see {self.path}{cut}"


_current: LibraryLog | None = None


def install(level: int) -> None:
    """The root logger at ``level``: sb-fleet's records on stderr, the libraries' held for the run."""
    global _current
    root = logging.getLogger()
    for h in list(root.handlers):
        if isinstance(h, (_Console, LibraryLog)):
            root.removeHandler(h)
            h.close()
    root.setLevel(level)
    logging.captureWarnings(True)  # a library's warnings.warn (cryptography's deprecations) too: py.warnings
    _current = LibraryLog()
    root.addHandler(_Console())
    root.addHandler(_current)


def attach(run_dir: Path) -> None:
    """The command's run directory is known: the library records go to its log file (a no-op without
    :func:`install`, and once a run directory is attached)."""
    if _current is not None:
        _current.attach(run_dir)


def finish() -> None:
    """The command ends: close the log file and say on stderr what went there."""
    global _current
    cur, _current = _current, None
    if cur is None:
        return
    logging.getLogger().removeHandler(cur)
    logging.captureWarnings(False)
    line = cur.finish()
    if line:
        print(line, file=sys.stderr)
