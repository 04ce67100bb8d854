"""The deploy stage: prerequisites, the suite and its venv on every host, and each host's system facts.

``validate`` may hand it the plan's first step (:func:`deploy_then_start`): a host that already has the
suite then starts that step's runner in the same SSH exec as its deploy check (one Ansible task per host
for both), a host that lacks it in the exec that brings the suite (deploy-suite.yml), and the run stage
takes the step's result from here instead of running it again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import secrets
from dataclasses import dataclass
from typing import Any

from sb_fleet.fleet.direct_exec import ExecTask, HostExec
from sb_fleet.fleet.exec_phases import ExecPhases, exec_phases
from sb_fleet.fleet.executor import Executor, StageResult, Started
from sb_fleet.fleet.interrupts import Interrupts
from sb_fleet.fleet.stages.stage_common import remote_results
from sb_fleet.outcome import HostOutcome, Outcome
from sb_fleet.plan.deadlines import HEALTH_KILL_AFTER_S, deploy_deadline
from sb_fleet.plan.host_exec import (
    FirstStep,
    HealthFirst,
    ShipResults,
    exec_timeout,
    fast_commands,
    read_exec_hosts,
    suite_commands,
    suite_invocations,
)
from sb_fleet.plan.render import suite_b64_path
from sb_fleet.plan.run_plan import Step
from sb_fleet.plan.tasks import (
    HEALTH_DONE,
    HOSTPREP,
    HOSTPREP_FAST,
    NEED_SUITE,
    RUN_FOLLOWS,
    SUITE_READY,
    ends_with,
)
from sb_fleet.plan.templates import run_env, runner_args
from sb_fleet.rundir.outcome_table import save_stage
from sb_fleet.rundir.runinputs import RunInputs
from sb_fleet.safe_files import safe_name

_MARK = re.compile(rf"^{RUN_FOLLOWS}\n?", re.MULTILINE)
SHIP_MARK = "sb-fleet: the results follow"  # and the run's random token, on one line
# The most a host's exec sends of its results (past these, collect fetches them over SSH as before): a
# nightly run's results are a few files of JSON and logs a host.
SHIP_MAX_FILES = 2000
SHIP_MAX_BYTES = 64 << 20


def deploy(run: RunInputs, ex: Executor, hosts: list[str]) -> dict[str, HostOutcome]:
    outcomes, _, _ = _deploy(run, ex, hosts, None)
    return outcomes


def can_start(run: RunInputs, resume: bool) -> Step | None:
    """The step deploy can start on its own hosts in the same exec, or None: the first step of a plan run
    directly on the hosts (no container image between deploy and run), one host at a time, not resumed."""
    steps = run.plan.steps
    if resume or not steps or run.config.fleet.runtime != "none":
        return None
    first = steps[0]
    return None if first.multi_node or first.label else first


def deploy_then_start(
    run: RunInputs, ex: Executor, hosts: list[str], step: Step
) -> tuple[dict[str, HostOutcome], Started]:
    """Deploy, and on every host whose suite is already in place start ``step`` in the same exec."""
    outcomes, started, _ = _deploy(run, ex, hosts, step)
    return outcomes, started


@dataclass(frozen=True)
class Checked:
    """What the health checks that opened deploy's exec gave (:func:`check_deploy_then_start`): per host
    the executor's word in check's terms, and the checks' own result (``rc``, ``stdout``, ``stderr``)
    where they ended with their marker line."""

    outcomes: dict[str, HostOutcome]
    results: dict[str, dict[str, Any]]

    def unknown(self, host: str, deploy: HostOutcome) -> bool:
        """Whether the checks' verdict is unknown because the exec was cut off with no output past its
        start: Ctrl-C/SIGTERM (``pending``), or its deadline (``timeout``), which is longer than the
        checks' own bound on the host, so that they had ended there and the hang was past them (in
        hostprep or the first step). No check outcome is recorded for such a host: deploy's and run's
        say what happened (run's lets collect fetch what a started step left). A host whose exec the
        control node ended in the checks' own phase (no end line within their deadline: an interpreter
        that never started) is known: its checks timed out (``unhealthy``)."""
        if deploy.details.get("phase") == "health":
            return False
        return host not in self.results and deploy.outcome in (Outcome.PENDING, Outcome.TIMEOUT)


def check_deploy_then_start(
    run: RunInputs, ex: Executor, hosts: list[str], step: Step, go_on: bool
) -> tuple[dict[str, HostOutcome], Started, Checked]:
    """validate's nightly path, one SSH exec per host: the health checks, then (where they passed, or
    ``go_on``) deploy's check and, where the suite is in place, ``step``. The checks' verdict is the
    caller's to judge (the fleet's drift needs every host); a host stopped on its own failed checks has
    a deploy outcome of ok and no started step."""
    outcomes, started, checked = _deploy(run, ex, hosts, step, go_on)
    assert checked is not None
    return outcomes, started, checked


def _deploy(
    run: RunInputs, ex: Executor, hosts: list[str], step: Step | None, health_go_on: bool | None = None
) -> tuple[dict[str, HostOutcome], Started, Checked | None]:
    health = health_go_on is not None
    first = None
    if step is not None:
        env = ["PYTHONPATH=suite", *(f"{k}={v}" for k, v in run_env(run.config).items())]
        args = runner_args(run.run_id, step, run.config.fleet.master_port)
        first = FirstStep(RUN_FOLLOWS, tuple(env), tuple(args), step.timeout)
    checks_first = None
    if health:
        checks_first = HealthFirst(
            HEALTH_DONE, run.config.health.exec_timeout, HEALTH_KILL_AFTER_S, bool(health_go_on)
        )
    doc = read_exec_hosts(run.rendered.exec_hosts)

    tag = ex.run_id or ""
    timeout = exec_timeout(run.config.fleet.deploy_timeout, checks_first, first)
    ok_mark = f"(?m)^{first.mark}$" if first is not None else ""
    ship = ship_results(run, ex, hosts) if first is not None else None
    mark, ship_cap = (ship.mark, ship.cap) if ship is not None else ("", 0)

    def phases(transfer: bool) -> ExecPhases:
        """Each phase of the exec with its own deadline, enforced from the control node."""
        return exec_phases(
            run.config.health.exec_timeout if checks_first is not None else None,
            run.config.fleet.prep_timeout,
            run.config.fleet.deploy_timeout,
            (step.id, step.timeout) if step is not None else None,
            transfer,
        )

    def commands(part: str, on: list[str]) -> tuple[dict[str, Any] | None, ExecTask | None]:
        """Each host's command, built once (sb_fleet.plan.host_exec): as the play's extra variables, and
        for sb-fleet's own ssh clients (Executor.run's ``direct``: the fast path's raw line, or the
        transfer's argv as a line with the suite archive on stdin). A run directory rendered before
        exec-hosts.json gets what its deploy.yml builds them from in Jinja, and no direct path."""
        if doc is None:
            old: dict[str, Any] = {}
            if first is not None:
                old["sb_first_step"] = dataclasses.asdict(first)
            if checks_first is not None:
                old["sb_health_first"] = dataclasses.asdict(checks_first)
            return old or None, None
        sb_exec: dict[str, Any]
        if part == "fast":
            lines = fast_commands(doc, on, tag, checks_first, first, ship)
            # the hosts whose exec goes through the playbook watch its phases themselves
            direct = set(ex.direct_hosts(on))
            played = [h for h in on if h not in direct]
            sb_exec = fast_commands(doc, played, tag, checks_first, first, ship, phases(False).host_watch())
            task = ExecTask(
                HOSTPREP_FAST,
                {h: HostExec(c) for h, c in lines.items()},
                timeout,
                ok_mark,
                mark,
                ship_cap,
                phases(transfer=False),
            )
        else:
            sb_exec = suite_invocations(doc, on, tag, checks_first, first, ship)
            b64 = suite_b64_path(run.rendered.suite_archive)
            task = ExecTask(
                HOSTPREP,
                {h: HostExec(c, b64) for h, c in suite_commands(sb_exec).items()},
                timeout,
                ok_mark,
                mark,
                ship_cap,
                phases(transfer=True),
            )
        return {"sb_exec": sb_exec, "sb_exec_timeout": timeout, "sb_step_mark": ok_mark}, task

    # Ctrl-C while the first step runs stops it cleanly (as in the run stage); a plain deploy is not
    # interruptible that way.
    intr = Interrupts()
    with (
        ex.progress.stage("check+deploy" if health else "deploy", hosts),
        intr if step else contextlib.nullcontext(),
    ):
        suite_pb = run.rendered.deploy_suite  # None: a run directory whose deploy.yml has both tasks
        # the suite's transfer ends in the same exec as the fast path (checks, hostprep, first step):
        # the same variables and the same deadline
        deadline = deploy_deadline(run.config, step.timeout if step else 0, health)
        fast_vars, fast_task = commands("fast", hosts)
        res = ex.run(
            "deploy",
            run.rendered.deploy,
            hosts,
            cancel=intr.fired if step else None,
            extravars=fast_vars,
            deadline=deadline,
            done=exec_done if suite_pb is not None else deploy_done,
            direct=fast_task if suite_pb is not None else None,
        )
        stop_unhealthy = health and not health_go_on
        lacking = [h for h in hosts if needs_suite(res, h, stop_unhealthy)] if suite_pb is not None else []
        if suite_pb is not None and lacking and not (step and intr.fired()):
            suite_vars, suite_task = commands("suite", lacking)
            res = with_suite(
                res,
                ex.run(
                    "deploy-suite",
                    suite_pb,
                    lacking,
                    cancel=intr.fired if step else None,
                    extravars=suite_vars,
                    deadline=deadline,
                    done=ends_with(HOSTPREP),
                    direct=suite_task,
                ),
            )
    started: dict[str, dict[str, Any]] = {}
    checks: dict[str, dict[str, Any]] = {}
    for h, out in res.results.items():
        parts = exec_parts(out, health, bool(health_go_on), step is not None)
        if parts.checks is not None:
            checks[h] = parts.checks
        if parts.started is not None:
            started[h] = parts.started
        if parts.facts:
            run.rd.write_json(f"facts/{safe_name(h)}.json", {"host": h, **parts.facts})
    checked: Checked | None = None
    if health:
        checked = Checked(
            {
                h: check_outcome(h, o, checks.get(h), run.config.health.exec_timeout)
                for h, o in res.outcomes.items()
            },
            checks,
        )
    save_stage(run.rd, "deploy", res.outcomes)
    unfinished = tuple(h for h, o in res.outcomes.items() if o.outcome == Outcome.PENDING)
    return res.outcomes, Started(step.id if step else "", started, intr.signal, unfinished), checked


def ship_results(run: RunInputs, ex: Executor, hosts: list[str]) -> ShipResults | None:
    """Where the exec's first step is the plan's only one (its results are the run's, whole, when it
    ends): each host that goes over sb-fleet's own ssh client sends them after it, within collect's budgets
    and this path's own (:data:`SHIP_MAX_FILES`, :data:`SHIP_MAX_BYTES`); None otherwise."""
    direct = ex.direct_hosts(hosts)
    if len(run.plan.steps) != 1 or not direct:
        return None
    budgets = run.config.collect
    return ShipResults(
        f"{SHIP_MARK} {secrets.token_hex(16)}",
        {h: remote_results(run, h) for h in direct},
        min(budgets.max_files, SHIP_MAX_FILES),
        budgets.max_file_bytes,
        min(budgets.max_host_bytes, SHIP_MAX_BYTES),
    )


