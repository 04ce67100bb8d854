"""A task's failed or unreachable result as a host's outcome and one-line reason: the same words whether
Ansible ran the task (sb_fleet.fleet.executor) or sb-fleet's own ssh client did (sb_fleet.fleet.direct_exec)."""

from __future__ import annotations

import json
import re
from typing import Any

from sb_fleet.outcome import Outcome

HOSTKEY_MARKERS = (
    "Host key verification failed",
    "REMOTE HOST IDENTIFICATION HAS CHANGED",
    "No ED25519 host key is known",
    "No ECDSA host key is known",
    "No RSA host key is known",
    "host key for",
    "Host key for",
)

TASK_TIMEOUT = re.compile(r"[Tt]imed out after (\d+) second")  # Ansible's task timeout, in its message


def one_line(s: str, n: int = 400) -> str:
    return " ".join(str(s).split())[:n]


def classify(event: str, res: dict[str, Any]) -> tuple[Outcome, str]:
    """A failed or unreachable event as an outcome and one-line reason."""
    msg = str(res.get("msg") or "")
    stderr = str(res.get("stderr") or "")
    text = f"{msg} {stderr}"
    if event == "runner_on_unreachable":
        if any(m in text for m in HOSTKEY_MARKERS):
            return Outcome.HOSTKEY, (
                "host key unknown or changed: refused (check the host; if it was "
                "re-imaged, update known_hosts; first contact: --accept-new-host-keys)"
            )
        return Outcome.UNREACHABLE, one_line(msg or "unreachable")
    if "timed out" in text.lower() and "task" in text.lower():
        return Outcome.TIMEOUT, one_line(msg)
    reason = msg
    out = str(res.get("stdout") or "")
    # hostprep prints its facts with an "error" key when the host is not ready, as its last JSON line
    # (marker lines such as SB_FLEET_INSTALLING may come before it)
    last = next((x for x in reversed(out.strip().splitlines()) if x.lstrip().startswith("{")), "")
    if last:
        try:
            doc = json.loads(last)
            err = doc.get("error") if isinstance(doc, dict) else None
            if err:
                reason = str(err)
        except ValueError:
            pass
    if stderr and reason in ("non-zero return code", ""):
        reason = f"{reason}: {stderr.strip().splitlines()[-1]}"
    return Outcome.FAILED, one_line(reason or "failed")
