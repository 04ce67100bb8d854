"""What a campaign will do, before it does anything (``sb-fleet accept --dry-run``). Pure: the campaign, the
config as written, the inventory (and, for ``--resume DIR --dry-run``, the campaign's state) in; the plan
out, and its lines to print.

Per stage, in order: its kind, benchmarks, patterns, ``on_failure``, ``timeout``, drain policy, and its
runs (attempts, patterns and each pattern's rounds, a soak's rounds and its closing check), each run's
longest wall time by its deadlines (:mod:`sb_fleet.plan.deadlines`, as ``validate --dry-run`` bounds a run:
each benchmark's ``timeout`` cut by the stage's, + ``fleet.step_margin``, the health checks'
``health.exec_timeout``, hostprep, collect; ``forks`` hosts at a time), and the disk its run directories
take (:data:`ROUND_BYTES` + :data:`NODE_ROUND_BYTES` a node, measured). The campaign's wall time is given
as a range: at least the soaks' rounds at their pace, at most every run to its deadlines.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sb_fleet.campaign.campaign_state import CampaignState
from sb_fleet.campaign.gating import entrants
from sb_fleet.campaign.stage_judgement import StageConfigError, stage_config
from sb_fleet.config.campaign_spec import Campaign, Stage, format_duration
from sb_fleet.config.fleet_config import Config
from sb_fleet.config.hostlist import compress
from sb_fleet.config.inventory import Inventory
from sb_fleet.plan.deadlines import check_deadline, validate_deadlines, wall_bound
from sb_fleet.plan.run_plan import build_plan

# Disk of one run directory (a stage's attempt or pattern, a soak round), measured on the loopback fleet:
# docs/campaigns.md, "What a 72-hour soak of 1,000 nodes costs the control node" (2026-11-29): 53.2 KB per
# node (its raw results, health document, report rows, metrics.prom, junit) and 449 KB per run (the
# playbooks and the suite's archive). A GPU node's eight ranks write more. A soak's rounds but its first
# are compacted as they finish (below), unless its keep_rounds is all.
NODE_ROUND_BYTES = 53_200
ROUND_BYTES = 449_000
# The soak's judgement files (soak-<stage>.json and its rounds file), per node-round: 2.8 MB at 10 nodes x
# 4,320 rounds, 9.8 MB at 40 (the same section's table, bench/campaign_cost.py).
SOAK_FILES_NODE_ROUND_BYTES = 65
# A soak with ``keep_rounds: failed`` (the default) keeps its first round whole and compacts the others as
# they finish (sb_fleet/campaign/round_compaction.py); docs/campaigns.md, the cost section of 2026-12-07
# (bench/campaign_cost.py at 077525e): the series file ~90 bytes a node-round, a compacted round ~44 bytes
# a node (its kept report rows) and ~12 KB (manifest, config, metrics; a 1,000-node host list), the
# round's load.json ~100 bytes a node where the soak has a load, and each node's own files kept for at most
# 20 rounds it failed, was throttled or changed a counter in (~17 KB a round on the loopback fleet).
SERIES_NODE_ROUND_BYTES = 90
COMPACT_NODE_ROUND_BYTES = 44
COMPACT_ROUND_BYTES = 12_000
LOAD_NODE_ROUND_BYTES = 100
KEPT_ROUNDS_PER_NODE = 20
KEPT_NODE_ROUND_BYTES = 17_000
DISK_SOURCE = (
    "measured on the loopback fleet, docs/campaigns.md: 53.2 KB a node and 449 KB a run directory "
    "(2026-11-29; a GPU node's eight ranks write more), ~65 bytes a node-round of the soak's judgement "
    "files; a compacted soak round (keep_rounds: failed, 2026-12-07) ~44 bytes a node and ~12 KB, ~90 "
    "bytes a node-round of its series file, at most 20 whole rounds a node kept (~17 KB each)"
)
MAX_NAMES = 20  # nodes listed by name up to this many; past it, as a hostlist and cut


@dataclass(frozen=True)
class RunPlan:
    """One run of a stage: an attempt, a pattern of a fabric attempt, the soak's rounds or closing check."""

    label: str  # "attempt 1", "attempt 2 pair-wise", "round", "closing check"
    count: int  # how many such runs (a soak's rounds: their number)
    nodes: int
    bound_s: int  # one run's longest wall time by its deadlines
    steps: int = 0  # the run's steps (benchmark batches; a pattern's rounds)
    pattern_rounds: int = 0  # a fabric pattern's rounds (steps with a round label)


@dataclass(frozen=True)
class StagePlan:
    stage: Stage
    drains: bool
    nodes: int
    runs: tuple[RunPlan, ...]
    rounds_left: int = 0  # a soak: the rounds still to run (all of them, unless resumed)
    min_s: float = 0.0  # a soak: its rounds at their pace
    max_s: float = 0.0  # every run to its deadlines
    disk_bytes: float = 0.0
    notes: tuple[str, ...] = ()

    @property
    def run_dirs(self) -> int:
        return sum(r.count for r in self.runs)


