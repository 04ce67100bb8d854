"""pytorch-computation-communication-overlap: compute while an all-reduce is in flight (ms).

Config entry ``computation-communication-overlap``; SuperBench's Mul_During_NCCL and
MatMul_During_NCCL. Each step starts an asynchronous all-reduce of ``comm_bytes`` (float32) and,
while it runs, ``compute_iters`` kernels of one kind on this rank, then waits for the all-reduce:

* ``mul_time``: elementwise ``x * y`` on ``mul_elements`` float32 values (memory-bound);
* ``matmul_time``: ``A @ B`` on ``matmul_n`` x ``matmul_n`` float32 matrices (compute-bound).

Time per step in ms (CUDA events on GPUs; NCCL runs on its own stream, so a GPU that overlaps well
shows a step time close to the longer of the two). On CPUs gloo's all-reduce runs on a background
thread and competes with the computation for cores — the figure then says how much the two
interfere. Per rank (``:<rank>``). After timing, the all-reduce result and a sampled entry of the
product are checked. Needs two or more ranks.
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

KERNELS = {"mul": "mul_time", "matmul": "matmul_time"}


@register
class ComputationCommunicationOverlap(Benchmark):
    name = "pytorch-computation-communication-overlap"
    description = "time of mul / matmul kernels while an all-reduce runs concurrently (ms per step)"
    needs_distributed = True
    params = {
        "kernel": Param("list[str]", list(KERNELS), "computations to overlap", tuple(KERNELS)),
        "comm_bytes": Param("size", 0, "bytes all-reduced per step (0: 256M on GPUs, 4M on CPUs)"),
        "compute_iters": Param("int", 0, "kernels per step (0: 64 on GPUs, 4 on CPUs)"),
        "mul_elements": Param("int", 0, "elements of the mul operands (0: 64M on GPUs, 1M on CPUs)"),
        "matmul_n": Param("int", 0, "size of the square matmul (0: 4096 on GPUs, 256 on CPUs)"),
    }

    def metrics(self) -> list[Metric]:
        return [
            Metric(KERNELS[kind], "ms", False, None, f"{kind} kernels during an all-reduce, per step")
            for kind in self.args["kernel"]
        ]

    def setup(self, ctx: RankContext) -> None:
        import torch

        if ctx.world_size < 2 or not ctx.distributed:
            raise SkipBenchmark(
                "computation-communication-overlap needs two or more ranks (torch.distributed mode)"
            )
        gpu = ctx.is_cuda
        a = self.args
        comm = a["comm_bytes"] or ((256 << 20) if gpu else (4 << 20))
        self.iters = a["compute_iters"] or (64 if gpu else 4)
        self.comm = torch.zeros(comm // 4, dtype=torch.float32, device=ctx.device)
        ne = a["mul_elements"] or ((64 << 20) if gpu else (1 << 20))
        self.x = torch.rand(ne, device=ctx.device)
        self.y = torch.rand(ne, device=ctx.device)
        self.z = torch.empty(ne, device=ctx.device)
        n = a["matmul_n"] or (4096 if gpu else 256)
        gen = torch.Generator(device="cpu").manual_seed(5)
        self.ma = torch.randn(n, n, generator=gen).to(ctx.device)
        self.mb = torch.randn(n, n, generator=gen).to(ctx.device)
        self.mc = torch.empty(n, n, device=ctx.device)

    def teardown(self, ctx: RankContext) -> None:
        self.comm = self.x = self.y = self.z = self.ma = self.mb = self.mc = None

    def _check(self, ctx: RankContext, kind: str) -> str | None:
        import torch.distributed as dist

        self.comm.fill_(ctx.rank + 1)
        dist.all_reduce(self.comm)
        want = ctx.world_size * (ctx.world_size + 1) / 2
        if float(self.comm[0]) != want or float(self.comm[-1]) != want:
            return f"all-reduce delivered {float(self.comm[0])}, expected {want}"
        if kind == "matmul":
            return check_product(self.ma, self.mb, self.mc, 16, 1e-4)
        if float((self.z[:8] - self.x[:8] * self.y[:8]).abs().max()) != 0.0:
            return "mul produced wrong values"
        return None

    def run_once(self, ctx: RankContext, harness) -> dict[str, float]:
        # All ranks run num_steps in lockstep (duration is not used), starting after a barrier.
        return run_cases_together(self, ctx, harness)

    def cases(self, ctx: RankContext):
        import torch
        import torch.distributed as dist

        iters = self.iters
        for kind in self.args["kernel"]:
            if kind == "mul":

                def compute():
                    torch.mul(self.x, self.y, out=self.z)
            else:

                def compute():
                    torch.matmul(self.ma, self.mb, out=self.mc)

            def step(compute=compute):
                work = dist.all_reduce(self.comm, async_op=True)
                for _ in range(iters):
                    compute()
                work.wait()

            yield Case(
                kind,
                step,
                lambda s, kind=kind: {KERNELS[kind]: s * 1e3},
                lambda kind=kind: self._check(ctx, kind),
            )


if __name__ == "__main__":
    import sys

    from sb_bench.__main__ import standalone_main

    sys.exit(standalone_main(ComputationCommunicationOverlap.name))
