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

The text (format 0.0.4, or OpenMetrics 1.0) is what ``prometheus_client``'s ``generate_latest`` writes,
byte for byte, but written here from tables (:meth:`Series.add_table`: hosts x metrics, straight from the
report's arrays), each host's and metric's label values escaped once rather than each sample's: a
10,000-host run has over half a million samples. :meth:`Series.collect` still gives them to
``prometheus_client`` (the tests compare the two).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from sb_fleet.errors import UsageError

if TYPE_CHECKING:
    from prometheus_client.core import Metric

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


@dataclass(frozen=True)
class _Table:
    """Samples of one family as a table: ``values[r, c]`` is the sample of row ``r`` (a host) and column
    ``c`` (a metric), labelled with ``fixed``, row ``r``'s labels and column ``c``'s (each label of the
    family in exactly one of the three, its values safe already: :func:`label_value`). A value that is not
    a finite number is no sample. The samples' order is row by row (a host's, then the next host's)."""

    fixed: dict[str, str]
    rows: dict[str, list[str]]
    cols: dict[str, list[str]]
    values: np.ndarray  # (rows, columns), float64

    def count(self) -> int:
        return int(np.isfinite(self.values).sum())

    def distinct(self, unique: Callable[[list[str]], bool] = lambda v: len(set(v)) == len(v)) -> bool:
        """No two rows have the same labels, nor two columns: every sample is a series of its own
        (``unique``: whether a list of label values has no repeat; one label that does not repeat is
        enough)."""
        n, k = self.values.shape
        for by, m in ((self.rows, n), (self.cols, k)):
            if by and any(unique(v) for v in by.values()):
                continue
            keys = list(zip(*by.values(), strict=True)) if by else [()] * m
            if len(set(keys)) != m:
                return False
        return True

    def samples(self, labels: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], float]]:
        """Each sample's label values (in ``labels``' order) and value, row by row."""
        n, k = self.values.shape
        for r in range(n):
            for c in range(k):
                v = float(self.values[r, c])
                if math.isfinite(v):
                    yield tuple(self._value(label, r, c) for label in labels), v

    def _value(self, label: str, r: int, c: int) -> str:
        if label in self.fixed:
            return self.fixed[label]
        return self.rows[label][r] if label in self.rows else self.cols[label][c]

    def take(self, rows: Sequence[int] | None = None, cols: Sequence[int] | None = None) -> _Table:
        values = self.values
        if rows is not None:
            values = values[list(rows), :]
        if cols is not None:
            values = values[:, list(cols)]
        return _Table(
            self.fixed,
            {k: [v[i] for i in rows] for k, v in self.rows.items()} if rows is not None else self.rows,
            {k: [v[i] for i in cols] for k, v in self.cols.items()} if cols is not None else self.cols,
            values,
        )

    def where(self, want: Mapping[str, str]) -> _Table | None:
        """The samples whose labels include each of ``want``'s (None: none can)."""
        n, k = self.values.shape
        rows: list[int] | None = None
        cols: list[int] | None = None
        for label, value in want.items():
            if label in self.fixed:
                if self.fixed[label] != value:
                    return None
            elif label in self.rows:
                rows = [i for i in (range(n) if rows is None else rows) if self.rows[label][i] == value]
            elif label in self.cols:
                cols = [i for i in (range(k) if cols is None else cols) if self.cols[label][i] == value]
            else:
                return None
        return self.take(rows, cols)

    def text(self, name: str, labels: tuple[str, ...], esc: _Escaper) -> list[bytes]:
        """The exposition's sample lines, as ``prometheus_client`` writes them (labels by name, values as
        Go formats them), row by row, each after a newline (not before one). Each row's label values and
        each column's are escaped once: a row's lines are one template of the columns' text, the row's
        labels put in (``bytes.replace``) and then its values (``%``). A line per row."""
        n, k = self.values.shape
        # Per column, the constant text around the rows' runs of labels (labels sorted by name).
        consts = [[f"\n{name}{{" if labels else f"\n{name}"] for _ in range(k)]
        runs: list[list[str]] = []
        in_run = False
        for i, label in enumerate(sorted(labels)):
            sep = "," if i else ""
            if label in self.rows:
                if in_run:
                    runs[-1].append(label)
                    continue
                in_run = True
                runs.append([label])
                for piece in consts:
                    piece[-1] += sep
                    piece.append("")
                continue
            in_run = False
            fixed = self.fixed.get(label)
            for c, piece in enumerate(consts):
                value = fixed if fixed is not None else self.cols[label][c]
                piece[-1] += f'{sep}{label}="{esc(value)}"'
        # A row's lines: the columns' text with a mark for each run of the row's labels, and %s for each
        # value. The marks are private-use characters: never in a safe label value (they are escaped).
        marks = [chr(0xE000 + j).encode() for j in range(len(runs))]
        pieces = [
            b"".join(p.replace("%", "%%").encode() + m for p, m in zip(piece, marks, strict=False))
            + piece[-1].replace("%", "%%").encode()
            + (b"} %s" if labels else b" %s")
            for piece in consts
        ]
        segs = [esc.runs(run, [self.rows[x] for x in run]) for run in runs]
        vals = _go_floats(self.values.ravel())
        finite = np.isfinite(self.values)
        whole = b"".join(pieces)
        out = []
        for r, full in enumerate(finite.all(axis=1).tolist()):
            if full:
                template, args = whole, vals[r * k : (r + 1) * k]
            else:  # a value that is not a number: no sample
                kept = np.flatnonzero(finite[r]).tolist()
                template, args = b"".join(pieces[c] for c in kept), [vals[r * k + c] for c in kept]
            for m, text in zip(marks, segs, strict=True):
                template = template.replace(m, text[r])
            out.append(template % tuple(args))
        return out


