"""Nominal hardware figures: what a host could do at best, from its facts (``facts/<host>.json``).

Every peak says where it comes from (``source``), so a "% of peak" in a report can be checked:

* **GEMM per precision on GPUs**: the on-host suite's own datasheet table
  (``sb_bench.micro.gemm_flops.PEAKS``, dense figures at boost clock), read from there, never copied.
* **GEMM on CPUs**: cores x clock x FLOP per cycle per core of the host's microarchitecture
  (:mod:`sb_fleet.analysis.figures.cpu_uarch`: FMA pipes x datapath width from the vendors'
  tables, keyed by vendor/family/model or Arm part); the clock is cpufreq's maximum where the host
  has one (``cpu_mhz_source``), and the source says which clock it is. An unknown core gets no
  peak, with the reason. An upper bound: clocks drop under heavy vector load.
* **Device memory (HBM)** and **NVLink** per GPU model: vendors' datasheet figures below.
* **PCIe**: generation x width from the facts (``pcie_gen``, ``pcie_width``, top level or per GPU),
  per direction after line encoding.
* **InfiniBand**: the port rate from the facts (``nics[].ports[].rate``, as sysfs writes it:
  "200 Gb/sec (4X HDR)"), the fastest active port.

Pure: facts in, peaks out (:func:`load_facts` is the one function that reads files).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sb_fleet import bounded_json
from sb_fleet.analysis.figures.cpu_uarch import identify_core
from sb_fleet.safe_files import safe_name

# Nominal device-memory bandwidth (GB/s) and NVLink bandwidth per GPU, one direction (GB/s; the
# datasheets quote both directions together, twice these). First matching pattern wins.
GPU_MEMORY: list[tuple[str, str, float, float | None]] = [
    ("A100 80GB PCIe", r"\bA100\b.*80\s*GB.*PCIe", 1935.0, 300.0),
    ("A100 80GB", r"\bA100\b.*80\s*GB", 2039.0, 300.0),
    ("A100 40GB", r"\bA100\b", 1555.0, 300.0),
    ("H100 NVL", r"\bH100\b.*\bNVL\b", 3900.0, 300.0),
    ("H100 PCIe", r"\bH100\b.*PCIe", 2000.0, 300.0),
    ("H100 SXM", r"\bH100\b", 3350.0, 450.0),
    ("H200 NVL", r"\bH200\b.*\bNVL\b", 4800.0, 450.0),
    ("H200", r"\bH200\b", 4800.0, 450.0),
    ("B200", r"\bB200\b", 8000.0, 900.0),
    ("MI300X", r"\bMI300X\b", 5300.0, None),
    ("MI250X", r"\bMI250X\b", 3277.0, None),
    ("V100", r"\bV100\b", 900.0, 150.0),
    ("L40S", r"\bL40S\b", 864.0, None),
    ("A10", r"\bA10\b", 600.0, None),
]

# PCIe: transfer rate per lane (GT/s) and line-encoding efficiency, by generation.
PCIE_LANE_GBPS = {1: 2.5 * 0.8, 2: 5.0 * 0.8, 3: 8.0 * 128 / 130, 4: 16.0 * 128 / 130, 5: 32.0 * 128 / 130}
PCIE_LANE_GBPS[6] = 64.0 * 242 / 256  # FLIT mode

# Bytes per element of each GEMM precision (arithmetic intensity of a GEMM, roofline).
PRECISION_BYTES = {
    "fp64": 8,
    "fp64_tc": 8,
    "fp32": 4,
    "tf32_tc": 4,
    "fp16": 2,
    "fp16_tc": 2,
    "bf16_tc": 2,
    "int8_tc": 1,
    "fp8e4m3_tc": 1,
}


@dataclass(frozen=True)
class Peak:
    """A nominal figure in base units (operations/s or bytes/s) and where it comes from."""

    value: float
    kind: str  # "flops" (operations per second) or "bytes" (bytes per second)
    source: str

    def in_unit(self, unit: str | None) -> float | None:
        """The peak in a metric's unit (GFLOPS, TFLOPS, GB/s, MB/s, GiB/s, Gb/s ...); None if unknown."""
        scale = unit_scale(unit, self.kind)
        return self.value / scale if scale else None


