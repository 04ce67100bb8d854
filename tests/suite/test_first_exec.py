"""validate's one exec on a host (sb_bench.host.first_exec, issue 37): the health checks, hostprep and the
first step in one Python process, run here as the playbook runs it (the script from a workspace whose
``suite`` links to the suite), and its bound on the checks held against coreutils' ``timeout -k``."""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sb_bench.host import first_exec
from sb_bench.host.runner import RECORD_PREFIX
from suite_helpers import BENCH

HEALTH_MARK = "TEST_HEALTH_DONE"
STEP_MARK = "TEST_RUN_FOLLOWS"


def b64(d: dict) -> str:
    return base64.b64encode(json.dumps(d).encode()).decode()


def step_args(run_id: str = "R1") -> list[str]:
    spec = {
        "schema_version": 1,
        "run_id": run_id,
        "step": "step01",
        "entries": [
            {
                "key": "noop",
                "benchmark": "noop",
                "timeout": 60,
                "params": {"num_steps": 1, "num_warmup": 0},
                "modes": [{"name": "local", "proc_num": 1}],
            }
        ],
    }
    return ["-m", "sb_bench.host.runner", "--spec-b64", b64(spec), "--results", f"runs/{run_id}/results"]


def health(ws: Path, expect: dict, **kw) -> dict:
    args = [
        "--json",
        "--host",
        "n1",
        "--sysfs",
        "/sys",
        "--procfs",
        "/proc",
        "--tool-dir",
        "",
        "--workspace",
        str(ws),
        "--timeout",
        "10",
        "--expect-b64",
        b64(expect),
    ]
    return {"args": args, "timeout": 60, "kill_after": 5, "mark": HEALTH_MARK, "go_on": False, **kw}


PREP = ["--install", "never", "--min-free-gb", "0", "--host", "n1", "--no-torch"]


