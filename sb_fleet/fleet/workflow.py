"""The commands' orchestration: open or create the run, build the one executor, call the stages in order.

Data flows one way: config + inventory -> plan -> rendered playbooks (written once, by
:func:`sb_fleet.rundir.runinputs.create_run`) -> execution (per-host outcomes) -> raw artifacts -> results
summary -> analysis -> report. Every later command reads the run's inputs back
(:func:`sb_fleet.rundir.runinputs.open_run`); ``--limit`` narrows the hosts one command acts on and is
recorded with it in the manifest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import sys
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sb_fleet.errors import RunDirError
from sb_fleet.exits import exit_for
from sb_fleet.fleet.direct_exec import runs_direct
from sb_fleet.fleet.executor import Executor, Started
from sb_fleet.fleet.pattern_followup import follow_up
from sb_fleet.fleet.progress import Progress
from sb_fleet.fleet.prometheus_outputs import PromOutputs, check_textfile_dir, write_and_expose
from sb_fleet.fleet.slurm_launch import Allocation, SrunReach, allocation
from sb_fleet.fleet.ssh import SshSettings
from sb_fleet.fleet.stages.check_stage import check as check_stage
from sb_fleet.fleet.stages.check_stage import check_profiles, judge_checks
from sb_fleet.fleet.stages.cleanup_stage import cleanup as cleanup_stage
from sb_fleet.fleet.stages.cleanup_stage import cleanup_playbook
from sb_fleet.fleet.stages.collect_stage import collect as collect_stage
from sb_fleet.fleet.stages.deploy_stage import can_start, check_deploy_then_start, deploy_then_start
from sb_fleet.fleet.stages.deploy_stage import deploy as deploy_stage
from sb_fleet.fleet.stages.image_stage import deploy_image
from sb_fleet.fleet.stages.run_stage import run as run_stage
from sb_fleet.outcome import HostOutcome, Outcome
from sb_fleet.plan.container_commands import interrupt_argv
from sb_fleet.plan.deadlines import describe_bound, validate_deadlines
from sb_fleet.plan.render_container import settings as container_settings
from sb_fleet.plan.run_plan import Step
from sb_fleet.rundir.outcome_table import merge, outcomes_of, save_stage
from sb_fleet.rundir.rundir import MANIFEST, utcnow
from sb_fleet.rundir.runinputs import RunInputs, create_run, default_inputs, open_run

if TYPE_CHECKING:
    from sb_fleet.report.report_result import ReportResult

log = logging.getLogger("sb_fleet")


@dataclass(frozen=True)
class Options:
    config: Path | None = None
    inventory: Path | None = None
    run_dir: Path | None = None
    dry_run: bool = False
    accept_new_host_keys: bool = False
    insecure_no_host_key_checking: bool = False
    limit: str | None = None
    forks: int | None = None
    resume: bool = False
    history: Path | None = None  # the history store to record into (else fleet.history of the config)
    confirm: bool = False  # validate --confirm: run every failing host's flagged benchmarks again first
    auto_confirm: bool = True  # validate: confirm the hosts failed on fleet statistics alone (--no-confirm)
    second_pass: bool = True  # validate: a pattern run's suspects re-paired, a failed all-nodes run bisected
    rules: Path | None = None  # validate: SuperBench rules to judge the run with (as report --rules)
    baseline: Path | None = None  # validate: SuperBench baseline (as report --baseline)
    progress: bool = True
    run_unhealthy: bool = False  # validate: benchmark the hosts that failed the health checks too
    skip_health: bool = False  # validate: no health checks (as health.enabled: false)
    # SSH launcher, Slurm inventory: benchmark the nodes drained, down or failed for another reason too
    include_drained: bool = False
    # metrics.prom's settings, and the textfile directory and Pushgateway the run's series also go to
    prometheus: PromOutputs = field(default_factory=PromOutputs)
    argv: tuple[str, ...] = field(default_factory=tuple)


def inputs_for(opts: Options, create: bool = True) -> RunInputs:
    """The run of ``--run-dir`` read back when it exists; else a new run (when ``create``)."""
    path = Path(opts.run_dir) if opts.run_dir else None
    if path is not None and (path / MANIFEST).exists():
        return open_run(path, opts.config, opts.inventory)
    if not create:
        raise RunDirError(f"{path}: not a run directory (no {MANIFEST}); give the directory of a run")
    cfg, inv = default_inputs(opts.config, opts.inventory)
    return create_run(path, cfg, inv, opts.limit)


@contextlib.contextmanager
def executor(run: RunInputs, opts: Options, hosts: list[str]) -> Iterator[Executor]:
    """The one executor of a command on ``hosts``; under ``launcher: slurm``, with the command's Slurm
    allocation, released when the command's stages are done (:mod:`sb_fleet.fleet.slurm_launch`)."""
    ssh = SshSettings.from_fleet(
        run.config.fleet, opts.accept_new_host_keys, opts.insecure_no_host_key_checking
    )
    if ssh.policy == "off":
        log.warning(
            "HOST KEY CHECKING IS OFF (--insecure-no-host-key-checking): any host can impersonate "
            "any other; never use this on a production fleet"
        )
        print("sb-fleet: WARNING: host key checking is OFF for this run", file=sys.stderr)
    ssh.ansible_env()  # the control socket directory is checked (private, ours) before any host is touched
    ex = Executor(
        inventory=run.inventory,
        ssh=ssh,
        forks=opts.forks or run.config.fleet.forks,
        ansible_root=run.rd.sub("ansible"),
        progress=Progress(enabled=opts.progress),
        run_id=run.run_id,
        containers=runtime_commands(run),
        direct=run.config.fleet.exec_via == "ssh",
    )
    if run.config.fleet.launcher != "slurm":
        away = {} if opts.include_drained else slurm_out_of_service(run)
        away = {h: why for h, why in away.items() if h in set(hosts)}
        if away:
            say(opts, f"slurm: {len(away)} node(s) out of service, not tested (--include-drained tests them)")
        yield dataclasses.replace(ex, out_of_service=away)
        return
    s = run.config.slurm
    with allocation(hosts, s, run.run_id) as alloc:
        record_allocation(run, alloc)
        say(
            opts,
            f"slurm: job {alloc.job_id or '-'} on {len(alloc.nodes)} node(s)"
            + (f", {len(alloc.left_out)} left out" if alloc.left_out else "")
            + (f" ({len(alloc.out_of_service)} out of service)" if alloc.out_of_service else "")
            + (f", re-testing {len(alloc.borrowed)} node(s) sb-fleet drained" if alloc.borrowed else ""),
        )
        # the nodes out of service go the executor's one way for them; the rest Slurm left out are skipped
        away = {h: why for h, why in alloc.left_out.items() if h in alloc.out_of_service}
        skipped = {h: why for h, why in alloc.left_out.items() if h not in away}
        yield dataclasses.replace(ex, srun=SrunReach(s.srun, alloc.job_id, skipped), out_of_service=away)


