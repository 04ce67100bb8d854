"""The history on a real store on disk, through the installed command: synthetic nights of 200 hosts
with persistent per-host offsets and small noise; on the last night a few hosts regress by amounts
that stay inside the fleet spread. Only their own past shows it."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from unit.history.nights import NCCL, Nights  # noqa: E402

from sb_fleet.report.analyse import report  # noqa: E402

SB_FLEET = str(Path(sys.executable).parent / "sb-fleet")
NIGHTS = 13
LAST = NIGHTS - 1
OFFENDER = "node0150"  # fails hard (fleet check) on three of the five nights before the last


def _plant(seed: int) -> dict[str, tuple[str, float, int | None]]:
    """Regressions of 4-8% (the issue's example: a host 3% faster than the fleet that drops 4%) on
    hosts and metrics drawn at random: whole hosts, one GPU, one NIC, the all-reduce, a latency."""
    rng = np.random.default_rng(seed)
    hosts = rng.choice([f"node{i:04d}" for i in range(200) if i != 150], size=10, replace=False)
    kinds = [
        ("gemm-flops/fp16_tc_flops", None),
        ("gemm-flops/tf32_tc_flops", int(rng.integers(8))),
        ("nccl-bw/allreduce", None),
        ("kernel-launch/event_time", None),
        (f"ib-loopback/ib_write_8388608_ib{int(rng.integers(4))}_bw", None),
    ]
    out = {}
    for i, h in enumerate(hosts):
        prefix, gpu = kinds[i % len(kinds)]
        drop = float(rng.uniform(0.04, 0.08))
        out[str(h)] = (prefix, 1 + drop if "event_time" in prefix else 1 - drop, gpu)
    return out


REGRESSED = _plant(20261123)


def sb_fleet(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([SB_FLEET, *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def nights(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Nights 0..LAST as run directories; 0..LAST-1 recorded in the store (through the API: faster)."""
    root = tmp_path_factory.mktemp("nights")
    bad = {n: {OFFENDER: ("gemm-flops/fp16_tc_flops", 0.6, None)} for n in (8, 10, 11)}
    # the whole fleet's all-reduce slides 3% on the last night (a driver update): one drift finding
    gen = Nights(hosts=200, seed=11, regress={**bad, LAST: REGRESSED}, shift={LAST: {NCCL: 0.97}})
    store = root / "history.duckdb"
    for n in range(NIGHTS):
        run = gen.write(n, root / f"night-{n:03d}")
        if n < LAST:
            report(run, history=store)
    return root, store


def _history_hosts(doc: dict) -> set[str]:
    return {h["name"] for h in doc["hosts"] if any(i["check"] == "history" for i in h["issues"])}


def _tree_digest(d: Path) -> dict[str, str]:
    return {
        str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(d.rglob("*"))
        if p.is_file()
    }


def test_the_last_night_flags_exactly_the_regressed_hosts(nights: tuple[Path, Path], tmp_path: Path) -> None:
    root, store = nights
    plain = sb_fleet("report", str(root / f"night-{LAST:03d}"), "--out", str(tmp_path / "plain"), "-q")
    doc_plain = json.loads((tmp_path / "plain" / "report.json").read_text())
    # the premise: the fleet-relative checks cannot see these regressions
    assert not {h["name"] for h in doc_plain["hosts"] if h["verdict"] != "pass"} & set(REGRESSED), (
        plain.stdout
    )

    r = sb_fleet(
        "report", str(root / f"night-{LAST:03d}"), "--history", str(store), "--out", str(tmp_path / "hist")
    )
    assert r.returncode == 1, r.stderr
    doc = json.loads((tmp_path / "hist" / "report.json").read_text())
    flagged = _history_hosts(doc)
    assert set(REGRESSED) <= flagged, f"missed: {set(REGRESSED) - flagged}"
    assert len(flagged - set(REGRESSED)) <= 1, f"false alarms: {flagged - set(REGRESSED)}"
    for h in doc["hosts"]:
        for i in h["issues"]:
            if i["check"] == "history":
                assert i["reference"] and i["deviation"] is not None and i["category"] == "HistoryRegression"
                prefix, factor, gpu = REGRESSED[h["name"]]
                assert i["metric"].startswith(prefix)
                assert np.sign(i["deviation"]) == np.sign(factor - 1)
    # the fleet-wide slide is one drift warning, not 200 regressions (references move with the fleet)
    hist = doc["history"]
    assert [d["family"] for d in hist["drift"]] == [NCCL]
    assert -0.035 < hist["drift"][0]["deviation"] < -0.025
    assert any(w.startswith(f"history: fleet median of {NCCL} -3.") for w in doc["warnings"]), doc["warnings"]
    # repeat offender: failed 3 of the last 5 runs, passes tonight (back to healthy)
    assert hist["repeat_offenders"] == {OFFENDER: 3}
    assert OFFENDER in hist["back_to_healthy"]
    assert len(hist["window"]) == 10 and hist["recorded"] == "recorded"
    assert set(hist["host_trends"]) & set(REGRESSED)
    page = (tmp_path / "hist" / "report.html").read_text()
    assert '<section id="history">' in page and page.count("<svg") >= 10
    assert "## History" in (tmp_path / "hist" / "report.md").read_text()


def test_without_history_the_report_is_unchanged(nights: tuple[Path, Path], tmp_path: Path) -> None:
    root, _ = nights
    r = sb_fleet("report", str(root / f"night-{LAST:03d}"), "--out", str(tmp_path), "-q")
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "report.json").read_text())
    assert "history" not in doc and "history" not in doc["gates"]
    assert not _history_hosts(doc)
    assert "History" not in (tmp_path / "report.md").read_text()
    assert 'id="history"' not in (tmp_path / "report.html").read_text()


