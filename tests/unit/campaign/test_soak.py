"""Soak judgement across rounds (sb_fleet/analysis/soak.py) with planted faults, on real round-to-round noise.

The realistic-noise tests take their noise from tests/corpus: 20 consecutive real `sb-fleet validate` runs
of each no-fault case (3 to 8 loopback hosts, 2026-11-27), each host's gemm-flops/fp32_flops over the runs.
Each host's series is a real round-to-round shape: its heavy tails, a slowdown every host shared at run 16
(other work on the machine), its autocorrelation. Scaled to the 0.5-2% per-round noise of a GPU figure (the
shape's median absolute deviation set to it), with or without a planted 1%-per-round slowdown. The
detector's own model (Gaussian residuals) generated none of it.
"""

from __future__ import annotations

import json
import math
import statistics
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from sb_fleet.analysis.soak import Measurement, SoakCriteria, SoakRound, judge_node, judge_soak
from sb_fleet.config.campaign_spec import load_campaign

ROOT = Path(__file__).resolve().parents[3]
CORPUS = ROOT / "tests" / "corpus"
T0 = datetime(2026, 11, 29, 8, 0, tzinfo=timezone.utc)
GEMM = "gemm-flops/fp32_flops"
CRIT = SoakCriteria(drift_k=3.0, drift_min_change=0.03, drift_min_rounds=6)


def _round(
    i: int, metrics=None, counters=None, ok=True, reason="", throttled=0, start_counters=None, hours=1.0
):
    start = T0 + timedelta(hours=hours * (i - 1))
    return SoakRound(
        index=i,
        start=start,
        end=start + timedelta(hours=hours * 0.9),
        ok=ok,
        reason=reason,
        metrics=metrics or {},
        counters=counters or {},
        counters_start=start_counters,
        throttled_windows=throttled,
    )


def _real_series() -> list[tuple[str, list[float]]]:
    """Every host's gemm-flops/fp32_flops over the 20 runs of each 20-run corpus case, in run order."""
    out = []
    for case in sorted(CORPUS.iterdir()):
        runs = sorted(p for p in case.glob("r*") if p.is_dir())
        if len(runs) < 20:
            continue
        by_host: dict[str, list[float]] = {}
        for run in runs:
            for line in (run / "results-summary.jsonl").read_text().splitlines():
                row = json.loads(line)
                if isinstance(row.get(GEMM), (int, float)):
                    by_host.setdefault(row["node"], []).append(float(row[GEMM]))
        out += [(f"{case.name}/{h}", v) for h, v in sorted(by_host.items()) if len(v) == len(runs)]
    return out


REAL = _real_series()


def _shape(values: list[float]) -> list[float]:
    """The series as log-deviations from its median in units of its robust spread (MAD x 1.4826)."""
    med = statistics.median(values)
    y = [math.log(v / med) for v in values]
    mad = statistics.median(abs(a) for a in y) * 1.4826
    return [a / mad for a in y]


def _soak(shape: list[float], sigma: float, loss_per_round: float) -> list[SoakRound]:
    return [
        _round(i + 1, {GEMM: 40000.0 * math.exp(sigma * z) * (1 - loss_per_round) ** i})
        for i, z in enumerate(shape)
    ]


def test_the_corpus_is_there():
    assert len(REAL) >= 20, "tests/corpus's 20-run cases are the real noise these tests use"


# -- counters


def test_a_counter_that_grows_in_round_7_of_10_fails_with_its_values_and_time():
    rounds = [
        _round(i, {GEMM: 40000.0}, {"gpu.xid": 0 if i < 7 else 1, "ib.symbol_error[mlx5_0/1]": 12})
        for i in range(1, 11)
    ]
    r = judge_node("gpu07", rounds, CRIT)
    assert not r.passed
    (f,) = r.failures
    assert (f.kind, f.subject, f.rounds) == ("counter_growth", "gpu.xid", (7,))
    assert f.values["first"] == 0 and f.values["last"] == 1 and f.values["growth"] == 1
    assert f.values["steps"][0]["between"] == ["2026-11-29T13:54:00+00:00", "2026-11-29T14:54:00+00:00"]
    assert "gpu.xid grew by 1" in f.message and "round 7: 0 -> 1" in f.message
    # the symbol-error counter stood still at 12 (a value from before the soak is no growth)
    assert not any(x.subject.startswith("ib.") for x in r.findings)


