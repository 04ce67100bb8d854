"""Synthetic pair matrices with planted faults, for localisation tests and bench/localise_speed.py.

Every pair's bus bandwidth is a healthy figure (default 180 GB/s, an NDR pair's all-reduce) with
its own run-to-run spread (``noise``, relative sigma). Faults multiply the pairs they touch by a
factor the caller picks: a slow node (all its pairs), a slow link (one pair), a slow NIC (one rail of
one host), a slow path (every pair whose hosts sit under two given leaf groups), a failed pair, a
host whose every pair is capped at a figure (its traffic shaped, as ``tc`` does in the real tests).
The truth comes back with the matrix.

A shared or busy fabric is ``spread``: every pair's figure (all its rails together) is further
multiplied by a factor drawn log-uniformly over a range ``spread`` wide (4.0: the best healthy pair
4x the worst, as pair-wise tcp-bw over loopback hosts on a shared machine shows). ``rounds`` gives
the pairs in their rounds (their ``round`` is set), and ``round_spread`` adds one such factor per
round, shared by the round's pairs (load that comes and goes while the pattern runs).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import combinations

from sb_fleet.analysis.crossnode.localise import PairMatrix, PairResult


@dataclass
class Faults:
    nodes: dict[str, float] = field(default_factory=dict)  # host -> factor on all its pairs
    links: dict[frozenset[str], float] = field(default_factory=dict)  # pair -> factor
    nics: dict[tuple[str, str], float] = field(default_factory=dict)  # (host, nic) -> factor on that rail
    paths: list[tuple[set[str], set[str], float]] = field(default_factory=list)  # hosts x hosts -> factor
    failed: set[frozenset[str]] = field(default_factory=set)
    caps: dict[str, float] = field(
        default_factory=dict
    )  # host -> the most any of its pairs gives (tc-shaped)


def pair_matrix(
    hosts: list[str],
    faults: Faults,
    seed: int = 1,
    base: float = 180.0,
    noise: float = 0.02,
    nics: list[str] | None = None,
    pairs: list[tuple[str, str]] | None = None,
    spread: float = 1.0,
    rounds: Sequence[Sequence[tuple[str, str]]] | None = None,
    round_spread: float = 1.0,
) -> PairMatrix:
    rng = random.Random(seed)
    out = []
    if rounds is not None:
        todo: list[tuple[str, str, int | None]] = [(a, b, i) for i, rnd in enumerate(rounds) for a, b in rnd]
    else:
        todo = [(a, b, None) for a, b in (pairs if pairs is not None else combinations(hosts, 2))]
    width = math.log(spread) / 2
    round_width = math.log(round_spread) / 2
    load = {i: math.exp(rng.uniform(-round_width, round_width)) for i in range(len(rounds or []))}
    for a, b, rnd in todo:
        key = frozenset((a, b))
        if key in faults.failed:
            out.append(PairResult(a, b, None, "failed", round=rnd, reason="planted"))
            continue
        f = faults.nodes.get(a, 1.0) * faults.nodes.get(b, 1.0) * faults.links.get(key, 1.0)
        if width:
            f *= math.exp(rng.uniform(-width, width))
        if rnd is not None and round_width:
            f *= load[rnd]
        for x, y, pf in faults.paths:
            if (a in x and b in y) or (a in y and b in x):
                f *= pf
        per_nic = None
        if nics:
            per_nic = {}
            for nic in nics:
                nf = f * faults.nics.get((a, nic), 1.0) * faults.nics.get((b, nic), 1.0)
                per_nic[nic] = base / len(nics) * nf * (1 + rng.gauss(0, noise))
            value = sum(per_nic.values())
        else:
            value = base * f * (1 + rng.gauss(0, noise))
        cap = min(faults.caps.get(a, math.inf), faults.caps.get(b, math.inf))
        if value > cap:
            value = cap * (1 + rng.gauss(0, noise))
            per_nic = None if per_nic is None else {n: value / len(per_nic) for n in per_nic}
        out.append(PairResult(a, b, value, round=rnd, nics=per_nic))
    return PairMatrix("nccl-bw/allreduce_busbw", tuple(hosts), tuple(out), "GB/s", True)
