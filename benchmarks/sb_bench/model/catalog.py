"""Which models exist and how big they are; importable without torch.

Sizes are the published ones: GPT-2 (Radford et al. 2019, as in transformers'
model cards), BERT (Devlin et al. 2018), and the LSTM and CNN lists of
SuperBench's model benchmarks.
"""

from __future__ import annotations

# torchvision builders, in SuperBench's list.
CNN_MODELS: tuple[str, ...] = (
    "resnet18", "resnet34", "resnet50", "resnet101", "resnet152",
    "resnext50_32x4d", "resnext101_32x8d",
    "wide_resnet50_2", "wide_resnet101_2",
    "densenet121", "densenet169", "densenet201", "densenet161",
    "vgg11", "vgg11_bn", "vgg13", "vgg13_bn", "vgg16", "vgg16_bn", "vgg19_bn", "vgg19",
    "mnasnet0_5", "mnasnet0_75", "mnasnet1_0", "mnasnet1_3",
    "mobilenet_v2",
    "shufflenet_v2_x0_5", "shufflenet_v2_x1_0", "shufflenet_v2_x1_5", "shufflenet_v2_x2_0",
    "squeezenet1_0", "squeezenet1_1",
    "alexnet", "googlenet", "inception_v3",
)  # fmt: skip

# name -> (hidden size, layers, attention heads); feed-forward is 4 x hidden.
GPT2_SIZES: dict[str, tuple[int, int, int]] = {
    "gpt2-small": (768, 12, 12),
    "gpt2-medium": (1024, 24, 16),
    "gpt2-large": (1280, 36, 20),
    "gpt2-xl": (1600, 48, 25),
}

BERT_SIZES: dict[str, tuple[int, int, int]] = {
    "bert-base": (768, 12, 12),
    "bert-large": (1024, 24, 16),
}

# Precision spellings a config may use -> the metric prefix (SuperBench writes
# float32/float16 in configs and fp32/fp16 in metric names).
PRECISION_ALIASES: dict[str, str] = {
    "fp32": "fp32",
    "float32": "fp32",
    "fp16": "fp16",
    "float16": "fp16",
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp8_hybrid": "fp8_hybrid",
    "fp8_e4m3": "fp8_e4m3",
}

PERCENTILES: tuple[str, ...] = ("50", "90", "95", "99", "99.9")


def module_table() -> dict[str, str]:
    """Benchmark name -> module that registers it."""
    table = {f"pytorch-{m}": "sb_bench.model.cnn" for m in CNN_MODELS}
    table.update({f"pytorch-{m}": "sb_bench.model.gpt2" for m in GPT2_SIZES})
    table.update({f"pytorch-{m}": "sb_bench.model.bert" for m in BERT_SIZES})
    table["pytorch-lstm"] = "sb_bench.model.lstm"
    table["megatron-gpt"] = "sb_bench.model.megatron_gpt"
    return table
