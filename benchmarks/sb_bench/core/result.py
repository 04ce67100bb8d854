"""The result envelope: one JSON file per benchmark per rank, in SuperBench's schema.

Fields as SuperBench writes them (``name``, ``type``, ``run_count``,
``return_code``, ``start_time``, ``end_time``, ``raw_data``, ``result``,
``reduce_op``) plus sb-fleet's own, which SuperBench tools ignore:
``schema_version``, ``status`` (ok/failed/skipped/timeout), ``reason``,
``rank``/``world_size``, ``metrics`` (unit and direction per metric),
``spread`` (robust relative sigma of each metric's timed samples of every run, or of the runs where
a run has no samples) and ``noise`` (how uncertain the figure is: the samples' pull on the mean or their
standard error, the larger; :mod:`sb_bench.core.samples`)
and ``params``.
"""

from __future__ import annotations

import datetime as _dt
import enum
import json
import math
import os
from pathlib import Path
from typing import Any

from sb_bench.core.samples import figure_noise, robust_spread

SCHEMA_VERSION = 1


class ReturnCode(enum.IntEnum):
    """Return codes; the low ones are SuperBench's, the timeout/kill ones follow coreutils' timeout."""

    SUCCESS = 0
    INVALID_ARGUMENT = 1
    INVALID_BENCHMARK_TYPE = 2
    INVALID_BENCHMARK_RESULT = 3  # includes a failed correctness check: fast but wrong
    RUNTIME_EXCEPTION_ERROR = 4
    OUT_OF_MEMORY = 5
    DISTRIBUTED_SETTING_INIT_FAILURE = 6
    NO_RESULT = 7  # the process ended without writing a result
    TIMEOUT = 124
    KILLED = 137


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def envelope(
    name: str,
    kind: str,
    *,
    return_code: int,
    status: str,
    reason: str = "",
    run_count: int = 0,
    start_time: str | None = None,
    end_time: str | None = None,
    raw_data: dict[str, list] | None = None,
    result: dict[str, list] | None = None,
    reduce_op: dict[str, str | None] | None = None,
    metrics: dict[str, dict] | None = None,
    rank: int = 0,
    world_size: int = 1,
    params: dict[str, Any] | None = None,
) -> dict:
    result = dict(result or {})
    result["return_code"] = [int(return_code)]
    reduce_op = dict(reduce_op or {})
    reduce_op.setdefault("return_code", None)
    spread: dict[str, float] = {}
    noise: dict[str, float] = {}
    for key, values in result.items():
        if key == "return_code":
            continue
        # The timed samples of every run pooled (sb_bench.core.samples); the run values where none.
        runs = (raw_data or {}).get(key)
        pooled = [x for run in runs if isinstance(run, list) for x in run] if isinstance(runs, list) else []
        if len(pooled) < 2:
            pooled = list(values)
        s = robust_spread(pooled)
        if s is not None:
            spread[key] = round(s, 6)
        f = figure_noise(pooled)
        if f is not None:
            noise[key] = round(f, 6)
    return {
        "schema_version": SCHEMA_VERSION,
        "name": name,
        "type": kind,
        "run_count": run_count,
        "return_code": int(return_code),
        "status": status,
        "reason": reason,
        "start_time": start_time or now_iso(),
        "end_time": end_time or now_iso(),
        "rank": rank,
        "world_size": world_size,
        "raw_data": raw_data or {},
        "result": result,
        "reduce_op": reduce_op,
        "metrics": metrics or {},
        "spread": spread,
        "noise": noise,
        "params": params or {},
    }


def failure(
    name: str,
    kind: str,
    code: int,
    reason: str,
    *,
    rank: int = 0,
    world_size: int = 1,
    status: str = "failed",
    start_time: str | None = None,
    params: dict | None = None,
) -> dict:
    """A result file for a benchmark that produced no numbers: failed, timed out, killed or skipped."""
    return envelope(
        name,
        kind,
        return_code=code,
        status=status,
        reason=reason,
        rank=rank,
        world_size=world_size,
        start_time=start_time,
        params=params,
    )


def _json_safe(obj: Any) -> Any:
    # NaN/inf are not JSON; a benchmark that measured one is already a failure, keep the file valid.
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def _temp_beside(path: Path) -> tuple[int, str]:
    """A new file ``.<name>.<random>.tmp`` beside ``path``, created exclusively, mode 0600: what
    ``tempfile.mkstemp`` gives, without importing tempfile (with random and shutil, ~6 ms of every rank's
    start)."""
    for _ in range(100):
        tmp = str(path.parent / f".{path.name}.{os.urandom(6).hex()}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {path}")


def write_result(path: str | os.PathLike, env: dict) -> Path:
    """Write an envelope atomically (temp file, fsync, rename)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.dumps(_json_safe(env), indent=1, allow_nan=False).encode()
    fd, tmp = _temp_beside(path)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def rank_file(out_dir: str | os.PathLike, rank: int) -> Path:
    return Path(out_dir) / f"rank{rank}.json"
