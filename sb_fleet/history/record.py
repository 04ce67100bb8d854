"""What a run adds to the history: its identity (key, time, config digest, software versions), every
host's verdict, outcome, issues and facts, and every value keyed by component."""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import orjson

from sb_fleet import __version__
from sb_fleet.analysis.superbench.metric_names import parse_metric
from sb_fleet.history.components import ComponentMap
from sb_fleet.history.history_store import HostRow, RunRecord
from sb_fleet.safe_files import safe_name

# Facts whose distinct values across the fleet are the run's software versions.
VERSION_FACTS = ("driver_version", "cuda_version", "torch_version", "torch_cuda", "os", "python")


@dataclass(frozen=True)
class RunMeta:
    run_key: str
    time: _dt.datetime  # UTC, naive
    source: str
    config_digest: str | None
    versions: dict[str, Any]
    facts: dict[str, dict[str, Any]]  # host -> facts recorded at deploy


class JudgedHost(Protocol):
    """What the history keeps of a judged host (sb_fleet.analysis.verdict.HostReport has it)."""

    @property
    def name(self) -> str: ...
    @property
    def verdict(self) -> str: ...
    @property
    def outcome(self) -> str: ...
    @property
    def reason(self) -> str: ...
    @property
    def gpu_model(self) -> str | None: ...
    @property
    def issues(self) -> Sequence[Any]: ...


def _utc(ts: str | None) -> _dt.datetime | None:
    if not ts:
        return None
    try:
        t = _dt.datetime.fromisoformat(str(ts).replace("Z", "+00:00"))
    except ValueError:
        return None
    if t.tzinfo is not None:
        t = t.astimezone(_dt.timezone.utc).replace(tzinfo=None)
    return t


def _json(path: Path) -> Any:
    try:
        return orjson.loads(path.read_bytes())
    except (OSError, ValueError):
        return None


def read_facts(run_dir: Path, hosts: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``facts/<host>.json`` of every host that has one."""
    try:
        present = set(os.listdir(run_dir / "facts"))
    except OSError:
        return {}
    out: dict[str, dict[str, Any]] = {}
    for h in hosts:
        name = f"{safe_name(h)}.json"
        if name in present:
            data = _json(run_dir / "facts" / name)
            if isinstance(data, dict):
                out[h] = data
    return out


def run_meta(source: Path | str, run_dir: Path | None, hosts: Sequence[str]) -> RunMeta:
    """The run's identity: a run directory's run id and creation time, or a results file's digest and
    modification time."""
    source = Path(source)
    versions: dict[str, Any] = {"sb_fleet_report": __version__}
    if run_dir is not None:
        manifest = _json(run_dir / "manifest.json") or {}
        facts = read_facts(run_dir, hosts)
        for key in ("sb_fleet_version", "python", "ansible_core"):
            if manifest.get(key):
                versions[key] = manifest[key]
        for key in VERSION_FACTS:
            seen = sorted({str(f[key]) for f in facts.values() if f.get(key)})
            if seen:
                versions[f"hosts.{key}"] = seen
        cfg = run_dir / "config.json"
        config_digest = hashlib.sha256(cfg.read_bytes()).hexdigest() if cfg.is_file() else None
        when = _utc(manifest.get("created")) or _mtime(run_dir)
        key = str(manifest.get("run_id") or run_dir.name)
        return RunMeta(key, when, str(run_dir), config_digest, versions, facts)
    h = hashlib.sha256()
    with open(source, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return RunMeta(f"sha256:{h.hexdigest()[:32]}", _mtime(source), str(source), None, versions, {})


def _mtime(p: Path) -> _dt.datetime:
    return _dt.datetime.fromtimestamp(p.stat().st_mtime, _dt.timezone.utc).replace(tzinfo=None)


def fleet_medians(columns: Sequence[str], values: np.ndarray) -> dict[str, tuple[float, int]]:
    """Family (ranks and device indexes pooled) -> (fleet median, values)."""
    fams: dict[str, list[int]] = {}
    for i, c in enumerate(columns):
        fams.setdefault(parse_metric(c).family, []).append(i)
    out: dict[str, tuple[float, int]] = {}
    for fam, cols in fams.items():
        block = values[:, cols]
        n = int(np.isfinite(block).sum())
        if n:
            out[fam] = (float(np.nanmedian(block)), n)
    return out


def build_record(
    meta: RunMeta,
    hosts: Sequence[str],
    columns: Sequence[str],
    values: np.ndarray,
    cmap: ComponentMap,
    judged: Sequence[JudgedHost],
    gate_passed: bool | None,
) -> RunRecord:
    """The run as the store keeps it; its digest covers every value, verdict and issue."""
    rows: list[HostRow] = []
    verdict_of: dict[str, str] = {}
    for j in judged:
        verdict_of[j.name] = j.verdict
        f = meta.facts.get(j.name)
        issues = [i.to_json() for i in j.issues]
        rows.append(
            HostRow(
                host=j.name,
                verdict=j.verdict,
                outcome=j.outcome,
                reason=j.reason or "",
                gpu_model=j.gpu_model,
                facts=json.dumps(f, sort_keys=True) if f else None,
                issues=json.dumps(issues, sort_keys=True) if issues else None,
            )
        )
    ok = np.array([verdict_of.get(h) == "pass" for h in hosts], dtype=bool)
    d = hashlib.sha256()
    d.update(json.dumps([list(hosts), list(columns)]).encode())
    d.update(np.ascontiguousarray(values, dtype=np.float64).tobytes())
    d.update(json.dumps([r.__dict__ for r in rows], sort_keys=True).encode())
    d.update(json.dumps([meta.time.isoformat(), meta.config_digest, gate_passed]).encode())
    return RunRecord(
        run_key=meta.run_key,
        digest=d.hexdigest(),
        source=meta.source,
        time=meta.time,
        config_digest=meta.config_digest,
        versions=meta.versions,
        gate_passed=gate_passed,
        host_rows=rows,
        hosts=list(hosts),
        metrics=list(columns),
        values=np.asarray(values, dtype=float),
        components=cmap.components,
        cmetrics=cmap.metrics,
        comp=cmap.comp,
        cmetric=cmap.metric,
        ok=ok,
        fleet_medians=fleet_medians(columns, values),
    )
