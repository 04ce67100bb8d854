"""A filesystem that never answers, mounted over a directory: a dead NFS server's mount, for the tests.

:func:`hung_mount` opens ``/dev/fuse``, mounts a FUSE filesystem on ``target`` with that descriptor, and
never reads it: the kernel's first request (FUSE_INIT) stays unanswered, so every access under
``target`` (a ``cd``, a ``stat``, an ``open``) waits for an answer, as on a hard NFS mount whose server
is gone. The wait is killable (a fatal signal ends it, as the kernel's FUSE code waits), which is what a
stop relies on. ``allow_other``: the hosts' login user waits too, instead of being refused at once (a
FUSE mount answers other users EACCES without it). On leaving, the connection is aborted (the
descriptor closed: every waiting access fails with ENOTCONN) and the mount detached.

Needs root and ``/dev/fuse`` (no FUSE library: the mount is one mount(2) call with the descriptor).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def _mount(source: str, target: str, fstype: str, flags: int, data: str) -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    rc = libc.mount(source.encode(), target.encode(), fstype.encode(), ctypes.c_ulong(flags), data.encode())
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {fstype} on {target}: {os.strerror(err)}")


@contextmanager
def hung_mount(target: Path, uid: int = 0, gid: int = 0) -> Iterator[Path]:
    """``target`` (an existing directory) covered by a filesystem that never answers, while inside."""
    if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
        pytest.skip("a filesystem that never answers needs root and /dev/fuse")
    fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
    try:
        _mount(
            "sbtest-hung",
            str(target),
            "fuse.sbtest-hung",
            0,
            f"fd={fd},rootmode=40000,user_id={uid},group_id={gid},allow_other",
        )
    except OSError:
        os.close(fd)
        raise
    try:
        yield target
    finally:
        os.close(fd)  # the connection aborted: every waiting access fails now
        subprocess.run(["umount", "-l", str(target)], capture_output=True, check=False)
