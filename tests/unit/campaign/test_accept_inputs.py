"""``sb-fleet accept``'s inputs and exit code without a fleet: what --resume refuses (another campaign file,
a changed config, a directory that is no campaign's), a new campaign refused over an existing one, a run
directory never reused, and the exit code from the nodes' statuses. The stages themselves run on a real
fleet in tests/integration/test_accept.py."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from sb_fleet.campaign.campaign_state import CampaignState, save_state
from sb_fleet.config.campaign_spec import load_campaign
from sb_fleet.errors import RunDirError, UsageError
from sb_fleet.exits import EXIT_FAILED, EXIT_INFRA, EXIT_OK
from sb_fleet.fleet.campaign_run import INPUTS_NAME, AcceptOptions, _fresh, _resume, exit_code, run_campaign
from sb_fleet.safe_files import sha256_file

CAMPAIGN = """\
version: 1
stages:
  - {name: sanity, kind: sanity}
"""
T0 = datetime(2026, 11, 29, 8, 0, tzinfo=timezone.utc)


@pytest.fixture
def started(tmp_path):
    """A campaign directory as accept leaves it once started (inputs recorded, state written)."""
    camp, cfg, inv = tmp_path / "c.yaml", tmp_path / "cfg.yaml", tmp_path / "hosts.ini"
    camp.write_text(CAMPAIGN)
    cfg.write_text("version: v0.4\n")
    inv.write_text("h1\nh2\n")
    d = tmp_path / "acc"
    campaign = load_campaign(camp)
    save_state(d, CampaignState.new(campaign, ["h1", "h2"], T0))
    (d / INPUTS_NAME).write_text(
        json.dumps(
            {
                "schema_version": 1,
                "campaign": str(camp),
                "config": str(cfg),
                "config_digest": sha256_file(cfg),
                "inventory": str(inv),
                "history": None,
            }
        )
    )
    return d, camp, cfg, inv


def test_resume_reads_the_inputs_back(started):
    d, camp, cfg, inv = started
    ctx = _resume(AcceptOptions(directory=d, resume=True, progress=False))
    assert ctx.campaign.path == camp and ctx.config_path == cfg and ctx.inventory_path == inv
    assert sorted(ctx.state.hosts) == ["h1", "h2"]


def test_resume_refuses_another_campaign_file(started):
    d, camp, _, _ = started
    camp.write_text(CAMPAIGN + "description: edited\n")
    with pytest.raises(RunDirError, match="digest"):
        _resume(AcceptOptions(directory=d, resume=True, progress=False))


def test_resume_refuses_a_changed_config(started):
    d, _, cfg, _ = started
    cfg.write_text("version: v0.4\nfleet: {forks: 2}\n")
    with pytest.raises(RunDirError, match="the config changed"):
        _resume(AcceptOptions(directory=d, resume=True, progress=False))


def test_resume_takes_no_other_inputs_and_needs_a_campaign_directory(started, tmp_path):
    d, camp, _, _ = started
    with pytest.raises(UsageError, match="leave out"):
        _resume(AcceptOptions(directory=d, campaign=camp, resume=True))
    with pytest.raises(RunDirError, match="not a campaign directory"):
        _resume(AcceptOptions(directory=tmp_path / "nothing", resume=True))


def test_a_new_campaign_is_not_started_over_an_existing_one(started):
    d, camp, cfg, inv = started
    with pytest.raises(UsageError, match="already in this directory"):
        run_campaign(AcceptOptions(directory=d, campaign=camp, config=cfg, inventory=inv, progress=False))


def test_a_run_directory_is_never_reused(tmp_path):
    p = tmp_path / "soak-round-03"
    assert _fresh(p) == p
    p.mkdir()
    assert _fresh(p) == Path(f"{p}.2")
    Path(f"{p}.2").mkdir()
    assert _fresh(p) == Path(f"{p}.3")


def test_exit_code_from_the_nodes(started):
    d, camp, _, _ = started
    state = CampaignState.new(load_campaign(camp), ["h1", "h2"], T0)
    state.finish(T0)
    assert exit_code(state) == EXIT_OK
    state.hosts["h2"].status, state.hosts["h2"].reason = "quarantined", "fabric all-nodes: verdict fail"
    assert exit_code(state) == EXIT_FAILED
    state.hosts["h2"].status, state.hosts["h2"].reason = "rejected", "unreachable: ssh: connection refused"
    assert exit_code(state) == EXIT_INFRA
