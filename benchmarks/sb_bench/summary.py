"""Combine the per-rank result files of one benchmark on one node into summary columns.

SuperBench's rule, by each metric's ``reduce_op``:

* ``None``: every rank keeps its value, as ``<benchmark>/<metric>:<rank>`` (no suffix when the
  benchmark ran as a single rank) — per-GPU figures such as ``gemm-flops/fp16_tc_flops:3``;
* ``max`` / ``min`` / ``avg`` / ``sum`` / ``last`` (the highest rank's): one
  ``<benchmark>/<metric>`` value for the node — e.g. nccl-bw's bandwidths.

A rank's value of a metric is the mean over its ``run_count`` runs (the spread across runs is in
each result's ``spread``). ``return_code`` is the worst (max) over the ranks, plus one column per
rank when there are several. Pure: result dicts in, a flat dict out.
"""

from __future__ import annotations

from collections.abc import Iterable

OPS = {
    "max": max,
    "min": min,
    "sum": sum,
    "avg": lambda vs: sum(vs) / len(vs),
}


def _mean(values: list) -> float | None:
    nums = [float(v) for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return sum(nums) / len(nums) if nums else None


def node_summary(results: Iterable[dict], prefix: str | None = None) -> dict[str, float]:
    """``{"<prefix>/<metric>[:<rank>]": value}`` from one node's rank results of one benchmark."""
    results = sorted(results, key=lambda r: int(r.get("rank", 0)))
    if not results:
        return {}
    name = prefix or results[0].get("name", "")
    multi = len(results) > 1
    per_metric: dict[str, list[tuple[int, float]]] = {}
    ops: dict[str, str | None] = {}
    codes: list[tuple[int, int]] = []
    for r in results:
        rank = int(r.get("rank", 0))
        codes.append((rank, int(r.get("return_code", 1))))
        for metric, values in (r.get("result") or {}).items():
            if metric == "return_code":
                continue
            v = _mean(values if isinstance(values, list) else [values])
            if v is None:
                continue
            per_metric.setdefault(metric, []).append((rank, v))
            ops.setdefault(metric, (r.get("reduce_op") or {}).get(metric))
    out: dict[str, float] = {}
    for metric, pairs in per_metric.items():
        op = ops.get(metric)
        if op is None:
            for rank, v in pairs:
                out[f"{name}/{metric}:{rank}" if multi else f"{name}/{metric}"] = v
        elif op == "last":
            out[f"{name}/{metric}"] = max(pairs)[1]
        elif op in OPS:
            out[f"{name}/{metric}"] = float(OPS[op]([v for _, v in pairs]))
        else:
            raise ValueError(f"{name}/{metric}: unknown reduce_op {op!r}")
    out[f"{name}/return_code"] = float(max(c for _, c in codes))
    if multi:
        for rank, c in codes:
            out[f"{name}/return_code:{rank}"] = float(c)
    return out
