"""The on-host runner's own record (issue 16): SuperBench's node_num/proc_num values, a crash that is
recorded as one (traceback kept, no entry left running, exit 3), every file naming its host and run,
and a results directory that another host's runner holds or used is refused."""

from __future__ import annotations

import fcntl
import json
import os
import socket
from pathlib import Path

import pytest
from sb_bench.host.runner import RC_RUNNER_ERROR, RECORD_PREFIX, SpecError, count, flag, node_count
from suite_helpers import bench_env, run_runner


def spec(path: Path, entries: list[dict], run_id: str = "R1", step: str = "step01") -> Path:
    path.write_text(json.dumps({"schema_version": 1, "run_id": run_id, "step": step, "entries": entries}))
    return path


def noop(key: str, **mode) -> dict:
    return {
        "key": key,
        "benchmark": "noop",
        "timeout": 60,
        "params": {"num_steps": 2, "num_warmup": 0},
        "modes": [{"name": "local", "proc_num": 1, **mode}],
    }


def record_of(stdout: str) -> dict:
    lines = [ln for ln in stdout.splitlines() if ln.startswith(RECORD_PREFIX)]
    assert lines, stdout
    return json.loads(lines[-1][len(RECORD_PREFIX) :])


# -- SuperBench's values for the mode keys ------------------------------------------------------------
@pytest.mark.parametrize(("value", "want"), [(None, 1), (1, 1), (8, 8), ("8", 8), (" 2 ", 2)])
def test_count_accepts_schema_values(value, want):
    assert count(value, "proc_num") == want


@pytest.mark.parametrize("value", [0, -1, "all", "x", 2.5, True, [1]])
def test_count_refuses_the_rest_with_the_field_named(value):
    with pytest.raises(SpecError, match="proc_num"):
        count(value, "proc_num")


def test_node_num_all_is_the_groups_size():
    assert node_count("all", 6) == 6
    assert node_count("ALL", 2) == 2
    assert node_count(1, None) == 1 and node_count(None, None) == 1  # this node alone
    assert node_count(3, 3) == 3 and node_count("3", None) == 3
    with pytest.raises(SpecError, match="needs --nnodes"):
        node_count("all", None)
    with pytest.raises(SpecError, match="node_num 4 but this node's group has 2 nodes"):
        node_count(4, 2)


@pytest.mark.parametrize(
    ("value", "want"), [(None, True), (True, True), ("yes", True), ("no", False), (0, False)]
)
def test_parallel_flag(value, want):
    assert flag(value, "parallel") is want


