"""junit.xml: one test case per host, for CI systems that run nightly gates.

A host the gate policy counts as failing is a ``<failure>`` whose type is its
verdict; a non-passing host the policy does not count is ``<skipped>``. The hosts'
suite carries the gate's headline (what failed it, the warnings beside it:
:mod:`sb_fleet.report.headline`) as its ``gate`` and ``headline`` properties and
as its ``<system-out>``, which CI systems show with the suite.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING
from xml.sax.saxutils import escape, quoteattr

from sb_fleet.report.headline import headline

if TYPE_CHECKING:
    from sb_fleet.report.report_result import ReportResult


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")


def _clean(text: str) -> str:
    # XML 1.0 forbids most control characters, which a host name or value could carry.
    return _CONTROL.sub("?", text)


def render(result: ReportResult) -> str:
    counted = set(result.gates.policy.count)
    n = len(result.hosts)
    failures = sum(1 for h in result.hosts if h.verdict in counted)
    skipped = sum(1 for h in result.hosts if h.verdict != "pass" and h.verdict not in counted)
    cases: list[str] = []
    head = headline(result).text()
    n_h = f_h = 0
    if result.health is not None:  # one test case per host and health check
        from sb_fleet.report.writers.health_section import junit_cases

        cases, n_h, f_h = junit_cases(result.health, _clean)
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>\n',
        f'<testsuites name="sb-fleet" tests="{n + n_h}" failures="{failures + f_h}" errors="0" '
        f'skipped="{skipped}">\n',
        f'  <testsuite name="sb-fleet.hosts" tests="{n}" failures="{failures}" errors="0" skipped="{skipped}" '
        f'time="{result.seconds:.3f}">\n',
        "    <properties>\n",
        f'      <property name="gate" value="{"passed" if result.gate.passed else "failed"}"/>\n',
        f'      <property name="headline" value={quoteattr(_clean(head))}/>\n',
        "    </properties>\n",
    ]
    for h in result.hosts:
        name = quoteattr(_clean(h.name))
        if h.verdict == "pass":
            out.append(f'    <testcase classname="sb-fleet.hosts" name={name}/>\n')
            continue
        first = h.issues[0].detail if h.issues else (h.reason or h.verdict)
        msg = quoteattr(_clean(f"{h.verdict}: {first}"[:300]))
        body = escape(_clean("\n".join(f"[{i.check}] {i.category} {i.metric}: {i.detail}" for i in h.issues)))
        tag = "failure" if h.verdict in counted else "skipped"
        typ = f' type="{h.verdict}"' if tag == "failure" else ""
        out.append(
            f'    <testcase classname="sb-fleet.hosts" name={name}>\n'
            f"      <{tag} message={msg}{typ}>{body}</{tag}>\n"
            f"    </testcase>\n"
        )
    out.append(f"    <system-out>{escape(_clean(head))}</system-out>\n")
    out.append("  </testsuite>\n")
    if result.health is not None:
        out.append(
            f'  <testsuite name="sb-fleet.health" tests="{n_h}" failures="{f_h}" errors="0" skipped="0">\n'
        )
        out += cases
        out.append("  </testsuite>\n")
    out.append("</testsuites>\n")
    return "".join(out)
