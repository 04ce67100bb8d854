"""The ``gates:`` section of the config: its schema and its defaults (the config layer: no numpy, no analysis).

The analysis reads these as frozen values; the detector's defaults are
declared once, in :class:`DetectionSettings`, and the schema takes them from there.

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
        threshold: 5.5                # robust sigmas (combined_threshold: 5.0)
        min_deviation: 0.03           # and at least 3% off the fleet median
        sibling_min_deviation: 0.025
        combined_min_deviation: 0.02
      history:                        # with --history: against each host's own past
        window: 10                    # the last 10 runs; min_runs: 5 healthy ones needed
        threshold: 6.0                # own robust sigmas, and min_deviation: 0.02
        regression: fail              # fail | warn | off; drift: warn (fleet medians)
        offenders: warn               # k of n failed runs: warn | quarantine
      populations:                    # a fleet that falls apart into populations
        expected_mix: false           # true: report a split, do not fail the gate on it
        min_gap: 0.05                 # a hole wider than 5% between the groups ...
        min_share: 0.1                # ... each with at least 10% of the hosts
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

import re
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Verdict = Literal["pass", "fail", "incomplete", "missing"]
DEFAULT_BASELINE_REGRESSION = 0.05


@dataclass(frozen=True)
class DetectionSettings:
    """The fleet-relative detector's knobs; their defaults are the only ones in sb-fleet."""

    threshold: float = 5.5  # robust sigmas, single metric
    combined_threshold: float = 5.0  # robust sigmas, combined score
    min_deviation: float = 0.03  # fleet check: at least 3% worse than the fleet median
    sibling_min_deviation: float = 0.025  # sibling check: at least 2.5% worse than the siblings
    combined_min_deviation: float = 0.02  # combined sibling check: mean deviation at least 2%
    min_hosts: int = 8  # fewer hosts than this: no fleet statistics
    floor_sigmas: float = 2.0  # combined sibling check: its floor follows the family noise (0: fixed)
    min_floor: float = 0.01  # ... but never below 1%
    majority_max_hosts: int = 20  # below this many hosts, also majority agreement (analysis.majority)
    sku_reference: bool = True  # judge hosts against their GPU model's reference (analysis.sku_reference)
    # Measured noise (analysis.majority): a metric whose noise on a host makes the smallest flagged
    # deviation more than this many times the one flagged at the prior is "too noisy" there ...
    too_noisy_factor: float = 2.0
    too_noisy: Literal["warn", "fail"] = "warn"  # ... which passes the gate with a warning, or fails it
    inconsistent: Literal["fail", "warn"] = "fail"  # steady hosts that disagree with no majority


_D = DetectionSettings()


@dataclass(frozen=True)
class HistorySettings:
    """The history checks' knobs (``gates.history``, with ``--history``); their defaults are the only ones."""

    window: int = 10  # the last N runs before this one
    min_runs: int = 5  # healthy runs a component needs in the window before it is judged
    threshold: float = 6.0  # own robust sigmas (pooled with the fleet's typical spread of the metric)
    min_deviation: float = 0.02  # and at least 2% off its own median
    regression: Literal["fail", "warn", "off"] = "fail"  # own-history regression
    drift: Literal["fail", "warn", "off"] = "warn"  # fleet-median drift
    drift_threshold: float = 5.0  # robust sigmas of the window's fleet medians
    drift_min_deviation: float = 0.02
    offenders_k: int = 3  # a repeat offender failed in k ...
    offenders_n: int = 5  # ... of its last n runs (tonight included)
    offenders: Literal["warn", "quarantine"] = "warn"  # quarantine: also listed in quarantine.txt
    flapping_min_flips: int = 3  # pass<->fail switches within the last offenders_n runs


_H = HistorySettings()


def _check_regex(v: str) -> str:
    try:
        re.compile(v)
    except re.error as exc:
        raise ValueError(f"not a valid regular expression: {exc}") from None
    return v


