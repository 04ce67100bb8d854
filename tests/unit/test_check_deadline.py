"""Health checks that hang or answer nothing make the host ``unhealthy``, and validate holds it back:
the real check playbook (rendered from the real templates) through real Ansible, three hosts over the
local connection. One host's interpreter hangs (it sleeps), one's exits 1 at once, one is fine."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from sb_fleet.fleet import reaper
from sb_fleet.fleet.workflow import Options, executor, healthy_hosts
from sb_fleet.outcome import Outcome
from sb_fleet.plan.tasks import HOST_TAG
from sb_fleet.rundir.outcome_table import load_stage
from sb_fleet.rundir.runinputs import create_run

pytestmark = pytest.mark.skipif(
    not os.path.exists("/usr/bin/python3"),
    reason="Ansible's local connection runs its modules with /usr/bin/python3",
)

CONFIG = """\
version: v0.4
fleet:
  python: /usr/bin/python3
  venv: false
  install_requirements: never
  workspace: {ws}/{{host}}
health:
  exec_timeout: 4
superbench:
  benchmarks:
    noop:
      timeout: 30
      modes: [{{name: local, proc_num: 1}}]
      parameters: {{sleep: 0}}
"""


def test_hung_and_silent_health_checks_are_unhealthy_and_not_benchmarked(tmp_path: Path) -> None:
    hang = tmp_path / "hang-python"
    hang.write_text("#!/bin/sh\nexec sleep 300\n")
    dead = tmp_path / "dead-python"
    dead.write_text("#!/bin/sh\nexit 1\n")
    for p in (hang, dead):
        p.chmod(0o755)
    inv = tmp_path / "hosts.ini"
    inv.write_text(
        "[gpu]\n"
        "good\n"
        f"hung sb_python={hang}\n"
        f"silent sb_python={dead}\n"
        "[gpu:vars]\n"
        "ansible_connection=local\n"
        "ansible_python_interpreter=/usr/bin/python3\n"
    )
    cfg = tmp_path / "config.yaml"
    cfg.write_text(CONFIG.format(ws=tmp_path / "ws"))
    run = create_run(tmp_path / "run", cfg, inv)
    opts = Options(progress=False)
    hosts = run.select(None)
    t0 = time.monotonic()
    with executor(run, opts, hosts) as ex:
        go_on = healthy_hosts(run, ex, hosts, opts)
    took = time.monotonic() - t0
    check = load_stage(run.rd, "check")
    assert check is not None
    assert go_on == ["good"], {h: (o.outcome, o.reason) for h, o in check.items()}
    hung = check["hung"]
    assert hung.outcome == Outcome.UNHEALTHY, hung
    assert hung.reason.startswith("health checks: no end within its deadline of 4 s (health.exec_timeout)")
    assert "stopped on the host: stopped" in hung.reason, hung.reason
    silent = check["silent"]
    assert silent.outcome == Outcome.UNHEALTHY and "gave no result" in silent.reason, silent
    assert took < 4 + 30, took
    # nothing of the hung check is left (the sleep carried the run's host tag)
    assert not [p for p in reaper.tagged(HOST_TAG, reaper.host_tag(run.run_id, "hung")) if reaper.alive(p)]
    deploy = load_stage(run.rd, "deploy")
    assert deploy is not None and deploy["hung"].outcome == Outcome.SKIPPED
    assert deploy["hung"].reason.startswith("unhealthy: health checks: no end within its deadline")
