"""The pair matrix of a pattern run, from the run's normalised results and its schedule.

A pattern benchmark names its figures as SuperBench does, with the round (``serial_index``) and the
group within it (``parallel_index``) in the metric: ``nccl-bw/allreduce_3_1:8388608_busbw``,
``tcp-bw/tcp_3_1:16777216_bw``. The schedule (``mpi_pattern.txt`` or the plan) says which hosts
formed group (3, 1); the figure is whichever host of the group reported it. A group with no figure
failed or timed out: its hosts' entry status says which, and why.

Pure: results records and a schedule in, a :class:`PairMatrix` out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sb_fleet.analysis.crossnode.localise import PairMatrix, PairResult
from sb_fleet.config.traffic_patterns import base_key, round_key

# <key>/<op>_<serial>_<parallel>:<size>_<stat>  (SuperBench's pattern naming)
PATTERN_METRIC = re.compile(
    r"^(?P<key>.+?)/(?:(?P<run>\d+)/)?(?P<op>[A-Za-z0-9-]+)_(?P<serial>\d+)_(?P<parallel>\d+):(?P<size>\d+)_(?P<stat>[a-z_]+)$"
)
PREFERRED_STATS = ("busbw", "bw", "algbw")


@dataclass(frozen=True)
class PatternFigure:
    key: str
    op: str
    serial: int
    parallel: int
    size: int
    stat: str
    value: float
    host: str


def pattern_figures(
    records: Mapping[str, Mapping[str, object]], key: str | None = None
) -> list[PatternFigure]:
    """Every pattern-named figure in the results (host -> metric -> value)."""
    out = []
    for host, metrics in records.items():
        for name, v in metrics.items():
            m = PATTERN_METRIC.match(name)
            if not m or not isinstance(v, (int, float)) or isinstance(v, bool):
                continue
            if key is not None and base_key(m.group("key")) != key:
                continue
            out.append(
                PatternFigure(
                    base_key(m.group("key")),
                    m.group("op"),
                    int(m.group("serial")),
                    int(m.group("parallel")),
                    int(m.group("size")),
                    m.group("stat"),
                    float(v),
                    host,
                )
            )
    return out


def choose_series(figs: Sequence[PatternFigure]) -> tuple[str, str, int, str] | None:
    """The one series a matrix shows: (key, op, size, stat): a bandwidth stat, the largest size."""
    series = {(f.key, f.op, f.size, f.stat) for f in figs}
    bw = [s for s in series if s[3] in PREFERRED_STATS]
    if not bw:
        return None
    return max(bw, key=lambda s: (s[2], -PREFERRED_STATS.index(s[3]), s[1] == "allreduce", s[1]))


def matrix_from_results(
    records: Mapping[str, Mapping[str, object]],
    rounds: Sequence[Sequence[Sequence[str]]],
    hosts: Sequence[str],
    key: str,
    statuses: Mapping[str, Mapping[str, Mapping[str, object]]] | None = None,
    unit: str = "GB/s",
) -> PairMatrix | None:
    """The pattern's figure for every group of two in ``rounds`` (serial, parallel) -> hosts.

    ``statuses``: host -> entry key -> {"status", "reason"} (the normaliser's), to say why a group has
    no figure. None when the results hold no pattern figure of ``key`` at all."""
    figs = pattern_figures(records, key)
    pick = choose_series(figs)
    if pick is None:
        return None
    _k, op, size, stat = pick
    value = {(f.serial, f.parallel): f.value for f in figs if (f.op, f.size, f.stat) == (op, size, stat)}
    pairs = []
    for s, rnd in enumerate(rounds):
        for p, group in enumerate(rnd):
            if len(group) != 2:
                continue
            a, b = group
            v = value.get((s, p))
            if v is not None:
                pairs.append(PairResult(a, b, v, "ok", s, p))
                continue
            status, reason = "failed", "no figure for this pair"
            for h in (a, b):
                st = (statuses or {}).get(h, {}).get(round_key(key, s)) or (statuses or {}).get(h, {}).get(
                    key
                )
                if st and st.get("status") in ("timeout", "failed"):
                    status = str(st.get("status"))
                    reason = f"{h}: {st.get('reason') or status}"
            pairs.append(PairResult(a, b, None, status, s, p, reason=reason))
    metric = f"{key}/{op}_<round>_<pair>:{size}_{stat}"
    return PairMatrix(metric, tuple(hosts), tuple(pairs), unit, True)


@dataclass(frozen=True)
class GroupResult:
    """How one group of a round did, whatever its size: passed when no member's entry failed or timed
    out and, where the benchmark names its figures by round and group, the group's figure is there."""

    round: int
    index: int
    hosts: tuple[str, ...]
    passed: bool
    status: str  # ok | skipped | failed | timeout
    reason: str = ""


def group_results(
    records: Mapping[str, Mapping[str, object]],
    rounds: Sequence[Sequence[Sequence[str]]],
    key: str,
    statuses: Mapping[str, Mapping[str, Mapping[str, object]]],
) -> list[GroupResult]:
    """Every group of ``rounds`` judged from the results (host -> metric -> value) and the entry
    statuses (host -> entry or round key -> {"status", "reason"}), in run order."""
    figs = pattern_figures(records, key)
    with_figure = {(f.serial, f.parallel) for f in figs}
    out = []
    for s, rnd in enumerate(rounds):
        for p, group in enumerate(rnd):
            found = [
                (h, st)
                for h in group
                if (st := statuses.get(h, {}).get(round_key(key, s)) or statuses.get(h, {}).get(key))
            ]
            bad = [(h, st) for h, st in found if st.get("status") in ("failed", "timeout")]
            if bad:
                h, st = bad[0]
                status = str(st.get("status"))
                out.append(
                    GroupResult(s, p, tuple(group), False, status, f"{h}: {st.get('reason') or status}")
                )
            elif not found:
                out.append(GroupResult(s, p, tuple(group), False, "failed", "no result from any member"))
            elif all(st.get("status") == "skipped" for _h, st in found):
                why = str(found[0][1].get("reason") or "skipped")
                out.append(GroupResult(s, p, tuple(group), True, "skipped", why))
            elif figs and (s, p) not in with_figure:
                out.append(GroupResult(s, p, tuple(group), False, "failed", "no figure for this group"))
            else:
                out.append(GroupResult(s, p, tuple(group), True, "ok"))
    return out


def parse_mpi_pattern(text: str) -> dict[str, tuple[str, list[list[list[str]]]]]:
    """SuperBench's ``mpi_pattern.txt``: benchmark -> (pattern type, rounds of groups of hosts)."""
    out: dict[str, tuple[str, list[list[list[str]]]]] = {}
    current: str | None = None
    for line in text.splitlines():
        line = line.strip()
        if not line:
            current = None
            continue
        m = re.match(r"^benchmark_name: (\S+) pattern_type: (\S+)$", line)
        if m:
            current = m.group(1)
            out[current] = (m.group(2), [])
            continue
        if current is not None:
            out[current][1].append([g.split(",") for g in line.split(";") if g])
    return out
