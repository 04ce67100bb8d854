"""What the history says about a run, as the report shows it (report.json ``history``, report.md)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from sb_fleet.config.gatespec import HistorySettings
from sb_fleet.history.regress import Drift


@dataclass(frozen=True)
class Regression:
    """One value many of its component's own sigmas worse than the component's own median."""

    host: str
    metric: str
    component: str  # "gpu:<uuid>", "nic:<guid>" or "host:<name>"
    value: float
    reference: float  # the component's own median over its healthy runs in the window
    deviation: float  # (value - reference) / |reference|
    sigmas: float  # (value - reference) / own robust sigma
    runs: int  # healthy runs behind the reference
    fleet_shift: float = 0.0  # the reference moved with the fleet median by this much

    def sentence(self) -> str:
        comp = "" if self.component.startswith("host:") else f"; {self.component}"
        moved = f", moved with the fleet's {self.fleet_shift:+.1%}" if abs(self.fleet_shift) >= 0.001 else ""
        return (
            f"{self.deviation:+.1%} against its own median over its last {self.runs} healthy runs "
            f"({abs(self.sigmas):.1f} of its own sigmas{comp}{moved})"
        )

    def to_json(self) -> dict[str, Any]:
        return {k: _num(v) for k, v in dataclasses.asdict(self).items()}


def _num(v: Any) -> Any:
    if isinstance(v, float):
        return round(v, 6) if math.isfinite(v) else None
    return v


@dataclass
class HistoryView:
    path: str
    run_key: str
    recorded: str  # recorded | replaced | unchanged
    window: list[str]  # run keys the references come from, oldest first
    settings: HistorySettings
    regressions: list[Regression] = field(default_factory=list)
    drifts: list[Drift] = field(default_factory=list)
    offenders: dict[str, int] = field(default_factory=dict)  # host -> failed runs of the last n
    flapping: dict[str, int] = field(default_factory=dict)  # host -> pass/fail switches
    back_to_healthy: dict[str, int] = field(default_factory=dict)  # host -> failed runs before tonight
    quarantine: list[str] = field(default_factory=list)  # added to quarantine.txt by policy
    # host -> its verdicts over the offenders window, oldest first, tonight last (the Prometheus export
    # counts the runs in a row a host failed from them)
    verdicts: dict[str, list[str]] = field(default_factory=dict)
    gate_failure: str | None = None  # why the history fails the gate, by policy
    warnings: list[str] = field(default_factory=list)
    host_trends: dict[str, dict[str, list[tuple[str, float]]]] = field(default_factory=dict)
    fleet_trends: dict[str, list[tuple[str, float]]] = field(default_factory=dict)
    query_seconds: float = 0.0
    record_seconds: float = 0.0
    prepare_seconds: float = 0.0  # facts read and values keyed by component
    laps: dict[str, float] = field(default_factory=dict)  # seconds per step

    def to_json(self) -> dict[str, Any]:
        return {
            "store": self.path,
            "run_key": self.run_key,
            "recorded": self.recorded,
            "window": self.window,
            "settings": dataclasses.asdict(self.settings),
            "regressions": [g.to_json() for g in self.regressions],
            "drift": [{k: _num(v) for k, v in dataclasses.asdict(d).items()} for d in self.drifts],
            "repeat_offenders": self.offenders,
            "flapping": self.flapping,
            "back_to_healthy": self.back_to_healthy,
            "quarantined_by_history": self.quarantine,
            "gate_failure": self.gate_failure,
            "host_trends": {
                h: {m: [[k, _num(v)] for k, v in seq] for m, seq in ms.items()}
                for h, ms in self.host_trends.items()
            },
            "fleet_trends": {f: [[k, _num(v)] for k, v in seq] for f, seq in self.fleet_trends.items()},
            "seconds": {
                "prepare": round(self.prepare_seconds, 3),
                "queries": round(self.query_seconds, 3),
                "record": round(self.record_seconds, 3),
                "steps": self.laps,
            },
        }

    def markdown(self) -> str:
        lines = [
            "## History",
            "",
            f"Store `{self.path}`; this run ({self.run_key}) {self.recorded}; references from the last "
            f"{len(self.window)} run(s).",
            "",
        ]
        if self.regressions:
            lines += [
                "| host | metric | value | own median | deviation | own sigmas | component |",
                "|---|---|---|---|---|---|---|",
            ]
            for g in self.regressions[:50]:
                lines.append(
                    f"| {g.host} | {g.metric} | {g.value:.6g} | {g.reference:.6g} | {g.deviation:+.1%} | "
                    f"{abs(g.sigmas):.1f} | {g.component} |"
                )
            if len(self.regressions) > 50:
                lines.append(f"\n... and {len(self.regressions) - 50} more in report.json")
            lines.append("")
        else:
            lines += ["No regression against the hosts' own past.", ""]
        for d in self.drifts:
            since = f" since run {d.since}" if d.since else ""
            lines.append(
                f"- fleet drift: {d.family} {d.deviation:+.1%} against the last {d.runs} runs{since}"
            )
        for label, hosts in (
            ("repeat offenders", self.offenders),
            ("flapping", self.flapping),
            ("back to healthy", self.back_to_healthy),
        ):
            if hosts:
                lines.append(f"- {label}: " + ", ".join(f"{h} ({n})" for h, n in sorted(hosts.items())))
        return "\n".join(lines).rstrip() + "\n"
