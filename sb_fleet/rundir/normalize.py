"""The one normaliser: raw per-rank result files into typed per-host records and SuperBench's
``results-summary.jsonl``.

One line per node, ``{"node": <inventory name>, "<key>/<metric>[:<rank>]": value, ...}``, where
``<key>`` is the config entry (``gemm-flops``) or entry and model (``gpt_models/pytorch-gpt2-large``).
SuperBench's rule (its runner's node summary), per metric and its ``reduce_op``:

* ``None``: every rank keeps its value, as ``<key>/<metric>:<rank>`` when the node ran more than
  one rank, plain ``<key>/<metric>`` when it ran one. ``return_code`` is such a metric (SuperBench
  declares it with no reduce op), so a node of eight ranks has ``<key>/return_code:0`` … ``:7``;
* ``max`` / ``min`` / ``sum`` / ``avg``: one ``<key>/<metric>`` for the node;
* any other reduce op: the metric is left out and the host's record says why (SuperBench logs
  "Unknown reduce type" and drops it too).

Where sb-fleet differs on purpose: a rank's value is the mean of its ``run_count`` runs (SuperBench
writes ``<key>/<run>/<metric>`` per run; the samples stay in each result file), and ``last`` (the
highest rank's value) is accepted as a reduce op.

Beside the summary, each metric's *measured noise* (the result file's ``noise``: how uncertain the
rank's figure is from its timed samples, :mod:`sb_bench.core.samples`; a file without it: its
``spread``) goes into ``noise-summary.jsonl``,
one line per node keyed as the summary: a reduced metric takes its noisiest rank's. A spread that is
not a finite number in ``[0, MAX_NOISE]``, or that a failed rank reports, is left out (its metric is
then judged with the noise the fleet shows).

Pure apart from reading the files it is given. A rank file that is unreadable, truncated, not a
result object, without a return code, or outside the parser's bounds (:mod:`sb_fleet.bounded_json`:
too large, nested too deep) is that entry's problem (return code 3, SuperBench's
INVALID_BENCHMARK_RESULT), never an exception, so one corrupt file costs only its own benchmark.

A value that is not a finite number (NaN, ±inf, a string, a number past the double range such as
``1e400``) makes its metric invalid: the metric is left out of the summary, recorded in the host's
``invalid`` (metric -> the value as text, written to ``invalid-values.json``) and the host's
``benchmarks`` outcome is failed, naming the metric and the value. ``null`` stays what SuperBench
means by it: a value the benchmark could not produce (left out, not invalid).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sb_fleet import bounded_json
from sb_fleet.config.traffic_patterns import base_key
from sb_fleet.outcome import HostOutcome, Outcome

REDUCERS: dict[str, Callable[[list[float]], float]] = {
    "max": max,
    "min": min,
    "sum": sum,
    "avg": lambda xs: sum(xs) / len(xs),
    "last": lambda xs: xs[-1],
}
CORRUPT_RC = 3  # SuperBench's INVALID_BENCHMARK_RESULT
NOISE_SUMMARY = "noise-summary.jsonl"  # per host, each metric's measured noise, keyed as results-summary
MAX_NOISE = 100.0  # a spread a host claims beyond 10,000% is not a measurement: left out
INVALID_VALUES = "invalid-values.json"  # host -> {metric: the invalid value, as text}


@dataclass(frozen=True)
class EntryStatus:
    """How one benchmark entry ended on one host."""

    status: str  # ok | skipped | failed | timeout | … (the worst rank's word)
    return_code: int
    reason: str = ""

    def to_json(self) -> dict:
        return {"status": self.status, "return_code": self.return_code, "reason": self.reason}


@dataclass
class HostRecord:
    """Everything the normaliser made of one host's raw files."""

    host: str
    metrics: dict[str, float] = field(default_factory=dict)
    statuses: dict[str, EntryStatus] = field(default_factory=dict)  # entry key -> status
    problems: list[str] = field(default_factory=list)
    meta: dict[str, dict] = field(default_factory=dict)  # "<key>/<metric>" -> unit, higher_is_better
    invalid: dict[str, str] = field(default_factory=dict)  # summary metric name -> the bad value, as text
    # summary metric name -> the measured noise of its value (relative robust sigma of the timed samples)
    noise: dict[str, float] = field(default_factory=dict)

    def summary_line(self) -> str:
        return json.dumps({"node": self.host, **dict(sorted(self.metrics.items()))}, allow_nan=False)

    def noise_line(self) -> str:
        """The host's line of ``noise-summary.jsonl``: its metrics' measured noise, keyed as the summary."""
        kept = {k: v for k, v in sorted(self.noise.items()) if k in self.metrics}
        return json.dumps({"node": self.host, **kept}, allow_nan=False)


def _finite(v: object) -> bool:
    try:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    except OverflowError:  # an int too large for a float
        return False


def shown(v: object) -> str:
    """A value as text for a message: short, one line."""
    try:
        text = repr(v)
    except ValueError:  # an int too long for repr
        text = "<a number of more than 4300 digits>"
    text = " ".join(text.split())
    return text if len(text) <= 60 else text[:57] + "..."


