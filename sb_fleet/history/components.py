"""Which component a value belongs to: a GPU (by UUID or serial), a NIC (by node GUID), or the host.

History follows components, not only host names: a GPU moved to another host keeps its history,
and a host whose GPU was replaced starts that GPU's history anew. The facts recorded at deploy
(``facts/<host>.json``) carry ``gpus: [{index, uuid, serial, pci_bus_id}]`` and
``nics: [{name, node_guid, ports}]`` where the hardware reports them; without them (CPU hosts,
older runs) the host is the component.

A metric with a GPU rank (``gemm-flops/fp16_tc_flops:3``) belongs to the GPU of that index, and its
history is kept under the name without the rank (``gemm-flops/fp16_tc_flops``), so the same GPU at
another index or on another host continues it. A metric naming an IB device (``..._ib3_bw``,
``..._mlx5_3_...``) belongs to that NIC, under the name with the device masked (``..._ib#_bw``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sb_fleet.analysis.superbench.metric_names import parse_metric

_IB_TOKEN = re.compile(r"(?<![A-Za-z0-9])(ib|mlx5_|hca|nic)(\d+)(?![0-9])")
_BAD_SERIAL = {"", "[n/a]", "n/a", "none", "0", "[not supported]"}


def gpu_keys(facts: Mapping[str, Any] | None) -> dict[int, str]:
    """GPU index -> component key (``gpu:<uuid>``, else ``gpu-serial:<serial>``) from one host's facts."""
    out: dict[int, str] = {}
    gpus = (facts or {}).get("gpus")
    if not isinstance(gpus, list):
        return out
    for g in gpus:
        if not isinstance(g, dict) or not isinstance(g.get("index"), int):
            continue
        uuid = str(g.get("uuid") or "").strip()
        serial = str(g.get("serial") or "").strip()
        if uuid and uuid.lower() not in _BAD_SERIAL:
            out[g["index"]] = f"gpu:{uuid}"
        elif serial.lower() not in _BAD_SERIAL:
            out[g["index"]] = f"gpu-serial:{serial}"
    return out


def nic_keys(facts: Mapping[str, Any] | None) -> dict[str, str]:
    """NIC token (``mlx5_3``, and ``ib3``/``hca3``/``nic3`` for the 4th NIC by name) -> ``nic:<guid>``."""
    nics = (facts or {}).get("nics")
    if not isinstance(nics, list):
        return {}
    named = sorted(
        (str(n["name"]), str(n.get("node_guid") or "").strip())
        for n in nics
        if isinstance(n, dict) and isinstance(n.get("name"), str)
    )
    out: dict[str, str] = {}
    for i, (name, guid) in enumerate(named):
        if not guid or guid.strip("0:") == "":
            continue
        key = f"nic:{guid}"
        out[name] = key
        for prefix in ("ib", "hca", "nic"):
            out[f"{prefix}{i}"] = key
    return out


@dataclass(frozen=True)
class ColumnKind:
    """How one results column maps to a component: ``gpu`` (by rank), ``nic`` (by device token) or host."""

    kind: str  # "gpu", "nic" or "host"
    index: int | None  # the GPU rank
    token: str | None  # the NIC token as it appears in the name
    component_metric: str  # the name the component's history is kept under


def column_kind(column: str) -> ColumnKind:
    name = parse_metric(column)
    m = _IB_TOKEN.search(name.base)
    if m is not None:
        masked = _IB_TOKEN.sub(lambda d: d.group(1) + "#", name.base)
        suffix = f":{name.rank}" if name.rank is not None else ""
        return ColumnKind("nic", None, m.group(1) + m.group(2), masked + suffix)
    if name.rank is not None:
        return ColumnKind("gpu", name.rank, None, name.base)
    return ColumnKind("host", None, None, column)


@dataclass(frozen=True)
class ComponentMap:
    """Component and component-metric of every cell of a run's host x column matrix (local ids)."""

    components: list[str]  # local component id -> key ("host:<name>", "gpu:<uuid>", "nic:<guid>")
    metrics: list[str]  # local component-metric id -> name
    comp: np.ndarray  # int32 [hosts, columns]
    metric: np.ndarray  # int32 [hosts, columns]


def map_components(
    hosts: Sequence[str], columns: Sequence[str], facts: Mapping[str, Mapping[str, Any] | None]
) -> ComponentMap:
    """The component of every (host, column); vectorised over hosts (one pass per column)."""
    n_h, n_c = len(hosts), len(columns)
    comps: dict[str, int] = {}

    def cid(key: str) -> int:
        i = comps.get(key)
        if i is None:
            i = comps[key] = len(comps)
        return i

    host_comp = np.array([cid(f"host:{h}") for h in hosts], dtype=np.int32)
    kinds = [column_kind(c) for c in columns]
    max_gpu = max([k.index for k in kinds if k.kind == "gpu" and k.index is not None] + [-1]) + 1
    tokens = sorted({k.token for k in kinds if k.kind == "nic" and k.token})
    tok_idx = {t: i for i, t in enumerate(tokens)}
    gpu_comp = np.full((n_h, max_gpu), -1, dtype=np.int32)
    nic_comp = np.full((n_h, len(tokens)), -1, dtype=np.int32)
    for r, h in enumerate(hosts):
        f = facts.get(h)
        if not f:
            continue
        for idx, key in gpu_keys(f).items():
            if 0 <= idx < max_gpu:
                gpu_comp[r, idx] = cid(key)
        if tokens:
            for tok, key in nic_keys(f).items():
                j = tok_idx.get(tok)
                if j is not None:
                    nic_comp[r, j] = cid(key)
    mnames: dict[str, int] = {}

    def mid(name: str) -> int:
        i = mnames.get(name)
        if i is None:
            i = mnames[name] = len(mnames)
        return i

    comp = np.empty((n_h, n_c), dtype=np.int32)
    metric = np.empty((n_h, n_c), dtype=np.int32)
    for c, (col, k) in enumerate(zip(columns, kinds, strict=True)):
        own = np.full(n_h, -1, dtype=np.int32)
        if k.kind == "gpu" and k.index is not None:
            own = gpu_comp[:, k.index]
        elif k.kind == "nic" and k.token is not None:
            own = nic_comp[:, tok_idx[k.token]]
        has = own >= 0
        comp[:, c] = np.where(has, own, host_comp)
        full_id = mid(col)
        if has.any():
            metric[:, c] = np.where(has, mid(k.component_metric), full_id)
        else:
            metric[:, c] = full_id
    return ComponentMap(components=list(comps), metrics=list(mnames), comp=comp, metric=metric)


def keys_digest(cmap: ComponentMap) -> str:
    """A digest of every cell's (component, component metric) key: two runs with the same digest have
    the same cells in the same order."""
    import hashlib

    h = hashlib.sha256()
    h.update("\0".join(cmap.components).encode())
    h.update(b"\1")
    h.update("\0".join(cmap.metrics).encode())
    h.update(np.ascontiguousarray(cmap.comp, dtype=np.int32).tobytes())
    h.update(np.ascontiguousarray(cmap.metric, dtype=np.int32).tobytes())
    h.update(repr(cmap.comp.shape).encode())
    return h.hexdigest()[:32]
