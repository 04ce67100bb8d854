"""gpu-stream: device memory (HBM) bandwidth with the four STREAM kernels, per GPU (GB/s, 1e9 B/s).

McCalpin's STREAM kernels on three float64 arrays ``a``, ``b``, ``c`` of ``size`` bytes each in the
device's memory, scalar ``q = 3``, each one torch kernel:

* ``copy``:  ``c = a``          (2 arrays moved per pass)
* ``scale``: ``b = q·c``        (2)
* ``add``:   ``c = a + b``      (3)
* ``triad``: ``a = b + q·c``    (3)

Bytes counted per pass: arrays moved x ``size`` (each read once and each write once, as STREAM
counts; write-allocate traffic not counted). Time: CUDA events around ``num_steps`` back-to-back
passes after warm-up. The arrays are far larger than the L2 cache (default 1 GiB each on a GPU).
After each kernel is timed, sampled entries are compared with the values STREAM's sequence must
produce (a=1, b=2, c=0 at the start: c=1, b=3, c=4, a=15): wrong data fails the benchmark.

Metrics (this suite's names; SuperBench's gpu-stream is a CUDA binary with its own):
``stream_copy_bw``, ``stream_scale_bw``, ``stream_add_bw``, ``stream_triad_bw``. On a CPU the same
kernels measure the host's memory through torch (fewer threads than a tuned STREAM binary).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from sb_bench.core.benchmark import Benchmark, Case
from sb_bench.core.context import RankContext
from sb_bench.core.metric import Metric, Param
from sb_bench.core.registry import register

KERNELS = ("copy", "scale", "add", "triad")
# arrays moved per pass, and the value the kernel's output holds afterwards (STREAM's sequence)
MOVED = {"copy": 2, "scale": 2, "add": 3, "triad": 3}
EXPECT = {"copy": ("c", 1.0), "scale": ("b", 3.0), "add": ("c", 4.0), "triad": ("a", 15.0)}
SCALAR = 3.0


def bandwidth_gbs(kernel: str, size: int, seconds: float) -> float:
    return MOVED[kernel] * size / seconds / 1e9


@register
class GpuStream(Benchmark):
    name = "gpu-stream"
    description = "device memory bandwidth: STREAM copy, scale, add, triad on float64 arrays (GB/s)"
    params = {
        "size": Param("size", 0, "bytes per array (0: 1G on a GPU, 64M on a CPU)"),
        "kernels": Param("list[str]", list(KERNELS), "STREAM kernels to run", KERNELS),
        "num_steps": Param("int", 200, "timed passes per kernel"),
        "num_warmup": Param("int", 10, "untimed passes per kernel"),
    }

    def metrics(self) -> list[Metric]:
        return [
            Metric(f"stream_{k}_bw", "GB/s", True, None, f"STREAM {k}: device memory bandwidth")
            for k in self.args["kernels"]
        ]

    def setup(self, ctx: RankContext) -> None:
        import torch

        size = self.args["size"] or ((1 << 30) if ctx.is_cuda else (64 << 20))
        n = max(1, size // 8)
        self.size = n * 8
        f64 = torch.float64
        self.arr = {
            "a": torch.full((n,), 1.0, dtype=f64, device=ctx.device),
            "b": torch.full((n,), 2.0, dtype=f64, device=ctx.device),
            "c": torch.zeros(n, dtype=f64, device=ctx.device),
        }

    def teardown(self, ctx: RankContext) -> None:
        self.arr = {}

    def cases(self, ctx: RankContext):
        import torch

        a, b, c = (self.arr[k] for k in "abc")
        steps: dict[str, Callable[[], Any]] = {
            "copy": lambda: c.copy_(a),
            "scale": lambda: torch.mul(c, SCALAR, out=b),
            "add": lambda: torch.add(a, b, out=c),
            "triad": lambda: torch.add(b, c, alpha=SCALAR, out=a),
        }
        # STREAM's order matters for the expected values: run the kernels in its order.
        for k in [k for k in KERNELS if k in self.args["kernels"]]:
            yield Case(k, steps[k], functools.partial(self._rate, k), functools.partial(self._check, k))

    def _rate(self, kernel: str, seconds: float) -> dict[str, float]:
        return {f"stream_{kernel}_bw": bandwidth_gbs(kernel, self.size, seconds)}

    def _check(self, kernel: str) -> str | None:
        name, want = EXPECT[kernel]
        if not set(self.args["kernels"]) >= set(KERNELS[: KERNELS.index(kernel) + 1]):
            return None  # a partial sequence: the expected values differ; the rate is still timed
        t = self.arr[name]
        n = t.numel()
        idx = sorted({0, n // 3, n // 2, (2 * n) // 3, n - 1})
        for i, v in zip(idx, t[idx].cpu().tolist()):  # noqa: B905 - the suite runs on Python 3.9
            if v != want:
                return f"{kernel}: {name}[{i}] is {v!r}, expected {want!r}"
        return None


if __name__ == "__main__":
    import sys

    from sb_bench.__main__ import standalone_main

    sys.exit(standalone_main(GpuStream.name))
