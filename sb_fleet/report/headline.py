"""The report's first line, the same in every output: what failed the gate, and the warnings beside it.

A headline that names a warning ("3 metrics too noisy to judge") while a disagreement failed the gate
sends the reader the wrong way. Here the reasons that failed the gate (``GateResult.reasons``: the
counted hosts, unexpected populations, disagreements, inconsistencies, the fabric, history) come
first, and the warnings (too noisy, flaky, unconfirmed hosts, findings a re-run did not show again)
come after them, never instead of them. report.md, report.html, the console's last lines, junit.xml's
summary and Prometheus's ``sb_fleet_host_info`` all say :meth:`Headline.text`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sb_fleet.analysis.verdict import FLAKY, OUT_OF_SERVICE, UNCONFIRMED

if TYPE_CHECKING:
    from sb_fleet.report.report_result import ReportResult

MAX_NAMED_HOSTS = 5  # failing hosts named in the headline; the rest counted


@dataclass(frozen=True)
class Headline:
    passed: bool
    failed_by: tuple[str, ...]  # what failed the gate, most important first (empty when it passed)
    notes: tuple[str, ...]  # warnings beside it: never a reason the gate failed

    def text(self) -> str:
        head = "gate passed" if self.passed else "gate failed"
        if self.failed_by:
            head += ": " + "; ".join(self.failed_by)
        if self.notes:
            head += (" (warnings: " if not self.passed else " with warnings: ") + "; ".join(self.notes)
            head += ")" if not self.passed else ""
        return head

    def to_json(self) -> dict:
        return {
            "passed": self.passed,
            "failed_by": list(self.failed_by),
            "notes": list(self.notes),
            "text": self.text(),
        }


def headline(result: ReportResult) -> Headline:
    """The gate's reasons (``result.gate.reasons``) with the hosts they name, and the run's warnings."""
    gate = result.gate
    by_name = {h.name: h for h in result.hosts}
    failed_by = []
    for r in gate.reasons:
        if r.kind == "hosts" and r.hosts:
            named = ", ".join(_host_word(n, by_name) for n in r.hosts[:MAX_NAMED_HOSTS])
            more = f" and {len(r.hosts) - MAX_NAMED_HOSTS} more" if len(r.hosts) > MAX_NAMED_HOSTS else ""
            failed_by.append(f"{r.sentence}: {named}{more}")
        else:
            failed_by.append(r.sentence)
    if not gate.passed and not failed_by:  # a gate failed by something with no reason recorded
        failed_by.append(gate.policy)
    return Headline(passed=gate.passed, failed_by=tuple(failed_by), notes=tuple(_notes(result)))


def _host_word(name: str, by_name: dict) -> str:
    h = by_name.get(name)
    if h is None:
        return name
    if h.verdict == "missing":
        return f"{name} (missing)"
    cats = h.categories
    what = cats[0] if cats else h.verdict
    return f"{name} ({what})" if what else name


def _notes(result: ReportResult) -> list[str]:
    notes = []
    counts = result.counts()
    counted = set(result.gates.policy.count)
    for verdict in ("fail", "incomplete", "missing"):  # hosts the policy does not count: said, not hidden
        if counts.get(verdict) and verdict not in counted:
            notes.append(f"{counts[verdict]} host(s) {verdict} (not counted by the gate policy)")
    if not result.gate.passed and not any(r.kind == "hosts" for r in result.gate.reasons):
        bad = sum(counts.get(v, 0) for v in counted)
        if bad:
            notes.append(f"{bad} host(s) counted as failing, within the {result.gate.allowed_hosts} allowed")
    if counts.get(OUT_OF_SERVICE):
        away = [h for h in result.hosts if h.verdict == OUT_OF_SERVICE]
        shown = "; ".join(f"{h.name} ({h.reason})" if h.reason else h.name for h in away[:3])
        more = f"; and {len(away) - 3} more" if len(away) > 3 else ""
        counted_too = (
            " (counted by the gate: gates.count_out_of_service)" if OUT_OF_SERVICE in counted else ""
        )
        notes.append(f"{len(away)} host(s) out of service, not tested{counted_too}: {shown}{more}")
    if counts.get(FLAKY):
        notes.append(f"{counts[FLAKY]} host(s) flaky (did not fail again in validate's re-run)")
    if counts.get(UNCONFIRMED):
        notes.append(
            f"{counts[UNCONFIRMED]} host(s) unconfirmed (flagged on fleet statistics, over validate's re-run "
            "bound)"
        )
    kinds = {r.kind for r in result.gate.reasons}
    if result.too_noisy and "too_noisy" not in kinds:
        notes.append(f"{len(result.too_noisy)} metric(s) too noisy to judge")
    cleared = [
        *(sp for sp in result.populations if sp.confirmed is False),
        *(d for d in result.disagreements if d.confirmed is False),
        *(i for i in result.inconsistent if i.confirmed is False),
    ]
    if cleared:
        notes.append(f"{len(cleared)} finding(s) did not show again in validate's re-run (not counted)")
    standing_inc = [i for i in result.inconsistent if i.standing]
    if standing_inc and "inconsistent" not in kinds:
        notes.append(f"{len(standing_inc)} metric(s) inconsistent (gates.fleet.inconsistent: warn)")
    standing_pop = [sp for sp in result.populations if sp.confirmed is not False]
    if standing_pop and "populations" not in kinds:
        notes.append(f"{len(standing_pop)} population split(s), an expected mix")
    return notes
