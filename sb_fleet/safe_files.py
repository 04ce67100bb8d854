"""Files written safely, shared by every layer: the one atomic writer (temp file, fsync, rename), the one
file hash, the file-system-safe name of a host, and the private directories sb-fleet keeps its own state
in (:func:`private_dir`)."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import stat
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
        # surrogatepass: a name read from a host's bytes may hold a lone surrogate; it still gets a digest
        keep = f"{keep}-{hashlib.sha256(host.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"
    return keep


def private_dir(path: Path, what: str, fix: str) -> Path:
    """``path`` as a directory only the running user can use: each missing component from its parent
    down is created here (mode 0700); ``path`` and each directory created are checked to be real
    directories (not symlinks), owned by this user, with no group or other access. Anything else is an
    :class:`InfraError` naming the path (``what`` says what the directory is for, ``fix`` what to do).

    A directory another local user made or can write (a guessable name in ``/tmp``) would let them sit
    between sb-fleet and every host: replace a socket, read a secret."""
    path = Path(path)
    missing: list[Path] = []
    p = path
    while not os.path.lexists(p) and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            pass  # made by someone else meanwhile: checked below like any existing directory
        except OSError as exc:
            raise InfraError(f"{d}: cannot create {what} ({exc.strerror}); {fix}") from None
    uid = os.geteuid()
    # The directories above, as they resolve: another user who owns one, or may write one that has no
    # sticky bit, could rename ours away and put theirs in its place.
    top = Path(os.path.realpath(p))
    for a in [top, *top.parents]:
        try:
            st = os.stat(a)
        except OSError as exc:
            raise InfraError(f"{a}: cannot use it for {what} ({exc.strerror}); {fix}") from None
        if st.st_uid not in (0, uid):
            raise InfraError(f"{a}: refused for {what}: it belongs to uid {st.st_uid}, not to you; {fix}")
        if st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX:
            raise InfraError(f"{a}: refused for {what}: every user may write it (no sticky bit); {fix}")
    for d in [path, *(m for m in missing if m != path)]:
        try:
            st = os.lstat(d)
        except OSError as exc:
            raise InfraError(f"{d}: cannot use it for {what} ({exc.strerror}); {fix}") from None
        why = None
        if stat.S_ISLNK(st.st_mode):
            why = "it is a symbolic link"
        elif not stat.S_ISDIR(st.st_mode):
            why = "it is not a directory"
        elif st.st_uid != uid:
            why = f"it belongs to uid {st.st_uid}, not to you (uid {uid})"
        elif stat.S_IMODE(st.st_mode) & 0o077:
            why = f"its mode is {stat.S_IMODE(st.st_mode):04o}: others can use it (it must be 0700)"
        if why:
            raise InfraError(f"{d}: refused for {what}: {why}; {fix}")
    return path
