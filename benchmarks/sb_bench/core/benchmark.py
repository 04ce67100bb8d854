"""The base class of every benchmark.

A benchmark module declares its parameters and metrics and holds only the
work it measures. Two ways to write one:

* return timed :class:`Case` objects from :meth:`Benchmark.cases`: the
  harness owns warm-up, the timed loop (``num_steps`` or ``duration``), device
  synchronisation and the correctness check; the case turns seconds per step
  into metric values;
* or override :meth:`Benchmark.run_once` when the work has its own loop (an
  external tool, a training loop) and return the metric values of one run.

The harness repeats either ``run_count`` times and builds the result envelope.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from sb_bench.core.context import RankContext
from sb_bench.core.metric import Metric, Param


class SkipBenchmark(Exception):
    """The benchmark cannot run here (no GPU, no tool, no device): a skip with a reason, not a failure."""


class CheckFailed(Exception):
    """The benchmark ran but its output is wrong (a correctness check failed)."""


@dataclass
class Case:
    """One timed piece of work.

    ``step`` does one unit of work; ``metrics`` maps the measured seconds per
    step to metric values; ``check``, run once after timing, returns an error
    message when the output is wrong (or None).
    """

    key: str
    step: Callable[[], Any]
    metrics: Callable[[float], dict[str, float]]
    check: Callable[[], str | None] | None = None


# Parameters every benchmark has; the harness interprets them.
COMMON_PARAMS: dict[str, Param] = {
    "num_warmup": Param("int", 8, "untimed steps before timing"),
    "num_steps": Param("int", 64, "timed steps per run (ignored when duration > 0)"),
    "duration": Param("float", 0.0, "seconds to run each case instead of num_steps (0: use num_steps)"),
    "run_count": Param("int", 1, "how many times to repeat the measurement (the spread is reported)"),
    "device": Param(
        "str", "auto", "where to run: auto (cuda if present), cuda or cpu", ("auto", "cuda", "cpu")
    ),
}


class Benchmark:
    name: ClassVar[str] = ""
    kind: ClassVar[str] = "micro"  # SuperBench's benchmark type: micro | model
    description: ClassVar[str] = ""
    params: ClassVar[dict[str, Param]] = {}
    # Benchmarks that need every rank of a torch.distributed world set this.
    needs_distributed: ClassVar[bool] = False

    def __init__(self, args: dict[str, Any]):
        self.args = args

    def skip_metric(self, names: str | Iterable[str], reason: str) -> None:
        """Record that declared metrics are not measured here, and why (e.g. ``tf32_tc_flops`` on a CPU).

        The other metrics are still reported; the reasons go into the result's ``reason``. When a run
        measures nothing at all and every metric has a reason, the result is ``skipped``.
        """
        skipped = self.__dict__.setdefault("skipped", {})
        for n in [names] if isinstance(names, str) else names:
            skipped[n] = reason

    def fail_metric(self, names: str | Iterable[str], reason: str) -> None:
        """Record that declared metrics were measured wrong (a failed check of one case, an efficiency
        above the device's peak): they are dropped, the others are still reported, and the result
        fails with return code 3 and the reasons — one bad message size does not lose the rest."""
        failed = self.__dict__.setdefault("failed", {})
        for n in [names] if isinstance(names, str) else names:
            failed[n] = reason

    # -- declarations ------------------------------------------------------------------------
    @classmethod
    def all_params(cls) -> dict[str, Param]:
        return {**COMMON_PARAMS, **cls.params}

    @classmethod
    def parse_params(cls, given: dict[str, Any]) -> dict[str, Any]:
        """Typed parameters from a config's ``parameters`` mapping; unknown names are errors."""
        spec = cls.all_params()
        norm = {str(k).replace("-", "_"): v for k, v in (given or {}).items()}
        unknown = sorted(set(norm) - set(spec))
        if unknown:
            raise ValueError(
                f"unknown parameter {unknown[0]!r} for {cls.name}; known: {', '.join(sorted(spec))}"
            )
        out = {}
        for pname, p in spec.items():
            out[pname] = p.parse(pname, norm[pname]) if pname in norm else p.default
        for k in ("num_steps", "run_count"):
            if out[k] < 1:
                raise ValueError(f"parameter {k}: must be >= 1")
        if out["num_warmup"] < 0 or out["duration"] < 0:
            raise ValueError("parameters num_warmup and duration must be >= 0")
        return out

    def metrics(self) -> list[Metric]:
        """The metrics this instance (with its parameters) reports."""
        raise NotImplementedError

    # -- work --------------------------------------------------------------------------------
    def setup(self, ctx: RankContext) -> None:
        """Allocate buffers, build models. Not timed."""

    def cases(self, ctx: RankContext) -> Iterable[Case]:
        raise NotImplementedError(f"{self.name} defines neither cases() nor run_once()")

    def run_once(self, ctx: RankContext, harness: Any) -> dict[str, float]:
        """Metric values of one run. The default times every case with the harness."""
        values: dict[str, float] = {}
        for case in self.cases(ctx):
            values.update(harness.time_case(ctx, case))
        return values

    def teardown(self, ctx: RankContext) -> None:
        """Release what setup took."""
