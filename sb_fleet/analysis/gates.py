"""Gate evaluation: absolute limits, baseline regression and the pass/fail policy (schema: sb_fleet.config.gatespec)."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from sb_fleet.analysis.issues import FAIL, Issue, relative
from sb_fleet.analysis.superbench.metric_names import Directions, baseline_of, parse_metric
from sb_fleet.config.gatespec import Gates, Policy

# What can fail the gate (GateReason.kind), in the order a headline names them.
REASON_KINDS = (
    "hosts",  # more hosts counted as failing than the policy allows
    "populations",  # an unexpected population split that showed again (or was not re-run)
    "disagreements",  # two hosts disagree beyond their noise with no majority
    "inconsistent",  # steady hosts disagree with no majority
    "too_noisy",  # gates.fleet.too_noisy: fail
    "fabric",  # a bad link or path (a pattern run)
    "history",  # regressions against the fleet's own past
)


@dataclass(frozen=True)
class GateReason:
    """One thing that failed the gate, in words a headline can carry (``kind``: :data:`REASON_KINDS`)."""

    kind: str
    sentence: str
    hosts: tuple[str, ...] = ()

    def to_json(self) -> dict:
        return {"kind": self.kind, "sentence": self.sentence, "hosts": list(self.hosts)}


@dataclass(frozen=True)
class GateResult:
    passed: bool
    counted: int  # hosts counted as failing under the policy
    total: int
    allowed_hosts: int
    policy: str  # in words
    reasons: tuple[GateReason, ...] = ()  # what failed it (empty when it passed)

    def failed_by(self, reason: GateReason, policy_note: str) -> GateResult:
        """The gate failed also by ``reason`` (``policy_note``: what the policy string adds)."""
        return replace(
            self, passed=False, policy=f"{self.policy}; {policy_note}", reasons=(*self.reasons, reason)
        )

    def to_json(self) -> dict:
        return {
            "passed": self.passed,
            "failing_hosts": self.counted,
            "total_hosts": self.total,
            "allowed_failing_hosts": self.allowed_hosts,
            "policy": self.policy,
            "reasons": [r.to_json() for r in self.reasons],
        }


def apply_limits(
    gates: Gates, columns: list[str], values: np.ndarray, gpu_models: list[str | None]
) -> dict[int, list[Issue]]:
    """Absolute floors and ceilings, per GPU model when a limit names one."""
    issues: dict[int, list[Issue]] = {}
    for lim in gates.limits:
        rx = re.compile(lim.metric)
        cols = [i for i, c in enumerate(columns) if rx.fullmatch(c) or rx.fullmatch(parse_metric(c).base)]
        if lim.gpu_model is not None:
            pat = lim.gpu_model
            rows_ok = np.array(
                [m is not None and fnmatch.fnmatchcase(m, pat) for m in gpu_models], dtype=bool
            )
        else:
            rows_ok = np.ones(values.shape[0], dtype=bool)
        scope = f" for GPU model {lim.gpu_model}" if lim.gpu_model else ""
        for c in cols:
            col = values[:, c]
            for bound, check, bad in (
                (lim.min, "floor", lambda x, b: x < b),
                (lim.max, "ceiling", lambda x, b: x > b),
            ):
                if bound is None:
                    continue
                with np.errstate(invalid="ignore"):
                    hit = bad(col, bound) & rows_ok
                for r in np.nonzero(hit)[0]:
                    v = float(col[r])
                    word = "below the floor" if check == "floor" else "above the ceiling"
                    issues.setdefault(int(r), []).append(
                        Issue(
                            metric=columns[c],
                            value=v,
                            reference=float(bound),
                            deviation=relative(v, float(bound)),
                            check=check,
                            category="Gate",
                            severity=FAIL,
                            detail=f"{columns[c]} = {v:.4g} is {word} {bound:g}{scope}",
                        )
                    )
    return issues


def apply_baseline_gate(
    max_regression: float,
    patterns: list[str],
    columns: list[str],
    values: np.ndarray,
    baseline: Mapping[str, float],
    directions: Directions,
) -> dict[int, list[Issue]]:
    """Direction-aware regression against a baseline (exact name, then without :rank)."""
    issues: dict[int, list[Issue]] = {}
    rxs = [re.compile(p) for p in patterns]
    for c, name in enumerate(columns):
        pm = parse_metric(name)
        if pm.is_return_code or not any(rx.fullmatch(name) or rx.fullmatch(pm.base) for rx in rxs):
            continue
        ref = baseline_of(baseline, name)
        if ref is None or ref == 0:
            continue
        direction = directions.of(name)
        col = values[:, c]
        with np.errstate(invalid="ignore"):
            dev = (col - ref) / abs(ref)
            bad = -dev if direction > 0 else (dev if direction < 0 else np.abs(dev))
            hit = bad > max_regression
        for r in np.nonzero(hit)[0]:
            v = float(col[r])
            issues.setdefault(int(r), []).append(
                Issue(
                    metric=name,
                    value=v,
                    reference=float(ref),
                    deviation=float(dev[r]),
                    check="baseline",
                    category="Baseline",
                    severity=FAIL,
                    detail=f"{dev[r] * 100:+.1f}% from the baseline {ref:.4g} (allowed {max_regression * 100:.1f}%)",
                )
            )
    return issues


def decide(policy: Policy, verdicts: list[str], names: list[str] | None = None) -> GateResult:
    """Apply the policy to every host's verdict (``names``: the hosts, in the same order, for the reason)."""
    total = len(verdicts)
    counted = sum(1 for v in verdicts if v in policy.count)
    limits = []
    if policy.max_failed_hosts is not None:
        limits.append(policy.max_failed_hosts)
    if policy.max_failed_percent is not None:
        limits.append(int(policy.max_failed_percent / 100.0 * total + 1e-9))
    allowed = min(limits) if limits else 0
    words = []
    if policy.max_failed_hosts is not None:
        words.append(f"at most {policy.max_failed_hosts} host(s)")
    if policy.max_failed_percent is not None:
        words.append(f"at most {policy.max_failed_percent:g}% of hosts")
    what = "/".join(policy.count)
    text = (" and ".join(words) if words else "no host") + f" counted as {what}"
    reasons: tuple[GateReason, ...] = ()
    if counted > allowed:
        who = tuple(n for n, v in zip(names or [], verdicts, strict=False) if v in policy.count)
        reasons = (
            GateReason(
                "hosts",
                f"{counted} of {total} host(s) counted as {what} ({allowed} allowed)",
                who,
            ),
        )
    return GateResult(
        passed=counted <= allowed,
        counted=counted,
        total=total,
        allowed_hosts=allowed,
        policy=text,
        reasons=reasons,
    )
