"""gpu-burn: sustained GEMM load with result checks, and how each GPU held up over time.

The equivalent of gpu-burn (which SuperBench wraps) through torch: for ``duration`` seconds the GPU
multiplies the same two ``m x m`` matrices back to back, in windows of ``window`` seconds. The first
product is checked against float64 arithmetic (gemm-flops' check: column checksums over the whole
matrix and sampled entries); every later window's last product must equal that first product
(same inputs, same kernel: a healthy GPU gives the same bits; a marginal one flips some under heat),
compared entry by entry with a tolerance of ``rtol`` x the largest entry.

Per window the benchmark records the GEMM rate and, through NVML where nvidia-ml-py and a driver
answer, the SM clock, temperature, power and the clock-slowdown reasons (thermal, power cap, HW
slowdown). The series is in the result's ``details``; the metrics (per GPU) are:

* ``burn_gflops``: mean rate over the run; ``burn_gflops_min``: the slowest window's;
* ``burn_rate_drop``: % by which the slowest window trails the fastest (heat soak, throttling);
* ``burn_errors``: wrong entries summed over the windows (0 on a healthy GPU);
* ``burn_throttled_windows``: windows in which NVML reported a slowdown reason;
* ``burn_max_temperature`` (C) and ``burn_min_sm_clock`` (MHz) where NVML answers.

Any wrong entry fails the result (return code 3) with the windows it happened in; the figures stay.
On a CPU the same loop runs (small matrices by default) without NVML.
"""

from __future__ import annotations

import time
from typing import Any

from sb_bench.core.benchmark import Benchmark, SkipBenchmark
from sb_bench.core.context import RankContext
from sb_bench.core.energy import energy_metrics
from sb_bench.core.metric import Metric, Param
from sb_bench.core.registry import register
from sb_bench.micro.tf32_probe import fp32_gemm_runs_as_tf32

DTYPES = {"fp32": "float32", "tf32": "float32", "fp16": "float16", "bf16": "bfloat16", "fp64": "float64"}
RTOL = {"fp32": 1e-4, "tf32": 5e-3, "fp16": 2e-2, "bf16": 5e-2, "fp64": 1e-9}


def count_mismatches(got: Any, ref: Any, rtol: float) -> int:
    """Entries of ``got`` off ``ref`` by more than ``rtol`` x max |ref| (NaN counts as wrong)."""
    import torch

    scale = float(ref.abs().max()) or 1.0
    diff = (got.to(torch.float32) - ref.to(torch.float32)).abs()
    return int((~(diff <= rtol * scale)).sum())


def summarize_windows(windows: list[dict]) -> dict[str, float]:
    """The metrics from the per-window records (pure: unit-tested without a GPU)."""
    rates = [w["gflops"] for w in windows]
    out = {
        "burn_gflops": sum(rates) / len(rates),
        "burn_gflops_min": min(rates),
        "burn_rate_drop": 100.0 * (max(rates) - min(rates)) / max(rates) if max(rates) > 0 else 0.0,
        "burn_errors": float(sum(w["errors"] for w in windows)),
        "burn_throttled_windows": float(sum(1 for w in windows if w.get("slowdown"))),
    }
    temps = [w["temperature"] for w in windows if w.get("temperature") is not None]
    clocks = [w["sm_clock"] for w in windows if w.get("sm_clock") is not None]
    if temps:
        out["burn_max_temperature"] = max(temps)
    if clocks:
        out["burn_min_sm_clock"] = min(clocks)
    return out