def runtime_commands(run: RunInputs) -> dict[str, list[str]]:
    """Each host's container runtime command before its subcommand (``sudo -n`` first when it needs
    root), for a stop to remove the run's containers there; none without a runtime, or with enroot
    (whose container is a process of the run)."""
    runtime = run.config.fleet.runtime
    if runtime == "none":
        return {}
    c = container_settings(run.config)
    out = {}
    for h in run.inventory.hosts:
        argv = interrupt_argv(runtime, c, h.vars.get("sb_container_host_args"))
        if argv is not None:
            out[h.name] = argv
    return out


def slurm_out_of_service(run: RunInputs) -> dict[str, str]:
    """With a Slurm inventory (``-i slurm:...``), the nodes out of service for another reason than sb-fleet's
    at the run's creation (``inventory/slurm-query.json``), each with Slurm's state and reason."""
    from sb_fleet import bounded_json
    from sb_fleet.fleet.slurm_launch import foreign_out_of_service, unavailable

    path = run.rd.path / "inventory" / "slurm-query.json"
    if not path.is_file():
        return {}
    try:
        doc = bounded_json.read(path)
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict):
        return {}
    raw = doc.get("argv")
    argv: list[object] = list(raw) if isinstance(raw, list) else []
    asked = argv[argv.index("-t") + 1] if "-t" in argv[:-1] else ""
    if unavailable(str(asked)):  # -i slurm:state=drained...: the user asked for those nodes by their state
        return {}
    nodes = doc.get("nodes")
    return foreign_out_of_service(
        [n for n in nodes if isinstance(n, dict)] if isinstance(nodes, list) else []
    )


