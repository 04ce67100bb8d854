"""Populations: hosts that must not be judged against each other.

Two sources, used together:

1. **What the run knows** (:func:`by_facts`): hosts are grouped by GPU model, driver and firmware
   (``facts/<host>.json``: ``gpu_model``, ``driver_version``, ``vbios_version``,
   ``firmware_version``) and, when ``gates.populations.by_inventory_group`` is set, by their
   inventory groups. Each group is judged within itself. A fleet that mixes known populations is
   told so (a warning); it is not a failure, the run knows why.
2. **What the numbers show** (:func:`find_splits`): without facts (or within one fact group), a
   fleet that falls apart into two or more clear populations is found. For every metric family,
   each host's median over its GPUs/NICs is sorted; a *split* is the widest hole between two
   neighbours that leaves at least ``min_share`` of the hosts (and at least 2) on each side, when
   the hole is wider than ``min_gap`` (5%) **and** than ``noise_holes`` times the noise (the
   family's prior, :mod:`.noise_priors`, the hosts' median measured noise of the family, or the groups'
   own robust spread, the largest). Populations of fewer than ``min_hosts`` (8) are not split: a few
   hosts in two groups are no majority, which :mod:`.majority` judges per metric. A benign
   batch 1-2% apart overlaps its neighbours and leaves no hole; a handful of faulty hosts is below
   ``min_share``. Each side is searched again (up to ``max_populations``).

A split is a :class:`PopulationSplit`: the groups, their centres per family, and the families
that show it. It fails the gate unless ``gates.populations.expected_mix`` says a mix is expected;
either way each population is then judged within itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sb_fleet.analysis.fleet_results import POPULATION_FACTS as _FACT_ORDER
from sb_fleet.analysis.noise_priors import noise_prior
from sb_fleet.analysis.order_stats import row_nanmedian
from sb_fleet.analysis.stats import MAD_TO_SIGMA
from sb_fleet.analysis.superbench.metric_names import parse_metric


def split_key(scope: str, family: str, groups: Sequence[Sequence[str]]) -> str:
    """A population split's identity (:attr:`PopulationSplit.key`), also from report.json's fields."""
    return "|".join([scope, family, *(",".join(sorted(g)) for g in groups)])


@dataclass(frozen=True)
class PopulationSplit:
    """One fleet (or one population of it) that falls apart in two."""

    scope: str  # the population that split ("" = the whole fleet)
    groups: tuple[tuple[str, ...], tuple[str, ...]]  # host names: the lower side, the upper side
    family: str  # the family with the widest hole
    centers: tuple[float, float]  # that family's median on each side
    gap: float  # the hole between the two sides, relative to the lower side's top value
    families: tuple[str, ...]  # every family showing the same split
    # the hole (log units) the split had to clear: the minimum gap, and noise_holes times the prior or
    # the sides' own spread (NaN: a record from before it was kept)
    hole_need: float = math.nan
    noise_holes: float = 4.0
    # validate's confirmation run: None (none ran), or whether the split showed again, and how
    confirmed: bool | None = None
    confirmation: str = ""

    @property
    def key(self) -> str:
        """The split's identity across two analyses of one run: its scope, family and groups."""
        return split_key(self.scope, self.family, self.groups)

    @property
    def apart(self) -> float:
        """The upper centre over the lower one, minus 1."""
        lo, hi = self.centers
        return hi / lo - 1 if lo else math.inf

    def rerun_need(self, rerun_spread: float | None) -> float | None:
        """The hole (log units) between the two sides a re-run must show again: the one this split
        cleared, or ``noise_holes`` times the sides' spread in the re-run where that asks more; None
        without a recorded limit."""
        if not math.isfinite(self.hole_need):
            return None
        if rerun_spread is None or not math.isfinite(rerun_spread):
            return self.hole_need
        return max(self.hole_need, self.noise_holes * rerun_spread)

    def short(self) -> str:
        """The split in a few words: the family, the two sides' sizes and how far apart they are."""
        lo, hi = self.groups
        where = f" within {self.scope}" if self.scope else ""
        return f"{self.family}{where}: {len(lo)} vs {len(hi)} host(s), {self.apart * 100:.0f}% apart"

    def sentence(self) -> str:
        lo, hi = self.groups
        show = ", ".join(self.families[:4]) + (
            f" and {len(self.families) - 4} more" if len(self.families) > 4 else ""
        )
        where = f" within {self.scope}" if self.scope else ""
        checked = f"; validate's confirmation run: {self.confirmation}" if self.confirmation else ""
        return (
            f"two populations{where}: {len(lo)} host(s) around {self.centers[0]:.4g} and {len(hi)} around "
            f"{self.centers[1]:.4g} on {self.family} ({self.apart * 100:.0f}% apart, a gap of "
            f"{self.gap * 100:.1f}% between them); the same split in {show}{checked}"
        )

    def to_json(self) -> dict:
        return {
            "scope": self.scope,
            "family": self.family,
            "centers": list(self.centers),
            "apart": round(self.apart, 6),
            "gap": round(self.gap, 6),
            "families": list(self.families),
            "groups": [list(g) for g in self.groups],
            **(
                {"confirmed": self.confirmed, "confirmation": self.confirmation}
                if self.confirmed is not None
                else {}
            ),
        }


