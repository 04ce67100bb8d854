"""What every check shares: the record it returns, the host's roots and tool directory, running a tool."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PASS, WARN, FAIL = "pass", "warn", "fail"
_RANK = {PASS: 0, WARN: 1, FAIL: 2}
MAX_TOOL_OUTPUT = 4 << 20  # a tool that prints more than this is cut (a host's garbage stays bounded)


@dataclass(frozen=True)
class Record:
    """One check's result: its verdict, the value read, the rule applied and the evidence."""

    check: str
    verdict: str
    value: Any
    rule: str
    evidence: str = ""
    source: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "verdict": self.verdict,
            "value": self.value,
            "rule": self.rule,
            "evidence": self.evidence,
            "source": self.source,
        }


def worst(verdicts: list[str]) -> str:
    return max(verdicts, key=lambda v: _RANK.get(v, 2), default=PASS)


@dataclass(frozen=True)
class Env:
    """Where this host's facts are read: sysfs and procfs roots, a tool directory searched before PATH,
    the workspace (for free disk) and the expectations (rules) handed in by the control node."""

    sysfs: Path = Path("/sys")
    procfs: Path = Path("/proc")
    tool_dir: Path | None = None
    workspace: Path | None = None
    expect: dict[str, Any] = field(default_factory=dict)

    def sys(self, rel: str) -> Path:
        return self.sysfs / rel

    def proc(self, rel: str) -> Path:
        return self.procfs / rel

    @property
    def etc(self) -> Path:
        """``/etc``, or ``etc`` beside a relocated procfs root (``<root>/proc`` -> ``<root>/etc``)."""
        if self.procfs == Path("/proc") or self.procfs.name != "proc":
            return Path("/etc")
        return self.procfs.parent / "etc"

    def want(self, family: str, key: str, default: Any = None) -> Any:
        fam = self.expect.get(family)
        return fam.get(key, default) if isinstance(fam, dict) else default

    def tool(self, name: str) -> str | None:
        """The tool's path: the tool directory first, then PATH (not PATH when the directory has it)."""
        if self.tool_dir is not None:
            p = self.tool_dir / name
            if p.is_file() and os.access(p, os.X_OK):
                return str(p)
        return shutil.which(name)

    def run(self, argv: list[str], timeout: float = 10.0) -> tuple[int, str, str]:
        """Run a tool (found by :meth:`tool`); (rc, stdout, stderr), rc 127 when it is not there."""
        exe = self.tool(argv[0])
        if exe is None:
            return 127, "", f"{argv[0]}: not found"
        try:
            p = subprocess.run(
                [exe, *argv[1:]], capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL
            )
        except subprocess.TimeoutExpired:
            return 124, "", f"{argv[0]}: no answer within {timeout:g} s"
        except OSError as exc:
            return 126, "", f"{argv[0]}: {exc}"
        out = p.stdout[:MAX_TOOL_OUTPUT].decode("utf-8", "replace")
        err = p.stderr[:MAX_TOOL_OUTPUT].decode("utf-8", "replace")
        return p.returncode, out, err


def read_text(path: Path, limit: int = 1 << 20) -> str | None:
    """A sysfs/procfs file's text (stripped), or None when it is missing or unreadable."""
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace").strip()
    except OSError:
        return None


def read_int(path: Path) -> int | None:
    t = read_text(path)
    if t is None:
        return None
    try:
        return int(t.split()[0], 0)
    except (ValueError, IndexError):
        return None