def record_allocation(run: RunInputs, alloc: Allocation) -> None:
    """Each allocation a command of the run used, appended to ``slurm-launch.json``."""
    path = "slurm-launch.json"
    doc = run.rd.read_json(path) or {"allocations": []}
    doc["allocations"].append(
        {
            "time": utcnow(),
            "job_id": alloc.job_id,
            "made_by_sb_fleet": alloc.made,
            "nodes": list(alloc.nodes),
            "left_out": dict(alloc.left_out),
            "out_of_service": sorted(alloc.out_of_service),
            "retested_drained": dict(alloc.borrowed),
        }
    )
    run.rd.write_json(path, doc)


def dry_run(run: RunInputs, hosts: list[str], validate: bool = False, opts: Options | None = None) -> str:
    """The plan, the rendered playbooks, and for validate each stage's deadline per host and the bound
    they put on its wall time."""
    pb = run.rd.path / "playbooks"
    narrowed = "" if len(hosts) == len(run.plan.hosts) else f"\nthis command would act on: {', '.join(hosts)}"
    text = f"{run.plan.describe()}{narrowed}\n\nrendered into {pb}:\n" + "\n".join(
        f"  {p.name}" for p in sorted(pb.iterdir()) if p.suffix in (".yml", ".json")
    )
    if not validate:
        return text
    opts = opts or Options()
    health = not opts.skip_health and run.rendered.check is not None
    fleet = run.config.fleet
    # each phase of the one exec keeps its own deadline: watched from the control node over sb-fleet's own
    # clients (ssh, or srun's steps under launcher: slurm), read as they come; through Ansible the host
    # watches them itself
    direct = runs_direct(fleet.exec_via, fleet.launcher, (run.inventory.get(h) for h in hosts))
    nightly = validate_deadlines(run.config, run.plan, health, warm=True, ships=direct)
    cold = validate_deadlines(run.config, run.plan, health, warm=False, ships=direct)
    return f"{text}\n\n{describe_bound(nightly, cold, len(hosts), opts.forks or fleet.forks, direct)}"


def finish(
    run: RunInputs, opts: Options, start: str, hosts: list[str], gate_passed: bool | None = None
) -> int:
    """Merge the outcomes of every host of the run, record the command, and return its exit code."""
    merged = merge(run.rd, list(run.plan.hosts))
    code = exit_for([Outcome(merged[h]["outcome"]) for h in hosts], gate_passed)
    run.rd.record_command(list(opts.argv), start, utcnow(), code, hosts)
    return code


def deploy_all(run: RunInputs, ex: Executor, hosts: list[str]) -> None:
    """The deploy stage, then the benchmark image where the fleet runs in containers."""
    deployed = deploy_stage(run, ex, hosts)
    if run.config.fleet.runtime != "none":
        deploy_image(run, ex, deployed)