@dataclass(frozen=True)
class ExecParts:
    """What one host's exec gave: the health checks' result (``rc``, ``stdout``, ``stderr``) where they
    ended with their marker line, the first step's runner part where it started, hostprep's facts."""

    checks: dict[str, Any] | None = None
    started: dict[str, Any] | None = None
    facts: dict[str, Any] | None = None


def exec_parts(out: dict[str, dict[str, Any]], health: bool, go_on: bool, step: bool) -> ExecParts:
    """One host's deploy results (task name -> result) cut into :class:`ExecParts`. The exec is the
    suite's transfer where it ran (a cold host runs its checks, hostprep and first step there), else the
    fast path (the suite was in place). A run directory rendered before the transfer ended in first_exec
    has the checks in the fast path's exec and hostprep alone in the transfer's: both are read. A host
    whose own checks failed stopped after them (unless ``go_on``): nothing else ran there."""
    ran: dict[str, Any] | None = None
    rest: dict[str, Any] = out.get(HOSTPREP) or out.get(HOSTPREP_FAST, {})
    if health:
        ran, rest = split_health(rest)
        if ran is None and HOSTPREP in out:
            ran, _ = split_health(out.get(HOSTPREP_FAST, {}))
        if ran is not None and ran["rc"] != 0 and not go_on:
            return ExecParts(checks=ran)
    first = None
    if step:
        rest, first = split_started(rest)
    return ExecParts(ran, first, host_facts(rest))


