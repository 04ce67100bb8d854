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
    """The ``<section id="health">`` of report.html: a card of what the checks found (hosts per
    verdict, per check how many hosts warned or failed), the failing hosts with their evidence (each
    opens its drill-down) and the drift tables; never an empty table. Everything escaped."""
    from html import escape as e

    hosts = {h: d for h, d in (health.get("hosts") or {}).items() if isinstance(d, dict)}
    verdicts: dict[str, int] = {}
    per_check: dict[str, dict[str, int]] = {}
    for d in hosts.values():
        v = str(d.get("verdict"))
        verdicts[v] = verdicts.get(v, 0) + 1
        for c in d.get("checks") or ():
            if isinstance(c, dict) and c.get("check"):
                row = per_check.setdefault(str(c["check"]), {"pass": 0, "warn": 0, "fail": 0})
                cv = str(c.get("verdict"))
                row[cv] = row.get(cv, 0) + 1
        if not d.get("checks"):  # a summary (report.json's) keeps the findings only
            for f in d.get("findings") or ():
                row = per_check.setdefault(str(f.get("check")), {"pass": 0, "warn": 0, "fail": 0})
                fv = str(f.get("verdict"))
                row[fv] = row.get(fv, 0) + 1
    bad = sorted(h for h, d in hosts.items() if d.get("verdict") in ("fail", "unknown"))
    said = ", ".join(
        f'<b class="v-{"fail" if v in ("fail", "unknown") else ("incomplete" if v == "warn" else "pass")}">'
        f"{n}</b> {e(v if v != 'unknown' else 'without a result')}"
        for v, n in sorted(
            verdicts.items(),
            key=lambda kv: (
                ("fail", "unknown", "warn", "pass").index(kv[0])
                if kv[0] in ("fail", "unknown", "warn", "pass")
                else 9
            ),
        )
    )
    parts = [
        '<section id="health"><h2>Health checks before the benchmarks'
        f"{': every host healthy' if not bad else f': {len(bad)} host(s) unhealthy'}</h2>",
        f"<p>{len(hosts)} host(s) checked: {said or 'no result'}.</p>",
    ]
    noted = {c: r for c, r in per_check.items() if r.get("warn") or r.get("fail")}
    if per_check:
        chips = "".join(
            f'<span class="chip{" chip-fail" if r.get("fail") else (" chip-warn" if r.get("warn") else "")}">'
            f"{e(c)}: {r.get('pass', 0)} pass"
            + (f", {r['warn']} warn" if r.get("warn") else "")
            + (f", {r['fail']} fail" if r.get("fail") else "")
            + "</span>"
            for c, r in sorted(
                per_check.items(), key=lambda kv: (-kv[1].get("fail", 0), -kv[1].get("warn", 0), kv[0])
            )
        )
        parts.append(f'<div class="chips">{chips}</div>')
    if not noted and not bad:
        parts.append('<p class="muted">No check warned or failed on any host.</p>')
    if bad:
        rows = []
        for h in bad[: MAX_HOSTS * 5]:
            d = hosts[h]
            link = (
                f'<a href="#host={e(h, quote=True)}" data-host="{e(h, quote=True)}" class="mono">{e(h)}</a>'
            )
            if d.get("verdict") == "unknown":
                rows.append(
                    f"<tr><td>{link}</td><td>(no result)</td><td></td><td></td><td>{e(str(d.get('problem')))}</td></tr>"
                )
            for f in d.get("findings") or []:
                if f.get("verdict") == "fail":
                    rows.append(
                        f"<tr><td>{link}</td><td>{e(str(f.get('check')))}</td><td>{e(str(f.get('value'))[:80])}</td>"
                        f"<td>{e(str(f.get('rule'))[:120])}</td><td>{e(str(f.get('evidence'))[:300])}</td></tr>"
                    )
        more = len(bad) - MAX_HOSTS * 5
        parts.append(
            '<div class="scroll"><table><thead><tr><th>Host</th><th>Check</th><th>Value</th><th>Rule</th>'
            "<th>Evidence</th></tr></thead><tbody>"
            + "".join(rows[:2000])
            + "</tbody></table></div>"
            + (f'<p class="muted">{more} more unhealthy host(s) in health.json</p>' if more > 0 else "")
        )
    for fact, table in sorted((health.get("drift") or {}).items()):
        if not table:
            continue
        maj = (health.get("majority") or {}).get(fact)
        parts.append(
            f"<h3>Drift of {e(fact)} (fleet majority: {e(str(maj))})</h3><table><thead><tr><th>Value</th>"
            "<th>Hosts</th></tr></thead><tbody>"
        )
        for value, hs in sorted(table.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            parts.append(f"<tr><td>{e(str(value))}</td><td>{e(', '.join(hs[:50]))}</td></tr>")
        parts.append("</tbody></table>")
    parts.append("</section>")
    return "".join(parts)
