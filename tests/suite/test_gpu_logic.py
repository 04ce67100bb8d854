"""The logic of the suite's GPU-only fixes, tested on a CPU (issue 15).

What only a GPU can show (the rates, NCCL graph capture, the TF32 override in an NVIDIA container)
is checked by bench/gpu_checks.py on a lent GPU; its results are in bench/gpu-results/. Here: the
shapes, the environment handling, the parsing and naming those fixes rest on.
"""

from __future__ import annotations

import ast
import os
import types

import pytest
import torch
from sb_bench.core.benchmark import Benchmark, Case
from sb_bench.core.context import RankContext, clean_benchmark_env
from sb_bench.core.harness import run_benchmark
from sb_bench.core.metric import Metric
from sb_bench.core.registry import register
from sb_bench.micro import gemm_flops as gf
from sb_bench.micro import gpu_burn, gpu_stream, nccl_bw
from sb_bench.micro.tf32_probe import probe_inputs, runs_as_tf32
from suite_helpers import BENCH, assert_metrics, run_bench

SMALL = {"num_warmup": 1, "num_steps": 3}
CPU = torch.device("cpu")


def _tf32_matmul(a, b):
    """A float32 product as TF32 tensor cores compute it: inputs rounded to 10 mantissa bits."""

    def tf32(t):
        bits = t.contiguous().view(torch.int32)
        return ((bits + (1 << 12)) & ~((1 << 13) - 1)).view(torch.float32)

    return tf32(a) @ tf32(b)


# -- TF32 ------------------------------------------------------------------------------------------------
def test_tf32_probe_passes_float32_and_catches_tf32():
    assert runs_as_tf32(torch.matmul, 64, 48, 32, CPU) is None
    msg = runs_as_tf32(_tf32_matmul, 64, 48, 32, CPU)
    assert msg and "inexact" in msg
    a, b, want = probe_inputs(40, 100, 30, CPU)  # n > k: columns of B repeat the selection
    assert torch.equal(a @ b, want)


def test_fp32_skipped_with_reason_when_gemms_run_as_tf32(monkeypatch):
    """gemm-flops' fp32 case consults the probe at its own shape; a TF32 answer skips fp32 with the reason."""
    bench = gf.GemmFlops(gf.GemmFlops.parse_params({"m": 64, "precision": ["fp32"]}))
    bench.device_info, bench.peak = gf.DeviceInfo("cuda", "NVIDIA H100 80GB HBM3", (9, 0)), {}
    ctx = types.SimpleNamespace(is_cuda=True, device=CPU)
    calls = []
    monkeypatch.setattr(gf, "runs_as_tf32", lambda mm, m, n, k, dev: calls.append((m, n, k)) or "3 inexact")
    saved = torch.backends.cuda.matmul.allow_tf32  # the case sets it, as on a GPU
    try:
        assert list(bench.cases(ctx)) == []
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved
    assert calls == [(64, 64, 64)]
    assert (
        "run as TF32" in bench.skipped["fp32_flops"]
        and "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE" in bench.skipped["fp32_flops"]
    )


