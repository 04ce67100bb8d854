"""Streams of one remote command's output for collect, over SSH (paramiko, or a process: ssh through the
host's OpenSSH master) or srun: each bounded in bytes (:class:`HostRefused` past the limit) and in stall
time per read, stderr kept short."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from sb_fleet.fleet.slurm_launch import end_step, launch_failure, split_stderr, srun_argv, task_env


class HostRefused(Exception):
    """The host is past a collect budget or sent what cannot be taken: its collect fails (this host only)."""


class Channel(Protocol):
    def read(self, n: int = -1) -> bytes: ...
    def chunks(self) -> Iterator[bytes]: ...
    def exit_status(self) -> tuple[int, str]: ...


class BoundedStream:
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


class SshChannel(BoundedStream):
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


class ProcessChannel(BoundedStream):
    """One local process's stdout as a bounded stream (a command on a host through srun or ssh): read in
    chunks, each read waiting at most ``stall`` seconds, at most ``limit`` bytes; stderr kept to its first
    2,000 bytes. The process runs in a session of its own, which :meth:`kill` ends."""

    def __init__(self, argv: list[str], env: dict[str, str] | None, stall: float, limit: int, what: str):
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
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
        poll = select.poll()  # not select(): a busy control node's descriptors pass FD_SETSIZE
        poll.register(fd, select.POLLIN)
        if not poll.poll(self.stall * 1000):
            raise TimeoutError(f"no data for {self.what} within {self.stall}s")
        data = os.read(fd, 1 << 16 if n is None or n < 0 else min(n, 1 << 16))
        if not data:
            self.at_end()
        return self.counted(data)

    def at_end(self) -> None:
        """Its stdout ended (a subclass may tell a failed launch here, before a reader takes it as data)."""

    def wait(self) -> int:
        try:
            return self.proc.wait(self.stall)
        except subprocess.TimeoutExpired:
            self.kill()
            raise TimeoutError(f"no exit status for {self.what} within {self.stall}s") from None

    def exit_status(self) -> tuple[int, str]:
        rc = self.wait()
        self._t.join(5)
        return self.ended(rc, self.err.decode(errors="replace"))

    def ended(self, rc: int, err: str) -> tuple[int, str]:
        """The command's exit status and its stderr on one short line (or the launcher's failure raised)."""
        return rc, " ".join(err.split())[:300]

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


class SrunChannel(ProcessChannel):
    """One command on a node through an srun step (collect's reads under ``launcher: slurm``)."""

    def __init__(self, srun: str, job_id: str, node: str, command: str, stall: float, limit: int, what: str):
        argv = srun_argv(srun, job_id, node, ["/bin/sh", "-c", command])
        super().__init__(argv, task_env(), stall, limit, what)

    def ended(self, rc: int, err: str) -> tuple[int, str]:
        task, own = split_stderr(err)
        failure = launch_failure(rc, "x" if self.total else "", own)
        if failure:
            raise ConnectionError(f"srun: {failure}")
        return super().ended(rc, task)

    def kill(self) -> None:
        end_step(self.proc)  # SIGTERM first: srun then ends its step on the node


class MasterGone(ConnectionError):
    """ssh found no master to ride (it ended since it was checked) and sent nothing: the host is still
    to be reached another way."""


class MasterChannel(ProcessChannel):
    """One command on a host over its OpenSSH master (``argv``: :meth:`SshSettings.master_command`). ssh's
    exit 255 is its own failure, not the command's: :class:`MasterGone` where nothing came, else a
    ``ConnectionError`` (the connection was lost on the way)."""

    def __init__(self, argv: list[str], stall: float, limit: int, what: str):
        super().__init__(argv, None, stall, limit, what)

    def at_end(self) -> None:
        if not self.total and self.wait() == 255:
            self._t.join(5)
            raise MasterGone(f"ssh: no master connection ({self._said()})")

    def ended(self, rc: int, err: str) -> tuple[int, str]:
        if rc == 255:
            if not self.total:
                raise MasterGone(f"ssh: no master connection ({self._said()})")
            raise ConnectionError(f"ssh: connection lost ({self._said()})")
        return super().ended(rc, err)

    def _said(self) -> str:
        return " ".join(self.err.decode(errors="replace").split())[:300] or "exit 255"


class ProcessNode:
    """Opens :class:`ProcessChannel` s to one host (``start``: command, stall, limit, what -> channel) and
    closes them all at once: collect's watchdog and an interrupt end every read of the host at once."""

    def __init__(self, start: Callable[[str, float, int, str], ProcessChannel]):
        self.start = start
        self.open_channels: list[ProcessChannel] = []
        self.closed = False
        self._lock = threading.Lock()

    def channel(self, command: str, stall: float, limit: int, what: str) -> ProcessChannel:
        with self._lock:  # a channel opening while the node closes is closed with it
            if self.closed:
                raise ConnectionError("closed")
            ch = self.start(command, stall, limit, what)
            self.open_channels.append(ch)
            return ch

    def close(self) -> None:
        with self._lock:
            self.closed = True
            channels = list(self.open_channels)
        for ch in channels:
            if ch.proc.poll() is None:
                ch.kill()


class SrunNode(ProcessNode):
    """Commands on one node through srun steps in job ``job_id``."""

    def __init__(self, srun: str, job_id: str, node: str):
        super().__init__(lambda c, s, n, w: SrunChannel(srun, job_id, node, c, s, n, w))


class MasterNode(ProcessNode):
    """Commands on one host over its OpenSSH master; ``argv(command)``: the ssh command line."""

    def __init__(self, argv: Callable[[str], list[str]]):
        super().__init__(lambda c, s, n, w: MasterChannel(argv(c), s, n, w))
