"""report.html in a real headless browser (Debian's chromium, driven over the DevTools protocol by
tests/integration/cdp.py): at 1, 3, 8, 32, 200 and 10,000 hosts, from recorded real runs
(tests/corpus) and synthetic fleets. No script error, no empty section, the headline's reason is the
gate's, every host the gate counts opens its drill-down in one click, the filter finds any host, the
slow host's evidence is on the first screen, and the 10,000-host page stays small and fast.

Screenshots are kept under test-artifacts/ for people to look at.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from sb_fleet.report.analyse import report, write_reports
from tests.integration.cdp import CHROMIUM, Browser
from tests.synth.fleet import generate

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CORPUS = ROOT / "tests" / "corpus"
FIXTURES = ROOT / "tests" / "unit" / "fixtures"

pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)"
)


def _run(case: str) -> Path:
    return sorted(p for p in (CORPUS / case).iterdir() if p.is_dir())[0]


def _synth(tmp: Path, n: int, seed: int) -> Path:
    src = tmp / f"synth-{n}" / "results-summary.jsonl"
    src.parent.mkdir(parents=True)
    src.write_text(generate(n, seed=seed).text + ("not json\n" if n == 200 else ""))
    return src


def _one_host(tmp: Path) -> Path:
    """One host of a recorded real run, as a SuperBench results-summary.jsonl."""
    line = (_run("nofault-8h-parallel-quiet") / "results-summary.jsonl").read_text().splitlines()[0]
    src = tmp / "one-host" / "results-summary.jsonl"
    src.parent.mkdir(parents=True)
    src.write_text(line + "\n")
    return src


@pytest.fixture(scope="module")
def browser() -> Any:
    with Browser(1400, 900) as b:
        yield b


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, dict]]:
    """Each case's report.html and report.json."""
    tmp = tmp_path_factory.mktemp("pages")
    sources = {
        "1": _one_host(tmp),
        "3": _run("nofault-3h-parallel-quiet"),
        "8": _run("nofault-8h-parallel-quiet"),
        "slowhost": _run("slowhost-6h-parallel-quiet"),
        "32": _synth(tmp, 32, 5),
        "200": _synth(tmp, 200, 31),
    }
    out = {}
    for name, src in sources.items():
        write_reports(report(src), tmp / f"out-{name}")
        out[name] = (
            tmp / f"out-{name}" / "report.html",
            json.loads((tmp / f"out-{name}" / "report.json").read_text()),
        )
    return out


# Every visible section has content past its title, and no visible table is its header row alone.
EMPTY_SECTIONS = """
Array.from(document.querySelectorAll('section')).filter(function (s) {
  if (s.hidden || s.offsetParent === null) { return false; }
  var h = s.querySelector('h2');
  var rest = s.textContent.replace(h ? h.textContent : '', '').trim();
  return rest.length === 0 && !s.querySelector('svg');
}).map(function (s) { return s.id || s.textContent.slice(0, 40); })
"""
HEADER_ONLY_TABLES = """
Array.from(document.querySelectorAll('table')).filter(function (t) {
  return t.offsetParent !== null && t.querySelectorAll('tr').length < 2;
}).map(function (t) { return t.id || t.outerHTML.slice(0, 80); })
"""


def _check_page(b: Browser, doc: dict) -> None:
    state = b.eval("document.documentElement.getAttribute('data-errors')")
    assert state is None and not b.exceptions(), (state, b.eval("window.__errors"), b.exceptions())
    assert b.eval(EMPTY_SECTIONS) == []
    assert b.eval(HEADER_ONLY_TABLES) == []
    assert "Too few hosts" not in b.eval("document.body.textContent")
    # the headline: the gate's word, and what failed it first (never a warning in its place)
    title = b.eval("document.getElementById('title').textContent")
    header = b.eval("document.getElementById('head').textContent")
    gate = doc["gate"]
    assert title.startswith("Gate passed" if gate["passed"] else "Gate failed"), title
    if not gate["passed"]:
        reasons = [r["sentence"] for r in gate.get("reasons") or ()]
        first = doc["headline"]["failed_by"][0] if "headline" in doc else (reasons or [None])[0]
        if first is not None:
            assert title == "Gate failed: " + first
        else:  # a report.json of before the gate's reasons: the failing hosts' count is the reason
            assert f"{gate['failing_hosts']} of {gate['total_hosts']} host(s)" in title
        for r in gate.get("reasons") or ():
            assert r["sentence"] in header, (r, header)
        assert "too noisy" not in title or "too noisy" in first


def _click(b: Browser, selector: str) -> None:
    """Bring an element into view and click its centre with the mouse."""
    rect = b.eval(
        f"(function () {{ var e = document.querySelector({json.dumps(selector)}); if (!e) {{ return null; }}"
        " e.scrollIntoView({block: 'center'}); var r = e.getBoundingClientRect();"
        " return [r.left + r.width / 2, r.top + r.height / 2]; })()"
    )
    assert rect is not None, selector
    b.click_at(*rect)


