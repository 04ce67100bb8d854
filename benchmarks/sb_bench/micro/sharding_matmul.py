"""pytorch-sharding-matmul: one large matmul split over the ranks, merged by a collective (ms).

``C[m,n] = A[m,k] @ B[k,n]`` computed by ``world_size`` ranks (config entry ``sharding-matmul``):

* ``allreduce_time``: K is split — rank r computes ``A[:, K_r] @ B[K_r, :]`` (a full-size partial
  product) and an all-reduce (sum) merges them: 2·m·n·k/world FLOPs and one all-reduce of m·n
  elements per rank per step;
* ``allgather_time``: N is split — rank r computes ``A @ B[:, N_r]`` and an all-gather plus a
  concatenation assembles C: 2·m·n·k/world FLOPs, one all-gather of m·n elements, one m·n copy.

Time per step (compute + communication + merge) in ms, CUDA events on GPUs; the ranks' times
reduce with ``max`` (the slowest rank sets the pace). After timing, the merged C is checked against
float64 on every rank (column checksums and sampled entries, as in gemm-flops), so a collective that
corrupts data fails the benchmark. NCCL on GPUs, gloo on CPUs; needs two or more ranks.
All ranks run ``num_steps`` in lockstep after a barrier (``duration`` is not used: a rank that
stopped early would leave the others waiting in a collective).
"""

from __future__ import annotations

from sb_bench.core.benchmark import Benchmark, Case, SkipBenchmark
from sb_bench.core.context import RankContext
from sb_bench.core.metric import Metric, Param
from sb_bench.core.registry import register
from sb_bench.micro._collective import run_cases_together
from sb_bench.micro.gemm_flops import check_product
from sb_bench.micro.tf32_probe import fp32_gemm_runs_as_tf32

DTYPES = {"float32": 1e-4, "float16": 2e-2, "bfloat16": 5e-2}
MODES = {"allreduce": "allreduce_time", "allgather": "allgather_time"}


def matmul_params(cpu_default: int = 512, gpu_default: int = 8192) -> dict[str, Param]:
    return {
        "m": Param("int", 0, f"rows of A and C (0: {gpu_default} on a GPU, {cpu_default} on a CPU)"),
        "n": Param("int", 0, "columns of B and C (0: like m)"),
        "k": Param("int", 0, "columns of A, rows of B (0: like m)"),
        "dtype": Param("str", "float32", "element type", tuple(DTYPES)),
    }


def matmul_sizes(
    args: dict, ctx: RankContext, cpu_default: int = 512, gpu_default: int = 8192
) -> tuple[int, int, int]:
    m = args["m"] or (gpu_default if ctx.is_cuda else cpu_default)
    return m, args["n"] or m, args["k"] or m


def full_inputs(m: int, n: int, k: int, dtype_name: str, device):
    """The same A and B on every rank (a fixed seed), on the device."""
    import torch

    gen = torch.Generator(device="cpu").manual_seed(4321)
    dtype = getattr(torch, dtype_name)
    a = torch.randn(m, k, generator=gen).to(device, dtype)
    b = torch.randn(k, n, generator=gen).to(device, dtype)
    return a, b


def shard(total: int, world: int, rank: int) -> slice:
    """Rank's contiguous share of ``total`` (the first ``total % world`` ranks get one more)."""
    base, extra = divmod(total, world)
    start = rank * base + min(rank, extra)
    return slice(start, start + base + (1 if rank < extra else 0))


@register
class ShardingMatmul(Benchmark):
    name = "pytorch-sharding-matmul"
    description = "large matmul sharded over the ranks, merged by all-reduce or all-gather (ms per step)"
    needs_distributed = True
    params = {
        **matmul_params(),
        "mode": Param("list[str]", list(MODES), "how the shards are merged", tuple(MODES)),
    }

    def metrics(self) -> list[Metric]:
        desc = {
            "allreduce": "K split, partial products summed by all-reduce",
            "allgather": "N split, column blocks gathered by all-gather + concat",
        }
        return [Metric(MODES[md], "ms", False, "max", desc[md]) for md in self.args["mode"]]

    def setup(self, ctx: RankContext) -> None:
        if ctx.world_size < 2 or not ctx.distributed:
            raise SkipBenchmark("sharding-matmul needs two or more ranks (torch.distributed mode)")
        m, n, k = matmul_sizes(self.args, ctx)
        if k < ctx.world_size or n < ctx.world_size:
            raise ValueError(f"k={k} and n={n} must be at least the world size {ctx.world_size}")
        self.mnk = (m, n, k)
        if self.args["dtype"] == "float32":
            why = fp32_gemm_runs_as_tf32(ctx, m, n, k, "sharding-matmul float32")
            if why:
                raise SkipBenchmark(why)
        self.a, self.b = full_inputs(m, n, k, self.args["dtype"], ctx.device)

    def teardown(self, ctx: RankContext) -> None:
        self.a = self.b = None

    def run_once(self, ctx: RankContext, harness) -> dict[str, float]:
        # All ranks run num_steps in lockstep (duration is not used), starting after a barrier.
        return run_cases_together(self, ctx, harness)

    def cases(self, ctx: RankContext):
        import torch
        import torch.distributed as dist

        m, n, k = self.mnk
        a, b = self.a, self.b
        world, rank = ctx.world_size, ctx.rank
        rtol = DTYPES[self.args["dtype"]]
        if "allreduce" in self.args["mode"]:
            ks = shard(k, world, rank)
            a_r, b_r = a[:, ks].contiguous(), b[ks, :].contiguous()
            c = torch.empty(m, n, device=ctx.device, dtype=a.dtype)

            def step_ar():
                torch.matmul(a_r, b_r, out=c)
                dist.all_reduce(c)

            yield Case(
                "allreduce",
                step_ar,
                lambda s: {"allreduce_time": s * 1e3},
                lambda: check_product(a, b, c, 32, rtol * 2),
            )
        if "allgather" in self.args["mode"]:
            # Equal column blocks (all-gather needs them): N rounded down to a multiple of the world.
            nb = n // world
            b_r = b[:, rank * nb : (rank + 1) * nb].contiguous()
            part = torch.empty(m, nb, device=ctx.device, dtype=a.dtype)
            gathered = torch.empty(world * m * nb, device=ctx.device, dtype=a.dtype)
            blocks = gathered.view(world, m, nb).unbind(0)
            c2 = torch.empty(m, nb * world, device=ctx.device, dtype=a.dtype)
            gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor

            def step_ag():
                torch.matmul(a, b_r, out=part)
                gather(gathered, part.view(-1))
                torch.cat(blocks, dim=1, out=c2)

            yield Case(
                "allgather",
                step_ag,
                lambda s: {"allgather_time": s * 1e3},
                lambda: check_product(a, b[:, : nb * world], c2, 32, rtol),
            )


if __name__ == "__main__":
    import sys

    from sb_bench.__main__ import standalone_main

    sys.exit(standalone_main(ShardingMatmul.name))
