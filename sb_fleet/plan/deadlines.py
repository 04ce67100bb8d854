"""Each stage's deadline for one host, and the bound they put on ``validate``'s wall time. Pure.

A host past its stage's deadline ends that stage ``timeout`` (its processes stopped, the other hosts go
on; :mod:`sb_fleet.fleet.reaper`). The deadlines come from the config:

==============  =================================================================================
(allocation)    ``slurm.grant_timeout`` once, under ``launcher: slurm`` when sb-fleet allocates
health checks   ``health.exec_timeout`` (default 120 s)
deploy          ``fleet.deploy_timeout`` (default 3600 s), plus the first step's deadline when validate
                starts that step in deploy's own exec
hostprep        ``fleet.prep_timeout`` (default 180 s) where the suite is in place, in validate's one exec
                over sb-fleet's own ssh client, whose every phase keeps its own deadline, watched from the
                control node (:mod:`sb_fleet.fleet.exec_phases`); ``fleet.deploy_timeout`` where it installs
image           ``fleet.deploy_timeout`` (container runtimes: the image onto each host)
each run step   its benchmarks' timeouts (``timeout``, else ``fleet.default_timeout``) +
                ``fleet.step_margin`` (default 60 s)
collect         ``collect.host_timeout`` (default 900 s)
==============  =================================================================================

Hosts go ``fleet.forks`` at a time, so a stage of n hosts lasts at most ceil(n / forks) deadlines, plus
:data:`STAGE_MARGIN_S` (Ansible's start, the stop of what is past its deadline); validate at most the
sum over its stages (:func:`wall_bound`), for a nightly run (the suite in place) and a cold one (the suite
installed) apart. The executor cancels a stage that outlives its own bound.
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


def starts_in_exec(config: Config, plan: Plan) -> bool:
    """Whether validate starts the plan's first step in deploy's own exec (deploy_stage.can_start: no
    container image between deploy and run, one host at a time)."""
    steps = plan.steps
    return bool(steps) and config.fleet.runtime == "none" and not steps[0].multi_node and not steps[0].label


def validate_deadlines(
    config: Config,
    plan: Plan,
    health: bool = True,
    *,
    warm: bool = False,
    phased: bool = True,
    ships: bool | None = None,
) -> list[Deadline]:
    """validate's stages in order, each with its deadline per host. ``warm``: the nightly case, the suite
    in place on every host (its one exec: the checks, hostprep within ``fleet.prep_timeout`` and the first
    step); else a cold run, where a host's exec says it lacks the suite and the suite's transfer follows
    (an install: ``fleet.deploy_timeout``). ``phased``: each phase of that exec keeps its own deadline
    (sb-fleet's own clients read its marker lines as they come, or through Ansible the host watches
    them itself: sb_fleet.fleet.exec_phases); else the exec has only its whole deadline,
    fleet.deploy_timeout's included. ``ships``: the first step's results come with the exec (sb-fleet's
    own clients only; default: ``phased``)."""
    ships = phased if ships is None else ships
    out = []
    if config.fleet.launcher == "slurm" and not config.slurm.job_id:  # salloc waits for the nodes first
        out.append(Deadline(config.slurm.grant_timeout, "slurm allocation", "slurm.grant_timeout", False))
    checks = health and config.health.enabled
    first = plan.steps[0] if starts_in_exec(config, plan) else None
    prep_s, prep_src = (
        (min(config.fleet.prep_timeout, config.fleet.deploy_timeout), "fleet.prep_timeout")
        if phased
        else (config.fleet.deploy_timeout, "fleet.deploy_timeout: the exec's whole deadline")
    )
    parts, srcs = [prep_s], [prep_src]
    if first is not None and checks:
        parts.insert(0, config.health.exec_timeout + HEALTH_KILL_AFTER_S)
        srcs.insert(0, "health.exec_timeout + 5")
        label = "health checks, hostprep and the first step (one exec, the suite in place)"
    elif checks:
        out.append(check_deadline(config))
        label = "deploy (the suite in place)"
    else:
        label = "deploy (the suite in place)" if first is None else "hostprep and the first step (one exec)"
    if first is not None:
        parts.append(first.timeout)
        srcs.append(f"{first.id}'s deadline")
    out.append(Deadline(sum(parts), label, " + ".join(srcs)))
    if not warm:  # the suite's transfer, where the exec said the host lacks it: an install
        extra = (config.health.exec_timeout + HEALTH_KILL_AFTER_S) if first is not None and checks else 0
        step_s = first.timeout if first is not None else 0
        out.append(
            Deadline(
                config.fleet.deploy_timeout + extra + step_s,
                "the suite's transfer (an install)" + (", the checks and the first step" if first else ""),
                "fleet.deploy_timeout"
                + (" + health.exec_timeout + 5" if extra else "")
                + (f" + {first.id}'s deadline" if first is not None else ""),
            )
        )
    if config.fleet.runtime != "none":
        out.append(image_deadline(config))
    out += [step_deadline(s.id, s.timeout) for s in plan.steps[1 if first is not None else 0 :]]
    if ships and first is not None and len(plan.steps) == 1:  # the results come with the exec
        out.append(
            Deadline(
                0,
                "collect (the results came with the exec)",
                f"read here; a host's past the exec's budgets: collect.host_timeout, {config.collect.host_timeout} s"
                " more",
            )
        )
    else:
        out.append(collect_deadline(config))
    return out


def wall_bound(deadlines: list[Deadline], hosts: int, forks: int) -> int:
    """The most the stages may last together (each at most its :meth:`Deadline.stage_bound`)."""
    return sum(d.stage_bound(hosts, forks) for d in deadlines)


def describe_bound(
    nightly: list[Deadline], cold: list[Deadline], hosts: int, forks: int, phased: bool = True
) -> str:
    """What ``--dry-run`` prints: each stage's deadline per host, and validate's bound, for a nightly run
    (the suite in place on every host) and for a cold one (the suite installed), separately."""
    waves = max(1, math.ceil(hosts / max(1, forks)))
    width = max(len(d.label) for d in [*nightly, *cold])

    def rows(deadlines: list[Deadline], skip: list[Deadline]) -> list[str]:
        return [
            f"  {d.label:<{width}}  {d.seconds:>6} s  ({d.source}{'' if d.per_host else ', once for the fleet'})"
            for d in deadlines
            if d not in skip
        ]

    lines = ["deadlines per host (a host past one ends that stage 'timeout'; the others go on):"]
    lines += ["nightly (the suite in place):", *rows(nightly, [])]
    lines += ["cold (the suite installed on a host), instead or as well:", *rows(cold, nightly)]
    if not phased:
        lines.append(
            "  (the exec goes through Ansible here (fleet.exec_via: ansible, or a host whose inventory asks "
            "for Ansible's connection): the host watches its phases itself, with POSIX shell tools only (a "
            "host without setsid, mkfifo or mktemp holds its exec for the whole deadline); the suite's "
            "transfer to a cold host keeps its whole deadline, fleet.deploy_timeout's included)"
        )
    for name, deadlines in (("nightly", nightly), ("cold", cold)):
        total = wall_bound(deadlines, hosts, forks)
        lines.append(f"validate's wall time, {name}: at most {total} s ({total / 60:.1f} min)")
    lines.append(
        f"  ({hosts} host(s), {forks} at once: {waves} wave(s) per stage, + {STAGE_MARGIN_S} s per stage; "
        "confirmation re-runs and pattern follow-ups, when they happen, add their own stages)"
    )
    return "\n".join(lines)
