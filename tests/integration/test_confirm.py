"""validate --confirm on a real loopback fleet: a finding that does not reproduce makes its host
``flaky`` (not failed), one that does stays failed, and a healthy fleet validated twice back to back
gets the same verdicts. Plain validate (no --confirm) does the same for a host flagged on the fleet's
statistics alone (majority agreement): it is re-run before the verdict, cleared when the re-run is
fine, failed when its fault persists.

The fault is real and transient: host X's benchmark process is stopped (SIGSTOP) for a few seconds
while it measures, so its step takes longer than the gate's ceiling (or than the other hosts'), once
(or, for the persistent case, in every run). The benchmark is ``noop`` (a timed sleep, no torch)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from .conftest import SB_FLEET, started_fleet

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SLEEP_S = 3.0
CEILING_MS = 3600.0  # a 3 s step plus scheduling noise passes; a step stopped for 5 s does not
STOP_AFTER_S = 1.5  # into the step's sleep (seen in the rank's wait channel), well before its end
STOP_FOR_S = 5.0

CONFIG = f"""\
version: v0.4
fleet:
  known_hosts: @KNOWN_HOSTS@
  python: /usr/bin/python3
  venv: false
  install_requirements: never
  min_free_disk_gb: 0
  forks: 16
superbench:
  benchmarks:
    noop:a:
      timeout: 120
      modes: [{{name: local, proc_num: 1}}]
      parameters: {{sleep: {SLEEP_S}}}
gates:
  fleet: {{enabled: false}}
  limits:
    - metric: "noop:a/step_time"
      max: {CEILING_MS}
