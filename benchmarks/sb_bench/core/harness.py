"""The harness every benchmark runs under.

It owns parameter validation, warm-up, the timed loop, repetition, rank
bookkeeping and the result envelope, and turns every way a benchmark can go
wrong into a result file with a return code and a reason: an exception, an
out-of-memory error, a failed correctness check, a skip. A benchmark never
ends without a result file; the runner covers the cases the process itself
cannot (killed at its timeout, crashed hard).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from sb_bench.core import energy, registry, samples
from sb_bench.core.benchmark import Benchmark, Case, CheckFailed, SkipBenchmark
from sb_bench.core.context import RankContext, clean_benchmark_env
from sb_bench.core.result import ReturnCode, envelope, failure, now_iso


class Harness:
    def __init__(self, args: Mapping[str, Any]):
        self.num_warmup = int(args["num_warmup"])
        self.num_steps = int(args["num_steps"])
        self.duration = float(args["duration"])
        # Energy over each timed window (sb_bench.core.energy): the figures that get an efficiency,
        # the meter, and per case the reading (or why there is none).
        self.figures: set[str] = set()
        self.meter: energy.Meter = energy.NoMeter("")
        self.energy: dict[str, dict] = {}
        # This run's timed samples per metric, and the last case's samples in seconds per step.
        self.samples: dict[str, list[float]] = {}
        self.last_laps: list[float] = []
        # How windows were timed, for the result's reason (a window re-timed after a stall).
        self.notes: list[str] = []

    def with_steps(self, steps: int) -> Harness:
        """A harness that times exactly ``steps`` steps without warm-up, measuring energy like this one."""
        h = Harness({"num_warmup": 0, "num_steps": steps, "duration": 0.0})
        h.figures, h.meter, h.energy = self.figures, self.meter, self.energy
        h.samples, h.notes = self.samples, self.notes
        return h

    def measure(
        self, key: str, figures: dict[str, float], reading: energy.Reading | None
    ) -> dict[str, float]:
        """The efficiency and power values of ``figures`` (those declared) over ``reading``, recorded under
        ``key`` in the result's ``energy`` section; none without a reading."""
        wanted = {f: v for f, v in figures.items() if f in self.figures}
        if not wanted:
            return {}
        if reading is not None:
            self.energy[key] = reading.to_json()
        out: dict[str, float] = {}
        for f, v in wanted.items():
            out.update(energy.figure_values(f, v, reading))
        return out

    def energy_window(self) -> energy.Meter:
        """The meter to read around a window whose figures get an efficiency (a NoMeter when none do);
        ``start()`` it just before the window and end it with :meth:`end_window`."""
        return self.meter if self.figures else energy.NoMeter("")

    def end_window(self, meter: energy.Meter, key: str) -> energy.Reading | None:
        """Stop ``meter``: its reading, or None (a counter that failed is recorded under ``key``)."""
        try:
            return meter.stop()
        except energy.EnergyUnavailable as exc:
            self.energy[key] = {"error": str(exc)}
            return None

    def time_case(self, ctx: RankContext, case: Case) -> dict[str, float]:
        """Warm up, time ``case.step``, check it, and return its metric values."""
        step = case.step
        for _ in range(self.num_warmup):
            step()
        reading: energy.Reading | None = None

        def window() -> list[tuple[float, int]]:
            nonlocal reading
            meter = self.energy_window()
            meter.start()
            try:
                if self.duration > 0:
                    return self._time_for_duration(ctx, step)
                return self._time_steps(ctx, step, self.num_steps)
            finally:
                reading = self.end_window(meter, case.key)

        laps = self.timed_window(ctx, case.key, window)
        if case.check is not None:
            err = case.check()
            if err:
                raise CheckFailed(f"{case.key}: {err}")
        seconds = sum(s for s, _ in laps)
        steps = sum(n for _, n in laps)
        per_step = seconds / steps if steps else 0.0
        if not per_step > 0:
            raise CheckFailed(f"{case.key}: measured a non-positive time ({per_step!r} s per step)")
        values = case.metrics(per_step)
        self.last_laps = samples.merge_laps(laps)
        self.record_samples(case.metrics, self.last_laps)
        return {**values, **self.measure(case.key, values, reading)}

    def timed_window(
        self, ctx: RankContext, key: str, window: Callable[[], list[tuple[float, int]]]
    ) -> list[tuple[float, int]]:
        """The laps of ``window()`` (one timed window, no warm-up), timed again while one stalled lap
        dominates it (:func:`samples.stalled_lap`), at most :data:`samples.MAX_RETRIES` more times, where
        the window's pace-time is at most :data:`samples.RETRY_WINDOW_SECONDS` and this rank times alone
        (ranks timing a collective together must run the same windows). A re-timing is noted for the
        result's reason; the laps kept are the last window's. A benchmark with its own timed loop calls
        this too."""
        laps = window()
        stall = samples.stalled_lap(laps)
        if stall is None or not self._may_retime(ctx, laps):
            return laps
        first, tries = stall, 0
        while stall is not None and tries < samples.MAX_RETRIES:
            tries += 1
            laps = window()
            stall = samples.stalled_lap(laps)
        if stall is None:
            self.notes.append(f"{key}: re-timed {tries}x, {first.describe()}")
        else:
            self.notes.append(
                f"{key}: a lap stalled in each of {tries + 1} windows; the last is reported, "
                f"its stall one outlying sample ({stall.describe()})"
            )
        return laps

    @staticmethod
    def _may_retime(ctx: RankContext, laps: list[tuple[float, int]]) -> bool:
        if ctx.world_size > 1 or ctx.distributed or ctx.group is not None:
            return False
        p = samples.pace(laps)
        return p is not None and p * sum(n for _, n in laps) <= samples.RETRY_WINDOW_SECONDS

    def record_samples(self, metrics: Any, per_step: list[float]) -> None:
        """Keep this run's samples: ``metrics(seconds per step)`` of each sample (see
        :mod:`sb_bench.core.samples`). A benchmark with its own timed loop calls this too."""
        for sec in per_step:
            if not sec > 0:
                continue
            for k, v in metrics(sec).items():
                if isinstance(v, (int, float)) and math.isfinite(v):
                    self.samples.setdefault(k, []).append(float(v))

    def take_samples(self) -> dict[str, list[float]]:
        """This run's samples per metric (at most MAX_SAMPLES each), and start the next run's."""
        out = {k: samples.thin(v) for k, v in self.samples.items()}
        self.samples = {}
        return out

    def _time_steps(self, ctx: RankContext, step: Any, steps: int) -> list[tuple[float, int]]:
        # A clock (or CUDA event) reading every few steps, at most MAX_LAPS in the loop.
        every = samples.lap_every(steps)
        with ctx.lap_timer() as laps:
            done = 0
            while done < steps:
                n = min(every, steps - done)
                for _ in range(n):
                    step()
                done += n
                laps.mark(n)
        return laps.laps

    def _time_for_duration(self, ctx: RankContext, step: Any) -> list[tuple[float, int]]:
        # Time in chunks that double, so the clock is read rarely and the loop stays tight.
        laps: list[tuple[float, int]] = []
        chunk = 1
        deadline = time.monotonic() + self.duration
        while True:
            with ctx.timer() as t:
                for _ in range(chunk):
                    step()
            laps.append((t.seconds, chunk))
            if time.monotonic() >= deadline:
                return laps
            chunk = min(chunk * 2, 1 << 16)


