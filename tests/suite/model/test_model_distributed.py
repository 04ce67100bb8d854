"""DDP through torchrun: 2 processes on one node, and 2 "nodes" on loopback addresses (gloo on CPU).

Both go through the on-host runner as sb-fleet starts it. Every rank must report the same training
step time: the slowest rank's.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from model_tiny import expected_metrics, tiny_params

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[3]
LSTM = tiny_params("pytorch-lstm", input_size=16, hidden_size=32, num_layers=2, seq_len=6, num_steps=4,
                   num_warmup=1, check_steps=2, sample_count=8)  # fmt: skip


def runner_env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "benchmarks"), env.get("PYTHONPATH")]))
    env["GLOO_SOCKET_IFNAME"] = "lo"
    env["OMP_NUM_THREADS"] = "1"
    return env


def spec(path: Path, nnodes: int, nproc: int) -> Path:
    entry = {
        "key": "model-benchmarks",
        "benchmark": "pytorch-lstm",
        "type": "model",
        "params": LSTM,
        "timeout": 240,
        "modes": [{"name": "torch.distributed", "proc_num": nproc, "node_num": nnodes}],
    }
    path.write_text(json.dumps({"schema_version": 1, "entries": [entry]}))
    return path


def runner(spec_path: Path, results: Path, *extra: str) -> subprocess.Popen:
    argv = [
        sys.executable,
        "-m",
        "sb_bench.host.runner",
        "--spec",
        str(spec_path),
        "--results",
        str(results),
        *extra,
    ]
    return subprocess.Popen(
        argv, env=runner_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def check_ranks(files: list[Path], world: int) -> None:
    envs = [json.loads(f.read_text()) for f in files]
    assert len(envs) == world
    for env in envs:
        assert env["status"] == "ok", env["reason"]
        assert env["world_size"] == world
        assert set(env["result"]) - {"return_code"} == expected_metrics(
            ["fp32"], ["train", "inference"], False
        )
    assert sorted(e["rank"] for e in envs) == list(range(world))
    # The slowest rank's step time is every rank's step time; throughput is per GPU.
    times = {e["result"]["fp32_train_step_time"][0] for e in envs}
    assert len(times) == 1
    (t,) = times
    for e in envs:
        assert e["result"]["fp32_train_throughput"][0] == pytest.approx(LSTM["batch_size"] * 1000 / t)


@pytest.mark.slow
def test_ddp_two_processes_on_one_node(tmp_path):
    proc = runner(spec(tmp_path / "spec.json", 1, 2), tmp_path / "res")
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out
    check_ranks(sorted((tmp_path / "res" / "model-benchmarks").glob("rank*.json")), 2)


def free_port(addr: str) -> int:
    with socket.socket() as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_ddp_across_two_loopback_nodes(tmp_path):
    master = "127.0.9.1"
    port = free_port(master)
    spec_path = spec(tmp_path / "spec.json", 2, 1)
    procs = [
        runner(spec_path, tmp_path / f"node{r}", "--nnodes", "2", "--node-rank", str(r), "--master-addr", master,
               "--master-port", str(port), "--local-addr", f"127.0.9.{r + 1}")
        for r in (0, 1)
    ]  # fmt: skip
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=300)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert all(p.returncode == 0 for p in procs), outs
    files = [
        tmp_path / "node0" / "model-benchmarks" / "rank0.json",
        tmp_path / "node1" / "model-benchmarks" / "rank1.json",
    ]
    check_ranks(files, 2)
