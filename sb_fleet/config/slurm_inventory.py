"""The fleet taken from Slurm: ``-i slurm:partition=gpu,state=idle`` or ``-i 'slurm:gpu[001-004]'``.

The spec is resolved on the jump box with Slurm's own ``sinfo`` (one line per node: name, NodeAddr,
state, partitions, reason) into an Ansible YAML inventory, written into the run directory as its
inventory snapshot (``inventory/slurm.yml``) beside the query and its answer
(``inventory/slurm-query.json``). Host variables (user, port, key...) come from the config's
``slurm.host_vars``; ``ansible_host`` is the node's NodeAddr where it differs from its name.

Everything Slurm answers is data: node names and addresses must look like host names (else the node is
refused with its line), and the inventory is written with a YAML dumper, never by pasting text.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator

from sb_fleet.config.hostlist import expand, split_top
from sb_fleet.errors import InventoryError

PREFIX = "slurm:"
KEYS = ("partition", "nodes", "state")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")
_ADDR = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,252}$")
SINFO_FORMAT = "%N|%o|%T|%P|%E"
QUERY_TIMEOUT_S = 60


class SlurmSettings(BaseModel):
    """``slurm:`` in the config: how sb-fleet reaches the nodes that Slurm names, and Slurm's commands."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host_vars: dict[str, str | int | bool] = Field(default_factory=dict)  # e.g. ansible_user, ansible_port
    sinfo: str = "sinfo"
    scontrol: str = "scontrol"
    # fleet.launcher: slurm (sb_fleet/fleet/slurm_launch.py): the allocation every step runs in
    srun: str = "srun"
    salloc: str = "salloc"
    scancel: str = "scancel"
    squeue: str = "squeue"
    job_id: str | None = None  # a running allocation to use (else $SLURM_JOB_ID, else sb-fleet makes one)
    partition: str | None = None  # for the allocation sb-fleet makes
    reservation: str | None = None  # ... and nodes sb-fleet drained are re-tested inside it
    account: str | None = None
    time_limit: int = Field(240, ge=1, le=100_000)  # minutes, the allocation's limit
    grant_timeout: int = Field(600, ge=1, le=86_400)  # s to wait for the allocation (salloc --immediate)
    exclusive: bool = True  # no user job shares a node with the benchmarks

    @field_validator("host_vars")
    @classmethod
    def _plain_vars(cls, v: dict[str, str | int | bool]) -> dict[str, str | int | bool]:
        for k, val in v.items():
            if not re.fullmatch(r"[a-z_][a-z0-9_]{0,63}", k):
                raise ValueError(f"{k!r} is not a variable name (lowercase letters, digits, _)")
            if isinstance(val, str) and any(m in val for m in ("{{", "{%", "{#", "\n", "\0")):
                raise ValueError(f"{k}: no template markers or newlines in a host variable")
        return v

    @field_validator("sinfo", "scontrol", "srun", "salloc", "scancel", "squeue")
    @classmethod
    def _cmd(cls, v: str) -> str:
        if not v or any(c.isspace() for c in v):
            raise ValueError("a command name or path without spaces")
        return v

    @field_validator("job_id")
    @classmethod
    def _job(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[0-9]{1,12}", str(v)):
            raise ValueError("a Slurm job id (digits)")
        return v

    @field_validator("partition", "reservation", "account")
    @classmethod
    def _name(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z0-9_.:+-]{1,128}", v):
            raise ValueError("a Slurm name: letters, digits and _ . : + - (at most 128)")
        return v


def is_slurm_source(source: object) -> bool:
    return str(source).startswith(PREFIX)


@dataclass(frozen=True)
class SlurmSpec:
    partitions: tuple[str, ...] = ()
    nodes: str | None = None  # a hostlist
    states: tuple[str, ...] = ()

    def sinfo_argv(self, sinfo: str = "sinfo") -> list[str]:
        argv = [sinfo, "-h", "-N", "-o", SINFO_FORMAT]
        if self.partitions:
            argv += ["-p", ",".join(self.partitions)]
        if self.nodes:
            argv += ["-n", self.nodes]
        if self.states:
            argv += ["-t", ",".join(self.states)]
        return argv


def parse_spec(text: str) -> SlurmSpec:
    """``slurm:partition=gpu,state=idle,nodes=gpu[001-004]``; a bare item is a hostlist of nodes."""
    if not is_slurm_source(text):
        raise InventoryError(text, None, "not a Slurm source", "write slurm:partition=NAME or slurm:HOSTLIST")
    body = text[len(PREFIX) :]
    parts: dict[str, list[str]] = {k: [] for k in KEYS}
    try:
        items = split_top(body)
    except Exception as exc:
        raise InventoryError(text, None, str(exc), "fix the hostlist's brackets") from None
    for item in items:
        key, eq, value = item.partition("=")
        if not eq:
            key, value = "nodes", item
        key, value = key.strip(), value.strip()
        if key not in KEYS:
            raise InventoryError(
                text,
                None,
                f"unknown key {key!r}",
                f"use {', '.join(KEYS)} (e.g. slurm:partition=gpu,state=idle)",
            )
        if not value or any(c.isspace() or c in "|;&$`'\"\\" for c in value):
            raise InventoryError(
                text, None, f"{key}={value!r} is empty or has odd characters", "fix the value"
            )
        parts[key].append(value)
    if parts["nodes"]:
        try:
            expand(",".join(parts["nodes"]))  # a broken hostlist is an error here, not in sinfo
        except Exception as exc:
            raise InventoryError(text, None, str(exc), "fix the hostlist (e.g. gpu[001-004,010])") from None
    return SlurmSpec(
        partitions=tuple(parts["partition"]),
        nodes=",".join(parts["nodes"]) or None,
        states=tuple(parts["state"]),
    )


@dataclass(frozen=True)
class SlurmNode:
    name: str
    addr: str
    state: str
    partitions: tuple[str, ...] = ()
    reason: str = ""


def parse_sinfo(text: str, source: str = "sinfo") -> list[SlurmNode]:
    """Lines of ``sinfo -h -N -o '%N|%o|%T|%P|%E'`` as nodes (one per name; a node in several
    partitions is one node in each of their groups)."""
    by_name: dict[str, SlurmNode] = {}
    order: list[str] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split("|", 4)
        if len(fields) < 4:
            raise InventoryError(
                source, f"line {lineno}", f"unexpected sinfo output {line[:120]!r}", "check Slurm's version"
            )
        name, addr, state, part = (f.strip() for f in fields[:4])
        reason = fields[4].strip() if len(fields) > 4 else ""
        if not _NAME.match(name) or not _ADDR.match(addr or name):
            raise InventoryError(
                source,
                f"line {lineno}",
                f"node name or address {name!r}/{addr!r} does not look like a host name",
                "fix the node's NodeName/NodeAddr in slurm.conf or narrow the spec",
            )
        part = part.rstrip("*")  # the default partition is marked with '*'
        if name in by_name:
            old = by_name[name]
            if part and part not in old.partitions:
                by_name[name] = SlurmNode(old.name, old.addr, old.state, (*old.partitions, part), old.reason)
            continue
        by_name[name] = SlurmNode(
            name, addr or name, state.rstrip("*~#!%$@^-"), (part,) if part else (), reason
        )
        order.append(name)
    return [by_name[n] for n in order]


def query(spec: SlurmSpec, source: str, sinfo: str = "sinfo") -> tuple[list[SlurmNode], dict[str, Any]]:
    """Run ``sinfo`` for ``spec``; (nodes, the query record kept in the run directory)."""
    argv = spec.sinfo_argv(sinfo)
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=QUERY_TIMEOUT_S, check=False)
    except FileNotFoundError:
        raise InventoryError(
            source,
            None,
            f"{sinfo} not found",
            "run sb-fleet where Slurm's commands are (slurm-client), or give an inventory file",
        ) from None
    except subprocess.TimeoutExpired:
        raise InventoryError(
            source, None, f"sinfo gave no answer in {QUERY_TIMEOUT_S} s", "check slurmctld"
        ) from None
    if r.returncode != 0:
        err = " ".join(r.stderr.split())[:300]
        raise InventoryError(
            source, None, f"sinfo failed (exit {r.returncode}): {err}", "check the spec and Slurm"
        )
    nodes = parse_sinfo(r.stdout, source)
    if not nodes:
        raise InventoryError(
            source, None, "Slurm lists no node for this spec", "widen the partition, nodes or state"
        )
    record = {"schema_version": 1, "source": source, "argv": argv, "stdout": r.stdout}
    return nodes, record