@dataclass(frozen=True)
class CampaignPlan:
    campaign: str
    hosts: tuple[str, ...]
    forks: int
    stages: tuple[StagePlan, ...]
    done: tuple[str, ...] = ()  # --resume: the stages finished already
    node_round_bytes: float = NODE_ROUND_BYTES
    round_bytes: float = ROUND_BYTES
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def min_s(self) -> float:
        return sum(s.min_s for s in self.stages)

    @property
    def max_s(self) -> float:
        return sum(s.max_s for s in self.stages)

    @property
    def disk_bytes(self) -> float:
        return sum(s.disk_bytes for s in self.stages)


def run_bytes(
    nodes: int, node_round_bytes: float = NODE_ROUND_BYTES, round_bytes: float = ROUND_BYTES
) -> float:
    """One run directory's disk: a run's own files and each node's."""
    return round_bytes + node_round_bytes * nodes


def soak_disk(
    stage: Stage,
    nodes: int,
    rounds: int,
    closing: int,
    node_round_bytes: float = NODE_ROUND_BYTES,
    round_bytes: float = ROUND_BYTES,
) -> float:
    """A soak's disk for ``rounds`` rounds of ``nodes`` and ``closing`` closing checks: every round whole
    with ``keep_rounds: all``; else the first whole, the rest compacted, the series file, each node's
    files kept for at most :data:`KEPT_ROUNDS_PER_NODE` rounds (an upper bound), and the load's files."""
    whole = run_bytes(nodes, node_round_bytes, round_bytes)
    judged = rounds * nodes * SOAK_FILES_NODE_ROUND_BYTES + closing * whole
    if stage.keep_rounds == "all" or rounds == 0:
        return judged + rounds * whole
    compacted = (rounds - 1) * (COMPACT_ROUND_BYTES + nodes * COMPACT_NODE_ROUND_BYTES)
    kept = nodes * min(rounds - 1, KEPT_ROUNDS_PER_NODE) * KEPT_NODE_ROUND_BYTES
    load = rounds * nodes * LOAD_NODE_ROUND_BYTES if stage.load is not None else 0
    return judged + whole + compacted + kept + rounds * nodes * SERIES_NODE_ROUND_BYTES + load


def _stage_runs(
    stage: Stage, raw: Mapping[str, Any], inventory: Inventory, nodes: int, forks: int, direct: bool
) -> tuple[list[RunPlan], list[str]]:
    """One attempt's runs of a stage (a soak: one round's and its closing check), each bounded."""
    notes: list[str] = []
    if stage.kind == "sanity":
        cfg = Config.model_validate(dict(raw))
        return [RunPlan("health checks", 1, nodes, wall_bound([check_deadline(cfg)], nodes, forks))], notes
    patterns: list[str | None] = list(stage.patterns or ["all-nodes"]) if stage.kind == "fabric" else [None]
    runs: list[RunPlan] = []
    for pattern in patterns:
        try:
            cfg = Config.model_validate(stage_config(raw, stage, pattern))
            plan = build_plan(cfg, inventory)
        except (StageConfigError, ValueError) as exc:
            notes.append(f"{pattern or stage.name}: cannot be planned ({' '.join(str(exc).split())[:200]})")
            continue
        if not plan.steps:
            why = "; ".join(f"{k}: {v}" for k, v in plan.unsupported.items()) or "no benchmark is enabled"
            notes.append(f"{pattern or stage.name}: nothing to run ({why})")
        deadlines = validate_deadlines(cfg, plan, health=stage.kind == "soak", warm=True, ships=direct)
        runs.append(
            RunPlan(
                pattern or ("round" if stage.kind == "soak" else "run"),
                1,
                nodes,
                wall_bound(deadlines, nodes, forks),
                len(plan.steps),
                sum(1 for s in plan.steps if s.label),
            )
        )
    if stage.kind == "soak":
        cfg = Config.model_validate(dict(raw))
        runs.append(RunPlan("closing check", 1, nodes, wall_bound([check_deadline(cfg)], nodes, forks)))
    return runs, notes


