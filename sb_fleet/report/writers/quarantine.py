"""quarantine.txt: the hosts to drain, one name per line (those the gate policy counts as failing)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sb_fleet.report.report_result import ReportResult


def render(result: ReportResult) -> str:
    names = result.quarantine()
    return "".join(f"{n}\n" for n in names)
