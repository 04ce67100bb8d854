"""What every stage shares: which hosts the previous stage left fit to go on, and the per-host values
the container stages pass."""

from __future__ import annotations

from typing import Any

from sb_fleet.outcome import HostOutcome, Outcome
from sb_fleet.plan.container_commands import device_vars
from sb_fleet.plan.render_container import settings
from sb_fleet.rundir.outcome_table import load_stage
from sb_fleet.rundir.rundir import RunDir
from sb_fleet.rundir.runinputs import RunInputs
from sb_fleet.safe_files import safe_name


def eligible(
    rd: RunDir, stage_before: str, hosts: list[str], stage: str
) -> tuple[list[str], dict[str, HostOutcome]]:
    """The hosts that ``stage_before`` left fit (or never saw), and a skip outcome for each other one."""
    prev = load_stage(rd, stage_before)
    if prev is None:
        return list(hosts), {}
    ok: list[str] = []
    skipped: dict[str, HostOutcome] = {}
    for h in hosts:
        o = prev.get(h)
        if o is None or o.outcome == Outcome.OK:
            ok.append(h)
        elif o.outcome == Outcome.OUT_OF_SERVICE:  # not in service: every stage says so, with why
            skipped[h] = HostOutcome(h, stage, Outcome.OUT_OF_SERVICE, o.reason)
        else:
            skipped[h] = HostOutcome(
                h, stage, Outcome.SKIPPED, f"{stage_before} {o.outcome.value}: {o.reason}"
            )
    return ok, skipped


def container_vars(run: RunInputs, hosts: list[str]) -> dict[str, Any]:
    """With a container runtime: each host's GPU and RDMA flags from ``facts/<host>.json`` (deploy's), as
    the extra variables of the playbook that starts its containers. A host without facts gets none."""
    runtime = run.config.fleet.runtime
    if runtime == "none":
        return {}
    facts = {h: run.rd.read_json(f"facts/{safe_name(h)}.json", {}) for h in hosts}
    facts = {h: f if isinstance(f, dict) else {} for h, f in facts.items()}
    return device_vars(runtime, settings(run.config), facts)


def remote_results(run: RunInputs, host: str) -> str:
    """Where the runner of this run writes its results on ``host``."""
    return f"{run.plan.host_setup[host].workspace.rstrip('/')}/runs/{run.run_id}/results"
