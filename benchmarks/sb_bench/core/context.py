"""Where a benchmark rank runs: rank numbers, device, distributed group, timers.

The same code serves GPU and CPU. On CUDA, time is measured with CUDA events
around the timed loop (asynchronous launches are counted when they finish,
not when they are queued); on CPU with ``perf_counter``. Either way the
device is synchronised before the clock starts and after it stops.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import Any

# Variables that make float32 GEMMs run as TF32 behind the benchmark's back: NVIDIA's PyTorch
# containers set TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1, which overrides ``allow_tf32 = False`` (fp32_flops
# would report the TF32 rate); NVIDIA_TF32_OVERRIDE=0 does the opposite (tf32_tc would run as fp32).
TF32_OVERRIDE_VARS = ("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "NVIDIA_TF32_OVERRIDE")
# torchrun's rank variables: in sb-fleet's local mode (PROC_RANK set by the runner, no torchrun) they
# can only be strays from the host's environment (a Kubernetes pod sets WORLD_SIZE and RANK).
TORCHRUN_RANK_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK")


def clean_benchmark_env(env: MutableMapping[str, str]) -> dict[str, str]:
    """Remove what would make a benchmark process measure the wrong thing; the removed variables.

    Call before torch is imported (cuBLAS reads the TF32 override once). Local mode is recognised by
    ``PROC_RANK`` without ``TORCHELASTIC_RUN_ID`` (which torchrun always sets).
    """
    drop = list(TF32_OVERRIDE_VARS)
    if "PROC_RANK" in env and "TORCHELASTIC_RUN_ID" not in env:
        drop += TORCHRUN_RANK_VARS
    return {k: env.pop(k) for k in drop if k in env}


def _env_int(*names: str, default: int) -> int:
    for n in names:
        v = os.environ.get(n)
        if v not in (None, ""):
            return int(v)
    return default


@dataclass
class Elapsed:
    seconds: float = 0.0


@dataclass
class Laps:
    """A timed loop's laps: ``(seconds, steps)`` each (see :meth:`RankContext.lap_timer`)."""

    laps: list[tuple[float, int]] = field(default_factory=list)
    seconds: float = 0.0

    def mark(self, steps: int) -> None:  # replaced by the timer that yields this object
        raise RuntimeError("Laps.mark outside a lap_timer")


@dataclass(frozen=True)
class HostDevice:
    """The device of a benchmark that runs on the host alone and never imports torch."""

    type: str = "host"


