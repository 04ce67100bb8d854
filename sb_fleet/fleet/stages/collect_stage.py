"""The collect stage: every host's result files over SSH into ``raw/<host>/`` (only what is missing), then
the one normaliser over every host of the run into ``results-summary.jsonl``, ``metrics.json``,
``problems.json`` and each host's ``benchmarks`` outcome.

Every command collect runs on a host carries the run's host tag and its own (:data:`reaper.COLLECT_TAG`):
after Ctrl-C or SIGTERM, and on a host whose reads collect cut off (a budget, its wall time, a stalled
read), a sweep ends collect's commands there (and nothing else of the run: a runner cut off earlier may
still be writing the results a later collect fetches)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from sb_fleet import bounded_json
from sb_fleet.analysis.crossnode.pattern_outputs import write_pattern_outputs
from sb_fleet.config.traffic_patterns import base_key
from sb_fleet.errors import InfraError
from sb_fleet.fleet import reaper
from sb_fleet.fleet.executor import Executor
from sb_fleet.fleet.fetch import CUT_OFF, CollectAborted, CollectTarget, collect_all, remove_partials
from sb_fleet.fleet.stages.stage_common import remote_results
from sb_fleet.outcome import HostOutcome, Outcome
from sb_fleet.plan.tasks import HOST_TAG
from sb_fleet.rundir.normalize import INVALID_VALUES, NOISE_SUMMARY, benchmark_outcome, summarize_host
from sb_fleet.rundir.outcome_table import load_stage, save_stage
from sb_fleet.rundir.rundir import RunDir
from sb_fleet.rundir.runinputs import RunInputs
from sb_fleet.rundir.runrecord import foreign_files
from sb_fleet.safe_files import atomic_write_text, safe_name


def collect(run: RunInputs, ex: Executor, hosts: list[str]) -> dict[str, HostOutcome]:
    prev = load_stage(run.rd, "run") or {}
    # Every host that may hold results, including one that dropped off mid-run.
    away = (Outcome.SKIPPED, Outcome.OUT_OF_SERVICE)
    fetch = [h for h in hosts if h not in prev or prev[h].outcome not in away]
    outcomes: dict[str, HostOutcome] = {
        h: HostOutcome(h, "collect", Outcome.OUT_OF_SERVICE, prev[h].reason)
        if prev[h].outcome == Outcome.OUT_OF_SERVICE
        else HostOutcome(h, "collect", Outcome.SKIPPED, f"run skipped: {prev[h].reason}")
        for h in hosts
        if h not in fetch
    }
    away_now = {h: ex.out_of_service[h] for h in fetch if h in ex.out_of_service}
    outcomes.update(
        {h: HostOutcome(h, "collect", Outcome.OUT_OF_SERVICE, why) for h, why in away_now.items()}
    )
    fetch = [h for h in fetch if h not in away_now]
    if ex.srun is not None:  # a node Slurm did not allocate: skipped, nothing to read
        gone = {h: ex.srun.left_out[h] for h in fetch if h in ex.srun.left_out}
        outcomes.update({h: HostOutcome(h, "collect", Outcome.SKIPPED, why) for h, why in gone.items()})
        fetch = [h for h in fetch if h not in gone]
    targets = []
    for h in fetch:
        local = run.rd.raw_host(h) / "results"
        remove_partials(local)  # what a killed collect left half-written
        tag = reaper.host_tag(ex.run_id, h)
        env = (f"{HOST_TAG}={tag}", f"{reaper.COLLECT_TAG}={tag}") if ex.run_id else ()
        targets.append(CollectTarget(ex.inventory.get(h), remote_results(run, h), local, env))
    try:
        with ex.progress.stage("collect", fetch):
            outcomes.update(
                collect_all(
                    targets,
                    ex.ssh,
                    ex.forks,
                    run.config.fleet.collect_timeout,
                    ex.progress.update,
                    run.config.collect,
                    ex.srun,
                    ex.masters,
                    ex.shipped,
                )
            )
    except CollectAborted as exc:
        # The control node's disk is full: record who was collected if the disk still takes it, then stop.
        outcomes.update(exc.outcomes)
        with contextlib.suppress(InfraError):
            save_stage(run.rd, "collect", outcomes)
        raise
    except BaseException:  # Ctrl-C, SIGTERM: the reads are closed; collect's commands on the hosts end too
        ex.stop_hosts(fetch, collect_only=True)
        raise
    finally:  # what the hosts' execs sent and no host's collect read (a host not collected): not kept
        ex.drop_shipped()
    ex.stop_hosts([h for h in fetch if h in outcomes and outcomes[h].details.get(CUT_OFF)], collect_only=True)
    save_stage(run.rd, "collect", outcomes)
    expected = list(dict.fromkeys(base_key(e.key) for e in run.plan.entries()))  # a pattern's rounds: one key
    normalize_run(run.rd, list(run.plan.hosts), expected)
    write_pattern_outputs(run.rd, run.plan)  # mpi_pattern.txt, pairs/<entry>.json
    return outcomes


def normalize_run(rd: RunDir, hosts: list[str], expected: list[str]) -> dict[str, HostOutcome]:
    """raw/ of every host of the run -> results-summary.jsonl, noise-summary.jsonl (each metric's measured
    noise), metrics.json, problems.json and each
    collected host's benchmark outcome. Offline, and over the whole run whatever ``--limit`` said."""
    lines: list[str] = []
    noise_lines: list[str] = []
    meta: dict[str, dict] = {}
    problems: dict[str, list[str]] = {}
    invalid: dict[str, dict[str, str]] = {}
    outcomes: dict[str, HostOutcome] = {}
    run_id = rd.run_id
    for h in hosts:
        raw = rd.path / "raw" / safe_name(h)
        if not raw.is_dir():
            continue
        # Another host's (or run's) files are never taken as this host's data (hosts sharing a workspace).
        foreign = foreign_files(h, run_id, collected_docs(raw / "results"))
        if foreign:
            problems[h] = foreign
            outcomes[h] = HostOutcome(h, "benchmarks", Outcome.FAILED, f"results not taken: {foreign[0]}")
            continue
        rec = summarize_host(h, raw)
        meta.update(rec.meta)
        if rec.metrics:
            lines.append(rec.summary_line())
            noise_lines.append(rec.noise_line())
        if rec.problems:
            problems[h] = rec.problems
        if rec.invalid:
            invalid[h] = rec.invalid
        outcomes[h] = benchmark_outcome(rec, expected)
    atomic_write_text(rd.path / "results-summary.jsonl", "".join(ln + "\n" for ln in lines))
    atomic_write_text(rd.path / NOISE_SUMMARY, "".join(ln + "\n" for ln in noise_lines))
    rd.write_json("metrics.json", meta)
    rd.write_json("problems.json", problems)
    rd.write_json(INVALID_VALUES, invalid)
    save_stage(rd, "benchmarks", outcomes)
    return outcomes


def collected_docs(results: Path) -> list[tuple[str, Any]]:
    """The collected ``status.json`` and rank files of one host, parsed (unreadable ones left to the
    normaliser), each with its path under ``results``."""
    docs: list[tuple[str, Any]] = []
    for f in [results / "status.json", *sorted(results.rglob("rank*.json"))]:
        if "logs" in f.parts or not f.is_file():
            continue
        with contextlib.suppress(OSError, ValueError):
            docs.append((str(f.relative_to(results)), bounded_json.read(f)))
    return docs
