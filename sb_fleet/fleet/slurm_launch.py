"""``launcher: slurm``: every step runs inside a Slurm allocation, with ``srun`` on each node, instead of SSH.

The allocation is the one given (``slurm.job_id``, else ``$SLURM_JOB_ID``) or one that sb-fleet makes
for the command with ``salloc --no-shell`` (``slurm.partition``, ``reservation``, ``account``,
``--exclusive``: users' jobs and the benchmarks never share a node) and cancels at its end. Nodes that
Slurm will not allocate (down, drained, failed) are left out with the reason and end with that outcome;
nodes that sb-fleet itself drained earlier are re-tested when the allocation is in a reservation (no user
job can land there): they are resumed for the command and drained again with their old reason when it
ends, so that ``--drain`` decides their state from the new verdict.

Ansible still runs the playbooks: its connection to each node is ``srun`` (the ``sb_srun`` connection
plugin, :mod:`sb_fleet.fleet.srun_plugin.sb_srun`), one step per task, ``srun --jobid J --overlap
--nodes 1 --nodelist NODE /bin/sh -c CMD``. Collect reads each node through the same kind of step
(:class:`SrunChannel`). Every Slurm command is an argument vector, never a shell on the jump box; the
steps see a small, fixed environment (:func:`task_env`), never the jump box's secrets.
"""

from __future__ import annotations

import contextlib
import math
import os
import pwd
import re
import signal
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sb_fleet.config.hostlist import compress, expand
from sb_fleet.config.slurm_inventory import SlurmSettings
from sb_fleet.errors import InfraError, UsageError
from sb_fleet.fleet.slurm_drain import node_states, slurm_command

PLUGIN_DIR = Path(__file__).resolve().parent / "srun_plugin"
CONNECTION = "sb_srun"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# What a step sees of the jump box's environment: who and where, nothing else (no tokens, no venv).
TASK_ENV_KEYS = ("HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ")
# srun's own lines on stderr that only report the task's end (the task's exit status says it too)
_TASK_END = re.compile(
    r"^srun: error: \S+: tasks? [0-9,-]+: (Exited with exit code \d+|Killed|Terminated)\s*$"
)
_OWN_LINE = re.compile(r"^(srun|slurmstepd|salloc): ")
_TIME_LIMIT = re.compile(r"CANCELLED AT \S+ DUE TO TIME LIMIT")
_GRANTED = re.compile(r"Granted job allocation (\d+)")
OWN_REASON = re.compile(r"^sb-fleet (\S+): (.*)$", re.S)  # slurm_drain.drain_reason's shape
COMMAND_TIMEOUT_S = 60


