"""The runner's record, checked: a host's run-stage verdict, and whether a collected file is its own. Pure.

The on-host runner (``sb_bench.host.runner``) ends by printing its record (``status.json`` as it is on the
host, with the host's inventory name and the run id) as its last stdout line, and exits 0 (every
benchmark ok), 1 (some benchmark failed: the report judges that), 2 (a bad spec), 3 (the runner itself
failed) or 130 (interrupted). A runner that crashed must never look like success, so a host's run step
is ``failed`` when the runner exited otherwise than 0/1, printed a traceback, left no record, left an
entry ``running`` or not run, or when its record names another host or run (hosts that share a
workspace overwrite each other's files).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sb_fleet.outcome import Outcome

RECORD_PREFIX = (
    "sb-fleet-runner-record: "  # sb_bench.host.runner.RECORD_PREFIX (a unit test keeps them equal)
)
TRACEBACK = "Traceback (most recent call last):"
SHARED_FIX = (
    "hosts that share a workspace need their own (put {host} in fleet.workspace or give each host its own "
    "sb_workspace)"
)


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome  # OK or FAILED
    reason: str = ""
    traceback: str = ""  # the runner's traceback, to keep in the run directory

    @property
    def ok(self) -> bool:
        return self.outcome == Outcome.OK


def _one_line(text: str, n: int = 400) -> str:
    return " ".join(str(text).split())[:n]


def parse_record(stdout: str) -> dict[str, Any] | None:
    """The runner's record: the last stdout line that starts with :data:`RECORD_PREFIX`, or None."""
    for line in reversed(str(stdout or "").splitlines()):
        line = line.strip()
        if line.startswith(RECORD_PREFIX):
            try:
                rec = json.loads(line[len(RECORD_PREFIX) :])
            except ValueError:
                return None
            return rec if isinstance(rec, dict) else None
    return None


def traceback_text(*streams: str) -> str:
    """The last Python traceback in the given output (from its header to the exception line), or ''."""
    for text in streams:
        text = str(text or "")
        i = text.rfind(TRACEBACK)
        if i < 0:
            continue
        lines = text[i:].splitlines()
        out = [lines[0]]
        for ln in lines[1:]:
            out.append(ln)
            if ln and not ln.startswith((" ", "\t")):  # the exception's line ends the traceback
                break
        return "\n".join(out) + "\n"
    return ""


def exception_line(tb: str) -> str:
    """``ValueError: invalid literal ...``: the last line of a traceback."""
    lines = [ln for ln in tb.splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""


def _last_line(text: str) -> str:
    lines = [
        ln.strip() for ln in str(text or "").splitlines() if ln.strip() and not ln.startswith(RECORD_PREFIX)
    ]
    return lines[-1] if lines else ""


def foreign(host: str, run_id: str, doc: Mapping[str, Any], what: str = "the runner's record") -> str | None:
    """Why ``doc`` (a status record or a result file) is not ``host``'s of ``run_id``, or None.

    A document that names no host or run (an older runner's) is taken as it is."""
    other_host, other_run = doc.get("host"), doc.get("run_id")
    if other_host not in (None, "") and str(other_host) != host:
        return f"{what} names host {other_host}, not {host}: {SHARED_FIX}"
    if other_run not in (None, "") and run_id and str(other_run) != run_id:
        return f"{what} is of run {other_run}, not {run_id}: {SHARED_FIX}"
    return None


def judge_run(host: str, run_id: str, expected: Iterable[str], task: Mapping[str, Any]) -> Verdict:
    """A host's verdict for one run step from its run task's result (``rc``, ``stdout``, ``stderr``).

    ``expected``: the keys of the step's entries the runner was asked to run."""
    rc = task.get("rc")
    stdout, stderr = str(task.get("stdout") or ""), str(task.get("stderr") or "")
    record = parse_record(stdout)
    tb = traceback_text(stderr, stdout)
    crash = exception_line(tb)
    error = str(record.get("error") or "") if record else ""

    def failed(reason: str) -> Verdict:
        return Verdict(Outcome.FAILED, _one_line(reason), tb)

    if record is not None:
        why = foreign(host, run_id, record)
        if why:
            return failed(why)
    if rc is None:
        return failed(
            f"the runner reported no exit status: {_last_line(task.get('msg') or stderr) or 'unknown'}"
        )
    if rc not in (0, 1):
        if error:
            return failed(error)
        if crash:
            return failed(f"runner crashed: {crash}")
        if rc in (137, -9):
            return failed("the runner was killed (SIGKILL: out of memory, or killed by hand)")
        if rc in (130, 143, -15, -2):
            return failed(f"the runner was interrupted (exit {rc})")
        return failed(f"the runner exited {rc}: {_last_line(stderr) or _last_line(stdout) or 'no message'}")
    if crash:
        return failed(f"runner crashed: {crash}")
    if record is None:
        return failed(f"the runner exited {rc} and left no record (status) of what it ran")
    if error:
        return failed(error)
    raw_entries = record.get("entries")
    entries: dict[str, Any] = raw_entries if isinstance(raw_entries, dict) else {}
    for key in expected:
        st = entries.get(key)
        if not isinstance(st, dict):
            return failed(f"the runner recorded nothing for {key}")
        word = st.get("status")
        if word == "running":
            return failed(f"{key} was left running when the runner stopped")
        if word in (None, "pending"):
            return failed(f"{key} was not run: {st.get('reason') or 'no reason given'}")
    return Verdict(Outcome.OK)


def foreign_files(host: str, run_id: str, docs: Iterable[tuple[str, Any]]) -> list[str]:
    """Why each collected document (``(name, parsed JSON)``: ``status.json``, the rank files) is not
    ``host``'s of ``run_id``; empty when every one is its own (or names no one)."""
    problems = []
    for name, doc in docs:
        if isinstance(doc, Mapping):
            why = foreign(host, run_id, doc, what=name)
            if why:
                problems.append(why)
    return problems
