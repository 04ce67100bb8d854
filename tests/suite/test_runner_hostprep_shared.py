"""hostprep on a shared filesystem (issue 16): a workspace is one host's (a marker under a lock), and the
venv cache is shared by hosts that prepare at once, built once under its flock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sb_bench.hostprep import MARKER, SharedWorkspace, claim_workspace, venv_key

HOSTPREP = Path(__file__).resolve().parents[2] / "benchmarks" / "sb_bench" / "hostprep.py"


def test_the_first_host_owns_the_workspace(tmp_path):
    claim_workspace(tmp_path, "node1")
    claim_workspace(tmp_path, "node1")  # again: its own
    assert json.loads((tmp_path / MARKER).read_text())["host"] == "node1"
    with pytest.raises(SharedWorkspace) as e:
        claim_workspace(tmp_path, "node2")
    msg = str(e.value)
    assert "\n" not in msg
    assert f"workspace {tmp_path} is host node1's" in msg and "node2 sees it too" in msg
    assert "put {host} in fleet.workspace" in msg and "delete the marker" in msg


def test_venv_key_follows_requirements_and_base(tmp_path):
    req = tmp_path / "requirements.txt"
    req.write_text("torch\n")
    k1 = venv_key(sys.executable, req)
    assert venv_key(sys.executable, req) == k1 and len(k1) == 16
    req.write_text("torch\ntransformers\n")
    assert venv_key(sys.executable, req) != k1
    assert venv_key("/usr/bin/python3", req) != venv_key(sys.executable, req)


@pytest.mark.slow
def test_four_hosts_prepare_at_once_on_one_cache(tmp_path):
    """Four hosts, one shared home: four workspaces, one venv built under its lock, no race."""
    cache = tmp_path / "cache"
    (tmp_path / "requirements.txt").write_text("# nothing to install\n")
    procs = []
    for i in range(4):
        ws = tmp_path / "hosts" / f"node{i}"
        ws.mkdir(parents=True)
        argv = [sys.executable, str(HOSTPREP), "--venv", "--install", "never", "--min-free-gb", "0"]
        argv += ["--no-torch", "--host", f"node{i}", "--cache", str(cache)]
        argv += ["--requirements", str(tmp_path / "requirements.txt")]
        procs.append(
            subprocess.Popen(argv, cwd=ws, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        )
    outs = [p.communicate(timeout=300) for p in procs]
    targets = set()
    for i, (p, (out, err)) in enumerate(zip(procs, outs, strict=True)):
        assert p.returncode == 0, out + err
        facts = json.loads(out.strip().splitlines()[-1])
        assert "error" not in facts
        ws = tmp_path / "hosts" / f"node{i}"
        assert (ws / "venv").is_symlink() and (ws / "venv" / "bin" / "python").exists()
        targets.add(os.path.realpath(ws / "venv"))
        assert json.loads((ws / MARKER).read_text())["host"] == f"node{i}"
    assert len(targets) == 1
    [venv] = [p for p in cache.iterdir() if p.is_dir()]
    assert str(venv) == targets.pop() and venv.name.startswith("venv-")
