"""Which nodes go on from one stage to the next (pure).

A node that fails a stage is held out of every later stage, so it cannot drag a collective down and blame
its partners. A stage's ``on_failure`` says what a failure does: ``hold_out`` (held out; rejected at the
end), ``retry_once`` (one more attempt at the same stage; a second failure holds it out), ``quarantine``
(held out and marked for a re-test: quarantined, not rejected). A fabric stage takes only nodes that
passed every single-node stage before it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from sb_fleet.analysis.soak import NodeSoak
from sb_fleet.config.campaign_spec import CampaignSpec, Stage

NodeStatus = Literal["active", "held_out", "quarantined", "accepted", "rejected"]
NODE_STATUSES: tuple[str, ...] = ("active", "held_out", "quarantined", "accepted", "rejected")


@dataclass(frozen=True)
class CriterionResult:
    """One criterion a node was judged on, with what it measured (for the acceptance record)."""

    name: str  # the metric, counter, check or "verdict"
    criterion: str  # ">= 600000", "grows by at most 0 over the soak", "report verdict pass"
    measured: Any  # JSON-able
    passed: bool
    rounds: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "name": self.name,
            "criterion": self.criterion,
            "measured": self.measured,
            "passed": self.passed,
        }
        if self.rounds:
            d["rounds"] = list(self.rounds)
        return d


@dataclass(frozen=True)
class StageOutcome:
    """One node's result of one attempt at a stage. A node the stage ran on and that has no outcome (never
    answered) is a failure with that reason: every node ends every stage it entered with an outcome."""

    host: str
    passed: bool
    reason: str = ""  # the top finding, one line
    criteria: tuple[CriterionResult, ...] = ()
    evidence: tuple[str, ...] = ()  # paths, relative to the campaign directory


@dataclass(frozen=True)
class GateDecision:
    stage: str
    attempt: int  # 1, or 2 for a retry_once stage's second attempt
    advance: tuple[str, ...]  # passed: go on to the next stage
    retry: tuple[str, ...]  # failed a retry_once stage's first attempt: run this stage again
    held_out: Mapping[str, str] = field(default_factory=dict)  # host -> reason (rejected at the end)
    quarantined: Mapping[str, str] = field(default_factory=dict)  # host -> reason (re-test)
    outcomes: Mapping[str, StageOutcome] = field(default_factory=dict)  # every entrant's, missing ones filled


def entrants(
    spec: CampaignSpec, stage: Stage, status: Mapping[str, str], passed: Mapping[str, Iterable[str]]
) -> tuple[str, ...]:
    """The nodes that run ``stage``: the active ones (``status``), and for a fabric stage only those that
    passed every single-node stage before it (``passed``: host -> names of the stages it passed)."""
    active = [h for h, s in status.items() if s == "active"]
    if stage.kind != "fabric":
        return tuple(sorted(active))
    i = spec.stages.index(stage)
    needed = {s.name for s in spec.stages[:i] if s.kind == "single_node"}
    return tuple(sorted(h for h in active if needed <= set(passed.get(h, ()))))


def gate_stage(
    stage: Stage, ran: Iterable[str], outcomes: Mapping[str, StageOutcome], attempt: int = 1
) -> GateDecision:
    """The decision after one attempt at ``stage`` on the nodes ``ran``. ``attempt`` 2 is a retry_once
    stage's second run (only the nodes that failed the first)."""
    if attempt not in (1, 2) or (attempt == 2 and stage.on_failure != "retry_once"):
        raise ValueError(f"stage {stage.name}: no attempt {attempt} with on_failure {stage.on_failure}")
    filled: dict[str, StageOutcome] = {}
    for host in sorted(set(ran)):
        filled[host] = outcomes.get(host) or StageOutcome(host, False, f"no outcome from stage {stage.name}")
    advance = tuple(h for h, o in filled.items() if o.passed)
    failed = {h: o.reason or f"failed stage {stage.name}" for h, o in filled.items() if not o.passed}
    if stage.on_failure == "retry_once" and attempt == 1:
        return GateDecision(stage.name, attempt, advance, tuple(failed), outcomes=filled)
    if stage.on_failure == "quarantine":
        return GateDecision(stage.name, attempt, advance, (), quarantined=failed, outcomes=filled)
    return GateDecision(stage.name, attempt, advance, (), held_out=failed, outcomes=filled)


def final_status(status: NodeStatus | str) -> NodeStatus:
    """A node's status once the campaign's last stage is done: active -> accepted, held_out -> rejected."""
    if status == "active":
        return "accepted"
    if status == "held_out":
        return "rejected"
    if status in NODE_STATUSES:
        return status  # type: ignore[return-value]
    raise ValueError(f"unknown node status {status!r}")


MAX_LISTED = 20  # a criterion's measured series (values, steps, reasons) and rounds, in the state and records


def _bounded(values: Mapping[str, Any]) -> dict[str, Any]:
    """A finding's measured values with each list or mapping of more than :data:`MAX_LISTED` entries cut to
    its first and last ten (``<key>_left_out``: how many are not listed; soak-<stage>.json has them all): a
    node that drifts over 4,320 rounds, or fails one round in ten of them, stays a few KB in the state."""
    out: dict[str, Any] = {}
    half = MAX_LISTED // 2
    for k, v in values.items():
        if isinstance(v, (list, tuple)) and len(v) > MAX_LISTED:
            out[k] = [*v[:half], *v[-half:]]
            out[f"{k}_left_out"] = len(v) - MAX_LISTED
        elif isinstance(v, Mapping) and len(v) > MAX_LISTED:
            items = list(v.items())
            out[k] = dict(items[:half] + items[-half:])
            out[f"{k}_left_out"] = len(v) - MAX_LISTED
        else:
            out[k] = v
    return out


def _rounds(rounds: tuple[int, ...]) -> tuple[int, ...]:
    half = MAX_LISTED // 2
    return rounds if len(rounds) <= MAX_LISTED else (*rounds[:half], *rounds[-half:])


def soak_outcome(soak: NodeSoak, evidence: Iterable[str] = ()) -> StageOutcome:
    """A node's soak judgement as a stage outcome: every finding and trend a criterion with its values (a
    long series cut to its first and last ten: :func:`_bounded`)."""
    crit: list[CriterionResult] = [
        CriterionResult(
            f.subject,
            f.criterion,
            _bounded(f.values) | ({"rounds_named": len(f.rounds)} if len(f.rounds) > MAX_LISTED else {}),
            not f.fails,
            _rounds(f.rounds),
        )
        for f in soak.findings
    ]
    crit += [
        # a trend that holds names no round (each is in soak-<stage>.json): 4,320 one-minute rounds of
        # 1,000 nodes would be 4.3 million round numbers in the state and the records
        CriterionResult(
            t.metric,
            f"drift no worse than {t.threshold:+.1%}",
            {"change": t.change, "threshold": t.threshold, "noise": t.noise, "rounds_judged": len(t.rounds)},
            not t.fails,
        )
        for t in soak.trends
        if not t.fails  # a failing trend is a finding already
    ]
    reason = soak.failures[0].message if soak.failures else ""
    return StageOutcome(soak.host, soak.passed, reason, tuple(crit), tuple(evidence))