@dataclass(frozen=True)
class HostPeaks:
    gemm: dict[str, Peak] = field(default_factory=dict)  # precision ("fp16_tc") -> peak
    memory: Peak | None = None  # device memory (HBM), GPU hosts
    nvlink: Peak | None = None  # one direction, per GPU
    pcie: Peak | None = None  # one direction, per GPU
    ib: Peak | None = None  # fastest active port
    device: str = ""  # what the peaks are for: a GPU model or a CPU model
    gpu: bool = False  # a GPU host (else the CPU's figures)
    notes: tuple[str, ...] = ()

    def empty(self) -> bool:
        return not (self.gemm or self.memory or self.nvlink or self.pcie or self.ib)


_UNITS = {
    "flops": {"flops": 1.0, "kflops": 1e3, "mflops": 1e6, "gflops": 1e9, "tflops": 1e12, "pflops": 1e15},
    "bytes": {"b/s": 1.0, "kb/s": 1e3, "mb/s": 1e6, "gb/s": 1e9, "tb/s": 1e12},
}
_UNITS["flops"].update({k.replace("flops", "iops"): v for k, v in _UNITS["flops"].items()})
_UNITS["flops"].update({k.replace("flops", "ops"): v for k, v in _UNITS["flops"].items()})
_UNITS["bytes"].update({"kib/s": 2**10, "mib/s": 2**20, "gib/s": 2**30, "tib/s": 2**40})
_UNITS["bytes"].update({"gbps": 1e9 / 8, "gb/sec": 1e9, "mbps": 1e6 / 8, "gbit/s": 1e9 / 8})


def unit_scale(unit: str | None, kind: str) -> float | None:
    """Base units (operations/s, bytes/s) in one ``unit``; ``Gb/s`` (small b) is bits."""
    if not unit:
        return None
    u = unit.strip()
    if kind == "bytes" and re.fullmatch(r"[KMGT]b/s", u):  # bits per second
        return {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}[u[0]] / 8
    return _UNITS.get(kind, {}).get(u.lower())


def _gemm_table(device: str) -> tuple[str, dict[str, float]] | None | str:
    """The suite's peak table (TFLOPS per precision) for a GPU name; a reason when there is none."""
    try:
        from sb_bench.micro.gemm_flops import peak_for
    except ImportError:  # the on-host suite is not installed next to the control node
        return "the suite's GEMM peak table (sb_bench) is not importable here: pip install -e benchmarks"
    return peak_for(device)


def _gpu_memory(device: str) -> tuple[str, float, float | None] | None:
    for model, pattern, hbm, nvlink in GPU_MEMORY:
        if re.search(pattern, device, re.IGNORECASE):
            return model, hbm, nvlink
    return None


