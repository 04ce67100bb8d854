"""`sb-fleet report RUN` on a validate run judges it with the re-runs validate recorded (confirm.json,
confirm-splits.json), so the report a person makes again says what validate said (issue 47)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from sb_fleet.cli.main import main
from sb_fleet.history.confirm import FLAKY, recorded
from sb_fleet.report.analyse import report

CORPUS = Path(__file__).resolve().parents[2] / "corpus"


def _run(case: str, prefix: str) -> Path:
    return next(p for p in sorted((CORPUS / case).iterdir()) if p.name.startswith(prefix))


def test_report_of_a_validate_run_uses_the_split_re_run_it_recorded(tmp_path: Path) -> None:
    run = _run("nofault-8h-parallel-quiet", "r08-")  # a real split that did not show again
    bare = report(run)
    assert bare.populations and not bare.gate.passed  # without the re-run, the split stands
    r = CliRunner().invoke(main, ["report", str(run), "--out", str(tmp_path / "out")])
    doc = json.loads((tmp_path / "out" / "report.json").read_text())
    assert r.exit_code == 0, r.output
    assert doc["gate"]["passed"] and doc["populations"][0]["confirmed"] is False
    assert "did not show again" in doc["headline"]["text"]
    assert doc["headline"]["text"] in r.output  # the console's last lines carry the headline


def test_report_of_a_validate_run_uses_the_confirmation_it_recorded(tmp_path: Path) -> None:
    run = _run("nofault-3h-parallel-quiet", "r08-")  # a healthy host failed, then flaky in the re-run
    doc = json.loads((run / "confirm.json").read_text())
    rec = recorded(doc, None)
    assert rec.confirmations and {c.result for c in rec.confirmations.values()} == {FLAKY}
    r = CliRunner().invoke(main, ["report", str(run), "--out", str(tmp_path / "out")])
    out = json.loads((tmp_path / "out" / "report.json").read_text())
    assert r.exit_code == 0, r.output
    assert {h["name"]: h["verdict"] for h in out["hosts"] if h["verdict"] != "pass"} == {
        name: "flaky" for name in rec.confirmations
    }
    assert out["confirmation"]["hosts"].keys() == doc["hosts"].keys()


def test_malformed_recorded_re_runs_leave_the_findings_standing() -> None:
    rec = recorded(
        {"hosts": {"a": {"result": "maybe"}, "b": "x"}, "selection": {"not_confirmed": ["c"]}},
        {
            "splits": [{"family": "f"}, {"showed_again": "yes", "groups": [["a"], ["b"]]}],
            "disagreements": [1],
        },
    )
    assert not rec.confirmations and not rec.split_checks and rec.unconfirmed == ("c",)
    assert (
        recorded({"not_run": "nothing to re-run", "selection": {"not_confirmed": ["c"]}}, None).unconfirmed
        == ()
    )
