"""cpu-memory-bw-latency: host memory bandwidth (STREAM-style) and latency (pointer chase).

Host memory is a common culprit on bad nodes (a missing or degraded DIMM, a mis-set NUMA mode).
SuperBench runs Intel MLC for this; this module measures the same quantities with PyTorch's
multithreaded CPU kernels and a small C pointer-chase loop, under SuperBench's metric names:

Bandwidth, whole CPU (all of torch's threads), MB/s (1 MB = 1e6 bytes), arrays of ``size`` bytes
of float64; bytes counted are the logical bytes each kernel reads and writes (STREAM's convention;
write-allocate traffic is not counted, so figures sit below MLC's non-temporal-store figures):

* ``mem_max_bandwidth_all_reads_bw``: ``a.sum()`` — size bytes read;
* ``mem_max_bandwidth_1_1_reads-writes_bw``: ``b = a`` (copy) — 2·size;
* ``mem_max_bandwidth_2_1_reads-writes_bw``: ``c = a + b`` — 3·size;
* ``mem_max_bandwidth_3_1_reads-writes_bw``: ``d = a + b·c`` (addcmul) — 4·size;
* ``mem_max_bandwidth_stream-triad_like_bw``: ``a = b + s·c`` — 3·size.

Latency, ns: ``mem_latency_matrix_numa_<i>_<j>_lat`` — one thread on NUMA node i's CPUs follows a
random cyclic chain of pointers, one per 64-byte line, through ``latency_size`` bytes placed on
node j (``set_mempolicy``); time per hop. The chain defeats caches and prefetchers; TLB misses are
included, as in MLC's default mode. The chase is a C loop compiled at run time with the host's
``cc`` (an interpreted loop would measure Python): without a C compiler the latency metrics are
skipped with that reason. On a host with one NUMA node the matrix is the single entry ``0_0``.
"""

from __future__ import annotations

import ctypes
import os
import platform
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from sb_bench.core.benchmark import Benchmark, Case, CheckFailed
from sb_bench.core.context import RankContext
from sb_bench.core.metric import Metric, Param
from sb_bench.core.registry import register

BW_TESTS = {
    "all_reads": ("mem_max_bandwidth_all_reads_bw", 1),
    "1_1_reads-writes": ("mem_max_bandwidth_1_1_reads-writes_bw", 2),
    "2_1_reads-writes": ("mem_max_bandwidth_2_1_reads-writes_bw", 3),
    "3_1_reads-writes": ("mem_max_bandwidth_3_1_reads-writes_bw", 4),
    "stream-triad_like": ("mem_max_bandwidth_stream-triad_like_bw", 3),
}

_CHASE_C = r"""
#include <stddef.h>
size_t sb_chase(const size_t *next, size_t start, size_t hops) {
    size_t p = start;
    for (size_t i = 0; i < hops; i++) p = next[p];
    return p;
}
"""

# set_mempolicy(2) system call numbers; MPOL_BIND = 2, MPOL_DEFAULT = 0.
_SET_MEMPOLICY = {"x86_64": 238, "aarch64": 237, "ppc64le": 261}


def numa_nodes() -> dict[int, list[int]]:
    """NUMA node -> its CPUs (from sysfs); ``{0: all CPUs}`` where sysfs does not say."""
    base = Path("/sys/devices/system/node")
    nodes: dict[int, list[int]] = {}
    for d in sorted(base.glob("node[0-9]*")):
        try:
            cpus = _parse_cpulist((d / "cpulist").read_text())
        except OSError:
            continue
        if cpus:
            nodes[int(d.name[4:])] = cpus
    return nodes or {0: sorted(os.sched_getaffinity(0))}


def _parse_cpulist(text: str) -> list[int]:
    out: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def compile_chase(workdir: str):
    """The pointer-chase function, compiled with the host's C compiler (None when there is none)."""
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        return None
    src = Path(workdir) / "chase.c"
    lib = Path(workdir) / "chase.so"
    src.write_text(_CHASE_C)
    proc = subprocess.run(
        [cc, "-O2", "-shared", "-fPIC", "-o", str(lib), str(src)], capture_output=True, text=True, timeout=60
    )
    if proc.returncode != 0:
        return None
    fn = ctypes.CDLL(str(lib)).sb_chase
    fn.restype = ctypes.c_size_t
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]
    return fn


