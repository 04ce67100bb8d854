"""Act on a run's verdict in Slurm: drain the hosts that failed, resume the ones sb-fleet drained that now
pass, and leave every other node alone.

``plan_actions`` is pure: given the run's verdict (``quarantine.txt`` and ``report.json``) and what Slurm
says of each node (state and reason), it decides, per node, drain / resume / leave, with the reason.
``apply`` carries the plan out with ``scontrol`` (argument vectors, never a shell) and appends every
action, with who, when and what came back, to ``slurm-actions.json`` in the run directory.

Ownership is the reason field: sb-fleet writes ``sb-fleet <run-id>: <top finding>``, so a node drained
or down for any other reason (an admin's maintenance, another tool) is never touched, and ``--resume``
only resumes nodes whose reason starts with ``sb-fleet``.
"""

from __future__ import annotations

import datetime as dt
import getpass
import socket
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sb_fleet.errors import InfraError, RunDirError
from sb_fleet.report.writers.report_json import top_finding
from sb_fleet.rundir.rundir import RunDir

OWNER = "sb-fleet"
MAX_REASON = 255  # Slurm's reason field; the issue asks for under 256 characters
SCONTROL_TIMEOUT_S = 60
STATE_FLAGS = "*~#%$@^-!"  # sinfo's state suffixes (not responding, power saving, reserved for maint, ...)


@dataclass(frozen=True)
class NodeState:
    name: str
    state: str  # sinfo's long state, e.g. idle, mixed, drained, draining, down
    reason: str = ""

    @property
    def unavailable(self) -> bool:
        s = self.state.lower()
        # (maint alone: an idle node in a maintenance reservation, as the nightly run's may be)
        return any(w in s for w in ("drain", "down", "fail", "reboot"))

    @property
    def ours(self) -> bool:
        return self.reason.startswith(f"{OWNER} ")


@dataclass(frozen=True)
class Action:
    node: str
    verb: str  # drain | resume | leave
    why: str
    argv: tuple[str, ...] = ()


def drain_reason(run_id: str, finding: str) -> str:
    """``sb-fleet <run-id>: <finding>`` on one line, under 256 characters."""
    text = " ".join(f"{OWNER} {run_id}: {finding}".split())
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 3] + "..."


def plan_actions(
    run_id: str,
    failed: dict[str, str],
    passed: set[str],
    nodes: dict[str, NodeState],
    resume: bool,
    scontrol: str = "scontrol",
) -> list[Action]:
    """Per node: drain the failed, resume (with ``resume``) those sb-fleet drained that now pass, leave
    everything else, saying why."""
    out: list[Action] = []
    for host, finding in failed.items():
        node = nodes.get(host)
        if node is None:
            out.append(Action(host, "leave", "not a node of this Slurm cluster"))
        elif node.unavailable and not node.ours:
            out.append(
                Action(
                    host,
                    "leave",
                    f"already {node.state} for another reason ({node.reason or 'none'}); not ours",
                )
            )
        elif node.unavailable and node.reason.startswith(f"{OWNER} {run_id}:"):  # drained by this run already
            out.append(Action(host, "leave", f"already {node.state} by {OWNER} {run_id} ({node.reason})"))
        else:
            reason = drain_reason(run_id, finding)
            argv = (scontrol, "update", f"nodename={host}", "state=drain", f"reason={reason}")
            out.append(Action(host, "drain", reason, argv))
    if resume:
        for host in sorted(passed):
            node = nodes.get(host)
            if node is None or host in failed:
                continue
            if node.unavailable and node.ours:
                back = (scontrol, "update", f"nodename={host}", "state=resume")
                out.append(Action(host, "resume", f"passes in run {run_id}; was: {node.reason}", back))
            elif node.unavailable:
                out.append(
                    Action(
                        host,
                        "leave",
                        f"passes, but {node.state} for another reason ({node.reason or 'none'})",
                    )
                )
    return out


def parse_node_states(text: str) -> dict[str, NodeState]:
    """``sinfo -h -N -o '%N|%T|%E'`` -> node states (a node listed in several partitions once)."""
    out: dict[str, NodeState] = {}
    for line in text.splitlines():
        f = line.split("|", 2)
        if len(f) < 2 or not f[0].strip():
            continue
        reason = f[2].strip() if len(f) > 2 else ""
        out.setdefault(
            f[0].strip(),
            NodeState(f[0].strip(), f[1].strip().rstrip(STATE_FLAGS), "" if reason == "none" else reason),
        )
    return out


def node_states(hosts: list[str], sinfo: str = "sinfo") -> dict[str, NodeState]:
    from sb_fleet.config.hostlist import compress

    argv = [sinfo, "-h", "-N", "-o", "%N|%T|%E", "-n", compress(hosts)]
    r = slurm_command(argv)
    if r.returncode != 0:
        raise InfraError(
            f"{' '.join(argv[:1])} failed (exit {r.returncode}): {' '.join(r.stderr.split())[:300]}"
        )
    return parse_node_states(r.stdout)


