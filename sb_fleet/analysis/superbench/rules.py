"""SuperBench diagnosis rules, with SuperBench's semantics and no ``eval``.

A rules file looks like SuperBench's (``superbench: rules: NAME: {...}``, schema in
:mod:`sb_fleet.config.rulespec`). Each rule has a ``function``:

- ``variance``: for each metric, ``(value - baseline) / baseline`` is given to
  the criteria. The baseline is looked up by the exact metric name, then by the
  name without its ``:rank``; a name without a rank falls back to its benchmark
  name (SuperBench's lookup). A metric with a value on some host and no or a zero
  baseline is an error naming the rule and the metric (SuperBench stops there too);
- ``value``: the raw value is given to the criteria;
- ``failure_check``: every metric pattern must be matched and present, and
  the matched values (return codes) are given to the criteria as in ``value``;
- ``multi_rules``: the criteria reads the stored results of ``store: true`` rules
  by name: the number of metrics that violated a rule with a criteria, or the
  ``{metric: value}`` of a rule with no criteria (a store-only rule).

Metric patterns are matched as SuperBench does: the benchmark is the part before
the first ``/``, cut again at ``:`` (so ``kernel-launch:*.*/.*_time`` belongs to
``kernel-launch``); a column of that benchmark is covered when it equals one of
the patterns or one of that benchmark's patterns, as a regular expression, is
found in it.

Inside a rule, SuperBench's bookkeeping is followed exactly: a metric a host
lacks is recorded as ``<metric>_miss`` (category ``FailedTest``) but is not a
violation of a ``variance`` or ``value`` rule, so it neither labels the node
defective nor counts in what the rule stores. (sb-fleet still reports it as a
missed test, which makes the host ``incomplete``, never ``fail``.) Store rules'
own categories never reach a host's categories, in SuperBench's files or in
sb-fleet's host view: a multi rule that fires carries the store rules' violations
as its evidence, under its own category. Multi rules may name store
rules defined after them: rules are evaluated in file order, with each multi
rule moved after the rules it reads (a cycle is an error).

:func:`apply_rules` gives both sb-fleet's issues per host and SuperBench's own
view (:class:`Diagnosis`: defective or not, categories, details, per-metric
values), which :mod:`sb_fleet.analysis.superbench.sbdiagnosis` writes in SuperBench's files.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from sb_fleet.analysis.issues import FAIL, INCOMPLETE, Issue, relative
from sb_fleet.analysis.superbench.criteria import Criteria, CriteriaError, StoredValues, parse_criteria
from sb_fleet.analysis.superbench.metric_names import baseline_of
from sb_fleet.config.rulespec import load_diagnosis_spec
from sb_fleet.errors import RulesError

MISS_CATEGORY = "FailedTest"


@dataclass(frozen=True)
class Rule:
    name: str
    function: str | None  # None: a store-only rule
    criteria: Criteria | None
    categories: str
    patterns: tuple[str, ...]
    compiled: tuple[re.Pattern[str], ...]
    store: bool

    @property
    def store_only(self) -> bool:
        return self.criteria is None


@dataclass
class RuleSet:
    path: str
    rules: list[Rule]  # in evaluation order (file order; multi rules after what they read)


def sb_benchmark(name: str) -> str:
    """SuperBench's benchmark of a metric name or pattern: before the first '/', then before ':'."""
    bench = name.split("/")[0]
    return bench.split(":")[0]