def test_recording_twice_is_idempotent(nights: tuple[Path, Path], tmp_path: Path) -> None:
    root, store = nights
    copy = tmp_path / "h.duckdb"
    copy.write_bytes(store.read_bytes())
    before = sb_fleet("history", str(copy), "--last", "100")
    assert before.returncode == 0 and before.stdout.count("night-005") == 1
    run = str(root / "night-005")
    for _ in range(2):
        r = sb_fleet("report", run, "--history", str(copy), "--out", str(tmp_path / "a"))
        assert r.returncode == 0 and "run unchanged in" in r.stdout, r.stdout + r.stderr
    after = sb_fleet("history", str(copy), "--last", "100")
    assert after.stdout == before.stdout
    trend = sb_fleet("history", str(copy), "--host", "node0007", "--metric", "mem-bw/h2d_bw", "--last", "100")
    assert trend.returncode == 0 and trend.stdout.count("pass") >= LAST, trend.stdout


def test_a_corrupt_history_is_one_line_exit_2_and_the_run_directory_stays(
    nights: tuple[Path, Path], tmp_path: Path
) -> None:
    root, _ = nights
    bad = tmp_path / "history.duckdb"
    bad.write_bytes(b"\x00garbage" * 4096)
    run = root / f"night-{LAST:03d}"
    before = _tree_digest(run)
    r = sb_fleet("report", str(run), "--history", str(bad), "--out", str(tmp_path / "out"))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0] and "Traceback" not in r.stderr, r.stderr
    assert _tree_digest(run) == before


def test_a_locked_history_is_one_line_exit_3(nights: tuple[Path, Path], tmp_path: Path) -> None:
    root, store = nights
    copy = tmp_path / "h.duckdb"
    copy.write_bytes(store.read_bytes())
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import duckdb,sys; c=duckdb.connect(sys.argv[1]); print('held', flush=True); sys.stdin.read()",
            str(copy),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        r = sb_fleet("report", str(root / "night-003"), "--history", str(copy), "--out", str(tmp_path / "o"))
        assert r.returncode == 3, r.stdout + r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "in use by another process" in lines[0]
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)


def test_repeat_offenders_are_quarantined_by_policy(nights: tuple[Path, Path], tmp_path: Path) -> None:
    root, store = nights
    copy = tmp_path / "h.duckdb"
    copy.write_bytes(store.read_bytes())
    cfg = tmp_path / "gate.yaml"
    cfg.write_text(
        "superbench: {benchmarks: {}}\ngates:\n  history: {offenders: quarantine, regression: warn}\n"
    )
    r = sb_fleet(
        "report",
        str(root / f"night-{LAST:03d}"),
        "-c",
        str(cfg),
        "--history",
        str(copy),
        "--out",
        str(tmp_path / "o"),
    )
    doc = json.loads((tmp_path / "o" / "report.json").read_text())
    quarantined = (tmp_path / "o" / "quarantine.txt").read_text().split()
    assert OFFENDER in quarantined  # passes tonight, failed 3 of its last 5 runs
    assert doc["history"]["quarantined_by_history"] == [OFFENDER]
    # regression: warn -> the regressed hosts are named in a warning, not failed
    assert not _history_hosts(doc) and any("regression(s) against own past" in w for w in doc["warnings"])
    assert r.returncode == 0, r.stdout + r.stderr
