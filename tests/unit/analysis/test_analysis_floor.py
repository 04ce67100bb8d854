"""The practical floor of the combined sibling check follows the measured noise of the metrics it combines."""

from __future__ import annotations

import numpy as np

from sb_fleet.analysis.detect import detect, noise_floor
from sb_fleet.analysis.superbench.metric_names import Directions
from sb_fleet.config.gatespec import DetectionSettings

TC = ("fp64_tc_flops", "tf32_tc_flops", "bf16_tc_flops", "fp16_tc_flops", "int8_tc_iops", "int4_tc_iops")


def tight_fleet(seed: int, n: int = 300, noise: float = 0.003) -> tuple[list[str], np.ndarray]:
    rng = np.random.default_rng(seed)
    cols, blocks = [], []
    for m in TC:
        host = rng.normal(0, noise * 0.5, size=(n, 1))
        gpu = rng.normal(0, noise * 0.866, size=(n, 8))
        blocks.append(100.0 * (1 + host + gpu))
        cols += [f"gemm-flops/{m}:{g}" for g in range(8)]
    return cols, np.hstack(blocks)


def test_floor_between_min_floor_and_the_configured_one() -> None:
    s = DetectionSettings()
    assert noise_floor(0.001, 0.025, s) == s.min_floor  # tight: never below 1%
    assert noise_floor(0.007, 0.02, s) == 0.014  # 2 sigmas
    assert noise_floor(0.02, 0.02, s) == 0.02  # noisy: the configured floor
    assert noise_floor(0.007, 0.02, DetectionSettings(floor_sigmas=0)) == 0.02


def test_gpu_a_few_percent_low_on_every_tensor_core_gemm_of_a_tight_family() -> None:
    cols, vals = tight_fleet(5)
    for m in range(len(TC)):
        vals[17, m * 8 + 3] *= 0.982  # GPU 3 of host 17: every tensor-core GEMM 1.8% low (~7 sigmas)
    new = detect(cols, vals, Directions())
    old = detect(cols, vals, Directions(), DetectionSettings(floor_sigmas=0))
    assert sorted(new.issues) == [17]
    assert {i.check for i in new.issues[17]} == {"sibling-combined"}
    assert 17 not in old.issues  # under the fixed 2.5% / 2% floors it passed


def test_tight_healthy_fleet_stays_clean() -> None:
    for seed in (1, 2, 3):
        cols, vals = tight_fleet(seed)
        assert detect(cols, vals, Directions()).issues == {}
