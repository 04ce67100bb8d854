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
class FlagLimit:
    """The limit a statistical check flagged a value beyond, and what it was made of: ``sigmas`` noise
    units of the value's noise (never below ``floor``) and never less than ``min_deviation``. With
    ``log`` the width is on the log of the ratio to the reference (majority agreement), else on the
    relative deviation (the fleet and sibling checks). :meth:`under` is the same limit under another
    noise (validate's confirmation: the re-run's own)."""

    deviation: float  # the relative deviation beyond which it was flagged, signed: the bad side's sign
    noise: float  # the relative noise sigma the check judged the value with
    floor: float  # the part of that noise the fleet's statistics set (a prior, the fleet's spread)
    sigmas: float  # the limit's width in noise units (the threshold, times the reference's inflation)
    min_deviation: float  # the practical margin: the limit is never nearer than this
    log: bool = False

    def under(self, noise: float | None) -> float:
        """The limit (signed like :attr:`deviation`) for a value whose noise is ``noise`` (None or NaN:
        unmeasured, the floor alone)."""
        sigma = self.floor if noise is None or not math.isfinite(noise) else max(self.floor, noise)
        return flag_limit_at(self.deviation, sigma, self.sigmas, self.min_deviation, self.log)

    def to_json(self) -> dict[str, Any]:
        return {
            "deviation": _num(self.deviation),
            "noise": _num(self.noise),
            "floor": _num(self.floor),
            "sigmas": _num(self.sigmas),
            "min_deviation": _num(self.min_deviation),
            "log": self.log,
        }


def flag_limit_at(side: float, sigma: float, sigmas: float, min_deviation: float, log: bool) -> float:
    """The relative deviation on ``side``'s side (its sign) beyond which a value of noise ``sigma`` is
    flagged: ``sigmas`` x ``sigma`` (on the log ratio with ``log``), at least ``min_deviation``."""
    width = sigmas * sigma if math.isfinite(sigma) else 0.0
    up = side >= 0
    rel = max((math.expm1(width) if up else -math.expm1(-width)) if log else width, min_deviation)
    return rel if up else -rel


def flag_limit(
    side: float, sigma: float, floor: float, sigmas: float, min_deviation: float, log: bool = False
) -> FlagLimit:
    """A check's :class:`FlagLimit` for a value on ``side``'s side judged with noise ``sigma``."""
    return FlagLimit(
        flag_limit_at(side, sigma, sigmas, min_deviation, log), sigma, floor, sigmas, min_deviation, log
    )


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
    # the limit a statistical check flagged it beyond and what that limit was made of (None: no such
    # check, or a finding read back from an older record); validate's confirmation holds the re-run to it
    flag_limit: FlagLimit | None = None

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
            **({"flag_limit": self.flag_limit.to_json()} if self.flag_limit is not None else {}),
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
