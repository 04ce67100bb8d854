"""What ``validate`` does after a pattern run, before the verdict: confirm each suspect and narrow a failed
all-nodes run down to its hosts, by running the entry again on rounds chosen for that.

* **Second pass**: every pattern entry whose localisation (``pairs/<entry>.json``) named culprits runs
  again on the rounds :func:`sb_fleet.analysis.crossnode.localise.second_pass` planned (each suspect with
  known-good partners, a link's two ends each with a good host and the link itself), and
  :func:`sb_fleet.analysis.crossnode.localise.confirm` marks each culprit reproduced or not.
* **Bisection**: an entry whose one group of every node (pattern ``all-nodes``, or ``mpi`` mode over
  every node) failed or timed out is narrowed by :class:`sb_fleet.analysis.crossnode.localise.Bisection`: each
  round runs the halves still under suspicion (with known-good partners once they are small), until
  the failing hosts are named, in at most ceil(log2 N) + 1 rounds.

Each pass is a run directory of its own under ``<run>/followup/<entry>/`` (its plan holds the given
rounds; created, run and collected like any run), and what they found goes to ``<run>/followup.json``,
which the report reads beside ``pairs/`` (:mod:`sb_fleet.analysis.crossnode.fabric`). The first pass's own files
are never rewritten, so collecting or reporting the run again gives the same answer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from sb_fleet.analysis.crossnode.fabric import FOLLOWUP_FILE, FOLLOWUP_SCHEMA
from sb_fleet.analysis.crossnode.localise import Bisection, Localisation, PairMatrix, confirm
from sb_fleet.analysis.crossnode.pair_results import GroupResult, group_results
from sb_fleet.analysis.crossnode.pattern_outputs import PAIRS_DIR, round_records
from sb_fleet.config.traffic_patterns import base_key
from sb_fleet.errors import SbFleetError
from sb_fleet.history.confirm import confirm_config
from sb_fleet.plan.run_plan import GivenRounds
from sb_fleet.rundir.rundir import MANIFEST
from sb_fleet.rundir.runinputs import RunInputs, create_run
from sb_fleet.safe_files import atomic_write_text, safe_name

log = logging.getLogger("sb_fleet")

FOLLOWUP_DIR = "followup"

SubRun = Callable[[RunInputs], None]  # deploys, runs and collects a sub-run (the workflow's stages)


def follow_up(
    run: RunInputs, execute: SubRun, say: Callable[[str], None] = lambda _s: None
) -> dict[str, Any]:
    """Second passes and bisections for every pattern entry of ``run`` that needs one; the document
    written to ``followup.json`` (empty ``entries`` when nothing needed a follow-up)."""
    entries: dict[str, Any] = {}
    if run.plan.patterns and len(run.inventory.sources) == 1:
        first_pass = None  # the run's results by round: read once, and only for an all-nodes entry
        for key, info in run.plan.patterns.items():
            entry = next((e.entry for e in run.plan.entries() if base_key(e.key) == key), None)
            if entry is None:
                continue
            done: dict[str, Any] = {}
            pairs = run.rd.read_json(f"{PAIRS_DIR}/{safe_name(key)}.json")
            if isinstance(pairs, dict) and pairs.get("second_pass"):
                done["second_pass"] = second_pass_run(run, key, entry, pairs, execute, say)
            if _one_group_of_all(info):
                first_pass = first_pass or round_records(run.rd, run.plan.hosts)
                (group,) = group_results(first_pass[0], info["rounds"], key, first_pass[1])
                if group.status in ("failed", "timeout"):
                    done["bisection"] = bisect_run(run, key, entry, group, execute, say)
            if done:
                entries[key] = done
    doc = {"schema_version": FOLLOWUP_SCHEMA, "entries": entries}
    if entries:
        run.rd.write_json(FOLLOWUP_FILE, doc)
    return doc


def _one_group_of_all(info: dict[str, Any]) -> bool:
    """An entry that ran once across every node (all-nodes, or mpi mode without a pattern)."""
    rounds = info.get("rounds") or []
    return len(rounds) == 1 and len(rounds[0]) == 1 and len(rounds[0][0]) > 1


def second_pass_run(
    run: RunInputs, key: str, entry: str, pairs: dict[str, Any], execute: SubRun, say: Callable[[str], None]
) -> dict[str, Any]:
    """Run the planned second pass of ``key`` and fold it into the first pass's localisation."""
    rounds = [[list(p) for p in rnd] for rnd in pairs["second_pass"]]
    n = sum(len(r) for r in rounds)
    say(f"{key}: second pass, {n} pair(s) in {len(rounds)} round(s), each suspect with known-good hosts")
    out: dict[str, Any] = {"rounds": rounds}
    try:
        sub = sub_run(run, key, entry, "second-pass", "second-pass", rounds)
        out["run_dir"] = str(sub.rd.path.relative_to(run.rd.path))
        execute(sub)
    except SbFleetError as exc:
        out["error"] = str(exc)
        return out
    doc = sub.rd.read_json(f"{PAIRS_DIR}/{safe_name(key)}.json")
    if not isinstance(doc, dict) or "matrix" not in doc:
        out["error"] = "the second pass gave no pair figure"
        return out
    try:
        second = PairMatrix.from_json(doc["matrix"])
        loc = confirm(Localisation.from_json(pairs["localisation"]), second)
    except (KeyError, TypeError, ValueError) as exc:
        out["error"] = f"unreadable pair file: {exc}"
        return out
    out["matrix"] = second.to_json()
    out["localisation"] = loc.to_json()
    for c in loc.culprits:
        word = "not re-tested" if c.confirmed is None else "confirmed" if c.confirmed else "NOT reproduced"
        say(f"{key}: {c.kind} {c.target}: {word}")
    return out


