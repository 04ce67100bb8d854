"""Issue 16 on a real loopback fleet: one login user, no per-host ``sb_workspace`` (every loopback host of
one user shares one home: the NFS case), ``node_num: all``, a shared venv built by hosts deploying at
once, an explicit shared workspace refused with one clear line, a runner that crashes on one host, and
``cleanup --workspaces --cache`` waiting for a deploy that holds the shared venv.

Hosts: 127.0.16.x, one sshd each.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from .conftest import ROOT, SB_FLEET, sb_fleet, started_fleet

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CONFIG = """\
version: v0.4
fleet:
  known_hosts: @KNOWN_HOSTS@
  master_port: @MASTER_PORT@  # the fleet's own: another lane's fleet may rendezvous at once
  python: /usr/bin/python3
  venv: true
  install_requirements: never
  min_free_disk_gb: 0
  default_timeout: 240
  forks: 16
  env: {GLOO_SOCKET_IFNAME: lo, OMP_NUM_THREADS: 1}
superbench:
  benchmarks:
    nccl-bw:
      timeout: 300
      modes: [{name: torch.distributed, proc_num: 1, node_num: all}]
      parameters: {operation: [allreduce], minbytes: 1024, maxbytes: 4096, num_warmup: 1, num_steps: 2}
    noop:
      timeout: 60
      modes: [{name: local, proc_num: 2, parallel: yes}]
      parameters: {num_warmup: 0, num_steps: 2}
gates:
  fleet: {enabled: false}
"""


@pytest.fixture(scope="module")
def hfleet():
    with started_fleet(4, "127.0.16") as f:
        home = Path(f.user.pw_dir) / ".sb-fleet"
        shutil.rmtree(home, ignore_errors=True)  # a fresh shared home
        try:
            yield f
        finally:
            shutil.rmtree(home, ignore_errors=True)


def _inventory(fleet, name: str, **all_vars: str) -> Path:
    """The fleet's hosts with NO per-host sb_workspace (one login user, one home)."""
    lines = ["[gpu]"]
    lines += [f"{h.name} ansible_host={h.addr} ansible_port={h.port}" for h in fleet.hosts]
    lines += [
        "",
        "[gpu:vars]",
        f"ansible_user={fleet.user.pw_name}",
        f"ansible_ssh_private_key_file={fleet.client_key}",
        "ansible_python_interpreter=/usr/bin/python3",
        f"sb_python={fleet.python}",
        *(f"{k}={v}" for k, v in all_vars.items()),
    ]
    path = fleet.dir / name
    path.write_text("\n".join(lines) + "\n")
    return path


def _stage(run_dir: Path, stage: str) -> dict[str, dict]:
    return {o["host"]: o for o in json.loads((run_dir / "outcomes" / f"{stage}.json").read_text())["hosts"]}


def _run_id(run_dir: Path) -> str:
    return json.loads((run_dir / "manifest.json").read_text())["run_id"]


