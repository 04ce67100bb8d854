"""The on-host runner: run a step's benchmarks in their modes, each under its timeout.

``sb-fleet run`` starts one runner per host per step (over Ansible); the
runner owns everything that has to happen on the host itself:

* launch each benchmark entry in its modes, as SuperBench does: ``local``
  (``proc_num`` processes, each with ``PROC_RANK`` and an optional prefix
  such as ``CUDA_VISIBLE_DEVICES={proc_rank}``, in parallel or one by one)
  or ``torch.distributed`` (torchrun with ``proc_num`` processes per node,
  on this node alone or across ``node_num`` nodes);
* kill an entry's whole process group at its timeout and write a timeout
  result for every rank that did not finish;
* write a result file for every rank even when the process died without one;
* keep ``status.json`` current after each entry, so an interrupted run can be
  resumed (``--resume`` skips what finished) and the control node can tell
  what happened;
* on SIGTERM/SIGINT, kill what it started and record the interruption (SIGHUP, a lost SSH session,
  does not stop the host's run);
* never look like success when it fails itself: an exception in the runner marks the entry it was
  running ``failed`` with the exception's last line, keeps the traceback in
  ``runner-error-<step>.txt``, leaves no entry ``running`` and exits 3;
* name its host and run in every file it writes (``status.json``, the spec, the pid files, logs, the
  rank files), hold ``runner.lock`` while it runs and refuse a results directory that another host's
  runner uses or used (hosts that share a workspace), and print its record as the last stdout line
  (``RECORD_PREFIX`` + JSON) for the control node to check.

It does not import torch: a host whose torch is broken still reports why.
"""

from __future__ import annotations

import argparse
import base64
import fcntl
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sb_bench.core.result import ReturnCode, failure, now_iso, rank_file, write_result
from sb_bench.host.hostprep import WORKSPACE_LOCK_FIX, LockUnsupported, flock
from sb_bench.host.launch_mpi import pattern_env, run_mpi
from sb_bench.host.modespec import SpecError, count, flag, node_count

SPEC_VERSION = 1
KILL_GRACE_S = 5.0
RECORD_PREFIX = "sb-fleet-runner-record: "  # the last stdout line: the runner's record, as JSON
RC_RUNNER_ERROR = 3  # the runner itself failed (an exception, a foreign results directory)


class ForeignResults(Exception):
    """The results directory belongs to another host's (or run's) runner."""


def last_line(exc: BaseException) -> str:
    """An exception as the last line of its traceback (``ValueError: invalid literal ...``)."""
    import traceback  # only on a failure: ~7 ms of imports

    text = "".join(traceback.format_exception_only(type(exc), exc)).strip().splitlines()
    return text[-1] if text else type(exc).__name__


@dataclass
class Proc:
    popen: subprocess.Popen
    ranks: list[int]
    log: Path


@dataclass
class EntryRun:
    key: str
    entry: dict
    out: Path
    expected_ranks: list[int] = field(default_factory=list)
    timed_out: bool = False
    exit_notes: list[str] = field(default_factory=list)
    # the host's deadline for the whole run (spec run_timeout) came before the entry's own: its seconds
    by_run_deadline: float | None = None
    not_started: bool = False  # that deadline had passed before any of its processes started