def plan_stage(
    stage: Stage,
    raw: Mapping[str, Any],
    inventory: Inventory,
    forks: int,
    drains: bool,
    rounds_done: int = 0,
    direct: bool = True,
    node_round_bytes: float = NODE_ROUND_BYTES,
    round_bytes: float = ROUND_BYTES,
) -> StagePlan:
    """One stage on ``inventory``'s nodes (all of them enter: a node held out before only shortens it).
    ``direct``: validate's exec over sb-fleet's own clients (the first step's results come with it, as
    ``validate --dry-run`` decides: sb_fleet.fleet.workflow), else through Ansible (collect's deadline)."""
    n = len(inventory.hosts)
    one, notes = _stage_runs(stage, raw, inventory, n, forks, direct)
    if stage.kind == "soak":
        left = max(0, stage.rounds - rounds_done)
        rnd = [r for r in one if r.label != "closing check"]
        closing = [r for r in one if r.label == "closing check"]
        round_bound = sum(r.bound_s for r in rnd)
        pace = float(stage.round or 0)
        if round_bound > pace:
            notes.append(
                f"a round may take up to {duration(round_bound)} by its deadlines, more than its "
                f"{duration(pace)}: a round that runs longer delays the next (rounds start a round apart, "
                "or at once after one that ran longer)"
            )
        runs = tuple(
            RunPlan(r.label, left, r.nodes, r.bound_s, r.steps, r.pattern_rounds) for r in rnd
        ) + tuple(closing)
        return StagePlan(
            stage,
            drains,
            n,
            runs,
            rounds_left=left,
            min_s=left * pace,
            max_s=left * max(pace, round_bound) + sum(r.bound_s for r in closing),
            disk_bytes=soak_disk(stage, n, left, len(closing), node_round_bytes, round_bytes),
            notes=tuple(notes),
        )
    attempts = 2 if stage.on_failure == "retry_once" else 1
    runs = tuple(
        RunPlan(
            f"attempt {a}{' ' + r.label if r.label not in ('run', 'health checks') else ''}",
            1,
            r.nodes,
            r.bound_s,
            r.steps,
            r.pattern_rounds,
        )
        for a in range(1, attempts + 1)
        for r in one
    )
    return StagePlan(
        stage,
        drains,
        n,
        runs,
        max_s=sum(r.bound_s for r in runs),
        disk_bytes=len(runs) * run_bytes(n, node_round_bytes, round_bytes),
        notes=tuple(notes),
    )


def _only(inventory: Inventory, names: set[str]) -> Inventory:
    return Inventory(inventory.sources, tuple(h for h in inventory.hosts if h.name in names))


def plan_campaign(
    campaign: Campaign,
    raw_config: Mapping[str, Any],
    inventory: Inventory,
    forks: int | None = None,
    state: CampaignState | None = None,
    direct: bool = True,
    node_round_bytes: float = NODE_ROUND_BYTES,
    round_bytes: float = ROUND_BYTES,
) -> CampaignPlan:
    """The campaign's plan on ``inventory``'s nodes; with ``state`` (a resumed campaign), what remains:
    the stages not done on the nodes still active (a fabric stage next: its entrants), a soak's rounds
    left. ``forks``: hosts at once (default: the config's ``fleet.forks``); ``direct``: :func:`plan_stage`'s."""
    spec = campaign.spec
    cfg = Config.model_validate(dict(raw_config))
    at_once = forks or cfg.fleet.forks
    done: tuple[str, ...] = ()
    if state is not None:
        done = tuple(s.name for s in spec.stages if s.name in state.stages_done)
        inventory = _only(inventory, {h for h, n in state.hosts.items() if n.status == "active"})
    stages: list[StagePlan] = []
    for stage in spec.stages:
        if stage.name in done:
            continue
        inv = inventory
        if state is not None and stage.kind == "fabric" and not stages:  # next: its entrants are known
            inv = _only(inventory, set(entrants(spec, stage, state.status_map(), state.passed_map())))
        rounds_done = len(state.rounds_done(stage.name)) if state is not None else 0
        stages.append(
            plan_stage(
                stage,
                raw_config,
                inv,
                at_once,
                spec.drains(stage),
                rounds_done,
                direct,
                node_round_bytes,
                round_bytes,
            )
        )
    return CampaignPlan(
        str(campaign.path),
        tuple(h.name for h in inventory.hosts),
        at_once,
        tuple(stages),
        done,
        node_round_bytes,
        round_bytes,
    )


# -- printing


def duration(seconds: float) -> str:
    """``3d 4h``, ``2h 15m``, ``12m 30s``, ``45s``: two units at most, rounded up."""
    s = int(math.ceil(seconds))
    d, rest = divmod(s, 86400)
    h, rest = divmod(rest, 3600)
    m, sec = divmod(rest, 60)
    parts = [(d, "d"), (h, "h"), (m, "m"), (sec, "s")]
    first = next((i for i, (v, _) in enumerate(parts) if v), 3)
    shown = [f"{v}{u}" for v, u in parts[first : first + 2] if v]
    return " ".join(shown) or "0s"


