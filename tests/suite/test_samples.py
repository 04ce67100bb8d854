"""Timed samples and their spread (sb_bench.core.samples, the harness's laps): how steady a figure was."""

from __future__ import annotations

import statistics
import time

import pytest
from sb_bench.core import registry
from sb_bench.core.benchmark import Benchmark, Case
from sb_bench.core.metric import Metric, Param
from sb_bench.core.samples import MAX_SAMPLES, figure_noise, merge_laps, robust_spread, thin
from suite_helpers import run_bench


def test_merge_laps_makes_samples_of_at_least_the_minimum_time():
    laps = [(0.005, 1)] * 40  # 200 ms in 5 ms laps
    got = merge_laps(laps)
    assert len(got) == 10 and all(x == pytest.approx(0.005) for x in got)  # 20 ms (4 laps) each


def test_merge_laps_caps_the_number_of_samples_and_keeps_every_step():
    laps = [(0.01, 2)] * 256  # 2.56 s
    got = merge_laps(laps)
    assert len(got) == MAX_SAMPLES
    assert sum(got) * 16 == pytest.approx(2.56)  # each sample holds 8 laps = 16 steps


def test_a_short_window_is_cut_in_eight_and_a_single_lap_gives_none():
    got = merge_laps([(0.0001, 1)] * 100)  # 10 ms: about eight samples of 1.25 ms (whole laps)
    assert 7 <= len(got) <= 8 and all(x == pytest.approx(0.0001) for x in got)
    assert merge_laps([(0.03, 10)]) == []  # one lap: no scatter to see
    assert merge_laps([]) == []


def test_the_noise_of_the_figure_is_the_robust_standard_error_of_its_samples():
    steady = [1.0, 1.01, 0.99, 1.0, 1.02, 0.98, 1.0, 1.0]
    assert robust_spread(steady) < 0.03 and figure_noise(steady) < 0.01
    # One preempted sample: the robust centre ignores it (the confirmation run judges the burst).
    wild = [*steady[:-1], 7.0]
    assert robust_spread(wild) < 0.03 and figure_noise(wild) < 0.01
    # Scattering widely in every window (a host throttled behind a busy process): known to ~6%.
    throttled = [1.0, 1.3, 0.8, 1.5, 1.1, 0.9, 1.4, 0.7] * 4
    assert robust_spread(throttled) > 0.2 and figure_noise(throttled) < 0.07  # 35% / sqrt(32)
    # Steady at the sample's scale, 16 samples scattering 10%: the figure is known to about 2.5%.
    scatter = [0.9, 1.1] * 8
    assert robust_spread(scatter) == pytest.approx(0.148, abs=0.001)
    assert figure_noise(scatter) == pytest.approx(0.148 / 4, abs=0.001)
    bimodal = [1.0, 2.0] * 8
    assert robust_spread(bimodal) > 0.4
    assert robust_spread([1.0]) is None and robust_spread([0.0, 0.0, 0.0, 0.0]) is None
    assert robust_spread([10.0, 12.0]) == pytest.approx(2 / 11 / 1.128)
    assert robust_spread([10.0, 10.0, 16.0]) == pytest.approx(6 / 12 / 1.693)


def test_thin_keeps_the_quantiles():
    xs = list(range(100))
    got = thin(xs, 5)
    assert got[0] == 0 and got[-1] == 99 and len(got) == 5


class _Sleeper(Benchmark):
    """A timed case whose steps sleep; ``pattern`` 'steady' or 'bursts' (every other 200 ms at half rate).

    Steps of 10 ms: a loaded machine (CI runs the suite beside the other lane) wakes a sleeper a few ms
    late at random; against 2 ms steps that alone made a steady host look bursty."""

    name = "test-sleeper"
    params = {"pattern": Param("str", "steady", "steady or bursts")}

    def metrics(self):
        return [Metric("rate", "1/s", True, None)]

    def cases(self, ctx):
        t0 = time.monotonic()

        def step():
            # bursts: every other 200 ms of wall time, the host does half the work
            slow = self.args["pattern"] == "bursts" and int((time.monotonic() - t0) / 0.2) % 2 == 1
            time.sleep(0.02 if slow else 0.01)

        return [Case("sleep", step, lambda sec: {"rate": 1.0 / sec})]


registry.register(_Sleeper)


def test_the_harness_keeps_samples_in_raw_data_and_the_spread_tells_steady_from_bursty():
    env = run_bench("test-sleeper", pattern="steady", num_warmup=0, num_steps=120, run_count=2, device="cpu")
    runs = env["raw_data"]["rate"]
    assert len(runs) == 2 and all(2 <= len(r) <= MAX_SAMPLES for r in runs)
    # The figure is the whole window's rate; its samples scatter around it.
    assert statistics.median(runs[0]) == pytest.approx(env["result"]["rate"][0], rel=0.3)
    steady = env["spread"]["rate"]
    bursty = run_bench("test-sleeper", pattern="bursts", num_warmup=0, num_steps=120, device="cpu")
    assert bursty["spread"]["rate"] > 0.15  # half its samples are at half the rate
    assert bursty["spread"]["rate"] > 2 * steady
    assert 0 < env["noise"]["rate"] <= steady  # the figure of many steady samples is known better
