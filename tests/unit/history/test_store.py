"""The history store on a real DuckDB file: idempotent recording, windows, the baseline query, and the
one-line errors for a corrupt, foreign or locked file."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sb_fleet.analysis.verdict import judge
from sb_fleet.exits import EXIT_INFRA, EXIT_USAGE
from sb_fleet.history.components import map_components
from sb_fleet.history.history_store import HistoryLocked, HistoryStoreError, RunRecord, open_store
from sb_fleet.history.record import RunMeta, build_record

HOSTS = ["a", "b", "c"]
COLS = ["gemm-flops/fp16_tc_flops:0", "gemm-flops/fp16_tc_flops:1", "mem-bw/h2d_bw"]
FACTS = {"a": {"gpus": [{"index": 0, "uuid": "GPU-a0"}, {"index": 1, "uuid": "GPU-a1"}]}}


def _record(night: int, values: np.ndarray, verdicts: dict[str, str] | None = None) -> RunRecord:
    meta = RunMeta(
        run_key=f"night-{night}",
        time=dt.datetime(2026, 1, 1) + dt.timedelta(days=night),
        source=f"/runs/{night}",
        config_digest="c0ffee",
        versions={"sb_fleet": "0.1.0"},
        facts=FACTS,
    )
    verdicts = verdicts or {}
    judged = [judge(h, True, [], "ok") for h in HOSTS]
    judged = [j if verdicts.get(j.name, "pass") == "pass" else _failed(j.name) for j in judged]
    return build_record(meta, HOSTS, COLS, values, map_components(HOSTS, COLS, FACTS), judged, True)


def _failed(name: str):  # noqa: ANN202
    from sb_fleet.analysis.issues import Issue

    return judge(name, True, [Issue("mem-bw/h2d_bw", 1.0, 2.0, -0.5, "fleet", "Bandwidth")], "ok")


def _counts(path: Path) -> tuple[int, ...]:
    with open_store(path) as st:
        return tuple(
            st.one(f"SELECT count(*) FROM {t}")[0]
            for t in ("runs", "host_runs", "vals", "fleet", "names", "facts")
        )


def test_recording_twice_changes_nothing_and_new_content_replaces(tmp_path: Path) -> None:
    path = tmp_path / "h.duckdb"
    vals = np.arange(9, dtype=float).reshape(3, 3) + 100
    with open_store(path) as st:
        assert st.record(_record(1, vals)) == "recorded"
    before = _counts(path)
    assert before[:4] == (1, 3, 9, 2)  # fleet medians: one per family (ranks pooled)
    with open_store(path) as st:
        assert st.record(_record(1, vals)) == "unchanged"
    assert _counts(path) == before
    vals2 = vals.copy()
    vals2[2, 2] = np.nan  # collect fetched less (or more): the run is replaced, not doubled
    with open_store(path) as st:
        assert st.record(_record(1, vals2)) == "replaced"
        assert [r.run_key for r in st.runs()] == ["night-1"]
    assert _counts(path)[:3] == (1, 3, 8)


def test_window_is_the_last_runs_before_tonight_by_time(tmp_path: Path) -> None:
    path = tmp_path / "h.duckdb"
    with open_store(path) as st:
        for night in (3, 1, 2, 5, 4):  # recorded out of order
            st.record(_record(night, np.full((3, 3), 100.0 + night)))
        w = st.window(dt.datetime(2026, 1, 6), 3)  # night 5 is 2026-01-06
        assert [r.run_key for r in w] == ["night-2", "night-3", "night-4"]
        w = st.window(dt.datetime(2026, 1, 9), 2, exclude_key="night-5")
        assert [r.run_key for r in w] == ["night-3", "night-4"]


def test_own_baseline_is_the_components_healthy_quartiles(tmp_path: Path) -> None:
    path = tmp_path / "h.duckdb"
    rng = np.random.default_rng(3)
    nights = {n: 100 + rng.normal(0, 1, (3, 3)) for n in range(1, 9)}
    with open_store(path) as st:
        for n, v in nights.items():
            st.record(_record(n, v, {"b": "fail"} if n == 4 else None))
        window = st.window(dt.datetime(2026, 2, 1), 6)  # nights 3..8
        cm = map_components(HOSTS, COLS, FACTS)
        q25, q50, q75, count, seen = st.own_baseline(
            window, st.tonight_cells(cm.components, cm.metrics, cm.comp, cm.metric), cm.comp.shape
        )
    assert np.isnan(seen[1 * 3 + 0, 1]) and seen[0, 1] == nights[4][0, 0]  # b failed night 4 (window's 2nd)
    for h in range(3):
        healthy = [nights[n][h] for n in range(3, 9) if not (h == 1 and n == 4)]
        stack = np.array(healthy)
        assert count[h].tolist() == [len(healthy)] * 3
        np.testing.assert_allclose(q50[h], np.median(stack, axis=0))
        np.testing.assert_allclose(q25[h], np.percentile(stack, 25, axis=0))
        np.testing.assert_allclose(q75[h], np.percentile(stack, 75, axis=0))


def test_a_gpu_moved_to_another_host_keeps_its_history(tmp_path: Path) -> None:
    path = tmp_path / "h.duckdb"
    with open_store(path) as st:
        for n in range(1, 4):
            st.record(_record(n, np.full((3, 3), 100.0 + n)))
        facts = {"c": {"gpus": [{"index": 1, "uuid": "GPU-a0"}]}}  # a's GPU 0 is now c's GPU 1
        cm = map_components(HOSTS, COLS, facts)
        _, q50, _, count, _ = st.own_baseline(
            st.runs(), st.tonight_cells(cm.components, cm.metrics, cm.comp, cm.metric), cm.comp.shape
        )
    assert count[2, 1] == 3 and q50[2, 1] == 102.0
    assert count[0, 0] == 0  # a no longer tells its GPUs: the host-keyed column starts anew
    assert count[2, 0] == 3


def test_a_corrupt_file_is_one_clear_line_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "h.duckdb"
    bad.write_bytes(b"not a database" * 1000)
    with pytest.raises(HistoryStoreError) as e, open_store(bad):
        pass
    assert e.value.exit_code == EXIT_USAGE
    assert "\n" not in str(e.value) and str(bad) in str(e.value) and "move it aside" in str(e.value)


def test_a_foreign_duckdb_file_is_refused(tmp_path: Path) -> None:
    import duckdb

    other = tmp_path / "other.duckdb"
    con = duckdb.connect(str(other))
    con.execute("CREATE TABLE t(i INTEGER)")
    con.close()
    with pytest.raises(HistoryStoreError, match="not an sb-fleet history store"), open_store(other):
        pass


def test_a_locked_file_is_exit_3_after_waiting(tmp_path: Path) -> None:
    path = tmp_path / "h.duckdb"
    with open_store(path):
        pass
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import duckdb,sys; c=duckdb.connect(sys.argv[1]); print('held', flush=True); sys.stdin.read()",
            str(path),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(HistoryLocked) as e, open_store(path, lock_wait=0.5):
            pass
        assert e.value.exit_code == EXIT_INFRA and "in use by another process" in str(e.value)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)


def test_tonights_cells_come_from_the_stored_layout_of_the_same_keys(tmp_path: Path) -> None:
    from sb_fleet.history.components import keys_digest

    path = tmp_path / "h.duckdb"
    cm = map_components(HOSTS, COLS, FACTS)
    rec = _record(1, np.full((3, 3), 100.0))
    rec.keys = keys_digest(cm)
    with open_store(path) as st:
        looked_up = st.tonight_cells(cm.components, cm.metrics, cm.comp, cm.metric)
        assert (looked_up < 0).all()  # nothing stored yet
        st.record(rec)
        slow = st.tonight_cells(cm.components, cm.metrics, cm.comp, cm.metric)
        fast = st.tonight_cells(cm.components, cm.metrics, cm.comp, cm.metric, rec.keys)
        assert (slow >= 0).all() and fast.tolist() == slow.tolist()
        assert st.one("SELECT count(*) FROM layouts")[0] == 1
