"""The pair matrix as a heatmap: a self-contained HTML fragment (inline SVG, no script) for report.html.

Row and column are the two hosts of a pair; a cell's colour is the pair's figure against the fleet's
pair median: green at the median, yellow to red as it falls below the slow threshold, black for a
failed or timed-out pair, grey for a pair that was not tested. A culprit host's row and column are
outlined in red; hovering a cell shows the pair, its value, its ratio and its round. Large fleets
show the hosts involved in a verdict first, then the rest up to ``max_hosts``.
"""

from __future__ import annotations

import contextlib
import json
from html import escape
from pathlib import Path

from sb_fleet import bounded_json
from sb_fleet.analysis.crossnode.fabric import FOLLOWUP_FILE
from sb_fleet.analysis.crossnode.localise import Localisation, PairMatrix

CELL = 14
LABEL = 110


def _colour(ratio: float | None, bar: float) -> str:
    if ratio is None:
        return "#e5e7eb"  # untested
    if ratio <= 0:
        return "#111827"  # failed
    if ratio >= 0.97:
        return "#16a34a"
    if ratio >= bar:
        return "#a3e635"  # below the median, within the fleet's normal spread
    # below the bar: yellow (just under) to red (a fraction of the median)
    t = max(0.0, min(1.0, (bar - ratio) / max(bar, 1e-9)))
    g = int(200 * (1 - t))
    return f"#{220:02x}{g:02x}{40:02x}"


def order_hosts(matrix: PairMatrix, loc: Localisation, max_hosts: int) -> list[str]:
    named = [h for c in loc.culprits for h in c.hosts]
    named += [h for e in loc.unexplained for h in (e.a, e.b)]
    first = list(dict.fromkeys(named))
    rest = [h for h in matrix.hosts if h not in set(first)]
    return (first + rest)[:max_hosts] if len(matrix.hosts) > max_hosts else list(matrix.hosts)


def render_pair_heatmap(matrix: PairMatrix, loc: Localisation, max_hosts: int = 96) -> str:
    """An HTML ``<section>`` holding the heatmap, its legend and the verdicts."""
    hosts = order_hosts(matrix, loc, max_hosts)
    index = {h: i for i, h in enumerate(hosts)}
    median = loc.median or 0.0
    bar = (loc.threshold / median) if (loc.threshold and median and matrix.higher_is_better) else None
    if bar is None and loc.threshold and median:
        bar = median / loc.threshold
    bar = bar or 0.8
    n = len(hosts)
    size = LABEL + n * CELL + 4
    cells: list[str] = []
    for p in matrix.pairs:
        if p.a not in index or p.b not in index:
            continue
        if p.status != "ok" or p.value is None:
            ratio: float | None = 0.0
            text = f"{p.a} - {p.b}: {p.status}" + (f" ({p.reason})" if p.reason else "")
        else:
            ratio = (
                (p.value / median if matrix.higher_is_better else median / p.value)
                if median and p.value
                else 0.0
            )
            text = f"{p.a} - {p.b}: {p.value:.4g} {matrix.unit} ({ratio:.0%} of median)"
        if p.round is not None:
            text += f", round {p.round}" + (f" group {p.index}" if p.index is not None else "")
        fill = _colour(ratio, bar)
        for r, c in ((index[p.a], index[p.b]), (index[p.b], index[p.a])):
            cells.append(
                f'<rect x="{LABEL + c * CELL}" y="{LABEL + r * CELL}" width="{CELL - 1}" height="{CELL - 1}" '
                f'fill="{fill}"><title>{escape(text)}</title></rect>'
            )
    labels = []
    for h, i in index.items():
        y = LABEL + i * CELL + CELL - 3
        x = LABEL + i * CELL + CELL - 3
        labels.append(f'<text x="{LABEL - 4}" y="{y}" text-anchor="end">{escape(h)}</text>')
        labels.append(f'<text transform="translate({x},{LABEL - 4}) rotate(-60)">{escape(h)}</text>')
    marks = []
    for h in {h for c in loc.culprits if c.kind in ("node", "nic") for h in c.hosts}:
        if h in index:
            i = index[h]
            marks.append(
                f'<rect x="{LABEL}" y="{LABEL + i * CELL}" width="{n * CELL}" height="{CELL}" '
                f'fill="none" stroke="#dc2626" stroke-width="1.5"/>'
                f'<rect x="{LABEL + i * CELL}" y="{LABEL}" width="{CELL}" height="{n * CELL}" '
                f'fill="none" stroke="#dc2626" stroke-width="1.5"/>'
            )
    svg = (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="pairmap" width="{size}" height="{size}" '
        f'viewBox="0 0 {size} {size}" font-family="sans-serif" font-size="10" role="img" '
        f'aria-label="pair matrix of {escape(matrix.metric)}">' + "".join(labels + cells + marks) + "</svg>"
    )
    legend = (
        '<p class="pairmap-legend">'
        + " ".join(
            f'<span style="display:inline-block;width:10px;height:10px;background:{c}"></span> {escape(t)}'
            for c, t in (
                ("#16a34a", "at the median"),
                ("#a3e635", "within the fleet's spread"),
                (_colour(bar * 0.9, bar), "slow"),
                (_colour(0.05, bar), "very slow"),
                ("#111827", "failed / timed out"),
                ("#e5e7eb", "not tested"),
            )
        )
        + "</p>"
    )
    med = f"{loc.median:.4g} {escape(matrix.unit)}" if loc.median is not None else "n/a"
    head = (
        f"<h2>Pair matrix: {escape(matrix.metric)}</h2>"
        f"<p>{loc.pairs} pairs tested, {loc.bad_pairs} slow or failed; fleet pair median {med}"
        + (f"; showing {n} of {len(matrix.hosts)} hosts (culprits first)" if n < len(matrix.hosts) else "")
        + "</p>"
    )
    rows = "".join(
        f"<tr><td>{escape(c.kind)}</td><td>{escape(c.target)}</td><td>{escape(c.confidence)}</td>"
        f"<td>{escape(c.summary)}</td><td>{escape('; '.join(e.describe(matrix.unit) for e in c.evidence[:4]))}"
        f"{' …' if len(c.evidence) > 4 else ''}</td></tr>"
        for c in loc.culprits
    )
    table = (
        "<table class='pairmap-culprits'><tr><th>kind</th><th>culprit</th><th>confidence</th>"
        f"<th>why</th><th>evidence</th></tr>{rows}</table>"
        if rows
        else "<p>No node, NIC, path or link stands out.</p>"
    )
    return f'<section class="pairmap" id="pairmap">{head}{svg}{legend}{table}</section>'


