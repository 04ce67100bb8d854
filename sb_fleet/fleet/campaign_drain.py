"""``sb-fleet drain CAMPAIGN_DIR``: a campaign's verdict into Slurm. Every node the campaign rejected or
quarantined is drained with the reason ``sb-fleet accept-<campaign>: <stage>: <why>`` (the stage that held
it out and its first finding, under 256 characters); ``--resume`` resumes the nodes sb-fleet drained that
the campaign accepted. A node drained or down for another reason is left alone, as ``sb-fleet drain RUN``
does (:mod:`sb_fleet.fleet.slurm_drain`: the same plan, the same ``scontrol`` argument vectors); every
action is appended to ``CAMPAIGN_DIR/slurm-actions.json``.

A campaign still running drains nothing: its nodes' verdicts are not final (``in_progress``). A campaign
whose file says ``drain: on_reject`` drains a node itself as soon as a stage rejects or quarantines it
(:func:`drain_on_reject`, called by :mod:`sb_fleet.fleet.campaign_run` after each stage's decision), with
the same reason and the same log; a node drained that way is left alone here (already drained by this
campaign), so nothing is drained twice.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sb_fleet import bounded_json
from sb_fleet.bounded_json import read_or_none
from sb_fleet.campaign.campaign_state import INPUTS_NAME, CampaignState, NodeState, load_state
from sb_fleet.config.campaign_spec import CampaignSpec, load_campaign
from sb_fleet.errors import RunDirError, SbFleetError, UsageError
from sb_fleet.fleet.slurm_drain import Action, action_lines, node_states, plan_actions, run_actions
from sb_fleet.safe_files import atomic_write_json

ACTIONS_NAME = "slurm-actions.json"


def is_campaign_dir(path: Path) -> bool:
    return (Path(path) / INPUTS_NAME).is_file()


def run_id(directory: Path) -> str:
    """The campaign's name in its drain reasons: ``accept-<the directory's name>``."""
    return f"accept-{Path(directory).resolve().name}"


def finding(node: NodeState) -> str:
    """What a held-out node's drain reason names: the stage that held it out and why."""
    return f"{node.held_at}: {node.reason}" if node.held_at else node.reason or node.status


def campaign_verdict(state: CampaignState) -> tuple[dict[str, str], set[str]]:
    """(node -> the finding its drain reason names, for the rejected and quarantined; the accepted)."""
    failed = {h: finding(n) for h, n in state.hosts.items() if n.status in ("rejected", "quarantined")}
    return failed, {h for h, n in state.hosts.items() if n.status == "accepted"}


def settled(actions: list[dict[str, Any]]) -> set[str]:
    """The nodes a campaign's ``slurm-actions.json`` has a finished drain decision for: drained (scontrol
    said yes) or left alone. A drain scontrol refused, or never recorded, is not settled: tried again."""
    return {
        str(a.get("node"))
        for a in actions
        if isinstance(a, dict)
        and not a.get("dry_run")
        and (a.get("verb") == "leave" or (a.get("verb") == "drain" and a.get("rc") == 0))
    }


def pending_drains(state: CampaignState, spec: CampaignSpec, done: set[str]) -> dict[str, str]:
    """Pure: under ``drain: on_reject``, the nodes to drain now (node -> finding, as ``sb-fleet drain DIR``
    names it): every node held out (or rejected) or quarantined by a stage whose policy drains, that is not
    in ``done`` (:func:`settled`). Recomputed from the state after every stage, so a drain lost to a kill or
    to Slurm not answering is made at the next one (or when the campaign is resumed)."""
    draining = {s.name for s in spec.stages if spec.drains(s)}
    return {
        h: finding(n)
        for h, n in sorted(state.hosts.items())
        if n.status in ("held_out", "rejected", "quarantined") and n.held_at in draining and h not in done
    }


def _slurm_tools(config: Path) -> tuple[str, str]:
    from sb_fleet.config.fleet_config import Config
    from sb_fleet.config.yamlsrc import load_yaml

    try:
        data, _ = load_yaml(config, "config")
        slurm = Config.model_validate(data).slurm
    except (OSError, ValueError, SbFleetError):  # the campaign checked it when it started: Slurm's defaults
        return "sinfo", "scontrol"
    return slurm.sinfo, slurm.scontrol


def _log(d: Path) -> dict[str, Any]:
    log = read_or_none(d / ACTIONS_NAME)
    return log if isinstance(log, dict) else {"schema_version": 1, "actions": []}


def _record(d: Path, actions: list[Action], dry_run: bool, by: str | None = None) -> list[dict[str, Any]]:
    done = run_actions(actions, dry_run)
    if by:
        done = [rec | {"by": by} for rec in done]
    log = _log(d)
    log["actions"] = [*log.get("actions", []), *done]  # only ever grows
    atomic_write_json(d / ACTIONS_NAME, log)
    return done


def drain_on_reject(directory: Path, config: Path, state: CampaignState, spec: CampaignSpec) -> list[str]:
    """``drain: on_reject`` while the campaign runs: drain every node :func:`pending_drains` names, with
    ``sb-fleet drain DIR``'s reason, plan and log (``by: accept drain on_reject`` on each record). Slurm
    not answering, refusing or missing is a warning line, never a stop: the lines to say."""
    d = Path(directory)
    actions = _log(d).get("actions")
    failed = pending_drains(state, spec, settled(actions if isinstance(actions, list) else []))
    if not failed:
        return []
    sinfo, scontrol = _slurm_tools(config)
    try:
        nodes = node_states(sorted(failed), sinfo)
        plan = plan_actions(run_id(d), failed, set(), nodes, False, scontrol)
        done = _record(d, plan, False, by="accept drain on_reject")
    except (OSError, ValueError, SbFleetError) as exc:
        return [
            f"warning: drain on_reject: {', '.join(sorted(failed))} not drained ({exc}); tried again "
            "after the next stage, or sb-fleet drain DIR once the campaign has ended"
        ]
    lines, _bad = action_lines(done, False)
    return [
        f"drain on_reject: {line}" if " FAILED " not in line else f"warning: drain on_reject: {line}"
        for line in lines
    ]


def drain_campaign(path: Path, resume: bool, dry_run: bool) -> tuple[int, str]:
    """(exit code, text to print); 3 where Slurm refused an action."""
    d = Path(path)
    try:
        inputs = bounded_json.read(d / INPUTS_NAME)
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
    actions = plan_actions(run_id(d), failed, passed, nodes, resume, scontrol)
    done = _record(d, actions, dry_run)
    lines, bad = action_lines(done, dry_run)
    if not done:
        lines.append(
            "nothing to do: no rejected or quarantined node"
            + (" and no sb-fleet-drained node accepted" if resume else "")
        )
    lines.append(f"actions recorded in {d / ACTIONS_NAME}")
    return (3 if bad else 0), "\n".join(lines)
