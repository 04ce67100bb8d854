"""Name the bad node, NIC or link from a pair matrix.

A pattern run (pair-wise, topo-aware, k-batch of 2) measures every tested pair of hosts once: a
bandwidth, or a failure. From that matrix this module decides, for every pair that is slow or
failed, what explains it:

* a **node**: the host is slow with most of its partners (a bad HCA, PCIe or host setting);
* a **NIC / rail**: where per-NIC results exist, one of the host's NICs is slow with most partners
  while its other NICs are fine (a bad cable or port on that rail);
* a **path**: the slow pairs are exactly those across one switch distance or between two leaf
  switches, while the same hosts are fine elsewhere (a bad uplink or spine port);
* a **link**: slow only between these two hosts, each fine with its other partners.

Each verdict carries its evidence (the pairs, their values and their ratio to the fleet's pair
median) and a confidence. :func:`second_pass` plans re-pairing every suspect with known-good hosts,
:func:`confirm` folds that second matrix in, and :class:`Bisection` narrows a failed all-nodes run
down to the culprit in at most ceil(log2 N) extra rounds.

Pure: matrices in, verdicts out. The thresholds are declared once in :class:`LocaliseSettings`.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

PAIR_MATRIX_SCHEMA = 1


@dataclass(frozen=True)
class LocaliseSettings:
    slow_ratio: float = 0.8  # a pair below this fraction of the fleet's pair median is slow
    mad_k: float = 4.0  # ... and (when the fleet is noisy) more than this many robust sigmas below it
    majority: float = 0.5  # a host slow with at least this fraction of its partners is the culprit
    min_partners: int = 2  # fewer tested partners than this: a suspect, not a verdict


@dataclass(frozen=True)
class PairResult:
    a: str
    b: str
    value: float | None  # the pair's figure (bandwidth, latency); None when it failed
    status: str = "ok"  # ok | failed | timeout
    round: int | None = None  # SuperBench's serial_index
    index: int | None = None  # SuperBench's parallel_index
    nics: Mapping[str, float] | None = None  # per NIC / rail figures, where the benchmark has them
    reason: str = ""

    @property
    def key(self) -> frozenset[str]:
        return frozenset((self.a, self.b))


@dataclass(frozen=True)
class PairMatrix:
    """One metric over the tested pairs of a pattern run."""

    metric: str
    hosts: tuple[str, ...]
    pairs: tuple[PairResult, ...]
    unit: str = ""
    higher_is_better: bool = True

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": PAIR_MATRIX_SCHEMA,
            "metric": self.metric,
            "unit": self.unit,
            "higher_is_better": self.higher_is_better,
            "hosts": list(self.hosts),
            "pairs": [{k: v for k, v in asdict(p).items() if v not in (None, "")} for p in self.pairs],
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> PairMatrix:
        """Raises ValueError/KeyError/TypeError on a foreign file."""
        if d.get("schema_version") != PAIR_MATRIX_SCHEMA:
            raise ValueError(
                f"pair matrix schema_version {d.get('schema_version')!r}, expected {PAIR_MATRIX_SCHEMA}"
            )
        pairs = tuple(
            PairResult(
                str(p["a"]),
                str(p["b"]),
                None if p.get("value") is None else float(p["value"]),
                str(p.get("status", "ok")),
                p.get("round"),
                p.get("index"),
                {str(k): float(v) for k, v in p["nics"].items()} if p.get("nics") else None,
                str(p.get("reason", "")),
            )
            for p in d["pairs"]
        )
        return cls(
            str(d["metric"]),
            tuple(d["hosts"]),
            pairs,
            str(d.get("unit", "")),
            bool(d.get("higher_is_better", True)),
        )


@dataclass(frozen=True)
class Evidence:
    a: str
    b: str
    value: float | None
    ratio: float  # the pair's figure against the fleet's pair median, 1.0 = typical, 0 = failed
    status: str
    nic: str | None = None

    def describe(self, unit: str = "") -> str:
        what = f"{self.a}<->{self.b}" + (f" {self.nic}" if self.nic else "")
        if self.value is None:
            return f"{what} {self.status}"
        return f"{what} {self.value:.4g}{(' ' + unit) if unit else ''} ({self.ratio:.0%} of median)"


@dataclass(frozen=True)
class Culprit:
    kind: str  # node | nic | path | link
    target: str  # "node07", "node07 NIC mlx5_2", "distance 6", "leaf-a <-> leaf-b", "node03 <-> node05"
    hosts: tuple[str, ...]
    confidence: str  # high | medium | low
    score: float  # 0..1
    bad: int  # pairs that point at it
    tested: int  # pairs that could have
    summary: str
    evidence: tuple[Evidence, ...]
    confirmed: bool | None = None  # after a second pass: reproduced with known-good partners?

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["evidence"] = [asdict(e) for e in self.evidence]
        return d


@dataclass(frozen=True)
class Localisation:
    metric: str
    unit: str
    median: float | None
    threshold: float | None  # pairs below (above, for lower-is-better) this are slow
    pairs: int
    bad_pairs: int
    culprits: tuple[Culprit, ...]
    unexplained: tuple[Evidence, ...] = ()
    good: tuple[str, ...] = ()  # hosts with no slow or failed pair
    notes: tuple[str, ...] = field(default_factory=tuple)
    nic_medians: Mapping[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "unit": self.unit,
            "median": self.median,
            "threshold": self.threshold,
            "pairs": self.pairs,
            "bad_pairs": self.bad_pairs,
            "culprits": [c.to_json() for c in self.culprits],
            "unexplained": [asdict(e) for e in self.unexplained],
            "good": list(self.good),
            "notes": list(self.notes),
            "nic_medians": dict(self.nic_medians),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Localisation:
        """As :meth:`to_json` wrote it. Raises KeyError/TypeError/ValueError on a foreign document."""
        culprits = tuple(
            Culprit(
                **{
                    **c,
                    "hosts": tuple(c["hosts"]),
                    "evidence": tuple(Evidence(**e) for e in c["evidence"]),
                }
            )
            for c in d["culprits"]
        )
        return cls(
            str(d["metric"]),
            str(d.get("unit", "")),
            d.get("median"),
            d.get("threshold"),
            int(d["pairs"]),
            int(d["bad_pairs"]),
            culprits,
            tuple(Evidence(**e) for e in d.get("unexplained", [])),
            tuple(d.get("good", [])),
            tuple(d.get("notes", [])),
            dict(d.get("nic_medians", {})),
        )

    def culprit_hosts(self, kind: str) -> set[str]:
        return {h for c in self.culprits if c.kind == kind for h in c.hosts}


# -- scoring ------------------------------------------------------------------------------------------


def _ratio(value: float | None, median: float, higher: bool) -> float:
    if value is None or median <= 0:
        return 0.0
    if higher:
        return value / median
    return median / value if value > 0 else 0.0


def _bar(values: list[float], s: LocaliseSettings, higher: bool) -> tuple[float | None, float | None]:
    """The healthy pairs' median and the ratio below which a pair is slow.

    The spread is measured on log ratios (a pair at half the median is as far off as one at twice it),
    robustly (median absolute deviation), and the slow pairs themselves are trimmed from the estimate
    in a few passes: one bad host makes 2/N of all pairs slow, which would otherwise widen the spread
    and hide it. The bar is ``slow_ratio`` or ``mad_k`` robust sigmas below the median, whichever is
    lower: a noisy fleet needs a larger drop before a pair counts as slow."""
    if not values:
        return None, None
    med = statistics.median(values)
    if med <= 0:
        return med, None
    logs = [math.log(r) for r in (_ratio(v, med, higher) for v in values) if r > 0]
    if not logs:
        return med, None
    keep = logs
    centre, sigma = 0.0, 0.0
    for _ in range(5):
        centre = statistics.median(keep)
        sigma = 1.4826 * statistics.median([abs(x - centre) for x in keep])
        trimmed = [x for x in logs if x >= centre - s.mad_k * max(sigma, 1e-6)]
        if len(trimmed) == len(keep):
            break
        keep = trimmed
    healthy = med * math.exp(centre) if higher else med / math.exp(centre)
    return healthy, min(s.slow_ratio, math.exp(-s.mad_k * sigma))


def _confidence(score: float, tested: int, s: LocaliseSettings) -> str:
    if tested < s.min_partners:
        return "low"
    if score >= 0.8 and tested >= 3:
        return "high"
    return "medium" if score >= 0.5 else "low"


def localise(
    matrix: PairMatrix,
    distance: Mapping[str, Mapping[str, int]] | None = None,
    leaves: Mapping[str, Sequence[str]] | None = None,
    settings: LocaliseSettings | None = None,
) -> Localisation:
    """Every slow or failed pair explained by a node, NIC, path or link culprit where the matrix allows.

    ``distance``/``leaves`` (from :mod:`sb_fleet.plan.topology`) let path culprits be named."""
    s = settings or LocaliseSettings()
    higher = matrix.higher_is_better
    ok_values = [p.value for p in matrix.pairs if p.status == "ok" and p.value is not None]
    median, bar = _bar(ok_values, s, higher)
    notes: list[str] = []
    if median is None or bar is None:
        failed = [p for p in matrix.pairs if p.status != "ok" or p.value is None]
        notes.append("no pair produced a figure: nothing to compare against")
        ev = tuple(Evidence(p.a, p.b, None, 0.0, p.status) for p in failed)
        return Localisation(
            matrix.metric, matrix.unit, median, None, len(matrix.pairs), len(failed), (), ev, (), tuple(notes)
        )
    threshold = median * bar if higher else median / bar

    evidence: dict[frozenset[str], Evidence] = {}
    partners: dict[str, set[str]] = defaultdict(set)
    bad_partners: dict[str, set[str]] = defaultdict(set)
    for p in matrix.pairs:
        if p.a == p.b:
            continue
        r = _ratio(p.value, median, higher) if p.status == "ok" else 0.0
        e = Evidence(p.a, p.b, p.value if p.status == "ok" else None, round(r, 4), p.status)
        evidence[p.key] = e
        partners[p.a].add(p.b)
        partners[p.b].add(p.a)
        if r < bar:
            bad_partners[p.a].add(p.b)
            bad_partners[p.b].add(p.a)
    bad_keys = {k for k, e in evidence.items() if e.ratio < bar}
    explained: set[frozenset[str]] = set()
    culprits: list[Culprit] = []

    # NICs first: a host whose slowness is one rail's is a NIC culprit, not a node culprit.
    nic_culprits, nic_explained, nic_medians = _nics(matrix, s)
    culprits += nic_culprits
    explained |= {k for k in nic_explained if k in bad_keys}

    # Nodes: repeatedly the host slow with the largest share of partners not already named.
    named: set[str] = set()
    while True:
        best: tuple[float, int, str] | None = None
        for h, bad in bad_partners.items():
            if h in named:
                continue
            others = partners[h] - named
            badh = {b for b in bad - named if frozenset((h, b)) not in explained}
            if len(others) < s.min_partners or not badh:
                continue
            frac = len(badh) / len(others)
            if (
                frac >= s.majority
                and len(badh) >= s.min_partners
                and (best is None or (frac, len(badh)) > best[:2])
            ):
                best = (frac, len(badh), h)
        if best is None:
            break
        frac, nbad, h = best
        others = partners[h] - named
        node_ev = sorted(
            (evidence[frozenset((h, b))] for b in bad_partners[h] - named), key=lambda e: (e.ratio, e.a, e.b)
        )
        med_ratio = statistics.median([e.ratio for e in node_ev])
        culprits.append(
            Culprit(
                "node",
                h,
                (h,),
                _confidence(frac, len(others), s),
                round(frac, 3),
                nbad,
                len(others),
                f"{h} is slow with {nbad} of {len(others)} partners (median {med_ratio:.0%} of the fleet's pair median)",
                tuple(node_ev),
            )
        )
        named.add(h)
        explained |= {frozenset((h, b)) for b in bad_partners[h]}

    remaining = [k for k in bad_keys if k not in explained]

    # Paths: the remaining slow pairs are exactly one switch distance, or one pair of leaf switches.
    if remaining and (distance or leaves):
        path_culprits, path_explained = _paths(evidence, remaining, bar, distance, leaves, named, s)
        culprits += path_culprits
        explained |= path_explained
        remaining = [k for k in remaining if k not in explained]

    # Links: each remaining pair, its hosts fine with their other partners.
    unexplained: list[Evidence] = []
    for k in sorted(remaining, key=lambda k: sorted(k)):
        e = evidence[k]
        a, b = e.a, e.b
        other_a = partners[a] - {b} - named
        other_b = partners[b] - {a} - named
        bad_a = len(bad_partners[a] - {b} - named)
        bad_b = len(bad_partners[b] - {a} - named)
        if not other_a or not other_b:
            unexplained.append(e)
            continue
        clean = 1.0 - max(bad_a / len(other_a), bad_b / len(other_b))
        tested = min(len(other_a), len(other_b))
        culprits.append(
            Culprit(
                "link",
                f"{a} <-> {b}",
                (a, b),
                _confidence(clean, tested + 1, s),
                round(clean, 3),
                1,
                1,
                f"{a}<->{b} is {_pct(e)}, while {a} is fine with {len(other_a) - bad_a} of {len(other_a)} other "
                f"partners and {b} with {len(other_b) - bad_b} of {len(other_b)}",
                (e,),
            )
        )
    culprits.sort(key=lambda c: ({"node": 0, "nic": 1, "path": 2, "link": 3}[c.kind], -c.score, c.target))
    # good: no culprit of its own and no slow pair left unexplained (a bad node's partners stay good)
    involved = {h for c in culprits for h in c.hosts} | {h for e in unexplained for h in (e.a, e.b)}
    good = tuple(h for h in matrix.hosts if h in partners and h not in involved)
    return Localisation(
        matrix.metric,
        matrix.unit,
        median,
        threshold,
        len(evidence),
        len(bad_keys),
        tuple(culprits),
        tuple(unexplained),
        good,
        tuple(notes),
        nic_medians,
    )


def _pct(e: Evidence) -> str:
    return e.status if e.value is None else f"{e.ratio:.0%} of the fleet's pair median"


def _nics(
    matrix: PairMatrix, s: LocaliseSettings
) -> tuple[list[Culprit], set[frozenset[str]], dict[str, float]]:
    """Per-NIC figures: (host, nic) slow with most partners while the host's other NICs are fine."""
    per_nic: dict[str, list[float]] = defaultdict(list)
    for p in matrix.pairs:
        if p.status == "ok" and p.nics:
            for nic, v in p.nics.items():
                per_nic[nic].append(v)
    if not per_nic:
        return [], set(), {}
    bars = {nic: _bar(vals, s, matrix.higher_is_better) for nic, vals in per_nic.items()}
    tested: dict[tuple[str, str], int] = defaultdict(int)
    slow: dict[tuple[str, str], list[Evidence]] = defaultdict(list)
    for p in matrix.pairs:
        if p.status != "ok" or not p.nics:
            continue
        for nic, v in p.nics.items():
            med, bar = bars[nic]
            if med is None or bar is None:
                continue
            r = _ratio(v, med, matrix.higher_is_better)
            for h in (p.a, p.b):
                tested[(h, nic)] += 1
                if r < bar:
                    slow[(h, nic)].append(Evidence(p.a, p.b, v, round(r, 4), "ok", nic))
    culprits: list[Culprit] = []
    explained: set[frozenset[str]] = set()
    hosts_nics: dict[str, list[str]] = defaultdict(list)
    for h, nic in tested:
        hosts_nics[h].append(nic)
    for h, nics in sorted(hosts_nics.items()):
        fracs = {nic: len(slow.get((h, nic), [])) / tested[(h, nic)] for nic in nics}
        bad = [nic for nic, f in fracs.items() if f >= s.majority and len(slow[(h, nic)]) >= s.min_partners]
        if not bad or len(bad) == len(nics):
            continue  # none, or every NIC: a node matter, judged on the pair figures
        for nic in sorted(bad):
            ev = tuple(sorted(slow[(h, nic)], key=lambda e: e.ratio))
            n = tested[(h, nic)]
            culprits.append(
                Culprit(
                    "nic",
                    f"{h} NIC {nic}",
                    (h,),
                    _confidence(fracs[nic], n, s),
                    round(fracs[nic], 3),
                    len(ev),
                    n,
                    f"{h}'s {nic} is slow with {len(ev)} of {n} partners while its other NICs "
                    f"({', '.join(x for x in sorted(nics) if x not in bad)}) are fine",
                    ev,
                )
            )
            explained |= {frozenset((e.a, e.b)) for e in ev}
    medians = {nic: med for nic, (med, _bar_) in bars.items() if med is not None}
    return culprits, explained, medians


