"""One command per host over sb-fleet's own OpenSSH clients, with no Ansible between: validate's nightly
exec and the suite's transfer (:mod:`sb_fleet.fleet.stages.deploy_stage`, issue 37).

Ansible cost the control node ~50 ms of CPU per host for a one-task play (a worker forked per host, its
connection plugin, the result's round trip through the strategy and ansible-runner's events) against
~10 ms for the ssh client itself (docs/speed.md). For a play that is ONE command per host, built by
sb-fleet already (:mod:`sb_fleet.plan.host_exec`), sb-fleet starts the clients itself, ``forks`` at a
time, with the options Ansible's ssh connection would use (:meth:`SshSettings.exec_command`: the same
host key policy, key exchange and master, so collect rides it) and turns each into the outcome the
executor gives a task's result, under the same deadline watch. A host whose inventory asks for anything
this path does not do as Ansible would (a password, privilege escalation, another connection, other
``ansible_*`` connection variables) goes through the playbook as before (:func:`direct_reason`).

Each host's output is kept up to :data:`KEEP_BYTES` per stream (its head and its tail, the middle cut
with a line saying how much): one host that prints without end costs its own result, not the control
node's memory. A task that asks for the hosts' results on stdout (``ExecTask.ship``: validate's nightly
exec) has what follows its marker line spooled to a private file per host, bounded
(:mod:`sb_fleet.fleet.exec_results`), for collect to read.
"""

from __future__ import annotations

import json
import os
import re
import resource
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from sb_fleet.config.inventory import Host
from sb_fleet.fleet import reaper
from sb_fleet.fleet.deadline_watch import DeadlineWatch
from sb_fleet.fleet.exec_phases import ExecPhases, Phase, PhaseClock
from sb_fleet.fleet.exec_results import ResultsSplit, Sink
from sb_fleet.fleet.progress import RUNNING
from sb_fleet.fleet.task_outcome import classify, one_line
from sb_fleet.outcome import HostOutcome, Outcome
from sb_fleet.safe_files import atomic_write_text, safe_name

KEEP_BYTES = 1 << 20  # per stream and host: the first and the last MiB are kept
READ_CHUNK = 1 << 16
TICK_S = 0.05  # the longest wait for a pipe; every client's state is looked at every SWEEP_S
SWEEP_S = 0.25
STDERR_GRACE_S = 0.5  # after the client's exit: a master it left may hold its stderr open (ControlPersist)
KILL_GRACE_S = 2.0  # SIGTERM to a client, then SIGKILL
UNREACHABLE_RC = 255  # ssh's own failure (as Ansible's ssh connection takes it)
# ssh's words for a server that took the connection but did not get as far as its banner: an sshd too
# busy to answer within ConnectTimeout (hundreds of logins at once), or one that dropped the connection
# before the key exchange (MaxStartups). No session was opened, so the command never ran: the client is
# started again, after the others of the wave, up to CONNECT_RETRIES times, before the host is unreachable.
NOT_STARTED = re.compile(r"timed out during banner exchange|kex_exchange_identification: ")
CONNECT_RETRIES = 2

# The inventory variables this path honours as Ansible does; any other ansible_* variable of a host sends
# it through the playbook (a password, become, another shell, executable or ssh setting).
DIRECT_VARS = frozenset(
    {
        "ansible_host",
        "ansible_port",
        "ansible_ssh_port",
        "ansible_user",
        "ansible_ssh_user",
        "ansible_ssh_private_key_file",
        "ansible_private_key_file",
        "ansible_ssh_common_args",
        "ansible_ssh_extra_args",
        "ansible_connection",
        "ansible_python_interpreter",  # the raw command names its Python itself
    }
)


def direct_reason(host: Host, srun: bool = False) -> str | None:
    """Why ``host``'s exec must go through Ansible, or None where sb-fleet's own client does what
    Ansible's would. ``srun``: the client is an srun step (``launcher: slurm``), whatever the host's
    ssh connection says."""
    if not srun and host.connection not in ("ssh", "smart"):
        return f"ansible_connection {host.connection}"
    if host.has_secrets():
        return "a secret variable (password) that only Ansible's connection uses"
    other = sorted(k for k in host.vars if k.startswith("ansible_") and k not in DIRECT_VARS)
    if other:
        return f"{other[0]} (an Ansible setting this path does not apply)"
    return None


