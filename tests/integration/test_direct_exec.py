"""validate's one exec per host over sb-fleet's own OpenSSH clients (sb_fleet.fleet.direct_exec), on a
real loopback fleet (three hosts and one that never answers, one shared sshd, 127.0.61.x) with real
Ansible beside it.

A host whose inventory asks for an Ansible setting the direct path does not apply goes through the
playbook in the same stage; the hosts that allow it never start Ansible; their execs send their results
after the step (``via: exec``: collect opens no session there), cold and at night (every master closed
first), byte for byte the hosts' files; the playbook's host is collected over the master its play left
(``via: master``); a host that
never answers ends unreachable, and the stage does not wait for it beyond its connect timeout;
``fleet.exec_via: ansible`` sends every host through the playbook.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from .conftest import close_masters, sb_fleet, started_fleet

pytestmark = [pytest.mark.integration]

CONFIG = """\
version: v0.4
fleet:
  known_hosts: @KNOWN_HOSTS@
  python: /usr/bin/python3
  venv: false
  install_requirements: never
  min_free_disk_gb: 0
  ssh_connect_timeout: 3
  exec_via: {via}
superbench:
  benchmarks:
    noop:
      enable: true
      timeout: 60
      modes: [{{name: local, proc_num: 1, parallel: no}}]
      parameters: {{num_warmup: 0, num_steps: 1}}
gates:
  fleet: {{enabled: false}}
"""


@pytest.fixture(scope="module")
def xfleet():
    with started_fleet(3, "127.0.61", shared_sshd=True, check_torch=False) as f:
        yield f


def _closed_port() -> int:
    """A TCP port nothing listens on (the shared sshd answers every loopback address on its own)."""
    with socket.socket() as s:
        s.bind(("127.0.61.99", 0))
        return int(s.getsockname()[1])


def _outcomes(run_dir: Path) -> dict[str, dict]:
    return json.loads((run_dir / "outcomes.json").read_text())["hosts"]


def _direct_hosts(run_dir: Path, stage: str) -> set[str]:
    f = run_dir / "ansible" / stage / "direct-exec.json"
    return {h["host"] for h in json.loads(f.read_text())["hosts"]} if f.exists() else set()


def _ansible_hosts(run_dir: Path, stage: str) -> set[str]:
    out = set()
    for p in (run_dir / "ansible" / stage).glob("artifacts/*/job_events/*.json"):
        ev = json.loads(p.read_text())
        if ev.get("event") == "runner_on_start":
            out.add(ev["event_data"]["host"])
    return out


def _via(run_dir: Path) -> dict[str, str]:
    col = json.loads((run_dir / "outcomes" / "collect.json").read_text())["hosts"]
    return {o["host"]: o.get("details", {}).get("via", "") for o in col if o["host"] != "ghost"}


def _same_files(fleet, run_dir: Path) -> None:
    """Every host's collected results are its own files, byte for byte, and all of them."""
    run_id = json.loads((run_dir / "manifest.json").read_text())["run_id"]
    for h in fleet.hosts:
        remote = Path(h.workspace) / "runs" / run_id / "results"
        local = run_dir / "raw" / h.name / "results"
        want = {str(p.relative_to(remote)): p.read_bytes() for p in remote.rglob("*") if p.is_file()}
        got = {str(p.relative_to(local)): p.read_bytes() for p in local.rglob("*") if p.is_file()}
        assert want and got == want, (h.name, sorted(want), sorted(got))


