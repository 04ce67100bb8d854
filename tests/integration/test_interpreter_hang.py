"""A host whose interpreter hangs before Python runs a line cannot hold validate: a real loopback SSH fleet
(127.0.66.x, 3 hosts).

One host's ``sb_python`` is a wrapper script that sleeps (``#!/bin/sh`` + ``sleep 100000``: an interpreter
on a dead NFS mount, a stuck site-packages import), so the host-side bound of the health checks, which
starts once Python runs, never starts. The control node ends the checks' phase of validate's one exec at
``health.exec_timeout`` + 5 s from the exec's start (sb_fleet/fleet/exec_phases.py): validate returns
within that + 60 s, the hung host ``unhealthy`` with the reason, the healthy hosts judged, and nothing of
the run left running (the wrapper and its ``sleep`` child on the host, sb-fleet's clients here; hosts and
control node share this machine, listed with ps). Warm (the suite already in place: the nightly case) and
cold (the suite's transfer, where the checks' phase starts once the suite is unpacked). A host hung in
hostprep where the suite is in place ends ``timeout`` at fleet.prep_timeout, not fleet.deploy_timeout.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.fleetlib.hangs import hang_python, hung, run_polled, run_processes, wait_for

from .conftest import ROOT, SB_FLEET, started_fleet

pytestmark = pytest.mark.integration

CHECK_S = 10  # health.exec_timeout: the checks' phase ends at CHECK_S + 5 s
HANG = "#!/bin/sh\nsleep 100000\n"

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
  step_margin: 5
  prep_timeout: @PREP@
health:
  exec_timeout: @CHECK@
superbench:
  benchmarks:
    noop:
      timeout: 5
      modes: [{name: local, proc_num: 1}]
      parameters: {sleep: 0}
gates:
  fleet: {enabled: false}
"""


@pytest.fixture(scope="module")
def hfleet():
    root = Path(tempfile.mkdtemp(prefix="sbf-fleet-"))  # the fleet's directory, removed by its cleanup
    with started_fleet(3, "127.0.66", check_torch=False, root=root) as f:
        wrapper = f.dir / "hung-python"
        wrapper.write_text(HANG)
        wrapper.chmod(0o755)
        yield f, wrapper
        for h in f.hosts:
            shutil.rmtree(h.workspace, ignore_errors=True)


def _sb(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [SB_FLEET, *args, "--quiet"], capture_output=True, text=True, timeout=timeout, cwd=str(ROOT)
    )


def _sleepers() -> list[str]:
    """The planted hang's processes on this machine (ps: hosts and control node are one machine)."""
    ps = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True, check=True).stdout
    return [ln for ln in ps.splitlines() if "sleep 100000" in ln or "hung-python" in ln]


def _unhealthy_and_the_others_pass(run_dir: Path, victim: str, good: tuple[str, ...]) -> dict:
    """The victim ``unhealthy`` at the checks' phase deadline, the other hosts ok and passing; the
    victim's outcome record."""
    oc = json.loads((run_dir / "outcomes.json").read_text())["hosts"]
    v = oc[victim]
    assert v["outcome"] == "unhealthy", v
    assert f"health checks: no end within {CHECK_S + 5} s" in v["reason"], v
    for h in good:
        assert oc[h]["outcome"] == "ok", oc[h]
    verdicts = {h["name"]: h["verdict"] for h in json.loads((run_dir / "report.json").read_text())["hosts"]}
    assert all(verdicts[h] == "pass" for h in good), verdicts
    return v


@pytest.mark.parametrize("warmth", ["warm", "cold"])
def test_an_interpreter_that_never_starts_is_unhealthy_within_the_checks_deadline(hfleet, tmp_path, warmth):
    fleet, wrapper = hfleet
    good1, victim, good2 = (h.name for h in fleet.hosts)
    for h in fleet.hosts:
        shutil.rmtree(h.workspace, ignore_errors=True)
    cfg = fleet.config(CONFIG.replace("@CHECK@", str(CHECK_S)).replace("@PREP@", "180"), f"{warmth}.yaml")
    assert not _sleepers(), _sleepers()
    if warmth == "warm":  # the suite in place on every host, as the night before left it
        plain = fleet.inventory(name="plain.ini")
        r = _sb("deploy", "-i", str(plain), "-c", str(cfg), "--run-dir", str(tmp_path / "deploy"))
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    inv = fleet.inventory(name=f"{warmth}.ini", host_vars={victim: {"sb_python": str(wrapper)}})
    run_dir = tmp_path / warmth
    limit = CHECK_S + 5 + 60
    argv = [SB_FLEET, "validate", "-i", str(inv), "-c", str(cfg), "--run-dir", str(run_dir), "--quiet"]
    r = run_polled(argv, run_dir, limit, lambda run_id: hung(run_id, victim), cwd=str(ROOT))
    run_id, took, out, err = r.run_id, r.took, r.out, r.err
    print(f"validate ({warmth}) with {victim}'s interpreter hung: {took:.1f} s")
    assert took < limit, f"validate ran {took:.0f} s (limit {limit} s)\n{err[-3000:]}"
    seen_hang = bool(r.seen)
    assert seen_hang, "the planted hang never ran"
    assert r.returncode == 1, out[-2000:] + err[-3000:]
    v = _unhealthy_and_the_others_pass(run_dir, victim, (good1, good2))
    assert v["stages"]["deploy"]["outcome"] == "skipped", v  # held back: not benchmarked
    transfer = (run_dir / "ansible" / "deploy-suite").exists()
    assert transfer == (warmth == "cold"), "the suite's transfer ran on a warm fleet, or not on a cold one"
    # nothing of the run left: the wrapper and its sleep on the host, sb-fleet's clients here; at most
    # OpenSSH's idle ControlPersist masters, which end by themselves (ControlPersist=120s)
    wait_for(lambda: not _sleepers(), 15, "the hung interpreter (the wrapper and its sleep) to be gone")
    wait_for(
        lambda: all(
            x.cmdline.startswith("ssh: ") and "[mux]" in x.cmdline for x in run_processes(run_id, run_dir)
        ),
        15,
        "every process of the run but the idle ssh masters to be gone",
    )
    left = run_processes(run_id, run_dir)
    print("left of the run:", "\n".join(map(str, left)) or "nothing")


