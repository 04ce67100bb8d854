"""Traffic patterns across nodes, as SuperBench names them, expanded into rounds of host groups.

A SuperBench ``mpi`` (and, in sb-fleet, ``torch.distributed``) mode may carry a ``pattern``::

    pattern: {type: pair-wise}                      # every pair once, N-1 rounds of disjoint pairs
    pattern: {type: k-batch, batch: 4}              # disjoint groups of 4, one round
    pattern: {type: all-nodes}                      # one group of every node
    pattern: {type: topo-aware, ibnetdiscover: fabric.txt, ibstat: guids.txt, min_dist: 2, max_dist: 6}

Expanding a pattern gives a :class:`Schedule`: rounds run one after the other, the groups of a round
run at the same time (they share no host). SuperBench's round index is its ``serial_index`` and a
group's index within the round its ``parallel_index`` (``SB_MODE_SERIAL_INDEX``,
``SB_MODE_PARALLEL_INDEX``); metric names such as ``nccl-bw/allreduce_3_1:8388608_busbw`` carry them.

Everything here is pure: hosts in, rounds out, in the order SuperBench's own generator produces them
(its ``mpi_pattern.txt`` test data is this module's golden), and a cost estimate for ``--dry-run``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

PatternType = Literal["all-nodes", "pair-wise", "k-batch", "topo-aware"]
PATTERN_TYPES: tuple[str, ...] = ("all-nodes", "pair-wise", "k-batch", "topo-aware")


class PatternSpec(BaseModel):
    """A mode's ``pattern``, with SuperBench's keys (docs/superbench-config.mdx, ``Mode`` schema)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: PatternType
    mpi_pattern: bool = True  # write mpi_pattern.txt (sb-fleet always writes it into the run directory)
    batch: int | None = Field(None, ge=1)
    ibstat: str | None = None
    ibnetdiscover: str | None = None
    min_dist: int = Field(2, ge=1)
    max_dist: int = Field(6, ge=1)

    @model_validator(mode="after")
    def _needs(self) -> PatternSpec:
        if self.type == "k-batch" and self.batch is None:
            raise ValueError("pattern type k-batch needs 'batch' (the group size)")
        if self.type == "topo-aware":
            if not self.ibnetdiscover:
                raise ValueError(
                    "pattern type topo-aware needs 'ibnetdiscover' (a saved ibnetdiscover output)"
                )
            if not self.ibstat:
                raise ValueError(
                    "pattern type topo-aware needs 'ibstat' (each host's name followed by its "
                    "sys_image_guid lines, as SuperBench's gen_ibstat writes it)"
                )
            if self.min_dist > self.max_dist:
                raise ValueError(f"min_dist {self.min_dist} is larger than max_dist {self.max_dist}")
        return self


Group = tuple[str, ...]
Round = tuple[Group, ...]


@dataclass(frozen=True)
class Schedule:
    """A pattern expanded over a list of hosts."""

    pattern: str
    hosts: tuple[str, ...]
    rounds: tuple[Round, ...]
    labels: tuple[str, ...] = ()  # per round, what it tests (topo-aware: "distance 4"); may be empty
    why_idle: Mapping[str, str] | None = None  # hosts that no round uses, and why

    def idle(self, r: int) -> tuple[str, ...]:
        """The hosts sitting out round ``r``."""
        busy = {h for g in self.rounds[r] for h in g}
        return tuple(h for h in self.hosts if h not in busy)

    def unused(self) -> tuple[str, ...]:
        """Hosts that no round uses at all (k-batch's remainder, topo-aware's hosts off the fabric)."""
        busy = {h for rnd in self.rounds for g in rnd for h in g}
        return tuple(h for h in self.hosts if h not in busy)

    def pairs(self) -> list[tuple[int, int, Group]]:
        """(round, parallel index, group) for every group, in run order."""
        return [(r, p, g) for r, rnd in enumerate(self.rounds) for p, g in enumerate(rnd)]

    @property
    def group_count(self) -> int:
        return sum(len(rnd) for rnd in self.rounds)


def all_nodes(hosts: Sequence[str]) -> Schedule:
    """One round, one group of every host."""
    hosts = tuple(hosts)
    return Schedule("all-nodes", hosts, ((hosts,),) if hosts else ())


