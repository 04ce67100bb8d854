"""Normalize: raw per-rank result files into SuperBench's ``results-summary.jsonl``.

One line per node, ``{"node": <inventory name>, "<key>/<metric>[:<rank>]": value, ...,
"<key>/return_code": code}``, where ``<key>`` is the config entry (micro
benchmarks, ``gemm-flops``) or entry and model (``gpt_models/pytorch-gpt2-large``).
A metric's value on a rank is the mean of its ``run_count`` runs; ranks of a
node combine by the metric's ``reduce_op``, or stay separate with a
``:<rank>`` suffix when it has none and the node ran more than one rank.

Pure: reads files, returns values. Problems (unreadable or truncated
files) are returned per host and benchmark, never raised, so one corrupt
file costs only its own benchmark.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

REDUCERS = {
    "max": max,
    "min": min,
    "sum": sum,
    "avg": lambda xs: sum(xs) / len(xs),
    "last": lambda xs: xs[-1],
}
CORRUPT_RC = 3  # SuperBench's INVALID_BENCHMARK_RESULT


@dataclass
class HostResults:
    host: str
    record: dict[str, float | int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    statuses: dict[str, dict] = field(default_factory=dict)  # entry key -> {status, reason, return_code}
    metrics_meta: dict[str, dict] = field(default_factory=dict)


def _finite(v: object) -> bool:
    try:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    except OverflowError:  # an int too large for a float
        return False


def _mean(values: Iterable) -> float | None:
    xs = [float(v) for v in values if _finite(v)]
    m = sum(xs) / len(xs) if xs else None
    return m if m is not None and math.isfinite(m) else None


def entry_dirs(root: Path) -> list[Path]:
    """Every directory under ``root`` that holds rank files (one per benchmark entry)."""
    return sorted({p.parent for p in root.rglob("rank*.json") if "logs" not in p.parts})


def summarize_entry(key: str, files: list[Path], out: HostResults) -> None:
    ranks: dict[int, dict] = {}
    for f in files:
        try:
            data = json.loads(f.read_text())
            if not isinstance(data, dict) or not isinstance(data.get("result", {}), dict):
                raise ValueError("not a result object")
        except (OSError, ValueError) as exc:
            out.problems.append(f"{key}: {f.name}: corrupt or truncated result file ({str(exc)[:120]})")
            out.record[f"{key}/return_code"] = max(int(out.record.get(f"{key}/return_code", 0)), CORRUPT_RC)
            continue
        try:
            rank = int(f.stem[4:])
        except ValueError:
            continue
        ranks[rank] = data
    if not ranks:
        return
    codes = []
    for d in ranks.values():
        try:
            codes.append(int(d.get("return_code", CORRUPT_RC)))
        except (TypeError, ValueError, OverflowError):
            codes.append(CORRUPT_RC)
    rc = max(codes + [int(out.record.get(f"{key}/return_code", 0))])
    out.record[f"{key}/return_code"] = rc
    bad = [d for d in ranks.values() if d.get("return_code") not in (0, None)]
    status = "ok" if not bad else str(bad[0].get("status") or "failed")
    if not bad and all(d.get("status") == "skipped" for d in ranks.values()):
        status = "skipped"
    reason = str((bad[0] if bad else next(iter(ranks.values()))).get("reason") or "")
    out.statuses[key] = {"status": status, "return_code": rc, "reason": reason}
    multi = len(ranks) > 1
    per_metric: dict[str, dict[int, float]] = {}
    reduce_ops: dict[str, str | None] = {}
    for rank, d in sorted(ranks.items()):
        for metric, values in (d.get("result") or {}).items():
            if metric == "return_code" or not isinstance(values, list):
                continue
            v = _mean(values)
            if v is None:
                continue
            per_metric.setdefault(metric, {})[rank] = v
            ops = d.get("reduce_op")
            op = ops.get(metric) if isinstance(ops, dict) else None
            reduce_ops.setdefault(metric, op if isinstance(op, str) else None)
        metas = d.get("metrics")
        for metric, meta in (metas if isinstance(metas, dict) else {}).items():
            if isinstance(meta, dict):
                out.metrics_meta.setdefault(
                    f"{key}/{metric}", {k: meta.get(k) for k in ("unit", "higher_is_better")}
                )
    for metric, by_rank in per_metric.items():
        op = reduce_ops.get(metric)
        if op in REDUCERS:
            v = REDUCERS[op]([by_rank[r] for r in sorted(by_rank)])
            if math.isfinite(v):  # a sum can overflow
                out.record[f"{key}/{metric}"] = v
        elif multi:
            for r, v in sorted(by_rank.items()):
                out.record[f"{key}/{metric}:{r}"] = v
        else:
            out.record[f"{key}/{metric}"] = next(iter(by_rank.values()))


def summarize_host(host: str, raw_dir: Path) -> HostResults:
    out = HostResults(host)
    results = raw_dir / "results"
    root = results if results.is_dir() else raw_dir
    for d in entry_dirs(root):
        key = str(d.relative_to(root))
        summarize_entry(key, sorted(d.glob("rank*.json")), out)
    return out


def summary_line(hr: HostResults) -> str:
    return json.dumps({"node": hr.host, **dict(sorted(hr.record.items()))}, allow_nan=False)