def runs_direct(exec_via: str, launcher: str, hosts: Iterable[Host]) -> bool:
    """Whether validate's exec on ``hosts`` goes over sb-fleet's own clients (``fleet.exec_via: ssh``
    and every host's connection fits them: :func:`direct_reason`), ssh or srun steps under
    ``launcher: slurm``; else through Ansible. Its deadlines and ``--dry-run`` follow from it."""
    srun = launcher == "slurm"
    return exec_via == "ssh" and all(direct_reason(h, srun) is None for h in hosts)


@dataclass(frozen=True)
class Transport:
    """How the clients reach the hosts: ``argv_of(host, command)`` (the client's argv, None where the
    host has none), ``env_of(host)`` (the client's environment; None: this process's, tagged with the
    run) and ``ended(rc, stdout, stderr)``: the task's own stderr, and why the command never ran on the
    host (the host is unreachable) or None. ``retry_not_started``: a client whose server never got to its
    banner (:data:`NOT_STARTED`: ssh's words) is started again."""

    argv_of: Callable[[Host, str], list[str] | None]
    env_of: Callable[[Host], dict[str, str]] | None = None
    ended: Callable[[int, str, str], tuple[str, str | None]] | None = None
    retry_not_started: bool = True

    def end_of(self, rc: int | None, out: str, err: str) -> tuple[str, str | None]:
        if self.ended is not None and rc is not None:
            return self.ended(rc, out, err)
        if rc == UNREACHABLE_RC:
            return err, f"Failed to connect to the host via ssh: {one_line(err, len(err))[-400:]}"
        return err, None


@dataclass(frozen=True)
class HostExec:
    """One host's command: a line for its login shell (every value in it quoted by sb-fleet) and, for
    the suite's transfer, a file sent on its stdin."""

    command: str
    stdin: Path | None = None


@dataclass(frozen=True)
class ExecTask:
    """What a one-task play would say: the task's name (the results are keyed by it), each host's
    command, the task's timeout, and the line on stdout that makes a non-zero exit no failure (the first
    step's runner, judged by the run stage)."""

    name: str
    commands: Mapping[str, HostExec]
    timeout: int
    ok_mark: str = ""
    # the line after which a host's exec sends its results directory (sb_bench.host.ship_results), and the
    # most bytes taken after it; "": none is looked for
    ship: str = ""
    ship_cap: int = 0
    # each phase of the exec with its own deadline, read from the marker lines on its stdout as they come
    # (sb_fleet.fleet.exec_phases); None: the task's timeout alone
    phases: ExecPhases | None = None


class _Tail:
    """A stream's bytes: the first and the last ``keep`` of them."""

    def __init__(self, keep: int = KEEP_BYTES) -> None:
        self.keep = keep
        self.head = bytearray()
        self.tail = bytearray()
        self.cut = 0

    def add(self, data: bytes) -> None:
        room = self.keep - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if not data:
            return
        self.tail += data
        over = len(self.tail) - self.keep
        if over > 0:
            del self.tail[:over]
            self.cut += over

    def text(self) -> str:
        mid = f"\n[sb-fleet: {self.cut} bytes of this stream not kept]\n".encode() if self.cut else b""
        return bytes(self.head + mid + self.tail).decode(errors="replace")


@dataclass
class _Job:
    host: str
    proc: subprocess.Popen[bytes]
    t0: float
    out: _Tail = field(default_factory=_Tail)
    err: _Tail = field(default_factory=_Tail)
    open_fds: dict[int, IO[bytes]] = field(default_factory=dict)  # fd -> its pipe, until its end
    out_fd: int = -1
    exited_at: float | None = None
    killed: str = ""  # why sb-fleet ended the client ("timeout", "cancel")
    kill_t: float = 0.0
    split: ResultsSplit | None = None  # stdout's reader where the task ships results
    clock: PhaseClock | None = None  # the exec's phase, read from its stdout (ExecTask.phases)
    late: Phase | None = None  # the phase whose deadline ended it (killed "phase")


