"""What ``sb-fleet check`` prints: each host's outcome and its failing checks, then the drift tables."""

from __future__ import annotations

import json
from pathlib import Path


def health_summary(run_dir: Path, as_json: bool = False) -> str:
    health = _read(run_dir / "health.json") or {}
    if as_json:
        return json.dumps(health, indent=1)
    outcomes = (_read(run_dir / "outcomes" / "check.json") or {}).get("hosts", [])
    lines = []
    hosts = health.get("hosts", {})
    for o in outcomes:
        h = o["host"]
        lines.append(f"{h}: {o['outcome']}")
        for f in hosts.get(h, {}).get("findings", []):
            lines.append(
                f"    {f['verdict']:4} {f['check']}: {f['evidence'] or f['value']}  [rule: {f['rule']}]"
            )
        if o["outcome"] not in ("ok", "unhealthy") and o.get("reason"):
            lines.append(f"    {o['reason']}")
    for fact, table in (health.get("drift") or {}).items():
        maj = (health.get("majority") or {}).get(fact)
        lines.append(f"drift {fact} (majority: {maj if maj is not None else 'none'}):")
        for value, hs in sorted(table.items(), key=lambda kv: -len(kv[1])):
            lines.append(f"    {value}: {', '.join(hs)}")
    return "\n".join(lines)


def _read(p: Path) -> dict | None:
    try:
        d = json.loads(p.read_text())
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) else None
