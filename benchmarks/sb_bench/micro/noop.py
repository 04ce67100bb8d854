"""noop: a benchmark that does (almost) nothing, to measure sb-fleet's own fan-out cost.

It runs on the host without importing torch (``device: host``), optionally
sleeps ``sleep`` seconds, and reports how long its one step took. Scale tests
(``bench/scale.py``) and fault tests use it so that the time measured is the
tool's, not the benchmark's; a hang can be injected by stopping the process
during its sleep, or after its result is written (``linger``: the process stays
that long at exit, as a collective library's teardown can hang after the
figures are in).
"""

from __future__ import annotations

import atexit
import sys
import time

from sb_bench.core.benchmark import Benchmark
from sb_bench.core.context import RankContext
from sb_bench.core.metric import Metric, Param
from sb_bench.core.registry import register


@register
class Noop(Benchmark):
    name = "noop"
    description = "does nothing (optionally sleeps): the tool's own overhead, no torch import"
    params: dict = {
        "sleep": Param("float", 0.0, "seconds to sleep in the step"),
        "linger": Param("float", 0.0, "seconds the process stays at exit, after its result is written"),
        "device": Param("str", "host", "always the host: this benchmark never imports torch", ("host",)),
    }

    def metrics(self) -> list[Metric]:
        return [Metric("step_time", "ms", False, "max", "wall time of the one step (the sleep)")]

    def run_once(self, ctx: RankContext, harness) -> dict[str, float]:  # noqa: ANN001
        if self.args["linger"] > 0:  # at interpreter exit: after the rank file is written
            atexit.register(time.sleep, self.args["linger"])
        t0 = time.perf_counter()
        if self.args["sleep"] > 0:
            time.sleep(self.args["sleep"])
        return {"step_time": (time.perf_counter() - t0) * 1e3}


if __name__ == "__main__":
    from sb_bench.__main__ import standalone_main

    sys.exit(standalone_main(Noop.name))
