"""validate's deploy that starts the first step in the same exec: the split of that one task's output, and
how the run stage takes the step's result from it."""

from __future__ import annotations

from types import SimpleNamespace

from sb_fleet.fleet.executor import StageResult
from sb_fleet.fleet.stages.deploy_stage import host_facts, split_started
from sb_fleet.fleet.stages.run_stage import with_started
from sb_fleet.outcome import HostOutcome, Outcome
from sb_fleet.plan.tasks import RUN_FOLLOWS, run_task

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
