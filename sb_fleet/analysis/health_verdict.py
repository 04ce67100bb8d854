"""Health verdicts, pure: each host's check records (``sb_bench.health``) and the fleet's drift.

A host is unhealthy when any of its checks failed, or when one of its facts (driver, CUDA, firmware ...)
differs from the fleet's majority or from a pinned value with weight ``fail``. Drift needs a strict
majority: a fleet split evenly has no majority, and each of its hosts gets a warning saying so
(undecidable is said, not passed). Every finding names the value read, the rule and the evidence.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

MAX_DOC = 4 << 20
VERDICTS = ("pass", "warn", "fail")


@dataclass(frozen=True)
class Finding:
    host: str
    check: str
    verdict: str  # "warn" or "fail"
    value: Any
    rule: str
    evidence: str

    @property
    def reason(self) -> str:
        return f"{self.check}: {self.evidence or self.value}"

    def to_json(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "verdict": self.verdict,
            "value": self.value,
            "rule": self.rule,
            "evidence": self.evidence,
        }


@dataclass(frozen=True)
class HostHealth:
    host: str
    verdict: str  # pass / warn / fail / unknown (no result)
    findings: tuple[Finding, ...] = ()
    checks: tuple[dict[str, Any], ...] = ()  # every record, for the JUnit entries
    problem: str = ""  # why there is no result

    def reasons(self, worst_only: bool = True) -> list[str]:
        want = ("fail",) if worst_only else ("fail", "warn")
        return [f.reason for f in self.findings if f.verdict in want]


@dataclass(frozen=True)
class HealthResult:
    hosts: dict[str, HostHealth]
    drift: dict[str, dict[str, list[str]]] = field(default_factory=dict)  # fact -> value -> hosts
    majority: dict[str, str | None] = field(default_factory=dict)  # fact -> majority value (None: none)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": 1,
            "hosts": {
                h: {
                    "verdict": x.verdict,
                    "problem": x.problem,
                    "findings": [f.to_json() for f in x.findings],
                    "checks": list(x.checks),
                }
                for h, x in self.hosts.items()
            },
            "drift": self.drift,
            "majority": self.majority,
        }


def parse_health(text: str) -> dict[str, Any]:
    """The document a host printed (its last non-empty stdout line); ValueError saying what is wrong."""
    if len(text) > MAX_DOC:
        raise ValueError(f"health output of {len(text)} bytes (more than {MAX_DOC})")
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        raise ValueError("the health checks printed nothing")
    try:
        doc = json.loads(lines[-1])
    except RecursionError:
        raise ValueError("the health checks' output is nested too deep") from None
    except ValueError as exc:
        raise ValueError(f"the health checks' output is not JSON ({exc}): {lines[-1][:160]!r}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("checks"), list):
        raise ValueError("the health checks' output has no 'checks' list")
    checks = []
    for r in doc["checks"]:
        if not isinstance(r, dict) or not isinstance(r.get("check"), str) or r.get("verdict") not in VERDICTS:
            raise ValueError(
                f"a health record without a check name or a pass/warn/fail verdict: {str(r)[:160]}"
            )
        checks.append({k: r.get(k) for k in ("check", "verdict", "value", "rule", "evidence", "source")})
    facts = doc.get("facts") if isinstance(doc.get("facts"), dict) else {}
    return {**doc, "checks": checks, "facts": facts}


def _key(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, sort_keys=True)


def fleet_drift(
    facts: dict[str, dict[str, Any]], weights: dict[str, str], pins: dict[str, str]
) -> tuple[dict[str, list[Finding]], dict[str, dict[str, list[str]]], dict[str, str | None]]:
    """Facts that differ from the fleet's majority or from a pin -> (findings per host, fact -> value ->
    hosts for every fact with more than one value or a pin, fact -> majority value)."""
    findings: dict[str, list[Finding]] = {h: [] for h in facts}
    tables: dict[str, dict[str, list[str]]] = {}
    majority: dict[str, str | None] = {}
    for fact, weight in sorted(weights.items()):
        if weight == "off":
            continue
        values = {h: _key(f[fact]) for h, f in facts.items() if f.get(fact) is not None}
        if not values:
            continue
        by_value: dict[str, list[str]] = {}
        for h, v in sorted(values.items()):
            by_value.setdefault(v, []).append(h)
        pin = pins.get(fact)
        counts = Counter(values.values())
        top, top_n = counts.most_common(1)[0]
        maj = top if top_n * 2 > len(values) else None
        majority[fact] = maj
        if len(by_value) > 1 or pin is not None:
            tables[fact] = by_value
        for h, v in values.items():
            if pin is not None:
                if v != pin:
                    findings[h].append(
                        Finding(
                            h,
                            f"drift.{fact}",
                            weight,
                            v,
                            f"pinned: {fact} == {pin}",
                            f"{fact} {v}, pinned {pin}",
                        )
                    )
                continue
            if len(by_value) == 1:
                continue
            if maj is None:
                split = ", ".join(f"{val} ({len(hs)})" for val, hs in sorted(by_value.items()))
                findings[h].append(
                    Finding(
                        h,
                        f"drift.{fact}",
                        "warn",
                        v,
                        f"{fact} as the fleet's majority",
                        f"no majority for {fact}: {split}",
                    )
                )
            elif v != maj:
                findings[h].append(
                    Finding(
                        h,
                        f"drift.{fact}",
                        weight,
                        v,
                        f"{fact} as the fleet's majority",
                        f"{fact} {v} where the fleet's majority ({counts[maj]} of {len(values)}) has {maj}",
                    )
                )
    return findings, tables, majority


def judge(
    docs: dict[str, dict[str, Any] | str],
    weights: dict[str, str],
    pins: dict[str, str] | None = None,
    warn_is_unhealthy: bool = False,
) -> HealthResult:
    """Every host's verdict from its parsed document (a string: why there is none) and the fleet's drift."""
    parsed = {h: d for h, d in docs.items() if isinstance(d, dict)}
    drift, tables, majority = fleet_drift(
        {h: d.get("facts", {}) for h, d in parsed.items()}, weights, pins or {}
    )
    hosts: dict[str, HostHealth] = {}
    for h, d in docs.items():
        if not isinstance(d, dict):
            hosts[h] = HostHealth(h, "unknown", problem=d)
            continue
        found = [
            Finding(
                h,
                r["check"],
                r["verdict"],
                r.get("value"),
                str(r.get("rule") or ""),
                str(r.get("evidence") or ""),
            )
            for r in d["checks"]
            if r["verdict"] != "pass"
        ]
        found += drift.get(h, [])
        verdicts = {f.verdict for f in found}
        verdict = (
            "fail"
            if "fail" in verdicts or (warn_is_unhealthy and "warn" in verdicts)
            else ("warn" if "warn" in verdicts else "pass")
        )
        found.sort(key=lambda f: (f.verdict != "fail", f.check))
        hosts[h] = HostHealth(h, verdict, tuple(found), tuple(d["checks"]))
    return HealthResult(hosts, tables, majority)


_RANK = {"pass": 0, "warn": 1, "fail": 2}
# checks whose value change matters even when the verdict stays (new XIDs, remaps, a port's state or rate)
WATCHED = (
    "gpu.xid",
    "gpu.row_remap",
    "gpu.count",
    "ib.state",
    "ib.rate",
    "ib.ports",
    "ib.errors",
    "gpu.ecc_aggregate",
    "gpu.nvlink_errors",
)


def health_changes(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """What changed between two runs' health.json for the hosts in both: a check whose verdict got worse
    or better, a watched check whose value changed (new XIDs, a new remap, a port that went down), drift
    findings that appeared or went; hosts checked in only one run are named."""
    b_hosts, a_hosts = before.get("hosts") or {}, after.get("hosts") or {}
    out: list[dict[str, Any]] = []
    for h in sorted(set(b_hosts) | set(a_hosts)):
        b, a = b_hosts.get(h), a_hosts.get(h)
        if not isinstance(b, dict) or not isinstance(a, dict):
            out.append(
                {
                    "host": h,
                    "check": "",
                    "change": "only in the target" if b is None else "only in the baseline",
                }
            )
            continue
        bc = {c.get("check"): c for c in b.get("checks") or [] if isinstance(c, dict)}
        ac = {c.get("check"): c for c in a.get("checks") or [] if isinstance(c, dict)}
        for f in b.get("findings") or []:
            if str(f.get("check", "")).startswith("drift."):
                bc.setdefault(f["check"], f)
        for f in a.get("findings") or []:
            if str(f.get("check", "")).startswith("drift."):
                ac.setdefault(f["check"], f)
        for name in sorted(set(bc) | set(ac), key=str):
            x, y = bc.get(name), ac.get(name)
            vb = (x or {}).get("verdict", "pass")
            va = (y or {}).get("verdict", "pass")
            change = None
            if _RANK.get(va, 2) > _RANK.get(vb, 2):
                change = "worse"
            elif _RANK.get(va, 2) < _RANK.get(vb, 2):
                change = "better"
            elif name in WATCHED and x is not None and y is not None and x.get("value") != y.get("value"):
                change = "changed"
            if change:
                out.append(
                    {
                        "host": h,
                        "check": name,
                        "change": change,
                        "before": {"verdict": vb, "value": (x or {}).get("value")},
                        "after": {
                            "verdict": va,
                            "value": (y or {}).get("value"),
                            "evidence": (y or {}).get("evidence", ""),
                        },
                    }
                )
    return out
