"""Faults on a real loopback fleet: each injected for real, at the phase where it applies.

For every fault: every inventory host ends with an outcome, nothing already
collected is lost, nothing hangs, and the exit code tells infrastructure
trouble (3) from failed hosts or gates (1). The benchmark is ``noop`` (no
torch on the hosts) so that the faults, not the benchmarks, take the time.
Hosts: 127.0.7.x, one sshd each (so one host alone can fail).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from .conftest import SB_FLEET, sb_fleet, started_fleet

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CONFIG = """\
version: v0.4
fleet:
  known_hosts: @KNOWN_HOSTS@
  python: /usr/bin/python3
  venv: false
  install_requirements: never
  min_free_disk_gb: 0
  forks: 16
  ssh_connect_timeout: 3
  collect_timeout: 6
superbench:
  benchmarks:
    noop:a:
      timeout: 60
      modes: [{name: local, proc_num: 1}]
      parameters: {sleep: 0}
    noop:b:
      timeout: 60
      modes: [{name: local, proc_num: 1}]
      parameters: {sleep: @SLEEP@}
gates:
  fleet: {enabled: false}
"""


def _run_id(run_dir: Path) -> str:
    """The id naming the run on the hosts (unique even when run directories share a name)."""
    return json.loads((run_dir / "manifest.json").read_text())["run_id"]


@pytest.fixture(scope="module")
def ffleet():
    with started_fleet(4, "127.0.7", check_torch=False) as f:
        yield f


def _cfg(fleet, sleep: float = 0, name: str = "cfg.yaml", known_hosts: Path | None = None) -> Path:
    body = CONFIG.replace("@SLEEP@", str(sleep))
    if known_hosts is not None:
        body = body.replace("@KNOWN_HOSTS@", str(known_hosts))
    return fleet.config(body, name)


def _outcomes(run_dir: Path) -> dict[str, dict]:
    return json.loads((run_dir / "outcomes.json").read_text())["hosts"]


def _rid() -> str:
    """A fresh run directory name: the run id names the results directory on the hosts, which outlive a test."""
    import uuid

    return f"run-{uuid.uuid4().hex[:8]}"


def _stage(run_dir: Path, stage: str) -> dict[str, dict]:
    return {o["host"]: o for o in json.loads((run_dir / "outcomes" / f"{stage}.json").read_text())["hosts"]}


def _summary(run_dir: Path) -> dict[str, dict]:
    text = (run_dir / "results-summary.jsonl").read_text()
    return {d["node"]: d for d in map(json.loads, text.splitlines())}


def _wait(pred, timeout: float, what: str, step: float = 0.05):  # noqa: ANN001, ANN202
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def _reported(run_dir: Path, host: str) -> bool:
    """Ansible has reported the run step's result for ``host``: ansible-runner writes a job event's
    file after sb-fleet's event handler has taken the event."""
    for p in run_dir.glob("ansible/*/artifacts/*/job_events/*.json"):
        try:
            ev = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        data = ev.get("event_data") or {}
        if (
            ev.get("event") in ("runner_on_ok", "runner_on_failed")
            and data.get("host") == host
            and str(data.get("task", "")).startswith("run step")
        ):
            return True
    return False


def _identity(path: Path) -> tuple[int, int]:
    """A file's inode and nanosecond mtime: any rewrite (in place or by rename) changes them."""
    st = path.stat()
    return st.st_ino, st.st_mtime_ns


def _results_dir(fleet, host: str, run_dir: Path) -> Path:
    return Path(fleet.host(host).workspace) / "runs" / _run_id(run_dir) / "results"


def _deploy_and_run(inv: Path, cfg: Path, run_dir: Path) -> None:
    for stage in ("deploy", "run"):
        r = sb_fleet(stage, "-i", str(inv), "-c", str(cfg), "--run-dir", str(run_dir))
        assert r.returncode == 0, stage + r.stdout + r.stderr


def _no_partials(run_dir: Path) -> None:
    left = [p for p in run_dir.rglob("*") if p.name.endswith((".part", ".tmp"))]
    assert not left, f"partial files left behind: {left[:5]}"