def _paths(
    evidence: Mapping[frozenset[str], Evidence],
    remaining: list[frozenset[str]],
    bar: float,
    distance: Mapping[str, Mapping[str, int]] | None,
    leaves: Mapping[str, Sequence[str]] | None,
    named: set[str],
    s: LocaliseSettings,
) -> tuple[list[Culprit], set[frozenset[str]]]:
    """Group pairs by switch distance and by leaf-switch pair; a group whose pairs are mostly slow, and
    which holds at least two of the remaining slow pairs, is a path culprit."""
    groupings: list[tuple[str, Callable[[str, str], str | None]]] = []
    if leaves:

        def leaf_pair(a: str, b: str) -> str | None:
            la, lb = leaves.get(a), leaves.get(b)
            if not la or not lb or la[0] == lb[0]:
                return None
            return " <-> ".join(sorted((la[0], lb[0])))

        groupings.append(("leaf switches", leaf_pair))
    if distance:

        def dist(a: str, b: str) -> str | None:
            d = distance.get(a, {}).get(b)
            return None if d is None else f"distance {d}"

        groupings.append(("switch distance", dist))
    culprits: list[Culprit] = []
    explained: set[frozenset[str]] = set()
    todo = set(remaining)
    for _what, label_of in groupings:
        members: dict[str, list[Evidence]] = defaultdict(list)
        for e in evidence.values():
            if e.a in named or e.b in named:
                continue
            lab = label_of(e.a, e.b)
            if lab is not None:
                members[lab].append(e)
        for lab, evs in sorted(members.items()):
            slow = [e for e in evs if e.ratio < bar and frozenset((e.a, e.b)) in todo]
            if len(slow) < s.min_partners:
                continue
            frac = len(slow) / len(evs)
            if frac < s.majority:
                continue
            hosts = tuple(sorted({h for e in slow for h in (e.a, e.b)}))
            culprits.append(
                Culprit(
                    "path",
                    lab,
                    hosts,
                    _confidence(frac, len(evs), s),
                    round(frac, 3),
                    len(slow),
                    len(evs),
                    f"{len(slow)} of {len(evs)} pairs across {lab} are slow "
                    f"(median {statistics.median([e.ratio for e in slow]):.0%} of the fleet's pair median), "
                    "while their hosts are fine with other partners",
                    tuple(sorted(slow, key=lambda e: e.ratio)),
                )
            )
            keys = {frozenset((e.a, e.b)) for e in slow}
            explained |= keys
            todo -= keys
    return culprits, explained


