"""Collect over Ansible's own OpenSSH master, on a real loopback fleet (two hosts, one shared sshd,
127.0.34.x) and real Ansible.

Ansible (``ansible -m raw``, with the environment every stage gives it) opens each host's master where
sb-fleet names it; collect then reads the host through that master (``via: master``), byte for byte. A
master that ends between collect's check and its first command hands the host to paramiko, which
collects it all the same; and ssh never makes a connection of its own that skips the run's host key
check: where it would have to (no master, a host the known_hosts does not know), the host is refused.
The hostile hosts' budgets over the master, and the paramiko path with the masters closed, are in
test_hostile_hosts.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sb_fleet.config.collect_budgets import default_budgets
from sb_fleet.config.fleet_config import FleetSettings
from sb_fleet.config.inventory import Host, load_inventory
from sb_fleet.fleet import fetch
from sb_fleet.fleet.executor import ansible_env
from sb_fleet.fleet.fetch import CollectTarget, collect_host, master_alive
from sb_fleet.fleet.ssh import SshSettings, cheap_kex_first, openssh_kex
from sb_fleet.outcome import Outcome

from .conftest import started_fleet

pytestmark = [pytest.mark.integration]

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from fleetlib import USER, SshFleet  # noqa: E402


@pytest.fixture(scope="module")
def mfleet():
    with started_fleet(2, "127.0.34", shared_sshd=True, check_torch=False) as f:
        yield f


def _results(fleet: SshFleet) -> dict[str, Path]:
    """Each host's results: a few small files, one nested, one of 1 MiB; owned by the login user."""
    out = {}
    for h in fleet.hosts:
        root = Path(h.workspace) / "results"
        (root / "noop" / "logs").mkdir(parents=True, exist_ok=True)
        (root / "status.json").write_text(json.dumps({"host": h.name}))
        (root / "noop" / "rank0.json").write_text('{"return_code": 0}')
        (root / "noop" / "logs" / "out.log").write_bytes(os.urandom(1 << 20))
        for p in [Path(h.workspace), *Path(h.workspace).rglob("*")]:
            shutil.chown(p, USER, USER)
        out[h.name] = root
    return out


