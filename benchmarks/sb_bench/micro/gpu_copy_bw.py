"""gpu-copy-bw: device-to-device copy bandwidth between every ordered pair of GPUs (GB/s).

One process sees every GPU of the host (run it in ``local`` mode with ``proc_num: 1``). For each
ordered pair (i, j), i != j, a buffer of ``size`` bytes on GPU i is copied into a buffer on GPU j
``num_steps`` times back to back (``dst.copy_(src)``: PyTorch issues it on the source GPU's copy
engine, through P2P when the pair has peer access, through host memory otherwise).

Bytes counted: ``size`` per copy (unidirectional). Time: host wall clock between a synchronisation
of both GPUs before the first copy and after the last.

Metrics: ``gpu<i>_to_gpu<j>_write_by_dma_bw`` per pair (SuperBench's gpu-copy-bw names) and
``p2p_max_bw`` / ``p2p_min_bw`` / ``p2p_avg_bw`` over the pairs (the P2P figures of a health check:
a slow link shows as a low min). ``p2p_disabled_pairs`` counts pairs without peer access (a host
whose GPUs should all see each other but do not is misconfigured).

Needs two or more GPUs: on a CPU host, or with one GPU, it is skipped with the reason.
"""

from __future__ import annotations

import time

from sb_bench.core.benchmark import Benchmark, SkipBenchmark
from sb_bench.core.context import RankContext
from sb_bench.core.metric import Metric, Param
from sb_bench.core.registry import register


def pair_metric(i: int, j: int) -> str:
    return f"gpu{i}_to_gpu{j}_write_by_dma_bw"


def aggregate(pairs: dict[tuple[int, int], float]) -> dict[str, float]:
    """max/min/avg over the per-pair bandwidths."""
    if not pairs:
        return {}
    vals = list(pairs.values())
    return {"p2p_max_bw": max(vals), "p2p_min_bw": min(vals), "p2p_avg_bw": sum(vals) / len(vals)}


def _gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:
        return 0


@register
class GpuCopyBw(Benchmark):
    name = "gpu-copy-bw"
    description = (
        "GPU-to-GPU copy bandwidth for every ordered pair, with max/min/avg (GB/s); "
        "metrics gpu<i>_to_gpu<j>_write_by_dma_bw and p2p_max_bw, p2p_min_bw, p2p_avg_bw"
    )
    params = {
        "size": Param("size", 256 << 20, "bytes per copy"),
    }

    def metrics(self) -> list[Metric]:
        n = _gpu_count()
        out = [
            Metric(pair_metric(i, j), "GB/s", True, None, f"GPU {i} -> GPU {j} copy")
            for i in range(n)
            for j in range(n)
            if i != j
        ]
        out += [
            Metric(
                "p2p_max_bw",
                "GB/s",
                True,
                None,
                "highest pair bandwidth (per pair: gpu<i>_to_gpu<j>_write_by_dma_bw)",
            ),
            Metric("p2p_min_bw", "GB/s", True, None, "lowest pair bandwidth"),
            Metric("p2p_avg_bw", "GB/s", True, None, "mean pair bandwidth"),
            Metric("p2p_disabled_pairs", "count", False, None, "ordered pairs without peer access"),
        ]
        return out

    def setup(self, ctx: RankContext) -> None:
        if not ctx.is_cuda:
            raise SkipBenchmark("gpu-copy-bw needs GPUs; this host runs on cpu")
        n = _gpu_count()
        if n < 2:
            raise SkipBenchmark(f"gpu-copy-bw needs two or more GPUs; this process sees {n}")
        import torch

        self.n = n
        size = self.args["size"]
        self.bufs = [torch.full((size,), i + 1, dtype=torch.uint8, device=f"cuda:{i}") for i in range(n)]
        self.dsts = [torch.empty(size, dtype=torch.uint8, device=f"cuda:{i}") for i in range(n)]

    def teardown(self, ctx: RankContext) -> None:
        self.bufs = self.dsts = []

    def run_once(self, ctx: RankContext, harness) -> dict[str, float]:
        import torch

        size = self.args["size"]
        pairs: dict[tuple[int, int], float] = {}
        disabled = 0
        for i in range(self.n):
            for j in range(self.n):
                if i == j:
                    continue
                if not torch.cuda.can_device_access_peer(i, j):
                    disabled += 1
                src, dst = self.bufs[i], self.dsts[j]
                for _ in range(harness.num_warmup):
                    dst.copy_(src, non_blocking=True)
                torch.cuda.synchronize(i)
                torch.cuda.synchronize(j)
                t0 = time.perf_counter()
                for _ in range(harness.num_steps):
                    dst.copy_(src, non_blocking=True)
                torch.cuda.synchronize(i)
                torch.cuda.synchronize(j)
                seconds = (time.perf_counter() - t0) / harness.num_steps
                if int(dst[-1]) != i + 1:
                    from sb_bench.core.benchmark import CheckFailed

                    raise CheckFailed(f"copy GPU {i} -> GPU {j} delivered wrong data")
                pairs[(i, j)] = size / seconds / 1e9
        values = {pair_metric(i, j): bw for (i, j), bw in pairs.items()}
        values.update(aggregate(pairs))
        values["p2p_disabled_pairs"] = float(disabled)
        return values


if __name__ == "__main__":
    import sys

    from sb_bench.__main__ import standalone_main

    sys.exit(standalone_main(GpuCopyBw.name))
