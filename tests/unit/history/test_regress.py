"""The pure regression functions: own-history deviations, drift, offenders, flapping, back to healthy."""

from __future__ import annotations

import numpy as np

from sb_fleet.history.regress import (
    OwnBaseline,
    back_to_healthy,
    flapping,
    fleet_drift,
    own_regressions,
    repeat_offenders,
)


def _base(center: float, sigma: float, count: int, shape: tuple[int, int]) -> OwnBaseline:
    return OwnBaseline(
        center=np.full(shape, center), sigma=np.full(shape, sigma), count=np.full(shape, count, dtype=int)
    )


def test_flags_only_the_bad_side_beyond_both_margins() -> None:
    # columns: higher is better, lower is better, unknown
    values = np.array(
        [
            [96.0, 104.0, 96.0],  # 4% worse on every column (the unknown one too)
            [104.0, 96.0, 104.0],  # 4% better: only the unknown direction flags
            [99.0, 101.0, 99.0],  # 1%: many sigmas but under the practical margin
            [np.nan, 100.0, 100.0],
        ]
    )
    r = own_regressions(values, _base(100.0, 0.2, 10, values.shape), [1, -1, 0], 6.0, 0.02, 5)
    assert r.flagged.tolist() == [
        [True, True, True],
        [False, False, True],
        [False, False, False],
        [False, False, False],
    ]
    assert abs(r.deviation[0, 0] + 0.04) < 1e-12


def test_needs_min_runs_and_a_wide_own_spread_hides_a_small_drop() -> None:
    values = np.array([[95.0], [95.0]])
    few = own_regressions(values, _base(100.0, 0.2, 4, values.shape), [1], 6.0, 0.02, 5)
    assert not few.flagged.any()
    noisy = own_regressions(values, _base(100.0, 1.0, 10, values.shape), [1], 6.0, 0.02, 5)
    assert not noisy.flagged.any()  # 5 sigmas only


def test_a_suspiciously_tight_window_is_floored_by_the_fleets_typical_spread() -> None:
    values = np.full((20, 1), 97.5)
    base = _base(100.0, 0.5, 10, values.shape)
    sigma = base.sigma.copy()
    sigma[0, 0] = 1e-6  # ten identical nights
    r = own_regressions(values, OwnBaseline(base.center, sigma, base.count), [1], 6.0, 0.02, 5)
    # floored at the fleet's typical 0.5%: 2.5% is 5 sigmas, not millions
    assert abs(r.sigmas[0, 0] + 5.0) < 1e-9
    assert not r.flagged.any()


def test_fleet_drift_and_since() -> None:
    past = {
        "nccl/busbw": [(f"r{i}", 100.0 + 0.05 * (i % 3)) for i in range(8)] + [("r8", 98.7), ("r9", 98.6)]
    }
    d = fleet_drift({"nccl/busbw": 97.9, "other": 5.0}, past, {"nccl/busbw": 1}, 0.02, 5.0, 5)
    assert len(d) == 1 and d[0].family == "nccl/busbw"
    assert abs(d[0].deviation - (97.9 - 100.05) / 100.05) < 1e-3
    assert d[0].since == "r8"
    assert fleet_drift({"nccl/busbw": 102.5}, past, {"nccl/busbw": 1}, 0.02, 5.0, 5) == []  # better
    assert fleet_drift({"nccl/busbw": 97.9}, {"nccl/busbw": past["nccl/busbw"][:3]}, {}, 0.02, 5.0, 5) == []


def test_repeat_offenders_flapping_and_back_to_healthy() -> None:
    seqs = {
        "steady": ["pass"] * 6,
        "offender": ["pass", "fail", "fail", "pass", "fail", "pass"],
        "flapper": ["fail", "pass", "fail", "pass", "fail", "pass"],
        "repaired": ["pass", "fail", "fail", "fail", "pass"],
        "gone": ["fail", "missing", "missing", "pass"],
    }
    assert repeat_offenders(seqs, 3, 5) == {"offender": 3, "repaired": 3}
    assert repeat_offenders(seqs, 3, 6) == {"offender": 3, "flapper": 3, "repaired": 3}
    assert flapping(seqs, 5, 3) == {"offender": 3, "flapper": 4}
    assert back_to_healthy(seqs) == {"repaired": 3, "offender": 1, "flapper": 1}
    assert "gone" not in back_to_healthy(seqs)  # missing in between: not a repair we saw


def test_fleet_scale_moves_own_references_with_the_fleet() -> None:
    from sb_fleet.history.regress import fleet_scale

    past = {"nccl": [(f"r{i}", 100.0) for i in range(6)], "gemm": [("r0", 50.0)]}
    scale = fleet_scale(["nccl", "nccl", "gemm", "other"], {"nccl": 97.0, "gemm": 40.0}, past, 5)
    assert scale.tolist() == [0.97, 0.97, 1.0, 1.0]  # gemm: too few runs; other: unknown