def test_growth_within_a_round_counts_where_the_start_was_read_and_between_rounds_too():
    rounds = [_round(1, counters={"nvlink.replay": 5}, start_counters={"nvlink.replay": 3})]
    rounds += [_round(2, counters={"nvlink.replay": 9}, start_counters={"nvlink.replay": 8})]
    (f,) = judge_node("n", rounds, CRIT).failures
    assert f.values["growth"] == 6 and f.rounds == (1, 2)


def test_the_growth_allowed_and_the_counters_watched():
    rounds = [_round(i, counters={"gpu.ecc_corrected": i, "gpu.xid": 0}) for i in range(1, 6)]
    assert judge_node("n", rounds, SoakCriteria(counters=("gpu.xid",))).passed  # corrected ECC not watched
    assert not judge_node("n", rounds, SoakCriteria(counters=None)).passed
    assert judge_node("n", rounds, SoakCriteria(counters=None, counter_max_growth=4)).passed


def test_a_counter_that_goes_down_is_reported_not_failed():
    rounds = [_round(i, counters={"ib.link_downed": v}) for i, v in enumerate([4, 4, 0, 0], start=1)]
    r = judge_node("n", rounds, CRIT)
    assert r.passed
    (f,) = r.findings
    assert (f.kind, f.fails, f.rounds) == ("counter_reset", False, (3,))


# -- rounds


def test_one_failed_round_in_five_is_an_intermittent_node():
    rounds = [
        _round(i, {GEMM: 40000.0}, ok=i != 3, reason="" if i != 3 else "gemm-flops: return code 3")
        for i in range(1, 6)
    ]
    r = judge_node("flaky1", rounds, CRIT)
    assert not r.passed and r.failed_rounds == (3,)
    (f,) = r.failures
    assert f.kind == "failed_rounds" and f.rounds == (3,)
    assert f.message == "failed 1 of 5 rounds: round 3 (round 3: gemm-flops: return code 3)"
    assert f.values == {"failed": 1, "rounds": 5, "reasons": {"3": "gemm-flops: return code 3"}}
    assert judge_node("flaky1", rounds, SoakCriteria(max_failed_rounds=1)).passed


def test_missing_rounds_and_no_rounds_fail():
    rounds = [_round(i, {GEMM: 1.0}) for i in (1, 2, 4)]
    (f,) = judge_node("n", rounds, SoakCriteria(expected_rounds=5)).failures
    assert f.kind == "missing_rounds" and f.rounds == (3, 5)
    (g,) = judge_node("n", [], CRIT).failures
    assert g.kind == "no_rounds"


def test_throttled_windows():
    rounds = [_round(i, throttled=2 if i == 4 else 0) for i in range(1, 6)]
    (f,) = judge_node("n", rounds, CRIT).failures
    assert f.kind == "throttled" and f.rounds == (4,) and f.values["total"] == 2
    assert judge_node("n", rounds, SoakCriteria(max_throttled_windows=2)).passed


# -- drift


def test_a_steady_slowdown_of_1_percent_per_round_fails_over_real_noise_of_half_a_percent_and_one():
    for sigma, needed in ((0.005, 20), (0.01, 20)):
        caught = [
            name for name, v in REAL if not judge_node("n", _soak(_shape(v[:10]), sigma, 0.01), CRIT).passed
        ]
        assert len(caught) >= needed, (sigma, len(caught), len(REAL))


