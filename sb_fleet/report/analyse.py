"""The analysis as plain functions: ``report()`` judges a fleet, ``write_reports()`` writes the files.

Used by the ``report`` command and by any other command (``validate``)
that wants the analysis without the command line.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from sb_fleet.analysis.completeness import check_completeness
from sb_fleet.analysis.detect import Detection, detect
from sb_fleet.analysis.evidence import MetricEvidence, ordered
from sb_fleet.analysis.fleet_results import Fleet, HostInfo, load_fleet
from sb_fleet.analysis.gates import GateReason, apply_baseline_gate, apply_limits, decide
from sb_fleet.analysis.invalid_values import invalid_value_issues
from sb_fleet.analysis.issues import FAIL, Issue
from sb_fleet.analysis.majority import Disagreement, Inconsistency, NoisyMetric, majority_check
from sb_fleet.analysis.populations import PopulationSplit, by_facts, find_splits
from sb_fleet.analysis.power_limits import load_power_limit_issues
from sb_fleet.analysis.sku_reference import check_sku
from sb_fleet.analysis.software import check_software
from sb_fleet.analysis.stats import column_stats
from sb_fleet.analysis.verdict import FLAKY, HostReport, after_confirmation, judge, not_confirmed
from sb_fleet.config.gatespec import DEFAULT_BASELINE_REGRESSION, Gates
from sb_fleet.errors import ResultsError
from sb_fleet.report.report_result import ReportResult

if TYPE_CHECKING:
    from sb_fleet.analysis.crossnode.fabric import FabricView
    from sb_fleet.analysis.superbench.rules import Diagnosis, RuleSummary
    from sb_fleet.exposition import Series
    from sb_fleet.history.confirm import Confirmation
    from sb_fleet.report.writers.prom_early import BenchmarkPart
    from sb_fleet.report.writers.report_prometheus import PromSettings

REPORT_SCHEMA_VERSION = 1
MAX_NOISE_WARNINGS = 10  # too-noisy and inconsistent metrics named one by one in the warnings


def _inventory_hosts(path: Path) -> list[HostInfo]:
    from sb_fleet.config.inventory import (
        load_inventory,  # the spine's parser; imported late, it pulls in ansible
    )

    inv = load_inventory(path, with_vars=False)
    return [HostInfo(name=h.name, groups=tuple(getattr(h, "groups", ()) or ())) for h in inv.hosts]


def _merge(bucket: dict[int, list[Issue]], more: dict[int, list[Issue]]) -> None:
    for row, lst in more.items():
        bucket.setdefault(row, []).extend(lst)


def report(
    source: Path | str,
    inventory: Path | str | None = None,
    rules: Path | str | None = None,
    baseline: Path | str | None = None,
    gates: Gates | None = None,
    history: Path | str | None = None,
    confirmations: Mapping[str, Confirmation] | None = None,
    split_checks: Mapping[str, tuple[bool, str]] | None = None,
    unconfirmed: Collection[str] = (),
    reruns: Mapping[str, Mapping[str, float]] | None = None,
    loaded: Fleet | None = None,
) -> ReportResult:
    """Judge every host of a run directory or results-summary.jsonl (and with ``history``, against
    each host's own past; the run is recorded there). ``split_checks``: validate's re-run of the
    population splits, inconsistent metrics and disagreements (their key -> (showed again, how)); one
    that did not show again is reported and does not fail the gate, nor does anything found inside a
    split that did not show again. ``unconfirmed``: hosts validate's bound left out of its confirmation
    run; one that fails on fleet statistics alone is ``unconfirmed``, not failed. ``reruns``: validate's
    re-run values (host -> metric -> value), drawn beside the first ones. ``loaded``: ``source`` loaded
    already (:func:`load_fleet`), by a caller that starts work on the results before they are judged."""
    t0 = time.perf_counter()
    gates = gates or Gates()
    fleet = loaded if loaded is not None else load_fleet(Path(source))
    warnings: list[str] = []

    expected: list[HostInfo] = list(fleet.expected_hosts)
    if inventory is not None:
        inv = _inventory_hosts(Path(inventory))
        known = {h.name: h for h in expected}
        expected = [known.get(h.name, h) for h in inv]
    host_index = fleet.host_index()
    # SuperBench's rules and baselines, and a pattern run's fabric, are imported only when given
    base = None
    if baseline is not None:
        from sb_fleet.analysis.superbench.baseline import load_baseline

        base = load_baseline(Path(baseline))
    ruleset = None
    if rules is not None:
        from sb_fleet.analysis.superbench.rules import load_rules

        ruleset = load_rules(Path(rules))

    by_name = {h.name: h for h in expected}
    fact_pops = by_facts([_traits(by_name.get(h)) for h in fleet.hosts])  # missing metrics: within each
    issues: dict[int, list[Issue]] = {}
    _merge(
        issues,
        check_completeness(fleet.columns, fleet.values, fleet.expected_benchmarks, list(fact_pops.values())),
    )
    if fleet.run_dir is not None:  # a GPU power limit below its default (hostprep's facts)
        for name, limit_issues in load_power_limit_issues(fleet.run_dir, fleet.hosts).items():
            issues.setdefault(host_index[name], []).extend(limit_issues)
    sw_issues, sw_warnings = check_software(fleet)  # hosts that ran another container image
    _merge(issues, sw_issues)
    warnings.extend(sw_warnings)
    gpu_models = [by_name[h].gpu_model if h in by_name else None for h in fleet.hosts]
    hist = None
    if history is not None:  # each component's own past: its night-to-night noise, and regressions
        from sb_fleet.history.assess import assess

        hist = assess(
            history,
            source,
            fleet.run_dir,
            fleet.hosts,
            fleet.columns,
            fleet.values,
            fleet.directions,
            gates.history.settings(),
        )
    noise = fleet.noise  # the run's own measured noise, and with --history each cell's night-to-night
    if hist is not None and hist.own_noise is not None and hist.own_noise.shape == fleet.values.shape:
        noise = hist.own_noise if noise is None else np.fmax(noise, hist.own_noise)
    detection = Detection(issues={})
    splits: list[PopulationSplit] = []
    disagreements: list[Disagreement] = []
    noisy: list[NoisyMetric] = []
    inconsistent: list[Inconsistency] = []
    evidence: list[MetricEvidence] = []
    partitions: dict[str, np.ndarray] = {"": np.arange(len(fleet.hosts), dtype=np.int64)}
    if gates.fleet.enabled:
        settings = gates.fleet.settings()
        pop = gates.populations
        traits = [_traits(by_name.get(h)) for h in fleet.hosts]
        groups = (
            [by_name[h].groups if h in by_name else () for h in fleet.hosts]
            if pop.by_inventory_group
            else None
        )
        by_fact = by_facts(traits, groups)
        if len(by_fact) > 1:
            warnings.append(
                f"{len(by_fact)} populations from the facts, each judged within itself: "
                + ", ".join(f"{label} ({len(rows)} hosts)" for label, rows in by_fact.items())
            )
        partitions = {}
        for label, rows in by_fact.items():
            found, parts = find_splits(
                fleet.columns,
                fleet.values,
                fleet.hosts,
                rows,
                label,
                pop.min_gap,
                pop.min_share,
                noise=noise,
                min_hosts=settings.min_hosts,
            )
            for sp in found:
                check = (split_checks or {}).get(sp.key)
                splits.append(
                    sp
                    if check is None
                    else dataclasses.replace(sp, confirmed=check[0], confirmation=check[1])
                )
            partitions.update({plabel: prows for prows, plabel in parts})
        for label, rows in partitions.items():
            inside = _inside_unconfirmed(splits, {fleet.hosts[int(r)] for r in rows})
            own = noise[rows] if noise is not None else None
            part = detect(fleet.columns, fleet.values[rows], fleet.directions, settings, own)
            noisy += _noisy_cells(part.noisy_cells, fleet, rows)
            if len(rows) < settings.majority_max_hosts:
                names = [fleet.hosts[r] for r in rows]
                maj = majority_check(
                    fleet.columns, fleet.values[rows], fleet.directions, names, settings, own
                )
                for r, lst in maj.issues.items():
                    part.issues.setdefault(r, []).extend(lst)
                disagreements += [_rechecked(d, split_checks, inside) for d in maj.disagreements]
                noisy += maj.noisy
                inconsistent += [_rechecked(inc, split_checks, inside) for inc in maj.inconsistent]
                evidence += [
                    dataclasses.replace(e, partition=label).with_reruns(reruns or {}) for e in maj.evidence
                ]
            for r, lst in part.issues.items():
                detection.issues.setdefault(int(rows[r]), []).extend(lst)
            detection.flagged_cells |= {(int(rows[r]), c) for r, c in part.flagged_cells}
            detection.families += [dataclasses.replace(f, partition=label) for f in part.families]
            if len(rows) < settings.min_hosts:
                who = f"in {label}" if label else "reported"
                measured = "measured noise" if noise is not None else "noise"
                how = (
                    f"judged by majority agreement against their {measured} (never below the suite's priors)"
                    if len(rows) >= 3
                    else "no majority to judge by"
                )
                warnings.append(
                    f"only {len(rows)} host(s) {who}: {how}; fleet statistics need at least "
                    f"{settings.min_hosts} (rules, a baseline or limits in the gates add evidence)"
                )
        _merge(issues, detection.issues)
        if settings.sku_reference:
            _merge(issues, check_sku(fleet.columns, fleet.values, fleet.directions, gpu_models))
        for sp in splits:
            warnings.append(
                sp.sentence()
                + (
                    ""
                    if pop.expected_mix or sp.confirmed is False
                    else " (gates.populations.expected_mix: false)"
                )
            )
        noisy = _merge_noisy(noisy)
        for nm in noisy[:MAX_NOISE_WARNINGS]:
            warnings.append(nm.sentence())
        if len(noisy) > MAX_NOISE_WARNINGS:
            warnings.append(
                f"... {len(noisy) - MAX_NOISE_WARNINGS} more metric(s) too noisy to judge (report.json)"
            )
        for inc in inconsistent[:MAX_NOISE_WARNINGS]:
            warnings.append(inc.sentence())
        if len(inconsistent) > MAX_NOISE_WARNINGS:
            warnings.append(
                f"... {len(inconsistent) - MAX_NOISE_WARNINGS} more inconsistent metric(s) (report.json)"
            )
        for d in disagreements[:MAX_NOISE_WARNINGS]:
            warnings.append(d.sentence())
    rule_summaries: list[RuleSummary] = []
    rules_diagnosis: Diagnosis | None = None
    rules_unmatched: dict[str, list[str]] = {}
    if ruleset is not None:
        from sb_fleet.analysis.superbench.rules import apply_rules

        ro = apply_rules(ruleset, fleet.columns, fleet.values, base)
        _merge(issues, ro.issues)
        rule_summaries = ro.summaries
        rules_diagnosis, rules_unmatched = ro.diagnosis, ro.unmatched
        warnings.extend(ro.warnings)
    max_reg = gates.baseline.max_regression
    if max_reg is None and base is not None and ruleset is None:
        max_reg = DEFAULT_BASELINE_REGRESSION
    if base is not None and max_reg is not None:
        _merge(
            issues,
            apply_baseline_gate(
                max_reg, gates.baseline.metrics, fleet.columns, fleet.values, base, fleet.directions
            ),
        )
    if gates.limits:
        _merge(issues, apply_limits(gates, fleet.columns, fleet.values, gpu_models))

    if hist is not None:  # regressions against each component's own past: sb_fleet.history
        _merge(issues, hist.issues)
        warnings.extend(hist.warnings)

    fabric: FabricView | None = None
    unreported: dict[str, list[Issue]] = {}  # culprits with no results line (their run failed): still judged
    if fleet.run_dir is not None:  # a pattern run's culprits (pairs/, followup.json): analysis.fabric
        from sb_fleet.analysis.crossnode.fabric import load_fabric

        fabric, unread = load_fabric(fleet.run_dir)
        warnings.extend(unread)
        if fabric is not None:
            for name, lst in fabric.host_issues().items():
                row = host_index.get(name)
                if row is None:
                    unreported[name] = lst
                else:
                    issues.setdefault(row, []).extend(lst)
            warnings.extend(fabric.warnings())
    for name, lst in invalid_value_issues(fleet).items():  # NaN, inf, strings: failing findings
        row = host_index.get(name)
        if row is None:
            unreported.setdefault(name, []).extend(lst)
        else:
            issues.setdefault(row, []).extend(lst)

    hosts: list[HostReport] = []
    seen: set[str] = set()
    for info in expected:
        row = host_index.get(info.name)
        seen.add(info.name)
        hosts.append(
            judge(
                info.name,
                row is not None or info.name in unreported,
                _dedupe(issues.get(row, [])) if row is not None else unreported.get(info.name, []),
                info.outcome,
                info.reason,
                info.gpu_model,
            )
        )
    extra = [h for h in fleet.hosts if h not in seen]
    if expected and extra:
        shown = ", ".join(extra[:5]) + (f" and {len(extra) - 5} more" if len(extra) > 5 else "")
        warnings.append(f"{len(extra)} host(s) reported results but are not in the inventory: {shown}")
    for name in extra:
        row = host_index[name]
        hosts.append(judge(name, True, _dedupe(issues.get(row, [])), None, "", None))

    if not hosts:
        first = f"; first problem: {fleet.problems[0]}" if fleet.problems else ""
        raise ResultsError(
            fleet.source,
            None,
            f"no host results and no inventory: nothing to judge{first}",
            "a gate must not pass on an empty run; give -i INVENTORY or a results file with host lines",
        )
    if confirmations:  # validate --confirm: a failure that did not reproduce is flaky, not failed
        hosts = [_confirmed(h, confirmations.get(h.name)) for h in hosts]
    if unconfirmed:  # over validate's bound: not failed on the fleet's statistics alone
        left = set(unconfirmed)
        hosts = [not_confirmed(h, UNCONFIRMED_NOTE) if h.name in left else h for h in hosts]
    gate = decide(gates.policy, [h.verdict for h in hosts], [h.name for h in hosts])
    standing = [sp for sp in splits if sp.confirmed is not False]  # not those a re-run did not show again
    if standing and not gates.populations.expected_mix:  # an unexplained mix never passes silently
        gate = gate.failed_by(
            GateReason(
                "populations",
                f"{len(standing)} unexpected population split(s): first {standing[0].short()}",
                tuple(h for g in standing[0].groups for h in g),
            ),
            f"{len(standing)} unexpected population split(s)",
        )
    standing_dis = [d for d in disagreements if d.standing]  # not those a re-run did not show again
    if standing_dis:  # two hosts that disagree: which one is faulty is unknown, so the fleet fails
        a, b = standing_dis[0].hosts
        gate = gate.failed_by(
            GateReason(
                "disagreements",
                f"{a} and {b} disagree on {len(standing_dis)} metric(s) with no majority: first "
                f"{standing_dis[0].metric} ({standing_dis[0].deviation * 100:+.1f}%)",
                (a, b),
            ),
            f"the two hosts disagree on {len(standing_dis)} metric(s)",
        )
    fleet_gate = gates.fleet
    standing_inc = [inc for inc in inconsistent if inc.standing]  # not those a re-run did not show again
    if standing_inc and fleet_gate.inconsistent == "fail":  # no majority to judge by: never a silent pass
        gate = gate.failed_by(
            GateReason(
                "inconsistent",
                f"{len(standing_inc)} metric(s) inconsistent (steady hosts disagree, no majority): first "
                f"{standing_inc[0].metric}",
                tuple(h for g in standing_inc[0].groups for h in g),
            ),
            f"{len(standing_inc)} metric(s) inconsistent (steady hosts disagree, no majority)",
        )
    if noisy and fleet_gate.too_noisy == "fail":
        gate = gate.failed_by(
            GateReason(
                "too_noisy",
                f"{len(noisy)} metric(s) too noisy to judge (gates.fleet.too_noisy: fail): first {noisy[0].metric}",
            ),
            f"{len(noisy)} metric(s) too noisy to judge",
        )
    if fabric is not None and fabric.gate_failure:  # a bad link fails the fleet, not its two hosts
        gate = gate.failed_by(GateReason("fabric", fabric.gate_failure), fabric.gate_failure)
    view = None
    if hist is not None:
        from sb_fleet.history.assess import conclude

        view = conclude(hist, fleet.hosts, fleet.columns, fleet.values, hosts, gate.passed)
        warnings.extend(view.warnings)
        if view.gate_failure:
            gate = gate.failed_by(
                GateReason("history", f"history: {view.gate_failure}"), f"history: {view.gate_failure}"
            )
    return ReportResult(
        source=str(source),
        hosts=hosts,
        gate=gate,
        fleet=fleet,
        stats=column_stats(fleet.values),
        families=detection.families,
        rule_summaries=rule_summaries,
        problems=list(fleet.problems),
        warnings=warnings,
        inputs={
            "source": str(source),
            "inventory": str(inventory) if inventory is not None else None,
            "rules": str(rules) if rules is not None else None,
            "baseline": str(baseline) if baseline is not None else None,
        },
        gates=gates,
        flagged_cells=detection.flagged_cells | _cells(issues, fleet),
        partitions=partitions,
        seconds=time.perf_counter() - t0,
        rules_diagnosis=rules_diagnosis,
        rules_unmatched=rules_unmatched,
        history=view,
        fabric=fabric,
        health=_health(fleet.run_dir, warnings),
        populations=splits,
        disagreements=disagreements,
        too_noisy=noisy,
        inconsistent=inconsistent,
        evidence=ordered(evidence),
    )


def _merge_noisy(found: list[NoisyMetric]) -> list[NoisyMetric]:
    """One record per metric (the fleet check and majority agreement can both find a metric too noisy;
    a host's first record is kept), noisiest first."""
    by_metric: dict[str, NoisyMetric] = {}
    for nm in found:
        prev = by_metric.get(nm.metric)
        if prev is None:
            by_metric[nm.metric] = nm
            continue
        new = [i for i, h in enumerate(nm.hosts) if h not in set(prev.hosts)]
        by_metric[nm.metric] = dataclasses.replace(
            prev,
            hosts=prev.hosts + tuple(nm.hosts[i] for i in new),
            noise=prev.noise + tuple(nm.noise[i] for i in new),
            source=prev.source + tuple(nm.source[i] for i in new),
            catchable=prev.catchable + tuple(nm.catchable[i] for i in new),
            promised=max(prev.promised, nm.promised),
        )
    return sorted(by_metric.values(), key=lambda nm: (-max(nm.noise), nm.metric))


def _noisy_cells(
    cells: dict[int, list[tuple[int, float, float, float]]], fleet: Fleet, rows: np.ndarray
) -> list[NoisyMetric]:
    """The fleet check's cells that their own noise kept from being judged, as too-noisy metrics."""
    out = []
    for c, lst in sorted(cells.items()):
        out.append(
            NoisyMetric(
                metric=fleet.columns[c],
                hosts=tuple(fleet.hosts[int(rows[r])] for r, *_ in lst),
                noise=tuple(own for _, own, _, _ in lst),
                source=("own samples",) * len(lst),
                catchable=tuple(lim for _, _, lim, _ in lst),
                promised=max(fleet_lim for *_, fleet_lim in lst),
            )
        )
    return out


def _health(run_dir: Path | None, warnings: list[str]) -> dict | None:
    """The run's health.json (the check stage's verdicts and drift), or None."""
    import json

    if run_dir is None or not (Path(run_dir) / "health.json").is_file():
        return None
    p = Path(run_dir) / "health.json"
    try:
        d = json.loads(p.read_text())
    except (OSError, ValueError) as exc:
        warnings.append(f"{p}: unreadable ({exc}); the Health section is left out")
        return None
    if not isinstance(d, dict) or not isinstance(d.get("hosts"), dict):
        warnings.append(f"{p}: not a health file; the Health section is left out")
        return None
    return d


UNCONFIRMED_NOTE = (
    "not confirmed: more hosts failed on fleet statistics alone than validate re-runs (gates.confirm), "
    "so the run was noisy; not failed on that alone (validate --confirm re-runs them all)"
)


def _inside_unconfirmed(splits: list[PopulationSplit], hosts: set[str]) -> PopulationSplit | None:
    """The population split that did not show again in validate's re-run and whose one side holds all
    of ``hosts`` (a population found inside it), or None."""
    for sp in splits:
        if sp.confirmed is False and any(hosts <= set(g) for g in sp.groups):
            return sp
    return None


_F = TypeVar("_F", Inconsistency, Disagreement)


def _rechecked(
    found: _F, checks: Mapping[str, tuple[bool, str]] | None, inside: PopulationSplit | None = None
) -> _F:
    """A finding with validate's re-run of it, where one ran (``checks``: key -> (showed again, how));
    one found inside a split that did not show again (``inside``) is not confirmed either."""
    if inside is not None:
        return dataclasses.replace(
            found,
            confirmed=False,
            confirmation=f"found inside the split on {inside.family} that did not show again in validate's "
            f"re-run ({inside.confirmation})",
        )
    check = (checks or {}).get(found.key)
    return found if check is None else dataclasses.replace(found, confirmed=check[0], confirmation=check[1])


def _confirmed(h: HostReport, c: Confirmation | None) -> HostReport:
    return h if c is None else after_confirmation(h, c.result == FLAKY, c.sentence())


def _traits(info: HostInfo | None) -> tuple[tuple[str, str], ...]:
    if info is None:
        return ()
    if info.traits:
        return info.traits
    return (("gpu_model", info.gpu_model),) if info.gpu_model else ()


def _cells(issues: dict[int, list[Issue]], fleet: Fleet) -> set[tuple[int, int]]:
    idx = fleet.column_index()
    out = set()
    for row, lst in issues.items():
        for i in lst:
            c = idx.get(i.metric)
            if c is not None:
                out.add((row, c))
    return out


_EXPLICIT = frozenset({"baseline", "floor", "ceiling", "sku"})
_INFERRED = frozenset({"fleet", "sibling", "majority"})


def _dedupe(lst: list[Issue]) -> list[Issue]:
    """Drop repeats of (metric, check) and inferred findings on a metric a rule, baseline, limit or
    SKU reference already flags; put failures first, the largest deviation first among them.

    A failed return code a rule already reported is one finding, not two (SuperBench counts it once).
    """
    seen: set[tuple] = set()
    by_rule = {i.metric for i in lst if i.check.startswith("rule:")}
    # A metric the user's own references already flag is one finding: the inferred one adds nothing.
    explicit = {i.metric for i in lst if i.check in _EXPLICIT or i.check.startswith("rule:")}
    out = []
    for i in lst:
        key = (i.metric, i.check)
        if key in seen or (i.check == "return_code" and i.metric in by_rule):
            continue
        if i.check in _INFERRED and i.metric in explicit:
            continue
        seen.add(key)
        out.append(i)
    # At equal deviation the user's own references (rules, baseline, limits) come before inferred ones.
    out.sort(
        key=lambda i: (
            i.severity != FAIL,
            -abs(i.deviation or 0.0),
            not (i.check in _EXPLICIT or i.check.startswith("rule:")),
        )
    )
    return out


def write_reports(
    result: ReportResult,
    out_dir: Path | str,
    prometheus: PromSettings | None = None,
    metrics: Series | None = None,
    early: BenchmarkPart | None = None,
) -> list[Path]:
    """Write report.json, report.md, report.html, junit.xml, quarantine.txt and metrics.prom into
    ``out_dir`` (``prometheus``, ``metrics``, ``early``: as :func:`sb_fleet.report.writers.write_all`)."""
    from sb_fleet.report.writers import write_all

    return write_all(result, Path(out_dir), prometheus, metrics, early)
