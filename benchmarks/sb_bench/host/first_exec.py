"""validate's one exec on a host whose suite is in place: the health checks, hostprep and the plan's first
step in ONE Python process (``python suite/sb_bench/host/first_exec.py --spec-b64 ...``).

Each Python start costs 80-110 ms of CPU on a small host and the checks, compiled from the inline zip
that ``check.yml`` sends, another 60 ms: three processes per host were most of the nightly gate's host
CPU (docs/speed.md). Here the modules come from the suite (their bytecode cached), and:

1. the health checks run in a forked child in its own process group, bounded as coreutils' ``timeout
   -k KILL_AFTER TIMEOUT`` bounds them in ``check.yml``: SIGTERM to the group at ``timeout`` seconds
   (exit status 124), SIGKILL ``kill_after`` seconds later (137); their exit status follows on the
   marker line (stdout and stderr) that sb-fleet cuts the output at; a host whose checks did not pass
   stops there (exit 0) unless ``go_on``;
2. hostprep's ``main`` in this process: its facts are the last stdout line before the next marker; a
   host that is not ready exits with hostprep's status;
3. the step's marker line (stdout and stderr), the step's environment (``fleet.env``, ``PYTHONPATH``)
   set, and the runner's ``main`` in this process, the benchmarks started with the suite's interpreter
   (the venv's, when there is one: ``--python``); the exit status is the runner's.

The spec is base64 of a JSON object (data: no template engine or shell reads it)::

    {"health": {"args": [...], "timeout": 30, "kill_after": 5, "mark": "...", "go_on": false} | null,
     "prep": [...hostprep's arguments],
     "step": {"mark": "...", "env": ["K=V", ...], "python": "venv/bin/python", "args": [...]} | null,
     "ship": {"dir": "...", "mark": "...", "max_files": N, "max_file_bytes": N, "max_bytes": N} | absent}

``step.args`` are the runner's (``-m sb_bench.host.runner`` first, as the run stage passes them).
``ship``: after the step, its results directory follows on stdout, after the marker line
(:mod:`sb_bench.host.ship_results`): collect then needs no session of its own on this host.
"""

from __future__ import annotations

import base64
import json
import os
import select
import signal
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script from the workspace: the suite's root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

RUNNER_MODULE = ["-m", "sb_bench.host.runner"]
TIMEOUT_RC = 124  # coreutils' timeout: ended at the deadline by SIGTERM
KILLED_RC = 128 + signal.SIGKILL  # ... and by SIGKILL kill_after seconds later


class SpecError(ValueError):
    pass


def load_spec(text: str) -> dict[str, Any]:
    try:
        spec = json.loads(base64.b64decode(text, validate=True).decode())
    except (ValueError, UnicodeDecodeError) as exc:
        raise SpecError(f"--spec-b64 is not base64 of a JSON object ({exc})") from exc
    if not isinstance(spec, dict) or not _strings(spec.get("prep")):
        got = spec.get("prep") if isinstance(spec, dict) else spec
        raise SpecError(f"--spec-b64: 'prep' must be a list of strings, not {json.dumps(got)[:200]}")
    health, step = spec.get("health"), spec.get("step")
    if health is not None and not (
        isinstance(health, dict)
        and _strings(health.get("args"))
        and isinstance(health.get("mark"), str)
        and all(isinstance(health.get(k), (int, float)) for k in ("timeout", "kill_after"))
    ):
        raise SpecError("--spec-b64: 'health' must have args, mark, timeout and kill_after")
    if step is not None and not (
        isinstance(step, dict)
        and _strings(step.get("args"))
        and step["args"][:2] == RUNNER_MODULE
        and _strings(step.get("env"))
        and isinstance(step.get("mark"), str)
        and isinstance(step.get("python"), str)
    ):
        raise SpecError(f"--spec-b64: 'step' must have mark, env, python and args starting {RUNNER_MODULE}")
    ship = spec.get("ship")
    if ship is not None and not (
        isinstance(ship, dict)
        and all(isinstance(ship.get(k), str) and ship[k] for k in ("dir", "mark"))
        and all(type(ship.get(k)) is int for k in ("max_files", "max_file_bytes", "max_bytes"))
    ):
        raise SpecError("--spec-b64: 'ship' must have dir, mark, max_files, max_file_bytes and max_bytes")
    return spec


def _strings(v: object) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def mark(line: str) -> None:
    """A marker line on both streams: sb-fleet cuts each stream there (deploy_stage._cut)."""
    sys.stdout.flush()
    sys.stderr.flush()
    print(line, flush=True)
    print(line, file=sys.stderr, flush=True)