def load_rules(path: Path) -> RuleSet:
    """Read and check a rules file: structure, criteria, metric patterns, references between rules."""
    path = Path(path)
    spec = load_diagnosis_spec(path)
    specs = spec.superbench.rules
    stored = {n for n, r in specs.items() if r.store}
    value_rules = {n for n, r in specs.items() if r.store_only}
    rules: dict[str, Rule] = {}
    for name, r in specs.items():
        where = f"superbench.rules.{name}"
        crit: Criteria | None = None
        if r.criteria is not None:
            try:
                crit = parse_criteria(r.criteria, value_rules if r.function == "multi_rules" else ())
            except CriteriaError as exc:
                raise RulesError(
                    path, where + ".criteria", f"rule {name!r}: {exc}", "see docs/analysis.md"
                ) from None
            if r.function == "multi_rules":
                unknown = [k for k in crit.keys if k not in stored]
                if unknown:
                    raise RulesError(
                        path,
                        where + ".criteria",
                        f"rule {name!r} refers to {unknown[0]!r}, which is not a rule with 'store: true'",
                        "multi_rules criteria read the stored results of other rules",
                    )
            elif crit.param_kind == "mapping":
                raise RulesError(
                    path, where + ".criteria", f"rule {name!r}: only multi_rules criteria take a mapping"
                )
        compiled = []
        for pat in r.metrics:
            if "/" not in pat:
                raise RulesError(
                    path,
                    where + ".metrics",
                    f"rule {name!r}: pattern {pat!r} has no benchmark",
                    "write '<benchmark>/<regex>', e.g. 'kernel-launch/event_time:\\d+'",
                )
            try:
                compiled.append(re.compile(pat))
            except re.error as exc:
                raise RulesError(
                    path, where + ".metrics", f"rule {name!r}: bad pattern {pat!r} ({exc})"
                ) from None
        rules[name] = Rule(
            name=name,
            function=r.function if crit is not None else None,
            criteria=crit,
            categories=r.categories,
            patterns=tuple(r.metrics) if r.function != "multi_rules" or crit is None else (),
            compiled=tuple(compiled) if r.function != "multi_rules" or crit is None else (),
            store=r.store,
        )
    return RuleSet(path=str(path), rules=_evaluation_order(path, rules))


