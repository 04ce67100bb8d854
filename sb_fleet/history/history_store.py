"""The history store on disk: one DuckDB file, no server.

Tables (names are integer-coded once in ``names``; values are one long table, appended per run,
so a window of runs is a contiguous, zone-map-pruned scan)::

    meta(key, value)                      schema_version
    runs(run, run_key, digest, source, time, recorded, config_digest, versions, hosts, gate_passed, layout)
    names(kind, name, id)                 kind: host | metric | comp | cmetric | family
    host_runs(run, host, verdict, outcome, reason, gpu_model, facts, issues)
    facts(digest, facts)                  facts JSON, stored once per distinct content
    cells(comp, cmetric, id)              a component's metric: what its own history is kept under
    layouts(keys, cells)                  a run's cell ids by the digest of its (component, metric) keys
    vals(run, host, metric, cell, ok, value)
    fleet(run, family, median, n)         the fleet median of each metric family per run

A run is keyed by its ``run_key`` (the run directory's run id, or the results file's digest).
Recording a run whose content digest is already stored changes nothing; a run recorded again with
other content (collect fetched more hosts) replaces its rows in one transaction.

A file that is not a DuckDB database, or a database of another schema, is a
:class:`HistoryStoreError` (exit 2); a file another process holds is :class:`HistoryLocked` (exit 3).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import itertools
import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sb_fleet.errors import InfraError, InputError

SCHEMA_VERSION = 1
LOCK_WAIT_S = 10.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key VARCHAR PRIMARY KEY, value VARCHAR);
CREATE TABLE IF NOT EXISTS runs(
    run INTEGER PRIMARY KEY, run_key VARCHAR NOT NULL UNIQUE, digest VARCHAR NOT NULL, source VARCHAR,
    time TIMESTAMP NOT NULL, recorded TIMESTAMP NOT NULL, config_digest VARCHAR, versions VARCHAR,
    hosts INTEGER, gate_passed BOOLEAN, layout VARCHAR);
CREATE TABLE IF NOT EXISTS names(kind VARCHAR NOT NULL, name VARCHAR NOT NULL, id INTEGER NOT NULL,
    PRIMARY KEY (kind, name));
CREATE TABLE IF NOT EXISTS host_runs(run INTEGER, host INTEGER, verdict VARCHAR, outcome VARCHAR,
    reason VARCHAR, gpu_model VARCHAR, facts VARCHAR, issues VARCHAR);
CREATE TABLE IF NOT EXISTS facts(digest VARCHAR PRIMARY KEY, facts VARCHAR);
CREATE TABLE IF NOT EXISTS cells(comp INTEGER NOT NULL, cmetric INTEGER NOT NULL, id INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS layouts(keys VARCHAR PRIMARY KEY, cells BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS vals(run INTEGER, host INTEGER, metric INTEGER, cell INTEGER, ok BOOLEAN,
    value DOUBLE);
CREATE TABLE IF NOT EXISTS fleet(run INTEGER, family INTEGER, median DOUBLE, n INTEGER);
"""


class HistoryStoreError(InputError):
    """The history file is not a history store this sb-fleet reads (exit 2)."""


class HistoryLocked(InfraError):
    """Another process holds the history file (exit 3)."""


@dataclass(frozen=True)
class HostRow:
    host: str
    verdict: str
    outcome: str
    reason: str = ""
    gpu_model: str | None = None
    facts: str | None = None  # canonical JSON, or None
    issues: str | None = None  # JSON list, or None when the host has none


@dataclass
class RunRecord:
    """Everything one run adds to the store (built by :func:`sb_fleet.history.record.build_record`)."""

    run_key: str
    digest: str
    source: str
    time: _dt.datetime  # UTC, naive
    config_digest: str | None
    versions: dict[str, Any]
    gate_passed: bool | None
    host_rows: list[HostRow]
    hosts: list[str]  # rows of ``values``
    metrics: list[str]  # columns of ``values``
    values: np.ndarray  # float [hosts, metrics]
    components: list[str]  # local component keys
    cmetrics: list[str]  # local component-metric names
    comp: np.ndarray  # int32 [hosts, metrics], into ``components``
    cmetric: np.ndarray  # int32 [hosts, metrics], into ``cmetrics``
    ok: np.ndarray  # bool [hosts]: the host was healthy in this run
    fleet_medians: dict[str, tuple[float, int]] = field(default_factory=dict)  # family -> (median, n)
    cells: np.ndarray | None = None  # int32 [hosts * metrics]: cell ids when already looked up (-1: new)
    keys: str | None = None  # digest of the run's component keys (sb_fleet.history.components.keys_digest)