def test_default_workspace_node_num_all_every_host_its_own_results(hfleet, tmp_path):
    inv = _inventory(hfleet, "inv.ini")
    cfg = hfleet.config(CONFIG)
    run_dir = tmp_path / "run"
    r = sb_fleet("validate", "-i", str(inv), "-c", str(cfg), "--run-dir", str(run_dir), timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    names = [h.name for h in hfleet.hosts]
    # Four hosts deployed at once onto a fresh shared home: every one deployed, each in its own
    # workspace, all on the one venv they built under its lock.
    deploy = _stage(run_dir, "deploy")
    assert all(deploy[h]["outcome"] == "ok" for h in names), deploy
    home = Path(hfleet.user.pw_dir)
    venvs = set()
    for h in names:
        facts = json.loads((run_dir / "facts" / f"{h}.json").read_text())
        assert facts["workspace"] == str(home / ".sb-fleet" / "hosts" / h)
        marker = json.loads((home / ".sb-fleet" / "hosts" / h / ".sb-fleet-host").read_text())
        assert marker["host"] == h
        venvs.add(os.path.realpath(home / ".sb-fleet" / "hosts" / h / "venv"))
    assert len(venvs) == 1 and venvs.pop().startswith(str(home / ".sb-fleet" / "cache" / "venv-"))
    # Every host ran both entries and has its own results, named by itself and this run.
    run_id = _run_id(run_dir)
    assert all(o["outcome"] == "ok" for o in _stage(run_dir, "run").values())
    summary = {
        d["node"]: d for d in map(json.loads, (run_dir / "results-summary.jsonl").read_text().splitlines())
    }
    assert sorted(summary) == names
    for i, h in enumerate(names):
        res = run_dir / "raw" / h / "results"
        status = json.loads((res / "status.json").read_text())
        assert (status["host"], status["run_id"]) == (h, run_id)
        assert {k: v["status"] for k, v in status["entries"].items()} == {"nccl-bw": "ok", "noop": "ok"}
        [rank] = sorted((res / "nccl-bw").glob("rank*.json"))  # one process per node, node ranks 0..3
        d = json.loads(rank.read_text())
        assert rank.name == f"rank{i}.json" and (d["world_size"], d["host"]) == (4, h)
        assert any(k.startswith("nccl-bw/allreduce_") for k in summary[h])
    hosts = {h["name"]: h for h in json.loads((run_dir / "report.json").read_text())["hosts"]}
    assert all(hosts[h]["verdict"] == "pass" for h in names), hosts


def test_explicit_shared_workspace_is_refused_with_one_clear_line(hfleet, tmp_path):
    inv = _inventory(hfleet, "inv-shared.ini", sb_workspace="~/shared-ws")
    cfg = hfleet.config(CONFIG)
    run_dir = tmp_path / "run"
    shutil.rmtree(Path(hfleet.user.pw_dir) / "shared-ws", ignore_errors=True)
    try:
        r = sb_fleet("deploy", "-i", str(inv), "-c", str(cfg), "--run-dir", str(run_dir), timeout=600)
        assert r.returncode == 1, r.stdout + r.stderr
        deploy = _stage(run_dir, "deploy")
        ok = [h for h, o in deploy.items() if o["outcome"] == "ok"]
        refused = {h: o["reason"] for h, o in deploy.items() if o["outcome"] == "failed"}
        assert len(ok) == 1 and len(refused) == 3, deploy  # one owner; no host failed on a race
        for h, why in refused.items():
            assert "\n" not in why
            assert f"is host {ok[0]}'s" in why and f"and {h} sees it too" in why
            assert "put {host} in fleet.workspace" in why and "sb_workspace per host" in why
    finally:
        shutil.rmtree(Path(hfleet.user.pw_dir) / "shared-ws", ignore_errors=True)


def test_a_crashed_runner_is_failed_at_the_run_stage(hfleet, tmp_path):
    inv = _inventory(hfleet, "inv.ini")
    cfg = hfleet.config(CONFIG.replace("    nccl-bw:", "    nccl-bw:\n      enable: false"))
    run_dir = tmp_path / "run"
    r = sb_fleet("deploy", "-i", str(inv), "-c", str(cfg), "--run-dir", str(run_dir), timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    # The fault, for real on the host: a file stands where the runner must create the entry's results
    # directory, so the runner itself raises (FileExistsError), as a full or broken disk would make it.
    victim = hfleet.hosts[1].name
    res = Path(hfleet.user.pw_dir) / ".sb-fleet" / "hosts" / victim / "runs" / _run_id(run_dir) / "results"
    res.mkdir(parents=True)
    (res / "noop").write_text("in the way\n")
    shutil.chown(res.parent.parent, hfleet.user.pw_name, hfleet.user.pw_name)
    for p in (res.parent, res, res / "noop"):
        shutil.chown(p, hfleet.user.pw_name, hfleet.user.pw_name)
    # Not --quiet: the progress display must say so at once, not only the report later.
    r = subprocess.run(
        [SB_FLEET, "run", "--run-dir", str(run_dir)], capture_output=True, text=True, timeout=600, cwd=ROOT
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"run: {victim}: failed: step01: runner crashed: FileExistsError" in r.stderr, r.stderr
    assert re.search(r"^run\s+done\s+3\s+failed\s+1\b", r.stderr, re.M), r.stderr
    run = _stage(run_dir, "run")
    assert run[victim]["outcome"] == "failed"
    assert run[victim]["reason"].startswith("step01: runner crashed: FileExistsError: [Errno 17] File exists")
    assert all(o["outcome"] == "ok" for h, o in run.items() if h != victim), run
    tb = (run_dir / "runner-errors" / f"{victim}-step01.txt").read_text()
    assert tb.startswith("Traceback (most recent call last):") and "FileExistsError" in tb
    # The host's own record says so too: no entry left running, the traceback kept beside it.
    status = json.loads((res / "status.json").read_text())
    assert status["entries"]["noop"]["status"] == "failed" and "FileExistsError" in status["error"]
    assert (res / "runner-error-step01.txt").is_file()


def _remote_pids(needle: bytes) -> list[int]:
    """Pids of the fleet user's processes whose command line holds ``needle``."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if needle in (d / "cmdline").read_bytes():
                pids.append(int(d.name))
        except OSError:
            pass
    return pids


def test_cleanup_workspaces_and_cache_waits_for_a_deploy_holding_the_venv(hfleet, tmp_path):
    """``cleanup --workspaces`` removes each host's workspace, ``--cache`` the venv the hosts share, under
    its lock: while another deploy holds it (shared, as a deploy does from its check until it ends), the
    cleanup waits, and the venv stays; once released, it goes."""
    import fcntl

    inv = _inventory(hfleet, "inv.ini")
    cfg = hfleet.config(CONFIG.replace("    nccl-bw:", "    nccl-bw:\n      enable: false"))
    run_dir = tmp_path / "run"
    r = sb_fleet("deploy", "-i", str(inv), "-c", str(cfg), "--run-dir", str(run_dir), timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    home = Path(hfleet.user.pw_dir) / ".sb-fleet"
    [venv] = [p for p in (home / "cache").iterdir() if p.is_dir()]
    names = [h.name for h in hfleet.hosts]
    assert all((home / "hosts" / h / "venv").resolve() == venv for h in names)

    fd = os.open(venv.with_name(venv.name + ".lock"), os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_SH)  # a deploy elsewhere, using the venv
    try:
        proc = subprocess.Popen(
            [SB_FLEET, "cleanup", "--workspaces", "--cache", "--run-dir", str(run_dir), "--quiet"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        deadline = time.monotonic() + 300
        while not _remote_pids(b"--remove-cache") and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert proc.poll() is None, proc.communicate()
        assert _remote_pids(b"--remove-cache"), "no host reached the cache removal"
        # the workspaces went first; the venv waits for the lock
        while any((home / "hosts" / h).exists() for h in names) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any((home / "hosts" / h).exists() for h in names)
        assert (venv / "bin" / "python").exists()
    finally:
        os.close(fd)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, out + err
    assert all(f"{h}: ok" in out for h in names), out
    assert not (home / "cache").exists(), list((home / "cache").iterdir())
