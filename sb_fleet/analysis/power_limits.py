"""GPU power limits left below their default: named on the host's line (docs/energy.md).

hostprep records, per GPU, the power limit NVML enforces and its default (``gpu_power_limits`` in
``facts/<host>.json``). A GPU held below its default passes every throughput gate at a light load
and falls short under a sustained one, and its host is budgeted for power it will not draw: the
host fails with a ``PowerLimit`` finding that names the GPU, the limit and the default. Pure, but
for reading the facts files.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from sb_fleet.analysis.issues import FAIL, Issue
from sb_fleet.safe_files import safe_name

# Below the default by more than this (W, or this share of the default): a rounding in the driver's
# report is not a lowered limit.
TOLERANCE_W = 1.0
TOLERANCE_SHARE = 0.005


def power_limit_issues(facts: Any) -> list[Issue]:
    """One issue per GPU whose enforced limit is below its default, from a host's facts."""
    limits = facts.get("gpu_power_limits") if isinstance(facts, dict) else None
    out: list[Issue] = []
    for g in limits if isinstance(limits, list) else []:
        if not isinstance(g, dict):
            continue
        cur, dflt = _watts(g.get("enforced_w")), _watts(g.get("default_w"))
        if cur is None or dflt is None or cur >= dflt - max(TOLERANCE_W, TOLERANCE_SHARE * dflt):
            continue
        out.append(
            Issue(
                metric=f"gpu_power_limit:{g.get('index')}",
                value=cur,
                reference=dflt,
                deviation=(cur - dflt) / dflt,
                check="power-limit",
                category="PowerLimit",
                severity=FAIL,
                detail=f"GPU {g.get('index')} power limit {cur:g} W is below its default {dflt:g} W "
                "(nvidia-smi -pl, or a power-capping service, lowered it)",
            )
        )
    return out


def _watts(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if v > 0 else None


def load_power_limit_issues(run_dir: Path, hosts: Iterable[str]) -> dict[str, list[Issue]]:
    """Each host's power-limit issues from ``<run_dir>/facts/<host>.json`` (hosts without facts: none)."""
    out: dict[str, list[Issue]] = {}
    for h in hosts:
        p = run_dir / "facts" / f"{safe_name(h)}.json"
        try:
            facts = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        found = power_limit_issues(facts)
        if found:
            out[h] = found
    return out
