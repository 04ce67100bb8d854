"""Planted hangs for the stage deadline and stop tests, and the processes of a run, listed.

:func:`hang_python` writes the hosts' Python (``sb_python``): a wrapper that hangs (``exec sleep``) on a
host at a stage named in its control file (lines ``<host> <stage>``, stage: check, deploy or run), and
runs the real interpreter everywhere else. It knows its host from the run's tag, which sb-fleet exports
into every command it runs on a host (``SB_FLEET_TAG=<run id>/<host>``), over SSH and srun alike. A
process of its own (check's inline checks, a run step's runner) hangs as a whole; inside the suite's
first_exec, which runs the checks (in a child), hostprep and the first step's runner in one process, a
small hook (:data:`HANG_HOOK`) replaces the named part's ``main`` with the same ``exec sleep``, in its
place: the checks' child, the exec itself at hostprep, the exec itself in the first step.
:func:`hang_tools` writes, into a directory first on the hosts' PATH, a ``sha256sum`` that hangs collect's
checksums on a host named ``<host> collect`` there: it knows its host from its working directory (the run's
results directory in the host's workspace, ``.../<host>/runs/<run id>/results``), not from a tag, so that
it hangs whether or not collect's commands are tagged.

:func:`run_processes` lists, on this machine (control node and loopback hosts alike), every process of
a run: those carrying the run's host or control-node tag, those whose command line names the run's
id or directory, and those working in the run's directory on a host (``.../runs/<run id>/...``).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

HANG_PYTHON = """#!/bin/sh
# sb-fleet test: hang at the stages that {ctl} names for this host ("<host> <stage>" lines)
host=${{SB_FLEET_TAG##*/}}
case "$*" in
  *sb_bench/host/first_exec.py*) stage=first_exec ;;
  *sb_bench.health*) stage=check ;;
  *hostprep*) stage=deploy ;;
  *sb_bench.host.runner*) stage=run ;;
  *) stage=other ;;
esac
if [ "$stage" = first_exec ] && [ -n "$host" ]; then
  hangs=
  for s in check deploy run; do
    if grep -qxF "$host $s" {ctl} 2>/dev/null; then hangs="$hangs $s"; fi
  done
  if [ -n "$hangs" ]; then SB_TEST_HANGS=$hangs exec {python} {hook} "$@"; fi
fi
if [ -n "$host" ] && grep -qxF "$host $stage" {ctl} 2>/dev/null; then exec sleep 900; fi
exec {python} "$@"
"""

# Run as ``python HOOK suite/sb_bench/host/first_exec.py ARGS``: the named parts' main replaced by a hang,
# then first_exec run as its own __main__ (its sys.path, its argv).
HANG_HOOK = """\
import os, runpy, sys
from pathlib import Path

def hang(*args, **kwargs):
    os.execvp("sleep", ["sleep", "900"])

script = sys.argv[1]
sys.path.insert(0, str(Path(script).resolve().parents[2]))
hangs = os.environ.pop("SB_TEST_HANGS", "").split()
if "check" in hangs:
    from sb_bench.health import runner as checks
    checks.main = hang
if "deploy" in hangs:
    from sb_bench.host import hostprep
    hostprep.main = hang
if "run" in hangs:
    from sb_bench.host import runner
    runner.main = hang
