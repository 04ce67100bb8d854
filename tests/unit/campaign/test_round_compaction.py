"""A soak's rounds written to its series file as they finish and their run directories compacted
(sb_fleet.campaign.round_columns, round_compaction): the judgement read from the file is the judgement read
from the whole run directories; a compacted round keeps what the records point to; a stop at any step is
recovered; ``sb-fleet report`` on a compacted round is one clear line."""

from __future__ import annotations

import json
import math
import random
import shutil
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from sb_fleet.analysis.fleet_results import COMPACTED, load_fleet
from sb_fleet.analysis.soak import SoakCriteria
from sb_fleet.campaign.campaign_state import RoundRecord
from sb_fleet.campaign.round_columns import SeriesFile, series_file
from sb_fleet.campaign.round_compaction import KEEP_ROUNDS_PER_NODE, RoundCompactor
from sb_fleet.campaign.soak_series import judge_series, read_series, series_json
from sb_fleet.config.campaign_spec import CampaignError, load_campaign
from sb_fleet.errors import ResultsError, RunDirError

T0 = datetime(2026, 12, 7, 8, 0, tzinfo=timezone.utc)
HOSTS = ["h1", "h2", "h3", "h4", "h5"]
CAMPAIGN = """\
version: 1
stages:
  - name: soak
    kind: soak
    benchmarks: [gemm-flops]
    duration: {rounds}m
    round: 1m
    watch: [gpu.xid, ib.symbol_error]
    drift: {{k: 3, min_change: 0.05, min_rounds: 5, metrics: [gemm-flops/fp32_flops]}}
{extra}"""


def _stage(tmp: Path, rounds: int, extra: str = ""):
    f = tmp / "campaign.yaml"
    f.write_text(CAMPAIGN.format(rounds=rounds, extra=extra))
    return load_campaign(f).spec.stages[0]


def _health(symbol_error: int, xid: int, throttled: bool) -> dict:
    checks = [
        {"check": "gpu.xid", "verdict": "pass", "value": {"79": xid} if xid else {}},
        {
            "check": "ib.errors",
            "verdict": "pass",
            "value": {"mlx5_0/1": {"symbol_error": symbol_error}, "mlx5_1/1": {}},
        },
        {"check": "gpu.ecc_volatile", "verdict": "pass", "value": {"0": 0, "1": 0}},
    ]
    if throttled:
        checks.append({"check": "gpu.throttle", "verdict": "fail", "value": "HW slowdown"})
    return {"checks": checks}


def _write_round(d: Path, rec: RoundRecord, rng: random.Random) -> None:
    """A real-shaped round's run directory: the files validate writes that the judgement and report read,
    the playbooks and each node's raw results."""
    rd = d / rec.run_dir
    (rd / "health").mkdir(parents=True)
    (rd / "playbooks").mkdir()
    (rd / "playbooks" / "suite.tar.gz").write_bytes(rng.randbytes(4000))
    for f in ("manifest.json", "config.json", "plan.json"):
        (rd / f).write_text(json.dumps({"schema_version": 2, "run_id": f"{rec.run_dir}-x"}))
    i = rec.index
    rows, summary, noise = [], [], []
    for k, h in enumerate(rec.hosts):
        fails = h == "h2" and i in (4, 9)  # fails two rounds
        if h == "h5" and i == 7:  # no result at all this round (no row, no figures, no health document)
            continue
        speed = 100.0 * (0.5 if h == "h3" and i > 6 else 1.0)  # a step to half speed
        v = speed * (1 + rng.gauss(0, 0.02)) * (1 - 0.05 * (i % 3 == 0))  # the fleet slow every 3rd round
        rows.append({"name": h, "outcome": "ok", "verdict": "fail" if fails else "pass", "reason": ""})
        summary.append({"node": h, "gemm-flops/fp32_flops": v, "gemm-flops/return_code": 0})
        noise.append({"node": h, "gemm-flops/fp32_flops": round(abs(rng.gauss(0.02, 0.01)), 6)})
        symbol = (7 if i >= 6 else 0) if h == "h4" else 0  # grows between rounds 5 and 6
        (rd / "health" / f"{h}.json").write_text(json.dumps(_health(symbol, 0, h == "h1" and i == 3)))
        raw = rd / "raw" / h / "results" / "gemm-flops"
        raw.mkdir(parents=True)
        (raw / "rank0.json").write_text(json.dumps({"v": v, "k": k}))
        (rd / "facts").mkdir(exist_ok=True)
        (rd / "facts" / f"{h}.json").write_text("{}")
    (rd / "report.json").write_text(json.dumps({"hosts": rows}))
    (rd / "report.html").write_text("<html>" + "x" * 3000 + "</html>")
    (rd / "results-summary.jsonl").write_text("".join(json.dumps(r) + "\n" for r in summary))
    (rd / "noise-summary.jsonl").write_text("".join(json.dumps(r) + "\n" for r in noise))
    (rd / "hosts.json").write_text(
        json.dumps({"schema_version": 1, "hosts": [{"name": h} for h in rec.hosts]})
    )