# -- second pass ------------------------------------------------------------------------------------


def second_pass(
    loc: Localisation, hosts: Sequence[str], partners_each: int = 2
) -> list[tuple[tuple[str, str], ...]]:
    """Rounds of disjoint pairs that re-test every suspect with known-good hosts.

    A node or NIC culprit meets ``partners_each`` good hosts; a link's two ends each meet a good host and
    the link itself runs again. Good hosts are those with no slow pair (``loc.good``), used evenly."""
    good = [h for h in hosts if h in set(loc.good)]
    if not good:
        return []
    wanted: list[tuple[str, str]] = []
    turn = 0

    def partner(avoid: set[str]) -> str | None:
        nonlocal turn
        for i in range(len(good)):
            g = good[(turn + i) % len(good)]
            if g not in avoid:
                turn = (turn + i + 1) % len(good)
                return g
        return None

    for c in loc.culprits:
        if c.kind in ("node", "nic"):
            used: set[str] = set(c.hosts)
            for _ in range(partners_each):
                g = partner(used)
                if g is None:
                    break
                used.add(g)
                wanted.append((c.hosts[0], g))
        elif c.kind == "link":
            a, b = c.hosts
            wanted.append((a, b))
            for h in (a, b):
                g = partner({a, b})
                if g is not None:
                    wanted.append((h, g))
        elif c.kind == "path":
            for e in c.evidence[:partners_each]:
                wanted.append((e.a, e.b))
    rounds: list[list[tuple[str, str]]] = []
    for pair in dict.fromkeys(wanted):  # no pair twice, first-come order
        for rnd in rounds:
            if not any(h in pair for p in rnd for h in p):
                rnd.append(pair)
                break
        else:
            rounds.append([pair])
    return [tuple(r) for r in rounds]