@register
class GpuBurn(Benchmark):
    name = "gpu-burn"
    description = (
        "sustained GEMM load with every window's result checked; rate, errors, throttling and "
        "temperature per GPU over time"
    )
    params = {
        "duration": Param("float", 0.0, "seconds of load (0: 60 on a GPU, 4 on a CPU)"),
        "window": Param("float", 0.0, "seconds per checked window (0: duration / 10, at least 1 s on GPUs)"),
        "precision": Param("str", "bf16", "GEMM precision", tuple(DTYPES)),
        "m": Param("int", 0, "matrix size (0: 8192 on a GPU, 256 on a CPU)"),
    }

    def metrics(self) -> list[Metric]:
        return [
            burn := Metric("burn_gflops", "GFLOPS", True, None, "mean GEMM rate under sustained load"),
            *energy_metrics(burn),  # burn_gflops_per_watt, burn_power: over the whole load (docs/energy.md)
            Metric("burn_gflops_min", "GFLOPS", True, None, "the slowest window's GEMM rate"),
            Metric("burn_rate_drop", "%", False, None, "slowest window's rate below the fastest's"),
            Metric("burn_errors", "count", False, None, "wrong product entries over all windows"),
            Metric("burn_throttled_windows", "count", False, None, "windows with an NVML slowdown reason"),
            Metric("burn_max_temperature", "C", False, None, "hottest GPU temperature seen (NVML)"),
            Metric("burn_min_sm_clock", "MHz", True, None, "lowest SM clock seen (NVML)"),
        ]

    def setup(self, ctx: RankContext) -> None:
        import torch

        from sb_bench.micro.gemm_flops import check_product

        prec = self.args["precision"]
        if prec in ("bf16", "tf32") and ctx.is_cuda and torch.cuda.get_device_capability(ctx.device) < (8, 0):
            raise SkipBenchmark(f"{prec} needs sm_80 or newer")
        m = self.args["m"] or (8192 if ctx.is_cuda else 256)
        self.m = m
        self.duration = self.args["duration"] or (60.0 if ctx.is_cuda else 4.0)
        self.window = self.args["window"] or max(1.0 if ctx.is_cuda else 0.2, self.duration / 10)
        dtype = getattr(torch, DTYPES[prec])
        gen = torch.Generator(device="cpu").manual_seed(4242)
        self.a = torch.randn(m, m, generator=gen).to(ctx.device, dtype)
        self.b = torch.randn(m, m, generator=gen).to(ctx.device, dtype)
        self.c = torch.empty(m, m, device=ctx.device, dtype=dtype)
        if ctx.is_cuda:
            self._tf32 = torch.backends.cuda.matmul.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
        if prec == "fp32":
            why = fp32_gemm_runs_as_tf32(ctx, m, m, m, "gpu-burn fp32")
            if why:
                raise SkipBenchmark(why)
        torch.matmul(self.a, self.b, out=self.c)
        ctx.sync()
        err = check_product(self.a, self.b, self.c, 64, RTOL[prec])
        if err:
            self.fail_metric("burn_errors", f"the first product is wrong: {err}")
        self.ref = self.c.clone()
        self.nvml = _nvml_for(ctx)
        if self.nvml is None:
            self.skip_metric(
                ["burn_max_temperature", "burn_min_sm_clock"],
                "no NVML here (nvidia-ml-py and an NVIDIA driver)",
            )

    def teardown(self, ctx: RankContext) -> None:
        if ctx.is_cuda and hasattr(self, "_tf32"):
            import torch

            torch.backends.cuda.matmul.allow_tf32 = self._tf32
        if getattr(self, "nvml", None) is not None:
            self.nvml.close()
        self.a = self.b = self.c = self.ref = None  # type: ignore[assignment]

    def run_once(self, ctx: RankContext, harness) -> dict[str, float]:
        import torch

        a, b, c = self.a, self.b, self.c
        ops = 2.0 * self.m**3
        rtol = RTOL[self.args["precision"]]
        windows: list[dict] = []
        # Estimate the GEMM time (after one untimed GEMM), then run windows of whole GEMM batches.
        torch.matmul(a, b, out=c)
        with ctx.timer() as t:
            for _ in range(3):
                torch.matmul(a, b, out=c)
        per = max(t.seconds / 3, 1e-6)
        batch = max(1, int(self.window / per))
        deadline = time.monotonic() + self.duration
        start = time.monotonic()
        meter = harness.energy_window()
        meter.start()
        while True:
            with ctx.timer() as t:
                for _ in range(batch):
                    torch.matmul(a, b, out=c)
            w: dict[str, Any] = {
                "t": round(time.monotonic() - start, 3),
                "gflops": ops * batch / t.seconds / 1e9,
                "errors": count_mismatches(c, self.ref, rtol),
            }
            if self.nvml is not None:
                w.update(_nvml_window(self.nvml))
            windows.append(w)
            if time.monotonic() >= deadline:
                break
            # Re-aim the next window from this one's GEMM time (clocks and load change).
            batch = max(1, int(self.window / (t.seconds / batch)))
        reading = harness.end_window(meter, "burn")
        self.details = {"windows": windows, "m": self.m, "precision": self.args["precision"]}
        bad = [w["t"] for w in windows if w["errors"]]
        if bad:
            self.fail_metric(
                "burn_errors",
                f"wrong GEMM results in {len(bad)} of {len(windows)} windows (at {bad[:5]} s): "
                "the GPU computes wrongly under sustained load",
            )
        values = summarize_windows(windows)
        values.update(harness.measure("burn", {"burn_gflops": values["burn_gflops"]}, reading))
        if self.nvml is None:
            values.pop("burn_max_temperature", None)
            values.pop("burn_min_sm_clock", None)
        return values


def _nvml_for(ctx: RankContext) -> Any:
    if not ctx.is_cuda:
        return None
    try:
        from sb_bench.host.monitor import NvmlSource, gpus_for_this_rank

        return NvmlSource(gpus_for_this_rank() or [str(ctx.device.index or 0)])
    except Exception:
        return None


def _nvml_window(src: Any) -> dict[str, Any]:
    from sb_bench.host.monitor import SLOWDOWN

    sample: dict[str, Any] = next(iter(src.sample().values()), {})
    return {
        "temperature": sample.get("gpu_temperature"),
        "sm_clock": sample.get("gpu_sm_clock"),
        "power": sample.get("gpu_power"),
        "slowdown": sorted(set(sample.get("gpu_throttle_reasons") or []) & SLOWDOWN),
    }


if __name__ == "__main__":
    import sys

    from sb_bench.__main__ import standalone_main

    sys.exit(standalone_main(GpuBurn.name))
