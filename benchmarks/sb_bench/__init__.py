"""sb_bench: the benchmark suite sb-fleet runs on every host.

Importing this package must not import torch: the runner (``sb_bench.host.runner``)
and the registry listing work on a host whose torch is broken, so that they
can still report *that* it is broken.
"""

__version__ = "0.1.0"