def confirm(loc: Localisation, second: PairMatrix, settings: LocaliseSettings | None = None) -> Localisation:
    """Fold a second-pass matrix in: a culprit reproduced against the first pass's median is confirmed
    (confidence high), one that is not is marked unconfirmed (confidence low)."""
    s = settings or LocaliseSettings()
    if loc.median is None or loc.threshold is None:
        return loc
    higher = second.higher_is_better
    bar = _ratio(loc.threshold, loc.median, higher)
    res: dict[frozenset[str], PairResult] = {p.key: p for p in second.pairs}

    def slow(a: str, b: str) -> bool | None:
        p = res.get(frozenset((a, b)))
        if p is None:
            return None
        return p.status != "ok" or _ratio(p.value, loc.median or 0.0, higher) < bar

    def nic_slow(a: str, b: str, nic: str) -> bool | None:
        p = res.get(frozenset((a, b)))
        if p is None:
            return None
        med = loc.nic_medians.get(nic)
        if p.status != "ok" or not p.nics or nic not in p.nics or not med:
            return p.status != "ok" or None
        return _ratio(p.nics[nic], med, higher) < s.slow_ratio

    out: list[Culprit] = []
    for c in loc.culprits:
        verdict: bool | None = None
        if c.kind == "node":
            h = c.hosts[0]
            tests = [slow(h, g) for g in loc.good if frozenset((h, g)) in res]
            got = [t for t in tests if t is not None]
            verdict = (sum(got) / len(got) >= s.majority) if got else None
        elif c.kind == "nic":
            h, nic = c.hosts[0], c.target.split(" NIC ", 1)[1]
            got = [t for g in loc.good if (t := nic_slow(h, g, nic)) is not None]
            verdict = (sum(got) / len(got) >= s.majority) if got else None
        elif c.kind == "link":
            a, b = c.hosts
            again = slow(a, b)
            ends = [t for g in loc.good for h in (a, b) if (t := slow(h, g)) is not None]
            verdict = None if again is None else (again and not any(ends))
        elif c.kind == "path":
            got = [t for e in c.evidence if (t := slow(e.a, e.b)) is not None]
            verdict = (sum(got) / len(got) >= s.majority) if got else None
        if verdict is None:
            out.append(c)
        elif verdict:
            out.append(
                replace(
                    c,
                    confirmed=True,
                    confidence="high",
                    summary=c.summary + "; reproduced with known-good partners",
                )
            )
        else:
            out.append(
                replace(
                    c,
                    confirmed=False,
                    confidence="low",
                    summary=c.summary + "; NOT reproduced in the second pass",
                )
            )
    return replace(loc, culprits=tuple(out))