def stage(opts: Options, name: str) -> tuple[int, RunInputs]:
    """One stage (deploy, run or collect) on a new or existing run directory; (exit code, run)."""
    start = utcnow()
    run = inputs_for(opts, create=name != "collect")
    hosts = run.select(opts.limit)
    with executor(run, opts, hosts) as ex:
        if name == "deploy":
            deploy_all(run, ex, hosts)
        elif name == "run":
            run_stage(run, ex, hosts, resume=opts.resume)
        else:
            collect_stage(run, ex, hosts)
    return finish(run, opts, start, hosts), run


def health_check(opts: Options) -> tuple[int, RunInputs]:
    """``sb-fleet check``: the health checks on the selected hosts; (exit code, run)."""
    start = utcnow()
    run = inputs_for(opts)
    hosts = run.select(opts.limit)
    with executor(run, opts, hosts) as ex:
        check_stage(run, ex, hosts)
    return finish(run, opts, start, hosts), run


def healthy_hosts(run: RunInputs, ex: Executor, hosts: list[str], opts: Options) -> list[str]:
    """validate's first step: the health checks; the hosts to benchmark. An ``unhealthy`` host is held
    back (recorded ``skipped`` in the later stages, with the reason) unless --run-unhealthy or
    health.run_unhealthy; a host the checks could not reach goes on, and deploy says what it finds."""
    if not health_first(run, opts):
        return hosts
    outcomes, _ = check_stage(run, ex, hosts)
    return hold_back(run, opts, outcomes, hosts)


def health_first(run: RunInputs, opts: Options) -> bool:
    """Whether validate opens with the health checks."""
    return not opts.skip_health and run.config.health.enabled and run.rendered.check is not None


def checked_start(
    run: RunInputs, ex: Executor, hosts: list[str], first: Step, opts: Options
) -> tuple[list[str], Started]:
    """validate's nightly path: the health checks, deploy's check and ``first`` in one SSH exec per
    host (deploy_stage.check_deploy_then_start); a host whose own checks fail stops there. The checks are
    then judged with the fleet's drift: a host unhealthy only by that (or by a warning under
    health.warn_is_unhealthy) had its first step run, and is held back all the same (its results are not
    judged). The hosts to go on with, and the started step."""
    check_profiles(run, hosts)
    go_on = opts.run_unhealthy or run.config.health.run_unhealthy
    deployed, started, checked = check_deploy_then_start(run, ex, hosts, first, go_on)
    # A host whose exec Ctrl-C/SIGTERM or its deadline cut off returned no output: its checks' verdict is
    # unknown and no check outcome is recorded for it (deploy's and run's say what happened and what to do
    # next; --resume redoes no checks).
    judged = [h for h in hosts if not checked.unknown(h, deployed[h])]
    outcomes, _ = judge_checks(run, ex, judged, checked.outcomes, checked.results)
    held = set(judged) - set(hold_back(run, opts, outcomes, judged))
    kept = [h for h in hosts if h not in held]
    return kept, dataclasses.replace(
        started, results={h: r for h, r in started.results.items() if h not in held}
    )


def hold_back(run: RunInputs, opts: Options, outcomes: dict[str, HostOutcome], hosts: list[str]) -> list[str]:
    """The hosts to benchmark after the health checks' ``outcomes``: all with --run-unhealthy or
    health.run_unhealthy, else those not ``unhealthy`` (the others recorded ``skipped`` in the later
    stages, with the reason)."""
    if opts.run_unhealthy or run.config.health.run_unhealthy:
        return hosts
    sick = [h for h in hosts if outcomes[h].outcome == Outcome.UNHEALTHY]
    if sick:
        for stage in ("deploy", "run", "collect"):
            save_stage(
                run.rd,
                stage,
                {
                    h: HostOutcome(h, stage, Outcome.SKIPPED, f"unhealthy: {outcomes[h].reason}"[:500])
                    for h in sick
                },
            )
        say(
            opts,
            f"{len(sick)} host(s) failed the health checks and are not benchmarked "
            f"(--run-unhealthy benchmarks them anyway)",
        )
    return [h for h in hosts if h not in set(sick)]


