"""pytorch-matmul: one large ``torch.matmul`` on one device, ``nosharding_time`` (ms), per GPU.

``C[m,n] = A[m,k] @ B[k,n]`` (config entry ``matmul``), 2·m·n·k FLOPs per step; time per step
in ms (CUDA events on GPUs). The unsharded reference of pytorch-sharding-matmul: compare the two to
see what splitting the work over the ranks costs or gains. The product is checked against float64
(column checksums and sampled entries). Runs the same on a CPU.
"""

from __future__ import annotations

from sb_bench.core.benchmark import Benchmark, Case, SkipBenchmark
from sb_bench.core.context import RankContext
from sb_bench.core.metric import Metric
from sb_bench.core.registry import register
from sb_bench.micro.gemm_flops import check_product
from sb_bench.micro.sharding_matmul import DTYPES, full_inputs, matmul_params, matmul_sizes
from sb_bench.micro.tf32_probe import fp32_gemm_runs_as_tf32


@register
class Matmul(Benchmark):
    name = "pytorch-matmul"
    description = "one large matmul on one device, unsharded (ms per step)"
    params = matmul_params()

    def metrics(self) -> list[Metric]:
        return [Metric("nosharding_time", "ms", False, None, "time of one unsharded matmul")]

    def setup(self, ctx: RankContext) -> None:
        import torch

        m, n, k = matmul_sizes(self.args, ctx)
        if self.args["dtype"] == "float32":
            why = fp32_gemm_runs_as_tf32(ctx, m, n, k, "pytorch-matmul float32")
            if why:
                raise SkipBenchmark(why)
        self.a, self.b = full_inputs(m, n, k, self.args["dtype"], ctx.device)
        self.c = torch.empty(m, n, device=ctx.device, dtype=self.a.dtype)

    def teardown(self, ctx: RankContext) -> None:
        self.a = self.b = self.c = None

    def cases(self, ctx: RankContext):
        import torch

        a, b, c = self.a, self.b, self.c
        rtol = DTYPES[self.args["dtype"]]
        yield Case(
            "nosharding",
            lambda: torch.matmul(a, b, out=c),
            lambda s: {"nosharding_time": s * 1e3},
            lambda: check_product(a, b, c, 32, rtol),
        )


if __name__ == "__main__":
    import sys

    from sb_bench.__main__ import standalone_main

    sys.exit(standalone_main(Matmul.name))
