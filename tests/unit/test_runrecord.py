"""The run stage's verdict from the runner's own record (sb_fleet.rundir.runrecord): a crashed runner, an
entry left running and another host's record are failures, never success."""

from __future__ import annotations

import json

import pytest

from sb_fleet.outcome import Outcome
from sb_fleet.plan.resources import import_suite
from sb_fleet.rundir.runrecord import (
    RECORD_PREFIX,
    exception_line,
    foreign,
    foreign_files,
    judge_run,
    parse_record,
    traceback_text,
)

# The traceback CPython printed for the crash of issue 16 (node_num: all reached int()).
TB = """Traceback (most recent call last):
  File "/home/u/.sb-fleet/suite/sb_bench/runner.py", line 205, in run_torchrun
    nnodes = int(mode.get("node_num", 1))
             ^^^^^^^^^^^^^^^^^^^^^^^^^^^^
ValueError: invalid literal for int() with base 10: 'all'
"""


def record(host: str = "node1", run: str = "R1", **entries: str) -> str:
    rec = {
        "host": host,
        "run_id": run,
        "step": "step01",
        "finished": "2026-11-23 08:00:00",
        "interrupted": None,
        "error": None,
        "entries": {k: {"status": v, "reason": ""} for k, v in entries.items()},
    }
    return RECORD_PREFIX + json.dumps(rec)


def task(rc: int | None = 0, stdout: str = "", stderr: str = "") -> dict:
    return {"rc": rc, "stdout": stdout, "stderr": stderr}


def test_prefix_is_the_runners():
    import_suite()
    from sb_bench.host import runner

    assert runner.RECORD_PREFIX == RECORD_PREFIX


def test_a_clean_record_is_ok():
    v = judge_run("node1", "R1", ["a", "b"], task(0, record(a="ok", b="skipped")))
    assert v.outcome == Outcome.OK and v.reason == "" and v.ok


def test_a_failed_benchmark_is_the_reports_to_judge():
    # rc 1: a benchmark failed; the runner did its job, the report names the benchmark.
    assert judge_run("node1", "R1", ["a"], task(1, record(a="failed"))).ok


def test_the_issue_16_crash_is_failed_with_the_exception():
    # Exit 1 with a traceback and no record: Python's own exit code for an uncaught exception.
    v = judge_run("node1", "R1", ["nccl-bw"], task(1, "", TB))
    assert v.outcome == Outcome.FAILED
    assert v.reason == "runner crashed: ValueError: invalid literal for int() with base 10: 'all'"
    assert v.traceback.startswith("Traceback") and "run_torchrun" in v.traceback


def test_runner_error_exit_uses_the_records_error():
    rec = RECORD_PREFIX + json.dumps(
        {"host": "node1", "run_id": "R1", "error": "runner crashed: OSError: disk full", "entries": {}}
    )
    v = judge_run("node1", "R1", ["a"], task(3, rec, TB))
    assert v.outcome == Outcome.FAILED and v.reason == "runner crashed: OSError: disk full"


@pytest.mark.parametrize(
    ("rc", "words"),
    [
        (137, "killed (SIGKILL"),
        (130, "interrupted (exit 130)"),
        (2, "the runner exited 2: sb_bench.host.runner: spec schema_version 9"),
    ],
)
def test_other_exits_are_failed(rc, words):
    v = judge_run("node1", "R1", ["a"], task(rc, "", "sb_bench.host.runner: spec schema_version 9\n"))
    assert v.outcome == Outcome.FAILED and words in v.reason


def test_no_record_is_failed():
    v = judge_run("node1", "R1", ["a"], task(0, "some noise\n"))
    assert v.outcome == Outcome.FAILED and "left no record" in v.reason


def test_an_entry_left_running_is_failed():
    v = judge_run("node1", "R1", ["a", "b"], task(0, record(a="ok", b="running")))
    assert v.outcome == Outcome.FAILED and v.reason == "b was left running when the runner stopped"


def test_an_entry_not_recorded_or_pending_is_failed():
    assert "recorded nothing for b" in judge_run("node1", "R1", ["a", "b"], task(0, record(a="ok"))).reason
    v = judge_run("node1", "R1", ["a"], task(0, record(a="pending")))
    assert v.outcome == Outcome.FAILED and "a was not run" in v.reason


