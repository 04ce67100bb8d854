"""Python's cyclic garbage collector held off while a command builds large acyclic data.

Parsing a 10,000-host results file makes about 1.5 million dicts, lists and tuples. Each 700 new
container objects start a young collection, and every tenth of those an older one, which walks every
object made so far: three full collections and ~170 others in one report, 0.04-0.15 s of a 10,000-host
report's analysis on this project's 2-core machine. The data a report builds are acyclic (parsed JSON,
numpy arrays, records of them), so reference counting frees them as before: a second 10,000-host report
in one process left 3,000 objects (0.5 MB, matplotlib's figures) in cycles, which the collector finds
once it is on again after the block, as it was.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Within this block the cyclic collector does not run (unless something calls ``gc.collect``)."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
