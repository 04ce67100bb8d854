"""A campaign's progress as Prometheus series (sb_fleet.report.campaign_metrics), parsed back with
prometheus_client's own parser."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from sb_fleet.campaign.campaign_state import CampaignState, RoundRecord
from sb_fleet.report.campaign_metrics import PROM_NAME, campaign_series, textfile_path, write_campaign_series

from .test_campaign_flow import HOSTS, T0, campaign, run_until_soak  # noqa: F401 (a fixture)


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def test_progress_mid_soak_and_at_the_end(campaign, tmp_path):  # noqa: F811
    state = CampaignState.new(campaign, HOSTS, T0)
    now = run_until_soak(campaign, state)
    state.start_stage("soak", ["h1", "h3"], 1, now)
    state.record_round("soak", RoundRecord(1, "a", "b", "runs/soak-round-01", ["h1", "h3"]), now)
    got = _samples(campaign_series(state, campaign, "rack7").render().decode())
    c = (("campaign", "rack7"),)
    assert got[("sb_fleet_campaign_finished", c)] == 0
    assert got[("sb_fleet_campaign_soak_rounds", (("campaign", "rack7"), ("stage", "soak")))] == 1
    assert got[("sb_fleet_campaign_soak_rounds_planned", (("campaign", "rack7"), ("stage", "soak")))] == 5
    nodes = {k[1][1][1]: v for k, v in got.items() if k[0] == "sb_fleet_campaign_nodes"}
    assert nodes == {"active": 2, "held_out": 2, "quarantined": 1, "accepted": 0, "rejected": 0}
    done = {dict(k[1])["stage"]: v for k, v in got.items() if k[0] == "sb_fleet_campaign_stage_done"}
    assert done == {"sanity": 1, "single": 1, "fabric": 1, "soak": 0}
    h4 = [dict(k[1]) for k in got if k[0] == "sb_fleet_campaign_node_status" and dict(k[1])["host"] == "h4"]
    assert h4 == [
        {
            "campaign": "rack7",
            "host": "h4",
            "status": "held_out",
            "stage_reached": "single",
            "failed_stage": "single",
        }
    ]
    assert got[("sb_fleet_campaign_updated_timestamp_seconds", c)] == now.timestamp()

    state.finish(now)
    textfiles = tmp_path / "textfile"
    textfiles.mkdir()
    paths = write_campaign_series(tmp_path / "camp", state, campaign, "rack 7/x", textfiles)
    assert paths == [tmp_path / "camp" / PROM_NAME, textfile_path(textfiles, "rack 7/x")]
    assert paths[1].name == "sb_fleet_campaign_rack_7_x.prom" and oct(paths[1].stat().st_mode)[-3:] == "644"
    got = _samples(paths[1].read_text())
    assert got[("sb_fleet_campaign_finished", (("campaign", "rack 7/x"),))] == 1
    nodes = {dict(k[1])["status"]: v for k, v in got.items() if k[0] == "sb_fleet_campaign_nodes"}
    assert nodes["accepted"] == 2 and nodes["rejected"] == 2 and nodes["active"] == 0
