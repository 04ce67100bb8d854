"""The model harness: precisions, percentiles, repetition, the training check, OOM, fp8, the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from model_tiny import expected_metrics, tiny_params
from test_model_every import check_envelope

torch = pytest.importorskip("torch")
from sb_bench.core.harness import run_benchmark  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
SMALL_LSTM = {"input_size": 16, "hidden_size": 32, "num_layers": 2, "seq_len": 6}


@pytest.fixture
def narrow_gpt2(monkeypatch: pytest.MonkeyPatch) -> str:
    """``pytorch-gpt2-small`` as the registry gives it to the harness, but GPT-2 at hidden 64, 2 layers and
    2 heads: transformers' same GPT2Model and the benchmark's same class and code, narrower. What the
    harness does with precisions and percentiles does not depend on the width; the published width's
    half-precision matrix products are emulated on a CPU without AVX-512 (58 s alone, 189 s beside CI's
    other lanes on 2026-11-29: the slowest test of CI), and its fp32 run is test_model_every's."""
    from sb_bench.core import registry
    from sb_bench.model.base import transformer_class
    from sb_bench.model.gpt2 import GPT2Benchmark

    name = "pytorch-gpt2-small"
    narrow = transformer_class(
        GPT2Benchmark, "gpt2-small", (64, 2, 2), "NarrowGPT2", "the last token", __name__
    )
    real = registry.get
    monkeypatch.setattr(registry, "get", lambda n: narrow if n == name else real(n))
    assert registry.get(name).size == (64, 2, 2)
    return name


@pytest.mark.slow
def test_mixed_precisions_and_ordered_percentiles_over_many_steps(narrow_gpt2):
    # (An LSTM cannot run fp16 on a CPU: oneDNN has no fp16 LSTM there. GPUs run it.)
    # (A CNN at a tiny image size normalises batch statistics of two values and overflows fp16 now
    # and then; GPT-2's layer norms keep it in range.)
    params = tiny_params(narrow_gpt2, num_steps=3, num_warmup=1, check_steps=2,
                         precision=["bfloat16", "float16"])  # fmt: skip
    env = run_benchmark(narrow_gpt2, params)

    check_envelope(env, ["bf16", "fp16"], ["train", "inference"], tflops=True)
    r = env["result"]
    # With 3 steps the median is the 2nd value either way round, so the median throughput is the
    # throughput of the median step.
    for p in ("bf16", "fp16"):
        median_ms = r[f"{p}_inference_step_time_50"][0]
        assert r[f"{p}_inference_throughput_50"][0] == pytest.approx(params["batch_size"] * 1000 / median_ms)
        assert r[f"{p}_inference_step_time_50"][0] <= r[f"{p}_inference_step_time_99.9"][0]


def test_transformer_reports_tflops_consistent_with_its_flop_count():
    from sb_bench.core import registry

    params = tiny_params("pytorch-gpt2-small", model_action=["train"])
    env = run_benchmark("pytorch-gpt2-small", params)
    check_envelope(env, ["fp32"], ["train"], tflops=True)
    # 124 M parameters, of which ~85 M are the blocks' weight matrices: forward ~2 x 85 M x 8 tokens.
    cls = registry.get("pytorch-gpt2-small")
    bench = cls(cls.parse_params(params))
    torch.manual_seed(0)
    flops = bench.forward_flops(bench.build_model())
    assert 2 * 84e6 * 8 < flops < 2 * 86e6 * 8 + 4 * 12 * 64 * 768 + 2 * 768 * 100 + 1
    r = env["result"]
    assert r["fp32_train_tflops"][0] == pytest.approx(3 * flops * r["fp32_train_throughput"][0] / 1e12)


def test_a_precision_the_cpu_cannot_run_is_skipped_with_the_reason_and_the_others_reported():
    env = run_benchmark("pytorch-lstm", tiny_params("pytorch-lstm", **SMALL_LSTM, precision=["fp32", "bf16"]))
    assert env["status"] == "ok", env["reason"]
    assert "fp32_train_step_time" in env["result"]
    if "bf16_train_step_time" not in env["result"]:  # oneDNN has no bf16 LSTM on CPUs without AVX-512
        assert "bf16 does not run on this CPU" in env["reason"]
        assert not any(k.startswith("bf16") for k in env["result"])


def test_run_count_repeats_and_reports_spread():
    env = run_benchmark("pytorch-lstm", tiny_params("pytorch-lstm", **SMALL_LSTM, run_count=2, num_steps=3))
    assert env["status"] == "ok", env["reason"]
    assert all(len(v) == 2 for k, v in env["result"].items() if k != "return_code")
    assert "fp32_train_step_time" in env["spread"]


def test_duration_mode_runs_for_the_given_time():
    env = run_benchmark("pytorch-lstm", tiny_params("pytorch-lstm", **SMALL_LSTM, duration=0.5,
                                                    model_action=["inference"]))  # fmt: skip
    assert env["status"] == "ok", env["reason"]
    assert set(env["result"]) - {"return_code"} == expected_metrics(["fp32"], ["inference"], tflops=False)


def test_nan_training_is_a_failure_with_its_reason():
    # A learning rate of 1e38 puts ~1e37 into the weights after one step: activations overflow to inf,
    # batch norm turns them into NaN. Fast, and wrong: a failure, not a number.
    env = run_benchmark("pytorch-resnet18", tiny_params("pytorch-resnet18", image_size=32, lr=1e38))
    assert env["status"] == "failed" and env["return_code"] == 3
    assert "fp32 training diverged" in env["reason"] and "nan" in env["reason"].lower(), env["reason"]
    assert "fp32_train_step_time" not in env["result"]


