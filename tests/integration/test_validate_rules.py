"""validate with a SuperBench user's own rules and baseline, on a real loopback fleet: the run is judged by
them as ``report --rules --baseline`` judges it, a rule that matches nothing is a loud warning, and a
bad rules file stops validate before anything runs (exit 2, one line, no run directory)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from .conftest import sb_fleet, started_fleet

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CONFIG = """\
version: v0.4
fleet:
  known_hosts: @KNOWN_HOSTS@
  python: /usr/bin/python3
  venv: false
  install_requirements: never
  min_free_disk_gb: 0
  forks: 8
superbench:
  benchmarks:
    noop:
      timeout: 60
      modes: [{name: local, proc_num: 1}]
      parameters: {sleep: 0.5}
gates:
  fleet: {enabled: false}
"""

# SuperBench's rules format (docs/user-tutorial/data-diagnosis.md): a variance rule against the baseline,
# and one whose pattern matches no metric of this run
RULES = """\
version: v0.4
superbench:
  rules:
    slow_step:
      function: variance
      criteria: "lambda x:x>0.5"
      categories: Noop
      metrics:
        - noop/step_time
    nothing:
      function: value
      criteria: "lambda x:x<0"
      categories: Other
      metrics:
        - kernel-launch:*.*/.*_time
"""


@pytest.fixture(scope="module")
def rfleet():
    with started_fleet(2, "127.0.23", check_torch=False) as f:
        yield f


def _validate(fleet, run_dir: Path, *extra: str) -> subprocess.CompletedProcess:  # noqa: ANN001
    cfg = fleet.config(CONFIG, "rules.yaml")
    return sb_fleet(
        "validate", "-i", str(fleet.inventory()), "-c", str(cfg), "--run-dir", str(run_dir), *extra
    )


def test_validate_judges_the_run_by_the_users_rules_and_baseline(rfleet, tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps({"noop/step_time": 100.0}))  # the step sleeps 500 ms: +400%
    r = _validate(rfleet, tmp_path / "run", "--rules", str(rules), "--baseline", str(baseline))
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    assert "WARNING: rule 'nothing': patterns match no metric" in r.stderr
    doc = json.loads((tmp_path / "run" / "report.json").read_text())
    for h in doc["hosts"]:
        assert h["verdict"] == "fail", h
        (issue,) = [i for i in h["issues"] if i["check"] == "rule:slow_step"]
        assert issue["category"] == "Noop" and issue["reference"] == 100.0 and issue["value"] > 400
    # the same run with a baseline it meets passes
    baseline.write_text(json.dumps({"noop/step_time": 500.0}))
    ok = _validate(rfleet, tmp_path / "run2", "--rules", str(rules), "--baseline", str(baseline))
    assert ok.returncode == 0, ok.stdout[-2000:] + ok.stderr[-2000:]


def test_a_bad_rules_file_stops_validate_before_the_run(rfleet, tmp_path: Path) -> None:
    rules = tmp_path / "bad-rules.yaml"
    rules.write_text(
        "version: v0.4\nsuperbench:\n  rules:\n    r:\n      function: varianse\n      metrics: [a]\n"
    )
    r = _validate(rfleet, tmp_path / "never", "--rules", str(rules))
    assert r.returncode == 2, r.stdout + r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "bad-rules.yaml" in lines[0] and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "never").exists()
