"""A group of ranks over plain TCP, for benchmarks that only exchange a few small values (tcp-bw): no
torch import on the ranks.

A rank process that imports torch for its group (``torch.distributed`` with gloo, only to swap addresses
and figures) spends seconds of CPU before its first byte moves: in a pair-wise pattern every round
paid it on both hosts of every pair. Here rank 0 listens at ``MASTER_ADDR:MASTER_PORT`` (the address of
its own node, the port the launcher gave the group; under mpirun nothing else holds it: torchrun's agent
does, so under torchrun a benchmark keeps torch.distributed), the other ranks connect to it, and each
collective is one JSON line from every rank to rank 0 and one line back.

Everything a peer sends is bounded: lines of at most :data:`MAX_LINE` bytes, JSON only, every wait
within the group's timeout; a connection that does not say a valid rank of this group is closed and
the group keeps waiting for the real one.
"""

from __future__ import annotations

import json
import os
import socket
import time
from typing import Any

MAX_LINE = 64 << 10  # bytes of one message (an address, a figure: tens of bytes)
# s a collective may wait for the slowest rank (as torch.distributed's default for gloo in this suite,
# RankContext.init_distributed): one direction of a pair may finish its steps long after the other
OP_TIMEOUT = 300.0


class GroupError(ConnectionError):
    """The group could not form, or a rank stopped answering."""


def under_torchrun() -> bool:
    """Whether torchrun started this process (its agent then holds MASTER_PORT for its own store)."""
    return bool(os.environ.get("TORCHELASTIC_RUN_ID"))


class _Peer:
    """One connection, read a line at a time within the group's timeout."""

    def __init__(self, sock: socket.socket, timeout: float) -> None:
        sock.settimeout(timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = sock
        self.reader = sock.makefile("rb")

    def send(self, obj: Any) -> None:
        self.sock.sendall(json.dumps(obj).encode() + b"\n")

    def recv(self, what: str) -> Any:
        try:
            line = self.reader.readline(MAX_LINE + 1)
        except OSError as exc:  # a timeout included
            raise GroupError(f"{what}: {exc or type(exc).__name__}") from exc
        if not line.endswith(b"\n"):
            more = (
                f"more than {MAX_LINE} bytes in one line" if len(line) > MAX_LINE else "the connection closed"
            )
            raise GroupError(f"{what}: {more}")
        try:
            return json.loads(line)
        except ValueError as exc:
            raise GroupError(f"{what}: not a JSON line ({exc})") from exc

    def close(self) -> None:
        for f in (self.reader.close, self.sock.close):
            try:
                f()
            except OSError:
                pass


class TcpGroup:
    """``world`` ranks, rank 0 the hub. :meth:`join` forms it; :meth:`all_gather` and :meth:`barrier` as
    torch.distributed's, for JSON values."""

    def __init__(
        self, rank: int, world: int, peers: dict[int, _Peer], op_timeout: float = OP_TIMEOUT
    ) -> None:
        self.rank, self.world, self.peers = rank, world, peers
        for p in peers.values():
            p.sock.settimeout(op_timeout)

    @classmethod
    def join(
        cls,
        rank: int,
        world: int,
        addr: str,
        port: int,
        timeout: float = 60.0,
        op_timeout: float = OP_TIMEOUT,
    ) -> TcpGroup:
        """Form the group within ``timeout`` s; each collective then waits at most ``op_timeout`` s."""
        if not 0 <= rank < world:
            raise GroupError(f"rank {rank} is not in a group of {world}")
        if rank == 0:
            return cls(0, world, _accept(world, addr, port, timeout), op_timeout)
        return cls(rank, world, {0: _connect(rank, world, addr, port, timeout)}, op_timeout)

    @classmethod
    def from_env(cls, timeout: float = 60.0) -> TcpGroup:
        """The group of the launcher's variables: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT."""
        try:
            rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
            addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
        except (KeyError, ValueError) as exc:
            raise GroupError(f"RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT must be set ({exc})") from exc
        return cls.join(rank, world, addr, port, timeout)

    def all_gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order, on every rank."""
        if self.rank != 0:
            hub = self.peers[0]
            hub.send(obj)
            got = hub.recv("rank 0's answer")
            if not (isinstance(got, list) and len(got) == self.world):
                raise GroupError(f"rank 0's answer is not a list of {self.world} values")
            return got
        values = [obj] + [self.peers[r].recv(f"rank {r}") for r in range(1, self.world)]
        for r in range(1, self.world):
            self.peers[r].send(values)
        return values

    def barrier(self) -> None:
        self.all_gather(None)

    def close(self) -> None:
        for p in self.peers.values():
            p.close()
        self.peers = {}


def _connect(rank: int, world: int, addr: str, port: int, timeout: float) -> _Peer:
    deadline = time.monotonic() + timeout
    while True:  # rank 0 may not listen yet
        try:
            sock = socket.create_connection((addr, port), timeout=min(10.0, timeout))
            break
        except OSError as exc:
            if time.monotonic() > deadline:
                raise GroupError(
                    f"rank 0 at {addr}:{port} did not answer within {timeout:.0f} s ({exc})"
                ) from exc
            time.sleep(0.05)
    peer = _Peer(sock, timeout)
    peer.send({"rank": rank, "world": world})
    return peer


def _accept(world: int, addr: str, port: int, timeout: float) -> dict[int, _Peer]:
    try:
        server = socket.create_server((addr, port), backlog=max(world, 8))
    except OSError as exc:
        raise GroupError(f"rank 0 cannot listen at {addr}:{port} (MASTER_ADDR:MASTER_PORT): {exc}") from exc
    peers: dict[int, _Peer] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(peers) < world - 1:
            left = deadline - time.monotonic()
            if left <= 0:
                missing = sorted(set(range(1, world)) - set(peers))
                raise GroupError(f"rank(s) {missing} did not join within {timeout:.0f} s")
            server.settimeout(left)
            try:
                sock, _ = server.accept()
            except TimeoutError:
                continue
            peer = _Peer(sock, min(left, 10.0))
            try:
                hello = peer.recv("a rank's hello")
            except GroupError:
                peer.close()
                continue
            r = hello.get("rank") if isinstance(hello, dict) else None
            if not (isinstance(r, int) and 0 < r < world and r not in peers and hello.get("world") == world):
                peer.close()  # a stray or mistaken connection: the real rank may still come
                continue
            peers[r] = peer
    except BaseException:
        for p in peers.values():
            p.close()
        raise
    finally:
        server.close()
    return peers