def build_chain(size: int, seed: int = 7):
    """A random cyclic chain through ``size`` bytes, one hop per 64-byte line (numpy, size_t indices)."""
    import numpy as np

    per_line = 64 // 8
    lines = max(2, size // 64)
    order = np.random.default_rng(seed).permutation(lines).astype(np.uint64) * per_line
    nxt = np.zeros(lines * per_line, dtype=np.uint64)
    nxt[order] = np.roll(order, -1)
    return nxt, int(order[0])


class _MemPolicy:
    """Bind the calling thread's new allocations to one NUMA node (no-op where unsupported)."""

    def __init__(self, node: int | None):
        self.node = node
        self.nr = _SET_MEMPOLICY.get(platform.machine())
        self.libc = ctypes.CDLL(None, use_errno=True) if self.nr else None

    def __enter__(self):
        if self.node is not None and self.libc is not None:
            mask = ctypes.c_ulong(1 << self.node)
            if self.libc.syscall(self.nr, 2, ctypes.byref(mask), ctypes.c_ulong(self.node + 2)) != 0:
                raise OSError(ctypes.get_errno(), f"set_mempolicy(MPOL_BIND, node {self.node}) failed")
        return self

    def __exit__(self, *exc):
        if self.node is not None and self.libc is not None:
            self.libc.syscall(self.nr, 0, None, ctypes.c_ulong(0))


def can_bind_memory() -> bool:
    return platform.machine() in _SET_MEMPOLICY


@register
class CpuMemoryBwLatency(Benchmark):
    name = "cpu-memory-bw-latency"
    description = (
        "host memory bandwidth (STREAM-style kernels, MB/s) and pointer-chase latency per NUMA pair (ns)"
    )
    params = {
        "tests": Param(
            "list[str]",
            ["max_bandwidth", "latency_matrix"],
            "what to measure",
            ("max_bandwidth", "latency_matrix", "bandwidth_matrix"),
        ),
        "size": Param("size", 256 << 20, "bytes per array of the bandwidth kernels"),
        "latency_size": Param("size", 512 << 20, "bytes the pointer chain runs through (well above the LLC)"),
        "hops": Param("int", 2_000_000, "pointer hops timed per latency measurement"),
    }

    def metrics(self) -> list[Metric]:
        out = []
        tests = self.args["tests"]
        if "max_bandwidth" in tests:
            out += [
                Metric(name, "MB/s", True, "max", f"whole-CPU {key} bandwidth")
                for key, (name, _) in BW_TESTS.items()
            ]
        if "latency_matrix" in tests:
            nodes = list(numa_nodes())
            pairs = (
                [(i, j) for i in nodes for j in nodes] if can_bind_memory() else [(i, i) for i in nodes[:1]]
            )
            out += [
                Metric(
                    f"mem_latency_matrix_numa_{i}_{j}_lat",
                    "ns",
                    False,
                    "max",
                    f"load-to-use latency, CPUs of node {i}, memory of node {j}",
                )
                for i, j in pairs
            ]
        return out

    def setup(self, ctx: RankContext) -> None:
        import torch

        if "bandwidth_matrix" in self.args["tests"]:
            self.notes = {
                "bandwidth_matrix": "bandwidth_matrix is not measured (no per-NUMA-pair bandwidth "
                "here; see the mem_max_bandwidth_* metrics)"
            }
        self.tmp = tempfile.mkdtemp(prefix="sb-chase-")
        self.chase = None
        if "latency_matrix" in self.args["tests"]:
            self.chase = compile_chase(self.tmp)
            if self.chase is None:
                self.skip_metric(
                    [m.name for m in self.metrics() if m.name.endswith("_lat")],
                    "no working C compiler (cc) for the pointer-chase loop",
                )
        if "max_bandwidth" in self.args["tests"]:
            n = self.args["size"] // 8
            self.arr = [torch.full((n,), float(i + 1), dtype=torch.float64) for i in range(4)]

    def teardown(self, ctx: RankContext) -> None:
        self.arr = []
        shutil.rmtree(getattr(self, "tmp", ""), ignore_errors=True)

    def cases(self, ctx: RankContext):
        import torch

        if "max_bandwidth" not in self.args["tests"]:
            return
        a, b, c, d = self.arr
        size = self.args["size"]
        kernels = {
            "all_reads": lambda: a.sum(),
            "1_1_reads-writes": lambda: b.copy_(a),
            "2_1_reads-writes": lambda: torch.add(a, b, out=c),
            "3_1_reads-writes": lambda: torch.addcmul(a, b, c, out=d),
            "stream-triad_like": lambda: torch.add(b, c, alpha=3.0, out=a),
        }
        for key, (metric, arrays) in BW_TESTS.items():
            yield Case(
                key,
                kernels[key],
                lambda s, metric=metric, arrays=arrays: {metric: arrays * size / s / 1e6},
                lambda: (
                    None if all(bool(torch.isfinite(x[:1]).all()) for x in self.arr) else "non-finite data"
                ),
            )

    def run_once(self, ctx: RankContext, harness) -> dict[str, float]:
        values = super().run_once(ctx, harness)
        if self.chase is not None:
            for m in self.metrics():
                if m.name.startswith("mem_latency_matrix_numa_"):
                    i, j = (int(x) for x in m.name.split("_")[4:6])
                    values[m.name] = self._latency(i, j)
        return values

    def _latency(self, cpu_node: int, mem_node: int) -> float:
        nodes = numa_nodes()
        multi = len(nodes) > 1
        with _MemPolicy(mem_node if multi else None):
            nxt, start = build_chain(self.args["latency_size"])
        before = os.sched_getaffinity(0)
        if multi:
            os.sched_setaffinity(0, set(nodes[cpu_node]) & set(before) or set(nodes[cpu_node]))
        try:
            ptr = nxt.ctypes.data
            hops = self.args["hops"]
            self.chase(ptr, start, max(1, hops // 10))
            t0 = time.perf_counter()
            end = self.chase(ptr, start, hops)
            seconds = time.perf_counter() - t0
        finally:
            if multi:
                os.sched_setaffinity(0, before)
        if end >= len(nxt) or end % 8:
            raise CheckFailed(f"pointer chase ended at {end}, outside its chain")
        return seconds / hops * 1e9


if __name__ == "__main__":
    import sys

    from sb_bench.__main__ import standalone_main

    sys.exit(standalone_main(CpuMemoryBwLatency.name))
