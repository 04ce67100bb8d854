"""The corpus of real runs (tests/corpus/, recorded by bench/record_corpus.py): reading and judging it,
and the noise shapes it shows, for the synthetic fleets.

Each run is a real ``sb-fleet validate`` on a loopback fleet (its run directory's small files and a
``case.json`` saying what was planted, where, and how loaded the machine was). :func:`judge_run`
re-judges one with the current code, offline, as ``validate`` does: the first pass, then the
recorded confirmation run (``confirm/``: the flagged hosts and control hosts run again) where there
is one; and classifies it the way issue 35 counts:

* a run with no fault: ``false_alarm`` when the gate failed, ``noted`` when it passed with metrics
  said too noisy or inconsistent, else ``clean``;
* a run with a planted fault: ``caught`` when the faulty host fails, ``noted`` when the gate passed
  but a metric of that host was said too noisy or inconsistent, ``silent`` otherwise (the outcome
  the issue forbids).

:func:`noise_shapes` reads what the healthy hosts of the corpus look like, as relative deviations
from the other hosts' median and as their own measured noise: the heavy tails and the bimodal
contention the synthetic fleets draw their noise from (``tests/synth/small.py``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sb_fleet.analysis.superbench.metric_names import Directions

CORPUS = Path(__file__).resolve().parent.parent / "corpus"


@dataclass(frozen=True)
class CorpusRun:
    case: str  # e.g. nofault-4h-parallel-quiet
    path: Path
    meta: dict  # case.json

    @property
    def fault_host(self) -> str | None:
        f = self.meta.get("fault")
        return str(f.get("host")) if isinstance(f, dict) and f.get("host") else None

    @property
    def loaded(self) -> bool:
        return self.case.endswith("-loaded")

    def slowdown(self, metric: str = "gemm-flops/fp32_flops") -> float | None:
        """How much slower the faulty host measured ``metric`` (a rate) than the median of the others:
        what the planted fault really did (a busy process on 2 shared cores need not slow a host)."""
        host = self.fault_host
        if host is None:
            return None
        rows = [
            json.loads(x) for x in (self.path / "results-summary.jsonl").read_text().splitlines() if x.strip()
        ]
        vals = {r["node"]: r.get(metric) for r in rows}
        mine = vals.get(host)
        others = [v for h, v in vals.items() if h != host and isinstance(v, (int, float)) and v > 0]
        if not isinstance(mine, (int, float)) or not mine > 0 or not others:
            return None
        return float(np.median(others)) / float(mine)


def runs(root: Path = CORPUS) -> Iterator[CorpusRun]:
    """Every recorded run whose validate produced results (a run that crashed is not evidence)."""
    if not root.is_dir():
        return
    for meta_path in sorted(root.glob("*/*/case.json")):
        run = meta_path.parent
        if not (run / "results-summary.jsonl").is_file() or not (run / "manifest.json").is_file():
            continue
        meta = json.loads(meta_path.read_text())
        yield CorpusRun(case=run.parent.name, path=run, meta=meta)


@dataclass(frozen=True)
class Judged:
    run: CorpusRun
    outcome: str  # clean | noted | false_alarm (no fault); caught | noted | silent (a fault)
    first: str  # the same, from the first pass alone (before the recorded confirmation run)
    gate_passed: bool
    failed: tuple[str, ...]
    noisy: tuple[str, ...]  # metrics said too noisy
    inconsistent: tuple[str, ...]
    why: str  # the gate's policy, or the faulty host's first finding


def _outcome(run: CorpusRun, r) -> tuple[str, str]:  # noqa: ANN001 - a ReportResult
    noisy = bool(r.too_noisy or r.inconsistent)
    fault = run.fault_host
    if fault is None:
        return ("false_alarm" if not r.gate.passed else ("noted" if noisy else "clean")), r.gate.policy
    host = next((h for h in r.hosts if h.name == fault), None)
    on_host = any(fault in m.hosts for m in r.too_noisy) or any(
        fault in g for m in r.inconsistent for g in m.groups
    )
    why = host.issues[0].detail if host is not None and host.issues else r.gate.policy
    if host is not None and host.verdict == "fail":
        return "caught", why
    return ("noted" if on_host else "silent"), why


def _confirmations(run: CorpusRun, first):  # noqa: ANN001, ANN202 - a ReportResult; host -> Confirmation
    """validate's confirmation, judged again from the recorded re-run (``confirm/``): the hosts the first
    pass fails on fleet statistics that the recorded run re-ran. A host failing now that was not re-run
    then cannot be cleared (the strict reading)."""
    from sb_fleet.analysis.fleet_results import load_fleet
    from sb_fleet.history import confirm as cf

    doc_path, again_path = run.path / "confirm.json", run.path / "confirm" / "results-summary.jsonl"
    if not doc_path.is_file() or not again_path.is_file():
        return None
    plan = json.loads(doc_path.read_text()).get("plan") or {}
    rerun_hosts = set(plan.get("benchmarks") or {})
    controls = list(plan.get("controls") or [])
    again = load_fleet(again_path)
    rerun = cf.rerun_values(again.hosts, again.columns, again.values)
    firsts = cf.rerun_values(first.fleet.hosts, first.fleet.columns, first.fleet.values)
    chosen = [h for h in cf.select_for_confirmation(first.hosts, len(first.hosts)).chosen if h in rerun_hosts]
    return cf.judge_confirmation(
        {h.name: h.issues for h in first.hosts if h.name in chosen},
        {h: rerun[h] for h in chosen if h in rerun},
        {c: firsts.get(c, {}) for c in controls},
        {c: rerun[c] for c in controls if c in rerun},
        firsts=firsts,
        direction=first.fleet.directions.of,
        noise=_rerun_noise(run),
    )


def _rerun_noise(run: CorpusRun) -> dict[str, dict[str, float]] | None:
    """The recorded re-run's own measured noise (host -> metric -> relative sigma), None if not kept."""
    from sb_fleet.analysis.fleet_results import load_fleet
    from sb_fleet.history import confirm as cf

    path = run.path / "confirm" / "noise-summary.jsonl"
    if not path.is_file():
        return None
    noise = load_fleet(path)  # the same lines as the results' summary: node -> metric -> noise
    return cf.rerun_values(noise.hosts, noise.columns, noise.values)