"""

# No limit: only the fleet's statistics (majority agreement of 4 hosts) can flag the stalled host.
STATS_CONFIG = CONFIG.split("gates:")[0] + "gates:\n  fleet: {enabled: true}\n"


@pytest.fixture(scope="module")
def cfleet():
    with started_fleet(4, "127.0.21", check_torch=False) as f:
        yield f


class Staller(threading.Thread):
    """Stops host ``victim``'s benchmark for STOP_FOR_S, STOP_AFTER_S into its step: ``times`` times
    (each time a new benchmark process appears).

    The step is found, not guessed: the rank process (``sb_bench exec``) sleeping in its step sits in
    ``clock_nanosleep``, as its wait channel says. A stop timed from the process's start instead lands
    before the step (a slow interpreter start on a loaded CI machine) or after it, and the fault is lost."""

    def __init__(self, fleet, victim: str, times: int):  # noqa: ANN001
        super().__init__(daemon=True)
        self.fleet, self.victim, self.times = fleet, victim, times
        self.done = threading.Event()
        self.stalled = 0

    def run(self) -> None:
        seen: set[int] = set()
        while not self.done.is_set() and self.stalled < self.times:
            pids = [p for p in self.fleet.processes(self.victim, b"noop:a") if p not in seen]
            stepping = [p for p in pids if _in_step(p)]
            if not stepping:
                time.sleep(0.02)
                continue
            began = time.monotonic()
            while time.monotonic() - began < STOP_AFTER_S and not self.done.is_set():
                time.sleep(0.02)
            pids = [p for p in self.fleet.processes(self.victim, b"noop:a") if p not in seen] or pids
            seen.update(pids)
            for p in pids:
                _signal(p, signal.SIGSTOP)
            time.sleep(STOP_FOR_S)  # the fault's own length, not a wait for a condition
            for p in pids:
                _signal(p, signal.SIGCONT)
            self.stalled += 1


def _in_step(pid: int) -> bool:
    """Whether ``pid`` is a benchmark rank asleep in its step (python's time.sleep: clock_nanosleep)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        wchan = Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return False
    return b"exec" in argv and "nanosleep" in wchan


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _validate(
    fleet,  # noqa: ANN001
    tmp_path: Path,
    *extra: str,
    config: str = CONFIG,
) -> tuple[subprocess.CompletedProcess, Path]:
    run_dir = tmp_path / f"run-{uuid.uuid4().hex[:8]}"
    cfg = fleet.config(config, "confirm.yaml" if config is CONFIG else "confirm-stats.yaml")
    r = subprocess.run(
        [
            SB_FLEET,
            "validate",
            "-i",
            str(fleet.inventory()),
            "-c",
            str(cfg),
            "--run-dir",
            str(run_dir),
            "--quiet",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    return r, run_dir


def _verdicts(run_dir: Path) -> dict[str, str]:
    doc = json.loads((run_dir / "report.json").read_text())
    return {h["name"]: h["verdict"] for h in doc["hosts"]}


def test_a_transient_slowdown_is_flaky_not_failed(cfleet, tmp_path: Path) -> None:
    victim = cfleet.hosts[2].name
    staller = Staller(cfleet, victim, times=1)
    staller.start()
    try:
        r, run_dir = _validate(cfleet, tmp_path, "--confirm")
    finally:
        staller.done.set()
        staller.join(timeout=30)
    assert staller.stalled == 1
    first = json.loads((run_dir / "confirm.json").read_text())
    assert first["plan"]["benchmarks"] == {victim: ["noop:a"]}, first
    assert sorted(first["plan"]["controls"]) == sorted(h.name for h in cfleet.hosts if h.name != victim)
    assert first["hosts"][victim]["result"] == "flaky", first["hosts"][victim]
    assert first["hosts"][victim]["replays"][0]["first"] > 0  # it was over the ceiling the first time
    verdicts = _verdicts(run_dir)
    assert verdicts[victim] == "flaky"
    assert all(v == "pass" for h, v in verdicts.items() if h != victim), verdicts
    doc = json.loads((run_dir / "report.json").read_text())
    assert doc["summary"]["flaky"] == 1 and doc["gate"]["passed"] is True
    assert "did not reproduce" in next(h for h in doc["hosts"] if h["name"] == victim)["reason"]
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_persistent_slowdown_stays_failed(cfleet, tmp_path: Path) -> None:
    victim = cfleet.hosts[1].name
    staller = Staller(cfleet, victim, times=2)  # the first run and the confirmation run
    staller.start()
    try:
        r, run_dir = _validate(cfleet, tmp_path, "--confirm")
    finally:
        staller.done.set()
        staller.join(timeout=30)
    assert staller.stalled == 2
    conf = json.loads((run_dir / "confirm.json").read_text())
    assert conf["hosts"][victim]["result"] == "confirmed"
    assert _verdicts(run_dir)[victim] == "fail"
    assert r.returncode == 1, r.stdout + r.stderr


def test_a_healthy_fleet_gets_the_same_verdicts_twice(cfleet, tmp_path: Path) -> None:
    store = tmp_path / "history.duckdb"
    r1, d1 = _validate(cfleet, tmp_path, "--confirm", "--history", str(store))
    r2, d2 = _validate(cfleet, tmp_path, "--confirm", "--history", str(store))
    assert r1.returncode == r2.returncode == 0, r1.stderr + r2.stderr
    assert _verdicts(d1) == _verdicts(d2) == {h.name: "pass" for h in cfleet.hosts}
    assert not (d1 / "confirm.json").exists()  # nothing to confirm
    runs = subprocess.run([SB_FLEET, "history", str(store)], capture_output=True, text=True, timeout=60)
    assert runs.returncode == 0 and len([x for x in runs.stdout.splitlines()[1:] if x.strip()]) == 2, (
        runs.stdout
    )


def test_validate_with_a_corrupt_history_fails_before_touching_a_host(cfleet, tmp_path: Path) -> None:
    bad = tmp_path / "history.duckdb"
    bad.write_bytes(b"\x00not a database" * 1000)
    r, run_dir = _validate(cfleet, tmp_path, "--history", str(bad))
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0] and "Traceback" not in r.stderr
    assert not (run_dir / "outcomes").exists() or not any((run_dir / "outcomes").iterdir())  # no stage ran


def _stalled_validate(fleet, tmp_path: Path, victim: str, times: int):  # noqa: ANN001, ANN202
    """Plain validate (no --confirm) of the statistics-only config, ``victim`` stalled ``times`` times."""
    staller = Staller(fleet, victim, times=times)
    staller.start()
    try:
        r, run_dir = _validate(fleet, tmp_path, config=STATS_CONFIG)
    finally:
        staller.done.set()
        staller.join(timeout=30)
    assert staller.stalled == times
    doc = json.loads((run_dir / "report.json").read_text())
    host = next(h for h in doc["hosts"] if h["name"] == victim)
    checks = {i["check"] for i in host["issues"]}
    assert "majority" in checks and checks <= {"majority", "majority-combined", "fleet"}, host
    conf = doc["confirmation"]
    assert conf["mode"] == "auto" and conf["selection"]["chosen"] == [victim], conf
    assert conf["plan"]["benchmarks"] == {victim: ["noop:a"]}
    assert sorted(conf["plan"]["controls"]) == sorted(h.name for h in fleet.hosts if h.name != victim)
    assert conf == json.loads((run_dir / "confirm.json").read_text())
    rep = conf["hosts"][victim]["replays"][0]
    # both measurements: the stalled step (3 s + 5 s stopped) and the re-run's
    assert rep["metric"] == "noop:a/step_time" and rep["first_value"] > SLEEP_S * 1e3 + 3000, rep
    assert isinstance(rep["again_value"], float) and rep["again_value"] >= SLEEP_S * 1e3
    assert 0 < conf["seconds"] < 300
    # the console (report.md on stdout) says what it cost
    assert f"re-run with 3 control host(s) in {conf['seconds']:.1f} s" in r.stdout, r.stdout
    assert "Confirmation before the verdict" in (run_dir / "report.md").read_text()
    return r, doc, host, rep


def test_plain_validate_confirms_a_majority_finding_and_clears_it_when_the_rerun_is_fine(
    cfleet, tmp_path: Path
) -> None:
    victim = cfleet.hosts[3].name
    r, doc, host, rep = _stalled_validate(cfleet, tmp_path, victim, times=1)
    assert doc["confirmation"]["hosts"][victim]["result"] == "flaky"
    assert not rep["reproduced"] and rep["again_value"] < SLEEP_S * 1e3 + 1000, rep
    assert host["verdict"] == "flaky" and "did not reproduce" in host["reason"]
    assert doc["gate"]["passed"] is True and doc["summary"]["flaky"] == 1
    assert all(h["verdict"] == "pass" for h in doc["hosts"] if h["name"] != victim)
    assert r.returncode == 0, r.stdout + r.stderr


def test_plain_validate_keeps_failing_a_majority_finding_that_persists(cfleet, tmp_path: Path) -> None:
    victim = cfleet.hosts[0].name
    r, doc, host, rep = _stalled_validate(cfleet, tmp_path, victim, times=2)  # first run and re-run
    assert doc["confirmation"]["hosts"][victim]["result"] == "confirmed"
    assert rep["reproduced"] and rep["again_value"] > SLEEP_S * 1e3 + 3000, rep
    assert host["verdict"] == "fail" and "reproduced in the confirmation run" in host["reason"]
    assert doc["gate"]["passed"] is False
    assert r.returncode == 1, r.stdout + r.stderr
