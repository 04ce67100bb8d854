"""gemm-flops, kernel-launch, cublas-function, cudnn-function, pytorch-matmul, cpu-memory-bw-latency on CPU."""

from __future__ import annotations

import json
import time

import pytest
import torch
from sb_bench.micro import gemm_flops as gf
from sb_bench.micro.gemm_flops import PRECISIONS, DeviceInfo, check_product, make_step, peak_for, unsupported
from suite_helpers import assert_metrics, run_bench

SMALL = {"num_warmup": 1, "num_steps": 3}
GEMM_SMALL = {**SMALL, "min_time": 0}  # exactly num_steps: these tests check logic, not timing


# -- gemm-flops --------------------------------------------------------------------------------------
def test_gemm_flops_cpu_precisions_and_skip_reasons():
    env = run_bench(
        "gemm-flops",
        m=128,
        n=96,
        k=64,
        precision=["fp64", "fp32", "fp16", "tf32_tc", "int8_tc"],
        **GEMM_SMALL,
    )
    assert_metrics(env, {"fp64_flops": "GFLOPS", "fp32_flops": "GFLOPS", "fp16_flops": "GFLOPS"})
    # Tensor-core variants are not invented on a CPU; each skipped metric is named with its reason.
    assert "tf32_tc_flops" in env["reason"] and "int8_tc_iops" in env["reason"]
    assert "a CPU has no tensor cores" in env["reason"]
    assert "fp32_efficiency" in env["reason"] and "no peak table for CPUs" in env["reason"]
    assert env["reduce_op"]["fp32_flops"] is None  # per GPU: the summary keeps :<rank>


def test_gemm_flops_on_cpu_times_for_min_time_so_one_lost_slice_cannot_make_the_figure():
    # 3 steps of a 64^3 GEMM take well under a millisecond: shorter than one scheduler slice, so one
    # preemption would be the figure and no samples would say so (CI saw a healthy host read 7x slow
    # twice in a row). With min_time the window is long enough to hold samples of >= 20 ms each.
    env = run_bench("gemm-flops", m=64, precision=["fp32"], min_time=0.2, **SMALL)
    assert env["status"] == "ok", env["reason"]
    taken = env["raw_data"]["fp32_flops"][0]
    # 0.2 s of laps merge into about 8-10 samples of >= 20 ms on a quiet machine (sb_bench.core.samples);
    # 3 steps alone give at most 3, of a fraction of a millisecond each. Under CI's three workers on two
    # cores the laps are slower and fewer samples hold them (4 on 2026-12-07): more than 3 is the property.
    assert len(taken) > 3, taken
    assert env["spread"]["fp32_flops"] >= 0 and env["noise"]["fp32_flops"] >= 0
    exact = run_bench("gemm-flops", m=64, precision=["fp32"], **GEMM_SMALL)
    assert len(exact["raw_data"]["fp32_flops"][0]) <= 3  # min_time 0: exactly num_steps


def test_gemm_flops_min_time_window_survives_one_stalled_probe(monkeypatch):
    # CI saw the window shrink to 4 steps: the one probe of the step time was stalled by the scheduler,
    # read the step ~70 ms long, and min_time 0.2 s then asked for 3 steps. A planted 0.3 s stall in the
    # first probe (its second step: after one warm-up step) must leave the window as long as ever.
    real = gf.make_step
    calls = {"n": 0}

    def stalling(prec, a, b, c):
        step, product = real(prec, a, b, c)

        def stalls_once():
            calls["n"] += 1
            if calls["n"] == 3:
                time.sleep(0.3)
            step()

        return stalls_once, product

    monkeypatch.setattr(gf, "make_step", stalling)
    env = run_bench("gemm-flops", m=64, precision=["fp32"], min_time=0.2, **SMALL)
    assert env["status"] == "ok", env["reason"]
    # The window's own steps: all calls less the warm-up step and the probes (4 steps each). Sized from
    # the stalled probe (0.3 s over 4 steps) it holds a few steps in one sample (PROBES = 1: 4 steps, 1
    # sample: this fails). Sized from an unstalled probe it holds 0.2 s of steps: hundreds on a quiet
    # machine, 38 beside CI's other lane (CI, 11-28: 51 calls) and 14 under a quiet-part CI run, where a
    # step took 5-14 ms. More than 3 holds while a 64^3 GEMM step takes under 67 ms.
    window = calls["n"] - 1 - gf.PROBES * 4
    assert window > 3 and len(env["raw_data"]["fp32_flops"][0]) > 3, calls


