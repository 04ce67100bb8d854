"""nccl-bw: collective bandwidth over torch.distributed, in nccl-tests' terms and SuperBench's names.

Operations ``allreduce``, ``allgather``, ``broadcast``, ``reduce``, ``reducescatter``, ``alltoall``
over message sizes from ``minbytes`` to ``maxbytes`` (multiplying by ``stepfactor``); NCCL on GPUs,
gloo on CPUs; one rank per GPU, on one node or across nodes (torchrun). With ``ngpus: N`` and a
single process (SuperBench's ``local`` mode with ``proc_num: 1``), the benchmark starts N ranks
itself on this host (one per GPU) with a rendezvous on 127.0.0.1.

Metrics per operation and size ``S`` (bytes, as nccl-tests prints it):

* ``<op>_<S>_time`` (us): time of one operation, averaged over ``num_steps`` back-to-back calls
  (CUDA events on GPUs), then averaged over the ranks (nccl-tests' default ``-a 1``);
* ``<op>_<S>_algbw`` (GB/s, 1e9): ``S / time``;
* ``<op>_<S>_busbw`` (GB/s): ``algbw * factor`` with nccl-tests' factors for ``n`` ranks:
  allreduce ``2(n-1)/n``; allgather, reducescatter, alltoall ``(n-1)/n``; broadcast, reduce ``1``.

``S`` is what nccl-tests calls the size: the whole buffer — allreduce/broadcast/reduce the tensor;
allgather the gathered output (each rank contributes S/n); reducescatter the input (each rank
keeps S/n); alltoall each rank's send buffer. Elements are float32; S is rounded down to a
multiple of 4·n bytes.

Every rank runs ``num_steps`` (``duration`` is not used: the ranks must agree on the number of
calls); the timed loop starts after a barrier. After timing, each (op, size) is run once more on known data and the result is checked on every
rank (a collective that is fast but delivers wrong data fails the benchmark).

gloo in older torch lacks ``reduce_scatter`` and ``all_to_all``: where the backend refuses them,
they run as the ring algorithm over point-to-point send/recv (reduce-scatter: n-1 steps, each
moving S/n per rank; all-to-all: n-1 pairwise exchanges of S/n) — the bytes each rank puts on the
wire are then what NCCL's algorithms move, so the busbw factors stay meaningful. The result's
``reason`` says when that happened; ``implementation: p2p`` forces it, ``native`` forbids it.
"""

from __future__ import annotations

import math
import os
import socket
from typing import Any

from sb_bench.core.benchmark import Benchmark, Case, CheckFailed, SkipBenchmark
from sb_bench.core.context import RankContext
from sb_bench.core.metric import Metric, Param, parse_size
from sb_bench.core.registry import register
from sb_bench.micro._collective import time_together

OPS = ("allreduce", "allgather", "broadcast", "reduce", "reducescatter", "alltoall")
P2P_CAPABLE = ("reducescatter", "alltoall")


def bus_factor(op: str, n: int) -> float:
    """nccl-tests' bus-bandwidth factor for ``op`` over ``n`` ranks."""
    if op == "allreduce":
        return 2.0 * (n - 1) / n
    if op in ("allgather", "reducescatter", "alltoall"):
        return (n - 1) / n
    if op in ("broadcast", "reduce"):
        return 1.0
    raise ValueError(f"unknown operation {op!r}")


def sizes(minbytes: int, maxbytes: int, stepfactor: int) -> list[int]:
    if minbytes <= 0 or maxbytes < minbytes:
        raise ValueError(f"need 0 < minbytes <= maxbytes (got {minbytes}, {maxbytes})")
    if stepfactor < 2:
        return [minbytes] if minbytes == maxbytes else [minbytes, maxbytes]
    out, s = [], minbytes
    while s <= maxbytes:
        out.append(s)
        s *= stepfactor
    return out


