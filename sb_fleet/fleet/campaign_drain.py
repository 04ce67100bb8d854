"""``sb-fleet drain CAMPAIGN_DIR``: a campaign's verdict into Slurm. Every node the campaign rejected or
quarantined is drained with the reason ``sb-fleet accept-<campaign>: <stage>: <why>`` (the stage that held
it out and its first finding, under 256 characters); ``--resume`` resumes the nodes sb-fleet drained that
the campaign accepted. A node drained or down for another reason is left alone, as ``sb-fleet drain RUN``
does (:mod:`sb_fleet.fleet.slurm_drain`: the same plan, the same ``scontrol`` argument vectors); every
action is appended to ``CAMPAIGN_DIR/slurm-actions.json``.

A campaign still running drains nothing: its nodes' verdicts are not final (``in_progress``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sb_fleet.campaign.campaign_state import CampaignState, load_state
from sb_fleet.config.campaign_spec import load_campaign
from sb_fleet.errors import RunDirError, SbFleetError, UsageError
from sb_fleet.fleet.campaign_run import INPUTS_NAME
from sb_fleet.fleet.slurm_drain import Action, action_lines, node_states, plan_actions, run_actions
from sb_fleet.safe_files import atomic_write_json

ACTIONS_NAME = "slurm-actions.json"


def is_campaign_dir(path: Path) -> bool:
    return (Path(path) / INPUTS_NAME).is_file()


def campaign_verdict(state: CampaignState) -> tuple[dict[str, str], set[str]]:
    """(node -> the finding its drain reason names, for the rejected and quarantined; the accepted)."""
    failed = {
        h: f"{n.held_at}: {n.reason}" if n.held_at else n.reason or n.status
        for h, n in state.hosts.items()
        if n.status in ("rejected", "quarantined")
    }
    return failed, {h for h, n in state.hosts.items() if n.status == "accepted"}


def _slurm_tools(config: Path) -> tuple[str, str]:
    from sb_fleet.config.fleet_config import Config
    from sb_fleet.config.yamlsrc import load_yaml

    try:
        data, _ = load_yaml(config, "config")
        slurm = Config.model_validate(data).slurm
    except (OSError, ValueError, SbFleetError):  # the campaign checked it when it started: Slurm's defaults
        return "sinfo", "scontrol"
    return slurm.sinfo, slurm.scontrol


def _record(d: Path, actions: list[Action], dry_run: bool) -> list[dict[str, Any]]:
    done = run_actions(actions, dry_run)
    path = d / ACTIONS_NAME
    try:
        log = json.loads(path.read_text())
    except (OSError, ValueError):
        log = {"schema_version": 1, "actions": []}
    log["actions"] = [*log.get("actions", []), *done]  # only ever grows
    atomic_write_json(path, log)
    return done


def drain_campaign(path: Path, resume: bool, dry_run: bool) -> tuple[int, str]:
    """(exit code, text to print); 3 where Slurm refused an action."""
    d = Path(path)
    try:
        inputs = json.loads((d / INPUTS_NAME).read_text())
        config = Path(inputs["config"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise RunDirError(f"{d / INPUTS_NAME}: damaged ({type(exc).__name__}: {exc})") from None
    campaign = load_campaign(d / "campaign.yaml")
    state = load_state(d, campaign.digest)
    if not state.finished:
        raise UsageError(
            f"{d}: the campaign is not finished (its verdicts are in progress); drain once it has ended"
        )
    sinfo, scontrol = _slurm_tools(config)
    failed, passed = campaign_verdict(state)
    wanted = sorted(set(failed) | (passed if resume else set()))
    nodes = node_states(wanted, sinfo) if wanted else {}
    actions = plan_actions(f"accept-{d.resolve().name}", failed, passed, nodes, resume, scontrol)
    done = _record(d, actions, dry_run)
    lines, bad = action_lines(done, dry_run)
    if not done:
        lines.append(
            "nothing to do: no rejected or quarantined node"
            + (" and no sb-fleet-drained node accepted" if resume else "")
        )
    lines.append(f"actions recorded in {d / ACTIONS_NAME}")
    return (3 if bad else 0), "\n".join(lines)