def test_training_that_does_not_lower_the_loss_fails():
    # SGD with a learning rate of 1e-30 changes nothing: the loss cannot fall.
    env = run_benchmark("pytorch-lstm", tiny_params("pytorch-lstm", **SMALL_LSTM, lr=1e-30))
    assert env["status"] == "failed" and env["return_code"] == 3
    assert "does not train" in env["reason"]


def test_out_of_memory_is_a_failure_with_its_reason():
    # 2^40 images of 64 x 64 pixels: the allocator refuses, the harness reports it.
    params = tiny_params("pytorch-resnet18", batch_size=1 << 40, sample_count=1 << 40)
    env = run_benchmark("pytorch-resnet18", params)
    assert env["status"] == "failed" and env["return_code"] == 5, env["reason"]
    assert env["reason"].startswith("out of memory")


def test_fp8_is_skipped_with_the_reason_without_fp8_hardware():
    alone = run_benchmark("pytorch-bert-base", tiny_params("pytorch-bert-base", precision=["fp8_hybrid"]))
    assert alone["status"] == "skipped" and alone["return_code"] == 0
    assert "fp8" in alone["reason"] and "CPU" in alone["reason"]
    mixed = run_benchmark("pytorch-bert-base", tiny_params("pytorch-bert-base", precision=["fp32", "fp8_e4m3"],
                                                           model_action=["inference"]))  # fmt: skip
    assert mixed["status"] == "ok", mixed["reason"]
    assert "fp32_inference_step_time" in mixed["result"]
    assert not any(k.startswith("fp8") for k in mixed["result"])
    assert "fp8_e4m3" in mixed["reason"]


@pytest.mark.gpu
def test_gpu_memory_metrics_and_cuda_timing():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU: memory metrics and CUDA-event timing are GPU-only")
    env = run_benchmark("pytorch-resnet18", tiny_params("pytorch-resnet18", device="cuda", pin_memory=True,
                                                        precision=["fp32", "fp16", "bf16"]))  # fmt: skip
    assert env["status"] == "ok", env["reason"]
    for p in ("fp32", "fp16", "bf16"):
        for a in ("train", "inference"):
            assert (
                env["result"][f"{p}_{a}_max_mem_allocated"][0]
                >= env["result"][f"{p}_{a}_mem_allocated"][0]
                > 0
            )


def test_cli_exec_writes_the_rank_file(tmp_path):
    params = tiny_params("pytorch-squeezenet1_1", model_action=["inference"])
    proc = subprocess.run(
        [sys.executable, "-m", "sb_bench", "exec", "pytorch-squeezenet1_1", "--params", json.dumps(params),
         "--out", str(tmp_path)],
        cwd=ROOT / "benchmarks", capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    env = json.loads((tmp_path / "rank0.json").read_text())
    assert env["name"] == "pytorch-squeezenet1_1" and env["status"] == "ok"
    assert "fp32_inference_step_time_99.9" in env["result"]


# A batch that cannot load the device: an LSTM of one hidden unit over wide inputs does ~4 multiply-adds
# per input value, while the DataLoader (SuperBench's path: num_workers given) gathers and stacks every
# value on the host each step. The same model fed from the resident pool keeps the device busy. A batch of
# 64 such samples (64 MB to gather per step) reads 36-52% busy under a load of 3 on 2 cores; a batch of 16
# read 77-90%, too near the 90% limit when the machine is busy.
HOST_BOUND = {
    "input_size": 16384,
    "hidden_size": 1,
    "num_layers": 1,
    "seq_len": 16,
    "batch_size": 64,
    "sample_count": 64,
    "num_warmup": 1,
    "num_steps": 6,
    "precision": ["float32"],
    "model_action": ["inference"],
    "device": "cpu",
}


def test_a_batch_that_cannot_load_the_device_reads_low_device_busy():
    from sb_bench.model.base import BUSY_LIMIT

    loader = run_benchmark("pytorch-lstm", {**HOST_BOUND, "num_workers": 0})
    assert loader["status"] == "ok", loader["reason"]
    assert loader["params"]["data"] == "loader"  # a SuperBench data parameter given: SuperBench's path
    busy = loader["result"]["fp32_inference_device_busy"][0]
    assert busy < BUSY_LIMIT, busy
    resident = run_benchmark("pytorch-lstm", {**HOST_BOUND, "data": "device"})
    assert resident["params"]["data"] == "device"
    assert resident["result"]["fp32_inference_device_busy"][0] >= BUSY_LIMIT


def test_batch_size_zero_is_the_models_default_and_superbench_parameters_select_the_loader():
    from sb_bench.core import registry

    cls = registry.get("pytorch-resnet50")
    assert cls.gpu_batch == 256 and cls.image_input
    assert cls.parse_params({})["batch_size"] == 0 and cls.parse_params({})["data"] == "device"
    assert cls.parse_params({"pin_memory": True})["data"] == "loader"
    assert cls.parse_params({"pin_memory": True})["channels_last"] == "false"  # SuperBench's NCHW
    assert cls.parse_params({})["channels_last"] == "auto"
    assert cls.parse_params({"num_workers": 8, "data": "device"})["data"] == "device"  # explicit wins
    env = run_benchmark("pytorch-lstm", {**HOST_BOUND, "batch_size": 0, "num_steps": 1, "data": "device"})
    assert env["status"] == "ok"
    tput, st = env["result"]["fp32_inference_throughput"][0], env["result"]["fp32_inference_step_time"][0]
    assert tput == pytest.approx(32 * 1000.0 / st)  # SuperBench's 32 on a CPU