def test_at_2_percent_noise_ten_rounds_may_not_tell_but_twenty_do():
    caught20 = [n for n, v in REAL if not judge_node("n", _soak(_shape(v), 0.02, 0.01), CRIT).passed]
    assert len(caught20) == len(REAL)
    r = judge_node("n", _soak(_shape(REAL[0][1]), 0.02, 0.01), CRIT)
    (f,) = r.failures
    assert f.kind == "drift" and f.subject == GEMM and f.values["change"] < -0.12
    assert f.rounds == tuple(range(1, 21))
    # a loss against a limit that is a loss too: the message reads as the comparison it is
    assert f.values["change"] < f.values["threshold"] < 0
    assert f"beyond {f.values['threshold']:+.1%}" in f.message


def test_the_limit_is_on_the_side_that_is_worse():
    lat = "kernel-launch/event_time:0"
    up = judge_node("n", [_round(i + 1, {lat: 0.006 * 1.03**i}) for i in range(12)], CRIT)
    (t,) = up.trends
    assert t.fails and t.change > t.threshold > 0  # lower is better: a rise past a rise
    down = judge_node("n", [_round(i + 1, {GEMM: 100 * 0.97**i}) for i in range(12)], CRIT)
    (t,) = down.trends
    assert t.fails and t.change < t.threshold < 0  # higher is better: a loss past a loss


@pytest.mark.parametrize("sigma", [0.005, 0.01, 0.02])
def test_healthy_noisy_nodes_pass_on_real_shapes(sigma):
    for rounds in (10, 20):
        failed = [
            n for n, v in REAL if not judge_node("n", _soak(_shape(v[:rounds]), sigma, 0.0), CRIT).passed
        ]
        assert failed == []


def test_the_real_series_as_recorded_pass():
    """The raw gemm-flops series of every host, 5-10% round-to-round noise and a dip every host shared."""
    for name, v in REAL:
        r = judge_node(name, [_round(i + 1, {GEMM: x}) for i, x in enumerate(v)], CRIT)
        assert r.passed, (name, [f.message for f in r.failures])
        (t,) = r.trends
        assert t.noise > 0.02 and t.noise_source in (
            "residuals",
            "within segments",
            "within segments, one round left out",
        )


def test_direction_lower_is_better_and_an_improvement_is_no_failure():
    lat = "kernel-launch/event_time:0"
    up = [_round(i + 1, {lat: 0.006 * 1.01**i}) for i in range(12)]
    down = [_round(i + 1, {lat: 0.006 * 0.99**i}) for i in range(12)]
    assert not judge_node("n", up, CRIT).passed
    assert judge_node("n", down, CRIT).passed
    # the direction is an input: declared higher-is-better, the rising series is an improvement
    assert judge_node("n", up, CRIT, direction=lambda m: 1).passed
    # unknown (0): a change either way counts
    assert not judge_node("n", down, CRIT, direction=lambda m: 0).passed


def test_own_noise_larger_than_the_residuals_is_used():
    quiet = [_round(i + 1, {GEMM: Measurement(40000 * 0.99**i, noise=0.001)}) for i in range(10)]
    noisy = [_round(i + 1, {GEMM: Measurement(40000 * 0.99**i, noise=0.08)}) for i in range(10)]
    assert not judge_node("n", quiet, CRIT).passed
    r = judge_node("n", noisy, CRIT)
    assert r.passed and r.trends[0].noise_source == "own samples" and r.trends[0].noise == 0.08


def test_too_few_rounds_are_not_judged_and_failed_rounds_carry_no_figure():
    five = [_round(i + 1, {GEMM: 40000 * 0.9**i}) for i in range(5)]
    r = judge_node("n", five, CRIT)
    assert r.passed and r.trends == () and "drift needs 6" in r.not_judged[GEMM]
    # a failed round's figure is not part of the trend
    rounds = [_round(i + 1, {GEMM: 40000.0 if i != 5 else 1.0}, ok=i != 5) for i in range(10)]
    r = judge_node("n", rounds, SoakCriteria(max_failed_rounds=1))
    assert r.passed and r.trends[0].rounds == (1, 2, 3, 4, 5, 7, 8, 9, 10)