def pair_wise(hosts: Sequence[str]) -> Schedule:
    """Every pair exactly once, in rounds of disjoint pairs (the circle method of a round-robin).

    The first host stays put and the others turn one place each round; in every round position
    ``i`` meets position ``n-1-i``. An even N takes N-1 rounds of N/2 pairs; an odd N gets a bye
    (an empty seat) and takes N rounds of (N-1)/2 pairs, one host sitting out each round."""
    hosts = tuple(hosts)
    seats: list[str | None] = list(hosts)
    if len(seats) % 2:
        seats.append(None)
    n = len(seats)
    rounds: list[Round] = []
    for _ in range(n - 1):
        rnd = []
        for i in range(n // 2):
            a, b = seats[i], seats[n - 1 - i]
            if a is not None and b is not None:
                rnd.append((a, b))
        if rnd:
            rounds.append(tuple(rnd))
        seats = [seats[0], *seats[2:], seats[1]]
    return Schedule("pair-wise", hosts, tuple(rounds))


def k_batch(hosts: Sequence[str], k: int) -> Schedule:
    """One round of disjoint consecutive groups of ``k``; the last ``N mod k`` hosts sit out."""
    hosts = tuple(hosts)
    if k < 1:
        raise ValueError("k-batch needs a batch of at least 1")
    full = len(hosts) - len(hosts) % k
    groups = tuple(hosts[i : i + k] for i in range(0, full, k))
    idle = {h: f"the last {len(hosts) - full} host(s) fill no group of {k}" for h in hosts[full:]}
    return Schedule("k-batch", hosts, (groups,) if groups else (), why_idle=idle)


def topo_aware(
    hosts: Sequence[str],
    order: Sequence[str],
    distance: Mapping[str, Mapping[str, int]],
    min_dist: int,
    max_dist: int,
) -> Schedule:
    """One round per switch distance from ``min_dist`` to ``max_dist``: disjoint pairs at exactly
    that distance (hops between the hosts in the fabric: 2 under one leaf switch, 4 across a
    spine, ...), paired greedily in the fabric's order (``order``), as SuperBench pairs them.

    ``hosts``: the fleet; ``order``: the fleet's hosts in the fabric's order; ``distance[a][b]``:
    hops. A distance with no pair gives no round."""
    hosts = tuple(hosts)
    in_fleet = set(hosts)
    order = [h for h in order if h in in_fleet]
    rounds: list[Round] = []
    labels: list[str] = []
    for d in range(min_dist, max_dist + 1):
        taken: set[str] = set()
        rnd = []
        for a in order:
            if a in taken:
                continue
            taken.add(a)
            for b in order:
                if b not in taken and distance.get(a, {}).get(b) == d:
                    rnd.append((a, b))
                    taken.add(b)
                    break
        if rnd:
            rounds.append(tuple(rnd))
            labels.append(f"distance {d}")
    placed = set(order)
    idle = {h: "not found in the ibstat/ibnetdiscover topology" for h in hosts if h not in placed}
    return Schedule("topo-aware", hosts, tuple(rounds), tuple(labels), idle)


def expand(
    spec: PatternSpec,
    hosts: Sequence[str],
    order: Sequence[str] | None = None,
    distance: Mapping[str, Mapping[str, int]] | None = None,
) -> Schedule:
    """A pattern over ``hosts``; topo-aware needs the fabric's ``order`` and ``distance``
    (:func:`sb_fleet.plan.topology.host_distances`)."""
    if spec.type == "all-nodes":
        return all_nodes(hosts)
    if spec.type == "pair-wise":
        return pair_wise(hosts)
    if spec.type == "k-batch":
        return k_batch(hosts, int(spec.batch or 0))
    if order is None or distance is None:
        raise ValueError("topo-aware needs the fabric's host order and distances")
    return topo_aware(hosts, order, distance, spec.min_dist, spec.max_dist)


ROUND_SEP = "@"


def round_key(key: str, serial: int) -> str:
    """The results directory of one round of a pattern entry (``nccl-bw@3``); its results are summarised
    under the entry's own key, the round being in the metric names as SuperBench writes them."""
    return f"{key}{ROUND_SEP}{serial}"


def base_key(key: str) -> str:
    """The entry key of a round's results directory (``nccl-bw@3`` -> ``nccl-bw``)."""
    head, sep, tail = key.rpartition(ROUND_SEP)
    return head if sep and tail.isdigit() else key


def mpi_pattern_text(benchmark: str, schedule: Schedule) -> str:
    """The schedule in SuperBench's ``mpi_pattern.txt`` format: a header line, one line per round
    (groups separated by ``;``, hosts by ``,``), a blank line."""
    lines = [f"benchmark_name: {benchmark} pattern_type: {schedule.pattern}"]
    lines += [";".join(",".join(g) for g in rnd) for rnd in schedule.rounds]
    return "\n".join(lines) + "\n\n"


@dataclass(frozen=True)
class Cost:
    """How long a pattern takes: rounds run back to back, each as long as its slowest group."""

    pattern: str
    hosts: int
    rounds: int
    groups: int
    per_round_s: float
    basis: str  # where per_round_s came from ("the benchmark's timeout", "measured: run X")

    @property
    def total_s(self) -> float:
        return self.rounds * self.per_round_s

    def describe(self) -> str:
        return (
            f"{self.pattern} over {self.hosts} host(s): {self.rounds} round(s) of {self.groups} group(s) "
            f"x {human_seconds(self.per_round_s)} per round ({self.basis}) = {human_seconds(self.total_s)}"
        )


def estimate_cost(schedule: Schedule, per_round_s: float, basis: str = "estimate") -> Cost:
    """Rounds x per-round time."""
    return Cost(
        schedule.pattern,
        len(schedule.hosts),
        len(schedule.rounds),
        schedule.group_count,
        float(per_round_s),
        basis,
    )


def round_count(pattern: str, n: int, batch: int | None = None) -> int:
    """Rounds a pattern takes on ``n`` hosts, without expanding it (topo-aware: at most one per distance,
    not known without the fabric; returns -1)."""
    if n <= 0:
        return 0
    if pattern == "all-nodes":
        return 1
    if pattern == "pair-wise":
        return 0 if n < 2 else (n - 1 if n % 2 == 0 else n)
    if pattern == "k-batch":
        return 1 if batch and n >= batch else 0
    return -1


def human_seconds(s: float) -> str:
    s = float(s)
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"
