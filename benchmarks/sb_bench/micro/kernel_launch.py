"""kernel-launch: GPU kernel launch overhead, ``event_time`` and ``wall_time`` (ms), per GPU.

The kernel is the smallest one torch can launch: an in-place add on a one-element tensor.
PyTorch's dispatcher (a few microseconds of host time) is part of every launch, as it is of every
launch a PyTorch workload makes; SuperBench's own binary launches a raw empty kernel, so compare
with baselines measured by this suite.

* ``event_time``: ``num_steps`` launches back to back, timed with CUDA events around the whole
  loop, divided by ``num_steps`` — the device-side interval between consecutive kernels.
* ``wall_time``: host wall-clock time of one launch followed by a device synchronisation
  (``torch.cuda.synchronize``), averaged over ``num_steps`` — the full round trip.

On a CPU the same two loops run (the "device" clock is then the host clock and the synchronisation
a no-op): ``event_time`` is the per-op time of back-to-back tiny ops and ``wall_time`` adds the
per-launch timing overhead. Both are dispatch overheads, not GPU launch latencies.
"""

from __future__ import annotations

import time

from sb_bench.benchmark import Benchmark, Case
from sb_bench.context import RankContext
from sb_bench.metric import Metric
from sb_bench.registry import register


@register
class KernelLaunch(Benchmark):
    name = "kernel-launch"
    description = (
        "kernel launch overhead: back-to-back launches timed by device events, and launch+sync wall time (ms)"
    )
    params: dict = {}

    def metrics(self) -> list[Metric]:
        return [
            Metric("event_time", "ms", False, None, "device-side time per launch, back to back"),
            Metric("wall_time", "ms", False, None, "host time of one launch plus synchronisation"),
        ]

    def setup(self, ctx: RankContext) -> None:
        import torch

        self.x = torch.zeros(1, device=ctx.device)

    def run_once(self, ctx: RankContext, harness) -> dict[str, float]:
        x = self.x

        def launch():
            x.add_(1.0)

        values = harness.time_case(ctx, Case("event", launch, lambda s: {"event_time": s * 1e3}))
        sync = ctx.sync
        steps = harness.num_steps
        for _ in range(harness.num_warmup):
            launch()
            sync()
        t0 = time.perf_counter()
        for _ in range(steps):
            launch()
            sync()
        values["wall_time"] = (time.perf_counter() - t0) / steps * 1e3
        return values


if __name__ == "__main__":
    import sys

    from sb_bench.__main__ import standalone_main

    sys.exit(standalone_main(KernelLaunch.name))
