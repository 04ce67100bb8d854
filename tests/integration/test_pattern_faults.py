"""Traffic patterns when something breaks, on a real loopback fleet (127.0.48.x) in SuperBench's mpi mode:
a benchmark rank stopped with SIGSTOP (its pair times out, the others finish), one host's benchmark
traffic dropped by iptables (the all-nodes ring fails and validate bisects it to the host), and an mpi
entry that needs CUDA (every rank skips with its reason). None of them judges a measured figure: they run
in CI's queue beside other files (tests/integration/test_patterns.py has the measured cases, alone)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fleetlib import PAIR_WISE_TCP, SshFleet, mpi_login_key
from tests.fleetlib.patterns import cut_off, inventory, run_root_dir, verdicts
from tests.integration.conftest import ROOT, SB_FLEET, sb_fleet, started_fleet

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CONFIG = PAIR_WISE_TCP.replace("@PORT@", "31321")


@pytest.fixture(scope="module")
def fleet8() -> Iterator[SshFleet]:
    if not shutil.which("mpirun") or not shutil.which("iptables"):
        pytest.fail(
            "the pattern tests need Open MPI's mpirun and iptables (.ci/apt-packages.txt: openmpi-bin, iptables)"
        )
    with started_fleet(6, "127.0.48") as f:
        mpi_login_key(f)
        yield f


@pytest.fixture
def run_root() -> Iterator[Path]:
    with run_root_dir() as d:
        yield d


def test_a_stopped_pair_is_reported_and_the_others_finish(fleet8, run_root):
    victim = fleet8.hosts[2]
    run_dir = run_root / "hang"
    # Long enough that the victim's rank is seen and stopped while it measures (a rank starts in about a
    # tenth of a second: its group needs no torch import): 2.4 GB a direction, about a second on loopback.
    body = CONFIG.replace("@TIMEOUT@", "25").replace("num_steps: 3}", "num_steps: 300}")
    assert "num_steps: 300}" in body
    cfg = fleet8.config(body, name="hang.yaml")
    inv = inventory(fleet8, 4, "inv4h.ini")  # 3 rounds of 2 pairs: the stopped pair, 5 others
    proc = subprocess.Popen(
        [SB_FLEET, "validate", "-i", str(inv), "-c", str(cfg), "--run-dir", str(run_dir), "--quiet"],
        cwd=str(ROOT),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stopped: list[int] = []
    try:
        deadline = time.monotonic() + 600
        while not stopped and time.monotonic() < deadline and proc.poll() is None:
            pids = fleet8.processes(victim.name, needle=b"tcp-bw")
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)
                    stopped.append(pid)
            time.sleep(0.05)
        out, err = proc.communicate(timeout=900)
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
    assert stopped, "the victim's benchmark never started"
    doc = verdicts(run_dir)
    pairs = doc["matrix"]["pairs"]
    hung = [p for p in pairs if p.get("status", "ok") != "ok"]
    assert len(hung) == 1 and victim.name in (hung[0]["a"], hung[0]["b"]), hung
    assert hung[0]["status"] == "timeout" and hung[0]["round"] == 0, hung
    assert sum(1 for p in pairs if p.get("status", "ok") == "ok") == 5  # every other pair finished
    assert proc.returncode == 1, out + err
    left = fleet8.processes(victim.name, needle=b"tcp-bw")
    assert left == [], "the stopped rank was left behind"


def test_an_mpi_entry_that_needs_cuda_skips_with_its_reason(fleet8, run_root):
    """SuperBench's default config runs megatron-gpt in mpi mode across every node: here, one mpirun over
    the hosts, and every rank skips with the reason (no CUDA) instead of the entry being 'not run'."""
    body = CONFIG.split("superbench:")[0] + (
        "superbench:\n  benchmarks:\n    megatron-gpt:\n      timeout: 120\n"
        "      modes: [{name: mpi, proc_num: 1, node_num: all, mca: {oob_tcp_if_include: lo}}]\n"
    )
    cfg = fleet8.config(body, name="megatron.yaml")
    run_dir = run_root / "megatron"
    r = sb_fleet(
        "validate",
        "-i",
        str(inventory(fleet8, 2, "inv2.ini")),
        "-c",
        str(cfg),
        "--run-dir",
        str(run_dir),
        timeout=900,
    )
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["unsupported"] == {}
    (step,) = plan["steps"]
    assert step["groups"][0]["hosts"] == ["host001", "host002"] and step["entries"][0]["launcher"] == "mpirun"
    for h in ("host001", "host002"):
        rank = json.loads(
            next((run_dir / "raw" / h / "results" / "megatron-gpt").glob("rank*.json")).read_text()
        )
        assert rank["status"] == "skipped", rank
        assert "CUDA" in rank["reason"] or "Megatron-Core is not installed" in rank["reason"], rank["reason"]
        assert rank["world_size"] == 2
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]


def test_a_failed_all_nodes_run_is_bisected_to_the_host(fleet8, run_root):
    """An all-nodes tcp-bw ring over 6 hosts times out because one host's benchmark traffic is dropped;
    validate bisects it: halves, then the suspects each with a known-good partner, and names the host."""
    victim = fleet8.hosts[3]
    body = CONFIG.replace("@TIMEOUT@", "25").replace("{type: pair-wise}", "{type: all-nodes}")
    cfg = fleet8.config(body, name="allnodes.yaml")
    run_dir = run_root / "bisect"
    inv = inventory(fleet8, 6, "inv6b.ini")
    t0 = time.monotonic()
    with cut_off(fleet8, victim.addr):
        r = sb_fleet("validate", "-i", str(inv), "-c", str(cfg), "--run-dir", str(run_dir), timeout=1500)
    took = time.monotonic() - t0
    follow = json.loads((run_dir / "followup.json").read_text())["entries"]["tcp-bw"]["bisection"]
    print(f"all-nodes over 6 hosts, bisected in {follow['rounds_run']} round(s): {took:.1f} s of validate")
    assert follow["first"]["status"] in ("timeout", "failed"), follow
    assert follow["culprits"] == [victim.name], follow
    assert follow["unresolved"] == [] and follow["rounds_run"] <= 3, follow  # ceil(log2 6)
    for rnd in follow["rounds"]:
        assert (run_dir / rnd["run_dir"] / "manifest.json").exists()
        for g in rnd["groups"]:
            assert g["passed"] == (victim.name not in g["hosts"]), rnd
    report = json.loads((run_dir / "report.json").read_text())
    verdict = {h["name"]: h["verdict"] for h in report["hosts"]}
    assert verdict[victim.name] == "fail", report["hosts"]
    assert [(f["kind"], f["target"]) for f in report["fabric"]] == [("bisection", victim.name)], report[
        "fabric"
    ]
    assert report["gate"]["passed"] is False
    assert f"| tcp-bw | bisection | {victim.name} | high |" in (run_dir / "report.md").read_text()
    html = (run_dir / "report.html").read_text()
    assert "Bisection: tcp-bw" in html and f"<b>{victim.name}</b>" in html
    assert r.returncode != 0, r.stdout[-2000:]
