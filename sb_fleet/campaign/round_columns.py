"""A soak's rounds in one append-only file, ``soak-<stage>-series.jsonl``: a line a round, written as the
round finishes, holding of each node what the soak's judgement reads of the round's run directory.

Per node of a round: whether it passed the round and why not (its report row judged by the stage's
criteria, :func:`~sb_fleet.campaign.stage_judgement.bench_outcome`), whether the report had a row for it,
its figures and their own measured noise (aligned with the line's ``columns``), its throttled windows, and
of its health document's counters only those that changed since its previous reading (``c``; the first
reading whole) and those no longer read (``gone``). Replayed in order, the lines give every node's readings
exactly as the health documents held them, so the judgement read from this file
(:func:`read_series_file`) is the judgement read from the run directories
(:func:`~sb_fleet.campaign.soak_series.read_series`): the same rounds
(:class:`~sb_fleet.campaign.soak_series.RoundColumns`), added by the same code.

The end-of-soak judgement then reads one file instead of thousands of run directories, and a round's run
directory can be compacted once its line is written (:mod:`sb_fleet.campaign.round_compaction`).
A line is appended whole and flushed to disk; a line cut off by a crash (the file's last, without its
newline) is dropped when the file is next opened, and the round's line written again from its run
directory, which is compacted only after its line is on disk.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from sb_fleet.campaign.campaign_state import RoundRecord
from sb_fleet.campaign.soak_series import NodeRound, NodeSeries, RoundColumns, series_of_rounds
from sb_fleet.errors import RunDirError

SCHEMA = 1
MAX_LINE = 256 << 20  # one round of 1,000 nodes is ~0.1 MB; a line past this is damage, not a round


# how append() starts a line: its schema, round and run directory
_HEAD = re.compile(rb'^\{"v":%d,"round":(-?\d+),"run_dir":("(?:[^"\\]|\\.)*")' % SCHEMA)


def series_file(stage: str) -> str:
    return f"soak-{stage}-series.jsonl"


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def replay(line: Mapping[str, Any], last: dict[str, dict[str, float]]) -> RoundColumns:
    """A line's round, each node's counters whole: its changes applied to ``last`` (each node's previous
    reading, updated)."""
    columns = [str(c) for c in line["columns"]]
    cols = RoundColumns(int(line["round"]), str(line["run_dir"]))
    for h, n in line["nodes"].items():
        counters: dict[str, float] | None = None
        if n.get("doc", 1):
            counters = dict(last.get(h, {}))
            for key in n.get("gone") or []:
                counters.pop(key, None)
            counters.update({str(k): float(v) for k, v in (n.get("c") or {}).items()})
            last[h] = counters
        cols.nodes[str(h)] = NodeRound(
            ok=bool(n["ok"]),
            reason=str(n.get("why") or ""),
            has_row=bool(n.get("row", 1)),
            values={
                c: float(v) for c, v in zip(columns, n.get("v") or [], strict=False) if _num(v) is not None
            },
            noise={
                c: float(v) for c, v in zip(columns, n.get("n") or [], strict=False) if _num(v) is not None
            },
            throttled=int(n.get("t") or 0),
            counters=counters,
        )
    return cols


class SeriesFile:
    """The soak's series file: the rounds it holds (their run directories, in order), how many rounds'
    files each node kept (:mod:`~sb_fleet.campaign.round_compaction`'s count) and each node's last counter
    readings (what the next line's changes are taken against). Opening it reads it once and drops a line
    cut off by a crash."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.run_dirs: dict[str, int] = {}  # run_dir -> its round's index
        self.kept: dict[str, int] = {}  # node -> rounds whose files it kept (round_compaction's count)
        self.keep: dict[str, dict[str, str]] = {}  # run_dir -> the nodes whose files it kept, and why
        self._last_readings: dict[str, dict[str, float]] | None = None  # replayed when first needed
        good = 0
        for raw, head in self._heads():
            self._note(head)
            good += len(raw)
        if self.path.is_file() and good != self.path.stat().st_size:
            with open(self.path, "r+b") as f:
                f.truncate(good)

    @property
    def _last(self) -> dict[str, dict[str, float]]:
        """Each node's last counter readings, the file replayed (only to write a line: the judgement reads
        the rounds without them)."""
        if self._last_readings is None:
            self._last_readings = {}
            for _, line in self._lines():
                replay(line, self._last_readings)
        return self._last_readings

    def _heads(self) -> Iterator[tuple[bytes, dict[str, Any]]]:
        """Each line's round, run directory and kept nodes, its nodes left unparsed where the line starts as
        :meth:`append` writes it (else the whole line, checked)."""
        if not self.path.is_file():
            return
        decoder = json.JSONDecoder()
        with open(self.path, "rb") as f:
            for k, raw in enumerate(f, 1):
                if not raw.endswith(b"\n") or len(raw) > MAX_LINE:
                    return  # cut off by a crash: written again from its run directory
                m = _HEAD.match(raw)
                if m is None:
                    yield raw, self._checked(raw, k)
                    continue
                try:
                    head: dict[str, Any] = {"round": int(m.group(1)), "run_dir": json.loads(m.group(2))}
                    if raw.startswith(b',"keep":', m.end()):
                        head["keep"] = decoder.raw_decode(raw[m.end() + 8 :].decode())[0]
                except ValueError:
                    head = self._checked(raw, k)
                yield raw, head

    def _checked(self, raw: bytes, k: int) -> dict[str, Any]:
        try:
            line = json.loads(raw)
            if not isinstance(line, dict) or line.get("v") != SCHEMA:
                raise ValueError(f"not a schema {SCHEMA} round")
            str(line["run_dir"]), int(line["round"]), line["nodes"].items(), list(line["columns"])
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise RunDirError(
                f"{self.path}: line {k} is damaged ({type(exc).__name__}: {exc}); move the file aside "
                "to read the rounds again from their run directories (rounds already compacted are "
                "then lost)"
            ) from None
        return line

    def _note(self, line: Mapping[str, Any]) -> None:
        self.run_dirs[str(line["run_dir"])] = int(line["round"])
        keep = line.get("keep")
        if isinstance(keep, dict):
            self.keep[str(line["run_dir"])] = {str(h): str(why) for h, why in keep.items()}
            for h in keep:
                self.kept[h] = self.kept.get(h, 0) + 1

    def changed(self, host: str, counters: Mapping[str, float] | None) -> list[str]:
        """The counters of ``host`` that differ from its previous reading (none at its first reading, or
        without a reading)."""
        last = self._last.get(host)
        if counters is None or last is None:
            return []
        return sorted(k for k, v in counters.items() if last.get(k, 0.0) != v)

    def _lines(self) -> Iterator[tuple[bytes, dict[str, Any]]]:
        if not self.path.is_file():
            return
        with open(self.path, "rb") as f:
            for k, raw in enumerate(f, 1):
                if not raw.endswith(b"\n") or len(raw) > MAX_LINE:
                    return  # cut off by a crash: written again from its run directory
                yield raw, self._checked(raw, k)

    def rounds(self) -> Iterator[RoundColumns]:
        """Every round of the file in order, each node's counters whole, one round at a time."""
        last: dict[str, dict[str, float]] = {}
        for _, line in self._lines():
            yield replay(line, last)

    def line(self, cols: RoundColumns, **extra: Any) -> dict[str, Any]:
        """The round's line, each node's counters as changes since its previous reading (and updates those)."""
        columns = sorted({c for n in cols.nodes.values() for c in n.values})
        nodes: dict[str, dict[str, Any]] = {}
        for h, n in cols.nodes.items():
            doc: dict[str, Any] = {"ok": 1 if n.ok else 0}
            if not n.ok:
                doc["why"] = n.reason
            if not n.has_row:
                doc["row"] = 0
            if n.values:
                doc["v"] = [n.values.get(c) for c in columns]
            if n.noise:
                doc["n"] = [n.noise.get(c) for c in columns]
            if n.throttled:
                doc["t"] = n.throttled
            if n.counters is None:
                doc["doc"] = 0
            else:
                last = self._last.get(h, {})
                changed = {k: v for k, v in n.counters.items() if k not in last or last[k] != v}
                gone = sorted(set(last) - set(n.counters))
                if changed:
                    doc["c"] = changed
                if gone:
                    doc["gone"] = gone
                self._last[h] = dict(n.counters)
            nodes[h] = doc
        return {
            "v": SCHEMA,
            "round": cols.index,
            "run_dir": cols.run_dir,
            **extra,
            "columns": columns,
            "nodes": nodes,
        }

    def append(self, cols: RoundColumns, **extra: Any) -> None:
        """The round's line at the file's end, on disk before this returns."""
        line = self.line(cols, **extra)
        data = json.dumps(line, separators=(",", ":"), allow_nan=False).encode() + b"\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        self._note(line)


def read_series_file(
    series: SeriesFile, records: Sequence[RoundRecord], hosts: Sequence[str], closing: Path
) -> dict[str, NodeSeries]:
    """Every node's soak in columns from the series file (every record's round in it), a line at a time,
    added as :func:`~sb_fleet.campaign.soak_series.read_series` adds them from the run directories."""
    lacking = [r.run_dir for r in records if r.run_dir not in series.run_dirs]
    if lacking:
        raise RunDirError(
            f"{series.path}: no line for {', '.join(lacking[:5])}: the rounds were not all written"
        )
    return series_of_rounds(_in_order(series, records), records, hosts, closing)


def _in_order(series: SeriesFile, records: Sequence[RoundRecord]) -> Iterator[RoundColumns]:
    position = {r.run_dir: pos for pos, r in enumerate(records)}
    expected = 0
    for cols in series.rounds():
        pos = position.get(cols.run_dir)
        if pos is None:
            continue  # a round run again after a lost state (the state records its other run directory)
        if pos != expected:
            raise RunDirError(
                f"{series.path}: {cols.run_dir} is out of order (round {expected + 1} expected)"
            )
        expected += 1
        yield cols


def missing(series: SeriesFile, records: Sequence[RoundRecord]) -> list[RoundRecord]:
    """The recorded rounds the series file lacks, in order."""
    return [r for r in records if r.run_dir not in series.run_dirs]
