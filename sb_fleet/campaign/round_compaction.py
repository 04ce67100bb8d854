"""A soak's rounds kept in bounded disk: each round, once recorded in the campaign's state, is written as a
line of the soak's series file (:mod:`sb_fleet.campaign.round_columns`: what the judgement reads of it) and
then, where the campaign keeps only failed rounds (``keep_rounds: failed``, the default), its run directory
is compacted.

A round's run directory is 50-60 KB a node (raw results, the health document, its rows of the report,
metrics.prom, junit) and ~450 KB of playbooks and the suite's archive: 232 GB for 1,000 nodes x 4,320
rounds. Compacted, it keeps:

- ``manifest.json``, ``config.yaml``, ``config.json``, ``metrics.json`` (what ran, how, when; not ``plan.json``:
  ~200 bytes a node a round), ``load.json`` (the round's load, a few numbers a node);
- the files of each node that failed the round, was throttled in it, or whose watched counters changed
  since its previous reading (its raw results, health document and facts: the evidence the records point
  to), for at most :data:`KEEP_ROUNDS_PER_NODE` rounds a node (the records name at most as many);
- the soak's first round whole (a healthy round to compare with);
- ``compacted.json``: what was removed (files, bytes), the nodes kept and why, their report rows, and where
  every node's figures, noise, outcome and counters are (the series file).

Every other file goes (the report files of the round, the playbooks, the other nodes' files). A run
directory is otherwise never shrunk by a later command; this is the campaign's own documented choice
(``keep_rounds: all`` keeps every round whole). ``sb-fleet report`` on a compacted round says so
(:data:`~sb_fleet.analysis.fleet_results.COMPACTED`).

Crash-safe in this order: the round recorded in the state, its line on disk, ``compacted.json`` written,
then the files removed; opened again (``--resume``), the compactor writes the lines the file lacks from
their (whole) run directories and finishes any compaction a stop cut off.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sb_fleet.analysis.fleet_results import COMPACTED
from sb_fleet.bounded_json import read_or_none
from sb_fleet.campaign.campaign_state import RoundRecord
from sb_fleet.campaign.round_columns import SeriesFile, missing, read_series_file, series_file
from sb_fleet.campaign.soak_series import NodeSeries, RoundColumns, extract_round
from sb_fleet.config.campaign_spec import Stage
from sb_fleet.errors import RunDirError
from sb_fleet.safe_files import atomic_write_json

KEEP_ROUNDS_PER_NODE = 20  # acceptance records list at most 20 round directories a node (MAX_EVIDENCE_ROUNDS)
# load.json: the round's load, a few numbers a node in columns (sb_fleet.campaign.soak_load.load_doc)
ROUND_FILES = ("manifest.json", "config.yaml", "config.json", "metrics.json", "load.json")
NODE_FILES = ("raw/{h}", "health/{h}.json", "facts/{h}.json")


def _watched(key: str, watch: Sequence[str]) -> bool:
    """``ib.symbol_error[mlx5_0/1]`` is watched by ``ib.symbol_error``."""
    return key.split("[", 1)[0] in watch


class RoundCompactor:
    """One soak's series file and its rounds' compaction, for the runner to call after each round."""

    def __init__(self, directory: Path, stage: Stage) -> None:
        self.dir = Path(directory)
        self.stage = stage
        self.series = SeriesFile(self.dir / series_file(stage.name))
        self._swept = False

    def catch_up(self, records: Sequence[RoundRecord]) -> list[str]:
        """Every recorded round's line written (from its run directory) and, with ``keep_rounds: failed``,
        its directory compacted; the first call also finishes a compaction a stop cut off. The run
        directories compacted now."""
        done: list[str] = []
        first = records[0].run_dir if records else None
        compacting = self.stage.keep_rounds == "failed"
        if not self._swept and compacting:  # a compaction a stop cut off (its line is on disk)
            for rec in records:
                keep = self.series.keep.get(rec.run_dir)
                rd = self.dir / rec.run_dir
                if keep is not None and rec.run_dir != first and rd.is_dir():
                    marker = _marker(self.stage.name, self.series.path.name, rec, keep, rd)
                    if compact(rd, keep, marker):
                        done.append(rec.run_dir)
        self._swept = True
        for rec in missing(self.series, records):
            rd = self.dir / rec.run_dir
            if (rd / COMPACTED).is_file():
                raise RunDirError(
                    f"{rd}: compacted, and its line is missing from {self.series.path}: the round's figures "
                    "are lost; restore the file, or judge the soak without this round"
                )
            cols = extract_round(self.dir, rec, self.stage)
            if not compacting:
                self.series.append(cols)
                continue
            keep = self.to_keep(cols, whole=rec.run_dir == first)
            self.series.append(cols, keep=keep)
            if rec.run_dir != first:
                compact(rd, keep, _marker(self.stage.name, self.series.path.name, rec, keep, rd))
                done.append(rec.run_dir)
        return done

    def to_keep(self, cols: RoundColumns, whole: bool = False) -> dict[str, str]:
        """The round's nodes whose files stay, and why (before the round's line is written: its counters
        are compared with the node's previous reading)."""
        watch = self.stage.counters
        out: dict[str, str] = {}
        for h, n in cols.nodes.items():
            why = []
            if not n.ok:
                why.append("failed the round")
            if n.throttled:
                why.append(f"{n.throttled} throttled window(s)")
            changed = [k for k in self.series.changed(h, n.counters) if _watched(k, watch)]
            if changed:
                why.append(f"changed {', '.join(changed[:5])}{' ...' if len(changed) > 5 else ''}")
            if whole:
                out[h] = "; ".join(why) or "the soak's first round, kept whole"
            elif why and self.series.kept.get(h, 0) < KEEP_ROUNDS_PER_NODE:
                out[h] = "; ".join(why)
        return out

    def judged_series(
        self, records: Sequence[RoundRecord], hosts: Sequence[str], closing: Path
    ) -> dict[str, NodeSeries]:
        """Every node's soak in columns, read from the series file (brought up to date first)."""
        self.catch_up(records)
        return read_series_file(self.series, records, hosts, closing)


