"""Patterns in the plan: a config entry with ``pattern`` (mpi or torch.distributed mode) becomes one
multi-node step per round, each group of the round a node group; ``mpi`` groups are launched from
their first node by mpirun, which reaches the others over SSH under the fleet's host-key policy.

Pure except :func:`load_topology` (reads the pattern's ibnetdiscover/ibstat files, like the config
itself) and :func:`known_host_lines` (looks the members' keys up in the control node's known_hosts).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sb_fleet.config.inventory import Host
from sb_fleet.config.traffic_patterns import PatternSpec, Schedule, all_nodes, expand
from sb_fleet.plan.topology import HostTopology, load_host_topology


def load_topology(spec: PatternSpec, base: Path | None = None) -> HostTopology | None:
    """The fabric of a topo-aware pattern; relative file names are taken from the config's directory."""
    if spec.type != "topo-aware":
        return None

    def where(p: str | None) -> str:
        path = Path(str(p)).expanduser()
        return str(path if path.is_absolute() or base is None else base / path)

    return load_host_topology(where(spec.ibnetdiscover), where(spec.ibstat))


def schedule_for(
    spec: PatternSpec | None, hosts: Sequence[str], topology: HostTopology | None = None
) -> Schedule:
    """The rounds of a pattern over ``hosts``; no pattern: one group of every host (SuperBench's mpi
    mode without ``node_num: 1``)."""
    if spec is None:
        return all_nodes(hosts)
    if topology is not None:
        return expand(spec, hosts, topology.order, topology.distance)
    return expand(spec, hosts)


def group_port(master_port: int, parallel: int) -> int:
    """Groups of one round run at once: each gets its own rendezvous port (hosts may share a machine)."""
    return master_port + parallel


def mpi_member(host: Host, setup: Any) -> dict[str, Any]:
    """One member of an mpi group as its first node's mpirun needs it (``setup``: the plan's HostSetup)."""
    return {
        "name": host.name,
        "addr": host.address,
        "port": host.port,
        "user": host.user,
        "workspace": setup.workspace.replace("{host}", host.name),
        "python": setup.python,
        "base_python": setup.base_python,
    }


def head_args(mpi: Mapping[str, Any], master_port: int, mode_index: str | None) -> list[str]:
    """The runner arguments of an mpi group's first node: the group (``--mpi-group-b64``), with the
    known_hosts lines of its members read now from the control node's known_hosts."""
    members = list(mpi["members"])
    kh = Path(os.path.expanduser(str(mpi.get("known_hosts") or "~/.ssh/known_hosts")))
    group = {
        "members": members,
        "master_port": master_port,
        "policy": mpi.get("policy", "strict"),
        "known_hosts": known_host_lines(kh, [(m["addr"], int(m.get("port") or 22)) for m in members]),
    }
    b64 = base64.b64encode(json.dumps(group, sort_keys=True, separators=(",", ":")).encode()).decode()
    args = [
        "--mpi-group-b64",
        b64,
        "--master-port",
        str(master_port),
        "--local-addr",
        str(members[0]["addr"]),
    ]
    return args + (["--mode-index", mode_index] if mode_index else [])


def known_host_lines(known_hosts: Path, hosts: Sequence[tuple[str, int]]) -> str:
    """The known_hosts lines of ``hosts`` (address, port), hashed entries included (``ssh-keygen -F``).
    A host without an entry gets none: under ``strict`` its node refuses it, as sb-fleet would."""
    if not known_hosts.exists():
        return ""
    out: list[str] = []
    for addr, port in hosts:
        name = addr if int(port) == 22 else f"[{addr}]:{int(port)}"
        try:
            r = subprocess.run(
                ["ssh-keygen", "-F", name, "-f", str(known_hosts)], capture_output=True, text=True, timeout=10
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        for line in r.stdout.splitlines():
            if line and not line.startswith("#"):
                out.append(line)
    return "\n".join(dict.fromkeys(out)) + ("\n" if out else "")