# -- the runner's record ------------------------------------------------------------------------------
def test_every_file_names_its_host_and_run(tmp_path):
    s = spec(tmp_path / "s.json", [noop("a", proc_num="2", parallel="no")])
    res = tmp_path / "res"
    p = run_runner(s, res, "--host", "node7", timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    rec = record_of(p.stdout)
    assert (rec["host"], rec["run_id"], rec["entries"]["a"]["status"]) == ("node7", "R1", "ok")
    status = json.loads((res / "status.json").read_text())
    assert (status["host"], status["run_id"], status["step"], status["error"]) == (
        "node7",
        "R1",
        "step01",
        None,
    )
    for f in [res / "spec-step01.json", *sorted((res / "a").glob("rank*.json"))]:
        d = json.loads(f.read_text())
        assert (d["host"], d["run_id"]) == ("node7", "R1"), f
    assert len(list((res / "a").glob("rank*.json"))) == 2
    for f in [res / "runner.pid", res / "runner.pgids", *sorted((res / "a" / "logs").glob("*.log"))]:
        assert "host=node7 run_id=R1" in f.read_text(), f
    assert json.loads((res / "runner.lock").read_text())["host"] == "node7"


def test_a_rank_names_its_host_and_run_itself(tmp_path):
    """The rank writes the names the runner gives it (SB_HOST, SB_RUN_ID) into its own result: the
    runner's stamp finds them and rewrites nothing (one synced write per rank file less)."""
    import subprocess
    import sys

    out = tmp_path / "out"
    params = json.dumps({"num_steps": 1, "num_warmup": 0})
    argv = [sys.executable, "-m", "sb_bench", "exec", "noop", "--params", params, "--out", str(out)]
    env = bench_env(SB_HOST="node7", SB_RUN_ID="R9", SB_RESULT_RANK="3")
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    d = json.loads((out / "rank3.json").read_text())
    assert (d["host"], d["run_id"], d["status"]) == ("node7", "R9", "ok")
    env = bench_env(SB_RESULT_RANK="4")  # run by hand: nothing to name it by, nothing made up
    env.pop("SB_HOST", None), env.pop("SB_RUN_ID", None)
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "host" not in json.loads((out / "rank4.json").read_text()), p.stderr


def test_a_crash_is_recorded_as_one(tmp_path):
    # The runner itself fails on entry b: a file stands where its results directory must go.
    s = spec(tmp_path / "s.json", [noop("a"), noop("b"), noop("c")])
    res = tmp_path / "res"
    res.mkdir()
    (res / "b").write_text("in the way")
    p = run_runner(s, res, "--host", "node1", timeout=120)
    assert p.returncode == RC_RUNNER_ERROR, p.stdout + p.stderr
    assert "Traceback (most recent call last)" in p.stderr and "FileExistsError" in p.stderr
    status = json.loads((res / "status.json").read_text())
    entries = status["entries"]
    assert entries["a"]["status"] == "ok"
    assert entries["b"]["status"] == "failed" and entries["b"]["reason"].startswith(
        "runner crashed: FileExistsError"
    )
    assert entries["c"]["status"] == "pending" and "the runner crashed" in entries["c"]["reason"]
    assert not [k for k, v in entries.items() if v["status"] == "running"]
    assert status["finished"] and "FileExistsError" in status["error"]
    tb = (res / "runner-error-step01.txt").read_text()
    assert tb.startswith("host: node1\nrun_id: R1\nstep: step01\n") and "FileExistsError" in tb
    assert record_of(p.stdout)["error"] == status["error"]


def test_a_bad_mode_fails_its_entry_not_silently(tmp_path):
    bad = noop("a")
    bad["modes"] = [{"name": "torch.distributed", "proc_num": 1, "node_num": "all"}]  # no --nnodes given
    p = run_runner(spec(tmp_path / "s.json", [bad]), tmp_path / "res", "--host", "n1", timeout=60)
    assert p.returncode == RC_RUNNER_ERROR
    entry = json.loads((tmp_path / "res" / "status.json").read_text())["entries"]["a"]
    assert entry["status"] == "failed" and "node_num 'all' needs --nnodes" in entry["reason"]


def test_another_hosts_results_directory_is_refused(tmp_path):
    s = spec(tmp_path / "s.json", [noop("a")])
    res = tmp_path / "res"
    assert run_runner(s, res, "--host", "node1", timeout=60).returncode == 0
    before = (res / "status.json").read_text()
    p = run_runner(s, res, "--host", "node2", timeout=60)
    assert p.returncode == RC_RUNNER_ERROR
    assert "holds host node1's status of run R1, not node2's" in p.stderr
    assert record_of(p.stdout)["host"] == "node2" and "share a workspace" in record_of(p.stdout)["error"]
    assert (res / "status.json").read_text() == before  # node1's record untouched
    # Another run of the same host in the same directory is refused too.
    p = run_runner(spec(tmp_path / "s2.json", [noop("a")], run_id="R2"), res, "--host", "node1", timeout=60)
    assert p.returncode == RC_RUNNER_ERROR and "of run R1, not node1's of run R2" in p.stderr


def test_a_results_directory_in_use_is_refused(tmp_path):
    res = tmp_path / "res"
    res.mkdir()
    fd = os.open(res / "runner.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, json.dumps({"host": "node3", "run_id": "R1", "pid": 4242}).encode())
        p = run_runner(spec(tmp_path / "s.json", [noop("a")]), res, "--host", "node1", timeout=60)
    finally:
        os.close(fd)
    assert p.returncode == RC_RUNNER_ERROR
    assert "in use by the runner of host node3 (run R1, pid 4242)" in p.stderr
    assert not (res / "status.json").exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_node_num_all_across_two_nodes(tmp_path):
    pytest.importorskip("torch")
    entry = {
        "key": "noop",
        "benchmark": "noop",
        "timeout": 240,
        "params": {"num_steps": 2, "num_warmup": 0},
        "modes": [{"name": "torch.distributed", "proc_num": 1, "node_num": "all"}],
    }
    s = spec(tmp_path / "s.json", [entry])
    port = _free_port()
    env = bench_env(GLOO_SOCKET_IFNAME="lo")
    procs = []
    for rank in (0, 1):
        args = ["--host", f"node{rank}", "--node-rank", str(rank), "--nnodes", "2"]
        args += ["--master-addr", "127.0.0.1", "--master-port", str(port), "--local-addr", "127.0.0.1"]
        procs.append(run_runner(s, tmp_path / f"res{rank}", *args, env=env, background=True))
    outs = [p.communicate(timeout=300)[0] for p in procs]
    for rank, (p, out) in enumerate(zip(procs, outs, strict=True)):
        assert p.returncode == 0, out
        [f] = sorted((tmp_path / f"res{rank}" / "noop").glob("rank*.json"))
        assert f.name == f"rank{rank}.json"  # each node writes its own global rank
        d = json.loads(f.read_text())
        assert (d["status"], d["world_size"], d["host"]) == ("ok", 2, f"node{rank}")


def test_an_entry_that_wrote_its_results_but_did_not_end_is_a_timeout_not_a_pass(tmp_path):
    """A benchmark whose teardown hangs after its figures are written (NCCL's can): the runner kills it
    at the entry's timeout; the control node keeps the figures and records the host's benchmarks as
    timed out, with the reason, never as a silent pass."""
    from sb_fleet.outcome import Outcome
    from sb_fleet.rundir.normalize import benchmark_outcome, summarize_host

    hangs = noop("hangs")
    hangs["timeout"] = 4
    hangs["params"] = {"num_steps": 1, "num_warmup": 0, "linger": 120}
    s = spec(tmp_path / "s.json", [noop("a"), hangs])
    res = tmp_path / "raw" / "results"
    p = run_runner(s, res, "--host", "node1", timeout=120)
    assert p.returncode in (0, 1), p.stdout + p.stderr
    rec = record_of(p.stdout)
    assert rec["entries"]["hangs"]["status"] == "timeout"
    assert "still running at its timeout of 4 s" in rec["entries"]["hangs"]["reason"]
    rank0 = json.loads((res / "hangs" / "rank0.json").read_text())
    assert rank0["return_code"] == 0  # its figures were in before the hang
    hr = summarize_host("node1", tmp_path / "raw")
    assert "hangs/step_time" in hr.metrics and "a/step_time" in hr.metrics  # the figures are kept
    assert hr.statuses["a"].status == "ok"
    oc = benchmark_outcome(hr, ["a", "hangs"])
    assert oc.outcome == Outcome.TIMEOUT
    assert oc.reason.startswith(
        "hangs: every rank wrote its result, but the entry did not end: still running"
    )
