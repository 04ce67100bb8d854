"""The judged fleet as one value: what ``analysis.api.report()`` returns and the writers render.

Its own module so that the writers depend on this value only, never on the analysis that makes it
(``api`` imports the writers to write files; the writers import nothing back).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from sb_fleet.analysis.detect import FamilyStats
from sb_fleet.analysis.evidence import MetricEvidence
from sb_fleet.analysis.fleet_results import Fleet, LineProblem
from sb_fleet.analysis.gates import GateResult
from sb_fleet.analysis.majority import Disagreement, Inconsistency, NoisyMetric
from sb_fleet.analysis.populations import PopulationSplit
from sb_fleet.analysis.stats import ColumnStats
from sb_fleet.analysis.verdict import OUT_OF_SERVICE, VERDICTS, HostReport
from sb_fleet.config.gatespec import Gates
from sb_fleet.exits import exit_for

if TYPE_CHECKING:
    from sb_fleet.analysis.crossnode.fabric import FabricView
    from sb_fleet.analysis.superbench.rules import Diagnosis, RuleSummary
    from sb_fleet.history.view import HistoryView


@dataclass
class ReportResult:
    source: str
    hosts: list[HostReport]
    gate: GateResult
    fleet: Fleet
    stats: ColumnStats
    families: list[FamilyStats]
    rule_summaries: list[RuleSummary]
    problems: list[LineProblem]
    warnings: list[str]
    inputs: dict[str, str | None]
    gates: Gates
    flagged_cells: set[tuple[int, int]] = field(default_factory=set)
    partitions: dict[str, np.ndarray] = field(
        default_factory=dict
    )  # population label -> rows (analysis.populations)
    seconds: float = 0.0
    rules_diagnosis: Diagnosis | None = None  # SuperBench's own view of the rules (analysis.sbdiagnosis)
    rules_unmatched: dict[str, list[str]] = field(default_factory=dict)  # rule -> patterns matching nothing
    history: HistoryView | None = None  # with --history: regressions against own past, offenders, trends
    fabric: FabricView | None = None  # a pattern run: the node, NIC, link or path culprits (analysis.fabric)
    health: dict | None = None  # the run's health.json (sb_fleet.analysis.health_verdict), when it has one
    populations: list[PopulationSplit] = field(
        default_factory=list
    )  # splits the numbers show (analysis.populations)
    disagreements: list[Disagreement] = field(
        default_factory=list
    )  # two hosts, no majority (analysis.majority)
    # metrics the measured noise keeps from being judged down to the gate's promise, and metrics on
    # which steady hosts disagree with no majority (analysis.majority)
    too_noisy: list[NoisyMetric] = field(default_factory=list)
    inconsistent: list[Inconsistency] = field(default_factory=list)
    # validate's confirmation run (confirm.json's document: the hosts re-run, both runs' values, the
    # hosts over the bound, the seconds it took); None where none ran (sb_fleet.history.confirm)
    confirmation: dict | None = None
    # what the verdict of each judged metric used at rack scale (majority agreement: each host's value,
    # its noise, its reference and limits), flagged metrics first (analysis.evidence)
    evidence: list[MetricEvidence] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return exit_for([], gate_passed=self.gate.passed)

    def counts(self) -> dict[str, int]:
        c = dict.fromkeys(VERDICTS, 0)
        for h in self.hosts:
            c[h.verdict] = c.get(h.verdict, 0) + 1  # "flaky", "unconfirmed" only after validate's re-run
        return c

    def quarantine(self) -> list[str]:
        """The hosts to drain: those the policy counts as failing; never one the run did not test because it
        is out of service (its state and reason are someone else's, or sb-fleet's own from an earlier run)."""
        names = [
            h.name for h in self.hosts if h.verdict in self.gates.policy.count and h.verdict != OUT_OF_SERVICE
        ]
        extra = self.history.quarantine if self.history is not None else []  # repeat offenders, by policy
        untested = {h.name for h in self.hosts if h.verdict == OUT_OF_SERVICE}
        return names + [h for h in extra if h not in set(names) and h not in untested]
