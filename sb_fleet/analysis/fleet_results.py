"""Load benchmark results into one host x metric matrix.

The input is either a run directory (``manifest.json`` inside) or any
SuperBench ``results-summary.jsonl``. A malformed line (truncated JSON, a
node seen twice, JSON nested too deep) is reported with its line number and
the rest of the file is analysed. A value that is not a finite number (NaN,
±inf, a string, a number past the double range) is an invalid value of its
metric: reported as a line problem and kept in :attr:`Fleet.invalid`, which
the report turns into a failing issue of the host
(:mod:`sb_fleet.analysis.invalid_values`); ``null`` is SuperBench's "no value"
and stays absent. A run directory adds the invalid values the normaliser
found in the hosts' raw files (``invalid-values.json``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sb_fleet import bounded_json
from sb_fleet.analysis.superbench.metric_names import Directions, MetricInfo, load_metrics_json
from sb_fleet.errors import ResultsError
from sb_fleet.rundir.normalize import INVALID_VALUES, MAX_NOISE, NOISE_SUMMARY, shown
from sb_fleet.safe_files import safe_name

SUMMARY = "results-summary.jsonl"
# A soak round's run directory compacted by its campaign (sb_fleet.campaign.round_compaction): this file says
# what was removed and where the round's figures are; the report files and most nodes' results are gone.
COMPACTED = "compacted.json"


@dataclass(frozen=True)
class LineProblem:
    """One problem with one line of the results file; the line's good parts are still used."""

    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


@dataclass(frozen=True)
class HostInfo:
    """What the run directory knows about a host beyond its results."""

    name: str
    groups: tuple[str, ...] = ()
    outcome: str | None = None  # the spine's outcome word, when known
    reason: str = ""
    gpu_model: str | None = None
    # What the facts say that makes a population (sb_fleet.analysis.populations): GPU model,
    # driver, firmware, as (key, value) pairs in POPULATION_FACTS order; absent keys left out.
    traits: tuple[tuple[str, str], ...] = ()


# facts/<host>.json keys whose values split a fleet into populations judged apart.
POPULATION_FACTS = ("gpu_model", "driver_version", "vbios_version", "firmware_version")


@dataclass
class Fleet:
    """The results of one run. ``values[h, c]`` is host ``hosts[h]``'s value of ``columns[c]`` (NaN: absent)."""

    source: str
    hosts: list[str]  # hosts with a results line, in file order
    columns: list[str]
    values: np.ndarray
    problems: list[LineProblem] = field(default_factory=list)
    expected_hosts: list[HostInfo] = field(default_factory=list)  # the run's inventory, when known
    expected_benchmarks: list[str] | None = None  # from plan.json
    directions: Directions = field(default_factory=Directions)
    run_dir: Path | None = None
    invalid: dict[str, dict[str, str]] = field(default_factory=dict)  # host -> {metric: invalid value}
    # noise[h, c]: the measured noise of values[h, c] (relative robust sigma of its timed samples, from
    # the run's noise-summary.jsonl); NaN where unknown. None: the source has no measured noise.
    noise: np.ndarray | None = None

    def column_index(self) -> dict[str, int]:
        return {c: i for i, c in enumerate(self.columns)}

    def host_index(self) -> dict[str, int]:
        return {h: i for i, h in enumerate(self.hosts)}


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _loader() -> Callable[[bytes | memoryview], Any]:
    try:
        import orjson

        fast = orjson.loads
    except ImportError:  # pragma: no cover - orjson is a dependency, this is a fallback
        return lambda line: bounded_json.loads(bytes(line))

    def loads(line: bytes | memoryview) -> Any:
        try:
            return fast(line)
        except ValueError:
            # accepts what orjson refuses (NaN, Infinity, 1e400), within bounds (depth, size), or raises
            return bounded_json.loads(bytes(line))

    return loads


_NUMERIC = {int, float}


def parse_summary(path: Path) -> tuple[list[str], list[str], np.ndarray, list[LineProblem]]:
    """Parse a results-summary.jsonl. Returns hosts, columns, matrix and per-line problems."""
    hosts, columns, matrix, problems, _ = parse_summary_checked(path)
    return hosts, columns, matrix, problems


