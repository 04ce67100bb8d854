"""GPU-only checks of the on-host suite's fixes, for a machine with one CUDA GPU.

    python3 bench/gpu_checks.py --out DIR

Each check prints one line ``CHECK name: PASS|FAIL|SKIP detail`` and all land in DIR/checks.json:

* tf32-probe: the probe passes float32 GEMMs and catches TF32 ones (allow_tf32 on);
* tf32-override: with TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1 set before torch loads, a plain process's
  fp32 GEMM runs as TF32 (the probe sees it), and gemm-flops under the harness (which clears the
  variable) measures real fp32;
* int8-layout / fp8-accum: the rates of the layouts and accumulation modes the fix chose against
  the ones it replaced, at 8192^3;
* nccl-graph: nccl-bw's measurement on a one-rank NCCL group, small sizes as CUDA-graph replays
  and larger ones eagerly, every size's data check passing;
* gemm-shapes: a shape fp8 refuses (m=4104) skips fp8 with the reason and measures the rest.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

SUITE = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(SUITE))

RESULTS: list[dict] = []


def record(name: str, ok: bool | None, detail: str, **data) -> None:
    status = "SKIP" if ok is None else ("PASS" if ok else "FAIL")
    RESULTS.append({"check": name, "status": status, "detail": detail, **data})
    print(f"CHECK {name}: {status} {detail}", flush=True)


def rate(fn, ops: float, seconds: float = 1.0) -> float:
    import torch

    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    n, t0 = 0, time.perf_counter()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    while time.perf_counter() - t0 < seconds:
        for _ in range(10):
            fn()
        n += 10
    end.record()
    end.synchronize()
    return ops * n / (start.elapsed_time(end) / 1e3) / 1e12


def check_tf32_probe() -> None:
    import torch
    from sb_bench.micro.tf32_probe import runs_as_tf32

    torch.backends.cuda.matmul.allow_tf32 = False
    plain = runs_as_tf32(torch.matmul, 8192, 8192, 8192, "cuda")
    torch.backends.cuda.matmul.allow_tf32 = True
    tf32 = runs_as_tf32(torch.matmul, 8192, 8192, 8192, "cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    record("tf32-probe", plain is None and tf32 is not None, f"fp32: {plain}; tf32: {tf32}")


def check_tf32_override() -> None:
    env = {**os.environ, "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1", "PYTHONPATH": str(SUITE)}
    code = (
        "import torch; torch.backends.cuda.matmul.allow_tf32=False;"
        "from sb_bench.micro.tf32_probe import runs_as_tf32;"
        "print(runs_as_tf32(torch.matmul, 4096, 4096, 4096, 'cuda'))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    overridden = out.stdout.strip()
    params = json.dumps({"precision": ["fp32", "tf32_tc"], "m": 8192, "min_time": 1.0})
    res = subprocess.run(
        [sys.executable, "-m", "sb_bench", "exec", "gemm-flops", "--params", params],
        env=env,
        cwd=SUITE,
        capture_output=True,
        text=True,
        timeout=300,
    )
    try:
        e = json.loads(res.stdout)
    except ValueError:
        record("tf32-override", False, f"gemm-flops printed no envelope: {res.stderr[-300:]}")
        return
    fp32 = (e["result"].get("fp32_flops") or [0])[0] / 1e3
    tf32 = (e["result"].get("tf32_tc_flops") or [0])[0] / 1e3
    ok = overridden != "None" and e["status"] == "ok" and 0 < fp32 < 0.5 * tf32
    record(
        "tf32-override",
        ok,
        f"override alone -> probe: {overridden[:120]}; under the harness fp32 {fp32:.1f} TFLOPS, "
        f"tf32 {tf32:.1f}, cleared {e.get('environment_cleared')}",
        fp32_tflops=fp32,
        tf32_tflops=tf32,
    )


def check_int8_fp8() -> None:
    import torch

    m = 8192
    ops = 2.0 * m**3
    a = torch.randint(-8, 8, (m, m), dtype=torch.int8, device="cuda")
    b_row = torch.randint(-8, 8, (m, m), dtype=torch.int8, device="cuda")
    b_col = b_row.t().contiguous().t()
    slow = rate(lambda: torch._int_mm(a, b_row), ops)
    fast = rate(lambda: torch._int_mm(a, b_col), ops)
    same = bool((torch._int_mm(a, b_row) == torch._int_mm(a, b_col)).all())
    record(
        "int8-layout",
        fast > 1.5 * slow and same,
        f"K-major B {fast:.0f} TOPS vs row-major {slow:.0f}",
        kmajor_tops=fast,
        rowmajor_tops=slow,
    )
    f8 = torch.float8_e4m3fn
    x = torch.randn(m, m, device="cuda").to(f8)
    y = torch.randn(m, m, device="cuda").to(f8).t()
    one = torch.ones((), device="cuda")

    def mm(fast_accum: bool):
        return lambda: torch._scaled_mm(
            x, y, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=fast_accum
        )

    plain, fastacc = rate(mm(False), ops), rate(mm(True), ops)
    record(
        "fp8-accum",
        fastacc >= plain * 0.98,
        f"fast accumulation {fastacc:.0f} TFLOPS vs {plain:.0f}",
        fast_tflops=fastacc,
        plain_tflops=plain,
    )


def check_nccl_graph() -> None:
    import datetime

    import torch
    import torch.distributed as dist
    from sb_bench.core.context import RankContext
    from sb_bench.core.harness import Harness
    from sb_bench.micro.nccl_bw import NcclBw

    dist.init_process_group(
        "nccl",
        store=dist.HashStore(),
        rank=0,
        world_size=1,
        timeout=datetime.timedelta(seconds=120),
        device_id=torch.device("cuda", 0),
    )
    ctx = RankContext(0, 0, 1, 1, 0, torch.device("cuda", 0), distributed=True, backend="nccl")
    out = {}
    for below in (0, 16 << 20):
        args = NcclBw.parse_params(
            {
                "operation": ["allreduce", "allgather", "reducescatter", "alltoall"],
                "minbytes": "1K",
                "maxbytes": "64M",
                "stepfactor": 8,
                "graph_below": below,
            }
        )
        bench = NcclBw(args)
        vals = bench.measure(ctx, Harness({"num_warmup": 5, "num_steps": 50, "duration": 0.0}))
        out[below] = (vals, getattr(bench, "failed", {}), getattr(bench, "notes", {}))
    dist.destroy_process_group()
    eager, graph = out[0][0], out[16 << 20][0]
    t_e, t_g = eager.get("allreduce_1024_time"), graph.get("allreduce_1024_time")
    ok = (
        not out[0][1]
        and not out[16 << 20][1]
        and "graph" not in out[16 << 20][2]
        and t_g
        and t_e
        and t_g < t_e
    )
    record(
        "nccl-graph",
        bool(ok),
        f"allreduce 1 KiB on one rank: eager {t_e:.1f} us, graph {t_g:.1f} us; "
        f"failed {list(out[16 << 20][1])[:3]}; notes {out[16 << 20][2]}",
        eager=eager,
        graph=graph,
    )


def check_gemm_shapes() -> None:
    params = json.dumps({"precision": ["bf16_tc", "int8_tc", "fp8e4m3_tc"], "m": 4104, "min_time": 0.5})
    res = subprocess.run(
        [sys.executable, "-m", "sb_bench", "exec", "gemm-flops", "--params", params],
        env={**os.environ, "PYTHONPATH": str(SUITE)},
        cwd=SUITE,
        capture_output=True,
        text=True,
        timeout=300,
    )
    e = json.loads(res.stdout)
    ok = e["status"] == "ok" and "fp8e4m3_tc_flops" not in e["result"] and "int8_tc_iops" in e["result"]
    record("gemm-shapes", ok and "multiples of 16" in e["reason"], e["reason"][:300])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", nargs="*", default=[])
    a = ap.parse_args()
    checks = {
        "tf32-probe": check_tf32_probe,
        "tf32-override": check_tf32_override,
        "int8-fp8": check_int8_fp8,
        "nccl-graph": check_nccl_graph,
        "gemm-shapes": check_gemm_shapes,
    }
    for name, fn in checks.items():
        if a.only and name not in a.only:
            continue
        try:
            fn()
        except Exception as exc:  # a check that breaks is a failed check, and the others still run
            record(name, False, f"{type(exc).__name__}: {str(exc)[:400]}")
    Path(a.out).mkdir(parents=True, exist_ok=True)
    (Path(a.out) / "checks.json").write_text(json.dumps(RESULTS, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
