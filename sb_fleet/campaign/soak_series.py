"""A soak's rounds read back from their run directories, kept compact, and judged one node at a time.

A 72-hour soak of 1-minute rounds on 1,000 nodes is 4.3 million node-rounds. Each round's run directory is
read once (its report rows, its figures with their measured noise, each node's health document); of it,
each node keeps in columns what its judgement needs: per round whether it passed and why not, its figures
and their noise (arrays of floats), its throttled windows, and of its counters only the readings next to a
change, the first and the last. That loses nothing the judgement finds or the report draws: a counter's
growth and its resets are sums over consecutive readings, and readings dropped between two kept ones all
equal them. Then each node's rounds are built (:class:`~sb_fleet.analysis.soak.SoakRound`), judged
(:func:`~sb_fleet.analysis.soak.judge_node`) and dropped before the next node's: the judgement's memory is
the columns, not millions of rounds as objects.
"""

from __future__ import annotations

import math
import statistics
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from sb_fleet.analysis.fleet_results import load_fleet
from sb_fleet.analysis.soak import Measurement, NodeSoak, SoakCriteria, SoakRound, Trend, judge_node
from sb_fleet.bounded_json import read_or_none
from sb_fleet.campaign.campaign_state import RoundRecord
from sb_fleet.campaign.soak_load import (
    LOAD_FILE,
    LoadLimits,
    fleet_clock,
    host_entries,
    load_failure,
    load_throttled_windows,
)
from sb_fleet.campaign.stage_judgement import bench_outcome, health_counters, throttled_windows
from sb_fleet.config.campaign_spec import Stage
from sb_fleet.errors import SbFleetError

NAN = float("nan")
START, END = 0, 1  # a counter read when its round started (its health check), or when it ended


@dataclass
class CounterSeries:
    """One counter of one node: its readings ``(round position, START/END, value)`` where they change,
    with the reading before each change, the first and the last."""

    kept: list[tuple[int, int, float]] = field(default_factory=list)
    last: tuple[int, int, float] | None = None
    last_kept: bool = False

    def add(self, pos: int, when: int, value: float) -> None:
        reading = (pos, when, value)
        if self.last is None:
            self.kept.append(reading)
            self.last, self.last_kept = reading, True
            return
        if value != self.last[2]:
            if not self.last_kept:
                self.kept.append(self.last)
            self.kept.append(reading)
            self.last, self.last_kept = reading, True
        else:
            self.last, self.last_kept = reading, False

    def readings(self) -> list[tuple[int, int, float]]:
        if self.last is not None and not self.last_kept:
            return [*self.kept, self.last]
        return list(self.kept)


@dataclass
class FleetReference:
    """Per figure, the median over the soak's nodes of each round (NaN where fewer than
    :data:`MIN_FLEET` nodes reported it) and the median of those over the soak: what a node's figure is
    judged against, so that a slowdown every node shows in the same round (the machine, the room, the
    control node) is not one node's drift."""

    medians: dict[str, array] = field(default_factory=dict)
    typical: dict[str, float] = field(default_factory=dict)

    def settle(self) -> None:
        """Each figure's typical value, once every round is in."""
        for c, col in self.medians.items():
            known = [m for m in col if not math.isnan(m)]
            if known:
                self.typical[c] = statistics.median(known)

    def relative(self, metric: str, pos: int, value: float) -> float:
        """``value`` as the node would have measured it in a round the fleet measured its typical figure."""
        col = self.medians.get(metric)
        if col is None or pos >= len(col):
            return value
        m, typical = col[pos], self.typical.get(metric, NAN)
        if math.isnan(m) or m <= 0 or math.isnan(typical):
            return value
        return value / m * typical


MIN_FLEET = 3  # nodes reporting a figure in a round for the round's median to correct it


