"""SuperBench's mpi mode on one node, for real: the on-host runner starts Open MPI's mpirun, whose ranks
run tcp-bw through the bootstrap (torch.distributed's variables from Open MPI's; tcp-bw's ranks meet in
the host group, without torch). Across
nodes (ssh launch, patterns, faults) see tests/integration/test_patterns.py."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from sb_bench.host.launch_mpi import bootstrap, decode_group, encode_group, mca_args, ssh_config  # noqa: E402


def run_runner(ws: Path, spec: dict, *extra: str, timeout: float = 120) -> dict:
    (ws / "suite").symlink_to(ROOT / "benchmarks")
    (ws / "spec.json").write_text(json.dumps(spec))
    env = {**os.environ, "PYTHONPATH": "suite", "SB_LOCAL_ADDR": "127.0.0.1"}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "sb_bench.host.runner",
            "--spec",
            "spec.json",
            "--results",
            "res",
            "--host",
            "h1",
            *extra,
        ],
        cwd=ws,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("sb-fleet-runner-record: "), r.stdout + r.stderr
    return json.loads(last.split(": ", 1)[1])


def spec(mode: dict, params: dict, timeout: int = 90) -> dict:
    return {
        "schema_version": 1,
        "run_id": "r1",
        "step": "step01",
        "entries": [
            {
                "key": "tcp-bw",
                "entry": "tcp-bw",
                "benchmark": "tcp-bw",
                "params": params,
                "modes": [mode],
                "timeout": timeout,
            }
        ],
    }


def test_mpirun_is_installed():
    assert shutil.which("mpirun"), "Open MPI is missing: .ci/apt-packages.txt lists openmpi-bin"


def test_mpi_mode_on_one_node_runs_two_ranks_through_mpirun(tmp_path):
    rec = run_runner(
        tmp_path,
        spec(
            # Python's own import log on each rank's stderr (mpirun.log): what the ranks imported
            {"name": "mpi", "proc_num": 2, "node_num": 1, "mca": {}, "env": {"PYTHONPROFILEIMPORTTIME": "1"}},
            {"size": "2M", "num_steps": 2, "num_warmup": 1},
        ),
        "--master-port",
        "29811",
    )
    assert rec["entries"]["tcp-bw"]["status"] == "ok", rec
    r0 = json.loads((tmp_path / "res" / "tcp-bw" / "rank0.json").read_text())
    r1 = json.loads((tmp_path / "res" / "tcp-bw" / "rank1.json").read_text())
    assert r0["world_size"] == 2 and r1["rank"] == 1
    assert r0["result"]["tcp_2097152_bw"][0] > 0 and "tcp_2097152_bw" not in r1["result"]
    log = (tmp_path / "res" / "tcp-bw" / "logs" / "mpirun.log").read_text()
    assert "sb-fleet runner" in log
    app = (tmp_path / "res" / "tcp-bw" / "mpi" / "appfile").read_text()
    assert app.startswith("-np 2 -host localhost:2 ")
    # Both ranks met in the host group, with no torch import (seconds of CPU a rank, every round of a
    # pattern): the import log (import statements; the registry's importlib imports are not in it)
    # names the group's module once per rank and torch never.
    imported = [
        line.rsplit("|", 1)[-1].strip() for line in log.splitlines() if "<stderr>:import time:" in line
    ]
    assert imported.count("sb_bench.core.hostgroup") == 2, log[-3000:]
    assert not [m for m in imported if m == "torch" or m.startswith("torch.")], log[-3000:]


def test_mpi_mode_pattern_indexes_name_the_metrics(tmp_path):
    rec = run_runner(
        tmp_path,
        spec(
            {"name": "mpi", "proc_num": 2, "node_num": 1, "mca": {}},
            {"size": "1M", "num_steps": 1, "num_warmup": 0},
        ),
        "--master-port",
        "29813",
        "--mode-index",
        "3,1",
    )
    assert rec["entries"]["tcp-bw"]["status"] == "ok", rec
    r0 = json.loads((tmp_path / "res" / "tcp-bw" / "rank0.json").read_text())
    assert "tcp_3_1:1048576_bw" in r0["result"]


def test_hung_mpi_group_is_killed_at_the_timeout(tmp_path):
    # a peer that never listens: rank 0 waits for it, the entry's timeout kills mpirun and its ranks
    rec = run_runner(
        tmp_path,
        spec(
            {"name": "mpi", "proc_num": 2, "node_num": 1, "mca": {}, "env": {"SB_LOCAL_ADDR": "127.0.0.1"}},
            {"size": "1M", "num_steps": 1, "num_warmup": 0, "connect_timeout": 600, "port": 1},
            timeout=8,
        ),
        "--master-port",
        "29815",
    )
    assert rec["entries"]["tcp-bw"]["status"] in ("timeout", "failed"), rec
    left = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout.split()
    assert left == [], "ranks left behind"


def test_bootstrap_is_one_token_and_group_round_trips():
    code = bootstrap({"workspace": "~/w", "python": "venv/bin/python", "env": {"A": "b c"}, "node_rank": 1,
                      "benchmark": "tcp-bw", "params": "{}", "out": "res/x"})  # fmt: skip
    assert " " not in code and '"' not in code
    g = {
        "members": [{"addr": "10.0.0.1", "port": 22, "user": "u"}],
        "policy": "accept-new",
        "known_hosts": "",
    }
    assert decode_group(encode_group(g)) == g
    with pytest.raises(ValueError):
        decode_group(base64.b64encode(b'{"members": []}').decode())
    cfg = ssh_config(g["members"], Path("/k"), "accept-new")
    assert (
        "StrictHostKeyChecking accept-new" in cfg
        and "UserKnownHostsFile /k" in cfg
        and "BatchMode yes" in cfg
    )
    assert mca_args({})[:3] == ["--mca", "pml", "ob1"]  # SuperBench's defaults when none given
    assert mca_args({"mca": {"btl": "self"}}) == ["--mca", "btl", "self"]
