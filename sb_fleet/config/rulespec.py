"""SuperBench rules files: their schema (the config layer: no numpy, no analysis).

Two kinds of rules file share one shape, ``superbench: {var: ..., rules: {NAME: {...}}}``:

- **diagnosis rules** (``sb result diagnosis``, ``sb-fleet report --rules``)::

      rule0:
        function: variance | value | failure_check | multi_rules
        criteria: 'lambda x: x > 0.05'
        categories: KernelLaunch
        metrics: [kernel-launch:*.*/.*_time]     # '<benchmark>/<regex>', or one string
        store: true                              # optional, a YAML boolean

  A rule with ``store: true`` and neither ``function`` nor ``criteria`` only
  stores ``{metric: value}`` for the multi rules that read it.

- **summary rules** (``sb result summary``, ``sb-fleet summary``)::

      kernel_launch:
        statistics: [mean, p90, min, max, std, count]   # or one string
        categories: KernelLaunch
        metrics: [kernel-launch/event_overhead]
        aggregate: true          # pool ranks; or a regex whose groups are masked: 'IB_write_.*_Avg_(\\d+)'

``superbench.var`` holds anything (YAML anchors reused by the rules) and is
otherwise ignored, as SuperBench does. Unknown keys are errors (a misspelt
``metircs`` would otherwise silently drop a rule's metrics); that is stricter
than SuperBench on purpose.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationError,
    field_validator,
    model_validator,
)

from sb_fleet.config.yamlsrc import parse_yaml, read_capped
from sb_fleet.errors import RulesError

FUNCTIONS = ("variance", "value", "multi_rules", "failure_check")
STATISTICS = ("mean", "min", "max", "std", "count")
_PERCENTILE = re.compile(r"p\d\d?")


def _as_list(v: object) -> object:
    return [v] if isinstance(v, str) else v


def _categories(v: object) -> object:
    return ",".join(str(x) for x in v) if isinstance(v, list) else v


class DiagnosisRuleSpec(BaseModel):
    """One diagnosis rule, as written."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    function: Literal["variance", "value", "multi_rules", "failure_check"] | None = None
    criteria: str | None = None
    categories: str = Field(min_length=1)
    metrics: list[str] = Field(default_factory=list)
    store: StrictBool = False

    @field_validator("metrics", mode="before")
    @classmethod
    def _one_metric(cls, v: object) -> object:
        return _as_list(v)

    @field_validator("categories", mode="before")
    @classmethod
    def _cats(cls, v: object) -> object:
        return _categories(v)

    @model_validator(mode="after")
    def _shape(self) -> DiagnosisRuleSpec:
        if self.store_only:
            if not self.metrics:
                raise ValueError(
                    "a rule with 'store: true' and no criteria needs 'metrics' (the values it stores)"
                )
            return self
        if self.function is None:
            raise ValueError("Field required: 'function' (variance, value, failure_check or multi_rules)")
        if self.criteria is None:
            raise ValueError("Field required: 'criteria' (e.g. 'lambda x: x < -0.05')")
        if self.function != "multi_rules" and not self.metrics:
            raise ValueError(f"Field required: 'metrics' (a {self.function} rule judges metrics)")
        return self

    @property
    def store_only(self) -> bool:
        """``store: true`` without a criteria: the rule stores its metrics' values by name."""
        return self.store and self.criteria is None


class SummaryRuleSpec(BaseModel):
    """One summary rule, as written."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    statistics: list[str]
    categories: str = Field(min_length=1)
    metrics: list[str]
    aggregate: StrictBool | str = False

    @field_validator("metrics", "statistics", mode="before")
    @classmethod
    def _one(cls, v: object) -> object:
        return _as_list(v)

    @field_validator("categories", mode="before")
    @classmethod
    def _cats(cls, v: object) -> object:
        return _categories(v)

    @field_validator("statistics")
    @classmethod
    def _stats(cls, v: list[str]) -> list[str]:
        for s in v:
            if s in STATISTICS:
                continue
            if not (_PERCENTILE.fullmatch(s) and 1 <= int(s[1:]) <= 99):
                raise ValueError(f"unknown statistic {s!r} (one of {', '.join(STATISTICS)}, or p1..p99)")
        return v

    @field_validator("aggregate")
    @classmethod
    def _aggregate(cls, v: bool | str) -> bool | str:
        if isinstance(v, str):
            try:
                rx = re.compile(v)
            except re.error as exc:
                raise ValueError(f"aggregate {v!r} is not a regular expression ({exc})") from None
            if rx.groups == 0:
                raise ValueError(
                    f"aggregate must be true/false or a regex with a (group) to pool over, not {v!r}"
                )
        return v


class _DiagnosisBody(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    var: Any = None
    rules: dict[str, DiagnosisRuleSpec]


class _SummaryBody(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    var: Any = None
    rules: dict[str, SummaryRuleSpec]


class DiagnosisRulesFile(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    version: str | None = None
    superbench: _DiagnosisBody


class SummaryRulesFile(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    version: str | None = None
    superbench: _SummaryBody


def read_yaml(path: Path, what: str) -> Any:
    """A YAML file's content, read within sb-fleet's bounds (size, aliases, finite numbers: see
    :mod:`sb_fleet.config.yamlsrc`); an unreadable or invalid file is one RulesError naming the line."""
    path = Path(path)
    return parse_yaml(read_capped(path, what, RulesError), path, what, RulesError)[0]


def _validate(model: type[BaseModel], data: Any, path: Path, hint: str) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        msg = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "bool_type":
            msg = f"must be a YAML boolean (true or false), not {err.get('input')!r}"
        raise RulesError(path, loc or None, msg, hint) from None


def load_diagnosis_spec(path: Path) -> DiagnosisRulesFile:
    """Read and check the structure of a diagnosis rules file (criteria and patterns are checked by the analysis)."""
    data = read_yaml(path, "rules file")
    return _validate(
        DiagnosisRulesFile,
        data,
        Path(path),
        "a rules file is 'superbench: rules: NAME: {function, criteria, categories, metrics, store}'",
    )


def load_summary_spec(path: Path) -> SummaryRulesFile:
    """Read and check a summary rules file."""
    data = read_yaml(path, "summary rules file")
    return _validate(
        SummaryRulesFile,
        data,
        Path(path),
        "a summary rules file is 'superbench: rules: NAME: {statistics, categories, metrics, aggregate}'",
    )
