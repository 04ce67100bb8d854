"""Every model of the issue builds at its published size and takes real train and inference steps.

Tiny inputs (batch 1-2, 8 tokens, 64-pixel images), one timed step of each action after the
training check's one optimizer step, SGD (no optimizer state), all in this one process so torch,
torchvision and transformers are imported once. The models that need more than ~10 s on two cores
are marked slow; CI runs them all.
"""

from __future__ import annotations

import math

import pytest
from model_tiny import ALL_MODELS, expected_metrics, tiny_params

# More than ~10 s each on 2 cores: construction of >100 M parameters, or big activations.
SLOW = {
    "pytorch-gpt2-medium", "pytorch-gpt2-large", "pytorch-gpt2-xl", "pytorch-bert-large",
    "pytorch-vgg11", "pytorch-vgg11_bn", "pytorch-vgg13", "pytorch-vgg13_bn", "pytorch-vgg16",
    "pytorch-vgg16_bn", "pytorch-vgg19", "pytorch-vgg19_bn", "pytorch-wide_resnet50_2",
    "pytorch-wide_resnet101_2", "pytorch-resnext101_32x8d", "pytorch-inception_v3", "pytorch-resnet152",
    "pytorch-densenet161",
}  # fmt: skip
TRANSFORMERS = {m for m in ALL_MODELS if "gpt2" in m or "bert" in m}


def check_envelope(env: dict, precisions: list[str], actions: list[str], tflops: bool) -> None:
    assert env["status"] == "ok" and env["return_code"] == 0, env["reason"]
    assert env["type"] == "model"
    got = {k for k in env["result"] if k != "return_code"}
    assert got == expected_metrics(precisions, actions, tflops)
    for name in got:
        (value,) = env["result"][name]
        assert isinstance(value, float) and math.isfinite(value) and value > 0, (name, value)
        unit = env["metrics"][name]["unit"]
        if "_step_time" in name:
            assert unit == "ms"
        elif "_throughput" in name:
            assert unit == "samples/s"
        elif name.endswith("_device_busy"):
            assert unit == "%" and value <= 100.0
        else:
            assert name.endswith("_tflops") and unit == "TFLOPS"
    for p in precisions:
        if "inference" in actions:
            for kind in ("step_time", "throughput"):
                qs = [env["result"][f"{p}_inference_{kind}_{q}"][0] for q in ("50", "90", "95", "99", "99.9")]
                assert qs == sorted(qs), (kind, qs)
        for a in actions:
            bs = env["params"]["batch_size"]
            st, tp = env["result"][f"{p}_{a}_step_time"][0], env["result"][f"{p}_{a}_throughput"][0]
            assert tp == pytest.approx(bs * 1000.0 / st)


@pytest.mark.parametrize(
    "name", [pytest.param(m, marks=pytest.mark.slow) if m in SLOW else m for m in ALL_MODELS]
)
def test_model_trains_and_infers_at_tiny_size(name):
    from sb_bench.core.harness import run_benchmark

    env = run_benchmark(name, tiny_params(name))
    check_envelope(env, ["fp32"], ["train", "inference"], tflops=name in TRANSFORMERS)