@dataclass
class NodeSeries:
    """One node's soak in columns: ``positions[i]`` is the position (in the soak's round records) of its
    i-th round; ``metrics[c][i]`` its figure (NaN: not reported), ``noise[c][i]`` the figure's own measured
    relative noise (NaN: not measured)."""

    positions: array = field(default_factory=lambda: array("i"))
    ok: bytearray = field(default_factory=bytearray)
    reasons: dict[int, str] = field(default_factory=dict)  # i -> why the round failed
    metrics: dict[str, array] = field(default_factory=dict)
    noise: dict[str, array] = field(default_factory=dict)
    throttled: dict[int, int] = field(default_factory=dict)  # i -> windows, where not 0
    counters: dict[str, CounterSeries] = field(default_factory=dict)
    fleet: FleetReference | None = None  # shared by every node of the soak

    def add_round(
        self,
        pos: int,
        ok: bool,
        reason: str,
        values: Mapping[str, float],
        noise: Mapping[str, float],
        throttled: int,
    ) -> None:
        i = len(self.positions)
        self.positions.append(pos)
        self.ok.append(1 if ok else 0)
        if not ok:
            self.reasons[i] = reason
        for c in set(values) | set(self.metrics):
            col = self.metrics.get(c)
            if col is None:
                col = self.metrics[c] = array("d", [NAN] * i)
                self.noise[c] = array("d", [NAN] * i)
            col.append(values.get(c, NAN))
            self.noise[c].append(noise.get(c, NAN))
        if throttled:
            self.throttled[i] = throttled

    def add_counters(self, pos: int, when: int, counters: Mapping[str, float]) -> None:
        mine = self.counters
        for key, v in counters.items():
            cs = mine.get(key)
            if cs is not None and cs.last is not None and cs.last[2] == v:  # CounterSeries.add, unchanged
                cs.last, cs.last_kept = (pos, when, v), False  # (inline: ~70 counters a node-round)
            else:
                (cs if cs is not None else mine.setdefault(key, CounterSeries())).add(pos, when, v)


