"""Software consistency: hosts running a different container image than the majority of the fleet.

Every host of a containerized run records the digest of the image it ran in
``facts/<host>.json`` (key ``image_digest``, written by the spine). The
fleet's reference is the digest most hosts ran; a host with another one ran
different software, so its numbers do not compare with the others': it fails
with a ``software`` issue naming both digests. With no majority (a tie),
every host off the tied digests' first is flagged and the detail says so.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from sb_fleet import bounded_json
from sb_fleet.analysis.fleet_results import Fleet
from sb_fleet.analysis.issues import FAIL, Issue

METRIC = "image_digest"
CHECK = "software"


def host_digests(run_dir: Path, hosts: list[str]) -> dict[str, str]:
    """``image_digest`` of each host that recorded one."""
    from sb_fleet.safe_files import safe_name

    out: dict[str, str] = {}
    for h in hosts:
        p = Path(run_dir) / "facts" / f"{safe_name(h)}.json"
        try:
            d = bounded_json.read(p)
        except (OSError, ValueError):
            continue
        v = d.get(METRIC) if isinstance(d, dict) else None
        if isinstance(v, str) and v:
            out[h] = v
    return out


def _short(d: str) -> str:
    return d.split(":", 1)[-1][:12]


def check_software(fleet: Fleet) -> tuple[dict[int, list[Issue]], list[str]]:
    """Issues (by results row) for hosts whose image digest differs from the majority, and warnings."""
    if fleet.run_dir is None:
        return {}, []
    names = list(dict.fromkeys([*fleet.hosts, *(h.name for h in fleet.expected_hosts)]))
    digests = host_digests(fleet.run_dir, names)
    if len(set(digests.values())) < 2:
        return {}, []
    counts = Counter(digests.values()).most_common()
    ref, n_ref = counts[0]
    tie = len(counts) > 1 and counts[1][1] == n_ref
    rows = fleet.host_index()
    issues: dict[int, list[Issue]] = {}
    odd = sorted(h for h, d in digests.items() if d != ref)
    for h in odd:
        detail = f"ran image {_short(digests[h])} while {n_ref} of {len(digests)} hosts ran {_short(ref)}" + (
            " (no majority: the fleet runs several images)" if tie else ""
        )
        if h in rows:
            issues.setdefault(rows[h], []).append(
                Issue(METRIC, None, None, None, CHECK, "software", FAIL, detail)
            )
    warnings = [
        f"{len(odd)} host(s) ran a different container image than the majority "
        f"({_short(ref)}): {', '.join(odd[:5])}{' …' if len(odd) > 5 else ''}"
    ]
    return issues, warnings