def _split_checks(run: CorpusRun, first):  # noqa: ANN001, ANN202 - a ReportResult; key -> (bool, how)
    """validate's re-run of the population splits and inconsistent metrics, judged again from the
    recorded re-run (``confirm-splits/``); None where the run has none (they then stand)."""
    from sb_fleet.analysis.fleet_results import load_fleet
    from sb_fleet.history import confirm as cf

    path = run.path / "confirm-splits" / "results-summary.jsonl"
    if not first.populations and not first.inconsistent and not first.disagreements:
        return None
    if not path.is_file():  # the re-run's values not kept: validate's own word on each split, if any
        recorded = _recorded_split_checks(run)
        return {sp.key: recorded[sp.key] for sp in first.populations if sp.key in recorded} or None
    again = load_fleet(path)
    rerun = cf.rerun_values(again.hosts, again.columns, again.values)
    # a disagreement is judged on the re-run's values where its two hosts were re-run (recorded runs from
    # before disagreements were re-run re-ran them as a split's hosts, or not at all: then it stands)
    return cf.recheck(first.populations, [*first.inconsistent, *first.disagreements], rerun)


def _recorded_split_checks(run: CorpusRun) -> dict[str, tuple[bool, str]]:
    """What the recorded validate's report.json says of each split it re-ran (split key -> (showed again,
    how))."""
    from sb_fleet.analysis.populations import split_key

    p = run.path / "report.json"
    if not p.is_file():
        return {}
    out = {}
    for sp in json.loads(p.read_text()).get("populations") or []:
        if isinstance(sp, dict) and isinstance(sp.get("confirmed"), bool):
            key = split_key(str(sp.get("scope", "")), str(sp.get("family", "")), sp.get("groups") or [])
            out[key] = (
                sp["confirmed"],
                str(sp.get("confirmation", "")),
            )
    return out


