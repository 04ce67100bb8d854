"""A rank group over plain TCP, for benchmarks that run on the host (``device: host``) in ``mpi`` mode.

torch.distributed's gloo group costs every rank a torch import (seconds of CPU) only to exchange a few
small values. A pattern run starts fresh ranks every round, so on a fabric check such as ``tcp-bw``
that import is most of a round. This group does the same rendezvous with the standard library:

* rank 0 listens on ``MASTER_ADDR:MASTER_PORT`` (the variables the launcher sets for torch, and the
  port torch's own store would take); every other rank connects to it, retrying until the deadline,
  and says who it is (its rank, the world size and the job: the run and the pattern's round and group);
* rank 0 admits each rank once, refuses a connection that does not say a matching hello (a stray
  client, another group's rank), and sends every rank a welcome when the world is complete: joining is
  a barrier, as torch's ``init_process_group`` is;
* :meth:`HostGroup.all_gather` sends each rank's value to rank 0, which sends the list back to all.

What travels is JSON in length-prefixed frames of at most :data:`MAX_FRAME` bytes (never pickle, which
torch's ``all_gather_object`` uses); every wait ends at the group's deadline with :class:`GroupError`.
Under torchrun (``TORCHELASTIC_RUN_ID``) the launcher's own store holds the port, and torch is loaded
anyway: the benchmark uses torch.distributed there (:mod:`sb_bench.core.context` decides).
"""

from __future__ import annotations

import errno
import json
import socket
import struct
import time
from typing import Any

MAX_FRAME = 1 << 20  # a value a benchmark exchanges: addresses, figures
HELLO_S = 10.0  # how long a connection may take to say who it is before rank 0 drops it
_LEN = struct.Struct("!I")


class GroupError(ConnectionError):
    """The group could not be formed, or a rank did not answer in time (the message says which)."""


def _left(deadline: float) -> float:
    return deadline - time.monotonic()


def send_frame(sock: socket.socket, value: Any) -> None:
    data = json.dumps(value, separators=(",", ":")).encode()
    if len(data) > MAX_FRAME:
        raise GroupError(f"a value of {len(data)} bytes is over the group's frame limit of {MAX_FRAME}")
    sock.sendall(_LEN.pack(len(data)) + data)


def _recv_exact(sock: socket.socket, n: int, deadline: float, who: str) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        left = _left(deadline)
        if left <= 0:
            raise GroupError(f"{who} did not answer in time")
        sock.settimeout(left)
        try:
            chunk = sock.recv(min(n - len(buf), 1 << 16))
        except socket.timeout:  # noqa: UP041 - the suite runs on Python 3.9, where it is not TimeoutError
            raise GroupError(f"{who} did not answer in time") from None
        except OSError as exc:
            raise GroupError(f"{who}: {exc}") from None
        if not chunk:
            raise GroupError(f"{who} closed the connection")
        buf += chunk
    return bytes(buf)


def recv_frame(sock: socket.socket, deadline: float, who: str) -> Any:
    (n,) = _LEN.unpack(_recv_exact(sock, _LEN.size, deadline, who))
    if n > MAX_FRAME:
        raise GroupError(f"{who} sent a frame of {n} bytes, over the limit of {MAX_FRAME}")
    try:
        return json.loads(_recv_exact(sock, n, deadline, who))
    except (ValueError, RecursionError) as exc:
        raise GroupError(f"{who} sent something that is not JSON ({type(exc).__name__})") from None


def _listen(addr: str, port: int) -> socket.socket:
    """Rank 0's listener: on ``addr`` (IPv4 or IPv6, a name resolved), else on every address of this node
    (``addr`` is not this node's own: behind NAT, or a name that resolves elsewhere)."""
    why: list[str] = []
    try:
        found = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        found, why = [], [str(exc)]
    for family, _, _, _, sockaddr in found:
        try:
            return socket.create_server(sockaddr, family=family, backlog=64)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise GroupError(
                    f"rank 0 cannot listen on {addr}:{port}: the port is in use (choose another master_port)"
                ) from None
            why.append(str(exc))
    try:
        if socket.has_dualstack_ipv6():
            return socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True, backlog=64)
        return socket.create_server(("", port), backlog=64)
    except OSError as exc:
        why.append(f"on every address: {exc}")
        raise GroupError(f"rank 0 cannot listen on {addr}:{port}: {'; '.join(why)}") from None