def _is_oom(exc: BaseException) -> bool:
    name = type(exc).__name__
    return name == "OutOfMemoryError" or isinstance(exc, MemoryError) or "out of memory" in str(exc).lower()


def run_benchmark(name: str, given: Mapping[str, Any] | None = None, ctx: RankContext | None = None) -> dict:
    """Run one benchmark on this rank and return its result envelope (never raises for benchmark faults)."""
    start = now_iso()
    cleaned = clean_benchmark_env(os.environ)
    rank = int(os.environ.get("RANK", os.environ.get("PROC_RANK", "0")) or 0)
    world = int(os.environ.get("WORLD_SIZE", "1") or 1)
    try:
        cls = registry.get(name)
    except KeyError as exc:
        return failure(
            name,
            "micro",
            ReturnCode.INVALID_BENCHMARK_TYPE,
            str(exc).strip("'\""),
            rank=rank,
            world_size=world,
            start_time=start,
        )
    except Exception as exc:  # the module failed to import: a broken host environment
        return failure(
            name,
            "micro",
            ReturnCode.RUNTIME_EXCEPTION_ERROR,
            f"cannot import benchmark module: {type(exc).__name__}: {exc}",
            rank=rank,
            world_size=world,
            start_time=start,
        )
    try:
        args = cls.parse_params(dict(given or {}))
    except ValueError as exc:
        return failure(
            name,
            cls.kind,
            ReturnCode.INVALID_ARGUMENT,
            str(exc),
            rank=rank,
            world_size=world,
            start_time=start,
            params=dict(given or {}),
        )
    # System health alongside (SB_MONITOR_INTERVAL seconds; off by default): the summary goes into
    # the result, failed or not — an XID or a power cap explains a slow or failed run.
    from sb_bench.host import monitor

    mon = None
    try:
        mon = monitor.from_env(ngpus=int(args.get("ngpus", 1) or 1))
        if mon is not None:
            mon.start()
    except Exception:
        mon = None
    try:
        env = _run(cls, args, ctx, start)
    finally:
        if mon is not None:
            mon.stop()
    if mon is not None:
        env["monitor"] = mon.summary()
    if cleaned:
        env["environment_cleared"] = sorted(cleaned)
    return env


