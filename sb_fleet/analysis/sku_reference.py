"""Reference figures per SKU: a whole fleet far below what its GPU model does is a finding.

A fleet judged only against itself passes when every host is equally slow (a bad firmware
image on all of them, a power cap, the wrong clocks). Where the run knows the GPU model
(``facts/<host>.json``), each host's values are also judged against what that model does:

* **measured figures** (:data:`MEASURED`): SuperBench's Azure NDv4 quick-scan golden dataset
  (A100 SXM4 40GB, 1,939 nodes, SuperBench v0.4; ``/work/shared/reference/superbench-ndv4-quickscan``,
  ``baseline.json``). A value worse than the figure by more than ``max_shortfall`` (20%:
  twice the 10% SuperBench's own rules for that dataset allow) is flagged.
* **nominal peaks** (:mod:`sb_fleet.analysis.figures.peaks`: the suite's GEMM datasheet table per
  precision, and the device-memory bandwidth per GPU model): a tensor-core GEMM or a device-to-device
  copy below ``min_of_peak`` (50%) of the nominal peak is flagged. Healthy GPUs reach 75-95% of
  their dense tensor-core peak and 80-90% of their memory bandwidth (the NDv4 figures above: 82-97%
  and 83% of the A100's datasheet), so half the peak is far below any healthy GPU.

The check is ``sku``; its issues name the figure and its source.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from sb_fleet.analysis.figures.peaks import Peak, default_unit, host_peaks, peak_for_metric
from sb_fleet.analysis.issues import FAIL, Issue
from sb_fleet.analysis.noise_priors import noise_prior
from sb_fleet.analysis.superbench.metric_names import Directions, parse_metric

NDV4 = "SuperBench NDv4 quick-scan golden dataset (A100 SXM4 40GB, 1,939 nodes, v0.4)"


@dataclass(frozen=True)
class SkuFigure:
    sku: str  # regex searched in the facts' gpu_model
    metric: str  # metric name without :rank and with device indexes as in SuperBench
    value: float
    source: str


MEASURED: tuple[SkuFigure, ...] = tuple(
    SkuFigure(r"A100.*SXM4.*40\s*GB|A100-SXM4-40GB", m, v, NDV4)
    for m, v in (
        ("gemm-flops/bf16_tc_flops", 265900.55),
        ("gemm-flops/fp16_flops", 33858.0635),
        ("gemm-flops/fp16_tc_flops", 280435.1458),
        ("gemm-flops/fp32_flops", 18353.002),
        ("gemm-flops/fp64_flops", 9030.9323),
        ("gemm-flops/fp64_tc_flops", 18947.2453),
        ("gemm-flops/int4_tc_iops", 975854.4755),
        ("gemm-flops/int8_tc_iops", 473072.78125),
        ("gemm-flops/tf32_tc_flops", 128225.0141),
        ("ib-loopback/ib_write_8388608_ib#_bw", 23.68471956),
        ("kernel-launch/event_time", 0.0057),
        ("kernel-launch/wall_time", 0.0096),
        ("mem-bw/d2h_bw", 26.0322),
        ("mem-bw/h2d_bw", 25.9247),
        ("nccl-bw/allreduce_8589934592_algbw", 134.3119),
        ("nccl-bw/allreduce_8589934592_busbw", 235.0457),
        ("nccl-bw/allreduce_8589934592_time", 65263.0237),
        ("gpt_models/pytorch-gpt2-large/fp32_train_throughput", 27.2),
        ("gpt_models/pytorch-gpt2-large/fp16_train_throughput", 41.8),
    )
)
MAX_SHORTFALL = 0.20
MIN_OF_PEAK = 0.50
_PEAK_METRICS = re.compile(r"^gemm-flops/[a-z0-9]+_tc_(flops|iops)$|^mem-bw/d2d_bw$")


@dataclass(frozen=True)
class Reference:
    value: float
    allowed: float  # the relative shortfall allowed
    source: str


def reference_for(model: str, metric: str, directions: Directions) -> Reference | None:
    """The SKU reference of one metric (name with or without :rank) on one GPU model, or None."""
    pm = parse_metric(metric)
    for f in MEASURED:
        if f.metric == pm.family and re.search(f.sku, model, re.IGNORECASE):
            return Reference(f.value, MAX_SHORTFALL, f.source)
    if not _PEAK_METRICS.match(pm.base):
        return None
    peak: Peak | None = peak_for_metric(pm.base, host_peaks({"gpu_model": model}))
    if peak is None:
        return None
    unit = directions.unit(metric) or default_unit(pm.base, peak)
    value = peak.in_unit(unit)
    if not value:
        return None
    return Reference(value, 1 - MIN_OF_PEAK, f"nominal peak: {peak.source}")


def check_sku(
    columns: list[str], values: np.ndarray, directions: Directions, gpu_models: list[str | None]
) -> dict[int, list[Issue]]:
    """Every host whose value is far worse than its GPU model's reference."""
    issues: dict[int, list[Issue]] = {}
    by_model: dict[str, list[int]] = {}
    for r, m in enumerate(gpu_models):
        if m:
            by_model.setdefault(m, []).append(r)
    for model, rows in by_model.items():
        idx = np.asarray(rows, dtype=np.int64)
        for c, name in enumerate(columns):
            ref = reference_for(model, name, directions)
            direction = directions.of(name)
            if ref is None or direction == 0 or ref.value == 0:
                continue
            col = values[idx, c]
            with np.errstate(invalid="ignore"):
                dev = (col - ref.value) / abs(ref.value)
                bad = -dev if direction > 0 else dev
                hit = bad > ref.allowed
            sigma = noise_prior(name).sigma
            for k in np.nonzero(hit)[0]:
                r = int(idx[k])
                issues.setdefault(r, []).append(
                    Issue(
                        metric=name,
                        value=float(col[k]),
                        reference=ref.value,
                        deviation=float(dev[k]),
                        check="sku",
                        category="SKU",
                        severity=FAIL,
                        sigmas=float(bad[k] / sigma),
                        detail=(
                            f"{dev[k] * 100:+.1f}% from the {model} reference {ref.value:.4g} "
                            f"(allowed {ref.allowed * 100:.0f}%; {ref.source})"
                        ),
                    )
                )
    return issues
