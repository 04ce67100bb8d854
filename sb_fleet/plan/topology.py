"""The InfiniBand fabric from saved ``ibnetdiscover`` and ``ibstat`` outputs: which switch each host
hangs off, and how many hops apart two hosts are.

Two text formats, both as SuperBench's topo-aware pattern reads them:

* ``ibnetdiscover`` (infiniband-diags): one block per device, a header line
  ``Switch 41 "S-<guid>" # "<description>" ...`` or ``Ca 1 "H-<guid>" # "<host> <ifname>"``,
  then one line per connected port ``[<port>] "<remote id>"[<remote port>] ...``. An HCA's host
  is the first word of its description; aggregation nodes and UFM appliances are not hosts.
* the host list with system image GUIDs (SuperBench's ``gen_ibstat``: ``cat
  /sys/class/infiniband/*/sys_image_guid`` on every host): a ``VM_hostname <name>`` line, then that
  host's GUIDs, 16 hex digits each (``ibstat``'s own ``System image GUID: 0x...`` lines are read too).
  It maps the fabric's physical hosts to the names the fleet knows them by.

The distance between two hosts is the number of hops on the shortest path through the fabric
(hosts and switches are the graph's nodes): 2 under the same leaf switch, 4 through one spine
level, and so on. Parsers are pure; a malformed line is a :class:`ConfigError` naming the file and line.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from sb_fleet.errors import ConfigError

_DEVICE = re.compile(r'^(Switch|Ca|Rt)\s+(\d+)\s+"([^"]+)"\s*#\s*"([^"]*)"')
_PORT = re.compile(r'^\[(\d+)\][^"]*"([^"]+)"\[(\d+)\]')
_GUID16 = re.compile(r"^(?!0{16}$)([0-9a-f]{16})$")
_IBSTAT_GUID = re.compile(r"^System image GUID:\s*0x([0-9a-fA-F]+)$")
_DEFAULT_HCA = re.compile(r"^MT\d+$")  # an HCA that reports no node description of its own


@dataclass(frozen=True)
class Device:
    id: str  # "S-0ff08c43213b3f30" / "H-0ff08c4321664e96"
    kind: str  # "switch" | "hca" | "router"
    ports: int
    description: str
    line: int  # where its header is in the file
    links: dict[int, tuple[str, int]] = field(default_factory=dict)  # local port -> (remote id, port)

    @property
    def guid(self) -> str:
        """The system image GUID in the device id, as 16 lower-case hex digits."""
        return self.id.split("-", 1)[-1].lower().rjust(16, "0")

    @property
    def host(self) -> str | None:
        """The physical host of an HCA (first word of its description); None for switches, aggregation
        nodes, UFM appliances and HCAs that report no description."""
        if self.kind != "hca":
            return None
        if self.description == "Mellanox Technologies Aggregation Node" or "ufm" in self.description:
            return None
        name = self.description.split(" ")[0] if self.description else ""
        if not name or _DEFAULT_HCA.match(name):
            return None
        return name


@dataclass(frozen=True)
class Fabric:
    devices: dict[str, Device]  # in the file's order

    def hosts(self) -> list[str]:
        """Physical hosts, in the order of their first HCA in the file."""
        seen: dict[str, None] = {}
        for d in self.devices.values():
            if d.host:
                seen.setdefault(d.host, None)
        return list(seen)

    def node(self, device_id: str) -> str | None:
        """The graph node a device stands for: its host for an HCA, the device itself for a switch."""
        d = self.devices.get(device_id)
        if d is None:
            return None
        if d.kind == "hca":
            return d.host
        return d.id

    def graph(self) -> dict[str, set[str]]:
        g: dict[str, set[str]] = {}
        for d in self.devices.values():
            src = self.node(d.id)
            if src is None:
                continue
            g.setdefault(src, set())
            for remote, _port in d.links.values():
                dst = self.node(remote)
                if dst is None or dst == src:
                    continue
                g[src].add(dst)
                g.setdefault(dst, set()).add(src)
        return g

    def leaf_switches(self, host: str) -> list[str]:
        """The switches a host's HCAs are cabled to (one per rail), by description."""
        out: list[str] = []
        for d in self.devices.values():
            if d.host != host:
                continue
            for remote, _ in d.links.values():
                r = self.devices.get(remote)
                if r is not None and r.kind == "switch" and r.description not in out:
                    out.append(r.description)
        return out

    def guid_hosts(self) -> dict[str, str]:
        """System image GUID -> physical host, for every host HCA."""
        return {d.guid: d.host for d in self.devices.values() if d.host}


