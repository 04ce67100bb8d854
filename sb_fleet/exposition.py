"""Prometheus exposition, made safe: metric and label names, label values, base units, and the series
builder every exporter of sb-fleet uses (a run's ``metrics.prom``, the history's trends).

Host names, metric names, check names and units come from inventories, configs and the hosts' own result
files: untrusted text. None of it ever becomes a metric or label *name*: names are sb-fleet's own
(checked against Prometheus's grammar here), and untrusted text goes only into label *values*, which the
exposition escapes (``\\``, ``"``, newline). Beyond that escaping, a label value here is valid UTF-8
(anything else is replaced), has no control or line-separator character (shown as ``\\xNN`` /
``\\uNNNN``), and is at most :data:`MAX_LABEL` characters (a longer one keeps its start and a digest of
the whole, so two long names stay two series). A series seen twice (same name and labels) keeps its
first value: a duplicate would make Prometheus refuse the whole scrape. Values that are not finite
numbers are left out by :meth:`Series.add` unless the caller asks to keep them.

The text is written by the ``prometheus_client`` library (text format 0.0.4, or OpenMetrics 1.0).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import lru_cache

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from sb_fleet.errors import UsageError

NAME_RE = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
LABEL_NAME_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
FLEET_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")
MAX_LABEL = 200
DEFAULT_FLEET = "default"


def check_name(name: str) -> str:
    """``name`` when it is a valid Prometheus metric name; ValueError otherwise (a bug of sb-fleet)."""
    if not NAME_RE.match(name) or name.startswith("__"):
        raise ValueError(f"not a Prometheus metric name: {name!r}")
    return name


@lru_cache(maxsize=1 << 16)  # host, metric and check names repeat across a run's series
def _label(s: str) -> str:
    s = s.encode("utf-8", "backslashreplace").decode("utf-8")
    if not s.isprintable():
        s = "".join(c if c.isprintable() or c == " " else _escaped(c) for c in s)
    if len(s) > MAX_LABEL:
        digest = hashlib.sha256(s.encode()).hexdigest()[:12]
        s = f"{s[: MAX_LABEL - 16]}...~{digest}"
    return s


def label_value(text: object) -> str:
    """Untrusted text as a label value: valid UTF-8, on one line, at most :data:`MAX_LABEL` characters."""
    return _label(text if isinstance(text, str) else str(text))


def _escaped(c: str) -> str:
    o = ord(c)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}"


def fleet_name(name: str | None, where: str = "--fleet") -> str:
    """The ``fleet`` label (and Pushgateway group) of a run: letters, digits and ``_ . : -``, at most 64
    characters; ``default`` when not given. Anything else is a usage error (exit 2)."""
    if name is None or name == "":
        return DEFAULT_FLEET
    if not FLEET_RE.match(name):
        raise UsageError(
            f"{where} {label_value(name)!r}: a fleet name is 1 to 64 letters, digits and _ . : - "
            f"(starting with a letter or digit); it labels every series and names the Pushgateway group"
        )
    return name


# A benchmark's unit -> (the suffix of its metric name, the factor to base units). Only these units are
# converted; any other (a count, a unit a host declared that is not in this table) is exported as it is
# measured, under ``sb_fleet_benchmark_value`` with the unit in a label.
_TIME = {"s": 1.0, "sec": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, "min": 60.0}
_BYTES = {"b": 1.0, "bytes": 1.0, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12}
_BYTES.update({"kib": 2.0**10, "mib": 2.0**20, "gib": 2.0**30, "tib": 2.0**40})
_SI = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "p": 1e15}
_RATE = {  # per second, with the binary units; Gb/s and Gbps (bits) are handled below
    **{f"{p}b/s": f for p, f in _SI.items() if p != "p"},
    **{f"{k}/s": f for k, f in _BYTES.items() if k.endswith("ib")},
    "gb/sec": 1e9,
}
_PER_SECOND = ("samples", "images", "tokens", "steps", "sequences", "requests")
_OTHER = {
    "%": ("ratio", 0.01),
    "c": ("celsius", 1.0),
    "°c": ("celsius", 1.0),
    "w": ("watts", 1.0),
    "j": ("joules", 1.0),
    "hz": ("hertz", 1.0),
    "khz": ("hertz", 1e3),
    "mhz": ("hertz", 1e6),
    "ghz": ("hertz", 1e9),
    "v": ("volts", 1.0),
}


def base_unit(unit: str | None) -> tuple[str, float] | None:
    """``("bytes_per_second", 1e9)`` for ``GB/s``: the metric-name suffix of ``unit``'s base unit and the
    factor to it; None for a unit with no base form here (exported as measured)."""
    if not unit:
        return None
    raw = unit.strip()
    u = raw.lower()
    per_watt = u.endswith("/w")
    if per_watt:  # a rate per watt is work per joule
        u = u[:-2]
    u = u.replace("flop/s", "flops").replace("op/s", "ops")  # TFLOP/s, GOP/s
    for kind in ("flops", "iops", "ops"):
        if u.endswith(kind) and u[: -len(kind)] in _SI:
            what = "flop" if kind == "flops" else "operations"
            return (f"{what}_per_joule" if per_watt else f"{what}_per_second"), _SI[u[: -len(kind)]]
    for what in _PER_SECOND:
        if u in (f"{what}/s", f"{what}/sec"):
            return (f"{what}_per_joule" if per_watt else f"{what}_per_second"), 1.0
    if per_watt:
        return None
    bits = re.fullmatch(r"([kKMGT]?)(?:b/s|bps|bit/s)", raw)  # a small b is a bit (Gb/s, Gbps)
    if bits:
        return "bytes_per_second", _SI[bits.group(1).lower()] / 8
    if u in _RATE:
        return "bytes_per_second", _RATE[u]
    if u in _TIME:
        return "seconds", _TIME[u]
    if u in _BYTES:
        return "bytes", _BYTES[u]
    if u in _OTHER:
        return _OTHER[u]
    return None


@dataclass(frozen=True)
class _Family:
    name: str
    help: str
    labels: tuple[str, ...]


class Series:
    """Gauges by family, in the order they were declared; a ``prometheus_client`` collector.

    ``declare`` a family once (its name, help text and label names); ``add`` samples to it. Every name
    is checked, every label value made safe (:func:`label_value`), a repeated series dropped."""

    def __init__(self) -> None:
        self._families: dict[str, _Family] = {}
        self._samples: dict[str, dict[tuple[str, ...], list[tuple[float, float | None]]]] = {}
        self._rendered: dict[bool, bytes] = {}  # format -> text, until the next change

    def declare(self, name: str, help_text: str, labels: Iterable[str]) -> None:
        labels = tuple(labels)
        for label in labels:
            if not LABEL_NAME_RE.match(label) or label.startswith("__"):
                raise ValueError(f"not a Prometheus label name: {label!r}")
        fam = _Family(check_name(name), help_text, labels)
        known = self._families.get(name)
        if known is not None and known != fam:
            raise ValueError(f"{name} declared twice, differently")
        self._families[name] = fam
        self._samples.setdefault(name, {})
        self._rendered.clear()

    def add(
        self,
        name: str,
        labels: Mapping[str, object],
        value: float,
        timestamp: float | None = None,
        keep_nonfinite: bool = False,
    ) -> bool:
        """One sample; False when it was left out (not a finite number, or the series is there already
        without ``timestamp``; with timestamps, a series holds one sample per distinct time)."""
        fam = self._families[name]
        try:
            v = float(value)
        except (TypeError, ValueError, OverflowError):
            return False
        if not math.isfinite(v) and not keep_nonfinite:
            return False
        key = tuple(label_value(labels.get(k, "")) for k in fam.labels)
        points = self._samples[name].setdefault(key, [])
        if any(t == timestamp for _, t in points):
            return False
        points.append((v, timestamp))
        self._rendered.clear()
        return True

    def names(self) -> list[str]:
        return list(self._families)

    def __len__(self) -> int:
        return sum(len(pts) for by in self._samples.values() for pts in by.values())

    def select(self, keep: Mapping[str, str], always: Iterable[str] = ()) -> Series:
        """The series whose labels include every ``keep`` label with its value (families without such a
        label are left out), plus every series of the families named in ``always``."""
        out = Series()
        always = set(always)
        want = {k: label_value(v) for k, v in keep.items()}
        for name, fam in self._families.items():
            whole = name in always
            if not whole and not all(k in fam.labels for k in want):
                continue
            idx = {k: fam.labels.index(k) for k in want} if not whole else {}
            rows = {
                key: list(pts)
                for key, pts in self._samples[name].items()
                if all(key[i] == want[k] for k, i in idx.items())
            }
            if rows:
                out._families[name] = fam
                out._samples[name] = rows
        return out

    def collect(self) -> Iterator[Metric]:
        for name, fam in self._families.items():
            rows = self._samples[name]
            if not rows:
                continue
            g = GaugeMetricFamily(name, fam.help, labels=list(fam.labels))
            for key, points in rows.items():
                for v, t in sorted(points, key=lambda p: -math.inf if p[1] is None else p[1]):
                    g.add_metric(list(key), v, timestamp=t)
            yield g

    def render(self, openmetrics: bool = False) -> bytes:
        """The text format (0.0.4), or OpenMetrics 1.0 (ends with ``# EOF``); made once per format (the
        run's file, its textfile copy and the push share it)."""
        if openmetrics not in self._rendered:
            self._rendered[openmetrics] = generate_openmetrics(self) if openmetrics else generate_latest(self)
        return self._rendered[openmetrics]