@dataclass(frozen=True)
class RunInfo:
    run: int
    run_key: str
    time: _dt.datetime
    source: str
    hosts: int
    gate_passed: bool | None
    config_digest: str | None
    versions: dict[str, Any]
    layout: str | None = None  # digest of the run's stored cell sequence


def layout_digest(cells: np.ndarray) -> str:
    """The digest of a run's stored cell-id sequence: runs with equal digests store their values in the
    same order, so a window's values line up without a lookup."""
    import hashlib

    return hashlib.sha256(np.ascontiguousarray(cells, dtype=np.int32).tobytes()).hexdigest()[:32]


_tmp_names = itertools.count()


def _duckdb() -> Any:
    import duckdb

    return duckdb


class Store:
    """An open history store. Use :func:`open_store`."""

    def __init__(self, path: Path, con: Any):
        self.path = path
        self.con = con
        self._err = _duckdb().Error

    # -- guarded execution ---------------------------------------------------------------------
    def sql(self, query: str, params: Sequence[Any] | None = None) -> Any:
        try:
            return self.con.execute(query, params) if params is not None else self.con.execute(query)
        except self._err as exc:
            raise _store_error(self.path, exc) from None

    def one(self, query: str, params: Sequence[Any] | None = None) -> Any:
        """The first row of a query (or None), with the result completed."""
        rows = self.sql(query, params).fetchall()
        return rows[0] if rows else None

    def run(self, query: str, params: Sequence[Any] | None = None) -> None:
        """A statement without rows: executed and completed (DuckDB wants a result finished before the next)."""
        self.sql(query, params).fetchall()

    @contextlib.contextmanager
    def _frame(self, **cols: np.ndarray) -> Iterator[str]:
        name = f"_frame_{next(_tmp_names)}"
        self.con.register(name, cols)
        try:
            yield name
        finally:
            self.con.unregister(name)

    def append(self, table: str, **cols: np.ndarray) -> None:
        """Append rows given as equal-length column arrays, in the table's column order."""
        with self._frame(**cols) as f:
            self.run(f"INSERT INTO {table} SELECT {', '.join(cols)} FROM {f}")

    # -- names ---------------------------------------------------------------------------------
    def ids(self, kind: str, names: Sequence[str], create: bool = True) -> np.ndarray:
        """The integer id of every name (new names get new ids when ``create``, else -1)."""
        if not len(names):
            return np.zeros(0, dtype=np.int32)
        arr = np.asarray(list(names), dtype=object)
        with self._frame(name=arr, pos=np.arange(len(arr), dtype=np.int64)) as f:
            got = self.sql(
                f"SELECT f.pos, n.id FROM {f} f JOIN names n ON n.name = f.name AND n.kind = ?", [kind]
            ).fetchnumpy()
        out = np.full(len(arr), -1, dtype=np.int32)
        out[got["pos"]] = got["id"]
        missing = np.nonzero(out < 0)[0]
        if create and len(missing):
            start = int(self.one("SELECT coalesce(max(id), -1) + 1 FROM names WHERE kind = ?", [kind])[0])
            new_ids = np.arange(start, start + len(missing), dtype=np.int32)
            new_names = list(dict.fromkeys(arr[missing].tolist()))
            if len(new_names) != len(missing):
                raise ValueError("names must be unique")
            with self._frame(
                kind=np.full(len(missing), kind, dtype=object), name=arr[missing], id=new_ids
            ) as f:
                self.run(f"INSERT INTO names SELECT kind, name, id FROM {f}")
            out[missing] = new_ids
        return out

    def cell_ids(self, comp: np.ndarray, cmetric: np.ndarray, create: bool = True) -> np.ndarray:
        """The id of every (component, component-metric) pair (new ones get ids when ``create``, else -1;
        a pair with a negative part is -1)."""
        comp = np.asarray(comp, dtype=np.int64)
        cmetric = np.asarray(cmetric, dtype=np.int64)
        out = np.full(len(comp), -1, dtype=np.int32)
        valid = (comp >= 0) & (cmetric >= 0)
        if not valid.any():
            return out
        key = comp[valid] * (1 << 31) + cmetric[valid]
        uniq, inverse = np.unique(key, return_inverse=True)
        with self._frame(
            comp=(uniq >> 31).astype(np.int32),
            cmetric=(uniq & ((1 << 31) - 1)).astype(np.int32),
            pos=np.arange(len(uniq), dtype=np.int64),
        ) as f:
            got = self.sql(
                f"SELECT f.pos, c.id FROM {f} f JOIN cells c ON c.comp = f.comp AND c.cmetric = f.cmetric"
            ).fetchnumpy()
        ids = np.full(len(uniq), -1, dtype=np.int32)
        ids[got["pos"]] = got["id"]
        missing = np.nonzero(ids < 0)[0]
        if create and len(missing):
            start = int(self.one("SELECT coalesce(max(id), -1) + 1 FROM cells")[0])
            ids[missing] = np.arange(start, start + len(missing), dtype=np.int32)
            self.append(
                "cells",
                comp=(uniq[missing] >> 31).astype(np.int32),
                cmetric=(uniq[missing] & ((1 << 31) - 1)).astype(np.int32),
                id=ids[missing],
            )
        out[np.nonzero(valid)[0]] = ids[inverse.reshape(-1)]
        return out

    def names_of(self, kind: str) -> dict[int, str]:
        rows = self.sql("SELECT id, name FROM names WHERE kind = ?", [kind]).fetchall()
        return {int(i): str(n) for i, n in rows}

    # -- runs ----------------------------------------------------------------------------------
    def stored_digest(self, run_key: str) -> tuple[int, str] | None:
        row = self.one("SELECT run, digest FROM runs WHERE run_key = ?", [run_key])
        return (int(row[0]), str(row[1])) if row else None

    def record(self, rec: RunRecord) -> str:
        """Store one run: ``recorded``, ``replaced`` (same run, other content) or ``unchanged``."""
        have = self.stored_digest(rec.run_key)
        if have is not None and have[1] == rec.digest:
            return "unchanged"
        self.run("BEGIN TRANSACTION")
        try:
            if have is not None:
                for table in ("vals", "fleet", "host_runs", "runs"):
                    self.run(f"DELETE FROM {table} WHERE run = ?", [have[0]])
                run = have[0]
            else:
                run = int(self.one("SELECT coalesce(max(run), 0) + 1 FROM runs")[0])
            self._insert(run, rec)
            self.run("COMMIT")
        except BaseException:
            with contextlib.suppress(Exception):
                self.con.execute("ROLLBACK")
            raise
        return "replaced" if have is not None else "recorded"

    def _insert(self, run: int, rec: RunRecord) -> None:
        self.run(
            "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                run,
                rec.run_key,
                rec.digest,
                rec.source,
                rec.time,
                _dt.datetime.now(_dt.timezone.utc).replace(tzinfo=None),
                rec.config_digest,
                json.dumps(rec.versions, sort_keys=True),
                len(rec.host_rows),
                rec.gate_passed,
                None,
            ],
        )
        rows = rec.host_rows
        host_ids = self.ids("host", [r.host for r in rows])
        facts_digest = [_digest(r.facts) if r.facts else None for r in rows]
        distinct = {d: r.facts for d, r in zip(facts_digest, rows, strict=True) if d}
        if distinct:
            with self._frame(
                digest=np.array(list(distinct), dtype=object),
                facts=np.array(list(distinct.values()), dtype=object),
            ) as f:
                self.run(
                    f"INSERT INTO facts SELECT * FROM {f} WHERE digest NOT IN (SELECT digest FROM facts)"
                )
        with self._frame(
            run=np.full(len(rows), run, dtype=np.int32),
            host=host_ids,
            verdict=np.array([r.verdict for r in rows], dtype=object),
            outcome=np.array([r.outcome for r in rows], dtype=object),
            reason=np.array([r.reason for r in rows], dtype=object),
            gpu_model=np.array([r.gpu_model for r in rows], dtype=object),
            facts=np.array(facts_digest, dtype=object),
            issues=np.array([r.issues for r in rows], dtype=object),
        ) as f:
            self.run(f"INSERT INTO host_runs SELECT * FROM {f}")
        if rec.values.size:
            vhost = self.ids("host", rec.hosts)
            vmetric = self.ids("metric", rec.metrics)
            cell = rec.cells
            if cell is None or (cell < 0).any():
                cell = self.cell_ids(
                    self.ids("comp", rec.components)[rec.comp.reshape(-1)],
                    self.ids("cmetric", rec.cmetrics)[rec.cmetric.reshape(-1)],
                )
            h, c = rec.values.shape
            vals = rec.values.reshape(-1)
            keep = np.isfinite(vals)
            rr = np.repeat(np.arange(h), c)[keep]
            cc = np.tile(np.arange(c), h)[keep]
            with self._frame(
                run=np.full(len(rr), run, dtype=np.int32),
                host=vhost[rr],
                metric=vmetric[cc],
                cell=cell[keep],
                ok=rec.ok[rr],
                value=vals[keep],
            ) as f:
                self.run(f"INSERT INTO vals SELECT * FROM {f}")
            self.run("UPDATE runs SET layout = ? WHERE run = ?", [layout_digest(cell[keep]), run])
            if rec.keys is not None and self.one("SELECT 1 FROM layouts WHERE keys = ?", [rec.keys]) is None:
                self.run(
                    "INSERT INTO layouts VALUES (?, ?)",
                    [rec.keys, np.ascontiguousarray(cell, dtype=np.int32).tobytes()],
                )
        if rec.fleet_medians:
            fams = list(rec.fleet_medians)
            with self._frame(
                run=np.full(len(fams), run, dtype=np.int32),
                family=self.ids("family", fams),
                median=np.array([rec.fleet_medians[k][0] for k in fams], dtype=float),
                n=np.array([rec.fleet_medians[k][1] for k in fams], dtype=np.int32),
            ) as f:
                self.run(f"INSERT INTO fleet SELECT * FROM {f}")

    def runs(self, last: int | None = None) -> list[RunInfo]:
        """The stored runs, oldest first (the ``last`` ones only, when given)."""
        q = "SELECT run, run_key, time, source, hosts, gate_passed, config_digest, versions, layout FROM runs ORDER BY time DESC, run DESC"
        if last is not None:
            q += f" LIMIT {int(last)}"
        out = [
            RunInfo(
                int(r[0]),
                str(r[1]),
                r[2],
                str(r[3] or ""),
                int(r[4] or 0),
                r[5],
                r[6],
                json.loads(r[7] or "{}"),
                r[8],
            )
            for r in self.sql(q).fetchall()
        ]
        return out[::-1]

    def window(self, before: _dt.datetime, n: int, exclude_key: str | None = None) -> list[RunInfo]:
        """The last ``n`` runs before ``before`` (other than ``exclude_key``), oldest first."""
        rows = self.sql(
            "SELECT run, run_key, time, source, hosts, gate_passed, config_digest, versions, layout FROM runs "
            "WHERE time < ? AND run_key IS DISTINCT FROM ? ORDER BY time DESC, run DESC LIMIT ?",
            [before, exclude_key, int(n)],
        ).fetchall()
        return [
            RunInfo(
                int(r[0]),
                str(r[1]),
                r[2],
                str(r[3] or ""),
                int(r[4] or 0),
                r[5],
                r[6],
                json.loads(r[7] or "{}"),
                r[8],
            )
            for r in rows
        ][::-1]

    def window_of(self, run_key: str) -> list[RunInfo]:
        """The stored run of ``run_key`` (a list of one, or empty)."""
        rows = self.sql(
            "SELECT run, run_key, time, source, hosts, gate_passed, config_digest, versions, layout FROM runs WHERE run_key = ?",
            [run_key],
        ).fetchall()
        return [
            RunInfo(
                int(r[0]),
                str(r[1]),
                r[2],
                str(r[3] or ""),
                int(r[4] or 0),
                r[5],
                r[6],
                json.loads(r[7] or "{}"),
                r[8],
            )
            for r in rows
        ]

    def verdict_counts(self) -> dict[int, dict[str, int]]:
        """Run -> verdict -> hosts."""
        out: dict[int, dict[str, int]] = {}
        for run, verdict, n in self.sql(
            "SELECT run, verdict, count(*) FROM host_runs GROUP BY ALL"
        ).fetchall():
            out.setdefault(int(run), {})[str(verdict)] = int(n)
        return out

    def host_verdicts(self, host: str, runs: Sequence[RunInfo]) -> dict[str, tuple[str, str | None]]:
        """Run key -> (verdict, issues JSON) of one host."""
        hid = self.ids("host", [host], create=False)
        if hid[0] < 0 or not runs:
            return {}
        keys = {r.run: r.run_key for r in runs}
        rows = self.sql(
            f"SELECT run, verdict, issues FROM host_runs WHERE host = ? AND run IN ({','.join(map(str, keys))})",
            [int(hid[0])],
        ).fetchall()
        return {keys[int(r)]: (str(v), i) for r, v, i in rows}

    # -- the queries of a report ---------------------------------------------------------------
    def tonight_cells(
        self,
        components: Sequence[str],
        cmetrics: Sequence[str],
        comp: np.ndarray,
        cmetric: np.ndarray,
        keys: str | None = None,
    ) -> np.ndarray:
        """The stored cell id of every (host, column) of tonight's matrix, flattened (-1: never seen);
        read in one step when a run with the same component keys (``keys``) was recorded before."""
        if keys is not None:
            row = self.one("SELECT cells FROM layouts WHERE keys = ?", [keys])
            if row is not None and len(row[0]) == 4 * comp.size:
                return np.frombuffer(row[0], dtype=np.int32).copy()
        return self.cell_ids(
            self.ids("comp", components, create=False)[comp.reshape(-1)],
            self.ids("cmetric", cmetrics, create=False)[cmetric.reshape(-1)],
            create=False,
        )

    def own_baseline(
        self, runs: Sequence[RunInfo], cells: np.ndarray, shape: tuple[int, int]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per cell of tonight's matrix (``cells`` from :meth:`tonight_cells`): the quartiles and count of
        its healthy values in ``runs`` (NaN / 0 where there are none). Returns (q25, median, q75, count),
        each of ``shape``, and the values themselves ([cells, runs], NaN where unhealthy or absent);
        quartiles interpolate linearly between order statistics, as quantile_cont."""
        q25, q50, q75 = (np.full(shape, np.nan) for _ in range(3))
        count = np.zeros(shape, dtype=np.int64)
        dense = np.full((cells.size, len(runs)), np.nan)  # a row per cell: sorting a row is contiguous
        known = np.nonzero(cells >= 0)[0]
        if not runs or not len(known):
            return q25, q50, q75, count, dense
        everything = len(known) == cells.size
        mine = cells[known]
        same = layout_digest(mine)
        where: np.ndarray | None = None
        # A run stored in tonight's layout (the usual case: the same hosts and metrics) gives its values
        # in that order, so they drop into their column in one step; another run's rows are placed
        # through a lookup from cell id to tonight's position.
        for k, r in enumerate(runs):
            if r.layout == same:
                got = self.sql(f"SELECT ok, value FROM vals WHERE run = {int(r.run)}").fetchnumpy()
                if len(got["value"]) == len(mine):
                    col = got["value"]
                    col[~got["ok"]] = np.nan
                    if everything:
                        dense[:, k] = col
                    else:
                        dense[known, k] = col
                    continue
            got = self.sql(f"SELECT cell, ok, value FROM vals WHERE run = {int(r.run)}").fetchnumpy()
            if where is None:
                top = int(max(cells.max(), got["cell"].max(initial=0)))
                where = np.full(top + 1, -1, dtype=np.int64)
                where[mine] = known
            elif len(got["cell"]) and int(got["cell"].max()) >= len(where):
                where = np.concatenate([where, np.full(int(got["cell"].max()) + 1 - len(where), -1)])
            pos = where[got["cell"]]
            sel = pos >= 0
            dense[pos[sel], k] = np.where(got["ok"], got["value"], np.nan)[sel]
        values = dense.copy()
        dense.sort(axis=1)  # NaN last
        n = np.isfinite(dense).sum(axis=1)
        flat = (q25.reshape(-1), q50.reshape(-1), q75.reshape(-1))
        has = n > 0
        cols = np.nonzero(has)[0]
        for out, q in zip(flat, (0.25, 0.5, 0.75), strict=True):
            at = (n[has] - 1) * q  # linear interpolation between order statistics (quantile_cont)
            lo = np.floor(at).astype(np.int64)
            hi = np.minimum(lo + 1, n[has] - 1)
            frac = at - lo
            out[cols] = dense[cols, lo] * (1 - frac) + dense[cols, hi] * frac
        count.reshape(-1)[:] = n
        return q25, q50, q75, count, values

    def fleet_medians(self, runs: Sequence[RunInfo]) -> dict[str, list[tuple[str, float]]]:
        """Family -> [(run key, fleet median)] over ``runs``, oldest first."""
        if not runs:
            return {}
        order = {r.run: i for i, r in enumerate(runs)}
        keys = {r.run: r.run_key for r in runs}
        run_list = ",".join(str(r.run) for r in runs)
        fam = self.names_of("family")
        out: dict[str, list[tuple[int, str, float]]] = {}
        for run, family, median in self.sql(
            f"SELECT run, family, median FROM fleet WHERE run IN ({run_list})"
        ).fetchall():
            out.setdefault(fam[int(family)], []).append((order[int(run)], keys[int(run)], float(median)))
        return {k: [(key, m) for _, key, m in sorted(v)] for k, v in out.items()}

    def verdicts(self, runs: Sequence[RunInfo], hosts: Sequence[str]) -> dict[str, list[str]]:
        """Host -> its verdicts in ``runs`` (oldest first; runs it was not in are left out)."""
        out: dict[str, list[str]] = {h: [] for h in hosts}
        if not runs or not hosts:
            return out
        host_ids = self.ids("host", hosts, create=False)
        known = host_ids >= 0
        if not known.any():
            return out
        run_list = ",".join(str(r.run) for r in runs)
        with self._frame(host=host_ids[known]) as f:
            got = self.sql(
                f"SELECT h.host, h.verdict FROM host_runs h JOIN runs r ON r.run = h.run "
                f"WHERE h.run IN ({run_list}) AND h.host IN (SELECT host FROM {f}) "
                f"ORDER BY h.host, r.time, r.run"
            ).fetchnumpy()
        name_of = dict(
            zip(host_ids[known].tolist(), np.asarray(hosts, dtype=object)[known].tolist(), strict=True)
        )
        ids, verdicts = got["host"], got["verdict"]
        if len(ids):
            cuts = np.flatnonzero(np.diff(ids)) + 1
            for chunk_ids, chunk in zip(np.split(ids, cuts), np.split(verdicts, cuts), strict=True):
                out[name_of[int(chunk_ids[0])]] = chunk.tolist()
        return out

    def host_trend(
        self, host: str, metric: str | None, runs: Sequence[RunInfo]
    ) -> dict[str, list[tuple[str, float]]]:
        """Metric -> [(run key, value)] of one host over ``runs`` (every metric when ``metric`` is None)."""
        hid = self.ids("host", [host], create=False)
        if hid[0] < 0 or not runs:
            return {}
        order = {r.run: (i, r.run_key) for i, r in enumerate(runs)}
        run_list = ",".join(str(r.run) for r in runs)
        q = f"SELECT run, metric, value FROM vals WHERE run IN ({run_list}) AND host = ?"
        params: list[Any] = [int(hid[0])]
        if metric is not None:
            mid = self.ids("metric", [metric], create=False)
            if mid[0] < 0:
                return {}
            q += " AND metric = ?"
            params.append(int(mid[0]))
        names = self.names_of("metric")
        out: dict[str, list[tuple[int, str, float]]] = {}
        for run, m, v in self.sql(q, params).fetchall():
            i, key = order[int(run)]
            out.setdefault(names[int(m)], []).append((i, key, float(v)))
        return {k: [(key, val) for _, key, val in sorted(seq)] for k, seq in sorted(out.items())}

    def metric_trend(self, metric: str, runs: Sequence[RunInfo]) -> list[tuple[str, float, int]]:
        """[(run key, fleet median, hosts)] of a metric family or metric over ``runs``, oldest first."""
        fam = self.ids("family", [metric], create=False)
        if fam[0] >= 0:
            per = self.fleet_medians(runs).get(metric, [])
            n = dict(
                self.sql(
                    f"SELECT run, n FROM fleet WHERE family = ? AND run IN ({','.join(str(r.run) for r in runs) or '0'})",
                    [int(fam[0])],
                ).fetchall()
            )
            by_key = {r.run_key: r.run for r in runs}
            return [(k, m, int(n.get(by_key[k], 0))) for k, m in per]
        mid = self.ids("metric", [metric], create=False)
        if mid[0] < 0 or not runs:
            return []
        order = {r.run: (i, r.run_key) for i, r in enumerate(runs)}
        rows = self.sql(
            f"SELECT run, median(value), count(*) FROM vals WHERE metric = ? AND run IN ({','.join(str(r.run) for r in runs)}) GROUP BY run",
            [int(mid[0])],
        ).fetchall()
        return [
            (order[int(r)][1], float(m), int(c))
            for r, m, c in sorted(rows, key=lambda x: order[int(x[0])][0])
        ]


def _digest(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _store_error(path: Path, exc: Exception) -> Exception:
    msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if "lock" in msg.lower():
        return HistoryLocked(
            f"{path}: the history store is in use by another process ({msg}); wait for it to finish and "
            f"run again (the run directory is kept: 'sb-fleet report RUN_DIR --history {path}' records it later)"
        )
    return HistoryStoreError(
        path,
        None,
        f"not a readable sb-fleet history store ({msg})",
        "move it aside and give a new path (a new store is created), or restore it from a backup; "
        "the run directory is kept and can be recorded again with 'sb-fleet report RUN_DIR --history PATH'",
    )


@contextlib.contextmanager
def open_store(
    path: Path | str, create: bool = True, read_only: bool = False, lock_wait: float = LOCK_WAIT_S
) -> Iterator[Store]:
    """Open (or create) the history store at ``path``; waits up to ``lock_wait`` s for another process."""
    duckdb = _duckdb()
    path = Path(path)
    if not path.exists():
        if not create or read_only:
            raise HistoryStoreError(
                path, None, "no such history store", "give the path a report or validate recorded into"
            )
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InfraError(
                f"{path}: cannot create the history store's directory ({exc.strerror})"
            ) from None
    elif path.is_dir():
        raise HistoryStoreError(
            path, None, "is a directory, not a history store file", "give a file path, e.g. history.duckdb"
        )
    deadline = time.monotonic() + lock_wait
    while True:
        try:
            con = duckdb.connect(str(path), read_only=read_only)
            break
        except duckdb.Error as exc:
            err = _store_error(path, exc)
            if isinstance(err, HistoryLocked) and time.monotonic() < deadline:
                time.sleep(0.2)
                continue
            raise err from None
    store = Store(path, con)
    try:
        _check_schema(store, read_only)
        yield store
    finally:
        con.close()


def _check_schema(store: Store, read_only: bool) -> None:
    tables = {r[0] for r in store.sql("SELECT table_name FROM information_schema.tables").fetchall()}
    if not tables:
        if read_only:
            raise HistoryStoreError(store.path, None, "an empty database, not a history store")
        for stmt in _SCHEMA.split(";"):
            if stmt.strip():
                store.run(stmt)
        store.run(
            "INSERT INTO meta VALUES ('schema_version', ?), ('tool', 'sb-fleet')", [str(SCHEMA_VERSION)]
        )
        return
    if "meta" not in tables:
        raise HistoryStoreError(
            store.path,
            None,
            "a DuckDB database but not an sb-fleet history store (no meta table)",
            "give another path",
        )
    row = store.one("SELECT value FROM meta WHERE key = 'schema_version'")
    ver = row[0] if row else None
    if ver != str(SCHEMA_VERSION):
        raise HistoryStoreError(
            store.path,
            "schema_version",
            f"{ver!r} is not the version this sb-fleet reads ({SCHEMA_VERSION})",
            "use the sb-fleet that wrote it, or start a new store",
        )


def check_store(path: Path | str) -> None:
    """Fail early on a history file that is not a store (corrupt, foreign, another schema); a missing
    file is fine (it is created when the run is recorded), and so is one in use right now."""
    path = Path(path)
    if not path.exists():
        return
    with contextlib.suppress(HistoryLocked), open_store(path, create=False, read_only=True, lock_wait=0):
        pass