def parse_summary_checked(
    path: Path,
) -> tuple[list[str], list[str], np.ndarray, list[LineProblem], dict[str, dict[str, str]]]:
    """Parse a results-summary.jsonl. Returns hosts, columns, matrix, per-line problems and the
    invalid values (host -> {metric: value as text}).

    Lines written by one tool share their key order, so each distinct key
    layout is resolved to column indexes once; a line with only numbers
    then becomes a row in one step.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ResultsError(path, None, f"cannot read the results file ({exc.strerror})") from exc
    name = str(path)
    problems: list[LineProblem] = []
    col_idx: dict[str, int] = {}
    hosts: list[str] = []
    first_line: dict[str, int] = {}
    # keys -> (position of "node", column indexes, host rows, value lists)
    layouts: dict[tuple[str, ...], tuple[int, np.ndarray, list[int], list[list[Any]]]] = {}
    odd_rows: list[
        tuple[int, np.ndarray, np.ndarray]
    ] = []  # rows with a non-numeric value: (row, cols, values)
    loads = _loader()
    invalid: dict[str, dict[str, str]] = {}

    def columns_for(keys: list[str]) -> np.ndarray:
        out = np.empty(len(keys), dtype=np.int64)
        for j, key in enumerate(keys):
            ci = col_idx.get(key)
            if ci is None:
                ci = col_idx[key] = len(col_idx)
            out[j] = ci
        return out

    for lineno, line in _lines(raw):
        try:
            obj = loads(line)
        except (ValueError, UnicodeDecodeError) as exc:
            why = " ".join(str(exc).split())[:200]
            problems.append(LineProblem(name, lineno, f"not valid JSON ({why}); line skipped"))
            continue
        if not isinstance(obj, dict):
            problems.append(LineProblem(name, lineno, "not a JSON object; line skipped"))
            continue
        node = obj.get("node")
        if not isinstance(node, str) or not node:
            problems.append(LineProblem(name, lineno, 'no "node" name; line skipped'))
            continue
        if node in first_line:
            problems.append(
                LineProblem(
                    name,
                    lineno,
                    f"duplicate node {node!r} (first seen on line {first_line[node]}); line skipped",
                )
            )
            continue
        first_line[node] = lineno
        row = len(hosts)
        hosts.append(node)
        keys = tuple(obj)
        vals = list(obj.values())
        layout = layouts.get(keys)
        if layout is None:
            pos = keys.index("node")
            layout = layouts[keys] = (pos, columns_for([k for k in keys if k != "node"]), [], [])
        pos, cols, rows_of, vals_of = layout
        del vals[pos]
        if set(map(type, vals)) <= _NUMERIC:
            rows_of.append(row)
            vals_of.append(vals)
            continue
        # Slow path: some value is not a number. Keep the numbers, report the rest.
        kk = keys_wo(keys, pos)
        good_c: list[int] = []
        good_v: list[float] = []
        bad: list[tuple[str, Any]] = []
        for j, v in enumerate(vals):
            if v is None:
                continue  # SuperBench writes null for a value it could not produce
            if type(v) in _NUMERIC and _finite(v):
                good_c.append(int(cols[j]))
                good_v.append(float(v))
            else:
                bad.append((kk[j], v))
        if bad:
            problems.append(_bad_values(name, lineno, node, bad))
            for k, v in bad:
                invalid.setdefault(node, {}).setdefault(str(k), shown(v))
        odd_rows.append((row, np.array(good_c, dtype=np.int64), np.array(good_v, dtype=float)))
    columns = list(col_idx)
    matrix = np.full((len(hosts), len(columns)), np.nan)
    for keys, (pos, cols, rows_of, vals_of) in layouts.items():
        if not rows_of or not len(cols):
            continue
        block = np.array(vals_of, dtype=float)  # one conversion per layout, not one per line
        inf = ~np.isfinite(block)  # NaN, ±inf: invalid values, never "absent"
        if inf.any():
            kk = keys_wo(keys, pos)
            for r, j in zip(*np.nonzero(inf), strict=True):
                host = hosts[rows_of[r]]
                problems.append(_bad_values(name, first_line[host], host, [(kk[j], float(block[r, j]))]))
                invalid.setdefault(host, {}).setdefault(kk[j], shown(float(block[r, j])))
            block[inf] = np.nan
        matrix[np.ix_(np.asarray(rows_of), cols)] = block
    for row, cols_h, vals_h in odd_rows:
        if len(cols_h):
            matrix[row, cols_h] = vals_h
    problems.sort(key=lambda p: p.line)
    return hosts, columns, matrix, problems, invalid


def _lines(raw: bytes) -> Iterator[tuple[int, bytes | memoryview]]:
    """(line number, line) of each line that is not blank. Lines are views into ``raw``, not copies
    (a 60 MB file is not copied again); a file with carriage returns is split as ``splitlines`` does."""
    if b"\r" in raw:
        for lineno, line in enumerate(raw.splitlines(), start=1):
            if line.strip():
                yield lineno, line
        return
    view = memoryview(raw)
    find = raw.find
    start, lineno, end_all = 0, 0, len(raw)
    while start < end_all:
        lineno += 1
        end = find(b"\n", start)
        if end < 0:
            end = end_all
        # a line that starts with data is not blank (no copy); any other is checked in full
        if (end > start and not raw[start : start + 1].isspace()) or raw[start:end].strip():
            yield lineno, view[start:end]
        start = end + 1


def _finite(v: int | float) -> bool:
    try:
        return math.isfinite(v)
    except OverflowError:  # an int past the double range
        return False


def keys_wo(keys: tuple[str, ...], pos: int) -> list[str]:
    return [k for j, k in enumerate(keys) if j != pos]


def _bad_values(path: str, lineno: int, node: str, bad: list[tuple[str, Any]]) -> LineProblem:
    text = ", ".join(f"{k!r}={shown(v)}"[:80] for k, v in bad[:3])
    more = f" and {len(bad) - 3} more" if len(bad) > 3 else ""
    return LineProblem(path, lineno, f"node {node!r}: invalid value(s), not a finite number: {text}{more}")


def _read_json(path: Path) -> Any:
    try:
        return bounded_json.read(path)
    except (OSError, ValueError) as exc:
        raise ResultsError(path, None, f"cannot read ({exc})", "the run directory may be damaged") from exc


def _load_hosts(run: Path) -> list[HostInfo]:
    p = run / "hosts.json"
    if not p.is_file():
        return []
    data = _read_json(p)
    hosts = data.get("hosts") if isinstance(data, dict) else None
    if not isinstance(hosts, list):
        raise ResultsError(p, "hosts", "expected a list of {name, groups}")
    outcomes = _load_outcomes(run)
    facts = _fact_files(run)
    out: list[HostInfo] = []
    for i, h in enumerate(hosts):
        if not isinstance(h, dict) or not isinstance(h.get("name"), str):
            raise ResultsError(p, f"hosts[{i}]", "expected an object with a string 'name'")
        name = h["name"]
        oc = outcomes.get(name, {})
        out.append(
            HostInfo(
                name=name,
                groups=tuple(str(g) for g in h.get("groups") or ()),
                outcome=oc.get("outcome"),
                reason=str(oc.get("reason") or ""),
                **_host_facts(run, name, facts),
            )
        )
    return out


def _load_outcomes(run: Path) -> dict[str, dict]:
    p = run / "outcomes.json"
    if not p.is_file():
        return {}
    data = _read_json(p)
    hosts = data.get("hosts") if isinstance(data, dict) else None
    if not isinstance(hosts, dict):
        raise ResultsError(p, "hosts", "expected an object of host name -> {outcome, reason, stages}")
    return {str(k): v for k, v in hosts.items() if isinstance(v, dict)}


def _fact_files(run: Path) -> set[str]:
    try:
        return set(os.listdir(run / "facts"))
    except OSError:
        return set()


def _host_facts(run: Path, host: str, facts: set[str] | None = None) -> dict:
    """``gpu_model`` and the population ``traits`` of a host from ``facts/<host>.json`` (none: empty)."""
    fname = f"{safe_name(host)}.json"  # the spine's file name for a host
    if facts is not None and fname not in facts:
        return {}
    p = run / "facts" / fname
    if not p.is_file():
        return {}
    try:
        data = bounded_json.read(p)
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    traits = tuple(
        (k, str(data[k]))
        for k in POPULATION_FACTS
        if isinstance(data.get(k), (str, int, float)) and data[k] != ""
    )
    model = data.get("gpu_model")
    return {"gpu_model": str(model) if model else None, "traits": traits}


def load_fleet(source: Path) -> Fleet:
    """Load a run directory or a results-summary.jsonl."""
    source = Path(source)
    if source.is_dir():
        if not (source / "manifest.json").is_file():
            raise ResultsError(
                source,
                None,
                "not a run directory (no manifest.json)",
                f"give a run directory or a {SUMMARY} file",
            )
        return _load_run_dir(source)
    if not source.exists():
        raise ResultsError(
            source, None, "no such file or directory", f"give a run directory or a {SUMMARY} file"
        )
    hosts, columns, values, problems, invalid = parse_summary_checked(source)
    return Fleet(
        source=str(source), hosts=hosts, columns=columns, values=values, problems=problems, invalid=invalid
    )


def _load_run_dir(run: Path) -> Fleet:
    if (run / COMPACTED).is_file():
        raise ResultsError(
            run / COMPACTED,
            None,
            "a soak round compacted by its acceptance campaign (campaign key keep_rounds: failed): its "
            "report files and the results of the nodes that passed it were removed",
            "every node's figures, outcome and counters of the round are in the campaign's "
            "soak-<stage>-series.jsonl (the file's 'series'); the nodes kept are in its 'kept'",
        )
    summary = run / SUMMARY
    invalid: dict[str, dict[str, str]] = {}
    if summary.is_file():
        hosts, columns, values, problems, invalid = parse_summary_checked(summary)
    else:
        hosts, columns, values, problems = [], [], np.full((0, 0), np.nan), []
    for host, metrics in _load_invalid(run).items():  # what the normaliser left out of the summary
        for metric, value in metrics.items():
            invalid.setdefault(host, {}).setdefault(metric, value)
    expected = _load_hosts(run)
    if not expected:
        outcomes = _load_outcomes(run)
        facts = _fact_files(run)
        expected = [
            HostInfo(
                name=n,
                outcome=o.get("outcome"),
                reason=str(o.get("reason") or ""),
                **_host_facts(run, n, facts),
            )
            for n, o in outcomes.items()
        ]
    benchmarks = None
    plan = run / "plan.json"
    if plan.is_file():
        data = _read_json(plan)
        b = data.get("benchmarks") if isinstance(data, dict) else None
        if isinstance(b, list) and all(isinstance(x, str) for x in b):
            benchmarks = list(b)
    declared: dict[str, MetricInfo] = {}
    if (run / "metrics.json").is_file():
        declared = load_metrics_json(run / "metrics.json")
    noise = _load_noise(run / NOISE_SUMMARY, hosts, columns, problems)
    return Fleet(
        source=str(run),
        hosts=hosts,
        columns=columns,
        values=values,
        problems=problems,
        expected_hosts=expected,
        expected_benchmarks=benchmarks,
        directions=Directions(declared),
        run_dir=run,
        invalid=invalid,
        noise=noise,
    )


def _load_noise(
    path: Path, hosts: list[str], columns: list[str], problems: list[LineProblem]
) -> np.ndarray | None:
    """The measured noise of each value (hosts x columns, NaN where unknown) from ``noise-summary.jsonl``,
    or None without that file. Its malformed lines are problems like the summary's; a noise that is
    not a number in [0, MAX_NOISE] is unknown; hosts and metrics the summary lacks are ignored."""
    if not path.is_file() or not hosts:
        return None
    n_hosts, n_cols, mat, probs, _ = parse_summary_checked(path)
    problems.extend(probs)
    out = np.full((len(hosts), len(columns)), np.nan)
    row = {h: i for i, h in enumerate(hosts)}
    col = {c: j for j, c in enumerate(columns)}
    rows = [(i, row[h]) for i, h in enumerate(n_hosts) if h in row]
    cols = [(j, col[c]) for j, c in enumerate(n_cols) if c in col]
    if rows and cols:
        src_r, dst_r = (np.array(x) for x in zip(*rows, strict=True))
        src_c, dst_c = (np.array(x) for x in zip(*cols, strict=True))
        out[np.ix_(dst_r, dst_c)] = mat[np.ix_(src_r, src_c)]
    with np.errstate(invalid="ignore"):
        out[~((out >= 0) & (out <= MAX_NOISE))] = np.nan
    return out


def _load_invalid(run: Path) -> dict[str, dict[str, str]]:
    p = run / INVALID_VALUES
    if not p.is_file():
        return {}
    data = _read_json(p)
    if not isinstance(data, dict):
        raise ResultsError(p, None, "expected an object of host name -> {metric: value}")
    return {str(h): {str(k): str(v) for k, v in m.items()} for h, m in data.items() if isinstance(m, dict)}
