"""Issue 47: one stalled lap must never become a timed window's only sample (sb_bench.core.samples), and a
window it dominates is timed again (sb_bench.core.harness.Harness.timed_window), said in the result.

The planted window is node1's: 200 one-step laps of ~4 us (kernel-launch's CPU round trip) and one lap
stalled 21 ms by a preemption. Before, the stall set the sample length, the window gave one sample,
merge_laps returned none, and the result carried the figure 0.109 ms with no spread and no noise.
"""

from __future__ import annotations

import time

import pytest
import torch
from sb_bench.core.benchmark import Case
from sb_bench.core.context import RankContext
from sb_bench.core.harness import Harness, run_benchmark
from sb_bench.core.samples import (
    MAX_RETRIES,
    MAX_SAMPLES,
    MIN_SAMPLES,
    figure_noise,
    merge_laps,
    pace,
    robust_spread,
    stalled_lap,
)
from suite_helpers import assert_metrics

CPU = torch.device("cpu")
FAST = 4e-6  # seconds per CPU launch round trip
STALL = 0.021  # one preemption


def _window(n: int = 200, stall_at: int | None = None, stall: float = STALL) -> list[tuple[float, int]]:
    laps = [(FAST, 1)] * n
    if stall_at is not None:
        laps[stall_at] = (FAST + stall, 1)
    return laps


# -- merge_laps: the samples a window gives ------------------------------------------------------------------------------
@pytest.mark.parametrize("where", [0, 1, 57, 100, 198, 199])
def test_one_huge_lap_among_many_keeps_every_sample_the_steps_allow(where):
    got = merge_laps(_window(stall_at=where))
    steady = merge_laps(_window())
    assert len(steady) == MIN_SAMPLES and all(x == pytest.approx(FAST) for x in steady)
    # As many samples as the unstalled window (one more where the stall splits a sample), one outlying.
    assert MIN_SAMPLES <= len(got) <= MIN_SAMPLES + 1, got
    outliers = [x for x in got if x > 2 * FAST]
    assert len(outliers) == 1 and outliers[0] > 10 * FAST
    assert sum(1 for x in got if x == pytest.approx(FAST)) == len(got) - 1
    # The figure now has samples: its spread and noise exist (the stall is one outlying sample).
    assert robust_spread(got) is not None and figure_noise(got) is not None


def test_the_old_rule_would_have_collapsed_node1s_window():
    # The window's total is 22.8 ms: a total-based sample length (22.8 / 8 = 2.9 ms) swallowed all
    # 199 fast laps into the stalled lap's sample. The pace-based one is 0.1 ms.
    laps = _window(stall_at=57)
    assert pace(laps) == pytest.approx(FAST)
    total = sum(s for s, _ in laps)
    assert total / MIN_SAMPLES > 199 * FAST  # what the old rule needed per sample: more than all fast laps
    assert len(merge_laps(laps)) >= MIN_SAMPLES


def test_all_laps_equal_give_equal_samples():
    assert merge_laps([(0.005, 1)] * 40) == [pytest.approx(0.005)] * 10  # 20 ms samples
    got = merge_laps([(0.01, 2)] * 256)
    assert len(got) == MAX_SAMPLES and all(x == pytest.approx(0.005) for x in got)


def test_two_laps_give_two_samples_and_a_stall_between_them_shows_as_spread():
    assert merge_laps([(0.001, 5), (0.001, 5)]) == [pytest.approx(0.0002)] * 2
    got = merge_laps([(0.001, 5), (0.05, 5)])
    assert got == [pytest.approx(0.0002), pytest.approx(0.01)]
    # With two samples the spread is the range's: a stall is not hidden.
    assert robust_spread(got) > 1 and figure_noise(got) > 0.5
    assert merge_laps([(0.05, 5), (0.001, 5)]) == [pytest.approx(0.01), pytest.approx(0.0002)]


def test_one_lap_or_nothing_gives_no_samples():
    assert merge_laps([(0.03, 10)]) == []
    assert merge_laps([]) == []
    assert merge_laps([(0.0, 1), (0.0, 1)]) == []


def test_a_stall_in_a_full_window_keeps_at_most_max_samples_and_most_of_them():
    laps = [(0.01, 2)] * 256
    laps[100] = (10.0, 2)  # a 10 s stall in a 2.56 s window
    got = merge_laps(laps)
    assert MAX_SAMPLES // 2 <= len(got) <= MAX_SAMPLES
    assert sum(1 for x in got if x > 0.01) == 1


def test_a_window_slow_throughout_is_still_capped():
    # Half its laps at 3x the pace: the pace is the fast half's, the window's total twice its steps'
    # worth at that pace; still at most MAX_SAMPLES samples, all of its steps kept.
    laps = [(0.01, 1), (0.03, 1)] * 128
    got = merge_laps(laps)
    assert len(got) <= MAX_SAMPLES and len(got) >= MAX_SAMPLES // 2
    assert robust_spread(got) is not None