class HostGroup:
    """One rank's membership: rank 0 holds a connection per other rank, the others one to rank 0."""

    def __init__(self, rank: int, world: int, conns: dict[int, socket.socket], timeout_s: float) -> None:
        self.rank, self.world, self.timeout_s = rank, world, timeout_s
        self._conns = conns  # rank 0: rank -> connection; another rank: {0: its connection}

    @classmethod
    def join(cls, rank: int, world: int, addr: str, port: int, timeout_s: float, job: str = "") -> HostGroup:
        if not 0 <= rank < world:
            raise GroupError(f"rank {rank} is not in a world of {world}")
        deadline = time.monotonic() + timeout_s
        hello = {"rank": rank, "world": world, "job": job}
        if rank == 0:
            return cls(0, world, _admit(_listen(addr, port), hello, deadline), timeout_s)
        sock = _connect(addr, port, deadline)
        try:
            send_frame(sock, hello)
            answer = recv_frame(sock, deadline, f"rank 0 at {addr}:{port}")
        except BaseException:
            sock.close()
            raise
        if answer != {"welcome": world}:
            sock.close()
            why = answer.get("refused") if isinstance(answer, dict) else None
            raise GroupError(f"rank 0 at {addr}:{port} refused rank {rank}: {why or 'an unexpected answer'}")
        return cls(rank, world, {0: sock}, timeout_s)

    def all_gather(self, value: Any) -> list[Any]:
        """Every rank's ``value``, in rank order, on every rank (JSON: a tuple comes back a list)."""
        deadline = time.monotonic() + self.timeout_s
        if self.rank != 0:
            send_frame(self._conns[0], value)
            got = recv_frame(self._conns[0], deadline, "rank 0")
            if not isinstance(got, list) or len(got) != self.world:
                raise GroupError(f"rank 0 sent {type(got).__name__} where a list of {self.world} was due")
            return got
        out: list[Any] = [value] + [None] * (self.world - 1)
        for r in range(1, self.world):
            out[r] = recv_frame(self._conns[r], deadline, f"rank {r}")
        for r in range(1, self.world):
            send_frame(self._conns[r], out)
        return out

    def barrier(self) -> None:
        self.all_gather(None)

    def close(self) -> None:
        for s in self._conns.values():
            s.close()
        self._conns = {}


def _connect(addr: str, port: int, deadline: float) -> socket.socket:
    """Rank 0 may not listen yet (its process starts as ours does): retry until the deadline."""
    last: OSError | None = None
    while _left(deadline) > 0:
        try:
            return socket.create_connection((addr, port), timeout=max(0.05, min(_left(deadline), 10.0)))
        except OSError as exc:
            last = exc
            time.sleep(min(0.05, max(0.0, _left(deadline))))
    raise GroupError(f"rank 0 never listened on {addr}:{port} ({last or 'no time left'})")


def _admit(srv: socket.socket, own: dict, deadline: float) -> dict[int, socket.socket]:
    conns: dict[int, socket.socket] = {}
    world = own["world"]
    try:
        while len(conns) < world - 1:
            left = _left(deadline)
            if left <= 0:
                waiting = sorted(set(range(1, world)) - set(conns))
                raise GroupError(f"rank(s) {', '.join(map(str, waiting))} never joined rank 0")
            srv.settimeout(left)
            try:
                conn, _ = srv.accept()
            except socket.timeout:  # noqa: UP041 - the suite runs on Python 3.9, where it is not TimeoutError
                continue
            try:
                hello = recv_frame(conn, min(deadline, time.monotonic() + HELLO_S), "a connecting rank")
            except GroupError:
                conn.close()  # a stray client, or one that said nothing: it costs only its connection
                continue
            why = _refusal(hello, own, conns)
            if why:
                try:
                    send_frame(conn, {"refused": why})
                except OSError:
                    pass
                conn.close()
                continue
            conns[hello["rank"]] = conn
        for conn in conns.values():
            send_frame(conn, {"welcome": world})
    except BaseException:
        for conn in conns.values():
            conn.close()
        raise
    finally:
        srv.close()
    return conns


def _refusal(hello: Any, own: dict, conns: dict[int, socket.socket]) -> str:
    if not isinstance(hello, dict) or set(hello) != {"rank", "world", "job"}:
        return "not a rank's hello"
    if hello["world"] != own["world"] or hello["job"] != own["job"]:
        return f"another group's rank (world {hello['world']!r}, job {hello['job']!r})"
    r = hello["rank"]
    if not isinstance(r, int) or isinstance(r, bool) or not 1 <= r < own["world"]:
        return f"rank {r!r} is not in a world of {own['world']}"
    if r in conns:
        return f"rank {r} has already joined"
    return ""
