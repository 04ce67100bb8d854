"""The exec's own phase watch (sb_fleet.plan.host_exec.PHASE_WATCH), run by the local /bin/sh as a host's
login shell would run it through Ansible: each phase ends at its own deadline, the command's output and
exit status pass through untouched otherwise, and the control node reads which phase ended it
(ExecPhases.late_on_host). The real path (Ansible, sshd hosts, a hung interpreter) is in
tests/integration/test_interpreter_hang.py."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from sb_fleet.fleet.exec_phases import exec_phases
from sb_fleet.plan.host_exec import PhaseWatch, tagged_shell
from sb_fleet.plan.tasks import HEALTH_DONE, INSTALLING, RUN_FOLLOWS

# health 2 s, hostprep 2 s (installing: 6 s), the first step 3 s
PLAN = exec_phases(health_s=0, prep_s=2, install_s=6, step=("step01", 3), transfer=False)


def _plan_seconds() -> list[int]:
    return [ph.seconds for ph, _ in PLAN.phases]


MARKER = f"sbtest-watch-{os.getpid()}"
EVIL = "$(touch pwned); `touch pwned2`"
# every case at once (each mostly waits on its deadline): name -> (script, watch)
CASES: dict[str, tuple[str, PhaseWatch | None]] = {
    "passes": (f"echo one; echo '{HEALTH_DONE} 0'; echo '{RUN_FOLLOWS}'; printf 'two\\nlast'; exit 3", None),
    "health": ("sleep 100", None),  # Python never starts: no end line of the checks
    "hostprep": (f"echo '{HEALTH_DONE} 0'; sleep 100", None),
    "step": (f"echo '{HEALTH_DONE} 0'; echo {RUN_FOLLOWS}; sleep 100", None),
    "ignores-term": ("trap '' TERM; sleep 100", None),  # killed 5 s after its SIGTERM
    "installs": (f"echo '{HEALTH_DONE} 0'; echo {INSTALLING}; sleep 4; echo {RUN_FOLLOWS}; echo ran", None),
    "installs-late": (f"echo '{HEALTH_DONE} 0'; echo {INSTALLING}; sleep 100", None),
    "session": (f"sh -c 'exec -a {MARKER} sleep 100' & sleep 100", None),
    "data": ("echo '@EVIL@' && echo after", PhaseWatch((("health", 3, EVIL), ("hostprep", 2, "")))),
}


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> dict[str, tuple[float, int, str, Path]]:
    """name -> (seconds, exit status, stdout, its TMPDIR)."""
    procs = {}
    for name, (script, watch) in CASES.items():
        tmp = tmp_path_factory.mktemp(name)
        script = script.replace("@EVIL@", EVIL.replace("'", ""))
        line = tagged_shell("run-1/h1", f"cd {tmp} && {script}", watch or PLAN.host_watch())
        env = {**os.environ, "TMPDIR": str(tmp)}
        procs[name] = (time.monotonic(), tmp, subprocess.Popen(
            ["/bin/sh", "-c", line], stdout=subprocess.PIPE, text=True, env=env
        ))  # fmt: skip
    ended: dict[str, float] = {}
    t_end = time.monotonic() + 60
    while len(ended) < len(procs) and time.monotonic() < t_end:  # each one's own end, polled
        for name, (_, _, p) in procs.items():
            if name not in ended and p.poll() is not None:
                ended[name] = time.monotonic()
        time.sleep(0.05)
    out = {}
    for name, (t0, tmp, p) in procs.items():
        stdout, _ = p.communicate(timeout=5)  # (tiny outputs: no pipe fills meanwhile)
        out[name] = (ended.get(name, time.monotonic()) - t0, p.returncode, stdout, tmp)
    return out


def test_the_plan_is_the_control_nodes_own():
    # health.exec_timeout 0 + the 5 s the host's own kill takes, hostprep 2 s, the step 3 s
    assert _plan_seconds() == [5, 2, 3]
    w = PLAN.host_watch()
    assert w.phases == (("health", 5, HEALTH_DONE), ("hostprep", 2, RUN_FOLLOWS), ("step", 3, ""))
    assert w.install == ("hostprep", 6)


def test_an_exec_within_its_deadlines_passes_through_untouched(ran):
    took, rc, out, tmp = ran["passes"]
    assert (rc, out) == (3, f"one\n{HEALTH_DONE} 0\n{RUN_FOLLOWS}\ntwo\nlast\n")
    assert PLAN.late_on_host(out) is None
    assert took < 5
    assert [p.name for p in tmp.iterdir()] == []  # its working files are gone


@pytest.mark.parametrize(
    ("case", "phase", "limit"),
    [
        ("health", "health", 5),
        ("hostprep", "hostprep", 2),
        ("step", "step", 3),
        ("ignores-term", "health", 10),
    ],
)
def test_a_phase_past_its_deadline_ends_the_exec_and_says_which(ran, case, phase, limit):
    took, rc, out, _ = ran[case]
    late = PLAN.late_on_host(out)
    assert rc == 124 and late is not None and late.name == phase, (rc, out)
    assert limit <= took < limit + 4, took
    assert out.splitlines()[-1] == f"SB_FLEET_PHASE_LATE {phase} {late.seconds}"


def test_hostprep_that_installs_gets_the_install_deadline_from_its_start(ran):
    took, rc, out, _ = ran["installs"]
    assert rc == 0 and out.endswith("ran\n") and PLAN.late_on_host(out) is None, out
    took, rc, out, _ = ran["installs-late"]
    late = PLAN.late_on_host(out)
    assert rc == 124 and late is not None and late.seconds == 6 and late.label == "hostprep (installing)", out
    assert 6 <= took < 10


def test_the_whole_session_is_ended(ran):
    """The command's children (a wrapper's) end with it: the watch ends its session, not one process."""
    took, rc, out, _ = ran["session"]
    assert rc == 124, out
    left = subprocess.run(["pgrep", "-f", MARKER], capture_output=True, text=True).stdout.split()
    assert left == [], left


def test_values_stay_data(ran):
    """A phase's end line with shell syntax in it is compared as text, never run."""
    took, rc, out, tmp = ran["data"]
    plain = EVIL.replace("'", "")
    assert rc == 0 and out == f"{plain}\nafter\n", out
    assert not (tmp / "pwned").exists() and not (tmp / "pwned2").exists()