def test_phases_and_a_shorter_stall_still_give_min_samples():
    # A window whose pace changes (a rank given half a core for a while) and one lap of 22% of it: with
    # samples of an eighth of the window, the big laps each took a sample's place and 6 were left.
    laps = [(8e-6, 1)] * 50 + [(18e-6, 1)] * 30 + [(23e-6, 1)] * 38 + [(26e-6, 1)] * 67 + [(9e-6, 1)] * 15
    laps[145] = (1022e-6, 1)
    assert stalled_lap(laps) is None
    got = merge_laps(laps)
    assert MIN_SAMPLES <= len(got) <= MAX_SAMPLES
    assert max(got) == pytest.approx(1022e-6, rel=0.5)  # the big lap is (nearly) a sample of its own


def test_random_windows_never_collapse():
    import random

    rnd = random.Random(47)
    for _ in range(2000):
        laps: list[tuple[float, int]] = []
        while len(laps) < 200:
            rate = rnd.choice([4e-6, 8e-6, 2e-5, 5e-5])
            laps += [(rate * rnd.uniform(0.9, 1.3), 1)] * rnd.randint(1, 120)
        laps = laps[:200]
        for _ in range(rnd.choice([0, 1, 2, 3, 6])):
            i = rnd.randrange(200)
            laps[i] = (laps[i][0] + rnd.choice([1e-4, 1e-3, 3e-3, 3e-2]) * rnd.random(), 1)
        got = merge_laps(laps)
        assert MIN_SAMPLES <= len(got) <= MAX_SAMPLES, laps


def test_steps_are_never_lost():
    laps = _window(stall_at=57) + [(0.0, 0)]
    got = merge_laps(laps)
    # Every sample is seconds per step of whole laps: their weighted sum is the window's time.
    assert len(got) >= MIN_SAMPLES and all(x > 0 for x in got)


# -- stalled_lap: when a window is dominated by one lap ------------------------------------------------------------------
def test_stalled_lap_names_the_lap_that_dominates_its_window():
    s = stalled_lap(_window(stall_at=57))
    assert s is not None and (s.lap, s.laps) == (57, 200)
    assert s.seconds == pytest.approx(STALL) and s.share == pytest.approx(STALL / (STALL + 200 * FAST))
    assert "lap 58 of 200" in s.describe() and "21 ms stall" in s.describe()


def test_no_stall_in_a_steady_or_a_scattered_window():
    assert stalled_lap(_window()) is None
    assert stalled_lap([(0.03, 10)]) is None  # one lap: nothing to compare it with
    assert stalled_lap([]) is None
    # Scatter as measured alone on this machine: the worst lap held 11% of its window.
    laps = _window()
    laps[10] = (FAST + 0.11 * 200 * FAST / 0.89, 1)
    assert stalled_lap(laps) is None
    # Duration mode's doubling chunks at one pace: the last chunk holds half the window, no stall.
    assert stalled_lap([(FAST * 2**i, 2**i) for i in range(12)]) is None
    # A stall worth just under the rest of the window is not "dominating"; just over it is.
    assert stalled_lap(_window(stall=0.99 * 200 * FAST)) is None
    assert stalled_lap(_window(stall_at=3, stall=1.05 * 200 * FAST)) is not None


# -- the harness: a dominated window is timed again, and the result says so -------------------------------------------
class _Planted:
    """A step that busy-waits ``FAST_STEP`` seconds, and sleeps ``stall`` at the planted step numbers."""

    FAST_STEP = 50e-6

    def __init__(self, stall_at: set[int], stall: float = 0.2):
        self.n, self.stall_at, self.stall = 0, stall_at, stall

    def __call__(self) -> None:
        self.n += 1
        if self.n in self.stall_at:
            time.sleep(self.stall)
        end = time.perf_counter() + self.FAST_STEP
        while time.perf_counter() < end:
            pass


def _harness(steps: int = 200) -> Harness:
    return Harness({"num_warmup": 0, "num_steps": steps, "duration": 0.0})


def test_a_window_dominated_by_one_stall_is_timed_again_and_said():
    h = _harness()
    step = _Planted({100})  # in the first window only
    out = h.time_case(RankContext(0, 0, 1, 1, 0, CPU), Case("planted", step, lambda s: {"t": s}))
    # Two windows (more only where a real preemption stalls the next one too, on a loaded machine).
    assert 400 <= step.n <= 200 * (1 + MAX_RETRIES)
    assert out["t"] < 0.2 / 200 / 2  # the kept window's figure, not the stalled one's (1+ ms per step)
    assert len(h.samples["t"]) >= MIN_SAMPLES
    [note] = h.notes
    assert note.startswith(f"planted: re-timed {step.n // 200 - 1}x, one lap (lap 100 of 200) held ")


