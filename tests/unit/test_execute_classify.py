"""``execute.classify`` on job events captured from real ansible-runner runs against loopback sshd hosts.

The fixtures (tests/unit/fixtures/job_events/) are what ansible-runner wrote, paths and ports scrubbed;
``tests/unit/fixtures/capture_job_events.py`` captures them again (root, sshd). Each file holds one
host's events of one run: a task that succeeded, failed (exit 3), a host with no sshd, a host whose
key changed since known_hosts recorded it, and a host strict checking has never seen.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sb_fleet.exits import EXIT_FAILED, EXIT_INFRA, exit_for
from sb_fleet.fleet.task_outcome import classify
from sb_fleet.outcome import Outcome

FIXTURES = Path(__file__).parent / "fixtures" / "job_events"
SCENARIOS = ("ok", "failed", "unreachable", "hostkey-changed", "hostkey-unknown")


def _final(scenario: str) -> dict:
    """The host's last task event (the one the executor turns into an outcome)."""
    events = json.loads((FIXTURES / f"{scenario}.json").read_text())
    assert events and all(e["event"].startswith("runner_on_") for e in events)
    assert [e["counter"] for e in events] == sorted(e["counter"] for e in events)
    return events[-1]


def test_every_scenario_was_captured():
    assert sorted(p.stem for p in FIXTURES.glob("*.json")) == sorted(SCENARIOS)
    assert (FIXTURES.parent / "capture_job_events.py").is_file()


def test_the_fixtures_hold_no_machine_paths():
    for p in FIXTURES.glob("*.json"):
        text = p.read_text()
        for leak in ("/tmp/", "/root", "/home/", "/work/", "BEGIN OPENSSH PRIVATE KEY"):
            assert leak not in text, (p.name, leak)


def test_ok_is_an_ok_event_and_needs_no_classification():
    ev = _final("ok")
    assert ev["event"] == "runner_on_ok"
    assert ev["event_data"]["res"]["rc"] == 0


@pytest.mark.parametrize("scenario", ["hostkey-changed", "hostkey-unknown"])
def test_host_key_refusals_are_hostkey_outcomes(scenario):
    ev = _final(scenario)
    assert ev["event"] == "runner_on_unreachable"  # Ansible reports a refused key as unreachable
    outcome, reason = classify(ev["event"], ev["event_data"]["res"])
    assert outcome is Outcome.HOSTKEY
    assert "known_hosts" in reason and "\n" not in reason and "\r" not in reason
    # The host-key path: infrastructure trouble (exit 3), never a benchmark failure.
    assert outcome.is_infra and exit_for([outcome]) == EXIT_INFRA
    assert exit_for([Outcome.OK, outcome, Outcome.FAILED]) == EXIT_INFRA


def test_connection_refused_is_unreachable():
    ev = _final("unreachable")
    assert ev["event"] == "runner_on_unreachable"
    outcome, reason = classify(ev["event"], ev["event_data"]["res"])
    assert outcome is Outcome.UNREACHABLE
    assert "Connection refused" in reason and "127.0.9.250" in reason
    assert "\n" not in reason and "\r" not in reason
    assert exit_for([outcome]) == EXIT_INFRA


def test_a_failed_task_is_failed_with_its_return_code_reason():
    ev = _final("failed")
    assert ev["event"] == "runner_on_failed"
    res = ev["event_data"]["res"]
    assert res["rc"] == 3
    outcome, reason = classify(ev["event"], res)
    assert outcome is Outcome.FAILED
    assert reason.startswith("non-zero return code") and "\n" not in reason and "\r" not in reason
    assert exit_for([outcome]) == EXIT_FAILED


def test_a_failed_task_names_the_command_s_own_error():
    """Raw tasks run without a tty (ANSIBLE_SSH_USETTY=False): the command's stderr is its own."""
    ev = _final("failed")
    _, reason = classify(ev["event"], ev["event_data"]["res"])
    assert "nvidia-smi: command not found" in reason


def test_no_captured_failure_is_mistaken_for_a_host_key_problem():
    for scenario in ("failed", "unreachable"):
        ev = _final(scenario)
        assert classify(ev["event"], ev["event_data"]["res"])[0] is not Outcome.HOSTKEY, scenario


def test_hostprep_s_error_is_the_reason_after_its_marker_lines():
    """hostprep prints SB_FLEET_INSTALLING before it installs; its last JSON line's error is still the
    reason (CI: a shared workspace's refusal read "non-zero return code")."""
    err = "workspace /w is host h1's (marker /w/.sb-fleet-host), and h2 sees it too"
    res = {"rc": 1, "msg": "non-zero return code", "stdout": f'SB_FLEET_INSTALLING\n{{"error": "{err}"}}\n'}
    outcome, reason = classify("runner_on_failed", res)
    assert outcome is Outcome.FAILED and reason == err
    res["stdout"] = "SB_FLEET_INSTALLING\n[not json\n"
    assert classify("runner_on_failed", res)[1].startswith("non-zero return code")
