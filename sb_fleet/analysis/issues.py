"""One finding about one host: what was measured, against what, and which check said so."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

# Severities: a "fail" issue makes the host fail; an "incomplete" one (a benchmark that
# failed or did not report) makes it incomplete unless it also has a "fail" issue.
FAIL = "fail"
INCOMPLETE = "incomplete"


@dataclass(frozen=True)
class Issue:
    metric: str
    value: float | None
    reference: float | None
    deviation: float | None  # (value - reference) / reference, signed; None when not a ratio
    check: str  # which check fired: "fleet", "sibling", "rule:<name>", "floor", ...
    category: str
    severity: str = FAIL
    detail: str = ""
    sigmas: float | None = None  # how far off in units of the noise it was judged against (bad side > 0)

    @property
    def basis(self) -> str:
        """What the value was judged against, in words (the report's "against" column)."""
        return basis_of(self.check)

    def to_json(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "value": _num(self.value),
            "reference": _num(self.reference),
            "deviation": _num(self.deviation),
            "check": self.check,
            "category": self.category,
            "severity": self.severity,
            "detail": self.detail,
            "basis": self.basis,
            "noise_sigmas": _num(self.sigmas),
        }


def _num(v: float | None) -> float | None:
    if v is None:
        return None
    f = float(v)
    if not math.isfinite(f):
        return None
    return round(f, 6) if abs(f) < 1e15 else f


def relative(value: float, reference: float | None) -> float | None:
    if reference is None or reference == 0 or not math.isfinite(reference) or not math.isfinite(value):
        return None
    return (value - reference) / abs(reference)


_BASIS = {
    "fleet": "fleet median",
    "fleet-combined": "fleet median (combined)",
    "sibling": "siblings on the host",
    "sibling-combined": "siblings on the host (combined)",
    "majority": "median of the other hosts",
    "majority-combined": "median of the other hosts (combined)",
    "sku": "SKU reference",
    "baseline": "baseline",
    "floor": "limit",
    "ceiling": "limit",
}


def basis_of(check: str) -> str:
    if check in _BASIS:
        return _BASIS[check]
    if check.startswith("rule:"):
        return "rule"
    if check.startswith("history"):
        return "own history"
    return check