@dataclass
class RankContext:
    """One process's view: its rank, the world, and its device."""

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int
    node_rank: int
    device: Any  # torch.device
    distributed: bool = False
    backend: str | None = None
    extras: dict = field(default_factory=dict)
    group: Any = None  # a HostGroup: the host-only benchmarks' group outside torchrun

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def uses_host_group(self) -> bool:
        """Whether this rank's group is the plain TCP one (a host-only benchmark outside torchrun)."""
        return self.device.type == "host" and "TORCHELASTIC_RUN_ID" not in os.environ

    @classmethod
    def from_env(cls, device: str = "auto") -> RankContext:
        """Build from torchrun's variables (RANK, LOCAL_RANK, WORLD_SIZE…) or sb-fleet's local mode (PROC_RANK)."""
        rank = _env_int("RANK", "PROC_RANK", default=0)
        local_rank = _env_int("LOCAL_RANK", "PROC_RANK", default=0)
        world = _env_int("WORLD_SIZE", default=1)
        local_world = _env_int("LOCAL_WORLD_SIZE", "PROC_NUM", default=1)
        node_rank = _env_int("GROUP_RANK", "NODE_RANK", default=0)
        if device == "host":  # host-only benchmarks (noop): no torch import, host clock
            return cls(rank, local_rank, world, local_world, node_rank, HostDevice())
        import torch

        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if device == "cuda":
            if not torch.cuda.is_available():
                raise RuntimeError("device cuda requested but torch sees no CUDA device")
            # local mode pins one GPU per process with CUDA_VISIBLE_DEVICES: it is then cuda:0.
            idx = local_rank % max(torch.cuda.device_count(), 1)
            torch.cuda.set_device(idx)
            dev = torch.device("cuda", idx)
        else:
            dev = torch.device("cpu")
        return cls(rank, local_rank, world, local_world, node_rank, dev)

    def init_distributed(self, timeout_s: float = 300.0) -> None:
        """Join the group the launcher set up: NCCL on GPUs, gloo on CPU; a host-only benchmark outside
        torchrun (``mpi`` mode) joins a plain TCP group instead, with no torch import
        (:mod:`sb_bench.core.hostgroup`)."""
        if self.uses_host_group:
            if self.world_size > 1 and self.group is None:
                self.group = _host_group(self.rank, self.world_size, timeout_s)
                self.backend, self.distributed = "tcp", True
            return
        import datetime

        import torch.distributed as dist

        if self.world_size <= 1 or dist.is_initialized():
            self.distributed = dist.is_initialized()
            return
        self.backend = "nccl" if self.is_cuda else "gloo"
        dist.init_process_group(self.backend, timeout=datetime.timedelta(seconds=timeout_s))
        self.distributed = True

    def close(self) -> None:
        if self.group is not None:
            self.group.close()
            self.group, self.distributed = None, False
        if self.distributed:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
            self.distributed = False

    def sync(self) -> None:
        if self.is_cuda:
            import torch

            torch.cuda.synchronize(self.device)

    def barrier(self) -> None:
        if self.group is not None:
            self.group.barrier()
        elif self.distributed:
            import torch.distributed as dist

            dist.barrier()

    def all_gather(self, value: Any) -> list[Any]:
        """Every rank's small ``value``, in rank order (the host group's JSON: a tuple comes back a list)."""
        if self.group is not None:
            return self.group.all_gather(value)
        if not self.distributed:
            return [value]
        import torch.distributed as dist

        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, value)
        return out

    @contextlib.contextmanager
    def timer(self) -> Iterator[Elapsed]:
        """Time the enclosed work on this rank's device."""
        out = Elapsed()
        if self.is_cuda:
            import torch

            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize(self.device)
            start.record()
            yield out
            end.record()
            end.synchronize()
            out.seconds = start.elapsed_time(end) / 1e3
        else:
            t0 = time.perf_counter()
            yield out
            out.seconds = time.perf_counter() - t0

    @contextlib.contextmanager
    def lap_timer(self) -> Iterator[Laps]:
        """Time the enclosed work in laps: ``laps.mark(steps)`` after each group of steps. On CUDA each
        mark records an event on the current stream (no synchronisation inside the loop; the events are
        read once the loop is done), on the host it reads ``perf_counter``. ``laps.laps`` then holds
        ``(seconds, steps)`` per lap and ``laps.seconds`` their sum."""
        out = Laps()
        if self.is_cuda:
            import torch

            torch.cuda.synchronize(self.device)
            first = torch.cuda.Event(enable_timing=True)
            first.record()
            events: list[tuple[Any, int]] = []

            def mark(steps: int) -> None:
                ev = torch.cuda.Event(enable_timing=True)
                ev.record()
                events.append((ev, steps))

            out.mark = mark  # type: ignore[method-assign]
            yield out
            if not events:
                mark(0)
            events[-1][0].synchronize()
            prev = first
            for ev, steps in events:
                out.laps.append((prev.elapsed_time(ev) / 1e3, steps))
                prev = ev
        else:
            marks: list[tuple[float, int]] = []

            def mark_host(steps: int) -> None:
                marks.append((time.perf_counter(), steps))

            out.mark = mark_host  # type: ignore[method-assign]
            t0 = time.perf_counter()
            yield out
            if not marks:
                mark_host(0)
            prev_t = t0
            for t, steps in marks:
                out.laps.append((t - prev_t, steps))
                prev_t = t
        out.seconds = sum(s for s, _ in out.laps)

    def wall_timer(self) -> contextlib.AbstractContextManager[Elapsed]:
        """Host wall-clock time of the enclosed work, device synchronised at both ends."""
        return _wall(self)


@contextlib.contextmanager
def _wall(ctx: RankContext) -> Iterator[Elapsed]:
    out = Elapsed()
    ctx.sync()
    t0 = time.perf_counter()
    yield out
    ctx.sync()
    out.seconds = time.perf_counter() - t0


def _host_group(rank: int, world: int, timeout_s: float) -> Any:
    from sb_bench.core.hostgroup import GroupError, HostGroup

    addr, port = os.environ.get("MASTER_ADDR", ""), os.environ.get("MASTER_PORT", "")
    if not addr or not port.isdigit():
        raise GroupError(f"MASTER_ADDR and MASTER_PORT must name rank 0 (got {addr!r}, {port!r})")
    # the run and the pattern's round and group: a rank of another group is refused, not mixed in
    job = "/".join(
        os.environ.get(k, "") for k in ("SB_RUN_ID", "SB_MODE_SERIAL_INDEX", "SB_MODE_PARALLEL_INDEX")
    )
    return HostGroup.join(rank, world, addr, int(port), timeout_s, job=job)
