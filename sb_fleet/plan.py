"""The plan: what runs where, as data, before anything touches a host.

``build_plan(config, inventory)`` is pure. It resolves the config's enabled
benchmark entries into runnable entries (models expanded, aliases resolved),
sets aside those this suite does not have (with the reason), and groups the
entries into steps: consecutive single-node entries share one step (one
runner invocation per host), and each multi-node entry is a step of its own,
with its hosts split into node groups, each with a master and node ranks.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from sb_fleet.config import BenchmarkEntry, Config
from sb_fleet.inventory import Host, Inventory

PLAN_SCHEMA = 2
STEP_MARGIN_S = 60  # on top of the entries' timeouts, for process start and result writing


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

    def node_args(self, inv: Inventory, master_port: int) -> dict[str, list[str]]:
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

    def entries(self) -> list[RunEntry]:
        return [e for s in self.steps for e in s.entries]

    def to_json(self) -> dict:
        return {
            "schema_version": PLAN_SCHEMA,
            "hosts": list(self.hosts),
            "benchmarks": list(self.benchmarks),
            "entries": [e.key for e in self.entries()],
            "unsupported": self.unsupported,
            "host_setup": {h: asdict(s) for h, s in self.host_setup.items()},
            "steps": [
                {
                    "id": s.id,
                    "timeout": s.timeout,
                    "entries": [
                        {**e.spec(), "multi_node": e.multi_node, "node_num": e.node_num} for e in s.entries
                    ],
                    "groups": [asdict(g) for g in s.groups],
                    "left_out": list(s.left_out),
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
                )
                for e in s["entries"]
            )
            groups = tuple(NodeGroup(tuple(g["hosts"]), str(g["master"])) for g in s["groups"])
            steps.append(Step(str(s["id"]), entries, int(s["timeout"]), groups, tuple(s["left_out"])))
        return cls(
            hosts=tuple(d["hosts"]),
            host_setup={h: HostSetup(**v) for h, v in d["host_setup"].items()},
            steps=tuple(steps),
            benchmarks=tuple(d["benchmarks"]),
            unsupported=dict(d["unsupported"]),
        )

    def describe(self) -> str:
        """A human-readable plan for --dry-run."""
        lines = [
            f"{len(self.hosts)} host(s): {', '.join(self.hosts[:8])}{' …' if len(self.hosts) > 8 else ''}"
        ]
        for s in self.steps:
            kind = f"multi-node, {len(s.groups)} group(s)" if s.multi_node else "every host"
            lines.append(f"{s.id} ({kind}, timeout {s.timeout} s):")
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
        for name, why in self.unsupported.items():
            lines.append(f"not run: {name}: {why}")
        return "\n".join(lines)


def host_setup(host: Host, config: Config) -> HostSetup:
    ws = str(host.vars.get("sb_workspace") or config.fleet.workspace).replace("{host}", host.name)
    base = str(host.vars.get("sb_python") or config.fleet.python)
    py = "venv/bin/python" if config.fleet.venv else base  # relative to the workspace
    return HostSetup(ws, py, base)


def expand_entry(
    name: str, entry: BenchmarkEntry, default_timeout: int, known: set[str] | None
) -> tuple[list[RunEntry], str | None]:
    """The runnable entries of one config entry, or the reason it cannot run."""
    from sb_fleet.resources import import_suite

    import_suite()
    from sb_bench.registry import resolve

    unsupported = [m.name for m in entry.modes if m.name == "mpi"]
    if unsupported:
        return [], "mode 'mpi' is not supported by sb-fleet yet (use local or torch.distributed)"
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
    modes = tuple(m.model_dump(exclude_none=True, exclude={"mca", "pattern"}) for m in entry.modes)
    timeout = entry.timeout or default_timeout
    return [
        RunEntry(k, name, b, dict(entry.parameters), modes, timeout, multi, node_num) for k, b in targets
    ], None


def build_plan(config: Config, inventory: Inventory, known: set[str] | None = None) -> Plan:
    """Resolve the config against the inventory. ``known``: the suite's benchmark names (None: don't check)."""
    if known is None:
        from sb_fleet.resources import import_suite

        import_suite()
        from sb_bench.registry import names

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
                Step(f"step{len(steps) + 1:02d}", tuple(batch), sum(e.timeout for e in batch) + STEP_MARGIN_S)
            )
            batch.clear()

    for e in runnable:
        if not e.multi_node:
            batch.append(e)
            continue
        flush()
        groups, left = node_groups(inventory, e.node_num)
        e = RunEntry(**{**asdict(e), "port_offset": port_offset})
        port_offset += 1
        steps.append(
            Step(f"step{len(steps) + 1:02d}", (e,), e.timeout + STEP_MARGIN_S, tuple(groups), tuple(left))
        )
    flush()
    return Plan(
        hosts,
        {h.name: host_setup(h, config) for h in inventory.hosts},
        tuple(steps),
        tuple(enabled),
        unsupported,
    )


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