class Runner:
    def __init__(self, spec: dict, results: Path, args: argparse.Namespace):
        self.spec = spec
        self.results = results
        self.args = args
        self.python = args.python or sys.executable
        self.live: list[Proc] = []
        self.interrupted: str | None = None
        self.host = str(args.host or "")
        self.run_id = str(spec.get("run_id") or "")
        self.step = str(spec.get("step") or "step")
        self.lock_fd: int | None = None
        self.run_deadline: float | None = None  # time.monotonic() of the host's deadline for the whole run

    @property
    def identity(self) -> dict:
        """What every file this runner writes says about who wrote it."""
        return {"host": self.host, "run_id": self.run_id, "step": self.step}

    # -- signals --------------------------------------------------------------------------------
    def install_signals(self) -> None:
        def handler(signum: int, _frame: Any) -> None:
            self.interrupted = signal.Signals(signum).name
            self.kill_all()

        for s in (signal.SIGTERM, signal.SIGINT):
            signal.signal(s, handler)
        # SIGHUP: the SSH session that started the runner died (a lost link, a killed sshd; the run
        # task has a tty). The host goes on and a later collect fetches its results; an interrupted
        # run is stopped with SIGTERM (sb-fleet's stop_runners). A handler, not SIG_IGN, so that the
        # benchmarks do not inherit it.
        signal.signal(signal.SIGHUP, _lost_session)

    def kill_all(self, sig: int = signal.SIGTERM) -> None:
        kill_groups([p.popen for p in self.live], sig)

    # -- ownership of the results directory ------------------------------------------------------
    def claim(self) -> None:
        """Hold ``runner.lock`` for the runner's life, and refuse a directory that is another host's.

        Hosts that share a workspace (a home over NFS, one ``sb_workspace`` for several hosts) would
        otherwise overwrite each other's pid, spec and status files."""
        path = self.results / "runner.lock"
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            flock(fd, path, fcntl.LOCK_EX | fcntl.LOCK_NB, WORKSPACE_LOCK_FIX)
        except LockUnsupported:
            os.close(fd)
            raise
        except OSError:  # EWOULDBLOCK: another runner holds it
            other = _read_json_bytes(os.pread(fd, 4096, 0))
            os.close(fd)
            if other.get("host") == self.host and other.get("run_id") == self.run_id:
                # Not a shared workspace: this host's own runner of this run, started by an earlier
                # command that was killed (kill -9) or lost its connection, is still at work.
                raise ForeignResults(
                    f"this host's runner of this run (step {other.get('step') or '?'}, pid "
                    f"{other.get('pid') or '?'}) is still running, started by an earlier command that was "
                    f"killed or lost its connection: wait for it to finish (or stop it: kill "
                    f"{other.get('pid') or 'PID'} on the host), then run --resume again"
                ) from None
            raise ForeignResults(
                f"{self.results} is in use by the runner of host {other.get('host') or '?'} "
                f"(run {other.get('run_id') or '?'}, pid {other.get('pid') or '?'}): hosts that share a "
                f"workspace need their own (put {{host}} in fleet.workspace or give each host its own "
                f"sb_workspace)"
            ) from None
        self.lock_fd = fd
        st = self.load_status()
        owner, run = st.get("host"), st.get("run_id")
        if (owner and owner != self.host) or (run and self.run_id and run != self.run_id):
            raise ForeignResults(
                f"{self.status_path} holds host {owner or '?'}'s status of run {run or '?'}, not "
                f"{self.host}'s of run {self.run_id}: hosts that share a workspace need their own "
                f"(put {{host}} in fleet.workspace or give each host its own sb_workspace)"
            )
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({**self.identity, "pid": os.getpid()}).encode() + b"\n", 0)

    def release(self) -> None:
        if self.lock_fd is not None:
            os.close(self.lock_fd)  # closing drops the flock
            self.lock_fd = None

    # -- the host's deadline for every step of the run together -----------------------------------
    def start_run_clock(self) -> None:
        """With the spec's ``run_timeout`` (fleet.run_timeout: a campaign stage's deadline per node), the
        host's runs of this run end that many seconds after its first step began, whichever step is
        running then. The first step's runner writes the wall-clock start to ``run-clock.json``, the
        later steps' runners read it; a ``--resume`` whose deadline had passed starts a new clock (the
        operator's retry gets the whole deadline again)."""
        budget = self.spec.get("run_timeout")
        if budget is None:
            return
        if isinstance(budget, bool) or not isinstance(budget, (int, float)) or budget <= 0:
            raise SpecError(f"run_timeout must be a positive number of seconds, not {budget!r}")
        path = self.results / "run-clock.json"
        clock = _read_json_bytes(path.read_bytes()) if path.exists() else {}
        started = clock.get("started")
        now = time.time()
        fresh = (
            clock.get("run_id") != self.run_id
            or isinstance(started, bool)
            or not isinstance(started, (int, float))
            or started > now + 60  # a clock from the future is no clock
            or (self.args.resume and now - started >= budget)
        )
        if fresh:
            started = now
            write_result(path, {"run_id": self.run_id, "started": now, "first_step": self.step})
        assert isinstance(started, (int, float))
        self.run_deadline = time.monotonic() + (started + float(budget) - now)

    # -- status -----------------------------------------------------------------------------------
    @property
    def status_path(self) -> Path:
        return self.results / "status.json"

    def load_status(self) -> dict:
        try:
            data = json.loads(self.status_path.read_text())
            if isinstance(data, dict) and isinstance(data.get("entries"), dict):
                return data
        except (OSError, ValueError):
            pass
        return {"schema_version": SPEC_VERSION, "entries": {}}

    def save_status(self, status: dict) -> None:
        write_result(self.status_path, status)  # same atomic writer

    def record(self) -> dict:
        """The runner's record as it is on disk now (what collect will fetch), for the control node."""
        try:
            st = json.loads(self.status_path.read_text())
        except (OSError, ValueError) as exc:
            return {**self.identity, "error": f"status.json unreadable after the run: {exc}", "entries": {}}
        if not isinstance(st, dict):
            return {**self.identity, "error": "status.json is not an object", "entries": {}}
        entries = st.get("entries") if isinstance(st.get("entries"), dict) else {}
        keep = ("host", "run_id", "step", "finished", "interrupted", "error")
        return {
            **{k: st.get(k) for k in keep},
            "entries": {
                k: {"status": v.get("status"), "reason": str(v.get("reason") or "")[:300]}
                for k, v in entries.items()
                if isinstance(v, dict)
            },
        }

    # -- main loop --------------------------------------------------------------------------------
    def run(self) -> int:
        self.results.mkdir(parents=True, exist_ok=True)
        self.claim()
        self.start_run_clock()
        # The spec, named by host and run, once the directory is known to be this host's.
        write_result(self.results / f"spec-{self.step}.json", {**self.spec, "host": self.host})
        ident = f"host={self.host} run_id={self.run_id} step={self.step}"
        (self.results / "runner.pid").write_text(f"{os.getpid()}\n# {ident}\n")
        # process groups started (cleanup after a hard kill); '#' lines are not pgids
        (self.results / "runner.pgids").write_text(f"# {ident}\n")
        status = self.load_status()
        status.update(
            {
                "schema_version": SPEC_VERSION,
                **self.identity,
                "pid": os.getpid(),
                "started": now_iso(),
                "finished": None,
                "error": None,
            }
        )
        entries = status.setdefault("entries", {})
        worst = 0
        current: EntryRun | None = None
        try:
            for entry in self.spec["entries"]:
                key = entry["key"]
                if self.args.only and key not in self.args.only:
                    continue
                prev = entries.get(key, {})
                if self.args.resume and prev.get("status") in ("ok", "skipped"):
                    continue
                if self.interrupted:
                    entries[key] = {
                        "status": "pending",
                        "reason": f"not started: runner got {self.interrupted}",
                    }
                    continue
                entries[key] = {"status": "running", "start": now_iso()}
                self.save_status(status)
                t0 = time.monotonic()
                current = EntryRun(key, entry, self.results / key)
                self.run_entry(current)
                st = summarize(current, self.interrupted)
                st.update(
                    {
                        "start": entries[key]["start"],
                        "end": now_iso(),
                        "duration_s": round(time.monotonic() - t0, 3),
                    }
                )
                entries[key] = st
                current = None
                self.save_status(status)
                if st["status"] not in ("ok", "skipped"):
                    worst = 1
        except Exception as exc:
            worst = RC_RUNNER_ERROR
            self.crashed(status, current, exc)
        finally:
            # Whatever happened, no entry of this runner stays "running".
            for key, st in entries.items():
                if isinstance(st, dict) and st.get("status") == "running":
                    why = status.get("error") or (
                        f"runner got {self.interrupted}" if self.interrupted else ""
                    )
                    entries[key] = {
                        **st,
                        "status": "failed",
                        "reason": f"the runner stopped: {why or 'unknown'}",
                    }
            status["finished"] = now_iso()
            status["interrupted"] = self.interrupted
            self.save_status(status)
        if self.interrupted and worst != RC_RUNNER_ERROR:
            return 130
        return worst

    def crashed(self, status: dict, er: EntryRun | None, exc: BaseException) -> None:
        """The runner itself failed: stop what it started, keep the traceback, mark the entry it was
        running failed (with rank files saying why) and the ones after it not started."""
        line = last_line(exc)
        tb_file = self.results / f"runner-error-{self.step}.txt"
        header = "".join(f"{k}: {v}\n" for k, v in self.identity.items())
        import traceback

        tb = traceback.format_exc()
        tb_file.write_text(f"{header}time: {now_iso()}\n\n{tb}")
        say(tb.rstrip("\n"), sys.stderr)
        kill_groups([p.popen for p in self.live], signal.SIGKILL)
        for p in list(self.live):
            p.popen.wait()
            self.live.remove(p)
        status["error"] = f"runner crashed: {line} (traceback in {tb_file.name})"
        entries = status["entries"]
        if er is not None:
            er.exit_notes.insert(0, f"runner crashed: {line}")
            try:
                self.fill_missing(er)
            except Exception:  # noqa: BLE001 - the status below still says why
                pass
            entries[er.key] = {
                **entries.get(er.key, {}),
                "status": "failed",
                "return_code": int(ReturnCode.NO_RESULT),
                "reason": f"runner crashed: {line}",
                "end": now_iso(),
            }
        seen = er is None
        for entry in self.spec["entries"]:
            key = entry["key"]
            if er is not None and key == er.key:
                seen = True
                continue
            if seen and (not self.args.only or key in self.args.only):
                prev = entries.get(key, {})
                if self.args.resume and prev.get("status") in ("ok", "skipped"):
                    continue
                entries[key] = {"status": "pending", "reason": f"not started: the runner crashed ({line})"}

    def run_entry(self, er: EntryRun) -> EntryRun:
        entry, out = er.entry, er.out
        out.mkdir(parents=True, exist_ok=True)
        for old in out.glob("rank*.json"):
            old.unlink()
        deadline = time.monotonic() + float(entry.get("timeout") or 1e9)
        if self.run_deadline is not None and self.run_deadline < deadline:
            deadline = self.run_deadline
            er.by_run_deadline = float(self.spec["run_timeout"])
        offset = 0
        for i, mode in enumerate(entry["modes"]):
            if self.interrupted:
                break
            if not isinstance(mode, dict):
                raise SpecError(f"{er.key}: modes[{i}] must be an object")
            name = mode.get("name", "local")
            if time.monotonic() >= deadline:
                # Past the host's deadline before this mode began: nothing starts; its ranks say why.
                er.timed_out = True
                er.not_started = i == 0
                er.expected_ranks += self.mode_ranks(er, mode, offset)
                break
            if name == "local":
                n = count(mode.get("proc_num"), f"{er.key}: modes[{i}].proc_num")
                ranks = list(range(offset, offset + n))
                er.expected_ranks += ranks
                self.run_local(er, mode, ranks, deadline)
                offset += n
            elif name == "torch.distributed":
                self.run_torchrun(er, mode, deadline)
            elif name == "mpi":
                run_mpi(
                    self, er, mode, deadline
                )  # mpirun over this node's group (sb_bench/host/launch_mpi.py)
            else:
                raise SpecError(f"{er.key}: mode {name!r} is not supported")
            if er.timed_out:
                break
        self.fill_missing(er)
        self.stamp(er)
        return er

    def mode_ranks(self, er: EntryRun, mode: dict, offset: int) -> list[int]:
        """The ranks a mode would have written on this host (for the result files of a mode not run)."""
        name = mode.get("name", "local")
        n = count(mode.get("proc_num"), f"{er.key}: proc_num")
        if name == "local":
            return list(range(offset, offset + n))
        if name == "torch.distributed" and node_count(mode.get("node_num", 1), self.args.nnodes) > 1:
            return [int(self.args.node_rank or 0) * n + i for i in range(n)]
        return list(range(n))

    def stamp(self, er: EntryRun) -> None:
        """Name this host and run in every rank file of the entry (collect checks them)."""
        for f in er.out.glob("rank*.json"):
            try:
                data = json.loads(f.read_text())
            except (OSError, ValueError):
                continue  # a corrupt file stays as it is: the normaliser reports it
            if isinstance(data, dict) and (data.get("host"), data.get("run_id")) != (self.host, self.run_id):
                data["host"], data["run_id"] = self.host, self.run_id
                write_result(f, data)

    def _exec_argv(self, entry: dict, out: Path) -> list[str]:
        return [
            self.python,
            "-m",
            "sb_bench",
            "exec",
            entry["benchmark"],
            "--params",
            json.dumps(entry.get("params") or {}),
            "--out",
            str(out),
        ]

    def _env(self, mode: dict) -> dict:
        env = dict(os.environ)
        env.update({str(k): str(v) for k, v in (mode.get("env") or {}).items()})
        env.update({"SB_HOST": self.host, "SB_RUN_ID": self.run_id})
        env.update(pattern_env(self.args))  # a pattern round's indexes and this node's address
        return env

    def run_local(self, er: EntryRun, mode: dict, ranks: list[int], deadline: float) -> None:
        n = len(ranks)
        parallel = flag(mode.get("parallel"), f"{er.key}: parallel")
        prefix = str(mode.get("prefix") or "")
        procs = []
        for proc_rank, rank in enumerate(ranks):
            env = self._env(mode)
            env.update({"PROC_RANK": str(proc_rank), "PROC_NUM": str(n), "SB_RESULT_RANK": str(rank)})
            argv = self._exec_argv(er.entry, er.out)
            if prefix:
                # The prefix is shell, as in SuperBench configs (e.g. `numactl -N $(({proc_rank}/2))`);
                # it comes from the config, and our own arguments are quoted after it.
                cmd = prefix.format(proc_rank=proc_rank, proc_num=n) + " " + shlex.join(argv)
                argv = ["/bin/sh", "-c", cmd]
            p = self.spawn(argv, env, er.out / "logs" / f"rank{rank}.log", [rank])
            procs.append(p)
            if not parallel:
                self.wait(er, [p], deadline)
                if er.timed_out or self.interrupted:
                    return
        if parallel:
            self.wait(er, procs, deadline)

    def run_torchrun(self, er: EntryRun, mode: dict, deadline: float) -> None:
        nproc = count(mode.get("proc_num"), f"{er.key}: proc_num")
        a = self.args
        nnodes = node_count(mode.get("node_num", 1), a.nnodes)
        argv = [self.python, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}"]
        if nnodes <= 1:
            argv += ["--standalone", "--nnodes=1"]
            node_rank = 0
        else:
            if a.master_addr is None or a.node_rank is None:
                raise SpecError(
                    f"{er.key}: node_num {mode.get('node_num')} needs --master-addr and --node-rank"
                )
            node_rank = a.node_rank
            port = int(a.master_port) + int(er.entry.get("port_offset", 0))
            argv += [
                f"--nnodes={nnodes}",
                f"--node_rank={node_rank}",
                f"--master_addr={a.master_addr}",
                f"--master_port={port}",
            ]
            if a.local_addr:
                argv.append(f"--local_addr={a.local_addr}")
        argv += [
            "-m",
            "sb_bench",
            "exec",
            er.entry["benchmark"],
            "--params",
            json.dumps(er.entry.get("params") or {}),
            "--out",
            str(er.out),
        ]
        er.expected_ranks += [node_rank * nproc + i for i in range(nproc)]
        env = self._env(mode)
        env.pop("SB_RESULT_RANK", None)
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
        p = self.spawn(argv, env, er.out / "logs" / "torchrun.log", er.expected_ranks[-nproc:])
        self.wait(er, [p], deadline)

    def spawn(self, argv: list[str], env: dict, log: Path, ranks: list[int]) -> Proc:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as f:
            f.write(f"# sb-fleet runner: host={self.host} run_id={self.run_id} ranks={ranks}\n".encode())
            f.flush()
            popen = subprocess.Popen(
                argv,
                env=env,
                stdout=f,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        p = Proc(popen, ranks, log)
        self.live.append(p)
        with open(self.results / "runner.pgids", "a") as f:
            f.write(f"{popen.pid}\n")
        return p

    def wait(self, er: EntryRun, procs: list[Proc], deadline: float) -> None:
        pending = list(procs)
        while pending:
            pending = [p for p in pending if p.popen.poll() is None]
            if not pending:
                break
            if self.interrupted:
                break
            if time.monotonic() >= deadline:
                er.timed_out = True
                break
            time.sleep(0.05)
        if pending:
            kill_groups([p.popen for p in pending], signal.SIGTERM)
            end = time.monotonic() + KILL_GRACE_S
            while any(p.popen.poll() is None for p in pending) and time.monotonic() < end:
                time.sleep(0.05)
        # What is left: a launch past its grace, or children a group left behind when its leader exited.
        kill_groups([p.popen for p in procs], signal.SIGKILL)
        for p in pending:
            p.popen.wait()
        for p in procs:
            rc = p.popen.returncode
            if rc not in (0, None):
                er.exit_notes.append(f"rank {p.ranks[0]} exited {rc}: {_tail(p.log)}")
            if p in self.live:
                self.live.remove(p)

    def fill_missing(self, er: EntryRun) -> None:
        name = er.entry["benchmark"]
        for rank in er.expected_ranks:
            f = rank_file(er.out, rank)
            if f.exists():
                continue
            if er.timed_out and er.by_run_deadline is not None:
                what = "not started" if er.not_started else "killed"
                code, reason, st = (
                    ReturnCode.TIMEOUT,
                    f"{what}: this host's deadline for all of the run's benchmarks ({er.by_run_deadline:g} s, "
                    "fleet.run_timeout: a campaign stage's timeout) had passed",
                    "timeout",
                )
            elif er.timed_out:
                code, reason, st = (
                    ReturnCode.TIMEOUT,
                    f"killed at its timeout of {er.entry.get('timeout')} s",
                    "timeout",
                )
            elif self.interrupted:
                code, reason, st = ReturnCode.KILLED, f"interrupted ({self.interrupted})", "failed"
            else:
                note = "; ".join(er.exit_notes)[:500] or "the process ended without writing a result"
                code, reason, st = ReturnCode.NO_RESULT, note, "failed"
            env = failure(
                name,
                er.entry.get("type", "micro"),
                code,
                reason,
                rank=rank,
                status=st,
                params=er.entry.get("params"),
            )
            write_result(f, {**env, "host": self.host, "run_id": self.run_id})


def summarize(er: EntryRun, interrupted: str | None) -> dict:
    """An entry's status from its rank files."""
    results = []
    for f in sorted(er.out.glob("rank*.json")):
        try:
            results.append(json.loads(f.read_text()))
        except (OSError, ValueError) as exc:
            results.append(
                {
                    "return_code": int(ReturnCode.INVALID_BENCHMARK_RESULT),
                    "status": "failed",
                    "reason": f"{f.name}: unreadable ({exc})",
                }
            )
    codes = [int(r.get("return_code", 1)) for r in results]
    statuses = [r.get("status", "failed") for r in results]
    bad = [r for r in results if int(r.get("return_code", 1)) != 0]
    if er.timed_out:
        st = "timeout"
    elif interrupted:
        st = "interrupted"
    elif bad:
        st = "failed"
    elif results and all(s == "skipped" for s in statuses):
        st = "skipped"
    else:
        st = "ok"
    reason = next((r.get("reason", "") for r in bad), "") or next(
        (r.get("reason", "") for r in results if r.get("reason")), ""
    )
    if er.timed_out and not reason:  # every rank wrote a result, yet some process was still running
        reason = f"still running at its timeout of {er.entry.get('timeout')} s: killed"
    return {
        "status": st,
        "return_code": max(codes, default=int(ReturnCode.NO_RESULT)),
        "reason": reason,
        "ranks": len(results),
    }


def _lost_session(_signum: int, _frame: Any) -> None:
    pass


def say(text: str, stream: Any = None) -> None:
    """Print one line; a terminal that went away with the SSH session is no reason to fail."""
    try:
        print(text, file=stream or sys.stdout, flush=True)
    except (OSError, ValueError):
        pass


def kill_groups(popens: list[subprocess.Popen], sig: int) -> None:
    """Signal launched processes' groups, and every process of their sessions that left its group: mpirun
    puts its local ranks in process groups of their own, and a rank that outlives a killed mpirun
    would hold its ports into the next round (every launch starts a new session)."""
    if not popens:
        return
    for p in popens:
        try:
            os.killpg(p.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    for pid in session_members({p.pid for p in popens}):
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def session_members(sids: set[int]) -> list[int]:
    """The processes of the sessions ``sids`` (one pass over Linux /proc; elsewhere none), leaders excluded."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    out = []
    for name in names:
        if not name.isdigit() or int(name) in sids:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[-1].split()
        except OSError:
            continue
        if len(fields) > 3 and fields[3].isdigit() and int(fields[3]) in sids:  # state, ppid, pgrp, session
            out.append(int(name))
    return out


def _read_json_bytes(data: bytes) -> dict:
    try:
        obj = json.loads(data.decode(errors="replace").strip() or "{}")
    except ValueError:
        return {}
    return obj if isinstance(obj, dict) else {}


def _tail(log: Path, n: int = 3) -> str:
    try:
        lines = [
            ln
            for ln in log.read_text(errors="replace").splitlines()
            if ln.strip() and not ln.startswith("# sb-fleet runner:")
        ]
    except OSError:
        return ""
    return " | ".join(lines[-n:])[-300:]


def load_spec(path: Path) -> dict:
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise SpecError(f"{path}: cannot read the step spec ({exc})") from exc
    return parse_spec(text, str(path))


def parse_spec(text: str, path: str) -> dict:
    try:
        spec = json.loads(text)
    except ValueError as exc:
        raise SpecError(f"{path}: the step spec is not JSON ({exc})") from exc
    if not isinstance(spec, dict):
        raise SpecError(f"{path}: the step spec must be a JSON object")
    if spec.get("schema_version") != SPEC_VERSION:
        raise SpecError(
            f"{path}: spec schema_version {spec.get('schema_version')!r}, this runner reads {SPEC_VERSION}"
        )
    entries = spec.get("entries", [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise SpecError(f"{path}: entries must be a list of objects")
    for i, e in enumerate(entries):
        for k in ("key", "benchmark", "modes"):
            if k not in e:
                raise SpecError(f"{path}: entries[{i}] lacks {k!r}")
    return spec


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m sb_bench.host.runner", description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--spec", type=Path, help="the step spec (JSON file) rendered by sb-fleet")
    src.add_argument("--spec-json", help="the step spec inline (saves a file transfer per host and step)")
    src.add_argument(
        "--spec-b64",
        help="the step spec inline, base64 of its JSON (no characters any template "
        "engine or shell could interpret)",
    )
    ap.add_argument("--results", required=True, type=Path, help="directory for results and status.json")
    ap.add_argument("--host", default="", help="inventory name of this host (recorded in status.json)")
    ap.add_argument("--resume", action="store_true", help="skip entries that already finished ok")
    ap.add_argument("--only", nargs="*", help="run only these entry keys")
    ap.add_argument("--python", help="interpreter for the benchmarks (default: this one)")
    ap.add_argument("--node-rank", type=int)
    ap.add_argument("--nnodes", type=int, help="the node group's size (what node_num: all means)")
    ap.add_argument("--master-addr")
    ap.add_argument("--master-port", type=int, default=29500)
    ap.add_argument("--local-addr")
    ap.add_argument("--mode-index", help="a pattern round: SERIAL,PARALLEL (SuperBench's indexes)")
    ap.add_argument("--mpi-group-b64", help="mpi mode: this node's group (base64 JSON, from sb-fleet's plan)")
    args = ap.parse_args(argv)
    try:
        if args.spec:
            spec = load_spec(args.spec)
        elif args.spec_b64:
            try:
                text = base64.b64decode(args.spec_b64, validate=True).decode()
            except (ValueError, UnicodeDecodeError) as exc:
                raise SpecError(f"--spec-b64 is not base64 of UTF-8 ({exc})") from exc
            spec = parse_spec(text, "--spec-b64")
        else:
            spec = parse_spec(args.spec_json, "--spec-json")
        args.results = args.results.expanduser().absolute()
        args.results.mkdir(parents=True, exist_ok=True)
    except SpecError as exc:
        print(f"sb_bench.host.runner: {exc}", file=sys.stderr)
        return 2
    runner = Runner(spec, args.results, args)
    runner.install_signals()
    try:
        rc = runner.run()
    except (ForeignResults, LockUnsupported) as exc:
        say(f"sb_bench.host.runner: {exc}", sys.stderr)
        say(RECORD_PREFIX + json.dumps({**runner.identity, "error": str(exc), "entries": {}}))
        return RC_RUNNER_ERROR
    finally:
        runner.release()
    say(RECORD_PREFIX + json.dumps(runner.record(), sort_keys=True))
    return rc


if __name__ == "__main__":
    from sb_bench.core.process_end import end_process

    end_process(main())  # every process it started is waited for, every file synced: no finalisation
