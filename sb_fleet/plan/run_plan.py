"""The plan: what runs where, as data, before anything touches a host.

``build_plan(config, inventory)`` is pure. It resolves the config's enabled
benchmark entries into runnable entries (models expanded, aliases resolved),
sets aside those this suite does not have (with the reason), and groups the
entries into steps: consecutive single-node entries share one step (one
runner invocation per host), and each multi-node entry is a step of its own,
with its hosts split into node groups, each with a master and node ranks.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from sb_fleet.config.fleet_config import BenchmarkEntry, Config
from sb_fleet.config.inventory import Host, Inventory, is_playbook_python
from sb_fleet.config.traffic_patterns import PatternSpec, Schedule, estimate_cost, mpi_pattern_text, round_key
from sb_fleet.plan.pattern_plan import group_port, head_args, load_topology, mpi_member, schedule_for
from sb_fleet.plan.workspace import HOST_PLACEHOLDER, workspace_template

PLAN_SCHEMA = 2


@dataclass(frozen=True)
class RunEntry:
    key: str  # result directory and summary prefix: "gemm-flops" or "gpt_models/pytorch-gpt2-small"
    entry: str  # the config's benchmark entry name
    benchmark: str  # the suite's registry name
    params: dict[str, Any]
    modes: tuple[dict[str, Any], ...]
    timeout: int
    multi_node: bool = False
    node_num: int | str = 1
    port_offset: int = 0
    pattern: dict[str, Any] | None = None  # the multi-node mode's pattern (SuperBench's keys), if any
    launcher: str = "torchrun"  # multi-node: torchrun on every node, or mpirun from each group's first node

    def spec(self) -> dict[str, Any]:
        """This entry as the on-host runner reads it."""
        return {
            "key": self.key,
            "entry": self.entry,
            "benchmark": self.benchmark,
            "params": self.params,
            "modes": list(self.modes),
            "timeout": self.timeout,
            "port_offset": self.port_offset,
        }


@dataclass(frozen=True)
class NodeGroup:
    hosts: tuple[str, ...]
    master: str  # address of the first host: the rendezvous point
    mode_index: str | None = None  # a pattern round's "serial,parallel" (SuperBench's indexes)
    parallel: int = 0  # the group's index in its round: its own rendezvous port
    mpi: dict[str, Any] | None = None  # mpi: members, host-key policy and known_hosts (pattern_plan.py)

    @property
    def targets(self) -> tuple[str, ...]:
        """The hosts that run the runner: every node, or (mpi) the first, whose mpirun starts the rest."""
        return self.hosts[:1] if self.mpi is not None else self.hosts

    def node_args(self, inv: Inventory, master_port: int) -> dict[str, list[str]]:
        master_port = group_port(master_port, self.parallel)
        if self.mpi is not None:
            return {self.hosts[0]: head_args(self.mpi, master_port, self.mode_index)}
        extra = ["--mode-index", self.mode_index] if self.mode_index else []
        n = len(self.hosts)
        return {
            h: [
                "--node-rank",
                str(i),
                "--nnodes",
                str(n),
                "--master-addr",
                self.master,
                "--master-port",
                str(master_port),
                "--local-addr",
                inv.get(h).address,
                *extra,
            ]
            for i, h in enumerate(self.hosts)
        }


@dataclass(frozen=True)
class Step:
    id: str
    entries: tuple[RunEntry, ...]
    timeout: int
    groups: tuple[NodeGroup, ...] = ()  # multi-node steps only
    left_out: tuple[str, ...] = ()  # hosts that fit no node group
    label: str = ""  # a pattern round: "tcp-bw pair-wise round 3/7"
    # fleet.run_timeout: the host's deadline for all the run's steps together (its runner keeps the clock)
    run_timeout: int | None = None

    @property
    def multi_node(self) -> bool:
        return bool(self.groups)


@dataclass(frozen=True)
class HostSetup:
    workspace: str
    python: str  # the Python the suite runs with (the venv's when fleet.venv)
    base_python: str


@dataclass(frozen=True)
class Plan:
    hosts: tuple[str, ...]
    host_setup: dict[str, HostSetup]
    steps: tuple[Step, ...]
    benchmarks: tuple[str, ...]  # enabled config entries expected on every host
    unsupported: dict[str, str] = field(default_factory=dict)  # entry -> reason
    patterns: dict[str, dict[str, Any]] = field(
        default_factory=dict
    )  # entry key -> rounds, cost (pattern_plan)

    def entries(self) -> list[RunEntry]:
        return [e for s in self.steps for e in s.entries]

    def to_json(self) -> dict:
        return {
            "schema_version": PLAN_SCHEMA,
            "hosts": list(self.hosts),
            "benchmarks": list(self.benchmarks),
            "entries": [e.key for e in self.entries()],
            "unsupported": self.unsupported,
            "patterns": self.patterns,
            "host_setup": {h: asdict(s) for h, s in self.host_setup.items()},
            "steps": [
                {
                    "id": s.id,
                    "timeout": s.timeout,
                    "entries": [
                        {
                            **e.spec(),
                            "multi_node": e.multi_node,
                            "node_num": e.node_num,
                            "pattern": e.pattern,
                            "launcher": e.launcher,
                        }
                        for e in s.entries
                    ],
                    "groups": [asdict(g) for g in s.groups],
                    "left_out": list(s.left_out),
                    "label": s.label,
                    "run_timeout": s.run_timeout,
                }
                for s in self.steps
            ],
        }

    @classmethod
    def from_json(cls, d: dict) -> Plan:
        """The plan as :meth:`to_json` wrote it. Raises ValueError/KeyError/TypeError on a foreign file."""
        if d.get("schema_version") != PLAN_SCHEMA:
            raise ValueError(f"plan schema_version {d.get('schema_version')!r}, expected {PLAN_SCHEMA}")
        steps = []
        for s in d["steps"]:
            entries = tuple(
                RunEntry(
                    key=str(e["key"]),
                    entry=str(e["entry"]),
                    benchmark=str(e["benchmark"]),
                    params=dict(e["params"]),
                    modes=tuple(dict(m) for m in e["modes"]),
                    timeout=int(e["timeout"]),
                    multi_node=bool(e["multi_node"]),
                    node_num=e["node_num"],
                    port_offset=int(e.get("port_offset", 0)),
                    pattern=e.get("pattern"),
                    launcher=str(e.get("launcher", "torchrun")),
                )
                for e in s["entries"]
            )
            groups = tuple(
                NodeGroup(
                    tuple(g["hosts"]),
                    str(g["master"]),
                    g.get("mode_index"),
                    int(g.get("parallel", 0)),
                    g.get("mpi"),
                )
                for g in s["groups"]
            )
            steps.append(
                Step(
                    str(s["id"]),
                    entries,
                    int(s["timeout"]),
                    groups,
                    tuple(s["left_out"]),
                    str(s.get("label", "")),
                    None if s.get("run_timeout") is None else int(s["run_timeout"]),
                )
            )
        return cls(
            hosts=tuple(d["hosts"]),
            host_setup={h: HostSetup(**v) for h, v in d["host_setup"].items()},
            steps=tuple(steps),
            benchmarks=tuple(d["benchmarks"]),
            unsupported=dict(d["unsupported"]),
            patterns=dict(d.get("patterns", {})),
        )

    def describe(self) -> str:
        """A human-readable plan for --dry-run."""
        lines = [
            f"{len(self.hosts)} host(s): {', '.join(self.hosts[:8])}{' …' if len(self.hosts) > 8 else ''}"
        ]
        for s in self.steps:
            kind = f"multi-node, {len(s.groups)} group(s)" if s.multi_node else "every host"
            lines.append(f"{s.id} ({kind}, timeout {s.timeout} s){(': ' + s.label) if s.label else ''}:")
            for e in s.entries:
                modes = ", ".join(
                    f"{m['name']}×{m.get('proc_num', 1)}"
                    + (f" on {m.get('node_num')} nodes" if e.multi_node else "")
                    for m in e.modes
                )
                lines.append(f"  {e.key:<40} {e.benchmark:<28} [{modes}] timeout {e.timeout} s")
            for g in s.groups:
                lines.append(f"  group master {g.master}: {', '.join(g.hosts)}")
            if s.left_out:
                lines.append(f"  left out (no full group): {', '.join(s.left_out)}")
        caps = {s.run_timeout for s in self.steps if s.run_timeout is not None}
        if caps:
            lines.append(
                f"every host's runs together: at most {max(caps)} s (fleet.run_timeout; what is still "
                "running then is stopped, what has not started is not)"
            )
        for name, info in self.patterns.items():
            lines.append(f"pattern {name}: {info['cost']}")
        for name, why in self.unsupported.items():
            lines.append(f"not run: {name}: {why}")
        return "\n".join(lines)


def host_setup(host: Host, config: Config) -> HostSetup:
    ws = workspace_template(host, config).replace(HOST_PLACEHOLDER, host.name)
    base = str(host.vars.get("sb_python") or config.fleet.python)
    if is_playbook_python(base):  # the default inventory's: the Python ansible-playbook runs on (ours)
        base = sys.executable
    py = "venv/bin/python" if config.fleet.venv else base  # relative to the workspace
    return HostSetup(ws, py, base)


def expand_entry(
    name: str, entry: BenchmarkEntry, default_timeout: int, known: set[str] | None
) -> tuple[list[RunEntry], str | None]:
    """The runnable entries of one config entry, or the reason it cannot run."""
    from sb_fleet.plan.resources import import_suite

    import_suite()
    from sb_bench.core.registry import resolve

    targets = (
        [(f"{name}/{resolve(name, m)}", resolve(name, m)) for m in entry.models]
        if entry.models
        else [(name, resolve(name))]
    )
    missing = [b for _, b in targets if known is not None and b not in known]
    if missing:
        return [], f"benchmark {missing[0]!r} is not in this suite (see: sb-fleet bench list)"
    multi = any(m.multi_node for m in entry.modes)
    node_num = next((m.node_num for m in entry.modes if m.multi_node), 1)
    multi_mode = next((m for m in entry.modes if m.multi_node), None)
    pattern = multi_mode.pattern.model_dump() if multi_mode and multi_mode.pattern else None
    launcher = "mpirun" if multi_mode is not None and multi_mode.name == "mpi" else "torchrun"
    if multi_mode is not None and multi_mode.name == "mpi" and pattern is None:
        node_num = "all"  # SuperBench: one mpirun across every node
    modes = tuple(
        # a pattern's group is the mode's world: node_num all (the runner takes the group's size)
        {**m.model_dump(exclude_none=True, exclude={"pattern"}), **({"node_num": "all"} if m.pattern else {})}
        for m in entry.modes
    )
    timeout = entry.timeout or default_timeout
    return [
        RunEntry(k, name, b, dict(entry.parameters), modes, timeout, multi, node_num, 0, pattern, launcher)
        for k, b in targets
    ], None


@dataclass(frozen=True)
class GivenRounds:
    """Rounds chosen by sb-fleet rather than by a pattern: a second pass or a bisection round of a
    pattern entry (:mod:`sb_fleet.fleet.pattern_followup`). ``kind`` names them in the plan and in
    mpi_pattern.txt; each round's groups run at once, with SuperBench's round and group indexes."""

    kind: str
    rounds: tuple[tuple[tuple[str, ...], ...], ...]

    @classmethod
    def of(cls, kind: str, rounds: Sequence[Sequence[Sequence[str]]]) -> GivenRounds:
        return cls(kind, tuple(tuple(tuple(g) for g in rnd) for rnd in rounds))


def build_plan(
    config: Config,
    inventory: Inventory,
    known: set[str] | None = None,
    given: Mapping[str, GivenRounds] | None = None,
) -> Plan:
    """Resolve the config against the inventory. ``known``: the suite's benchmark names (None: don't check).
    ``given``: entry key -> rounds that replace that multi-node entry's pattern (a follow-up pass)."""
    if known is None:
        from sb_fleet.plan.resources import import_suite

        import_suite()
        from sb_bench.core.registry import names

        known = set(names())
    hosts = tuple(inventory.names())
    enabled = config.superbench.enabled()
    unsupported: dict[str, str] = {}
    runnable: list[RunEntry] = []
    for name, entry in enabled.items():
        got, why = expand_entry(name, entry, config.fleet.default_timeout, known)
        if why:
            unsupported[name] = why
        runnable.extend(got)
    steps: list[Step] = []
    batch: list[RunEntry] = []
    port_offset = 0

    def flush() -> None:
        if batch:
            steps.append(
                Step(
                    f"step{len(steps) + 1:02d}",
                    tuple(batch),
                    sum(e.timeout for e in batch) + config.fleet.step_margin,
                )
            )
            batch.clear()

    setups = {h.name: host_setup(h, config) for h in inventory.hosts}
    patterns: dict[str, dict[str, Any]] = {}
    for e in runnable:
        if not e.multi_node:
            batch.append(e)
            continue
        flush()
        if e.pattern is not None or e.launcher == "mpirun" or e.key in (given or {}):
            e = RunEntry(**{**asdict(e), "port_offset": port_offset})
            port_offset += 1
            round_steps, info = pattern_steps(
                e, inventory, config, setups, len(steps), (given or {}).get(e.key)
            )
            steps.extend(round_steps)
            patterns[e.key] = info
            continue
        groups, left = node_groups(inventory, e.node_num)
        e = RunEntry(**{**asdict(e), "port_offset": port_offset})
        port_offset += 1
        steps.append(
            Step(
                f"step{len(steps) + 1:02d}",
                (e,),
                e.timeout + config.fleet.step_margin,
                tuple(groups),
                tuple(left),
            )
        )
    flush()
    cap = config.fleet.run_timeout
    if cap is not None:
        # One deadline per host for every step together: no step outlives it (plus its margin).
        steps = [
            replace(s, timeout=min(s.timeout, cap + config.fleet.step_margin), run_timeout=cap) for s in steps
        ]
    return Plan(hosts, setups, tuple(steps), tuple(enabled), unsupported, patterns)


