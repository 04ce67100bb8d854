"""Per-host outcomes across stages: stored per stage (``outcomes/<stage>.json``), merged into ``outcomes.json``.

Every host the run was created for gets an entry; a stage that never reached a host says so
(``skipped`` with the reason), so nothing is silently dropped. Stage files only ever gain hosts:
a later command that handled some hosts (``--limit``) updates those and keeps the others.
"""

from __future__ import annotations

from sb_fleet.errors import RunDirError
from sb_fleet.outcome import HostOutcome, Outcome, worst
from sb_fleet.rundir.rundir import RunDir
from sb_fleet.safe_files import atomic_write_text

STAGES = ("check", "deploy", "run", "collect", "benchmarks")


def save_stage(rd: RunDir, stage: str, outcomes: dict[str, HostOutcome]) -> None:
    """Record ``outcomes`` for ``stage``, keeping the hosts this command did not handle."""
    kept = load_stage(rd, stage) or {}
    kept.update(outcomes)
    rd.write_json(
        f"outcomes/{stage}.json",
        {"schema_version": 1, "stage": stage, "hosts": [o.to_json() for o in kept.values()]},
    )


def load_stage(rd: RunDir, stage: str) -> dict[str, HostOutcome] | None:
    rel = f"outcomes/{stage}.json"
    data = rd.read_json(rel)
    if data is None:
        return None
    try:
        return {d["host"]: HostOutcome.from_json(d) for d in data.get("hosts", [])}
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise RunDirError(
            f"{rd.path / rel}: not an outcome file ({type(exc).__name__}: {exc}); "
            f"restore it or start a new run directory"
        ) from None


def merge(rd: RunDir, hosts: list[str]) -> dict[str, dict]:
    """The overall outcome of each host (the worst of its stages, with that stage's reason), written
    to ``outcomes.json`` and ``outcomes.md``."""
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
    rows = ["| host | outcome | reason |", "|---|---|---|"]
    for h, m in merged.items():
        rows.append(f"| {h} | {m['outcome']} | {m['reason'].replace('|', '/')} |")
    atomic_write_text(rd.path / "outcomes.md", "\n".join(rows) + "\n")
    return merged


def outcomes_of(merged: dict[str, dict]) -> list[Outcome]:
    return [Outcome(v["outcome"]) for v in merged.values()]