def analyse_run(
    run: RunInputs,
    opts: Options,
    confirmations: dict | None = None,
    split_checks: dict | None = None,
    unconfirmed: Collection[str] = (),
) -> ReportResult:
    """The fleet analysis of the run directory. With a history store (``--history`` or fleet.history),
    the run is judged against and recorded in it; with ``--rules``/``--baseline``, SuperBench's rules
    and baseline judge it too."""
    from sb_fleet.history.confirm import rerun_values_in
    from sb_fleet.report.analyse import report as analyse

    return analyse(
        run.rd.path,
        rules=opts.rules,
        baseline=opts.baseline,
        gates=run.config.gates,
        history=opts.history or run.config.fleet.history,
        confirmations=confirmations,
        split_checks=split_checks,
        unconfirmed=unconfirmed,
        reruns=rerun_values_in(run.rd.path) if confirmations or split_checks else None,
    )


def report(
    run: RunInputs, opts: Options, confirmations: dict | None = None, result: ReportResult | None = None
) -> int:
    """The fleet analysis (:func:`analyse_run`, or ``result`` when already made) written into the run
    directory; the gate's exit code."""
    if result is None:
        result = analyse_run(run, opts, confirmations)
    _, warnings = write_and_expose(result, run.rd.path, opts.prometheus)
    for w in warnings:  # never the verdict's business: said, and the exit code stands
        print(f"WARNING: {w}", file=sys.stderr)
    for rule, patterns in result.rules_unmatched.items():
        # loud whatever --quiet says: a rule that matches nothing passes every host silently
        print(f"WARNING: rule {rule!r}: patterns match no metric in the results: {patterns}", file=sys.stderr)
    return int(result.exit_code)


def check_judges(opts: Options) -> None:
    """Read the rules, baseline and history store given to validate now: a bad file fails before the run;
    so does a textfile directory that is not there."""
    if opts.prometheus.textfile_dir:
        check_textfile_dir(opts.prometheus.textfile_dir)
    if opts.rules is not None:
        from sb_fleet.analysis.superbench.rules import load_rules

        load_rules(Path(opts.rules))
    if opts.baseline is not None:
        from sb_fleet.analysis.superbench.baseline import load_baseline

        load_baseline(Path(opts.baseline))


def validate(opts: Options) -> tuple[int, RunInputs]:
    """deploy, run, collect and report: every host of the run ends with an outcome and a verdict."""
    start = utcnow()
    check_judges(opts)
    run = inputs_for(opts)
    hosts = run.select(opts.limit)
    if opts.history or run.config.fleet.history:  # a bad history file fails now, not after the run
        from sb_fleet.history.history_store import check_store

        check_store(opts.history or run.config.fleet.history or "")
    with executor(run, opts, hosts) as ex:
        first = can_start(run, opts.resume)  # deploy starts the first step in the same exec where it can
        started: Started | None = None
        if first is not None and health_first(run, opts):  # and the health checks open that exec
            hosts, started = checked_start(run, ex, hosts, first, opts)
        else:
            hosts = healthy_hosts(run, ex, hosts, opts)
        if hosts:
            if started is None and first is not None:
                _, started = deploy_then_start(run, ex, hosts, first)
            if started is not None:
                result = run_stage(run, ex, hosts, started=started)
            else:
                deploy_all(run, ex, hosts)
                result = run_stage(run, ex, hosts, resume=opts.resume)
            if result.interrupted:
                ex.drop_shipped()
                return finish(run, opts, start, hosts), run
            collect_stage(run, ex, hosts)
            merge(run.rd, list(run.plan.hosts))
            if opts.second_pass and run.plan.patterns:
                follow_up(run, lambda sub: sub_stages(sub, opts), lambda m: say(opts, m))
    if not hosts:  # no host to benchmark: the report still accounts for every host
        merge(run.rd, list(run.plan.hosts))
        report(run, opts)
        return finish(run, opts, start, run.select(opts.limit), gate_passed=False), run
    gate = verdict(run, opts)
    return finish(run, opts, start, run.select(opts.limit), gate_passed=gate == 0), run