def test_gemm_flops_all_tensor_core_precisions_on_cpu_is_skipped_not_failed():
    env = run_bench("gemm-flops", m=64, precision=["tf32_tc", "bf16_tc"], **GEMM_SMALL)
    assert env["status"] == "skipped" and env["return_code"] == 0
    assert "a CPU has no tensor cores" in env["reason"]


@pytest.mark.parametrize("corrupt", ["one_entry", "nan", "zero_tile"])
def test_gemm_flops_planted_wrong_product_fails_with_reason(monkeypatch, corrupt):
    real = gf.make_step

    def faulty(prec, a, b, c):
        step, product = real(prec, a, b, c)

        def bad_step():
            step()
            out = product()
            if corrupt == "one_entry":
                out[37, 11] += 1e4  # an exponent-sized error in one entry, anywhere
            elif corrupt == "nan":
                out[5, 5] = float("nan")
            else:
                out[16:32, 16:32] = 0  # a dead tile

        return bad_step, product

    monkeypatch.setattr(gf, "make_step", faulty)
    env = run_bench("gemm-flops", m=128, precision=["fp32"], check_samples=8, **GEMM_SMALL)
    assert env["status"] == "failed" and env["return_code"] == 3, env
    assert env["reason"].startswith("result check failed: fp32:")
    assert env["result"] == {"return_code": [3]}  # no throughput for a wrong GPU


def test_check_product_column_checksum_catches_single_entry_outside_samples():
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(64, 32, generator=gen), torch.randn(32, 48, generator=gen)
    c = a @ b
    assert check_product(a, b, c, 0, 1e-4) is None
    c[63, 47] += 500.0
    err = check_product(a, b, c, 0, 1e-4)  # no samples: the checksum alone catches it
    assert err and "column 47" in err


def test_int8_path_is_exact_and_checked():
    a, b, c = gf._inputs("int8_tc", 32, 32, 32, torch.device("cpu"))
    step, product = make_step("int8_tc", a, b, c)
    try:
        step()
    except RuntimeError as exc:  # pragma: no cover - torch builds without a CPU _int_mm
        pytest.skip(f"torch._int_mm unavailable on CPU: {exc}")
    out = product()
    assert out.dtype == torch.int32
    assert check_product(a, b, out, 16, 0.0) is None
    out[3, 4] += 1  # an integer GEMM off by one is wrong
    assert "integer GEMM must be exact" in check_product(a, b, out, 0, 0.0)


def test_fp8_inputs_and_check_path():
    if not hasattr(torch, "float8_e4m3fn"):
        pytest.skip("torch without float8")
    a, b, _ = gf._inputs("fp8e4m3_tc", 32, 16, 32, torch.device("cpu"))
    want = (a.to(torch.float64) @ b.to(torch.float64)).to(torch.bfloat16)
    assert b.stride()[0] == 1  # column-major B, as _scaled_mm wants
    assert check_product(a, b, want, 8, PRECISIONS["fp8e4m3_tc"].rtol) is None


@pytest.mark.parametrize(
    ("name", "cc", "measured", "skipped"),
    [
        (
            "NVIDIA A100-SXM4-80GB",
            (8, 0),
            {"fp64_tc", "fp32", "tf32_tc", "fp16_tc", "bf16_tc", "int8_tc"},
            {"fp64", "fp16", "fp8e4m3_tc"},
        ),
        (
            "NVIDIA H100 80GB HBM3",
            (9, 0),
            {"fp64_tc", "fp32", "tf32_tc", "bf16_tc", "int8_tc", "fp8e4m3_tc"},
            {"fp64", "fp16"},
        ),
        (
            "Tesla V100-SXM2-32GB",
            (7, 0),
            {"fp64", "fp32", "fp16_tc"},
            {"fp64_tc", "tf32_tc", "bf16_tc", "int8_tc"},
        ),
        ("NVIDIA L40S", (8, 9), {"fp64", "fp8e4m3_tc", "tf32_tc"}, {"fp64_tc", "fp16"}),
    ],
)
def test_precision_matrix_per_gpu(name, cc, measured, skipped):
    dev = DeviceInfo("cuda", name, cc)
    for p in measured:
        assert unsupported(p, dev) is None, p
    for p in skipped:
        assert unsupported(p, dev), p


