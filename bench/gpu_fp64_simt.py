"""Does Triton's ``tl.dot`` on float64 run on the CUDA cores (FMA) or the FP64 tensor cores?

    python3 bench/gpu_fp64_simt.py [--variant BMxBNxBK]   # one variant per process (compile-time bound)

Prints ``FP64 <variant> <TFLOPS> <max rel err>``. On an H100 SXM the CUDA-core fp64 peak is 34
TFLOPS and the tensor-core one 67: a rate near 30 means FMA (usable for ``fp64_flops``), above 40
means the tensor cores.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time


def one(bm: int, bn: int, bk: int, warps: int) -> None:
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def k(a_ptr, b_ptr, c_ptr, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        rm = tl.program_id(0) * BM + tl.arange(0, BM)
        rn = tl.program_id(1) * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float64)
        for k0 in range(0, K, BK):
            a = tl.load(a_ptr + rm[:, None] * K + (k0 + rk)[None, :])
            b = tl.load(b_ptr + (k0 + rk)[:, None] * N + rn[None, :])
            acc += tl.dot(a, b)
        tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)

    m = 4096
    a = torch.randn(m, m, device="cuda", dtype=torch.float64)
    b = torch.randn(m, m, device="cuda", dtype=torch.float64)
    c = torch.empty_like(a)
    grid = (m // bm, m // bn)

    def step():
        k[grid](a, b, c, m, m, bm, bn, bk, num_warps=warps)

    step()
    torch.cuda.synchronize()
    err = float((c - a @ b).abs().max() / (a.abs() @ b.abs()).max())
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    n, t0 = 0, time.perf_counter()
    s.record()
    while time.perf_counter() - t0 < 1.0:
        step()
        n += 1
    e.record()
    e.synchronize()
    tf = 2.0 * m**3 * n / (s.elapsed_time(e) / 1e3) / 1e12
    print(f"FP64 {bm}x{bn}x{bk}w{warps} {tf:.2f} TFLOPS err {err:.1e}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant")
    a = ap.parse_args()
    if a.variant:
        bm, bn, bk, w = (int(x) for x in a.variant.split("x"))
        one(bm, bn, bk, w)
        return 0
    for v in ("64x64x16x4", "128x64x16x4", "64x64x32x4", "128x128x16x8"):
        try:
            subprocess.run([sys.executable, __file__, "--variant", v], timeout=45)
        except subprocess.TimeoutExpired:
            print(f"FP64 {v} timed out (compile or run > 45 s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
