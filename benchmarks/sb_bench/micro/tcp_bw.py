"""tcp-bw: TCP bandwidth between the nodes of a group (a pair of a pair-wise pattern, a k-batch group),
with no perftest and no RDMA: the fabric check a CPU-only fleet (or an Ethernet management network)
can run, launched by mpirun (``mpi`` mode) or torchrun (``torch.distributed`` mode).

The ranks form a ring: each rank listens on its own node's address (``SB_LOCAL_ADDR``, which the
launcher sets from the inventory), connects to the next rank from that same address, and sends
``size`` bytes ``num_steps`` times while it receives as much from the previous rank; the receiver
acknowledges each message, so a rank's figure is its bytes over the time until they arrived. In a
pair both directions run at once. Rank 0 reports the group's slowest sender as its figure, in
SuperBench's pattern naming: ``tcp_<serial>_<parallel>:<size>_bw`` (``SB_MODE_SERIAL_INDEX`` and
``SB_MODE_PARALLEL_INDEX``: the round and the group within it), ``tcp_<size>_bw`` outside a
pattern; every rank's own figure is ``..._tx_bw`` of its result. Addresses, ports and figures are
exchanged over the group the launcher set up: in ``mpi`` mode a plain TCP group with no torch import
(:mod:`sb_bench.core.hostgroup`: a pattern starts fresh ranks every round, and torch's import was most
of a round), under torchrun torch.distributed's gloo group (tiny messages either way).
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time

from sb_bench.core.benchmark import Benchmark, SkipBenchmark
from sb_bench.core.context import RankContext
from sb_bench.core.metric import Metric, Param, parse_size
from sb_bench.core.registry import register

CHUNK = 1 << 20
ACK = b"k"


def metric_prefix(size: int) -> str:
    serial = os.environ.get("SB_MODE_SERIAL_INDEX", "")
    parallel = os.environ.get("SB_MODE_PARALLEL_INDEX", "")
    if serial != "" and parallel != "":
        return f"tcp_{serial}_{parallel}:{size}_"
    return f"tcp_{size}_"


def _recv_exact(sock: socket.socket, n: int, buf: bytearray) -> None:
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[: min(len(buf), n - got)])
        if k == 0:
            raise ConnectionError("the peer closed the connection")
        got += k


def _address(peer: object) -> tuple[str, int]:
    """A peer's (address, port) as the group sent it; anything else is a clear error, not a crash later."""
    if (
        isinstance(peer, (list, tuple))
        and len(peer) == 2
        and isinstance(peer[0], str)
        and isinstance(peer[1], int)
        and 0 < peer[1] < 65536
    ):
        return peer[0], peer[1]
    raise ConnectionError(f"the next rank sent {peer!r}, not an address and port")


@register
class TcpBw(Benchmark):
    name = "tcp-bw"
    description = "TCP bandwidth around the ring of a group of nodes, from each node's own address (no RDMA)"
    needs_distributed = False
    params: dict = {
        "size": Param("str", "16M", "bytes per message (e.g. 16M)"),
        "port": Param("int", 0, "port to listen on (0: any free port, exchanged with the group)"),
        "connect_timeout": Param("float", 60.0, "seconds to wait for the next rank to listen"),
        "device": Param("str", "host", "always the host: TCP between nodes, no GPU", ("host",)),
    }

    def __init__(self, args: dict) -> None:
        super().__init__(args)
        self.size = parse_size(args["size"])
        if self.size < 1:
            raise ValueError("parameter size: must be at least 1 byte")

    def metrics(self) -> list[Metric]:
        p = metric_prefix(self.size)
        own = [Metric(p + "tx_bw", "GB/s", True, None, "this rank's own send bandwidth to the next rank")]
        if int(os.environ.get("RANK", "0") or 0) != 0:
            return own
        return [Metric(p + "bw", "GB/s", True, None, "the group's slowest sender (rank 0 reports it)"), *own]

    def setup(self, ctx: RankContext) -> None:
        if ctx.world_size < 2:
            raise SkipBenchmark("tcp-bw measures between nodes: it needs a group of at least 2 ranks")
        addr = os.environ.get("SB_LOCAL_ADDR") or socket.gethostbyname(socket.gethostname())
        self.listener = socket.create_server((addr, int(self.args["port"])), backlog=4)
        me = (addr, self.listener.getsockname()[1])
        peers = ctx.all_gather(list(me))
        nxt = _address(peers[(ctx.rank + 1) % ctx.world_size])
        deadline = time.monotonic() + float(self.args["connect_timeout"])
        self.out: socket.socket | None = None
        accepted: list[socket.socket] = []
        t = threading.Thread(target=lambda: accepted.append(self.listener.accept()[0]), daemon=True)
        t.start()
        while self.out is None:
            try:
                self.out = socket.create_connection(nxt, timeout=10, source_address=(addr, 0))
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        t.join(float(self.args["connect_timeout"]))
        if not accepted:
            raise ConnectionError(f"rank {(ctx.rank - 1) % ctx.world_size} never connected")
        self.inp = accepted[0]
        for s in (self.out, self.inp):
            s.settimeout(None)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.payload = bytes(min(self.size, CHUNK))
        self.rbuf = bytearray(min(self.size, CHUNK))
        ctx.barrier()

    def _send(self, n: int) -> None:
        assert self.out is not None
        left = n
        while left > 0:
            k = min(left, len(self.payload))
            self.out.sendall(self.payload[:k])
            left -= k

    def _step(self) -> float:
        """One message each way around the ring; this rank's send time until the ack came back."""
        errors: list[BaseException] = []

        def receive() -> None:
            try:
                _recv_exact(self.inp, self.size, self.rbuf)
                self.inp.sendall(ACK)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        rx = threading.Thread(target=receive, daemon=True)
        rx.start()
        t0 = time.perf_counter()
        self._send(self.size)
        assert self.out is not None
        if self.out.recv(1) != ACK:
            raise ConnectionError("the next rank did not acknowledge")
        dt = time.perf_counter() - t0
        rx.join()
        if errors:
            raise errors[0]
        return dt

    def run_once(self, ctx: RankContext, harness) -> dict[str, float]:  # noqa: ANN001
        for _ in range(self.args["num_warmup"]):
            self._step()
        ctx.barrier()
        total = 0.0
        steps = self.args["num_steps"]
        for _ in range(steps):
            total += self._step()
        tx = self.size * steps / total / 1e9
        figures = ctx.all_gather(tx)
        p = metric_prefix(self.size)
        out = {p + "tx_bw": tx}
        if ctx.rank == 0:
            out[p + "bw"] = min(float(f) for f in figures)
        return out

    def teardown(self, ctx: RankContext) -> None:
        for s in (getattr(self, "out", None), getattr(self, "inp", None), getattr(self, "listener", None)):
            if s is not None:
                s.close()


if __name__ == "__main__":
    from sb_bench.__main__ import standalone_main

    sys.exit(standalone_main(TcpBw.name))
