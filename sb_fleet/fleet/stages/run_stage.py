"""The run stage: every step of the plan on every ready host, in parallel.

With ``--resume`` only the steps a host has not finished run (and, inside a step, only the benchmarks
that did not finish: the runner's ``--resume``). Interrupted (Ctrl-C): the benchmarks are stopped on
every host, each host's outcome says whether it finished, and ``run --resume`` does the rest.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass, replace

from sb_fleet.fleet.executor import Executor, StageResult, Started
from sb_fleet.fleet.fetch import CollectTarget, stop_runners
from sb_fleet.fleet.interrupts import Interrupts
from sb_fleet.fleet.stages.stage_common import container_vars, eligible, remote_results
from sb_fleet.outcome import HostOutcome, Outcome
from sb_fleet.plan.container_commands import interrupt_argv, record_digests, step_container_name
from sb_fleet.plan.deadlines import step_deadline
from sb_fleet.plan.render_container import settings
from sb_fleet.plan.run_plan import Step
from sb_fleet.plan.tasks import CONTAINER_REMOVE, ends_with, run_task
from sb_fleet.plan.templates import runner_args
from sb_fleet.rundir.outcome_table import load_stage, save_stage
from sb_fleet.rundir.rundir import utcnow
from sb_fleet.rundir.runinputs import RunInputs
from sb_fleet.rundir.runrecord import judge_run
from sb_fleet.safe_files import atomic_write_text, safe_name


@dataclass(frozen=True)
class RunResult:
    outcomes: dict[str, HostOutcome]
    interrupted: str | None  # the signal's name when Ctrl-C/SIGTERM stopped the stage


def steps_done(o: HostOutcome | None) -> set[str]:
    return set((o.details or {}).get("steps_done", [])) if o is not None else set()


def run(
    run: RunInputs, ex: Executor, hosts: list[str], resume: bool = False, started: Started | None = None
) -> RunResult:
    """``started``: the step deploy already started on some hosts (validate); their results are taken
    from it, and an interrupt that stopped the deploy stops the run here."""
    ready, skipped = eligible(run.rd, "deploy", hosts, "run")
    prev = (load_stage(run.rd, "run") or {}) if resume else {}
    done = {h: steps_done(prev.get(h)) for h in ready}
    outcomes: dict[str, HostOutcome] = dict(skipped)
    if started is not None and started.step:
        outcomes.update(cut_off(run, started, list(skipped)))
    if started is not None and started.interrupted:  # stopped inside deploy's task: deploy again, resume
        for h in started.unfinished:
            outcomes[h] = HostOutcome(
                h,
                "run",
                Outcome.PENDING,
                f"interrupted ({started.interrupted}) in deploy before {started.step} finished; "
                f"sb-fleet deploy --run-dir {run.rd.path}, then sb-fleet run --resume, do what is missing",
            )
    live = list(ready)
    devices = container_vars(run, live)  # facts do not change during the run: read them once
    with ex.progress.stage("run", ready), Interrupts() as intr:
        if started is not None and started.interrupted:
            intr.signal = started.interrupted
            run.rd.write_json(
                "interrupted.json",
                {
                    "signal": intr.signal,
                    "at": utcnow(),
                    "step": started.step,
                    "cleanup": stop_remote(run, ex, list(started.unfinished), started.step),
                },
            )
            # and every other host of the deploy: one the stop cut off may have ended failed or
            # unreachable, its processes still running there
            ex.stop_hosts([h for h in hosts if h not in started.unfinished])
        for step in run.plan.steps:
            pre = started.results if started is not None and started.step == step.id else {}
            if intr.fired() and not pre:  # what deploy finished of the first step still counts
                break
            todo = [h for h in live if step.id not in done[h]]
            targets = todo
            if step.multi_node:
                in_groups = [
                    g
                    for g in step.groups
                    if all(h in live for h in g.hosts) and any(h in todo for h in g.hosts)
                ]
                targets = [h for g in in_groups for h in g.targets]  # mpi: each group's first node
                members = {h for g in in_groups for h in g.hosts}
                for h in todo:
                    if step.label and h not in members and h in step.left_out:
                        done[h].add(step.id)  # a pattern round this host sits out
                    if (
                        h not in targets
                        and h not in outcomes
                        and not (step.label and h in members | set(step.left_out))
                    ):
                        why = (
                            "fits no full node group"
                            if h in step.left_out
                            else "a host of its node group is not available"
                        )
                        outcomes[h] = HostOutcome(h, "run", Outcome.SKIPPED, f"{step.id}: {why}")
            for h in live:
                if h not in targets and step.id in done[h]:
                    ex.progress.update(h, Outcome.OK, f"{step.id} done before")
            extra = devices or None
            if resume:
                args = runner_args(run.run_id, step, run.config.fleet.master_port)
                extra = {**(extra or {}), "sb_runner_args": [*args, "--resume"]}
            res = ex.run(
                f"run-{step.id}",
                run.rendered.runs[step.id],
                [] if intr.fired() else [h for h in targets if h not in pre],
                cancel=intr.fired,
                extravars=extra,
                deadline=step_deadline(step.id, step.timeout),
                stop=functools.partial(stop_late, run, ex, step_id=step.id),
                # run.yml ends with the runner's task; the container plays end with their own PLAY_DONE
                done=ends_with(run_task(step.id)) if run.config.fleet.runtime == "none" else None,
            )
            if pre:
                res = with_started(ex, step, res, {h: pre[h] for h in targets if h in pre})
            if run.config.fleet.runtime != "none":
                record_digests(run.rd, run.config.fleet.runtime, "run", res.results)
            judged = {
                h: removed(checked(run, ex, step, o, res.results.get(h, {})), res.results.get(h, {}))
                for h, o in res.outcomes.items()
            }
            for h, o in judged.items():
                if step.label:  # a pattern round: a pair's result, not the end of its hosts (pattern_plan.py)
                    group = next((g.hosts for g in step.groups if h in g.hosts), (h,))
                    for m in group:
                        if o.outcome == Outcome.OK:
                            done[m].add(step.id)
                        elif o.outcome != Outcome.PENDING and m not in outcomes:
                            outcomes[m] = HostOutcome(
                                m, "run", o.outcome, f"{step.id} ({step.label}): {o.reason}"
                            )
                    continue
                if o.outcome == Outcome.OK:
                    done[h].add(step.id)
                elif o.outcome != Outcome.PENDING:
                    why = o.reason if o.reason.startswith(f"{step.id}: ") else f"{step.id}: {o.reason}"
                    outcomes[h] = HostOutcome(h, "run", o.outcome, why)
                    if h in live:
                        live.remove(h)
            if intr.fired() and not (started is not None and started.interrupted):
                unfinished = [h for h in targets if judged[h].outcome == Outcome.PENDING]
                run.rd.write_json(
                    "interrupted.json",
                    {
                        "signal": intr.signal,
                        "at": utcnow(),
                        "step": step.id,
                        "cleanup": stop_remote(run, ex, unfinished, step.id),
                    },
                )
                ex.stop_hosts([h for h in targets if h not in unfinished])  # (as above, at deploy)
    steps = [st.id for st in run.plan.steps]
    for h in ready:
        missing = [st for st in steps if st not in done[h]]
        details = {"steps_done": sorted(done[h])}
        if h in outcomes:
            o = outcomes[h]
            outcomes[h] = HostOutcome(h, "run", o.outcome, o.reason, details=details)
        elif not missing:
            outcomes[h] = HostOutcome(h, "run", Outcome.OK, details=details)
        else:
            why = (
                f"interrupted ({intr.signal}) before {', '.join(missing)} finished; "
                f"sb-fleet run --resume --run-dir {run.rd.path} runs what is missing"
                if intr.fired()
                else f"{', '.join(missing)} not run"
            )
            outcomes[h] = HostOutcome(h, "run", Outcome.PENDING, why, details=details)
    save_stage(run.rd, "run", outcomes)
    if intr.fired():
        n = sum(1 for o in outcomes.values() if o.outcome == Outcome.PENDING)
        print(
            f"sb-fleet: interrupted: {n} host(s) did not finish (see {run.rd.path}/outcomes.md); "
            f"sb-fleet run --resume --run-dir {run.rd.path} does only what is missing",
            file=sys.stderr,
        )
    return RunResult(outcomes, intr.signal)


# OpenSSH's words for a host it never logged in to (down, refusing, hung before the banner, unknown).
NEVER_CONNECTED = (
    "connect to host",
    "banner exchange",
    "Could not resolve hostname",
    "Name or service not known",
    "Permission denied",
    "No route to host",
)


def cut_off(run: RunInputs, started: Started, hosts: list[str]) -> dict[str, HostOutcome]:
    """Hosts lost (unreachable, timed out) in the exec that deploys and starts ``started.step`` at once:
    their runner may have started and may still write results. Their run outcome is the loss itself,
    not ``skipped``, so that collect fetches whatever they left (a host that is back by then is
    collected; ``deploy`` then ``run --resume`` does the rest)."""
    deploy = load_stage(run.rd, "deploy") or {}
    out: dict[str, HostOutcome] = {}
    for h in hosts:
        o = deploy.get(h)
        if o is None or o.outcome not in (Outcome.UNREACHABLE, Outcome.TIMEOUT):
            continue
        if o.outcome == Outcome.UNREACHABLE and any(m in o.reason for m in NEVER_CONNECTED):
            continue  # never logged in: nothing started there (its run stays skipped)
        out[h] = HostOutcome(
            h,
            "run",
            o.outcome,
            f"lost during deploy, which starts {started.step} in the same exec ({o.reason}); collect "
            f"fetches what it left; sb-fleet deploy, then sb-fleet run --resume --run-dir "
            f"{run.rd.path}, do the rest",
        )
    return out


def with_started(ex: Executor, step: Step, res: StageResult, pre: dict[str, dict]) -> StageResult:
    """``res`` with the hosts whose step deploy ran: the task's outcome as the run playbook's
    ``failed_when`` would have it (exit 0 or 1: the runner ran; the runner's record is judged next)."""
    outcomes, results = dict(res.outcomes), dict(res.results)
    for h, task in pre.items():
        rc = task.get("rc")
        ok = rc in (0, 1)
        outcomes[h] = HostOutcome(h, "run", Outcome.OK if ok else Outcome.FAILED, "" if ok else f"exit {rc}")
        results[h] = {run_task(step.id): task}
        ex.progress.update(h, outcomes[h].outcome, f"{step.id} (started by deploy)")
    return StageResult(res.stage, outcomes, results, res.status, res.rc, res.duration_s)


def checked(run: RunInputs, ex: Executor, step: Step, o: HostOutcome, results: dict) -> HostOutcome:
    """The executor's outcome of one host's step, checked against the runner's own record (exit code,
    traceback, status entries, host and run named): a crashed runner is ``failed`` at once, with the
    exception's last line, and its traceback is kept in ``runner-errors/<host>-<step>.txt``."""
    task = results.get(run_task(step.id))
    if o.outcome not in (Outcome.OK, Outcome.FAILED) or task is None:
        return o
    if o.outcome == Outcome.FAILED and task.get("rc") is None:
        return o  # the task itself failed (not the runner): the executor's reason says why
    v = judge_run(o.host, run.run_id, [e.key for e in step.entries], task)
    if v.traceback:
        atomic_write_text(run.rd.sub("runner-errors") / f"{safe_name(o.host)}-{step.id}.txt", v.traceback)
    if v.ok:
        return o
    ex.progress.update(o.host, Outcome.FAILED, f"{step.id}: {v.reason}")
    return HostOutcome(o.host, "run", Outcome.FAILED, v.reason)


def removed(o: HostOutcome, results: dict) -> HostOutcome:
    """A step whose container outlived it (its timeout): the outcome says the container was removed, or
    that removing it failed (the container may still run on that host)."""
    rm = results.get(CONTAINER_REMOVE)
    if not rm or rm.get("skipped") or o.outcome == Outcome.OK:
        return o
    if rm.get("rc") == 0:
        return replace(o, reason=f"{o.reason}; its container was removed")
    why = str(rm.get("stderr") or rm.get("msg") or "").strip().splitlines()
    return replace(o, reason=f"{o.reason}; removing its container failed ({why[-1] if why else 'no output'})")


def stop_late(run: RunInputs, ex: Executor, host: str, *, step_id: str) -> str:
    """A host past its step's deadline: its runner stopped as on an interrupt (it records which
    benchmarks finished), its container first, then every other process of the run there and the
    control node's clients for it (:meth:`Executor.stop_host`); what happened."""
    said = stop_remote(run, ex, [host], step_id, sweep=False).get(host, "")
    return f"runner: {said}; {ex.stop_host(host)}"


def stop_remote(
    run: RunInputs, ex: Executor, hosts: list[str], step_id: str | None, sweep: bool = True
) -> dict[str, str]:
    """Stop the runner (and with it every benchmark it started) on each host, and with a container
    runtime the container of step ``step_id`` first, then (``sweep``) what else of the run runs there;
    host -> what happened to the runner."""
    if not hosts:
        return {}
    targets = [
        CollectTarget(ex.inventory.get(h), remote_results(run, h), run.rd.raw_host(h) / "results")
        for h in hosts
    ]
    containers: dict[str, tuple[list[str], str]] = {}
    runtime = run.config.fleet.runtime
    if runtime != "none" and step_id:
        c = settings(run.config)
        for t in targets:
            argv = interrupt_argv(runtime, c, t.host.vars.get("sb_container_host_args"))
            if argv is not None:
                containers[t.host.name] = (argv, step_container_name(run.run_id, step_id, t.host.name))
    said = stop_runners(targets, ex.ssh, ex.forks, timeout=45, srun=ex.srun, containers=containers)
    if sweep:
        ex.stop_hosts(hosts)  # and what else the run started there (the runner's, hostprep's leftovers)
    return said