class Limit(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

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
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    max_regression: float | None = Field(default=None, ge=0, le=1)
    metrics: list[str] = Field(default_factory=lambda: [".*"])

    @field_validator("metrics")
    @classmethod
    def _regexes(cls, v: list[str]) -> list[str]:
        for p in v:
            _check_regex(p)
        return v


class FleetGate(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    enabled: bool = True
    threshold: float = Field(default=_D.threshold, gt=0)
    combined_threshold: float = Field(default=_D.combined_threshold, gt=0)
    min_deviation: float = Field(default=_D.min_deviation, ge=0, le=1)
    sibling_min_deviation: float = Field(default=_D.sibling_min_deviation, ge=0, le=1)
    combined_min_deviation: float = Field(default=_D.combined_min_deviation, ge=0, le=1)
    min_hosts: int = Field(default=_D.min_hosts, ge=3)
    floor_sigmas: float = Field(default=_D.floor_sigmas, ge=0)
    min_floor: float = Field(default=_D.min_floor, ge=0, le=1)
    majority_max_hosts: int = Field(default=_D.majority_max_hosts, ge=0)
    sku_reference: bool = _D.sku_reference
    too_noisy_factor: float = Field(default=_D.too_noisy_factor, ge=1)
    too_noisy: Literal["warn", "fail"] = _D.too_noisy
    inconsistent: Literal["fail", "warn"] = _D.inconsistent

    def settings(self) -> DetectionSettings:
        return DetectionSettings(
            threshold=self.threshold,
            combined_threshold=self.combined_threshold,
            min_deviation=self.min_deviation,
            sibling_min_deviation=self.sibling_min_deviation,
            combined_min_deviation=self.combined_min_deviation,
            min_hosts=self.min_hosts,
            floor_sigmas=self.floor_sigmas,
            min_floor=self.min_floor,
            majority_max_hosts=self.majority_max_hosts,
            sku_reference=self.sku_reference,
            too_noisy_factor=self.too_noisy_factor,
            too_noisy=self.too_noisy,
            inconsistent=self.inconsistent,
        )


class HistoryGate(BaseModel):
    """``gates.history``: how regressions against history count (used only with ``--history``)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    window: int = Field(default=_H.window, ge=2, le=1000)
    min_runs: int = Field(default=_H.min_runs, ge=2)
    threshold: float = Field(default=_H.threshold, gt=0)
    min_deviation: float = Field(default=_H.min_deviation, ge=0, le=1)
    regression: Literal["fail", "warn", "off"] = _H.regression
    drift: Literal["fail", "warn", "off"] = _H.drift
    drift_threshold: float = Field(default=_H.drift_threshold, gt=0)
    drift_min_deviation: float = Field(default=_H.drift_min_deviation, ge=0, le=1)
    offenders_k: int = Field(default=_H.offenders_k, ge=1)
    offenders_n: int = Field(default=_H.offenders_n, ge=1)
    offenders: Literal["warn", "quarantine"] = _H.offenders
    flapping_min_flips: int = Field(default=_H.flapping_min_flips, ge=1)

    @model_validator(mode="after")
    def _k_of_n(self) -> HistoryGate:
        if self.offenders_k > self.offenders_n:
            raise ValueError("offenders_k is above offenders_n")
        if self.min_runs > self.window:
            raise ValueError("min_runs is above window")
        return self

    def settings(self) -> HistorySettings:
        return HistorySettings(**self.model_dump())


class PopulationsGate(BaseModel):
    """``gates.populations``: fleets that fall apart into populations (analysis.populations)."""

    model_config = ConfigDict(extra="forbid")

    expected_mix: bool = False  # true: a split found in the numbers is reported, the gate does not fail on it
    min_gap: float = Field(default=0.05, gt=0, le=10)  # a hole wider than 5% between two groups
    min_share: float = Field(default=0.1, gt=0, le=0.5)  # ... each with at least 10% of the hosts (and 2)
    by_inventory_group: bool = False  # also judge each inventory group within itself


class Policy(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    max_failed_hosts: int | None = Field(default=None, ge=0)
    max_failed_percent: float | None = Field(default=None, ge=0, le=100)
    count: list[Literal["fail", "incomplete", "missing", "out_of_service"]] = Field(
        default_factory=lambda: ["fail", "incomplete", "missing"]  # type: ignore[arg-type]
    )


class Gates(BaseModel):
    """The ``gates:`` section of the config. Every field has a default."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    limits: list[Limit] = Field(default_factory=list)
    baseline: BaselineGate = Field(default_factory=BaselineGate)
    fleet: FleetGate = Field(default_factory=FleetGate)
    populations: PopulationsGate = Field(default_factory=PopulationsGate)
    policy: Policy = Field(default_factory=Policy)
    # true: a host out of service (Slurm: drained, down, maintenance, reserved; or drained by sb-fleet and not
    # re-tested) counts as failing, as if policy.count listed out_of_service (which report.json shows)
    count_out_of_service: bool = Field(default=False, exclude=True)
    # Not in the gates' dump: a report without --history stays as it was; with it, report.json's
    # "history" section shows the settings used.
    history: HistoryGate = Field(default_factory=HistoryGate, exclude=True)
    # validate's confirmation before the verdict (ConfirmGate, below); report.json's "confirmation"
    # section shows it where it ran.
    confirm: ConfirmGate = Field(default_factory=lambda: ConfirmGate(), exclude=True)

    @model_validator(mode="after")
    def _count_out_of_service(self) -> Gates:
        if self.count_out_of_service and "out_of_service" not in self.policy.count:
            self.policy.count.append("out_of_service")
        return self


class ConfirmGate(BaseModel):
    """``gates.confirm``: plain ``validate`` re-runs the benchmarks of the hosts that fail on the fleet's
    statistics alone (fleet, sibling and majority checks; no explicit reason) on them and on a few
    control hosts before the verdict, and fails them only if they deviate again
    (:mod:`sb_fleet.history.confirm`). Every such host in a fleet of fewer than all_below_hosts; else
    at most max(min_hosts, max_percent of the hosts), and never more than max_hosts, worst first: the
    hosts over that bound are ``unconfirmed``, not failed (so many candidates mean a noisy run); ``validate --no-confirm`` (or ``auto: false``) turns it off."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    auto: bool = True
    max_hosts: int | None = Field(default=None, ge=0)
    max_percent: float = Field(default=5.0, ge=0, le=100)
    min_hosts: int = Field(default=2, ge=0)
    # a fleet of fewer hosts re-runs every host that fails on fleet statistics alone (a rack)
    all_below_hosts: int = Field(default=20, ge=0)


Gates.model_rebuild()