def test_benchmark_environment_is_cleaned():
    env = {
        "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1",
        "NVIDIA_TF32_OVERRIDE": "0",
        "PROC_RANK": "3",
        "PROC_NUM": "8",
        "WORLD_SIZE": "16",  # a Kubernetes pod's
        "RANK": "5",
        "PATH": "/usr/bin",
    }
    removed = clean_benchmark_env(env)
    assert set(removed) == {"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "NVIDIA_TF32_OVERRIDE", "WORLD_SIZE", "RANK"}
    assert env == {"PROC_RANK": "3", "PROC_NUM": "8", "PATH": "/usr/bin"}
    # Under torchrun (TORCHELASTIC_RUN_ID) the rank variables are real and stay.
    torchrun = {
        "RANK": "1",
        "WORLD_SIZE": "2",
        "LOCAL_RANK": "1",
        "TORCHELASTIC_RUN_ID": "x",
        "PROC_RANK": "0",
    }
    assert clean_benchmark_env(torchrun) == {} and torchrun["WORLD_SIZE"] == "2"


def test_local_mode_rank_ignores_stray_world_size(monkeypatch):
    monkeypatch.setenv("PROC_RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "1")
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    env = run_bench("kernel-launch", **SMALL)
    assert env["status"] == "ok" and env["world_size"] == 1 and env["rank"] == 0
    assert env["environment_cleared"] == ["RANK", "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "WORLD_SIZE"]
    assert "WORLD_SIZE" not in os.environ


# -- gemm-flops: layouts, shapes, peaks, windows -------------------------------------------------------------
def test_int8_b_is_k_major_and_fp8_uses_fast_accumulation(monkeypatch):
    a, b, _ = gf._inputs("int8_tc", 32, 24, 16, CPU)
    assert b.shape == (16, 24) and b.stride() == (1, 16)  # the transposed view of an (n, k) matrix
    seen = {}

    def fake_scaled_mm(x, y, **kw):
        seen.update(kw)
        return torch.zeros(x.shape[0], y.shape[1], dtype=torch.bfloat16)

    monkeypatch.setattr(torch, "_scaled_mm", fake_scaled_mm, raising=False)
    step, product = gf.make_step("fp8e4m3_tc", torch.zeros(32, 16), torch.zeros(16, 24), None)
    step()
    assert seen["use_fast_accum"] is True and product().shape == (32, 24)


@pytest.mark.parametrize(
    ("prec", "shape", "problem"),
    [
        ("fp8e4m3_tc", (8192, 8192, 8192), None),
        ("fp8e4m3_tc", (8200, 8192, 8192), "multiples of 16"),
        ("int8_tc", (8192, 8200, 8192), None),
        ("int8_tc", (16, 64, 64), "m > 16"),
        ("int8_tc", (64, 64, 60), "multiples of 8"),
        ("bf16_tc", (8201, 8191, 7), None),
    ],
)
def test_gemm_shape_validation(prec, shape, problem):
    got = gf.shape_problem(prec, *shape)
    assert (got is None) if problem is None else (problem in got)


def test_refused_shape_skips_only_that_precision(monkeypatch):
    """On a GPU (device info faked) a shape fp8 refuses is a skip with the reason, decided in setup."""
    monkeypatch.setattr(
        gf.DeviceInfo, "of", classmethod(lambda cls, d: cls("cuda", "NVIDIA H100 80GB HBM3", (9, 0)))
    )
    bench = gf.GemmFlops(
        gf.GemmFlops.parse_params({"m": 8200, "precision": ["bf16_tc", "fp8e4m3_tc", "int8_tc"]})
    )
    ctx = RankContext(0, 0, 1, 1, 0, CPU)
    bench.setup(ctx)
    assert "multiples of 16" in bench.skipped["fp8e4m3_tc_flops"]
    assert "bf16_tc_flops" not in bench.skipped and "int8_tc_iops" not in bench.skipped


def test_nvl_parts_have_their_own_peaks():
    assert gf.peak_for("NVIDIA H100 NVL")[0] == "H100 NVL"
    assert gf.peak_for("NVIDIA H200 NVL")[0] == "H200 NVL"
    assert gf.peak_for("NVIDIA H100 NVL")[1]["bf16_tc"] < gf.peak_for("NVIDIA H100 80GB HBM3")[1]["bf16_tc"]
    assert gf.peak_for("NVIDIA H200")[0] == "H200"
    assert gf.peak_for("NVIDIA H100 PCIe")[0] == "H100 PCIe"


def test_efficiency_above_peak_fails_that_precision_only():
    bench = gf.GemmFlops(gf.GemmFlops.parse_params({"m": 64, "precision": ["fp32", "fp64"]}))
    bench.device_info = gf.DeviceInfo("cpu")
    bench.peak = {"fp32": 0.001, "fp64": 1.0}  # 1 GFLOPS and 1 TFLOPS
    cases = {c.key: c for c in bench.cases(RankContext(0, 0, 1, 1, 0, CPU))}
    s = 2 * 64**3 / 2e9  # 2 GFLOPS
    cases["fp32"].metrics(s)
    cases["fp64"].metrics(s)
    assert set(bench.failed) == {"fp32_flops", "fp32_efficiency"}
    assert "200% of the" in bench.failed["fp32_flops"] and "measurement error" in bench.failed["fp32_flops"]


def test_timing_window_steps():
    assert gf.steps_for(1.4e-3, 2.0, 64) == 1429  # an 8192^3 bf16 GEMM on an H100: ~1.4 ms
    assert gf.steps_for(1.0, 2.0, 64) == 64  # never fewer than num_steps
    assert gf.steps_for(0.0, 2.0, 64) == 64


# -- harness: a failed metric keeps the others ----------------------------------------------------------------
@register
class _HalfWrong(Benchmark):
    name = "test-half-wrong"
    params: dict = {}

    def metrics(self):
        return [Metric("good", "x", True), Metric("bad", "x", True)]

    def cases(self, ctx):
        def metrics(s):
            self.fail_metric("bad", "planted: wrong data at 8 GiB")
            return {"good": 1.0, "bad": 2.0}

        yield Case("one", lambda: None, metrics)


def test_failed_metric_fails_result_but_keeps_the_rest():
    env = run_benchmark("test-half-wrong", {**SMALL, "device": "cpu"})
    assert env["status"] == "failed" and env["return_code"] == 3
    assert env["result"]["good"] == [1.0] and "bad" not in env["result"]
    assert "planted: wrong data at 8 GiB (metrics bad)" in env["reason"]


# -- nccl-bw -----------------------------------------------------------------------------------------------------
def test_check_pattern_is_exact_past_float32_integers():
    """Element 2**24 + 1 and beyond: a float32 index (arange in float32) would repeat values there."""
    n = (1 << 24) + 40
    t = torch.empty(n, dtype=torch.float32)
    nccl_bw.fill_mod7(t, add=2, block=1 << 22)
    for i in (0, 6, 7, (1 << 24) - 1, 1 << 24, (1 << 24) + 1, n - 1):
        assert t[i].item() == i % 7 + 2, i
    bad = (torch.arange(n, dtype=torch.float32) % 7)[(1 << 24) + 1].item()
    assert bad != ((1 << 24) + 1) % 7  # what the old pattern computed there


@pytest.fixture
def one_rank_gloo():
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield RankContext(0, 0, 1, 1, 0, CPU, distributed=True, backend="gloo")
    dist.destroy_process_group()


def test_nccl_bw_failed_check_drops_only_that_size(one_rank_gloo, monkeypatch):
    real = nccl_bw.Collective.check

    def check(self):
        return "planted: element 0 is 1, expected 2" if self.size == 2 << 20 else real(self)

    monkeypatch.setattr(nccl_bw.Collective, "check", check)
    from sb_bench.core.harness import Harness

    args = nccl_bw.NcclBw.parse_params({"operation": ["allreduce"], "minbytes": "1M", "maxbytes": "4M"})
    bench = nccl_bw.NcclBw(args)
    values = bench.measure(one_rank_gloo, Harness({"num_warmup": 0, "num_steps": 2, "duration": 0.0}))
    assert "allreduce_1048576_busbw" in values and "allreduce_4194304_time" in values
    assert "allreduce_2097152_time" not in values
    assert set(bench.failed) == set(nccl_bw.metric_names("allreduce", 2 << 20))


def test_nccl_bw_small_sizes_are_graph_timed_on_gpus_only():
    args = nccl_bw.NcclBw.parse_params({})
    assert args["graph_below"] == 16 << 20 and args["graph_iters"] >= 10
    assert nccl_bw.NcclBw(args)._sizes(cuda=True)[0] == 1 << 20  # default minimum 1 MiB


def test_reducescatter_ring_scratch_only_on_the_ring(one_rank_gloo):
    native = nccl_bw.Collective("reducescatter", 1 << 20, one_rank_gloo, "native")
    assert native.tmp is None and native.work is None


# -- the suite runs on Python 3.9 --------------------------------------------------------------------------------
def test_suite_sources_parse_as_python_39_and_avoid_zip_strict():
    for path in sorted((BENCH / "sb_bench").rglob("*.py")):
        text = path.read_text()
        ast.parse(text, filename=str(path), feature_version=(3, 9))
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "zip":
                assert not any(k.arg == "strict" for k in node.keywords), (
                    f"{path}:{node.lineno}: zip(strict=)"
                )


# -- models -------------------------------------------------------------------------------------------------------
def test_grad_scaler_before_torch_23():
    from sb_bench.model.base import grad_scaler

    made = []
    old = types.SimpleNamespace(
        amp=types.SimpleNamespace(),  # torch 2.2: torch.amp has no GradScaler
        cuda=types.SimpleNamespace(
            amp=types.SimpleNamespace(GradScaler=lambda: made.append("cuda") or "scaler")
        ),
    )
    assert grad_scaler(old, "cuda") == "scaler" and made == ["cuda"]
    assert grad_scaler(old, "cpu") is None
    assert type(grad_scaler(torch, "cpu")).__name__ == "GradScaler"


def test_megatron_world_of_one_needs_no_port():
    import torch.distributed as dist
    from sb_bench.model.megatron_gpt import single_process_store

    dist.init_process_group("gloo", store=single_process_store(), rank=0, world_size=1)
    try:
        t = torch.ones(2)
        dist.all_reduce(t)
        assert t.tolist() == [1.0, 1.0]
    finally:
        dist.destroy_process_group()
    src = (BENCH / "sb_bench/model/megatron_gpt.py").read_text()
    assert "MASTER_PORT" not in src


# -- kernel-launch ----------------------------------------------------------------------------------------------------
def test_kernel_launch_torch_round_trip_timing():
    from sb_bench.micro.kernel_launch import torch_round_trip_ms

    calls = []
    ms = torch_round_trip_ms(RankContext(0, 0, 1, 1, 0, CPU), lambda: calls.append(1), 5, 50)
    assert len(calls) == 55 and 0 < ms < 5
    env = run_bench("kernel-launch", num_warmup=2, num_steps=20)
    assert_metrics(env, {"torch_launch_time": "ms", "back_to_back_time": "ms"})


# -- gpu-stream, gpu-burn -------------------------------------------------------------------------------------------------
def test_gpu_stream_on_cpu_names_bytes_and_check(monkeypatch):
    env = run_bench("gpu-stream", size="8M", num_steps=3, num_warmup=1)
    assert_metrics(env, {f"stream_{k}_bw": "GB/s" for k in gpu_stream.KERNELS})
    assert gpu_stream.bandwidth_gbs("triad", 10**9, 1.0) == 3.0  # three arrays moved per pass
    real = gpu_stream.GpuStream.cases

    def faulty(self, ctx):
        for case in real(self, ctx):
            if case.key == "add":
                step = case.step
                case.step = lambda step=step: (step(), self.arr["c"][7].fill_(5.0))  # a flipped entry
            yield case

    monkeypatch.setattr(gpu_stream.GpuStream, "cases", faulty)
    monkeypatch.setattr(gpu_stream.GpuStream, "_check", _check_all_entries)
    env = run_bench("gpu-stream", size="64K", num_steps=2, num_warmup=0)
    assert env["status"] == "failed" and "add: c[7]" in env["reason"]


def _check_all_entries(self, kernel):
    name, want = gpu_stream.EXPECT[kernel]
    bad = (self.arr[name] != want).nonzero()
    return f"{kernel}: {name}[{int(bad[0])}] is wrong" if len(bad) else None


def test_gpu_burn_summary_and_mismatch_count():
    windows = [
        {"t": 1, "gflops": 100.0, "errors": 0, "temperature": 60.0, "sm_clock": 1980.0, "slowdown": []},
        {
            "t": 2,
            "gflops": 80.0,
            "errors": 3,
            "temperature": 83.0,
            "sm_clock": 1400.0,
            "slowdown": ["sw_power_cap"],
        },
    ]
    s = gpu_burn.summarize_windows(windows)
    assert s["burn_gflops"] == 90.0 and s["burn_gflops_min"] == 80.0 and s["burn_rate_drop"] == 20.0
    assert s["burn_errors"] == 3.0 and s["burn_throttled_windows"] == 1.0
    assert s["burn_max_temperature"] == 83.0 and s["burn_min_sm_clock"] == 1400.0
    ref = torch.randn(16, 16)
    got = ref.clone()
    got[3, 4] += 1.0
    got[5, 5] = float("nan")
    assert gpu_burn.count_mismatches(got, ref, 1e-4) == 2


def test_gpu_burn_on_cpu_and_a_planted_error(monkeypatch):
    env = run_bench("gpu-burn", duration=1.0, window=0.2)
    assert env["status"] == "ok", env["reason"]
    windows = env["details"]["windows"]
    assert env["result"]["burn_errors"] == [0.0] and windows and all(w["errors"] == 0 for w in windows)
    assert "no NVML here" in env["reason"]
    real = gpu_burn.count_mismatches
    monkeypatch.setattr(gpu_burn, "count_mismatches", lambda got, ref, rtol: real(got, ref * 1.5, rtol))
    env = run_bench("gpu-burn", duration=0.4, window=0.2)
    assert env["status"] == "failed" and env["return_code"] == 3
    assert "computes wrongly under sustained load" in env["reason"]
    assert "burn_gflops" in env["result"]  # the figures stay


def test_mem_bw_bidirectional_is_opt_in_and_skipped_on_a_cpu():
    from sb_bench.micro import mem_bw

    assert "bidir" not in mem_bw.MemBw.parse_params({})["mem_type"]  # SuperBench's three by default
    env = run_bench("mem-bw", mem_type=["bidir", "dtod"], size="1M", **SMALL)
    assert env["status"] == "ok" and "bidir_bw" not in env["result"]
    assert "skipped bidir_bw" in env["reason"] and "no host-device link" in env["reason"]


# -- the TF32 probe on every fp32 GEMM path ------------------------------------------------------------------
def test_fp32_gemm_probe_names_the_benchmark_and_passes_exact_float32():
    from sb_bench.micro.tf32_probe import fp32_gemm_runs_as_tf32

    ctx = RankContext(0, 0, 1, 1, 0, CPU)
    assert fp32_gemm_runs_as_tf32(ctx, 64, 48, 32, "x") is None  # a CPU: no TF32, not probed
    assert fp32_gemm_runs_as_tf32(ctx, 64, 48, 32, "x", cpu=True) is None  # exact float32
    why = fp32_gemm_runs_as_tf32(ctx, 64, 48, 32, "pytorch-matmul float32", _tf32_matmul, cpu=True)
    assert why and why.startswith("pytorch-matmul float32: float32 GEMMs run as TF32") and "OVERRIDE" in why


@pytest.mark.parametrize(
    "module, bench, params",
    [
        ("matmul", "pytorch-matmul", {"m": 64, "n": 48, "k": 32}),
        ("gpu_burn", "gpu-burn", {"precision": "fp32", "m": 64, "duration": 0.2}),
    ],
)
def test_fp32_gemm_benchmarks_skip_when_the_probe_finds_tf32(monkeypatch, module, bench, params):
    import importlib

    mod = importlib.import_module(f"sb_bench.micro.{module}")
    seen = []

    def probe(ctx, m, n, k, what, matmul=None, cpu=False):
        seen.append((m, n, k, what))
        return f"{what}: float32 GEMMs run as TF32 on this host (planted)"

    monkeypatch.setattr(mod, "fp32_gemm_runs_as_tf32", probe)
    env = run_bench(bench, **params, **SMALL)
    assert env["status"] == "skipped" and "run as TF32" in env["reason"], env
    assert seen and seen[0][3].startswith(bench.split("-")[0] if module == "gpu_burn" else bench)
