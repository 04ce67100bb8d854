"""Metric names in SuperBench's language, and which way is better.

A column of a results summary is ``<benchmark>/<metric>[:<rank>]``; model
benchmarks have two path parts (``gpt_models/pytorch-gpt2-large/fp32_train_throughput``).
Columns that differ only in the GPU rank or in a device index inside the
name (``ib0`` .. ``ib7``) are *siblings*: the same measurement on another
GPU or NIC of the same host. They form one *family*.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from sb_fleet.errors import ResultsError

RETURN_CODE = "return_code"

# A device index inside a metric name: ib0, mlx5_3, gpu7, nic2, eth1, hca4, cuda5, dev6, numa1.
_DEVICE_RE = re.compile(r"(?<![A-Za-z0-9])(ib|mlx5_|gpu|nic|eth|hca|cuda|dev|numa)(\d+)(?![0-9])")
_RANK_RE = re.compile(r"^(.*):(\d+)$")
# SuperBench's current ib-loopback names carry the NIC index after a colon (ib_write_bw_8388608:0),
# and a multi-process run appends the rank after it (ib_write_bw_8388608:3:3): one family either way.
_INNER_INDEX_RE = re.compile(r"^(.*/[^/]*):(\d+)$")


@dataclass(frozen=True)
class MetricName:
    full: str  # as in the results: "gemm-flops/fp16_tc_flops:3"
    base: str  # without the rank: "gemm-flops/fp16_tc_flops"
    rank: int | None
    family: str  # base with device indexes masked: "ib-loopback/ib_write_8388608_ib#_bw"
    unit: str  # which sibling: "3", "ib3", "ib3:0", "" for a host-level metric
    group: str  # the benchmark: everything before the last "/" of base
    leaf: str  # the last part of base: "fp16_tc_flops"

    @property
    def is_return_code(self) -> bool:
        return self.leaf == RETURN_CODE


@lru_cache(maxsize=65536)
def parse_metric(full: str) -> MetricName:
    m = _RANK_RE.match(full)
    base, rank = (m.group(1), int(m.group(2))) if m else (full, None)
    devices = [d.group(1) + d.group(2) for d in _DEVICE_RE.finditer(base)]
    family = _DEVICE_RE.sub(lambda d: d.group(1) + "#", base)
    inner = _INNER_INDEX_RE.match(family)
    if inner:
        devices.append(inner.group(2))
        family = inner.group(1)
    unit_parts = devices + ([str(rank)] if rank is not None else [])
    unit = ":".join(unit_parts)
    group, _, leaf = base.rpartition("/")
    return MetricName(
        full=full, base=base, rank=rank, family=family, unit=unit, group=group or base, leaf=leaf
    )


def benchmark_of(full: str) -> str:
    """The benchmark a column belongs to: the part before its last ``/``."""
    return parse_metric(full).group


# Name-based direction table. First match wins; patterns are searched in the
# metric's leaf name (without the benchmark and the rank).
_LOWER = [
    re.compile(p)
    for p in (
        r"(^|_)return_code$",
        r"_time($|_)",
        r"^time($|_)",
        r"latency",
        r"(^|_)lat($|_)",
        r"_lat_",
        r"_us$",
        r"_ms$",
        r"(^|_)error",
        r"(^|_)err($|_)",
        r"(^|_)errors?_",
        r"retrans",
        r"drop",
        r"disabled",
        r"(^|_)fail",
        r"mem_allocated$",  # GPU memory a model benchmark holds (GiB)
        r"(^|_)power$",  # mean power of a compute figure's window (W; docs/energy.md)
    )
]
_HIGHER = [
    re.compile(p)
    for p in (
        r"_bw($|_)",
        r"(^|_)bw($|_)",
        r"bandwidth",
        r"flops",
        r"iops",
        r"throughput",
        r"busbw",
        r"algbw",
        r"(^|_)tps$",
        r"_rate$",
        r"per_sec",
        r"_gbps$",
        r"ops$",
        r"score",
        r"efficiency",
        r"_per_watt$",
        r"_device_busy$",  # share of a model loop's wall time the device worked (%)
    )
]


@lru_cache(maxsize=65536)
def direction_from_name(full: str) -> int:
    """+1 higher is better, -1 lower is better, 0 unknown (judged both ways)."""
    leaf = parse_metric(full).leaf.lower()
    for p in _LOWER:
        if p.search(leaf):
            return -1
    for p in _HIGHER:
        if p.search(leaf):
            return 1
    return 0


@dataclass(frozen=True)
class MetricInfo:
    unit: str | None
    higher_is_better: bool | None


class Directions:
    """Direction of every metric: the suite's ``metrics.json`` first, then the name table."""

    def __init__(self, declared: Mapping[str, MetricInfo] | None = None):
        self._declared = dict(declared or {})

    def of(self, full: str) -> int:
        name = parse_metric(full)
        for key in (full, name.base, name.family):
            info = self._declared.get(key)
            if info is not None and info.higher_is_better is not None:
                return 1 if info.higher_is_better else -1
        return direction_from_name(full)

    def unit(self, full: str) -> str | None:
        name = parse_metric(full)
        for key in (full, name.base, name.family):
            info = self._declared.get(key)
            if info is not None:
                return info.unit
        return None


def load_metrics_json(path: Path) -> dict[str, MetricInfo]:
    """Read the suite's ``metrics.json``: ``{"<bench>/<metric>": {"unit": .., "higher_is_better": ..}}``."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ResultsError(
            path, None, f"cannot read metric metadata ({exc})", "fix or remove the file"
        ) from exc
    if not isinstance(data, dict):
        raise ResultsError(path, None, "expected a JSON object of metric name -> {unit, higher_is_better}")
    out: dict[str, MetricInfo] = {}
    for key, val in data.items():
        if not isinstance(val, dict):
            raise ResultsError(path, key, "expected an object with 'unit' and 'higher_is_better'")
        hib = val.get("higher_is_better")
        if hib is not None and not isinstance(hib, bool):
            raise ResultsError(path, key, f"higher_is_better must be true or false, not {hib!r}")
        unit = val.get("unit")
        out[str(key)] = MetricInfo(unit=str(unit) if unit is not None else None, higher_is_better=hib)
    return out


_RANK_SUFFIX = re.compile(r":\d+$")


def baseline_of(baseline: Mapping[str, float], metric: str) -> float | None:
    """SuperBench's lookup: the exact name; then without its ``:rank``, or, without a rank, the benchmark name."""
    v = baseline.get(metric)
    if v is not None:
        return v
    if _RANK_SUFFIX.search(metric):
        return baseline.get(_RANK_SUFFIX.sub("", metric))
    return baseline.get(metric.split("/")[0])