def parse_ibnetdiscover(text: str, source: str = "ibnetdiscover") -> Fabric:
    devices: dict[str, Device] = {}
    current: Device | None = None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _DEVICE.match(line)
        if m:
            kind = {"Switch": "switch", "Ca": "hca", "Rt": "router"}[m.group(1)]
            dev_id = m.group(3)
            if "-" not in dev_id:
                raise ConfigError(
                    source, f"line {n}", f"device id {dev_id!r} is not of the form S-<guid> or H-<guid>"
                )
            current = Device(dev_id, kind, int(m.group(2)), m.group(4), n)
            devices[dev_id] = current
            continue
        if line.startswith("["):
            m = _PORT.match(line)
            if not m:
                raise ConfigError(
                    source,
                    f"line {n}",
                    f'a port line that does not read [port] "remote"[port]: {line[:60]!r}',
                    "give the unmodified output of ibnetdiscover",
                )
            if current is None:
                raise ConfigError(source, f"line {n}", "a port line before any Switch or Ca line")
            current.links[int(m.group(1))] = (m.group(2), int(m.group(3)))
            continue
        if re.match(r"^(Switch|Ca|Rt)\s", line):
            raise ConfigError(
                source, f"line {n}", f"a device line that does not parse: {line[:60]!r}",
                'expected: Switch <ports> "S-<guid>" # "<description>"',
            )  # fmt: skip
        # vendid=, devid=, sysimgguid=, switchguid=, caguid= lines carry nothing the distances need
    if not any(d.host for d in devices.values()):
        raise ConfigError(
            source, None, "no host HCA (Ca line with a host name) found", "is this ibnetdiscover output?"
        )
    return Fabric(devices)


def parse_ibstat(text: str, source: str = "ibstat") -> dict[str, str]:
    """System image GUID (16 lower-case hex digits) -> the host name it was read on."""
    out: dict[str, str] = {}
    host: str | None = None
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        parts = line.split()
        if parts[0] == "VM_hostname":
            if len(parts) < 2:
                raise ConfigError(source, f"line {n}", "VM_hostname without a host name")
            host = parts[1]
            continue
        m = _IBSTAT_GUID.match(line)
        if m:
            guid = m.group(1).lower().rjust(16, "0")
        elif _GUID16.match(line.lower()):
            guid = line.lower()
        elif re.fullmatch(r"0{16}", line) or ":" in line or line.startswith("CA '"):
            continue  # an unset GUID, or another field of ibstat's own output
        else:
            raise ConfigError(
                source,
                f"line {n}",
                f"neither 'VM_hostname <name>' nor a 16-hex-digit GUID: {line[:60]!r}",
            )
        if host is None:
            raise ConfigError(source, f"line {n}", "a GUID before any 'VM_hostname <name>' line")
        out[guid] = host
    if not out:
        raise ConfigError(
            source, None, "no host GUIDs found", "expected 'VM_hostname <name>' lines, each followed by GUIDs"
        )
    return out


def bfs(graph: Mapping[str, set[str]], start: str) -> dict[str, int]:
    dist = {start: 0}
    todo = deque([start])
    while todo:
        u = todo.popleft()
        for v in graph.get(u, ()):
            if v not in dist:
                dist[v] = dist[u] + 1
                todo.append(v)
    return dist


@dataclass(frozen=True)
class HostTopology:
    """The fleet's hosts on the fabric: their order in it, hop distances, and leaf switches."""

    order: tuple[str, ...]  # fleet names, in the fabric's order
    distance: dict[str, dict[str, int]]  # fleet name -> fleet name -> hops
    leaves: dict[str, tuple[str, ...]]  # fleet name -> the switches its HCAs are cabled to


def host_topology(fabric: Fabric, guid_to_name: Mapping[str, str]) -> HostTopology:
    """Distances between the fleet's hosts: each physical host of the fabric is named by the GUID
    list (``ibstat``); hosts without a name there are left out, as SuperBench leaves them out."""
    phys_to_name: dict[str, str] = {}
    for guid, phys in fabric.guid_hosts().items():
        name = guid_to_name.get(guid)
        if name is not None:
            phys_to_name.setdefault(phys, name)
    order = [p for p in fabric.hosts() if p in phys_to_name]
    graph = fabric.graph()
    distance: dict[str, dict[str, int]] = {}
    for p in order:
        reach = bfs(graph, p)
        distance[phys_to_name[p]] = {phys_to_name[q]: reach[q] for q in order if q in reach}
    leaves = {phys_to_name[p]: tuple(fabric.leaf_switches(p)) for p in order}
    return HostTopology(tuple(phys_to_name[p] for p in order), distance, leaves)


def load_host_topology(ibnetdiscover_path: str, ibstat_path: str) -> HostTopology:
    """Both files read and parsed; a missing file is a :class:`ConfigError` naming it."""
    texts = []
    for what, path in (("ibnetdiscover", ibnetdiscover_path), ("ibstat", ibstat_path)):
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                texts.append(f.read())
        except OSError as exc:
            raise ConfigError(
                path, None, f"cannot read the pattern's {what} file ({exc.strerror})", "fix pattern." + what
            ) from None
    return host_topology(
        parse_ibnetdiscover(texts[0], ibnetdiscover_path), parse_ibstat(texts[1], ibstat_path)
    )