def _run(cls: type[Benchmark], args: dict[str, Any], ctx: RankContext | None, start: str) -> dict:
    own_ctx = ctx is None
    bench = cls(args)
    rank = ctx.rank if ctx else int(os.environ.get("RANK", os.environ.get("PROC_RANK", "0")) or 0)
    world = ctx.world_size if ctx else int(os.environ.get("WORLD_SIZE", "1") or 1)

    def fail(code: int, reason: str, status: str = "failed") -> dict:
        return failure(
            cls.name,
            cls.kind,
            code,
            reason,
            rank=rank,
            world_size=world,
            status=status,
            start_time=start,
            params=args,
        )

    try:
        if ctx is None:
            ctx = RankContext.from_env(args["device"])
        if ctx.world_size > 1 or cls.needs_distributed:
            try:
                ctx.init_distributed()
            except Exception as exc:
                return fail(
                    ReturnCode.DISTRIBUTED_SETTING_INIT_FAILURE,
                    f"{'rank group' if ctx.uses_host_group else 'torch.distributed'} init failed: {exc}",
                )
        metrics = bench.metrics()
        harness = Harness(args)
        harness.figures = {m.energy_of for m in metrics if m.energy_of}
        if harness.figures:
            try:
                harness.meter = energy.meter_for(ctx.device, ctx.local_world_size)
            except Exception as exc:  # noqa: BLE001 - an odd sysfs or driver costs the efficiency, not the run
                harness.meter = energy.NoMeter(f"{energy.NO_COUNTER}: {type(exc).__name__}: {exc}")
        bench.setup(ctx)
        raw: dict[str, list[float]] = {m.name: [] for m in metrics}
        runs_samples: list[dict[str, list[float]]] = []
        try:
            for _ in range(args["run_count"]):
                values = bench.run_once(ctx, harness)
                for key, value in values.items():
                    if not isinstance(value, (int, float)) or not math.isfinite(value):
                        raise CheckFailed(f"metric {key} is not a finite number ({value!r})")
                    raw.setdefault(key, []).append(float(value))
                runs_samples.append(harness.take_samples())
        finally:
            bench.teardown(ctx)
            harness.meter.close()
        _energy_reasons(bench, metrics, harness, raw)
    except SkipBenchmark as exc:
        return fail(ReturnCode.SUCCESS, str(exc), status="skipped")
    except CheckFailed as exc:
        return fail(ReturnCode.INVALID_BENCHMARK_RESULT, f"result check failed: {exc}")
    except BaseException as exc:  # noqa: BLE001 - every fault becomes a result file
        if isinstance(exc, KeyboardInterrupt):
            return fail(ReturnCode.KILLED, "interrupted")
        if _is_oom(exc):
            return fail(
                ReturnCode.OUT_OF_MEMORY,
                f"out of memory: {(str(exc).splitlines() or [type(exc).__name__])[0][:300]}",
            )
        import traceback  # here: ~7 ms of imports a rank that succeeds never needs

        tb = traceback.extract_tb(exc.__traceback__)
        where = f" at {tb[-1].filename.rsplit('/', 1)[-1]}:{tb[-1].lineno}" if tb else ""
        return fail(ReturnCode.RUNTIME_EXCEPTION_ERROR, f"{type(exc).__name__}: {exc}{where}")
    finally:
        if own_ctx and ctx is not None:
            try:
                ctx.close()
            except Exception:
                pass

    declared = {m.name: m for m in metrics}
    failed: dict[str, str] = getattr(bench, "failed", {})
    missing = [m for m in declared if not raw.get(m) and m not in failed]
    # A declared metric a run did not produce is dropped, not invented; one measured wrong too.
    # The efficiency and power of a figure measured wrong go with it.
    failed.update({k: failed[m.energy_of] for k, m in declared.items() if m.energy_of in failed})
    result = {k: v for k, v in raw.items() if v and k not in failed}
    skipped: dict[str, str] = getattr(bench, "skipped", {})
    reason = _missing_reason(missing, skipped)
    if failed:
        reason = "; ".join([f"result check failed: {_failed_reason(failed)}", reason]).rstrip("; ")
    # Notes a benchmark leaves about how it measured (e.g. an algorithm it fell back to), and the
    # harness's (a window re-timed after a stall).
    notes = getattr(bench, "notes", None) or {}
    said = [*(notes.values() if isinstance(notes, dict) else notes), *dict.fromkeys(harness.notes)]
    if said:
        reason = "; ".join([reason, *said]).lstrip("; ")
    if not result and skipped and not failed:
        return fail(ReturnCode.SUCCESS, reason, status="skipped")
    env = envelope(
        cls.name,
        cls.kind,
        return_code=ReturnCode.INVALID_BENCHMARK_RESULT if failed else ReturnCode.SUCCESS,
        status="failed" if failed else "ok",
        reason=reason,
        run_count=args["run_count"],
        start_time=start,
        raw_data=_raw_data(result, runs_samples),
        result=result,
        reduce_op={k: (declared[k].reduce if k in declared else None) for k in result},
        metrics={k: declared[k].to_json() for k in result if k in declared},
        rank=ctx.rank,
        world_size=ctx.world_size,
        params=args,
    )
    if harness.figures:
        env["energy"] = {
            "source": harness.meter.source or None,
            "reason": harness.meter.reason or None,
            "windows": harness.energy,
        }
    # A benchmark's own record of how the run went (e.g. gpu-burn's per-window series).
    details = getattr(bench, "details", None)
    if details:
        env["details"] = details
    return env


