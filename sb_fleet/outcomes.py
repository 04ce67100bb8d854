"""Per-host outcomes across stages: stored per stage, merged into ``outcomes.json``.

Every inventory host gets an entry; a stage that never reached a host says
so (``skipped`` with the reason), so nothing is silently dropped.
"""

from __future__ import annotations

from sb_fleet.outcome import HostOutcome, Outcome, worst
from sb_fleet.rundir import RunDir

STAGES = ("deploy", "run", "collect", "benchmarks")


def save_stage(rd: RunDir, stage: str, outcomes: dict[str, HostOutcome]) -> None:
    rd.write_json(
        f"outcomes/{stage}.json",
        {"schema_version": 1, "stage": stage, "hosts": [o.to_json() for o in outcomes.values()]},
    )


def load_stage(rd: RunDir, stage: str) -> dict[str, HostOutcome] | None:
    data = rd.read_json(f"outcomes/{stage}.json")
    if data is None:
        return None
    return {d["host"]: HostOutcome.from_json(d) for d in data.get("hosts", [])}


def merge(rd: RunDir, hosts: list[str]) -> dict[str, dict]:
    """The overall outcome of each host: the worst of its stages, with that stage's reason."""
    per_stage = {s: load_stage(rd, s) or {} for s in STAGES}
    merged: dict[str, dict] = {}
    for h in hosts:
        stages = {s: per_stage[s][h] for s in STAGES if h in per_stage[s]}
        if not stages:
            merged[h] = {
                "outcome": Outcome.PENDING.value,
                "reason": "no stage has run on this host",
                "stages": {},
            }
            continue
        w = worst([o.outcome for o in stages.values()])
        first_bad = next((o for o in stages.values() if o.outcome == w), None)
        merged[h] = {
            "outcome": w.value,
            "reason": first_bad.reason if first_bad and w != Outcome.OK else "",
            "stages": {s: {"outcome": o.outcome.value, "reason": o.reason} for s, o in stages.items()},
        }
    rd.write_json("outcomes.json", {"schema_version": 1, "hosts": merged})
    return merged


def exit_code(merged: dict[str, dict], gate_passed: bool | None = None) -> int:
    """3 infrastructure trouble, 1 a failed host or gate, 0 all good."""
    outs = [Outcome(v["outcome"]) for v in merged.values()]
    if any(o.is_infra for o in outs):
        return 3
    if any(o in (Outcome.FAILED, Outcome.TIMEOUT) for o in outs) or gate_passed is False:
        return 1
    return 0
