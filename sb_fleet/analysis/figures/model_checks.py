"""What a model benchmark's throughput means: was the device the bottleneck, and how far from the
figure NVIDIA publishes for that GPU.

* **host-bound**: the suite reports ``<precision>_<action>_device_busy`` (%), the share of the timed
  loop's wall time the device spent on the steps' work (``sb_bench.model.base``). Below
  :data:`BUSY_LIMIT` the host (data loading, copies, launches, synchronisation) set the pace and the
  throughput measures the host, not the GPU: a GPU that lost half its speed would still pass. Such
  a figure is marked, with the reason.
* **% of expected**: measured / NVIDIA's published PyTorch training throughput for the same model,
  GPU and precision (:data:`EXPECTED`, each row with its source, batch and precision). Only where
  the published run matches the suite's: ResNet-50 v1.5 training from NVIDIA's DeepLearningExamples.
  NVIDIA's BERT figures are pretraining (LAMB, phase-1 sequence 128) and its GPT figures are
  Megatron/NeMo multi-node runs in tokens/s: neither measures the suite's BERT classifier or GPT-2
  at its shapes, so they get no expected figure rather than a misleading one.

Pure: figures in, marks out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

BUSY_LIMIT = 90.0  # %: as sb_bench.model.base.BUSY_LIMIT
_BUSY_RE = re.compile(r"^(?P<prec>[a-z0-9_]+?)_(?P<action>train|inference)_device_busy$")

DLE_RESNET = (
    "NVIDIA DeepLearningExamples, PyTorch ResNet50 v1.5 README, training performance, 1 GPU "
    "(pytorch-21.03 NGC container)"
)


@dataclass(frozen=True)
class Expected:
    gpu: str  # the GPU the figure was published for
    pattern: str  # regex on the GPU model name
    model: str  # regex on the benchmark name
    precision: str  # the suite's metric prefix
    action: str
    value: float  # samples/s per GPU
    source: str


# fp32 here is the suite's fp32 on an NVIDIA GPU: TF32 allowed, as NVIDIA's "TF32" column on A100.
EXPECTED: tuple[Expected, ...] = (
    Expected("A100 80GB", r"\bA100\b.*80\s*GB", r"resnet50$", "fp32", "train", 938.0, f"{DLE_RESNET}, DGX A100 80GB, TF32, batch 256"),
    Expected("A100 80GB", r"\bA100\b.*80\s*GB", r"resnet50$", "fp16", "train", 2470.0, f"{DLE_RESNET}, DGX A100 80GB, mixed precision (AMP), batch 256"),
    Expected("V100 32GB", r"\bV100\b.*32\s*GB", r"resnet50$", "fp32", "train", 356.0, f"{DLE_RESNET}, DGX-1 32GB, FP32, the README's DGX-1 batch"),
    Expected("V100 32GB", r"\bV100\b.*32\s*GB", r"resnet50$", "fp16", "train", 1156.0, f"{DLE_RESNET}, DGX-1 32GB, mixed precision (AMP), the README's DGX-1 batch"),
    Expected("V100 16GB", r"\bV100\b", r"resnet50$", "fp32", "train", 367.0, f"{DLE_RESNET}, DGX-1 16GB, FP32, the README's DGX-1 batch"),
    Expected("V100 16GB", r"\bV100\b", r"resnet50$", "fp16", "train", 1200.0, f"{DLE_RESNET}, DGX-1 16GB, mixed precision (AMP), the README's DGX-1 batch"),
)  # fmt: skip


@dataclass(frozen=True)
class HostBound:
    model: str  # the benchmark path, as ModelRow.model
    precision: str
    action: str
    busy: float  # %
    reason: str


def busy_figures(metrics: Iterable[tuple[str, float]]) -> dict[tuple[str, str, str], float]:
    """(model, precision, action) -> device busy % from (metric name without rank, fleet median)."""
    out: dict[tuple[str, str, str], float] = {}
    for name, value in metrics:
        bench, _, leaf = name.rpartition("/")
        m = _BUSY_RE.match(leaf)
        if m and bench:
            out[(bench, m.group("prec"), m.group("action"))] = value
    return out


def host_bound(busy: dict[tuple[str, str, str], float]) -> list[HostBound]:
    """The model figures whose device was busy less than BUSY_LIMIT of the time, with the reason."""
    out = []
    for (model, prec, action), value in sorted(busy.items()):
        if value < BUSY_LIMIT:
            out.append(
                HostBound(
                    model,
                    prec,
                    action,
                    value,
                    f"the device was busy {value:.0f}% of the timed loop's wall time (below {BUSY_LIMIT:.0f}%): "
                    "the host (data loading, host-to-device copies, kernel launches, synchronisation) set the "
                    "pace, so the throughput measures the host, not the device; run with the suite's defaults "
                    "(batch_size 0, data: device) or a larger batch",
                )
            )
    return out


def expected_for(model: str, precision: str, action: str, gpus: Sequence[str]) -> Expected | None:
    """NVIDIA's published figure for this model/precision/action on the fleet's GPU, if one matches
    (every GPU model of the fleet must be the same one)."""
    names = {g for g in gpus if g}
    if len(names) != 1:
        return None
    (gpu,) = names
    leaf = model.rpartition("/")[2]
    for e in EXPECTED:
        if (
            e.precision == precision
            and e.action == action
            and re.search(e.model, leaf)
            and re.search(e.pattern, gpu, re.I)
        ):
            return e
    return None