def group_name(partition: str) -> str:
    return "slurm_" + re.sub(r"[^A-Za-z0-9_]", "_", partition)


def inventory_yaml(nodes: list[SlurmNode], host_vars: dict[str, Any] | None = None) -> str:
    """An Ansible YAML inventory: one group per partition (``slurm_<partition>``), every node's
    ``ansible_host`` its NodeAddr, and the config's ``slurm.host_vars`` for all of them."""
    children: dict[str, dict[str, Any]] = {}
    for n in nodes:
        hv: dict[str, Any] = dict(host_vars or {})
        if n.addr != n.name:
            hv["ansible_host"] = n.addr
        for part in n.partitions or ("nopartition",):
            children.setdefault(group_name(part), {"hosts": {}})["hosts"][n.name] = hv or None
    doc = {"all": {"children": children}}
    return "# written by sb-fleet from Slurm (see slurm-query.json beside it)\n" + yaml.safe_dump(
        doc, sort_keys=False, default_flow_style=False
    )


@dataclass
class Resolved:
    spec: SlurmSpec
    nodes: list[SlurmNode]
    text: str
    record: dict[str, Any] = field(default_factory=dict)

    def record_json(self) -> str:
        return json.dumps({**self.record, "nodes": [n.__dict__ for n in self.nodes]}, indent=2, default=list)


def resolve(source: str, host_vars: dict[str, Any] | None = None, sinfo: str = "sinfo") -> Resolved:
    spec = parse_spec(source)
    nodes, record = query(spec, source, sinfo)
    return Resolved(spec, nodes, inventory_yaml(nodes, host_vars), record)