sys.argv = sys.argv[1:]
runpy.run_path(script, run_name="__main__")
"""


def hang_python(directory: Path, python: str = "/usr/bin/python3") -> tuple[Path, Path]:
    """(the wrapper, its control file), both readable by every user (the test fleet's login user)."""
    ctl = directory / "hang-at"
    ctl.write_text("")
    ctl.chmod(0o644)
    hook = directory / "hang-hook.py"
    hook.write_text(HANG_HOOK)
    hook.chmod(0o644)
    wrapper = directory / "hang-python"
    wrapper.write_text(HANG_PYTHON.format(ctl=ctl, python=python, hook=hook))
    wrapper.chmod(0o755)
    return wrapper, ctl


HANG_TOOL = """#!/bin/sh
# sb-fleet test: hang collect's checksums on the hosts that {ctl} names ("<host> collect" lines)
d=$(pwd)
case "$d" in */runs/*/results) host=${{d%/runs/*}}; host=${{host##*/}} ;; *) host= ;; esac
if [ -n "$host" ] && grep -qxF "$host collect" {ctl} 2>/dev/null; then exec sleep 900; fi
exec {tool} "$@"
"""


def hang_tools(bin_dir: Path, ctl: Path) -> None:
    """Collect's ``sha256sum`` in ``bin_dir`` (first on the hosts' PATH), hanging as ``ctl`` says."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    bin_dir.chmod(0o755)
    tool = bin_dir / "sha256sum"
    tool.write_text(HANG_TOOL.format(ctl=ctl, tool="/usr/bin/sha256sum"))
    tool.chmod(0o755)


@dataclass(frozen=True)
class Proc:
    pid: int
    comm: str
    cmdline: str
    why: str  # the tag or the name that makes it the run's

    def __str__(self) -> str:
        return f"{self.pid} {self.comm} ({self.why}): {self.cmdline[:160]}"


def _read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""


def run_processes(run_id: str, run_dir: Path | None = None) -> list[Proc]:
    """Every live process of the run ``run_id`` (see the module's docstring); this process excepted."""
    host_tag = f"SB_FLEET_TAG={run_id}/".encode()
    ctl_tag = f"SB_FLEET_CTL={run_id}:".encode()
    names = [run_id.encode()] + ([str(run_dir).encode()] if run_dir is not None else [])
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        stat = _read(f"/proc/{d}/stat")
        if not stat or stat.rsplit(b")", 1)[-1].split()[:1] in ([b"Z"], [b"X"]):
            continue
        env = _read(f"/proc/{d}/environ").split(b"\0")
        cmd = _read(f"/proc/{d}/cmdline").replace(b"\0", b" ")
        try:
            cwd = os.readlink(f"/proc/{d}/cwd")
        except OSError:
            cwd = ""
        why = ""
        if any(v.startswith(host_tag) for v in env):
            why = "host tag"
        elif any(v.startswith(ctl_tag) for v in env):
            why = "control-node tag"
        elif any(n in cmd for n in names):
            why = "named in its command line"
        elif f"/runs/{run_id}/" in cwd + "/":
            why = "working in the run's directory"
        if why:
            comm = _read(f"/proc/{d}/comm").decode(errors="replace").strip()
            out.append(Proc(int(d), comm, cmd.decode(errors="replace"), why))
    return out


def hung(run_id: str, host: str) -> list[Proc]:
    """The planted hang of ``host`` (its ``sleep``, tagged with the run and the host, or working in the
    run's directory of the host's workspace), while it lives."""
    tag = f"SB_FLEET_TAG={run_id}/{host}".encode()
    where = f"/{host}/runs/{run_id}/"

    def cwd(pid: int) -> str:
        try:
            return os.readlink(f"/proc/{pid}/cwd") + "/"
        except OSError:
            return ""

    return [
        p
        for p in run_processes(run_id)
        if p.comm == "sleep" and (tag in _read(f"/proc/{p.pid}/environ").split(b"\0") or where in cwd(p.pid))
    ]


def wait_for(pred, timeout: float, what: str, step: float = 0.1):  # noqa: ANN001, ANN201
    """``pred()``'s first true value, polled; AssertionError naming ``what`` after ``timeout`` s."""
    t_end = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > t_end:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(step)


def wait_run_gone(run_id: str, run_dir: Path | None, said: str = "", timeout: float = 20) -> None:
    """Poll until no process of the run is left (:func:`run_processes`); else an AssertionError listing
    what is left, and ``said`` (sb-fleet's stderr, its tail)."""
    try:
        wait_for(lambda: not run_processes(run_id, run_dir), timeout, "every process of the run to be gone")
    except AssertionError:
        left = run_processes(run_id, run_dir)
        raise AssertionError(
            "left after the stop:\n" + "\n".join(map(str, left)) + "\n" + said[-2000:]
        ) from None


def run_id_of(run_dir: Path, timeout: float = 60) -> str:
    """The run id of a run being created (its manifest appears when its inputs are written)."""
    import json

    manifest = run_dir / "manifest.json"
    wait_for(manifest.exists, timeout, f"{manifest}")
    return str(json.loads(manifest.read_text())["run_id"])


@dataclass
class Polled:
    """A command run while a probe was polled: its wall time, exit status, output, the run's id, and
    ``seen``: (time, value) of every poll whose value was true."""

    took: float
    returncode: int
    out: str
    err: str
    run_id: str
    seen: list


def run_polled(argv: list[str], run_dir: Path, limit: float, probe, env=None, cwd=None) -> Polled:  # noqa: ANN001
    """Start ``argv`` (an sb-fleet command writing ``run_dir``), call ``probe(run_id)`` every 0.2 s while
    it runs, at most ``limit`` s (then SIGTERM; SIGKILL if it outlives the wait for its output)."""
    import subprocess

    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
    try:
        run_id = run_id_of(run_dir)
        seen = []
        while p.poll() is None and time.monotonic() - t0 < limit:
            value = probe(run_id)
            if value:
                seen.append((time.monotonic(), value))
            time.sleep(0.2)
        took = time.monotonic() - t0
        if p.poll() is None:
            p.terminate()
        out, err = p.communicate(timeout=90)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return Polled(took, p.returncode, out, err, run_id, seen)