def _evaluation_order(path: Path, rules: dict[str, Rule]) -> list[Rule]:
    """File order, with every multi rule after the rules it reads; a cycle is an error."""
    order: list[Rule] = []
    state: dict[str, int] = {}  # 1: visiting, 2: done

    def visit(name: str, chain: list[str]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            loop = " -> ".join([*chain[chain.index(name) :], name])
            raise RulesError(
                path, f"superbench.rules.{name}.criteria", f"multi rules read each other in a cycle: {loop}"
            )
        state[name] = 1
        rule = rules[name]
        if rule.function == "multi_rules" and rule.criteria is not None:
            for dep in rule.criteria.keys:
                visit(dep, [*chain, name])
        state[name] = 2
        order.append(rule)

    for name in rules:
        visit(name, [])
    return order


def match_metrics(rule: Rule, columns: list[str]) -> list[int]:
    """Indexes of the columns a rule covers, by SuperBench's matching (same benchmark, then exact or regex search)."""
    return match_patterns(rule.patterns, rule.compiled, columns)


def match_patterns(
    patterns: tuple[str, ...], compiled: tuple[re.Pattern[str], ...], columns: list[str]
) -> list[int]:
    """SuperBench's matching of '<benchmark>/<regex>' patterns to metric names (rules and summary rules alike)."""
    out: list[int] = []
    by_bench: dict[str, list[re.Pattern[str]]] = {}
    for pat, rx in zip(patterns, compiled, strict=True):
        by_bench.setdefault(sb_benchmark(pat), []).append(rx)
    exact = set(patterns)
    for i, col in enumerate(columns):
        if "/" not in col:
            continue
        cands = by_bench.get(sb_benchmark(col))
        if not cands:
            continue
        if col in exact or any(rx.search(col) for rx in cands):
            out.append(i)
    return out


@dataclass
class RuleSummary:
    name: str
    function: str
    criteria: str
    categories: str
    store: bool
    metrics: int
    hosts_violating: int = 0


@dataclass
class Diagnosis:
    """What SuperBench's ``sb result diagnosis`` says about every host (row)."""

    metrics: list[str]  # every metric a rule covers, sorted (SuperBench's per-metric columns)
    values: np.ndarray  # hosts x metrics: the variance or value a rule computed; NaN where none
    defective: np.ndarray  # hosts: some non-store rule was violated
    categories: list[set[str]]
    details: list[list[str]]
    variance_metrics: set[str] = field(default_factory=set)  # shown as percentages
    value_metrics: set[str] = field(default_factory=set)
    violated_cells: set[tuple[int, int]] = field(default_factory=set)  # (row, index into metrics)

    def category_text(self, row: int) -> str:
        return ",".join(sorted(self.categories[row]))

    def details_text(self, row: int) -> str:
        return ",".join(sorted(self.details[row]))

    def issue_count(self, row: int) -> int:
        """SuperBench's 'Number Of Issues': the comma-separated parts of the details."""
        return len(self.details_text(row).split(",")) if self.defective[row] else 0


@dataclass
class RulesOutcome:
    issues: dict[int, list[Issue]]  # host row -> issues
    summaries: list[RuleSummary]
    warnings: list[str] = field(default_factory=list)
    unmatched: dict[str, list[str]] = field(default_factory=dict)  # rule -> its patterns that match nothing
    diagnosis: Diagnosis | None = None


def _fmt(x: float) -> str:
    return f"{x:.4f}"


def apply_rules(
    ruleset: RuleSet,
    columns: list[str],
    values: np.ndarray,
    baseline: Mapping[str, float] | None,
) -> RulesOutcome:
    """Run every rule on every host (one row of ``values`` per host) at once."""
    n_hosts = values.shape[0]
    issues: dict[int, list[Issue]] = {}
    stored_issues: dict[str, dict[int, list[Issue]]] = {}
    store: dict[str, object] = {}  # rule -> violation counts (H,) or StoredValues
    summaries: list[RuleSummary] = []
    warnings: list[str] = []
    unmatched: dict[str, list[str]] = {}
    cats: list[set[str]] = [set() for _ in range(n_hosts)]
    details: list[list[str]] = [[] for _ in range(n_hosts)]
    defective = np.zeros(n_hosts, dtype=bool)

    matched = {r.name: match_metrics(r, columns) for r in ruleset.rules}
    enabled = sorted({columns[c] for cols in matched.values() for c in cols})
    enabled_at = {m: i for i, m in enumerate(enabled)}
    summary = np.full((n_hosts, len(enabled)), np.nan)
    variance_metrics: set[str] = set()
    value_metrics: set[str] = set()
    violated_cells: set[tuple[int, int]] = set()

    def add(bucket: dict[int, list[Issue]], row: int, issue: Issue) -> None:
        bucket.setdefault(row, []).append(issue)

    def record(row: int, detail: str, category: str | None) -> None:
        details[row].append(detail)
        if category:
            cats[row].add(category)

    for rule in ruleset.rules:
        check = f"rule:{rule.name}"
        cols = matched[rule.name]
        if rule.function != "multi_rules":
            missing = [
                p for p, rx in zip(rule.patterns, rule.compiled, strict=True) if not _hits(p, rx, columns)
            ]
            if missing:
                unmatched[rule.name] = missing
                warnings.append(
                    f"rule {rule.name!r}: {'none of its metric patterns' if len(missing) == len(rule.patterns) else 'some of its metric patterns'}"
                    f" match any metric in the results: {missing}"
                )
        if rule.store_only:
            store[rule.name] = StoredValues(tuple(columns[c] for c in cols), values[:, cols])
            summaries.append(RuleSummary(rule.name, "store", "", rule.categories, True, len(cols)))
            continue
        assert rule.criteria is not None and rule.function is not None
        if rule.function == "multi_rules":
            hit = np.broadcast_to(np.asarray(rule.criteria.evaluate(store), dtype=bool), (n_hosts,))
            bucket = {} if rule.store else issues
            for row in np.nonzero(hit)[0]:
                r = int(row)
                # SuperBench adds a multi rule's category even when the rule is stored.
                record(r, f"{rule.name}:{rule.criteria.text}", rule.categories)
                # The store rules' violations are the multi rule's evidence, under the multi rule's
                # category: SuperBench never adds a store rule's category to a node (only a missed
                # test's FailedTest, which stays as it is).
                for k in rule.criteria.keys:
                    for iss in stored_issues.get(k, {}).get(r, []):
                        kept = iss.category == MISS_CATEGORY
                        add(bucket, r, iss if kept else replace(iss, category=rule.categories))
                add(
                    bucket,
                    r,
                    Issue(
                        rule.name,
                        None,
                        None,
                        None,
                        check,
                        rule.categories,
                        FAIL,
                        f"{rule.name}: {rule.criteria.text}",
                    ),
                )
            violated = hit.astype(np.int64)
            if rule.store:
                store[rule.name] = violated.astype(float)
                stored_issues[rule.name] = bucket
            else:
                defective |= hit
            summaries.append(
                RuleSummary(
                    rule.name,
                    rule.function,
                    rule.criteria.text,
                    rule.categories,
                    rule.store,
                    0,
                    int(hit.sum()),
                )
            )
            continue

        bucket = {} if rule.store else issues
        rule_cat = None if rule.store else rule.categories
        violated = np.zeros(n_hosts, dtype=np.int64)
        if rule.function == "failure_check":
            # Every pattern must be matched and present: one violation per pattern that is not.
            for pat, rx in zip(rule.patterns, rule.compiled, strict=True):
                mine = [c for c in cols if rx.search(columns[c])]
                if not mine:
                    violated += 1
                    for r in range(n_hosts):
                        record(r, f"{pat}_miss", rule.categories)
                        add(bucket, r, _miss(pat, check, rule.categories, "no benchmark result matches"))
                    continue
                violated += np.isnan(values[:, mine]).any(axis=1)
        for c in cols:
            metric = columns[c]
            col = values[:, c]
            absent = np.isnan(col)
            for row in np.nonzero(absent)[0]:
                record(int(row), f"{metric}_miss", MISS_CATEGORY)
                add(bucket, int(row), _miss(metric, check, MISS_CATEGORY, "metric missing"))
            ref: float | None = None
            if rule.function == "variance":
                variance_metrics.add(metric)
                ref = baseline_of(baseline or {}, metric)
                if (ref is None or ref == 0) and not absent.all():
                    _bad_baseline(ruleset, rule, metric, ref, baseline is None)
                if ref is None or ref == 0:
                    continue
                with np.errstate(all="ignore"):
                    arg = (col - ref) / ref
            else:
                value_metrics.add(metric)
                arg = col
            summary[~absent, enabled_at[metric]] = arg[~absent]
            hit = np.broadcast_to(np.asarray(rule.criteria.evaluate(arg), dtype=bool), (n_hosts,)) & ~absent
            violated += hit
            for row in np.nonzero(hit)[0]:
                r = int(row)
                v = float(col[r])
                violated_cells.add((r, enabled_at[metric]))
                dev: float | None
                if rule.function == "variance":
                    assert ref is not None
                    dev = float(arg[r])
                    record(
                        r,
                        f"{metric}(B/L: {_fmt(ref)} VAL: {_fmt(v)} VAR: {dev * 100:.2f}% Rule:{rule.criteria.text})",
                        rule_cat,
                    )
                    detail = f"{metric}: value {v:.4g} vs baseline {ref:.4g} ({dev * 100:+.2f}%), criteria {rule.criteria.text}"
                else:
                    dev = relative(v, ref)
                    record(r, f"{metric}(VAL: {_fmt(v)} Rule:{rule.criteria.text})", rule_cat)
                    detail = f"{metric}: value {v:.4g}, criteria {rule.criteria.text}"
                # sb-fleet's word for a failed benchmark is "incomplete"; SuperBench's files still say defective.
                sev = INCOMPLETE if rule.function == "failure_check" else FAIL
                add(
                    bucket, r, Issue(metric, v, ref, dev, check, rule.categories, severity=sev, detail=detail)
                )
        if rule.function == "failure_check":
            for r in range(n_hosts):
                details[r] = list(dict.fromkeys(details[r]))
        if rule.store:
            store[rule.name] = violated.astype(float)
            stored_issues[rule.name] = bucket
        else:
            defective |= violated > 0
        summaries.append(
            RuleSummary(
                rule.name,
                rule.function,
                rule.criteria.text,
                rule.categories,
                rule.store,
                len(cols),
                int(np.count_nonzero(violated)),
            )
        )
    diagnosis = Diagnosis(
        metrics=enabled,
        values=summary,
        defective=defective,
        categories=cats,
        details=details,
        variance_metrics=variance_metrics,
        value_metrics=value_metrics,
        violated_cells=violated_cells,
    )
    return RulesOutcome(
        issues=issues, summaries=summaries, warnings=warnings, unmatched=unmatched, diagnosis=diagnosis
    )


def _hits(pattern: str, rx: re.Pattern[str], columns: list[str]) -> bool:
    bench = sb_benchmark(pattern)
    return any("/" in c and sb_benchmark(c) == bench and (c == pattern or rx.search(c)) for c in columns)


def _bad_baseline(ruleset: RuleSet, rule: Rule, metric: str, ref: float | None, no_file: bool) -> None:
    if no_file:
        raise RulesError(
            ruleset.path,
            f"superbench.rules.{rule.name}",
            f"rule {rule.name!r} is a variance rule and needs a baseline (metric {metric})",
            "pass --baseline FILE (sb-fleet baseline makes one)",
        )
    what = "no baseline" if ref is None else "a zero baseline"
    raise RulesError(
        ruleset.path,
        f"superbench.rules.{rule.name}",
        f"variance rule {rule.name!r}: {what} for metric {metric}, so its variance cannot be computed",
        "add the metric (or its name without ':rank') to the baseline file, or narrow the rule's metrics",
    )


def _miss(metric: str, check: str, category: str, why: str) -> Issue:
    return Issue(
        metric=metric,
        value=None,
        reference=None,
        deviation=None,
        check=check,
        category=category,
        severity=INCOMPLETE,
        detail=f"{metric}: {why} (missed test)",
    )