def test_hostprep_hung_where_the_suite_is_in_place_ends_at_its_own_deadline(hfleet, tmp_path):
    fleet, _ = hfleet
    good1, victim, good2 = (h.name for h in fleet.hosts)
    prep_s = 10
    cfg = fleet.config(CONFIG.replace("@CHECK@", "30").replace("@PREP@", str(prep_s)), "prep.yaml")
    for h in fleet.hosts:
        shutil.rmtree(h.workspace, ignore_errors=True)
    plain = fleet.inventory(name="plain.ini")
    r = _sb("deploy", "-i", str(plain), "-c", str(cfg), "--run-dir", str(tmp_path / "deploy"))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    # hostprep's main replaced by `exec sleep 900` on the victim, in the exec's own process (Python runs)
    pydir = fleet.dir / "prep-py"  # readable by the hosts' login user (pytest's tmp_path is root's alone)
    pydir.mkdir(exist_ok=True)
    pydir.chmod(0o755)
    wrapper, ctl = hang_python(pydir)
    ctl.write_text(f"{victim} deploy\n")
    inv = fleet.inventory(
        name="prep.ini", host_vars={h.name: {"sb_python": str(wrapper)} for h in fleet.hosts}
    )
    run_dir = tmp_path / "prep"
    argv = [SB_FLEET, "validate", "-i", str(inv), "-c", str(cfg), "--run-dir", str(run_dir), "--quiet"]
    r = run_polled(argv, run_dir, 30 + prep_s + 60, lambda run_id: hung(run_id, victim), cwd=str(ROOT))
    run_id, took, out, err = r.run_id, r.took, r.out, r.err
    seen = [t for t, _ in r.seen]  # when the victim's hang was seen alive
    print(f"validate with {victim} hung in hostprep (suite in place): {took:.1f} s")
    assert r.returncode == 1, out[-2000:] + err[-3000:]
    assert seen and seen[-1] - seen[0] <= prep_s + 30, (seen[:1], seen[-1:])
    oc = json.loads((run_dir / "outcomes.json").read_text())["hosts"]
    d = oc[victim]["stages"]["deploy"]
    assert d["outcome"] == "timeout", d
    assert d["reason"].startswith(
        f"hostprep (suite in place): no end within {prep_s} s (fleet.prep_timeout)"
    ), d
    for h in (good1, good2):
        assert oc[h]["outcome"] == "ok", oc[h]
    wait_for(lambda: not hung(run_id, victim), 15, "the hung hostprep to be gone")
    wait_for(
        lambda: all(
            x.cmdline.startswith("ssh: ") and "[mux]" in x.cmdline for x in run_processes(run_id, run_dir)
        ),
        15,
        "every process of the run but the idle ssh masters to be gone",
    )


def _tagged(run_id: str, host: str) -> list[str]:
    """The run's processes on ``host`` (its tag in their environment), as lines: pid, state, command."""
    from tests.fleetlib.hangs import run_processes

    tag = f"SB_FLEET_TAG={run_id}/{host}".encode()
    out = []
    for p in run_processes(run_id):
        try:
            env = Path(f"/proc/{p.pid}/environ").read_bytes().split(b"\0")
            state = Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if tag in env:
            out.append(f"{p.pid} {state} {p.cmdline}")
    return out