def confirm_mode(run: RunInputs, opts: Options) -> str | None:
    """``explicit`` (--confirm: every failing host), ``auto`` (the default: the hosts failed on fleet
    statistics alone, bounded; gates.confirm), or None (--no-confirm, gates.confirm.auto: false)."""
    if opts.confirm:
        return "explicit"
    return "auto" if opts.auto_confirm and run.config.gates.confirm.auto else None


def verdict(run: RunInputs, opts: Options) -> int:
    """validate's report: the analysis, confirmed before it condemns (:func:`confirm`); the gate's exit
    code. Without a host to confirm, the first analysis is the report (no second one)."""
    mode = confirm_mode(run, opts)
    if mode is None:
        return report(run, opts)
    first = analyse_run(run, opts)
    splits = confirm_splits(run, opts, first)
    done = confirm(run, opts, first, mode)
    if done is None:
        if splits is None:
            return report(run, opts, result=first)
        return report(run, opts, result=analyse_run(run, opts, None, splits))
    results, doc = done
    beyond = set((doc.get("selection") or {}).get("not_confirmed") or [])
    # over the bound: more hosts flagged on fleet statistics than validate re-runs, so not failed on them
    # alone (unconfirmed); a confirmation that could not run at all leaves the first verdicts standing
    over = () if doc.get("not_run") else tuple(sorted(beyond))
    final = analyse_run(run, opts, results, splits, over) if results or splits or over else first
    if beyond and doc.get("not_run"):  # not run: the first verdict stands, and the report says so
        note = f"not confirmed ({doc['not_run']})"
        final.hosts = [
            dataclasses.replace(h, reason=_joined(h.reason, note)) if h.name in beyond else h
            for h in final.hosts
        ]
    final.confirmation = doc
    return report(run, opts, result=final)


def confirm_splits(run: RunInputs, opts: Options, first: ReportResult) -> dict[str, tuple[bool, str]] | None:
    """A population split found in the numbers, or steady hosts that disagree with no majority
    (inconsistent), must show again before it fails the gate (issue 35): the benchmarks concerned run
    again on the hosts of its groups, as a sub-run in ``<run>/confirm-splits/``; key -> (showed again,
    how), written to ``confirm-splits.json``. None when there is nothing to confirm (or it cannot be
    re-run: it stands)."""
    import time

    import yaml

    from sb_fleet.analysis.fleet_results import load_fleet
    from sb_fleet.analysis.majority import Disagreement, Inconsistency
    from sb_fleet.history import confirm as cf
    from sb_fleet.safe_files import atomic_write_text

    splits = [] if run.config.gates.populations.expected_mix else list(first.populations)
    incs = list(first.inconsistent) if run.config.gates.fleet.inconsistent == "fail" else []
    dis = list(first.disagreements)  # two hosts, no majority: it fails the gate only if it shows again
    if not splits and not incs and not dis:
        return None
    t0 = time.monotonic()
    metric_findings: list[Inconsistency | Disagreement] = [*incs, *dis]
    benchmarks = sorted(
        {cf.benchmark_of(f) for sp in splits for f in sp.families}
        | {cf.benchmark_of(i.metric) for i in metric_findings}
    )
    groups = [g for sp in splits for g in sp.groups] + [g for i in metric_findings for g in i.groups]
    hosts = sorted({h for g in groups for h in g})
    cfg = cf.confirm_config(yaml.safe_load((run.rd.path / "config.yaml").read_text()), benchmarks)
    if cfg is None or len(run.inventory.sources) != 1:
        return None
    parts = [f"{len(splits)} population split(s)"] if splits else []
    parts += [f"{len(incs)} inconsistent metric(s)"] if incs else []
    parts += [f"{len(dis)} disagreement(s) of two hosts"] if dis else []
    what = " and ".join(parts)
    say(opts, f"confirmation: re-running {', '.join(benchmarks)} on the {len(hosts)} hosts of {what}")
    cfg_path = run.rd.path / "confirm-splits-config.yaml"
    atomic_write_text(cfg_path, yaml.safe_dump(cfg, sort_keys=False))
    sub = create_run(
        run.rd.path / "confirm-splits", cfg_path, Path(run.inventory.sources[0]), ",".join(hosts)
    )
    sub_stages(sub, opts)
    again = load_fleet(sub.rd.path)
    rerun = cf.rerun_values(again.hosts, again.columns, again.values)
    noise = None if again.noise is None else cf.rerun_values(again.hosts, again.columns, again.noise)
    out = cf.recheck(splits, metric_findings, rerun, noise)
    seconds = time.monotonic() - t0
    run.rd.write_json(
        "confirm-splits.json",
        {
            "schema_version": 1,
            "seconds": round(seconds, 3),
            "benchmarks": benchmarks,
            "hosts": hosts,
            "run_dir": str(sub.rd.path),
            "splits": [
                {**sp.to_json(), "showed_again": out[sp.key][0], "how": out[sp.key][1]} for sp in splits
            ],
            "inconsistent": [
                {**i.to_json(), "showed_again": out[i.key][0], "how": out[i.key][1]} for i in incs
            ],
            "disagreements": [
                {**d.to_json(), "showed_again": out[d.key][0], "how": out[d.key][1]} for d in dis
            ],
        },
    )
    shown = sum(1 for ok, _ in out.values() if ok)
    say(opts, f"{what} re-run in {seconds:.1f} s: {shown} of {len(out)} showed again")
    return out


