"""The history section of report.html: self-contained SVG, names escaped, no zooming into noise."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from sb_fleet.config.gatespec import HistorySettings
from sb_fleet.history.trend_plots import html_section, sparkline
from sb_fleet.history.view import HistoryView, Regression


def test_sparkline_is_valid_svg_with_tonight_in_red_and_a_sane_scale() -> None:
    pts = [(f"r{i}", 100.0 + 0.1 * (i % 2)) for i in range(9)] + [("tonight", 100.05)]
    fig = sparkline("h <m>", pts, reference=100.0)
    svg = fig[fig.index("<svg") : fig.index("</svg>") + 6]
    root = ET.fromstring(svg)  # well-formed
    circles = root.findall("{http://www.w3.org/2000/svg}circle")
    assert len(circles) == 10 and circles[-1].get("fill") == "#c62828"
    ys = [float(c.get("cy")) for c in circles]
    assert max(ys) - min(ys) < 10  # 0.1% noise stays flat: the axis spans at least 4%
    assert "h &lt;m&gt;" in fig and sparkline("x", []) == ""


def test_section_lists_regressions_offenders_and_plots() -> None:
    g = Regression("node<1>", "gemm-flops/fp16_tc_flops:3", "gpu:GPU-1", 95.0, 100.0, -0.05, -12.0, 10)
    view = HistoryView(
        path="h.duckdb",
        run_key="night-9",
        recorded="recorded",
        window=["night-8"],
        settings=HistorySettings(),
        regressions=[g],
        offenders={"node7": 3},
        host_trends={"node<1>": {g.metric: [("night-8", 100.0), ("night-9", 95.0)]}},
        fleet_trends={"gemm-flops/fp16_tc_flops": [("night-8", 100.0), ("night-9", 100.0)]},
    )
    html = html_section(view)
    assert html.startswith('<section id="history">') and html.endswith("</section>")
    assert "node&lt;1&gt;" in html and "<1>" not in html
    assert "-5.0%" in html and "Repeat offenders" in html and "node7 (3)" in html
    assert len(re.findall("<svg", html)) == 2
