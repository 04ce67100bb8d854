"""mem-bw and gpu-copy-bw on a CPU host."""

from __future__ import annotations

import pytest
from sb_bench.micro.gpu_copy_bw import aggregate, pair_metric
from suite_helpers import assert_metrics, run_bench


def test_mem_bw_cpu_measures_d2d_and_skips_host_link_with_reason():
    env = run_bench("mem-bw", size="8M", num_warmup=1, num_steps=5)
    assert_metrics(env, {"d2d_bw": "GB/s"})
    assert "skipped h2d_bw, d2h_bw: no host-device link on a CPU" in env["reason"]


def test_mem_bw_only_host_link_on_cpu_is_skipped():
    env = run_bench("mem-bw", mem_type=["htod", "dtoh"], size="1M", num_steps=2)
    assert env["status"] == "skipped" and env["return_code"] == 0
    assert "no host-device link" in env["reason"]


def test_mem_bw_run_count_reports_spread():
    env = run_bench("mem-bw", mem_type="dtod", size="4M", num_warmup=1, num_steps=3, run_count=3)
    assert len(env["result"]["d2d_bw"]) == 3
    vals = env["result"]["d2d_bw"]
    pooled = [x for run in env["raw_data"]["d2d_bw"] for x in run]
    if len(pooled) == 3:  # windows too short for timed samples: the spread of the three runs
        assert env["spread"]["d2d_bw"] == pytest.approx(
            (max(vals) - min(vals)) / 1.693 / (sum(vals) / 3), abs=1e-6
        )
    else:
        assert env["spread"]["d2d_bw"] >= 0


def test_gpu_copy_bw_skipped_without_gpus():
    env = run_bench("gpu-copy-bw", size="1M")
    assert env["status"] == "skipped" and env["return_code"] == 0
    assert "needs GPUs" in env["reason"] or "two or more GPUs" in env["reason"]


def test_gpu_copy_bw_aggregates_pairs():
    pairs = {(0, 1): 40.0, (1, 0): 44.0, (0, 2): 20.0, (2, 0): 36.0}
    agg = aggregate(pairs)
    assert agg == {"p2p_max_bw": 44.0, "p2p_min_bw": 20.0, "p2p_avg_bw": 35.0}
    assert pair_metric(3, 7) == "gpu3_to_gpu7_write_by_dma_bw"
    assert aggregate({}) == {}