def test_a_workspace_on_a_filesystem_that_never_answers_is_unhealthy_within_the_checks_deadline(
    hfleet, tmp_path
):
    """The nightly case (the suite in place), then the victim's workspace covered by a filesystem that
    never answers (a FUSE mount whose daemon never reads: a hard NFS mount whose server is gone,
    tests/fleetlib/hungfs.py): the exec's ``cd`` into it waits in the kernel before any Python runs. The
    control node ends the checks' phase at health.exec_timeout + 5 s: validate returns within that + 60 s,
    the victim ``unhealthy``, the others judged, and the waiting shell is ended (a stop's SIGTERM ends a
    killable wait) while the filesystem still hangs."""
    from tests.fleetlib.hungfs import hung_mount

    fleet, _ = hfleet
    good1, victim, good2 = (h.name for h in fleet.hosts)
    for h in fleet.hosts:
        shutil.rmtree(h.workspace, ignore_errors=True)
    cfg = fleet.config(CONFIG.replace("@CHECK@", str(CHECK_S)).replace("@PREP@", "180"), "fs.yaml")
    inv = fleet.inventory(name="fs.ini")
    r = _sb("deploy", "-i", str(inv), "-c", str(cfg), "--run-dir", str(tmp_path / "deploy"))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    ws = Path(fleet.host(victim).workspace)
    run_dir = tmp_path / "fs"
    limit = CHECK_S + 5 + 60
    with hung_mount(ws):
        argv = [SB_FLEET, "validate", "-i", str(inv), "-c", str(cfg), "--run-dir", str(run_dir), "--quiet"]
        # the victim's processes seen waiting on the filesystem (state D)
        r = run_polled(
            argv,
            run_dir,
            limit,
            lambda run_id: [x for x in _tagged(run_id, victim) if x.split()[1] == "D"],
            cwd=str(ROOT),
        )
        run_id, took, out, err = r.run_id, r.took, r.out, r.err
        print(f"validate with {victim}'s workspace on a filesystem that never answers: {took:.1f} s")
        assert took < limit, f"validate ran {took:.0f} s (limit {limit} s)\n{err[-3000:]}"
        assert r.seen, "nothing of the victim's exec ever waited on the filesystem"
        # ended while the filesystem still hangs: the stop, not the unmount, ended them
        wait_for(lambda: not _tagged(run_id, victim), 15, f"{victim}'s processes to be gone")
    assert r.returncode == 1, out[-2000:] + err[-3000:]
    v = _unhealthy_and_the_others_pass(run_dir, victim, (good1, good2))
    # the stop found the shell that waits in the kernel by its tag (the login shell became a tagged
    # /bin/sh before its cd) and ended it
    assert "stopped on the host: stopped " in v["reason"], v


def test_through_ansible_the_host_watches_the_phases_itself(hfleet, tmp_path):
    """``fleet.exec_via: ansible`` (the path of a host that needs Ansible's connection: a password,
    ``become``): Ansible hands the exec's output over only when the task ends, so the control node cannot
    watch its phases; the host does (sb_fleet.plan.host_exec.PHASE_WATCH, POSIX shell: no Python). The
    nightly case with the victim's interpreter a wrapper that never runs Python: validate returns within
    health.exec_timeout + 5 s + 60 s (fleet.deploy_timeout is 3600 s), the victim ``unhealthy`` naming the
    phase and the host's own watch, the others judged, nothing of the run left."""
    fleet, wrapper = hfleet
    good1, victim, good2 = (h.name for h in fleet.hosts)
    for h in fleet.hosts:
        shutil.rmtree(h.workspace, ignore_errors=True)
    body = CONFIG.replace("@CHECK@", str(CHECK_S)).replace("@PREP@", "180")
    cfg = fleet.config(body.replace("  forks: 8\n", "  forks: 8\n  exec_via: ansible\n"), "ansible.yaml")
    plain = fleet.inventory(name="plain-ansible.ini")
    r = _sb("deploy", "-i", str(plain), "-c", str(cfg), "--run-dir", str(tmp_path / "deploy"))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    inv = fleet.inventory(name="ansible.ini", host_vars={victim: {"sb_python": str(wrapper)}})
    dry = _sb("validate", "--dry-run", "-i", str(inv), "-c", str(cfg), "--run-dir", str(tmp_path / "dry"))
    assert dry.returncode == 0, dry.stderr
    assert "the host watches its phases itself" in dry.stdout, dry.stdout
    run_dir = tmp_path / "ansible"
    limit = CHECK_S + 5 + 60
    argv = [SB_FLEET, "validate", "-i", str(inv), "-c", str(cfg), "--run-dir", str(run_dir), "--quiet"]
    r = run_polled(argv, run_dir, limit, lambda run_id: _sleepers(), cwd=str(ROOT))
    run_id, took, out, err = r.run_id, r.took, r.out, r.err
    seen_hang = bool(r.seen)
    print(f"validate through Ansible with {victim}'s interpreter hung: {took:.1f} s")
    assert took < limit, f"validate ran {took:.0f} s (limit {limit} s)\n{err[-3000:]}"
    assert seen_hang, "the planted hang never ran"
    assert r.returncode == 1, out[-2000:] + err[-3000:]
    assert not (run_dir / "ansible" / "deploy" / "direct-exec.json").exists(), "the exec went over ssh"
    v = _unhealthy_and_the_others_pass(run_dir, victim, (good1, good2))
    assert "ended by the exec's own watch on the host" in v["reason"], v
    wait_for(lambda: not _sleepers(), 15, "the hung interpreter (the wrapper and its sleep) to be gone")
    wait_for(
        lambda: all(
            x.cmdline.startswith("ssh: ") and "[mux]" in x.cmdline for x in run_processes(run_id, run_dir)
        ),
        15,
        "every process of the run but the idle ssh masters to be gone",
    )
