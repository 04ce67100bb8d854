"""Low-noise synthetic fleets with a fault spread thinly over several related metrics.

The fleets of :mod:`tests.synth.fleet` with every metric family's run-to-run spread
drawn from 0.2-0.8% (tight, as tensor-core GEMMs on a healthy fleet are), and one more
planted fault, ``tc_gemm_few_percent``: on one GPU of the host, every tensor-core GEMM
precision is 1.5-3% low (one factor per host). Each metric alone is many robust sigmas
out but under the fixed practical floors (2-3%); together they are unmistakable.
The generator's benign sub-population (1.5% slower hosts, or GPUs with
``benign_per_gpu``) and its other faults are kept, so false positives are measured too.
With ``heavy_tails``, every measured value also gets a Student-t (3 degrees of freedom)
jitter of scale ``tail_scale``: rare wild values, as real fleets have and Gaussian noise lacks.
"""

from __future__ import annotations

import json

import numpy as np

from tests.synth.fleet import GEMM, GPUS, SynthFleet, gemm_metric, generate

TC_FAULT = "tc_gemm_few_percent"
TC_PRECISIONS = tuple(p for p in GEMM if p.endswith("_tc"))
LOW_NOISE = (0.002, 0.008)
TC_DROP = (0.015, 0.03)


def generate_lownoise(
    n_hosts: int,
    seed: int,
    fault_fraction: float = 0.04,
    tc_fraction: float = 0.01,
    benign_fraction: float | None = None,
    benign_per_gpu: bool = False,
    heavy_tails: bool = False,
    tail_scale: float = 0.001,
) -> SynthFleet:
    fleet = generate(
        n_hosts,
        seed=seed,
        fault_fraction=fault_fraction,
        benign_fraction=benign_fraction,
        benign_per_gpu=benign_per_gpu,
        noise=LOW_NOISE,
    )
    rng = np.random.default_rng(seed + 7_000_003)
    healthy = [h for h in fleet.hosts if h not in fleet.faults]
    n_tc = int(round(n_hosts * tc_fraction))
    picked = set(rng.choice(len(healthy), size=n_tc, replace=False).tolist()) if n_tc else set()
    targets = {healthy[i] for i in picked}
    lines = []
    for line in fleet.lines:
        row = json.loads(line)
        if heavy_tails:
            for key, v in row.items():
                if key != "node" and not key.endswith("/return_code"):
                    row[key] = round(v * (1.0 + tail_scale * float(rng.standard_t(3))), 6)
            line = json.dumps(row)
        if row["node"] in targets:
            g = int(rng.integers(GPUS))
            factor = 1.0 - float(rng.uniform(*TC_DROP))
            for prec in TC_PRECISIONS:
                key = f"gemm-flops/{gemm_metric(prec)}:{g}"
                row[key] = round(row[key] * factor, 6)
            line = json.dumps(row)
        lines.append(line)
    faults = dict(fleet.faults)
    faults.update(dict.fromkeys(targets, TC_FAULT))
    return SynthFleet(hosts=fleet.hosts, lines=lines, faults=faults, benign=fleet.benign)
