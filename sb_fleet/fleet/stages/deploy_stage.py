"""The deploy stage: prerequisites, the suite and its venv on every host, and each host's system facts.

``validate`` may hand it the plan's first step (:func:`deploy_then_start`): a host that already has the
suite then starts that step's runner in the same SSH exec as its deploy check (one Ansible task per host
for both), and the run stage takes the step's result from here instead of running it again.
"""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any

from sb_fleet.fleet.executor import Executor, Started
from sb_fleet.fleet.interrupts import Interrupts
from sb_fleet.outcome import HostOutcome, Outcome
from sb_fleet.plan.deadlines import deploy_deadline
from sb_fleet.plan.run_plan import Step
from sb_fleet.plan.tasks import HOSTPREP, HOSTPREP_FAST, RUN_FOLLOWS
from sb_fleet.plan.templates import run_env, runner_args
from sb_fleet.rundir.outcome_table import save_stage
from sb_fleet.rundir.runinputs import RunInputs
from sb_fleet.safe_files import safe_name

_MARK = re.compile(rf"^{RUN_FOLLOWS}\n?", re.MULTILINE)


def deploy(run: RunInputs, ex: Executor, hosts: list[str]) -> dict[str, HostOutcome]:
    outcomes, _ = _deploy(run, ex, hosts, None)
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
    return _deploy(run, ex, hosts, step)


def _deploy(
    run: RunInputs, ex: Executor, hosts: list[str], step: Step | None
) -> tuple[dict[str, HostOutcome], Started]:
    extravars = None
    if step is not None:
        env = ["PYTHONPATH=suite", *(f"{k}={v}" for k, v in run_env(run.config).items())]
        args = runner_args(run.run_id, step, run.config.fleet.master_port)
        extravars = {
            "sb_first_step": {"mark": RUN_FOLLOWS, "env": env, "args": args, "timeout": step.timeout}
        }
    # Ctrl-C while the first step runs stops it cleanly (as in the run stage); a plain deploy is not
    # interruptible that way.
    intr = Interrupts()
    with ex.progress.stage("deploy", hosts), intr if step else contextlib.nullcontext():
        res = ex.run(
            "deploy",
            run.rendered.deploy,
            hosts,
            cancel=intr.fired if step else None,
            extravars=extravars,
            deadline=deploy_deadline(run.config, step.timeout if step else 0),
        )
    started: dict[str, dict[str, Any]] = {}
    for h, out in res.results.items():
        fast = out.get(HOSTPREP_FAST, {})
        if step is not None:
            fast, first = split_started(fast)
            if first is not None:
                started[h] = first
        # the suite-on-stdin task when it ran, else the fast path (the suite was already there)
        facts = host_facts(out.get(HOSTPREP, {})) or host_facts(fast)
        if facts:
            run.rd.write_json(f"facts/{safe_name(h)}.json", {"host": h, **facts})
    save_stage(run.rd, "deploy", res.outcomes)
    unfinished = tuple(h for h, o in res.outcomes.items() if o.outcome == Outcome.PENDING)
    return res.outcomes, Started(step.id if step else "", started, intr.signal, unfinished)


def split_started(res: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """A fast-path result that went on into the first step -> (hostprep's part, the runner's part); the
    result as it is and None when the runner did not start (no marker line)."""
    out, err = str(res.get("stdout") or ""), str(res.get("stderr") or "")
    m = _MARK.search(out)
    if m is None:
        return res, None
    e = _MARK.search(err)
    prep_err, run_err = (err[: e.start()], err[e.end() :]) if e else (err, "")
    prep = {**res, "rc": 0, "stdout": out[: m.start()], "stderr": prep_err, "failed": False}
    return prep, {"rc": res.get("rc"), "stdout": out[m.end() :], "stderr": run_err}


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
