"""An interrupted play: a host counts as done only when Ansible reports the play's last task for it.

Real Ansible through sb-fleet's executor, two hosts over the local connection, one fork, strategy free:
host ``a`` ends its first task and then waits for the fork while ``b`` sleeps in its own first task.
Interrupted then, ``a`` has reached the host and failed nothing, yet its play is not done: it must be
``pending``, not ``ok`` (a later ``--resume`` would skip it). A play that runs to its end is ``ok``.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from sb_fleet.config.inventory import load_inventory
from sb_fleet.fleet.executor import Executor
from sb_fleet.fleet.progress import RUNNING, Progress
from sb_fleet.fleet.ssh import SshSettings
from sb_fleet.outcome import Outcome
from sb_fleet.plan.tasks import PLAY_DONE, ends_with

pytestmark = pytest.mark.skipif(
    not os.path.exists("/usr/bin/python3"),
    reason="Ansible's local connection runs its modules with /usr/bin/python3",
)

PLAYBOOK = f"""\
- name: cancel probe
  hosts: all
  gather_facts: false
  strategy: free
  tasks:
    - name: first
      ansible.builtin.raw: "{{{{ sb_first }}}}"
    - name: second
      ansible.builtin.raw: "true"
    - name: "{PLAY_DONE}"
      ansible.builtin.debug:
        msg: done
"""
# The nightly path's plays have no task of their own for the end: the executor is told the last one.
ENDINGS = {
    "play-done task": (PLAYBOOK, None),
    "last task named": (PLAYBOOK.split('    - name: "')[0], ends_with("second")),
}


class Watch(Progress):
    """Progress that notes which host started which task."""

    def __init__(self) -> None:
        super().__init__(enabled=False)
        self.started: set[tuple[str, str]] = set()
        self.changed = threading.Event()

    def update(self, host: str, status: Outcome | str, detail: str = "") -> None:
        if status == RUNNING:
            self.started.add((host, detail))
            self.changed.set()
        super().update(host, status, detail)


def _executor(
    tmp_path: Path, b_waits: bool, text: str = PLAYBOOK, b_fails: bool = False
) -> tuple[Executor, Watch, Path]:
    """``b_waits``: b's first task lasts until ``tmp_path/go`` exists (the test makes it at its end:
    Ansible, which the interrupt leaves to its own end, does not outlive the test by long); ``b_fails``:
    then it fails (exit 1)."""
    inv = tmp_path / "hosts.ini"
    end = "; exit 1" if b_fails else ""
    wait = f"'while [ ! -e {tmp_path}/go ]; do sleep 0.1; done{end}'" if b_waits else "true"
    inv.write_text(
        "[gpu]\n"
        "a sb_first=true\n"
        f"b sb_first={wait}\n"
        "[gpu:vars]\n"
        "ansible_connection=local\n"
        "ansible_python_interpreter=/usr/bin/python3\n"
    )
    playbook = tmp_path / "probe.yml"
    playbook.write_text(text)
    watch = Watch()
    ex = Executor(
        load_inventory(inv),
        SshSettings(tmp_path / "known_hosts", "strict", 5),
        forks=1,
        ansible_root=tmp_path / "ansible",
        progress=watch,
    )
    return ex, watch, playbook


@pytest.mark.parametrize("ending", sorted(ENDINGS))
def test_a_host_between_two_tasks_when_interrupted_is_pending_not_ok(tmp_path: Path, ending: str) -> None:
    text, done = ENDINGS[ending]
    ex, watch, playbook = _executor(tmp_path, b_waits=True, text=text)
    # b starts its first task only once a's has ended (one fork): then a waits between tasks
    try:
        with watch.stage("probe", ["a", "b"]):
            res = ex.run(
                "probe", playbook, ["a", "b"], cancel=lambda: ("b", "first") in watch.started, done=done
            )
    finally:
        (tmp_path / "go").touch()
    assert res.status == "canceled", res.status
    assert "first" in res.results["a"] and "second" not in res.results["a"]  # a was between its tasks
    assert res.outcomes["a"].outcome == Outcome.PENDING, res.outcomes["a"]
    assert res.outcomes["b"].outcome == Outcome.PENDING and "first" in res.outcomes["b"].reason


@pytest.mark.parametrize("ending", sorted(ENDINGS))
def test_a_play_run_to_its_end_is_ok(tmp_path: Path, ending: str) -> None:
    text, done = ENDINGS[ending]
    ex, watch, playbook = _executor(tmp_path, b_waits=False, text=text)
    with watch.stage("probe", ["a", "b"]):
        res = ex.run("probe", playbook, ["a", "b"], cancel=lambda: False, done=done)
    assert {h: o.outcome for h, o in res.outcomes.items()} == {"a": Outcome.OK, "b": Outcome.OK}
    assert all(("second" if done else PLAY_DONE) in res.results[h] for h in ("a", "b"))
    assert all(PLAY_DONE not in res.results[h] for h in ("a", "b")) or not done


def test_a_task_that_fails_after_the_interrupt_is_pending_not_failed(tmp_path: Path) -> None:
    """A stop ends the play's connections (srun, ssh) and with them the hosts' tasks, which Ansible may
    still report as failed: that end is the interrupt's, not the host's. ``b``'s first task fails once
    ``go`` exists; the interrupt makes it and holds until Ansible has written that failure, so that the
    executor reads it after the interrupt fired."""
    ex, watch, playbook = _executor(tmp_path, b_waits=True, b_fails=True)
    events = tmp_path / "ansible"

    def failed_written() -> bool:
        return any(
            "runner_on_failed" in p.read_text(errors="replace")
            for p in events.rglob("job_events/*.json")
            if p.is_file()
        )

    def cancel() -> bool:
        if ("b", "first") not in watch.started:
            return False
        (tmp_path / "go").touch()
        deadline = time.monotonic() + 30
        while not failed_written() and time.monotonic() < deadline:
            time.sleep(0.05)
        return True

    try:
        with watch.stage("probe", ["a", "b"]):
            res = ex.run("probe", playbook, ["a", "b"], cancel=cancel)
    finally:
        (tmp_path / "go").touch()
    assert failed_written(), "Ansible never reported b's failed task"
    assert res.outcomes["b"].outcome == Outcome.PENDING, res.outcomes["b"]
    assert "interrupted in first" in res.outcomes["b"].reason, res.outcomes["b"]