def size(n: float) -> str:
    """Bytes in decimal units, as docs/campaigns.md gives them (1 KB = 1,000 bytes)."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n:.0f} B"


def node_names(hosts: Sequence[str], limit: int = MAX_NAMES) -> str:
    """Every name up to ``limit`` nodes; past it the hostlist (``gpu[001-950,960]``), cut at ~200 characters."""
    if len(hosts) <= limit:
        return ", ".join(hosts)
    text = compress(sorted(hosts))
    return text if len(text) <= 200 else text[:200].rsplit(",", 1)[0] + ", ..."


def _describe(st: StagePlan) -> str:
    s = st.stage
    parts = [f"{s.name} ({s.kind})"]
    if s.kind == "sanity":
        parts.append("checks " + (", ".join(s.checks) if s.checks is not None else "all"))
    else:
        parts.append(", ".join(s.benchmarks))
    if s.kind == "fabric":
        parts.append("patterns " + ", ".join(s.patterns or ["all-nodes"]))
    if s.kind == "soak" and s.duration is not None and s.round is not None:
        parts.append(f"{s.rounds} rounds of {format_duration(s.round)} ({format_duration(s.duration)})")
    parts.append(f"on_failure {s.on_failure}")
    if s.timeout is not None:
        parts.append(f"timeout {format_duration(s.timeout)}")
    parts.append("drain on_reject" if st.drains else "no drain until the campaign ends")
    return "; ".join(parts)


def _run_line(st: StagePlan, r: RunPlan) -> str:
    if r.label == "closing check":
        return f"the closing health check, at most {duration(r.bound_s)}"
    what = f"{r.pattern_rounds} pattern round(s)" if r.pattern_rounds else f"{r.steps} step(s)"
    if st.stage.kind == "soak":
        return f"{r.count} round(s) left of {st.stage.rounds}, each {what}, at most {duration(r.bound_s)} by its deadlines"
    if st.stage.kind == "sanity":
        again = " (on the nodes that failed attempt 1)" if r.label.startswith("attempt 2") else ""
        return f"{r.label}: the health checks{again}, at most {duration(r.bound_s)}"
    again = " (only the nodes that fail attempt 1)" if r.label.startswith("attempt 2") else ""
    return f"{r.label}{again}: {what}, at most {duration(r.bound_s)}"


def plan_lines(plan: CampaignPlan, resumed: bool = False) -> list[str]:
    """What ``accept --dry-run`` prints."""
    lines = [
        f"campaign {plan.campaign} (dry run: no host touched, nothing written)"
        if not resumed
        else f"campaign {plan.campaign}, resumed (dry run: no host touched, nothing written)"
    ]
    if resumed:
        lines.append("stages done: " + (", ".join(plan.done) or "none"))
        if not plan.stages:
            lines.append("nothing left to run: the campaign has finished every stage")
            return lines
    who = "node(s) still active" if resumed else "node(s)"
    lines.append(f"nodes: {len(plan.hosts)} {who}: {node_names(plan.hosts)}")
    lines.append("stages, in order" + (" (those left)" if resumed else "") + ":")
    for i, st in enumerate(plan.stages, 1):
        lines.append(f"  {i}. {_describe(st)}")
        lines.append(
            f"     {st.nodes} node(s) at most; {st.run_dirs} run director{'y' if st.run_dirs == 1 else 'ies'}"
        )
        lines += [f"     - {_run_line(st, r)}" for r in st.runs]
        if st.stage.kind == "soak":
            lines.append(
                f"     wall: {duration(st.min_s)} at its pace, at most {duration(st.max_s)}; disk: "
                f"{size(run_bytes(st.nodes, plan.node_round_bytes, plan.round_bytes))} a round"
                + (
                    ""
                    if st.stage.keep_rounds == "all"
                    else " while it runs (compacted once recorded: keep_rounds failed)"
                )
                + f", {size(st.disk_bytes)} in all"
            )
        else:
            lines.append(f"     wall: at most {duration(st.max_s)}; disk: at most {size(st.disk_bytes)}")
        lines += [f"     note: {n}" for n in st.notes]
    lines.append(
        f"estimated wall time: at least {duration(plan.min_s)} (the soak's rounds, a round's length apart), "
        f"at most {duration(plan.max_s)} (every run to its deadlines)"
    )
    lines.append(
        f"  assumes: every node enters every stage (a node held out only shortens it); {plan.forks} host(s) at "
        "once (--forks, else fleet.forks); the suite already on the hosts (a cold first run adds up to "
        "fleet.deploy_timeout); retry_once stages run twice; each run's deadlines as validate --dry-run "
        "gives them (each benchmark's timeout cut by the stage's, + fleet.step_margin; health.exec_timeout; "
        "fleet.prep_timeout; collect.host_timeout): real runs take far less than 'at most'"
    )
    lines.append(f"estimated disk (the campaign directory): {size(plan.disk_bytes)}")
    lines.append(f"  from: {DISK_SOURCE}; the history store's rows besides")
    lines += [f"note: {n}" for n in plan.notes]
    return lines