def test_another_hosts_record_is_failed_even_with_rc_0():
    v = judge_run("node1", "R1", ["a"], task(0, record(host="node2", a="ok")))
    assert v.outcome == Outcome.FAILED
    assert v.reason.startswith("the runner's record names host node2, not node1")
    assert "{host}" in v.reason and "sb_workspace" in v.reason  # the fix


def test_another_runs_record_is_failed():
    v = judge_run("node1", "R1", ["a"], task(0, record(run="R0", a="ok")))
    assert v.outcome == Outcome.FAILED and "of run R0, not R1" in v.reason


def test_no_exit_status():
    v = judge_run("node1", "R1", ["a"], {"msg": "MODULE FAILURE\nsee stdout"})
    assert v.outcome == Outcome.FAILED and "no exit status: see stdout" in v.reason


def test_parse_record_takes_the_last_and_rejects_garbage():
    assert parse_record("x\n" + record(a="ok") + "\n" + record(host="n9") + "\n")["host"] == "n9"
    assert parse_record(RECORD_PREFIX + "{not json") is None
    assert parse_record(RECORD_PREFIX + "[1]") is None
    assert parse_record("") is None


def test_traceback_text_stops_at_the_exception_line():
    text = "noise\n" + TB + "later output\n"
    tb = traceback_text(text)
    assert tb == TB and exception_line(tb) == "ValueError: invalid literal for int() with base 10: 'all'"
    assert traceback_text("no trace", "") == ""


def test_foreign_documents():
    assert foreign("node1", "R1", {"host": "node1", "run_id": "R1"}) is None
    assert foreign("node1", "R1", {}) is None  # an older runner's file names no one
    why = foreign("node1", "R1", {"host": "node2", "run_id": "R1"}, what="status.json")
    assert why and why.startswith("status.json names host node2, not node1")
    docs = [
        ("status.json", {"host": "node1", "run_id": "R1"}),
        ("a/rank0.json", {"host": "node3", "run_id": "R1"}),
        ("a/rank1.json", {"host": "node1", "run_id": "R2"}),
        ("a/rank2.json", ["not", "a", "mapping"]),
    ]
    problems = foreign_files("node1", "R1", docs)
    assert len(problems) == 2
    assert problems[0].startswith("a/rank0.json names host node3") and "of run R2" in problems[1]


def _rank(host: str, run_id: str) -> dict:
    import_suite()
    from sb_bench.core.result import envelope

    env = envelope("noop", "micro", return_code=0, status="ok", result={"t": [1.0]}, run_count=1)
    return {**env, "host": host, "run_id": run_id}


def test_collect_never_takes_another_hosts_files(tmp_path):
    from sb_fleet.fleet.stages.collect_stage import normalize_run
    from sb_fleet.rundir.rundir import RunDir

    rd = RunDir.create(tmp_path / "run")
    rid = rd.run_id
    for h, names in {"h1": "h1", "h2": "h1", "h3": "h3"}.items():
        res = rd.raw_host(h) / "results"
        (res / "noop").mkdir(parents=True)
        (res / "status.json").write_text(json.dumps({"host": names, "run_id": rid, "entries": {}}))
        (res / "noop" / "rank0.json").write_text(json.dumps(_rank(names, rid)))
    # h3's status is its own, but a rank file is of another run.
    (rd.raw_host("h3") / "results" / "noop" / "rank0.json").write_text(json.dumps(_rank("h3", "OLD")))
    out = normalize_run(rd, ["h1", "h2", "h3"], ["noop"])
    assert out["h1"].outcome == Outcome.OK
    assert out["h2"].outcome == Outcome.FAILED
    assert out["h2"].reason.startswith("results not taken: status.json names host h1, not h2")
    assert out["h3"].outcome == Outcome.FAILED and "noop/rank0.json is of run OLD" in out["h3"].reason
    nodes = [json.loads(ln)["node"] for ln in (rd.path / "results-summary.jsonl").read_text().splitlines()]
    assert nodes == ["h1"]  # only h1's data is in the summary