def round_rows(
    run_dir: Path,
) -> tuple[dict[str, Mapping[str, Any]], dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """Of a validate run, read once: report.json's host rows, each host's figures (column -> value) and each
    host's figures' own measured relative noise (column -> noise), where the run measured it."""
    doc = read_or_none(run_dir / "report.json") or {}
    rows = {str(h.get("name")): h for h in doc.get("hosts") or [] if isinstance(h, Mapping)}
    values: dict[str, dict[str, float]] = {}
    noise: dict[str, dict[str, float]] = {}
    try:
        fleet = load_fleet(run_dir)
    except SbFleetError:
        return rows, values, noise
    for i, h in enumerate(fleet.hosts):
        values[h] = {
            c: float(fleet.values[i, j])
            for j, c in enumerate(fleet.columns)
            if math.isfinite(fleet.values[i, j])
        }
        if fleet.noise is not None:
            noise[h] = {
                c: float(fleet.noise[i, j])
                for j, c in enumerate(fleet.columns)
                if math.isfinite(fleet.noise[i, j])
            }
    return rows, values, noise


def read_series(
    directory: Path, records: Sequence[RoundRecord], stage: Stage, hosts: Sequence[str], closing: Path
) -> dict[str, NodeSeries]:
    """Every node's soak in columns, each round's run directory read once; the closing check's counters
    are the last round's end readings. (The soak's series file holds the same rounds, written as they
    finished: :func:`sb_fleet.campaign.round_columns.read_series_file` reads them from it.)"""
    return series_of_rounds((extract_round(directory, r, stage) for r in records), records, hosts, closing)


@dataclass
class NodeRound:
    """One node's round as the judgement reads it (:func:`extract_round`)."""

    ok: bool
    reason: str
    has_row: bool  # the round's report has a row for the node
    values: dict[str, float]
    noise: dict[str, float]
    throttled: int
    counters: dict[str, float] | None  # its health document's counters (None: no document)


@dataclass
class RoundColumns:
    """What the judgement reads of one round's run directory, per node."""

    index: int
    run_dir: str
    nodes: dict[str, NodeRound] = field(default_factory=dict)


def extract_round(directory: Path, record: RoundRecord, stage: Stage) -> RoundColumns:
    """Of a round's run directory, read once, what the judgement reads of each of the round's nodes."""
    rd = Path(directory) / record.run_dir
    rows, values, noise = round_rows(rd)
    loads = host_entries(read_or_none(rd / LOAD_FILE))  # the round's load, where it had one
    limits = load_limits(stage)
    fleet_sm = fleet_clock(loads.values())
    out = RoundColumns(record.index, record.run_dir)
    for h in record.hosts:
        vals = values.get(h, {})
        judged = bench_outcome(h, stage, rows.get(h), vals, label=f"round {record.index}")
        doc = read_or_none(rd / "health" / f"{h}.json")
        doc = doc if isinstance(doc, Mapping) else None
        # wrong products, heat, a low clock or a counter grown under the round's load fail the round
        wrong = load_failure(loads.get(h), limits, fleet_sm)
        why = [] if judged.passed else [judged.reason]
        out.nodes[h] = NodeRound(
            ok=judged.passed and not wrong,
            reason="; ".join([*why, wrong]) if wrong else judged.reason,
            has_row=rows.get(h) is not None,
            values=vals,
            noise=noise.get(h, {}),
            throttled=throttled_windows(doc, vals) + load_throttled_windows(loads.get(h)),
            counters=health_counters(doc) if doc is not None else None,
        )
    return out


def load_limits(stage: Stage) -> LoadLimits:
    """What a soak stage holds its nodes' telemetry under the load to (:class:`LoadLimits`)."""
    ld = stage.load
    return LoadLimits(
        max_temp_c=ld.max_temp_c if ld is not None else None,
        min_clock_ratio=ld.min_clock_ratio if ld is not None else None,
        watch=stage.counters,
        counter_max_growth=stage.counter_max_growth,
    )


def series_of_rounds(
    rounds: Iterable[RoundColumns], records: Sequence[RoundRecord], hosts: Sequence[str], closing: Path
) -> dict[str, NodeSeries]:
    """Every node's soak in columns from its rounds (one per record, in the records' order)."""
    fleet = FleetReference()
    out = {h: NodeSeries(fleet=fleet) for h in hosts}
    pos = -1
    for pos, cols in enumerate(rounds):
        rec, got = records[pos], cols.nodes
        add_fleet_round(
            fleet, pos, [got[h].values for h in rec.hosts if h in out and h in got and got[h].has_row]
        )
        last = pos == len(records) - 1
        for h in rec.hosts:
            node = out.get(h)
            if node is None:
                continue
            n = got.get(h) or NodeRound(False, f"no result from round {rec.index}", False, {}, {}, 0, None)
            node.add_round(pos, n.ok, n.reason, n.values, n.noise, n.throttled)
            if n.counters is not None:
                node.add_counters(pos, START, n.counters)
            if last:
                end_doc = read_or_none(closing / "health" / f"{h}.json")
                if isinstance(end_doc, Mapping):
                    node.add_counters(pos, END, health_counters(end_doc))
    if pos != len(records) - 1:
        raise SbFleetError(f"{len(records)} soak rounds recorded, {pos + 1} read")
    fleet.settle()
    return out


def add_fleet_round(fleet: FleetReference, pos: int, values: Sequence[Mapping[str, float]]) -> None:
    """The fleet's median of each figure in round ``pos``, from the figures of the nodes that ran it."""
    by: dict[str, list[float]] = {}
    for vals in values:
        for c, v in vals.items():
            by.setdefault(c, []).append(v)
    for c in set(by) | set(fleet.medians):
        col = fleet.medians.setdefault(c, array("d", [NAN] * pos))
        got = by.get(c, [])
        col.append(statistics.median(got) if len(got) >= MIN_FLEET else NAN)


def node_rounds(series: NodeSeries, records: Sequence[RoundRecord], relative: bool = True) -> list[SoakRound]:
    """One node's rounds as the judgement takes them, from its columns."""
    by_round: dict[tuple[int, int], dict[str, float]] = {}
    for key, cs in series.counters.items():
        for pos, when, v in cs.readings():
            by_round.setdefault((pos, when), {})[key] = v
    out: list[SoakRound] = []
    for i, pos in enumerate(series.positions):
        rec = records[pos]
        metrics: dict[str, Measurement | float] = {}
        for c, col in series.metrics.items():
            v = col[i]
            if not math.isnan(v):
                n = series.noise[c][i]
                rel = series.fleet.relative(c, pos, v) if relative and series.fleet is not None else v
                metrics[c] = Measurement(rel, None if math.isnan(n) else n)
        out.append(
            SoakRound(
                index=rec.index,
                start=datetime.fromisoformat(rec.start),
                end=datetime.fromisoformat(rec.end),
                ok=bool(series.ok[i]),
                reason=series.reasons.get(i, ""),
                metrics=metrics,
                counters=by_round.get((pos, END), {}),
                counters_start=by_round.get((pos, START)),
                throttled_windows=series.throttled.get(i, 0),
                run_dir=rec.run_dir,
            )
        )
    return out


def series_json(series: NodeSeries, records: Sequence[RoundRecord]) -> dict[str, Any]:
    """One node's rounds as ``soak-<stage>.json`` keeps them, in columns: the rounds' indices, passed or
    not, why not, each figure's values (null: not reported), the throttled windows where not 0, and each
    counter's readings where they changed (``[round, "start"|"end", value]``)."""
    return {
        "index": [records[p].index for p in series.positions],
        "ok": [bool(x) for x in series.ok],
        "reasons": {str(records[series.positions[i]].index): r for i, r in series.reasons.items()},
        "metrics": {
            c: [None if math.isnan(v) else v for v in col] for c, col in sorted(series.metrics.items())
        },
        "throttled_windows": {
            str(records[series.positions[i]].index): w for i, w in series.throttled.items()
        },
        "counters": {
            key: [[records[p].index, "start" if w == START else "end", v] for p, w, v in cs.readings()]
            for key, cs in sorted(series.counters.items())
        },
    }


def _change_log(t: Trend) -> float:
    return math.log1p(t.change) if t.change > -1 else -math.inf


def _fleet_explains(measured: Trend, relative: Trend | None) -> bool:
    """Whether the fleet moved with the node: relative to the fleet's median of each round, less than half
    of the node's change as measured remains (or it went the other way)."""
    if relative is None:
        return False
    m, r = _change_log(measured), _change_log(relative)
    return m * r <= 0 or abs(r) < abs(m) / 2


def combine_bases(relative: NodeSoak, measured: NodeSoak) -> tuple[NodeSoak, str]:
    """One node's judgement from both bases of its figures, never the one where a change looks smaller:
    relative to the fleet's median of each round (a slowdown every node had in the same rounds is not the
    node's), and, as measured, every drift the fleet did not share (its change relative to the fleet at
    least half of it): a node whose loss the fleet's own noise hides relative to it still fails. The rounds,
    counters and throttled windows are judged alike on both."""
    rel_trends = {t.metric: t for t in relative.trends}
    own = {t.metric: t for t in measured.trends}
    failing = {f.subject for f in relative.findings if f.kind == "drift" and f.fails}
    extra = [
        f
        for f in measured.findings
        if f.kind == "drift"
        and f.fails
        and f.subject not in failing
        and not _fleet_explains(own[f.subject], rel_trends.get(f.subject))
    ]
    if not extra:
        return relative, "relative"
    marked = [replace(f, message=f"{f.message} (as measured; the fleet did not move with it)") for f in extra]
    added = {f.subject for f in extra}
    trends = tuple(own[t.metric] if t.metric in added else t for t in relative.trends)
    findings = relative.findings + tuple(marked)
    return replace(
        relative, passed=not any(f.fails for f in findings), findings=findings, trends=trends
    ), "both"


def judge_series(
    series: Mapping[str, NodeSeries],
    records: Sequence[RoundRecord],
    criteria: SoakCriteria,
    direction: Callable[[str], int] | None = None,
) -> Iterator[tuple[str, NodeSoak, str]]:
    """Each node's judgement in turn, its rounds built from its columns and dropped after, with the basis
    of its figures: ``measured`` where the fleet gives no reference (fewer than 3 nodes in its rounds);
    else ``relative`` to the fleet's median of each round, or ``both`` where a drift as measured that the
    fleet did not share fails too (:func:`combine_bases`). Before 2026-12-07 the less noisy basis was kept,
    which is the one where a step looks smaller (issue 55)."""
    judge = judge_node if direction is None else lambda h, r, c: judge_node(h, r, c, direction)
    for host, s in series.items():
        measured = judge(host, node_rounds(s, records, relative=False), criteria)
        if s.fleet is None or not s.fleet.typical:
            yield host, measured, "measured"
            continue
        relative = judge(host, node_rounds(s, records, relative=True), criteria)
        node, basis = combine_bases(relative, measured)
        yield host, node, basis
