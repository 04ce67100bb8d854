"""What the harness costs: each micro-benchmark against the bare loop it wraps, in the same process.

    python bench/micro_overhead.py [--rounds 5] [--strict]

* gemm-flops fp32 vs a bare ``torch.matmul(a, b, out=c)`` loop on the same sizes (GFLOPS);
* mem-bw d2d vs a bare ``dst.copy_(src)`` loop (GB/s);
* nccl-bw vs bare ``torch.distributed`` collectives, 2 ranks over gloo (busbw per operation),
  run under torchrun by this script.

Each pair is measured ``--rounds`` times, alternating harness and bare so that drift in the
machine's speed hits both; the ratio printed is of the medians (the ratio of the best rounds is
shown beside it). The target is >= 0.95 (the harness costs next to nothing); ``--strict`` exits 1
below it. On a machine shared with other work the collectives' figures swing by tens of percent
from round to round: run it on a quiet machine. The last line times the harness's own timed loop
around an empty step against a bare loop: what the harness adds per step, whatever the load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

TARGET = 0.95


def _alternate(rounds: int, harness, bare) -> tuple[list[float], list[float]]:
    h, b = [], []
    for i in range(rounds):
        # Alternate which goes first, so neither always runs on a warmer (or busier) machine.
        if i % 2:
            b.append(bare())
            h.append(harness())
        else:
            h.append(harness())
            b.append(bare())
    return h, b


def gemm(rounds: int, size: int, steps: int) -> tuple[list[float], list[float]]:
    import torch
    from sb_bench.core.harness import run_benchmark

    params = {"m": size, "precision": ["fp32"], "num_warmup": 2, "num_steps": steps, "device": "cpu"}

    def harness() -> float:
        env = run_benchmark("gemm-flops", params)
        assert env["status"] == "ok", env["reason"]
        return env["result"]["fp32_flops"][0]

    gen = torch.Generator().manual_seed(1234)
    a, b = torch.randn(size, size, generator=gen), torch.randn(size, size, generator=gen)
    c = torch.empty(size, size)

    def bare() -> float:
        for _ in range(2):
            torch.matmul(a, b, out=c)
        t0 = time.perf_counter()
        for _ in range(steps):
            torch.matmul(a, b, out=c)
        return 2.0 * size**3 * steps / (time.perf_counter() - t0) / 1e9

    return _alternate(rounds, harness, bare)


def membw(rounds: int, size: int, steps: int) -> tuple[list[float], list[float]]:
    import torch
    from sb_bench.core.harness import run_benchmark

    params = {"mem_type": ["dtod"], "size": size, "num_warmup": 2, "num_steps": steps, "device": "cpu"}

    def harness() -> float:
        env = run_benchmark("mem-bw", params)
        assert env["status"] == "ok", env["reason"]
        return env["result"]["d2d_bw"][0]

    src, dst = torch.ones(size, dtype=torch.uint8), torch.empty(size, dtype=torch.uint8)

    def bare() -> float:
        for _ in range(2):
            dst.copy_(src)
        t0 = time.perf_counter()
        for _ in range(steps):
            dst.copy_(src)
        return 2.0 * size * steps / (time.perf_counter() - t0) / 1e9

    return _alternate(rounds, harness, bare)


def nccl_worker(rounds: int, size: int, steps: int) -> None:
    """One rank under torchrun: harness vs bare busbw per operation; rank 0 prints a JSON line."""
    import torch
    import torch.distributed as dist
    from sb_bench.core.context import RankContext
    from sb_bench.core.harness import Harness
    from sb_bench.micro.nccl_bw import OPS, Collective, NcclBw, actual_size, derive

    ctx = RankContext.from_env("cpu")
    ctx.init_distributed()
    n = ctx.world_size
    args = NcclBw.parse_params({"minbytes": size, "maxbytes": size, "num_warmup": 2, "num_steps": steps})
    out = {}
    for op in OPS:
        s = actual_size(op, size, n)
        key = f"{op}_{s}_busbw"
        bench = NcclBw({**args, "operation": [op]})

        def harness(bench=bench, key=key) -> float:
            return bench.measure(ctx, Harness(args))[key]

        coll = Collective(op, s, ctx, "native")

        def bare(coll=coll, op=op, s=s, key=key) -> float:
            for _ in range(2):
                coll()
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(steps):
                coll()
            t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
            dist.all_reduce(t)
            return derive(op, s, float(t) / n / steps, n)[key]

        out[op] = _alternate(rounds, harness, bare)
    if ctx.rank == 0:
        print("NCCL_RESULT " + json.dumps(out), flush=True)
    ctx.close()


def nccl(rounds: int, size: int, steps: int) -> dict[str, tuple[list[float], list[float]]]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "benchmarks"), OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            __file__,
            "--nccl-worker",
            "--rounds",
            str(rounds),
            "--nccl-size",
            str(size),
            "--nccl-steps",
            str(steps),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    for line in proc.stdout.splitlines():
        if line.startswith("NCCL_RESULT "):
            return {k: tuple(v) for k, v in json.loads(line[len("NCCL_RESULT ") :]).items()}
    raise RuntimeError(f"nccl worker failed ({proc.returncode}): {proc.stderr[-2000:]}")


def loop_cost(steps: int = 200_000) -> tuple[float, float]:
    """ns per step of the harness's timed loop and of a bare loop, around a step that does nothing.

    What the harness adds to every step of every benchmark, whatever the machine's load.
    """
    import torch
    from sb_bench.core.benchmark import Case
    from sb_bench.core.context import RankContext
    from sb_bench.core.harness import Harness

    ctx = RankContext(0, 0, 1, 1, 0, torch.device("cpu"))

    def noop() -> None:
        return None

    h = Harness({"num_warmup": 100, "num_steps": steps, "duration": 0.0})
    hs = min(h.time_case(ctx, Case("noop", noop, lambda s: {"s": s}))["s"] for _ in range(5))
    bare = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(steps):
            noop()
        bare.append((time.perf_counter() - t0) / steps)
    return hs * 1e9, min(bare) * 1e9


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--gemm-size", type=int, default=1024)
    ap.add_argument("--gemm-steps", type=int, default=8)
    ap.add_argument("--mem-size", type=int, default=64 << 20)
    ap.add_argument("--mem-steps", type=int, default=32)
    ap.add_argument("--nccl-size", type=int, default=16 << 20)
    ap.add_argument("--nccl-steps", type=int, default=16)
    ap.add_argument("--strict", action="store_true", help="exit 1 when a ratio is below 0.95")
    ap.add_argument("--nccl-worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.nccl_worker:
        nccl_worker(a.rounds, a.nccl_size, a.nccl_steps)
        return 0
    import torch

    rows = [
        ("gemm-flops fp32", "GFLOPS", *gemm(a.rounds, a.gemm_size, a.gemm_steps)),
        ("mem-bw d2d", "GB/s", *membw(a.rounds, a.mem_size, a.mem_steps)),
    ]
    rows += [
        (f"nccl-bw {op} busbw (gloo, 2 ranks)", "GB/s", h, b)
        for op, (h, b) in nccl(a.rounds, a.nccl_size, a.nccl_steps).items()
    ]
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, {a.rounds} alternating rounds")
    print(f"{'benchmark':40} {'unit':7} {'harness':>10} {'bare':>10} {'ratio':>7} {'best-round ratio':>17}")
    worst = 1.0
    for name, unit, h, b in rows:
        ratio = statistics.median(h) / statistics.median(b)
        worst = min(worst, ratio)
        best = max(h) / max(b)
        flag = "" if ratio >= TARGET else "  < 0.95"
        hm, bm = statistics.median(h), statistics.median(b)
        print(f"{name:40} {unit:7} {hm:10.4g} {bm:10.4g} {ratio:7.3f} {best:17.3f}{flag}")
    print(f"lowest ratio {worst:.3f} (target >= {TARGET}; medians of the rounds)")
    h_ns, b_ns = loop_cost()
    print(
        f"timed loop, empty step: harness {h_ns:.0f} ns/step, bare {b_ns:.0f} ns/step "
        f"(a 1024^3 fp32 GEMM step takes ~{2 * a.gemm_size**3 / statistics.median(rows[0][2]):.3g} ns here)"
    )
    return 1 if a.strict and worst < TARGET else 0


if __name__ == "__main__":
    sys.exit(main())
