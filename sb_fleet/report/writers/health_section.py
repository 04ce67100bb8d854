"""The health checks in the report: the Markdown section (failing checks per host with their evidence,
the drift tables value -> hosts), the JUnit test cases (one per host and check) and the summary
report.json carries (each host's verdict and findings: the quarantine reasons)."""

from __future__ import annotations

from collections.abc import Callable
from xml.sax.saxutils import escape, quoteattr

MAX_HOSTS = 100


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(health: dict) -> str:
    hosts = health.get("hosts") or {}
    bad = {h: d for h, d in hosts.items() if isinstance(d, dict) and d.get("verdict") in ("fail", "unknown")}
    warn = sum(1 for d in hosts.values() if isinstance(d, dict) and d.get("verdict") == "warn")
    lines = [
        "## Health",
        "",
        f"{len(hosts)} host(s) checked before the benchmarks: {len(bad)} unhealthy or without a result, "
        f"{warn} with warnings.",
        "",
    ]
    if bad:
        lines += ["| Host | Check | Value | Rule | Evidence |", "|---|---|---|---|---|"]
        for i, (h, d) in enumerate(sorted(bad.items())):
            if i >= MAX_HOSTS:
                lines.append(f"| ... | {len(bad) - MAX_HOSTS} more hosts in health.json | | | |")
                break
            if d.get("verdict") == "unknown":
                lines.append(f"| {_cell(h)} | (no result) | | | {_cell(d.get('problem', ''))} |")
            for f in d.get("findings") or []:
                if f.get("verdict") == "fail":
                    lines.append(
                        f"| {_cell(h)} | {_cell(f.get('check'))} | {_cell(f.get('value'))[:80]} | "
                        f"{_cell(f.get('rule'))[:120]} | {_cell(f.get('evidence'))[:300]} |"
                    )
        lines.append("")
    drift = health.get("drift") or {}
    majority = health.get("majority") or {}
    for fact, table in sorted(drift.items()):
        maj = majority.get(fact)
        lines += [f"Drift of `{fact}` (fleet majority: {maj if maj is not None else 'none'}):", ""]
        lines += ["| Value | Hosts |", "|---|---|"]
        for value, hs in sorted(table.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            shown = ", ".join(hs[:20]) + (f" and {len(hs) - 20} more" if len(hs) > 20 else "")
            lines.append(f"| {_cell(value)} | {_cell(shown)} |")
        lines.append("")
    return "\n".join(lines)


def summary(health: dict) -> dict:
    """What report.json carries: each host's verdict and its warn/fail findings, the drift tables."""
    hosts = health.get("hosts") or {}
    return {
        "hosts": {
            h: {
                "verdict": d.get("verdict"),
                "problem": d.get("problem", ""),
                "findings": d.get("findings", []),
            }
            for h, d in hosts.items()
            if isinstance(d, dict)
        },
        "drift": health.get("drift") or {},
        "majority": health.get("majority") or {},
    }


def junit_cases(health: dict, clean: Callable[[str], str]) -> tuple[list[str], int, int]:
    """One ``<testcase>`` per host and check (a fail is a failure; pass and warn pass, a warning's
    evidence in system-out); (cases, count, failures)."""
    out, n, failed = [], 0, 0
    for h, d in sorted((health.get("hosts") or {}).items()):
        if not isinstance(d, dict):
            continue
        cls = quoteattr(clean(f"sb-fleet.health.{h}"))
        findings = {f.get("check"): f for f in d.get("findings") or []}
        names = [c.get("check") for c in d.get("checks") or []] + [
            c for c in findings if c not in {x.get("check") for x in d.get("checks") or []}
        ]
        if d.get("verdict") == "unknown":
            names = ["result"]
            findings = {"result": {"verdict": "fail", "evidence": d.get("problem", ""), "rule": "a result"}}
        for c in names:
            n += 1
            name = quoteattr(clean(f"health {c}"))
            f = findings.get(c)
            if f is None:
                out.append(f"    <testcase classname={cls} name={name}/>\n")
            elif f.get("verdict") == "fail":
                failed += 1
                msg = quoteattr(clean(str(f.get("evidence") or f.get("value"))[:300]))
                body = escape(clean(f"value: {f.get('value')}\nrule: {f.get('rule')}\n{f.get('evidence')}"))
                out.append(
                    f"    <testcase classname={cls} name={name}>\n"
                    f'      <failure message={msg} type="unhealthy">{body}</failure>\n    </testcase>\n'
                )
            else:
                body = escape(clean(f"warn: {f.get('evidence')} (rule: {f.get('rule')})"))
                out.append(
                    f"    <testcase classname={cls} name={name}><system-out>{body}</system-out></testcase>\n"
                )
    return out, n, failed


def html(health: dict) -> str:
    """The ``<section id="health">`` of report.html: failing checks per host, drift tables (escaped)."""
    from html import escape as e

    hosts = health.get("hosts") or {}
    parts = [
        '<section id="health"><style>#health table{border-collapse:collapse}'
        "#health td,#health th{border:1px solid #ddd;padding:2px 6px}</style><h2>Health</h2>",
        "<table><tr><th>host</th><th>check</th><th>value</th><th>rule</th><th>evidence</th></tr>",
    ]
    rows = 0
    for h, d in sorted(hosts.items()):
        if not isinstance(d, dict):
            continue
        if d.get("verdict") == "unknown":
            parts.append(
                f"<tr><td>{e(h)}</td><td>(no result)</td><td></td><td></td><td>{e(str(d.get('problem')))}</td></tr>"
            )
        for f in d.get("findings") or []:
            if f.get("verdict") == "fail" and rows < 500:
                rows += 1
                parts.append(
                    f"<tr><td>{e(h)}</td><td>{e(str(f.get('check')))}</td><td>{e(str(f.get('value'))[:80])}</td>"
                    f"<td>{e(str(f.get('rule'))[:120])}</td><td>{e(str(f.get('evidence'))[:300])}</td></tr>"
                )
    parts.append("</table>")
    for fact, table in sorted((health.get("drift") or {}).items()):
        maj = (health.get("majority") or {}).get(fact)
        parts.append(
            f"<h3>Drift of {e(fact)} (fleet majority: {e(str(maj))})</h3><table><tr><th>value</th><th>hosts</th></tr>"
        )
        for value, hs in sorted(table.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            parts.append(f"<tr><td>{e(str(value))}</td><td>{e(', '.join(hs[:50]))}</td></tr>")
        parts.append("</table>")
    parts.append("</section>")
    return "".join(parts)
