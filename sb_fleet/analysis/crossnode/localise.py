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

"Slow" is never one fleet-wide threshold: on a shared or busy fabric healthy pairs spread several-fold,
and a bar under that spread hides a host that is slow with every partner. Each pair is judged against
what its two hosts give with their *other* partners (a robust additive fit of the pairs' log figures,
each pair left out of its own hosts' parts), in units of how consistent the fabric is with itself;
see :func:`localise` and docs/analysis.md.

Each verdict carries its evidence (the pairs, their values and their ratio to the fleet's typical
pair) and a confidence. :func:`second_pass` plans re-pairing every suspect with known-good hosts,
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

import numpy as np

PAIR_MATRIX_SCHEMA = 1
NODE_FLOOR = 0.75  # a host's part is a median over its partners: its noise, in pair sigmas, is at least this
ROBUST_FROM = 60  # pairs: from this many on, the fabric's spread is trimmed by the MAD, below by its own SD


@dataclass(frozen=True)
class LocaliseSettings:
    slow_ratio: float = 0.8  # a pair below this fraction of what its partner gives elsewhere is slow
    mad_k: float = 4.0  # ... and (when the fabric is noisy) more than this many robust sigmas below it
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
    median: float | None  # the healthy pairs' typical figure
    threshold: float | None  # median x bar: where a typical partner's pairs turn slow
    pairs: int
    bad_pairs: int
    culprits: tuple[Culprit, ...]
    unexplained: tuple[Evidence, ...] = ()
    good: tuple[str, ...] = ()  # hosts with no slow or failed pair
    notes: tuple[str, ...] = field(default_factory=tuple)
    nic_medians: Mapping[str, float] = field(default_factory=dict)
    bar: float | None = None  # a pair is slow below this ratio to its partner's other pairs
    references: Mapping[str, float] = field(default_factory=dict)  # each host's typical pair
    nic_bar: float | None = None  # a rail is slow below this share of its pair's rails

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
            "bar": self.bar,
            "references": dict(self.references),
            "nic_bar": self.nic_bar,
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
            d.get("bar"),
            {str(k): float(v) for k, v in (d.get("references") or {}).items()},
            d.get("nic_bar"),
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


def _goodness(value: float | None, higher: bool) -> float | None:
    """log of the figure, oriented so that larger is better; None when there is none to take."""
    if value is None or not math.isfinite(value) or value <= 0:
        return None
    return math.log(value) if higher else -math.log(value)


def _robust(logs: Sequence[float], k: float) -> tuple[float, float]:
    """Centre and sigma of ``logs``: the values more than ``k`` robust sigmas (median absolute deviation)
    below the median are trimmed in a few passes, so that the slow values themselves do not widen the
    spread that judges them; sigma is then the standard deviation of what is left (steadier than the
    MAD on the few dozen values of a small fleet)."""
    x = np.asarray(logs, dtype=float)
    keep = x
    centre, sigma = 0.0, 0.0
    if not len(x):
        return centre, sigma
    for _ in range(5):
        centre = float(np.median(keep))
        sigma = 1.4826 * float(np.median(np.abs(keep - centre)))
        trimmed = x[x >= centre - k * max(sigma, 1e-6)]
        if len(trimmed) == len(keep) or not len(trimmed):
            break
        keep = trimmed
    if len(keep) >= 3:
        sigma = float(np.sqrt(np.mean((keep - centre) ** 2)))
    return centre, sigma


def _spread(e: np.ndarray, trim: float = 3.0) -> tuple[float, float]:
    """Centre and standard deviation of residuals, the low tail beyond ``trim`` sigmas cut in a few passes
    (the slow pairs themselves must not widen the spread that judges them)."""
    keep = e
    centre, sigma = 0.0, 0.0
    if not len(e):
        return centre, sigma
    for _ in range(8):
        centre = float(np.mean(keep))
        sigma = float(np.std(keep))
        cut = e[e >= centre - trim * max(sigma, 1e-9)]
        if len(cut) == len(keep) or len(cut) < 3:
            break
        keep = cut
    return centre, sigma


def _centre(values: list[float], s: LocaliseSettings, higher: bool) -> float | None:
    """The healthy pairs' typical figure (the slow tail trimmed): what evidence ratios are shown against."""
    logs = [g for v in values if (g := _goodness(v, higher)) is not None]
    if not logs:
        return None
    centre, _sigma = _robust(logs, s.mad_k)
    return math.exp(centre) if higher else math.exp(-centre)


def _group_order(group: np.ndarray, vals: np.ndarray) -> np.ndarray:
    """The order that sorts by group, then by value: one argsort of a single key (the group number plus
    the value scaled into [0, 0.5)), about twice as fast as a lexsort of the two."""
    lo, hi = float(vals.min()), float(vals.max())
    return np.argsort(group + (vals - lo) * (0.5 / (hi - lo + 1e-12)))


def _grouped_median(group: np.ndarray, vals: np.ndarray, n: int) -> np.ndarray:
    """The median of ``vals`` within each of ``n`` groups (NaN for an empty group), in one sort."""
    out = np.full(n, np.nan)
    if not len(vals):
        return out
    order = _group_order(group, vals)
    g, v = group[order], vals[order]
    counts = np.bincount(g, minlength=n)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    has = counts > 0
    lo = v[(starts + (counts - 1) // 2)[has]]
    hi = v[(starts + counts // 2)[has]]
    out[has] = (lo + hi) / 2
    return out


@dataclass(frozen=True)
class _Fit:
    """The pairs as ``log figure = mu + u[a] + u[b] + e``, fitted robustly (a median polish).

    ``u[h]`` is what host h adds to every pair it is in: the median, over its partners, of how its
    pair with each partner compares with what that partner gives with its other partners. A host slow
    with all its partners gets a large negative ``u``; its partners keep theirs (one slow pair among
    their several does not move a median), and every pair of the slow host stays consistent with the
    fit (small ``e``). A bad link is the opposite: both hosts' ``u`` stay, the pair's ``e`` is large."""

    mu: float
    u: np.ndarray  # per host
    e: np.ndarray  # per ok pair
    partners: np.ndarray  # per host: pairs with a figure
    load: np.ndarray  # per ok pair: its round's part (0 without rounds)


def _fit(a: np.ndarray, b: np.ndarray, y: np.ndarray, n: int, rnd: np.ndarray | None = None) -> _Fit:
    """``rnd``: each pair's round (-1: none). A round of at least three pairs gets a part of its own, the
    load that came and went while it ran (a busy machine, a shared spine), shared by all its pairs."""
    u = np.zeros(n)
    mu = float(np.median(y)) if len(y) else 0.0
    group = np.concatenate((a, b))
    counts = np.bincount(group, minlength=n)
    seen = counts > 0
    rg = np.zeros(len(y), dtype=np.int64)
    nr = 0
    if rnd is not None and len(rnd):
        ids, inv, sizes = np.unique(rnd, return_inverse=True, return_counts=True)
        usable = (ids >= 0) & (sizes >= 3)
        nr = int(usable.sum())
        slot = np.where(usable, np.cumsum(usable) - 1, nr)  # unusable rounds share one slot, kept at 0
        rg = slot[inv]
    r = np.zeros(nr + 1)
    for _round in range(10):
        e = y - mu - u[a] - u[b] - r[rg]
        step = np.nan_to_num(_grouped_median(group, np.concatenate((e, e)), n))
        # what every host's step shares is an error of the overall level, counted once (it is in
        # both ends of every pair): it goes to mu, the rest to each host's part
        common = float(np.median(step[seen])) if seen.any() else 0.0
        mu += common
        step[seen] -= common
        u += step
        centre = float(np.median(u[seen])) if seen.any() else 0.0
        u -= centre
        mu += 2 * centre
        moved = float(np.max(np.abs(step), initial=0.0))
        if nr:
            e = y - mu - u[a] - u[b] - r[rg]
            rstep = np.nan_to_num(_grouped_median(rg, e, nr + 1))
            rstep[nr] = 0.0
            r += rstep
            shift = float(np.median(r[:nr]))
            r[:nr] -= shift
            mu += shift
            moved = max(moved, float(np.max(np.abs(rstep))))
        if moved < 1e-3:  # 0.1%
            break
    e = y - mu - u[a] - u[b] - r[rg]
    return _Fit(mu, u, e, counts, r[rg])


def _ends(a: np.ndarray, b: np.ndarray, y: np.ndarray, fit: _Fit, n: int) -> tuple[np.ndarray, np.ndarray]:
    """For every pair: its log figure against what b gives with its other partners (``end_a``: a's
    part in this pair, judged at b's end), and against what a gives with its other partners (``end_b``).

    A host's part without one partner is the median of its other pairs, each less its partner's part:
    the median without one element, found for all elements at once from one sort per host."""
    p = len(y)
    group = np.concatenate((a, b))
    # entry j (host a): y - mu - u[b], entry p + j (host b): y - mu - u[a]
    vals = np.concatenate((y - fit.mu - fit.u[b], y - fit.mu - fit.u[a]))
    order = _group_order(group, vals)
    g, v = group[order], vals[order]
    counts = np.bincount(g, minlength=n)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    rank = np.arange(len(g)) - starts[g]
    m = counts[g] - 1  # the others
    base = starts[g]

    def pick(t: np.ndarray) -> np.ndarray:
        # the t-th of the others: skip the entry itself
        idx = base + t + (t >= rank)
        return v[np.minimum(idx, len(v) - 1)]

    lo_t = np.maximum((m - 1) // 2, 0)
    hi_t = np.maximum(m // 2, 0)
    without = np.where(m > 0, (pick(lo_t) + pick(hi_t)) / 2, np.nan)
    part = np.empty(len(g))
    part[order] = without
    part_a, part_b = part[:p], part[p:]  # a's part without b, b's part without a
    # a's part judged at b's end: the pair less what b gives elsewhere
    end_a = y - fit.mu - part_b
    end_b = y - fit.mu - part_a
    return end_a, end_b


def _honest_spread(
    a: np.ndarray, b: np.ndarray, y: np.ndarray, fit: _Fit, n: int, s: LocaliseSettings
) -> tuple[float, float]:
    """Centre and sigma of the pairs' leave-one-out errors. The median absolute deviation resists many
    slow pairs (a bad spine link slows a third of them), but on the few dozen pairs of a small fleet it is
    itself too unsteady to set a bar with: there the standard deviation, its low tail trimmed."""
    end_a, end_b = _ends(a, b, y, fit, n)
    honest = end_a + end_b - (y - fit.mu)
    honest = honest[np.isfinite(honest)]
    return _robust(honest, s.mad_k) if len(honest) >= ROBUST_FROM else _spread(honest)


def _round_size(rounds: np.ndarray) -> int:
    """The typical number of pairs in a round that gets a part of its own (0: none does)."""
    ids, sizes = np.unique(rounds[rounds >= 0], return_counts=True)
    sizes = sizes[sizes >= 3]
    return int(np.median(sizes)) if len(sizes) else 0


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

    No pair is judged against one fleet-wide figure. Each host's part in its pairs is fitted from how
    each of its pairs compares with what that partner gives with its other partners (:class:`_Fit`), so
    that a noisy fabric (pairs 4x apart on a shared machine) neither hides a host slow with all its
    partners nor makes one. A pair is slow at a partner's end when it falls far below what that partner
    typically gives; a host whose part is far below the typical host's, with most of its partners
    slow at their ends, is a node culprit. "Far" is in units of the fabric's own consistency (a robust
    sigma of the pairs' residuals from the fit; for a host's part, that sigma over the square root of
    its partner count, as its part is a median over them), and never less than ``slow_ratio``.

    ``distance``/``leaves`` (from :mod:`sb_fleet.plan.topology`) let path culprits be named."""
    s = settings or LocaliseSettings()
    higher = matrix.higher_is_better
    latest: dict[frozenset[str], PairResult] = {}
    for p in matrix.pairs:
        if p.a != p.b:
            latest[p.key] = p  # a pair measured twice: its last figure
    notes: list[str] = []
    keys = list(latest)
    pairs = list(latest.values())
    npairs = len(pairs)
    names = sorted({h for p in pairs for h in (p.a, p.b)})
    at = {h: i for i, h in enumerate(names)}
    ia_all = np.fromiter((at[p.a] for p in pairs), dtype=np.int64, count=npairs)
    ib_all = np.fromiter((at[p.b] for p in pairs), dtype=np.int64, count=npairs)
    v = np.fromiter(
        (p.value if p.status == "ok" and p.value is not None else math.nan for p in pairs),
        dtype=float,
        count=npairs,
    )
    with np.errstate(invalid="ignore", divide="ignore"):
        has = np.isfinite(v) & (v > 0)
        y_all = np.log(np.where(has, v, 1.0)) * (1.0 if higher else -1.0)
    okj = np.flatnonzero(has)
    if not len(okj):
        failed = [p for p in pairs if p.status != "ok" or p.value is None]
        notes.append("no pair produced a figure: nothing to compare against")
        ev0 = tuple(Evidence(p.a, p.b, None, 0.0, p.status) for p in failed)
        return Localisation(
            matrix.metric, matrix.unit, None, None, npairs, len(failed), (), ev0, (), tuple(notes)
        )
    ia, ib, y = ia_all[okj], ib_all[okj], y_all[okj]
    ok_at = np.full(npairs, -1, dtype=np.int64)  # pair -> its place among the pairs with a figure
    ok_at[okj] = np.arange(len(okj))
    index = dict(zip(keys, range(npairs), strict=True))
    in_pairs = np.bincount(np.concatenate((ia_all, ib_all)), minlength=len(names)) > 0
    rounds = np.fromiter(
        (p.round if isinstance(p.round, int) else -1 for p in pairs), dtype=np.int64, count=npairs
    )[okj]
    # Rounds: load that came and went while a round ran (a busy machine, a shared spine) slows all its
    # pairs together. A round's part is kept only where it stands out of what its k pairs' own noise
    # would give it by chance (3 sigmas of a median of k); the pairs are then judged without it.
    k_round = _round_size(rounds)
    load = np.zeros(len(y))
    if k_round:
        with_rounds = _fit(ia, ib, y, len(names), rounds)
        _c, sig_r = _honest_spread(ia, ib, y - with_rounds.load, with_rounds, len(names), s)
        sig_r *= math.sqrt(k_round / (k_round - 1))
        load = np.where(
            np.abs(with_rounds.load) > 3 * 1.2533 * sig_r / math.sqrt(k_round), with_rounds.load, 0.0
        )
        if np.any(load != 0):
            notes.append(
                f"{len(np.unique(rounds[load != 0]))} round(s) ran under a load of their own (all their pairs "
                "moved together): their pairs are judged with it taken out"
            )
    y = y - load
    fit = _fit(ia, ib, y, len(names))
    # each pair against what each of its hosts gives with its *other* partners (the pair left out of
    # that host's part): an honest prediction, whose errors measure how consistent the fabric is
    end_a, end_b = _ends(ia, ib, y, fit, len(names))
    honest_all = end_a + end_b - (y - fit.mu)  # the pair less both hosts' parts, each without this pair
    centre, sigma = _honest_spread(ia, ib, y, fit, len(names), s)
    if np.any(load != 0):
        sigma *= math.sqrt(k_round / (k_round - 1))  # the kept rounds' parts took some spread with them
    inflate = math.sqrt(k_round / (k_round - 1)) if np.any(load != 0) else 1.0
    log_bar = min(math.log(s.slow_ratio), -s.mad_k * sigma)
    bar = math.exp(log_bar)
    to_fig = (lambda g: math.exp(g)) if higher else (lambda g: math.exp(-g))
    median = to_fig(fit.mu)
    threshold = median * bar if higher else median / bar
    u = {h: float(fit.u[i]) for i, h in enumerate(names)}
    # (end at a, end at b): the pair against what b, resp. a, gives with its other partners
    ea, eb = end_a - centre, end_b - centre

    partner_cache: dict[str, set[str]] = {}

    def partners_of(h: str) -> set[str]:
        """Every host h was paired with (a failed pair too): asked for the few hosts a verdict needs."""
        if h not in partner_cache:
            i = at[h]
            mine = np.flatnonzero((ia_all == i) | (ib_all == i))
            partner_cache[h] = {names[int(ib_all[j] if ia_all[j] == i else ia_all[j])] for j in mine}
        return partner_cache[h]

    evidence_cache: dict[frozenset[str], Evidence] = {}

    def evidence(k: frozenset[str]) -> Evidence:
        if k not in evidence_cache:
            p = latest[k]
            r = _ratio(p.value, median, higher) if p.status == "ok" else 0.0
            evidence_cache[k] = Evidence(
                p.a, p.b, p.value if p.status == "ok" else None, round(r, 4), p.status
            )
        return evidence_cache[k]

    def at_end(h: str, o: str) -> float:
        """log of pair (h, o) against what o gives with its other partners: o's end of the pair."""
        j = index.get(frozenset((h, o)))
        if j is None:
            return 0.0
        q = int(ok_at[j])
        if q < 0:
            return -math.inf
        x = float(ea[q] if int(ia[q]) == at[h] else eb[q])
        return x if math.isfinite(x) else 0.0

    culprits: list[Culprit] = []
    # NICs first: a host whose slowness is one rail's is a NIC culprit, not a node culprit.
    nic_culprits, nic_explained, nic_medians, nic_bar = _nics(matrix, s)
    culprits += nic_culprits
    nic_hosts = {h for c in nic_culprits for h in c.hosts}

    # Nodes: a host whose part is far below the typical host's, and slow with most of its partners.
    def find_nodes(sig: float) -> list[tuple[str, list[str], list[str]]]:
        found: list[tuple[str, list[str], list[str]]] = []
        for h in sorted(names, key=lambda h: (u[h], h)):
            m = int(fit.partners[at[h]])
            if m < s.min_partners or h in nic_hosts:
                continue
            nb = min(math.log(s.slow_ratio), -s.mad_k * sig * max(1.2533 / math.sqrt(m), NODE_FLOOR))
            if u[h] >= nb:
                break  # sorted: nobody after is slower
            rest = sorted(partners_of(h))
            slow_with = [o for o in rest if frozenset((h, o)) not in nic_explained and at_end(h, o) < nb]
            if len(slow_with) / len(rest) >= s.majority and len(slow_with) >= s.min_partners:
                found.append((h, rest, slow_with))
        return found

    nodes = find_nodes(sigma)
    if nodes:
        # the spread again without the named hosts' pairs: a shaped host's pairs all give the same
        # figure, and kept they would narrow it. Never narrower than with them (on the few pairs of a
        # small fleet the spread is itself unsteady); wider, it judges the hosts and pairs again.
        theirs = np.array([at[h] for h, _r, _w in nodes])
        keep = ~(np.isin(ia, theirs) | np.isin(ib, theirs))
        rest_honest = honest_all[keep & np.isfinite(honest_all)]
        if len(rest_honest) >= 3:
            centre2, sigma2 = (
                _robust(rest_honest, s.mad_k) if len(rest_honest) >= ROBUST_FROM else _spread(rest_honest)
            )
            sigma2 *= inflate
            if sigma2 > sigma:
                centre, sigma = centre2, sigma2
                log_bar = min(math.log(s.slow_ratio), -s.mad_k * sigma)
                bar = math.exp(log_bar)
                threshold = median * bar if higher else median / bar
                ea, eb = end_a - centre, end_b - centre
                nodes = find_nodes(sigma)

    with np.errstate(invalid="ignore"):
        slow = (ea < log_bar) | (eb < log_bar)  # NaN (a host with no other pair) is not slow
    bad_keys = {keys[int(okj[q])] for q in np.flatnonzero(slow)} | {
        keys[int(j)] for j in np.flatnonzero(~has)
    }
    for h, _rest, slow_with in nodes:
        bad_keys |= {frozenset((h, o)) for o in slow_with}
    bad_partners: dict[str, set[str]] = defaultdict(set)
    for k in bad_keys:
        p = latest[k]
        bad_partners[p.a].add(p.b)
        bad_partners[p.b].add(p.a)
    explained = {k for k in nic_explained if k in bad_keys}

    named: set[str] = set()
    for h, rest, slow_with in nodes:
        frac = len(slow_with) / len(rest)
        node_ev = sorted((evidence(frozenset((h, o))) for o in slow_with), key=lambda e: (e.ratio, e.a, e.b))
        culprits.append(
            Culprit(
                "node",
                h,
                (h,),
                _confidence(frac, len(rest), s),
                round(frac, 3),
                len(slow_with),
                len(rest),
                f"{h} is slow with {len(slow_with)} of {len(rest)} partners (median {math.exp(u[h]):.0%} of what "
                f"those partners give with their other partners, "
                f"{statistics.median([e.ratio for e in node_ev]):.0%} of the fleet's pair median)",
                tuple(node_ev),
            )
        )
        named.add(h)
        explained |= {frozenset((h, o)) for o in partners_of(h) if frozenset((h, o)) in bad_keys}

    remaining = [k for k in bad_keys if k not in explained]

    # Paths: the remaining slow pairs are exactly one switch distance, or one pair of leaf switches.
    if remaining and (distance or leaves):
        every = {k: evidence(k) for k in keys}
        path_culprits, path_explained = _paths(every, remaining, bad_keys, distance, leaves, named, s)
        culprits += path_culprits
        explained |= path_explained
        remaining = [k for k in remaining if k not in explained]

    # Links: each remaining pair, its hosts fine with their other partners.
    unexplained: list[Evidence] = []
    for k in sorted(remaining, key=lambda k: sorted(k)):
        e = evidence(k)
        a, b = e.a, e.b
        other_a = partners_of(a) - {b} - named
        other_b = partners_of(b) - {a} - named
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
    good = tuple(h for h in matrix.hosts if h in at and in_pairs[at[h]] and h not in involved)
    if -s.mad_k * sigma < math.log(s.slow_ratio):
        notes.append(
            f"the pairs agree with their hosts' other pairs to within {math.exp(sigma):.2f}x (one robust sigma): "
            f"a pair is slow below {bar:.0%} of what its partner typically gives"
        )
    # each host's typical pair (what a typical partner gets with it): what a second pass judges against
    references = {h: round(to_fig(fit.mu + u[h]), 6) for h in names if fit.partners[at[h]]}
    return Localisation(
        matrix.metric,
        matrix.unit,
        median,
        threshold,
        npairs,
        len(bad_keys),
        tuple(culprits),
        tuple(unexplained),
        good,
        tuple(notes),
        nic_medians,
        round(bar, 6),
        references,
        nic_bar,
    )


def _pct(e: Evidence) -> str:
    return e.status if e.value is None else f"{e.ratio:.0%} of the fleet's pair median"


def _nics(
    matrix: PairMatrix, s: LocaliseSettings
) -> tuple[list[Culprit], set[frozenset[str]], dict[str, float], float | None]:
    """Per-NIC figures: (host, nic) slow with most partners while the host's other NICs are fine.

    Each rail is judged by its share of its own pair: its figure against the median of the pair's
    rails. What slows a whole pair (load, a busy host, the other end) moves all its rails together
    and cancels; a bad rail stays low in every pair of its host."""
    higher = matrix.higher_is_better
    per_nic: dict[str, list[float]] = defaultdict(list)
    shares: list[tuple[PairResult, str, float, float]] = []  # pair, nic, log share, figure
    for p in matrix.pairs:
        if p.status != "ok" or not p.nics:
            continue
        logs = {nic: g for nic, v in p.nics.items() if (g := _goodness(v, higher)) is not None}
        for nic, v in p.nics.items():
            per_nic[nic].append(v)
        if len(logs) < 2:
            continue
        mid = statistics.median(logs.values())
        for nic, v in p.nics.items():
            shares.append((p, nic, logs[nic] - mid if nic in logs else -math.inf, v))
    medians = {nic: m for nic, vals in per_nic.items() if (m := _centre(vals, s, higher)) is not None}
    finite = [x for _p, _n, x, _v in shares if math.isfinite(x)]
    if not finite:
        return [], set(), medians, None
    centre, sigma = _robust(finite, s.mad_k)
    log_bar = min(math.log(s.slow_ratio), -s.mad_k * sigma)
    tested: dict[tuple[str, str], int] = defaultdict(int)
    slow: dict[tuple[str, str], list[Evidence]] = defaultdict(list)
    for p, nic, x, v in shares:
        r = _ratio(v, medians.get(nic, 0.0), higher)
        for h in (p.a, p.b):
            tested[(h, nic)] += 1
            if x - centre < log_bar:
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
    return culprits, explained, medians, round(math.exp(log_bar), 6)


def _paths(
    evidence: Mapping[frozenset[str], Evidence],
    remaining: list[frozenset[str]],
    bad_keys: set[frozenset[str]],
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
            slow = [e for e in evs if frozenset((e.a, e.b)) in todo and frozenset((e.a, e.b)) in bad_keys]
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
    """Fold a second-pass matrix in: a culprit reproduced with known-good partners is confirmed
    (confidence high), one that is not is marked unconfirmed (confidence low).

    A re-tested pair is judged as in the first pass: against what its hosts gave with their other
    partners then (their ``references``; a known-good end's first), with the first pass's ``bar``. A
    localisation written before those were kept falls back to the fleet's median and threshold."""
    s = settings or LocaliseSettings()
    if loc.median is None or loc.threshold is None:
        return loc
    higher = second.higher_is_better
    bar = loc.bar if loc.bar else _ratio(loc.threshold, loc.median, higher)
    res: dict[frozenset[str], PairResult] = {p.key: p for p in second.pairs}
    good = set(loc.good)

    def reference(a: str, b: str) -> float:
        known = [loc.references[h] for h in (a, b) if h in good and h in loc.references]
        if not known:
            known = [loc.references[h] for h in (a, b) if h in loc.references]
        logs = [g for v in known if (g := _goodness(v, higher)) is not None]
        if not logs:
            return loc.median or 0.0
        m = sum(logs) / len(logs)
        return math.exp(m) if higher else math.exp(-m)

    def slow(a: str, b: str) -> bool | None:
        p = res.get(frozenset((a, b)))
        if p is None:
            return None
        return p.status != "ok" or _ratio(p.value, reference(a, b), higher) < bar

    def nic_slow(a: str, b: str, nic: str) -> bool | None:
        p = res.get(frozenset((a, b)))
        if p is None:
            return None
        if p.status != "ok" or not p.nics or nic not in p.nics:
            return p.status != "ok" or None
        if loc.nic_bar is not None and len(p.nics) >= 2:
            mid = statistics.median(p.nics.values())
            return _ratio(p.nics[nic], mid, higher) < loc.nic_bar
        med = loc.nic_medians.get(nic)
        return None if not med else _ratio(p.nics[nic], med, higher) < s.slow_ratio

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
