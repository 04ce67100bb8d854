"""Model benchmarks: end-to-end training and inference of real model architectures."""

from sb_bench.model.catalog import module_table

# benchmark name -> module (imported lazily by sb_bench.core.registry)
MODULES: dict[str, str] = module_table()
