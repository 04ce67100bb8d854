"""The fabric findings of a pattern run, for the verdict: the culprits the pair matrices name
(``pairs/<entry>.json``, written by collect) and what validate's follow-up passes made of them
(``followup.json``: the second pass and the bisection, :mod:`sb_fleet.fleet.pattern_followup`).

What counts against the fleet:

* a **node** or **NIC** culprit fails its host (an issue with ``check: "pattern"``) when the second pass
  reproduced it with known-good partners, or, where no second pass ran, when its confidence is high;
  one the second pass did not reproduce is a warning only;
* a **link** or **path** culprit fails neither host (each is fine with its other partners) but fails the
  gate under the same rule, with the hosts named: a release must not ship a bad cable;
* a host the **bisection** of a failed all-nodes run named fails; a group the bisection could not
  resolve (each half passes alone) fails the gate.

Everything else (medium or low confidence, not re-tested) is shown in the report and counted nowhere.
Pure except :func:`load_fabric`, which reads the two files.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sb_fleet import bounded_json
from sb_fleet.analysis.crossnode.localise import Culprit, Localisation
from sb_fleet.analysis.issues import FAIL, Issue, relative

FOLLOWUP_FILE = "followup.json"
FOLLOWUP_SCHEMA = 1
CHECK = "pattern"
CATEGORY = "Fabric"


@dataclass(frozen=True)
class Finding:
    entry: str
    kind: str  # node | nic | link | path | bisection | unresolved
    target: str
    hosts: tuple[str, ...]
    confidence: str  # high | medium | low
    confirmed: bool | None  # the second pass (or the bisection) reproduced it; None: not re-tested
    counts: bool  # fails a host (node, nic, bisection) or the gate (link, path, unresolved)
    summary: str
    metric: str = ""
    value: float | None = None  # the culprit's typical pair figure
    reference: float | None = None  # the fleet's pair median

    def sentence(self) -> str:
        again = {None: "", True: "; reproduced in the second pass", False: "; NOT reproduced"}[self.confirmed]
        if self.kind in ("bisection", "unresolved"):
            again = ""
        return (
            f"{self.entry}: {self.kind} {self.target} ({self.confidence} confidence{again}): {self.summary}"
        )

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["hosts"] = list(self.hosts)
        return d


@dataclass(frozen=True)
class FabricView:
    findings: tuple[Finding, ...]

    def host_issues(self) -> dict[str, list[Issue]]:
        """host -> the issues that fail it."""
        out: dict[str, list[Issue]] = {}
        for f in self.findings:
            if not f.counts or f.kind not in ("node", "nic", "bisection"):
                continue
            for h in f.hosts[:1]:
                dev = relative(f.value, f.reference) if f.value is not None else None
                out.setdefault(h, []).append(
                    Issue(f.metric, f.value, f.reference, dev, CHECK, CATEGORY, FAIL, f.sentence())
                )
        return out

    @property
    def gate_failure(self) -> str | None:
        """What fails the gate although no host is bad (links, paths, unresolved groups), or None."""
        bad = [f for f in self.findings if f.counts and f.kind in ("link", "path", "unresolved")]
        if not bad:
            return None
        return "fabric: " + "; ".join(f"{f.kind} {f.target}" for f in bad)

    def warnings(self) -> list[str]:
        return [f"fabric finding not counted: {f.sentence()}" for f in self.findings if not f.counts]

    def to_json(self) -> list[dict[str, Any]]:
        return [f.to_json() for f in self.findings]

    def markdown(self) -> str:
        if not self.findings:
            return ""
        rows = [
            "## Fabric (pattern runs)",
            "",
            "| entry | kind | culprit | confidence | second pass | counts | why |",
            "|---|---|---|---|---|---|---|",
        ]
        for f in self.findings:
            again = {None: "-", True: "reproduced", False: "not reproduced"}[f.confirmed]
            why = f.summary.replace("|", "\\|")
            rows.append(
                f"| {f.entry} | {f.kind} | {f.target} | {f.confidence} | {again} | "
                f"{'yes' if f.counts else 'no'} | {why} |"
            )
        return "\n".join(rows) + "\n"


def _counts(c: Culprit, second_pass_ran: bool) -> bool:
    if c.confirmed is not None:
        return bool(c.confirmed)
    return c.confidence == "high" and not second_pass_ran


def judge_fabric(pairs: Mapping[str, Mapping[str, Any]], followup: Mapping[str, Any] | None) -> FabricView:
    """``pairs``: entry -> its pairs/<entry>.json; ``followup``: followup.json (or None)."""
    entries = dict((followup or {}).get("entries") or {})
    found: list[Finding] = []
    for entry, doc in sorted(pairs.items()):
        after = (entries.get(entry) or {}).get("second_pass") or {}
        ran = "localisation" in after
        loc = Localisation.from_json(after["localisation"] if ran else doc["localisation"])
        for c in loc.culprits:
            values = sorted(e.value for e in c.evidence if e.value is not None)
            found.append(
                Finding(
                    entry,
                    c.kind,
                    c.target,
                    tuple(c.hosts),
                    c.confidence,
                    c.confirmed,
                    _counts(c, ran),
                    c.summary,
                    loc.metric,
                    values[len(values) // 2] if values else None,
                    loc.median,
                )
            )
    for entry, done in sorted(entries.items()):
        b = done.get("bisection") or {}
        for h in b.get("culprits") or []:
            found.append(
                Finding(
                    entry,
                    "bisection",
                    str(h),
                    (str(h),),
                    "high",
                    True,
                    True,
                    f"the group of all {len(b.get('hosts') or [])} nodes "
                    f"{(b.get('first') or {}).get('status', 'failed')}; bisection: {h} fails with known-good "
                    f"partners ({b.get('rounds_run', '?')} round(s))"
                    + (f"; passed without it: {', '.join(b['good'])}" if b.get("good") else ""),
                    entry,
                ),
            )
        for grp in b.get("unresolved") or []:
            found.append(
                Finding(
                    entry,
                    "unresolved",
                    ", ".join(grp),
                    tuple(grp),
                    "low",
                    None,
                    True,
                    "the group of all nodes failed, but the bisection could not narrow it down to a host",
                    entry,
                )
            )
    return FabricView(tuple(found))


def load_fabric(run_dir: Path) -> tuple[FabricView | None, list[str]]:
    """The fabric view of a run directory (None: not a pattern run), and the files that did not read."""
    pairs: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    for f in sorted((run_dir / "pairs").glob("*.json")):
        try:
            doc = bounded_json.read(f)
            pairs[str(doc["entry"])] = doc
        except (OSError, ValueError, KeyError, TypeError) as exc:
            problems.append(f"{f}: unreadable pair file ({exc}); its culprits are not judged")
    followup = None
    path = run_dir / FOLLOWUP_FILE
    if path.exists():
        try:
            followup = bounded_json.read(path)
        except (OSError, ValueError) as exc:
            problems.append(f"{path}: unreadable ({exc}); the second pass and bisection are not judged")
    if not pairs and followup is None:
        return None, problems
    try:
        return judge_fabric(pairs, followup), problems
    except (KeyError, TypeError, ValueError) as exc:
        return None, [*problems, f"{run_dir}: pattern files of another shape ({exc}); fabric not judged"]