def _soak(d: Path, n: int, seed: int = 1) -> list[RoundRecord]:
    rng = random.Random(seed)
    records = []
    for i in range(1, n + 1):
        rec = RoundRecord(
            i,
            (T0 + timedelta(minutes=i - 1)).isoformat(),
            (T0 + timedelta(minutes=i - 1, seconds=50)).isoformat(),
            f"runs/soak-round-{i:02d}",
            list(HOSTS),
        )
        _write_round(d, rec, rng)
        records.append(rec)
    closing = d / "runs" / "soak-closing-check" / "health"
    closing.mkdir(parents=True)
    for h in HOSTS:
        (closing / f"{h}.json").write_text(
            json.dumps(_health(7 if h == "h4" else 0, 3 if h == "h5" else 0, False))
        )
    return records


def _judged(series, records, stage):
    return {
        h: (node.to_dict(), basis, series_json(series[h], records))
        for h, node, basis in judge_series(series, records, SoakCriteria.from_stage(stage))
    }


def _run_soak(d: Path, records: list[RoundRecord], stage) -> RoundCompactor:
    """As the runner does: after each round is recorded, the compactor called with the rounds so far."""
    c = RoundCompactor(d, stage)
    for k in range(1, len(records) + 1):
        c.catch_up(records[:k])
    return c


def test_the_judgement_from_the_series_file_is_the_judgement_from_the_whole_run_directories(tmp_path):
    stage = _stage(tmp_path, 12)
    d = tmp_path / "c"
    records = _soak(d, 12)
    closing = d / "runs" / "soak-closing-check"
    full = _judged(read_series(d, records, stage, HOSTS, closing), records, stage)
    before = sum(p.stat().st_size for p in d.rglob("*") if p.is_file())
    c = _run_soak(d, records, stage)
    after = sum(p.stat().st_size for p in d.rglob("*") if p.is_file())
    compacted = _judged(c.judged_series(records, HOSTS, closing), records, stage)
    assert compacted == full
    # and the faults are found, so the comparison is of something: h2's failed rounds, h3's step, h4's
    # counter, h1's throttled round, h5's round without a result
    failing = {h: sorted(f["kind"] for f in v[0]["findings"] if f["fails"]) for h, v in full.items()}
    assert failing["h3"] and "drift" in failing["h3"], failing
    assert full["h2"][0]["failed_rounds"] == [4, 9] and not full["h2"][0]["passed"]
    assert not full["h4"][0]["passed"] and not full["h1"][0]["passed"] and not full["h5"][0]["passed"]
    # a fresh compactor (another process: --resume, the judgement) reads the same from the file alone
    again = _judged(RoundCompactor(d, stage).judged_series(records, HOSTS, closing), records, stage)
    assert again == full
    assert after < before / 2, (before, after)


def test_a_compacted_round_keeps_what_the_records_point_to(tmp_path):
    stage = _stage(tmp_path, 12)
    d = tmp_path / "c"
    records = _soak(d, 12)
    _run_soak(d, records, stage)
    runs = d / "runs"
    first = runs / "soak-round-01"
    assert not (first / COMPACTED).exists() and (first / "report.json").is_file()  # the first round whole
    plain = runs / "soak-round-02"  # every node passed, nothing changed
    assert sorted(p.name for p in plain.iterdir()) == sorted(["manifest.json", "config.json", COMPACTED])
    marker = json.loads((plain / COMPACTED).read_text())
    assert marker["kept"] == {} and marker["series"] == series_file("soak") and marker["round"] == 2
    assert marker["removed"]["files"] > 20 and marker["removed"]["bytes"] > 4000
    # round 4: h2 failed it: its raw results, health document and facts stay, its report row is in the marker
    r4 = runs / "soak-round-04"
    m4 = json.loads((r4 / COMPACTED).read_text())
    assert list(m4["kept"]) == ["h2"] and "failed" in m4["kept"]["h2"]
    assert m4["report_rows"]["h2"]["verdict"] == "fail"
    assert (r4 / "raw" / "h2" / "results" / "gemm-flops" / "rank0.json").is_file()
    assert (r4 / "health" / "h2.json").is_file() and (r4 / "facts" / "h2.json").is_file()
    assert not (r4 / "raw" / "h1").exists() and not (r4 / "health" / "h1.json").exists()
    assert not (r4 / "report.json").exists() and not (r4 / "playbooks").exists()
    # round 6: h4's watched counter changed; round 3: h1 was throttled
    m6 = json.loads((runs / "soak-round-06" / COMPACTED).read_text())
    assert list(m6["kept"]) == ["h4"] and "ib.symbol_error[mlx5_0/1]" in m6["kept"]["h4"]
    assert list(json.loads((runs / "soak-round-03" / COMPACTED).read_text())["kept"]) == ["h1"]
    # the series file's lines are whole rounds, one a line, in order
    lines = [json.loads(x) for x in (d / series_file("soak")).read_text().splitlines()]
    assert [x["round"] for x in lines] == list(range(1, 13))
    assert lines[3]["nodes"]["h2"]["ok"] == 0 and "verdict fail" in lines[3]["nodes"]["h2"]["why"]
    assert "c" not in lines[1]["nodes"]["h4"] and lines[5]["nodes"]["h4"]["c"] == {
        "ib.symbol_error[mlx5_0/1]": 7.0
    }


