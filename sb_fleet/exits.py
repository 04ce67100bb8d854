"""The exit policy, in one place: what each process exit code means and how a run earns it.

| code | meaning |
|---|---|
| 0 | every host passed (and the report's gate passed) |
| 1 | a host failed a health check (unhealthy) or a benchmark or timed out, or the gate failed |
| 2 | bad input: usage, config, inventory, rules, results file or run directory |
| 3 | infrastructure trouble: hosts unreachable, host keys refused, the control node's disk full |
| 130 | interrupted (Ctrl-C) before anything could be recorded |

A benchmark that exceeds its timeout is a fault of that host (1); a host that
cannot be reached or whose key is refused is infrastructure (3).
"""

from __future__ import annotations

from collections.abc import Iterable

from sb_fleet.outcome import Outcome

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INFRA = 3
EXIT_INTERRUPTED = 130


def exit_for(outcomes: Iterable[Outcome], gate_passed: bool | None = None) -> int:
    """3 when any host met infrastructure trouble, else 1 when a host or the gate failed, else 0."""
    outs = list(outcomes)
    if any(o.is_infra for o in outs):
        return EXIT_INFRA
    if any(o in (Outcome.FAILED, Outcome.TIMEOUT, Outcome.UNHEALTHY) for o in outs) or gate_passed is False:
        return EXIT_FAILED
    return EXIT_OK
