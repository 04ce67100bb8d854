"""The image stage (``fleet.runtime`` docker, podman or enroot): put the benchmark image on every host the
deploy stage left fit, record each host's image digest and the image's torch facts."""

from __future__ import annotations

import json
import time
from typing import Any

from sb_fleet.fleet.executor import Executor
from sb_fleet.fleet.stages.stage_common import container_vars
from sb_fleet.outcome import HostOutcome, Outcome
from sb_fleet.plan.container_commands import record_digests, registry_secret
from sb_fleet.plan.deadlines import image_deadline
from sb_fleet.plan.render_container import settings
from sb_fleet.plan.tasks import IMAGE_CHECK
from sb_fleet.rundir.outcome_table import save_stage
from sb_fleet.rundir.runinputs import RunInputs
from sb_fleet.safe_files import safe_name


def deploy_image(run: RunInputs, ex: Executor, deployed: dict[str, HostOutcome]) -> dict[str, HostOutcome]:
    """``deployed``: the deploy stage's outcomes; a host whose image fails gets a failed deploy outcome."""
    c = settings(run.config)
    playbook = run.rendered.image_deploy
    assert playbook is not None, "rendered without a container runtime"
    outcomes = dict(deployed)
    hosts = [h for h, o in deployed.items() if o.outcome == Outcome.OK]
    t0 = time.monotonic()
    with ex.progress.stage("deploy image", hosts), registry_secret(c):
        res = ex.run(
            "deploy-image",
            playbook,
            hosts,
            extravars=container_vars(run, hosts),
            deadline=image_deadline(run.config),
        )
    for h, o in res.outcomes.items():
        if o.outcome != Outcome.OK:
            outcomes[h] = HostOutcome(h, "deploy", o.outcome, f"image: {o.reason}")
    record_digests(run.rd, run.config.fleet.runtime, "deploy", res.results)
    for h, r in res.results.items():
        extra = image_facts(r)
        if extra:
            path = f"facts/{safe_name(h)}.json"
            run.rd.write_json(path, {**run.rd.read_json(path, {"host": h}), **extra})
    table = run.rd.read_json("containers.json", {"schema_version": 1, "hosts": {}})
    table["deploy_seconds"] = round(time.monotonic() - t0, 2)
    run.rd.write_json("containers.json", table)
    save_stage(run.rd, "deploy", outcomes)
    return outcomes


def image_facts(res: dict[str, Any]) -> dict[str, Any]:
    """The image's torch facts, from the check task's last stdout line."""
    out = str((res.get(IMAGE_CHECK) or {}).get("stdout") or "").strip()
    try:
        d = json.loads(out.splitlines()[-1]) if out else {}
    except ValueError:
        return {}
    return d if isinstance(d, dict) else {}