def test_own_clients_where_a_host_allows_and_ansible_where_it_asks(xfleet, tmp_path):
    h1, h2, h3 = (h.name for h in xfleet.hosts)
    # host 3 asks for an Ansible setting (harmless here): the playbook, not sb-fleet's own client
    inv = xfleet.inventory(
        extra_hosts=[("ghost", "127.0.61.99", _closed_port())],
        host_vars={h3: {"ansible_ssh_pipelining": "true"}},
        name="inv-direct.ini",
    )
    cfg = xfleet.config(CONFIG.format(via="ssh"), "cfg-direct.yaml")
    cold = tmp_path / "cold"
    r = sb_fleet("validate", "-i", str(inv), "-c", str(cfg), "--run-dir", str(cold), timeout=300)
    assert r.returncode == 3, r.stdout + r.stderr  # the ghost: unreachable
    oc = _outcomes(cold)
    assert {h: oc[h]["outcome"] for h in (h1, h2, h3)} == {h1: "ok", h2: "ok", h3: "ok"}, oc
    assert oc["ghost"]["outcome"] == "unreachable", oc["ghost"]
    assert "Connection refused" in oc["ghost"]["reason"], oc["ghost"]
    assert _direct_hosts(cold, "deploy") == {h1, h2, "ghost"}
    assert _ansible_hosts(cold, "deploy") == {h3}
    # cold: the suite's transfer too (its archive on the client's stdin)
    assert _direct_hosts(cold, "deploy-suite") == {h1, h2}
    assert _ansible_hosts(cold, "deploy-suite") == {h3}
    assert _via(cold) == {h1: "exec", h2: "exec", h3: "master"}
    for h in (h1, h2, h3):
        assert (cold / "raw" / h).is_dir(), h
    _same_files(xfleet, cold)
    assert not list((cold / "ansible").glob("*/.shipped/*")), "the spools are removed once read"

    # the nightly case: every master closed, the suite in place, one exec per host, collect on its master
    assert close_masters(inv, xfleet.known_hosts) == 3
    night = tmp_path / "night"
    r = sb_fleet("validate", "-i", str(inv), "-c", str(cfg), "--run-dir", str(night), timeout=300)
    assert r.returncode == 3, r.stdout + r.stderr
    oc = _outcomes(night)
    assert all(oc[h]["outcome"] == "ok" for h in (h1, h2, h3)), oc
    assert not (night / "ansible" / "deploy-suite").exists()
    assert _direct_hosts(night, "deploy") == {h1, h2, "ghost"}
    assert _via(night) == {h1: "exec", h2: "exec", h3: "master"}
    _same_files(xfleet, night)
    shipped = json.loads((night / "ansible" / "deploy" / "direct-exec.json").read_text())["hosts"]
    assert all(e["shipped_bytes"] > 0 for e in shipped if e["host"] != "ghost"), shipped
    facts = json.loads((night / "facts" / f"{h1}.json").read_text())
    assert facts["host"] == h1


def test_exec_via_ansible_sends_every_host_through_the_playbook(xfleet, tmp_path):
    inv = xfleet.inventory(name="inv-ansible.ini")
    cfg = xfleet.config(CONFIG.format(via="ansible"), "cfg-ansible.yaml")
    run_dir = tmp_path / "r"
    r = sb_fleet("validate", "-i", str(inv), "-c", str(cfg), "--run-dir", str(run_dir), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    names = {h.name for h in xfleet.hosts}
    assert _direct_hosts(run_dir, "deploy") == set()
    assert _ansible_hosts(run_dir, "deploy") == names
    assert all(o["outcome"] == "ok" for o in _outcomes(run_dir).values())


def test_results_past_a_budget_are_not_sent_and_collect_refuses_them_over_ssh(xfleet, tmp_path):
    """A budget the results pass (a rank's file over collect.max_file_bytes): the exec sends nothing, and
    collect over the master fails each host for that budget, in its own words, as before the shortcut."""
    inv = xfleet.inventory(name="inv-budget.ini")
    body = CONFIG.format(via="ssh").replace("gates:", "collect:\n  max_file_bytes: 64\ngates:")
    cfg = xfleet.config(body, "cfg-budget.yaml")
    run_dir = tmp_path / "r"
    r = sb_fleet("validate", "-i", str(inv), "-c", str(cfg), "--run-dir", str(run_dir), timeout=300)
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stdout + r.stderr
    col = {o["host"]: o for o in json.loads((run_dir / "outcomes" / "collect.json").read_text())["hosts"]}
    for h in xfleet.hosts:
        o = col[h.name]
        assert o["outcome"] == "failed" and "collect.max_file_bytes" in o["reason"], o
        assert o["details"]["via"] == "master" and "shipped" not in o["details"], o
    events = json.loads((run_dir / "ansible" / "deploy" / "direct-exec.json").read_text())["hosts"]
    assert events and not any("shipped_bytes" in e for e in events), events
