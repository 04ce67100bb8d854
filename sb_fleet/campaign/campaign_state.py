"""A campaign's durable state in its directory: which stages finished, which soak rounds finished (with their
run directories), and each node's status and timeline.

``campaign-state.json`` is rewritten whole after every step (:func:`save_state`) by the one atomic writer
(temp file, fsync, rename), after the previous state is renamed to ``campaign-state.prev.json``. A crash
leaves either the new file whole, or none (then :func:`load_state` reads the previous one, which loses at
most the last step: a round that finished is run again, never one half-counted), and at worst a
``.campaign-state.json.*.tmp`` that nothing reads. A state file of another campaign file (its digest) is
refused: resuming must not judge nodes against criteria they were not run under.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sb_fleet import __version__
from sb_fleet.campaign.gating import GateDecision, NodeStatus, final_status
from sb_fleet.config.campaign_spec import Campaign, CampaignSpec, Stage
from sb_fleet.errors import RunDirError
from sb_fleet.safe_files import atomic_write_json, private_dir

STATE_NAME = "campaign-state.json"
INPUTS_NAME = "accept-inputs.json"  # where the campaign's inputs are recorded (a campaign directory's mark)
PREVIOUS_NAME = "campaign-state.prev.json"
SCHEMA_VERSION = 1
MAX_STATE_BYTES = 64 << 20  # 1,000 nodes x 72 rounds of timeline is a few MB


def iso(t: datetime) -> str:
    """A timestamp as the state and the records hold it: ISO 8601 in UTC, to the second."""
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return t.astimezone(timezone.utc).isoformat(timespec="seconds")


@dataclass
class StageRecord:
    """One node's attempt at one stage: an entry of its timeline."""

    stage: str
    attempt: int
    start: str
    end: str | None = None
    outcome: str = "running"  # running, passed, failed, retry, held_out, quarantined
    reason: str = ""
    criteria: list[dict[str, Any]] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)


@dataclass
class NodeState:
    status: NodeStatus = "active"
    stage_reached: str | None = None  # the last stage it entered
    passed: list[str] = field(default_factory=list)  # the stages it passed
    held_at: str | None = None  # the stage that held it out or quarantined it
    reason: str = ""
    timeline: list[StageRecord] = field(default_factory=list)


@dataclass
class RoundRecord:
    """A soak round that finished: every node's results are in ``run_dir`` (relative to the campaign's)."""

    index: int
    start: str
    end: str
    run_dir: str
    hosts: list[str] = field(default_factory=list)
    # the round's load after its benchmarks (campaign key load:): [start, end] as the control node saw them
    # (each node's own times and telemetry: load.json in run_dir); None: no load
    load: list[str] | None = None