def _mean(values: Iterable) -> tuple[float | None, object | None]:
    """The mean of a rank's run values, or (None, the first invalid value); nulls are left out."""
    xs = []
    for v in values:
        if v is None:
            continue
        if not _finite(v):
            return None, v
        xs.append(float(v))
    if not xs:
        return None, None
    m = sum(xs) / len(xs)
    return (m, None) if math.isfinite(m) else (None, m)


def _return_code(d: Mapping) -> int | None:
    rc = d.get("return_code")
    if rc is None:
        res = d.get("result")
        rc = res.get("return_code") if isinstance(res, dict) else None
        if isinstance(rc, list):
            rc = rc[0] if rc else None
    try:
        return None if rc is None or isinstance(rc, bool) else int(rc)
    except (TypeError, ValueError, OverflowError):
        return None


def reduce_entry(key: str, ranks: Mapping[int, Mapping], out: HostRecord) -> None:
    """Fold one entry's rank results (rank -> SuperBench result object) into ``out``. Pure."""
    if not ranks:
        return
    multi = len(ranks) > 1
    codes: dict[int, int] = {}
    for rank, d in sorted(ranks.items()):
        rc = _return_code(d)
        if rc is None:
            out.problems.append(f"{key}: rank {rank}: the result has no return code")
            rc = CORRUPT_RC
        codes[rank] = rc
    for rank, rc in codes.items():
        out.metrics[f"{key}/return_code:{rank}" if multi else f"{key}/return_code"] = rc
    worst_rc = max(codes.values(), key=lambda c: (c != 0, c))  # a failing rank's code, even a negative one
    bad = [(r, d) for r, d in sorted(ranks.items()) if codes[r] != 0]
    if not bad and all(d.get("status") == "skipped" for d in ranks.values()):
        status = "skipped"
    elif not bad:
        status = "ok"
    else:
        status = str(bad[0][1].get("status") or "failed")
        if status in ("ok", "running", "skipped"):  # a non-zero return code is a failure
            status = "failed"
    first = bad[0][1] if bad else next(iter(ranks.values()))
    reason = str(first.get("reason") or "")
    if bad and not reason and codes[bad[0][0]] == CORRUPT_RC and out.problems:
        reason = out.problems[-1]
    prev = out.statuses.get(key)
    if prev is None or prev.return_code <= worst_rc:
        out.statuses[key] = EntryStatus(status, worst_rc, reason)
    per_metric: dict[str, dict[int, float]] = {}
    reduce_ops: dict[str, object] = {}
    invalid: dict[str, tuple[int, object]] = {}  # metric -> (rank, its first invalid value)
    spreads: dict[str, dict[int, float]] = {}  # metric -> rank -> the rank's measured spread
    for rank, d in sorted(ranks.items()):
        # The figure's noise; a result file of an older suite has only its runs' spread.
        sp = d.get("noise") if isinstance(d.get("noise"), dict) else d.get("spread")
        for metric, v in sp.items() if isinstance(sp, dict) and codes.get(rank) == 0 else ():
            if _finite(v) and 0 <= v <= MAX_NOISE:
                spreads.setdefault(str(metric), {})[rank] = float(v)
        result = d.get("result")
        ops = d.get("reduce_op")
        for metric, values in result.items() if isinstance(result, dict) else ():
            if metric == "return_code":
                continue
            v, bad_value = _mean(values if isinstance(values, list) else [values])
            if bad_value is not None:
                invalid.setdefault(str(metric), (rank, bad_value))
            if v is None:
                continue
            per_metric.setdefault(metric, {})[rank] = v
            reduce_ops.setdefault(metric, ops.get(metric) if isinstance(ops, dict) else None)
        metas = d.get("metrics")
        for metric, meta in metas.items() if isinstance(metas, dict) else ():
            if isinstance(meta, dict):
                out.meta.setdefault(f"{key}/{metric}", {k: meta.get(k) for k in ("unit", "higher_is_better")})
    for metric, (rank, value) in invalid.items():
        name = f"{key}/{metric}:{rank}" if multi and reduce_ops.get(metric) is None else f"{key}/{metric}"
        _invalid(out, name, rank, value)
    for metric, by_rank in per_metric.items():
        op = reduce_ops.get(metric)
        if metric in invalid and op is not None:
            continue  # one rank's invalid value makes the node's reduced value invalid
        noise = spreads.get(metric, {})
        if op is None:
            for r, v in sorted(by_rank.items()):
                name = f"{key}/{metric}:{r}" if multi else f"{key}/{metric}"
                out.metrics[name] = v
                if r in noise:
                    out.noise[name] = noise[r]
        elif isinstance(op, str) and op in REDUCERS:
            v = REDUCERS[op]([by_rank[r] for r in sorted(by_rank)])
            if math.isfinite(v):
                out.metrics[f"{key}/{metric}"] = v
                if noise:  # the noisiest rank's: one bursty rank moves a max, a sum or a mean
                    out.noise[f"{key}/{metric}"] = max(noise.values())
            else:  # a sum past the double range
                _invalid(out, f"{key}/{metric}", None, v)
        else:
            out.problems.append(f"{one_line(key)}/{one_line(metric)}: unknown reduce op {op!r}: left out")


