"""The health checks as Slurm's ``HealthCheckProgram`` (the way NHC is used): the node checks itself and
drains itself on a failure, with the reason in Slurm's own field, and resumes itself once it passes again
if (and only if) the drain was sb-fleet's.

``slurm.conf``::

    HealthCheckProgram=/opt/sb-fleet/health-check.sh      # runs: python3 -m sb_bench health --slurm
    HealthCheckInterval=300
    HealthCheckNodeState=ANY

Ownership is the reason's prefix, as in ``sb-fleet drain``: a node drained or down for any other reason
(an admin's maintenance, another tool) is never touched. Commands are argument vectors, never a shell.
"""

from __future__ import annotations

import os
import socket
import subprocess
from typing import Any

PREFIX = "sb-fleet health: "
MAX_REASON = 255


def node_name() -> str:
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def parse_show_node(text: str) -> tuple[str, str]:
    """(State, Reason) from ``scontrol show node -o NAME`` (Reason is last on the line and may hold spaces)."""
    state, reason = "", ""
    for tok in text.split():
        if tok.startswith("State="):
            state = tok[len("State=") :]
    if " Reason=" in text:
        reason = text.split(" Reason=", 1)[1].strip()
        reason = reason.rsplit(" [", 1)[0] if reason.endswith("]") else reason  # "... [root@12:00]"
    return state, reason


def reason_of(doc: dict[str, Any]) -> str:
    fails = [c for c in doc.get("checks", []) if c.get("verdict") == "fail"]
    first = fails[0] if fails else {}
    text = f"{PREFIX}{first.get('check', '?')}: {first.get('evidence', '')}"
    if len(fails) > 1:
        text += f" (+{len(fails) - 1} more)"
    text = " ".join(text.split())
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 3] + "..."


def decide(doc: dict[str, Any], state: str, reason: str) -> tuple[str, str]:
    """(drain | resume | leave, why)."""
    ours = reason.startswith(PREFIX)
    unavailable = any(w in state.upper() for w in ("DRAIN", "DOWN", "FAIL", "MAINT", "REBOOT"))
    if doc.get("verdict") == "fail":
        if unavailable and not ours:
            return "leave", f"failing, but already {state} for another reason ({reason or 'none'})"
        return "drain", reason_of(doc)
    if unavailable and ours:
        return "resume", "the health checks pass again"
    return (
        "leave",
        "healthy" if not unavailable else f"healthy, {state} for another reason ({reason or 'none'})",
    )


def act(doc: dict[str, Any], node: str, scontrol: str = "scontrol") -> tuple[int, str]:
    """Read the node's state, then drain, resume or leave it; (rc, one line saying what was done)."""
    try:
        r = subprocess.run([scontrol, "show", "node", "-o", node], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 3, f"slurm: cannot read node {node}: {exc}"
    if r.returncode != 0:
        return 3, f"slurm: scontrol show node {node} failed: {' '.join(r.stderr.split())[:200]}"
    state, reason = parse_show_node(r.stdout)
    verb, why = decide(doc, state, reason)
    if verb == "leave":
        return 0, f"slurm: {node} left as it is: {why}"
    argv = [scontrol, "update", f"nodename={node}", "state=drain" if verb == "drain" else "state=resume"]
    if verb == "drain":
        argv.append(f"reason={why}")
    u = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if u.returncode != 0:
        return 3, f"slurm: {verb} of {node} failed: {' '.join(u.stderr.split())[:200]}"
    return 0, f"slurm: {node} {'drained' if verb == 'drain' else 'resumed'}: {why}"
