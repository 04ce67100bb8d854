"""The report files: one module per format, all written by :func:`write_all`."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from sb_fleet.safe_files import atomic_write_bytes

if TYPE_CHECKING:
    from sb_fleet.exposition import Series
    from sb_fleet.report.report_result import ReportResult
    from sb_fleet.report.writers.prom_early import BenchmarkPart
    from sb_fleet.report.writers.report_prometheus import PromSettings

FILES = ("report.json", "report.md", "report.html", "junit.xml", "quarantine.txt", "metrics.prom")


def write_all(
    result: ReportResult,
    out_dir: Path,
    prometheus: PromSettings | None = None,
    metrics: Series | None = None,
    early: BenchmarkPart | None = None,
) -> list[Path]:
    """Render every format and write each file atomically (temp file, fsync, rename). ``prometheus``:
    how metrics.prom exposes the run (default: fleet ``default``, ranks pooled, text format); ``metrics``:
    its series when the caller made them already (to publish the same series elsewhere).

    metrics.prom, by far the largest (~70 MB at 10,000 hosts), is rendered first and written by a thread
    while the other formats are rendered (the copy into the page cache and the fsync release the GIL);
    each file is handed to that thread as soon as it is rendered. A file that cannot be written is the
    error of the first such file in :data:`FILES` order; the others are still written. ``early``: a child
    rendering metrics.prom's benchmark families already (:mod:`sb_fleet.report.writers.prom_early`);
    ``metrics`` is then without them, and the child's part with ``metrics`` after it is the file (or,
    when the child's part did not come, the whole file is rendered here)."""
    from concurrent.futures import Future, ThreadPoolExecutor

    from sb_fleet.analysis.figures.measured import figures_of
    from sb_fleet.report.writers import figures_html, quarantine
    from sb_fleet.report.writers import report_html as html
    from sb_fleet.report.writers import report_json as json_report
    from sb_fleet.report.writers import report_junit as junit
    from sb_fleet.report.writers import report_markdown as markdown
    from sb_fleet.report.writers import report_prometheus as prom

    out_dir = Path(out_dir)
    figs = figures_of(result.fleet)  # the measured figures: every report shows them
    plots = figures_html.start_plots(figs)  # drawn beside the rendering below when a helper runs
    doc = json_report.build(result, figs)
    generated = dt.datetime.fromisoformat(doc["generated"])
    settings = prometheus or prom.PromSettings()
    renderers: dict[str, Callable[[], bytes]] = {
        "metrics.prom": lambda: prom.render(result, settings, generated, metrics),
        "report.json": lambda: json_report.dumps(doc),
        "report.md": lambda: markdown.render(result, figs).encode(),
        "report.html": lambda: html.render(result, doc, figs, plots).encode(),
        "junit.xml": lambda: junit.render(result).encode(),
        "quarantine.txt": lambda: quarantine.render(result).encode(),
    }
    writes: dict[str, Future[None]] = {}
    with ThreadPoolExecutor(1, thread_name_prefix="report-write") as pool:
        if early is not None:
            if metrics is None:
                metrics = prom.series(result, settings, prom.identity(result, generated), benchmarks=False)
            rest = renderers.pop("metrics.prom")()
            writes["metrics.prom"] = pool.submit(
                _finish_prom, early, rest, out_dir, result, settings, generated
            )
        for name, render in renderers.items():
            writes[name] = pool.submit(atomic_write_bytes, out_dir / name, render(), 0o644)
    paths = []
    for name in FILES:
        writes[name].result()
        paths.append(out_dir / name)
    return paths


def _finish_prom(
    early: BenchmarkPart,
    rest: bytes,
    out_dir: Path,
    result: ReportResult,
    settings: PromSettings,
    generated: dt.datetime,
) -> None:
    """metrics.prom from the child's benchmark families and ``rest``; the whole file rendered here when the
    child's part did not come."""
    from sb_fleet.report.writers import report_prometheus as prom

    if not early.finish(rest):
        atomic_write_bytes(out_dir / "metrics.prom", prom.render(result, settings, generated), 0o644)
