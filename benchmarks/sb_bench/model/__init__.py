"""Model benchmarks: end-to-end training and inference of real model architectures."""

# benchmark name -> module (imported lazily by sb_bench.registry)
MODULES: dict[str, str] = {}
