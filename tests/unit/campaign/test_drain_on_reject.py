"""``drain: on_reject``'s decision (sb_fleet.fleet.campaign_drain.pending_drains, settled and slurm_drain's
plan): which nodes a running campaign drains after a stage, with which reason, and never twice;
tests/integration/test_slurm.py drains a running campaign's rejected node in a real Slurm."""

from __future__ import annotations

import pytest

from sb_fleet.campaign.campaign_state import CampaignState
from sb_fleet.campaign.gating import StageOutcome, entrants, gate_stage
from sb_fleet.config.campaign_spec import CampaignError, parse_campaign
from sb_fleet.fleet.campaign_drain import pending_drains, run_id, settled
from sb_fleet.fleet.slurm_drain import NodeState, plan_actions

from .test_campaign_plan import T0

TEXT = """\
version: 1
drain: on_reject
stages:
  - {name: sanity, kind: sanity}
  - {name: single, kind: single_node, benchmarks: [gemm-flops], on_failure: retry_once}
  - {name: fabric, kind: fabric, benchmarks: [nccl-bw], on_failure: quarantine}
  - {name: soak, kind: soak, benchmarks: [gemm-flops], duration: 5m, round: 1m}
"""
HOSTS = ["h1", "h2", "h3", "h4", "h5"]


def _campaign(tmp_path, text: str = TEXT):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return parse_campaign(text, p)


def _stage(c, state: CampaignState, name: str, failing: dict[str, str], attempt: int = 1):
    st = c.spec.stage(name)
    ran = entrants(c.spec, st, state.status_map(), state.passed_map())
    if attempt == 2:
        ran = tuple(failing)
    state.start_stage(name, list(ran), attempt, T0)
    outs = {h: StageOutcome(h, h not in failing, failing.get(h, "")) for h in ran}
    d = gate_stage(st, ran, outs, attempt)
    state.apply(d, T0)
    return d


def test_the_key_campaign_wide_and_per_stage(tmp_path):
    c = _campaign(tmp_path)
    assert c.spec.drain == "on_reject" and all(c.spec.drains(s) for s in c.spec.stages)
    quiet = _campaign(tmp_path, TEXT.replace("drain: on_reject\n", ""))
    assert quiet.spec.drain == "never" and not any(quiet.spec.drains(s) for s in quiet.spec.stages)
    # a fabric pair can fail on its partner's link: that stage's quarantined nodes wait for a re-test
    mixed = _campaign(
        tmp_path, TEXT.replace("on_failure: quarantine}", "on_failure: quarantine, drain: never}")
    )
    assert [mixed.spec.drains(s) for s in mixed.spec.stages] == [True, True, False, True]
    only = _campaign(
        tmp_path,
        TEXT.replace("drain: on_reject\n", "").replace("kind: sanity}", "kind: sanity, drain: on_reject}"),
    )
    assert [only.spec.drains(s) for s in only.spec.stages] == [True, False, False, False]
    with pytest.raises(CampaignError, match=r"line 2, column 8, field drain: .*'never' or 'on_reject'"):
        _campaign(tmp_path, TEXT.replace("drain: on_reject", "drain: always"))


def test_a_node_is_drained_once_the_stage_holding_it_out_has_decided(tmp_path):
    c = _campaign(tmp_path)
    state = CampaignState.new(c, HOSTS, T0)
    _stage(c, state, "sanity", {"h5": "gpu.row_remap: remap pending"})
    assert pending_drains(state, c.spec, set()) == {"h5": "sanity: gpu.row_remap: remap pending"}
    state.finish_stage("sanity", T0)
    # retry_once: the first failure is a retry, not a rejection: nothing new to drain until attempt 2
    _stage(c, state, "single", {"h4": "gemm slow", "h3": "gemm slow"})
    assert pending_drains(state, c.spec, {"h5"}) == {}
    _stage(c, state, "single", {"h4": "gemm slow again"}, attempt=2)
    assert pending_drains(state, c.spec, {"h5"}) == {"h4": "single: gemm slow again"}
    state.finish_stage("single", T0)
    _stage(c, state, "fabric", {"h2": "nccl-bw: verdict fail"})  # quarantined: drained too
    assert pending_drains(state, c.spec, {"h5", "h4"}) == {"h2": "fabric: nccl-bw: verdict fail"}
    # at the end the held-out are rejected: the same findings, as sb-fleet drain DIR names them
    state.finish(T0)
    assert pending_drains(state, c.spec, set()) == {
        "h2": "fabric: nccl-bw: verdict fail",
        "h4": "single: gemm slow again",
        "h5": "sanity: gpu.row_remap: remap pending",
    }
    mixed = _campaign(
        tmp_path, TEXT.replace("on_failure: quarantine}", "on_failure: quarantine, drain: never}")
    )
    assert set(pending_drains(state, mixed.spec, set())) == {"h4", "h5"}


def test_settled_means_drained_or_left_alone_for_real():
    log = [
        {"node": "a", "verb": "drain", "rc": 0, "dry_run": False},
        {"node": "b", "verb": "drain", "rc": 1, "dry_run": False},  # scontrol refused: tried again
        {"node": "c", "verb": "leave", "dry_run": False},  # another's, or not a Slurm node
        {"node": "d", "verb": "drain", "dry_run": True},  # only printed
        {"node": "e", "verb": "resume", "rc": 0, "dry_run": False},
        "damaged",
    ]
    assert settled(log) == {"a", "c"}


def test_a_node_this_campaign_drained_is_not_drained_again(tmp_path):
    rid = run_id(tmp_path / "rack7")
    assert rid == "accept-rack7"
    nodes = {
        "n1": NodeState("n1", "drained", f"sb-fleet {rid}: single: gemm slow"),  # drained on reject
        "n2": NodeState("n2", "draining", f"sb-fleet {rid}7: soak: other campaign"),  # accept-rack77's
        "n3": NodeState("n3", "drained", "admin maintenance"),
        "n4": NodeState("n4", "idle"),
    }
    failed = {h: "x: y" for h in nodes}
    verbs = {a.node: (a.verb, a.why) for a in plan_actions(rid, failed, set(), nodes, False)}
    assert verbs["n1"] == ("leave", f"already drained by sb-fleet {rid} (sb-fleet {rid}: single: gemm slow)")
    assert verbs["n2"][0] == "drain" and verbs["n4"][0] == "drain"
    assert verbs["n3"][0] == "leave" and "another reason" in verbs["n3"][1]


def test_slurm_missing_is_a_warning_and_the_drain_is_tried_again(tmp_path):
    """No sinfo where the config says: one warning line, nothing recorded (the node is still pending, so
    the next stage or a resume tries again), never an exception that would stop the campaign."""
    from sb_fleet.fleet.campaign_drain import drain_on_reject

    c = _campaign(tmp_path)
    state = CampaignState.new(c, HOSTS, T0)
    _stage(c, state, "sanity", {"h5": "gpu.row_remap: remap pending"})
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(
        f"version: v0.4\nsuperbench: {{benchmarks: {{}}}}\nslurm: {{sinfo: {tmp_path / 'no-sinfo'}, scontrol: {tmp_path / 'no-scontrol'}}}\n"
    )
    d = tmp_path / "rack7"
    d.mkdir()
    lines = drain_on_reject(d, cfg, state, c.spec)
    assert len(lines) == 1 and lines[0].startswith("warning: drain on_reject: h5 not drained ("), lines
    assert "not found" in lines[0] and not (d / "slurm-actions.json").exists()
    assert (
        drain_on_reject(d, cfg, state, _campaign(tmp_path, TEXT.replace("drain: on_reject\n", "")).spec) == []
    )
