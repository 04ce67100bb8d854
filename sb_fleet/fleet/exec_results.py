"""A host's results on its exec's stdout (issue 37): split off as they stream in, spooled, read back.

validate's nightly exec can end with the host's results directory on its own stdout, after a marker line
whose value is random per run (sb_bench.host.ship_results): collect then needs no session on the host
(a login shell, ``find``, ``sha256sum`` and ``tar`` there, an ssh client here, twice). What follows the
marker is untrusted like everything a host sends: it is spooled to a private file, at most ``cap``
bytes (past that it is dropped, and collect fetches over SSH as before), and read back by collect's own
bounded parsers and budgets (sb_fleet.fleet.fetch). Anything wrong with it costs only the fast path:
that host is collected over SSH.

The spool, after the marker line: ``<N>\\n``, N bytes of listing and checksums (collect's listing
command's output), then a tar stream to the end.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

from sb_fleet.fleet.channels import BoundedStream

HEAD_DIGITS = 20  # the length line: at most this many digits


class Sink(Protocol):
    def add(self, data: bytes) -> None: ...


class ResultsSplit:
    """One exec's stdout: what comes before ``\\n<marker>\\n`` goes to ``text``, what follows into the
    spool file ``path`` (created here, mode 0600), at most ``cap`` bytes."""

    def __init__(self, text: Sink, marker: bytes, path: Path, cap: int):
        self.text = text
        self.pattern = b"\n" + marker + b"\n"
        self.path = path
        self.cap = cap
        self.pending = b""  # the end of the text so far that may be the start of the marker
        self.found = False
        self.over = False
        self.size = 0
        self._fd = -1

    def add(self, data: bytes) -> None:
        if self.found:
            self._spool(data)
            return
        buf = self.pending + data
        i = buf.find(self.pattern)
        if i < 0:
            keep = min(len(buf), len(self.pattern) - 1)
            self.text.add(buf[: len(buf) - keep])
            self.pending = buf[len(buf) - keep :]
            return
        self.text.add(buf[:i])
        self.pending = b""
        self.found = True
        try:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except OSError:
            self.over = True  # no spool (the control node's disk): collect fetches over SSH
        self._spool(buf[i + len(self.pattern) :])

    def _spool(self, data: bytes) -> None:
        if self.over or not data:
            return
        self.size += len(data)
        if self.size > self.cap:
            self.over = True
            self._drop()
            return
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError:
            self.over = True
            self._drop()

    def _drop(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
            self.path.unlink(missing_ok=True)

    def finish(self, keep: bool) -> Path | None:
        """The stream ended: the spool's path where ``keep`` (the exec ended by itself) and it is whole
        (within its cap), else None and no file. A marker never seen leaves the text as it was."""
        if not self.found:
            self.text.add(self.pending)
            self.pending = b""
            return None
        if not keep or self.over:
            self._drop()
            return None
        os.close(self._fd)
        self._fd = -1
        return self.path


class SpoolError(Exception):
    """The spool is not what an exec's results are (collect fetches over SSH)."""


class _Section(BoundedStream):
    """Bytes ``start`` to ``end`` of a file, read as a collect channel (at most ``limit`` bytes, else
    HostRefused, as from a host); ``exit_status`` 0: a whole spool is a finished command."""

    def __init__(self, path: Path, start: int, end: int | None, limit: int, what: str):
        self.f = open(path, "rb")  # noqa: SIM115 - closed at its end or by exit_status
        self.f.seek(start)
        self.left = (end - start) if end is not None else None
        self.limit, self.what, self.total = limit, what, 0

    def read(self, n: int = -1) -> bytes:
        want = 1 << 16 if n is None or n < 0 else min(n, 1 << 16)
        if self.left is not None:
            want = min(want, self.left)
        data = self.f.read(want) if want > 0 else b""
        if self.left is not None:
            self.left -= len(data)
        if not data:
            self.f.close()
        return self.counted(data)

    def exit_status(self) -> tuple[int, str]:
        self.f.close()
        return 0, ""


class Spool:
    """A spool read back: its listing section and, as often as asked, its tar section."""

    def __init__(self, path: Path):
        self.path = path
        with open(path, "rb") as f:
            line = f.read(HEAD_DIGITS + 1)
        digits, nl, _ = line.partition(b"\n")
        if not nl or not digits.isdigit():
            raise SpoolError("no length line after the marker")
        self.head_at = len(digits) + 1
        self.tar_at = self.head_at + int(digits)
        if self.tar_at > path.stat().st_size:
            raise SpoolError("shorter than its length line says")

    def listing(self, limit: int, what: str) -> _Section:
        return _Section(self.path, self.head_at, self.tar_at, limit, what)

    def tar(self, limit: int, what: str) -> _Section:
        return _Section(self.path, self.tar_at, None, limit, what)