def judge_run(run: CorpusRun) -> Judged:
    """The run judged as validate judges it, offline with this code: the first pass, then the recorded
    confirmation run where the run has one."""
    from sb_fleet.report.analyse import report

    first = report(run.path)
    first_outcome, _ = _outcome(run, first)
    confirmations = _confirmations(run, first)
    splits = _split_checks(run, first)
    r = (
        report(run.path, confirmations=confirmations, split_checks=splits)
        if confirmations or splits
        else first
    )
    outcome, why = _outcome(run, r)
    return Judged(
        run,
        outcome,
        first_outcome,
        r.gate.passed,
        tuple(h.name for h in r.hosts if h.verdict == "fail"),
        tuple(m.metric for m in r.too_noisy),
        tuple(m.metric for m in r.inconsistent),
        why,
    )


@dataclass(frozen=True)
class NoiseShapes:
    """What healthy hosts of real runs look like, standardised: ``z`` is a host's log deviation from the
    other hosts' median on the bad side (positive: worse) and ``r`` its own measured noise (NaN: none recorded), both in units of the
    robust sigma of all such deviations of the same metric in the corpus. Drawn together, so a host
    that deviates much (a contended one) keeps the own noise it measured while it did."""

    z: np.ndarray
    r: np.ndarray

    def draw(self, rng: np.random.Generator, size: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        idx = rng.integers(len(self.z), size=size)
        return self.z[idx], self.r[idx]

    def describe(self) -> str:
        z = self.z
        tail = float(np.mean(np.abs(z) > 3))
        kurt = float(np.mean(z**4) / max(np.mean(z**2) ** 2, 1e-12))
        own = self.r[np.isfinite(self.r)]
        return (
            f"{z.size} healthy values; |z| > 3 robust sigmas: {tail * 100:.1f}% (Gaussian: 0.3%); "
            f"kurtosis {kurt:.1f} (Gaussian: 3); own noise recorded for {own.size}, median "
            f"{(float(np.median(own)) if own.size else float('nan')):.2f} robust sigmas"
        )


MAD_TO_SIGMA = 1.4826


def noise_shapes(
    root: Path = CORPUS, metrics: tuple[str, ...] = ("gemm-flops/", "kernel-launch/")
) -> NoiseShapes | None:
    """The standardised deviations and own noise of every healthy host's value of ``metrics`` in the
    corpus's no-fault runs (quiet and loaded, parallel and serial); None without a corpus."""
    by_metric: dict[str, tuple[list[float], list[float]]] = {}
    for run in runs(root):
        if run.fault_host is not None:
            continue
        rows = [
            json.loads(x) for x in (run.path / "results-summary.jsonl").read_text().splitlines() if x.strip()
        ]
        noise_path = run.path / "noise-summary.jsonl"
        noise = (
            {d["node"]: d for d in (json.loads(x) for x in noise_path.read_text().splitlines() if x.strip())}
            if noise_path.is_file()
            else {}
        )
        keys = sorted({k for r in rows for k in r if k.startswith(metrics) and not k.endswith("return_code")})
        for k in keys:
            worse = -1.0 if Directions().of(k) > 0 else 1.0  # z > 0: worse than the others
            devs, owns = by_metric.setdefault(k, ([], []))
            vals = np.array([float(r[k]) if isinstance(r.get(k), (int, float)) else np.nan for r in rows])
            for i, r in enumerate(rows):
                others = np.delete(vals, i)
                others = others[np.isfinite(others) & (others > 0)]
                if others.size < 2 or not vals[i] > 0:
                    continue
                devs.append(worse * float(np.log(vals[i] / np.median(others))))
                own = noise.get(r["node"], {}).get(k)
                owns.append(float(own) if isinstance(own, (int, float)) else np.nan)
    zs: list[np.ndarray] = []
    rs: list[np.ndarray] = []
    for devs, owns in by_metric.values():
        d = np.array(devs)
        if d.size < 5:
            continue
        scale = float(np.median(np.abs(d - np.median(d)))) * MAD_TO_SIGMA
        if not scale > 0:
            continue
        zs.append(d / scale)
        rs.append(np.array(owns) / scale)
    if not zs:
        return None
    return NoiseShapes(np.concatenate(zs), np.concatenate(rs))