def test_a_node_failing_every_round_keeps_its_files_of_its_first_rounds_only(tmp_path):
    n = KEEP_ROUNDS_PER_NODE + 6
    stage = _stage(tmp_path, n, "    max_failed_rounds: 1\n")
    d = tmp_path / "c"
    records = _soak(d, n)
    for rec in records:  # h1 fails every round
        rep = d / rec.run_dir / "report.json"
        doc = json.loads(rep.read_text())
        for row in doc["hosts"]:
            if row["name"] == "h1":
                row["verdict"] = "fail"
        rep.write_text(json.dumps(doc))
    _run_soak(d, records, stage)
    kept = [r.index for r in records if (d / r.run_dir / "raw" / "h1").is_dir()]
    assert kept == list(range(1, KEEP_ROUNDS_PER_NODE + 1)), kept  # round 1 (whole) counts
    assert SeriesFile(d / series_file("soak")).kept["h1"] == KEEP_ROUNDS_PER_NODE
    m = json.loads((d / records[-1].run_dir / COMPACTED).read_text())
    assert m["kept"] == {} and not (d / records[-1].run_dir / "raw").exists()


def test_keep_rounds_all_writes_the_series_and_compacts_nothing(tmp_path):
    stage = _stage(tmp_path, 6, "    keep_rounds: all\n")
    d = tmp_path / "c"
    records = _soak(d, 6)
    _run_soak(d, records, stage)
    assert not list(d.rglob(COMPACTED))
    assert all((d / r.run_dir / "report.json").is_file() for r in records)
    assert len((d / series_file("soak")).read_text().splitlines()) == 6


def test_keep_rounds_is_a_soak_key(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("version: 1\nstages:\n  - {name: s, kind: sanity, keep_rounds: all}\n")
    with pytest.raises(CampaignError, match="keep_rounds"):
        load_campaign(f)
    f.write_text(CAMPAIGN.format(rounds=6, extra="    keep_rounds: some\n"))
    with pytest.raises(CampaignError, match="keep_rounds"):
        load_campaign(f)


def test_a_stop_at_any_step_is_recovered(tmp_path):
    stage = _stage(tmp_path, 8)
    d = tmp_path / "c"
    records = _soak(d, 8)
    pristine = tmp_path / "pristine"
    shutil.copytree(d, pristine)
    closing = d / "runs" / "soak-closing-check"
    full = _judged(read_series(d, records, stage, HOSTS, closing), records, stage)
    c = RoundCompactor(d, stage)
    for k in range(1, 6):
        c.catch_up(records[:k])
    # a stop after round 6 was recorded, before its line: the next process writes it
    # a stop while round 5's line was written: the line cut off (and its directory still whole)
    path = d / series_file("soak")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 40])
    shutil.rmtree(d / "runs" / "soak-round-05")
    shutil.copytree(pristine / "runs" / "soak-round-05", d / "runs" / "soak-round-05")
    # a stop while round 4's files were removed: some are still there
    shutil.copytree(
        pristine / "runs" / "soak-round-04" / "playbooks", d / "runs" / "soak-round-04" / "playbooks"
    )
    c2 = RoundCompactor(d, stage)
    assert len(c2.series.run_dirs) == 4  # the cut-off line dropped
    done = c2.catch_up(records[:6])
    assert "runs/soak-round-04" in done and not (d / "runs" / "soak-round-04" / "playbooks").exists()
    assert (d / "runs" / "soak-round-05" / COMPACTED).is_file()
    for k in (7, 8):
        c2.catch_up(records[:k])
    assert _judged(RoundCompactor(d, stage).judged_series(records, HOSTS, closing), records, stage) == full
    # a compacted round whose line is lost: one clear error, not a judgement of empty rounds
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:2] + lines[3:]) + "\n")
    with pytest.raises(RunDirError, match="soak-round-03: compacted, and its line is missing"):
        RoundCompactor(d, stage).judged_series(records, HOSTS, closing)
    # a damaged line: named, with what to do
    path.write_text(lines[0] + "\n{not json\n")
    with pytest.raises(RunDirError, match="line 2 is damaged"):
        SeriesFile(path)


def test_report_on_a_compacted_round_is_one_clear_line(tmp_path):
    stage = _stage(tmp_path, 5)
    d = tmp_path / "c"
    records = _soak(d, 5)
    _run_soak(d, records, stage)
    rd = d / "runs" / "soak-round-02"
    with pytest.raises(ResultsError, match="compacted by its acceptance campaign"):
        load_fleet(rd)
    out = subprocess.run(
        [str(Path(sys.executable).with_name("sb-fleet")), "report", str(rd)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 2, out
    assert "Traceback" not in out.stderr and "soak-<stage>-series.jsonl" in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert sorted(p.name for p in rd.iterdir()) == sorted(["manifest.json", "config.json", COMPACTED])
    assert math.isfinite(load_fleet(d / "runs" / "soak-round-01").values[0, 0])  # the first round: whole