def _marker(stage: str, series: str, rec: RoundRecord, keep: Mapping[str, str], rd: Path) -> dict[str, Any]:
    report = read_or_none(rd / "report.json") or {}
    rows = {
        str(r.get("name")): r
        for r in (report.get("hosts") or [] if isinstance(report, Mapping) else [])
        if isinstance(r, Mapping) and r.get("name") in keep
    }
    return {
        "schema_version": 1,
        "what": (
            f"soak round {rec.index} of stage {stage}, compacted by sb-fleet accept once its line was written "
            "(campaign key keep_rounds: failed; keep_rounds: all keeps every round whole)"
        ),
        "series": series,
        "round": rec.index,
        "start": rec.start,
        "end": rec.end,
        "nodes": len(rec.hosts),
        "kept": dict(keep),
        "report_rows": rows,
    }


def _drop(rd: Path, keep: Mapping[str, str]) -> list[Path]:
    """What compacting ``rd`` removes: every file but :data:`ROUND_FILES`, the marker and the kept nodes'."""
    kept = {rd / f for f in (*ROUND_FILES, COMPACTED)}
    kept_dirs: set[Path] = set()
    for h in keep:
        for pattern in NODE_FILES:
            p = rd / pattern.format(h=h)
            (kept_dirs if pattern.startswith("raw/") else kept).add(p)
    out = []
    for root, dirs, files in os.walk(rd):
        r = Path(root)
        dirs[:] = [d for d in dirs if r / d not in kept_dirs]
        out += [r / f for f in files if r / f not in kept]
    return out


def compact(rd: Path, keep: Mapping[str, str], marker: Mapping[str, Any]) -> bool:
    """Compact one round's run directory (idempotent): the marker first (where absent), then the files
    removed and the empty folders. Whether anything was removed."""
    rd = Path(rd)
    drop = _drop(rd, keep)
    if not (rd / COMPACTED).is_file():
        size = 0
        for p in drop:
            try:
                size += p.lstat().st_size
            except OSError:
                pass
        atomic_write_json(rd / COMPACTED, {**marker, "removed": {"files": len(drop), "bytes": size}})
    for p in drop:
        try:
            p.unlink()
        except OSError:
            pass  # gone already (a compaction cut off), or not ours to remove: the round keeps it
    for root, dirs, _files in os.walk(rd, topdown=False):
        for d in dirs:
            try:
                os.rmdir(Path(root) / d)
            except OSError:
                pass  # not empty: a kept node's files
    return bool(drop)