def test_peak_table_and_unknown_model():
    model, peaks = peak_for("NVIDIA H100 80GB HBM3")
    assert model == "H100 SXM" and peaks["bf16_tc"] == pytest.approx(989.4)
    assert peak_for("NVIDIA H100 PCIe")[0] == "H100 PCIe"
    assert peak_for("NVIDIA A100-SXM4-40GB")[1]["tf32_tc"] == 156.0
    assert peak_for("AMD Instinct MI300X")[0] == "MI300X"
    assert peak_for("NVIDIA GeForce RTX 4090") is None  # unknown: no efficiency, not a guess


def test_efficiency_reported_against_peak():
    """With a peak (1 GFLOPS here), efficiency = rate / peak, in %."""
    bench = gf.GemmFlops(gf.GemmFlops.parse_params({"m": 64, "precision": ["fp32"]}))
    bench.device_info = DeviceInfo("cpu")
    bench.peak = {"fp32": 0.001}
    from sb_bench.core.context import RankContext

    ctx = RankContext(0, 0, 1, 1, 0, torch.device("cpu"))
    case = next(iter(bench.cases(ctx)))
    values = case.metrics(2 * 64**3 / 0.5e9)  # 0.5 GFLOPS
    assert values["fp32_flops"] == pytest.approx(0.5)
    assert values["fp32_efficiency"] == pytest.approx(50.0)


# -- kernel-launch -------------------------------------------------------------------------------------
def test_kernel_launch_reports_torch_launch_times_on_cpu():
    """SuperBench's event_time/wall_time need a GPU (tests/suite/micro/test_kernel_launch_native.py)."""
    env = run_bench("kernel-launch", num_warmup=5, num_steps=200)
    assert_metrics(env, {"torch_launch_time": "ms", "back_to_back_time": "ms"})
    assert env["metrics"]["torch_launch_time"]["higher_is_better"] is False
    assert env["result"]["torch_launch_time"][0] < 5.0  # a tiny op, far below 5 ms even on a busy CPU


# -- cublas / cudnn --------------------------------------------------------------------------------------
CUBLAS = [
    {"name": "cublasSgemm", "m": 64, "n": 48, "k": 32, "transa": 1, "transb": 0},
    {
        "name": "cublasGemmEx",
        "m": 32,
        "n": 32,
        "k": 64,
        "transa": 0,
        "transb": 1,
        "datatype": "half",
        "use_tensor_core": True,
    },
    {
        "name": "cublasSgemmStridedBatched",
        "m": 16,
        "n": 16,
        "k": 8,
        "transa": 0,
        "transb": 1,
        "batchCount": 4,
    },
    {"name": "cublasCgemm", "m": 16, "n": 8, "k": 32, "transa": 1, "transb": 0},
]


def test_cublas_function_names_units_and_values():
    from sb_bench.micro.cublas_function import metric_name

    env = run_bench("cublas-function", config_json_str=json.dumps(CUBLAS), **SMALL)
    assert_metrics(env, {metric_name(c): "us" for c in CUBLAS})
    # SuperBench's naming: lowercased function, sorted lowercased keys.
    assert "name_cublassgemm_k_32_m_64_n_48_transa_1_transb_0_time" in env["result"]
    assert "name_cublassgemmstridedbatched_batchcount_4_k_8_m_16_n_16_transa_0_transb_1_time" in env["result"]


def test_cublas_default_shapes_come_from_models_and_parse():
    from sb_bench.micro.cublas_function import DEFAULT_CONFIGS, FUNCTIONS, parse_configs

    assert {c["name"] for c in DEFAULT_CONFIGS} == set(FUNCTIONS)
    assert parse_configs("") == DEFAULT_CONFIGS
    with pytest.raises(ValueError, match="name"):
        parse_configs('{"name": "cublasZgemm", "m": 1, "n": 1, "k": 1}')


def test_cudnn_function_three_functions_checked():
    from sb_bench.micro.cudnn_function import metric_name

    shape = {"n": 2, "c": 3, "h": 12, "w": 12, "k": 4, "r": 3, "s": 3, "stride": 1, "pad": 1}
    cfgs = [
        {"name": fn, **shape, "datatype": "float"}
        for fn in (
            "cudnnConvolutionForward",
            "cudnnConvolutionBackwardData",
            "cudnnConvolutionBackwardFilter",
        )
    ]
    env = run_bench("cudnn-function", config_json_str=json.dumps(cfgs), **SMALL)
    assert_metrics(env, {metric_name(c): "us" for c in cfgs})


def test_cudnn_check_catches_wrong_convolution():
    from sb_bench.micro.cudnn_function import _conv_call, conv_check

    x, w = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3)
    y = _conv_call("cudnnConvolutionForward", x, w, None, 1, 1, 1)
    assert conv_check("cudnnConvolutionForward", x, w, None, y, (1, 1, 1), 1e-4, 0, 10**9) is None
    y[0, 1, 2, 3] += 100.0
    assert "relative error" in conv_check("cudnnConvolutionForward", x, w, None, y, (1, 1, 1), 1e-4, 0, 10**9)


