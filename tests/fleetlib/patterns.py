"""What the traffic-pattern tests share (tests/integration/test_patterns.py: the measured cases, alone on the
machine; tests/integration/test_pattern_faults.py: hangs, cut-off hosts and skips, in CI's queue): an
inventory of a fleet's first hosts, the pair file of a run, a host cut off from benchmark traffic."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tests.fleetlib import SshFleet


def inventory(fleet: SshFleet, n: int, name: str) -> Path:
    path = fleet.inventory(name=name)
    lines = path.read_text().splitlines()
    keep = [ln for ln in lines if not ln.startswith("host") or int(ln[4:7]) <= n]
    path.write_text("\n".join(keep) + "\n")
    return path


def verdicts(run_dir: Path, r: subprocess.CompletedProcess | None = None) -> dict:
    path = run_dir / "pairs" / "tcp-bw.json"
    assert path.exists(), f"no pair file in {run_dir}: " + (r.stdout[-3000:] + r.stderr[-3000:] if r else "")
    return json.loads(path.read_text())


@contextlib.contextmanager
def run_root_dir() -> Iterator[Path]:
    """A directory for run directories outside pytest's rotating tmp dirs (other sessions prune those),
    removed after (kept with SBF_KEEP_RUNS set)."""
    d = Path(tempfile.mkdtemp(prefix="sbf-patterns-"))
    try:
        yield d
    finally:
        if not os.environ.get("SBF_KEEP_RUNS"):
            shutil.rmtree(d, ignore_errors=True)


@contextlib.contextmanager
def cut_off(fleet: SshFleet, victim_addr: str) -> Iterator[None]:
    """Every TCP flow to or from ``victim_addr`` dropped (iptables) except SSH (each host's sshd port): the
    host stays reachable to the control node and to mpirun's launch, and no benchmark traffic gets
    through (a dead data NIC); always undone."""

    def ipt(*args: str, check: bool = True) -> None:
        r = subprocess.run(["iptables", "-w", *args], capture_output=True, text=True)
        if check and r.returncode != 0:
            raise RuntimeError(f"iptables {' '.join(args)}: {r.stderr.strip()}")

    chain = "SBF_CUT"
    ipt("-N", chain)
    try:
        ports = ",".join(str(h.port) for h in fleet.hosts)
        ipt("-A", chain, "-p", "tcp", "-m", "multiport", "--ports", ports, "-j", "RETURN")
        ipt("-A", chain, "-s", f"{victim_addr}/32", "-j", "DROP")
        ipt("-A", chain, "-d", f"{victim_addr}/32", "-j", "DROP")
        ipt("-I", "INPUT", "-j", chain)
        yield
    finally:
        ipt("-D", "INPUT", "-j", chain, check=False)
        ipt("-F", chain, check=False)
        ipt("-X", chain, check=False)
