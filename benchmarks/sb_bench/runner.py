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
* on SIGTERM/SIGINT/SIGHUP, kill what it started and record the interruption.

It does not import torch: a host whose torch is broken still reports why.
"""

from __future__ import annotations

import argparse
import base64
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

from sb_bench.result import ReturnCode, failure, now_iso, rank_file, write_result

SPEC_VERSION = 1
KILL_GRACE_S = 5.0


class SpecError(Exception):
    pass


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


class Runner:
    def __init__(self, spec: dict, results: Path, args: argparse.Namespace):
        self.spec = spec
        self.results = results
        self.args = args
        self.python = args.python or sys.executable
        self.live: list[Proc] = []
        self.interrupted: str | None = None

    # -- signals --------------------------------------------------------------------------------
    def install_signals(self) -> None:
        def handler(signum: int, _frame: Any) -> None:
            self.interrupted = signal.Signals(signum).name
            self.kill_all()

        for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(s, handler)

    def kill_all(self, sig: int = signal.SIGTERM) -> None:
        for p in self.live:
            _killpg(p.popen, sig)

    # -- status -----------------------------------------------------------------------------------
    @property
    def status_path(self) -> Path:
        return self.results / "status.json"

    def load_status(self) -> dict:
        try:
            return json.loads(self.status_path.read_text())
        except (OSError, ValueError):
            return {"schema_version": SPEC_VERSION, "entries": {}}

    def save_status(self, status: dict) -> None:
        write_result(self.status_path, status)  # same atomic writer

    # -- main loop --------------------------------------------------------------------------------
    def run(self) -> int:
        self.results.mkdir(parents=True, exist_ok=True)
        (self.results / "runner.pid").write_text(f"{os.getpid()}\n")
        (self.results / "runner.pgids").write_text("")  # process groups started (cleanup after a hard kill)
        status = self.load_status()
        status.update({"host": self.args.host, "pid": os.getpid(), "started": now_iso(), "finished": None})
        entries = status.setdefault("entries", {})
        worst = 0
        for entry in self.spec["entries"]:
            key = entry["key"]
            if self.args.only and key not in self.args.only:
                continue
            prev = entries.get(key, {})
            if self.args.resume and prev.get("status") in ("ok", "skipped"):
                continue
            if self.interrupted:
                entries[key] = {"status": "pending", "reason": f"not started: runner got {self.interrupted}"}
                continue
            entries[key] = {"status": "running", "start": now_iso()}
            self.save_status(status)
            t0 = time.monotonic()
            er = self.run_entry(entry)
            st = summarize(er, self.interrupted)
            st.update(
                {
                    "start": entries[key]["start"],
                    "end": now_iso(),
                    "duration_s": round(time.monotonic() - t0, 3),
                }
            )
            entries[key] = st
            self.save_status(status)
            if st["status"] not in ("ok", "skipped"):
                worst = 1
        status["finished"] = now_iso()
        status["interrupted"] = self.interrupted
        self.save_status(status)
        return 130 if self.interrupted else worst

    def run_entry(self, entry: dict) -> EntryRun:
        key = entry["key"]
        out = self.results / key
        out.mkdir(parents=True, exist_ok=True)
        for old in out.glob("rank*.json"):
            old.unlink()
        er = EntryRun(key, entry, out)
        deadline = time.monotonic() + float(entry.get("timeout") or 1e9)
        offset = 0
        for mode in entry["modes"]:
            if self.interrupted:
                break
            name = mode.get("name", "local")
            if name == "local":
                n = int(mode.get("proc_num", 1))
                ranks = list(range(offset, offset + n))
                er.expected_ranks += ranks
                self.run_local(er, mode, ranks, deadline)
                offset += n
            elif name == "torch.distributed":
                self.run_torchrun(er, mode, deadline)
            else:
                raise SpecError(f"mode {name!r} is not supported")
            if er.timed_out:
                break
        self.fill_missing(er)
        return er

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

    def run_local(self, er: EntryRun, mode: dict, ranks: list[int], deadline: float) -> None:
        n = len(ranks)
        parallel = bool(mode.get("parallel", True))
        prefix = str(mode.get("prefix") or "")
        procs = []
        for proc_rank, rank in enumerate(ranks):
            env = dict(os.environ)
            env.update({str(k): str(v) for k, v in (mode.get("env") or {}).items()})
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
        nproc = int(mode.get("proc_num", 1))
        nnodes = int(mode.get("node_num", 1))
        argv = [self.python, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}"]
        if nnodes <= 1:
            argv += ["--standalone", "--nnodes=1"]
            node_rank = 0
        else:
            a = self.args
            if a.master_addr is None or a.node_rank is None:
                raise SpecError(f"{er.key}: node_num {nnodes} needs --master-addr and --node-rank")
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
        env = dict(os.environ)
        env.update({str(k): str(v) for k, v in (mode.get("env") or {}).items()})
        env.pop("SB_RESULT_RANK", None)
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
        p = self.spawn(argv, env, er.out / "logs" / "torchrun.log", er.expected_ranks[-nproc:])
        self.wait(er, [p], deadline)

    def spawn(self, argv: list[str], env: dict, log: Path, ranks: list[int]) -> Proc:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as f:
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
            for p in pending:
                _killpg(p.popen, signal.SIGTERM)
            end = time.monotonic() + KILL_GRACE_S
            while any(p.popen.poll() is None for p in pending) and time.monotonic() < end:
                time.sleep(0.05)
            for p in pending:
                _killpg(p.popen, signal.SIGKILL)
                p.popen.wait()
        for p in procs:
            rc = p.popen.returncode
            if rc not in (0, None):
                er.exit_notes.append(f"rank {p.ranks[0]} exited {rc}: {_tail(p.log)}")
            # A group may leave children behind even when its leader exited.
            _killpg(p.popen, signal.SIGKILL)
            if p in self.live:
                self.live.remove(p)

    def fill_missing(self, er: EntryRun) -> None:
        name = er.entry["benchmark"]
        for rank in er.expected_ranks:
            f = rank_file(er.out, rank)
            if f.exists():
                continue
            if er.timed_out:
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
            write_result(
                f,
                failure(
                    name,
                    er.entry.get("type", "micro"),
                    code,
                    reason,
                    rank=rank,
                    status=st,
                    params=er.entry.get("params"),
                ),
            )


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
    return {
        "status": st,
        "return_code": max(codes, default=int(ReturnCode.NO_RESULT)),
        "reason": reason,
        "ranks": len(results),
    }


def _killpg(p: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(p.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _tail(log: Path, n: int = 3) -> str:
    try:
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
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
    ap = argparse.ArgumentParser(prog="python -m sb_bench.runner", description=__doc__.splitlines()[0])
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
    ap.add_argument("--nnodes", type=int)
    ap.add_argument("--master-addr")
    ap.add_argument("--master-port", type=int, default=29500)
    ap.add_argument("--local-addr")
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
        write_result(args.results / f"spec-{spec.get('step', 'step')}.json", spec)
        runner = Runner(spec, args.results, args)
        runner.install_signals()
        return runner.run()
    except SpecError as exc:
        print(f"sb_bench.runner: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
