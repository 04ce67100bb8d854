"""Tiny parameters that make every model construct and take real steps quickly on a CPU."""

from __future__ import annotations

from sb_bench.model.catalog import BERT_SIZES, CNN_MODELS, GPT2_SIZES

# Inception v3 takes 299-pixel images; MNASNet's batch-norm statistics over a 2 x 2 feature map of two
# images make its first SGD steps erratic, so it gets a larger image.
IMAGE = {"inception_v3": 299, "mnasnet0_5": 128, "mnasnet0_75": 128, "mnasnet1_0": 128, "mnasnet1_3": 128}

# SqueezeNet 1.1's first SGD step on a two-image batch can overshoot; three steps bring the loss down.
EXTRA = {"squeezenet1_1": {"check_steps": 3}}

ALL_MODELS = [f"pytorch-{m}" for m in (*CNN_MODELS, *GPT2_SIZES, *BERT_SIZES, "lstm")]

# One step of each action, no warm-up beyond the training check's single step, SGD (no optimizer state:
# gpt2-xl's 1.5 B parameters with Adam's two moments would not fit a 24 GiB CI machine).
STEP_ONCE = {
    "num_warmup": 0,
    "num_steps": 1,
    "check_steps": 1,
    "num_workers": 0,
    "precision": ["float32"],
    "model_action": ["train", "inference"],
    "device": "cpu",
}


def tiny_params(name: str, **extra) -> dict:
    model = name.removeprefix("pytorch-")
    p = dict(STEP_ONCE)
    if model in CNN_MODELS:
        p.update(batch_size=2, sample_count=2, image_size=IMAGE.get(model, 64), num_classes=10)
    elif model in GPT2_SIZES:
        p.update(batch_size=1, sample_count=1, seq_len=8, optimizer="sgd")
    elif model in BERT_SIZES:
        p.update(batch_size=2, sample_count=2, seq_len=8, optimizer="sgd")
    else:
        p.update(batch_size=2, sample_count=2, seq_len=8)
    p.update(EXTRA.get(model, {}))
    p.update(extra)
    return p


def expected_metrics(
    precisions: list[str], actions: list[str], tflops: bool, energy: bool = False
) -> set[str]:
    """The metric names a model run gives; ``energy``: also the declared power and per-watt figures (a run
    gives them only where the host has an energy counter)."""
    names = set()
    for p in precisions:
        for a in actions:
            names |= {f"{p}_{a}_step_time", f"{p}_{a}_throughput", f"{p}_{a}_device_busy"}
            if energy:
                names |= {f"{p}_{a}_power", f"{p}_{a}_throughput_per_watt"}
            if a == "inference":
                for q in ("50", "90", "95", "99", "99.9"):
                    names |= {f"{p}_inference_step_time_{q}", f"{p}_inference_throughput_{q}"}
            if tflops:
                names.add(f"{p}_{a}_tflops")
    return names
