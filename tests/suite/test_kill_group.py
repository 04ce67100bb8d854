"""The runner's kill reaches every process a launch started, also one that left its process group (as
Open MPI's mpirun does with its local ranks): nothing of a killed round outlives it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from sb_bench.host.runner import kill_groups, session_members  # noqa: E402

# a leader whose child moves to a process group of its own (setpgid), then both wait
CHILD = "import os, time; os.setpgid(0, 0); print(os.getpid(), flush=True); time.sleep(300)"
LEADER = (
    "import subprocess, sys, time; "
    f"c = subprocess.Popen([sys.executable, '-c', {CHILD!r}], stdout=subprocess.PIPE, text=True); "
    "print(c.stdout.readline().strip(), flush=True); time.sleep(300)"
)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def test_a_child_in_its_own_group_is_killed_with_the_launch():
    p = subprocess.Popen(
        [sys.executable, "-c", LEADER], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        child = int(p.stdout.readline())
        assert os.getpgid(child) == child != p.pid  # out of the launch's group, still in its session
        assert child in session_members({p.pid})
        kill_groups([p], signal.SIGKILL)
        p.wait(timeout=30)
        deadline = time.monotonic() + 30
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child), "the child that left the process group outlived the kill"
    finally:
        if p.poll() is None:
            p.kill()