def bisect_run(
    run: RunInputs,
    key: str,
    entry: str,
    first: GroupResult,
    execute: SubRun,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """Halve the failed group of every node until its failing hosts are named."""
    hosts = list(first.hosts)
    b = Bisection.start(hosts)
    limit = Bisection.max_rounds(len(hosts)) + 1
    say(f"{key}: the group of all {len(hosts)} nodes {first.status} ({first.reason}); bisecting")
    done: list[dict[str, Any]] = []
    out: dict[str, Any] = {"hosts": hosts, "first": _group_json(first), "max_rounds": limit, "rounds": done}
    while not b.done and b.rounds < limit:
        tests = b.tests()
        if not tests:
            b = b.record({})
            break
        groups = [list(g) for g, _tested in tests]
        try:
            sub = sub_run(run, key, entry, f"bisect-{b.rounds + 1}", "bisection", [groups])
            execute(sub)
        except SbFleetError as exc:
            out["error"] = str(exc)
            break
        records, statuses = round_records(sub.rd, sub.plan.hosts)
        results = group_results(records, [groups], key, statuses)
        outcome = {tested: r.passed for (_g, tested), r in zip(tests, results, strict=True)}
        done.append(
            {
                "run_dir": str(sub.rd.path.relative_to(run.rd.path)),
                "groups": [
                    _group_json(r) | {"tests": list(t)} for (_g, t), r in zip(tests, results, strict=True)
                ],
            }
        )
        say(
            f"{key}: bisection round {b.rounds + 1}: "
            + "; ".join(f"{','.join(r.hosts)} {'passed' if r.passed else r.status}" for r in results)
        )
        b = b.record(outcome)
    out.update(
        culprits=list(b.culprits),
        unresolved=[list(g) for g in b.unresolved + b.suspects],
        good=sorted(b.good),
        rounds_run=b.rounds,
    )
    if b.culprits:
        say(f"{key}: bisection names {', '.join(b.culprits)} after {b.rounds} round(s)")
    return out


def _group_json(r: GroupResult) -> dict[str, Any]:
    return {"hosts": list(r.hosts), "passed": r.passed, "status": r.status, "reason": r.reason}


def sub_run(
    run: RunInputs, key: str, entry: str, name: str, kind: str, rounds: Sequence[Sequence[Sequence[str]]]
) -> RunInputs:
    """A new run directory ``<run>/followup/<entry>/<name>`` for the config's ``entry`` alone, on the
    hosts of ``rounds``, whose plan runs exactly those rounds (named ``kind`` in it)."""
    base = run.rd.sub(FOLLOWUP_DIR) / safe_name(key)
    base.mkdir(mode=0o700, exist_ok=True)
    path, n = base / name, 1
    while (path / MANIFEST).exists():  # a second validate of the same run: never reuse a pass
        n += 1
        path = base / f"{name}-{n}"
    cfg = confirm_config(yaml.safe_load((run.rd.path / "config.yaml").read_text()), [entry])
    if cfg is None:
        raise SbFleetError(f"{entry}: not a benchmark of the run's config")
    cfg_path = base / f"{path.name}-config.yaml"
    atomic_write_text(cfg_path, yaml.safe_dump(cfg, sort_keys=False))
    hosts = list(dict.fromkeys(h for rnd in rounds for g in rnd for h in g))
    given = {key: GivenRounds.of(kind, rounds)}
    return create_run(path, cfg_path, Path(run.inventory.sources[0]), ",".join(hosts), given)