def _verified(local: Path, remote: Path) -> int:
    """Every file collected under ``local`` is byte-identical to the host's; returns how many."""
    n = 0
    for p in local.rglob("*"):
        if p.is_file():
            rel = p.relative_to(local)
            assert (
                hashlib.sha256(p.read_bytes()).digest()
                == hashlib.sha256((remote / rel).read_bytes()).digest()
            ), rel
            n += 1
    return n


def test_host_down_before_start_and_host_lost_mid_run(ffleet, tmp_path):
    """A host with no sshd at all, and a host whose sshd (and every session) dies while its benchmark runs."""
    inv = ffleet.inventory(extra_hosts=[("ghost", "127.0.7.250", 2222)], name="inv-down.ini")
    cfg = _cfg(ffleet, sleep=8, name="cfg-down.yaml")
    run_dir = tmp_path / _rid()
    victim = ffleet.hosts[1].name
    t0 = time.monotonic()
    p = subprocess.Popen(
        [SB_FLEET, "validate", "-i", str(inv), "-c", str(cfg), "--run-dir", str(run_dir), "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait(lambda: ffleet.processes(victim, b"noop:b"), 90, "the victim's benchmark")
    ffleet.cut(victim)
    out, err = p.communicate(timeout=120)
    elapsed = time.monotonic() - t0
    assert p.returncode == 3, out + err
    oc = _outcomes(run_dir)
    assert set(oc) == {*(h.name for h in ffleet.hosts), "ghost"}  # every inventory host has an outcome
    assert oc["ghost"]["outcome"] == "unreachable" and "127.0.7.250" in oc["ghost"]["reason"]
    assert oc["ghost"]["stages"]["run"]["outcome"] == "skipped"
    assert oc[victim]["outcome"] == "unreachable"
    assert oc[victim]["stages"]["run"]["outcome"] == "unreachable"
    for h in ffleet.hosts:
        if h.name != victim:
            assert oc[h.name]["outcome"] == "ok", oc[h.name]
    assert elapsed < 90, elapsed  # 8 s benchmark + deploy/collect, no hang on the dead hosts
    # The host itself kept running its benchmark; once it is back, a later collect fetches its results.
    ffleet.revive(victim)
    _wait(lambda: not ffleet.processes(victim, b"sb_bench.host.runner"), 60, "the victim's runner to finish")
    r = sb_fleet("collect", "--run-dir", str(run_dir), "-i", str(inv))
    assert r.returncode == 3  # the ghost is still down
    col = _stage(run_dir, "collect")
    assert col[victim]["outcome"] == "ok" and col[victim]["details"]["fetched"] >= 2
    bench = _stage(run_dir, "benchmarks")[victim]
    assert bench["outcome"] == "ok", bench
    assert _summary(run_dir)[victim]["noop:b/return_code"] == 0
    _no_partials(run_dir)


def test_hung_sshd_at_deploy_and_at_collect_times_out(ffleet, tmp_path):
    """A host whose sshd accepts TCP but never answers (SIGSTOP): refused after the connect timeout, never waited on."""
    inv = ffleet.inventory(name="inv-hung.ini")
    cfg = _cfg(ffleet, name="cfg-hung.yaml")
    a, b = ffleet.hosts[2].name, ffleet.hosts[3].name
    run_dir = tmp_path / _rid()
    ffleet.stop_sshd(a)
    try:
        t0 = time.monotonic()
        r = sb_fleet("validate", "-i", str(inv), "-c", str(cfg), "--run-dir", str(run_dir), timeout=120)
        deploy_s = time.monotonic() - t0
    finally:
        ffleet.cont_sshd(a)
    assert r.returncode == 3, r.stdout + r.stderr
    oc = _outcomes(run_dir)
    assert oc[a]["outcome"] == "unreachable" and oc[a]["stages"]["deploy"]["outcome"] == "unreachable"
    assert all(oc[h.name]["outcome"] == "ok" for h in ffleet.hosts if h.name != a)
    assert deploy_s < 60, deploy_s
    # Collect with another host hung: it is unreachable after the connect timeout, the others are fetched.
    shutil.rmtree(run_dir / "raw")
    ffleet.stop_sshd(b)
    try:
        t0 = time.monotonic()
        r = sb_fleet("collect", "--run-dir", str(run_dir), "-i", str(inv), timeout=60)
        collect_s = time.monotonic() - t0
    finally:
        ffleet.cont_sshd(b)
    assert r.returncode == 3
    col = _stage(run_dir, "collect")
    assert col[b]["outcome"] == "unreachable"
    assert col[a]["outcome"] == "skipped"  # never ran
    assert all(col[h.name]["outcome"] == "ok" for h in ffleet.hosts if h.name not in (a, b))
    assert collect_s < 30, collect_s


def test_partition_mid_collect_keeps_what_was_fetched(ffleet, tmp_path):
    inv = ffleet.inventory(name="inv-part.ini")
    cfg = _cfg(ffleet, name="cfg-part.yaml")
    run_dir = tmp_path / _rid()
    _deploy_and_run(inv, cfg, run_dir)
    victim = ffleet.hosts[0].name
    remote = _results_dir(ffleet, victim, run_dir)
    bulk = remote / "bulk"
    bulk.mkdir()
    for i in range(40):  # 80 MB of extra files: the transfer takes long enough to cut it mid-way
        (bulk / f"part{i:02d}.bin").write_bytes(os.urandom(1 << 21))
    local = run_dir / "raw" / victim / "results"
    box: dict = {}

    def cut_when_started() -> None:
        _wait(
            lambda: (local / "bulk").is_dir() and any((local / "bulk").glob("part*.bin")),
            60,
            "first file",
            step=0.005,
        )
        ffleet.partition(victim)
        box["cut"] = time.monotonic()

    t = threading.Thread(target=cut_when_started)
    t.start()
    r = sb_fleet("collect", "--run-dir", str(run_dir), "-i", str(inv), timeout=120)
    t.join()
    done = time.monotonic()
    try:
        assert r.returncode == 3, r.stdout + r.stderr
        col = _stage(run_dir, "collect")
        assert col[victim]["outcome"] == "unreachable", col[victim]
        kept = col[victim]["details"]["kept_files"]
        got = _verified(local, remote)  # what was kept is complete and correct
        assert got == kept and 0 < len(list((local / "bulk").glob("*.bin"))) < 40, (got, kept)
        assert all(col[h.name]["outcome"] == "ok" for h in ffleet.hosts[1:])
        assert set(_outcomes(run_dir)) == {h.name for h in ffleet.hosts}
        _no_partials(run_dir)
        assert done - box["cut"] < 6 + 15  # the collect timeout, not forever
    finally:
        ffleet.heal(victim)
    r = sb_fleet("collect", "--run-dir", str(run_dir), "-i", str(inv))
    assert r.returncode == 0, r.stdout + r.stderr
    col = _stage(run_dir, "collect")
    assert col[victim]["outcome"] == "ok"
    assert col[victim]["details"]["fetched"] == col[victim]["details"]["listed"] - kept  # only the rest
    assert _verified(local, remote) == col[victim]["details"]["listed"]


def test_corrupt_and_truncated_result_files_cost_only_their_benchmark(ffleet, tmp_path):
    inv = ffleet.inventory(name="inv-corrupt.ini")
    cfg = _cfg(ffleet, name="cfg-corrupt.yaml")
    run_dir = tmp_path / _rid()
    _deploy_and_run(inv, cfg, run_dir)
    trunc, garbage = ffleet.hosts[0].name, ffleet.hosts[1].name
    f = _results_dir(ffleet, trunc, run_dir) / "noop:a" / "rank0.json"
    f.write_bytes(f.read_bytes()[: len(f.read_bytes()) // 2])
    (_results_dir(ffleet, garbage, run_dir) / "noop:b" / "rank0.json").write_bytes(b"\x00\xffnot json{{")
    r = sb_fleet("collect", "--run-dir", str(run_dir), "-i", str(inv))
    assert r.returncode == 1, r.stdout + r.stderr  # a host failed; no infrastructure trouble
    bench = _stage(run_dir, "benchmarks")
    assert bench[trunc]["outcome"] == "failed" and "noop:a" in bench[trunc]["reason"]
    assert "corrupt" in bench[trunc]["reason"], bench[
        trunc
    ]  # the normaliser's word for an unreadable rank file
    assert bench[garbage]["outcome"] == "failed" and "noop:b" in bench[garbage]["reason"]
    summary = _summary(run_dir)
    assert summary[trunc]["noop:a/return_code"] == 3 and summary[trunc]["noop:b/return_code"] == 0
    assert "noop:b/step_time" in summary[trunc]  # the rest of the host is analysed
    assert "noop:a/step_time" in summary[garbage]
    assert all(bench[h.name]["outcome"] == "ok" for h in ffleet.hosts[2:])
    r = sb_fleet("report", str(run_dir))
    assert r.returncode == 1 and "Traceback" not in r.stderr


def test_changed_host_key_is_refused_at_collect(ffleet, tmp_path):
    kh = tmp_path / "known_hosts"
    shutil.copy(ffleet.known_hosts, kh)
    inv = ffleet.inventory(name="inv-key.ini")
    cfg = _cfg(ffleet, name="cfg-key.yaml", known_hosts=kh)
    run_dir = tmp_path / _rid()
    _deploy_and_run(inv, cfg, run_dir)
    h = ffleet.hosts[2]
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "mitm")], check=True)
    other = (tmp_path / "mitm.pub").read_text().split()
    lines = [ln for ln in kh.read_text().splitlines() if not ln.startswith(f"[{h.addr}]:")]
    kh.write_text("\n".join([*lines, f"[{h.addr}]:{h.port} {other[0]} {other[1]}"]) + "\n")
    before = kh.read_text()
    r = sb_fleet("collect", "--run-dir", str(run_dir), "-i", str(inv), "--accept-new-host-keys")
    assert r.returncode == 3, r.stdout + r.stderr
    col = _stage(run_dir, "collect")
    assert col[h.name]["outcome"] == "hostkey-mismatch"
    assert h.addr in col[h.name]["reason"] and "refused" in col[h.name]["reason"]
    assert not any((run_dir / "raw" / h.name).rglob("*.json"))  # nothing taken from the impostor
    assert kh.read_text() == before  # a changed key is never "accepted as new"
    assert all(col[x.name]["outcome"] == "ok" for x in ffleet.hosts if x is not h)


def test_full_output_disk(ffleet, tmp_path):
    """The run directory's disk fills up while collecting: one clear error, no half-written file, resumable."""
    mnt = ffleet.small_disk(4096)
    run_dir = mnt / _rid()
    inv = ffleet.inventory(name="inv-disk.ini")
    cfg = _cfg(ffleet, name="cfg-disk.yaml")
    _deploy_and_run(inv, cfg, run_dir)
    victim = ffleet.hosts[3].name
    remote = _results_dir(ffleet, victim, run_dir)
    free = shutil.disk_usage(mnt).free
    (remote / "bulk").mkdir()
    (remote / "bulk" / "big.bin").write_bytes(os.urandom(free + (512 << 10)))
    r = sb_fleet("collect", "--run-dir", str(run_dir), "-i", str(inv))
    assert r.returncode == 3, r.stdout + r.stderr
    err = r.stderr.strip().splitlines()
    assert "Traceback" not in r.stderr and any("no space left" in ln for ln in err), r.stderr
    _no_partials(run_dir)
    for h in ffleet.hosts:  # every file under its final name is complete
        local = run_dir / "raw" / h.name / "results"
        if local.exists():
            _verified(local, _results_dir(ffleet, h.name, run_dir))
    assert not (run_dir / "raw" / victim / "results" / "bulk" / "big.bin").exists()
    # More room: the next collect fetches what is missing.
    subprocess.run(["mount", "-o", "remount,size=65536k", str(mnt)], check=True)
    r = sb_fleet("collect", "--run-dir", str(run_dir), "-i", str(inv))
    assert r.returncode == 0, r.stdout + r.stderr
    _verified(run_dir / "raw" / victim / "results", remote)
    assert (run_dir / "raw" / victim / "results" / "bulk" / "big.bin").exists()


def test_no_room_for_the_run_directory_is_a_clean_error(ffleet, tmp_path):
    mnt = ffleet.small_disk(64)
    rd = mnt / _rid()
    r = sb_fleet(
        "validate",
        "-i",
        str(ffleet.inventory(name="inv-nodisk.ini")),
        "-c",
        str(_cfg(ffleet, name="cfg-nodisk.yaml")),
        "--run-dir",
        str(rd),
    )
    assert r.returncode == 3, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and "no space left" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not [p for p in rd.rglob("*") if p.name.startswith(".") and p.is_file()]  # no temp file left


def test_sigint_during_run_cleans_up_and_resume_does_only_what_is_missing(ffleet, tmp_path):
    inv = ffleet.inventory(name="inv-int.ini")
    cfg = _cfg(ffleet, sleep=25, name="cfg-int.yaml")
    run_dir = tmp_path / _rid()
    names = [h.name for h in ffleet.hosts]
    r = sb_fleet("deploy", "-i", str(inv), "-c", str(cfg), "--run-dir", str(run_dir))
    assert r.returncode == 0, r.stdout + r.stderr
    p = subprocess.Popen(
        [SB_FLEET, "run", "-i", str(inv), "-c", str(cfg), "--run-dir", str(run_dir), "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait(lambda: all(ffleet.processes(n, b"noop:b") for n in names), 90, "noop:b running on every host")
    # One host finishes its step before the interrupt (its benchmark dies: a result, not a gap).
    early = names[0]
    for pid in ffleet.processes(early, b"noop:b"):
        if b"exec" in Path(f"/proc/{pid}/cmdline").read_bytes():
            os.kill(pid, signal.SIGKILL)
    _wait(
        lambda: json.loads((_results_dir(ffleet, early, run_dir) / "status.json").read_text()).get(
            "finished"
        ),
        30,
        "the early host's runner to finish",
    )
    _wait(lambda: _reported(run_dir, early), 30, "Ansible to report the early host")
    t0 = time.monotonic()
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    stop_s = time.monotonic() - t0
    assert p.returncode == 3, out + err
    assert "interrupted" in err and "--resume" in err
    assert stop_s < 30, stop_s
    for (
        n
    ) in names:  # nothing of this run is left running on any host (a stopped process may take a moment to go)
        _wait(
            lambda n=n: (
                not ffleet.processes(n, _run_id(run_dir).encode()) and not ffleet.processes(n, b"noop:b")
            ),
            10,
            f"the run's processes on {n} to be gone",
        )
    run = _stage(run_dir, "run")
    assert run[early]["outcome"] == "ok"
    for n in names[1:]:
        assert run[n]["outcome"] == "pending" and "interrupted" in run[n]["reason"], run[n]
        st = json.loads((_results_dir(ffleet, n, run_dir) / "status.json").read_text())
        assert st["interrupted"] and st["entries"]["noop:a"]["status"] == "ok"
    cleanup = json.loads((run_dir / "interrupted.json").read_text())["cleanup"]
    assert set(cleanup) == set(names[1:]) and all(v in ("stopped", "killed") for v in cleanup.values()), (
        cleanup
    )
    assert set(_outcomes(run_dir)) == set(names)
    a_start = {
        n: json.loads((_results_dir(ffleet, n, run_dir) / "noop:a" / "rank0.json").read_text())["start_time"]
        for n in names
    }
    # start_time has one-second resolution: the file's inode and nanosecond mtime tell a rewrite apart.
    a_stat = {n: _identity(_results_dir(ffleet, n, run_dir) / "noop:a" / "rank0.json") for n in names}
    early_b = (_results_dir(ffleet, early, run_dir) / "noop:b" / "rank0.json").read_bytes()
    early_b_stat = _identity(_results_dir(ffleet, early, run_dir) / "noop:b" / "rank0.json")
    # Resume: only the interrupted hosts, and on them only noop:b (the run's own config: its inputs are fixed).
    r = sb_fleet("run", "--resume", "--run-dir", str(run_dir), "-i", str(inv))
    assert r.returncode == 0, r.stdout + r.stderr
    run = _stage(run_dir, "run")
    assert all(run[n]["outcome"] == "ok" for n in names)
    for n in names:
        a = json.loads((_results_dir(ffleet, n, run_dir) / "noop:a" / "rank0.json").read_text())
        assert a["start_time"] == a_start[n], n  # noop:a was not run again
        assert _identity(_results_dir(ffleet, n, run_dir) / "noop:a" / "rank0.json") == a_stat[n], n
    assert (_results_dir(ffleet, early, run_dir) / "noop:b" / "rank0.json").read_bytes() == early_b
    assert _identity(_results_dir(ffleet, early, run_dir) / "noop:b" / "rank0.json") == early_b_stat
    for n in names[1:]:
        b = json.loads((_results_dir(ffleet, n, run_dir) / "noop:b" / "rank0.json").read_text())
        assert b["return_code"] == 0, b
    r = sb_fleet("collect", "--run-dir", str(run_dir), "-i", str(inv))
    assert r.returncode == 1  # the early host's killed benchmark is a failed result
    bench = _stage(run_dir, "benchmarks")
    assert bench[early]["outcome"] == "failed" and all(bench[n]["outcome"] == "ok" for n in names[1:])


def test_sigint_during_validates_first_step_started_by_deploy(ffleet, tmp_path):
    """validate starts the first step in deploy's own task (the suite already in place): Ctrl-C there stops
    the runners on every host as in the run stage, and every host ends pending with what to do next."""
    inv = ffleet.inventory(name="inv-vint.ini")
    cfg = _cfg(ffleet, sleep=25, name="cfg-vint.yaml")
    names = [h.name for h in ffleet.hosts]
    r = sb_fleet("deploy", "-i", str(inv), "-c", str(cfg), "--run-dir", str(tmp_path / _rid()))
    assert r.returncode == 0, r.stdout + r.stderr  # the suite is in place: validate takes the fast path
    run_dir = tmp_path / _rid()
    p = subprocess.Popen(
        [SB_FLEET, "validate", "-i", str(inv), "-c", str(cfg), "--run-dir", str(run_dir), "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait(lambda: all(ffleet.processes(n, b"noop:b") for n in names), 90, "noop:b running on every host")
    assert not list(run_dir.glob("ansible/run-*/artifacts"))  # the step runs in deploy's task
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 3, out + err
    assert "interrupted" in err and "--resume" in err
    for n in names:
        _wait(
            lambda n=n: (
                not ffleet.processes(n, _run_id(run_dir).encode()) and not ffleet.processes(n, b"noop:b")
            ),
            10,
            f"the run's processes on {n} to be gone",
        )
    cleanup = json.loads((run_dir / "interrupted.json").read_text())["cleanup"]
    assert set(cleanup) == set(names) and all(v in ("stopped", "killed") for v in cleanup.values()), cleanup
    run = _stage(run_dir, "run")
    for n in names:
        assert run[n]["outcome"] == "pending" and "sb-fleet deploy" in run[n]["reason"], run[n]
    assert set(_outcomes(run_dir)) == set(names)
    # deploy again, then resume: the run finishes on every host
    sb_fleet("deploy", "--run-dir", str(run_dir), "-i", str(inv))  # exit: the run is still pending
    assert all(o["outcome"] == "ok" for o in _stage(run_dir, "deploy").values())
    r = sb_fleet("run", "--resume", "--run-dir", str(run_dir), "-i", str(inv))
    assert r.returncode == 0, r.stdout + r.stderr
    assert all(o["outcome"] == "ok" for o in _stage(run_dir, "run").values())
