"""Each host's deadline in a stage, and a stop that leaves nothing running: real Ansible through sb-fleet's
executor, hosts over the local connection (their tasks run on this machine, so the test can list them).

Every task exports the run's host tag as the rendered playbooks do (sb_fleet/fleet/reaper.py); the
processes are listed by that tag, and by the control node's tag, before and after.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from pathlib import Path

import pytest

from sb_fleet.config.inventory import load_inventory
from sb_fleet.fleet import reaper
from sb_fleet.fleet.executor import Executor
from sb_fleet.fleet.progress import RUNNING, Progress
from sb_fleet.fleet.ssh import SshSettings
from sb_fleet.outcome import Outcome
from sb_fleet.plan.deadlines import Deadline
from sb_fleet.plan.tasks import HOST_TAG, PLAY_DONE, RUN_EXTRAVAR

pytestmark = pytest.mark.skipif(
    not os.path.exists("/usr/bin/python3"),
    reason="Ansible's local connection runs its modules with /usr/bin/python3",
)

PLAYBOOK = f"""\
- name: deadline probe
  hosts: all
  gather_facts: false
  strategy: free
  tasks:
    - name: work
      ansible.builtin.raw: "{HOST_TAG}={{{{ {RUN_EXTRAVAR} }}}}/{{{{ inventory_hostname }}}}; export {HOST_TAG}; {{{{ sb_work }}}}"
    - name: "{PLAY_DONE}"
      ansible.builtin.debug:
        msg: done
