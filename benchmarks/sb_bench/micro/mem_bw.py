"""mem-bw: host<->device and device-local copy bandwidth (GB/s, 1 GB = 1e9 bytes), per GPU.

Bytes counted per copy of ``size`` bytes, as CUDA's bandwidthTest counts them:

* ``h2d_bw``: ``size`` / time of ``device.copy_(host)`` from pinned (page-locked) host memory;
* ``d2h_bw``: ``size`` / time of ``host.copy_(device)`` into pinned host memory;
* ``d2d_bw``: ``2 * size`` / time of a copy inside device memory (every byte is read and written);
* ``bidir_bw`` (on request, ``mem_type: [bidir]``; this suite's name, nvbandwidth's
  bidirectional host-device copy): one copy each way at once on two streams, ``2 * size`` / time.

Copies are issued back to back (``non_blocking``) and timed with CUDA events. Set
``memory: unpinned`` to measure pageable host memory instead (it goes through a staging buffer).

On a CPU there is no host-device link: ``h2d_bw`` and ``d2h_bw`` are skipped with that reason
(a host-to-host copy under those names would be read as a PCIe figure), and ``d2d_bw`` measures a
copy inside the device's memory, which for the CPU device is host memory (2·size per copy).
"""

from __future__ import annotations

from sb_bench.core.benchmark import Benchmark, Case
from sb_bench.core.context import RankContext
from sb_bench.core.metric import Metric, Param
from sb_bench.core.registry import register

TYPES = {"htod": "h2d_bw", "dtoh": "d2h_bw", "dtod": "d2d_bw", "bidir": "bidir_bw"}
DEFAULT_TYPES = ["htod", "dtoh", "dtod"]  # SuperBench's three; bidir on request


@register
class MemBw(Benchmark):
    name = "mem-bw"
    description = "host-to-device, device-to-host (pinned) and device-to-device copy bandwidth (GB/s)"
    params = {
        "mem_type": Param("list[str]", DEFAULT_TYPES, "copies to measure", tuple(TYPES)),
        "size": Param("size", 0, "bytes per copy (0: 256M on a GPU, 64M on a CPU)"),
        "memory": Param("str", "pinned", "host memory for h2d/d2h", ("pinned", "unpinned")),
    }

    def metrics(self) -> list[Metric]:
        desc = {
            "h2d_bw": "host to device copy",
            "d2h_bw": "device to host copy",
            "d2d_bw": "device to device copy",
            "bidir_bw": "host to device and device to host at once (both directions' bytes)",
        }
        return [Metric(TYPES[t], "GB/s", True, None, desc[TYPES[t]]) for t in self.args["mem_type"]]

    def setup(self, ctx: RankContext) -> None:
        import torch

        size = self.args["size"] or ((256 << 20) if ctx.is_cuda else (64 << 20))
        self.size = size
        self.bufs = {}
        if not ctx.is_cuda:
            self.skip_metric(["h2d_bw", "d2h_bw", "bidir_bw"], "no host-device link on a CPU")
        types = self.args["mem_type"]
        pinned = self.args["memory"] == "pinned"
        if ctx.is_cuda and ("htod" in types or "dtoh" in types or "bidir" in types):
            self.bufs["host"] = torch.ones(size, dtype=torch.uint8, pin_memory=pinned)
        if ctx.is_cuda and "bidir" in types:
            self.bufs["host2"] = torch.empty(size, dtype=torch.uint8, pin_memory=pinned)
            self.bufs["dev3"] = torch.ones(size, dtype=torch.uint8, device=ctx.device)
            self.streams = (torch.cuda.Stream(ctx.device), torch.cuda.Stream(ctx.device))
        if ctx.is_cuda or "dtod" in types:
            self.bufs["dev"] = torch.ones(size, dtype=torch.uint8, device=ctx.device)
        if "dtod" in types:
            self.bufs["dev2"] = torch.empty(size, dtype=torch.uint8, device=ctx.device)

    def teardown(self, ctx: RankContext) -> None:
        self.bufs = {}

    def _bidir(self) -> None:
        """One copy each way at once, on two streams (each direction has its own copy engine);
        the timing stream waits for both."""
        import torch

        b = self.bufs
        cur = torch.cuda.current_stream()
        up, down = self.streams
        up.wait_stream(cur)
        down.wait_stream(cur)
        with torch.cuda.stream(up):
            b["dev"].copy_(b["host"], non_blocking=True)
        with torch.cuda.stream(down):
            b["host2"].copy_(b["dev3"], non_blocking=True)
        cur.wait_stream(up)
        cur.wait_stream(down)

    def cases(self, ctx: RankContext):
        size = self.size
        b = self.bufs
        nb = ctx.is_cuda
        types = self.args["mem_type"]
        if ctx.is_cuda and "htod" in types:
            yield Case(
                "htod",
                lambda: b["dev"].copy_(b["host"], non_blocking=nb),
                lambda s: {"h2d_bw": size / s / 1e9},
            )
        if ctx.is_cuda and "dtoh" in types:
            yield Case(
                "dtoh",
                lambda: b["host"].copy_(b["dev"], non_blocking=nb),
                lambda s: {"d2h_bw": size / s / 1e9},
            )
        if ctx.is_cuda and "bidir" in types:
            yield Case("bidir", self._bidir, lambda s: {"bidir_bw": 2 * size / s / 1e9})
        if "dtod" in types:
            yield Case(
                "dtod",
                lambda: b["dev2"].copy_(b["dev"]),
                lambda s: {"d2d_bw": 2 * size / s / 1e9},
                lambda: (
                    None
                    if bool(b["dev2"][-1] == 1) and bool(b["dev2"][0] == 1)
                    else "copy produced wrong data"
                ),
            )


if __name__ == "__main__":
    import sys

    from sb_bench.__main__ import standalone_main

    sys.exit(standalone_main(MemBw.name))
