"""One verdict per host: pass, fail, incomplete or missing.

- ``missing``: the host is in the inventory but has no results line.
- ``fail``: at least one performance issue (a fleet, sibling, rule, gate or
  baseline check fired). A host that is also incomplete still fails: a
  measured fault is the more useful thing to act on.
- ``incomplete``: no performance issue, but a benchmark failed, timed out or
  did not report, a metric is missing, or the run's spine recorded a bad
  outcome (failed, timeout, unreachable, ...) for the host.
- ``pass``: everything else.
- ``out_of_service``: the run did not test the host because it is out of service (Slurm's state and
  reason, or sb-fleet's own drain it could not re-test); not counted by the gate unless asked.
- ``flaky`` (validate's confirmation run only): a failed host none of whose
  findings showed again; a host that is also incomplete stays incomplete
  (the re-run clears its findings, not what it failed to report).
- ``unconfirmed`` (validate's confirmation run only): a host failed on the
  fleet's statistics alone that validate's bound left out of its re-run:
  more hosts were flagged than it re-runs, a sign of a noisy run, so the
  host is named but not failed on that alone (``validate --confirm`` re-runs
  every failing host). Neither ``flaky`` nor ``unconfirmed`` is ever counted
  by the gate policy.

``outcome`` is the spine's word for the host when the run directory has
one; otherwise ``ok`` for a host that reported and ``unknown`` for one that
did not.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sb_fleet.analysis.issues import FAIL, INCOMPLETE, Issue
from sb_fleet.outcome import Outcome

PASS, FAILV, INCOMPLETEV, MISSING = "pass", "fail", "incomplete", "missing"
VERDICTS = (PASS, FAILV, INCOMPLETEV, MISSING)
# validate --confirm: a host whose findings did not reproduce in the confirmation run (never counted
# by the gate policy; in the counts only when some host has it, so other reports keep their shape).
FLAKY = "flaky"
UNCONFIRMED = "unconfirmed"
# A host not in service (its outcome ``out-of-service``: Slurm reports it drained, down, in maintenance or
# reserved for another reason, or sb-fleet drained it and could not re-test it): not tested, so neither
# passed nor failed; the gate counts it only with ``gates.count_out_of_service``, ``drain`` never touches
# it. In the counts only when some host has it.
OUT_OF_SERVICE = "out_of_service"
# The checks that infer a fault from the fleet's own statistics (every other check names an explicit
# reason: a rule, baseline, limit, SKU reference, history, return code, missing result or outcome).
INFERRED_CHECKS = frozenset(
    {"fleet", "sibling", "fleet-combined", "sibling-combined", "majority", "majority-combined"}
)
BAD_OUTCOMES = frozenset(o.value for o in Outcome if o is not Outcome.OK)  # the closed set, from its enum


@dataclass(frozen=True)
class HostReport:
    name: str
    outcome: str
    verdict: str
    issues: tuple[Issue, ...]
    reason: str = ""
    gpu_model: str | None = None
    reported: bool = True

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "outcome": self.outcome,
            "verdict": self.verdict,
            "reason": self.reason,
            "gpu_model": self.gpu_model,
            "issues": [i.to_json() for i in self.issues],
        }

    @property
    def categories(self) -> list[str]:
        return sorted({i.category for i in self.issues})


def judge(
    name: str,
    reported: bool,
    issues: list[Issue],
    outcome: str | None,
    reason: str = "",
    gpu_model: str | None = None,
) -> HostReport:
    if outcome == Outcome.UNHEALTHY.value:  # failed the health checks: a failure with their reasons,
        health = Issue(  # whether or not it was benchmarked (validate --run-unhealthy)
            metric="",
            value=None,
            reference=None,
            deviation=None,
            check="health",
            category="Health",
            severity=FAIL,
            detail=f"unhealthy: {reason}" if reason else "unhealthy",
        )
        return HostReport(name, outcome, FAILV, (health, *issues), reason, gpu_model, reported)
    if outcome == Outcome.OUT_OF_SERVICE.value:
        return HostReport(name, outcome, OUT_OF_SERVICE, (), reason, gpu_model, reported)
    if not reported:
        why = reason or "no results line for this host"
        return HostReport(
            name=name,
            outcome=outcome or "unknown",
            verdict=MISSING,
            issues=(
                Issue(
                    metric="",
                    value=None,
                    reference=None,
                    deviation=None,
                    check="missing-host",
                    category="MissingHost",
                    severity=INCOMPLETE,
                    detail=f"never reported ({why})" if outcome and outcome != "ok" else "never reported",
                ),
            ),
            reason=reason,
            gpu_model=gpu_model,
            reported=False,
        )
    out = list(issues)
    if outcome in BAD_OUTCOMES:
        out.append(
            Issue(
                metric="",
                value=None,
                reference=None,
                deviation=None,
                check="outcome",
                category="Run",
                severity=INCOMPLETE,
                detail=f"the run recorded '{outcome}' for this host" + (f": {reason}" if reason else ""),
            )
        )
    if any(i.severity == FAIL for i in out):
        verdict = FAILV
    elif out:
        verdict = INCOMPLETEV
    else:
        verdict = PASS
    return HostReport(
        name=name,
        outcome=outcome or "ok",
        verdict=verdict,
        issues=tuple(out),
        reason=reason,
        gpu_model=gpu_model,
        reported=True,
    )


def after_confirmation(h: HostReport, flaky: bool, note: str) -> HostReport:
    """A failed host's verdict once validate re-ran its findings (``note`` says how it went).

    Not reproduced: ``flaky``, or ``incomplete`` where the host also has an
    incomplete issue (a benchmark that failed, a metric it never reported, a
    bad outcome), which the re-run of its findings does not clear.
    """
    if h.verdict != FAILV:
        return h
    if flaky and not any(i.severity == INCOMPLETE for i in h.issues):
        return replace(h, verdict=FLAKY, reason=note)
    reason = f"{h.reason}; {note}" if h.reason else note
    return replace(h, verdict=INCOMPLETEV if flaky else FAILV, reason=reason)


def on_statistics_alone(h: HostReport) -> bool:
    """A failing host every finding of which comes from the fleet's statistics (:data:`INFERRED_CHECKS`)."""
    return h.verdict == FAILV and bool(h.issues) and all(i.check in INFERRED_CHECKS for i in h.issues)


def not_confirmed(h: HostReport, note: str) -> HostReport:
    """A host validate's bound left out of its confirmation run: ``unconfirmed`` when it fails on the
    fleet's statistics alone (never failed on them without a re-run), else as it was, with ``note``."""
    if h.verdict != FAILV:
        return h
    reason = f"{h.reason}; {note}" if h.reason else note
    return replace(h, verdict=UNCONFIRMED if on_statistics_alone(h) else FAILV, reason=reason)
