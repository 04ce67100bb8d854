"""SuperBench diagnosis rules, with SuperBench's semantics and no ``eval``.

A rules file looks like SuperBench's (``superbench: rules: NAME: {...}``).
Each rule has a ``function``:

- ``variance``: for each metric, ``(value - baseline) / baseline`` is given to
  the criteria; the baseline is looked up by the exact metric name, then
  by the name without its ``:rank``;
- ``value``: the raw value is given to the criteria;
- ``failure_check``: every metric pattern must be matched and present, and
  the matched values (return codes) are given to the criteria;
- ``multi_rules``: the criteria gets the number of violations of each rule
  with ``store: true``, by rule name.

A rule's metric patterns are regular expressions searched in the metric
names of the same benchmark (the part before the first ``/``), as SuperBench
does. A metric a host lacks counts as a violation ("missed test"). Rules
with ``store: true`` never fail a host on their own; they feed ``multi_rules``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from sb_fleet.analysis.criteria import Criteria, CriteriaError, parse_criteria
from sb_fleet.analysis.issues import FAIL, INCOMPLETE, Issue, relative
from sb_fleet.analysis.names import parse_metric
from sb_fleet.errors import RulesError


class RuleModel(BaseModel):
    model_config = ConfigDict(extra="forbid")

    function: Literal["variance", "value", "multi_rules", "failure_check"]
    criteria: str
    categories: str = Field(min_length=1)
    metrics: list[str] = Field(default_factory=list)
    store: bool = False

    @field_validator("metrics", mode="before")
    @classmethod
    def _one_metric(cls, v: object) -> object:
        return [v] if isinstance(v, str) else v

    @field_validator("categories", mode="before")
    @classmethod
    def _categories(cls, v: object) -> object:
        return ",".join(str(x) for x in v) if isinstance(v, list) else v


class RulesBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rules: dict[str, RuleModel]


class RulesFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: str | None = None
    superbench: RulesBody


@dataclass(frozen=True)
class Rule:
    name: str
    function: str
    criteria: Criteria
    categories: str
    patterns: tuple[str, ...]
    compiled: tuple[re.Pattern[str], ...]
    store: bool


@dataclass
class RuleSet:
    path: str
    rules: list[Rule]


def load_rules(path: Path) -> RuleSet:
    """Read and check a rules file: structure, criteria, metric patterns, references between rules."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise RulesError(path, None, f"cannot read the rules file ({exc.strerror})") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else None
        raise RulesError(
            path, where, f"not valid YAML ({' '.join(str(getattr(exc, 'problem', None) or exc).split())})"
        ) from exc
    try:
        model = RulesFile.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise RulesError(
            path,
            loc,
            err["msg"],
            "a rules file is 'superbench: rules: NAME: {function, criteria, categories, metrics}'",
        ) from None
    rules: list[Rule] = []
    stored = {n for n, r in model.superbench.rules.items() if r.store}
    for name, r in model.superbench.rules.items():
        where = f"superbench.rules.{name}"
        try:
            crit = parse_criteria(r.criteria)
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
                    "multi_rules criteria read the stored violation counts of other rules",
                )
        else:
            if crit.param_kind == "mapping":
                raise RulesError(
                    path, where + ".criteria", f"rule {name!r}: only multi_rules criteria take a mapping"
                )
            if not r.metrics:
                raise RulesError(path, where + ".metrics", f"rule {name!r} has no metrics")
        compiled = []
        for pat in r.metrics:
            try:
                compiled.append(re.compile(pat))
            except re.error as exc:
                raise RulesError(
                    path, where + ".metrics", f"rule {name!r}: bad pattern {pat!r} ({exc})"
                ) from None
        rules.append(
            Rule(
                name=name,
                function=r.function,
                criteria=crit,
                categories=r.categories,
                patterns=tuple(r.metrics),
                compiled=tuple(compiled),
                store=r.store,
            )
        )
    return RuleSet(path=str(path), rules=rules)


def match_metrics(rule: Rule, columns: list[str]) -> list[int]:
    """Indexes of the columns a rule covers, by SuperBench's matching (same benchmark, then exact or regex search)."""
    out: list[int] = []
    by_bench: dict[str, list[tuple[str, re.Pattern[str]]]] = {}
    for pat, rx in zip(rule.patterns, rule.compiled, strict=True):
        by_bench.setdefault(pat.split("/")[0], []).append((pat, rx))
    for i, col in enumerate(columns):
        cands = by_bench.get(col.split("/")[0])
        if not cands:
            continue
        if any(col == p or rx.search(col) for p, rx in cands):
            out.append(i)
    return out


