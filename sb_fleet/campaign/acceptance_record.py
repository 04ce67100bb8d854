"""What a campaign hands over: per node ``acceptance/<host>.json`` and the campaign's summary.

:func:`node_record` and :func:`campaign_summary` are pure (dicts from the state); :func:`write_records`
writes them with the one atomic writer. A node's record says its verdict (accepted, rejected, quarantined;
``in_progress`` before the campaign ends), the stage it reached, the stage that held it out and why, every
criterion it was judged on with the measured values, the evidence paths, its timeline, and what judged it:
the campaign file's digest, sb-fleet's and the suite's versions.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path
from typing import Any

from sb_fleet import __version__
from sb_fleet.campaign.campaign_state import CampaignState, NodeState
from sb_fleet.config.campaign_spec import Campaign, format_duration
from sb_fleet.safe_files import atomic_write_json, safe_name

RECORD_SCHEMA_VERSION = 1
ACCEPTANCE_DIR = "acceptance"
SUMMARY_NAME = "campaign-summary.json"
VERDICTS = {
    "accepted": "accepted",
    "rejected": "rejected",
    "held_out": "rejected",
    "quarantined": "quarantined",
    "active": "in_progress",
}


def tool_version() -> str:
    """sb-fleet's installed version (package metadata), else the source tree's ``__version__``."""
    try:
        return metadata.version("sb-fleet")
    except metadata.PackageNotFoundError:
        return __version__


def _criteria(node: NodeState) -> list[dict[str, Any]]:
    """Every criterion of the node's last attempt at each stage it entered (earlier attempts stay in the
    timeline)."""
    last: dict[str, Any] = {}
    for rec in node.timeline:
        last[rec.stage] = rec
    return [
        {"stage": stage, "attempt": rec.attempt, **c} for stage, rec in last.items() for c in rec.criteria
    ]


def node_record(
    host: str, state: CampaignState, campaign: Campaign, written: str, suite_version: str | None = None
) -> dict[str, Any]:
    """The content of ``acceptance/<host>.json``; ``written`` is the ISO time it is written."""
    node = state.hosts[host]
    evidence = sorted({p for rec in node.timeline for p in rec.evidence})
    starts = [r.start for r in node.timeline]
    ends = [r.end for r in node.timeline if r.end]
    return {
        "schema_version": RECORD_SCHEMA_VERSION,
        "host": host,
        "verdict": VERDICTS[node.status],
        "stage_reached": node.stage_reached,
        "stages_passed": list(node.passed),
        "failed_stage": node.held_at,
        "reason": node.reason,
        "criteria": _criteria(node),
        "evidence": evidence,
        "timeline": [
            {
                "stage": r.stage,
                "attempt": r.attempt,
                "start": r.start,
                "end": r.end,
                "outcome": r.outcome,
                "reason": r.reason,
            }
            for r in node.timeline
        ],
        "started": min(starts) if starts else None,
        "ended": max(ends) if ends else None,
        "written": written,
        "campaign": {
            "file": str(campaign.path),
            "digest": campaign.digest,
            "description": campaign.spec.description,
            "started": state.created,
            "finished": state.finished,
        },
        "versions": {"sb_fleet": tool_version(), "suite": suite_version},
    }


def campaign_summary(state: CampaignState, campaign: Campaign, written: str) -> dict[str, Any]:
    """The campaign at a glance: its stages, the soak rounds run, the verdict counts, and per node its
    verdict and timeline (stage, attempt, start, end, outcome)."""
    counts: dict[str, int] = {}
    nodes: dict[str, Any] = {}
    for host, node in sorted(state.hosts.items()):
        verdict = VERDICTS[node.status]
        counts[verdict] = counts.get(verdict, 0) + 1
        nodes[host] = {
            "verdict": verdict,
            "stage_reached": node.stage_reached,
            "failed_stage": node.held_at,
            "reason": node.reason,
            "timeline": [
                {"stage": r.stage, "attempt": r.attempt, "start": r.start, "end": r.end, "outcome": r.outcome}
                for r in node.timeline
            ],
        }
    stages = []
    for st in campaign.spec.stages:
        entry: dict[str, Any] = {"name": st.name, "kind": st.kind, "done": st.name in state.stages_done}
        if st.kind == "soak" and st.duration is not None and st.round is not None:
            done = state.soak_rounds.get(st.name, [])
            entry |= {
                "duration": format_duration(st.duration),
                "round": format_duration(st.round),
                "rounds_planned": st.rounds,
                "rounds_done": len(done),
                "rounds": [
                    {"index": r.index, "start": r.start, "end": r.end, "run_dir": r.run_dir, "hosts": r.hosts}
                    for r in done
                ],
            }
        stages.append(entry)
    return {
        "schema_version": RECORD_SCHEMA_VERSION,
        "campaign": {
            "file": str(campaign.path),
            "digest": campaign.digest,
            "description": campaign.spec.description,
        },
        "started": state.created,
        "updated": state.updated,
        "finished": state.finished,
        "written": written,
        "verdicts": counts,
        "stages": stages,
        "nodes": nodes,
        "versions": {"sb_fleet": tool_version()},
    }


def write_records(
    directory: Path, state: CampaignState, campaign: Campaign, written: str, suite_version: str | None = None
) -> list[Path]:
    """``acceptance/<host>.json`` for every node and ``campaign-summary.json``, each written atomically;
    returns the paths written (the summary last)."""
    directory = Path(directory)
    out = []
    for host in sorted(state.hosts):
        path = directory / ACCEPTANCE_DIR / f"{safe_name(host)}.json"
        atomic_write_json(path, node_record(host, state, campaign, written, suite_version))
        out.append(path)
    summary = directory / SUMMARY_NAME
    atomic_write_json(summary, campaign_summary(state, campaign, written))
    out.append(summary)
    return out
