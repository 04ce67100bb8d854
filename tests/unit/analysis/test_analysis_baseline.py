"""Baselines made from a fleet are robust, and the summary statistics are right."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sb_fleet.analysis.fleet_results import load_fleet
from sb_fleet.analysis.stats import column_stats
from sb_fleet.analysis.superbench.baseline import load_baseline, make_baseline, summarize
from sb_fleet.errors import RulesError


def test_a_few_bad_hosts_do_not_drag_the_baseline(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    rows = []
    for i in range(200):
        row = {"node": f"h{i}", "gemm-flops/return_code": 0}
        for g in range(8):
            row[f"gemm-flops/fp16_tc_flops:{g}"] = float(280000 * (1 + rng.normal(0, 0.005)))
        rows.append(row)
    for i in range(6):  # 3% of the hosts very slow
        for g in range(8):
            rows[i][f"gemm-flops/fp16_tc_flops:{g}"] = 1000.0
    rows[10]["gemm-flops/return_code"] = 1  # a failed run's numbers are not used
    for g in range(8):
        rows[10][f"gemm-flops/fp16_tc_flops:{g}"] = 1e9
    src = tmp_path / "r.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    fleet = load_fleet(src)
    for stat in ("median", "trimmed-mean"):
        b = make_baseline(fleet, statistic=stat)  # type: ignore[arg-type]
        assert set(b) == {"gemm-flops/fp16_tc_flops", "gemm-flops/return_code"}
        assert b["gemm-flops/fp16_tc_flops"] == pytest.approx(280000, rel=0.002)
        assert b["gemm-flops/return_code"] == 0
    per_rank = make_baseline(fleet, per_rank=True)
    assert "gemm-flops/fp16_tc_flops:7" in per_rank
    # The naive mean would be dragged far away.
    assert np.nanmean(fleet.values[:, 1]) < 275000 or np.nanmean(fleet.values[:, 1]) > 285000


def test_summary_statistics_match_numpy(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    vals = rng.normal(10, 2, size=(101, 3))
    vals[rng.random(vals.shape) < 0.1] = np.nan
    st = column_stats(vals)
    for c in range(3):
        col = vals[:, c][~np.isnan(vals[:, c])]
        row = st.row(c)
        assert row["count"] == col.size
        assert row["mean"] == pytest.approx(col.mean())
        assert row["std"] == pytest.approx(col.std(ddof=1))
        assert row["min"] == pytest.approx(col.min()) and row["max"] == pytest.approx(col.max())
        for p in (1, 5, 25, 50, 75, 95, 99):
            assert row[f"p{p}"] == pytest.approx(np.percentile(col, p))
    src = tmp_path / "r.jsonl"
    src.write_text('{"node": "a", "x/y:0": 1}\n{"node": "b", "x/y:0": 3}\n')
    s = summarize(load_fleet(src))
    assert s["x/y:0"]["mean"] == 2 and s["x/y:0"]["p50"] == 2 and s["x/y:0"]["count"] == 2


def test_reading_a_bad_baseline_names_the_key(tmp_path: Path) -> None:
    p = tmp_path / "b.json"
    p.write_text('{"a/b": "fast"}')
    with pytest.raises(RulesError, match="a/b"):
        load_baseline(p)
    p.write_text("[1]")
    with pytest.raises(RulesError, match="JSON object"):
        load_baseline(p)
