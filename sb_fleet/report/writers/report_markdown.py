"""report.md: the summary an engineer reads in a terminal or a pull request."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import numpy as np

from sb_fleet.report.headline import headline

if TYPE_CHECKING:
    from sb_fleet.analysis.detect import FamilyStats
    from sb_fleet.analysis.figures.figures import Figures
    from sb_fleet.analysis.issues import Issue
    from sb_fleet.report.report_result import ReportResult

MAX_HOST_ROWS = 100
MAX_PROBLEMS = 30
MAX_FAMILY_ROWS = 15
_ORDER = {
    "fail": 0,
    "incomplete": 1,
    "missing": 2,
    "unconfirmed": 3,
    "flaky": 4,
    "out_of_service": 5,
    "pass": 6,
}
MAX_EVIDENCE_METRICS = 40  # metrics tabulated one by one; the rest are in report.json's "evidence"


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
    head = headline(result)
    lines = [
        f"# sb-fleet report: gate {status}",
        "",
        *(f"- **Failed by: {_cell(r)}**" for r in head.failed_by),
        *(f"- Warning: {_cell(n)}" for n in head.notes),
        "",
        f"- Source: `{result.source}`",
        f"- Hosts: **{len(result.hosts)}**: {counts['pass']} pass, {counts['fail']} fail, "
        f"{counts['incomplete']} incomplete, {counts['missing']} missing"
        + (
            f", {counts['flaky']} flaky (did not reproduce in validate's confirmation run)"
            if counts.get("flaky")
            else ""
        )
        + (
            f", {counts['unconfirmed']} unconfirmed (over validate's re-run bound; not counted)"
            if counts.get("unconfirmed")
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
    if result.confirmation is not None:
        lines.append(f"- Confirmation: {confirmation_line(result.confirmation)}")
    for rule, patterns in result.rules_unmatched.items():  # a rule that judges nothing passes every host
        lines.append(f"- **WARNING: rule `{rule}` matches no metric**: {patterns}")
    lines.append("")
    if result.populations:  # a fleet that falls apart (analysis.populations): never a silent pass
        expected = result.gates.populations.expected_mix
        standing = [sp for sp in result.populations if sp.confirmed is not False]
        effect = (
            "an expected mix: warning only"
            if expected
            else f"{len(standing)} fail the gate"
            if standing
            else "none showed again in validate's re-run: the gate does not fail on them"
        )
        lines += [
            f"## Populations ({len(result.populations)} split(s): {effect})",
            "",
            "| Scope | Family | Lower group | Centre | Upper group | Centre | Apart | Gap | Families showing it "
            "| Re-run | Gate |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for sp in result.populations:
            lo, hi = sp.groups
            fails = sp.confirmed is not False and not expected
            lines.append(
                f"| {_cell(sp.scope or 'fleet')} | `{_cell(sp.family)}` | {_hosts(lo)} | {_fmt(sp.centers[0])} "
                f"| {_hosts(hi)} | {_fmt(sp.centers[1])} | {sp.apart * 100:.0f}% | {sp.gap * 100:.1f}% "
                f"| {len(sp.families)} | {_cell(sp.confirmation) or 'none'} | {'fails' if fails else 'does not fail'} |"
            )
        lines.append("")
    if result.disagreements:  # two hosts, no majority (analysis.majority)
        standing_d = [d for d in result.disagreements if d.standing]
        effect = (
            f"{len(standing_d)} fail the gate; neither host is named the faulty one"
            if standing_d
            else "not shown again by validate's re-run: the gate does not fail on them"
        )
        lines += [
            f"## Two hosts disagree ({len(result.disagreements)} metric(s): {effect})",
            "",
            "| Metric | Hosts | Values | Difference | Noise σ | Re-run | Gate |",
            "|---|---|---|---|---|---|---|",
        ]
        for d in result.disagreements[:MAX_HOST_ROWS]:
            lines.append(
                f"| `{_cell(d.metric)}` | {_cell(' vs '.join(d.hosts))} | {_fmt(d.values[0])} vs {_fmt(d.values[1])} "
                f"| {d.deviation * 100:+.1f}% | {d.sigmas:.1f} | {_cell(d.confirmation) or 'none'} "
                f"| {'fails' if d.standing else 'does not fail'} |"
            )
        lines.append("")

    bad = sorted((h for h in result.hosts if h.verdict != "pass"), key=lambda h: (_ORDER[h.verdict], h.name))
    if bad:
        lines += [
            f"## Hosts to act on ({len(bad)}: {_counted_words(result, bad)})",
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
    elif result.too_noisy or result.inconsistent:  # never "All hosts passed" over what was not judged
        lines += ["## No host failed, but not every metric could be judged (see below)", ""]
    else:
        lines += ["## All hosts passed", ""]
    lines += _noise_sections(result)
    lines += evidence_section(result)

    if result.confirmation is not None:
        lines += confirmation_section(result.confirmation)
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


def _pct(v: object) -> str:
    return f"{v * 100:+.1f}%" if isinstance(v, (int, float)) else "-"


def _num_cell(v: object) -> str:
    return _fmt(float(v)) if isinstance(v, (int, float)) else "-"


def confirmation_line(doc: dict) -> str:
    """One line on validate's confirmation run: how many hosts, what it found, how long it took."""
    hosts = doc.get("hosts") or {}
    flaky = sum(1 for h in hosts.values() if h.get("result") == "flaky")
    sel = doc.get("selection") or {}
    beyond = sel.get("not_confirmed") or []
    plan = doc.get("plan") or {}
    if doc.get("not_run"):
        head = f"not run ({doc['not_run']})"
    else:
        secs = doc.get("seconds")
        took = f" in {secs:.1f} s" if isinstance(secs, (int, float)) else ""
        head = (
            f"{len(plan.get('benchmarks') or {})} host(s) re-run with {len(plan.get('controls') or [])} "
            f"control host(s){took}: {len(hosts) - flaky} reproduced, {flaky} flaky"
        )
    if beyond:
        head += f"; {len(beyond)} not confirmed (over the bound of {sel.get('limit')} host(s))"
    return head


