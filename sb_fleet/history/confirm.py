"""Confirm before condemning (``validate --confirm``), as pure functions.

1. :func:`plan_confirmation`: which benchmarks to run again on which flagged host (the benchmarks
   its findings came from), plus the union of them on a few healthy *control* hosts of the same GPU
   model, so that a change of the whole environment between the two runs is seen and taken out.
2. :func:`judge_confirmation`: for every flagged host, did its findings reproduce in the second run?
   A numeric finding reproduces when the re-run value is again on the bad side of the reference
   (scaled by how much the controls moved between the runs) by at least half the first deviation
   and the practical margin; a failed benchmark reproduces when it fails again or reports nothing.
   A host none of whose findings reproduce is ``flaky``, not failed; one whose re-run says nothing
   (unreachable, no results) stays ``confirmed``: a host is never cleared without evidence.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sb_fleet.analysis.superbench.metric_names import parse_metric

CONFIRMED, FLAKY = "confirmed", "flaky"
DEFAULT_CONTROLS = 3
# Checks whose findings are measurements a re-run can repeat (not "missing-host" or "outcome").
_NOT_REPEATABLE = {"missing-host", "outcome"}


class FindingLike(Protocol):
    @property
    def metric(self) -> str: ...
    @property
    def value(self) -> float | None: ...
    @property
    def reference(self) -> float | None: ...
    @property
    def deviation(self) -> float | None: ...
    @property
    def check(self) -> str: ...


class HostLike(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def verdict(self) -> str: ...
    @property
    def gpu_model(self) -> str | None: ...
    @property
    def issues(self) -> Sequence[Any]: ...


def benchmark_of(metric: str) -> str:
    """The config's benchmark name of a results column: its first path part
    (``gemm-flops/fp16_tc_flops:3`` -> ``gemm-flops``; ``model-benchmarks:bert/pytorch-bert/...`` ->
    ``model-benchmarks:bert``)."""
    return metric.split("/", 1)[0]


@dataclass(frozen=True)
class ConfirmPlan:
    benchmarks: dict[str, list[str]]  # flagged host -> benchmarks to run again
    controls: list[str]  # healthy hosts that run the union of those benchmarks

    @property
    def all_benchmarks(self) -> list[str]:
        return sorted({b for bs in self.benchmarks.values() for b in bs})

    @property
    def hosts(self) -> list[str]:
        return [*self.benchmarks, *self.controls]

    def to_json(self) -> dict[str, Any]:
        return {"benchmarks": self.benchmarks, "controls": self.controls}


def plan_confirmation(
    hosts: Sequence[HostLike], controls: int = DEFAULT_CONTROLS, verdicts: Sequence[str] = ("fail",)
) -> ConfirmPlan:
    """The re-runs: each flagged host's benchmarks, and ``controls`` passing hosts per GPU model of the
    flagged ones, spread evenly over the sorted passing hosts (deterministic: the same run gives the
    same plan)."""
    todo: dict[str, list[str]] = {}
    models: set[str | None] = set()
    for h in hosts:
        if h.verdict not in verdicts:
            continue
        benches = sorted(
            {benchmark_of(i.metric) for i in h.issues if i.metric and i.check not in _NOT_REPEATABLE}
        )
        if benches:
            todo[h.name] = benches
            models.add(h.gpu_model)
    chosen: list[str] = []
    if todo and controls > 0:
        for model in sorted(models, key=lambda m: m or ""):
            pool = sorted(h.name for h in hosts if h.verdict == "pass" and h.gpu_model == model)
            if not pool:
                continue
            k = min(controls, len(pool))
            picks = [pool[(2 * i + 1) * len(pool) // (2 * k)] for i in range(k)]
            chosen += [p for p in picks if p not in chosen]
    return ConfirmPlan(benchmarks=todo, controls=chosen)


@dataclass(frozen=True)
class Replay:
    """One finding seen again: did it reproduce?"""

    metric: str
    check: str
    first: float | None  # the first run's deviation (or value, for a return code)
    again: float | None  # the re-run's deviation against the control-scaled reference (or value)
    reproduced: bool
    why: str


@dataclass(frozen=True)
class Confirmation:
    host: str
    result: str  # confirmed | flaky
    replays: tuple[Replay, ...]

    def sentence(self) -> str:
        seen = "; ".join(f"{r.metric}: {r.why}" for r in self.replays[:3])
        if self.result == FLAKY:
            return f"did not reproduce in the confirmation run ({seen})"
        return f"reproduced in the confirmation run ({seen})"


def control_ratio(
    metric: str, first: Mapping[str, Mapping[str, float]], again: Mapping[str, Mapping[str, float]]
) -> float:
    """Median over the control hosts of (re-run / first run) for ``metric``'s family; 1 without data."""
    fam = parse_metric(metric).family
    ratios: list[float] = []
    for host, vals in again.items():
        before = first.get(host, {})
        for m, v in vals.items():
            if parse_metric(m).family != fam:
                continue
            b = before.get(m)
            if b is not None and b != 0 and math.isfinite(b) and math.isfinite(v):
                ratios.append(v / b)
    if not ratios:
        return 1.0
    ratios.sort()
    mid = len(ratios) // 2
    return ratios[mid] if len(ratios) % 2 else (ratios[mid - 1] + ratios[mid]) / 2