def _raw_data(result: Mapping[str, list[float]], runs: list[dict[str, list[float]]]) -> dict[str, list]:
    """SuperBench's ``raw_data``: per metric, one list per run, of the run's timed samples (its one
    value where the run has no samples of the metric)."""
    out: dict[str, list] = {}
    for k, values in result.items():
        out[k] = [(runs[i].get(k) if i < len(runs) else None) or [v] for i, v in enumerate(values)]
    return out


def _energy_reasons(bench: Benchmark, metrics: list, harness: Harness, raw: dict[str, list[float]]) -> None:
    """Why each declared efficiency or power metric has no value: its figure's own skip, or the meter's."""
    skipped: dict[str, str] = getattr(bench, "skipped", {})
    errors = sorted({w["error"] for w in harness.energy.values() if "error" in w})
    for m in metrics:
        if not m.energy_of or raw.get(m.name) or m.name in skipped:
            continue
        if m.energy_of in skipped:
            why = skipped[m.energy_of]
        elif harness.meter.reason:
            why = harness.meter.reason
        elif errors:
            why = f"energy counter failed: {errors[0]}"
        elif not raw.get(m.energy_of):
            continue  # the figure itself is missing: reported for it
        else:
            why = f"{energy.NO_COUNTER} reading for this window"
        bench.skip_metric(m.name, why)


def _failed_reason(failed: Mapping[str, str]) -> str:
    """``<reason> (metrics a, b)`` per distinct reason, in the order they were recorded."""
    by_reason: dict[str, list[str]] = {}
    for m, why in failed.items():
        by_reason.setdefault(why, []).append(m)
    return "; ".join(f"{why} (metrics {', '.join(ms)})" for why, ms in by_reason.items())


def _missing_reason(missing: list[str], skipped: Mapping[str, str]) -> str:
    """``not measured: a, b; skipped c, d: <why>`` — metrics that share a reason are listed together."""
    by_reason: dict[str, list[str]] = {}
    plain = []
    for m in missing:
        if m in skipped:
            by_reason.setdefault(skipped[m], []).append(m)
        else:
            plain.append(m)
    parts = [f"not measured: {', '.join(plain)}"] if plain else []
    parts += [f"skipped {', '.join(ms)}: {why}" for why, ms in by_reason.items()]
    return "; ".join(parts)
