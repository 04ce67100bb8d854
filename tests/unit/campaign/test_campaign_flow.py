"""Gating between stages, the campaign's durable state (resume after a crash) and the acceptance records."""

from __future__ import annotations

import json
import os
import stat
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from sb_fleet.analysis.soak import SoakCriteria, SoakRound, judge_node
from sb_fleet.campaign.acceptance_record import campaign_summary, node_record, write_records
from sb_fleet.campaign.campaign_state import (
    PREVIOUS_NAME,
    STATE_NAME,
    CampaignState,
    RoundRecord,
    load_state,
    save_state,
)
from sb_fleet.campaign.gating import CriterionResult, StageOutcome, entrants, gate_stage, soak_outcome
from sb_fleet.config.campaign_spec import parse_campaign
from sb_fleet.errors import RunDirError

T0 = datetime(2026, 11, 29, 8, 0, tzinfo=timezone.utc)
TEXT = """\
version: 1
stages:
  - {name: sanity, kind: sanity}
  - {name: single, kind: single_node, benchmarks: [gemm-flops], on_failure: retry_once}
  - {name: fabric, kind: fabric, benchmarks: [nccl-bw], on_failure: quarantine}
  - {name: soak, kind: soak, benchmarks: [gemm-flops], duration: 5m, round: 1m}
"""
HOSTS = ["h1", "h2", "h3", "h4", "h5"]