def judge_confirmation(
    findings: Mapping[str, Sequence[FindingLike]],
    rerun: Mapping[str, Mapping[str, float]],
    controls_first: Mapping[str, Mapping[str, float]],
    controls_rerun: Mapping[str, Mapping[str, float]],
    min_deviation: float = 0.02,
) -> dict[str, Confirmation]:
    """Each flagged host: ``confirmed`` when any finding reproduced (or the re-run has nothing to say),
    ``flaky`` when every repeatable finding was measured again and none reproduced."""
    out: dict[str, Confirmation] = {}
    for host, issues in findings.items():
        values = rerun.get(host)
        replays: list[Replay] = []
        for i in issues:
            if not i.metric or i.check in _NOT_REPEATABLE:
                continue
            replays.append(_replay(i, values, controls_first, controls_rerun, min_deviation))
        if not replays:
            continue
        flaky = all(not r.reproduced for r in replays)
        out[host] = Confirmation(host, FLAKY if flaky else CONFIRMED, tuple(replays))
    return out


def _replay(
    i: FindingLike,
    values: Mapping[str, float] | None,
    controls_first: Mapping[str, Mapping[str, float]],
    controls_rerun: Mapping[str, Mapping[str, float]],
    min_deviation: float,
) -> Replay:
    if values is None:
        return Replay(i.metric, i.check, i.deviation, None, True, "no results in the re-run")
    v = values.get(i.metric)
    name = parse_metric(i.metric)
    if name.is_return_code:
        ok = v is not None and v == 0
        return Replay(i.metric, i.check, i.value, v, not ok, "passed this time" if ok else "failed again")
    if v is None or not math.isfinite(v):
        return Replay(i.metric, i.check, i.deviation, None, True, "not reported again")
    if i.reference is None or i.deviation is None or i.reference == 0 or not math.isfinite(i.reference):
        return Replay(i.metric, i.check, i.deviation, None, True, "no reference to compare with")
    ref = i.reference * control_ratio(i.metric, controls_first, controls_rerun)
    again = (v - ref) / abs(ref)
    need = max(min_deviation, abs(i.deviation) / 2)
    same_side = (again < 0) == (i.deviation < 0)
    reproduced = same_side and abs(again) >= need
    why = f"{i.deviation:+.1%} then {again:+.1%}" + (
        "" if reproduced else f" (needed {math.copysign(need, i.deviation):+.1%})"
    )
    return Replay(i.metric, i.check, i.deviation, again, reproduced, why)


def rerun_values(hosts: Sequence[str], columns: Sequence[str], values: Any) -> dict[str, dict[str, float]]:
    """Host -> metric -> value from a results matrix (NaN left out)."""
    out: dict[str, dict[str, float]] = {}
    for r, h in enumerate(hosts):
        row = values[r]
        out[h] = {c: float(row[k]) for k, c in enumerate(columns) if math.isfinite(float(row[k]))}
    return out


__all__ = [
    "CONFIRMED",
    "FLAKY",
    "ConfirmPlan",
    "Confirmation",
    "Replay",
    "benchmark_of",
    "confirm_config",
    "confirmation_json",
    "control_ratio",
    "judge_confirmation",
    "plan_confirmation",
    "rerun_values",
]


def confirm_config(config: Mapping[str, Any], benchmarks: Sequence[str]) -> dict[str, Any] | None:
    """The run's config (as loaded from its YAML) narrowed to ``benchmarks`` for the confirmation run,
    or None when none of them is a benchmark of the config."""
    sb = dict(config.get("superbench") or {})
    known = set((sb.get("benchmarks") or {}).keys())
    keep = [b for b in benchmarks if b in known]
    if not keep:
        return None
    sb["enable"] = keep
    return {**config, "superbench": sb}


def confirmation_json(plan: ConfirmPlan, result: Mapping[str, Confirmation], sub_run: Any) -> dict[str, Any]:
    """confirm.json: the plan, the sub-run and every host's replays."""
    return {
        "schema_version": 1,
        "plan": plan.to_json(),
        "run_dir": str(sub_run),
        "hosts": {
            h: {
                "result": c.result,
                "detail": c.sentence(),
                "replays": [
                    {
                        "metric": r.metric,
                        "check": r.check,
                        "first": r.first,
                        "again": r.again,
                        "reproduced": r.reproduced,
                        "why": r.why,
                    }
                    for r in c.replays
                ],
            }
            for h, c in result.items()
        },
    }