@pytest.fixture
def ws(tmp_path) -> Path:
    """A workspace as deploy leaves it: the suite's copy, linked as ``suite``."""
    w = tmp_path / "ws"
    w.mkdir()
    shutil.copytree(BENCH, w / "suite-x", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    (w / "suite").symlink_to("suite-x")
    return w


def run_exec(ws: Path, spec: dict, timeout: float = 180) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # as on a host: nothing on the path
    return subprocess.run(
        [sys.executable, "suite/sb_bench/host/first_exec.py", "--spec-b64", b64(spec)],
        cwd=ws,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_checks_prep_and_the_step_in_one_process_in_order(ws):
    spec = {
        "health": health(ws, {"profile": None}),
        "prep": PREP,
        "step": {
            "mark": STEP_MARK,
            "env": ["PYTHONPATH=suite"],
            "python": sys.executable,
            "args": [*step_args(), "--host", "n1"],
        },
    }
    p = run_exec(ws, spec)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    h = lines.index(f"{HEALTH_MARK} 0")
    s = lines.index(STEP_MARK)
    doc = json.loads("\n".join(lines[:h]))  # the checks' one JSON document, before their marker
    assert doc["host"] == "n1" and doc["checks"], doc
    facts = json.loads(lines[s - 1])  # hostprep's facts: the last line before the step's marker
    assert facts["workspace"] == str(ws) and "error" not in facts
    assert lines[-1].startswith(RECORD_PREFIX)
    rec = json.loads(lines[-1][len(RECORD_PREFIX) :])
    assert (rec["host"], rec["run_id"], rec["entries"]["noop"]["status"]) == ("n1", "R1", "ok")
    # both markers on stderr too (sb-fleet cuts each stream at its own copy), in the same order
    err = p.stderr.splitlines()
    assert err.index(f"{HEALTH_MARK} 0") < err.index(STEP_MARK)
    # the benchmark found the suite through the step's PYTHONPATH (the process had none: see run_exec)
    assert (ws / "runs/R1/results/noop/rank0.json").is_file()


def test_a_host_whose_checks_fail_stops_after_their_marker(ws):
    # a rule this host cannot meet: eight GPUs (a GPU host under test would need another count)
    spec = {"health": health(ws, {"profile": "t", "gpu": {"count": 8}}), "prep": PREP, "step": None}
    p = run_exec(ws, spec)
    assert p.returncode == 0, p.stdout + p.stderr
    before, _, after = p.stdout.partition(f"{HEALTH_MARK} 1\n")
    assert not after, p.stdout  # hostprep never ran
    assert json.loads(before)["verdict"] == "fail"


def test_go_on_runs_hostprep_after_failed_checks(ws):
    spec = {"health": health(ws, {"profile": None}, go_on=True, args=["--no-such-flag"]), "prep": PREP}
    p = run_exec(ws, spec)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == f"{HEALTH_MARK} 2"  # argparse's status for the checks' bad flag
    assert json.loads(lines[-1])["workspace"] == str(ws)


def test_failed_checks_without_go_on_stop_the_host(ws):
    spec = {"health": health(ws, {"profile": None}, args=["--no-such-flag"]), "prep": PREP}
    p = run_exec(ws, spec)
    assert p.returncode == 0 and p.stdout.splitlines() == [f"{HEALTH_MARK} 2"], p.stdout + p.stderr


def test_hostprep_failure_is_the_exit_status_and_the_step_never_starts(ws):
    prep = ["--install", "never", "--min-free-gb", "1e12", "--host", "n1", "--no-torch"]
    spec = {
        "health": None,
        "prep": prep,
        "step": {"mark": STEP_MARK, "env": [], "python": sys.executable, "args": step_args()},
    }
    p = run_exec(ws, spec)
    assert p.returncode == 1, p.stdout + p.stderr
    assert STEP_MARK not in p.stdout and "GB free" in json.loads(p.stdout.splitlines()[-1])["error"]


def test_the_runners_status_and_last_lines_survive_the_exits_quick_end(ws):
    """first_exec ends without the interpreter's finalisation (end_process): the runner's status is still the
    exit status, and its last lines, written to a pipe (block-buffered), still arrive."""
    args = step_args("R2")
    spec_doc = json.loads(base64.b64decode(args[3]))
    spec_doc["entries"][0]["benchmark"] = "no-such-benchmark"
    args[3] = b64(spec_doc)
    spec = {
        "health": None,
        "prep": PREP,
        "step": {"mark": STEP_MARK, "env": ["PYTHONPATH=suite"], "python": sys.executable, "args": args},
    }
    p = run_exec(ws, spec)
    assert p.returncode == 1, p.stdout + p.stderr  # an entry failed: the runner's status
    rec = json.loads(p.stdout.splitlines()[-1][len(RECORD_PREFIX) :])
    assert rec["entries"]["noop"]["status"] == "failed", rec


@pytest.mark.parametrize(
    "bad",
    ["not base64!", b64({"prep": "x"}), b64({"prep": [], "step": {"args": ["rm", "-rf"]}}), b64([1])],
)
def test_a_bad_spec_is_refused_with_status_2(ws, bad):
    p = subprocess.run(
        [sys.executable, "suite/sb_bench/host/first_exec.py", "--spec-b64", bad],
        cwd=ws,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2 and "--spec-b64" in p.stderr and not p.stdout


# -- the bound on the checks, against coreutils' timeout -k ---------------------------------------------
def _sleep_forever(ignore_term: bool) -> None:
    if ignore_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        time.sleep(1)


def coreutils_rc(ignore_term: bool) -> int:
    trap = "trap '' TERM; " if ignore_term else ""
    rc = subprocess.run(
        ["timeout", "-k", "1", "1", "sh", "-c", f"{trap}while :; do sleep 1; done"]
    ).returncode
    return 128 - rc if rc < 0 else rc  # as the shell reports it (timeout sends itself the SIGKILL too)


@pytest.mark.parametrize("ignore_term", [False, True])
def test_the_bound_gives_coreutils_status(monkeypatch, ignore_term):
    if shutil.which("timeout") is None:
        pytest.skip("coreutils' timeout is not installed")
    monkeypatch.setattr(first_exec, "_checks_child", lambda args: _sleep_forever(ignore_term))
    t0 = time.monotonic()
    rc = first_exec.bounded_checks([], 1, 1)
    took = time.monotonic() - t0
    assert rc == coreutils_rc(ignore_term) == (137 if ignore_term else 124)
    assert 1 <= took < (2 if ignore_term else 1) + 10


def test_the_bound_ends_the_checks_whole_process_group(monkeypatch, tmp_path):
    pidfile = tmp_path / "grandchild.pid"

    def child(args):
        p = subprocess.Popen(["sleep", "300"])  # a tool the checks started, e.g. a hung nvidia-smi
        pidfile.write_text(str(p.pid))
        _sleep_forever(False)

    monkeypatch.setattr(first_exec, "_checks_child", child)
    assert first_exec.bounded_checks([], 1, 1) == 124
    pid = int(pidfile.read_text())
    for _ in range(100):  # reaped by init once killed; poll
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    break
        except OSError:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the checks' child process {pid} outlived their bound")


def test_a_check_that_ends_in_time_gives_its_own_status(monkeypatch):
    monkeypatch.setattr(first_exec, "_checks_child", lambda args: os._exit(int(args[0])))
    assert first_exec.bounded_checks(["1"], 5, 1) == 1
    assert first_exec.bounded_checks(["0"], 5, 1) == 0


def test_the_step_runs_the_runner_here_with_the_venvs_python_for_the_benchmarks(monkeypatch, tmp_path):
    from sb_bench.host import runner

    seen: dict = {}
    monkeypatch.setattr(runner, "main", lambda args: seen.update(args=args, env=os.environ.get("SB_X")) or 0)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SB_X", "before")  # restored (absent) after the test
    step = {"mark": STEP_MARK, "env": ["SB_X=a=b"], "python": "venv/bin/python", "args": step_args()}
    assert first_exec.run_step(step) == 0
    assert seen["args"][:2] == ["--spec-b64", step_args()[3]]  # the module's name stripped
    assert seen["args"][-2:] == ["--python", str(tmp_path / "venv/bin/python")]
    assert seen["env"] == "a=b"  # the step's environment, for the runner and what it starts
    # without a venv (the host's Python itself), the runner's default: this interpreter
    seen.clear()
    assert first_exec.run_step({**step, "python": sys.executable}) == 0
    assert "--python" not in seen["args"]