def _drill_title(b: Browser) -> str:
    return b.wait_for(
        "!document.getElementById('drill').hidden && document.getElementById('drill-title').textContent"
    )


def _counted(doc: dict) -> list[str]:
    count = set(doc["gates"]["policy"]["count"])
    names = [h["name"] for h in doc["hosts"] if h["verdict"] in count]
    return names + [
        n for r in doc["gate"].get("reasons") or () for n in r.get("hosts") or () if n not in names
    ]


@pytest.mark.parametrize("case", ["1", "3", "8", "slowhost", "32", "200"])
def test_page_at_every_fleet_size(case: str, pages: dict, browser: Browser) -> None:
    page, doc = pages[case]
    b = browser
    b.resize(1400, 900)
    b.open(page.as_uri())
    _check_page(b, doc)
    n = len(doc["hosts"])
    evidence = [e for e in doc.get("evidence") or () if len(e["hosts"]) < 20]
    if n >= 20:  # histograms of the fleet, flagged hosts marked
        assert (
            int(b.eval("document.documentElement.getAttribute('data-plots')")) == len(doc["families"]) >= 20
        )
        assert b.eval("document.querySelectorAll('#plots .bar').length") >= 20 * 5
        if any(m["flagged_hosts"] for m in doc["metrics"].values()):
            assert b.eval("document.querySelectorAll('#plots circle.flag').length") > 0
    elif evidence:  # a dot per host, one row each, with the reference line; no histogram of a few values
        assert b.eval("document.documentElement.getAttribute('data-plots')") == "0"
        drawn = int(b.eval("document.documentElement.getAttribute('data-evidence')"))
        assert 0 < drawn <= len(evidence)
        assert b.eval("document.querySelectorAll('#evidence svg .ev-dot').length") >= drawn * 3
        assert b.eval("document.querySelectorAll('#evidence svg line.ref').length") == drawn
        if drawn < len(evidence):  # the rest behind the toggle
            _click(b, "#evidence-all")
            b.wait_for(f"document.documentElement.getAttribute('data-evidence') === '{len(evidence)}'")
    # every host the gate counts: one click from the header
    counted = _counted(doc)
    for name in counted[:12]:
        _click(b, f'#counted [data-host="{name}"]')
        assert _drill_title(b).startswith(name + ": "), name
        b.eval("document.getElementById('drill').hidden = true")
    # the filter finds a passing host, and its row opens it
    passing = [h["name"] for h in doc["hosts"] if h["verdict"] == "pass"]
    if passing:
        b.eval(
            f"var q = document.getElementById('q'); q.value = {json.dumps(passing[-1])};"
            " q.dispatchEvent(new Event('input'))"
        )
        _click(b, f'#hosts tr[data-host="{passing[-1]}"]')
        assert _drill_title(b) == passing[-1] + ": pass"
    bad = [h for h in doc["hosts"] if h["verdict"] != "pass"]
    b.eval("var q = document.getElementById('q'); q.value = ''; q.dispatchEvent(new Event('input'))")
    assert b.eval("document.querySelectorAll('#hosts tbody tr').length") == min(len(bad), 500)
    if case == "200":
        assert "not valid JSON" in b.eval("document.getElementById('problems').textContent")
    if case in ("8", "200", "slowhost"):
        ARTIFACTS.mkdir(exist_ok=True)
        b.eval("document.getElementById('drill').hidden = true; window.scrollTo(0, 0)")
        b.resize(1400, 2400)
        b.screenshot(ARTIFACTS / f"report-html-{case}.png")
        b.resize(1400, 900)
        assert (ARTIFACTS / f"report-html-{case}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_slow_host_evidence_on_the_first_screen(pages: dict, browser: Browser) -> None:
    """The recorded real run with a 2x slow host: its red dot is drawn on the first screen, and a
    click on it opens its drill-down with the values it was judged by."""
    page, doc = pages["slowhost"]
    failed = [h["name"] for h in doc["hosts"] if h["verdict"] == "fail"]
    assert failed == ["host004"], failed
    if not doc.get("evidence"):
        pytest.skip("report.json has no evidence yet")
    b = browser
    b.resize(1400, 900)
    b.open(page.as_uri())
    sel = '#evidence circle.ev-flagged[data-host="host004"]'
    rect = b.eval(
        f"(function () {{ var r = document.querySelector('{sel}').getBoundingClientRect(); return [r.left, r.top, r.width]; }})()"
    )
    assert rect[2] > 0 and 0 <= rect[1] < 900, rect  # drawn, within the first 900 pixels
    b.click_at(rect[0] + rect[2] / 2, rect[1] + rect[2] / 2)
    assert _drill_title(b).startswith("host004: fail")
    assert "flagged" in b.eval("document.getElementById('drill-body').textContent")


def test_hand_made_evidence_and_findings(pages: dict, browser: Browser, tmp_path: Path) -> None:
    """report.json's evidence shape drawn as specified (noise bars, none when null; a re-run as a hollow
    dot; limits), and each finding titled with what it did to the gate."""
    from sb_fleet.report.writers import report_html

    _, doc = pages["3"]
    hosts = ["host001", "host002", "host003"]

    def host(name: str, v: float, status: str, noise: float | None, rerun: float | None = None) -> dict:
        return {
            "name": name,
            "value": v,
            "noise": noise,
            "sigma": 0.02,
            "reference": 100.0,
            "limit": 90.0,
            "limit_hi": None,
            "status": status,
            "rerun": rerun,
        }

    ev = [
        {
            "metric": "gemm-flops/fp32_flops",
            "partition": "",
            "direction": 1,
            "status": "flagged",
            "reference": 100.0,
            "hosts": [
                host("host003", 70.0, "flagged", 0.01, rerun=72.0),
                host("host001", 100.0, "ok", None),
                host("host002", 101.0, "ok", 0.02),
            ],
        },
        *(
            {
                "metric": f"m/{i}",
                "partition": "",
                "direction": -1,
                "status": "ok",
                "reference": 5.0,
                "hosts": [{**host(h, 5.0, "ok", 0.01), "limit": 6.0, "reference": 5.0} for h in hosts],
            }
            for i in range(6)
        ),
    ]
    doc = {
        **doc,
        "evidence": ev,
        "gate": {
            **doc["gate"],
            "passed": False,
            "reasons": [
                {
                    "kind": "disagreements",
                    "sentence": "host001 and host002 disagree on 1 metric(s)",
                    "hosts": ["host001", "host002"],
                }
            ],
        },
        "populations": [
            {
                "scope": "",
                "family": "gemm-flops/fp16_flops",
                "centers": [1.0, 2.0],
                "apart": 1.0,
                "gap": 0.5,
                "families": ["gemm-flops/fp16_flops"],
                "groups": [["host001"], ["host002", "host003"]],
                "confirmed": False,
                "confirmation": "the split did not show again",
            }
        ],
        "disagreements": [
            {
                "metric": "x/y",
                "hosts": ["host001", "host002"],
                "values": [1.0, 2.0],
                "deviation": 1.0,
                "noise_sigmas": 9.0,
            }
        ],
    }
    reason = "host001 and host002 disagree on 1 metric(s)"
    doc["headline"] = {"passed": False, "failed_by": [reason], "notes": [], "text": f"gate failed: {reason}"}
    result = report(_run("nofault-3h-parallel-quiet"))
    page = tmp_path / "report.html"
    page.write_text(report_html.render(result, doc))
    b = browser
    b.resize(1400, 900)
    b.open(page.as_uri())
    assert b.eval("document.documentElement.getAttribute('data-errors')") is None and not b.exceptions()
    assert (
        b.eval("document.getElementById('title').textContent")
        == "Gate failed: host001 and host002 disagree on 1 metric(s)"
    )
    # the flagged metric first, then ok ones up to four; the rest behind the toggle
    assert b.eval("document.documentElement.getAttribute('data-evidence')") == "4"
    first = "document.querySelector('#evidence .ev-plot')"
    assert b.eval(f"{first}.getAttribute('data-metric')") == "gemm-flops/fp32_flops"
    assert b.eval(f"{first}.querySelectorAll('circle.ev-rerun').length") == 1
    assert (
        b.eval(f"{first}.querySelectorAll('line.err').length") == 3 * 2 + 1
    )  # two noise bars, the re-run link
    assert b.eval(f"{first}.querySelectorAll('line.lim').length") == 3
    _click(b, "#evidence-all")
    b.wait_for("document.documentElement.getAttribute('data-evidence') === '7'")
    fails = b.eval("document.getElementById('findings').textContent")
    later = b.eval("document.getElementById('later').textContent")
    assert "Fails the gate: two hosts disagree" in fails
    assert "Did not show again: does not fail the gate: population split" in later
    _click(b, '#findings [data-host="host002"]')
    assert _drill_title(b).startswith("host002")


def test_ten_thousand_hosts_is_small_and_fast(tmp_path: Path, browser: Browser) -> None:
    """10,000 hosts: at most 5 MB, drawn quickly (the figure is printed; the bound is generous)."""
    from sb_fleet.analysis.figures.measured import figures_of
    from sb_fleet.report.writers import figures_html, report_html, report_json

    src = _synth(tmp_path, 10_000, 7)
    result = report(src)
    figs = figures_of(result.fleet)
    doc = report_json.build(result, figs)
    page = tmp_path / "report.html"
    page.write_text(report_html.render(result, doc, figs, figures_html.start_plots(figs)))
    size = page.stat().st_size
    b = browser
    b.resize(1400, 900)
    t0 = time.monotonic()
    b.open(page.as_uri())
    painted = b.eval(
        "new Promise(function (r) { requestAnimationFrame(function () { requestAnimationFrame(function () {"
        " r(performance.now()); }); }); })",
        await_promise=True,
    )
    wall = time.monotonic() - t0
    print(
        f"\n10,000 hosts: report.html {size / 1e6:.2f} MB, painted {painted / 1000:.2f} s after navigation "
        f"({wall:.2f} s wall, with the polling)"
    )
    assert size <= 5_000_000
    assert painted < 10_000  # the target is 2 s (printed above); a loaded CI lane gets room
    _check_page(b, doc)
    bad = [h["name"] for h in doc["hosts"] if h["verdict"] != "pass"]
    _click(b, f'#counted [data-host="{bad[0]}"]')
    assert _drill_title(b).startswith(bad[0] + ": ")


def test_health_is_a_card_never_an_empty_table() -> None:
    from sb_fleet.report.writers.health_section import html

    def host(verdict: str, fail: bool) -> dict:
        checks = [
            {"check": "gpu.count", "verdict": "fail" if fail else "pass"},
            {"check": "ecc", "verdict": "pass"},
        ]
        findings = (
            [{"check": "gpu.count", "verdict": "fail", "value": 7, "rule": "== 8", "evidence": "7 GPUs"}]
            if fail
            else []
        )
        return {"verdict": verdict, "findings": findings, "checks": checks}

    healthy = html({"hosts": {"a": host("pass", False), "b": host("pass", False)}})
    assert (
        "every host healthy" in healthy and "<th>Host</th>" not in healthy and "gpu.count: 2 pass" in healthy
    )
    sick = html({"hosts": {"a": host("pass", False), "<b>x</b>": host("fail", True)}})
    assert "1 host(s) unhealthy" in sick and "gpu.count: 1 pass, 1 fail" in sick
    assert 'data-host="&lt;b&gt;x&lt;/b&gt;"' in sick and "<b>x" not in sick


@pytest.mark.parametrize("fixture", ["figures_run", "figures_cpu"])
def test_measured_figures_are_drawn(fixture: str, tmp_path: Path, browser: Browser) -> None:
    """The results section: tables with units and % of peak, every matplotlib plot laid out with marks,
    one roofline per hardware model (every host a dot), not one per host."""
    out = tmp_path / "out"
    write_reports(report(FIXTURES / fixture), out)
    doc = json.loads((out / "report.json").read_text())
    b = browser
    b.resize(1400, 900)
    b.open((out / "report.html").as_uri())
    _check_page(b, doc)
    drawn, total = b.eval("document.documentElement.getAttribute('data-figure-plots')").split("/")
    devices = {r["device"] for r in doc["figures"]["rooflines"]}
    curves = len({c["benchmark"] for c in doc["figures"]["collectives"]})
    assert drawn == total and int(total) == len(devices) + curves + ("power_plot" in doc["figures"])
    text = b.eval("document.getElementById('figures').textContent")
    assert "% of peak" in text and "GFLOPS" in b.eval("document.getElementById('figures').innerHTML")
    assert "too noisy" in b.eval("document.body.textContent")
    if fixture == "figures_run":
        assert len(doc["figures"]["rooflines"]) == 3 and len(devices) == 1 and "3 hosts" in text
    ARTIFACTS.mkdir(exist_ok=True)
    b.eval("document.getElementById('figures').scrollIntoView()")
    b.screenshot(ARTIFACTS / f"report-figures-{fixture}.png")


def test_compare_page_renders(tmp_path: Path, browser: Browser) -> None:
    from click.testing import CliRunner

    from sb_fleet.cli.main import main

    fx = FIXTURES / "compare"
    res = CliRunner().invoke(
        main, ["compare", str(fx / "baseline.jsonl"), str(fx / "target.jsonl"), "--out", str(tmp_path / "c")]
    )
    assert res.exit_code == 0, res.output
    b = browser
    b.resize(1400, 2000)
    b.call("Page.navigate", {"url": (tmp_path / "c" / "compare.html").as_uri()})
    b.wait_for(
        "document.readyState === 'complete' && document.documentElement.getAttribute('data-plots') !== null"
    )
    assert b.eval("document.documentElement.getAttribute('data-plots')") == "3"
    assert b.eval("document.querySelectorAll('svg').length") == 3
    assert b.eval("document.querySelectorAll('path').length") > 10
    body = b.eval("document.body.textContent")
    assert "GPT-2" in body and "2.017x" in body
    ARTIFACTS.mkdir(exist_ok=True)
    b.screenshot(ARTIFACTS / "compare-html.png")
