"""nccl-bw, pytorch-sharding-matmul, pytorch-computation-communication-overlap over gloo.

Multi-process runs go through the on-host runner: torchrun with 2 processes on one node, and two
runner processes as two "nodes" on loopback addresses 127.0.9.1 and 127.0.9.2.
"""

from __future__ import annotations

import math
import socket

import pytest
from sb_bench.micro.nccl_bw import OPS, actual_size, bus_factor, derive, sizes
from suite_helpers import bench_env, node_summary, rank_results, run_bench, run_runner, write_spec

TINY = {"num_warmup": 1, "num_steps": 3}


# -- pure parts ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("op", "n", "factor"),
    [
        ("allreduce", 8, 2 * 7 / 8),
        ("allgather", 8, 7 / 8),
        ("reducescatter", 4, 3 / 4),
        ("alltoall", 2, 0.5),
        ("broadcast", 16, 1.0),
        ("reduce", 2, 1.0),
    ],
)
def test_nccl_tests_bus_factors(op, n, factor):
    assert bus_factor(op, n) == pytest.approx(factor)


def test_derive_names_and_busbw_is_algbw_times_factor():
    v = derive("allreduce", 8589934592, 65263.0237e-6, 8)
    assert set(v) == {"allreduce_8589934592_time", "allreduce_8589934592_algbw", "allreduce_8589934592_busbw"}
    assert v["allreduce_8589934592_time"] == pytest.approx(65263.0237)
    assert v["allreduce_8589934592_algbw"] == pytest.approx(131.62, rel=1e-3)
    assert v["allreduce_8589934592_busbw"] == pytest.approx(v["allreduce_8589934592_algbw"] * 1.75)


def test_size_sweep():
    assert sizes(1 << 20, 8 << 20, 2) == [1 << 20, 2 << 20, 4 << 20, 8 << 20]
    assert sizes(8, 8, 2) == [8]
    assert actual_size("allgather", 1000, 3) == 996  # float32 elements in 3 equal chunks
    with pytest.raises(ValueError):
        sizes(0, 8, 2)


def test_single_rank_collectives_are_skipped_with_reason():
    for name in ("nccl-bw", "sharding-matmul", "computation-communication-overlap"):
        env = run_bench(name, **TINY)
        assert env["status"] == "skipped", (name, env["reason"])
        assert "two or more ranks" in env["reason"]


# -- two processes, one node (torchrun) ----------------------------------------------------------------------
def _check_nccl(results: list[dict], n: int, want_note: str | None = None) -> None:
    assert len(results) == n
    for r in results:
        assert r["status"] == "ok", r["reason"]
        for op in OPS:
            for s in (65536, 131072):
                t, alg, bus = (r["result"][f"{op}_{s}_{k}"][0] for k in ("time", "algbw", "busbw"))
                assert t > 0 and alg > 0 and math.isfinite(bus)
                assert bus == pytest.approx(alg * bus_factor(op, n))
                assert alg == pytest.approx(s / (t * 1e-6) / 1e9)
                assert r["metrics"][f"{op}_{s}_busbw"]["unit"] == "GB/s"
                assert r["metrics"][f"{op}_{s}_time"]["unit"] == "us"
        if want_note:
            assert want_note in r["reason"]
    # Every rank reports the rank-averaged time, so the node summary has one value per metric.
    summary = node_summary(results)
    assert "nccl-bw/allreduce_65536_busbw" in summary
    assert not any(k.startswith("nccl-bw/allreduce_65536_busbw:") for k in summary)