def _checks_child(args: list[str]) -> None:
    """In the forked child: the checks, then the process ends with their status (never returns)."""
    rc = 1
    try:
        from sb_bench.health import runner as checks

        rc = checks.main(args)  # it ends the process itself; a return is a status too
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - the child must end here, whatever happened
        import traceback

        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(rc if isinstance(rc, int) else 1)


def _status(st: int) -> int:
    """A wait status as the shell's ``$?``."""
    return os.WEXITSTATUS(st) if os.WIFEXITED(st) else 128 + os.WTERMSIG(st)


def _wait(pid: int, seconds: float) -> int | None:
    """The child's status, or None if it has not ended within ``seconds``."""
    end = time.monotonic() + seconds
    fd = -1
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # Linux < 5.3: poll (a few checks a second; this is rare)
        pass
    try:
        while True:
            done, st = os.waitpid(pid, os.WNOHANG)
            if done:
                return _status(st)
            left = end - time.monotonic()
            if left <= 0:
                return None
            if fd >= 0:
                select.select([fd], [], [], left)
            else:
                time.sleep(min(left, 0.05))
    finally:
        if fd >= 0:
            os.close(fd)


def _kill_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def bounded_checks(args: list[str], timeout: float, kill_after: float) -> int:
    """The health checks in a child of their own process group, within ``timeout`` seconds: the exit
    status coreutils' ``timeout -k kill_after timeout`` would give (124 at the deadline, 137 if SIGKILL
    was needed)."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            try:
                os.setpgid(0, 0)
            except OSError:
                pass
            for sig in (signal.SIGTERM, signal.SIGINT):  # as timeout's command: the default, not a handler
                signal.signal(sig, signal.SIG_DFL)  # its parent may have set (the runner's, a test's)
            _checks_child(args)
        finally:
            os._exit(1)  # _checks_child ends the process itself; nothing of the parent's runs on here
    try:
        os.setpgid(pid, pid)  # both sides set it: no window where a signal to the group misses it
    except OSError:
        pass
    rc = _wait(pid, timeout)
    if rc is not None:
        return rc
    _kill_group(pid, signal.SIGTERM)
    _kill_group(pid, signal.SIGCONT)
    if _wait(pid, kill_after) is not None:
        return TIMEOUT_RC
    _kill_group(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return KILLED_RC


def run_step(step: dict[str, Any]) -> int:
    from sb_bench.host import runner

    for kv in step["env"]:
        k, sep, v = kv.partition("=")
        if sep and k:
            os.environ[k] = v
    args = list(step["args"][2:])
    py = step["python"]
    if "--python" not in args and os.path.abspath(py) != os.path.abspath(sys.executable) and "/" in py:
        args += ["--python", os.path.abspath(py)]  # the venv's interpreter for the benchmarks
    return runner.main(args)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] != "--spec-b64":
        print("usage: first_exec.py --spec-b64 SPEC", file=sys.stderr)
        return 2
    try:
        spec = load_spec(argv[1])
    except SpecError as exc:
        print(f"sb_bench.host.first_exec: {exc}", file=sys.stderr)
        return 2
    health = spec.get("health")
    if health is not None:
        # The checks, hostprep and the runner share most of their imports (argparse, json, pathlib,
        # dataclasses, subprocess, ...): imported here, once, before the fork, the child inherits them
        # rather than importing them again for its own short life (measured: ~12 ms of a host's ~160 ms).
        import sb_bench.health.runner  # noqa: F401
        from sb_bench.host import hostprep, runner  # noqa: F401

        rc = bounded_checks(health["args"], float(health["timeout"]), float(health["kill_after"]))
        mark(f"{health['mark']} {rc}")
        if rc != 0 and not health.get("go_on"):
            return 0
    from sb_bench.host import hostprep

    try:
        rc = hostprep.main(spec["prep"])
    except SystemExit as exc:  # argparse's own exit
        rc = exc.code if isinstance(exc.code, int) else 2
    if rc != 0:
        return rc
    step = spec.get("step")
    if step is None:
        return 0
    mark(step["mark"])
    rc = run_step(step)
    ship = spec.get("ship")
    if ship is not None:
        from sb_bench.host.ship_results import ship as ship_results

        sys.stdout.flush()
        said = ship_results(sys.stdout.buffer, ship)
        if said != "sent":
            print(f"sb_bench.host.first_exec: results {said}; collect fetches them", file=sys.stderr)
    return rc


if __name__ == "__main__":
    from sb_bench.core.process_end import end_process

    # the step's processes are waited for and its results synced: no finalisation (~10 ms of the host's CPU)
    end_process(main())
