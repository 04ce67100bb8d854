"""What every stage shares: which hosts the previous stage left fit to go on."""

from __future__ import annotations

from sb_fleet.outcome import HostOutcome, Outcome
from sb_fleet.rundir.outcome_table import load_stage
from sb_fleet.rundir.rundir import RunDir


def eligible(
    rd: RunDir, stage_before: str, hosts: list[str], stage: str
) -> tuple[list[str], dict[str, HostOutcome]]:
    """The hosts that ``stage_before`` left fit (or never saw), and a skip outcome for each other one."""
    prev = load_stage(rd, stage_before)
    if prev is None:
        return list(hosts), {}
    ok: list[str] = []
    skipped: dict[str, HostOutcome] = {}
    for h in hosts:
        o = prev.get(h)
        if o is None or o.outcome == Outcome.OK:
            ok.append(h)
        else:
            skipped[h] = HostOutcome(
                h, stage, Outcome.SKIPPED, f"{stage_before} {o.outcome.value}: {o.reason}"
            )
    return ok, skipped
