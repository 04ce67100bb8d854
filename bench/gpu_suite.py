"""Run the on-host suite's single-GPU benchmarks on a real GPU and save every result envelope.

    python3 bench/gpu_suite.py --out DIR [--quick] [--only NAME ...] [--timeout S]

Each benchmark runs as ``python3 -m sb_bench exec NAME --params JSON`` (the runner's own entry
point) in its own process, one after the other, with a time limit. Writes ``DIR/results.json``
(``{"host": facts, "runs": [{"label", "name", "params", "wall_s", "envelope"}...]}``) and prints
one table of the headline figures last. ``--quick`` shrinks every size and step count to find
crashes in a few minutes; the default is the full single-GPU suite at real sizes.

Benchmarks that need several GPUs (nccl-bw, gpu-copy-bw, sharding-matmul, the overlap one) or an
RDMA device (ib-loopback) are left out: one GPU cannot measure them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SUITE = Path(__file__).resolve().parent.parent / "benchmarks"

MODEL_COMMON = {"precision": ["fp32", "fp16", "bf16"], "model_action": ["train", "inference"]}


def plan(quick: bool) -> list[tuple[str, str, dict]]:
    """(label, benchmark, parameters) in run order."""
    q = quick
    runs: list[tuple[str, str, dict]] = [
        ("kernel-launch", "kernel-launch", {}),
        ("gemm-flops", "gemm-flops", {"m": 4096} if q else {}),
        ("gpu-stream", "gpu-stream", {"size": "256M"} if q else {}),
        ("mem-bw", "mem-bw", {}),
        ("cublas-function", "cublas-function", {"num_steps": 8} if q else {}),
        ("cudnn-function", "cudnn-function", {"num_steps": 8} if q else {}),
        ("pytorch-matmul", "pytorch-matmul", {}),
        ("gpu-burn", "gpu-burn", {"duration": 10} if q else {"duration": 60}),
        ("cpu-memory-bw-latency", "cpu-memory-bw-latency", {"hops": 200000} if q else {}),
    ]
    models = {
        "pytorch-resnet50": {"batch_size": 32},
        "pytorch-bert-large": {"batch_size": 32, "seq_len": 224},
        "pytorch-gpt2-large": {"batch_size": 8, "seq_len": 224},
    }
    steps = {"num_warmup": 4, "num_steps": 8, "check_steps": 2} if q else {"num_warmup": 16, "num_steps": 64}
    for name, p in models.items():
        runs.append((name, name, {**MODEL_COMMON, **p, **steps}))
    return runs


def host_facts() -> dict:
    facts: dict = {"env_tf32": {k: v for k, v in os.environ.items() if "TF32" in k or "NVIDIA_TF32" in k}}
    try:
        facts["nvidia_smi"] = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit",
                "--format=csv,noheader",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired) as exc:
        facts["nvidia_smi"] = f"unavailable: {exc}"
    probe = (
        "import torch,sys;print(torch.__version__, torch.version.cuda, sys.version.split()[0], "
        "torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no cuda')"
    )
    facts["torch"] = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120
    ).stdout.strip()
    return facts


def headline(env: dict, limit: int = 14) -> str:
    res = {k: v[0] for k, v in env.get("result", {}).items() if k != "return_code" and v}
    keys = sorted(res)
    if len(keys) > limit:
        keep = [k for k in keys if any(s in k for s in ("efficiency", "flops", "iops", "_bw", "throughput"))]
        keys = (keep or keys)[:limit]
    return ", ".join(f"{k}={res[k]:.4g}" for k in keys)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", nargs="*", default=[])
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--param", action="append", default=[], help="LABEL:JSON extra parameters")
    a = ap.parse_args(argv)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    extra = {}
    for p in a.param:
        label, js = p.split(":", 1)
        extra[label] = json.loads(js)
    doc: dict = {"host": host_facts(), "runs": []}
    print(json.dumps(doc["host"]), flush=True)
    env = {**os.environ, "PYTHONPATH": str(SUITE), "PYTHONUNBUFFERED": "1"}
    env.setdefault("SB_MONITOR_INTERVAL", "1")
    for label, name, params in plan(a.quick):
        if a.only and label not in a.only and name not in a.only:
            continue
        params = {**params, **extra.get(label, {})}
        t0 = time.monotonic()
        rdir = Path(tempfile.gettempdir()) / "sb-gpu-suite" / label
        try:
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "sb_bench",
                    "exec",
                    name,
                    "--params",
                    json.dumps(params),
                    "--out",
                    str(rdir),
                ],
                cwd=SUITE,
                env=env,
                capture_output=True,
                text=True,
                timeout=a.timeout,
            )
            try:
                envelope = json.loads((rdir / "rank0.json").read_text())
            except (OSError, ValueError):
                envelope = {"status": "crashed", "reason": (proc.stderr or proc.stdout)[-2000:]}
        except subprocess.TimeoutExpired:
            envelope = {"status": "timeout", "reason": f"over {a.timeout:.0f} s"}
        wall = time.monotonic() - t0
        doc["runs"].append(
            {"label": label, "name": name, "params": params, "wall_s": wall, "envelope": envelope}
        )
        (out / "results.json").write_text(json.dumps(doc, indent=1))
        print(
            f"== {label} [{envelope.get('status')}] {wall:.0f}s {envelope.get('reason', '')[:600]}",
            flush=True,
        )
        print("   " + headline(envelope), flush=True)
    print("\nSUMMARY")
    for r in doc["runs"]:
        e = r["envelope"]
        print(f"{r['label']:<24} {e.get('status', '?'):<8} {r['wall_s']:>5.0f}s  {headline(e, 8)[:300]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
