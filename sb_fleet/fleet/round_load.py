"""A soak round's load on its nodes: ``sb_bench.host.burn`` started on every node after the round's
benchmarks, over the round's own run (its executor, ssh settings and process tag), until the round's end.

Each node's command is one line for its login shell, built here from the run's ``exec-hosts.json``
(sb_fleet.plan.host_exec: workspace, Python, the fake machine's roots), every value quoted; it runs over
sb-fleet's own ssh clients (or srun steps) as validate's exec does (sb_fleet.fleet.direct_exec), tagged
with the round's run id, so a stop's sweep (sb_fleet.fleet.reaper) finds it. A node whose inventory needs
Ansible's connection (a password, become) gets no load: ``load.json`` says why.

Ending: the process has its own deadline (``--seconds``: the round's end less the margin) and ends by
itself even if this control node died; Ctrl-C/SIGTERM here ends the clients and sweeps the nodes' tagged
processes before :class:`LoadStopped` goes up.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from sb_fleet.campaign.soak_load import LOAD_FILE, load_doc, parse_summary
from sb_fleet.config.campaign_spec import Load
from sb_fleet.fleet.direct_exec import ExecTask, HostExec
from sb_fleet.fleet.executor import run_direct_stage
from sb_fleet.fleet.interrupts import Interrupts
from sb_fleet.outcome import Outcome
from sb_fleet.plan.host_exec import read_exec_hosts, sh_path, tagged_shell
from sb_fleet.plan.templates import run_env
from sb_fleet.safe_files import atomic_write_json

TASK = "load"
BURN_MODULE = "sb_bench.host.burn"
HOST_GRACE_S = 30  # sb_bench.host.burn.GRACE_S: its SIGALRM after its deadline
CLIENT_SLACK_S = 30  # the client's own timeout beyond that


@dataclass
class LoadRun:
    """What a round's load did: when it started and ended here, and per node its outcome, the reason and
    its summary (``load.json`` keeps them in columns: sb_fleet.campaign.soak_load.load_doc)."""

    start: str
    end: str
    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)
    stopped: str | None = None  # the signal's name where Ctrl-C/SIGTERM stopped it


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="seconds")


def load_command(
    doc: Mapping[str, Any], host: str, tag: str, load: Load, seconds: float, env: Mapping[str, str]
) -> str:
    """The line ``host``'s login shell runs: in its workspace, the suite's Python runs the load with the
    fleet's environment (``fleet.env``), its process tag set from the shell's start."""
    h = doc["hosts"][host]
    argv = [
        "env",
        "PYTHONPATH=suite",
        *(f"{k}={v}" for k, v in env.items()),
        h.get("suite_python") or h["python"],
        "-m",
        BURN_MODULE,
        "--kind",
        load.kind,
        "--seconds",
        f"{seconds:.1f}",
        "--interval",
        f"{load.interval:g}",
        "--size",
        str(load.size),
        "--threads",
        str(load.threads),
        "--sysfs",
        h.get("sysfs") or "/sys",
        "--procfs",
        h.get("procfs") or "/proc",
        "--tool-dir",
        h.get("tool_dir") or "",
    ]
    script = f"cd {sh_path(h['workspace'])} && exec " + " ".join(shlex.quote(a) for a in argv)
    return tagged_shell(f"{tag}/{host}", script)


def run_round_load(opts: Any, load: Load, hosts: Sequence[str], seconds: float) -> LoadRun:
    """The load on ``hosts`` for ``seconds``, in the round's run directory (``opts``: the round's
    validate options, sb_fleet.fleet.workflow.Options); ``load.json`` written there."""
    from sb_fleet.fleet import workflow as wf

    t0 = time.time()
    run = wf.inputs_for(opts, create=False)
    doc = read_exec_hosts(run.rendered.exec_hosts)
    out = LoadRun(_iso(t0), _iso(t0))
    entries: dict[str, dict[str, Any]] = {}
    stopped: str | None = None
    if doc is None:
        entries = {
            h: {"outcome": "skipped", "reason": "the round's run has no exec-hosts.json"} for h in hosts
        }
    else:
        with wf.executor(run, opts, list(hosts)) as ex:
            direct = [h for h in ex.direct_hosts(list(hosts)) if h in doc["hosts"]]
            for h in hosts:
                if h not in doc["hosts"]:
                    entries[h] = {"outcome": "skipped", "reason": "not in the round's exec-hosts.json"}
                elif h not in direct:
                    entries[h] = {
                        "outcome": "skipped",
                        "reason": "no load: the node's exec goes through Ansible (its inventory asks for it)",
                    }
            env = run_env(run.config)
            task = ExecTask(
                TASK,
                {h: HostExec(load_command(doc, h, ex.run_id, load, seconds, env)) for h in direct},
                int(seconds) + HOST_GRACE_S + CLIENT_SLACK_S,
            )
            with Interrupts() as intr:
                res = run_direct_stage(ex, TASK, task, direct, intr.fired, None, None) if direct else None
                stopped = intr.signal
                if stopped is not None and direct:
                    ex.stop_hosts(direct)  # the loads' processes on the nodes, by their tag
            for h in direct:
                o = res.outcomes.get(h) if res is not None else None
                got = (res.results.get(h) or {}).get(TASK) or {} if res is not None else {}
                summary = parse_summary(str(got.get("stdout") or ""))
                entries[h] = {
                    "outcome": o.outcome.value if o is not None else Outcome.PENDING.value,
                    "reason": o.reason if o is not None else "",
                    "summary": summary,
                }
    out.end = _iso(time.time())
    out.hosts, out.stopped = entries, stopped
    atomic_write_json(
        run.rd.path / LOAD_FILE, load_doc(load.kind, out.start, out.end, seconds, stopped, entries)
    )
    return out
