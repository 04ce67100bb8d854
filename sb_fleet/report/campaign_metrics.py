"""A campaign's progress as Prometheus series: ``campaign.prom`` in the campaign directory, rewritten after
every stage, attempt and soak round (and, with ``accept --textfile-dir DIR``, ``DIR/sb_fleet_campaign_<name>.prom``
for node_exporter's textfile collector), so a dashboard follows a days-long campaign and an alert fires on a
rejected node or a soak that stopped advancing.

Families (every one labelled ``campaign``: the campaign directory's name, or ``--fleet``):

- ``sb_fleet_campaign_info{campaign, file, digest}`` 1;
- ``sb_fleet_campaign_finished{campaign}`` 0 or 1; ``sb_fleet_campaign_updated_timestamp_seconds``: when
  the state last changed (a soak whose rounds stopped shows it not moving);
- ``sb_fleet_campaign_nodes{campaign, status}``: nodes per status (active, held_out, quarantined, then
  accepted, rejected), every status present, 0 where none;
- ``sb_fleet_campaign_node_status{campaign, host, status, stage_reached, failed_stage}`` 1 per node;
- ``sb_fleet_campaign_stage_done{campaign, stage, kind}`` 0 or 1, in the campaign file's order;
- ``sb_fleet_campaign_soak_rounds{campaign, stage}`` rounds finished and
  ``sb_fleet_campaign_soak_rounds_planned{campaign, stage}`` the soak's rounds.

The text is :class:`sb_fleet.exposition.Series`'s, as every other series of sb-fleet (names checked, label
values made safe).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from sb_fleet.campaign.campaign_state import CampaignState
from sb_fleet.config.campaign_spec import Campaign
from sb_fleet.exposition import Series
from sb_fleet.safe_files import atomic_write_bytes

PROM_NAME = "campaign.prom"
STATUSES = ("active", "held_out", "quarantined", "accepted", "rejected")


def _ts(s: str | None) -> float | None:
    try:
        return datetime.fromisoformat(s).timestamp() if s else None
    except ValueError:
        return None


def campaign_series(state: CampaignState, campaign: Campaign, name: str) -> Series:
    """The campaign's progress as it stands in ``state``."""
    s = Series()
    c = {"campaign": name}
    s.declare(
        "sb_fleet_campaign_info",
        "The acceptance campaign (always 1): its file and the file's sha256.",
        ("campaign", "file", "digest"),
    )
    s.add("sb_fleet_campaign_info", {**c, "file": str(campaign.path), "digest": campaign.digest}, 1)
    s.declare(
        "sb_fleet_campaign_finished", "1 when the campaign's last stage is done, else 0.", ("campaign",)
    )
    s.add("sb_fleet_campaign_finished", c, 1 if state.finished else 0)
    s.declare(
        "sb_fleet_campaign_updated_timestamp_seconds",
        "When the campaign's state last changed (Unix time): a stage, an attempt or a soak round ended.",
        ("campaign",),
    )
    updated = _ts(state.updated)
    if updated is not None:
        s.add("sb_fleet_campaign_updated_timestamp_seconds", c, updated)
    s.declare(
        "sb_fleet_campaign_nodes",
        "Nodes of the campaign per status: active, held_out, quarantined; at the end accepted, rejected.",
        ("campaign", "status"),
    )
    counts = dict.fromkeys(STATUSES, 0)
    for node in state.hosts.values():
        counts[node.status] = counts.get(node.status, 0) + 1
    for status, n in counts.items():
        s.add("sb_fleet_campaign_nodes", {**c, "status": status}, n)
    s.declare(
        "sb_fleet_campaign_node_status",
        "Each node of the campaign (always 1): its status, the last stage it entered, the stage that held it out.",
        ("campaign", "host", "status", "stage_reached", "failed_stage"),
    )
    for host, node in state.hosts.items():
        s.add(
            "sb_fleet_campaign_node_status",
            {
                **c,
                "host": host,
                "status": node.status,
                "stage_reached": node.stage_reached or "",
                "failed_stage": node.held_at or "",
            },
            1,
        )
    s.declare(
        "sb_fleet_campaign_stage_done",
        "1 when the stage is done for every node that entered it, else 0.",
        ("campaign", "stage", "kind"),
    )
    s.declare(
        "sb_fleet_campaign_soak_rounds", "Soak rounds finished (each recorded once).", ("campaign", "stage")
    )
    s.declare(
        "sb_fleet_campaign_soak_rounds_planned",
        "Rounds of the soak: its duration over its round.",
        ("campaign", "stage"),
    )
    for st in campaign.spec.stages:
        s.add(
            "sb_fleet_campaign_stage_done",
            {**c, "stage": st.name, "kind": st.kind},
            1 if st.name in state.stages_done else 0,
        )
        if st.kind == "soak":
            s.add("sb_fleet_campaign_soak_rounds", {**c, "stage": st.name}, len(state.rounds_done(st.name)))
            s.add("sb_fleet_campaign_soak_rounds_planned", {**c, "stage": st.name}, st.rounds)
    return s


def textfile_path(directory: Path, name: str) -> Path:
    """The campaign's file in a node_exporter textfile directory."""
    safe = "".join(ch if ch.isalnum() or ch in "_-" else "_" for ch in name)
    return Path(directory) / f"sb_fleet_campaign_{safe}.prom"


def write_campaign_series(
    directory: Path, state: CampaignState, campaign: Campaign, name: str, textfile_dir: Path | None = None
) -> list[Path]:
    """``campaign.prom`` in the campaign directory and, with ``textfile_dir``, the textfile collector's file;
    each written atomically (a temp file renamed: node_exporter never reads half a file)."""
    data = campaign_series(state, campaign, name).render()
    out = [Path(directory) / PROM_NAME]
    atomic_write_bytes(out[0], data)
    if textfile_dir is not None:
        out.append(textfile_path(textfile_dir, name))
        atomic_write_bytes(out[1], data, mode=0o644)
    return out
