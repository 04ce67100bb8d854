"""Each host's deploy exec, built in Python (sb_fleet.plan.host_exec), run by a real /bin/sh: the words its
first_exec gets are exactly the ones meant, whatever the host's values hold, and a host without the suite
prints the need-suite line only. The oracle is the shell and first_exec's own spec parser."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sb_fleet.config.inventory import Host, Inventory
from sb_fleet.plan.host_exec import (
    DEPLOY_BOOTSTRAP,
    FirstStep,
    HealthFirst,
    exec_hosts_doc,
    exec_spec,
    exec_timeout,
    fast_commands,
    health_args,
    suite_invocations,
)
from sb_fleet.plan.run_plan import HostSetup
from sb_fleet.plan.tasks import NEED_SUITE

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from sb_bench.host.first_exec import load_spec  # noqa: E402

HOSTILE = [
    "plain",
    "sp ace",
    "$(touch pwned-1)",
    "`touch pwned-2`",
    "a'b\"c;d&&e|f",
    "{{ lookup('pipe', 'id') }}",
    "new\nline",
    "*?[x]",
    "-dash",
]

HEALTH = {"timeout": 10.0, "default_profile": "-", "expect": {"-": "RQ==", "gpu8": "R1BVOA=="}}
FLEET = {"install_requirements": "never", "min_free_disk_gb": 0, "venv": False}


def _doc(tmp: Path, name: str, vars_: dict | None = None, python: str | None = None) -> dict:
    """A one-host exec-hosts document whose workspace (and Python) hold ``name``."""
    ws = tmp / f"ws {name}"
    py = python or str(tmp / f"py {name}")
    return exec_hosts_doc(
        {"h": HostSetup(str(ws), py, py)},
        Inventory(("i",), (Host("h", ("all",), vars_ or {}),)),
        FLEET,
        HEALTH,
        "abc",
        False,
    )


def _fake_python(path: Path, out: Path) -> None:
    """An executable at ``path`` that records its argv, its working directory and the tag as JSON."""
    path.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        f"open({str(out)!r}, 'w').write(json.dumps({{'argv': sys.argv[1:], 'cwd': os.getcwd(),"
        " 'tag': os.environ.get('SB_FLEET_TAG')}))\n"
    )
    path.chmod(0o755)


@pytest.mark.parametrize("name", HOSTILE)
def test_the_fast_command_hands_first_exec_exactly_its_words(tmp_path: Path, name: str) -> None:
    doc = _doc(tmp_path, name, {"sb_path_sysfs": "/host/sys", "sb_tool_dir": f"/t/{name}"})
    ws = Path(doc["hosts"]["h"]["workspace"])
    (ws / "suite-abc" / "sb_bench" / "host").mkdir(parents=True)
    (ws / "suite-abc" / "sb_bench" / "host" / "first_exec.py").write_text("")
    out = tmp_path / "argv.json"
    _fake_python(Path(doc["hosts"]["h"]["python"]), out)
    step = FirstStep("RUN_MARK", ("PYTHONPATH=suite", f"X={name}"), ("-m", "sb_bench.host.runner", "--a"), 60)
    checks = HealthFirst("HEALTH_MARK", 30, 5, True)
    cmd = fast_commands(doc, ["h"], f"run {name}", checks, step)["h"]
    p = subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, text=True, timeout=30, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert NEED_SUITE not in p.stdout  # exec'd: nothing after it ran
    got = json.loads(out.read_text())
    assert got["cwd"] == str(ws) and got["tag"] == f"run {name}/h"
    assert got["argv"][:2] == ["suite/sb_bench/host/first_exec.py", "--spec-b64"] and len(got["argv"]) == 3
    assert os.readlink(ws / "suite") == "suite-abc"
    spec = load_spec(got["argv"][2])  # first_exec's own parser accepts it
    assert spec["prep"] == ["--install", "never", "--min-free-gb", "0", "--host", "h", "--no-torch"]
    assert spec["step"] == {
        "mark": "RUN_MARK",
        "env": ["PYTHONPATH=suite", f"X={name}", "SB_PATH_SYSFS=/host/sys"],
        "python": doc["hosts"]["h"]["python"],
        "args": ["-m", "sb_bench.host.runner", "--a", "--host", "h"],
    }
    assert spec["health"] == {
        "args": health_args(doc, "h"),
        "timeout": 30,
        "kill_after": 5,
        "mark": "HEALTH_MARK",
        "go_on": True,
    }
    args = spec["health"]["args"]
    assert args[args.index("--tool-dir") + 1] == f"/t/{name}" and args[args.index("--procfs") + 1] == "/proc"
    assert args[args.index("--expect-b64") + 1] == "RQ=="  # the default profile's
    assert not list(tmp_path.glob("pwned-*")) and not list(ws.glob("pwned-*"))


def test_a_host_without_the_suite_prints_the_need_suite_line_only(tmp_path: Path) -> None:
    doc = _doc(tmp_path, "cold")
    Path(doc["hosts"]["h"]["workspace"]).mkdir()
    out = tmp_path / "argv.json"
    _fake_python(Path(doc["hosts"]["h"]["python"]), out)
    cmd = fast_commands(doc, ["h"], "r", None, None)["h"]
    p = subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, text=True, timeout=30, cwd=tmp_path)
    assert (p.returncode, p.stdout) == (0, NEED_SUITE + "\n") and not out.exists()
    # no workspace at all, or no such Python: the same line
    p = subprocess.run(
        ["/bin/sh", "-c", fast_commands(_doc(tmp_path, "none"), ["h"], "r", None, None)["h"]],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert p.stdout == NEED_SUITE + "\n"


def test_a_workspace_under_home_is_taken_from_home_on_the_host(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "my ws" / "suite-abc" / "sb_bench" / "host").mkdir(parents=True)
    (home / "my ws" / "suite-abc" / "sb_bench" / "host" / "first_exec.py").write_text("")
    out = tmp_path / "argv.json"
    py = tmp_path / "python"
    _fake_python(py, out)
    doc = exec_hosts_doc(
        {"h": HostSetup("~/my ws", str(py), str(py))},
        Inventory(("i",), (Host("h", ("all",), {}),)),
        FLEET,
        HEALTH,
        "abc",
        True,
    )
    cmd = fast_commands(doc, ["h"], "r", None, None)["h"]
    env = {"HOME": str(home), "PATH": os.environ["PATH"]}
    p = subprocess.run(["/bin/sh", "-c", cmd], capture_output=True, text=True, timeout=30, env=env)
    assert p.returncode == 0, p.stderr
    assert json.loads(out.read_text())["cwd"] == str(home / "my ws")
    spec = load_spec(json.loads(out.read_text())["argv"][2])
    assert spec["health"] is None and spec["step"] is None and "--no-torch" not in spec["prep"]


def test_the_suite_invocation_unpacks_and_execs_first_exec_with_the_same_spec(tmp_path: Path) -> None:
    name = HOSTILE[4]
    doc = _doc(tmp_path, name, {"sb_health_profile": "gpu8"})
    out = tmp_path / "argv.json"
    _fake_python(Path(doc["hosts"]["h"]["python"]), out)
    src = tmp_path / "src" / "suite-abc" / "sb_bench" / "host"
    src.mkdir(parents=True)
    (src.parent / "__init__.py").write_text("")
    (src / "first_exec.py").write_text("")
    archive = subprocess.run(
        ["sh", "-c", "tar -czf - -C src suite-abc | base64"], capture_output=True, cwd=tmp_path, check=True
    ).stdout
    checks = HealthFirst("M", 1, 1, False)
    inv = suite_invocations(doc, ["h"], "r", checks, None)["h"]
    assert inv["argv"][:4] == ["/bin/sh", "-c", DEPLOY_BOOTSTRAP, "sb-fleet-deploy"] and inv["tag"] == "r/h"
    p = subprocess.run(inv["argv"], input=archive, capture_output=True, timeout=30, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    got = json.loads(out.read_text())
    assert got["cwd"] == doc["hosts"]["h"]["workspace"]
    assert got["argv"][2] == exec_spec(doc, "h", checks, None)  # the fast path's spec
    spec = load_spec(got["argv"][2])
    args = spec["health"]["args"]
    assert args[args.index("--expect-b64") + 1] == "R1BVOA=="  # the host's own profile


def test_the_exec_bound_adds_the_checks_and_the_step() -> None:
    assert exec_timeout(600, None, None) == 600
    assert exec_timeout(600, HealthFirst("m", 30, 5, False), FirstStep("m", (), (), 120)) == 600 + 35 + 120


def test_a_host_with_an_unknown_profile_is_a_key_error_the_stage_checked_first(tmp_path: Path) -> None:
    doc = _doc(tmp_path, "p", {"sb_health_profile": "nope"})
    with pytest.raises(KeyError):
        health_args(doc, "h")