def node_groups(inventory: Inventory, node_num: int | str) -> tuple[list[NodeGroup], list[str]]:
    """Split the hosts into consecutive groups of ``node_num`` (``all``: one group)."""
    hosts = list(inventory.hosts)
    size = len(hosts) if node_num == "all" else int(node_num)
    groups = []
    for i in range(0, len(hosts) - size + 1, size):
        chunk = hosts[i : i + size]
        groups.append(NodeGroup(tuple(h.name for h in chunk), chunk[0].address))
    used = {h for g in groups for h in g.hosts}
    return groups, [h.name for h in hosts if h.name not in used]


def pattern_steps(
    e: RunEntry,
    inventory: Inventory,
    config: Config,
    setups: dict[str, HostSetup],
    before: int,
    given: GivenRounds | None = None,
) -> tuple[list[Step], dict[str, Any]]:
    """One multi-node step per round of the entry's pattern (no pattern, mpi: one round of every node;
    ``given``: those rounds instead of the pattern's).

    Each round's results go to their own directory (``<key>@<round>``) and the groups of a round run
    at the same time; rounds run one after the other, each under the entry's timeout."""
    spec = PatternSpec.model_validate(e.pattern) if e.pattern is not None else None
    names = inventory.names()
    if given is not None:
        unknown = sorted({h for rnd in given.rounds for g in rnd for h in g} - set(names))
        if unknown:
            raise ValueError(f"{given.kind} rounds name host(s) not in the run: {', '.join(unknown)}")
        sched = Schedule(given.kind, tuple(names), given.rounds)
        # each given group is the mode's world, whatever node_num the entry had
        modes = tuple(
            {**m, "node_num": "all"} if m.get("name") in ("mpi", "torch.distributed") else m for m in e.modes
        )
        e = RunEntry(**{**asdict(e), "modes": modes})
    else:
        sched = schedule_for(spec, names, load_topology(spec) if spec is not None else None)
    indexed = spec is not None or given is not None
    steps: list[Step] = []
    total = len(sched.rounds)
    for r, rnd in enumerate(sched.rounds):
        groups = []
        for p, hosts in enumerate(rnd):
            mpi = None
            if e.launcher == "mpirun":
                mpi = {
                    "members": [mpi_member(inventory.get(h), setups[h]) for h in hosts],
                    "policy": config.fleet.host_key_checking,
                    "known_hosts": config.fleet.known_hosts or "~/.ssh/known_hosts",
                }
            index = f"{r},{p}" if indexed else None
            groups.append(NodeGroup(tuple(hosts), inventory.get(hosts[0]).address, index, p, mpi))
        entry = RunEntry(**{**asdict(e), "key": round_key(e.key, r) if indexed else e.key})
        busy = {h for g in rnd for h in g}
        label = f"{e.key} {sched.pattern} round {r + 1}/{total}" + (
            f" ({sched.labels[r]})" if r < len(sched.labels) else ""
        )
        steps.append(
            Step(
                f"step{before + len(steps) + 1:02d}",
                (entry,),
                e.timeout + config.fleet.step_margin,
                tuple(groups),
                tuple(h for h in names if h not in busy),
                label,
            )
        )
    cost = estimate_cost(
        sched, e.timeout + config.fleet.step_margin, "at most the benchmark's timeout per round"
    )
    info = {
        "type": sched.pattern,
        "pattern": e.pattern,
        "launcher": e.launcher,
        "rounds": [[list(g) for g in rnd] for rnd in sched.rounds],
        "labels": list(sched.labels),
        "unused": {h: (sched.why_idle or {}).get(h, "in no group") for h in sched.unused()},
        "cost": cost.describe(),
        "cost_s": cost.total_s,
        "mpi_pattern": mpi_pattern_text(e.entry, sched),
    }
    return steps, info
