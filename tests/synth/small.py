"""Small fleets (3-16 hosts) with one planted fault, for the verdict's recall and false positives.

The fleets of :mod:`tests.synth.fleet` (NDv4-like, ~150 metrics, a benign 1.5% batch of hosts)
with every family's run-to-run noise drawn from ``noise`` (default 0.3-1%, inside the suite's
noise priors, :mod:`sb_fleet.analysis.noise_priors`) and no faults of their own; then one host
gets one fault. The sizes are drawn from the ranges the issue states (faults of 6% or more), not
chosen for the detector:

* seen kinds (the generator's own): one GPU slow on every GEMM (6-20%), a degraded PCIe link on one
  GPU (6-50%), slow all-reduce (6-40%), a weak IB port (6-60%), slow kernel launch on one GPU
  (1.5-3x, the generator's range), a slow model (6-25%);
* unseen kinds (no test was written against them): a throttled host (every GEMM of every GPU 6-20%
  low), one GPU's device memory (d2d) 6-30% low, the host's CPU memory bandwidth 6-30% low, one
  GPU's FP64 (SIMT and tensor core) 6-20% low;
* ``gross``: one metric at a thousandth of its peers (a thousand times longer for a time).
"""

from __future__ import annotations

import json

import numpy as np

from sb_fleet.analysis.superbench.metric_names import Directions, parse_metric
from tests.synth.corpus import NoiseShapes
from tests.synth.fleet import GEMM, GPUS, MODELS, NCCL_SIZES, NICS, SynthFleet, gemm_metric, generate

SEEN = ("gemm_slow_gpu", "pcie_degraded", "allreduce_slow", "ib_port", "kernel_launch_slow", "model_slow")
UNSEEN = ("host_throttled", "d2d_slow", "cpu_mem_slow", "fp64_gpu")
GROSS = "gross"


def _scale(row: dict, key: str, factor: float) -> None:
    if key in row:
        row[key] = row[key] * factor


def plant(row: dict, kind: str, rng: np.random.Generator) -> str:
    """Plant ``kind`` in one host's results line (in place); returns what was done, in words."""
    g = int(rng.integers(GPUS))

    def drop(lo: float, hi: float) -> float:
        return 1.0 - float(rng.uniform(lo, hi))

    if kind == "gemm_slow_gpu":
        f = drop(0.06, 0.20)
        for p in GEMM:
            _scale(row, f"gemm-flops/{gemm_metric(p)}:{g}", f)
    elif kind == "pcie_degraded":
        f = drop(0.06, 0.50)
        for leaf in ("h2d_bw", "d2h_bw"):
            _scale(row, f"mem-bw/{leaf}:{g}", f)
    elif kind == "allreduce_slow":
        f = drop(0.06, 0.40)
        for size in NCCL_SIZES:
            _scale(row, f"nccl-bw/allreduce_{size}_busbw:0", f)
            _scale(row, f"nccl-bw/allreduce_{size}_algbw:0", f)
            _scale(row, f"nccl-bw/allreduce_{size}_time:0", 1 / f)
    elif kind == "ib_port":
        f = drop(0.06, 0.60)
        _scale(row, f"ib-loopback/ib_write_8388608_ib{int(rng.integers(NICS))}_bw", f)
    elif kind == "kernel_launch_slow":
        f = float(rng.uniform(1.5, 3.0))
        for leaf in ("event_time", "wall_time"):
            _scale(row, f"kernel-launch/{leaf}:{g}", f)
    elif kind == "model_slow":
        bench = list(MODELS)[int(rng.integers(len(MODELS)))]
        f = drop(0.06, 0.25)
        for prec in MODELS[bench]:
            _scale(row, f"{bench}/{prec}_train_throughput", f)
    elif kind == "host_throttled":
        f = drop(0.06, 0.20)
        for p in GEMM:
            for k in range(GPUS):
                _scale(row, f"gemm-flops/{gemm_metric(p)}:{k}", f)
    elif kind == "d2d_slow":
        f = drop(0.06, 0.30)
        _scale(row, f"mem-bw/d2d_bw:{g}", f)
    elif kind == "cpu_mem_slow":
        f = drop(0.06, 0.30)
        for leaf in ("mem_read_bw", "mem_write_bw", "mem_copy_bw"):
            _scale(row, f"cpu-memory-bw-latency/{leaf}", f)
    elif kind == "fp64_gpu":
        f = drop(0.06, 0.20)
        for p in ("fp64", "fp64_tc"):
            _scale(row, f"gemm-flops/{gemm_metric(p)}:{g}", f)
    elif kind == GROSS:
        keys = [k for k in row if k != "node" and not k.endswith("/return_code")]
        key = keys[int(rng.integers(len(keys)))]
        lower_better = key.split(":")[0].endswith(("_time", "_lat_ns"))
        row[key] = row[key] * (1000.0 if lower_better else 0.001)
        return f"{key} at 1/1000"
    else:
        raise ValueError(kind)
    return kind


