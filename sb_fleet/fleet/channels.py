"""Streams of one remote command's output for collect, over SSH (paramiko) or srun: each bounded in bytes
(:class:`HostRefused` past the limit) and in stall time per read, stderr kept short."""

from __future__ import annotations

import os
import select
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from sb_fleet.fleet.slurm_launch import end_step, launch_failure, split_stderr, srun_argv, task_env


class HostRefused(Exception):
    """The host is past a collect budget or sent what cannot be taken: its collect fails (this host only)."""


class Channel(Protocol):
    def read(self, n: int = -1) -> bytes: ...
    def chunks(self) -> Iterator[bytes]: ...
    def exit_status(self) -> tuple[int, str]: ...


class _Bounded:
    """A remote command's stdout counted against its byte limit, read in chunks."""

    limit: int
    what: str
    total: int

    def read(self, n: int = -1) -> bytes:
        raise NotImplementedError

    def counted(self, data: bytes) -> bytes:
        self.total += len(data)
        if self.total > self.limit:
            raise HostRefused(f"the host sent more than {self.limit} bytes for {self.what}")
        return data

    def chunks(self) -> Iterator[bytes]:
        while True:
            data = self.read()
            if not data:
                return
            yield data


class SshChannel(_Bounded):
    """One remote command's stdout as a bounded stream: at most ``limit`` bytes (else :class:`HostRefused`),
    each read waiting at most the channel's stall timeout; stderr kept to its first 2,000 bytes."""

    def __init__(self, client: Any, command: str, stall: float, limit: int, what: str):
        self.chan = client.get_transport().open_session(timeout=stall)
        self.chan.settimeout(stall)
        self.chan.exec_command(command)
        self.stall = stall
        self.limit = limit
        self.what = what
        self.total = 0
        self.err = bytearray()

    def _drain_stderr(self) -> None:
        while self.chan.recv_stderr_ready():
            e = self.chan.recv_stderr(1 << 16)
            if not e:
                break
            if len(self.err) < 2000:
                self.err += e[: 2000 - len(self.err)]

    def read(self, n: int = -1) -> bytes:
        self._drain_stderr()
        return self.counted(self.chan.recv(1 << 16 if n is None or n < 0 else min(n, 1 << 16)))

    def exit_status(self) -> tuple[int, str]:
        self._drain_stderr()
        if not self.chan.status_event.wait(self.stall):
            raise TimeoutError(f"no exit status for {self.what} within {self.stall}s")
        self._drain_stderr()
        rc = self.chan.recv_exit_status()
        self.chan.close()
        return rc, " ".join(self.err.decode(errors="replace").split())[:300]


class SrunChannel(_Bounded):
    """One command on a node as a bounded stream (collect's reads): its stdout in chunks, each read
    waiting at most ``stall`` seconds, at most ``limit`` bytes; stderr kept to its first 2,000 bytes."""

    def __init__(self, srun: str, job_id: str, node: str, command: str, stall: float, limit: int, what: str):
        self.proc = subprocess.Popen(
            srun_argv(srun, job_id, node, ["/bin/sh", "-c", command]),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=task_env(),
            start_new_session=True,
        )
        self.stall, self.limit, self.what, self.total = stall, limit, what, 0
        self.err = bytearray()
        self._t = threading.Thread(target=self._drain_stderr, daemon=True)
        self._t.start()

    def _drain_stderr(self) -> None:
        err = self.proc.stderr
        assert err is not None
        fd = err.fileno()
        while chunk := os.read(fd, 1 << 14):
            if len(self.err) < 2000:
                self.err += chunk[: 2000 - len(self.err)]

    def read(self, n: int = -1) -> bytes:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        ready, _, _ = select.select([fd], [], [], self.stall)
        if not ready:
            raise TimeoutError(f"no data for {self.what} within {self.stall}s")
        return self.counted(os.read(fd, 1 << 16 if n is None or n < 0 else min(n, 1 << 16)))

    def exit_status(self) -> tuple[int, str]:
        try:
            rc = self.proc.wait(self.stall)
        except subprocess.TimeoutExpired:
            self.kill()
            raise TimeoutError(f"no exit status for {self.what} within {self.stall}s") from None
        self._t.join(5)
        task, own = split_stderr(self.err.decode(errors="replace"))
        failure = launch_failure(rc, "x" if self.total else "", own)
        if failure:
            raise ConnectionError(f"srun: {failure}")
        return rc, " ".join(task.split())[:300]

    def kill(self) -> None:
        end_step(self.proc)


@dataclass
class SrunNode:
    """Opens :class:`SrunChannel` s to one node and closes them all at once (collect's watchdog)."""

    srun: str
    job_id: str
    node: str
    open_channels: list[SrunChannel] = field(default_factory=list)
    closed: bool = False

    def channel(self, command: str, stall: float, limit: int, what: str) -> SrunChannel:
        if self.closed:
            raise ConnectionError("closed")
        ch = SrunChannel(self.srun, self.job_id, self.node, command, stall, limit, what)
        self.open_channels.append(ch)
        return ch

    def close(self) -> None:
        self.closed = True
        for ch in self.open_channels:
            if ch.proc.poll() is None:
                ch.kill()
