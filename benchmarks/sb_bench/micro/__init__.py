"""Micro-benchmarks: compute, memory, communication, storage."""

# benchmark name -> module (imported lazily by sb_bench.registry)
MODULES: dict[str, str] = {
    "gemm-flops": "sb_bench.micro.gemm_flops",
    "noop": "sb_bench.micro.noop",
}
