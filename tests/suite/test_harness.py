"""The shared harness and runner of the on-host suite: failure results, timeouts, spread, reduce ops."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sb_bench.core import registry
from sb_bench.core.benchmark import Benchmark, Case, CheckFailed, SkipBenchmark
from sb_bench.core.harness import Harness
from sb_bench.core.metric import Metric, Param
from sb_bench.core.result import ReturnCode, write_result
from suite_helpers import bench_env, node_summary, rank_results, run_bench, run_runner, write_spec


class _Probe(Benchmark):
    """A test benchmark whose run does what its ``what`` parameter says."""

    name = "test-probe"
    params = {
        "what": Param("str", "ok", "behaviour"),
        "values": Param("list[str]", [], "values of x per run"),
    }
    torn_down = 0

    def metrics(self):
        return [Metric("x", "ms", False, "max"), Metric("y", "GB/s", True, None)]

    def teardown(self, ctx):
        type(self).torn_down += 1

    def run_once(self, ctx, harness):
        what = self.args["what"]
        if what == "raise":
            raise ValueError("boom")
        if what == "memory":
            raise MemoryError()
        if what == "cuda-oom":
            raise RuntimeError("CUDA out of memory. Tried to allocate 80.00 GiB")
        if what == "check":
            raise CheckFailed("product is wrong")
        if what == "skip":
            raise SkipBenchmark("no such device here")
        if what == "interrupt":
            raise KeyboardInterrupt
        if what == "nan":
            return {"x": float("nan")}
        if what == "partial":
            self.skip_metric("y", "needs a GPU")
            return {"x": 1.0}
        if self.args["values"]:
            i = getattr(self, "_i", 0)
            self._i = i + 1
            return {"x": float(self.args["values"][i]), "y": 2.0}
        return {"x": 1.0, "y": 2.0}


registry.register(_Probe)


@pytest.mark.parametrize(
    ("what", "code", "status", "reason"),
    [
        ("raise", ReturnCode.RUNTIME_EXCEPTION_ERROR, "failed", "ValueError: boom at test_harness.py:"),
        ("memory", ReturnCode.OUT_OF_MEMORY, "failed", "out of memory"),
        ("cuda-oom", ReturnCode.OUT_OF_MEMORY, "failed", "out of memory: CUDA out of memory"),
        ("check", ReturnCode.INVALID_BENCHMARK_RESULT, "failed", "result check failed: product is wrong"),
        ("nan", ReturnCode.INVALID_BENCHMARK_RESULT, "failed", "metric x is not a finite number"),
        ("skip", ReturnCode.SUCCESS, "skipped", "no such device here"),
        ("interrupt", ReturnCode.KILLED, "failed", "interrupted"),
    ],
)
def test_every_fault_becomes_a_result(what, code, status, reason):
    before = _Probe.torn_down
    env = run_bench("test-probe", what=what, device="cpu")
    assert (env["return_code"], env["status"]) == (int(code), status)
    assert reason in env["reason"]
    assert env["result"] == {"return_code": [int(code)]}
    if what not in ("skip",):
        assert _Probe.torn_down == before + 1  # teardown ran although the run failed


def test_bad_parameters_and_unknown_benchmark():
    env = run_bench("test-probe", wat="typo")
    assert env["return_code"] == ReturnCode.INVALID_ARGUMENT and "unknown parameter 'wat'" in env["reason"]
    env = run_bench("test-probe", num_steps=0)
    assert env["return_code"] == ReturnCode.INVALID_ARGUMENT
    env = run_bench("no-such-benchmark")
    assert env["return_code"] == ReturnCode.INVALID_BENCHMARK_TYPE and "unknown benchmark" in env["reason"]


def test_partial_skip_keeps_the_rest_and_says_why():
    env = run_bench("test-probe", what="partial", device="cpu")
    assert env["status"] == "ok" and env["result"]["x"] == [1.0]
    assert env["reason"] == "skipped y: needs a GPU"


def test_run_count_spread_and_reduce_ops_in_envelope():
    env = run_bench("test-probe", values=["10", "12", "14"], run_count=3, device="cpu")
    assert env["result"]["x"] == [10.0, 12.0, 14.0] and env["run_count"] == 3
    # Three runs, no timed samples: the range over the mean, in sigmas of a normal sample of three.
    assert env["spread"]["x"] == pytest.approx(4 / 12 / 1.693, abs=1e-6)
    assert env["spread"]["y"] == 0.0
    assert env["raw_data"]["x"] == [[10.0], [12.0], [14.0]]  # SuperBench's shape: one list per run
    assert env["reduce_op"] == {"x": "max", "y": None, "return_code": None}
    assert env["metrics"]["y"] == {
        "name": "y",
        "unit": "GB/s",
        "higher_is_better": True,
        "reduce_op": None,
        "description": "",
    }


def test_harness_counts_warmup_and_steps_and_duration():
    import torch
    from sb_bench.core.context import RankContext

    ctx = RankContext(0, 0, 1, 1, 0, torch.device("cpu"))
    calls = []
    case = Case("c", lambda: calls.append(1), lambda s: {"t": s})
    h = Harness({"num_warmup": 3, "num_steps": 7, "duration": 0})
    values = h.time_case(ctx, case)
    # One timed window, and one more for each re-timing after a stalled lap (a loaded machine preempts
    # a step now and then: CI, 2026-11-29, 24 calls); the notes say how many.
    windows = 1
    for note in h.notes:
        if m := re.search(r"re-timed (\d+)x", note):
            windows += int(m.group(1))
        elif m := re.search(r"stalled in each of (\d+) windows", note):
            windows = int(m.group(1))
    assert len(calls) == 3 + 7 * windows and values["t"] > 0, (len(calls), h.notes)
    calls.clear()
    t0 = time.monotonic()
    Harness({"num_warmup": 0, "num_steps": 1, "duration": 0.2}).time_case(ctx, case)
    assert time.monotonic() - t0 >= 0.2 and len(calls) > 1
    bad = Case("c", lambda: None, lambda s: {"t": s}, check=lambda: "wrong answer")
    with pytest.raises(CheckFailed, match="c: wrong answer"):
        Harness({"num_warmup": 0, "num_steps": 1, "duration": 0}).time_case(ctx, bad)


def test_result_file_is_valid_json_even_with_nan(tmp_path):
    p = write_result(tmp_path / "r" / "rank0.json", {"result": {"x": [float("nan"), 1.0]}})
    assert json.loads(p.read_text()) == {"result": {"x": [None, 1.0]}}
    assert not list((tmp_path / "r").glob(".*tmp"))


# -- reduce ops across ranks --------------------------------------------------------------------------------
def _rank(rank, x, y, code=0, op_x="max"):
    return {
        "name": "b",
        "rank": rank,
        "return_code": code,
        "result": {"x": x, "y": y, "return_code": [code]},
        "reduce_op": {"x": op_x, "y": None, "return_code": None},
    }


@pytest.mark.parametrize(
    ("op", "want"), [("max", 6.0), ("min", 2.0), ("avg", 4.0), ("sum", 12.0), ("last", 6.0)]
)
def test_reduce_ops(op, want):
    s = node_summary(
        [
            _rank(2, [6.0], [1.0], op_x=op),
            _rank(0, [2.0], [3.0], op_x=op),
            _rank(1, [4.0], [5.0], code=3, op_x=op),
        ]
    )
    assert s["b/x"] == want
    assert (s["b/y:0"], s["b/y:1"], s["b/y:2"]) == (3.0, 5.0, 1.0)  # None keeps every rank
    # return_code has no reduce op (SuperBench): one column per rank, no node-wide one
    assert s["b/return_code:1"] == 3 and s["b/return_code:0"] == 0 and "b/return_code" not in s


def test_reduce_single_rank_has_no_suffix_and_runs_are_averaged():
    assert node_summary([_rank(0, [1.0, 3.0], [2.0])]) == {"b/x": 2.0, "b/y": 2.0, "b/return_code": 0.0}


# -- registry / list ------------------------------------------------------------------------------------------
def test_aliases_resolve_to_superbench_result_groups():
    assert registry.resolve("sharding-matmul") == "pytorch-sharding-matmul"
    assert registry.resolve("nccl-bw:ib") == "nccl-bw"
    assert (
        registry.get("computation-communication-overlap").name == "pytorch-computation-communication-overlap"
    )


# The benchmarks of issue 3 (other micro modules, e.g. noop, are tested by their owners).
MICRO = {
    "gemm-flops": "sb_bench.micro.gemm_flops",
    "kernel-launch": "sb_bench.micro.kernel_launch",
    "cublas-function": "sb_bench.micro.cublas_function",
    "cudnn-function": "sb_bench.micro.cudnn_function",
    "pytorch-matmul": "sb_bench.micro.matmul",
    "pytorch-sharding-matmul": "sb_bench.micro.sharding_matmul",
    "mem-bw": "sb_bench.micro.mem_bw",
    "gpu-copy-bw": "sb_bench.micro.gpu_copy_bw",
    "nccl-bw": "sb_bench.micro.nccl_bw",
    "pytorch-computation-communication-overlap": "sb_bench.micro.computation_communication_overlap",
    "ib-loopback": "sb_bench.micro.ib_loopback",
    "disk-benchmark": "sb_bench.micro.disk_benchmark",
    "cpu-memory-bw-latency": "sb_bench.micro.cpu_memory_bw_latency",
}


def test_micro_table_registers_them():
    from sb_bench.micro import MODULES

    assert {k: MODULES.get(k) for k in MICRO} == MICRO


def test_list_json_is_complete():
    MODULES = MICRO

    proc = subprocess.run(
        [sys.executable, "-m", "sb_bench", "list", "--json"],
        env=bench_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    entries = {e["name"]: e for e in json.loads(proc.stdout)}
    assert set(MODULES) <= set(entries)
    assert "allreduce_8589934592_busbw" in {m["name"] for m in entries["nccl-bw"]["metrics"]} or any(
        m["name"].startswith("allreduce_") for m in entries["nccl-bw"]["metrics"]
    )
    for name in MODULES:
        e = entries[name]
        assert "error" not in e, e
        assert e["description"] and e["type"] == "micro"
        for pname, p in e["parameters"].items():
            assert {"type", "default", "help"} <= set(p), (name, pname)
        for m in e["metrics"]:
            assert {"name", "unit", "higher_is_better", "reduce_op"} <= set(m), (name, m)
    assert entries["gemm-flops"]["parameters"]["precision"]["choices"][-1] == "fp8e4m3_tc"


def test_every_micro_module_has_a_standalone_help():
    for module in MICRO.values():
        proc = subprocess.run(
            [sys.executable, "-m", module, "--help"],
            env=bench_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, (module, proc.stderr)
        assert "--num-steps" in proc.stdout and "--out" in proc.stdout, module


# -- the runner: timeouts, processes that die ----------------------------------------------------------------
@pytest.mark.slow
def test_runner_timeout_and_dead_process_leave_results(tmp_path):
    spec = write_spec(
        tmp_path / "spec.json",
        [
            # Runs for 60 s; killed at its 3 s timeout.
            {
                "key": "slow",
                "benchmark": "gemm-flops",
                "timeout": 3,
                "params": {"m": 64, "precision": ["fp32"], "duration": 60},
                "modes": [{"name": "local", "proc_num": 1}],
            },
            # The process exits before the benchmark starts (a crash without a result file).
            {
                "key": "dead",
                "benchmark": "kernel-launch",
                "timeout": 60,
                "modes": [{"name": "local", "proc_num": 1, "prefix": "echo about to die; exit 3;"}],
            },
            # Two ranks in local mode, per-rank results.
            {
                "key": "two",
                "benchmark": "kernel-launch",
                "timeout": 120,
                "params": {"num_steps": 10},
                "modes": [{"name": "local", "proc_num": 2, "parallel": True}],
            },
        ],
    )
    t0 = time.monotonic()
    proc = run_runner(spec, tmp_path / "res", timeout=200)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    status = json.loads((tmp_path / "res" / "status.json").read_text())["entries"]
    assert status["slow"]["status"] == "timeout" and status["slow"]["duration_s"] < 20
    [slow] = rank_results(tmp_path / "res", "slow")
    assert slow["return_code"] == ReturnCode.TIMEOUT and "killed at its timeout of 3 s" in slow["reason"]
    [dead] = rank_results(tmp_path / "res", "dead")
    assert dead["return_code"] == ReturnCode.NO_RESULT and "exited 3" in dead["reason"]
    assert "about to die" in dead["reason"]
    two = rank_results(tmp_path / "res", "two")
    assert [r["rank"] for r in two] == [0, 1] and all(r["status"] == "ok" for r in two)
    summary = node_summary(two)
    assert {"kernel-launch/torch_launch_time:0", "kernel-launch/torch_launch_time:1"} <= set(summary)
    assert all(math.isfinite(v) for v in summary.values())
    assert time.monotonic() - t0 < 150


@pytest.mark.slow
def test_the_hosts_deadline_for_the_whole_run_spans_its_steps(tmp_path):
    """fleet.run_timeout (a campaign stage's timeout): one deadline per host for every step together,
    kept across the steps' runners by run-clock.json; a --resume past it gets a new one."""

    def spec(step: str, entries: list[dict]) -> Path:
        path = tmp_path / f"{step}.json"
        doc = {"schema_version": 1, "run_id": "r1", "step": step, "run_timeout": 4, "entries": entries}
        path.write_text(json.dumps(doc))
        return path

    slow = {
        "key": "slow",
        "benchmark": "gemm-flops",
        "timeout": 300,  # its own timeout is far away: the run's deadline cuts it
        "params": {"m": 64, "precision": ["fp32"], "duration": 60},
        "modes": [{"name": "local", "proc_num": 1}],
    }
    quick = {
        "key": "quick",
        "benchmark": "kernel-launch",
        "timeout": 120,
        "params": {"num_steps": 10},
        "modes": [{"name": "local", "proc_num": 2, "parallel": True}],
    }
    res = tmp_path / "res"
    t0 = time.monotonic()
    first = run_runner(spec("step01", [slow]), res, "--host", "h1", timeout=120)
    assert first.returncode == 1, first.stdout + first.stderr
    assert time.monotonic() - t0 < 30
    [cut] = rank_results(res, "slow")
    assert cut["return_code"] == ReturnCode.TIMEOUT
    assert cut["reason"].startswith("killed: this host's deadline for all of the run's benchmarks (4 s"), cut
    second = run_runner(spec("step02", [quick]), res, "--host", "h1", timeout=120)
    assert second.returncode == 1, second.stdout + second.stderr
    ranks = rank_results(res, "quick")
    assert [r["rank"] for r in ranks] == [0, 1]  # every rank says why it has no figures
    assert all(r["status"] == "timeout" and r["reason"].startswith("not started: ") for r in ranks), ranks
    status = json.loads((res / "status.json").read_text())["entries"]
    assert status["slow"]["status"] == "timeout" and status["quick"]["status"] == "timeout"
    clock = json.loads((res / "run-clock.json").read_text())
    assert clock["run_id"] == "r1" and clock["first_step"] == "step01"
    # The operator's --resume after the deadline: a new clock, and the step runs.
    again = run_runner(spec("step02", [quick]), res, "--host", "h1", "--resume", timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr
    assert all(r["status"] == "ok" for r in rank_results(res, "quick"))
    # A clock file a host garbled is no clock: a fresh one, not a crash.
    (res / "run-clock.json").write_text('{"run_id": "r1", "started": true}')
    assert run_runner(spec("step02", [quick]), res, "--host", "h1", "--resume", timeout=120).returncode == 0