@dataclass
class CampaignState:
    campaign_digest: str
    campaign_file: str
    created: str
    updated: str
    hosts: dict[str, NodeState]
    stages_done: list[str] = field(default_factory=list)
    soak_rounds: dict[str, list[RoundRecord]] = field(default_factory=dict)
    finished: bool = False
    tool_version: str = __version__
    # Not stored: which file load_state read, where it was not the current one (the CLI warns).
    recovered_from: str | None = field(default=None, compare=False)

    @classmethod
    def new(cls, campaign: Campaign, hosts: list[str], now: datetime) -> CampaignState:
        if not hosts:
            raise ValueError("a campaign needs at least one node")
        return cls(
            campaign_digest=campaign.digest,
            campaign_file=str(campaign.path),
            created=iso(now),
            updated=iso(now),
            hosts={h: NodeState() for h in sorted(set(hosts))},
        )

    # -- questions a resumed campaign asks
    def status_map(self) -> dict[str, str]:
        return {h: n.status for h, n in self.hosts.items()}

    def passed_map(self) -> dict[str, list[str]]:
        return {h: list(n.passed) for h, n in self.hosts.items()}

    def next_stage(self, spec: CampaignSpec) -> Stage | None:
        """The first stage not finished (the one to resume), or None when every stage is done."""
        return next((s for s in spec.stages if s.name not in self.stages_done), None)

    def rounds_done(self, stage: str) -> set[int]:
        return {r.index for r in self.soak_rounds.get(stage, [])}

    def attempts(self, host: str, stage: str) -> int:
        return sum(1 for r in self.hosts[host].timeline if r.stage == stage and r.outcome != "running")

    # -- steps (each followed by save_state by the caller)
    def start_stage(self, stage: str, hosts: list[str], attempt: int, now: datetime) -> None:
        for h in hosts:
            node = self.hosts[h]
            node.stage_reached = stage
            node.timeline = [r for r in node.timeline if not (r.stage == stage and r.outcome == "running")]
            node.timeline.append(StageRecord(stage=stage, attempt=attempt, start=iso(now)))
        self.updated = iso(now)

    def apply(self, decision: GateDecision, now: datetime) -> None:
        """Close every entrant's running attempt at the decision's stage and update its status."""
        for host, outcome in decision.outcomes.items():
            node = self.hosts[host]
            rec = next(
                (r for r in reversed(node.timeline) if r.stage == decision.stage and r.outcome == "running"),
                None,
            )
            if rec is None:
                rec = StageRecord(stage=decision.stage, attempt=decision.attempt, start=iso(now))
                node.timeline.append(rec)
            rec.end = iso(now)
            rec.reason = outcome.reason
            rec.criteria = [c.to_dict() for c in outcome.criteria]
            rec.evidence = list(outcome.evidence)
            node.stage_reached = decision.stage
            if host in decision.advance:
                rec.outcome = "passed"
                if decision.stage not in node.passed:
                    node.passed.append(decision.stage)
            elif host in decision.retry:
                rec.outcome = "retry"
            elif host in decision.quarantined:
                rec.outcome = "quarantined"
                node.status, node.held_at, node.reason = (
                    "quarantined",
                    decision.stage,
                    decision.quarantined[host],
                )
            else:
                rec.outcome = "held_out"
                node.status, node.held_at = "held_out", decision.stage
                node.reason = decision.held_out.get(host, outcome.reason)
        self.updated = iso(now)

    def finish_stage(self, stage: str, now: datetime) -> None:
        if stage not in self.stages_done:
            self.stages_done.append(stage)
        self.updated = iso(now)

    def record_round(self, stage: str, record: RoundRecord, now: datetime) -> None:
        """A finished soak round; recording one twice is refused (a resumed soak never repeats a round)."""
        if record.index in self.rounds_done(stage):
            raise ValueError(f"soak {stage}: round {record.index} is recorded already")
        self.soak_rounds.setdefault(stage, []).append(record)
        self.soak_rounds[stage].sort(key=lambda r: r.index)
        self.updated = iso(now)

    def finish(self, now: datetime) -> None:
        """After the last stage: every node still active is accepted, every held-out one rejected."""
        for node in self.hosts.values():
            node.status = final_status(node.status)
        self.finished = True
        self.updated = iso(now)

    # -- the file
    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "campaign_digest": self.campaign_digest,
            "campaign_file": self.campaign_file,
            "created": self.created,
            "updated": self.updated,
            "hosts": {h: asdict(n) for h, n in self.hosts.items()},
            "stages_done": list(self.stages_done),
            "soak_rounds": {s: _rounds_json(rs) for s, rs in self.soak_rounds.items()},
            "finished": self.finished,
            "tool_version": self.tool_version,
        }

    @classmethod
    def from_dict(cls, d: Any, path: Path) -> CampaignState:
        if not isinstance(d, dict):
            raise RunDirError(f"{path}: not a campaign state (a JSON object is expected)")
        version = d.get("schema_version")
        if version != SCHEMA_VERSION:
            raise RunDirError(
                f"{path}: campaign state schema version {version!r}, this sb-fleet reads {SCHEMA_VERSION}; "
                f"resume it with the sb-fleet that wrote it (tool version {d.get('tool_version')!r})"
            )
        try:
            hosts = {
                str(h): NodeState(
                    status=_status(n["status"]),
                    stage_reached=n.get("stage_reached"),
                    passed=[str(s) for s in n.get("passed", [])],
                    held_at=n.get("held_at"),
                    reason=str(n.get("reason", "")),
                    timeline=[StageRecord(**r) for r in n.get("timeline", [])],
                )
                for h, n in d["hosts"].items()
            }
            rounds = {str(s): _rounds_read(rs) for s, rs in dict(d.get("soak_rounds", {})).items()}
            return cls(
                campaign_digest=str(d["campaign_digest"]),
                campaign_file=str(d["campaign_file"]),
                created=str(d["created"]),
                updated=str(d["updated"]),
                hosts=hosts,
                stages_done=[str(s) for s in d.get("stages_done", [])],
                soak_rounds=rounds,
                finished=bool(d.get("finished", False)),
                tool_version=str(d.get("tool_version", "")),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise RunDirError(
                f"{path}: not a campaign state sb-fleet wrote ({type(exc).__name__}: {exc})"
            ) from None


def _rounds_json(records: list[RoundRecord]) -> list[dict[str, Any]]:
    """A soak's rounds as stored: a round's nodes only where they differ from the round before's
    (``same_hosts`` else). A soak runs every round on the same nodes: 4,320 one-minute rounds of 1,000
    nodes would otherwise be 4.3 million names in a file rewritten after every round."""
    out: list[dict[str, Any]] = []
    prev: list[str] | None = None
    for r in records:
        e: dict[str, Any] = {"index": r.index, "start": r.start, "end": r.end, "run_dir": r.run_dir}
        if r.load is not None:
            e["load"] = list(r.load)
        if r.hosts == prev:
            e["same_hosts"] = True
        else:
            e["hosts"] = list(r.hosts)
        prev = r.hosts
        out.append(e)
    return out


def _rounds_read(rows: Any) -> list[RoundRecord]:
    out: list[RoundRecord] = []
    for row in rows:
        r = dict(row)
        if r.pop("same_hosts", False):
            if not out:
                raise ValueError("the first round says same_hosts")
            r["hosts"] = out[-1].hosts  # shared, never changed in place
        out.append(RoundRecord(**r))
    return out


def _status(s: Any) -> NodeStatus:
    final_status(s)  # raises ValueError for an unknown word
    return s


def campaign_dir(path: Path) -> Path:
    """The campaign's directory, created mode 0700 where missing, refused where others can use it."""
    return private_dir(Path(path), "the campaign directory", "give a directory of your own with --dir")


def save_state(directory: Path, state: CampaignState) -> Path:
    """Write the state (the previous one kept as ``campaign-state.prev.json``); returns the state file."""
    directory = campaign_dir(directory)
    target = directory / STATE_NAME
    if target.exists():
        os.replace(target, directory / PREVIOUS_NAME)
    atomic_write_json(target, state.to_dict())
    return target


def _read(path: Path) -> CampaignState:
    size = path.stat().st_size
    if size > MAX_STATE_BYTES:
        raise RunDirError(f"{path}: {size} bytes, more than a campaign state ({MAX_STATE_BYTES})")
    try:
        data = json.loads(path.read_bytes())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RunDirError(f"{path}: not valid JSON ({exc}); the file is damaged") from None
    return CampaignState.from_dict(data, path)


def load_state(directory: Path, digest: str) -> CampaignState:
    """The campaign's state for ``--resume``. ``digest`` is the campaign file's (:class:`Campaign`); a state
    of another file is refused. A damaged or missing state file falls back to the previous one
    (``recovered_from`` says so); with neither readable, one :class:`RunDirError` names the file."""
    directory = Path(directory)
    target, previous = directory / STATE_NAME, directory / PREVIOUS_NAME
    if not target.exists() and not previous.exists():
        raise RunDirError(
            f"{directory}: no campaign state here ({STATE_NAME}); is this the campaign's directory? "
            f"(start a campaign without --resume)"
        )
    first_error: RunDirError | None = None
    state: CampaignState | None = None
    for path in (target, previous):
        if not path.exists():
            continue
        try:
            state = _read(path)
        except RunDirError as exc:
            first_error = first_error or exc
            continue
        if path == previous:
            state.recovered_from = str(previous)
        break
    if state is None:
        assert first_error is not None
        raise first_error
    if state.campaign_digest != digest:
        raise RunDirError(
            f"{directory / STATE_NAME}: this campaign ran from {state.campaign_file} with digest "
            f"{state.campaign_digest[:12]}, not the campaign file given (digest {digest[:12]}); resume with "
            f"the same campaign file, or start a new campaign directory"
        )
    return state
