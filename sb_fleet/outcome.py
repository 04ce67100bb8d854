"""Per-host outcomes: a closed set of words, each with a reason.

Every inventory host ends every stage with exactly one :class:`Outcome`.
The words are ordered by severity so that a host's overall outcome is the
worst of its stages.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Outcome(str, enum.Enum):
    OK = "ok"
    SKIPPED = "skipped"  # excluded by --limit or by an earlier stage's failure
    # not in service: Slurm reports it drained, down, in maintenance or reserved for another reason (or
    # sb-fleet drained it and could not re-test it); not tested, and not counted by the gate
    OUT_OF_SERVICE = "out-of-service"
    PENDING = "pending"  # not reached yet (interrupted run)
    FAILED = "failed"  # the host answered but a step or benchmark failed
    TIMEOUT = "timeout"  # a benchmark exceeded its timeout and was killed (a host fault, exit 1)
    UNHEALTHY = "unhealthy"  # a health check failed before the benchmarks (a host fault, exit 1)
    UNREACHABLE = "unreachable"  # SSH could not connect or authenticate
    HOSTKEY = "hostkey-mismatch"  # the host's key is unknown or changed: refused

    @property
    def severity(self) -> int:
        return _SEVERITY[self]

    @property
    def is_infra(self) -> bool:
        """Outcomes that mean infrastructure trouble (exit code 3) rather than a failed host."""
        return self in (Outcome.UNREACHABLE, Outcome.HOSTKEY, Outcome.PENDING)


_SEVERITY = {
    Outcome.OK: 0,
    Outcome.SKIPPED: 1,
    Outcome.OUT_OF_SERVICE: 2,  # above skipped: the stages after the first say skipped because of it
    Outcome.PENDING: 3,
    Outcome.FAILED: 4,
    Outcome.TIMEOUT: 5,
    Outcome.UNHEALTHY: 6,  # above failed: the benchmarks of an unhealthy host fail because of it
    Outcome.UNREACHABLE: 7,
    Outcome.HOSTKEY: 8,
}


@dataclass(frozen=True)
class HostOutcome:
    """What became of one host in one stage."""

    host: str
    stage: str
    outcome: Outcome
    reason: str = ""
    duration_s: float | None = None
    details: dict = field(default_factory=dict, compare=False)

    def to_json(self) -> dict:
        d: dict[str, object] = {
            "host": self.host,
            "stage": self.stage,
            "outcome": self.outcome.value,
            "reason": self.reason,
            "duration_s": self.duration_s,
        }
        if self.details:
            d["details"] = self.details
        return d

    @classmethod
    def from_json(cls, d: dict) -> HostOutcome:
        return cls(
            host=d["host"],
            stage=d["stage"],
            outcome=Outcome(d["outcome"]),
            reason=d.get("reason", ""),
            duration_s=d.get("duration_s"),
            details=d.get("details") or {},
        )


def worst(outcomes: list[Outcome]) -> Outcome:
    """The most severe outcome of a list (OK for an empty list)."""
    return max(outcomes, key=lambda o: o.severity, default=Outcome.OK)