@pytest.fixture
def campaign(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text(TEXT)
    return parse_campaign(TEXT, p)


def ok(h: str) -> StageOutcome:
    return StageOutcome(h, True, criteria=(CriterionResult("gemm-flops/fp32_flops", ">= 30", 41.5, True),))


def bad(h: str, why: str) -> StageOutcome:
    return StageOutcome(
        h,
        False,
        why,
        (CriterionResult("verdict", "report verdict pass", "fail", False),),
        (f"runs/x/raw/{h}",),
    )


def run_until_soak(campaign, state: CampaignState, now=T0):
    """sanity: h5 unhealthy; single: h4 fails twice, h3 fails once then passes; fabric: h2 fails (quarantined)."""
    spec = campaign.spec
    for st in spec.stages[:3]:
        ran = entrants(spec, st, state.status_map(), state.passed_map())
        state.start_stage(st.name, list(ran), 1, now)
        if st.name == "sanity":
            outs = {h: ok(h) for h in ran if h != "h5"} | {"h5": bad("h5", "gpu.row_remap: remap pending")}
        elif st.name == "single":
            outs = {h: ok(h) for h in ran if h not in ("h3", "h4")}
            outs |= {"h3": bad("h3", "gemm slow"), "h4": bad("h4", "gemm slow")}
        else:
            assert "h4" not in ran  # held out at single: never in the fabric stage
            outs = {h: ok(h) for h in ran if h != "h2"}  # h2: no outcome at all (never answered)
        d = gate_stage(st, ran, outs, 1)
        state.apply(d, now)
        if d.retry:
            state.start_stage(st.name, list(d.retry), 2, now)
            d2 = gate_stage(st, d.retry, {"h3": ok("h3"), "h4": bad("h4", "gemm slow again")}, 2)
            state.apply(d2, now)
        state.finish_stage(st.name, now)
        now += timedelta(minutes=10)
    return now


def test_gating_holds_out_retries_and_quarantines(campaign):
    state = CampaignState.new(campaign, HOSTS, T0)
    run_until_soak(campaign, state)
    s = state.hosts
    assert state.status_map() == {
        "h1": "active",
        "h2": "quarantined",
        "h3": "active",
        "h4": "held_out",
        "h5": "held_out",
    }
    assert (s["h5"].held_at, s["h5"].reason) == ("sanity", "gpu.row_remap: remap pending")
    assert (s["h4"].held_at, s["h4"].reason) == ("single", "gemm slow again")
    assert [r.outcome for r in s["h3"].timeline if r.stage == "single"] == ["retry", "passed"]
    assert (s["h2"].held_at, s["h2"].reason) == ("fabric", "no outcome from stage fabric")
    assert s["h4"].stage_reached == "single" and s["h1"].passed == ["sanity", "single", "fabric"]
    soak = campaign.spec.stages[3]
    assert entrants(campaign.spec, soak, state.status_map(), state.passed_map()) == ("h1", "h3")


def test_fabric_takes_only_nodes_that_passed_every_single_node_stage(campaign):
    fabric = campaign.spec.stages[2]
    status = {"a": "active", "b": "active", "c": "held_out"}
    passed = {"a": ["sanity", "single"], "b": ["sanity"], "c": ["sanity", "single"]}
    assert entrants(campaign.spec, fabric, status, passed) == ("a",)


def test_gate_attempts():
    spec = parse_campaign(TEXT, Path("c.yaml")).spec
    with pytest.raises(ValueError):
        gate_stage(spec.stages[0], ["a"], {}, 2)  # hold_out has no second attempt
    d = gate_stage(spec.stages[1], ["a", "b"], {"a": ok("a"), "b": bad("b", "x")}, 1)
    assert (d.advance, d.retry, dict(d.held_out)) == (("a",), ("b",), {})
    d = gate_stage(spec.stages[1], ["b"], {"b": bad("b", "y")}, 2)
    assert (d.advance, d.retry, dict(d.held_out)) == ((), (), {"b": "y"})


def _soak_rounds(campaign, state, directory, indices, now):
    for i in indices:
        state.record_round(
            "soak",
            RoundRecord(
                i,
                (now).isoformat(),
                (now + timedelta(minutes=1)).isoformat(),
                f"rounds/soak-{i:03d}",
                ["h1", "h3"],
            ),
            now,
        )
        save_state(directory, state)
        now += timedelta(minutes=1)
    return now


def test_resume_after_a_crash_mid_write_skips_finished_stages_and_rounds(campaign, tmp_path):
    d = tmp_path / "camp"
    state = CampaignState.new(campaign, HOSTS, T0)
    save_state(d, state)
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700
    now = run_until_soak(campaign, state)
    save_state(d, state)
    now = _soak_rounds(campaign, state, d, [1, 2, 3], now)
    # the crash: a half-written temp file beside the state, as the atomic writer leaves one when killed
    (d / f".{STATE_NAME}.abcd1234.tmp").write_text('{"schema_version": 1, "campaign_dig')
    resumed = load_state(d, campaign.digest)
    assert resumed == state and resumed.recovered_from is None
    assert resumed.next_stage(campaign.spec).name == "soak"
    assert resumed.rounds_done("soak") == {1, 2, 3}
    todo = [i for i in range(1, campaign.spec.stages[3].rounds + 1) if i not in resumed.rounds_done("soak")]
    assert todo == [4, 5]
    with pytest.raises(ValueError, match="round 3 is recorded already"):
        resumed.record_round("soak", RoundRecord(3, "a", "b", "r"), now)


def test_a_truncated_state_file_falls_back_to_the_previous_one(campaign, tmp_path):
    d = tmp_path / "camp"
    state = CampaignState.new(campaign, HOSTS, T0)
    now = run_until_soak(campaign, state)
    save_state(d, state)
    _soak_rounds(campaign, state, d, [1, 2], now)
    full = (d / STATE_NAME).read_bytes()
    (d / STATE_NAME).write_bytes(full[: len(full) // 2])  # a file system that lost the end of the file
    resumed = load_state(d, campaign.digest)
    assert resumed.recovered_from == str(d / PREVIOUS_NAME)
    assert resumed.rounds_done("soak") == {1}  # one step lost: round 2 runs again, none is half-counted
    (d / PREVIOUS_NAME).write_text("")
    with pytest.raises(RunDirError, match="not valid JSON"):
        load_state(d, campaign.digest)
    # the state file gone while the previous one was renamed away: the previous one is read
    (d / STATE_NAME).unlink()
    save_state(d, state)
    os.replace(d / STATE_NAME, d / PREVIOUS_NAME)
    assert load_state(d, campaign.digest).rounds_done("soak") == {1, 2}


def test_a_state_of_another_campaign_file_is_refused(campaign, tmp_path):
    d = tmp_path / "camp"
    save_state(d, CampaignState.new(campaign, HOSTS, T0))
    other = parse_campaign(TEXT.replace("5m", "4m"), tmp_path / "c.yaml")
    with pytest.raises(
        RunDirError, match=r"not the campaign file given .*same campaign file, or start a new"
    ):
        load_state(d, other.digest)
    with pytest.raises(RunDirError, match="no campaign state here"):
        load_state(tmp_path / "empty", campaign.digest)
    data = json.loads((d / STATE_NAME).read_text())
    data["schema_version"] = 99
    (d / STATE_NAME).write_text(json.dumps(data))
    with pytest.raises(RunDirError, match="schema version 99"):
        load_state(d, campaign.digest)


def test_a_campaign_directory_others_can_use_is_refused(campaign, tmp_path):
    d = tmp_path / "shared"
    d.mkdir(mode=0o777)
    os.chmod(d, 0o777)
    with pytest.raises(Exception, match="refused for the campaign directory"):
        save_state(d, CampaignState.new(campaign, HOSTS, T0))


def test_records_say_verdict_stage_criteria_evidence_and_versions(campaign, tmp_path):
    state = CampaignState.new(campaign, HOSTS, T0)
    now = run_until_soak(campaign, state)
    soak = campaign.spec.stages[3]
    state.start_stage("soak", ["h1", "h3"], 1, now)
    rounds = {
        "h1": [SoakRound(i, now, now + timedelta(minutes=1), counters={"gpu.xid": 0}) for i in range(1, 6)],
        "h3": [
            SoakRound(i, now, now + timedelta(minutes=1), counters={"gpu.xid": int(i >= 4)})
            for i in range(1, 6)
        ],
    }
    crit = SoakCriteria.from_stage(soak)
    outs = {
        h: soak_outcome(judge_node(h, r, crit), [f"rounds/soak-{i:03d}/raw/{h}" for i in (1, 5)])
        for h, r in rounds.items()
    }
    state.apply(gate_stage(soak, ["h1", "h3"], outs), now)
    state.finish_stage("soak", now)
    state.finish(now)
    assert state.status_map() == {
        "h1": "accepted",
        "h2": "quarantined",
        "h3": "rejected",
        "h4": "rejected",
        "h5": "rejected",
    }

    h3 = node_record("h3", state, campaign, "2026-11-29T12:00:00+00:00", suite_version="0.1.0")
    assert (h3["verdict"], h3["stage_reached"], h3["failed_stage"]) == ("rejected", "soak", "soak")
    assert h3["reason"].startswith("gpu.xid grew by 1 during the soak")
    growth = next(c for c in h3["criteria"] if c["stage"] == "soak" and c["name"] == "gpu.xid")
    assert growth["passed"] is False and growth["measured"]["growth"] == 1 and growth["rounds"] == [4]
    assert "runs/x/raw/h3" in h3["evidence"] and "rounds/soak-005/raw/h3" in h3["evidence"]
    assert h3["campaign"]["digest"] == campaign.digest and h3["versions"]["suite"] == "0.1.0"
    assert h3["versions"]["sb_fleet"]
    assert [t["outcome"] for t in h3["timeline"]] == ["passed", "retry", "passed", "passed", "held_out"]
    h1 = node_record("h1", state, campaign, "2026-11-29T12:00:00+00:00")
    assert (h1["verdict"], h1["failed_stage"], h1["stages_passed"]) == (
        "accepted",
        None,
        ["sanity", "single", "fabric", "soak"],
    )
    assert node_record("h2", state, campaign, "x")["verdict"] == "quarantined"
    h4 = node_record("h4", state, campaign, "x")
    assert (h4["verdict"], h4["stage_reached"], h4["reason"]) == ("rejected", "single", "gemm slow again")

    summary = campaign_summary(state, campaign, "x")
    assert summary["verdicts"] == {"accepted": 1, "quarantined": 1, "rejected": 3}
    assert summary["stages"][3]["rounds_planned"] == 5 and summary["nodes"]["h5"]["failed_stage"] == "sanity"
    paths = write_records(tmp_path / "camp", state, campaign, "x")
    assert [p.name for p in paths] == [
        "h1.json",
        "h2.json",
        "h3.json",
        "h4.json",
        "h5.json",
        "campaign-summary.json",
    ]
    assert json.loads(paths[2].read_text())["verdict"] == "rejected"


def test_a_record_before_the_end_says_in_progress(campaign):
    state = CampaignState.new(campaign, HOSTS, T0)
    assert node_record("h1", state, campaign, "x")["verdict"] == "in_progress"


def test_a_soaks_rounds_store_their_nodes_once(campaign, tmp_path):
    """Every round of a soak runs on the same nodes: the state file names them once, not once a round, and
    reads back equal; a round on other nodes names its own."""
    d = tmp_path / "camp"
    hosts = [f"node{i:04d}" for i in range(1000)]
    state = CampaignState.new(campaign, hosts, T0)
    for i in range(1, 101):
        state.record_round("soak", RoundRecord(i, "a", "b", f"runs/soak-round-{i:02d}", list(hosts)), T0)
    state.record_round("soak", RoundRecord(101, "a", "b", "runs/soak-round-101", hosts[:10]), T0)
    save_state(d, state)
    rows = json.loads((d / STATE_NAME).read_text())["soak_rounds"]["soak"]
    assert [("hosts" in r, r.get("same_hosts", False)) for r in rows] == [(True, False)] + [
        (False, True)
    ] * 99 + [(True, False)]
    assert (
        d / STATE_NAME
    ).stat().st_size < 400_000  # 101 rounds of 1,000 nodes: 1.4 MB naming them each round
    resumed = load_state(d, campaign.digest)
    assert resumed == state and resumed.soak_rounds["soak"][50].hosts == hosts
    assert resumed.soak_rounds["soak"][100].hosts == hosts[:10]
    rows[0]["same_hosts"], rows[0]["hosts"] = True, None
    del rows[0]["hosts"]
    doc = json.loads((d / STATE_NAME).read_text())
    doc["soak_rounds"]["soak"] = rows
    (d / STATE_NAME).write_text(json.dumps(doc))
    (d / PREVIOUS_NAME).unlink(missing_ok=True)
    with pytest.raises(RunDirError, match="first round says same_hosts"):
        load_state(d, campaign.digest)


def test_a_long_soaks_criteria_stay_small():
    """A node that drifts over 300 rounds and fails one in ten: its criteria list the first and last ten of
    each series and say how many are left out (soak-<stage>.json has them all)."""
    rounds = [
        SoakRound(
            i,
            T0 + timedelta(minutes=i),
            T0 + timedelta(minutes=i, seconds=50),
            ok=i % 10 != 0,
            reason=f"round {i}: failed",
            metrics={"gemm-flops/fp32_flops": 100.0 * (1 - 0.001 * i)},
        )
        for i in range(1, 301)
    ]
    out = soak_outcome(judge_node("h1", rounds, SoakCriteria(drift_min_rounds=6)))
    by = {c.name: c for c in out.criteria}
    drift, failed = by["gemm-flops/fp32_flops"], by["rounds"]
    assert (
        not drift.passed
        and len(drift.rounds) == 20
        and drift.rounds[:2] == (1, 2)
        and drift.rounds[-1] == 299  # round 300 failed: not in the trend
    )
    assert len(drift.measured["values"]) == 20 and drift.measured["values_left_out"] == 250
    assert drift.measured["rounds_named"] == 270
    assert len(failed.measured["reasons"]) == 20 and failed.measured["reasons_left_out"] == 10
    assert len(json.dumps([c.to_dict() for c in out.criteria])) < 6000
