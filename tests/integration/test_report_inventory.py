"""The installed ``sb-fleet report`` with a real Ansible inventory: every inventory host is accounted for."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.synth.fleet import generate

ROOT = Path(__file__).resolve().parents[2]


def sb_fleet() -> list[str]:
    exe = Path(sys.executable).parent / "sb-fleet"
    if exe.is_file():
        return [str(exe)]
    found = shutil.which("sb-fleet")
    if found:
        return [found]
    pytest.skip("the sb-fleet console script is not installed (pip install -e .)")


def test_every_inventory_host_is_accounted_for(tmp_path: Path) -> None:
    fleet = generate(60, seed=41, fault_fraction=0.0)
    lines = list(fleet.lines)
    reported = [json.loads(x)["node"] for x in lines]
    dropped = set(reported[:3])  # three hosts never reported
    lines = [x for x in lines if json.loads(x)["node"] not in dropped]
    lines.append(json.dumps({"node": "stranger", "mem-bw/return_code": 0}))
    src = tmp_path / "results-summary.jsonl"
    src.write_text("\n".join(lines) + "\n")
    inv = tmp_path / "hosts.ini"
    inv.write_text("[gpu]\n" + "\n".join(f"{h} ansible_connection=local" for h in fleet.hosts) + "\n")
    out = tmp_path / "out"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    res = subprocess.run(
        [*sb_fleet(), "report", str(src), "-i", str(inv), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert res.returncode == 1, res.stdout + res.stderr
    doc = json.loads((out / "report.json").read_text())
    verdicts = {h["name"]: h["verdict"] for h in doc["hosts"]}
    assert set(fleet.hosts) <= set(verdicts)
    assert {h for h, v in verdicts.items() if v == "missing"} == dropped
    assert all(verdicts[h] == "pass" for h in fleet.hosts if h not in dropped)
    assert any("stranger" in w and "not in the inventory" in w for w in doc["warnings"])
    # The stranger lacks benchmarks every other host ran: incomplete, so drained with the missing ones.
    assert verdicts["stranger"] == "incomplete"
    assert sorted((out / "quarantine.txt").read_text().split()) == sorted(dropped | {"stranger"})
    assert doc["gate"]["passed"] is False


def test_bad_inventory_is_a_usage_error(tmp_path: Path) -> None:
    src = tmp_path / "r.jsonl"
    src.write_text('{"node": "a", "m/x:0": 1}\n')
    res = subprocess.run(
        [*sb_fleet(), "report", str(src), "-i", str(tmp_path / "nope.ini"), "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == 2
    assert "inventory not found" in res.stderr