# Values whose Go form (``floatToGoString``) orjson writes as Python's repr does; checked once, on first use.
_TRICKY = (0.0, -0.0, 1.0, -1.5, 0.1, 1 / 3, 1e-4, 0.000123, 123456.789, 999999.9999999999, 2.0**53, 1e16)


@lru_cache(maxsize=1)
def _orjson_is_repr() -> bool:
    try:
        import orjson
    except ImportError:  # pragma: no cover - a dependency of sb-fleet
        return False
    return orjson.dumps(list(_TRICKY)).decode() == "[" + ",".join(map(repr, _TRICKY)) + "]"


def _go_big(s: bytes) -> bytes:
    """``prometheus_client``'s float format (Go's) of a number of 10^6 or more, from its ``repr``."""
    dot = s.find(b".")
    if dot <= 6:
        return s
    mantissa = (s[:1] + b"." + s[1:dot] + s[dot + 1 :]).rstrip(b"0.")
    return mantissa + b"e+%02d" % (dot - 1)


def _go_floats(values: np.ndarray) -> list[bytes]:
    """Each value as ``prometheus_client`` writes it (``floatToGoString``; one that is not finite: any
    text, it is never written). That is Python's ``repr`` of a float, which orjson writes the same several
    times faster, except below 10^-4 (where orjson does not use an exponent) and for numbers of 10^6 or
    more (which Go writes with one)."""
    floats = values.tolist()
    if not _orjson_is_repr():
        out = [repr(x).encode() for x in floats]
    else:
        import orjson

        out = orjson.dumps(floats)[1:-1].split(b",") if floats else []
        with np.errstate(invalid="ignore"):
            tiny = np.flatnonzero((np.abs(values) < 1e-4) & (values != 0))
        for i in tiny.tolist():
            out[i] = repr(floats[i]).encode()
    with np.errstate(invalid="ignore"):
        big = np.flatnonzero(values >= 1e6)
    for i in big.tolist():
        out[i] = _go_big(out[i])
    return out