@pytest.mark.slow
def test_torchrun_two_ranks_collectives(tmp_path):
    dist = [{"name": "torch.distributed", "proc_num": 2}]
    nccl = {"minbytes": "64K", "maxbytes": "128K", **TINY}
    spec = write_spec(
        tmp_path / "spec.json",
        [
            {"key": "nccl-native", "benchmark": "nccl-bw", "params": nccl, "modes": dist, "timeout": 180},
            {
                "key": "shard",
                "benchmark": "sharding-matmul",
                "params": {"m": 96, "n": 64, "k": 80, **TINY},
                "modes": dist,
                "timeout": 180,
            },
            {
                "key": "overlap",
                "benchmark": "computation-communication-overlap",
                "params": {
                    "comm_bytes": "1M",
                    "mul_elements": 65536,
                    "matmul_n": 64,
                    "compute_iters": 2,
                    **TINY,
                },
                "modes": dist,
                "timeout": 180,
            },
        ],
    )
    proc = run_runner(spec, tmp_path / "res", timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _check_nccl(rank_results(tmp_path / "res", "nccl-native"), 2)
    shard = rank_results(tmp_path / "res", "shard")
    assert [r["name"] for r in shard] == ["pytorch-sharding-matmul"] * 2
    for r in shard:
        assert r["status"] == "ok", r["reason"]
        assert r["result"]["allreduce_time"][0] > 0 and r["result"]["allgather_time"][0] > 0
        assert r["reduce_op"]["allreduce_time"] == "max"
    overlap = rank_results(tmp_path / "res", "overlap")
    assert sorted(node_summary(overlap)) == [
        "pytorch-computation-communication-overlap/matmul_time:0",
        "pytorch-computation-communication-overlap/matmul_time:1",
        "pytorch-computation-communication-overlap/mul_time:0",
        "pytorch-computation-communication-overlap/mul_time:1",
        "pytorch-computation-communication-overlap/return_code:0",
        "pytorch-computation-communication-overlap/return_code:1",
    ]


@pytest.mark.slow
def test_ngpus_starts_its_own_ranks_and_p2p_ring_is_checked():
    """SuperBench's single-process form (local mode, ngpus: N) starts N ranks itself. With
    ``implementation: p2p`` reduce-scatter and all-to-all run as the send/recv ring that stands in
    where gloo lacks them; their results are checked like the native ones."""
    env = run_bench(
        "nccl-bw",
        ngpus=2,
        operation=["allreduce", "reducescatter", "alltoall"],
        minbytes="64K",
        maxbytes="128K",
        implementation="p2p",
        **TINY,
    )
    assert env["status"] == "ok", env["reason"]
    assert "reducescatter ran as point-to-point ring" in env["reason"]
    assert "alltoall ran as point-to-point ring" in env["reason"]
    r = env["result"]
    assert r["allreduce_65536_busbw"][0] == pytest.approx(r["allreduce_65536_algbw"][0])  # 2(n-1)/n = 1
    assert r["reducescatter_131072_busbw"][0] == pytest.approx(r["reducescatter_131072_algbw"][0] / 2)
    assert r["alltoall_131072_busbw"][0] == pytest.approx(r["alltoall_131072_algbw"][0] / 2)


def test_ring_fallback_taken_when_backend_lacks_the_collective():
    from sb_bench.micro.nccl_bw import _unsupported

    assert _unsupported(RuntimeError("ProcessGroupGloo does not support reduce_scatter"))
    assert _unsupported(NotImplementedError("x"))
    assert not _unsupported(RuntimeError("Connection reset by peer"))


# -- two nodes on loopback -----------------------------------------------------------------------------------
def _loopback_ok(addr: str) -> bool:
    try:
        with socket.socket() as s:
            s.bind((addr, 0))
        return True
    except OSError:
        return False


@pytest.mark.slow
def test_two_nodes_on_loopback(tmp_path):
    if not (_loopback_ok("127.0.9.1") and _loopback_ok("127.0.9.2")):
        pytest.skip("127.0.9.x not routable to loopback here")
    with socket.socket() as s:
        s.bind(("127.0.9.1", 0))
        port = s.getsockname()[1]
    spec = write_spec(
        tmp_path / "spec.json",
        [
            {
                "key": "nccl",
                "benchmark": "nccl-bw",
                "params": {"minbytes": "64K", "maxbytes": "128K", **TINY},
                "modes": [
                    {
                        "name": "torch.distributed",
                        "proc_num": 1,
                        "node_num": 2,
                        "env": {"GLOO_SOCKET_IFNAME": "lo"},
                    }
                ],
                "timeout": 180,
            },
        ],
    )
    procs = [
        run_runner(
            spec,
            tmp_path / f"node{i}",
            "--node-rank",
            str(i),
            "--master-addr",
            "127.0.9.1",
            "--master-port",
            str(port),
            "--local-addr",
            f"127.0.9.{i + 1}",
            "--host",
            f"node{i}",
            env=bench_env(),
            background=True,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    results = [*rank_results(tmp_path / "node0", "nccl"), *rank_results(tmp_path / "node1", "nccl")]
    assert sorted(r["rank"] for r in results) == [0, 1]
    assert all(r["world_size"] == 2 for r in results)
    _check_nccl(results, 2)


@pytest.mark.parametrize("op", ["reducescatter", "allreduce"])
def test_128mib_on_two_gloo_ranks_passes_its_data_check(op, tmp_path):
    """Issue 15's repro: 2**25 float32 elements, past float32's exact integers, checked on both ranks."""
    import json
    import subprocess
    import sys

    argv = [sys.executable, "-m", "sb_bench.micro.nccl_bw", "--device", "cpu", "--ngpus", "2"]
    argv += ["--operation", op, "--minbytes", "128M", "--maxbytes", "128M", "--num-steps", "2"]
    argv += ["--num-warmup", "1", "--out", str(tmp_path)]
    proc = subprocess.run(argv, env=bench_env(), capture_output=True, text=True, timeout=300)
    env = json.loads((tmp_path / "rank0.json").read_text())
    assert proc.returncode == 0 and env["status"] == "ok", (env["reason"], proc.stderr[-500:])
    assert env["result"][f"{op}_134217728_busbw"][0] > 0
