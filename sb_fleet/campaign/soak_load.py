"""A soak round's load, read (pure): how long it runs, each node's summary as its process printed it, and
the throttled windows a round's judgement counts from it.

The load (campaign key ``load:``; the host side is ``sb_bench.host.burn``) runs after a round's benchmarks
until the round's end less ``load.margin``. Each node's process prints ``SB_LOAD_SUMMARY <json>`` last:
its start and end (epoch seconds), its work and its telemetry reduced to a few numbers. The control node
keeps them per round in ``load.json`` of the round's run directory (:data:`LOAD_FILE`), in columns
(:func:`load_doc`): ~100 bytes a node a round, kept when the round's directory is compacted.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sb_fleet import bounded_json

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
            try:  # a host's line: bounded in size and depth (a nested one is no summary, not a traceback)
                doc = bounded_json.loads(line[len(SUMMARY_MARK) + 1 :], MAX_SUMMARY)
            except ValueError:
                return None
            return doc if isinstance(doc, dict) else None
    return None


# Each node's numbers in load.json, a column each (a node's value at its position in ``hosts``): from its
# summary (sb_bench.host.burn) and its telemetry's (sb_bench.host.load_telemetry.Summary).
SUMMARY_COLUMNS = ("start", "working_from", "end", "ended_by", "gemms", "gflops", "errors")
TELEMETRY_COLUMNS = (
    "samples",
    "throttled_windows",
    "max_temp_c",
    "min_sm_mhz",
    "min_mem_mhz",
    "mean_power_w",
)


def load_doc(
    kind: str,
    start: str,
    end: str,
    seconds: float,
    stopped: str | None,
    entries: Mapping[str, Mapping[str, Any]],
) -> dict[str, Any]:
    """``load.json``, compact: the round's nodes once, then a column per number (:data:`SUMMARY_COLUMNS`,
    :data:`TELEMETRY_COLUMNS`, ``outcome``; a counter's ``[start, end]`` under ``counters``), and only where
    a node has them its words (why no load, the load's or the telemetry's problem) and the slowdown
    reasons it saw (``reasons_s``, ``throttled_at``). ``entries``: per node ``outcome``, ``reason`` and
    ``summary`` (its SB_LOAD_SUMMARY, or None)."""
    hosts = list(entries)
    cols: dict[str, list[Any]] = {c: [] for c in ("outcome", *SUMMARY_COLUMNS, *TELEMETRY_COLUMNS)}
    counters: dict[str, list[Any]] = {}
    notes: dict[str, dict[str, Any]] = {}
    for i, h in enumerate(hosts):
        e = entries[h]
        summary: Mapping[str, Any] = e["summary"] if isinstance(e.get("summary"), Mapping) else {}
        tele: Mapping[str, Any] = (
            summary["telemetry"] if isinstance(summary.get("telemetry"), Mapping) else {}
        )
        cols["outcome"].append(e.get("outcome"))
        for c in SUMMARY_COLUMNS:
            cols[c].append(summary.get(c))
        for c in TELEMETRY_COLUMNS:
            cols[c].append(tele.get(c))
        read: Mapping[str, Any] = tele["counters"] if isinstance(tele.get("counters"), Mapping) else {}
        for key in read:
            counters.setdefault(str(key), [None] * i)
        for key, col in counters.items():
            col.append(read.get(key))
        note = {
            k: v
            for k, v in (
                ("reason", e.get("reason") if e.get("outcome") != "ok" else ""),
                ("problem", summary.get("problem")),
                ("telemetry_problem", summary.get("telemetry_problem")),
                ("telemetry_source", summary.get("telemetry_source")),
                ("reasons_s", tele.get("reasons_s")),
                ("throttled_at", tele.get("throttled_at")),
            )
            if v
        }
        if note:
            notes[h] = note
    return {
        "schema_version": 1,
        "kind": kind,
        "start": start,
        "end": end,
        "seconds": round(seconds, 1),
        "stopped": stopped,
        "hosts": hosts,
        "columns": cols,
        "counters": counters,
        "notes": notes,
    }


def _count(v: Any) -> int:
    return int(v) if isinstance(v, (int, float)) and math.isfinite(v) and v > 0 else 0


def host_entries(doc: Any) -> dict[str, dict[str, Any]]:
    """``load.json``'s nodes, each a flat record of its numbers (its columns' values), its counters
    (``counters``) and its words; empty for a round without a load, or a damaged file."""
    if not isinstance(doc, Mapping) or not isinstance(doc.get("hosts"), list):
        return {}
    cols: Mapping[str, Any] = doc["columns"] if isinstance(doc.get("columns"), Mapping) else {}
    counters: Mapping[str, Any] = doc["counters"] if isinstance(doc.get("counters"), Mapping) else {}
    notes: Mapping[str, Any] = doc["notes"] if isinstance(doc.get("notes"), Mapping) else {}
    out: dict[str, dict[str, Any]] = {}
    for i, h in enumerate(doc["hosts"]):
        e: dict[str, Any] = {c: col[i] for c, col in cols.items() if isinstance(col, list) and i < len(col)}
        e["counters"] = {
            k: col[i] for k, col in counters.items() if isinstance(col, list) and i < len(col) and col[i]
        }
        note = notes.get(h)
        if isinstance(note, Mapping):
            e.update(note)
        out[str(h)] = e
    return out


def load_throttled_windows(entry: Mapping[str, Any] | None) -> int:
    """A node's throttled windows in a round's load (its :func:`host_entries` record): the telemetry's
    sample intervals with a slowdown reason active (sb_bench.host.load_telemetry.THROTTLING); 0 without."""
    return _count(entry.get("throttled_windows")) if isinstance(entry, Mapping) else 0


# load.json's counters (sb_bench.host.load_telemetry.COUNTERS, burn's XID counts) by the name a soak
# watches them under (config.campaign_spec.COUNTERS)
LOAD_COUNTERS = {
    "gpu_uncorrected_ecc": "gpu.ecc_uncorrected",
    "gpu_corrected_ecc": "gpu.ecc_corrected",
    "xid": "gpu.xid",
    "xid_events": "gpu.xid",
    "ib_symbol_error": "ib.symbol_error",
    "ib_link_downed": "ib.link_downed",
    "ib_link_error_recovery": "ib.link_error_recovery",
    "ib_port_rcv_errors": "ib.port_rcv_errors",
    "ib_port_xmit_discards": "ib.port_xmit_discards",
    "ib_local_link_integrity_errors": "ib.local_link_integrity_errors",
    "nvlink_replay": "nvlink.replay",
    "nvlink_recovery": "nvlink.recovery",
    "nvlink_crc": "nvlink.crc",
}


@dataclass(frozen=True)
class LoadLimits:
    """What a node's telemetry under a round's load is held to (the soak stage's ``load`` keys, its
    ``watch`` list and ``counter_max_growth``); None: recorded, not judged."""

    max_temp_c: float | None = None
    min_clock_ratio: float | None = None
    watch: tuple[str, ...] = ()
    counter_max_growth: int = 0


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


def fleet_clock(entries: Iterable[Mapping[str, Any]]) -> float | None:
    """The round's fleet median of each node's lowest SM clock under the load (MHz); None without any."""
    clocks = [c for e in entries if (c := _num(e.get("min_sm_mhz"))) is not None and c > 0]
    return statistics.median(clocks) if clocks else None


def load_failure(
    entry: Mapping[str, Any] | None, limits: LoadLimits | None = None, fleet_sm: float | None = None
) -> str:
    """Why a node's load fails its round, or "": wrong GEMM products under the load (every second's last
    product is compared with the first: a GPU or core that computes wrong when hot); with ``limits``, its
    hottest GPU above ``max_temp_c``, its lowest SM clock below ``min_clock_ratio`` of the round's fleet
    median (``fleet_sm``, :func:`fleet_clock`), a watched counter grown by more than
    ``counter_max_growth`` inside the round's load. A load that did not run (an unreachable node, no CUDA)
    fails nothing here: the round's own checks judge the node."""
    if not isinstance(entry, Mapping):
        return ""
    why: list[str] = []
    n = _count(entry.get("errors"))
    if n:
        why.append(f"the load's GEMMs gave {n} wrong product entr{'y' if n == 1 else 'ies'}")
    if limits is None:
        return "; ".join(why)
    temp = _num(entry.get("max_temp_c"))
    if limits.max_temp_c is not None and temp is not None and temp > limits.max_temp_c:
        why.append(f"a GPU at {temp:g} C under the load (load.max_temp_c {limits.max_temp_c:g})")
    sm = _num(entry.get("min_sm_mhz"))
    if limits.min_clock_ratio is not None and sm is not None and fleet_sm:
        floor = limits.min_clock_ratio * fleet_sm
        if sm < floor:
            why.append(
                f"its lowest SM clock under the load {sm:g} MHz, below {limits.min_clock_ratio:.0%} of the "
                f"fleet's {fleet_sm:g} MHz (load.min_clock_ratio)"
            )
    grown: dict[str, tuple[float, float]] = {}
    counters = entry.get("counters")
    for key, pair in counters.items() if isinstance(counters, Mapping) else ():
        name = LOAD_COUNTERS.get(str(key))
        if name is None or name not in limits.watch or not isinstance(pair, list) or len(pair) != 2:
            continue
        a, b = _num(pair[0]), _num(pair[1])
        if a is not None and b is not None and b - a > limits.counter_max_growth:
            old = grown.get(name)
            if old is None or b - a > old[1] - old[0]:
                grown[name] = (a, b)
    for name, (a, b) in sorted(grown.items()):
        why.append(
            f"{name} grew {a:g} -> {b:g} under the load (counter_max_growth {limits.counter_max_growth})"
        )
    return "; ".join(why)


def busy_seconds(entry: Mapping[str, Any] | None) -> float:
    """How long a node's load ran (its process's start to its end, as it said): 0 without a summary."""
    if not isinstance(entry, Mapping):
        return 0.0
    start, end = entry.get("start"), entry.get("end")
    if isinstance(start, (int, float)) and isinstance(end, (int, float)) and end > start:
        return float(end - start)
    return 0.0
