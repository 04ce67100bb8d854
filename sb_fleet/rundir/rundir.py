"""The run directory: the on-disk contract of one validation run.

``runs/<run-id>/`` holds everything a run used and produced, so that anyone
can inspect it afterwards and ``collect``/``report`` can re-run offline::

    manifest.json          schema version, sb-fleet version, commands run, times
    config.yaml            the config as given;  config.json  as validated
    inventory/             the inventory as given; hosts.json as resolved
    plan.json              what runs where (read back by every later command: Plan.from_json)
    playbooks/             the rendered playbooks
    ansible/<stage>/       ansible-runner's private data dir and artifacts
    facts/<host>.json      system facts recorded at deploy
    outcomes/<stage>.json  one outcome per inventory host per stage
    raw/<host>/            result files fetched from each host
    results-summary.jsonl  SuperBench's one-line-per-node summary
    report.*               the report
    logs/libraries.log     what libraries logged (paramiko, ansible-runner ...): rundir.runlog

Every file is written to a temporary name and renamed into place, so a
crash or a full disk never leaves a half-written file under its final name.
The directory is private (0700): it may hold facts about the fleet.

The inputs (config, inventory snapshot, hosts.json, plan.json, playbooks/)
are written once, when the run is created; later commands read them back
and never rewrite them, so a command with ``--limit`` narrows what it does
but never what the run is. A file that cannot be read back (truncated,
not JSON) is a :class:`RunDirError` naming it: exit 2, never a traceback.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import secrets
from pathlib import Path
from typing import Any

from sb_fleet import __version__
from sb_fleet.errors import RunDirError
from sb_fleet.safe_files import atomic_write_json, safe_name

SCHEMA_VERSION = 2  # 2: inputs written once, plan read back, --limit recorded per command
MANIFEST = "manifest.json"


def new_run_id(now: _dt.datetime | None = None) -> str:
    now = now or _dt.datetime.now(_dt.timezone.utc)
    return now.strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def utcnow() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


class RunDir:
    """A run directory on disk. Create with :meth:`create` or open with :meth:`open`."""

    def __init__(self, path: Path):
        self.path = Path(path)

    # -- lifecycle ---------------------------------------------------------------------------
    @classmethod
    def create(cls, path: Path | None = None, root: Path = Path("runs")) -> RunDir:
        """A new run directory. Its run id names the run's files on every host, so it is unique
        even when two directories share a name (``--run-dir a/run`` and ``--run-dir b/run``)."""
        if path is None:
            path = Path(root) / new_run_id()
            run_id = path.name
        else:
            run_id = f"{safe_name(Path(path).name)}-{secrets.token_hex(3)}"
        path = Path(path)
        if (path / MANIFEST).exists():
            return cls.open(path)
        try:
            path.mkdir(parents=True, exist_ok=True, mode=0o700)
            os.chmod(path, 0o700)
        except OSError as exc:
            raise RunDirError(f"{path}: cannot create the run directory ({exc.strerror})") from exc
        rd = cls(path)
        atomic_write_json(
            path / MANIFEST,
            {
                "schema_version": SCHEMA_VERSION,
                "tool": "sb-fleet",
                "run_id": run_id,
                "sb_fleet_version": __version__,
                "created": utcnow(),
                "commands": [],
            },
        )
        return rd

    @classmethod
    def open(cls, path: Path) -> RunDir:
        path = Path(path)
        mf = path / MANIFEST
        if not mf.is_file():
            raise RunDirError(
                f"{path}: not a run directory (no {MANIFEST}); give a directory made by sb-fleet"
            )
        data = cls(path).manifest()
        ver = data.get("schema_version")
        if ver != SCHEMA_VERSION:
            newer = isinstance(ver, int) and ver > SCHEMA_VERSION
            raise RunDirError(
                f"{mf}: schema_version {ver!r} is {'newer' if newer else 'older'} than this sb-fleet "
                f"understands ({SCHEMA_VERSION}); use sb-fleet {data.get('sb_fleet_version', '?')} to read it"
            )
        return cls(path)

    @property
    def run_id(self) -> str:
        """The id that names this run's workspace on the hosts (``runs/<run-id>/``)."""
        return str(self.manifest().get("run_id") or self.path.name)

    # -- manifest ----------------------------------------------------------------------------
    def manifest(self) -> dict:
        data = self.read_json(MANIFEST)
        if not isinstance(data, dict):
            raise RunDirError(
                f"{self.path / MANIFEST}: not a run manifest; give a directory made by sb-fleet"
            )
        return data

    def record_command(
        self, argv: list[str], start: str, end: str, exit_code: int, hosts: list[str] | None = None
    ) -> None:
        """Append one command to the manifest: its argv, times, exit code and the hosts it acted on."""
        m = self.manifest()
        entry: dict[str, Any] = {"argv": argv, "start": start, "end": end, "exit_code": exit_code}
        if hosts is not None:
            entry["hosts"] = hosts
        m.setdefault("commands", []).append(entry)
        m["updated"] = end
        atomic_write_json(self.path / MANIFEST, m)

    def update_manifest(self, **fields: Any) -> None:
        m = self.manifest()
        m.update(fields)
        atomic_write_json(self.path / MANIFEST, m)

    # -- well-known paths --------------------------------------------------------------------
    def sub(self, *parts: str) -> Path:
        p = self.path.joinpath(*parts)
        p.mkdir(parents=True, exist_ok=True, mode=0o700)
        return p

    @property
    def raw(self) -> Path:
        return self.sub("raw")

    def raw_host(self, host: str) -> Path:
        return self.sub("raw", safe_name(host))

    def write_json(self, rel: str, obj: Any) -> Path:
        p = self.path / rel
        atomic_write_json(p, obj)
        return p

    def read_json(self, rel: str, default: Any = None) -> Any:
        """A JSON file of the run directory; ``default`` when absent; :class:`RunDirError` when corrupt."""
        p = self.path / rel
        try:
            text = p.read_text()
        except FileNotFoundError:
            return default
        except OSError as exc:
            raise RunDirError(f"{p}: cannot read ({exc.strerror})") from None
        try:
            return json.loads(text)
        except ValueError as exc:
            raise RunDirError(
                f"{p}: corrupt or truncated ({exc}); restore it from a copy (a result file is re-made by "
                f"re-running the command that wrote it; an input such as plan.json only by a new run)"
            ) from None
