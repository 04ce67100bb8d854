"""Hostile hosts, on a real loopback fleet: each can only hurt itself.

One fleet of ten hosts (one shared sshd, 127.0.31.x) runs a real ``validate`` once; then eight of
the hosts are made hostile, each in one way the issue names, and ``collect`` and ``report`` run
through the CLI:

* a path clash (the listing names ``x`` a file and ``x/y``), a fifo among the results, a 2 GB sparse
  file, a listing of a gigabyte, a listing that arrives a byte at a time, a listing command that
  fails (exit 127): each host's collect fails, naming why;
* a result file nested 100,000 levels deep, and a result file with NaN, Infinity, a string and a
  400-digit number: collected, then that host's benchmarks fail, naming the metric and the value;
  the report says so, and says it again the next time it reads the run.

The planted host ends failed with its reason; the two good hosts' files arrive byte for byte (sha256
against the hosts' own files), with their summary lines. That collect rides the OpenSSH masters validate
left open; it is run again with them closed (paramiko): the same outcomes and files. The lying ``find`` is tests/fleetlib/hostile.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from .conftest import _need_root, close_masters, sb_fleet

pytestmark = [pytest.mark.integration, pytest.mark.slow]

import sys  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from fleetlib import SshFleet  # noqa: E402
from fleetlib.hostile import install_hostile_find, plant  # noqa: E402

HOST_TIMEOUT = 12
CONFIG = f"""\
version: v0.4
fleet:
  known_hosts: @KNOWN_HOSTS@
  python: /usr/bin/python3
  venv: false
  install_requirements: never
  min_free_disk_gb: 0
  forks: 16
  ssh_connect_timeout: 5
  collect_timeout: 20
collect:
  host_timeout: {HOST_TIMEOUT}
  max_files: 5000
  max_file_bytes: 67108864
  max_host_bytes: 268435456
superbench:
  benchmarks:
    noop:
      timeout: 60
      modes: [{{name: local, proc_num: 1}}]
      parameters: {{sleep: 0}}
gates:
  fleet: {{enabled: false}}
