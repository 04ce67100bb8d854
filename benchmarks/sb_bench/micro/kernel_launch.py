"""kernel-launch: GPU kernel launch overhead, as SuperBench measures it (ms), per GPU.

SuperBench's metrics, measured the way its ``kernel_launch_overhead`` binary does, by the same
kind of code (:mod:`sb_bench.micro.launch_native`: ``native/kernel_launch.cu`` built with nvcc,
else NVRTC through cuda-python), ``num_steps`` times each and averaged:

* ``event_time``: record a CUDA event, launch an empty kernel (``<<<1, 1>>>``, default stream),
  record a second event, wait for it: the device-side time between the two events. SuperBench's
  test data reads 5.5-6.0 us (0.0055-0.006 ms) on A100-class GPUs;
* ``wall_time``: the host clock around one launch followed by ``cudaDeviceSynchronize`` (about
  10 us there): the full round trip.

SuperBench sleeps ``interval`` ms between the two loops; so does this. Then this suite's own, through
PyTorch (what a PyTorch workload pays per launch; its dispatcher adds a few microseconds):

* ``torch_launch_time``: host time of one ``x.add_(1.0)`` on a one-element tensor followed by
  ``torch.cuda.synchronize()``: ``wall_time`` through PyTorch;
* ``back_to_back_time``: ``num_steps`` such launches queued back to back, timed around the whole
  loop, per launch: the sustainable launch rate of one host thread.

Without a GPU, ``event_time`` and ``wall_time`` are skipped (they are GPU quantities), and the two
torch figures are the host's dispatch time of a tiny op (synchronisation is a no-op).

The two torch windows are short (200 CPU launches: under a millisecond), so one preemption of the
process (a time slice of another process: 4-40 ms) can be most of a window. Such a window is timed
again (:meth:`~sb_bench.core.harness.Harness.timed_window`, at most
:data:`~sb_bench.core.samples.MAX_RETRIES` times, said in the result's ``reason``), and its samples
never collapse into one (:mod:`sb_bench.core.samples`). On a loopback fleet, where every simulated
host shares the one machine's CPUs and the hosts start kernel-launch together (the nccl-bw before it
ends on all of them at once), such a stall hit one host's window or another in every round measured.
"""

from __future__ import annotations

import time

from sb_bench.core.benchmark import Benchmark, Case
from sb_bench.core.context import RankContext
from sb_bench.core.metric import Metric, Param
from sb_bench.core.registry import register
from sb_bench.core.samples import lap_every, merge_laps
from sb_bench.micro.launch_native import NativeUnavailable, load_launcher

SUPERBENCH_METRICS = ("event_time", "wall_time")


@register
class KernelLaunch(Benchmark):
    name = "kernel-launch"
    description = (
        "kernel launch overhead (ms): SuperBench's empty-kernel event and wall times (native code), and "
        "the same through PyTorch"
    )
    params = {
        "num_warmup": Param("int", 100, "untimed launches before each timed loop"),
        "num_steps": Param("int", 2000, "timed launches per metric (SuperBench's default: 2000000)"),
        "interval": Param(
            "int", 2000, "ms to sleep between the event-time and wall-time loops (SuperBench's)"
        ),
    }

    def metrics(self) -> list[Metric]:
        return [
            Metric(
                "event_time",
                "ms",
                False,
                None,
                "device time between CUDA events around one empty-kernel launch",
            ),
            Metric(
                "wall_time",
                "ms",
                False,
                None,
                "host time of one empty-kernel launch plus cudaDeviceSynchronize",
            ),
            Metric(
                "torch_launch_time", "ms", False, None, "host time of one PyTorch op launch plus synchronise"
            ),
            Metric(
                "back_to_back_time",
                "ms",
                False,
                None,
                "time per PyTorch launch, launches queued back to back",
            ),
        ]

    def setup(self, ctx: RankContext) -> None:
        import torch

        self.x = torch.zeros(1, device=ctx.device)
        self.launcher = None
        if not ctx.is_cuda:
            self.skip_metric(SUPERBENCH_METRICS, "no CUDA GPU here: a kernel launch is a GPU quantity")
            return
        index = ctx.device.index or 0
        try:
            launcher = load_launcher(torch.cuda.get_device_capability(index))
            launcher.set_device(index)
        except NativeUnavailable as e:
            self.skip_metric(SUPERBENCH_METRICS, f"the native empty-kernel probe is unavailable: {e}")
            return
        self.launcher = launcher

    def run_once(self, ctx: RankContext, harness) -> dict[str, float]:
        values: dict[str, float] = {}
        if self.launcher is not None:
            warm, steps = harness.num_warmup, harness.num_steps
            values["event_time"] = self.launcher.event_time_ms(warm, steps)
            time.sleep(max(int(self.args.get("interval", 0)), 0) / 1e3)
            values["wall_time"] = self.launcher.wall_time_ms(warm, steps)
        x = self.x

        def launch():
            x.add_(1.0)

        values.update(
            harness.time_case(ctx, Case("back_to_back", launch, lambda s: {"back_to_back_time": s * 1e3}))
        )
        torch_round_trip_ms(ctx, launch, harness.num_warmup, 0)

        def window() -> list[tuple[float, int]]:
            laps: list[tuple[float, int]] = []
            torch_round_trip_ms(ctx, launch, 0, harness.num_steps, laps)
            return laps

        # The figure is the kept window's (a window one stalled lap dominated is timed again).
        laps = harness.timed_window(ctx, "torch_launch", window)
        values["torch_launch_time"] = sum(s for s, _ in laps) / sum(n for _, n in laps) * 1e3
        harness.record_samples(lambda s: {"torch_launch_time": s * 1e3}, merge_laps(laps))
        return values


def torch_round_trip_ms(
    ctx: RankContext, launch, warmups: int, steps: int, laps: list[tuple[float, int]] | None = None
) -> float:
    """Host time of one launch followed by a device synchronisation, averaged (ms); ``laps`` receives
    ``(seconds, steps)`` every few steps (at most MAX_LAPS readings) for the run's samples."""
    sync = ctx.sync
    for _ in range(warmups):
        launch()
        sync()
    if steps <= 0:
        return 0.0
    every = lap_every(steps)
    t0 = prev = time.perf_counter()
    done = 0
    while done < steps:
        n = min(every, steps - done)
        for _ in range(n):
            launch()
            sync()
        done += n
        if laps is not None:
            now = time.perf_counter()
            laps.append((now - prev, n))
            prev = now
    return (time.perf_counter() - t0) / steps * 1e3


if __name__ == "__main__":
    import sys

    from sb_bench.__main__ import standalone_main

    sys.exit(standalone_main(KernelLaunch.name))
