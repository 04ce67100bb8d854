"""Parse fio's JSON output (``--output-format=json``) into SuperBench's disk-benchmark values.

For each job and direction (read, write) with I/O done: IOPS, bandwidth (bytes/s) and completion
latency percentiles in ns (``clat_ns``; fio's ``lat_ns`` adds submission time). fio may print
notes before the JSON document ("note: both iodepth >= 1 and synchronous I/O engine..."): they are
skipped. Percentile keys are normalised from fio's ``"99.900000"`` to ``"99.9"``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from sb_bench.micro.parsers import ParseError

PERCENTILES = ("95.0", "99.0", "99.9")


@dataclass
class Direction:
    iops: float
    bw_bytes: float
    io_bytes: int
    clat_ns_mean: float
    clat_ns_percentiles: dict[str, float] = field(default_factory=dict)


@dataclass
class Job:
    name: str
    error: int
    block_size: dict[str, int]
    directions: dict[str, Direction]


def _json_document(text: str) -> dict:
    start = text.find("{")
    if start < 0:
        raise ParseError(f"no JSON document in fio's output: {text.strip()[:200]!r}")
    try:
        doc, _ = json.JSONDecoder().raw_decode(text[start:])
    except ValueError as exc:
        raise ParseError(f"fio's JSON output is malformed ({exc})") from exc
    if not isinstance(doc, dict) or "jobs" not in doc:
        raise ParseError("fio's JSON output has no 'jobs'")
    return doc


def _percentile_key(k: str) -> str:
    v = round(float(k), 4)
    return f"{v:.1f}" if v == round(v, 1) else f"{v:g}"


def parse(text: str) -> list[Job]:
    doc = _json_document(text)
    jobs = []
    for j in doc["jobs"]:
        opts = j.get("job options", {})
        bs = {}
        dirs = {}
        for d in ("read", "write"):
            r = j.get(d) or {}
            if not r.get("io_bytes"):
                continue
            clat = r.get("clat_ns") or {}
            pct = {_percentile_key(k): float(v) for k, v in (clat.get("percentile") or {}).items()}
            dirs[d] = Direction(
                float(r.get("iops", 0.0)),
                float(r.get("bw_bytes", r.get("bw", 0) * 1024)),
                int(r["io_bytes"]),
                float(clat.get("mean", 0.0)),
                {p: pct[p] for p in PERCENTILES if p in pct},
            )
            bs[d] = _block_size(opts, d, doc)
        jobs.append(Job(j.get("jobname", ""), int(j.get("error", 0)), bs, dirs))
    if not jobs:
        raise ParseError("fio ran no job")
    return jobs


def _block_size(opts: dict, direction: str, doc: dict) -> int:
    from sb_bench.core.metric import parse_size

    glob = doc.get("global options", {})
    for key in (f"bs_{direction}", "bs", "blocksize"):
        v = opts.get(key) or glob.get(key)
        if v:
            return parse_size(str(v).split(",")[0])
    return 4096  # fio's default
