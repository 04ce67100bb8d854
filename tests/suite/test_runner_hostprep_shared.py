"""hostprep on a shared filesystem (issue 16): a workspace is one host's (a marker under a lock), and the
venv cache is shared by hosts that prepare at once, built once under its flock."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sb_bench.host import hostprep
from sb_bench.host.hostprep import MARKER, SharedWorkspace, claim_workspace, venv_key

HOSTPREP = Path(__file__).resolve().parents[2] / "benchmarks" / "sb_bench" / "host" / "hostprep.py"


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


# -- a filesystem without file locks: one line naming the file and the fix, never a traceback -----------
@pytest.mark.parametrize("code", [errno.ENOLCK, errno.EOPNOTSUPP])
def test_no_locks_on_the_workspace_is_one_line(tmp_path, monkeypatch, capsys, code):
    def refuse(fd, op):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(hostprep.fcntl, "flock", refuse)
    ws = tmp_path / "ws"
    ws.mkdir()
    monkeypatch.chdir(ws)
    rc = hostprep.main(["--min-free-gb", "0", "--no-torch", "--host", "node1"])
    assert rc == 1
    out = capsys.readouterr().out.strip().splitlines()
    err = json.loads(out[-1])["error"]
    assert "\n" not in err
    assert err.startswith(f"cannot lock {ws / MARKER}: its filesystem does not support file locks")
    assert f"({errno.errorcode[code]}: {os.strerror(code)})" in err
    assert "put the workspace on a filesystem with locks" in err and "sb_workspace" in err


def test_no_locks_on_the_cache_names_fleet_cache(tmp_path, monkeypatch, capsys):
    real = hostprep.fcntl.flock

    def refuse_in_cache(fd, op):
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".lock"):  # the venv lock, not the marker
            raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))
        return real(fd, op)

    monkeypatch.setattr(hostprep.fcntl, "flock", refuse_in_cache)
    ws = tmp_path / "ws"
    ws.mkdir()
    monkeypatch.chdir(ws)
    argv = ["--min-free-gb", "0", "--no-torch", "--host", "n1", "--venv", "--cache", str(tmp_path / "cache")]
    assert hostprep.main(argv) == 1
    err = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["error"]
    assert "\n" not in err and err.startswith(f"cannot lock {tmp_path / 'cache'}/venv-")
    assert "put fleet.cache on a filesystem with locks" in err and "fleet.cache to ''" in err


def test_the_runner_says_the_same_where_its_lock_fails(tmp_path, monkeypatch):
    from sb_bench.host import runner

    monkeypatch.setattr(
        hostprep.fcntl, "flock", lambda fd, op: (_ for _ in ()).throw(OSError(errno.ENOLCK, "x"))
    )
    r = runner.Runner.__new__(runner.Runner)
    r.results = tmp_path
    with pytest.raises(hostprep.LockUnsupported, match=r"cannot lock .*runner.lock: its filesystem"):
        r.claim()


# -- sb-fleet cleanup --cache: hostprep --remove-cache --------------------------------------------------
def _fake_venv(cache, name: str) -> None:
    (cache / name / "bin").mkdir(parents=True)
    (cache / name / "bin" / "python").write_text("")
    (cache / f"{name}.lock").write_text("")


def test_remove_cache_removes_every_venv_and_the_empty_cache(tmp_path):
    cache = tmp_path / "cache"
    _fake_venv(cache, "venv-aaaa")
    _fake_venv(cache, "venv-bbbb")
    (cache / "venv-cccc.lock").write_text("")  # a lock whose venv is gone
    out = hostprep.remove_cache(cache, wait=1)
    assert out["removed"] == ["venv-aaaa", "venv-bbbb", "venv-cccc"] and not out["busy"]
    assert "error" not in out and not cache.exists()
    assert hostprep.remove_cache(cache, wait=1)["removed"] == []  # nothing there: nothing to do


def test_remove_cache_leaves_a_venv_a_deploy_holds_and_says_so(tmp_path):
    cache = tmp_path / "cache"
    _fake_venv(cache, "venv-aaaa")
    _fake_venv(cache, "venv-bbbb")
    held = hostprep.Lock(cache / "venv-aaaa.lock").acquire(fcntl.LOCK_SH)  # a deploy using it
    try:
        out = hostprep.remove_cache(cache, wait=0.5)
    finally:
        held.release()
    assert out["removed"] == ["venv-bbbb"] and out["busy"] == ["venv-aaaa"]
    assert (cache / "venv-aaaa" / "bin" / "python").exists()
    assert "\n" not in out["error"] and "venv-aaaa in use by a deploy" in out["error"]
    assert "run sb-fleet cleanup --cache again" in out["error"]
    # the command line sb-fleet's cleanup playbook runs: JSON on stdout, exit 1 with the error
    r = subprocess.run(
        [sys.executable, "-", "--remove-cache", str(cache), "--wait", "1"],
        input=HOSTPREP.read_text(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["removed"] == ["venv-aaaa"] and not cache.exists()


def test_remove_cache_where_another_host_removed_the_cache_meanwhile(tmp_path):
    """Hosts that share a cache clean it at once (cleanup's play runs free): the last to finish removes
    the directory, maybe between another host's check that it is there and its listing. That host's
    cleanup is still done, not a traceback (a CI run of 2026-11-29 failed on it)."""

    class Stale(type(tmp_path)):  # is_dir() answered before the other host's rmdir
        def is_dir(self, *args, **kwargs):
            return True

    cache = Stale(tmp_path / "cache")
    out = hostprep.remove_cache(cache, wait=1)
    assert out == {"cache": str(cache), "removed": [], "busy": []}
    assert not (tmp_path / "cache").exists()
    assert hostprep.listing(tmp_path / "nowhere", "venv-*") == []


def test_a_lock_taken_while_its_file_was_removed_is_taken_again(tmp_path):
    """cleanup --cache unlinks a venv's lock file under the lock: a deploy that waited on the old file
    must not build beside one that opened the new file."""
    path = tmp_path / "venv-x.lock"
    first = hostprep.Lock(path).acquire(fcntl.LOCK_EX)
    got: list[hostprep.Lock] = []
    t = threading.Thread(target=lambda: got.append(hostprep.Lock(path).acquire(fcntl.LOCK_EX)))
    t.start()
    deadline = time.monotonic() + 10
    while not _waiting_on(path) and time.monotonic() < deadline:  # the thread waits on the old file
        time.sleep(0.01)
    os.unlink(path)
    first.release()
    t.join(10)
    [lock] = got
    assert os.fstat(lock.fd).st_ino == os.stat(path).st_ino  # the lock on the file now at the path
    lock.release()


def _waiting_on(path) -> bool:
    """Whether some open file description other than the holder's has ``path`` open (the waiter's)."""
    fds = [f for f in os.listdir("/proc/self/fd") if _target(f) == str(path)]
    return len(fds) >= 2


def _target(fd: str) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""
