"""The results directory on the exec's own stdout, after the step (validate's nightly path, issue 37).

Collect fetches a host's results with two sessions over the exec's master: a listing with checksums
(``find -printf '%y %s %P\\0'``, an empty record, ``sha256sum`` of the regular files), then a ``tar`` of
the files it lacks. Both cost a login shell, ``find``, ``sha256sum`` and ``tar`` on the host and an ssh
client on the control node, for files the exec that wrote them could send itself. Here first_exec, once
the step's runner has returned (every rank waited for, every result synced), writes after the step's
output, on the same stdout::

    \\n<marker>\\n<N>\\n<N bytes: the listing, an empty record, the checksums><a tar of the regular files>

in the form collect's own commands print (the listing's records as ``find -printf`` writes them, each
checksum line as ``sha256sum`` writes it, ``<sha256>  ./<path>``, the tar's members in path order; the
order of the records is find's business and nobody's contract), so that sb-fleet reads it with
collect's own bounded parsers and budgets (sb_fleet.fleet.fetch). The marker is the spec's (random per
run: no benchmark's output is taken for it).

Only a plain directory is sent: regular files and directories, names that are UTF-8 without a newline
or backslash, at most ``max_files`` entries, no file over ``max_file_bytes``, at most ``max_bytes`` in
all. Anything else (a fifo, a symlink, an odd name, more or bigger files) sends nothing: collect then
fetches over SSH as before, and says what it refuses there, in its own words.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tarfile
from typing import BinaryIO

CHUNK = 1 << 20


class NotPlain(Exception):
    """The directory is not one this path sends (collect's own fetch then deals with it)."""


def _walk(root: bytes, max_files: int) -> tuple[list[bytes], list[tuple[str, int]]]:
    """``find . -mindepth 1 -name '.*' -prune -o -printf '%y %s %P\\0'`` of ``root`` as records, and its
    regular files (path, size). NotPlain: an entry that is not a regular file or a directory, an odd
    name, more than ``max_files`` entries."""
    records: list[bytes] = []
    files: list[tuple[str, int]] = []
    todo = [b""]
    while todo:
        rel_dir = todo.pop()
        with os.scandir(os.path.join(root, rel_dir) if rel_dir else root) as it:
            entries = list(it)
        subdirs = []
        for e in entries:
            if e.name.startswith(b"."):
                continue
            rel = rel_dir + b"/" + e.name if rel_dir else e.name
            if b"\n" in rel or b"\\" in rel:
                raise NotPlain("a name with a newline or backslash")
            try:
                rel.decode()
            except UnicodeDecodeError:
                raise NotPlain("a name that is not UTF-8") from None
            st = e.stat(follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                kind = b"d"
                subdirs.append(rel)
            elif stat.S_ISREG(st.st_mode):
                kind = b"f"
                files.append((rel.decode(), st.st_size))
            else:
                raise NotPlain("an entry that is not a regular file or a directory")
            records.append(kind + b" " + str(st.st_size).encode() + b" " + rel + b"\0")
            if len(records) > max_files:
                raise NotPlain(f"more than {max_files} entries")
        todo.extend(reversed(subdirs))
    return records, files


def _digest(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            data = f.read(CHUNK)
            if not data:
                return h.hexdigest()
            h.update(data)


def plain_listing(
    root: str, max_files: int, max_file_bytes: int, max_bytes: int
) -> tuple[bytes, list[tuple[str, int]]]:
    """The listing, its empty record and the checksums (what collect's listing command prints), and the
    regular files in path order; NotPlain where this path sends nothing."""
    records, files = _walk(os.fsencode(root), max_files)
    if any(size > max_file_bytes for _, size in files):
        raise NotPlain(f"a file over {max_file_bytes} bytes")
    if sum(size for _, size in files) > max_bytes:
        raise NotPlain(f"more than {max_bytes} bytes in all")
    files.sort()
    sums = [f"{_digest(os.path.join(root, rel))}  ./{rel}\n".encode() for rel, _ in files]
    return b"".join(records) + b"\0" + b"".join(sums), files


def write_tar(out: BinaryIO, root: str, files: list[tuple[str, int]]) -> None:
    """A tar of ``files`` (path, size as listed) on ``out``: each member its listed size (a file that
    changed since ends the stream broken, and collect fetches it over SSH)."""
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.GNU_FORMAT) as tar:
        for rel, size in files:
            info = tarfile.TarInfo(rel)
            info.size = size
            info.mode = 0o600
            with open(os.path.join(root, rel), "rb") as f:
                info.mtime = int(os.fstat(f.fileno()).st_mtime)
                tar.addfile(info, f)


def ship(out: BinaryIO, spec: dict) -> str:
    """Write the results directory of ``spec`` (``dir``, ``mark``, ``max_files``, ``max_file_bytes``,
    ``max_bytes``) on ``out`` after its marker line; what happened, in words ("sent", or why not). A
    relative ``dir`` is the login shell's, as collect's ``cd`` takes it: under the home directory."""
    root = os.path.expanduser(str(spec["dir"]))
    if not os.path.isabs(root):
        root = os.path.join(os.path.expanduser("~"), root)
    try:
        head, files = plain_listing(
            root, int(spec["max_files"]), int(spec["max_file_bytes"]), int(spec["max_bytes"])
        )
    except (NotPlain, OSError) as exc:
        return f"not sent: {exc}"
    try:
        out.write(b"\n" + str(spec["mark"]).encode() + b"\n" + str(len(head)).encode() + b"\n" + head)
        write_tar(out, root, files)
        out.flush()
    except OSError as exc:  # the reader is gone, or a file changed under the tar: collect fetches it
        return f"broken off: {exc}"
    return "sent"