def _number(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        m = re.match(r"\s*(\d+(?:\.\d+)?)", v)
        return float(m.group(1)) if m else None
    return None


def cpu_gemm_peaks(facts: Mapping[str, Any]) -> tuple[dict[str, Peak], list[str]]:
    """fp64 and fp32 peaks of a CPU: cores x clock x FLOP per cycle of its core
    (:mod:`sb_fleet.analysis.figures.cpu_uarch`); why not, when not (an untabled core included)."""
    cores = _number(facts.get("cpu_cores")) or _number(facts.get("cpu_count"))
    mhz = _number(facts.get("cpu_mhz"))
    missing = [k for k, v in (("cpu_cores", cores), ("cpu_mhz", mhz)) if not v]
    if missing:
        return {}, [f"no CPU peak: the facts lack {', '.join(missing)}"]
    assert cores is not None and mhz is not None
    core = identify_core(facts)
    if isinstance(core, str):
        return {}, [f"no CPU peak: {core}"]
    clock = str(facts.get("cpu_mhz_source") or "")
    clock_word = {
        "cpuinfo_max_freq": "maximum clock (cpufreq cpuinfo_max_freq)",
        "cpu MHz": "current clock (/proc/cpuinfo cpu MHz: no cpufreq maximum on this host)",
    }.get(clock, "clock of unrecorded origin (cpu_mhz)")
    out = {}
    for prec, width in (("fp64", 64), ("fp32", 32)):
        per_cycle = core.flop_per_cycle(width)
        out[prec] = Peak(
            cores * mhz * 1e6 * per_cycle,
            "flops",
            f"{cores:g} cores x {mhz / 1000:g} GHz {clock_word} x {per_cycle} {prec} FLOP/cycle/core "
            f"({core.name}: {core.pipes} FMA pipe(s) x {core.bits}-bit; {core.source})",
        )
    return out, []


def _pcie(facts: Mapping[str, Any]) -> Peak | None:
    gen = _number(facts.get("pcie_gen"))
    width = _number(facts.get("pcie_width"))
    gpus = facts.get("gpus")
    if (gen is None or width is None) and isinstance(gpus, list) and gpus and isinstance(gpus[0], dict):
        gen = gen or _number(gpus[0].get("pcie_gen"))
        width = width or _number(gpus[0].get("pcie_width"))
    if not gen or not width or int(gen) not in PCIE_LANE_GBPS:
        return None
    gbps = PCIE_LANE_GBPS[int(gen)] * width / 8  # GB/s per direction
    return Peak(gbps * 1e9, "bytes", f"PCIe gen{int(gen)} x{int(width)}: {gbps:.1f} GB/s per direction")


def _ib(facts: Mapping[str, Any]) -> Peak | None:
    best = 0.0
    nics = facts.get("nics")
    for nic in nics if isinstance(nics, list) else ():
        for port in nic.get("ports", ()) if isinstance(nic, dict) else ():
            if not isinstance(port, dict):
                continue
            state = str(port.get("state") or "")
            if state and "ACTIVE" not in state.upper():
                continue
            rate = _number(port.get("rate"))
            best = max(best, rate or 0.0)
    rate = _number(facts.get("ib_rate_gbps"))
    best = max(best, rate or 0.0)
    if not best:
        return None
    return Peak(best * 1e9 / 8, "bytes", f"InfiniBand port rate {best:g} Gb/s")


def host_peaks(facts: Mapping[str, Any] | None) -> HostPeaks:
    """Every nominal figure the facts allow; an empty :class:`HostPeaks` when they allow none."""
    if not facts:
        return HostPeaks(notes=("no facts for this host",))
    notes: list[str] = []
    gpu = str(facts.get("gpu_model") or "")
    gemm: dict[str, Peak] = {}
    memory = nvlink = None
    if gpu:
        table = _gemm_table(gpu)
        if isinstance(table, str):
            notes.append(f"{gpu}: no GEMM peak: {table}")
        elif table:
            model, tflops = table
            gemm = {p: Peak(v * 1e12, "flops", f"{model} datasheet, dense {p}") for p, v in tflops.items()}
        else:
            notes.append(f"{gpu}: not in the GEMM peak table")
        mem = _gpu_memory(gpu)
        if mem:
            model, hbm, nv = mem
            memory = Peak(hbm * 1e9, "bytes", f"{model} datasheet memory bandwidth {hbm:g} GB/s")
            if nv:
                nvlink = Peak(nv * 1e9, "bytes", f"{model} NVLink {nv:g} GB/s per direction")
        device = gpu
    else:
        gemm, why = cpu_gemm_peaks(facts)
        notes.extend(why)
        device = str(facts.get("cpu_model") or "CPU")
    return HostPeaks(
        gemm=gemm,
        memory=memory,
        nvlink=nvlink,
        pcie=_pcie(facts) if gpu else None,
        ib=_ib(facts),
        device=device,
        gpu=bool(gpu),
        notes=tuple(notes),
    )


_GEMM_RE = re.compile(r"^gemm-flops/(?P<prec>[a-z0-9]+(?:_tc)?)_(?:flops|iops)$")


def gemm_precision(metric: str) -> str | None:
    """``fp16_tc`` for ``gemm-flops/fp16_tc_flops`` (a name without rank), else None."""
    m = _GEMM_RE.match(metric)
    return m.group("prec") if m else None


def peak_for_metric(metric: str, peaks: HostPeaks) -> Peak | None:
    """The nominal figure a metric (name without rank; device indexes may be ``#``) is measured
    against, or None. NCCL/RCCL bus bandwidth within a node (``nccl-bw``, ``nccl-bw:nvlink``) and
    GPU-to-GPU copies go against NVLink; host-device copies against PCIe; device copies and STREAM
    against the device memory; ib-loopback against the port rate."""
    prec = gemm_precision(metric)
    if prec is not None:
        return peaks.gemm.get(prec)
    bench, _, leaf = metric.rpartition("/")
    leaf = leaf.lower()
    if re.fullmatch(r"(nccl|rccl)-bw(:nvlink)?", bench) and leaf.endswith("busbw"):
        return peaks.nvlink
    if bench.startswith("ib-loopback") and "bw" in leaf:
        return peaks.ib
    if re.search(r"(^|_)(h2d|d2h|htod|dtoh)(_|$)|cpu_to_gpu|gpu[\d#]*_to_cpu", leaf):
        return peaks.pcie
    if re.search(r"gpu[\d#]+_to_gpu[\d#]+|^p2p_(max|min|avg)_bw$", leaf):
        return peaks.nvlink
    if bench.startswith("gpu-stream") or (bench.startswith("mem-bw") and "d2d" in leaf):
        return peaks.memory
    return None


def above_peak_reason(metric: str, peak: Peak) -> str:
    """Why a figure can sit above the nominal peak it is held against (shown with its % of peak,
    never a bare >100%). NCCL's bus bandwidth assumes a ring (each GPU moves 2(n-1)/n of the data
    over its own links); NVLink SHARP (NVLS, NCCL 2.17+ on NVSwitch systems) reduces inside the
    switch, so each GPU sends its data once and receives the result once, and all-reduce busbw can
    reach 2(n-1)/n of the link rate: ~480 GB/s on 8 H100 SXM against 450 GB/s per direction."""
    bench, _, leaf = metric.rpartition("/")
    if peak.source and "NVLink" in peak.source and re.fullmatch(r"(nccl|rccl)-bw(:nvlink)?", bench):
        if leaf.startswith(("allreduce", "all_reduce")):
            return (
                "above the NVLink link rate: NVLink SHARP (NVLS) reduces in the NVSwitch, so all-reduce bus "
                "bandwidth (which assumes a ring) is bounded by 2(n-1)/n x the link rate, not the link rate"
            )
        return "above the NVLink link rate: NCCL's bus-bandwidth formula assumes a ring; an in-switch (NVLS) algorithm moves less"
    return "above the nominal peak: check the peak's source (a wrong datasheet row, or a cached/compressed transfer)"


def default_unit(metric: str, peak: Peak) -> str | None:
    """The unit to assume when a results file does not say (no metrics.json): SuperBench reports
    GEMM rates in GFLOPS (GIOPS) and every bandwidth it compares with a peak here in GB/s."""
    if peak.kind == "flops":
        return "GIOPS" if metric.endswith("_iops") else "GFLOPS"
    return "GB/s" if metric.endswith("bw") else None


def load_facts(run_dir: Path | None, hosts: list[str]) -> dict[str, dict[str, Any]]:
    """``facts/<host>.json`` of each host that has one (an unreadable file counts as none)."""
    out: dict[str, dict[str, Any]] = {}
    if run_dir is None or not (Path(run_dir) / "facts").is_dir():
        return out
    for h in hosts:
        p = Path(run_dir) / "facts" / f"{safe_name(h)}.json"
        try:
            data = bounded_json.read(p)
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            out[h] = data
    return out
