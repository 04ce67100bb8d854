"""The one normaliser (raw rank files -> records and results-summary.jsonl), the outcome table, the run
directory, and the collector's pure parts."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

from sb_fleet.errors import RunDirError
from sb_fleet.exits import exit_for
from sb_fleet.fleet.fetch import local_digests, missing, parse_listing, safe_rel, store_member
from sb_fleet.outcome import HostOutcome, Outcome
from sb_fleet.plan.host_exec import sh_path
from sb_fleet.rundir.normalize import HostRecord, benchmark_outcome, reduce_entry, summarize_host
from sb_fleet.rundir.outcome_table import merge, outcomes_of, save_stage
from sb_fleet.rundir.rundir import SCHEMA_VERSION, RunDir
from sb_fleet.safe_files import atomic_write_text, safe_name


def rank(
    d: Path, r: int, result: dict, reduce_op: dict | None = None, rc: int = 0, status: str = "ok"
) -> None:
    d.mkdir(parents=True, exist_ok=True)
    (d / f"rank{r}.json").write_text(
        json.dumps(
            {
                "name": "x",
                "type": "micro",
                "run_count": 2,
                "return_code": rc,
                "status": status,
                "reason": "why" if rc else "",
                "result": {**result, "return_code": [rc]},
                "reduce_op": reduce_op or {},
                "metrics": {k: {"unit": "GB/s", "higher_is_better": True} for k in result},
            }
        )
    )


def test_ranks_get_suffixes_or_reduce_and_runs_are_averaged(tmp_path):
    res = tmp_path / "results"
    rank(res / "mem-bw", 0, {"h2d_bw": [10.0, 12.0]})
    rank(res / "mem-bw", 1, {"h2d_bw": [20.0, 20.0]})
    rank(res / "nccl-bw", 0, {"allreduce_1024_busbw": [5.0]}, {"allreduce_1024_busbw": "min"})
    rank(res / "nccl-bw", 1, {"allreduce_1024_busbw": [3.0]}, {"allreduce_1024_busbw": "min"})
    rank(res / "gpt_models" / "pytorch-gpt2-small", 0, {"fp32_train_throughput": [7.0]})
    hr = summarize_host("gpu01", tmp_path)
    # SuperBench's node summary: return_code has no reduce op, so several ranks keep one column each.
    assert hr.metrics == {
        "mem-bw/h2d_bw:0": 11.0,
        "mem-bw/h2d_bw:1": 20.0,
        "mem-bw/return_code:0": 0,
        "mem-bw/return_code:1": 0,
        "nccl-bw/allreduce_1024_busbw": 3.0,
        "nccl-bw/return_code:0": 0,
        "nccl-bw/return_code:1": 0,
        "gpt_models/pytorch-gpt2-small/fp32_train_throughput": 7.0,
        "gpt_models/pytorch-gpt2-small/return_code": 0,
    }
    line = json.loads(hr.summary_line())
    assert line["node"] == "gpu01"
    assert hr.meta["mem-bw/h2d_bw"] == {"unit": "GB/s", "higher_is_better": True}


def test_superbench_node_summary_rules_on_result_objects():
    """SuperBench's runner (__merge_benchmark_metrics): reduce op None keeps ranks apart (":rank" only
    when there are several), a known op folds them, an unknown op drops the metric (with a problem)."""

    def res(rc: int, **metrics: tuple[float, str | None]) -> dict:
        return {
            "return_code": rc,
            "result": {"return_code": [rc], **{k: [v] for k, (v, _) in metrics.items()}},
            "reduce_op": {"return_code": None, **{k: op for k, (_, op) in metrics.items()}},
        }

    rec = HostRecord("n1")
    reduce_entry("kernel-launch", {0: res(0, event_time=(5.0, None))}, rec)
    reduce_entry(
        "nccl-bw",
        {r: res(0, busbw=(10.0 + r, "max"), time=(1.0, "avg"), odd=(2.0, "median")) for r in range(4)},
        rec,
    )
    assert rec.metrics["kernel-launch/event_time"] == 5.0 and "kernel-launch/return_code" in rec.metrics
    assert rec.metrics["nccl-bw/busbw"] == 13.0 and rec.metrics["nccl-bw/time"] == 1.0
    assert [k for k in rec.metrics if k.startswith("nccl-bw/return_code")] == [
        f"nccl-bw/return_code:{r}" for r in range(4)
    ]
    assert "nccl-bw/odd" not in rec.metrics and any("unknown reduce op" in p for p in rec.problems)


def test_a_result_without_return_code_is_invalid_not_ok():
    rec = HostRecord("n1")
    reduce_entry("gemm-flops", {0: {"result": {"fp32_flops": [1.0]}, "reduce_op": {}}}, rec)
    assert rec.statuses["gemm-flops"].return_code == 3 and rec.statuses["gemm-flops"].status == "failed"
    assert benchmark_outcome(rec, ["gemm-flops"]).outcome == Outcome.FAILED


def test_corrupt_file_costs_only_its_benchmark(tmp_path):
    res = tmp_path / "results"
    rank(res / "gemm-flops", 0, {"fp32_flops": [100.0]})
    (res / "mem-bw").mkdir()
    (res / "mem-bw" / "rank0.json").write_text('{"name": "mem-bw", "result": {"h2d')
    rank(res / "kernel-launch", 0, {}, rc=124, status="timeout")
    hr = summarize_host("h", tmp_path)
    assert hr.metrics["gemm-flops/fp32_flops"] == 100.0
    assert hr.metrics["mem-bw/return_code"] == 3
    assert hr.metrics["kernel-launch/return_code"] == 124
    assert hr.statuses["kernel-launch"].status == "timeout"
    assert benchmark_outcome(hr, ["gemm-flops", "mem-bw", "kernel-launch"]).outcome == Outcome.TIMEOUT
    assert any("mem-bw" in p and "corrupt" in p for p in hr.problems)


def test_listing_parser_rejects_paths_that_escape():
    digest = "a" * 64
    text = "\n".join(
        [
            f"{digest}  ./gemm-flops/rank0.json",
            f"{digest}  ../../etc/passwd",
            f"{digest}  /abs",
            f"{digest}  ./x/.rank0.json.tmp",
            "garbage",
            f"{digest}  ./-rf",
        ]
    )
    assert parse_listing(text) == {"gemm-flops/rank0.json": digest}
    assert safe_rel("a/../b") is None and safe_rel("a/b") == "a/b"


def test_remote_paths_are_quoted_for_the_shell():
    assert sh_path("~/ws; rm -rf /") == "\"$HOME\"/'ws; rm -rf /'"
    assert sh_path("/x/$(id)") == "'/x/$(id)'"
    assert sh_path("~") == '"$HOME"'


def test_store_member_verifies_checksum_and_leaves_nothing_on_mismatch(tmp_path):
    import hashlib

    data = b"hello"
    good = hashlib.sha256(data).hexdigest()
    assert store_member(tmp_path, "a/b.json", io.BytesIO(data), good)
    assert (tmp_path / "a" / "b.json").read_bytes() == data
    assert not store_member(tmp_path, "a/c.json", io.BytesIO(b"truncat"), good)
    assert not (tmp_path / "a" / "c.json").exists()
    assert not list(tmp_path.rglob(".*.tmp"))
    assert missing({"a/b.json": good, "a/c.json": good}, local_digests(tmp_path)) == ["a/c.json"]


def test_outcomes_merge_to_the_worst_stage_and_exit_codes(tmp_path):
    rd = RunDir.create(tmp_path / "run")
    save_stage(
        rd,
        "deploy",
        {
            "a": HostOutcome("a", "deploy", Outcome.OK),
            "b": HostOutcome("b", "deploy", Outcome.UNREACHABLE, "down"),
        },
    )
    save_stage(rd, "benchmarks", {"a": HostOutcome("a", "benchmarks", Outcome.TIMEOUT, "slow")})
    m = merge(rd, ["a", "b", "c"])
    assert m["a"]["outcome"] == "timeout" and m["a"]["reason"] == "slow"
    assert m["b"]["outcome"] == "unreachable"
    assert m["c"]["outcome"] == "pending"  # never silently dropped
    assert exit_for(outcomes_of(m)) == 3
    assert exit_for([Outcome.TIMEOUT]) == 1
    assert exit_for([Outcome.OK], gate_passed=False) == 1
    assert exit_for([Outcome.OK], gate_passed=True) == 0
    # a later command on some hosts only keeps the others' outcomes (the run directory never shrinks)
    save_stage(rd, "deploy", {"a": HostOutcome("a", "deploy", Outcome.FAILED, "again")})
    m = merge(rd, ["a", "b", "c"])
    assert m["b"]["outcome"] == "unreachable" and m["a"]["stages"]["deploy"]["outcome"] == "failed"


def test_corrupt_run_directory_files_are_one_line_errors(tmp_path):
    rd = RunDir.create(tmp_path / "run")
    (rd.path / "outcomes").mkdir()
    (rd.path / "outcomes" / "run.json").write_text('{"schema_version": 1, "hosts": [{"ho')
    with pytest.raises(RunDirError, match=r"outcomes/run.json: corrupt or truncated"):
        merge(rd, ["a"])
    (rd.path / "manifest.json").write_text("{")
    with pytest.raises(RunDirError, match="manifest.json"):
        RunDir.open(rd.path)


def test_run_dir_is_private_versioned_and_atomic(tmp_path):
    rd = RunDir.create(tmp_path / "r")
    assert oct(rd.path.stat().st_mode & 0o777) == "0o700"
    assert RunDir.open(rd.path).manifest()["schema_version"] == SCHEMA_VERSION
    m = json.loads((rd.path / "manifest.json").read_text())
    m["schema_version"] = 99
    (rd.path / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(Exception, match="newer"):
        RunDir.open(rd.path)
    atomic_write_text(tmp_path / "f.txt", "x")
    assert oct((tmp_path / "f.txt").stat().st_mode & 0o777) == "0o600"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_safe_name_keeps_host_dirs_inside_raw():
    assert safe_name("gpu001") == "gpu001"
    for evil in ("../x", "a/b", "..", "a;touch /tmp/x", "gpu\udc80", "\ud800/.."):
        n = safe_name(evil)
        assert "/" not in n and n not in (".", "..") and n != evil
        n.encode()  # a lone surrogate never reaches a file name
    assert safe_name("gpu\udc80") != safe_name("gpu\udc81")  # two such names stay apart


def test_a_source_that_fails_mid_stream_is_not_a_disk_error(tmp_path):
    """A connection lost while collecting is the host's trouble (unreachable), not the control node's."""

    from sb_fleet.safe_files import atomic_write_stream

    def lost():
        yield b"part of a file"
        raise TimeoutError("timed out")

    with pytest.raises(TimeoutError, match="timed out"):
        atomic_write_stream(tmp_path / "f.json", lost())
    assert list(tmp_path.iterdir()) == []


def test_streamed_listing_budgets_clashes_and_special_files(tmp_path):
    """Issue 21: the listing is parsed as it streams; clashes, special and oversized files are refused."""
    from sb_fleet.config.collect_budgets import CollectBudgets
    from sb_fleet.fleet.fetch import HostRefused, ListingParser, parse_find_listing, plan_fetch

    data = b"d 0 a\0f 10 a/r.json\0f 3 x\0f 3 x/y\0p 0 fifo\0f 999 big\0f 5 ../e\0"
    p = ListingParser(100)
    for i in range(len(data)):  # a byte at a time: the same listing
        p.feed(data[i : i + 1])
    listing = p.close()
    assert listing.files == {"a/r.json": 10, "x": 3, "x/y": 3, "big": 999}
    b = CollectBudgets(host_timeout=5, max_files=100, max_file_bytes=100, max_host_bytes=12)
    ok = plan_fetch(listing, tmp_path, b)
    assert ok == {"a/r.json": 10}  # x fits the file budget but not the host's once a/r.json is in
    text = " | ".join(listing.problems)
    for word in (
        "fifo",
        "path clash: x is a file and x/y",
        "collect.max_file_bytes",
        "collect.max_host_bytes",
        "unsafe",
    ):
        assert word in text, (word, text)
    with pytest.raises(HostRefused, match="collect.max_files"):
        parse_find_listing(b"f 1 a\0" + b"".join(b"f 1 n%d\0" % i for i in range(5)), 3)
    with pytest.raises(HostRefused, match="longer than"):
        ListingParser(10).feed(b"f 1 " + b"a" * 10_000)


def test_invalid_values_fail_the_host_naming_metric_and_value():
    from sb_fleet.rundir.normalize import HostRecord, benchmark_outcome, reduce_entry

    rec = HostRecord("h1")
    ranks = {
        0: {
            "return_code": 0,
            "result": {"bw": [float("nan")], "lat": [1.0], "s": ["x"]},
            "reduce_op": {"bw": "max"},
        },
        1: {"return_code": 0, "result": {"bw": [2.0], "lat": [2.0], "s": [1]}, "reduce_op": {"bw": "max"}},
    }
    reduce_entry("e", ranks, rec)
    assert rec.invalid == {"e/bw": "nan", "e/s:0": "'x'"}
    assert "e/bw" not in rec.metrics and rec.metrics["e/lat:1"] == 2.0
    o = benchmark_outcome(rec, ["e"])
    assert o.outcome == Outcome.FAILED and "invalid value nan for e/bw" in o.reason
    json.loads(rec.summary_line())


def test_interrupt_stops_a_container_by_a_hostile_name_as_data(tmp_path):
    """The stop script over SSH gets the runtime command and the container's name as quoted data: a
    name full of shell syntax reaches the runtime as one argument, and nothing else runs."""
    from sb_fleet.config.inventory import Host
    from sb_fleet.fleet.fetch import CollectTarget, stop_runners
    from sb_fleet.fleet.ssh import SshSettings

    log = tmp_path / "calls"
    fake = tmp_path / "fake ctr"  # a space in the runtime's path too
    fake.write_text(
        "#!/bin/sh\n"
        f"printf '%s|' \"$@\" >> '{log}'; echo >> '{log}'\n"
        # the container exists until it is stopped (--rm then removes it)
        f'case "$3 $4" in "container inspect") ! grep -q "|stop|" \'{log}\' ;; *) exit 0 ;; esac\n'
    )
    fake.chmod(0o755)
    name = "sb-r1-step01-x'; touch PWNED; echo '$(id)`id`"
    host = Host("h1", (), {"ansible_connection": "local"})
    said = stop_runners(
        [CollectTarget(host, str(tmp_path / "absent-results"), tmp_path / "local")],
        SshSettings(tmp_path / "known_hosts", "strict"),
        1,
        containers={"h1": ([str(fake), "-H", "unix:///a b.sock"], name)},
    )
    assert said == {"h1": "container stopped and removed; absent"}
    calls = [line.rstrip("|").split("|") for line in log.read_text().splitlines()]
    assert calls[:2] == [
        ["-H", "unix:///a b.sock", "ps", "-q"],
        ["-H", "unix:///a b.sock", "container", "inspect", name],
    ]
    assert ["-H", "unix:///a b.sock", "stop", "-t", "10", name] in calls
    assert not list(tmp_path.glob("PWNED")) and not (Path.cwd() / "PWNED").exists()
    # A runtime that does not answer (sudo wants a password, no daemon) is said in its own words.
    mute = tmp_path / "mute"
    mute.write_text("#!/bin/sh\necho 'sudo: a password is required' >&2\nexit 1\n")
    mute.chmod(0o755)
    said = stop_runners(
        [CollectTarget(host, str(tmp_path / "absent-results"), tmp_path / "local")],
        SshSettings(tmp_path / "known_hosts", "strict"),
        1,
        containers={"h1": ([str(mute)], name)},
    )
    assert said == {"h1": "container not stopped: sudo: a password is required; absent"}


def test_measured_noise_goes_beside_the_summary_and_hostile_spreads_are_left_out(tmp_path):
    """Each rank's ``spread`` (its samples' robust sigma) becomes the node's noise-summary line, keyed as
    the summary; a reduced metric takes its noisiest rank's; a spread that is not a finite number in
    [0, MAX_NOISE], or that a failed rank reports, is unknown (never a crash, never a wrong noise)."""
    from sb_fleet.analysis.fleet_results import load_fleet

    def put(d: Path, r: int, result: dict, spread: dict, op: dict | None = None, rc: int = 0) -> None:
        d.mkdir(parents=True, exist_ok=True)
        doc = {
            "return_code": rc,
            "status": "ok" if rc == 0 else "failed",
            "result": {**result, "return_code": [rc]},
            "reduce_op": op or {},
            "spread": spread,
        }
        (d / f"rank{r}.json").write_text(json.dumps(doc))

    raw = tmp_path / "run" / "raw"
    res = raw / "gpu01" / "results"
    put(res / "mem-bw", 0, {"h2d_bw": [10.0]}, {"h2d_bw": 0.02})
    put(res / "mem-bw", 1, {"h2d_bw": [20.0]}, {"h2d_bw": "0.5"})  # a string: unknown
    put(res / "nccl-bw", 0, {"t": [5.0]}, {"t": 0.01}, {"t": "max"})
    put(res / "nccl-bw", 1, {"t": [3.0]}, {"t": 0.2}, {"t": "max"})  # the noisiest rank's
    put(res / "gemm-flops", 0, {"a": [1.0], "b": [2.0], "c": [3.0]}, {"a": -1, "b": 1e9, "c": True})
    hr = summarize_host("gpu01", raw / "gpu01")
    assert hr.noise == {"mem-bw/h2d_bw:0": 0.02, "nccl-bw/t": 0.2}
    line = json.loads(hr.noise_line())
    assert line == {"node": "gpu01", "mem-bw/h2d_bw:0": 0.02, "nccl-bw/t": 0.2}
    newer = HostRecord("gpu03")  # the suite's figure noise wins over its samples' spread
    reduce_entry(
        "e",
        {0: {"return_code": 0, "result": {"x": [1.0]}, "spread": {"x": 0.1}, "noise": {"x": 0.02}}},
        newer,
    )
    assert newer.noise == {"e/x": 0.02}
    failed = HostRecord("gpu02")
    reduce_entry("e", {0: {"return_code": 3, "result": {"x": [1.0]}, "spread": {"x": 0.1}}}, failed)
    assert failed.noise == {}

    # The analysis reads it back aligned with the summary; a garbage line is a problem, not a crash.
    run = tmp_path / "run"
    (run / "manifest.json").write_text("{}")
    (run / "results-summary.jsonl").write_text(hr.summary_line() + "\n")
    (run / "noise-summary.jsonl").write_text(
        hr.noise_line() + '\n{"node": "gpu01", "x"\n{"node": "ghost", "nccl-bw/t": 0.5}\n'
    )
    fleet = load_fleet(run)
    assert fleet.noise is not None and fleet.noise.shape == fleet.values.shape
    col = fleet.column_index()
    assert fleet.noise[0, col["nccl-bw/t"]] == 0.2 and np.isnan(fleet.noise[0, col["mem-bw/h2d_bw:1"]])
    assert any("noise-summary.jsonl" in str(p) and "not valid JSON" in str(p) for p in fleet.problems)