@dataclass
class DirectResult:
    """Per host: the outcome it ended with, and the task's result (``rc``, ``stdout``, ``stderr``,
    ``msg``, ``failed``) where the command ran."""

    outcomes: dict[str, HostOutcome]
    results: dict[str, dict[str, Any]]
    canceled: bool
    events: list[dict[str, Any]]
    shipped: dict[str, Path] = field(default_factory=dict)  # host -> its results, spooled (ExecTask.ship)


FDS_PER_CLIENT = 3  # its stdout and stderr pipes here, and one while it starts (Popen's own error pipe)
FDS_SPARE = 64  # for everything else the process opens meanwhile (the watch's stops, logs, the run directory)


def fd_room() -> int:
    """How many clients may run at once within this process's open-file limit, its soft limit raised to
    the hard one first (a default soft limit of 1024 would end a 512-host wave in "Too many open files";
    Ansible spreads its clients over one worker process each)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        want = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError):
            pass
    try:
        used = len(os.listdir("/proc/self/fd"))
    except OSError:
        used = 32
    return max(1, (soft - used - FDS_SPARE) // FDS_PER_CLIENT)


def _nonblock(f: IO[bytes] | None) -> int:
    assert f is not None
    fd = f.fileno()
    os.set_blocking(fd, False)
    return fd


def _read(fd: int) -> bytes | None:
    """What the pipe has now; b"" at its end; None when nothing is there yet."""
    try:
        return os.read(fd, READ_CHUNK)
    except BlockingIOError:
        return None
    except OSError:
        return b""


def _signal(job: _Job, sig: int) -> None:
    try:
        job.proc.send_signal(sig)
    except (ProcessLookupError, OSError):
        pass


def run_direct(
    stage: str,
    task: ExecTask,
    hosts: list[Host],
    argv_of: Callable[[Host, str], list[str] | None] | Transport,
    *,
    forks: int,
    progress: Callable[[str, str, str], None],
    cancel: Callable[[], bool] | None = None,
    watch: DeadlineWatch | None = None,
    run_id: str = "",
    events_file: Path | None = None,
    spool_dir: Path | None = None,
) -> DirectResult:
    """Run each host's command of ``task`` (``argv_of(host, command)``: the ssh client, or a
    :class:`Transport`: srun's steps), ``forks`` at a time; every host ends with an outcome. ``watch``: the stage's deadline watch (it stops a host past
    its deadline, its local client included); ``cancel``: Ctrl-C/SIGTERM, which ends every client and
    leaves the hosts' processes to the stage; the watch's stage bound does the same. ``spool_dir``: a
    private directory for the results a host ships (``task.ship``), else none are looked for."""
    how = argv_of if isinstance(argv_of, Transport) else Transport(argv_of)
    env = dict(os.environ)
    if run_id:  # every client tagged (sb_fleet.fleet.reaper): a stop finds it, by its host's address
        env[reaper.CONTROL_TAG] = reaper.control_tag(run_id)
    mark = re.compile(task.ok_mark) if task.ok_mark else None
    forks = max(1, min(forks, fd_room()))
    waiting = list(reversed(hosts))
    by_name = {h.name: h for h in hosts}
    attempts: dict[str, int] = {}  # host -> clients started for it (a retry: NOT_STARTED)
    jobs: dict[str, _Job] = {}
    by_fd: dict[int, tuple[_Job, Sink]] = {}
    sel = selectors.DefaultSelector()
    outcomes: dict[str, HostOutcome] = {}
    results: dict[str, dict[str, Any]] = {}
    events: list[dict[str, Any]] = []
    shipped: dict[str, Path] = {}
    t_start = time.monotonic()
    canceled = False

    def close_pipe(job: _Job, fd: int) -> None:
        """Stop watching one of a client's pipes and close it, once: through its file object, which owns
        the descriptor (a second close by number could close another client's reused one)."""
        sel.unregister(fd)
        by_fd.pop(fd, None)
        job.open_fds.pop(fd).close()

    def end(job: _Job) -> None:
        for fd in list(job.open_fds):
            close_pipe(job, fd)
        del jobs[job.host]
        rc = job.proc.returncode
        if job.split is not None:
            spool = job.split.finish(keep=not job.killed and rc not in (None, UNREACHABLE_RC))
            if spool is not None:
                shipped[job.host] = spool
        out, err = job.out.text(), job.err.text()
        err, unreachable = how.end_of(rc, out, err)
        res: dict[str, Any] = {"rc": rc, "stdout": out, "stderr": err, "changed": False}
        now = time.monotonic()
        events.append(
            {
                "host": job.host,
                "start_s": round(job.t0 - t_start, 3),
                "end_s": round(now - t_start, 3),
                "rc": rc,
                **({"attempt": attempts[job.host]} if attempts[job.host] > 1 else {}),
                "stdout_bytes": len(job.out.head) + len(job.out.tail) + job.out.cut,
                "stderr_bytes": len(job.err.head) + len(job.err.tail) + job.err.cut,
                **({"ended_by": job.killed} if job.killed else {}),
                **({"shipped_bytes": job.split.size} if job.split is not None and job.split.found else {}),
            }
        )
        if (
            not job.killed
            and how.retry_not_started
            and rc == UNREACHABLE_RC
            and not out
            and NOT_STARTED.search(err)
            and again(job.host)
        ):
            return  # started again later: no session was opened, nothing of the command ran
        if watch is not None:
            watch.finished(job.host)
        if job.killed == "cancel":
            outcomes[job.host] = HostOutcome(job.host, stage, Outcome.PENDING, f"interrupted in {task.name}")
            return
        if job.killed == "phase" and job.late is not None:
            why = job.late.reason()
            outcomes[job.host] = HostOutcome(
                job.host, stage, Outcome.TIMEOUT, why, details={"phase": job.late.name}
            )
            progress(job.host, Outcome.TIMEOUT, why)
            return
        if job.killed == "timeout":
            why = f"no end within its task's timeout of {task.timeout} s"
            outcomes[job.host] = HostOutcome(job.host, stage, Outcome.TIMEOUT, f"{task.name}: {why}")
            progress(job.host, Outcome.TIMEOUT, why)
            return
        if unreachable is not None:
            msg = unreachable
            outcome, reason = classify("runner_on_unreachable", {"msg": msg, "unreachable": True})
            results[job.host] = {task.name: {**res, "msg": msg, "unreachable": True}}
            outcomes[job.host] = HostOutcome(job.host, stage, outcome, f"{task.name}: {reason}")
            progress(job.host, outcome, reason)
            return
        failed = rc != 0 and not (mark is not None and mark.search(out))
        if failed:
            res = {**res, "failed": True, "msg": "non-zero return code"}
            outcome, reason = classify("runner_on_failed", res)
            results[job.host] = {task.name: res}
            outcomes[job.host] = HostOutcome(job.host, stage, outcome, f"{task.name}: {reason}")
            progress(job.host, outcome, reason)
            return
        results[job.host] = {task.name: {**res, "failed": False}}
        outcomes[job.host] = HostOutcome(job.host, stage, Outcome.OK)
        progress(job.host, Outcome.OK, "")

    def again(host: str) -> bool:
        """Queue ``host``'s client to start again, after the hosts still waiting; False once it has had
        its CONNECT_RETRIES, or when the stage is being stopped."""
        if canceled or attempts[host] > CONNECT_RETRIES:
            return False
        waiting.insert(0, by_name[host])  # started last (waiting is popped from its end)
        return True

    def start(h: Host) -> None:
        attempts[h.name] = attempts.get(h.name, 0) + 1
        cmd = task.commands[h.name]
        argv = how.argv_of(h, cmd.command)
        if argv is None:  # the caller sends only hosts with a path; should one slip through, say so
            outcomes[h.name] = HostOutcome(h.name, stage, Outcome.FAILED, "no ssh command for this host")
            progress(h.name, Outcome.FAILED, outcomes[h.name].reason)
            return
        stdin: IO[bytes] | int = subprocess.DEVNULL
        f = None
        try:
            if cmd.stdin is not None:
                f = stdin = open(cmd.stdin, "rb")  # noqa: SIM115 - the client reads it; closed below
            proc = subprocess.Popen(
                argv,
                stdin=stdin,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env if how.env_of is None else how.env_of(h),
                start_new_session=True,  # Ctrl-C at the terminal is sb-fleet's to handle, not each client's
            )
        except OSError as exc:
            outcomes[h.name] = HostOutcome(h.name, stage, Outcome.FAILED, f"{argv[0]} could not start: {exc}")
            progress(h.name, Outcome.FAILED, outcomes[h.name].reason)
            return
        finally:
            if f is not None:
                f.close()
        job = _Job(h.name, proc, time.monotonic())
        if task.phases is not None:
            job.clock = task.phases.clock(job.t0)
        out_sink: Sink = job.out
        if task.ship and spool_dir is not None:
            spool = spool_dir / f"{safe_name(h.name)}.{attempts[h.name]}.spool"
            spool.unlink(missing_ok=True)  # a run before this one's, killed
            job.split = ResultsSplit(job.out, task.ship.encode(), spool, task.ship_cap)
            out_sink = job.split
        for stream, sink in ((proc.stdout, out_sink), (proc.stderr, job.err)):
            fd = _nonblock(stream)
            sel.register(fd, selectors.EVENT_READ)
            by_fd[fd] = (job, sink)
            assert stream is not None
            job.open_fds[fd] = stream
        job.out_fd = next(iter(job.open_fds))
        jobs[h.name] = job
        if watch is not None and attempts[h.name] == 1:
            watch.started(h.name)
        progress(h.name, RUNNING, task.name)

    def kill(job: _Job, why: str) -> None:
        if not job.killed:
            job.killed, job.kill_t = why, time.monotonic()
            _signal(job, signal.SIGTERM)

    def collect_exited(job: _Job, now: float) -> None:
        """End ``job`` once its client has exited and its stdout is at its end (or STDERR_GRACE_S after
        the exit: a master the client left may hold a pipe)."""
        if job.exited_at is None:
            if job.proc.poll() is None:
                return
            job.exited_at = now
        out_open = job.out_fd in job.open_fds
        if out_open and now - job.exited_at < STDERR_GRACE_S:
            return
        for fd in list(job.open_fds):  # what is left in the pipes now
            data = _read(fd)
            while data:
                by_fd[fd][1].add(data)
                data = _read(fd)
        end(job)

    last_sweep = 0.0
    at_end: set[str] = set()
    try:
        while waiting or jobs:
            stop_all = (cancel is not None and cancel()) or (watch is not None and watch.over())
            if stop_all and not canceled:
                canceled = True
                waiting.clear()
                for job in list(jobs.values()):
                    kill(job, "cancel")
            while waiting and len(jobs) < forks:
                start(waiting.pop())
            if not jobs:
                continue
            if by_fd:
                ready = sel.select(TICK_S)
            else:
                time.sleep(TICK_S)
                ready = []
            for key, _ in ready:
                fd = int(key.fd)
                job, tail = by_fd[fd]
                data = _read(fd)
                if data:  # one chunk a turn: a host that floods its pipe is read in turns with the others
                    tail.add(data)
                    if job.clock is not None and fd == job.out_fd:
                        job.clock.feed(data, time.monotonic())
                elif data == b"":
                    close_pipe(job, fd)
                    at_end.add(job.host)
            now = time.monotonic()
            for h in list(at_end):  # a stream at its end: the client is exiting, looked at every turn
                if h not in jobs:
                    at_end.discard(h)
                else:
                    collect_exited(jobs[h], now)
            if now - last_sweep < SWEEP_S:
                continue
            last_sweep = now
            for job in list(jobs.values()):
                collect_exited(job, now)
                if job.host not in jobs or job.exited_at is not None:
                    continue
                late = job.clock.late(now) if job.clock is not None and not job.killed else None
                if late is not None:  # a phase past its own deadline: the host's exec ends there
                    job.late = late
                    kill(job, "phase")
                    if watch is not None:
                        watch.expire(job.host)
                elif not job.killed and now - job.t0 > task.timeout:
                    kill(job, "timeout")
                    if watch is not None:
                        watch.expire(job.host)
                elif job.killed and now - job.kill_t > KILL_GRACE_S:
                    _signal(job, signal.SIGKILL)
    except BaseException:
        for job in list(jobs.values()):
            _signal(job, signal.SIGKILL)
            job.proc.wait()
            if job.split is not None:
                job.split.finish(keep=False)
        for spool in shipped.values():
            spool.unlink(missing_ok=True)
        raise
    finally:
        sel.close()
        if events_file is not None:
            atomic_write_text(events_file, json.dumps({"task": task.name, "hosts": events}, indent=1) + "\n")
    return DirectResult(outcomes, results, canceled, events, shipped)
