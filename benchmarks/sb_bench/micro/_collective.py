"""Timing work that every rank of a torch.distributed group does together.

Every rank must run the same number of steps (a rank that stops early leaves the others waiting
in a collective), so ``duration`` is not used here: ``num_steps`` counts. After warm-up the ranks
meet at a barrier, so the timed loop starts together on all of them (as nccl-tests does).
"""

from __future__ import annotations

from sb_bench.core.benchmark import Case
from sb_bench.core.context import RankContext
from sb_bench.core.harness import Harness


def time_together(ctx: RankContext, harness: Harness, case: Case) -> dict[str, float]:
    for _ in range(harness.num_warmup):
        case.step()
    ctx.barrier()
    h = Harness({"num_warmup": 0, "num_steps": harness.num_steps, "duration": 0.0})
    h.samples, h.notes = harness.samples, harness.notes  # the run's, whoever timed them
    out = h.time_case(ctx, case)
    harness.last_laps = h.last_laps
    return out


def run_cases_together(bench, ctx: RankContext, harness: Harness) -> dict[str, float]:
    values: dict[str, float] = {}
    for case in bench.cases(ctx):
        values.update(time_together(ctx, harness, case))
    return values
