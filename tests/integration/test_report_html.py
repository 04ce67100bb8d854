"""report.html in a real headless browser (Debian's chromium): no script error, plots drawn, drill-down works.

A screenshot is kept under test-artifacts/ for people to look at.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from sb_fleet.report.analyse import report, write_reports
from tests.synth.fleet import generate

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)"
)


def chromium(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    profile = tmp / f"profile-{len(list(tmp.glob('profile-*')))}"
    cmd = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--enable-logging=stderr",
        "--v=0",
        f"--user-data-dir={profile}",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture(scope="module")
def html_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    tmp = tmp_path_factory.mktemp("html")
    fleet = generate(600, seed=31)
    src = tmp / "results-summary.jsonl"
    src.write_text(fleet.text + "not json\n")
    r = report(src)
    write_reports(r, tmp / "out")
    doc = json.loads((tmp / "out" / "report.json").read_text())
    return tmp / "out" / "report.html", doc


def test_page_renders_without_script_errors_and_draws_plots(
    html_report: tuple[Path, dict], tmp_path: Path
) -> None:
    page, doc = html_report
    res = chromium(tmp_path, "--dump-dom", page.as_uri())
    dom = res.stdout
    assert res.returncode == 0, res.stderr[-2000:]
    head = re.search(r"<html[^>]*>", dom)
    assert head, dom[:500]
    assert 'data-ready="1"' in head.group(0), "the page script did not finish"
    assert "data-errors" not in head.group(0), head.group(0)
    assert "Uncaught" not in res.stderr, res.stderr[-2000:]
    plots = int(re.search(r'data-plots="(\d+)"', head.group(0)).group(1))
    assert plots == len(doc["families"]) and plots >= 20
    assert dom.count('class="bar"') >= plots * 5  # histograms have bars
    flagged = sum(f for f in (m["flagged_hosts"] for m in doc["metrics"].values()))
    assert flagged > 0 and dom.count('class="flag"') > 0  # flagged hosts are highlighted
    bad = [h for h in doc["hosts"] if h["verdict"] != "pass"]
    assert dom.count('<tr class="host">') == len(bad)
    assert "not valid JSON" in dom  # the malformed line is listed


def test_drill_down_shows_a_hosts_issues(html_report: tuple[Path, dict], tmp_path: Path) -> None:
    page, doc = html_report
    host = next(h for h in doc["hosts"] if h["verdict"] == "fail")
    res = chromium(tmp_path, "--dump-dom", page.as_uri() + "#host=" + host["name"])
    dom = res.stdout
    m = re.search(r'<h2 id="drill-title">([^<]*)</h2>', dom)
    assert m and m.group(1).startswith(host["name"] + ": fail")
    assert host["issues"][0]["detail"].split(" (")[0][:30] in dom.replace("&lt;", "<").replace("&gt;", ">")


def test_screenshot_is_kept(html_report: tuple[Path, dict], tmp_path: Path) -> None:
    page, _ = html_report
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report-html.png"
    shot.unlink(missing_ok=True)
    res = chromium(
        tmp_path, "--window-size=1400,2400", f"--screenshot={shot}", "--hide-scrollbars", page.as_uri()
    )
    assert shot.is_file(), res.stderr[-2000:]
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


FIXTURES = ROOT / "tests" / "unit" / "fixtures"


def _page_state(res: subprocess.CompletedProcess[str]) -> str:
    head = re.search(r"<html[^>]*>", res.stdout)
    assert res.returncode == 0 and head, res.stderr[-2000:]
    assert "Uncaught" not in res.stderr, res.stderr[-2000:]
    return head.group(0)


@pytest.mark.parametrize("fixture", ["figures_run", "figures_cpu"])
def test_measured_figures_are_drawn(fixture: str, tmp_path: Path) -> None:
    """The results section: tables with units and % of peak, every matplotlib plot laid out with marks."""
    out = tmp_path / "out"
    write_reports(report(FIXTURES / fixture), out)
    page = out / "report.html"
    res = chromium(tmp_path, "--dump-dom", page.as_uri())
    head = _page_state(res)
    assert 'data-ready="1"' in head and "data-errors" not in head, head
    drawn, total = re.search(r'data-figure-plots="(\d+)/(\d+)"', head).groups()
    assert drawn == total and int(total) >= (2 if fixture == "figures_run" else 1)  # busbw curves, rooflines
    assert '<section id="figures">' in res.stdout and "% of peak" in res.stdout
    assert "GFLOPS" in res.stdout and "too noisy" in res.stdout
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / f"report-figures-{fixture}.png"
    shot.unlink(missing_ok=True)
    chromium(tmp_path, "--window-size=1400,2600", f"--screenshot={shot}", "--hide-scrollbars", page.as_uri())
    assert shot.is_file() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compare_page_renders(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from sb_fleet.cli.main import main

    fx = FIXTURES / "compare"
    res = CliRunner().invoke(
        main, ["compare", str(fx / "baseline.jsonl"), str(fx / "target.jsonl"), "--out", str(tmp_path / "c")]
    )
    assert res.exit_code == 0, res.output
    page = tmp_path / "c" / "compare.html"
    dump = chromium(tmp_path, "--dump-dom", page.as_uri())
    head = _page_state(dump)
    assert 'data-plots="3"' in head
    assert dump.stdout.count("<svg") == 3 and dump.stdout.count("<path") > 10
    assert "GPT-2" in dump.stdout and "2.017x" in dump.stdout
    shot = ARTIFACTS / "compare-html.png"
    ARTIFACTS.mkdir(exist_ok=True)
    shot.unlink(missing_ok=True)
    chromium(tmp_path, "--window-size=1400,2000", f"--screenshot={shot}", "--hide-scrollbars", page.as_uri())
    assert shot.is_file()