def _joined(reason: str, note: str) -> str:
    return f"{reason}; {note}" if reason else note


def say(opts: Options, message: str) -> None:
    """A line for the operator on stderr (the log only, with --quiet)."""
    log.info(message)
    if opts.progress:
        print(f"sb-fleet: {message}", file=sys.stderr, flush=True)


def sub_stages(sub: RunInputs, opts: Options) -> None:
    """deploy, run and collect a sub-run of validate (every host of it)."""
    hosts = sub.select(None)
    with executor(sub, opts, hosts) as ex:
        deploy_all(sub, ex, hosts)
        run_stage(sub, ex, hosts)
        collect_stage(sub, ex, hosts)


def confirm(
    run: RunInputs, opts: Options, first: ReportResult, mode: str = "explicit"
) -> tuple[dict, dict] | None:
    """Confirm before condemning: the benchmarks the chosen hosts were flagged on run again, on them and
    on a few passing control hosts, as a sub-run in ``<run>/confirm/``; each host's findings judged
    reproduced or not (:mod:`sb_fleet.history.confirm`), written to ``confirm.json``. ``explicit``
    (--confirm): every failing host; ``auto``: those failed on fleet statistics alone, worst first, at
    most gates.confirm's bound. (host -> Confirmation, confirm.json's document), or None when there is
    nothing to confirm."""
    import time

    import yaml

    from sb_fleet.analysis.fleet_results import load_fleet
    from sb_fleet.history import confirm as cf
    from sb_fleet.safe_files import atomic_write_text

    t0 = time.monotonic()
    selection = None
    if mode == "auto":
        g = run.config.gates.confirm
        limit = cf.confirm_limit(len(first.hosts), g.max_percent, g.min_hosts, g.max_hosts, g.all_below_hosts)
        selection = cf.select_for_confirmation(first.hosts, limit)
        if not selection.chosen and not selection.beyond:
            return None
        plan = cf.plan_confirmation(first.hosts, only=selection.chosen)
    else:
        plan = cf.plan_confirmation(first.hosts)
    if not plan.benchmarks and selection is None:
        return None
    cfg = cf.confirm_config(yaml.safe_load((run.rd.path / "config.yaml").read_text()), plan.all_benchmarks)
    why_not = (
        "nothing to re-run"
        if not plan.benchmarks
        else "the flagged benchmarks are not in the run's config"
        if cfg is None
        else "the run's inventory is not one file"
        if len(run.inventory.sources) != 1
        else None
    )
    if why_not is not None:
        if selection is None:
            return None
        doc = cf.confirmation_json(plan, {}, "", mode, time.monotonic() - t0, selection)
        doc["not_run"] = why_not
        selection = dataclasses.replace(selection, beyond=(*selection.chosen, *selection.beyond))
        doc["selection"] = selection.to_json()
        run.rd.write_json("confirm.json", doc)
        say(opts, f"confirmation: not run ({why_not}); {len(selection.beyond)} host(s) keep their verdict")
        return {}, doc
    say(
        opts,
        f"confirmation: re-running {', '.join(plan.all_benchmarks)} on {len(plan.benchmarks)} flagged "
        f"host(s) and {len(plan.controls)} control host(s) before the verdict"
        + (" (--no-confirm skips this)" if mode == "auto" else ""),
    )
    cfg_path = run.rd.path / "confirm-config.yaml"
    atomic_write_text(cfg_path, yaml.safe_dump(cfg, sort_keys=False))
    sub = create_run(run.rd.path / "confirm", cfg_path, Path(run.inventory.sources[0]), ",".join(plan.hosts))
    sub_stages(sub, opts)
    again, before = load_fleet(sub.rd.path), first.fleet
    rerun = cf.rerun_values(again.hosts, again.columns, again.values)
    firsts = cf.rerun_values(before.hosts, before.columns, before.values)
    result = cf.judge_confirmation(
        {h.name: h.issues for h in first.hosts if h.name in plan.benchmarks},
        {h: rerun[h] for h in plan.benchmarks if h in rerun},
        {c: firsts.get(c, {}) for c in plan.controls},
        {c: rerun[c] for c in plan.controls if c in rerun},
        firsts=firsts,
        direction=before.directions.of,
        noise=None if again.noise is None else cf.rerun_values(again.hosts, again.columns, again.noise),
    )
    seconds = time.monotonic() - t0
    doc = cf.confirmation_json(plan, result, sub.rd.path, mode, seconds, selection)
    run.rd.write_json("confirm.json", doc)
    flaky = sum(1 for c in result.values() if c.result == cf.FLAKY)
    beyond = (
        f"; {len(selection.beyond)} host(s) over the bound not confirmed"
        if selection and selection.beyond
        else ""
    )
    say(
        opts,
        f"confirmation took {seconds:.1f} s: {len(result) - flaky} host(s) reproduced, {flaky} flaky{beyond}",
    )
    return result, doc


def cleanup(opts: Options, images: bool, workspaces: bool, cache: bool = False) -> tuple[int, str]:
    """``sb-fleet cleanup``: (exit code, what to print)."""
    start = utcnow()
    run = inputs_for(opts)
    hosts = run.select(opts.limit)
    pb = cleanup_playbook(run, images, workspaces, cache)
    if opts.dry_run:
        return 0, pb.read_text()
    with executor(run, opts, hosts) as ex:
        outcomes = cleanup_stage(run, ex, hosts, pb)
    code = exit_for(o.outcome for o in outcomes.values())
    run.rd.record_command(list(opts.argv), start, utcnow(), code, hosts)
    lines = [f"{h}: {o.outcome.value}{' - ' + o.reason if o.reason else ''}" for h, o in outcomes.items()]
    return code, "\n".join([*lines, f"run directory: {run.rd.path}"])


__all__ = [
    "Options",
    "cleanup",
    "dry_run",
    "health_check",
    "inputs_for",
    "outcomes_of",
    "report",
    "stage",
    "validate",
]
