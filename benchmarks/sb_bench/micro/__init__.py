"""Micro-benchmarks: compute, memory, communication, storage."""

# benchmark name -> module (imported lazily by sb_bench.core.registry)
MODULES: dict[str, str] = {
    "gemm-flops": "sb_bench.micro.gemm_flops",
    "kernel-launch": "sb_bench.micro.kernel_launch",
    "cublas-function": "sb_bench.micro.cublas_function",
    "cudnn-function": "sb_bench.micro.cudnn_function",
    "pytorch-matmul": "sb_bench.micro.matmul",
    "pytorch-sharding-matmul": "sb_bench.micro.sharding_matmul",
    "mem-bw": "sb_bench.micro.mem_bw",
    "gpu-copy-bw": "sb_bench.micro.gpu_copy_bw",
    "nccl-bw": "sb_bench.micro.nccl_bw",
    "pytorch-computation-communication-overlap": "sb_bench.micro.computation_communication_overlap",
    "ib-loopback": "sb_bench.micro.ib_loopback",
    "disk-benchmark": "sb_bench.micro.disk_benchmark",
    "cpu-memory-bw-latency": "sb_bench.micro.cpu_memory_bw_latency",
    "noop": "sb_bench.micro.noop",
    "tcp-bw": "sb_bench.micro.tcp_bw",
    "gpu-stream": "sb_bench.micro.gpu_stream",
    "gpu-burn": "sb_bench.micro.gpu_burn",
}

# SuperBench config entry name -> the benchmark it runs (its results are grouped under the latter,
# e.g. ``sharding-matmul`` reports ``pytorch-sharding-matmul/allreduce_time``).
ALIASES: dict[str, str] = {
    "matmul": "pytorch-matmul",
    "sharding-matmul": "pytorch-sharding-matmul",
    "computation-communication-overlap": "pytorch-computation-communication-overlap",
}
