"""Each stage's deadline for one host, and the bound they put on ``validate``'s wall time. Pure.

A host past its stage's deadline ends that stage ``timeout`` (its processes stopped, the other hosts go
on; :mod:`sb_fleet.fleet.reaper`). The deadlines come from the config:

==============  =================================================================================
(allocation)    ``slurm.grant_timeout`` once, under ``launcher: slurm`` when sb-fleet allocates
health checks   ``health.exec_timeout`` (default 120 s)
deploy          ``fleet.deploy_timeout`` (default 3600 s), plus the first step's deadline when validate
                starts that step in deploy's own exec
image           ``fleet.deploy_timeout`` (container runtimes: the image onto each host)
each run step   its benchmarks' timeouts (``timeout``, else ``fleet.default_timeout``) +
                ``fleet.step_margin`` (default 60 s)
collect         ``collect.host_timeout`` (default 900 s)
==============  =================================================================================

Hosts go ``fleet.forks`` at a time, so a stage of n hosts lasts at most ceil(n / forks) deadlines, plus
:data:`STAGE_MARGIN_S` (Ansible's start, the stop of what is past its deadline); validate at most the
sum over its stages (:func:`wall_bound`). The executor cancels a stage that outlives its own bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sb_fleet.config.fleet_config import Config
from sb_fleet.plan.run_plan import Plan

STAGE_MARGIN_S = 30  # per stage: Ansible's start and end, and the stop of a host past its deadline
# validate's one exec: the host's timeout sends SIGKILL this long after the checks' SIGTERM at
# health.exec_timeout (deploy.yml's sb_health_first.kill_after)
HEALTH_KILL_AFTER_S = 5


@dataclass(frozen=True)
class Deadline:
    """A host's deadline in one stage: ``seconds`` from the start of its first task there; ``label``
    names the stage in the host's reason, ``source`` the config key it comes from."""

    seconds: int
    label: str
    source: str
    per_host: bool = True  # False: one wait for the whole fleet (the Slurm allocation)

    def stage_bound(self, hosts: int, forks: int) -> int:
        """The most a stage of ``hosts`` hosts, ``forks`` at a time, may last."""
        waves = max(1, math.ceil(hosts / max(1, forks))) if self.per_host else 1
        return waves * self.seconds + STAGE_MARGIN_S


def check_deadline(config: Config) -> Deadline:
    return Deadline(config.health.exec_timeout, "health checks", "health.exec_timeout")


def deploy_deadline(config: Config, first_step_s: int = 0, health: bool = False) -> Deadline:
    """deploy's; ``first_step_s``: the first step's deadline when it rides with deploy; ``health``: the
    health checks open the same exec (validate's nightly path; bounded on the host at health.exec_timeout,
    then :data:`HEALTH_KILL_AFTER_S` for its kill)."""
    if health:
        return Deadline(
            config.health.exec_timeout + HEALTH_KILL_AFTER_S + config.fleet.deploy_timeout + first_step_s,
            "health checks, deploy and the first step",
            "health.exec_timeout + 5 + fleet.deploy_timeout + the first step's deadline (one exec)",
        )
    if first_step_s:
        return Deadline(
            config.fleet.deploy_timeout + first_step_s,
            "deploy",
            "fleet.deploy_timeout + the first step's deadline, which rides with deploy",
        )
    return Deadline(config.fleet.deploy_timeout, "deploy", "fleet.deploy_timeout")


def image_deadline(config: Config) -> Deadline:
    return Deadline(config.fleet.deploy_timeout, "deploy image", "fleet.deploy_timeout")


def step_deadline(step_id: str, timeout: int) -> Deadline:
    """``timeout``: the plan's, its benchmarks' timeouts + fleet.step_margin."""
    return Deadline(timeout, step_id, "its benchmarks' timeouts + fleet.step_margin")


def collect_deadline(config: Config) -> Deadline:
    return Deadline(config.collect.host_timeout, "collect", "collect.host_timeout")


def validate_deadlines(config: Config, plan: Plan, health: bool = True) -> list[Deadline]:
    """validate's stages in order, each with its deadline per host."""
    out = []
    if config.fleet.launcher == "slurm" and not config.slurm.job_id:  # salloc waits for the nodes first
        out.append(Deadline(config.slurm.grant_timeout, "slurm allocation", "slurm.grant_timeout", False))
    if health and config.health.enabled:
        out.append(check_deadline(config))
    out.append(deploy_deadline(config))
    if config.fleet.runtime != "none":
        out.append(image_deadline(config))
    out += [step_deadline(s.id, s.timeout) for s in plan.steps]
    out.append(collect_deadline(config))
    return out


def wall_bound(deadlines: list[Deadline], hosts: int, forks: int) -> int:
    """The most the stages may last together (each at most its :meth:`Deadline.stage_bound`)."""
    return sum(d.stage_bound(hosts, forks) for d in deadlines)


def describe_bound(deadlines: list[Deadline], hosts: int, forks: int) -> str:
    """What ``--dry-run`` prints: each stage's deadline per host, and validate's bound."""
    waves = max(1, math.ceil(hosts / max(1, forks)))
    width = max(len(d.label) for d in deadlines)
    lines = ["deadlines per host (a host past one ends that stage 'timeout'; the others go on):"]
    lines += [
        f"  {d.label:<{width}}  {d.seconds:>6} s  ({d.source}{'' if d.per_host else ', once for the fleet'})"
        for d in deadlines
    ]
    total = wall_bound(deadlines, hosts, forks)
    lines.append(
        f"validate's wall time: at most {total} s ({total / 60:.1f} min): {hosts} host(s), {forks} at once "
        f"({waves} wave(s) per stage), + {STAGE_MARGIN_S} s per stage; confirmation re-runs and pattern "
        "follow-ups, when they happen, add their own stages"
    )
    return "\n".join(lines)
