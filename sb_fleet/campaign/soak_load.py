"""A soak round's load, read (pure): how long it runs, each node's summary as its process printed it, and
the throttled windows a round's judgement counts from it.

The load (campaign key ``load:``; the host side is ``sb_bench.host.burn``) runs after a round's benchmarks
until the round's end less ``load.margin``. Each node's process prints ``SB_LOAD_SUMMARY <json>`` last:
its start and end (epoch seconds), its work and its telemetry reduced to a few numbers. The control node
keeps these per round in ``load.json`` of the round's run directory (:data:`LOAD_FILE`)::

    {"schema_version": 1, "kind": "cpu-gemm", "start": ISO, "end": ISO, "seconds": 17.0,
     "hosts": {"node1": {"outcome": "ok", "reason": "", "summary": {...}}, ...}}
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

LOAD_FILE = "load.json"
SUMMARY_MARK = "SB_LOAD_SUMMARY"  # sb_bench.host.burn.SUMMARY_MARK (the suite is never imported here)
MAX_SUMMARY = 64 << 10  # a summary line longer than this is no summary (a host's garbage stays out)
MIN_LOAD_S = 1.0  # a load shorter than this is not started (the round's benchmarks took the round)


def load_seconds(round_start: float, round_len: float, margin: float, now: float) -> float:
    """How long the load runs from ``now`` (epoch seconds): to the round's end less the margin; 0 when
    less than :data:`MIN_LOAD_S` is left."""
    left = round_start + round_len - margin - now
    return left if left >= MIN_LOAD_S else 0.0


def parse_summary(stdout: str) -> dict[str, Any] | None:
    """The node's summary: the last ``SB_LOAD_SUMMARY`` line of its output, a JSON object; else None."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(SUMMARY_MARK + " "):
            text = line[len(SUMMARY_MARK) + 1 :]
            if len(text) > MAX_SUMMARY:
                return None
            try:
                doc = json.loads(text)
            except ValueError:
                return None
            return doc if isinstance(doc, dict) else None
    return None


def _count(v: Any) -> int:
    return int(v) if isinstance(v, (int, float)) and math.isfinite(v) and v > 0 else 0


def load_throttled_windows(entry: Mapping[str, Any] | None) -> int:
    """A node's throttled windows in a round's load (its ``load.json`` entry): the telemetry's sample
    intervals with a slowdown reason active (sb_bench.host.load_telemetry.THROTTLING); 0 without one."""
    if not isinstance(entry, Mapping):
        return 0
    summary = entry.get("summary")
    tele = summary.get("telemetry") if isinstance(summary, Mapping) else None
    return _count(tele.get("throttled_windows")) if isinstance(tele, Mapping) else 0


def host_entries(doc: Any) -> dict[str, Mapping[str, Any]]:
    """``load.json``'s nodes (empty for a round without a load, or a damaged file)."""
    hosts = doc.get("hosts") if isinstance(doc, Mapping) else None
    return (
        {str(h): e for h, e in hosts.items() if isinstance(e, Mapping)} if isinstance(hosts, Mapping) else {}
    )


def busy_seconds(entry: Mapping[str, Any] | None) -> float:
    """How long a node's load ran (its process's start to its end, as it said): 0 without a summary."""
    summary = entry.get("summary") if isinstance(entry, Mapping) else None
    if not isinstance(summary, Mapping):
        return 0.0
    start, end = summary.get("start"), summary.get("end")
    if isinstance(start, (int, float)) and isinstance(end, (int, float)) and end > start:
        return float(end - start)
    return 0.0
