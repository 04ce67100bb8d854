"""Model figures: host-bound marks from device busy, and % of NVIDIA's published throughput."""

from __future__ import annotations

import numpy as np
import pytest

from sb_fleet.analysis.figures.figures import build_figures
from sb_fleet.analysis.figures.model_checks import BUSY_LIMIT, EXPECTED, expected_for, host_bound
from sb_fleet.analysis.figures.peaks import host_peaks
from sb_fleet.analysis.superbench.metric_names import Directions
from sb_fleet.report.writers.figures_md import render

A100 = {"gpu_model": "NVIDIA A100-SXM4-80GB"}
R50 = "resnet_models/pytorch-resnet50"


def _figs(cols: dict[str, float], facts: dict | None = A100):
    names = list(cols)
    peaks = {"h0": host_peaks(facts)} if facts else None
    return build_figures(["h0"], names, np.array([list(cols.values())]), Directions(), peaks)


def test_a_host_bound_figure_is_marked_with_the_reason_and_the_rest_is_not() -> None:
    figs = _figs(
        {
            f"{R50}/fp16_train_throughput:0": 1100.0,
            f"{R50}/fp16_train_step_time:0": 232.0,
            f"{R50}/fp16_train_device_busy:0": 41.0,
            f"{R50}/fp32_train_throughput:0": 900.0,
            f"{R50}/fp32_train_device_busy:0": 97.0,
        }
    )
    rows = {r.precision: r for r in figs.models}
    assert (
        "busy 41%" in rows["fp16"].host_bound["train"]
        and "measures the host" in rows["fp16"].host_bound["train"]
    )
    assert rows["fp32"].host_bound == {} and rows["fp32"].busy == {"train": 97.0}
    text = render(figs)
    assert "| fp16 **host-bound** |" in text and "| fp32 |" in text
    assert "pytorch-resnet50` fp16 train: host-bound: the device was busy 41%" in text
    assert "TF32 allowed" in text and "force_fp32" in text


def test_percent_of_nvidias_published_figure_where_the_gpu_and_precision_match() -> None:
    figs = _figs({f"{R50}/fp16_train_throughput:0": 2223.0, f"{R50}/fp16_train_device_busy:0": 99.0})
    (row,) = figs.models
    value, source = row.expected["train_throughput"]
    assert value == 2470.0 and "DeepLearningExamples" in source and "batch 256" in source
    text = render(figs)
    assert "train 90.0% of 2470" in text  # 2223 / 2470, by hand
    # No published figure for another GPU, another model, or a mixed fleet.
    assert expected_for(R50, "fp16", "train", ["NVIDIA H100 80GB HBM3"]) is None
    assert expected_for("bert_models/pytorch-bert-large", "fp16", "train", ["NVIDIA A100-SXM4-80GB"]) is None
    assert expected_for(R50, "fp16", "train", ["NVIDIA A100-SXM4-80GB", "Tesla V100-SXM2-16GB"]) is None
    assert expected_for(R50, "fp32", "train", ["Tesla V100-SXM2-32GB"]).value == 356.0  # type: ignore[union-attr]
    assert "pytorch-resnet101" not in {e.model for e in EXPECTED}


@pytest.mark.parametrize(
    "busy, marked", [(BUSY_LIMIT - 0.1, True), (BUSY_LIMIT, False), (float("nan"), False)]
)
def test_the_busy_limit(busy: float, marked: bool) -> None:
    assert bool(host_bound({("m/pytorch-x", "fp32", "train"): busy})) is marked
