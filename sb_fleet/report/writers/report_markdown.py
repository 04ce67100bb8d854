"""report.md: the summary an engineer reads in a terminal or a pull request."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from sb_fleet.analysis.detect import FamilyStats
    from sb_fleet.analysis.figures.figures import Figures
    from sb_fleet.analysis.issues import Issue
    from sb_fleet.report.report_result import ReportResult

MAX_HOST_ROWS = 100
MAX_PROBLEMS = 30
MAX_FAMILY_ROWS = 15
_ORDER = {"fail": 0, "incomplete": 1, "missing": 2, "flaky": 3, "pass": 4}


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.4g}"


def issue_line(i: Issue) -> str:
    dev = f" ({i.deviation * 100:+.1f}%)" if i.deviation is not None else ""
    metric = f"`{i.metric}` " if i.metric else ""
    return f"{metric}{i.detail or _fmt(i.value)}{dev if not i.detail else ''} [{i.check}]"


def _hosts(names: tuple[str, ...]) -> str:
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return f"{len(names)}: {_cell(shown)}"


def _why(i: Issue) -> str:
    """The metric, value, what it was judged against, the reference, the deviation and the noise units."""
    dev = f"{i.deviation * 100:+.1f}%" if i.deviation is not None else ""
    sig = f"{i.sigmas:.1f}" if i.sigmas is not None else ""
    metric = f"`{_cell(i.metric)}`" if i.metric else ""
    return f"| {metric} | {_fmt(i.value) if i.value is not None else ''} | {_cell(i.basis)} | {_fmt(i.reference) if i.reference is not None else ''} | {dev} | {sig} |"


def _flagged_families(result: ReportResult) -> list[tuple[str, FamilyStats, int]]:
    """Families with at least one flagged host, most flagged first."""
    by_col: dict[int, set[int]] = {}
    for row, col in result.flagged_cells:
        by_col.setdefault(col, set()).add(row)
    out = []
    for f in result.families:
        rows: set[int] = set()
        for c in f.columns:
            rows |= by_col.get(c, set())
        if f.partition:
            part = set(result.partitions.get(f.partition, np.arange(0)).tolist())
            rows &= part
        if rows:
            name = f.family + (f" [{f.partition}]" if f.partition else "")
            out.append((name, f, len(rows)))
    out.sort(key=lambda t: (-t[2], t[0]))
    return out


def render(result: ReportResult, figures: Figures | None = None) -> str:
    counts = result.counts()
    gate = result.gate
    status = "PASSED" if gate.passed else "FAILED"
    lines = [
        f"# sb-fleet report: gate {status}",
        "",
        f"- Source: `{result.source}`",
        f"- Hosts: **{len(result.hosts)}**: {counts['pass']} pass, {counts['fail']} fail, "
        f"{counts['incomplete']} incomplete, {counts['missing']} missing"
        + (
            f", {counts['flaky']} flaky (did not reproduce under validate --confirm)"
            if counts.get("flaky")
            else ""
        ),
        f"- Gate: **{status.lower()}**: {gate.counted} host(s) counted as failing, {gate.allowed_hosts} allowed "
        f"({gate.policy})",
        f"- Metrics: {len(result.fleet.columns)} per host; analysed in {result.seconds:.2f} s",
    ]
    checks = ["fleet-relative detection"] if result.gates.fleet.enabled else []
    if result.inputs.get("rules"):
        checks.append(f"rules `{result.inputs['rules']}`")
    if result.inputs.get("baseline"):
        checks.append(f"baseline `{result.inputs['baseline']}`")
    if result.gates.limits:
        checks.append(f"{len(result.gates.limits)} absolute limit(s)")
    lines.append(f"- Checks: {', '.join(checks) if checks else 'none'}")
    for rule, patterns in result.rules_unmatched.items():  # a rule that judges nothing passes every host
        lines.append(f"- **WARNING: rule `{rule}` matches no metric**: {patterns}")
    lines.append("")
    if result.populations:  # a fleet that falls apart (analysis.populations): never a silent pass
        expected = result.gates.populations.expected_mix
        lines += [
            f"## Populations ({'expected mix' if expected else 'unexpected: the gate fails'})",
            "",
            "| Scope | Family | Lower group | Centre | Upper group | Centre | Apart | Gap | Families showing it |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for sp in result.populations:
            lo, hi = sp.groups
            lines.append(
                f"| {_cell(sp.scope or 'fleet')} | `{_cell(sp.family)}` | {_hosts(lo)} | {_fmt(sp.centers[0])} "
                f"| {_hosts(hi)} | {_fmt(sp.centers[1])} | {sp.apart * 100:.0f}% | {sp.gap * 100:.1f}% "
                f"| {len(sp.families)} |"
            )
        lines.append("")
    if result.disagreements:  # two hosts, no majority (analysis.majority)
        a, b = result.disagreements[0].hosts
        lines += [
            f"## Two hosts disagree: {_cell(a)} and {_cell(b)} (the gate fails; neither is named the faulty one)",
            "",
            f"| Metric | {_cell(a)} | {_cell(b)} | Difference | Noise σ |",
            "|---|---|---|---|---|",
        ]
        for d in result.disagreements[:MAX_HOST_ROWS]:
            lines.append(
                f"| `{_cell(d.metric)}` | {_fmt(d.values[0])} | {_fmt(d.values[1])} | {d.deviation * 100:+.1f}% "
                f"| {d.sigmas:.1f} |"
            )
        lines.append("")

    bad = sorted((h for h in result.hosts if h.verdict != "pass"), key=lambda h: (_ORDER[h.verdict], h.name))
    if bad:
        lines += [
            f"## Hosts to act on ({len(bad)})",
            "",
            "| Host | Verdict | Categories | Metric | Value | Against | Reference | Deviation | Noise σ | Main finding |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for h in bad[:MAX_HOST_ROWS]:
            i0 = h.issues[0] if h.issues else None
            why = _why(i0) if i0 is not None else "| | | | | |"
            top = (i0.detail or _fmt(i0.value)) + f" [{i0.check}]" if i0 is not None else ""
            more = f" (+{len(h.issues) - 1} more)" if len(h.issues) > 1 else ""
            lines.append(
                f"| {_cell(h.name)} | {h.verdict} | {_cell(', '.join(h.categories))} {why} {_cell(top + more)} |"
            )
        if len(bad) > MAX_HOST_ROWS:
            lines.append(
                f"| ... | | | | | | | | | {len(bad) - MAX_HOST_ROWS} more in report.json / report.html |"
            )
        lines.append("")
        cats: Counter[str] = Counter()
        for h in bad:
            for c in h.categories:
                cats[c] += 1
        lines += ["## Hosts by category", "", "| Category | Hosts |", "|---|---|"]
        for c, n in cats.most_common():
            lines.append(f"| {_cell(c)} | {n} |")
        lines.append("")
    else:
        lines += ["## All hosts passed", ""]

    fams = _flagged_families(result)
    if fams:
        lines += [
            "## Metric families with flagged hosts",
            "",
            "| Family | Fleet median | Robust sigma | Fleet limit | Sibling limit | Hosts flagged |",
            "|---|---|---|---|---|---|",
        ]
        for name, f, n in fams[:MAX_FAMILY_ROWS]:
            sib = f"{f.sibling_limit * 100:.1f}%" if f.sibling_limit is not None else "-"
            lines.append(
                f"| `{_cell(name)}` | {_fmt(f.center)} | {f.sigma * 100:.2f}% | {f.fleet_limit * 100:.1f}% | {sib} | {n} |"
            )
        lines.append("")
    if result.rule_summaries:
        lines += [
            "## Rules",
            "",
            "| Rule | Function | Criteria | Metrics | Hosts violating |",
            "|---|---|---|---|---|",
        ]
        for s in result.rule_summaries:
            store = " (store)" if s.store else ""
            lines.append(
                f"| {_cell(s.name)}{store} | {s.function} | `{_cell(s.criteria)}` | {s.metrics} | {s.hosts_violating} |"
            )
        lines.append("")
    if result.problems:
        lines += [f"## Input problems ({len(result.problems)})", ""]
        for p in result.problems[:MAX_PROBLEMS]:
            lines.append(f"- {p}")
        if len(result.problems) > MAX_PROBLEMS:
            lines.append(f"- ... {len(result.problems) - MAX_PROBLEMS} more in report.json")
        lines.append("")
    if result.health is not None:  # the checks before the benchmarks (sb_fleet.analysis.health_verdict)
        from sb_fleet.report.writers.health_section import markdown as health_md

        lines.append(health_md(result.health))
    if result.history is not None:  # regressions against own past, offenders (sb_fleet.history)
        lines.append(result.history.markdown())
    if result.fabric is not None and result.fabric.findings:  # pattern runs' culprits (analysis.fabric)
        lines.append(result.fabric.markdown())
    if figures is not None:  # every measured figure, against its peak (sb_fleet.analysis.figures.figures)
        from sb_fleet.report.writers.figures_md import render as render_figures

        section = render_figures(figures)
        if section:
            lines.append(section)
    if result.warnings:
        lines += ["## Warnings", ""]
        lines += [f"- {w}" for w in result.warnings]
        lines.append("")
    lines.append(
        "Files: report.json (all details), report.html (plots, per-host drill-down), junit.xml, quarantine.txt"
    )
    return "\n".join(lines) + "\n"