def generate_small(
    n_hosts: int,
    seed: int,
    kind: str | None,
    noise: tuple[float, float] = (0.003, 0.01),
    shapes: NoiseShapes | None = None,
) -> tuple[SynthFleet, str | None]:
    """A fleet of ``n_hosts`` with one host faulty (``kind``; None: a healthy fleet).

    ``shapes`` (:func:`tests.synth.corpus.noise_shapes`): every value's noise is drawn from the real
    runs' healthy hosts instead of a Gaussian (heavy tails, contended hosts far off), scaled by its
    family's sigma from ``noise``, and each value gets the own noise that host measured with it, in
    ``SynthFleet.noise_lines`` (a run's noise-summary.jsonl)."""
    base = generate(n_hosts, seed=seed, fault_fraction=0.0, noise=(0.0, 0.0) if shapes else noise)
    rng = np.random.default_rng(seed + 1_000_003)
    rows = [json.loads(line) for line in base.lines]
    noise_rows = _shape(rows, shapes, noise, np.random.default_rng(seed + 2_000_003)) if shapes else None
    faults: dict[str, str] = {}
    what = None
    if kind is not None:
        i = int(rng.integers(n_hosts))
        what = plant(rows[i], kind, rng)
        faults[rows[i]["node"]] = kind
    lines = [json.dumps(r) for r in rows]
    fleet = SynthFleet(hosts=base.hosts, lines=lines, faults=faults, benign=base.benign)
    if noise_rows is not None:
        fleet.noise_lines = [json.dumps(r) for r in noise_rows]
    return fleet, what


def _shape(
    rows: list[dict], shapes: NoiseShapes, noise: tuple[float, float], rng: np.random.Generator
) -> list[dict]:
    """Draw the noise from ``shapes`` (in place) and return the noise-summary rows. The corpus measured
    how a host lies against the other hosts (one value per host: contention takes a host as a whole),
    so each host draws one (deviation, own noise) per metric family, shared by that family's metrics and
    its GPUs; the GPUs of one host then scatter about it by a Gaussian of the family's sigma."""
    directions = Directions()
    fam_sigma: dict[str, float] = {}
    out = []
    for row in rows:
        own_row: dict[str, object] = {"node": row["node"]}
        host_draw: dict[str, tuple[float, float]] = {}
        for k, v in list(row.items()):
            if k == "node" or k.endswith("return_code") or not isinstance(v, (int, float)):
                continue
            fam = parse_metric(k).family
            s = fam_sigma.setdefault(fam, float(rng.uniform(*noise)))
            if fam not in host_draw:
                z, r = shapes.draw(rng, (1,))
                host_draw[fam] = (float(z[0]), float(r[0]))
            z_host, r_host = host_draw[fam]
            worse = float(np.exp(s * (z_host + float(rng.normal()))))
            row[k] = v / worse if directions.of(k) > 0 else v * worse
            if np.isfinite(r_host):
                own_row[k] = round(max(s * r_host, 0.0), 6)
        out.append(own_row)
    return out
