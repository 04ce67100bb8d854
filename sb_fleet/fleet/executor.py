"""Execution: the one executor. It runs a rendered playbook with ansible-runner on a set of hosts and
turns its events into per-host outcomes.

This is one of the two modules that touch the network (the other is
``collect``). ansible-runner's private data directory lives in the run
directory (``ansible/<stage>/``), so its artifacts (job events, stdout) can
be inspected afterwards. Ansible's errors are mapped here to sb-fleet's
outcomes and exceptions; nothing above this module sees an ansible-runner type.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sb_fleet.config.inventory import Host, Inventory
from sb_fleet.errors import InfraError
from sb_fleet.fleet import reaper
from sb_fleet.fleet.deadline_watch import DeadlineWatch
from sb_fleet.fleet.direct_exec import ExecTask, Transport, direct_reason, run_direct
from sb_fleet.fleet.progress import RUNNING, Progress
from sb_fleet.fleet.slurm_launch import CONNECTION, PLUGIN_DIR, SrunReach, srun_argv, step_end
from sb_fleet.fleet.ssh import SshSettings
from sb_fleet.fleet.task_outcome import TASK_TIMEOUT, classify, one_line
from sb_fleet.outcome import HostOutcome, Outcome
from sb_fleet.plan import ansible_data
from sb_fleet.plan.deadlines import Deadline
from sb_fleet.plan.tasks import HOST_TAG, PLAY_DONE
from sb_fleet.safe_files import atomic_write_text


@dataclass
class StageResult:
    stage: str
    outcomes: dict[str, HostOutcome]
    results: dict[str, dict[str, Any]] = field(default_factory=dict)  # host -> task name -> module result
    status: str = ""
    rc: int | None = None
    duration_s: float = 0.0


@dataclass(frozen=True)
class Started:
    """A run step that deploy started in the same exec (validate): each host's runner task result (``rc``, ``stdout``,
    ``stderr``), and the signal when Ctrl-C/SIGTERM stopped the deploy (``unfinished``: its hosts)."""

    step: str
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    interrupted: str | None = None
    unfinished: tuple[str, ...] = ()


def ansible_env(ssh: SshSettings, python: str) -> dict[str, str]:
    bindir = str(Path(sys.executable).parent)
    env = {
        "PATH": bindir + os.pathsep + os.environ.get("PATH", ""),
        "ANSIBLE_PIPELINING": "True",
        "ANSIBLE_PYTHON_INTERPRETER": python,
        "ANSIBLE_RETRY_FILES_ENABLED": "False",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_DEPRECATION_WARNINGS": "False",
        "ANSIBLE_LOCALHOST_WARNING": "False",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "False",
        "ANSIBLE_SYSTEM_WARNINGS": "False",
        "ANSIBLE_COMMAND_WARNINGS": "False",
        # raw tasks (run steps, deploy's fast path) without a tty: the command's stderr stays its own
        # (a tty merges it into stdout and adds OpenSSH's "Shared connection ... closed." line)
        "ANSIBLE_SSH_USETTY": "False",
        # No per-host fact cache or logs outside the run directory.
        "ANSIBLE_LOG_PATH": "",
    }
    env.update(ssh.ansible_env())
    return env


def python_for_ansible() -> str:
    """The Python Ansible runs its modules with on a local host."""
    return "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable


@dataclass(frozen=True)
class Executor:
    """Everything a stage needs to run a playbook on hosts: handed to every stage, never rebuilt by one."""

    inventory: Inventory
    ssh: SshSettings
    forks: int
    ansible_root: Path  # ansible/ of the run directory: one private data dir per stage below it
    python: str = field(default_factory=python_for_ansible)
    progress: Progress = field(default_factory=lambda: Progress(enabled=False))
    srun: SrunReach | None = None  # launcher: slurm: every task an srun step in this job
    # host -> why it is out of service (Slurm: drained, down or failed for another reason than sb-fleet's,
    # under launcher slurm also reserved, or drained by sb-fleet and not re-testable): every stage leaves it
    # out with that outcome
    out_of_service: Mapping[str, str] = field(default_factory=dict)
    run_id: str = ""  # the run whose processes are tagged with it (sb_fleet.fleet.reaper); "": untagged
    # host -> the container runtime's command before its subcommand (fleet.runtime docker/podman): a
    # stop removes the run's containers there and, when the runtime needs root, sweeps root's processes
    containers: Mapping[str, list[str]] = field(default_factory=dict)
    # fleet.exec_via: ssh: a one-command play (validate's exec, the suite's transfer) runs over sb-fleet's own
    # ssh clients where a host allows it (sb_fleet.fleet.direct_exec); ansible: always the playbook
    direct: bool = True
    # host -> when (time.monotonic()) sb-fleet's own ssh client to it ended, having logged in: its
    # ControlPersist master is then known to be there for a while (collect rides it without asking first)
    masters: dict[str, float] = field(default_factory=dict)
    # host -> its results as its exec sent them (ExecTask.ship), spooled: collect reads them from there
    shipped: dict[str, Path] = field(default_factory=dict)

    def run(
        self,
        stage: str,
        playbook: Path,
        hosts: list[str],
        *,
        cancel: Callable[[], bool] | None = None,
        extravars: dict[str, Any] | None = None,
        deadline: Deadline | None = None,
        stop: Callable[[str], str] | None = None,
        done: Callable[[str, dict[str, Any]], bool] | None = None,
        direct: ExecTask | None = None,
    ) -> StageResult:
        """Run ``playbook`` on ``hosts``; an outcome for every one of them, whatever happens. With a
        ``deadline``, a host past it is stopped (``stop(host)``, else :meth:`stop_host`) and ends
        ``timeout`` while the others go on. A host is done with the play when it reports
        :data:`~sb_fleet.plan.tasks.PLAY_DONE`, or a task result for which ``done(task, result)`` is
        true (the play's last task for that host: a play that ends so costs no task of its own).
        ``direct``: the play is this one command per host; the hosts that allow it (:meth:`direct_hosts`)
        run it over sb-fleet's own ssh clients, the others the playbook."""
        fast = self.direct_hosts(hosts) if direct is not None else []
        if not fast:
            res = run_playbook(self, stage, playbook, hosts, cancel, extravars, deadline, stop, done)
            return self.late_on_hosts(stage, direct, res, hosts)
        assert direct is not None
        res = run_direct_stage(self, stage, direct, fast, cancel, deadline, stop)
        chosen = set(fast)
        rest = [h for h in hosts if h not in chosen]  # through Ansible, after the direct ones
        if not rest or res.status == "canceled":
            for h in rest:  # never started: cut off before
                res.outcomes[h] = HostOutcome(
                    h, stage, Outcome.PENDING, "interrupted before the host started"
                )
            return res
        more = run_playbook(self, stage, playbook, rest, cancel, extravars, deadline, stop, done)
        more = self.late_on_hosts(stage, direct, more, rest)
        return StageResult(
            stage,
            {**res.outcomes, **more.outcomes},
            {**res.results, **more.results},
            more.status,
            more.rc,
            res.duration_s + more.duration_s,
        )

    def late_on_hosts(
        self, stage: str, task: ExecTask | None, res: StageResult, hosts: list[str]
    ) -> StageResult:
        """Hosts whose exec went through the playbook and was ended by its own phase watch on the host
        (:meth:`sb_fleet.fleet.exec_phases.ExecPhases.late_on_host`): the outcome the control node's watch
        gives over its own clients (``timeout``, the phase's reason, ``details.phase``; no result kept),
        after a sweep of the run's processes there (one that left the exec's session)."""
        if task is None or task.phases is None:
            return res
        for h in hosts:
            out = res.results.get(h, {}).get(task.name, {})
            late = task.phases.late_on_host(str(out.get("stdout") or ""))
            if late is None:
                continue
            said = self.stop_host(h) if self.run_id else "not swept (no run id)"
            o = HostOutcome(
                h,
                stage,
                Outcome.TIMEOUT,
                one_line(f"{late.reason()}; ended by the exec's own watch on the host; then {said}", 600),
                details={"phase": late.name},
            )
            res.outcomes[h] = o
            res.results.pop(h, None)
            self.progress.update(h, Outcome.TIMEOUT, o.reason)
        return res

    def drop_shipped(self) -> None:
        """Remove the results the hosts' execs sent that no collect has read (an interrupted run)."""
        for spool in self.shipped.values():
            spool.unlink(missing_ok=True)
        self.shipped.clear()

    def direct_hosts(self, hosts: list[str]) -> list[str]:
        """The hosts whose one command may go over sb-fleet's own client (fleet.exec_via ssh; an
        inventory that asks for nothing Ansible's connection would do otherwise): an ssh client, or
        under ``launcher: slurm`` an srun step (a node Slurm left out goes to the playbook, which says
        why it is skipped)."""
        if not self.direct:
            return []
        if self.srun is None and self.ssh.control_path() is None:
            return []
        left_out = {**self.out_of_service, **(self.srun.left_out if self.srun is not None else {})}
        by_name = {h.name: h for h in self.inventory.hosts}
        return [
            h
            for h in hosts
            if h in by_name and h not in left_out and direct_reason(by_name[h], self.srun is not None) is None
        ]

    def stop_host(self, host: str) -> str:
        """End what this run started for ``host``: its processes on the host (a new connection), and
        the control node's srun steps or ssh clients for it; what happened, in words."""
        h = self.inventory.get(host)
        clients = reaper.stop_host_clients(self.run_id, h, self.srun is not None)
        said = reaper.sweep_hosts(self.run_id, [h], self.ssh, 1, self.srun, containers=self.containers)[host]
        return f"on the host: {said}" + (f"; {clients} local client process(es) ended" if clients else "")

    def stop_hosts(self, hosts: list[str], collect_only: bool = False) -> dict[str, str]:
        """:data:`sb_fleet.fleet.reaper.SWEEP` on every host of ``hosts``, in parallel; host -> what it
        said. ``collect_only``: only collect's own commands (:data:`~sb_fleet.fleet.reaper.COLLECT_TAG`:
        a runner cut off earlier may still be writing the results a later collect fetches)."""
        if not self.run_id or not hosts:
            return {}
        return reaper.sweep_hosts(
            self.run_id,
            [self.inventory.get(h) for h in hosts],
            self.ssh,
            self.forks,
            self.srun,
            var=reaper.COLLECT_TAG if collect_only else HOST_TAG,
            containers=None if collect_only else self.containers,
        )


def run_playbook(
    ex: Executor,
    stage: str,
    playbook: Path,
    hosts: list[str],
    cancel: Callable[[], bool] | None,
    extravars: dict[str, Any] | None,
    deadline: Deadline | None = None,
    stop: Callable[[str], str] | None = None,
    done: Callable[[str, dict[str, Any]], bool] | None = None,
) -> StageResult:
    private_dir = ex.ansible_root / stage
    inventory, ssh, forks, python, progress = ex.inventory, ex.ssh, ex.forks, ex.python, ex.progress.update

    private_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    t0 = time.monotonic()
    left_out: dict[str, HostOutcome] = {}
    envvars = ansible_env(ssh, python)
    if ex.run_id:  # every process of the play tagged (sb_fleet.fleet.reaper): a stop finds them all
        envvars[reaper.CONTROL_TAG] = reaper.control_tag(ex.run_id)
        envvars[reaper.RUN_VAR] = ex.run_id
        extravars = {**(extravars or {}), reaper.ANSIBLE_VAR: ex.run_id}
    # the nodes out of service, and those Slurm did not allocate: left out, with Slurm's reason
    left_out = {
        h: HostOutcome(h, stage, Outcome.OUT_OF_SERVICE, why)
        for h in hosts
        if (why := ex.out_of_service.get(h)) is not None
    }
    if ex.srun is not None:
        left_out.update(
            {
                h: HostOutcome(h, stage, Outcome.SKIPPED, why)
                for h in hosts
                if (why := ex.srun.left_out.get(h)) is not None
            }
        )
    for h, o in left_out.items():
        progress(h, o.outcome, o.reason)
    hosts = [h for h in hosts if h not in left_out]
    if ex.srun is not None:
        extravars = {**(extravars or {}), "ansible_connection": CONNECTION}
        envvars.update(
            {
                "ANSIBLE_CONNECTION_PLUGINS": str(PLUGIN_DIR),
                "SB_FLEET_SRUN_JOB": ex.srun.job_id,
                "SB_FLEET_SRUN": ex.srun.srun,
            }
        )
    if not hosts:
        return StageResult(stage, left_out, status="nothing to do")
    import ansible_runner  # here: a stage whose hosts all went another way (validate's run) never needs it

    limit_file = private_dir / "limit.txt"
    atomic_write_text(limit_file, "".join(f"{h}\n" for h in hosts))
    vars_file = command_vars(private_dir, extravars)
    seen: dict[str, HostOutcome] = {}
    results: dict[str, dict[str, Any]] = {h: {} for h in hosts}
    reached: set[str] = set()
    running: dict[str, str] = {}  # host -> the task it started and has not ended
    finished: set[str] = set()  # hosts whose play ended (its last task reported, or a failure)
    watch = (
        DeadlineWatch(deadline, len(hosts), min(forks, max(len(hosts), 1)), stop or ex.stop_host)
        if deadline is not None and ex.run_id
        else None
    )
    stopping: list[bool] = []
    interrupted: list[bool] = []  # Ctrl-C/SIGTERM fired (``cancel``)
    task_timeouts: dict[str, int | None] = {}  # host -> the task timeout Ansible ended it at, when it did

    def cancelled() -> bool:
        """Cancel on an interrupt (``cancel``) or a stage over its bound; first, end the control node's
        processes of the play (srun first, which ends its step): ansible-runner's kill of its process
        group leaves those in their own session and the ssh masters. The hosts' own processes are the
        stage's to stop (the run stage stops its runners gracefully)."""
        hit = bool(cancel is not None and cancel())
        if hit and not interrupted:
            interrupted.append(True)
        now = hit or (watch is not None and watch.over())
        if now and not stopping and ex.run_id:
            stopping.append(True)
            reaper.stop_control_node(ex.run_id, hosts_too=False)
        return now

    def handler(ev: dict) -> bool:
        name = ev.get("event", "")
        data = ev.get("event_data") or {}
        host = data.get("host")
        if not host or host not in results:
            return True
        task = str(data.get("task") or "")
        res = data.get("res") or {}
        if name == "runner_on_start":
            running[host] = task
            if watch is not None:
                watch.started(host)
            progress(host, RUNNING, task)
        elif name in ("runner_on_ok", "runner_on_skipped"):
            reached.add(host)
            running.pop(host, None)
            results[host][task] = _slim(res)
            if task == PLAY_DONE or (done is not None and done(task, res)):
                finished.add(host)
                if watch is not None:
                    watch.finished(host)
        elif name in ("runner_on_failed", "runner_on_unreachable", "runner_on_async_failed"):
            if interrupted and host not in finished:
                # after Ctrl-C/SIGTERM ended the play's connections (srun, ssh): that end, not the host's
                # own failure; the host stays cut off inside its task (pending, "interrupted in ...")
                return True
            reached.add(host)
            running.pop(host, None)
            if name == "runner_on_failed" and data.get("ignore_errors"):
                return True
            outcome, reason = classify(name, res)
            results[host][task] = _slim(res)
            finished.add(host)
            if watch is not None:
                if outcome == Outcome.TIMEOUT:  # Ansible's own task timeout: its processes run on
                    m = TASK_TIMEOUT.search(reason)
                    task_timeouts[host] = int(m.group(1)) if m else None
                    watch.expire(host)
                watch.finished(host)
            if host not in seen or seen[host].outcome == Outcome.OK:
                seen[host] = HostOutcome(host, stage, outcome, f"{task}: {reason}" if task else reason)
            progress(host, outcome, reason)
        return True

    try:
        r = ansible_runner.run(
            private_data_dir=str(private_dir),
            playbook=str(Path(playbook).resolve()),
            inventory=[str(Path(s).resolve()) for s in inventory.sources],
            limit=f"@{limit_file.resolve()}",
            forks=min(forks, max(len(hosts), 1)),
            envvars=envvars,
            quiet=True,
            event_handler=handler,
            cancel_callback=cancelled if (cancel is not None or watch is not None) else None,
            # absolute: ansible-runner looks a relative path up under private_data_dir (a run directory
            # given relative, as the default runs/<id> is, lost every extra variable)
            extravars=str(vars_file.resolve()) if vars_file else None,
            # ansible-runner would otherwise write envvars/extravars into env/ once and read them back
            # on every later run of the stage: validate's first step came back in a plain deploy.
            suppress_env_files=True,
            ident=stage,
            rotate_artifacts=0,
            settings={"suppress_ansible_output": True, "suppress_output_file": False},
        )
    except BaseException as exc:  # Ctrl-C, SIGTERM (a KeyboardInterrupt), or ansible-runner's own failure
        if ex.run_id:  # nothing of the play may outlive it: the control node's processes, then the hosts'
            reaper.stop_control_node(ex.run_id, hosts_too=True)
            ex.stop_hosts(hosts)
        if watch is not None:
            watch.close()
        if not isinstance(exc, Exception):
            raise
        raise InfraError(f"ansible-runner could not run {playbook.name}: {exc}") from exc
    status, rc = r.status, r.rc
    stopped = watch.close() if watch is not None else {}
    if watch is not None and watch.over() and status == "canceled":  # over the stage's bound
        stop_again(ex, watch, [h for h in hosts if h not in finished], stopped)  # a stopped host still there
    if status in ("failed", "error") and not seen and not reached:
        tail = ""
        try:
            tail = one_line((r.stdout.read() if hasattr(r.stdout, "read") else "")[-600:])
        except Exception:
            pass
        if rc not in (2, 4):  # 2/4: some host failed/unreachable; anything else is ansible itself
            raise InfraError(
                f"ansible-playbook failed to run {playbook.name} (rc={rc}): {tail}; "
                f"see {private_dir}/artifacts/{stage}/stdout"
            )
    outcomes: dict[str, HostOutcome] = dict(left_out)
    for h in hosts:
        if h in stopped and deadline is not None:
            outcomes[h] = deadline_outcome(
                h, stage, deadline, stopped[h], h in task_timeouts, task_timeouts.get(h)
            )
            progress(h, Outcome.TIMEOUT, outcomes[h].reason)
        elif h in seen:
            outcomes[h] = seen[h]
        elif (status == "canceled" or interrupted) and h not in finished:
            # cut off inside a task, or between two: the tasks it did are not the play
            where = f"in {running[h]}" if h in running else "before the host finished"
            outcomes[h] = HostOutcome(h, stage, Outcome.PENDING, f"interrupted {where}")
        elif h in reached:
            outcomes[h] = HostOutcome(h, stage, Outcome.OK)
            progress(h, Outcome.OK, "")
        else:
            outcomes[h] = HostOutcome(h, stage, Outcome.UNREACHABLE, "Ansible reported nothing for this host")
    return StageResult(stage, outcomes, results, status, rc, time.monotonic() - t0)


def run_direct_stage(
    ex: Executor,
    stage: str,
    task: ExecTask,
    hosts: list[str],
    cancel: Callable[[], bool] | None,
    deadline: Deadline | None,
    stop: Callable[[str], str] | None,
) -> StageResult:
    """:func:`run_playbook`'s contract for a one-command play over sb-fleet's own ssh clients
    (:mod:`sb_fleet.fleet.direct_exec`): the same deadline watch, stops, cancel and outcomes."""
    t0 = time.monotonic()
    by_name = {h.name: h for h in ex.inventory.hosts}
    watch = (
        DeadlineWatch(deadline, len(hosts), min(ex.forks, max(len(hosts), 1)), stop or ex.stop_host)
        if deadline is not None and ex.run_id
        else None
    )
    private_dir = ex.ansible_root / stage
    private_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    spool_dir = None
    if task.ship:
        spool_dir = private_dir / SPOOL_DIR
        spool_dir.mkdir(exist_ok=True, mode=0o700)
    try:
        got = run_direct(
            stage,
            task,
            [by_name[h] for h in hosts],
            ex.ssh.exec_command if ex.srun is None else srun_transport(ex.srun, ex.run_id),
            forks=min(ex.forks, max(len(hosts), 1)),
            progress=ex.progress.update,
            cancel=cancel,
            watch=watch,
            run_id=ex.run_id,
            events_file=private_dir / DIRECT_EVENTS,
            spool_dir=spool_dir,
        )
    except BaseException:  # Ctrl-C twice, SIGTERM: nothing of the stage outlives it
        if ex.run_id:
            ex.stop_hosts(hosts)
        if watch is not None:
            watch.close()
        raise
    stopped = watch.close() if watch is not None else {}
    if watch is not None and watch.over():
        left = [h for h in hosts if h not in got.outcomes or got.outcomes[h].outcome == Outcome.PENDING]
        stop_again(ex, watch, left, stopped)
    outcomes: dict[str, HostOutcome] = {}
    for h in hosts:
        phase = got.outcomes[h].details.get("phase") if h in got.outcomes else None
        if h in stopped and phase:  # one phase of the exec past its own deadline (ExecTask.phases)
            o = got.outcomes[h]
            outcomes[h] = HostOutcome(
                h,
                stage,
                Outcome.TIMEOUT,
                one_line(f"{o.reason}; stopped {stopped[h]}", 600),
                details=o.details,
            )
            ex.progress.update(h, Outcome.TIMEOUT, outcomes[h].reason)
            got.results.pop(h, None)
        elif h in stopped and deadline is not None:
            by_task = h in got.outcomes and got.outcomes[h].outcome == Outcome.TIMEOUT
            outcomes[h] = deadline_outcome(h, stage, deadline, stopped[h], by_task, task.timeout)
            ex.progress.update(h, Outcome.TIMEOUT, outcomes[h].reason)
            # as a play's task cut off by the stop: no result (what the exec printed before is not a result)
            got.results.pop(h, None)
        else:
            outcomes[h] = got.outcomes.get(h) or HostOutcome(
                h, stage, Outcome.PENDING, "interrupted before the host started"
            )
            if ex.srun is None and outcomes[h].outcome in (Outcome.OK, Outcome.FAILED):
                ex.masters[h] = time.monotonic()  # logged in: ssh's 255 is unreachable
    for h, spool in got.shipped.items():  # a host stopped at its deadline: what it sent is not taken
        if h in stopped or outcomes[h].outcome not in (Outcome.OK, Outcome.FAILED):
            spool.unlink(missing_ok=True)
        else:
            ex.shipped[h] = spool
    status = "canceled" if got.canceled else "successful"
    return StageResult(stage, outcomes, got.results, status, None, time.monotonic() - t0)


def srun_transport(srun: SrunReach, run_id: str) -> Transport:
    """The one exec per node as an srun step in the command's allocation (``launcher: slurm``), read as
    it comes like an ssh client's: ``/bin/sh -c`` runs the same line a login shell would; the step has no
    time limit of its own (as the playbook's steps): the task's timeout and its phases' deadlines end it
    from here. srun and so its step carry the run's tags (:func:`sb_fleet.fleet.reaper.step_env`, as the
    srun connection's steps): a stop finds the srun here and the step's processes on the node. srun's own failure (the step never ran) makes the node unreachable."""

    tags = {reaper.CONTROL_TAG: reaper.control_tag(run_id), reaper.RUN_VAR: run_id} if run_id else {}
    environ = {**os.environ, **tags}

    def env_of(host: Host) -> dict[str, str]:
        return reaper.step_env(host.name, environ)

    def ended(rc: int, out: str, err: str) -> tuple[str, str | None]:
        task, failure = step_end(rc, out, err)
        return task, (f"srun on the node: {failure}" if failure else None)

    return Transport(
        lambda h, cmd: srun_argv(srun.srun, srun.job_id, h.name, ["/bin/sh", "-c", cmd]),
        env_of,
        ended,
        retry_not_started=False,
    )


def stop_again(ex: Executor, watch: DeadlineWatch, left: list[str], stopped: dict[str, str]) -> None:
    """A stage past its bound: the hosts it left unfinished are stopped (again); what that did joins
    ``stopped`` (host -> what stopping it did)."""
    for h, said in ex.stop_hosts(left).items():
        now = f"when the stage ran past its bound ({watch.bound} s): {said}"
        stopped[h] = f"{stopped[h]}; again {now}" if h in stopped else now


def deadline_outcome(
    host: str, stage: str, deadline: Deadline, said: str, by_task: bool = False, task_s: int | None = None
) -> HostOutcome:
    """A host stopped past its deadline (``said``: what the stop did); ``by_task``: its task's own timeout
    (``task_s``, where known) ended it first, when that is not the deadline itself."""
    why = f"no end within its deadline of {deadline.seconds} s ({deadline.source})"
    if by_task and task_s != deadline.seconds:
        why = f"no end within its task's timeout{f' of {task_s} s' if task_s else ''} ({why})"
    return HostOutcome(
        host, stage, Outcome.TIMEOUT, one_line(f"{deadline.label}: {why}; stopped {said}", 600)
    )


DIRECT_EVENTS = "direct-exec.json"  # per stage: each host's start, end, exit status and output size
SPOOL_DIR = ".shipped"  # per stage: the results each host's exec sent, until collect has read them


def command_vars(private_dir: Path, extravars: dict[str, Any] | None) -> Path | None:
    """This command's extra variables as a file of data (``!unsafe``: Ansible's templating never reads
    them), or None; and nothing left of an earlier command's: ansible-runner reads ``env/`` on every run,
    and sb-fleet writes nothing there."""
    env = private_dir / "env"
    if env.is_dir() and not env.is_symlink():
        shutil.rmtree(env)
    elif env.is_symlink() or env.exists():
        env.unlink()
    path = private_dir / "extravars.yml"
    if not extravars:
        path.unlink(missing_ok=True)
        return None
    atomic_write_text(path, ansible_data.dump(extravars, "sb-fleet: this command's extra variables, as data"))
    return path


def _slim(res: dict) -> dict:
    """The parts of a module result worth keeping (no invocation args: they may hold secrets)."""
    keep = ("rc", "stdout", "stderr", "msg", "changed", "failed", "skipped", "unreachable")
    return {k: res[k] for k in keep if k in res}
