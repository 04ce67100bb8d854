"""A finished campaign's verdict as Slurm drains (sb_fleet.fleet.campaign_drain): which nodes, and the
reason each is drained with; tests/integration/test_accept.py drains a real campaign in a real Slurm."""

from __future__ import annotations

from sb_fleet.campaign.campaign_state import CampaignState

from .test_campaign_flow import HOSTS, T0, campaign, run_until_soak  # noqa: F401 (a fixture)


def test_the_drain_names_the_stage_and_why(campaign):  # noqa: F811
    from sb_fleet.fleet.campaign_drain import campaign_verdict

    state = CampaignState.new(campaign, HOSTS, T0)
    run_until_soak(campaign, state)
    state.finish(T0)
    failed, passed = campaign_verdict(state)
    assert passed == {"h1", "h3"}
    assert failed == {
        "h2": "fabric: no outcome from stage fabric",
        "h4": "single: gemm slow again",
        "h5": "sanity: gpu.row_remap: remap pending",
    }