def pair_sections(source: str | Path) -> str:
    """The heatmaps of every ``pairs/<entry>.json`` of a run directory (empty: not a pattern run). A file
    that does not read is named in the page, not fatal to the report."""
    root = Path(source)
    if not root.is_dir():
        return ""
    parts = []
    followup: dict = {}
    with contextlib.suppress(OSError, ValueError, AttributeError):
        followup = dict(json.loads((root / FOLLOWUP_FILE).read_text()).get("entries") or {})
    for f in sorted((root / "pairs").glob("*.json")):
        try:
            doc = bounded_json.read(f)
            matrix = PairMatrix.from_json(doc["matrix"])
            after = (followup.get(str(doc.get("entry"))) or {}).get("second_pass") or {}
            loc = Localisation.from_json(after.get("localisation") or doc["localisation"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            parts.append(
                f"<section class='pairmap'><p>{escape(f.name)}: unreadable ({escape(str(exc))})</p></section>"
            )
            continue
        section = render_pair_heatmap(matrix, loc)
        if after.get("localisation"):
            n = sum(len(r) for r in after.get("rounds") or [])
            section = section.replace(
                "</section>",
                f"<p>Second pass ({escape(str(after.get('run_dir', '')))}): {n} pair(s), each suspect with "
                "known-good hosts; the culprits above say whether it reproduced.</p></section>",
            )
        elif after.get("error"):
            section = section.replace(
                "</section>", f"<p>Second pass failed: {escape(str(after['error']))}</p></section>"
            )
        elif doc.get("second_pass"):
            n = sum(len(r) for r in doc["second_pass"])
            section = section.replace(
                "</section>",
                f"<p>Second pass to confirm: {n} pair(s) in {len(doc['second_pass'])} round(s), each suspect with "
                "known-good hosts (pairs/" + escape(f.name) + ": second_pass).</p></section>",
            )
        parts.append(section)
    for entry, done in sorted(followup.items()):
        b = (done or {}).get("bisection")
        if b:
            parts.append(render_bisection(str(entry), b))
    return "\n".join(parts)


def render_bisection(entry: str, b: dict) -> str:
    """A failed all-nodes run and its bisection: each round's groups, passed or not, and the verdict."""
    rows = "".join(
        f"<tr><td>{i}</td><td>{escape(', '.join(g.get('hosts', [])))}</td>"
        f"<td>{'passed' if g.get('passed') else escape(str(g.get('status')))}</td>"
        f"<td>{escape(str(g.get('reason', '')))}</td></tr>"
        for i, rnd in enumerate(b.get("rounds") or [], 1)
        for g in rnd.get("groups") or []
    )
    first = b.get("first") or {}
    named = ", ".join(b.get("culprits") or []) or "no single host"
    unresolved = "; ".join(", ".join(g) for g in b.get("unresolved") or [])
    return (
        f'<section class="pairmap bisection"><h2>Bisection: {escape(entry)}</h2>'
        f"<p>The group of all {len(b.get('hosts') or [])} nodes {escape(str(first.get('status', 'failed')))}"
        f" ({escape(str(first.get('reason', '')))}). {b.get('rounds_run', 0)} round(s) of at most "
        f"{b.get('max_rounds', '?')}: <b>{escape(named)}</b>"
        + (f"; unresolved: {escape(unresolved)}" if unresolved else "")
        + (f"; stopped: {escape(str(b['error']))}" if b.get("error") else "")
        + "</p><table><tr><th>round</th><th>group</th><th>result</th><th>why</th></tr>"
        + rows
        + "</table></section>"
    )
