"""Names of the playbook tasks whose results sb-fleet reads back.

The templates get these through the ``tasks`` variable (``[[ tasks.hostprep | tojson ]]``) and the
code reads results by the same constants, so renaming one renames both; a unit test renders every
playbook and checks each name is there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

HOSTPREP_FAST = "check prerequisites, build the venv, record facts (suite in place)"  # deploy.yml, raw
# deploy.yml: the suite on stdin, then hostprep
HOSTPREP = "check prerequisites, build the venv, record facts"
NEED_SUITE = "SB_FLEET_NEED_SUITE"  # what the fast path prints when the suite is not on the host yet
# validate: the line (on stdout and stderr) between hostprep and the first step's runner in one exec
RUN_FOLLOWS = "SB_FLEET_RUN_FOLLOWS"
# validate: the line (on stdout and stderr, with the checks' exit status) after the health checks that
# open deploy's fast exec (deploy.yml's sb_health_first)
HEALTH_DONE = "SB_FLEET_HEALTH_DONE"
# the suite's transfer: the line (stdout) once the suite is unpacked in the workspace, before first_exec
SUITE_READY = "SB_FLEET_SUITE_READY"
# hostprep: the line (stdout) when it starts building the venv or installing requirements (an install, not
# a check: its deadline is fleet.deploy_timeout, not fleet.prep_timeout); sb_bench.host.hostprep.INSTALLING
INSTALLING = "SB_FLEET_INSTALLING"
# What the exec's own phase watch prints when a phase outlived its deadline on a host whose exec goes
# through Ansible (sb_fleet.plan.host_exec.PHASE_WATCH): the line, the phase's name and its seconds.
PHASE_LATE = "SB_FLEET_PHASE_LATE"
IMAGE_DIGEST = "image digest"  # container-deploy.yml / container run: the image's digest
IMAGE_LOAD = "load the image"  # container-deploy.yml: loading a tarball / creating an enroot image
IMAGE_CHECK = "the suite runs in the image"  # container-deploy.yml: the image's torch facts
CACHE_REMOVE = "remove the shared cache"  # cleanup.yml with --cache: hostprep --remove-cache

HEALTH = "health checks"  # check.yml, raw: sb_bench.health's JSON document on stdout
RUN_STEP = "run {step}"  # run.yml / container run: the runner of one step (its rc and stdout are judged)
# container run: a step that outlived its timeout has its container removed (said in the host's outcome)
CONTAINER_REMOVE = "remove the container that outlived its step"
# The container playbooks' last task: a host is done with the play only when Ansible reports it (an
# interrupt can leave a host between two tasks, which no other event tells). The nightly path's plays
# (check, deploy, run) have none: its cost was one more task per host (a worker process each, 2-5 s of
# a 64-host play); the executor takes their last task's result as the end instead (:func:`ends_with`,
# deploy_stage.deploy_done).
PLAY_DONE = "this host is done with the play"


# Every command a playbook runs on a host exports HOST_TAG=<run id>/<host> (the run id comes in as the
# extra variable RUN_EXTRAVAR): everything the command starts inherits it, and a stop ends the processes
# that carry it (sb_fleet/fleet/reaper.py).
HOST_TAG = "SB_FLEET_TAG"
RUN_EXTRAVAR = "sb_fleet_run"
TAG = MappingProxyType({"var": HOST_TAG, "run": RUN_EXTRAVAR})


def run_task(step_id: str) -> str:
    """The name of the task that runs step ``step_id`` (templates: ``tasks.run_step.format(step=...)``)."""
    return RUN_STEP.format(step=step_id)


TASKS = MappingProxyType(
    {
        "hostprep_fast": HOSTPREP_FAST,
        "hostprep": HOSTPREP,
        "image_digest": IMAGE_DIGEST,
        "image_load": IMAGE_LOAD,
        "image_check": IMAGE_CHECK,
        "cache_remove": CACHE_REMOVE,
        "health": HEALTH,
        "run_step": RUN_STEP,
        "container_remove": CONTAINER_REMOVE,
        "play_done": PLAY_DONE,
    }
)


def ends_with(name: str) -> Callable[[str, Mapping[str, Any]], bool]:
    """For the executor: a host's play is over once it reports task ``name`` (the play's last task)."""

    def done(task: str, result: Mapping[str, Any]) -> bool:
        return task == name

    return done