def by_facts(
    traits: Sequence[tuple[tuple[str, str], ...]], groups: Sequence[tuple[str, ...]] | None = None
) -> dict[str, np.ndarray]:
    """Rows by what the facts (and, when given, the inventory groups) say.

    One population: the label "". Otherwise each label joins the values of the facts that differ
    across the fleet ("NVIDIA A100", "NVIDIA A100 / 535.104.05"); hosts with none of them: "unknown".
    """
    dicts = [dict(t) for t in traits]
    if groups is not None:
        for d, g in zip(dicts, groups, strict=True):
            if g:
                d["groups"] = "+".join(sorted(g))
    keys = [k for k in (*_FACT_ORDER, "groups") if len({d.get(k) for d in dicts if d.get(k) is not None}) > 1]
    labels = [" / ".join(d[k] for k in keys if k in d) for d in dicts]
    if not keys:
        return {"": np.arange(len(dicts), dtype=np.int64)}
    out: dict[str, list[int]] = {}
    for i, k in enumerate(labels):
        out.setdefault(k or "unknown", []).append(i)
    return {k: np.asarray(v, dtype=np.int64) for k, v in sorted(out.items())}


def _host_medians(
    columns: list[str], values: np.ndarray, noise: np.ndarray | None = None
) -> dict[str, tuple[np.ndarray, float]]:
    """Per family: each host's median over its GPUs/NICs, and the hosts' median measured noise (0: none)."""
    families: dict[str, list[int]] = {}
    for c, name in enumerate(columns):
        pm = parse_metric(name)
        if not pm.is_return_code:
            families.setdefault(pm.family, []).append(c)
    out = {}
    for fam, cols in families.items():
        own = 0.0
        if noise is not None:
            per_host = _row_medians(noise[:, cols])
            per_host = per_host[np.isfinite(per_host)]
            own = float(np.median(per_host)) if per_host.size else 0.0
        out[fam] = (_row_medians(values[:, cols]), own)
    return out


def _row_medians(block: np.ndarray) -> np.ndarray:
    """Each row's median, NaNs skipped."""
    return row_nanmedian(block)


