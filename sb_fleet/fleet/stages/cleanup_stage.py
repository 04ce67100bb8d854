"""The cleanup stage: remove sb-fleet's containers from every host; on request the image, the workspaces
and the shared cache."""

from __future__ import annotations

from pathlib import Path

from sb_fleet.fleet.executor import Executor
from sb_fleet.outcome import HostOutcome
from sb_fleet.plan.render_container import render_cleanup
from sb_fleet.rundir.outcome_table import save_stage
from sb_fleet.rundir.runinputs import RunInputs


def cleanup_playbook(run: RunInputs, images: bool, workspaces: bool, cache: bool = False) -> Path:
    """The cleanup playbook for this run's config (rendered on demand: it is an action, not a run input)."""
    return render_cleanup(
        run.config, run.plan.host_setup, run.rd.sub("playbooks", "cleanup"), images, workspaces, cache
    )


def cleanup(run: RunInputs, ex: Executor, hosts: list[str], playbook: Path) -> dict[str, HostOutcome]:
    with ex.progress.stage("cleanup", hosts):
        res = ex.run("cleanup", playbook, hosts)
    save_stage(run.rd, "cleanup", res.outcomes)
    return res.outcomes
