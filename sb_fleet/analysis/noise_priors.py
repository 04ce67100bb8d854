"""The suite's own knowledge of each benchmark's run-to-run noise: one relative sigma per metric.

A small fleet cannot measure its own spread (three hosts give one disagreement, not a
distribution), so the verdict needs to know beforehand how much one healthy value of a metric
moves from run to run. This table says it, keyed by SuperBench metric-name patterns (full match
on the name without ``:rank``; the first match wins), each with where the figure comes from.

The figures are *upper ends*: a healthy GPU, NIC or host repeating the benchmark stays within
about this relative standard deviation. The detector never trusts a prior below what it measures:
where the fleet itself is noisier (its pooled robust spread), the measured spread is used instead
(:func:`sb_fleet.analysis.majority.majority_check`).

Sources, in the ``source`` field of each row. None of these figures was measured on GPUs by
sb-fleet yet (no GPU fleet was at hand when they were written); they are assumptions, stated as such:

* ``assumed``: the upper end sb-fleet assumes for a healthy device repeating the benchmark,
  well inside the 10% variance SuperBench's own NDv4 quick-scan rules allow every metric
  (``/work/shared/reference/superbench-ndv4-quickscan/rule.yaml``; 1,939 nodes, SuperBench v0.4).
* ``suite``: metrics the suite's repeatability figure (``sb_fleet.analysis.figures``, "too noisy
  above 5% CV") is known to find noisy: kernel-launch latency, CPU memory, disks, TCP.
* ``default``: no knowledge; a conservative 3%.

Replace a row by a measured figure when one is at hand (the ``repeatability`` section of a
report gives each metric's CV over repeated runs).

``bench/verdict_quality.py`` draws each family's noise in generated fleets up to these figures,
and prints what a fleet noisier than the table does to recall and false positives (``--noise``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from sb_fleet.analysis.superbench.metric_names import parse_metric


@dataclass(frozen=True)
class NoisePrior:
    pattern: str  # regex, full match on the metric name without :rank
    sigma: float  # relative run-to-run standard deviation of one value
    source: str


NOISE_PRIORS: tuple[NoisePrior, ...] = (
    NoisePrior(
        r"noop/.*",
        0.5,
        "suite: one step of no work timed once (sub-microsecond, timer-bound): it measures the tool, not the hardware",
    ),
    NoisePrior(r"kernel-launch/.*", 0.03, "suite (assumed): launch latency jitters by a few percent"),
    NoisePrior(r"gemm-flops/.*", 0.01, "assumed: tensor-core and SIMT GEMM repeat within 1%"),
    NoisePrior(
        r"cublaslt-gemm/.*|hipblaslt-gemm/.*|rocm-gemm.*|cublas-function/.*", 0.01, "assumed: as gemm-flops"
    ),
    NoisePrior(
        r"mem-bw/.*|gpu-copy-bw/.*|gpu-stream.*", 0.01, "assumed: device and PCIe copies repeat within 1%"
    ),
    NoisePrior(
        r"ib-loopback/.*|ib-traffic/.*", 0.01, "assumed: RDMA loopback at line rate repeats within 1%"
    ),
    NoisePrior(r"(nccl|rccl)-bw.*/.*", 0.01, "assumed: large-message all-reduce repeats within 1%"),
    NoisePrior(
        r".*(_models|model-benchmarks)/.*",
        0.01,
        "assumed: training throughput of one model repeats within 1%",
    ),
    NoisePrior(
        r"cpu-memory-bw-latency/.*",
        0.02,
        "suite (assumed): CPU memory bandwidth and latency move with NUMA placement",
    ),
    NoisePrior(
        r"disk-benchmark/.*", 0.05, "suite (assumed): disk throughput moves with caches and other tenants"
    ),
    NoisePrior(r"tcp-bw/.*|.*pair.*", 0.05, "suite (assumed): TCP and pair traffic over shared links"),
    NoisePrior(r".*", 0.03, "default: no knowledge of this metric's noise"),
)

_COMPILED = tuple((re.compile(p.pattern), p) for p in NOISE_PRIORS)


@lru_cache(maxsize=65536)
def noise_prior(metric: str) -> NoisePrior:
    """The prior for a metric name (rank, device indexes and model path allowed)."""
    base = parse_metric(metric).base
    for rx, p in _COMPILED:
        if rx.fullmatch(base):
            return p
    return NOISE_PRIORS[-1]
