"""Files written safely, shared by every layer: the one atomic writer (temp file, fsync, rename), the one
file hash, and the file-system-safe name of a host."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sb_fleet.errors import InfraError


class _SourceError(Exception):
    """Carries an exception of the stream being written out of :func:`atomic_write_stream` unchanged."""

    def __init__(self, original: BaseException):
        super().__init__(str(original))
        self.original = original


class ChecksumMismatch(Exception):
    """What :func:`atomic_write_stream` was given does not have the expected sha256 (nothing was written)."""


def atomic_write_stream(
    path: Path, chunks: Iterable[bytes], mode: int = 0o600, sha256: str | None = None
) -> None:
    """Write ``chunks`` to ``path`` via a temp file (``.<name>.<random>.tmp`` beside it) + fsync + rename;
    the one atomic writer of sb-fleet.

    With ``sha256``, the content must hash to it, else :class:`ChecksumMismatch` and nothing is written.
    A full disk raises :class:`InfraError` naming the file, and leaves no partial file behind under
    either name.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    h = hashlib.sha256()
    source = iter(chunks)
    try:
        try:
            os.fchmod(fd, mode)
            while True:
                try:
                    chunk = next(source)
                except StopIteration:
                    break
                except BaseException as exc:  # the source failed (connection lost): not a write error
                    raise _SourceError(exc) from exc
                if sha256 is not None:
                    h.update(chunk)
                view = memoryview(chunk)
                while view:
                    n = os.write(fd, view)
                    view = view[n:]
            os.fsync(fd)
        finally:
            os.close(fd)
        if sha256 is not None and h.hexdigest() != sha256:
            os.unlink(tmp)
            raise ChecksumMismatch(f"{path}: sha256 {h.hexdigest()} is not {sha256}")
        os.replace(tmp, path)
    except _SourceError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise exc.original from None
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise InfraError(
                f"{path}: no space left on the device; free space (or use --run-dir elsewhere) and re-run: "
                f"collect fetches only what is missing"
            ) from exc
        raise InfraError(f"{path}: cannot write ({exc.strerror})") from exc


def atomic_write_bytes(path: Path, data: bytes, mode: int = 0o600) -> None:
    atomic_write_stream(path, [data], mode)


def atomic_write_text(path: Path, text: str, mode: int = 0o600) -> None:
    atomic_write_bytes(path, text.encode(), mode)


def atomic_write_json(path: Path, obj: Any, mode: int = 0o600) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n", mode)


def sha256_file(path: Path) -> str:
    """The hex sha256 of a file, read in 1 MiB chunks (the one file hash of sb-fleet)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def safe_name(host: str) -> str:
    """A file-system-safe directory name for an inventory host name.

    Inventory names are user input: a name with ``/`` or ``..`` must not
    escape ``raw/``. Safe names pass through unchanged.
    """
    keep = "".join(c if (c.isalnum() or c in "-_.:@") else "_" for c in host)
    if keep in ("", ".", "..") or keep != host:
        keep = keep.strip(".") or "_"
        keep = f"{keep}-{hashlib.sha256(host.encode()).hexdigest()[:8]}"
    return keep