"""

GOOD = ("host001", "host002")
# host -> (what it does, a word its collect outcome's reason must hold)
COLLECT_FAILS = {
    "host003": ("clash", "path clash"),
    "host004": ("fifo", "fifo"),
    "host005": ("sparse", "collect.max_file_bytes"),
    "host006": ("huge", "collect.max_files"),
    "host007": ("slow", "collect.host_timeout"),
    "host008": ("fail", "exit 127"),
}
BENCH_FAILS = {"host009": "deep", "host010": "nan"}


@pytest.fixture(scope="module")
def hfleet():
    _need_root()
    bin_dir = Path(tempfile.mkdtemp(prefix="sbf-hostile-bin-"))
    install_hostile_find(bin_dir)
    f = SshFleet(
        10, base=10, subnet="127.0.31", shared_sshd=True, check_torch=False, path_prefix=str(bin_dir)
    )
    f.start()
    try:
        yield f
    finally:
        f.cleanup()
        shutil.rmtree(bin_dir, ignore_errors=True)


def _stage(run_dir: Path, stage: str) -> dict[str, dict]:
    return {o["host"]: o for o in json.loads((run_dir / "outcomes" / f"{stage}.json").read_text())["hosts"]}


def _results(fleet: SshFleet, host: str, run_dir: Path) -> Path:
    run_id = json.loads((run_dir / "manifest.json").read_text())["run_id"]
    return Path(fleet.host(host).workspace) / "runs" / run_id / "results"


def _digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
        and not p.is_symlink()
        and not any(x.startswith(".") for x in p.relative_to(root).parts)
    }


def _make_hostile(fleet: SshFleet, run_dir: Path) -> None:
    r = {h.name: _results(fleet, h.name, run_dir) for h in fleet.hosts}
    # host003: a real file x, and a listing that also names x/y.
    (r["host003"] / "x").write_text("abc")
    plant(r["host003"], "clash")
    os.mkfifo(r["host004"] / "noop" / "pipe")  # host004: a fifo (reading it would hang)
    with open(r["host005"] / "noop" / "core", "wb") as f:  # host005: 2 GB, sparse
        f.truncate(2 << 30)
    plant(r["host006"], "huge 1073741824")  # host006: a gigabyte of listing
    plant(r["host007"], "slow")  # host007: a listing a byte every 0.1 s
    plant(r["host008"], "fail")  # host008: the listing command fails (exit 127)
    deep = r["host009"] / "noop" / "rank0.json"  # host009: nested 100,000 deep
    deep.write_text('{"return_code": 0, "result": {"step_time": ' + "[" * 100_000 + "]" * 100_000 + "}}")
    doc = json.loads((r["host010"] / "noop" / "rank0.json").read_text())  # host010: NaN, inf, "fast", 10**400
    doc["result"].update(
        {
            "nan_metric": [float("nan")],
            "inf_metric": [float("inf")],
            "str_metric": ["fast"],
            "huge_metric": "@",
        }
    )
    text = json.dumps(doc).replace('"@"', "[" + "9" * 400 + "]")
    (r["host010"] / "noop" / "rank0.json").write_text(text)
    for p in r.values():
        for q in [p, *p.rglob("*")]:
            if not q.is_symlink():
                shutil.chown(q, "sbtest", "sbtest")


def test_a_hostile_host_can_only_hurt_itself(hfleet, tmp_path):
    inv = hfleet.inventory(name="inv-hostile.ini")
    cfg = hfleet.config(CONFIG, "cfg-hostile.yaml")
    run_dir = tmp_path / f"run-{uuid.uuid4().hex[:8]}"
    r = sb_fleet("validate", "-i", str(inv), "-c", str(cfg), "--run-dir", str(run_dir), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    # validate's own collect took each host's results as its exec sent them (no find there to lie)
    col0 = _stage(run_dir, "collect")
    assert {h: o["details"].get("via") for h, o in col0.items()} == dict.fromkeys(col0, "exec"), col0
    _make_hostile(hfleet, run_dir)
    shutil.rmtree(run_dir / "raw")  # collect everything again, with the hostile hosts among them

    t0 = time.monotonic()
    r = sb_fleet("collect", "--run-dir", str(run_dir), "-i", str(inv), timeout=300)
    collect_s = time.monotonic() - t0
    assert r.returncode == 1, r.stdout + r.stderr  # hosts failed; no infrastructure trouble, no traceback
    assert "Traceback" not in r.stderr
    assert collect_s < HOST_TIMEOUT + 90, collect_s  # the slow host is stopped at its budget

    col = _stage(run_dir, "collect")
    for host, (what, word) in COLLECT_FAILS.items():
        assert col[host]["outcome"] == "failed", (what, col[host])
        assert word in col[host]["reason"], (what, col[host]["reason"])
    for host in (*GOOD, *BENCH_FAILS):
        assert col[host]["outcome"] == "ok", col[host]

    # Whatever was fetched, from any host, is byte-identical to the host's file; the good hosts' all of it.
    for h in hfleet.hosts:
        local = run_dir / "raw" / h.name / "results"
        got = _digests(local) if local.is_dir() else {}
        remote = _results(hfleet, h.name, run_dir)
        for rel, digest in got.items():
            assert hashlib.sha256((remote / rel).read_bytes()).hexdigest() == digest, (h.name, rel)
        if h.name in (*GOOD, *BENCH_FAILS):
            assert got == _digests(remote) and got, h.name
    assert (run_dir / "raw" / "host003" / "results" / "x").read_text() == "abc"  # the clash costs only x/y
    assert not (run_dir / "raw" / "host005" / "results" / "noop" / "core").exists()
    raw_bytes = sum(p.stat().st_size for p in (run_dir / "raw").rglob("*") if p.is_file())
    assert raw_bytes < 10 << 20, raw_bytes

    # That collect rode each host's OpenSSH master, which validate had just used: the budgets held there.
    # With the masters closed (a night later), collect makes connections of its own (paramiko): the same
    # outcomes, for the same reasons, and the same files.
    assert {h: o["details"].get("via") for h, o in col.items()} == dict.fromkeys(col, "master"), col
    over_master = {h.name: _digests(run_dir / "raw" / h.name / "results") for h in hfleet.hosts}
    assert close_masters(inv, hfleet.known_hosts) == len(hfleet.hosts)
    shutil.rmtree(run_dir / "raw")
    r = sb_fleet("collect", "--run-dir", str(run_dir), "-i", str(inv), timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr
    col2 = _stage(run_dir, "collect")
    assert {h: o["details"].get("via") for h, o in col2.items()} == dict.fromkeys(col, "paramiko"), col2
    assert {h: (o["outcome"], o["reason"]) for h, o in col2.items()} == {
        h: (o["outcome"], o["reason"]) for h, o in col.items()
    }
    assert {h.name: _digests(run_dir / "raw" / h.name / "results") for h in hfleet.hosts} == over_master

    bench = _stage(run_dir, "benchmarks")
    assert bench["host009"]["outcome"] == "failed" and "corrupt" in bench["host009"]["reason"]
    problems = json.loads((run_dir / "problems.json").read_text())
    assert any("rank0.json" in p and "nested deeper" in p for p in problems["host009"]), problems["host009"]
    assert bench["host010"]["outcome"] == "failed" and "invalid value" in bench["host010"]["reason"]
    invalid = json.loads((run_dir / "invalid-values.json").read_text())["host010"]
    assert invalid == {
        "noop/nan_metric": "nan",
        "noop/inf_metric": "inf",
        "noop/str_metric": "'fast'",
        "noop/huge_metric": "inf",
    }
    summary = {
        d["node"]: d for d in map(json.loads, (run_dir / "results-summary.jsonl").read_text().splitlines())
    }
    for host in GOOD:
        assert summary[host]["noop/return_code"] == 0 and "noop/step_time" in summary[host], summary[host]
    assert "noop/nan_metric" not in summary["host010"] and "noop/step_time" in summary["host010"]

    # The report reads the run, twice, the same way: the hostile hosts are flagged, the good ones pass.
    for _ in range(2):
        r = sb_fleet("report", str(run_dir), "-i", str(inv), "-q")
        assert r.returncode == 1, r.stdout + r.stderr
        assert "Traceback" not in r.stderr
        hosts = {h["name"]: h for h in json.loads((run_dir / "report.json").read_text())["hosts"]}
        for host in GOOD:
            assert hosts[host]["verdict"] == "pass", hosts[host]
        for host in (*COLLECT_FAILS, "host009"):
            assert hosts[host]["verdict"] in ("fail", "incomplete", "missing"), hosts[host]
            assert hosts[host]["outcome"] == "failed", hosts[host]
        h10 = hosts["host010"]
        assert h10["verdict"] == "fail", h10
        found = {(i["metric"], i["check"]) for i in h10["issues"]}
        assert ("noop/nan_metric", "invalid-value") in found and ("noop/str_metric", "invalid-value") in found
        assert any("nan" in i["detail"] for i in h10["issues"] if i["metric"] == "noop/nan_metric")