def go_float(value: float) -> str:
    """A value as ``prometheus_client`` writes it (its ``floatToGoString``: Go's format)."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    return _go_big(repr(value).encode()).decode() if value >= 1e6 else repr(value)


class _Escaper:
    """Label values escaped for the exposition (``\\``, newline, ``"``), each distinct value once; a run of
    row labels (``host="a"``, ``host="a",outcome="ok"``) once per list of values (shared by a run's
    tables)."""

    def __init__(self) -> None:
        self._values: dict[str, str] = {}
        self._runs: dict[tuple[str, ...], tuple[list[list[str]], list[bytes]]] = {}

    def __call__(self, v: str) -> str:
        e = self._values.get(v)
        if e is None:
            e = self._values[v] = v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
        return e

    def runs(self, labels: list[str], values: list[list[str]]) -> list[bytes]:
        """Per row, its labels' text (``%`` doubled: it goes into a template)."""
        key = (*labels, *map(str, map(id, values)))
        known = self._runs.get(key)
        if known is None or any(a is not b for a, b in zip(known[0], values, strict=True)):
            text = [
                ",".join(t).replace("%", "%%").encode()
                for t in zip(
                    *([f'{x}="{self(v)}"' for v in vs] for x, vs in zip(labels, values, strict=True)),
                    strict=True,
                )
            ]
            known = self._runs[key] = (values, text)
        return known[1]


class Series:
    """Gauges by family, in the order they were declared; a ``prometheus_client`` collector too.

    ``declare`` a family once (its name, help text and label names); ``add`` samples to it one by one, or
    ``add_table`` a whole table of them (hosts x metrics, from the report's arrays). Every name is checked,
    every label value made safe (:func:`label_value`), a repeated series dropped. :meth:`render` writes
    the text itself, as ``prometheus_client``'s ``generate_latest`` would from :meth:`collect`."""

    def __init__(self) -> None:
        self._families: dict[str, _Family] = {}
        # A family's samples: one by one (name -> labels -> points), or one table (never both).
        self._samples: dict[str, dict[tuple[str, ...], list[tuple[float, float | None]]]] = {}
        self._tables: dict[str, _Table] = {}
        self._rendered: dict[tuple[bool, bool], bytes] = {}  # (format, # EOF) -> text, until the next change
        # Label values given to add_table, made safe; whether a safe list repeats a value (by identity).
        self._made_safe: dict[int, tuple[Sequence[object], list[str]]] = {}
        self._no_repeats: dict[int, tuple[list[str], bool]] = {}
        self._pending: list[Callable[[], None]] = []  # samples to add before the series are read

    def defer(self, add_them: Callable[[], None]) -> None:
        """``add_them`` adds its samples when the series are first read (rendered, collected, counted,
        selected): for samples whose values are still being worked out (the run's identity: a digest of
        its results file) while the rest of the report is made."""
        self._pending.append(add_them)

    def _settle(self) -> None:
        while self._pending:
            self._pending[0]()  # one that fails stays: it fails again at the next read
            self._pending.pop(0)

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
        return self._add(name, tuple(label_value(labels.get(k, "")) for k in fam.labels), v, timestamp)

    def _add(self, name: str, key: tuple[str, ...], v: float, timestamp: float | None = None) -> bool:
        if name in self._tables:
            self._untable(name)
        points = self._samples[name].setdefault(key, [])
        if any(t == timestamp for _, t in points):
            return False
        points.append((v, timestamp))
        self._rendered.clear()
        return True

    def _untable(self, name: str) -> None:
        """The family's table as samples one by one (for a family that gets more samples after it)."""
        table = self._tables.pop(name)
        by = self._samples[name]
        for key, v in table.samples(self._families[name].labels):
            by[key] = [(v, None)]

    def add_table(
        self,
        name: str,
        values: np.ndarray,
        rows: Mapping[str, Sequence[object]],
        cols: Mapping[str, Sequence[object]] | None = None,
        fixed: Mapping[str, object] | None = None,
    ) -> int:
        """The samples of a table, as :meth:`add` of each, row by row: ``values[r, c]`` labelled with
        ``fixed``, ``rows[label][r]`` and ``cols[label][c]`` (a label of the family none gives is ``""``).
        Each distinct label value is made safe once; how many samples were kept."""
        fam = self._families[name]
        vals = np.asarray(values, dtype=float)
        if vals.ndim != 2:
            raise ValueError(f"{name}: a table of values is 2-dimensional, not {vals.shape}")
        n, k = vals.shape
        cols = cols or {}
        fixed = fixed or {}
        f: dict[str, str] = {}
        r: dict[str, list[str]] = {}
        c: dict[str, list[str]] = {}
        for label in fam.labels:
            if label in rows:
                r[label] = self._safe(rows[label])
                if len(r[label]) != n:
                    raise ValueError(f"{name}: {len(r[label])} values of {label} for {n} rows")
            elif label in cols:
                c[label] = self._safe(cols[label])
                if len(c[label]) != k:
                    raise ValueError(f"{name}: {len(c[label])} values of {label} for {k} columns")
            else:
                f[label] = label_value(fixed.get(label, ""))
        table = _Table(f, r, c, vals)
        if self._samples[name] or name in self._tables or not table.distinct(self._unique):
            # Series there already, or two rows (columns) alike: one by one, the first of a series kept.
            return sum(self._add(name, key, v) for key, v in table.samples(fam.labels))
        self._tables[name] = table
        self._rendered.clear()
        return table.count()

    def _safe(self, values: Sequence[object]) -> list[str]:
        """``values`` made safe (:func:`label_value`); the same list of values (the hosts, given to each
        table of a run) once."""
        known = self._made_safe.get(id(values))
        if known is None or known[0] is not values:
            known = self._made_safe[id(values)] = (values, [label_value(x) for x in values])
        return known[1]

    def _unique(self, values: list[str]) -> bool:
        known = self._no_repeats.get(id(values))
        if known is None or known[0] is not values:
            known = self._no_repeats[id(values)] = (values, len(set(values)) == len(values))
        return known[1]

    def names(self) -> list[str]:
        return list(self._families)

    def __len__(self) -> int:
        self._settle()
        return sum(len(pts) for by in self._samples.values() for pts in by.values()) + sum(
            t.count() for t in self._tables.values()
        )

    def _adopt(
        self,
        fam: _Family,
        points: dict[tuple[str, ...], list[tuple[float, float | None]]] | None = None,
        table: _Table | None = None,
    ) -> None:
        """Another series' family, with these of its samples."""
        self._families[fam.name] = fam
        self._samples[fam.name] = points or {}
        if table is not None:
            self._tables[fam.name] = table

    def select(self, keep: Mapping[str, str], always: Iterable[str] = ()) -> Series:
        """The series whose labels include every ``keep`` label with its value (families without such a
        label are left out), plus every series of the families named in ``always``."""
        self._settle()
        out = Series()
        always = set(always)
        want = {k: label_value(v) for k, v in keep.items()}
        for name, fam in self._families.items():
            whole = name in always
            if not whole and not all(k in fam.labels for k in want):
                continue
            table = self._tables.get(name)
            if table is not None:
                sub = table if whole else table.where(want)
                if sub is not None and sub.count():
                    out._adopt(fam, table=sub)
                continue
            idx = {k: fam.labels.index(k) for k in want} if not whole else {}
            rows = {
                key: list(pts)
                for key, pts in self._samples[name].items()
                if all(key[i] == want[k] for k, i in idx.items())
            }
            if rows:
                out._adopt(fam, points=rows)
        return out

    def split(self, label: str, always: Iterable[str] = ()) -> dict[str, Series]:
        """:meth:`select` of each value of ``label`` at once: that value (safe) -> its series, plus every
        series of the families named in ``always``."""
        self._settle()
        always = set(always)
        groups: dict[str, dict[str, _Table | dict]] = {}  # value -> family -> its part
        for name, fam in self._families.items():
            if name in always or label not in fam.labels:
                continue
            table = self._tables.get(name)
            if table is not None:
                if label in table.fixed:
                    groups.setdefault(table.fixed[label], {})[name] = table
                    continue
                by_value: dict[str, list[int]] = {}
                in_rows = label in table.rows
                for i, v in enumerate(table.rows[label] if in_rows else table.cols[label]):
                    by_value.setdefault(v, []).append(i)
                for v, idx in by_value.items():
                    sub = table.take(rows=idx) if in_rows else table.take(cols=idx)
                    if sub.count():
                        groups.setdefault(v, {})[name] = sub
                continue
            i = fam.labels.index(label)
            for key, pts in self._samples[name].items():
                got = groups.setdefault(key[i], {}).setdefault(name, {})
                assert isinstance(got, dict)
                got[key] = list(pts)
        out = {}
        for v, parts in groups.items():
            s = out[v] = Series()
            for name, fam in self._families.items():
                part: _Table | dict | None = parts.get(name)
                if name in always:
                    part = self._tables.get(name) or self._samples[name]
                if not part or (isinstance(part, _Table) and not part.count()):
                    continue
                if isinstance(part, _Table):
                    s._adopt(fam, table=part)
                else:
                    s._adopt(fam, points={k: list(p) for k, p in part.items()})
        return out

    def collect(self) -> Iterator[Metric]:
        """The series as ``prometheus_client``'s metric families (a collector: ``generate_latest(series)``
        gives :meth:`render`'s text)."""
        from prometheus_client.core import GaugeMetricFamily

        self._settle()
        for name, fam in self._families.items():
            table = self._tables.get(name)
            rows = self._samples[name]
            if not rows and (table is None or not table.count()):
                continue
            g = GaugeMetricFamily(name, fam.help, labels=list(fam.labels))
            if table is not None:
                for key, v in table.samples(fam.labels):
                    g.add_metric(list(key), v)
            for key, points in rows.items():
                for v, t in sorted(points, key=lambda p: -math.inf if p[1] is None else p[1]):
                    g.add_metric(list(key), v, timestamp=t)
            yield g

    def _text(self, openmetrics: bool, end: bool = True) -> Iterator[bytes]:
        esc = _Escaper()
        for name, fam in self._families.items():
            table = self._tables.get(name)
            rows = self._samples[name]
            if not rows and (table is None or not table.count()):
                continue
            doc = fam.help.replace("\\", r"\\").replace("\n", r"\n")
            if openmetrics:
                doc = doc.replace('"', r"\"")
            yield f"# HELP {name} {doc}\n# TYPE {name} gauge".encode()
            if table is not None:
                yield from table.text(name, fam.labels, esc)
                yield b"\n"
                continue
            order = sorted(fam.labels)
            at = [fam.labels.index(k) for k in order]
            lines = []
            for key, points in rows.items():
                labels = "{" + ",".join(f'{k}="{esc(key[i])}"' for k, i in zip(order, at, strict=True)) + "}"
                labels = labels if fam.labels else ""
                for v, t in sorted(points, key=lambda p: -math.inf if p[1] is None else p[1]):
                    ts = "" if t is None else f" {t}" if openmetrics else f" {int(float(t) * 1000):d}"
                    lines.append(f"\n{name}{labels} {go_float(v)}{ts}")
            yield "".join(lines).encode()
            yield b"\n"
        if openmetrics and end:
            yield b"# EOF\n"

    def render(self, openmetrics: bool = False, end: bool = True) -> bytes:
        """The text format (0.0.4), or OpenMetrics 1.0 (ends with ``# EOF``), byte for byte as
        ``prometheus_client`` writes :meth:`collect`, but from the tables: each host's and metric's label
        values escaped once, not each sample's. Made once per format (the run's file, its textfile copy and
        the push share it). ``end=False``: OpenMetrics without its ``# EOF`` (families that another series'
        text follows in the same exposition)."""
        self._settle()
        key = (openmetrics, end or not openmetrics)
        if key not in self._rendered:
            self._rendered[key] = b"".join(self._text(openmetrics, end))
        return self._rendered[key]
