"""A campaign's report: ``campaign.md`` and ``campaign.html`` (self-contained: inline CSS and SVG, no
script, no external asset) in the campaign directory.

Both say per node its verdict, the stage it reached, the stage that held it out and why; the html draws
each node's timeline (one bar per stage attempt, on one time axis) and, per soak, each node's rounds
(passed or failed) and the counters that grew. Made from the campaign's state and the soak judgements the
runner wrote (``soak-<stage>.json``).
"""

from __future__ import annotations

import html
import json
import math
import re
from array import array
from collections.abc import Container, Iterator, Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sb_fleet.analysis.superbench.metric_names import parse_metric
from sb_fleet.campaign.acceptance_record import campaign_summary
from sb_fleet.campaign.campaign_state import CampaignState
from sb_fleet.config.campaign_spec import Campaign
from sb_fleet.safe_files import atomic_write_text, safe_name

COLOURS = {
    "passed": "#2e7d32",
    "failed": "#c62828",
    "held_out": "#c62828",
    "quarantined": "#ef6c00",
    "retry": "#f9a825",
    "running": "#1565c0",
}
VERDICT_COLOURS = {
    "accepted": "#2e7d32",
    "rejected": "#c62828",
    "quarantined": "#ef6c00",
    "in_progress": "#1565c0",
}


