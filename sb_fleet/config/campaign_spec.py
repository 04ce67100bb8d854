"""The acceptance campaign file: the stages a new cluster's nodes pass, in order, before they go into service.

A campaign file (YAML, ``campaigns/gpu-default.yaml``) names its stages in the order they run::

    version: 1
    stages:
      - {name: sanity, kind: sanity, checks: [gpu, xid, infiniband, host]}
      - {name: single-node, kind: single_node, benchmarks: [gemm-flops, mem-bw], on_failure: retry_once}
      - {name: fabric, kind: fabric, benchmarks: [nccl-bw], patterns: [pair-wise, all-nodes]}
      - name: burn-in
        kind: soak
        benchmarks: [gpu-burn, gemm-flops]
        duration: 72h
        round: 1h

Stage kinds, in the order a campaign may hold them: ``sanity`` (the health checks), ``single_node`` (per-node
benchmarks), ``fabric`` (pairs, then all nodes; only nodes that passed every single-node stage), ``soak``
(the same benchmarks round after round). Every key is checked (``extra="forbid"``); a problem is one
:class:`CampaignError` naming the file, line, column and field. docs/campaigns.md describes every key.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sb_fleet.config.traffic_patterns import PatternType
from sb_fleet.config.yamlsrc import LineMap, child_node, parse_yaml, read_capped
from sb_fleet.errors import InputError

StageKind = Literal["sanity", "single_node", "fabric", "soak"]
OnFailure = Literal["hold_out", "retry_once", "quarantine"]
Verdict = Literal["pass", "flaky"]
HealthProbe = Literal["gpu", "xid", "fabric_manager", "infiniband", "host"]
# drain: on_reject drains a node in Slurm as soon as a stage rejects or quarantines it (sb-fleet drain DIR's
# reason and log); never (the default) leaves Slurm to ``sb-fleet drain DIR`` once the campaign has ended.
DrainPolicy = Literal["never", "on_reject"]

# The order stages of each kind may come in: a fabric stage judges collectives, which one bad node corrupts,
# so every node in it has passed the single-node stages before; a soak comes last.
KIND_ORDER: dict[str, int] = {"sanity": 0, "single_node": 1, "fabric": 2, "soak": 3}

# The counters a soak watches (``watch``): every one only ever grows on a healthy node by zero. The names
# are the health checks' (docs/health-checks.md); a value per GPU, port or link is ``name[instance]``.
COUNTERS: dict[str, str] = {
    "gpu.xid": "hardware XID events in the kernel log",
    "gpu.ecc_uncorrected": "uncorrected ECC errors (volatile)",
    "gpu.ecc_corrected": "corrected ECC errors (volatile)",
    "gpu.row_remap": "remapped rows (correctable and uncorrectable)",
    "gpu.row_remap_failure": "row remapping failures",
    "gpu.retired_pages": "retired pages (GPUs before the A100)",
    "nvlink.replay": "NVLink replay errors",
    "nvlink.recovery": "NVLink recovery errors",
    "nvlink.crc": "NVLink CRC errors (flit and data)",
    "ib.symbol_error": "InfiniBand symbol errors",
    "ib.link_downed": "InfiniBand link-downed count",
    "ib.link_error_recovery": "InfiniBand link error recoveries",
    "ib.port_rcv_errors": "InfiniBand receive errors",
    "ib.port_xmit_discards": "InfiniBand transmit discards",
    "ib.local_link_integrity_errors": "InfiniBand local link integrity errors",
}
# What a soak watches when the file does not say: all but corrected ECC, which a healthy HBM shows now and then.
DEFAULT_COUNTERS: tuple[str, ...] = tuple(c for c in COUNTERS if c != "gpu.ecc_corrected")

# Bounds on a duration. A soak of more than 30 days is a typo (720h), and a round under 10 s cannot hold a
# benchmark run on a real node; a campaign of more than MAX_ROUNDS rounds writes that many run directories.
MIN_ROUND_S = 10.0
MAX_DURATION_S = 30 * 86400.0
MAX_ROUNDS = 10_000
MAX_STAGES = 32
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^\s*(\d{1,9}(?:\.\d{1,6})?)\s*([smhd])\s*$")
_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
# A benchmark entry of the config (``resnet_models``, ``gemm-flops``) and a SuperBench metric name
# (``gemm-flops/fp16_tc_flops:0``, ``model-benchmarks/pytorch-resnet50/fp32_train_throughput``).
_BENCHMARK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
_METRIC = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/#@+-]{0,255}$")


class CampaignError(InputError):
    """The campaign file is invalid (exit 2): one line naming the file, line, column and field."""


def parse_duration(value: Any) -> float:
    """``"90s"``, ``"10m"``, ``"72h"``, ``"2d"`` -> seconds. A bare number is refused: 60 could be either."""
    if isinstance(value, bool) or not isinstance(value, str):
        raise ValueError(
            f"a duration is a number and a unit, like 90s, 10m, 72h or 2d, not {value!r}"
            + (" (a bare number could be seconds or minutes)" if isinstance(value, (int, float)) else "")
        )
    m = _DURATION.match(value)
    if not m:
        raise ValueError(f"{value!r} is not a duration: write a number and a unit, like 90s, 10m, 72h or 2d")
    seconds = float(m.group(1)) * _UNITS[m.group(2)]
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"the duration {value!r} must be more than zero")
    if seconds > MAX_DURATION_S:
        raise ValueError(f"the duration {value!r} is longer than 30 days ({MAX_DURATION_S / 3600:.0f}h)")
    return seconds


def format_duration(seconds: float) -> str:
    """The shortest exact one of ``72h``, ``10m``, ``90s`` (for messages and the records)."""
    for unit in ("d", "h", "m"):
        q = seconds / _UNITS[unit]
        if q >= 1 and q == int(q):
            return f"{int(q)}{unit}"
    return f"{seconds:g}s"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Limit(_Strict):
    """A numeric criterion on one metric: its value must be at least ``min`` and at most ``max``."""

    min: float | None = Field(None, ge=-1e15, le=1e15)
    max: float | None = Field(None, ge=-1e15, le=1e15)

    @model_validator(mode="after")
    def _one(self) -> Limit:
        if self.min is None and self.max is None:
            raise ValueError("a limit needs min, max or both")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min:g} is above max {self.max:g}")
        return self

    def describe(self) -> str:
        parts = ([f">= {self.min:g}"] if self.min is not None else []) + (
            [f"<= {self.max:g}"] if self.max is not None else []
        )
        return " and ".join(parts)


class Criteria(_Strict):
    """What a node must show to pass a stage, on top of its benchmarks finishing (and, for sanity, its checks
    passing): the fleet verdict words it may end with, numeric limits per metric, and optionally a SuperBench
    rules file and baseline (paths relative to the campaign file)."""

    # A node passes with one of these report verdicts; ``flaky`` (failed, then passed its confirmation)
    # is a pass only where a campaign says so.
    verdicts: list[Verdict] = Field(
        default_factory=lambda: list[Verdict](["pass"]), min_length=1, max_length=2
    )
    # A health check that warns fails the sanity stage too.
    warn_fails: bool = False
    limits: dict[str, Limit] = Field(default_factory=dict, max_length=1000)
    rules: str | None = Field(None, max_length=4096)
    baseline: str | None = Field(None, max_length=4096)

    @field_validator("limits")
    @classmethod
    def _metrics(cls, v: dict[str, Limit]) -> dict[str, Limit]:
        for name in v:
            if not _METRIC.match(name):
                raise ValueError(
                    f"{name[:80]!r} is not a SuperBench metric name (like gemm-flops/fp16_tc_flops)"
                )
        return v


class Drift(_Strict):
    """How a figure that moves over the soak is judged (docs/campaigns.md, Drift)."""

    # The total change over the soak (least-squares slope x the soak's span) fails where it is worse than
    # k times its standard error, and larger than min_change (a fraction: 0.03 is 3%).
    k: float = Field(3.0, ge=1.0, le=20.0)
    min_change: float = Field(0.03, ge=0.0, le=1.0)
    min_rounds: int = Field(6, ge=3, le=MAX_ROUNDS)
    # Which metrics are judged (SuperBench names, ``:rank`` optional); empty: every metric the rounds report.
    metrics: list[str] = Field(default_factory=list, max_length=1000)

    @field_validator("metrics")
    @classmethod
    def _names(cls, v: list[str]) -> list[str]:
        for name in v:
            if not _METRIC.match(name):
                raise ValueError(
                    f"{name[:80]!r} is not a SuperBench metric name (like gemm-flops/fp16_tc_flops)"
                )
        return v


LoadKind = Literal["gpu-burn", "cpu-gemm"]


class Load(_Strict):
    """A soak round's load after its benchmarks, to the round's end (docs/campaigns.md, The load and
    telemetry): ``gpu-burn`` on GPU nodes, ``cpu-gemm`` on CPU nodes (sb_bench.host.burn). ``load:
    gpu-burn`` is ``load: {kind: gpu-burn}``."""

    kind: LoadKind
    interval: float = 5.0  # the telemetry's sample interval (a duration, 1s to 10m)
    margin: float = 3.0  # the load ends this long before the round does (a duration, 0s to 10m)
    size: int = Field(0, ge=0, le=65536)  # the GEMM's matrix size (0: 8192 on a GPU, 512 on a CPU)
    threads: int = Field(0, ge=0, le=4096)  # cpu-gemm: at most this many cores (0: every allotted one)
    # Limits on the telemetry under the load, each failing a node's round (None: recorded, not judged):
    # its hottest GPU temperature (degrees C); its lowest SM clock as a share of the round's fleet median
    # of that figure (a node held at a lower clock than the others under the same load).
    max_temp_c: float | None = Field(None, gt=0, le=200)
    min_clock_ratio: float | None = Field(None, gt=0, le=1)

    @field_validator("interval", "margin", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> float:
        return parse_duration(v)

    @field_validator("interval")
    @classmethod
    def _interval(cls, v: float) -> float:
        if not 1.0 <= v <= 600.0:
            raise ValueError(f"a sample interval of {format_duration(v)} is not between 1s and 10m")
        return v

    @field_validator("margin")
    @classmethod
    def _margin(cls, v: float) -> float:
        if v > 600.0:
            raise ValueError(f"a margin of {format_duration(v)} is more than 10m")
        return v


class Stage(_Strict):
    """One stage. Keys that belong to another kind (``duration`` on a fabric stage) are refused."""

    name: str = Field(pattern=_NAME)
    kind: StageKind
    description: str = Field("", max_length=1000)
    # Entries of the config's ``superbench.benchmarks`` (``gemm-flops``, ``resnet_models``)
    benchmarks: list[str] = Field(default_factory=list, max_length=100)
    criteria: Criteria = Field(default_factory=lambda: Criteria.model_validate({}))
    on_failure: OnFailure = "hold_out"
    timeout: float | None = None  # the whole stage's deadline per node (a duration)
    # sanity: which health probes run (default: all)
    checks: list[HealthProbe] | None = None
    # fabric: the traffic patterns, in order (pairs first find a bad link cheaply)
    patterns: list[PatternType] | None = None
    # soak
    duration: float | None = None
    round: float | None = None
    watch: list[str] | None = None  # counters (COUNTERS); default DEFAULT_COUNTERS
    counter_max_growth: int = Field(0, ge=0, le=1_000_000)
    max_failed_rounds: int = Field(0, ge=0, le=MAX_ROUNDS)
    max_throttled_windows: int = Field(0, ge=0, le=1_000_000)
    drift: Drift | None = None
    load: Load | None = None  # the load after each round's benchmarks (None: the nodes idle)
    # this stage's own drain policy (None: the campaign's ``drain``)
    drain: DrainPolicy | None = None
    # soak: which rounds' run directories stay whole once the round's line is in the soak's series file
    # (sb_fleet.campaign.round_compaction): "failed" (the nodes that failed, throttled or changed a watched
    # counter, at most 20 rounds a node, and the first round whole), or "all"
    keep_rounds: Literal["failed", "all"] = "failed"

    @field_validator("load", mode="before")
    @classmethod
    def _load(cls, v: Any) -> Any:
        return {"kind": v} if isinstance(v, str) else v

    @field_validator("timeout", "duration", "round", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> float | None:
        return None if v is None else parse_duration(v)

    @field_validator("benchmarks")
    @classmethod
    def _benchmarks(cls, v: list[str]) -> list[str]:
        for name in v:
            if not _BENCHMARK.match(name):
                raise ValueError(f"{name[:80]!r} is not a benchmark name (like gemm-flops or resnet_models)")
        if len(set(v)) != len(v):
            raise ValueError(f"a benchmark is named twice: {sorted(n for n in set(v) if v.count(n) > 1)}")
        return v

    @field_validator("watch")
    @classmethod
    def _watch(cls, v: list[str] | None) -> list[str] | None:
        for name in v or []:
            if name not in COUNTERS:
                raise ValueError(f"unknown counter {name[:80]!r}; known: {', '.join(COUNTERS)}")
        return v

    @property
    def rounds(self) -> int:
        """A soak's number of rounds (its duration over its round length); 0 for other kinds."""
        if self.duration is None or self.round is None:
            return 0
        return int(self.duration // self.round)

    @property
    def counters(self) -> tuple[str, ...]:
        return tuple(self.watch) if self.watch is not None else DEFAULT_COUNTERS

    @property
    def drift_settings(self) -> Drift:
        return self.drift if self.drift is not None else Drift.model_validate({})


class CampaignSpec(_Strict):
    version: Literal[1] = 1
    description: str = Field("", max_length=4000)
    # every stage's drain policy unless the stage gives its own
    drain: DrainPolicy = "never"
    stages: list[Stage] = Field(min_length=1, max_length=MAX_STAGES)

    def drains(self, stage: Stage) -> bool:
        """Whether a node ``stage`` rejects or quarantines is drained in Slurm at once (``drain: on_reject``,
        the stage's own or else the campaign's)."""
        return (stage.drain or self.drain) == "on_reject"

    def stage(self, name: str) -> Stage:
        for s in self.stages:
            if s.name == name:
                return s
        raise KeyError(name)


@dataclass(frozen=True)
class Campaign:
    """A loaded campaign file: the spec, where it came from, and the digest of its bytes (a resumed campaign
    must be the same file)."""

    spec: CampaignSpec
    path: Path
    digest: str  # sha256 of the file's bytes
    lines: LineMap

    def where(self, loc: Sequence[Any]) -> str:
        return _where(self.lines, loc)


# Keys only one kind of stage takes, and why.
_KIND_KEYS: dict[str, tuple[str, ...]] = {
    "checks": ("sanity",),
    "patterns": ("fabric",),
    "duration": ("soak",),
    "round": ("soak",),
    "watch": ("soak",),
    "counter_max_growth": ("soak",),
    "max_failed_rounds": ("soak",),
    "max_throttled_windows": ("soak",),
    "drift": ("soak",),
    "load": ("soak",),
    "keep_rounds": ("soak",),
}


def _key_position(lines: LineMap, loc: Sequence[Any]) -> tuple[int, int] | None:
    """(line, column) of the key ``loc[-1]`` itself (an unknown key is pointed at, not its value)."""
    parent = lines.root
    for part in loc[:-1]:
        parent = child_node(parent, part)
    if isinstance(parent, yaml.MappingNode) and loc:
        for k, _v in parent.value:
            if isinstance(k, yaml.ScalarNode) and k.value == str(loc[-1]):
                return (k.start_mark.line + 1, k.start_mark.column + 1)
    return None


def _where(lines: LineMap, loc: Sequence[Any], at_key: bool = False) -> str:
    field = ".".join(str(p) for p in loc) or "(top level)"
    pos = (_key_position(lines, loc) if at_key else None) or lines.position(loc)
    return f"line {pos[0]}, column {pos[1]}, field {field}" if pos else f"field {field}"


def _pydantic_error(path: Path, lines: LineMap, exc: ValidationError) -> CampaignError:
    err = exc.errors()[0]
    loc = tuple(err.get("loc", ()))
    typ = err.get("type", "")
    msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
    where = _where(lines, loc)
    hint: str | None
    if typ == "extra_forbidden":
        where = _where(lines, loc, at_key=True)
        msg, hint = (
            f"unknown key {str(loc[-1])[:80]!r}",
            "remove it or fix its spelling; docs/campaigns.md lists the keys",
        )
    elif typ == "missing":
        msg, hint = "required key is missing", "add it"
    else:
        inp = err.get("input")
        hint = f"got {inp!r}"[:120] if inp is not None and not isinstance(inp, (dict, list)) else None
    more = len(exc.errors()) - 1
    if more:
        msg += f" (and {more} more error{'s' if more > 1 else ''})"
    return CampaignError(path, where, msg, hint)


def _no_templates(node: yaml.Node | None, path: Path) -> None:
    """Refuse Jinja-looking text anywhere: a campaign file is data, and nothing in it is ever expanded."""
    stack = [node] if node is not None else []
    seen: set[int] = set()
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if isinstance(n, yaml.ScalarNode):
            if isinstance(n.value, str) and ("{{" in n.value or "{%" in n.value):
                raise CampaignError(
                    path,
                    f"line {n.start_mark.line + 1}, column {n.start_mark.column + 1}",
                    f"{n.value[:60]!r} looks like a template; a campaign file is never templated",
                    "write the value itself",
                )
        elif isinstance(n, yaml.SequenceNode):
            stack.extend(n.value)
        elif isinstance(n, yaml.MappingNode):
            stack.extend(c for kv in n.value for c in kv)


def _check_stages(spec: CampaignSpec, data: dict[str, Any], path: Path, lines: LineMap) -> None:
    """What one stage's model cannot see: the order of the stages, names used twice, keys of another kind,
    and a soak's own arithmetic."""
    raw = data.get("stages") or []
    seen: dict[str, int] = {}
    rank = -1
    single_node_before = False
    for i, st in enumerate(spec.stages):

        def fail(key: str | None, msg: str, hint: str | None = None, i: int = i) -> CampaignError:
            loc: tuple[Any, ...] = ("stages", i) + ((key,) if key else ())
            return CampaignError(path, _where(lines, loc), msg, hint)

        if st.name in seen:
            raise fail("name", f"stage name {st.name!r} is used twice (first by stage {seen[st.name] + 1})")
        seen[st.name] = i
        given = set(raw[i]) if i < len(raw) and isinstance(raw[i], dict) else set()
        for key, kinds in _KIND_KEYS.items():
            if key in given and st.kind not in kinds:
                raise fail(key, f"{key!r} is for {' and '.join(kinds)} stages, not {st.kind}", "remove it")
        if KIND_ORDER[st.kind] < rank:
            before = next(s for s in spec.stages[:i] if KIND_ORDER[s.kind] > KIND_ORDER[st.kind])
            raise fail(
                "kind",
                f"a {st.kind} stage cannot come after the {before.kind} stage {before.name!r}",
                "order the stages sanity, single_node, fabric, soak",
            )
        rank = KIND_ORDER[st.kind]
        if st.kind == "fabric" and not single_node_before:
            raise fail(
                "kind",
                "a fabric stage needs a single_node stage before it: one bad node corrupts a collective",
                "add a single_node stage before it",
            )
        single_node_before = single_node_before or st.kind == "single_node"
        if st.kind in ("single_node", "fabric", "soak") and not st.benchmarks:
            raise fail("benchmarks" if "benchmarks" in given else None, f"a {st.kind} stage needs benchmarks")
        if st.kind == "soak":
            if st.duration is None:
                raise fail(None, "a soak stage needs a duration (like 72h)", "add duration")
            if st.round is None:
                raise fail(None, "a soak stage needs a round length (like 1h)", "add round")
            if st.round < MIN_ROUND_S:
                raise fail(
                    "round", f"a round of {format_duration(st.round)} is shorter than {MIN_ROUND_S:g}s"
                )
            if st.round > st.duration:
                raise fail(
                    "round",
                    f"the round ({format_duration(st.round)}) is longer than the soak's duration "
                    f"({format_duration(st.duration)})",
                    "a soak holds at least one round",
                )
            if st.rounds > MAX_ROUNDS:
                raise fail("round", f"{st.rounds} rounds are more than {MAX_ROUNDS}", "use longer rounds")
            if st.load is not None and (st.load.margin >= st.round or st.load.interval > st.round):
                raise fail(
                    "load",
                    f"the load's margin ({format_duration(st.load.margin)}) and sample interval "
                    f"({format_duration(st.load.interval)}) must fit in a round of {format_duration(st.round)}",
                    "lower load.margin or load.interval, or lengthen the round",
                )
            drift = st.drift_settings
            if st.drift is not None and drift.min_rounds > st.rounds:
                raise fail(
                    "drift",
                    f"drift needs {drift.min_rounds} rounds and the soak has {st.rounds} "
                    f"({format_duration(st.duration)} of {format_duration(st.round)} rounds)",
                    "lower drift.min_rounds or lengthen the soak",
                )
            if st.on_failure == "retry_once":
                raise fail(
                    "on_failure",
                    "a soak is not retried: the retry would repeat the whole soak",
                    "use hold_out or quarantine, and max_failed_rounds for rounds that may fail",
                )


def parse_campaign(text: str, path: Path) -> Campaign:
    """Validate a campaign file's text (``path`` names it in errors); see :func:`load_campaign`."""
    path = Path(path)
    data, node = parse_yaml(text, path, "campaign file", CampaignError)
    lines = LineMap(node)
    _no_templates(node, path)
    if not isinstance(data, dict):
        raise CampaignError(
            path,
            _where(lines, ()),
            "a campaign file is a YAML mapping with a 'stages' list",
            "see campaigns/gpu-default.yaml",
        )
    try:
        spec = CampaignSpec.model_validate(data)
    except ValidationError as exc:
        raise _pydantic_error(path, lines, exc) from None
    _check_stages(spec, data, path, lines)
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return Campaign(spec=spec, path=path, digest=digest, lines=lines)


def load_campaign(path: Path) -> Campaign:
    """Load and validate a campaign file. Any problem is one :class:`CampaignError` naming the file, the line
    and column, the field, and what to do."""
    path = Path(path)
    return parse_campaign(read_capped(path, "campaign file", CampaignError), path)


def check_benchmarks(campaign: Campaign, available: Iterable[str], config_path: Path | str) -> None:
    """Every benchmark a stage names must be an entry of the config's ``superbench.benchmarks``
    (``available``); the first that is not is a :class:`CampaignError` at its line."""
    known = set(available)
    for i, st in enumerate(campaign.spec.stages):
        for j, name in enumerate(st.benchmarks):
            if name not in known:
                raise CampaignError(
                    campaign.path,
                    campaign.where(("stages", i, "benchmarks", j)),
                    f"stage {st.name!r}: benchmark {name!r} is not in the config {config_path}",
                    f"the config has: {', '.join(sorted(known)) or 'no benchmarks'}",
                )