def confirmation_section(doc: dict) -> list[str]:
    """validate's confirmation run: every re-run finding with the first and the re-run measurement."""
    mode = doc.get("mode")
    sel = doc.get("selection") or {}
    lines = [f"## Confirmation before the verdict: {confirmation_line(doc)}", ""]
    if mode == "auto":
        lines += [
            f"`validate` re-ran the benchmarks of the hosts that fail on fleet statistics alone (fleet, "
            f"sibling, majority checks), worst first, at most {sel.get('limit')} host(s), on them and on "
            "control hosts; a host fails only when it deviates again (`--no-confirm` turns this off, "
            "`--confirm` re-runs every failing host).",
            "",
        ]
    else:
        lines += ["`validate --confirm` re-ran the benchmarks of every failing host, with control hosts.", ""]
    hosts = doc.get("hosts") or {}
    if hosts:
        lines += [
            "| Host | Result | Metric | Check | First value | First deviation | Re-run value | Re-run deviation "
            "| Reproduced | Why |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for name, h in sorted(hosts.items()):
            for r in h.get("replays") or []:
                rc = str(r.get("metric", "")).endswith("return_code")
                lines.append(
                    f"| {_cell(name)} | {h.get('result')} | `{_cell(r.get('metric'))}` | {_cell(r.get('check'))} "
                    f"| {_num_cell(r.get('first_value'))} | {'-' if rc else _pct(r.get('first'))} "
                    f"| {_num_cell(r.get('again_value'))} | {'-' if rc else _pct(r.get('again'))} "
                    f"| {'yes' if r.get('reproduced') else 'no'} | {_cell(r.get('why', ''))} |"
                )
        lines.append("")
    beyond = sel.get("not_confirmed") or []
    if beyond:
        lines.append(
            f"- Not confirmed (over the bound of {sel.get('limit')} host(s); they keep their first verdict): "
            + _cell(", ".join(beyond))
        )
    explicit = sel.get("explicit") or []
    if explicit:
        lines.append(
            "- Not re-run (a rule, limit, baseline, history or a failed benchmark says they fail): "
            + _cell(", ".join(explicit))
        )
    if beyond or explicit:
        lines.append("")
    return lines


def _noise_sections(result: ReportResult) -> list[str]:
    """Too noisy to judge, and inconsistent (analysis.majority): the metrics, hosts and figures."""
    lines: list[str] = []
    if result.inconsistent:
        standing = sum(1 for m in result.inconsistent if m.standing)
        fails = result.gates.fleet.inconsistent == "fail" and standing > 0
        effect = (
            f"{standing} fail the gate"
            if fails
            else "warning only (gates.fleet.inconsistent: warn)"
            if standing
            else "none showed again in validate's re-run: the gate does not fail on them"
        )
        lines += [
            f"## Inconsistent ({len(result.inconsistent)} metric(s): {effect})",
            "",
            "Hosts that each measured steadily disagree beyond their noise, and no majority agrees: no host "
            "is judged on these metrics. validate re-runs them; one whose groups do not show again in the "
            "re-run is too noisy here to judge and does not fail the gate. Otherwise re-run them "
            "(`sb-fleet validate --confirm`) before trusting either group.",
            "",
            "| Metric | Groups (value, own noise) | Re-run |",
            "|---|---|---|",
        ]
        for m in result.inconsistent[:MAX_HOST_ROWS]:
            groups = "; ".join(
                f"{_hosts(g)}: {_fmt(c)} ({n * 100:.1f}%)"
                for g, c, n in zip(m.groups, m.centers, m.noise, strict=True)
            )
            lines.append(f"| `{_cell(m.metric)}` | {groups} | {_cell(m.confirmation) or 'none'} |")
        lines.append("")
    if result.too_noisy:
        fails = result.gates.fleet.too_noisy == "fail"
        lines += [
            f"## Too noisy to judge ({len(result.too_noisy)} metric(s): "
            f"{'the gate fails' if fails else 'a warning, the gate does not fail on it'})",
            "",
            "The noise measured on these hosts (their own timed samples, or the spread of the others) "
            "hides deviations the gate promises to catch at the suite's prior noise: a fault smaller than "
            "the smallest flagged deviation would pass. Re-run on a quieter fleet.",
            "",
            "| Metric | Hosts | Noise | From | Smallest flagged | Promised |",
            "|---|---|---|---|---|---|",
        ]
        for nm in result.too_noisy[:MAX_HOST_ROWS]:
            worst = max(range(len(nm.hosts)), key=lambda i: nm.noise[i])
            lines.append(
                f"| `{_cell(nm.metric)}` | {_hosts(nm.hosts)} | {nm.noise[worst] * 100:.1f}% | {_cell(nm.source[worst])} "
                f"| {nm.catchable[worst] * 100:.0f}% | {nm.promised * 100:.0f}% |"
            )
        lines.append("")
    return lines


def evidence_section(result: ReportResult) -> list[str]:
    """What majority agreement judged each host of a rack-sized fleet by, per metric (flagged metrics
    first): a flagged host's value, own noise, judged noise, reference, limit, re-run and verdict, one
    row each; the other hosts of the metric in one row (their ranges)."""
    if not result.evidence:
        return []
    ev = [e for e in result.evidence if e.status != "ok"]
    quiet = len(result.evidence) - len(ev)
    lines = [
        f"## Evidence per metric ({len(ev)} flagged, too noisy or inconsistent; {quiet} within their limits)",
        "",
        "Each host against the median of the other hosts, in units of the noise it was judged with (the "
        "largest of its own samples, the others' samples and spread, the suite's prior). Limit: the value "
        "beyond which it is flagged. report.json's `evidence` has every host of every metric.",
        "",
    ]
    if not ev:
        return [*lines, "Every judged metric of every host lies within its limits.", ""]
    lines += [
        "| Metric | Hosts | Value | Own noise | Judged noise | Reference | Limit | Re-run | Verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for e in ev[:MAX_EVIDENCE_METRICS]:
        metric = f"`{_cell(e.metric)}`" + (f" [{_cell(e.partition)}]" if e.partition else "")
        flagged = [h for h in e.hosts if h.status == "flagged"]
        for h in flagged:
            lim = _fmt(h.limit) + (f" / {_fmt(h.limit_hi)}" if h.limit_hi is not None else "")
            lines.append(
                f"| {metric} | {_cell(h.name)} | {_fmt(h.value)} | {_pct_abs(h.noise)} | {_pct_abs(h.sigma)} "
                f"| {_fmt(h.reference)} | {lim} | {_fmt(h.rerun)} | **flagged** |"
            )
            metric = ""
        rest = [h for h in e.hosts if h.status != "flagged"]
        if rest:
            statuses = Counter(h.status.replace("_", " ") for h in rest)
            verdict = ", ".join(f"{n} {w}" for w, n in statuses.most_common())
            who = _cell(rest[0].name) if len(rest) == 1 else f"{len(rest)} {'other ' if flagged else ''}hosts"
            lines.append(
                f"| {metric} | {who} | {_span([h.value for h in rest])} | {_span_pct([h.noise for h in rest])} "
                f"| {_span_pct([h.sigma for h in rest])} | {_span([h.reference for h in rest])} "
                f"| {_span([h.limit for h in rest])} | {_span([h.rerun for h in rest])} | {verdict} |"
            )
    if len(ev) > MAX_EVIDENCE_METRICS:
        lines.append(
            f"| ... | | {len(ev) - MAX_EVIDENCE_METRICS} more metric(s) in report.json | | | | | | |"
        )
    lines.append("")
    return lines


def _span(xs: list[float | None]) -> str:
    vals = [x for x in xs if x is not None]
    if not vals:
        return "-"
    lo, hi = min(vals), max(vals)
    return _fmt(lo) if _fmt(lo) == _fmt(hi) else f"{_fmt(lo)} to {_fmt(hi)}"


def _span_pct(xs: list[float | None]) -> str:
    vals = [x for x in xs if x is not None]
    if not vals:
        return "-"
    lo, hi = _pct_abs(min(vals)), _pct_abs(max(vals))
    return lo if lo == hi else f"{lo} to {hi}"


def _pct_abs(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:.1f}%"


def _counted_words(result: ReportResult, bad: list) -> str:
    """What the hosts to act on did to the gate: how many its policy counts, against how many allowed."""
    counted = set(result.gates.policy.count)
    n = sum(1 for h in bad if h.verdict in counted)
    allowed = result.gate.allowed_hosts
    if n == 0:
        return "none counted by the gate"
    return f"{n} counted by the gate, {allowed} allowed: " + ("they fail it" if n > allowed else "within it")
