"""The deploy stage: prerequisites, the suite and its venv on every host, and each host's system facts."""

from __future__ import annotations

import json

from sb_fleet.execute import Executor
from sb_fleet.outcome import HostOutcome
from sb_fleet.outcome_table import save_stage
from sb_fleet.rundir import safe_name
from sb_fleet.runinputs import RunInputs
from sb_fleet.tasks import HOSTPREP, HOSTPREP_FAST


def deploy(run: RunInputs, ex: Executor, hosts: list[str]) -> dict[str, HostOutcome]:
    with ex.progress.stage("deploy", hosts):
        res = ex.run("deploy", run.rendered.deploy, hosts)
    for h, out in res.results.items():
        # the suite-on-stdin task when it ran, else the fast path (the suite was already there)
        facts = host_facts(out.get(HOSTPREP, {})) or host_facts(out.get(HOSTPREP_FAST, {}))
        if facts:
            run.rd.write_json(f"facts/{safe_name(h)}.json", {"host": h, **facts})
    save_stage(run.rd, "deploy", res.outcomes)
    return res.outcomes


def host_facts(res: dict) -> dict | None:
    """The facts hostprep prints as its last stdout line (a JSON object), or None."""
    out = str(res.get("stdout") or "").strip()
    if not out:
        return None
    try:
        facts = json.loads(out.splitlines()[-1])
    except ValueError:
        return None
    return facts if isinstance(facts, dict) else None
