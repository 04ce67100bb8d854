"""validate's deploy that starts the first step in the same exec: the split of that one task's output, and
how the run stage takes the step's result from it."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

from sb_fleet.fleet.executor import StageResult
from sb_fleet.fleet.stages.deploy_stage import (
    Checked,
    ExecParts,
    check_outcome,
    exec_parts,
    host_facts,
    split_health,
    split_started,
)
from sb_fleet.fleet.stages.run_stage import with_started
from sb_fleet.outcome import HostOutcome, Outcome
from sb_fleet.plan.tasks import HEALTH_DONE, HOSTPREP, HOSTPREP_FAST, NEED_SUITE, RUN_FOLLOWS, run_task

FACTS = '{"host": "h1", "cpus": 8}'


def test_the_runner_part_follows_the_marker_on_both_streams():
    res = {
        "rc": 1,
        "stdout": f"note\n{FACTS}\n{RUN_FOLLOWS}\nsb-fleet-runner-record: {{}}\n",
        "stderr": f"prep warning\n{RUN_FOLLOWS}\nTraceback (most recent call last):\n",
        "failed": False,
    }
    prep, first = split_started(res)
    assert prep["rc"] == 0 and prep["stderr"] == "prep warning\n"
    assert host_facts(prep) == {"host": "h1", "cpus": 8}
    assert first == {
        "rc": 1,
        "stdout": "sb-fleet-runner-record: {}\n",
        "stderr": "Traceback (most recent call last):\n",
    }


def test_without_the_marker_the_runner_did_not_start():
    for res in (
        {"rc": 0, "stdout": "SB_FLEET_NEED_SUITE\n", "stderr": ""},  # the suite is not there yet
        {"rc": 2, "stdout": '{"error": "no GPU"}\n', "stderr": "x"},  # hostprep refused the host
        {"rc": 0, "stdout": f"{FACTS}\n", "stderr": ""},  # a deploy without the first step
        {"msg": "unreachable"},
    ):
        assert split_started(res) == (res, None)


def test_the_marker_counts_only_as_a_line_of_its_own():
    res = {"rc": 0, "stdout": f"echo {RUN_FOLLOWS} here\n{FACTS}\n", "stderr": ""}
    assert split_started(res) == (res, None)


def test_the_run_stage_judges_started_hosts_like_its_own_task():
    progress = []
    ex = SimpleNamespace(progress=SimpleNamespace(update=lambda h, o, d: progress.append((h, o))))
    step = SimpleNamespace(id="step01")
    res = StageResult("run-step01", {"h3": HostOutcome("h3", "run", Outcome.OK)}, {"h3": {}})
    out = with_started(
        ex,  # type: ignore[arg-type]
        step,  # type: ignore[arg-type]
        res,
        {"h1": {"rc": 1, "stdout": "", "stderr": ""}, "h2": {"rc": 137, "stdout": "", "stderr": ""}},
    )
    assert out.outcomes["h1"].outcome == Outcome.OK  # exit 1: the runner ran; its record is judged next
    assert out.outcomes["h2"].outcome == Outcome.FAILED
    assert out.outcomes["h3"].outcome == Outcome.OK
    assert out.results["h2"][run_task("step01")]["rc"] == 137
    assert {h for h, _ in progress} == {"h1", "h2"}


# -- the health checks that open the exec (validate's nightly path) -----------------------------------------
DOC = '{"host": "h1", "verdict": "pass", "checks": []}'


def test_the_checks_part_ends_at_their_marker_with_their_exit_status():
    res = {
        "rc": 1,
        "stdout": f"{DOC}\n{HEALTH_DONE} 0\n{FACTS}\n{RUN_FOLLOWS}\nsb-fleet-runner-record: {{}}\n",
        "stderr": f"a probe warned\n{HEALTH_DONE} 0\nprep warning\n{RUN_FOLLOWS}\nboom\n",
    }
    checks, rest = split_health(res)
    assert checks == {"rc": 0, "stdout": f"{DOC}\n", "stderr": "a probe warned\n"}
    prep, first = split_started(rest)
    assert host_facts(prep) == {"host": "h1", "cpus": 8} and prep["stderr"] == "prep warning\n"
    assert first == {"rc": 1, "stdout": "sb-fleet-runner-record: {}\n", "stderr": "boom\n"}


def test_a_host_whose_checks_failed_stopped_after_them():
    res = {"rc": 0, "stdout": f"{DOC}\n{HEALTH_DONE} 1\n", "stderr": f"{HEALTH_DONE} 1\n"}
    checks, rest = split_health(res)
    assert checks is not None and checks["rc"] == 1 and rest["stdout"] == ""
    o = check_outcome("h1", HostOutcome("h1", "deploy", Outcome.OK), checks, 120)
    assert o.outcome == Outcome.OK and o.stage == "check"  # the verdict is in the document, judged next


def test_checks_stopped_by_the_hosts_timeout_or_cut_off_before_their_end():
    checks, _ = split_health({"rc": 0, "stdout": f'{{"host": \n{HEALTH_DONE} 124\n', "stderr": ""})
    o = check_outcome("h1", HostOutcome("h1", "deploy", Outcome.OK), checks, 15)
    assert (
        o.outcome == Outcome.TIMEOUT
        and "no end within its deadline of 15 s (health.exec_timeout)" in o.reason
    )
    # no marker: the exec broke off inside the checks; deploy's word stands for them
    res = {"msg": "timed out", "stdout": '{"ho', "stderr": ""}
    assert split_health(res) == (None, res)
    late = HostOutcome("h1", "deploy", Outcome.TIMEOUT, "deploy: no end within its deadline")
    o = check_outcome("h1", late, None, 15)
    assert o.outcome == Outcome.TIMEOUT and o.stage == "check" and o.reason == late.reason
    ended = check_outcome("h1", HostOutcome("h1", "deploy", Outcome.OK), None, 15)
    assert ended.outcome == Outcome.FAILED and "without their end line" in ended.reason


def test_a_marker_inside_a_line_is_not_the_checks_end():
    res = {"rc": 0, "stdout": f'{{"note": "{HEALTH_DONE} 0"}}\n', "stderr": ""}
    assert split_health(res) == (None, res)


def test_checks_that_could_not_start_say_what_is_missing():
    res = {
        "rc": 0,
        "stdout": f"{HEALTH_DONE} 127\n",
        "stderr": f"sh: 1: timeout: not found\n{HEALTH_DONE} 127\n",
    }
    checks, _ = split_health(res)
    o = check_outcome("h1", HostOutcome("h1", "deploy", Outcome.OK), checks, 15)
    assert (
        o.outcome == Outcome.FAILED and "install coreutils" in o.reason and "timeout: not found" in o.reason
    )


def _exec(health_rc: int | None, step: bool, facts: bool = True) -> dict:
    out = (f"{{}}\n{HEALTH_DONE} {health_rc}\n" if health_rc is not None else "") + (
        f"{FACTS}\n" if facts else ""
    )
    err = f"{HEALTH_DONE} {health_rc}\n" if health_rc is not None else ""
    if step:
        out, err = out + f"{RUN_FOLLOWS}\nsb-fleet-runner-record: {{}}\n", err + f"{RUN_FOLLOWS}\n"
    return {"rc": 0, "stdout": out, "stderr": err}


NEED = {"rc": 0, "stdout": f"{NEED_SUITE}\n", "stderr": ""}


def test_a_cold_hosts_checks_and_first_step_come_from_the_suites_transfer():
    cold = {HOSTPREP_FAST: NEED, HOSTPREP: _exec(0, step=True)}
    parts = exec_parts(cold, health=True, go_on=False, step=True)
    assert parts.checks == {"rc": 0, "stdout": "{}\n", "stderr": ""}
    assert parts.started == {"rc": 0, "stdout": "sb-fleet-runner-record: {}\n", "stderr": ""}
    assert parts.facts == {"host": "h1", "cpus": 8}
    warm = {HOSTPREP_FAST: _exec(0, step=True)}
    assert exec_parts(warm, health=True, go_on=False, step=True) == parts


def test_a_cold_host_whose_checks_failed_stopped_after_them_in_the_transfer():
    cold = {HOSTPREP_FAST: NEED, HOSTPREP: _exec(1, step=False, facts=False)}
    parts = exec_parts(cold, health=True, go_on=False, step=True)
    assert parts.checks is not None and parts.checks["rc"] == 1
    assert parts.started is None and parts.facts is None
    # --run-unhealthy: the host went on into hostprep and the step
    cold = {HOSTPREP_FAST: NEED, HOSTPREP: _exec(1, step=True)}
    parts = exec_parts(cold, health=True, go_on=True, step=True)
    assert parts.checks is not None and parts.checks["rc"] == 1 and parts.started is not None


def test_a_run_directory_rendered_before_has_the_checks_in_the_fast_exec():
    old = {
        HOSTPREP_FAST: {"rc": 0, "stdout": f"{{}}\n{HEALTH_DONE} 0\n{NEED_SUITE}\n", "stderr": ""},
        HOSTPREP: {"rc": 0, "stdout": f"{FACTS}\n", "stderr": ""},
    }
    parts = exec_parts(old, health=True, go_on=False, step=False)
    assert parts.checks == {"rc": 0, "stdout": "{}\n", "stderr": ""}
    assert parts.started is None and parts.facts == {"host": "h1", "cpus": 8}


def test_a_plain_deploy_reads_hostprep_alone():
    assert exec_parts(
        {HOSTPREP_FAST: NEED, HOSTPREP: _exec(None, step=False)}, False, False, False
    ) == ExecParts(facts={"host": "h1", "cpus": 8})
    lost: dict = {HOSTPREP_FAST: {"msg": "unreachable"}}
    assert exec_parts(lost, health=True, go_on=False, step=True) == ExecParts()


def test_an_exec_cut_off_past_the_checks_leaves_their_verdict_unknown():
    checked = Checked({}, {"h1": {"rc": 124, "stdout": "", "stderr": ""}})
    timeout = HostOutcome("h2", "deploy", Outcome.TIMEOUT, "health checks, deploy and the first step: ...")
    assert checked.unknown("h2", timeout)  # its deadline, past the checks' own bound: no output at all
    assert checked.unknown("h2", HostOutcome("h2", "deploy", Outcome.PENDING, "interrupted in ..."))
    # the checks' own bound said so (marker line, 124): judged (unhealthy), not unknown
    assert not checked.unknown("h1", dataclasses.replace(timeout, host="h1"))
    # never reached, or refused: the executor's word is the check's outcome
    assert not checked.unknown("h3", HostOutcome("h3", "deploy", Outcome.UNREACHABLE, "no route"))
    assert not checked.unknown("h4", HostOutcome("h4", "deploy", Outcome.FAILED, "exit 127"))
