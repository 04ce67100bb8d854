"""The history section of report.html: trend plots (inline SVG, no script, no network) of the flagged
hosts' metrics and of the fleet medians, and the tables of regressions and repeat offenders."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

from sb_fleet.history.view import HistoryView

W, H, PAD = 360, 120, 28
MIN_SPAN = 0.04  # the y axis spans at least 4% of the values' level


def _e(s: object) -> str:
    return html.escape(str(s), quote=True)


def sparkline(title: str, points: Sequence[tuple[str, float]], reference: float | None = None) -> str:
    """One trend as an SVG: the values oldest to newest, tonight's point in red, the reference dashed."""
    vals = [v for _, v in points if v is not None and math.isfinite(v)]
    if not vals:
        return ""
    lo, hi = (
        min(vals + ([reference] if reference is not None else [])),
        max(vals + ([reference] if reference is not None else [])),
    )
    # Never zoom in below MIN_SPAN of the level: night-to-night noise of 0.2% must look like noise.
    mid, span = (lo + hi) / 2, max(hi - lo, abs(lo + hi) / 2 * MIN_SPAN)
    if span == 0:
        span = 1.0
    lo, hi = min(lo, mid - span / 2), max(hi, mid + span / 2)
    n = len(points)

    def x(i: int) -> float:
        return PAD + (W - 2 * PAD) * (i / max(n - 1, 1))

    def y(v: float) -> float:
        return H - PAD + (v - lo) / (hi - lo) * (2 * PAD - H)

    pts = [(x(i), y(v), k, v) for i, (k, v) in enumerate(points) if v is not None and math.isfinite(v)]
    path = " ".join(f"{'M' if j == 0 else 'L'}{px:.1f},{py:.1f}" for j, (px, py, _, _) in enumerate(pts))
    dots = "".join(
        f'<circle cx="{px:.1f}" cy="{py:.1f}" r="{3.5 if j == len(pts) - 1 else 2}" '
        f'fill="{"#c62828" if j == len(pts) - 1 else "#1565c0"}"><title>{_e(k)}: {v:.6g}</title></circle>'
        for j, (px, py, k, v) in enumerate(pts)
    )
    ref = ""
    if reference is not None and math.isfinite(reference):
        ry = y(reference)
        ref = (
            f'<line x1="{PAD}" x2="{W - PAD}" y1="{ry:.1f}" y2="{ry:.1f}" stroke="#555" stroke-dasharray="4 3">'
            f"<title>own median {reference:.6g}</title></line>"
        )
    return (
        f'<figure class="trend"><svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
        f'viewBox="0 0 {W} {H}" role="img" aria-label="{_e(title)}">'
        f'<rect x="0" y="0" width="{W}" height="{H}" fill="#fafafa" stroke="#ddd"/>'
        f'<text x="{PAD}" y="14" font-size="10" fill="#333">{hi:.6g}</text>'
        f'<text x="{PAD}" y="{H - 6}" font-size="10" fill="#333">{lo:.6g}</text>'
        f'{ref}<path d="{path}" fill="none" stroke="#1565c0" stroke-width="1.5"/>{dots}</svg>'
        f"<figcaption>{_e(title)}</figcaption></figure>"
    )


def html_section(view: HistoryView) -> str:
    """The ``<section id="history">`` of report.html."""
    ref = {(g.host, g.metric): g.reference for g in view.regressions}
    parts = [
        '<section id="history"><style>#history .trend{display:inline-block;margin:4px}'
        "#history figcaption{font-size:11px;max-width:360px;overflow-wrap:anywhere}"
        "#history table{border-collapse:collapse}#history td,#history th{border:1px solid #ddd;padding:2px 6px}"
        "</style>",
        "<h2>History</h2>",
        f"<p>Store <code>{_e(view.path)}</code>: this run ({_e(view.run_key)}) {_e(view.recorded)}; references "
        f"from the last {len(view.window)} run(s). {len(view.regressions)} regression(s) against own past.</p>",
    ]
    if view.regressions:
        parts.append(
            "<table><tr><th>host</th><th>metric</th><th>value</th><th>own median</th><th>deviation</th>"
            "<th>own sigmas</th><th>component</th></tr>"
        )
        for g in view.regressions[:200]:
            parts.append(
                f"<tr><td>{_e(g.host)}</td><td>{_e(g.metric)}</td><td>{g.value:.6g}</td><td>{g.reference:.6g}</td>"
                f"<td>{g.deviation:+.1%}</td><td>{abs(g.sigmas):.1f}</td><td>{_e(g.component)}</td></tr>"
            )
        parts.append("</table>")
    for label, hosts in (
        ("Repeat offenders", view.offenders),
        ("Flapping", view.flapping),
        ("Back to healthy", view.back_to_healthy),
    ):
        if hosts:
            parts.append(
                f"<p><b>{label}</b>: "
                + ", ".join(f"{_e(h)} ({n})" for h, n in sorted(hosts.items()))
                + "</p>"
            )
    if view.host_trends:
        parts.append("<h3>Flagged hosts</h3><div>")
        for host, metrics in view.host_trends.items():
            for metric, seq in metrics.items():
                parts.append(sparkline(f"{host} {metric}", seq, ref.get((host, metric))))
        parts.append("</div>")
    if view.fleet_trends:
        parts.append("<h3>Fleet medians</h3><div>")
        for fam, seq in view.fleet_trends.items():
            parts.append(sparkline(f"fleet median {fam}", seq))
        parts.append("</div>")
    parts.append("</section>")
    return "".join(parts)
