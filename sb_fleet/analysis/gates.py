"""Performance gates: the ``gates:`` section of the config, and the pass/fail decision of a run.

::

    gates:
      limits:                         # absolute floors and ceilings
        - metric: gemm-flops/fp16_tc_flops    # regex, matched against the name without :rank
          min: 250000
          gpu_model: "A100*"          # only hosts whose GPU model matches (glob); omit for all
        - metric: kernel-launch/event_time
          max: 0.008
      baseline:                       # relative to --baseline
        max_regression: 0.05          # worse than the baseline by more than 5% fails
        metrics: ["gemm-flops/.*", "nccl-bw/.*"]
      fleet:                          # fleet-relative detection
        enabled: true
        threshold: 5.0                # robust sigmas
        min_deviation: 0.03           # and at least 3% off the fleet median
        sibling_min_deviation: 0.025
        combined_min_deviation: 0.02
      policy:                         # when the run passes
        max_failed_hosts: 0           # at most this many hosts counted as failing ...
        max_failed_percent: null      # ... and at most this share of all hosts
        count: [fail, incomplete, missing]

An absent section means the default policy: fleet-relative detection on,
no absolute limits, and the run passes only if no host fails, is
incomplete or is missing. ``baseline.max_regression`` applies whenever a
baseline is given and no rules file is (then the rules use the baseline);
set it explicitly to apply it alongside rules too.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from sb_fleet.analysis.detect import DetectionSettings
from sb_fleet.analysis.issues import FAIL, Issue, relative
from sb_fleet.analysis.names import Directions, parse_metric
from sb_fleet.analysis.rules import baseline_of

Verdict = Literal["pass", "fail", "incomplete", "missing"]
DEFAULT_BASELINE_REGRESSION = 0.05


def _check_regex(v: str) -> str:
    try:
        re.compile(v)
    except re.error as exc:
        raise ValueError(f"not a valid regular expression: {exc}") from None
    return v


class Limit(BaseModel):
    model_config = ConfigDict(extra="forbid")

    metric: str = Field(description="regex matched in full against the metric name, with or without :rank")
    min: float | None = None
    max: float | None = None
    gpu_model: str | None = Field(
        default=None, description="glob on the host's GPU model; omit for every host"
    )

    _check = field_validator("metric")(_check_regex)

    @model_validator(mode="after")
    def _one_bound(self) -> Limit:
        if self.min is None and self.max is None:
            raise ValueError("a limit needs 'min', 'max' or both")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError("'min' is above 'max'")
        return self


class BaselineGate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_regression: float | None = Field(default=None, ge=0, le=1)
    metrics: list[str] = Field(default_factory=lambda: [".*"])

    @field_validator("metrics")
    @classmethod
    def _regexes(cls, v: list[str]) -> list[str]:
        for p in v:
            _check_regex(p)
        return v


class FleetGate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    threshold: float = Field(default=5.5, gt=0)
    combined_threshold: float = Field(default=5.0, gt=0)
    min_deviation: float = Field(default=0.03, ge=0, le=1)
    sibling_min_deviation: float = Field(default=0.025, ge=0, le=1)
    combined_min_deviation: float = Field(default=0.02, ge=0, le=1)
    min_hosts: int = Field(default=8, ge=3)

    def settings(self) -> DetectionSettings:
        return DetectionSettings(
            threshold=self.threshold,
            combined_threshold=self.combined_threshold,
            min_deviation=self.min_deviation,
            sibling_min_deviation=self.sibling_min_deviation,
            combined_min_deviation=self.combined_min_deviation,
            min_hosts=self.min_hosts,
        )


class Policy(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_failed_hosts: int | None = Field(default=None, ge=0)
    max_failed_percent: float | None = Field(default=None, ge=0, le=100)
    count: list[Literal["fail", "incomplete", "missing"]] = Field(
        default_factory=lambda: ["fail", "incomplete", "missing"]  # type: ignore[arg-type]
    )


class Gates(BaseModel):
    """The ``gates:`` section of the config. Every field has a default."""

    model_config = ConfigDict(extra="forbid")

    limits: list[Limit] = Field(default_factory=list)
    baseline: BaselineGate = Field(default_factory=BaselineGate)
    fleet: FleetGate = Field(default_factory=FleetGate)
    policy: Policy = Field(default_factory=Policy)


@dataclass(frozen=True)
class GateResult:
    passed: bool
    counted: int  # hosts counted as failing under the policy
    total: int
    allowed_hosts: int
    policy: str  # in words

    def to_json(self) -> dict:
        return {
            "passed": self.passed,
            "failing_hosts": self.counted,
            "total_hosts": self.total,
            "allowed_failing_hosts": self.allowed_hosts,
            "policy": self.policy,
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


def decide(policy: Policy, verdicts: list[str]) -> GateResult:
    """Apply the policy to every host's verdict."""
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
    return GateResult(
        passed=counted <= allowed, counted=counted, total=total, allowed_hosts=allowed, policy=text
    )