def slurm_command(
    argv: list[str] | tuple[str, ...], timeout: float = SCONTROL_TIMEOUT_S, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """One of Slurm's commands, as an argument vector; a missing command or no answer is an InfraError."""
    try:
        return subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, check=False, env=env
        )
    except FileNotFoundError:
        raise InfraError(
            f"{argv[0]} not found: run sb-fleet where Slurm's commands are (slurm-client), or give its path "
            "in the config's slurm section"
        ) from None
    except subprocess.TimeoutExpired:
        raise InfraError(f"{argv[0]} gave no answer in {timeout:.0f} s: check slurmctld") from None


@dataclass(frozen=True)
class Verdict:
    run_id: str
    failed: dict[str, str]  # host -> top finding
    passed: set[str]
    hosts: list[str]


def read_verdict(rd: RunDir) -> Verdict:
    report = rd.read_json("report.json")
    if report is None:
        raise RunDirError(f"{rd.path / 'report.json'}: no report yet; run sb-fleet report {rd.path} first")
    by_name = {h["name"]: h for h in report.get("hosts", []) if isinstance(h, dict) and "name" in h}
    q = rd.path / "quarantine.txt"
    names = [n.strip() for n in q.read_text().splitlines() if n.strip()] if q.exists() else []
    failed = {n: top_finding(by_name.get(n, {})) for n in names}
    passed = {n for n, h in by_name.items() if h.get("verdict") == "pass"}
    return Verdict(rd.run_id, failed, passed, list(by_name))


def run_actions(actions: list[Action], dry_run: bool) -> list[dict[str, Any]]:
    """Run each drain/resume (unless ``dry_run``); each action's record (when, who, where, what, and
    scontrol's exit status and words)."""
    who, where = getpass.getuser(), socket.gethostname()
    done: list[dict[str, Any]] = []
    for a in actions:
        rec: dict[str, Any] = {
            "time": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "user": who,
            "control_node": where,
            "dry_run": dry_run,
            **asdict(a),
        }
        if a.argv and not dry_run:
            r = slurm_command(a.argv)
            rec["rc"] = r.returncode
            rec["stderr"] = " ".join(r.stderr.split())[:500]
        done.append(rec)
    return done


def apply(rd: RunDir, actions: list[Action], dry_run: bool) -> list[dict[str, Any]]:
    """Run each drain/resume (unless ``dry_run``) and append every action to ``slurm-actions.json``."""
    done = run_actions(actions, dry_run)
    log = rd.read_json("slurm-actions.json") or {"schema_version": 1, "actions": []}
    log["actions"] = [*log.get("actions", []), *done]  # only ever grows
    rd.write_json("slurm-actions.json", log)
    return done


def drain_run(path: Path, resume: bool, dry_run: bool) -> tuple[int, str]:
    """``sb-fleet drain RUN``: (exit code, text to print)."""
    from sb_fleet.config.fleet_config import Config

    rd = RunDir.open(path)
    cfg_data = rd.read_json("config.json") or {}
    slurm = Config.model_validate(cfg_data).slurm if cfg_data else None
    sinfo = slurm.sinfo if slurm else "sinfo"
    scontrol = slurm.scontrol if slurm else "scontrol"
    verdict = read_verdict(rd)
    wanted = sorted(set(verdict.failed) | (verdict.passed if resume else set()))
    nodes = node_states(wanted, sinfo) if wanted else {}
    actions = plan_actions(verdict.run_id, verdict.failed, verdict.passed, nodes, resume, scontrol)
    done = apply(rd, actions, dry_run)
    lines, bad = action_lines(done, dry_run)
    if not done:
        lines.append(
            "nothing to do: no failing host" + (" and no sb-fleet-drained host that passes" if resume else "")
        )
    lines.append(f"actions recorded in {rd.path / 'slurm-actions.json'}")
    return (3 if bad else 0), "\n".join(lines)


def action_lines(done: list[dict[str, Any]], dry_run: bool) -> tuple[list[str], int]:
    """A line for each action recorded by :func:`run_actions` (its scontrol command, shell-quoted, in a
    dry run), and how many of them failed."""
    import shlex

    lines, bad = [], 0
    for rec in done:
        if rec["verb"] == "leave":
            lines.append(f"{rec['node']}: left alone: {rec['why']}")
        elif dry_run:
            lines.append(" ".join(shlex.quote(w) for w in rec["argv"]))
        elif rec.get("rc") == 0:
            lines.append(
                f"{rec['node']}: {'drained' if rec['verb'] == 'drain' else 'resumed'} ({rec['why']})"
            )
        else:
            bad += 1
            lines.append(
                f"{rec['node']}: {rec['verb']} FAILED (scontrol exit {rec.get('rc')}: {rec.get('stderr')})"
            )
    return lines, bad