def _split_one(
    med: np.ndarray, prior: float, min_gap: float, min_share: float, noise_holes: float
) -> tuple[np.ndarray, float, float, float, float] | None:
    """(mask of the lower side, gap, lower centre, upper centre, the hole it had to clear) or None."""
    ok = np.isfinite(med) & (med > 0)
    m = int(ok.sum())
    min_size = max(2, math.ceil(min_share * m))
    if m < 2 * min_size:
        return None
    logs = np.log(med[ok])
    order = np.sort(logs)
    holes = np.diff(order)
    lo_k, hi_k = min_size, m - min_size  # split after index k-1: sizes k and m-k
    if hi_k < lo_k:
        return None
    cand = holes[lo_k - 1 : hi_k]
    k = int(np.argmax(cand)) + lo_k
    hole = float(order[k] - order[k - 1])
    gap = math.exp(hole) - 1
    if gap <= min_gap:
        return None
    low, high = order[:k], order[k:]
    within = np.concatenate([low - np.median(low), high - np.median(high)])
    spread = float(np.median(np.abs(within))) * MAD_TO_SIGMA
    if hole <= noise_holes * max(prior, spread):
        return None
    mask = np.zeros(med.shape[0], dtype=bool)
    mask[np.nonzero(ok)[0]] = logs <= order[k - 1]
    need = max(math.log1p(min_gap), noise_holes * max(prior, spread))
    return mask, gap, float(math.exp(np.median(low))), float(math.exp(np.median(high))), need


def find_splits(
    columns: list[str],
    values: np.ndarray,
    hosts: list[str],
    rows: np.ndarray,
    scope: str = "",
    min_gap: float = 0.05,
    min_share: float = 0.1,
    noise_holes: float = 4.0,
    max_populations: int = 4,
    noise: np.ndarray | None = None,
    min_hosts: int = 8,
) -> tuple[list[PopulationSplit], list[tuple[np.ndarray, str]]]:
    """The splits found among ``rows`` of the fleet and the resulting populations (rows, label).

    ``noise``: each value's measured noise (the fleet's shape, NaN where unknown): a hole must also be
    wider than ``noise_holes`` times the hosts' median own noise of the family, so steady groups far
    apart split and scattered ones do not. A part of fewer than ``min_hosts`` hosts is not searched:
    two groups of a handful of hosts are no majority, which :mod:`.majority` reports per metric
    (inconsistent, or too noisy) with each host's own noise."""
    splits: list[PopulationSplit] = []
    todo = [(rows, scope)]
    done: list[tuple[np.ndarray, str]] = []
    while todo:
        part, label = todo.pop(0)
        if len(done) + len(todo) + 1 >= max_populations or len(part) < min_hosts:
            done.append((part, label))
            continue
        meds = _host_medians(columns, values[part], noise[part] if noise is not None else None)
        found: dict[frozenset[int], list[tuple[float, str, float, float, float]]] = {}
        for fam, (med, own) in meds.items():
            prior = max(noise_prior(fam.replace("#", "0")).sigma, own)
            res = _split_one(med, prior, min_gap, min_share, noise_holes)
            if res is None:
                continue
            mask, gap, clo, chi, need = res
            found.setdefault(frozenset(np.nonzero(mask)[0].tolist()), []).append((gap, fam, clo, chi, need))
        if not found:
            done.append((part, label))
            continue
        # The split most families agree on; ties: the widest gap.
        low_set, fams = max(found.items(), key=lambda kv: (len(kv[1]), max(g for g, *_ in kv[1])))
        gap, fam, clo, chi, need = max(fams)
        low_mask = np.zeros(len(part), dtype=bool)
        low_mask[list(low_set)] = True
        lo_rows, hi_rows = part[low_mask], part[~low_mask]
        splits.append(
            PopulationSplit(
                scope=label,
                groups=(tuple(hosts[r] for r in lo_rows), tuple(hosts[r] for r in hi_rows)),
                family=fam,
                centers=(clo, chi),
                gap=gap,
                families=tuple(sorted(f for _, f, *_ in fams)),
                hole_need=need,
                noise_holes=noise_holes,
            )
        )
        n_split = len(splits)
        todo.append((lo_rows, f"{label + ' ' if label else ''}population {n_split}a"))
        todo.append((hi_rows, f"{label + ' ' if label else ''}population {n_split}b"))
    return splits, done