def one_line(name: str) -> str:
    """A host-given name on one line of a problem list (its control characters escaped)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(name))


def _invalid(out: HostRecord, name: str, rank: int | None, value: object) -> None:
    text = shown(value)
    out.invalid.setdefault(name, text)
    where = f" (rank {rank})" if rank is not None else ""
    out.problems.append(
        f"{one_line(name)}: invalid value {text}{where}: not a finite number; the metric is left out"
    )


def read_entry(key: str, files: Iterable[Path], out: HostRecord) -> None:
    """Read one entry's ``rank<N>.json`` files and fold them into ``out``."""
    ranks: dict[int, dict] = {}
    for f in files:
        try:
            rank = int(f.stem[4:])
        except ValueError:
            continue
        try:
            data = bounded_json.read(f)
            if not isinstance(data, dict) or not isinstance(data.get("result", {}), dict):
                raise ValueError("not a result object")
        except (OSError, ValueError) as exc:
            why = " ".join(str(exc).split())[:120]
            out.problems.append(f"{key}: {f.name}: corrupt or truncated result file ({why})")
            data = {"return_code": CORRUPT_RC, "status": "failed", "reason": "corrupt result file"}
        ranks[rank] = data
    reduce_entry(key, ranks, out)


def entry_dirs(root: Path) -> list[Path]:
    """Every directory under ``root`` that holds rank files (one per benchmark entry)."""
    return sorted({p.parent for p in root.rglob("rank*.json") if "logs" not in p.parts})


def summarize_host(host: str, raw_dir: Path, merge_rounds: bool = True) -> HostRecord:
    """The record of one host from its ``raw/<host>/`` directory. The rounds of a pattern entry
    (``nccl-bw@3``) are summarised under the entry's key (their metric names carry the round), unless
    ``merge_rounds`` is False."""
    out = HostRecord(host)
    results = raw_dir / "results"
    root = results if results.is_dir() else raw_dir
    if not root.is_dir():
        return out
    for d in entry_dirs(root):
        key = str(d.relative_to(root))
        read_entry(base_key(key) if merge_rounds else key, sorted(d.glob("rank*.json")), out)
    for key, reason in _runner_timeouts(root / "status.json").items():
        key = base_key(key) if merge_rounds else key
        st = out.statuses.get(key)
        if st is not None and st.status in ("ok", "skipped"):
            # Every rank wrote its results, but the entry did not end within its timeout and the runner
            # killed it (a teardown that hangs): the figures stand, the host does not pass silently.
            why = reason or "killed at its timeout"
            out.statuses[key] = EntryStatus(
                "timeout", st.return_code, f"every rank wrote its result, but the entry did not end: {why}"
            )
    return out


def _runner_timeouts(path: Path) -> dict[str, str]:
    """The entries the on-host runner's ``status.json`` says timed out: key -> the runner's reason.
    A missing or malformed file says nothing (the rank files and the run stage speak for the host)."""
    try:
        doc = bounded_json.read(path)
    except (OSError, ValueError):
        return {}
    entries = doc.get("entries") if isinstance(doc, dict) else None
    if not isinstance(entries, dict):
        return {}
    return {
        str(k): one_line(str(v.get("reason") or ""))[:200]
        for k, v in entries.items()
        if isinstance(v, dict) and v.get("status") == "timeout"
    }


def benchmark_outcome(rec: HostRecord, expected: Iterable[str]) -> HostOutcome:
    """The host's ``benchmarks`` outcome: timeout beats failed beats missing entries beats ok."""
    details: dict = {"entries": {k: st.to_json() for k, st in rec.statuses.items()}}
    if rec.invalid:
        details["invalid"] = dict(rec.invalid)
    bad = [(k, st) for k, st in rec.statuses.items() if st.status not in ("ok", "skipped")]
    timed_out = [(k, st) for k, st in bad if st.status == "timeout"]
    absent = [k for k in expected if k not in rec.statuses]
    h = rec.host
    if timed_out:
        k, st = timed_out[0]
        return HostOutcome(h, "benchmarks", Outcome.TIMEOUT, f"{k}: {st.reason}", details=details)
    if rec.invalid and not bad:
        metric, value = next(iter(rec.invalid.items()))
        more = f" (and {len(rec.invalid) - 1} more)" if len(rec.invalid) > 1 else ""
        reason = f"invalid value {value} for {metric}{more}"
        return HostOutcome(h, "benchmarks", Outcome.FAILED, reason, details=details)
    if bad or rec.problems:
        reason = f"{bad[0][0]}: {bad[0][1].reason}" if bad else rec.problems[0]
        return HostOutcome(h, "benchmarks", Outcome.FAILED, reason, details=details)
    if absent:
        return HostOutcome(
            h, "benchmarks", Outcome.FAILED, f"no result for {', '.join(absent)}", details=details
        )
    return HostOutcome(h, "benchmarks", Outcome.OK, details=details)
