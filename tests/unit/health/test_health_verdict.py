"""The control node's side: health documents parsed with limits, fleet drift (majority, pins, ties),
host verdicts, profiles and the health: config section, check.yml rendered and its payload run."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path

import pytest

from sb_fleet.analysis.health_verdict import fleet_drift, judge, parse_health
from sb_fleet.config.fleet_config import Config
from sb_fleet.config.health_profiles import (
    BUILTIN,
    DEFAULT_DRIFT,
    HealthSettings,
    load_profile_file,
    resolve_profiles,
)
from sb_fleet.config.inventory import Host, Inventory
from sb_fleet.errors import ConfigError
from sb_fleet.exits import exit_for
from sb_fleet.outcome import Outcome
from sb_fleet.plan import ansible_data
from sb_fleet.plan.host_exec import exec_hosts_doc, health_args
from sb_fleet.plan.render_health import BOOT, health_payload, health_vars, render_check
from sb_fleet.plan.run_plan import HostSetup
from sb_fleet.report.writers.health_section import html, junit_cases, markdown

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from healthfake import make_machine  # noqa: E402


def doc(verdicts: dict[str, str] | None = None, **facts) -> dict:
    checks = [
        {"check": c, "verdict": v, "value": 1, "rule": "r", "evidence": f"{c} bad"}
        for c, v in (verdicts or {}).items()
    ]
    return {"checks": checks, "facts": facts}


def test_drift_names_the_majority_value():
    facts = {f"h{i}": {"driver": "550.54.15", "kernel": "5.15"} for i in range(5)}
    facts["h3"] = {"driver": "535.104.05", "kernel": "5.15"}
    found, tables, maj = fleet_drift(facts, DEFAULT_DRIFT, {})
    assert maj["driver"] == "550.54.15" and tables == {
        "driver": {"535.104.05": ["h3"], "550.54.15": ["h0", "h1", "h2", "h4"]}
    }
    (f,) = found["h3"]
    assert (
        f.verdict == "fail"
        and f.evidence == "driver 535.104.05 where the fleet's majority (4 of 5) has 550.54.15"
    )
    assert not found["h0"]


def test_drift_tie_is_said_not_passed_and_pins_win():
    facts = {"a": {"driver": "1"}, "b": {"driver": "1"}, "c": {"driver": "2"}, "d": {"driver": "2"}}
    found, _, maj = fleet_drift(facts, {"driver": "fail"}, {})
    assert maj["driver"] is None
    assert all(
        f.verdict == "warn" and "no majority for driver: 1 (2), 2 (2)" in f.evidence
        for fs in found.values()
        for f in fs
    )
    found, tables, _ = fleet_drift(facts, {"driver": "fail"}, {"driver": "2"})
    assert [f.evidence for f in found["a"]] == ["driver 1, pinned 2"] and not found["c"]
    assert "driver" in tables
    found, _, _ = fleet_drift(facts, {"driver": "off"}, {})
    assert not any(found.values())


def test_judge_hosts():
    docs = {
        "ok": doc({"gpu.xid": "warn"}, driver="1"),
        "bad": doc({"gpu.pcie": "fail"}, driver="1"),
        "odd": doc({}, driver="2"),
        "more": doc({}, driver="1"),
        "gone": "the health checks printed nothing",
    }
    r = judge(docs, {"driver": "fail"})
    assert r.hosts["ok"].verdict == "warn" and r.hosts["bad"].verdict == "fail"
    assert r.hosts["odd"].verdict == "fail" and r.hosts["odd"].reasons() == [
        "drift.driver: driver 2 where the fleet's majority (3 of 4) has 1"
    ]
    assert r.hosts["gone"].verdict == "unknown"
    assert judge(docs, {"driver": "fail"}, warn_is_unhealthy=True).hosts["ok"].verdict == "fail"
    md = markdown(r.to_json())
    assert "## Health" in md and "| bad | gpu.pcie |" in md and "Drift of `driver` (fleet majority: 1)" in md
    page = html(judge({"<b>x</b>": doc({"gpu.pcie": "fail"})}, {}).to_json())
    assert "&lt;b&gt;x&lt;/b&gt;" in page and "<b>x" not in page
    cases, n, failed = junit_cases(r.to_json(), lambda s: s)
    assert (
        failed == 3
        and n == len(cases)
        and any('name="health gpu.pcie"' in c and "<failure" in c for c in cases)
    )


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "printed nothing"),
        ("Traceback (most recent call last):\n", "not JSON"),
        ('{"checks": 3}', "no 'checks' list"),
        ('{"checks": [{"check": "x", "verdict": "maybe"}]}', "pass/warn/fail"),
        ("x" * (5 << 20), "more than"),
        ('{"checks": ' + "[" * 100000 + "]" * 100000 + "}", "nested too deep"),
    ],
)
def test_hostile_output_is_a_clear_problem(text, words):
    with pytest.raises(ValueError, match=words):
        parse_health(text)


def test_builtin_profiles_and_user_profiles(tmp_path):
    names = {p.name for p in BUILTIN}
    assert {"h100-sxm-8x-ib400", "a100-sxm-8x-ib200", "cpu-only"} <= names
    assert all(p.sources for p in BUILTIN if p.name != "cpu-only")
    e = next(p for p in BUILTIN if p.name == "h100-sxm-8x-ib400").expectations()
    assert e["gpu"]["count"] == 8 and e["ib"]["rate_gbps"] == 400 and e["profile"] == "h100-sxm-8x-ib400"
    user = tmp_path / "mine.yaml"
    user.write_text("name: l40s-4x\ngpu:\n  count: 4\n  modle: L40S\n")
    with pytest.raises(ConfigError, match=r"mine.yaml.*line 4.*modle"):
        load_profile_file(user)
    user.write_text("name: l40s-4x\ngpu: {count: 4, model: L40S}\nib: {ports: 0}\n")
    s = HealthSettings.model_validate({"profile": "l40s-4x", "profiles": ["mine.yaml"]})
    assert resolve_profiles(s, tmp_path)["l40s-4x"].gpu.count == 4
    with pytest.raises(ConfigError, match="not a known profile"):
        resolve_profiles(HealthSettings.model_validate({"profile": "nope"}), tmp_path)


def test_health_section_is_strict():
    base = {"superbench": {"benchmarks": {}}}
    Config.model_validate({**base, "health": {"pin": {"driver": "550.54.15"}, "drift": {"kernel": "off"}}})
    for bad in ({"enable": True}, {"pin": {"drivr": "1"}}, {"drift": {"driver": "maybe"}}):
        with pytest.raises(ValueError):
            Config.model_validate({**base, "health": bad})


def test_unhealthy_exits_1():
    assert exit_for([Outcome.OK, Outcome.UNHEALTHY]) == 1
    assert Outcome.UNHEALTHY.severity > Outcome.FAILED.severity and not Outcome.UNHEALTHY.is_infra


def test_check_playbook_renders_and_its_payload_runs(tmp_path):
    """check.yml is valid YAML; the argv it builds runs the checks from the inline payload, nothing else."""
    cfg = Config.model_validate(
        {"superbench": {"benchmarks": {}}, "health": {"profile": "h100-sxm-8x-ib400"}}
    )
    health = health_vars(cfg, tmp_path, tmp_path)
    pb = render_check(health, tmp_path)
    play = ansible_data.load(pb.read_text())[0]
    # the checks' own argv, run with the run's host tag (a stop finds them: sb_fleet/fleet/reaper.py)
    assert play["tasks"][0]["ansible.builtin.raw"] == (
        "exec env SB_FLEET_TAG={{ sb_tag | quote }} {{ sb_health_argv | map('quote') | join(' ') }}"
    )
    assert play["vars"]["sb_tag"] == "{{ sb_fleet_run | default('') }}/{{ inventory_hostname }}"
    # every value is data: the host's Python from the plan's hosts file, the checks' arguments built per
    # host in Python and handed in by the stage (never a template)
    assert play["vars_files"] == [ansible_data.HOSTS_FILE]
    assert play["vars"]["sb_health_argv"] == (
        "{{ [sb_hosts[inventory_hostname].python, '-c', sb_health_boot, sb_health_payload]"
        " + sb_health_args_of[inventory_hostname] }}"
    )
    unsafe = ansible_data.unsafe_strings(pb.read_text())
    assert play["vars"]["sb_health_boot"] in unsafe
    assert "{{" not in play["vars"]["sb_health_boot"] and "{%" not in play["vars"]["sb_health_boot"]
    m = make_machine(tmp_path / "m", gpus=8, gpu_over={3: {"pcie.link.width.current": 8}})
    # the arguments as the check stage builds them for a host whose inventory names its roots and tools
    host_vars = {k: m[k] for k in ("sb_path_sysfs", "sb_path_procfs", "sb_tool_dir")}
    doc = exec_hosts_doc(
        {"x": HostSetup(str(tmp_path), sys.executable, sys.executable)},
        Inventory(("i",), (Host("x", ("all",), host_vars),)),
        {"install_requirements": "never", "min_free_disk_gb": 0},
        health,
        "d",
        False,
    )
    args = health_args(doc, "x")
    assert args[:3] == ["--json", "--host", "x"] and args[args.index("--sysfs") + 1] == m["sb_path_sysfs"]
    argv = [sys.executable, "-c", BOOT, base64.b64encode(health_payload()).decode(), *args]
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {"PATH": "/usr/bin:/bin", "TMPDIR": str(tmp)}
    p = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env)
    assert p.returncode == 1, p.stderr
    d = parse_health(p.stdout)
    fails = {r["check"]: r["evidence"] for r in d["checks"] if r["verdict"] == "fail"}
    assert list(fails) == ["gpu.pcie"] and "x8 of x16" in fails["gpu.pcie"]
    assert d["facts"]["driver"] == "550.54.15" and d["facts"]["cuda"] == "12.4"
    assert not list(tmp.iterdir())  # the payload's temp file is gone


def test_health_changes_between_two_runs():
    from sb_fleet.analysis.health_verdict import health_changes

    def run(xid: dict, state: str, remap: bool) -> dict:
        d = {
            "n1": doc({}, driver="1"),
            "n2": {
                "checks": [
                    {
                        "check": "gpu.xid",
                        "verdict": "fail" if "79" in xid else "pass",
                        "value": xid,
                        "rule": "",
                        "evidence": "XID 79",
                    },
                    {
                        "check": "ib.state",
                        "verdict": "pass" if state == "ACTIVE/LinkUp" else "fail",
                        "value": {"mlx5_0/1": state},
                    },
                    {
                        "check": "gpu.row_remap",
                        "verdict": "fail" if remap else "pass",
                        "value": {"0": {"pending": remap}},
                    },
                ],
                "facts": {},
            },
            "n3": doc({}, driver="1"),
        }
        return judge(d, {"driver": "fail"}).to_json()

    night1 = run({"13": 1}, "ACTIVE/LinkUp", False)
    night2 = run({"13": 1, "79": 1}, "DOWN/Disabled", True)
    ch = {(c["host"], c["check"]): c for c in health_changes(night1, night2)}
    assert set(ch) == {("n2", "gpu.xid"), ("n2", "ib.state"), ("n2", "gpu.row_remap")}
    assert ch[("n2", "gpu.xid")]["change"] == "worse" and ch[("n2", "gpu.xid")]["after"]["value"] == {
        "13": 1,
        "79": 1,
    }
    assert ch[("n2", "ib.state")]["before"]["value"] == {"mlx5_0/1": "ACTIVE/LinkUp"}
    back = {(c["host"], c["check"]): c["change"] for c in health_changes(night2, night1)}
    assert back[("n2", "ib.state")] == "better"
    more = run({"13": 2}, "ACTIVE/LinkUp", False)  # a new application XID: same verdict, value watched
    assert [(c["check"], c["change"]) for c in health_changes(night1, more)] == [("gpu.xid", "changed")]
    gone = dict(night1["hosts"])
    del gone["n3"]
    assert {"host": "n3", "check": "", "change": "only in the baseline"} in health_changes(
        night1, {"hosts": gone}
    )