def task_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of srun and so of every step: HOME, USER, LOGNAME, LANG, LC_ALL, TZ as the jump
    box has them, a standard PATH and ``SLURM_CONF`` (srun finds the controller with it); no other
    ``SLURM_*`` variable (inside an allocation they would set the step's shape)."""
    environ = os.environ if environ is None else environ
    env = {k: environ[k] for k in TASK_ENV_KEYS if k in environ}
    env["PATH"] = DEFAULT_PATH
    if "SLURM_CONF" in environ:
        env["SLURM_CONF"] = environ["SLURM_CONF"]
    return env


def srun_argv(
    srun: str, job_id: str, node: str, argv: list[str], timeout_s: float | None = None
) -> list[str]:
    """One step of one task on ``node`` inside job ``job_id`` running ``argv``. ``--overlap``: steps
    share the allocation's CPUs (a run step and a collect may overlap); a timeout becomes the step's
    time limit (whole minutes, one more as a margin: the caller's own timeout comes first)."""
    out = [
        srun,
        f"--jobid={job_id}",
        "--overlap",
        "--nodes=1",
        "--ntasks=1",
        f"--nodelist={node}",
        "--quiet",
        "--export=ALL",  # the environment srun runs with: task_env(), nothing else
        "--input=all",
    ]
    if timeout_s:
        out.append(f"--time={math.ceil(timeout_s / 60) + 1}")
    return [*out, "--", *argv]


def split_stderr(err: str) -> tuple[str, list[str]]:
    """A step's stderr: the task's own text, and srun's lines (``srun: ...``) apart. The lines that only
    say how the task ended are dropped (its exit status says it)."""
    own: list[str] = []
    task: list[str] = []
    for line in err.splitlines(keepends=True):
        bare = line.rstrip("\n")
        if _TASK_END.match(bare):
            continue
        (own if _OWN_LINE.match(bare) else task).append(line)
    return "".join(task), [x.rstrip("\n") for x in own]


def launch_failure(rc: int, out: str, own: list[str]) -> str | None:
    """srun's own failure (the step never ran: bad job, node not in it, controller gone), else None."""
    if rc == 0 or out.strip():
        return None
    errors = [x for x in own if re.match(r"^srun: (error|fatal): ", x) and not _TIME_LIMIT.search(x)]
    return "; ".join(errors)[:400] if errors else None


def timed_out(own: list[str]) -> bool:
    return any(_TIME_LIMIT.search(x) for x in own)


def step_end(rc: int, out: str, err: str) -> tuple[str, str | None]:
    """A finished step's stderr read: the task's own text (with a line saying so where the step's time
    limit ended it), and srun's own failure (the step never ran) or None."""
    task, own = split_stderr(err)
    if timed_out(own):
        task += "sb-fleet: the srun step timed out (its time limit)\n"
    return task, launch_failure(rc, out, own)


@dataclass(frozen=True)
class SrunReach:
    """How steps reach the nodes under ``launcher: slurm``: srun in this job; the nodes left out of it,
    each with the reason (their outcome in every stage)."""

    srun: str
    job_id: str
    left_out: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Allocation:
    job_id: str
    nodes: tuple[str, ...]  # the nodes steps may run on
    made: bool = False  # sb-fleet made it (and cancels it at the end)
    left_out: dict[str, str] = field(default_factory=dict)  # node -> why it is not in the allocation
    borrowed: dict[str, str] = field(default_factory=dict)  # node -> the sb-fleet drain reason it had
    out_of_service: set[str] = field(default_factory=set)  # left out because Slurm has them out of service


def _run(argv: list[str], timeout: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    return slurm_command(argv, timeout, env=task_env())


def _one_line(s: str) -> str:
    return " ".join(s.split())[:400]


def job_nodes(job_id: str, s: SlurmSettings) -> tuple[str, ...]:
    """The nodes of a running job (``squeue -j J -h -o '%T|%N'``)."""
    r = _run([s.squeue, "-j", job_id, "-h", "-o", "%T|%N"])
    line = r.stdout.strip().splitlines()[0] if r.stdout.strip() else ""
    if r.returncode != 0 or "|" not in line:
        raise UsageError(
            f"slurm job {job_id}: not found ({_one_line(r.stderr) or 'squeue lists nothing'}); "
            "give a running allocation (slurm.job_id or SLURM_JOB_ID) or none, and sb-fleet makes one"
        )
    state, nodes = line.split("|", 1)
    if state != "RUNNING":
        raise UsageError(f"slurm job {job_id} is {state}, not RUNNING: wait for it, or give another")
    return tuple(expand(nodes.strip()))


def unavailable(state: str) -> bool:
    s = state.lower()
    # maint alone is an idle node in a maintenance reservation: allocatable inside it
    return any(w in s for w in ("drain", "down", "fail", "reboot", "future", "unknown"))


def reserved(state: str) -> bool:
    """In a reservation (``reserved``, ``maint``): allocatable only inside it."""
    s = state.lower()
    return "reserved" in s or "maint" in s


def out_of_service_reason(state: str, reason: str, in_reservation: bool) -> str:
    """Why a node Slurm will not give the run is out of service, in the words of its outcome: sb-fleet's own
    drain (``sb-fleet <run>: <finding>``) as "drained by sb-fleet since <run>: <finding>", word for word,
    any other state with Slurm's state and reason as they are."""
    own = OWN_REASON.match(reason)
    if own is not None and "drain" in state.lower():
        hint = "" if in_reservation else " (slurm.reservation lets sb-fleet re-test it)"
        since = "by its health check" if own.group(1) == "health" else f"since {own.group(1)}"
        return f"drained by sb-fleet {since}: {own.group(2)}{hint}"
    why = f" ({reason})" if reason else ""
    return f"slurm: node is {state}{why}: out of service, not tested"


def foreign_out_of_service(nodes: list[Mapping[str, object]]) -> dict[str, str]:
    """The SSH launcher's nodes out of service, from the Slurm inventory's query (``inventory/
    slurm-query.json``'s ``nodes``: name, state, reason): drained, down or failed for another reason than
    sb-fleet's (a node sb-fleet drained is re-tested over SSH: no job can land on it). A node in a
    reservation is tested (the nightly's maintenance reservation keeps users' jobs off it)."""
    out: dict[str, str] = {}
    for n in nodes:
        name, state, reason = (str(n.get(k) or "") for k in ("name", "state", "reason"))
        if name and unavailable(state) and OWN_REASON.match(reason) is None:
            why = f" ({reason})" if reason else ""
            out[name] = (
                f"slurm: node is {state}{why}: out of service, not tested (--include-drained tests it)"
            )
    return out


def job_name(run_id: str) -> str:
    """The name of the allocation sb-fleet asks for the run (squeue shows it; a stop cancels by it)."""
    return f"sb-fleet-{run_id}"[:117]


def salloc_argv(s: SlurmSettings, nodes: list[str], run_id: str) -> list[str]:
    argv = [
        s.salloc,
        "--no-shell",
        f"--job-name={job_name(run_id)}",
        f"--nodes={len(nodes)}",
        f"--nodelist={compress(nodes)}",
        f"--time={s.time_limit}",
        f"--immediate={s.grant_timeout}",
    ]
    if s.exclusive:
        argv.append("--exclusive")
    for flag, value in (("partition", s.partition), ("reservation", s.reservation), ("account", s.account)):
        if value:
            argv.append(f"--{flag}={value}")
    return argv


def allocate(hosts: list[str], s: SlurmSettings, run_id: str) -> Allocation:
    """The allocation the command's steps run in (see the module's docstring)."""
    given = s.job_id or os.environ.get("SLURM_JOB_ID")
    if given:
        inside = set(job_nodes(str(given), s))
        return Allocation(
            str(given),
            tuple(h for h in hosts if h in inside),
            left_out={h: f"not a node of slurm job {given}" for h in hosts if h not in inside},
        )
    states = node_states(hosts, s.sinfo)
    left_out: dict[str, str] = {}
    borrowed: dict[str, str] = {}
    out_of_service: set[str] = set()
    for h in hosts:
        if h not in states:
            left_out[h] = "not a Slurm node (sinfo does not list it)"
            continue
        node = states[h]
        state, reason = node.state, node.reason
        if not unavailable(state) and not (s.reservation is None and reserved(state)):
            continue
        if s.reservation and state.startswith("drain") and node.ours:
            borrowed[h] = reason  # ours, and only the reservation's jobs can land on it: re-test it
        else:
            left_out[h] = out_of_service_reason(state, reason, s.reservation is not None)
            out_of_service.add(h)
    for h in borrowed:
        r = _run([s.scontrol, "update", f"nodename={h}", "state=resume"])
        if r.returncode != 0:
            left_out[h] = f"slurm: could not resume it for the test: {_one_line(r.stderr)}"
    borrowed = {h: why for h, why in borrowed.items() if h not in left_out}
    chosen = [h for h in hosts if h not in left_out]
    alloc = Allocation("", tuple(chosen), True, left_out, borrowed, out_of_service & set(left_out))
    if not chosen:
        return alloc
    try:
        r = _run(salloc_argv(s, chosen, run_id), timeout=s.grant_timeout + COMMAND_TIMEOUT_S)
    except BaseException:  # Ctrl-C/SIGTERM (a KeyboardInterrupt) or no answer while salloc waited
        # subprocess.run killed salloc, which cannot withdraw its request from slurmctld then: the request,
        # or the allocation granted in the meantime, is cancelled here by its name.
        withdraw(s, run_id)
        restore(alloc, s)
        raise
    m = _GRANTED.search(r.stderr + r.stdout)
    if r.returncode != 0 or not m:
        restore(alloc, s)
        raise InfraError(
            f"salloc could not allocate {compress(chosen)} within {s.grant_timeout} s "
            f"(exit {r.returncode}): {_one_line(r.stderr)}; free the nodes, or give a reservation "
            "(slurm.reservation) or an allocation (slurm.job_id)"
        )
    alloc.job_id = m.group(1)
    return alloc


def withdraw(s: SlurmSettings, run_id: str) -> None:
    """Cancel this user's jobs named for the run (a pending salloc request left behind by a stop); never
    raises: the stop's own error is the one to tell."""
    try:
        _run([s.scancel, f"--name={job_name(run_id)}", f"--user={pwd.getpwuid(os.getuid()).pw_name}"])
    except InfraError:
        pass


def restore(alloc: Allocation, s: SlurmSettings) -> None:
    """Drain again, with the reason they had, the nodes resumed for the test."""
    for h, why in alloc.borrowed.items():
        _run([s.scontrol, "update", f"nodename={h}", "state=drain", f"reason={why}"])


def release(alloc: Allocation, s: SlurmSettings) -> None:
    """Cancel the allocation sb-fleet made; restore the nodes it borrowed."""
    try:
        if alloc.made and alloc.job_id:
            _run([s.scancel, alloc.job_id])
    finally:
        restore(alloc, s)


_ACTIVE: list[Allocation] = []  # the allocation of this process, while a command runs in it


@contextlib.contextmanager
def allocation(hosts: list[str], s: SlurmSettings, run_id: str) -> Iterator[Allocation]:
    """The command's allocation: one per process (a sub-run of validate runs inside its parent's)."""
    if _ACTIVE:
        outer = _ACTIVE[-1]
        yield Allocation(
            outer.job_id,
            tuple(h for h in hosts if h in outer.nodes),
            left_out={
                h: outer.left_out.get(h, "not in the allocation") for h in hosts if h not in outer.nodes
            },
        )
        return
    alloc = allocate(hosts, s, run_id)
    _ACTIVE.append(alloc)
    try:
        yield alloc
    finally:
        _ACTIVE.pop()
        release(alloc, s)


def end_step(proc: subprocess.Popen[bytes]) -> None:
    """Stop an srun started in its own session: SIGTERM (srun ends its step), SIGKILL after 5 s."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def srun_command(srun: str, job_id: str, node: str, command: str, timeout: float) -> tuple[int, str, str]:
    """One shell command on a node: (rc, stdout, the task's stderr); srun's own failure raises
    ``ConnectionError``."""
    try:
        r = subprocess.run(
            srun_argv(srun, job_id, node, ["/bin/sh", "-c", command], timeout),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=task_env(),
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise TimeoutError(f"no answer within {timeout:.0f} s") from None
    task, own = split_stderr(r.stderr)
    failure = launch_failure(r.returncode, r.stdout, own)
    if failure:
        raise ConnectionError(f"srun: {failure}")
    return r.returncode, r.stdout, task
