"""Security on a real loopback fleet (127.0.8.x): host keys, secrets, hostile inventory names, privileges.

* host keys are verified by default; ``--accept-new-host-keys`` records unknown ones and still refuses a
  changed one; ``--insecure-no-host-key-checking`` works only loudly;
* a planted password and token never reach argv, logs, Ansible's artifacts or the run directory;
* host names and variables full of shell metacharacters never execute, on the control node or the hosts;
* no ``become`` in the playbooks of a plain config; the run directory and results are private.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml

from sb_fleet.plan.ansible_data import load as load_rendered

from .conftest import SB_FLEET, close_masters, sb_fleet, started_fleet

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CONFIG = """\
version: v0.4
fleet:
  known_hosts: @KNOWN_HOSTS@
  python: /usr/bin/python3
  venv: false
  install_requirements: never
  min_free_disk_gb: 0
  forks: 8
  ssh_connect_timeout: 5
superbench:
  benchmarks:
    noop:
      timeout: 60
      parameters: {sleep: 2}
gates:
  fleet: {enabled: false}
"""

# The report files are written 0644 by the analysis writers (meant to be shared); the run dir itself is 0700.
REPORTS = {"report.json", "report.md", "report.html", "junit.xml", "quarantine.txt", "metrics.prom"}
SECRET_PW = "PLANTED-pw-5b1e9d0c"
SECRET_TOKEN = "PLANTED-token-a7c4f2e8"


@pytest.fixture(scope="module")
def sfleet():
    with started_fleet(3, "127.0.8", check_torch=False) as f:
        yield f


def _rid() -> str:
    """A fresh run directory name: the run id names the results directory on the hosts, which outlive a test."""
    import uuid

    return f"run-{uuid.uuid4().hex[:8]}"


def _stage(run_dir: Path, stage: str) -> dict[str, dict]:
    return {o["host"]: o for o in json.loads((run_dir / "outcomes" / f"{stage}.json").read_text())["hosts"]}


def test_unknown_host_keys_are_refused_unless_accepted_and_changed_ones_always(sfleet, tmp_path):
    kh = tmp_path / "kh" / "known_hosts"
    kh.parent.mkdir()
    kh.write_text("")
    cfg = sfleet.config(CONFIG.replace("@KNOWN_HOSTS@", str(kh)), "cfg-kh.yaml")
    inv = sfleet.inventory(name="inv-kh.ini")
    r = sb_fleet("deploy", "-i", str(inv), "-c", str(cfg), "--run-dir", str(tmp_path / "r1"))
    assert r.returncode == 3, r.stdout + r.stderr
    dep = _stage(tmp_path / "r1", "deploy")
    assert all(
        o["outcome"] == "hostkey-mismatch" and "--accept-new-host-keys" in o["reason"] for o in dep.values()
    )
    assert kh.read_text() == ""  # nothing was recorded
    r = sb_fleet(
        "validate",
        "-i",
        str(inv),
        "-c",
        str(cfg),
        "--run-dir",
        str(tmp_path / "r2"),
        "--accept-new-host-keys",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    for x in sfleet.hosts:  # OpenSSH may hash the names it records: look them up as ssh does
        assert (
            subprocess.run(
                ["ssh-keygen", "-F", f"[{x.addr}]:{x.port}", "-f", str(kh)], capture_output=True
            ).returncode
            == 0
        ), x.name
    # Now one host presents another key: refused even with --accept-new-host-keys, named, nothing written.
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k2")], check=True)
    other = (tmp_path / "k2.pub").read_text().split()
    h = sfleet.hosts[0]
    subprocess.run(
        ["ssh-keygen", "-R", f"[{h.addr}]:{h.port}", "-f", str(kh)], check=True, capture_output=True
    )
    kh.write_text(kh.read_text() + f"[{h.addr}]:{h.port} {other[0]} {other[1]}\n")
    before = kh.read_text()
    # A host presents a key on a new connection. The masters r2 left open are connections to the hosts
    # verified when they were made: every stage, and collect, ride them without a new check (a key
    # changed since cannot reach into them). Closed, as a night closes them: r3 connects anew.
    assert close_masters(inv, kh, "accept-new") == len(sfleet.hosts)
    r = sb_fleet(
        "validate",
        "-i",
        str(inv),
        "-c",
        str(cfg),
        "--run-dir",
        str(tmp_path / "r3"),
        "--accept-new-host-keys",
    )
    assert r.returncode == 3
    oc = json.loads((tmp_path / "r3" / "outcomes.json").read_text())["hosts"]
    assert oc[h.name]["outcome"] == "hostkey-mismatch"
    assert oc[h.name]["stages"]["check"]["outcome"] == "hostkey-mismatch", oc[h.name]  # at its first contact
    assert all(oc[x.name]["outcome"] == "ok" for x in sfleet.hosts[1:])
    assert kh.read_text() == before
    # Off only when asked, and loudly.
    r = sb_fleet(
        "deploy",
        "-i",
        str(inv),
        "-c",
        str(cfg),
        "--run-dir",
        str(tmp_path / "r4"),
        "--insecure-no-host-key-checking",
        "--limit",
        h.name,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "WARNING: host key checking is OFF" in r.stderr


def _yaml_inventory(fleet, path: Path, hosts: dict, **extra_vars: str) -> Path:
    """A YAML inventory of ``hosts`` logging in to the fleet as its test user, plus ``extra_vars``."""
    common = {
        "ansible_user": "sbtest",
        "ansible_ssh_private_key_file": str(fleet.client_key),
        "ansible_python_interpreter": "/usr/bin/python3",
        "sb_python": fleet.python,
    }
    path.write_text(yaml.safe_dump({"all": {"hosts": hosts, "vars": {**common, **extra_vars}}}))
    return path


def test_no_secret_in_argv_logs_artifacts_or_run_dir(sfleet, tmp_path):
    hosts = {
        h.name: {"ansible_host": h.addr, "ansible_port": h.port, "sb_workspace": h.workspace}
        for h in sfleet.hosts
    }
    inv = _yaml_inventory(
        sfleet,
        tmp_path / "inventory.yml",
        hosts,
        ansible_become_password=SECRET_PW,
        registry_token=SECRET_TOKEN,
    )
    cfg = sfleet.config(CONFIG, "cfg-secret.yaml")
    run_dir = tmp_path / _rid()
    seen: list[str] = []
    stop = threading.Event()

    def watch_ps() -> None:  # every process's argv (and environment) on the machine, while the run goes
        while not stop.is_set():
            for pid in os.listdir("/proc"):
                if pid.isdigit():
                    for f in ("cmdline", "environ"):
                        try:
                            data = Path(f"/proc/{pid}/{f}").read_bytes()
                        except OSError:
                            continue
                        if SECRET_PW.encode() in data or SECRET_TOKEN.encode() in data:
                            seen.append(f"{pid}/{f}: {data[:200]!r}")
            time.sleep(0.05)

    t = threading.Thread(target=watch_ps, daemon=True)
    t.start()
    try:
        r = subprocess.run(
            [SB_FLEET, "-vv", "validate", "-i", str(inv), "-c", str(cfg), "--run-dir", str(run_dir)],
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        stop.set()
        t.join()
    assert r.returncode == 0, r.stdout + r.stderr
    assert not seen, seen
    for out in (r.stdout, r.stderr):
        assert SECRET_PW not in out and SECRET_TOKEN not in out
    leaks = [
        str(p)
        for p in run_dir.rglob("*")
        if p.is_file() and (SECRET_PW.encode() in p.read_bytes() or SECRET_TOKEN.encode() in p.read_bytes())
    ]
    assert not leaks, leaks
    for h in sfleet.hosts:  # nor on the hosts
        ws = Path(h.workspace)
        assert not [
            p
            for p in ws.rglob("*")
            if p.is_file() and not p.is_symlink() and SECRET_PW.encode() in p.read_bytes()
        ]
    assert (run_dir / "ansible").is_dir() and any(
        run_dir.rglob("job_events/*.json")
    )  # the artifacts were grepped
    masked = json.loads((run_dir / "inventory" / "hosts.json").read_text())
    assert SECRET_PW not in json.dumps(masked)


def test_shell_metacharacters_in_inventory_never_execute(sfleet, tmp_path):
    marker = Path(f"/tmp/sbf-pwned-{os.getpid()}")
    names = [f"m;touch {marker}-1", f"m$(touch {marker}-2)", f"m`touch {marker}-3`"]
    hosts = {}
    for name, h in zip(names, sfleet.hosts, strict=True):
        hosts[name] = {
            "ansible_host": h.addr,
            "ansible_port": h.port,
            "sb_workspace": f"{h.workspace}-meta/$(touch {marker}-ws)';touch {marker}-q'\"x",
            "sb_note": f"a\nb; touch {marker}-nl",
        }
    inv = _yaml_inventory(sfleet, tmp_path / "inventory.yml", hosts)
    cfg = sfleet.config(CONFIG, "cfg-meta.yaml")
    run_dir = tmp_path / _rid()
    r = sb_fleet("validate", "-i", str(inv), "-c", str(cfg), "--run-dir", str(run_dir))
    created = sorted(str(p) for p in Path("/tmp").glob(f"sbf-pwned-{os.getpid()}*"))
    homes = sfleet.home_files(lambda name: name.startswith(f"sbf-pwned-{os.getpid()}"))
    assert not created and not homes, (created, homes)
    assert r.returncode == 0, r.stdout + r.stderr
    oc = json.loads((run_dir / "outcomes.json").read_text())["hosts"]
    assert set(oc) == set(names) and all(o["outcome"] == "ok" for o in oc.values()), oc
    # The odd workspace was created literally, as one directory name, on each host.
    for name in names:
        ws = Path(hosts[name]["sb_workspace"])
        run_id = json.loads((run_dir / "manifest.json").read_text())["run_id"]
        assert (ws / "runs" / run_id / "results" / "noop" / "rank0.json").is_file(), name
    summary = [json.loads(ln)["node"] for ln in (run_dir / "results-summary.jsonl").read_text().splitlines()]
    assert sorted(summary) == sorted(names)
    raw = sorted(p.name for p in (run_dir / "raw").iterdir())
    assert all("/" not in n and n not in (".", "..") for n in raw) and len(raw) == 3


def test_no_become_and_private_permissions(sfleet, tmp_path):
    run_dir = tmp_path / _rid()
    r = sb_fleet(
        "validate",
        "-i",
        str(sfleet.inventory(name="inv-perm.ini")),
        "-c",
        str(sfleet.config(CONFIG, "cfg-perm.yaml")),
        "--run-dir",
        str(run_dir),
    )
    assert r.returncode == 0, r.stdout + r.stderr
    for pb in (run_dir / "playbooks").glob("*.yml"):
        doc = load_rendered(pb.read_text())  # !unsafe values read as plain ones
        text = json.dumps(doc)
        assert '"become": true' not in text.lower(), pb  # nothing runs as root for a plain config
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700
    for p in run_dir.rglob("*"):
        mode = stat.S_IMODE(p.lstat().st_mode)
        if p.is_dir() or p.is_file() and p.name not in REPORTS and not p.name.startswith("suite-"):
            assert mode & 0o077 == 0, (p, oct(mode))
    for p in (run_dir / "raw").rglob("*"):  # collected results: private, all of them
        assert stat.S_IMODE(p.stat().st_mode) & 0o077 == 0, p
    ws = Path(sfleet.hosts[0].workspace)
    assert stat.S_IMODE(ws.stat().st_mode) == 0o700  # the workspace on the host too