"""


class Watch(Progress):
    def __init__(self) -> None:
        super().__init__(enabled=False)
        self.started: set[str] = set()

    def update(self, host: str, status: Outcome | str, detail: str = "") -> None:
        if status == RUNNING:
            self.started.add(host)
        super().update(host, status, detail)


def _executor(tmp_path: Path, work: dict[str, str], run_id: str) -> tuple[Executor, Watch, Path]:
    inv = tmp_path / "hosts.ini"
    inv.write_text(
        "[gpu]\n"
        + "".join(f"{h} sb_work={w!r}\n" for h, w in work.items())
        + "[gpu:vars]\nansible_connection=local\nansible_python_interpreter=/usr/bin/python3\n"
    )
    playbook = tmp_path / "probe.yml"
    playbook.write_text(PLAYBOOK)
    watch = Watch()
    ex = Executor(
        load_inventory(inv),
        SshSettings(tmp_path / "known_hosts", "strict", 5),
        forks=4,
        ansible_root=tmp_path / "ansible",
        progress=watch,
        run_id=run_id,
    )
    return ex, watch, playbook


def _wait(cond, timeout: float, what: str) -> None:  # noqa: ANN001
    t_end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < t_end, what
        time.sleep(0.05)


def _host_procs(run_id: str, host: str) -> list[int]:
    return [p for p in reaper.tagged(HOST_TAG, reaper.host_tag(run_id, host)) if reaper.alive(p)]


def _control_procs(run_id: str) -> list[int]:
    return [p for p in reaper.tagged(reaper.CONTROL_TAG, reaper.control_tag(run_id)) if reaper.alive(p)]


def test_a_host_past_its_deadline_ends_timeout_stopped_while_the_others_finish(tmp_path: Path) -> None:
    run_id = f"dl-{os.getpid()}-{time.monotonic_ns()}"
    # b hangs (and ignores SIGTERM); a, within its deadline, is ok
    ex, watch, pb = _executor(
        tmp_path, {"a": "sleep 1; echo a done", "b": "trap '' TERM; sleep 300 & sleep 300; wait"}, run_id
    )
    seen: list[list[int]] = []
    t0 = time.monotonic()

    def look() -> None:  # the hung host's processes, listed while it runs
        _wait(lambda: len(_host_procs(run_id, "b")) >= 2, 30, "b's processes to start")
        seen.append(_host_procs(run_id, "b"))

    t = threading.Thread(target=look)
    t.start()
    with watch.stage("probe", ["a", "b"]):
        res = ex.run("probe", pb, ["a", "b"], deadline=Deadline(3, "run", "the test's 3 s"))
    took = time.monotonic() - t0
    t.join()
    assert seen and len(seen[0]) >= 2, seen  # its two sleeps (the shell exported the tag to them)
    assert res.outcomes["a"].outcome == Outcome.OK, res.outcomes["a"]
    b = res.outcomes["b"]
    assert b.outcome == Outcome.TIMEOUT and b.stage == "probe", b
    assert "run: no end within its deadline of 3 s (the test's 3 s)" in b.reason, b.reason
    assert "stopped on the host: stopped" in b.reason, b.reason
    assert took < 3 + 30, took
    _wait(lambda: not _host_procs(run_id, "b"), 5, "b's processes to be gone")
    assert all(not reaper.alive(p) for p in seen[0])
    _wait(lambda: not _control_procs(run_id), 5, "Ansible's processes to be gone")


def test_a_cancelled_stage_leaves_no_process_on_the_control_node(tmp_path: Path) -> None:
    """A process of the play that left Ansible's process group (setsid: as srun does, and OpenSSH's
    ControlPersist master) is ended with the play when the stage is cancelled."""
    run_id = f"cx-{os.getpid()}-{time.monotonic_ns()}"
    ex, watch, pb = _executor(tmp_path, {"a": "unset SB_FLEET_TAG; setsid sleep 300 & sleep 300"}, run_id)
    found: list[int] = []

    def cancel() -> bool:
        sleeps = [p for p in _control_procs(run_id) if reaper.comm(p) == "sleep" and os.getsid(p) == p]
        found.extend(sleeps)
        return bool(sleeps)

    with watch.stage("probe", ["a"]):
        res = ex.run("probe", pb, ["a"], cancel=cancel)
    assert res.status == "canceled" and found
    assert res.outcomes["a"].outcome == Outcome.PENDING
    _wait(lambda: not _control_procs(run_id), 5, "every process of the play to be gone")
    assert not any(reaper.alive(p) for p in found)


def test_a_stage_past_its_bound_is_cancelled_and_its_hosts_end_timeout(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """The backstop: a host whose stop does not end it (here: a stop that does nothing) holds the stage
    only until the stage's bound (its waves of deadlines + the margin); then the play is cancelled, and
    every host not done ends ``timeout``, its processes swept."""
    import sb_fleet.plan.deadlines as deadlines

    # The bound: two waves of 2 s deadlines and this margin. Host a's own deadline counts from its start,
    # which Ansible's start-up delays by seconds on a loaded machine (CI, 2026-11-29: past a bound of 5 s):
    # the margin leaves it room to come first.
    margin = 6
    monkeypatch.setattr(deadlines, "STAGE_MARGIN_S", margin)
    run_id = f"bd-{os.getpid()}-{time.monotonic_ns()}"
    ex, watch, pb = _executor(tmp_path, {"a": "sleep 300", "b": "sleep 300"}, run_id)
    ex = dataclasses.replace(ex, forks=1)  # two waves: b never starts before the bound
    t0 = time.monotonic()
    with watch.stage("probe", ["a", "b"]):
        res = ex.run(
            "probe", pb, ["a", "b"], deadline=Deadline(2, "run", "2 s"), stop=lambda h: "nothing done"
        )
    took = time.monotonic() - t0
    assert res.status == "canceled", res.status
    assert took < 2 * 2 + margin + 15, took  # pexpect's poll of the cancel callback is every 5 s
    a, b = res.outcomes["a"], res.outcomes["b"]
    assert (
        a.outcome == Outcome.TIMEOUT
        and "stopped nothing done; again when the stage ran past its bound" in a.reason
    ), a
    assert b.outcome == Outcome.TIMEOUT and b.reason.endswith(
        f"when the stage ran past its bound ({2 * 2 + margin} s): none"
    ), b
    _wait(lambda: not _host_procs(run_id, "a") and not _control_procs(run_id), 5, "nothing of the play left")