def test_a_window_stalled_every_time_is_reported_with_its_stall_as_a_sample():
    h = _harness()
    step = _Planted({100 + 200 * k for k in range(10)})
    out = h.time_case(RankContext(0, 0, 1, 1, 0, CPU), Case("planted", step, lambda s: {"t": s}))
    assert step.n == 200 * (1 + MAX_RETRIES)  # bounded
    assert out["t"] > 0.2 / 200  # the stall is in the figure ...
    got = h.samples["t"]
    # The planted stall is one outlying sample (a loaded machine's own preemptions may add others).
    assert (
        len(got) >= MIN_SAMPLES and max(got) > 0.2 / 200 and sum(x < 2 * _Planted.FAST_STEP for x in got) >= 4
    )
    assert robust_spread(got) is not None and figure_noise(got) is not None  # ... and its samples exist
    [note] = h.notes
    assert note.startswith(
        f"planted: a lap stalled in each of {1 + MAX_RETRIES} windows; the last is reported, its stall one "
        "outlying sample (one lap (lap 100 of 200) held "
    )


def test_ranks_that_time_together_are_not_retimed_alone():
    h = _harness()
    step = _Planted({100})
    h.time_case(RankContext(0, 0, 2, 1, 0, CPU), Case("planted", step, lambda s: {"t": s}))
    assert step.n == 200 and h.notes == []  # one window: a collective's ranks must run the same ones
    assert len(h.samples["t"]) >= MIN_SAMPLES  # the stall shows as one of its samples


def test_a_long_window_is_not_retimed(monkeypatch):
    from sb_bench.core import samples

    # The planted window is 10 ms at its pace: past a limit of 5 ms (the real one is 2 s, whose window
    # is dominated only by a stall of seconds: a fault to report, not to re-time into the timeout).
    monkeypatch.setattr(samples, "RETRY_WINDOW_SECONDS", 0.005)
    h = _harness()
    step = _Planted({100})
    h.time_case(RankContext(0, 0, 1, 1, 0, CPU), Case("long", step, lambda s: {"t": s}))
    assert step.n == 200 and h.notes == []
    assert len(h.samples["t"]) >= MIN_SAMPLES


class _StallingCtx(RankContext):
    """A CPU rank whose device synchronisation stalls at the planted calls (kernel-launch's round trip
    calls it once per step)."""

    def __init__(self, stall_at: set[int]):
        super().__init__(0, 0, 1, 1, 0, CPU)
        self.calls, self.stall_at = 0, stall_at

    def sync(self) -> None:
        self.calls += 1
        if self.calls in self.stall_at:
            time.sleep(0.1)


def test_kernel_launch_retimes_node1s_stalled_round_trip_window_and_says_so():
    warm, steps = 10, 200
    ctx = _StallingCtx({warm + 58})  # lap 58 of the first timed torch_launch window
    env = run_benchmark("kernel-launch", {"num_warmup": warm, "num_steps": steps}, ctx)
    assert_metrics(env, {"torch_launch_time": "ms", "back_to_back_time": "ms"})
    windows = (ctx.calls - warm) // steps  # two (more where a real preemption stalls the next one too)
    assert 2 <= windows <= 1 + MAX_RETRIES and ctx.calls == warm + windows * steps
    assert env["result"]["torch_launch_time"][0] < 25 / steps / 2  # not the stalled window's 0.5+ ms
    assert len(env["raw_data"]["torch_launch_time"][0]) >= MIN_SAMPLES
    assert "torch_launch_time" in env["noise"] and "torch_launch_time" in env["spread"]
    assert f"torch_launch: re-timed {windows - 1}x, one lap (lap 58 of 200) held " in env["reason"]


def test_kernel_launch_stalled_in_every_window_still_has_its_samples():
    warm, steps = 10, 200
    ctx = _StallingCtx({warm + 58 + k * steps for k in range(1 + MAX_RETRIES)})
    env = run_benchmark("kernel-launch", {"num_warmup": warm, "num_steps": steps}, ctx)
    assert_metrics(env, {"torch_launch_time": "ms", "back_to_back_time": "ms"})
    assert env["result"]["torch_launch_time"][0] > 25 / steps  # the stall is in the figure
    assert len(env["raw_data"]["torch_launch_time"][0]) >= MIN_SAMPLES  # never [[figure]]
    assert "torch_launch_time" in env["noise"] and "torch_launch_time" in env["spread"]
    assert f"a lap stalled in each of {1 + MAX_RETRIES} windows" in env["reason"]