def actual_size(op: str, size: int, n: int) -> int:
    """The size in bytes actually moved: float32 elements, divisible into n chunks."""
    return max(4 * n, size // (4 * n) * (4 * n))


def metric_names(op: str, size: int) -> tuple[str, str, str]:
    return f"{op}_{size}_time", f"{op}_{size}_algbw", f"{op}_{size}_busbw"


def derive(op: str, size: int, seconds: float, n: int) -> dict[str, float]:
    """time (us), algbw and busbw (GB/s) from the time of one operation."""
    t, alg, bus = metric_names(op, size)
    algbw = size / seconds / 1e9
    return {t: seconds * 1e6, alg: algbw, bus: algbw * bus_factor(op, n)}


def _unsupported(exc: BaseException) -> bool:
    s = str(exc).lower()
    return (
        isinstance(exc, NotImplementedError)
        or "not supported" in s
        or "does not support" in s
        or "unsupported" in s
    )


class Collective:
    """One operation at one size on this rank: buffers, the timed call, and its check."""

    def __init__(self, op: str, size: int, ctx: RankContext, impl: str):
        import torch
        import torch.distributed as dist

        self.op, self.size, self.ctx, self.dist = op, size, ctx, dist
        self.n, self.rank = dist.get_world_size(), dist.get_rank()
        count = size // 4
        chunk = count // self.n
        dev = ctx.device
        f32 = torch.float32
        self.impl = "p2p" if impl == "p2p" and op in P2P_CAPABLE else "native"
        self.allow_fallback = impl == "auto" and op in P2P_CAPABLE
        if op in ("allreduce", "broadcast", "reduce"):
            self.buf = torch.zeros(count, dtype=f32, device=dev)
        elif op == "allgather":
            self.inp = torch.zeros(chunk, dtype=f32, device=dev)
            self.out = torch.zeros(chunk * self.n, dtype=f32, device=dev)
        elif op in ("reducescatter", "alltoall"):
            self.inp = torch.zeros(chunk * self.n, dtype=f32, device=dev)
            self.out = torch.zeros(chunk if op == "reducescatter" else chunk * self.n, dtype=f32, device=dev)
        # The ring's scratch buffers exist only when the ring runs (see _p2p_scratch).
        self.tmp: Any = None
        self.work: Any = None
        self.chunk = chunk
        # torch >= 2.10 renamed the tensor forms (the old names warn on every call).
        self._all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        self._reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

    # -- the operation ---------------------------------------------------------------------
    def __call__(self) -> None:
        d, op = self.dist, self.op
        if op == "allreduce":
            d.all_reduce(self.buf)
        elif op == "broadcast":
            d.broadcast(self.buf, 0)
        elif op == "reduce":
            d.reduce(self.buf, 0)
        elif op == "allgather":
            self._all_gather(self.out, self.inp)
        elif self.impl == "p2p":
            self._ring_reduce_scatter() if op == "reducescatter" else self._pairwise_all_to_all()
        elif op == "reducescatter":
            self._reduce_scatter(self.out, self.inp)
        else:
            d.all_to_all_single(self.out, self.inp)

    def first_call(self) -> None:
        """Run once, switching to the point-to-point algorithm if the backend lacks the collective."""
        try:
            self()
        except Exception as exc:
            if not (self.allow_fallback and self.impl == "native" and _unsupported(exc)):
                raise
            self.impl = "p2p"
            self.fallback_reason = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
            self()

    def _ring_reduce_scatter(self) -> None:
        import torch

        d, n, r, c = self.dist, self.n, self.rank, self.chunk
        if self.tmp is None:
            self.tmp = torch.empty(c, dtype=self.inp.dtype, device=self.inp.device)
            self.work = torch.empty(c * n, dtype=self.inp.dtype, device=self.inp.device)
        nxt, prv = (r + 1) % n, (r - 1) % n

        def part(t, i):
            return t[i * c : (i + 1) * c]

        send = part(self.inp, (r - 1) % n)
        for s in range(n - 1):
            recv_idx = (r - s - 2) % n
            reqs = [d.isend(send, nxt), d.irecv(self.tmp, prv)]
            for q in reqs:
                q.wait()
            dst = self.out if s == n - 2 else part(self.work, recv_idx)
            torch.add(part(self.inp, recv_idx), self.tmp, out=dst)
            send = dst

    def _pairwise_all_to_all(self) -> None:
        d, n, r, c = self.dist, self.n, self.rank, self.chunk
        self.out[r * c : (r + 1) * c].copy_(self.inp[r * c : (r + 1) * c])
        for s in range(1, n):
            dst, src = (r + s) % n, (r - s) % n
            reqs = [
                d.isend(self.inp[dst * c : (dst + 1) * c], dst),
                d.irecv(self.out[src * c : (src + 1) * c], src),
            ]
            for q in reqs:
                q.wait()

    # -- the check -------------------------------------------------------------------------
    def check(self) -> str | None:
        """Run once on known data; an error message when any rank got a wrong answer.

        The data are small integers held exactly in float32 (every sum too), written without
        temporaries the size of the buffer (an 8 GiB alltoall must not need 32 GiB more).
        """
        import torch

        n, r, c = self.n, self.rank, self.chunk
        total = n * (n + 1) // 2
        op = self.op
        if op in ("allreduce", "broadcast", "reduce"):
            self.buf.fill_(r + 1)
            self()
            want = {"allreduce": total, "broadcast": 1, "reduce": total if r == 0 else None}[op]
            err = None if want is None else _expect(self.buf, lambda i: want, len(self.buf))
        elif op == "allgather":
            self.inp.fill_(r + 1)
            self()
            err = _expect(self.out, lambda i: i // c + 1, len(self.out))
        elif op == "reducescatter":
            # Element i of every rank's input is (i % 7) + rank: rank r keeps n·(i % 7) + n(n-1)/2.
            fill_mod7(self.inp, offset=0, add=r)
            self()
            err = _expect(self.out, lambda i: ((r * c + i) % 7) * n + n * (n - 1) // 2, c)
        else:
            # Chunk j of rank r's input holds j·1000 + r; it lands as chunk r on rank j.
            for j in range(n):
                self.inp[j * c : (j + 1) * c].fill_(j * 1000 + r)
            self()
            err = _expect(self.out, lambda i: r * 1000 + i // c, len(self.out))
        flag = torch.tensor([1.0 if err else 0.0], device=self.ctx.device)
        self.dist.all_reduce(flag)
        if err:
            return f"{op} {self.size} B on rank {r}: {err}"
        if float(flag) > 0:
            return f"{op} {self.size} B: wrong data on {int(float(flag))} other rank(s)"
        return None


def fill_mod7(t, offset: int = 0, add: int = 0, block: int = 1 << 24) -> None:
    """``t[i] = (offset + i) % 7 + add``, computed in integers a block at a time (float32 cannot count
    past 2**24, and one int64 index tensor for 2G elements would take 16 GiB)."""
    import torch

    length = t.numel()
    for i0 in range(0, length, block):
        i1 = min(length, i0 + block)
        idx = torch.arange(offset + i0, offset + i1, dtype=torch.int64, device=t.device)
        t[i0:i1].copy_(idx.remainder_(7).add_(add))


def graph_step(coll: Collective, iters: int, ctx: RankContext) -> tuple[Any, int, str | None]:
    """(step, calls per step, why not): ``iters`` calls captured in one CUDA graph, so a small message
    is timed without Python's per-call overhead (nccl-tests' graph mode, ``-G``). Every rank agrees:
    if capture fails anywhere, all time the plain call (else the ranks' call counts would differ)."""
    import torch

    why = None
    graph = None
    try:
        side = torch.cuda.Stream(device=ctx.device)
        side.wait_stream(torch.cuda.current_stream(ctx.device))
        with torch.cuda.stream(side):
            coll()
        torch.cuda.current_stream(ctx.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(iters):
                coll()
    except Exception as exc:  # a backend or driver that cannot capture collectives
        why = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}" if str(exc) else type(exc).__name__
        graph = None
    flag = torch.tensor([0.0 if graph is not None else 1.0], device=ctx.device)
    coll.dist.all_reduce(flag)
    if float(flag) > 0 or graph is None:
        return coll, 1, why or "another rank could not capture"
    return graph.replay, iters, None


def _expect(t, want, length: int) -> str | None:
    """Compare a few positions of ``t`` (ends of every chunk-sized stretch) with ``want(i)``."""
    if length == 0:
        return None
    idx = sorted({0, length - 1, length // 2, length // 3, (2 * length) // 3})
    vals = t[idx].double().cpu().tolist()
    for pos, i in enumerate(idx):  # not zip(strict=True): the suite runs on Python 3.9
        v, w = vals[pos], want(i)
        if not math.isclose(v, w, rel_tol=1e-6, abs_tol=1e-6):
            return f"element {i} is {v:g}, expected {w:g}"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@register
class NcclBw(Benchmark):
    name = "nccl-bw"
    description = (
        "collective time, algbw and busbw per operation and message size (NCCL on GPUs, gloo on CPUs); "
        "metrics <op>_<bytes>_time (us), <op>_<bytes>_algbw and <op>_<bytes>_busbw (GB/s)"
    )
    needs_distributed = True
    params = {
        "operation": Param("list[str]", list(OPS), "collectives to measure", OPS),
        "minbytes": Param("size", 0, "smallest message (bytes; 0: 1M on GPUs, 1M on CPUs)"),
        "maxbytes": Param("size", 0, "largest message (bytes; 0: 8G on GPUs, 16M on CPUs)"),
        "stepfactor": Param("int", 2, "multiply the size by this from minbytes up to maxbytes"),
        "graph_below": Param(
            "size",
            16 << 20,
            "GPUs: sizes below this are timed as CUDA-graph replays of graph_iters calls "
            "(per-call host overhead out, as nccl-tests' -G); 0: never",
        ),
        "graph_iters": Param("int", 20, "calls captured in one CUDA graph for small sizes"),
        "ngpus": Param("int", 1, "ranks to start on this host when run as a single process (nccl-tests' -g)"),
        "implementation": Param(
            "str",
            "auto",
            "reducescatter/alltoall: auto (native, else ring over send/recv), native or p2p",
            ("auto", "native", "p2p"),
        ),
    }

    # -- declarations ----------------------------------------------------------------------------
    def _sizes(self, cuda: bool | None = None) -> list[int]:
        if cuda is None:
            cuda = _cuda_available()
        lo = self.args["minbytes"] or parse_size("1M")
        hi = self.args["maxbytes"] or parse_size("8G" if cuda else "16M")
        return sizes(lo, max(hi, lo), self.args["stepfactor"])

    def _world(self) -> int:
        world = int(os.environ.get("WORLD_SIZE", "1") or 1)
        return world if world > 1 else max(1, self.args["ngpus"])

    def metrics(self) -> list[Metric]:
        n = self._world()
        out = []
        for op in self.args["operation"]:
            for s in self._sizes():
                size = actual_size(op, s, n)
                t, alg, bus = metric_names(op, size)
                out += [
                    Metric(t, "us", False, "avg", f"{op} of {size} B: time per operation"),
                    Metric(alg, "GB/s", True, "avg", f"{op} of {size} B: algorithm bandwidth"),
                    Metric(bus, "GB/s", True, "avg", f"{op} of {size} B: bus bandwidth"),
                ]
        return out

    # -- work ------------------------------------------------------------------------------------
    def setup(self, ctx: RankContext) -> None:
        self.spawn = 0
        if not ctx.distributed or ctx.world_size < 2:
            if self.args["ngpus"] > 1 and ctx.world_size == 1:
                self.spawn = self.args["ngpus"]
                if ctx.is_cuda:
                    import torch

                    if torch.cuda.device_count() < self.spawn:
                        raise SkipBenchmark(
                            f"ngpus {self.spawn} but this host has {torch.cuda.device_count()} GPUs"
                        )
                return
            raise SkipBenchmark(
                "nccl-bw needs two or more ranks: run it in torch.distributed mode "
                "(proc_num >= 2 or node_num >= 2), or set ngpus >= 2"
            )

    def run_once(self, ctx: RankContext, harness) -> dict[str, float]:
        if self.spawn:
            return self._run_spawned(ctx, harness)
        return self.measure(ctx, harness)

    def measure(self, ctx: RankContext, harness) -> dict[str, float]:
        import torch
        import torch.distributed as dist

        n = dist.get_world_size()
        values: dict[str, float] = {}
        notes: dict[str, str] = getattr(self, "notes", None) or {}
        graph_below = self.args["graph_below"] if ctx.is_cuda else 0
        for op in self.args["operation"]:
            for s in self._sizes(ctx.is_cuda):
                size = actual_size(op, s, n)
                coll = Collective(op, size, ctx, self.args["implementation"])
                coll.first_call()
                if coll.impl == "p2p":
                    why = getattr(coll, "fallback_reason", "implementation: p2p")
                    notes[op] = (
                        f"{op} ran as point-to-point ring ({ctx.backend or dist.get_backend()}: {why})"
                    )
                step, per_step = coll, 1
                if size < graph_below:
                    step, per_step, why = graph_step(coll, self.args["graph_iters"], ctx)
                    if why:
                        notes["graph"] = f"CUDA graph capture failed, small sizes timed eagerly: {why}"
                case = Case(f"{op}_{size}", step, lambda sec: {"seconds": sec})
                sec = time_together(ctx, harness, case)["seconds"] / per_step
                err = coll.check()
                # nccl-tests' default: the time averaged over the ranks.
                t = torch.tensor([sec], dtype=torch.float64, device=ctx.device)
                dist.all_reduce(t)
                del case, step, coll  # free this size's buffers before the next (larger) one
                if ctx.is_cuda:
                    torch.cuda.empty_cache()
                if err:
                    # One wrong (operation, size) fails the result but keeps every other figure.
                    self.fail_metric(metric_names(op, size), err)
                    continue
                values.update(derive(op, size, float(t) / n, n))
                # This rank's own samples of the operation's time: how steady it was here.
                harness.record_samples(
                    lambda sec, op=op, size=size: derive(op, size, sec, n),
                    [lap / per_step for lap in harness.last_laps],
                )
        if notes:
            self.notes = notes
        return values

    def _run_spawned(self, ctx: RankContext, harness) -> dict[str, float]:
        import torch.multiprocessing as mp

        mpctx = mp.get_context("spawn")
        q = mpctx.SimpleQueue()
        port = _free_port()
        h = {"num_warmup": harness.num_warmup, "num_steps": harness.num_steps, "duration": harness.duration}
        try:
            mp.start_processes(
                _spawned_rank,
                args=(self.spawn, port, self.args, h, ctx.device.type, q),
                nprocs=self.spawn,
                join=True,
                start_method="spawn",
            )
        except Exception as exc:
            if q.empty():
                raise RuntimeError(
                    f"a spawned rank failed: {str(exc).strip().splitlines()[-1][:300]}"
                ) from exc
        if q.empty():
            raise RuntimeError("the spawned ranks ended without a result")
        kind, payload = q.get()
        if kind == "error":
            if payload.startswith("check: "):
                raise CheckFailed(payload[len("check: ") :])
            raise RuntimeError(payload)
        values, notes, failed, rank0_samples = payload
        for name, xs in rank0_samples.items():  # rank 0's samples: how steady the group's loop was
            harness.samples.setdefault(name, []).extend(xs)
        if notes:
            self.notes = notes
        for name, why in failed.items():
            self.fail_metric(name, why)
        return values


def _spawned_rank(rank: int, world: int, port: int, args: dict, h: dict, device: str, q: Any) -> None:
    """One rank started by ``ngpus``: join a local group, measure, rank 0 reports."""
    import datetime

    import torch
    import torch.distributed as dist

    from sb_bench.core.harness import Harness

    if device == "cuda":
        torch.cuda.set_device(rank)
        dev = torch.device("cuda", rank)
    else:
        dev = torch.device("cpu")
    ctx = RankContext(rank, rank, world, world, 0, dev)
    ctx.backend = "nccl" if device == "cuda" else "gloo"
    try:
        dist.init_process_group(
            ctx.backend,
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=world,
            timeout=datetime.timedelta(seconds=300),
        )
        ctx.distributed = True
        bench = NcclBw(args)
        harness = Harness(h)
        values = bench.measure(ctx, harness)
        if rank == 0:
            payload = (values, getattr(bench, "notes", {}), getattr(bench, "failed", {}), harness.samples)
            q.put(("ok", payload))
    except CheckFailed as exc:
        if rank == 0:
            q.put(("error", f"check: {exc}"))
        raise
    except Exception as exc:
        if rank == 0:
            q.put(("error", f"rank {rank}: {type(exc).__name__}: {exc}"))
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


if __name__ == "__main__":
    import sys

    from sb_bench.__main__ import standalone_main

    sys.exit(standalone_main(NcclBw.name))
