"""Peak device memory of nccl-bw's measurement at large sizes, on a one-rank NCCL group.

    python3 bench/gpu_nccl_memory.py [--suite DIR] [--size 8G]

Runs ``NcclBw.measure`` for each operation at one size (timing and data check included) and prints
``torch.cuda.max_memory_allocated`` per operation, against the buffers the operation needs
(nccl-tests' footprint): issue 15 found check temporaries of ~32 GiB at 8 GiB (alltoall) and
scratch buffers allocated on the native path. ``--suite`` points at another checkout's
``benchmarks`` directory to measure an older version the same way.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--suite", default=str(Path(__file__).resolve().parent.parent / "benchmarks"))
    ap.add_argument("--size", default="8G")
    a = ap.parse_args()
    sys.path.insert(0, a.suite)
    import torch
    import torch.distributed as dist
    from sb_bench.core.context import RankContext
    from sb_bench.core.harness import Harness
    from sb_bench.core.metric import parse_size
    from sb_bench.micro.nccl_bw import NcclBw

    dist.init_process_group(
        "nccl", store=dist.HashStore(), rank=0, world_size=1, device_id=torch.device("cuda", 0)
    )
    ctx = RankContext(0, 0, 1, 1, 0, torch.device("cuda", 0), distributed=True, backend="nccl")
    size = parse_size(a.size)
    need = {"allreduce": 1, "allgather": 2, "reducescatter": 2, "alltoall": 2}
    for op in need:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        args = NcclBw.parse_params({"operation": [op], "minbytes": a.size, "maxbytes": a.size})
        bench = NcclBw(args)
        try:
            bench.measure(ctx, Harness({"num_warmup": 1, "num_steps": 2, "duration": 0.0}))
            status = (
                "failed: " + "; ".join(getattr(bench, "failed", {}).values())
                if getattr(bench, "failed", None)
                else "ok"
            )
        except Exception as exc:
            status = f"{type(exc).__name__}: {str(exc)[:120]}"
        peak = torch.cuda.max_memory_allocated() / 2**30
        print(
            f"NCCLMEM {a.suite.split('/')[-2]:<12} {op:<14} {a.size}: peak {peak:6.1f} GiB "
            f"(buffers {need[op] * size / 2**30:.0f} GiB) {status}",
            flush=True,
        )
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
