"""Helpers for the on-host suite's tests: run a benchmark in-process or through the runner."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"


def run_bench(name: str, **params):
    """Run one benchmark in this process (rank 0 of 1) and return its result envelope."""
    from sb_bench.core.harness import run_benchmark

    return run_benchmark(name, params)


def assert_metrics(env: dict, expected: dict[str, str]) -> None:
    """The run succeeded and reported exactly these metrics (name -> unit), each positive and finite."""
    assert env["status"] == "ok" and env["return_code"] == 0, env["reason"]
    got = {k for k in env["result"] if k != "return_code"}
    assert got == set(expected), f"metrics {sorted(got)} != {sorted(expected)}"
    for name, unit in expected.items():
        values = env["result"][name]
        assert len(values) == env["run_count"]
        assert all(isinstance(v, float) and math.isfinite(v) and v > 0 for v in values), (name, values)
        assert env["metrics"][name]["unit"] == unit, (name, env["metrics"][name])


def bench_env(**extra: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(BENCH), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(extra)
    return env


def write_spec(path: Path, entries: list[dict]) -> Path:
    path.write_text(json.dumps({"schema_version": 1, "entries": entries}))
    return path


def run_runner(
    spec: Path,
    results: Path,
    *args: str,
    timeout: float = 240,
    env: dict | None = None,
    background: bool = False,
):
    argv = [
        sys.executable,
        "-m",
        "sb_bench.host.runner",
        "--spec",
        str(spec),
        "--results",
        str(results),
        *args,
    ]
    if background:
        return subprocess.Popen(
            argv, env=env or bench_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    return subprocess.run(argv, env=env or bench_env(), capture_output=True, text=True, timeout=timeout)


def rank_results(results: Path, key: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((results / key).glob("rank*.json"))]


def node_summary(results: list[dict], prefix: str | None = None) -> dict[str, float]:
    """One node's summary columns of one benchmark's rank results, by the control node's one normaliser
    (sb_fleet.rundir.normalize): the producer's output goes through the code that collect runs on it."""
    from sb_fleet.rundir.normalize import HostRecord, reduce_entry

    rec = HostRecord("node")
    name = prefix or str(results[0].get("name", ""))
    reduce_entry(name, {int(r.get("rank", 0)): r for r in results}, rec)
    return rec.metrics
