"""Each phase of validate's one exec keeps its own deadline, read from the marker lines on its stdout as
they arrive (sb_fleet.fleet.exec_phases), whatever the chunks they come in."""

from __future__ import annotations

from sb_fleet.fleet.exec_phases import LINE_KEEP, exec_phases
from sb_fleet.plan.tasks import HEALTH_DONE, INSTALLING, RUN_FOLLOWS, SUITE_READY


def test_a_warm_exec_moves_through_its_phases_at_their_lines() -> None:
    clock = exec_phases(120, 180, 3600, ("step01", 90), transfer=False).clock(0.0)
    assert clock.phase is not None and (clock.phase.name, clock.phase.seconds) == ("health", 125)
    assert clock.late(125.0) is None and clock.late(125.5) is clock.phase
    assert (
        clock.late(125.5).reason().startswith("health checks: no end within 125 s (health.exec_timeout + 5")
    )
    # the checks' end line in two chunks, after their JSON: the hostprep phase from when it came
    clock.feed(b'{"checks": []}\n' + HEALTH_DONE.encode()[:7], 10.0)
    assert clock.phase.name == "health"
    clock.feed(HEALTH_DONE.encode()[7:] + b" 0\nfacts", 11.0)
    assert (clock.phase.name, clock.phase.seconds, clock.since) == ("hostprep", 180, 11.0)
    assert clock.late(191.0) is None and clock.late(191.5) is not None
    clock.feed(b"\n" + RUN_FOLLOWS.encode() + b"\n", 20.0)
    assert (clock.phase.name, clock.phase.label, clock.phase.seconds) == ("step", "step01", 90)
    assert clock.late(110.5) is not None and clock.late(109.0) is None


def test_hostprep_that_installs_gets_the_deploy_deadline_and_a_cold_exec_unpacks_first() -> None:
    clock = exec_phases(None, 180, 3600, None, transfer=False).clock(0.0)
    assert clock.phase is not None and clock.phase.name == "hostprep"
    clock.feed(f"{INSTALLING}\n".encode(), 5.0)
    assert clock.phase.seconds == 3600 and clock.since == 0.0 and "installs" in clock.phase.source
    cold = exec_phases(30, 180, 3600, ("s", 10), transfer=True).clock(0.0)
    assert cold.phase is not None and (cold.phase.name, cold.phase.seconds) == ("unpack", 3600)
    cold.feed(f"{SUITE_READY}\n".encode(), 2.0)
    assert (cold.phase.name, cold.phase.seconds, cold.since) == ("health", 35, 2.0)
    cold.feed(f"{HEALTH_DONE} 1\n".encode(), 3.0)
    assert (cold.phase.name, cold.phase.seconds) == ("hostprep", 3600)  # an install, in the transfer


def test_a_marker_inside_a_line_or_a_long_line_is_no_phase_end() -> None:
    clock = exec_phases(120, 180, 3600, None, transfer=False).clock(0.0)
    clock.feed(b"x" * (3 * LINE_KEEP) + f" {HEALTH_DONE} 0\n".encode(), 1.0)
    clock.feed(f"say {HEALTH_DONE} 0\n".encode(), 1.0)
    assert clock.phase is not None and clock.phase.name == "health"
    clock.feed(f"{HEALTH_DONE} 0\n".encode(), 2.0)
    assert clock.phase.name == "hostprep" and clock.phase.seconds == 180
    # a prep deadline longer than deploy's: deploy's, and no install deadline beyond it
    short = exec_phases(None, 600, 100, None, transfer=False)
    assert short.phases[0][0].seconds == 100 and short.install is None