def test_a_small_change_within_min_change_passes_however_significant():
    rounds = [_round(i + 1, {GEMM: 40000 * (1 - 0.002 * i)}) for i in range(10)]  # -1.8%, no noise at all
    r = judge_node("n", rounds, CRIT)
    assert r.passed and -0.02 < r.trends[0].change < -0.015
    assert not judge_node("n", rounds, SoakCriteria(drift_min_change=0.01)).passed


def test_criteria_from_the_campaign_file_and_every_node_judged():
    stage = load_campaign(ROOT / "campaigns" / "cpu-test.yaml").spec.stages[-1]
    crit = SoakCriteria.from_stage(stage)
    assert crit.expected_rounds == 10 and crit.drift_metrics == (
        "gemm-flops/fp32_flops",
        "gemm-flops/fp64_flops",
    )
    assert crit.counters is not None and "gpu.xid" in crit.counters
    good = [_round(i, {GEMM: 40.0, "kernel-launch/event_time": 0.006 * 1.5**i}) for i in range(1, 11)]
    bad = [_round(i, {GEMM: 40.0}, {"gpu.xid": i // 10}) for i in range(1, 11)]
    out = judge_soak({"a": good, "b": bad}, crit)
    assert out["a"].passed  # kernel-launch is not among the judged metrics
    assert not out["b"].passed and out["b"].failures[0].rounds == (10,)
    json.dumps(out["b"].to_dict())


# -- steps (issue 55): a line through a step takes the step for noise


def _windows(length: int) -> list[tuple[str, list[float]]]:
    """Every ``length``-round window of every real series (tests/corpus), each its own soak."""
    return [(f"{n}@{s}", v[s : s + length]) for n, v in REAL for s in range(len(v) - length + 1)]


def _planted(shape: list[float], sigma: float, fault: str) -> list[SoakRound]:
    """A real series' shape at ``sigma`` per round, with a step to half speed from the middle round
    (round 5 of 8) or a slope of -4% a round: the issue's two faults, their sizes not tuned to the rule."""
    out = []
    for i, z in enumerate(shape):
        factor = (
            (0.5 if i >= len(shape) // 2 else 1.0)
            if fault == "step"
            else 0.96**i
            if fault == "slope"
            else 1.0
        )
        out.append(_round(i + 1, {GEMM: 40000.0 * math.exp(sigma * z) * factor}))
    return out


def test_the_issues_step_is_reported_as_a_step_with_the_round_it_began():
    """The node of the issue: 71-128 GFLOPS for three rounds, then 17-19 (within 6% of each other) from
    round 4 of 8. A line through it takes the step for ~50% noise; the step, its noise taken within the two
    segments, is the change the series bears out, and says where it began."""
    from sb_fleet.analysis.change_point import trend_change

    values = [96.0, 128.0, 71.0, 18.1, 19.0, 17.2, 18.4, 17.9]
    rounds = [_round(i + 1, {GEMM: v}) for i, v in enumerate(values)]
    med = statistics.median(values)
    line = trend_change([float(i) for i in range(8)], [math.log(v / med) for v in values], 0.0, 3.0)
    assert line.noise > 0.4  # what the rule before this one judged the node against
    r = judge_node("slow", rounds, CRIT)
    (f,) = r.failures
    assert f.kind == "drift" and f.values["model"] == "step" and f.values["since_round"] == 4
    assert f.rounds == (4, 5, 6, 7, 8) and f.values["change"] < -0.75
    assert f.values["noise"] < 0.25 and f.values["noise_source"] == "within segments"
    assert f.message.startswith(f"{GEMM} drifted -") and "a step from round 4" in f.message


@pytest.mark.parametrize("sigma", [0.005, 0.01, 0.02])
def test_a_step_to_half_speed_and_a_slope_of_4_percent_a_round_over_8_rounds_on_real_shapes(sigma):
    """Every 8-round window of the real series (351), scaled to a GPU figure's noise: the step to half
    speed at round 5 fails every time; the -4% a round in at least 97% of them (bench/soak_drift.py: 351,
    349 and 341 of 351 at 0.5%, 1%, 2%; windows with a single round 20 of their MADs low keep the rest);
    the same windows unfaulted pass but for one at 0.5-1% (a window ending in the two runs every host of the
    6-host case was slow in, runs 16-17, as measured: accept judges relative to the fleet's median) and three
    at 2% with a 3% min_change (0.9%; two of them steps of -4% between real regimes of one host)."""
    windows = _windows(8)
    assert len(windows) == 351
    caught = {}
    for fault in ("step", "slope"):
        caught[fault] = sum(
            not judge_node("n", _planted(_shape(v), sigma, fault), CRIT).passed for _n, v in windows
        )
    assert caught["step"] == len(windows) and caught["slope"] >= 0.97 * len(windows), (sigma, caught)
    failed = [n for n, v in windows if not judge_node("n", _planted(_shape(v), sigma, "none"), CRIT).passed]
    assert len(failed) <= (1 if sigma < 0.02 else 3), (sigma, failed)
    r = judge_node("n", _planted(_shape(windows[0][1]), sigma, "step"), CRIT)
    (f,) = r.failures
    assert f.values["model"] == "step" and f.values["since_round"] == 5 and f.rounds == (5, 6, 7, 8)


def test_the_step_critical_value_is_honest_for_few_rounds():
    """A step, the best of n - 3 splits, must be as improbable as k = 3 normal sigmas (one-sided 0.13%):
    Student's t for n - 2 degrees of freedom, corrected for the splits (8 rounds: 6.69 for the best of 5
    splits; the exact scan, simulated: 6.78). A trend keeps k."""
    from sb_fleet.analysis.change_point import critical_t, t_isf, t_sf

    assert abs(2 * t_sf(2.447, 6) - 0.05) < 1e-4 and abs(t_isf(0.025, 6) - 2.4469) < 1e-3
    assert abs(t_sf(1.0, 1) - 0.25) < 1e-12  # Cauchy
    assert critical_t(3, 8, "trend") == 3.0 and abs(critical_t(3, 8, "step") - 6.69) < 0.01
    assert abs(critical_t(3, 20, "step") - 4.75) < 0.01 and 4.5 < critical_t(3, 4320, "step") < 5.1


def test_a_step_with_one_round_far_off_inside_it_is_still_a_step():
    """bench/soak_faults.py's one miss of ten (2026-12-07): half speed from round 5 of 8, one of those rounds
    at a quarter. That round alone put the within-segment noise at ~20% and neither model saw the step; with
    each round left out in turn (the critical t counting every one: 11.6 at 8 rounds, not 6.7) the step
    stands out. One round far off among steady ones is no step: it is a failed round's business."""
    from sb_fleet.analysis.change_point import critical_t, step_change

    values = [100.0, 104.0, 97.0, 101.0, 50.0, 25.0, 52.0, 48.0]
    med = statistics.median(values)
    ys = [math.log(v / med) for v in values]
    plain = step_change(ys, 0.0, 3.0, 1)
    assert plain is not None and abs(plain.change / plain.stderr) < plain.critical  # the miss
    r = judge_node("slow", [_round(i + 1, {GEMM: v}) for i, v in enumerate(values)], CRIT)
    (f,) = r.failures
    assert f.values["model"] == "step" and f.values["since_round"] == 5, f.values
    assert f.values["noise_source"] == "within segments, one round left out"
    assert "within the two segments, one round left out" in f.message
    assert critical_t(3.0, 8, "step-1") > 11 > critical_t(3.0, 8, "step") > 6.5
    one_off = [100.0, 104.0, 97.0, 101.0, 99.0, 60.0, 98.0, 100.0]
    assert judge_node("dip", [_round(i + 1, {GEMM: v}) for i, v in enumerate(one_off)], CRIT).passed
