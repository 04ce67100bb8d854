"""Metric and parameter declarations of a benchmark."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

REDUCE_OPS = (None, "max", "min", "avg", "sum", "last")


@dataclass(frozen=True)
class Metric:
    """One value a benchmark reports.

    ``reduce`` says how the values of the ranks of one node combine into one
    (SuperBench's ``reduce_op``): ``None`` keeps every rank (the summary then
    carries a ``:<rank>`` suffix), otherwise one of max/min/avg/sum/last.
    """

    name: str
    unit: str
    higher_is_better: bool
    reduce: str | None = None
    description: str = ""
    # The compute figure this metric is the efficiency or window power of (sb_bench.core.energy).
    energy_of: str = ""

    def __post_init__(self) -> None:
        if self.reduce not in REDUCE_OPS:
            raise ValueError(f"metric {self.name}: reduce must be one of {REDUCE_OPS}")

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "unit": self.unit,
            "higher_is_better": self.higher_is_better,
            "reduce_op": self.reduce,
            "description": self.description,
            **({"energy_of": self.energy_of} if self.energy_of else {}),
        }


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(i?[bB])?\s*$")
_SIZE_MULT = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(value: Any) -> int:
    """Bytes from ``8G``/``8GiB``/``1024``/``1.5M`` as SuperBench configs write them (binary units)."""
    if isinstance(value, bool):
        raise ValueError(f"not a size: {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    m = _SIZE.match(str(value))
    if not m:
        raise ValueError(f"not a size: {value!r} (write e.g. 8G, 64M, 4096)")
    size = float(m.group(1)) * _SIZE_MULT[m.group(2).lower()]
    if not math.isfinite(size):
        raise ValueError(f"not a size: {str(value)[:40]!r} is too large")
    return int(size)


def _parse_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    s = str(value).strip().lower()
    if s in ("1", "true", "yes", "on", "y"):
        return True
    if s in ("0", "false", "no", "off", "n"):
        return False
    raise ValueError(f"not a boolean: {value!r}")


def _listof(item: Callable[[Any], Any]) -> Callable[[Any], list]:
    def parse(value: Any) -> list:
        if isinstance(value, str):
            value = [v for v in re.split(r"[,\s]+", value) if v]
        elif not isinstance(value, (list, tuple)):
            value = [value]
        return [item(v) for v in value]

    return parse


def _strict_int(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"not an integer: {value!r}")
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"not an integer: {value!r}")
        return int(value)
    return int(str(value).strip())


PARSERS: dict[str, Callable[[Any], Any]] = {
    "int": _strict_int,
    "float": float,
    "str": str,
    "bool": _parse_bool,
    "size": parse_size,
    "list[str]": _listof(str),
    "list[int]": _listof(_strict_int),
    "list[size]": _listof(parse_size),
}


@dataclass(frozen=True)
class Param:
    """A benchmark parameter: type name (a key of PARSERS), default, help, allowed values."""

    type: str
    default: Any
    help: str
    choices: tuple = field(default=())

    def parse(self, name: str, value: Any) -> Any:
        try:
            v = PARSERS[self.type](value)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"parameter {name}: {exc} (expected {self.type})") from None
        if self.choices:
            bad = [x for x in (v if isinstance(v, list) else [v]) if x not in self.choices]
            if bad:
                raise ValueError(f"parameter {name}: {bad[0]!r} is not one of {list(self.choices)}")
        return v
