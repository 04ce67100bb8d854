"""Synthetic fleets with planted faults, for tests and benchmarks.

A fleet of NDv4-like hosts (8 GPUs, 8 IB NICs) reports about 150 metrics in
SuperBench's results-summary format. Every metric family gets its own
run-to-run spread (uniform in 0.3-3%), part of it shared by the GPUs of a
host; a benign sub-population of hosts is 1.5% slower on everything; and a
few hosts get one planted fault each. The ground truth comes back with the
results, so a test can score recall and false positives.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

GPUS = 8
NICS = 8
GEMM = ("fp64", "fp32", "fp16", "fp64_tc", "tf32_tc", "bf16_tc", "fp16_tc", "int8_tc", "int4_tc")
GEMM_BASE = {
    "fp64": 9030.0,
    "fp32": 18353.0,
    "fp16": 33858.0,
    "fp64_tc": 18947.0,
    "tf32_tc": 128225.0,
    "bf16_tc": 265900.0,
    "fp16_tc": 280435.0,
    "int8_tc": 473072.0,
    "int4_tc": 975854.0,
}
MODELS = {
    "gpt_models/pytorch-gpt2-large": {"fp32": 27.2, "fp16": 41.8},
    "model-benchmarks/pytorch-resnet50": {"fp32": 1180.0, "fp16": 2390.0},
    "model-benchmarks/pytorch-bert-large": {"fp32": 110.0, "fp16": 305.0},
}
NCCL_SIZES = (8589934592, 1073741824)
FAULTS = (
    "gemm_slow_gpu",
    "pcie_half",
    "allreduce_slow",
    "ib_port",
    "kernel_launch_slow",
    "model_slow",
    "failed_benchmark",
    "missing_host",
)


def gemm_metric(prec: str) -> str:
    return f"{prec}_iops" if prec.startswith("int") else f"{prec}_flops"


@dataclass
class SynthFleet:
    hosts: list[str]  # the inventory
    lines: list[str]  # results-summary.jsonl lines
    faults: dict[str, str]  # host -> planted fault
    benign: set[str] = field(default_factory=set)  # the benign slower sub-population
    noise_lines: list[str] | None = None  # noise-summary.jsonl lines (each value's own noise), if any

    @property
    def text(self) -> str:
        return "\n".join(self.lines) + "\n"

    def healthy(self) -> list[str]:
        return [h for h in self.hosts if h not in self.faults]


def generate(
    n_hosts: int,
    seed: int,
    fault_fraction: float = 0.04,
    benign_fraction: float | None = None,
    benign_shift: float = 0.015,
    benign_per_gpu: bool = False,
    noise: tuple[float, float] = (0.003, 0.03),
) -> SynthFleet:
    rng = np.random.default_rng(seed)
    hosts = [f"node{i:05d}" for i in range(n_hosts)]
    lo, hi = noise

    def sig() -> float:
        return float(rng.uniform(lo, hi))

    if benign_fraction is None:
        benign_fraction = float(rng.uniform(0.05, 0.5))
    benign_mask = rng.random(n_hosts) < benign_fraction
    # Per-family noise: (sigma, share of it common to the host's GPUs).
    fam_sigma: dict[str, float] = {}

    def family(name: str) -> float:
        if name not in fam_sigma:
            fam_sigma[name] = sig()
        return fam_sigma[name]

    n_faulty = int(round(n_hosts * fault_fraction))
    faulty_idx = rng.choice(n_hosts, size=n_faulty, replace=False) if n_faulty else np.array([], dtype=int)
    faults: dict[str, str] = {}
    for j, i in enumerate(faulty_idx):
        faults[hosts[i]] = FAULTS[j % len(FAULTS)]

    shift = np.where(benign_mask, 1.0 - benign_shift, 1.0)  # performance multiplier (higher is better)
    # With benign_per_gpu, the slower batch is a share of the GPUs/NICs themselves, mixed within hosts.
    unit_shift = np.where(rng.random((n_hosts, max(GPUS, NICS))) < benign_fraction, 1.0 - benign_shift, 1.0)

    def per_gpu(name: str, base: float, n: int, higher: bool) -> np.ndarray:
        s = family(name)
        host_part = rng.normal(0.0, s * 0.5, size=(n_hosts, 1))
        unit_part = rng.normal(0.0, s * 0.866, size=(n_hosts, n))
        scale = unit_shift[:, :n] if benign_per_gpu else shift[:, None]
        perf = scale * (1.0 + host_part + unit_part)
        return base * perf if higher else base / perf

    def per_host(name: str, base: float, higher: bool) -> np.ndarray:
        s = family(name)
        perf = shift * (1.0 + rng.normal(0.0, s, size=n_hosts))
        return base * perf if higher else base / perf

    cols: dict[str, np.ndarray] = {}
    rcs: dict[str, np.ndarray] = {}
    # kernel-launch
    for leaf, base in (("event_time", 0.0057), ("wall_time", 0.0096)):
        arr = per_gpu(f"kernel-launch/{leaf}", base, GPUS, higher=False)
        for g in range(GPUS):
            cols[f"kernel-launch/{leaf}:{g}"] = arr[:, g]
    # gemm-flops
    for prec in GEMM:
        arr = per_gpu(f"gemm-flops/{prec}", GEMM_BASE[prec], GPUS, higher=True)
        for g in range(GPUS):
            cols[f"gemm-flops/{gemm_metric(prec)}:{g}"] = arr[:, g]
    # mem-bw
    for leaf, base in (("h2d_bw", 25.9), ("d2h_bw", 26.0), ("d2d_bw", 1290.0)):
        arr = per_gpu(f"mem-bw/{leaf}", base, GPUS, higher=True)
        for g in range(GPUS):
            cols[f"mem-bw/{leaf}:{g}"] = arr[:, g]
    # ib-loopback: the NIC index is in the name
    arr = per_gpu("ib-loopback/bw", 23.68, NICS, higher=True)
    for n in range(NICS):
        cols[f"ib-loopback/ib_write_8388608_ib{n}_bw"] = arr[:, n]
    # nccl-bw: host-level
    for size in NCCL_SIZES:
        bus = per_host(f"nccl-bw/{size}", 235.0 if size > 2**31 else 190.0, higher=True)
        cols[f"nccl-bw/allreduce_{size}_busbw:0"] = bus
        cols[f"nccl-bw/allreduce_{size}_algbw:0"] = bus / 1.75
        cols[f"nccl-bw/allreduce_{size}_time:0"] = size / (bus / 1.75) / 1e3
    # models: host-level
    for bench, precs in MODELS.items():
        for prec, base in precs.items():
            cols[f"{bench}/{prec}_train_throughput"] = per_host(f"{bench}/{prec}", base, higher=True)
    # cpu-memory-bw-latency: host-level
    for leaf, base, higher in (
        ("mem_read_bw", 170.0, True),
        ("mem_write_bw", 95.0, True),
        ("mem_copy_bw", 120.0, True),
        ("mem_read_lat_ns", 110.0, False),
        ("mem_write_lat_ns", 95.0, False),
    ):
        cols[f"cpu-memory-bw-latency/{leaf}"] = per_host(f"cpu-memory-bw-latency/{leaf}", base, higher=higher)
    for b in ("kernel-launch", "gemm-flops", "mem-bw", "ib-loopback", "nccl-bw", "cpu-memory-bw-latency"):
        rcs[f"{b}/return_code"] = np.zeros(n_hosts)
    for bench in MODELS:
        rcs[f"{bench}/return_code"] = np.zeros(n_hosts)

    dropped: dict[int, set[str]] = {}
    missing: set[int] = set()
    index = {h: i for i, h in enumerate(hosts)}
    for h, kind in faults.items():
        i = index[h]
        g = int(rng.integers(GPUS))
        if kind == "gemm_slow_gpu":
            f = 1.0 - rng.uniform(0.04, 0.20)
            for prec in GEMM:
                cols[f"gemm-flops/{gemm_metric(prec)}:{g}"][i] *= f
        elif kind == "pcie_half":
            for leaf in ("h2d_bw", "d2h_bw"):
                cols[f"mem-bw/{leaf}:{g}"][i] *= 0.5
        elif kind == "allreduce_slow":
            f = 1.0 - rng.uniform(0.10, 0.40)
            for size in NCCL_SIZES:
                cols[f"nccl-bw/allreduce_{size}_busbw:0"][i] *= f
                cols[f"nccl-bw/allreduce_{size}_algbw:0"][i] *= f
                cols[f"nccl-bw/allreduce_{size}_time:0"][i] /= f
        elif kind == "ib_port":
            cols[f"ib-loopback/ib_write_8388608_ib{g}_bw"][i] *= 1.0 - rng.uniform(0.2, 0.6)
        elif kind == "kernel_launch_slow":
            f = rng.uniform(1.5, 3.0)
            for leaf in ("event_time", "wall_time"):
                cols[f"kernel-launch/{leaf}:{g}"][i] *= f
        elif kind == "model_slow":
            bench = list(MODELS)[int(rng.integers(len(MODELS)))]
            f = 1.0 - rng.uniform(0.08, 0.25)
            for prec in MODELS[bench]:
                cols[f"{bench}/{prec}_train_throughput"][i] *= f
        elif kind == "failed_benchmark":
            bench = list(rcs)[int(rng.integers(len(rcs)))].rsplit("/", 1)[0]
            rcs[f"{bench}/return_code"][i] = 124 if rng.random() < 0.5 else 1
            dropped[i] = {c for c in cols if c.rsplit("/", 1)[0] == bench}
        elif kind == "missing_host":
            missing.add(i)

    names = list(cols) + list(rcs)
    matrix = np.column_stack([cols[c] for c in cols] + [rcs[c] for c in rcs])
    lines: list[str] = []
    for i, h in enumerate(hosts):
        if i in missing:
            continue
        row = matrix[i]
        drop = dropped.get(i, set())
        obj: dict[str, object] = {"node": h}
        for name, v in zip(names, row, strict=True):
            if name in drop:
                continue
            obj[name] = int(v) if name.endswith("/return_code") else round(float(v), 6)
        lines.append(json.dumps(obj))
    order = rng.permutation(len(lines))
    lines = [lines[k] for k in order]
    return SynthFleet(
        hosts=hosts, lines=lines, faults=faults, benign={hosts[i] for i in np.nonzero(benign_mask)[0]}
    )