_HEALTH_MARK = re.compile(rf"^{HEALTH_DONE} (-?\d+)\n?", re.MULTILINE)
TIMEOUT_RC = 124  # coreutils' timeout: the checks ran past health.exec_timeout on the host


def _cut(
    res: dict[str, Any], mark: re.Pattern[str]
) -> tuple[re.Match[str], tuple[str, str], tuple[str, str]] | None:
    """One exec's result cut at the marker line that both its streams carry: (the match in stdout,
    stdout before/after, stderr before/after); None without the line on stdout (the exec did not get
    that far). A stderr without it is all "before"."""
    out, err = str(res.get("stdout") or ""), str(res.get("stderr") or "")
    m = mark.search(out)
    if m is None:
        return None
    e = mark.search(err)
    return m, (out[: m.start()], out[m.end() :]), ((err[: e.start()], err[e.end() :]) if e else (err, ""))


def split_health(res: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """A fast-path result that the health checks opened -> (the checks' result with their exit status,
    the rest of the exec's result); None and the result as it is when the checks' marker line is not
    there (the exec broke off before their end)."""
    cut = _cut(res, _HEALTH_MARK)
    if cut is None:
        return None, res
    m, (checks_out, rest_out), (checks_err, rest_err) = cut
    checks_out = checks_out.removeprefix(
        SUITE_READY + "\n"
    )  # the suite's transfer: unpacked, then the checks
    return {"rc": int(m.group(1)), "stdout": checks_out, "stderr": checks_err}, {
        **res,
        "stdout": rest_out,
        "stderr": rest_err,
    }


def check_outcome(host: str, deploy: HostOutcome, checks: dict[str, Any] | None, limit_s: int) -> HostOutcome:
    """The host's outcome in check's terms: ok where the checks ended with their marker line (their
    verdict is in their output), timeout where the host's timeout stopped them, else deploy's own word
    (unreachable, refused key, interrupted, or its deadline: the exec broke off inside the checks)."""
    if checks is not None and checks["rc"] == TIMEOUT_RC:
        return HostOutcome(
            host,
            "check",
            Outcome.TIMEOUT,
            f"health checks: no end within its deadline of {limit_s} s (health.exec_timeout); stopped on the host",
        )
    if checks is not None and checks["rc"] in (0, 1):
        return HostOutcome(host, "check", Outcome.OK)
    if checks is not None:
        err = " ".join(str(checks.get("stderr") or "").split())[-200:]
        why = f"health checks exited {checks['rc']}"
        if checks["rc"] in (126, 127):  # the shell's "cannot run" / "not found"
            why += " (coreutils' timeout or the host's Python could not be run: install coreutils, check sb_python)"
        return HostOutcome(host, "check", Outcome.FAILED, f"{why}{': ' + err if err else ''}")
    if deploy.outcome == Outcome.OK:  # ended, but without the marker: not the checks' output
        return HostOutcome(
            host, "check", Outcome.FAILED, "health checks: the exec ended without their end line"
        )
    return HostOutcome(host, "check", deploy.outcome, deploy.reason, details=deploy.details)


# deploy.yml's end for a host: its one task (the exec), whatever it said
exec_done = ends_with(HOSTPREP_FAST)


def needs_suite(res: StageResult, host: str, stop_unhealthy: bool) -> bool:
    """Whether the host's exec ended saying it lacks this suite version (and nothing stopped it before:
    its own failed health checks, unless --run-unhealthy)."""
    if res.outcomes[host].outcome != Outcome.OK:
        return False
    fast: dict[str, Any] = res.results.get(host, {}).get(HOSTPREP_FAST, {})
    checks, rest = split_health(fast)
    if checks is not None and checks["rc"] != 0 and stop_unhealthy:
        return False
    return NEED_SUITE in str(rest.get("stdout") or "")


def with_suite(res: StageResult, suite: StageResult) -> StageResult:
    """deploy's result with the suite's transfer for the hosts that needed it: their outcome is the
    transfer's (as deploy's), their results both plays' tasks."""
    outcomes = dict(res.outcomes)
    results = {h: dict(r) for h, r in res.results.items()}
    for h, o in suite.outcomes.items():
        outcomes[h] = dataclasses.replace(o, stage=res.stage)
        results.setdefault(h, {}).update(suite.results.get(h, {}))
    return dataclasses.replace(
        res, outcomes=outcomes, results=results, duration_s=res.duration_s + suite.duration_s
    )


def deploy_done(task: str, result: dict[str, Any]) -> bool:
    """deploy.yml's end for a host in a run directory rendered before deploy-suite.yml (its deploy.yml
    has both tasks): the fast path's result when the suite was in place (no need-suite line), else the
    task that brought the suite."""
    if task == HOSTPREP_FAST:
        return NEED_SUITE not in str(result.get("stdout") or "")
    return task == HOSTPREP


def split_started(res: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """A fast-path result that went on into the first step -> (hostprep's part, the runner's part); the
    result as it is and None when the runner did not start (no marker line)."""
    cut = _cut(res, _MARK)
    if cut is None:
        return res, None
    _, (prep_out, run_out), (prep_err, run_err) = cut
    prep = {**res, "rc": 0, "stdout": prep_out, "stderr": prep_err, "failed": False}
    return prep, {"rc": res.get("rc"), "stdout": run_out, "stderr": run_err}


def host_facts(res: dict) -> dict | None:
    """The facts hostprep prints as its last stdout line (a JSON object), or None."""
    out = str(res.get("stdout") or "").strip()
    if not out:
        return None
    try:
        facts = json.loads(out.splitlines()[-1])
    except ValueError:
        return None
    return facts if isinstance(facts, dict) else None