def _soaks(
    directory: Path, campaign: Campaign, drawn: Container[str] | None = None
) -> dict[str, Mapping[str, Any]]:
    """Each soak's judgement, and the rounds as the page draws them (:func:`node_view`) of the ``drawn``
    nodes (None: every node), the rounds file read a node (a line) at a time: 4,320 rounds of 1,000 nodes
    are never whole in memory."""
    out: dict[str, Mapping[str, Any]] = {}
    for st in campaign.spec.stages:
        if st.kind != "soak":
            continue
        try:
            doc = json.loads((directory / f"soak-{st.name}.json").read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(doc, dict):
            continue
        views: dict[str, dict[str, Any]] = {}
        if doc.get("schema_version") == 3:
            for host, row in _rounds_lines(directory / str(doc.get("rounds_file"))):
                if drawn is None or host in drawn:
                    views[host] = node_view(row)
        elif doc.get("schema_version") == 2:  # the rounds inline (2026-11-29, eaca6e5 to 5ac37a3)
            views = {
                h: node_view(c)
                for h, c in (doc.get("rounds") or {}).items()
                if isinstance(c, Mapping) and (drawn is None or h in drawn)
            }
        out[st.name] = {**doc, "rounds": views}
        out[st.name] = {**out[st.name], "soak_end": _soak_end(out[st.name])}
    return out


def _rounds_lines(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """A soak's rounds file a node (a line) at a time: (host, its columns); nothing where it is unreadable."""
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if isinstance(row, dict) and isinstance(row.get("host"), str):
                    yield row["host"], row
    except OSError:
        return


def _md_cell(text: Any) -> str:
    return str(text if text is not None else "-").replace("|", "\\|").replace("\n", " ")


def campaign_markdown(summary: Mapping[str, Any], soaks: Mapping[str, Mapping[str, Any]]) -> str:
    c = summary["campaign"]
    counts = ", ".join(f"{n} {v}" for v, n in sorted(summary["verdicts"].items()))
    lines = [
        "# Acceptance campaign",
        "",
        f"- campaign: `{c['file']}` (sha256 {c['digest'][:12]}){' — ' + c['description'] if c['description'] else ''}",
        f"- started {summary['started']}, updated {summary['updated']}, "
        + (
            "finished"
            if summary["finished"]
            else "**not finished** (resume with `sb-fleet accept --resume DIR`)"
        ),
        f"- nodes: {counts}",
        "",
        "## Stages",
        "",
        "| stage | kind | done | rounds |",
        "|---|---|---|---|",
    ]
    for st in summary["stages"]:
        rounds = (
            f"{st['rounds_done']} of {st['rounds_planned']} ({st['round']} each)"
            if "rounds_planned" in st
            else ""
        )
        lines.append(f"| {st['name']} | {st['kind']} | {'yes' if st['done'] else 'no'} | {rounds} |")
    lines += [
        "",
        "## Nodes",
        "",
        "| node | verdict | stage reached | failed stage | reason |",
        "|---|---|---|---|---|",
    ]
    for host, n in summary["nodes"].items():
        lines.append(
            f"| {_md_cell(host)} | **{n['verdict']}** | {_md_cell(n['stage_reached'])} | "
            f"{_md_cell(n['failed_stage'])} | {_md_cell(n['reason'])} |"
        )
    lines += ["", "## Timelines", ""]
    for host, n in summary["nodes"].items():
        steps = " → ".join(
            f"{t['stage']}{' (attempt ' + str(t['attempt']) + ')' if t['attempt'] > 1 else ''}: {t['outcome']}"
            for t in n["timeline"]
        )
        lines.append(f"- **{_md_cell(host)}**: {steps or 'no stage yet'}")
    for name, doc in soaks.items():
        lines += ["", f"## Soak `{name}`", ""]
        for host, node in (doc.get("nodes") or {}).items():
            fails = [f for f in node.get("findings") or [] if f.get("fails")]
            word = "passed" if node.get("passed") else "failed"
            lines.append(f"- **{_md_cell(host)}**: {word}, {node.get('rounds')} round(s)")
            for f in fails[:MAX_FINDINGS_SHOWN]:
                lines.append(f"  - {f.get('kind')}: {_md_cell(f.get('message'))}")
            if len(fails) > MAX_FINDINGS_SHOWN:
                lines.append(f"  - and {len(fails) - MAX_FINDINGS_SHOWN} more (`acceptance/<host>.json`)")
    lines += [
        "",
        "Records: `acceptance/<host>.json` per node, `campaign-summary.json`; every stage's run directory "
        "under `runs/`.",
        "",
    ]
    return "\n".join(lines)


def _t(s: str | None) -> float | None:
    if not s:
        return None
    try:
        return datetime.fromisoformat(s).timestamp()
    except ValueError:
        return None


ROUND_COLOURS = {True: "#43a047", False: "#c62828"}
MERGE_BELOW_PX = 4.0
BUCKET_PX = 2.0  # rounds that alternate faster than the pixels: one bar per this many pixels
MAX_DRAWN = (
    50  # nodes drawn on campaign.html (timeline, rounds, plots): the failed first; every node has its page
)
MAX_PLOTS = 12  # per-round plots of a node on campaign.html (all of them on its page)
MAX_FINDINGS_SHOWN = 5  # failing findings of a node in campaign.md and campaign.html's tables
NODE_PAGES = "campaign-nodes"  # a page per node beside campaign.html
TICK_STEPS_S = (60, 120, 300, 600, 900, 1800, 3600, 7200, 3 * 3600, 6 * 3600, 12 * 3600, 86400, 2 * 86400)


def _ticks(span: float, most: int = 8) -> list[float]:
    """Offsets (s) of the time axis's ticks: the smallest whole step of :data:`TICK_STEPS_S` that gives at
    most ``most`` ticks over ``span``."""
    step = next(
        (s for s in TICK_STEPS_S if span / s <= most),
        TICK_STEPS_S[-1] * math.ceil(span / most / TICK_STEPS_S[-1]),
    )
    return [k * step for k in range(1, int(span // step) + 1)]


def _offset(seconds: float) -> str:
    if seconds >= 86400 and seconds % 3600 == 0:
        return f"+{seconds / 3600:g} h"
    return f"+{seconds / 3600:g} h" if seconds >= 3600 else f"+{seconds / 60:g} min"


def round_spans(
    rounds: Sequence[Mapping[str, Any]], x0: float, scale: float
) -> list[tuple[float, float, bool, list[int]]]:
    """A node's soak rounds as (x, width, ok, round indices) in the timeline's pixels, each round its own
    bar; rounds narrower than :data:`MERGE_BELOW_PX` of one outcome less than a pixel apart are drawn as one
    (a 72-hour soak of 1-minute rounds is thousands of rounds on 900 pixels): a failed round and a gap
    (the control node stopped) stay visible."""
    out: list[tuple[float, float, bool, list[int]]] = []
    for r in sorted(rounds, key=lambda r: int(r.get("index") or 0)):
        a, b = _t(r.get("start")), _t(r.get("end"))
        if a is None or b is None:
            continue
        x, w, ok = x0 + a * scale, max((b - a) * scale, 1.0), bool(r.get("ok"))
        if out and out[-1][2] == ok and w < MERGE_BELOW_PX and x - (out[-1][0] + out[-1][1]) < 1.0:
            px, pw, _, idx = out[-1]
            out[-1] = (px, max(pw, x + w - px), ok, [*idx, int(r.get("index") or 0)])
        else:
            out.append((x, w, ok, [int(r.get("index") or 0)]))
    return _bucketed(out)


def _bucketed(
    spans: list[tuple[float, float, bool, list[int]]], px: float = BUCKET_PX
) -> list[tuple[float, float, bool, list[int]]]:
    """``spans`` where they are few; past one per :data:`BUCKET_PX` pixels of their extent (outcomes that
    alternate faster than the pixels: a bar a round), one bar per ``px`` pixels, failed where any round in
    it failed, consecutive ones of one outcome joined: at most a bar per ``px`` pixels whatever the rounds."""
    if not spans:
        return spans
    x0, x1 = spans[0][0], max(x + w for x, w, _, _ in spans)
    if len(spans) <= max((x1 - x0) / px, 1):
        return spans
    buckets: dict[int, tuple[bool, list[int]]] = {}
    for x, _w, ok, idx in spans:
        k = int((x - x0) // px)
        was = buckets.get(k)
        buckets[k] = (ok, list(idx)) if was is None else (was[0] and ok, was[1] + idx)
    out: list[tuple[float, float, bool, list[int]]] = []
    for k in sorted(buckets):
        ok, idx = buckets[k]
        x = x0 + k * px
        if out and out[-1][2] == ok and abs(out[-1][0] + out[-1][1] - x) < 1e-6:
            out[-1] = (out[-1][0], out[-1][1] + px, ok, out[-1][3] + idx)
        else:
            out.append((x, px, ok, idx))
    return out


def _soak_end(doc: Mapping[str, Any]) -> float:
    """The last round's end of a soak's judgement (0 without one)."""
    if isinstance(doc.get("soak_end"), float):
        return float(doc["soak_end"])
    ends = [
        _t(str(v[1])) for v in (doc.get("round_times") or {}).values() if isinstance(v, list) and len(v) == 2
    ]
    return max((e for e in ends if e is not None), default=0.0)


def _timeline_svg(summary: Mapping[str, Any], soaks: Mapping[str, Mapping[str, Any]], now: float) -> str:
    """One row per node (a ``g`` with its ``data-host``), one bar per stage attempt, all on one time axis;
    a soak's bar is its rounds, each coloured by the node's outcome in it, over a strip of the stage's
    outcome (a node whose rounds all passed can fail the soak's judgement: drift, a counter)."""
    spans = [(_t(t["start"]), _t(t["end"]) or now) for n in summary["nodes"].values() for t in n["timeline"]]
    starts = [a for a, _ in spans if a is not None]
    if not starts:
        return "<p>No stage has started.</p>"
    ends = [b for _, b in spans if b is not None] + [_soak_end(doc) for doc in soaks.values()]
    t0, t1 = min(starts), max(max(ends), min(starts) + 1)  # every round on the canvas: bounded bars
    label_w, width, row_h = 200, 1100, 22
    nodes = list(summary["nodes"].items())
    height = row_h * len(nodes) + 34
    scale = (width - label_w - 10) / (t1 - t0)
    axis_y = height - 22
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        f'id="timeline" font-family="sans-serif">'
    ]
    for off in _ticks(t1 - t0):
        x = label_w + off * scale
        out.append(
            f'<line x1="{x:.1f}" y1="2" x2="{x:.1f}" y2="{axis_y + 4}" stroke="#ddd"/>'
            f'<text x="{x:.1f}" y="{axis_y + 16}" font-size="10" '
            f'text-anchor="{"end" if x > width - 30 else "middle"}">{_offset(off)}</text>'
        )
    for i, (host, n) in enumerate(nodes):
        y = 5 + i * row_h
        colour = VERDICT_COLOURS.get(n["verdict"], "#555")
        out.append(
            f'<g class="node-timeline" data-host="{html.escape(host)}" data-verdict="{html.escape(n["verdict"])}">'
            f'<text x="0" y="{y + 14}" font-size="12" fill="{colour}">{html.escape(host)} ({n["verdict"]})</text>'
        )
        for t in n["timeline"]:
            a = _t(t["start"])
            if a is None:
                continue
            b = _t(t["end"]) or now
            x = label_w + (a - t0) * scale
            w = max((b - a) * scale, 2)
            fill = COLOURS.get(t["outcome"], "#777")
            tip = f"{t['stage']} attempt {t['attempt']}: {t['outcome']} ({t['start']} - {t['end'] or 'running'})"
            rounds = round_list(soaks[t["stage"]], host) if t["stage"] in soaks else []
            if rounds:
                out.append(
                    f'<rect class="attempt" x="{x:.1f}" y="{y + row_h - 8}" width="{w:.1f}" height="4" '
                    f'fill="{fill}"><title>{html.escape(tip)}</title></rect>'
                )
                for rx, rw, ok, idx in round_spans(rounds, label_w - t0 * scale, scale):
                    which = f"round {idx[0]}" if len(idx) == 1 else f"rounds {idx[0]}-{idx[-1]}"
                    out.append(
                        f'<rect class="round" x="{rx:.1f}" y="{y + 2}" width="{rw - 1.5 if rw > 4 else rw:.1f}" '
                        f'height="{row_h - 11}" fill="{ROUND_COLOURS[ok]}">'
                        f"<title>{html.escape(t['stage'])} {which}: {'passed' if ok else 'failed'}</title></rect>"
                    )
                continue
            out.append(
                f'<rect class="attempt" x="{x:.1f}" y="{y + 2}" width="{w:.1f}" height="{row_h - 6}" fill="{fill}" '
                f'stroke="#fff"><title>{html.escape(tip)}</title></rect>'
            )
            if w > 40:
                out.append(
                    f'<text x="{x + 3:.1f}" y="{y + 14}" font-size="10" fill="#fff">{html.escape(t["stage"])}</text>'
                )
        out.append("</g>")
    out.append(
        f'<text x="{label_w}" y="{axis_y + 16}" font-size="10" text-anchor="end">'
        f"{html.escape(datetime.fromtimestamp(t0, timezone.utc).isoformat(timespec='seconds'))} </text>"
    )
    out.append("</svg>")
    return "".join(out)


SPARK_WIDTH = 220


def node_view(columns: Mapping[str, Any]) -> dict[str, Any]:
    """A node's soak columns (a line of ``soak-<stage>-rounds.jsonl``) as the page draws them: its rounds'
    indices and outcomes as compact arrays, each figure's and counter's points thinned to its plot's
    pixels (:func:`thinned`)."""
    pairs = [
        (i, ok)
        for i, ok in zip(columns.get("index") or [], columns.get("ok") or [], strict=False)
        if isinstance(i, int) and not isinstance(i, bool)
    ]
    return {
        "index": array("i", [i for i, _ in pairs]),
        "ok": bytes(1 if ok else 0 for _, ok in pairs),
        "series": {k: thinned(pts, SPARK_WIDTH) for k, pts in _series(columns).items()},
    }


def _view(node: Mapping[str, Any]) -> Mapping[str, Any]:
    return node if "series" in node else node_view(node)


def round_list(doc: Mapping[str, Any], host: str) -> list[dict[str, Any]]:
    """A node's rounds of a soak (its columns or its :func:`node_view`, the rounds' times) as
    ``{index, start, end, ok}`` rows."""
    node = _view((doc.get("rounds") or {}).get(host) or {})
    times = doc.get("round_times") or {}
    out = []
    for i, ok in zip(node.get("index") or [], node.get("ok") or [], strict=False):
        start, end = (list(times.get(str(i)) or []) + [None, None])[:2]
        out.append({"index": i, "start": start, "end": end, "ok": bool(ok)})
    return out


def _series(node: Mapping[str, Any]) -> dict[str, list[tuple[float, float]]]:
    """Of a node's soak columns, per figure and per counter its (round, value) points: a counter's start
    reading at round - 0.5 and its end reading at the round, so growth inside a round shows; counters that
    stay 0 the whole soak are left out (a healthy node's dozens of flat lines say nothing), and so are return
    codes (a failed round is drawn as one)."""
    index = list(node.get("index") or [])
    out: dict[str, list[tuple[float, float]]] = {}
    for c, values in (node.get("metrics") or {}).items():
        if parse_metric(c).is_return_code:
            continue
        pts = [
            (float(i), float(v))
            for i, v in zip(index, values or [], strict=False)
            if isinstance(v, (int, float)) and math.isfinite(v)
        ]
        if pts:
            out[c] = pts
    for c, readings in (node.get("counters") or {}).items():
        pts = [
            (float(r[0]) - (0.5 if r[1] == "start" else 0.0), float(r[2]))
            for r in readings or []
            if isinstance(r, (list, tuple))
            and len(r) == 3
            and isinstance(r[0], (int, float))
            and isinstance(r[2], (int, float))
            and math.isfinite(r[2])
        ]
        if any(v for _, v in pts):
            out[c] = pts
    return out


def thinned(points: Sequence[tuple[float, float]], buckets: int) -> list[tuple[float, float]]:
    """At most two points per bucket of x (its lowest and highest value, in order): a plot of thousands of
    rounds as wide as its pixels, every spike kept."""
    pts = sorted(points)
    if len(pts) <= 2 * buckets:
        return pts
    x0, x1 = pts[0][0], pts[-1][0]
    width = (x1 - x0) / buckets or 1.0
    groups: dict[int, list[tuple[float, float]]] = {}
    for p in pts:
        groups.setdefault(min(int((p[0] - x0) / width), buckets - 1), []).append(p)
    out: list[tuple[float, float]] = []
    for g in groups.values():
        lo, hi = min(g, key=lambda p: p[1]), max(g, key=lambda p: p[1])
        out += sorted({lo, hi})
    return out


def _spark(points: Sequence[tuple[float, float]], n_rounds: int, width: int = 220, height: int = 34) -> str:
    """A small line of values over the soak's rounds, its first and last values beside it."""
    if not points:
        return ""
    lo, hi = min(v for _, v in points), max(v for _, v in points)
    span = (hi - lo) or 1.0
    xs = max(n_rounds, 1)

    def xy(p: tuple[float, float]) -> str:
        return (
            f"{4 + (p[0] - 0.5) / xs * (width - 8):.1f},{height - 4 - (p[1] - lo) / span * (height - 8):.1f}"
        )

    pts = thinned(points, width)
    columns: dict[int, list[tuple[float, float]]] = {}
    for p in pts:
        columns.setdefault(int((p[0] - 0.5) / xs * (width - 8)), []).append(p)
    if (
        len(pts) > len(columns) * 1.5
    ):  # denser than the pixels (thousands of noisy rounds): a band and its middle
        cols = [(min(c, key=lambda p: p[1]), max(c, key=lambda p: p[1])) for _, c in sorted(columns.items())]
        band = " ".join(xy(hi_p) for _, hi_p in cols) + " " + " ".join(xy(lo_p) for lo_p, _ in reversed(cols))
        mid = " ".join(xy((lo_p[0], (lo_p[1] + hi_p[1]) / 2)) for lo_p, hi_p in cols)
        body = (
            f'<polygon points="{band}" fill="#90caf9" stroke="none"/>'
            f'<polyline points="{mid}" fill="none" stroke="#1565c0" stroke-width="1"/>'
        )
    else:
        body = f'<polyline points="{" ".join(xy(p) for p in pts)}" fill="none" stroke="#1565c0" stroke-width="1.5"/>'
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">{body}</svg>'
        f" <small>{points[0][1]:.4g} → {points[-1][1]:.4g}</small>"
    )


def _trend_text(t: Mapping[str, Any] | None) -> str:
    """A judged figure's drift beside its plot: the fitted change over the soak against its threshold."""
    if (
        not t
        or not isinstance(t.get("change"), (int, float))
        or not isinstance(t.get("threshold"), (int, float))
    ):
        return ""
    words = f"drift {t['change']:+.1%}, limit {t['threshold']:+.1%} (noise {float(t.get('noise') or 0):.1%})"
    return (
        f'<b style="color:{COLOURS["failed"]}">{words}</b>' if t.get("fails") else f"<small>{words}</small>"
    )


def _round_strip(index: Sequence[int], ok: Sequence[int], n: int, width: int = SPARK_WIDTH) -> str:
    """A node's rounds 1..n in a strip, each green or red; rounds narrower than 4 pixels of one outcome
    drawn as one (a failed round always shows), and at most a bar per :data:`BUCKET_PX` pixels."""
    if n <= 0:
        return ""
    w = width / n
    spans: list[tuple[float, float, bool, list[int]]] = []
    for i, good in sorted(zip(index, ok, strict=False)):
        x = (i - 1) * w
        if spans and spans[-1][2] == bool(good) and w < MERGE_BELOW_PX and x - sum(spans[-1][:2]) < 1.0:
            spans[-1] = (spans[-1][0], x + w - spans[-1][0], bool(good), [spans[-1][3][0], i])
        else:
            spans.append((x, w, bool(good), [i]))
    rects = "".join(
        f'<rect x="{a:.1f}" y="0" width="{max(bw - (1 if w >= MERGE_BELOW_PX else 0), 1):.1f}" height="12" '
        f'fill="{ROUND_COLOURS[good]}"><title>round {idx[0]}{"" if idx[0] == idx[-1] else f"-{idx[-1]}"}: '
        f"{'passed' if good else 'failed' if len(idx) <= 2 else 'a failed round'}</title></rect>"
        for a, bw, good, idx in _bucketed(spans)
    )
    return f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="12">{rects}</svg>'


def _plot_order(node: Mapping[str, Any], keys: Sequence[str]) -> list[str]:
    """A node's plots, the subjects of its failing findings first, then its judged figures, then the rest."""
    failing = {str(f.get("subject")) for f in node.get("findings") or [] if f.get("fails")}
    judged = {str(t.get("metric")) for t in node.get("trends") or [] if isinstance(t, Mapping)}
    return sorted(keys, key=lambda k: (k not in failing, k not in judged, k))


def node_page(host: str) -> str:
    """A node's page, relative to the campaign directory (its name safe whatever the host's)."""
    return f"{NODE_PAGES}/{safe_name(host)}.html"


def _host_cell(host: str, links: bool) -> str:
    if not links:
        return html.escape(host)
    return f'<a href="{html.escape(quote(node_page(host)))}">{html.escape(host)}</a>'


def _soak_html(
    name: str, doc: Mapping[str, Any], links: bool = False, max_plots: int | None = None, prefix: str = ""
) -> str:
    """A soak's table (every node: its judgement, its rounds drawn where its view is in ``doc``, its
    failing findings) and the per-round plots of the nodes drawn (at most ``max_plots`` each)."""
    views = {h: _view(v) for h, v in (doc.get("rounds") or {}).items()}
    nodes = doc.get("nodes") or {}
    rows = []
    for host, node in sorted(nodes.items(), key=lambda kv: bool(kv[1].get("passed"))):  # failed first
        n = int(node.get("rounds") or 0)
        view = views.get(host)
        if view is not None:
            strip = _round_strip(view["index"], view["ok"], max(n, max(view["index"], default=0)))
        else:  # not drawn here: the judgement's failed rounds, counted
            failed = len(node.get("failed_rounds") or [])
            strip = f"{failed} of {n} round(s) failed" if failed else f"{n} round(s), none failed"
        fails = [html.escape(str(f.get("message"))) for f in node.get("findings") or [] if f.get("fails")]
        more = f"; and {len(fails) - MAX_FINDINGS_SHOWN} more" if len(fails) > MAX_FINDINGS_SHOWN else ""
        rows.append(
            f"<tr><td>{_host_cell(host, links)}</td><td>{'passed' if node.get('passed') else '<b>failed</b>'}</td>"
            f"<td>{strip}</td><td>{'; '.join(fails[:MAX_FINDINGS_SHOWN])}{more}</td></tr>"
        )
    plots = []
    for host, view in views.items():
        n = max(view["index"], default=0)
        node = nodes.get(host) or {}
        trends = {str(t.get("metric")): t for t in node.get("trends") or [] if isinstance(t, Mapping)}
        keys = _plot_order(node, list(view["series"]))
        shown = keys if max_plots is None else keys[:max_plots]
        cells = "".join(
            f"<tr><td>{html.escape(k)}</td><td>{_spark(view['series'][k], n)}</td>"
            f"<td>{_trend_text(trends.get(k))}</td></tr>"
            for k in sorted(shown)
        )
        if len(shown) < len(keys):
            cells += f"<tr><td colspan=3>and {len(keys) - len(shown)} more on {_host_cell(host, links)}'s page</td></tr>"
        if cells:
            plots.append(f"<h3>{html.escape(host)}: per round</h3><table>{cells}</table>")
    return (
        f"<h2>{prefix}Soak stage {html.escape(name)}</h2><table><tr><th>node</th><th>soak</th><th>rounds</th>"
        f"<th>findings</th></tr>{''.join(rows)}</table>" + "".join(plots)
    )


HEAD = (
    '<!DOCTYPE html><html><head><meta charset="utf-8"><title>{title}</title>'
    "<style>body{{font-family:sans-serif;margin:1em}}table{{border-collapse:collapse}}"
    "td,th{{border:1px solid #ccc;padding:2px 6px;text-align:left}}</style></head><body>"
)


def _legend() -> str:
    return " ".join(
        f'<span style="background:{col};color:#fff;padding:0 4px">{word}</span>'
        for word, col in [
            *COLOURS.items(),
            ("round passed", ROUND_COLOURS[True]),
            ("round failed", ROUND_COLOURS[False]),
        ]
    )


def drawn_nodes(summary: Mapping[str, Any], most: int = MAX_DRAWN) -> list[str]:
    """The nodes campaign.html draws: those not accepted first (the campaign's order), then the rest, at
    most ``most``."""
    nodes = list(summary["nodes"].items())
    bad = [h for h, n in nodes if n["verdict"] != "accepted"]
    good = [h for h, n in nodes if n["verdict"] == "accepted"]
    return (bad + good)[:most]


def campaign_html(
    summary: Mapping[str, Any],
    soaks: Mapping[str, Mapping[str, Any]],
    now: float,
    drawn: Sequence[str] | None = None,
    links: bool = False,
) -> str:
    """The campaign's page: every node's row (verdict, stage, reason; with ``links``, to its page); the
    timeline, rounds and plots of the ``drawn`` nodes (None: every node)."""
    c = summary["campaign"]
    everyone = summary["nodes"]
    shown = list(everyone) if drawn is None else [h for h in drawn if h in everyone]
    rows = "".join(
        f'<tr><td>{_host_cell(h, links)}</td><td style="color:{VERDICT_COLOURS.get(n["verdict"], "#555")}">'
        f"<b>{n['verdict']}</b></td><td>{html.escape(str(n['stage_reached'] or '-'))}</td>"
        f"<td>{html.escape(str(n['failed_stage'] or '-'))}</td><td>{html.escape(n['reason'] or '')}</td></tr>"
        for h, n in sorted(everyone.items(), key=lambda kv: kv[1]["verdict"] == "accepted")  # failed first
    )
    counts = ", ".join(f"{k} {v}" for v, k in sorted(summary.get("verdicts", {}).items()))
    part = {**summary, "nodes": {h: everyone[h] for h in shown}}
    left = len(everyone) - len(shown)
    note = (
        f"<p>{len(shown)} of {len(everyone)} nodes drawn (those not accepted first); every node's timeline, "
        f"rounds and plots are on its page (<code>{NODE_PAGES}/</code>, linked from the table below).</p>"
        if left
        else ""
    )
    return (
        HEAD.format(title="Acceptance campaign")
        + f"<h1>Acceptance campaign</h1><p><code>{html.escape(c['file'])}</code> "
        f"(sha256 {c['digest'][:12]}) {html.escape(c['description'])}</p>"
        f"<p>started {summary['started']}, updated {summary['updated']}, "
        f"{'finished' if summary['finished'] else '<b>not finished</b>'}"
        f"{'; nodes: ' + counts if counts else ''}</p>"
        f"<h2>Timeline per node</h2><p>{_legend()}</p>{note}{_timeline_svg(part, soaks, now)}"
        "<h2>Nodes</h2><table><tr><th>node</th><th>verdict</th><th>stage reached</th><th>failed stage</th>"
        f"<th>reason</th></tr>{rows}</table>"
        + "".join(
            _soak_html(name, doc, links, None if drawn is None else MAX_PLOTS) for name, doc in soaks.items()
        )
        + "</body></html>\n"
    )


def node_html(
    summary: Mapping[str, Any], host: str, soaks: Mapping[str, Mapping[str, Any]], now: float
) -> str:
    """One node's page: its verdict and reason, its timeline (every attempt, as a table too), each soak's
    judgement of it with its rounds and every per-round plot. ``soaks``: each soak's judgement with this
    node's view only."""
    n = summary["nodes"][host]
    c = summary["campaign"]
    steps = "".join(
        f"<tr><td>{html.escape(str(t['stage']))}</td><td>{t['attempt']}</td><td>{html.escape(str(t['outcome']))}"
        f"</td><td>{html.escape(str(t['start']))}</td><td>{html.escape(str(t['end'] or 'running'))}</td></tr>"
        for t in n["timeline"]
    )
    part = {**summary, "nodes": {host: n}}
    mine = {
        name: {**doc, "nodes": {h: v for h, v in (doc.get("nodes") or {}).items() if h == host}}
        for name, doc in soaks.items()
    }
    return (
        HEAD.format(title=f"{html.escape(host)}: acceptance campaign")
        + f'<p><a href="../campaign.html">campaign</a> <code>{html.escape(c["file"])}</code> '
        f"(sha256 {c['digest'][:12]})</p><h1>{html.escape(host)}: "
        f'<span style="color:{VERDICT_COLOURS.get(n["verdict"], "#555")}">{n["verdict"]}</span></h1>'
        f"<p>stage reached {html.escape(str(n['stage_reached'] or '-'))}, failed stage "
        f"{html.escape(str(n['failed_stage'] or '-'))}{': ' + html.escape(n['reason']) if n['reason'] else ''}</p>"
        f"<h2>Timeline</h2><p>{_legend()}</p>{_timeline_svg(part, mine, now)}"
        "<table><tr><th>stage</th><th>attempt</th><th>outcome</th><th>start</th><th>end</th></tr>"
        f"{steps}</table>"
        + "".join(_soak_html(name, doc) for name, doc in mine.items())
        + f"<p>Record: <code>acceptance/{html.escape(safe_name(host))}.json</code></p></body></html>\n"
    )


_HOST_PREFIX = re.compile(rb'^\{"host": ("(?:[^"\\]|\\.)*")')


def _line_offsets(path: Path) -> dict[str, int]:
    """Where each node's line starts in a soak's rounds file (read once; the lines are not parsed whole)."""
    out: dict[str, int] = {}
    try:
        with open(path, "rb") as f:
            pos = 0
            for line in f:
                m = _HOST_PREFIX.match(line)
                try:
                    host = json.loads(m.group(1)) if m else json.loads(line).get("host")
                except (ValueError, AttributeError):
                    host = None
                if isinstance(host, str):
                    out.setdefault(host, pos)
                pos += len(line)
    except OSError:
        pass
    return out


def _view_at(path: Path, offset: int) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            row = json.loads(f.readline())
    except (OSError, ValueError):
        return None
    return node_view(row) if isinstance(row, dict) else None


def write_node_pages(
    directory: Path, summary: Mapping[str, Any], soaks: Mapping[str, Mapping[str, Any]], now: float
) -> Path:
    """``campaign-nodes/<host>.html`` for every node, one at a time (a node's rounds read from the soaks'
    rounds files where its page is written: never every node's in memory)."""
    out = Path(directory) / NODE_PAGES
    out.mkdir(mode=0o700, exist_ok=True)
    files = {
        name: Path(directory) / str(doc.get("rounds_file"))
        for name, doc in soaks.items()
        if doc.get("schema_version") == 3
    }
    offsets = {name: _line_offsets(p) for name, p in files.items()}
    for host in summary["nodes"]:
        mine: dict[str, Mapping[str, Any]] = {}
        for name, doc in soaks.items():
            view = (doc.get("rounds") or {}).get(host)
            if view is None and name in files and host in offsets[name]:
                view = _view_at(files[name], offsets[name][host])
            mine[name] = {**doc, "rounds": {host: view} if view is not None else {}}
        atomic_write_text(Path(directory) / node_page(host), node_html(summary, host, mine, now))
    return out


def write_campaign_report(
    directory: Path, state: CampaignState, campaign: Campaign, written: str
) -> list[Path]:
    """``campaign.md``, ``campaign.html`` (every node's row; the timeline, rounds and plots of at most
    :data:`MAX_DRAWN` nodes, those not accepted first) and a page per node in ``campaign-nodes/``, each
    written atomically: the page stays bounded at 1,000 nodes of 4,320 rounds whatever fails."""
    directory = Path(directory)
    summary = campaign_summary(state, campaign, written)
    drawn = drawn_nodes(summary)
    soaks = _soaks(directory, campaign, set(drawn))
    now = _t(written) or 0.0
    md, page = directory / "campaign.md", directory / "campaign.html"
    atomic_write_text(md, campaign_markdown(summary, soaks))
    atomic_write_text(page, campaign_html(summary, soaks, now, drawn, links=True))
    return [md, page, write_node_pages(directory, summary, soaks, now)]