# -- pytorch-matmul ---------------------------------------------------------------------------------------
def test_pytorch_matmul_nosharding_time():
    env = run_bench("matmul", m=128, **SMALL)  # the config entry name resolves to pytorch-matmul
    assert env["name"] == "pytorch-matmul"
    assert_metrics(env, {"nosharding_time": "ms"})


# -- cpu-memory-bw-latency --------------------------------------------------------------------------------
def test_cpu_memory_bandwidth_and_latency():
    from sb_bench.micro.cpu_memory_bw_latency import BW_TESTS

    env = run_bench("cpu-memory-bw-latency", size="8M", latency_size="32M", hops=100_000, **SMALL)
    names = {name: "MB/s" for name, _ in BW_TESTS.values()}
    lat = [k for k in env["result"] if k.startswith("mem_latency_matrix_numa_")]
    assert lat, env["reason"]
    names.update({k: "ns" for k in lat})
    assert_metrics(env, names)
    for k in lat:
        assert 1.0 < env["result"][k][0] < 10_000.0  # a DRAM load-to-use latency in ns, not Python's loop


def test_pointer_chain_is_one_cycle():
    import numpy as np
    from sb_bench.micro.cpu_memory_bw_latency import build_chain

    nxt, start = build_chain(64 * 100)
    seen, p = set(), start
    for _ in range(100):
        seen.add(p)
        p = int(nxt[p])
    assert p == start and len(seen) == 100 and all(s % 8 == 0 for s in seen)
    assert np.count_nonzero(nxt) >= 99


@pytest.mark.parametrize(
    ("error", "status"),
    [
        ("_int_mm is not supported on this device", "ok"),  # not offered here: a skip with the reason
        ("CUDA error: an illegal memory access was encountered", "failed"),  # a device fault: a failure
    ],
)
def test_unavailable_tensor_core_gemm_is_skipped_but_device_faults_fail(monkeypatch, error, status):
    monkeypatch.setattr(gf, "unsupported", lambda prec, dev: None)  # pretend the device has tensor cores
    real = gf.make_step

    def make(prec, a, b, c):
        if prec != "int8_tc":
            return real(prec, a, b, c)

        def broken():
            raise RuntimeError(error)

        return broken, lambda: None

    monkeypatch.setattr(gf, "make_step", make)
    env = run_bench("gemm-flops", m=64, precision=["fp32", "int8_tc"], **GEMM_SMALL)
    assert env["status"] == status, env["reason"]
    if status == "ok":
        assert "fp32_flops" in env["result"] and "int8_tc GEMM not available here" in env["reason"]
    else:
        assert env["return_code"] == 4 and "illegal memory access" in env["reason"]


def test_cublas_function_fp32_configs_are_probed_for_tf32(monkeypatch):
    """A float32 GEMM that runs as TF32 (the container override) is skipped with the reason; the
    configurations allowed TF32 (GemmEx float with use_tensor_core) and half are not probed."""

    def tf32(t):
        bits = t.contiguous().view(torch.int32)
        return ((bits + (1 << 12)) & ~((1 << 13) - 1)).view(torch.float32)

    real_mm, real_bmm = torch.matmul, torch.bmm

    def as_tf32(real):
        def fn(a, b, out=None):
            if a.dtype != torch.float32:
                return real(a, b, out=out) if out is not None else real(a, b)
            r = real(tf32(a), tf32(b))
            return out.copy_(r) if out is not None else r

        return fn

    monkeypatch.setattr(torch, "matmul", as_tf32(real_mm))
    monkeypatch.setattr(torch, "bmm", as_tf32(real_bmm))
    env = run_bench("cublas-function", config_json_str=json.dumps(CUBLAS), **SMALL)
    sgemm = "name_cublassgemm_k_32_m_64_n_48_transa_1_transb_0_time"
    assert sgemm not in env["result"] and sgemm in env["reason"]
    assert "cublasSgemm: float32 GEMMs run as TF32" in env["reason"]
    assert "cublasSgemmStridedBatched: float32 GEMMs run as TF32" in env["reason"]
    assert any(k.startswith("name_cublasgemmex_datatype_half") for k in env["result"])  # half: not probed
    assert "name_cublascgemm_k_32_m_16_n_8_transa_1_transb_0_time" in env["result"]
