"""The report files: one module per format, all written by :func:`write_all`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sb_fleet.safe_files import atomic_write_bytes

if TYPE_CHECKING:
    from sb_fleet.exposition import Series
    from sb_fleet.report.report_result import ReportResult
    from sb_fleet.report.writers.report_prometheus import PromSettings

FILES = ("report.json", "report.md", "report.html", "junit.xml", "quarantine.txt", "metrics.prom")


def write_all(
    result: ReportResult,
    out_dir: Path,
    prometheus: PromSettings | None = None,
    metrics: Series | None = None,
) -> list[Path]:
    """Render every format first, then write each file atomically (temp file, rename). ``prometheus``:
    how metrics.prom exposes the run (default: fleet ``default``, ranks pooled, text format); ``metrics``:
    its series when the caller made them already (to publish the same series elsewhere)."""
    import datetime as dt

    from sb_fleet.analysis.figures.measured import figures_of
    from sb_fleet.report.writers import figures_html, quarantine
    from sb_fleet.report.writers import report_html as html
    from sb_fleet.report.writers import report_json as json_report
    from sb_fleet.report.writers import report_junit as junit
    from sb_fleet.report.writers import report_markdown as markdown
    from sb_fleet.report.writers import report_prometheus as prom

    figs = figures_of(result.fleet)  # the measured figures: every report shows them
    plots = figures_html.start_plots(figs)  # drawn beside the rendering below when a helper runs
    doc = json_report.build(result, figs)
    rendered = {
        "report.json": json_report.dumps(doc),
        "report.md": markdown.render(result, figs).encode(),
        "report.html": html.render(result, doc, figs, plots).encode(),
        "junit.xml": junit.render(result).encode(),
        "quarantine.txt": quarantine.render(result).encode(),
        "metrics.prom": prom.render(
            result, prometheus or prom.PromSettings(), dt.datetime.fromisoformat(doc["generated"]), metrics
        ),
    }
    out_dir = Path(out_dir)
    paths = []
    for name in FILES:
        p = out_dir / name
        atomic_write_bytes(p, rendered[name], mode=0o644)
        paths.append(p)
    return paths