def _digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _open_masters(inv: Path, ssh: SshSettings) -> None:
    """Real Ansible, as a stage runs it: its master to every host stays (ControlPersist)."""
    env = {**os.environ, **ansible_env(ssh, "/usr/bin/python3")}
    ansible = str(Path(sys.executable).parent / "ansible")
    r = subprocess.run(
        [ansible, "all", "-i", str(inv), "-m", "raw", "-a", "true"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert r.returncode == 0, r.stdout + r.stderr


def _close(host: Host, ssh: SshSettings) -> None:
    argv = ssh.master_control(host, "exit")
    assert argv is not None
    subprocess.run(argv, capture_output=True, timeout=10, check=False)
    deadline = time.monotonic() + 10
    while master_alive(host, ssh):
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_collect_rides_ansibles_master_and_falls_back_when_it_ends(mfleet, tmp_path, monkeypatch):
    remote = _results(mfleet)
    inv = mfleet.inventory(name="inv-master.ini")
    hosts = {h.name: h for h in load_inventory(inv).hosts}
    ssh = SshSettings(mfleet.known_hosts.resolve(), "strict", 5)
    _open_masters(inv, ssh)
    assert all(master_alive(h, ssh) for h in hosts.values())  # Ansible's master, where collect looks

    def target(host: Host, where: str) -> CollectTarget:
        ws = next(h.workspace for h in mfleet.hosts if h.name == host.name)
        return CollectTarget(host, f"{ws}/results", tmp_path / where / host.name, ("SB_FLEET_TAG=t/x",))

    for h in hosts.values():
        o = collect_host(target(h, "master"), ssh, 20, default_budgets())
        assert o.outcome == Outcome.OK and o.details["via"] == "master", o
        assert _digests(tmp_path / "master" / h.name) == _digests(remote[h.name])
        assert master_alive(h, ssh)  # collect leaves the master as it found it

    # host001's master ends right after collect's check. Its ssh may make no connection of its own here
    # (ProxyCommand=false, which leaves %C alone): exit 255, nothing sent: paramiko takes the host over.
    real_alive = fetch.master_alive

    def alive_then_gone(host: Host, s: SshSettings) -> bool:
        alive = real_alive(host, s)
        _close(host, s)
        return alive

    monkeypatch.setattr(fetch, "master_alive", alive_then_gone)
    h1 = hosts["host001"]
    h1 = Host(h1.name, h1.groups, {**h1.vars, "ansible_ssh_common_args": "-o ProxyCommand=false"})
    o = collect_host(target(h1, "gone"), ssh, 20, default_budgets())
    assert o.outcome == Outcome.OK and o.details["via"] == "paramiko", o
    assert _digests(tmp_path / "gone" / "host001") == _digests(remote["host001"])

    # host002 with its master closed: paramiko, as before there were masters.
    monkeypatch.setattr(fetch, "master_alive", real_alive)
    _close(hosts["host002"], ssh)
    o = collect_host(target(hosts["host002"], "closed"), ssh, 20, default_budgets())
    assert o.outcome == Outcome.OK and o.details["via"] == "paramiko", o
    assert _digests(tmp_path / "closed" / "host002") == _digests(remote["host002"])


def test_ssh_itself_never_skips_the_host_key_check(mfleet, tmp_path, monkeypatch):
    """Should ssh find no master, the connection it makes itself is checked under the run's policy: a
    known_hosts that does not know the host refuses it (and learns nothing), then paramiko does too."""
    _results(mfleet)
    inv = mfleet.inventory(name="inv-master-kh.ini")
    host = load_inventory(inv).hosts[0]
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    ssh = SshSettings(empty.resolve(), "strict", 5)
    assert not fetch.master_alive(host, ssh)
    monkeypatch.setattr(fetch, "master_alive", lambda h, s: True)  # as if a master had just ended
    ws = mfleet.hosts[0].workspace
    o = collect_host(CollectTarget(host, f"{ws}/results", tmp_path / "raw"), ssh, 20, default_budgets())
    assert o.outcome == Outcome.HOSTKEY, o
    assert empty.read_text() == ""
    assert not (tmp_path / "raw").exists()


@pytest.mark.parametrize("order", ["cheap-first", "openssh"])
def test_ansibles_new_connections_use_the_key_exchange_sb_fleet_prefers(mfleet, tmp_path, order):
    """``fleet.ssh_kex`` reaches the connections Ansible opens (masters closed, as a nightly run finds them):
    ssh's own debug log (``-E``, at DEBUG1, from the hosts' ``ansible_ssh_extra_args``) names the algorithm
    negotiated. With cheap-first, OpenSSH's first algorithm that is not sntrup761x25519; with openssh,
    OpenSSH's first."""
    have = openssh_kex()
    if not have:
        pytest.fail("ssh -G names no kexalgorithms: the OpenSSH client (openssh-client) is missing")
    expect = cheap_kex_first(have)[0] if order == "cheap-first" else have[0]
    logs = {h.name: tmp_path / f"{h.name}.log" for h in mfleet.hosts}
    extra = {n: {"ansible_ssh_extra_args": f"'-E {p} -o LogLevel=DEBUG1'"} for n, p in logs.items()}
    inv = mfleet.inventory(name=f"inv-kex-{order}.ini", host_vars=extra)
    ssh = SshSettings.from_fleet(FleetSettings(known_hosts=str(mfleet.known_hosts), ssh_kex=order))
    for h in load_inventory(inv).hosts:
        _close(h, ssh)  # a master left by another test would reuse its own key exchange
    _open_masters(inv, ssh)
    for name, log in logs.items():
        negotiated = re.findall(r"kex: algorithm: (\S+)", log.read_text())
        assert negotiated == [expect], (name, negotiated, log.read_text()[-2000:])
