"""kernel-launch: GPU kernel launch overhead, ``event_time`` and ``wall_time`` (ms), per GPU.

The kernel is the smallest one torch can launch: an in-place add on a one-element tensor.
PyTorch's dispatcher (a few microseconds of host time) is part of every launch, as it is of every
launch a PyTorch workload makes; SuperBench's own binary launches a raw empty kernel, so its
figures are lower by about that much: compare with baselines measured by this suite.

What SuperBench's metrics mean, measured the same way, ``num_steps`` times and averaged:

* ``event_time``: record a CUDA event, launch, record a second event, wait for it; the device-side
  time between the two events (the launch as the idle GPU sees it);
* ``wall_time``: host wall-clock time of one launch followed by a device synchronisation
  (``torch.cuda.synchronize``) — the full round trip.

And one of this suite's own:

* ``back_to_back_time``: ``num_steps`` launches queued back to back, timed with CUDA events around
  the whole loop, divided by ``num_steps`` — the sustainable launch rate of one host thread.

On a CPU the same loops run with the host clock (synchronisation is a no-op): all three are then
dispatch overheads of a tiny op, not GPU launch latencies.
"""

from __future__ import annotations

import time

from sb_bench.core.benchmark import Benchmark, Case
from sb_bench.core.context import RankContext
from sb_bench.core.metric import Metric, Param
from sb_bench.core.registry import register


@register
class KernelLaunch(Benchmark):
    name = "kernel-launch"
    description = (
        "kernel launch overhead: per-launch device event time, launch+sync wall time, and back-to-back "
        "launch time (ms)"
    )
    params = {
        "num_warmup": Param("int", 100, "untimed launches before timing"),
        "num_steps": Param("int", 2000, "timed launches per metric"),
    }

    def metrics(self) -> list[Metric]:
        return [
            Metric("event_time", "ms", False, None, "device time between events around one launch"),
            Metric("wall_time", "ms", False, None, "host time of one launch plus synchronisation"),
            Metric("back_to_back_time", "ms", False, None, "time per launch, launches queued back to back"),
        ]

    def setup(self, ctx: RankContext) -> None:
        import torch

        self.x = torch.zeros(1, device=ctx.device)

    def run_once(self, ctx: RankContext, harness) -> dict[str, float]:
        x = self.x

        def launch():
            x.add_(1.0)

        values = harness.time_case(
            ctx, Case("back_to_back", launch, lambda s: {"back_to_back_time": s * 1e3})
        )
        steps = harness.num_steps
        sync = ctx.sync
        for _ in range(harness.num_warmup):
            launch()
            sync()
        values["event_time"] = per_launch_event_ms(ctx, launch, steps)
        t0 = time.perf_counter()
        for _ in range(steps):
            launch()
            sync()
        values["wall_time"] = (time.perf_counter() - t0) / steps * 1e3
        return values


def per_launch_event_ms(ctx: RankContext, launch, steps: int) -> float:
    """Mean of ``steps`` single launches, each between two events and waited for (ms)."""
    total = 0.0
    if ctx.is_cuda:
        import torch

        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        for _ in range(steps):
            start.record()
            launch()
            end.record()
            end.synchronize()
            total += start.elapsed_time(end)
        return total / steps
    for _ in range(steps):
        t0 = time.perf_counter()
        launch()
        total += time.perf_counter() - t0
    return total / steps * 1e3


if __name__ == "__main__":
    import sys

    from sb_bench.__main__ import standalone_main

    sys.exit(standalone_main(KernelLaunch.name))