# -- bisection --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bisection:
    """Narrow a failed (or slow) all-nodes run down to its culprit hosts.

    Each round tests, in parallel, the halves of every group still under suspicion (a half of one
    or two hosts runs with a known-good host beside it, to have a partner). A failing half stays
    under suspicion, a passing half is good. A single host that fails with a good partner is a
    culprit; a group whose halves both pass holds a fault between its halves (a link or a load
    effect): it is reported as unresolved. One culprit among N hosts is found in ceil(log2 N) rounds.
    """

    suspects: tuple[tuple[str, ...], ...]
    good: frozenset[str] = frozenset()
    rounds: int = 0
    culprits: tuple[str, ...] = ()
    unresolved: tuple[tuple[str, ...], ...] = ()

    @classmethod
    def start(cls, hosts: Sequence[str], good: Iterable[str] = ()) -> Bisection:
        return cls((tuple(hosts),), frozenset(good))

    @property
    def done(self) -> bool:
        return not self.suspects

    def tests(self) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
        """The next round: (group to run, the suspects it tests). Groups share no host."""
        spare = sorted(self.good)
        out: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
        for grp in self.suspects:
            if len(grp) == 1:
                if spare:
                    out.append(((grp[0], spare.pop(0)), grp))
                continue
            halves = (grp[: len(grp) // 2], grp[len(grp) // 2 :])
            if len(grp) <= 3 and len(spare) >= 2:
                # every member meets its own good partner: the last halving and the verdict in one round
                for h in grp:
                    if spare:
                        out.append(((h, spare.pop(0)), (h,)))
                continue
            for half in halves:
                if len(half) >= 2:
                    out.append((half, half))
                elif spare:
                    out.append(((half[0], spare.pop(0)), half))
        return out

    def record(self, outcome: Mapping[tuple[str, ...], bool]) -> Bisection:
        """Fold a round's results in: ``outcome[tested suspects] = passed``."""
        tests = self.tests()
        if not tests:
            return replace(self, unresolved=self.unresolved + self.suspects, suspects=())
        good = set(self.good)
        culprits = list(self.culprits)
        unresolved = list(self.unresolved)
        next_suspects: list[tuple[str, ...]] = []
        tested_of: dict[tuple[str, ...], bool] = {}
        for _group, tested in tests:
            passed = outcome.get(tested)
            if passed is None:
                raise KeyError(f"no result for the test of {', '.join(tested)}")
            tested_of[tested] = passed
        for grp in self.suspects:
            parts = [t for t in tested_of if set(t) <= set(grp)]
            if not parts:
                next_suspects.append(grp)  # waits for a good partner
                continue
            failing = [t for t in parts if not tested_of[t]]
            for t in parts:
                if tested_of[t]:
                    good |= set(t)
            for t in failing:
                if len(t) == 1:
                    culprits.append(t[0])
                else:
                    next_suspects.append(t)
            untested = tuple(h for h in grp if not any(h in t for t in parts))
            if untested:
                next_suspects.append(untested)
            if not failing and not untested:
                unresolved.append(grp)
        return Bisection(
            tuple(next_suspects), frozenset(good), self.rounds + 1, tuple(culprits), tuple(unresolved)
        )

    @staticmethod
    def max_rounds(n: int) -> int:
        return max(1, math.ceil(math.log2(n))) if n > 1 else 0
