"""The model benchmarks' names, parameters and declared metrics (no model is built here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from model_tiny import ALL_MODELS, expected_metrics
from sb_bench.core import registry
from sb_bench.core.harness import run_benchmark
from sb_bench.model.base import percentile
from sb_bench.model.catalog import CNN_MODELS

ROOT = Path(__file__).resolve().parents[3]

ISSUE_CNNS = [
    "resnet18",
    "resnet34",
    "resnet50",
    "resnet101",
    "resnet152",
    "resnext50_32x4d",
    "resnext101_32x8d",
    "wide_resnet50_2",
    "wide_resnet101_2",
    "densenet121",
    "densenet169",
    "densenet201",
    "densenet161",
    "vgg11",
    "vgg11_bn",
    "vgg13",
    "vgg13_bn",
    "vgg16",
    "vgg16_bn",
    "vgg19_bn",
    "vgg19",
    "mnasnet0_5",
    "mnasnet0_75",
    "mnasnet1_0",
    "mnasnet1_3",
    "mobilenet_v2",
    "shufflenet_v2_x0_5",
    "shufflenet_v2_x1_0",
    "shufflenet_v2_x1_5",
    "shufflenet_v2_x2_0",
    "squeezenet1_0",
    "squeezenet1_1",
    "alexnet",
    "googlenet",
    "inception_v3",
]


def test_every_model_of_the_issue_is_registered():
    assert sorted(CNN_MODELS) == sorted(ISSUE_CNNS)
    want = {f"pytorch-{m}" for m in ISSUE_CNNS} | {
        "pytorch-gpt2-small", "pytorch-gpt2-medium", "pytorch-gpt2-large", "pytorch-gpt2-xl",
        "pytorch-bert-base", "pytorch-bert-large", "pytorch-lstm", "megatron-gpt",
    }  # fmt: skip
    assert want <= set(registry.names())
    assert set(ALL_MODELS) | {"megatron-gpt"} == want
    for name in want:
        cls = registry.get(name)
        assert cls.name == name and cls.kind == "model"
    # A config entry with `models: [resnet50]` resolves to the registered name.
    assert registry.resolve("model-benchmarks", "resnet50") == "pytorch-resnet50"


def test_listing_does_not_import_torch():
    code = (
        "import sys, json; from sb_bench.__main__ import describe; from sb_bench.model import MODULES;"
        "d = [describe(n) for n in MODULES]; print(json.dumps([len(x['metrics']) for x in d]));"
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=ROOT / "benchmarks", check=True).stdout.split("\n")  # fmt: skip
    assert out[1] == "False"
    assert all(n > 0 for n in json.loads(out[0]))


def test_superbench_precision_spellings_map_to_metric_prefixes():
    cls = registry.get("pytorch-resnet50")
    args = cls.parse_params({"precision": ["float32", "float16", "fp16", "bfloat16"], "device": "cpu"})
    assert args["precision"] == ["fp32", "fp16", "bf16"]
    names = {m.name for m in cls(args).metrics()}
    assert names == expected_metrics(["fp32", "fp16", "bf16"], ["train"], tflops=False, energy=True)
    # SuperBench's defaults: fp32 and fp16 training.
    assert cls.parse_params({})["precision"] == ["fp32", "fp16"]
    assert cls.parse_params({})["model_action"] == ["train"]


def test_metric_names_units_and_reduction():
    cls = registry.get("pytorch-bert-base")
    bench = cls(
        cls.parse_params({"precision": ["fp16"], "model_action": ["train", "inference"], "device": "cpu"})
    )
    metrics = {m.name: m for m in bench.metrics()}
    assert set(metrics) == expected_metrics(["fp16"], ["train", "inference"], tflops=True, energy=True)
    assert (
        metrics["fp16_train_step_time"].unit == "ms" and not metrics["fp16_train_step_time"].higher_is_better
    )
    assert (
        metrics["fp16_train_throughput"].unit == "samples/s"
        and metrics["fp16_train_throughput"].higher_is_better
    )
    assert metrics["fp16_inference_step_time_99.9"].unit == "ms"
    assert metrics["fp16_inference_throughput_50"].unit == "samples/s"
    assert metrics["fp16_train_tflops"].unit == "TFLOPS"
    # A node is judged by its slowest GPU.
    assert (
        metrics["fp16_train_step_time"].reduce == "max" and metrics["fp16_train_throughput"].reduce == "min"
    )
    # On a GPU the memory metrics are declared too.
    gpu = cls(cls.parse_params({"precision": ["fp32"], "device": "cuda"}))
    assert {"fp32_train_mem_allocated", "fp32_train_max_mem_allocated"} <= {m.name for m in gpu.metrics()}


@pytest.mark.parametrize(
    ("name", "params", "fragment"),
    [
        ("pytorch-resnet50", {"precision": ["fp8_hybrid"]}, "not supported by pytorch-resnet50"),
        ("pytorch-resnet50", {"precision": ["int8"]}, "precision"),
        ("pytorch-resnet50", {"model_action": ["finetune"]}, "model_action"),
        ("pytorch-resnet50", {"batch_size": -1}, "batch_size"),
        ("pytorch-resnet50", {"data": "disk"}, "parameter data"),
        ("pytorch-inception_v3", {"image_size": 224}, "at least 299"),
        ("pytorch-gpt2-small", {"seq_len": 2048}, "seq_len"),
        ("pytorch-bert-base", {"seq_len": 1024}, "seq_len"),
        ("pytorch-lstm", {"optimizer": "lamb"}, "optimizer"),
        ("pytorch-lstm", {"batch-size": 4, "no_such": 1}, "unknown parameter"),
    ],
)
def test_bad_parameters_are_invalid_argument_results(name, params, fragment):
    env = run_benchmark(name, params)
    assert env["status"] == "failed" and env["return_code"] == 1
    assert fragment in env["reason"]


def test_percentile_is_numpys_nearest_rank():
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(3)
    for n in (1, 2, 5, 10, 99, 1000, 1001):
        values = list(rng.random(n))
        for q in (50, 90, 95, 99, 99.9):
            assert percentile(values, q) == np.percentile(values, q, method="nearest")


def test_megatron_gpt_skips_with_the_reason_where_megatron_core_is_absent():
    pytest.importorskip("torch")
    try:
        import megatron.core  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("Megatron-Core is installed here")
    env = run_benchmark("megatron-gpt", {"device": "cpu"})
    assert env["status"] == "skipped" and env["return_code"] == 0
    assert "Megatron-Core" in env["reason"]