def baseline_of(baseline: Mapping[str, float], metric: str) -> float | None:
    """SuperBench's lookup: the exact name, then the name without its ``:rank``."""
    v = baseline.get(metric)
    if v is None:
        v = baseline.get(parse_metric(metric).base)
    return v


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
class RulesOutcome:
    issues: dict[int, list[Issue]]  # host row -> issues
    summaries: list[RuleSummary]
    warnings: list[str] = field(default_factory=list)


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
    store_counts: dict[str, np.ndarray] = {}
    summaries: list[RuleSummary] = []
    warnings: list[str] = []

    def add(bucket: dict[int, list[Issue]], row: int, issue: Issue) -> None:
        bucket.setdefault(row, []).append(issue)

    for rule in ruleset.rules:
        check = f"rule:{rule.name}"
        if rule.function == "multi_rules":
            counts = rule.criteria.evaluate(
                {k: store_counts.get(k, np.zeros(n_hosts)) for k in rule.criteria.keys}
            )
            hit = np.broadcast_to(np.asarray(counts, dtype=bool), (n_hosts,))
            rows = np.nonzero(hit)[0]
            for row in rows:
                for k in rule.criteria.keys:
                    for iss in stored_issues.get(k, {}).get(int(row), []):
                        add(issues, int(row), iss)
                add(
                    issues,
                    int(row),
                    Issue(
                        metric=rule.name,
                        value=None,
                        reference=None,
                        deviation=None,
                        check=check,
                        category=rule.categories,
                        detail=f"{rule.name}: {rule.criteria.text}",
                    ),
                )
            summaries.append(
                RuleSummary(
                    rule.name, rule.function, rule.criteria.text, rule.categories, rule.store, 0, len(rows)
                )
            )
            continue
        cols = match_metrics(rule, columns)
        bucket: dict[int, list[Issue]] = {} if rule.store else issues
        violated = np.zeros(n_hosts, dtype=np.int64)
        if not cols and rule.function != "failure_check":
            warnings.append(
                f"rule {rule.name!r}: its metric patterns match no metric in the results: {list(rule.patterns)}"
            )
        if rule.function == "failure_check":
            for pat, rx in zip(rule.patterns, rule.compiled, strict=True):
                first = next((c for c in cols if rx.search(columns[c])), None)
                if first is None:
                    violated += 1
                    for every in range(n_hosts):
                        add(bucket, every, _miss(pat, check, rule.categories, "no benchmark result matches"))
                    continue
                absent = np.isnan(values[:, first])
                violated += absent
        for c in cols:
            metric = columns[c]
            col = values[:, c]
            absent = np.isnan(col)
            violated += absent
            for row in np.nonzero(absent)[0]:
                add(bucket, int(row), _miss(metric, check, "FailedTest", "metric missing"))
            if rule.function == "variance":
                if baseline is None:
                    raise RulesError(
                        ruleset.path,
                        f"superbench.rules.{rule.name}",
                        f"rule {rule.name!r} is a variance rule and needs a baseline",
                        "pass --baseline FILE (sb-fleet baseline makes one)",
                    )
                ref = baseline_of(baseline, metric)
                if ref is None or ref == 0:
                    warnings.append(
                        f"rule {rule.name!r}: {'no' if ref is None else 'zero'} baseline for {metric}; metric skipped"
                    )
                    continue
                arg = (col - ref) / ref
            else:
                ref = None
                arg = col
            hit = np.asarray(rule.criteria.evaluate(arg), dtype=bool) & ~absent
            hit = np.broadcast_to(hit, (n_hosts,))
            violated += hit
            for row in np.nonzero(hit)[0]:
                v = float(col[row])
                dev: float | None
                if rule.function == "variance":
                    dev = float(arg[row])
                    detail = f"{metric}: value {v:.4g} vs baseline {ref:.4g} ({dev * 100:+.2f}%), criteria {rule.criteria.text}"
                else:
                    dev = relative(v, ref)
                    detail = f"{metric}: value {v:.4g}, criteria {rule.criteria.text}"
                sev = INCOMPLETE if rule.function == "failure_check" else FAIL
                add(
                    bucket,
                    int(row),
                    Issue(metric, v, ref, dev, check, rule.categories, severity=sev, detail=detail),
                )
        if rule.store:
            store_counts[rule.name] = violated.astype(float)
            stored_issues[rule.name] = bucket
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
    return RulesOutcome(issues=issues, summaries=summaries, warnings=warnings)


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
