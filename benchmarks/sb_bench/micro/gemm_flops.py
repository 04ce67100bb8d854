"""gemm-flops: matrix-multiply throughput per precision, every product checked for correctness.

Metrics (SuperBench's names, GFLOPS; int8 in GIOPS), one per GPU (``:<rank>``):
``fp64_flops``, ``fp32_flops``, ``fp16_flops`` (CUDA cores / vector units), ``fp64_tc_flops``,
``tf32_tc_flops``, ``fp16_tc_flops``, ``bf16_tc_flops``, ``int8_tc_iops``, ``fp8e4m3_tc_flops``
(tensor cores), and ``<precision>_efficiency`` (%) against the device's dense peak.

Work counted (GPU and CPU alike): one GEMM ``C[m,n] = A[m,k] @ B[k,n]`` is 2·m·n·k
operations (a multiply and an add per inner-product term); rate = 2·m·n·k / seconds per GEMM.
Timing: CUDA events around back-to-back GEMMs after warm-up (a clock on CPUs); the window lasts at
least ``min_time`` (2 s) — more steps than ``num_steps`` where a GEMM is fast — so the clocks have
ramped up (SuperBench's cutlass profiler also times for seconds) and, on a CPU, one scheduler slice
lost to another process (a few ms) cannot make the figure: a window of ``num_steps`` small GEMMs can
be shorter than one slice, and then a healthy host reads 7x slow with no samples to say how noisy it
was. ``duration > 0`` times for that long instead.
An efficiency above 105% of the device's peak fails that precision as a measurement error.

How each precision is produced through torch (cuBLAS / hipBLAS(Lt) on GPUs):

* ``fp32``: float32 with ``allow_tf32 = False`` (SGEMM on CUDA cores); a probe at the same shape
  that TF32 gets wrong (:mod:`sb_bench.micro.tf32_probe`) must come out exact, else fp32 is skipped
  with the reason (the harness also clears ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE`` for the process);
* ``tf32_tc``: float32 with ``torch.backends.cuda.matmul.allow_tf32 = True`` (compute capability >= 8.0);
* ``fp16_tc`` / ``bf16_tc``: float16 / bfloat16 (cuBLAS runs these on tensor cores);
* ``fp16``: measured only where there are no tensor cores (CPUs, GPUs before sm_70): cuBLAS
  always uses them for half GEMMs, and a CUDA-core half rate needs a non-tensor-core kernel;
* ``fp64`` / ``fp64_tc``: float64. On GPUs with FP64 tensor cores (sm_80, sm_90, sm_100, AMD
  MI200/MI300 matrix cores) DGEMM runs on them and is reported as ``fp64_tc``; ``fp64`` is then
  not separately measurable and is skipped with that reason (and the other way round elsewhere);
* ``int8_tc``: ``torch._int_mm`` (int8 x int8 -> int32) on CUDA, B K-major (cuBLASLt's fast
  "TN" layout); needs m > 16 and n, k multiples of 8, else int8 is skipped with that reason;
* ``fp8e4m3_tc``: ``torch._scaled_mm`` on float8_e4m3fn inputs, bfloat16 output, fast
  accumulation (``use_fast_accum=True``, as SuperBench's cublasLt GEMM) (sm_89+); m, n, k must
  be multiples of 16, else fp8 is skipped with that reason.

On a CPU, the tensor-core variants are skipped with the reason (a CPU has no tensor cores:
the name would lie), and fp64/fp32/fp16 measure the vector units.

Correctness (a fast but wrong GPU fails the benchmark, return code 3): after timing, the last
product is checked against float64 (int8: exact int64) arithmetic on the *same* inputs:

1. every entry is finite;
2. column checksums over the whole matrix (ABFT): ``sum_i C[i,j]`` against
   ``(sum_i A[i,:]) · B[:,j]``, for every column, tolerance ``rtol · sum_i,l |A_il||B_lj|`` —
   catches a large corruption anywhere (exponent bit flips, garbage or zeroed tiles);
3. ``check_samples`` sampled entries against their own float64 inner products, tolerance
   ``rtol · sum_l |A_il||B_lj|`` — catches smaller errors where sampled.

``rtol`` per precision is in :data:`PRECISIONS` (int8: exact).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from sb_bench.core.benchmark import Benchmark, Case
from sb_bench.core.context import RankContext
from sb_bench.core.energy import energy_metrics
from sb_bench.core.harness import Harness
from sb_bench.core.metric import Metric, Param
from sb_bench.core.registry import register
from sb_bench.micro.tf32_probe import runs_as_tf32


@dataclass(frozen=True)
class Precision:
    metric: str  # SuperBench's metric name
    dtype: str  # torch dtype name of the inputs
    rtol: float  # tolerance of the check, relative to sum |a||b| (0: exact)
    tensor_core: bool
    unit: str = "GFLOPS"


PRECISIONS: dict[str, Precision] = {
    "fp64": Precision("fp64_flops", "float64", 1e-9, False),
    "fp32": Precision("fp32_flops", "float32", 1e-4, False),
    "fp16": Precision("fp16_flops", "float16", 2e-2, False),
    "fp64_tc": Precision("fp64_tc_flops", "float64", 1e-9, True),
    "tf32_tc": Precision("tf32_tc_flops", "float32", 5e-3, True),
    "fp16_tc": Precision("fp16_tc_flops", "float16", 2e-2, True),
    "bf16_tc": Precision("bf16_tc_flops", "bfloat16", 5e-2, True),
    "int8_tc": Precision("int8_tc_iops", "int8", 0.0, True, "GIOPS"),
    "fp8e4m3_tc": Precision("fp8e4m3_tc_flops", "float8_e4m3fn", 2e-2, True),
}


def efficiency_name(prec: str) -> str:
    return f"{prec}_efficiency"


# Dense peak per device model, in TFLOPS (int8: TOPS), from the vendors' datasheets at boost
# clock; sparsity figures halved. First matching pattern (on torch.cuda.get_device_name) wins.
# A model not listed gets no efficiency: a guessed peak would make a wrong verdict.
PEAKS: list[tuple[str, str, dict[str, float]]] = [
    (
        "A100",
        r"\bA100\b",
        {
            "fp64": 9.7,
            "fp64_tc": 19.5,
            "fp32": 19.5,
            "fp16": 78.0,
            "tf32_tc": 156.0,
            "fp16_tc": 312.0,
            "bf16_tc": 312.0,
            "int8_tc": 624.0,
        },
    ),
    (
        "H100 NVL",
        r"\bH100\b.*\bNVL\b",
        {
            "fp64": 30.0,
            "fp64_tc": 60.0,
            "fp32": 60.0,
            "tf32_tc": 417.5,
            "fp16_tc": 835.5,
            "bf16_tc": 835.5,
            "int8_tc": 1670.5,
            "fp8e4m3_tc": 1670.5,
        },
    ),
    (
        "H200 NVL",
        r"\bH200\b.*\bNVL\b",
        {
            "fp64": 30.0,
            "fp64_tc": 60.0,
            "fp32": 60.0,
            "tf32_tc": 417.5,
            "fp16_tc": 835.5,
            "bf16_tc": 835.5,
            "int8_tc": 1670.5,
            "fp8e4m3_tc": 1670.5,
        },
    ),
    (
        "H100 PCIe",
        r"\bH100\b.*PCIe",
        {
            "fp64": 25.6,
            "fp64_tc": 51.2,
            "fp32": 51.2,
            "tf32_tc": 378.0,
            "fp16_tc": 756.0,
            "bf16_tc": 756.0,
            "int8_tc": 1513.0,
            "fp8e4m3_tc": 1513.0,
        },
    ),
    (
        "H100 SXM",
        r"\bH100\b",
        {
            "fp64": 34.0,
            "fp64_tc": 67.0,
            "fp32": 67.0,
            "tf32_tc": 494.7,
            "fp16_tc": 989.4,
            "bf16_tc": 989.4,
            "int8_tc": 1978.9,
            "fp8e4m3_tc": 1978.9,
        },
    ),
    (
        "H200",
        r"\bH200\b",
        {
            "fp64": 34.0,
            "fp64_tc": 67.0,
            "fp32": 67.0,
            "tf32_tc": 494.7,
            "fp16_tc": 989.4,
            "bf16_tc": 989.4,
            "int8_tc": 1978.9,
            "fp8e4m3_tc": 1978.9,
        },
    ),
    (
        "B200",
        r"\bB200\b",
        {
            "fp64": 37.0,
            "fp64_tc": 37.0,
            "tf32_tc": 1125.0,
            "fp16_tc": 2250.0,
            "bf16_tc": 2250.0,
            "int8_tc": 4500.0,
            "fp8e4m3_tc": 4500.0,
        },
    ),
    (
        "MI300X",
        r"\bMI300X\b",
        {
            "fp64": 81.7,
            "fp64_tc": 163.4,
            "fp32": 163.4,
            "tf32_tc": 653.7,
            "fp16_tc": 1307.4,
            "bf16_tc": 1307.4,
            "int8_tc": 2614.9,
            "fp8e4m3_tc": 2614.9,
        },
    ),
    ("V100 SXM2", r"\bV100\b.*SXM2", {"fp64": 7.8, "fp32": 15.7, "fp16_tc": 125.0}),
]


def peak_for(device_name: str) -> tuple[str, dict[str, float]] | None:
    """(model, {precision: TFLOPS}) for a device name, or None for a model not in :data:`PEAKS`."""
    for model, pattern, peaks in PEAKS:
        if re.search(pattern, device_name, re.IGNORECASE):
            return model, peaks
    return None


@dataclass(frozen=True)
class DeviceInfo:
    """What decides which precisions a device can measure."""

    kind: str  # "cpu" | "cuda" | "rocm"
    name: str = "cpu"
    capability: tuple[int, int] = (0, 0)

    @classmethod
    def of(cls, device: Any) -> DeviceInfo:
        import torch

        if device.type != "cuda":
            return cls("cpu")
        kind = "rocm" if getattr(torch.version, "hip", None) else "cuda"
        cap = torch.cuda.get_device_capability(device)
        return cls(kind, torch.cuda.get_device_name(device), (int(cap[0]), int(cap[1])))

    @property
    def fp64_tensor_cores(self) -> bool:
        if self.kind == "rocm":
            return bool(re.search(r"MI2\d\d|MI3\d\d", self.name))
        return self.kind == "cuda" and self.capability in ((8, 0), (9, 0), (10, 0))


def unsupported(prec: str, dev: DeviceInfo) -> str | None:
    """Why ``prec`` is not measured on ``dev`` (None: it is)."""
    spec = PRECISIONS[prec]
    if dev.kind == "cpu":
        return "a CPU has no tensor cores" if spec.tensor_core else None
    cc = dev.capability
    has_tc = dev.kind == "rocm" or cc >= (7, 0)
    if prec == "fp64":
        return (
            "DGEMM runs on this GPU's FP64 tensor cores: reported as fp64_tc_flops"
            if dev.fp64_tensor_cores
            else None
        )
    if prec == "fp64_tc":
        return None if dev.fp64_tensor_cores else f"{dev.name} has no FP64 tensor cores"
    if prec == "fp16":
        return (
            "cuBLAS runs half GEMMs on the tensor cores: a CUDA-core fp16 rate needs a non-tensor-core kernel"
            if has_tc
            else None
        )
    if prec == "fp16_tc":
        return None if has_tc else f"{dev.name} (sm_{cc[0]}{cc[1]}) has no tensor cores"
    if prec in ("tf32_tc", "bf16_tc"):
        return None if dev.kind == "rocm" or cc >= (8, 0) else f"{prec} needs sm_80 or newer"
    if prec == "int8_tc":
        return None if dev.kind == "rocm" or cc >= (7, 5) else "int8 tensor cores need sm_75 or newer"
    if prec == "fp8e4m3_tc":
        import torch

        if not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
            return f"this torch ({torch.__version__}) has no float8 GEMM"
        if dev.kind == "rocm":
            return None if "MI300" in dev.name else "fp8 GEMM needs an MI300-class GPU"
        return None if cc >= (8, 9) else "fp8 e4m3 tensor cores need sm_89 or newer"
    return None


# An efficiency above this (%) is a measurement error, not a fast GPU: a wrong peak-table row, fp32
# silently run as TF32, or a broken timer.
MAX_EFFICIENCY = 105.0


def shape_problem(prec: str, m: int, n: int, k: int) -> str | None:
    """Why torch's GEMM for ``prec`` refuses an m x n x k product on a GPU (None: it accepts it)."""
    if prec == "fp8e4m3_tc" and any(x % 16 for x in (m, n, k)):
        return f"torch._scaled_mm needs m, n and k multiples of 16 (got m={m}, n={n}, k={k})"
    if prec == "int8_tc" and (m <= 16 or n % 8 or k % 8):
        return f"torch._int_mm needs m > 16 and n, k multiples of 8 (got m={m}, n={n}, k={k})"
    return None


PROBES = 3  # probes of the step time before a min_time window (the fastest is taken)


def steps_for(seconds_per_step: float, min_time: float, num_steps: int) -> int:
    """Timed steps so the window lasts at least ``min_time`` seconds (and at least ``num_steps``)."""
    if seconds_per_step <= 0 or min_time <= 0:
        return num_steps
    return max(num_steps, math.ceil(min_time / seconds_per_step))


def _inputs(prec: str, m: int, n: int, k: int, device: Any):
    """A, B and an output buffer for one precision (deterministic data)."""
    import torch

    gen = torch.Generator(device="cpu").manual_seed(1234)
    if prec == "int8_tc":
        a = torch.randint(-8, 8, (m, k), generator=gen, dtype=torch.int8).to(device)
        # B as the transposed view of an (n, k) matrix (K-major): cuBLASLt's int8 tensor-core
        # kernels want the "TN" layout; a row-major B takes a slow path (~15x on an H100).
        b = torch.randint(-8, 8, (n, k), generator=gen, dtype=torch.int8).to(device).t()
        return a, b, torch.empty(m, n, device=device, dtype=torch.int32)
    if prec == "fp8e4m3_tc":
        f8 = torch.float8_e4m3fn
        a = torch.randn(m, k, generator=gen).to(device, f8)
        # _scaled_mm wants B column-major.
        b = torch.randn(n, k, generator=gen).to(device, f8).t()
        return a, b, None
    dtype = getattr(torch, PRECISIONS[prec].dtype)
    a = torch.randn(m, k, generator=gen).to(device, dtype)
    b = torch.randn(k, n, generator=gen).to(device, dtype)
    return a, b, torch.empty(m, n, device=device, dtype=dtype)


def make_step(prec: str, a, b, c):
    """One GEMM writing its product into a holder; returns (step, product getter)."""
    import torch

    if prec == "int8_tc":
        holder = [c]

        def step_int():
            holder[0] = torch._int_mm(a, b)

        return step_int, lambda: holder[0]
    if prec == "fp8e4m3_tc":
        one = torch.ones((), device=a.device, dtype=torch.float32)
        holder = [None]

        def step_f8():
            # Fast accumulation, as SuperBench's cublasLt fp8 GEMM runs (10-20% faster on Hopper).
            out = torch._scaled_mm(
                a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16, use_fast_accum=True
            )
            holder[0] = out[0] if isinstance(out, tuple) else out

        return step_f8, lambda: holder[0]

    def step_mm():
        torch.matmul(a, b, out=c)

    return step_mm, lambda: c


@register
class GemmFlops(Benchmark):
    name = "gemm-flops"
    description = (
        "GEMM throughput per precision incl. tensor cores (GFLOPS / GIOPS) and efficiency "
        "against the device's peak; every product checked against float64"
    )
    params = {
        "m": Param("int", 0, "rows of A and C (0: 8192 on a GPU, 1024 on a CPU)"),
        "n": Param("int", 0, "columns of B and C (0: like m)"),
        "k": Param("int", 0, "columns of A, rows of B (0: like m)"),
        "precision": Param("list[str]", list(PRECISIONS), "precisions to measure", tuple(PRECISIONS)),
        "check_samples": Param("int", 64, "output entries compared one by one with the float64 reference"),
        "min_time": Param(
            "float",
            2.0,
            "when duration is 0: time each precision for at least this many seconds (GPU clocks "
            "ramp up over the first ~100 ms, a CPU's scheduler slice is a few ms; num_steps of a "
            "fast GEMM is far shorter); 0: exactly num_steps",
        ),
    }

    def metrics(self) -> list[Metric]:
        out = []
        figures = [
            Metric(PRECISIONS[p].metric, PRECISIONS[p].unit, True, None, f"{p} GEMM throughput")
            for p in self.args["precision"]
        ]
        out += figures
        for p in self.args["precision"]:
            out.append(
                Metric(efficiency_name(p), "%", True, None, f"{p} throughput / the device's dense peak")
            )
        # <figure>_per_watt and <precision>_power over each precision's timed window (docs/energy.md).
        for f in figures:
            out += energy_metrics(f)
        return out

    def _sizes(self, ctx: RankContext) -> tuple[int, int, int]:
        m = self.args["m"] or (8192 if ctx.is_cuda else 1024)
        return m, self.args["n"] or m, self.args["k"] or m

    def setup(self, ctx: RankContext) -> None:
        import torch

        m, n, k = self._sizes(ctx)
        self._tf32 = torch.backends.cuda.matmul.allow_tf32 if ctx.is_cuda else None
        self.device_info = DeviceInfo.of(ctx.device)
        peak = peak_for(self.device_info.name) if self.device_info.kind != "cpu" else None
        self.peak = peak[1] if peak else {}
        for p in self.args["precision"]:
            why = unsupported(p, self.device_info)
            if not why and self.device_info.kind != "cpu":
                why = shape_problem(p, m, n, k)
            if why:
                self.skip_metric([PRECISIONS[p].metric, efficiency_name(p)], why)
            elif self.device_info.kind == "cpu":
                self.skip_metric(efficiency_name(p), "no peak table for CPUs")
            elif p not in self.peak:
                what = (
                    f"no {p} peak for {peak[0]}"
                    if peak
                    else f"{self.device_info.name} is not in the peak table"
                )
                self.skip_metric(efficiency_name(p), what)

    def teardown(self, ctx: RankContext) -> None:
        if self._tf32 is not None:
            import torch

            torch.backends.cuda.matmul.allow_tf32 = self._tf32

    def run_once(self, ctx: RankContext, harness: Harness) -> dict[str, float]:
        values: dict[str, float] = {}
        for case in self.cases(ctx):
            h = harness
            if harness.duration == 0 and self.args["min_time"] > 0:
                # Warm up, estimate the step time, then time a window of at least min_time seconds.
                # The estimate is the fastest of PROBES short probes: one probe stalled by the
                # scheduler (a lost slice on a loaded host) would read the step many times slower and
                # shrink the window to a few steps, too few samples to show the stall in the figure.
                for _ in range(max(harness.num_warmup, 1)):
                    case.step()
                probe = max(harness.num_warmup, 4)
                fastest = math.inf
                for _ in range(PROBES):
                    with ctx.timer() as t:
                        for _ in range(probe):
                            case.step()
                    fastest = min(fastest, t.seconds)
                steps = steps_for(fastest / probe, self.args["min_time"], harness.num_steps)
                h = harness.with_steps(steps)
            values.update(h.time_case(ctx, case))
        return values

    def cases(self, ctx: RankContext):
        import torch

        m, n, k = self._sizes(ctx)
        ops = 2.0 * m * n * k
        found = peak_for(self.device_info.name)
        model = found[0] if found else "device's"
        for prec in self.args["precision"]:
            if PRECISIONS[prec].metric in getattr(self, "skipped", {}):
                continue  # unsupported here, or a shape this precision's GEMM refuses (see setup)
            spec = PRECISIONS[prec]
            if ctx.is_cuda:
                # Set while this case is timed; cases are generated one at a time.
                torch.backends.cuda.matmul.allow_tf32 = prec == "tf32_tc"
            if ctx.is_cuda and prec == "fp32":
                tf32 = runs_as_tf32(torch.matmul, m, n, k, ctx.device)
                if tf32:
                    self.skip_metric(
                        [spec.metric, efficiency_name(prec)],
                        "float32 GEMMs run as TF32 on this host although allow_tf32 is off "
                        f"({tf32}); is TORCH_ALLOW_TF32_CUBLAS_OVERRIDE set by the launcher?",
                    )
                    continue
            a, b, c = _inputs(prec, m, n, k, ctx.device)
            step, product = make_step(prec, a, b, c)
            try:
                step()
            except RuntimeError as exc:
                # A GEMM this torch/driver does not offer here is a skip; any other error is a fault.
                if not _NOT_OFFERED.search(str(exc)) or _is_device_fault(str(exc)):
                    raise
                self.skip_metric(
                    [spec.metric, efficiency_name(prec)],
                    f"{prec} GEMM not available here: {str(exc).splitlines()[0][:160]}",
                )
                continue
            peak = self.peak.get(prec)

            def metrics(s: float, spec=spec, prec=prec, peak=peak) -> dict[str, float]:
                rate = ops / s / 1e9
                out = {spec.metric: rate}
                if peak:
                    eff = 100.0 * rate / (peak * 1e3)
                    out[efficiency_name(prec)] = eff
                    if eff > MAX_EFFICIENCY:
                        self.fail_metric(
                            [spec.metric, efficiency_name(prec)],
                            f"{prec}: {rate / 1e3:.1f} T{spec.unit[1:]} is {eff:.0f}% of the {model} peak "
                            f"({peak:g}): a measurement error (wrong peak row, fp32 run as TF32, "
                            "or a timing fault)",
                        )
                return out

            def check(a=a, b=b, product=product, spec=spec) -> str | None:
                return check_product(a, b, product(), self.args["check_samples"], spec.rtol)

            yield Case(prec, step, metrics, check)


_NOT_OFFERED = re.compile(
    r"not (implemented|supported)|unsupported|only supported|requires|is only|no kernel", re.I
)


def _is_device_fault(msg: str) -> bool:
    return bool(re.search(r"illegal|ECC|uncorrectable|launch failure|device-side assert|Xid", msg, re.I))


def check_product(a, b, c, samples: int, rtol: float) -> str | None:
    """Check ``c == a @ b`` as described in the module doc; an error message or None."""
    import torch

    if c is None:
        return "no product"
    # float64 holds every int8 GEMM sum here exactly (|sum| < 2^53), so one accumulator serves both.
    acc = torch.float64
    if c.dtype.is_floating_point and not bool(torch.isfinite(c).all()):
        bad = (~torch.isfinite(c)).nonzero()[0].tolist()
        return f"non-finite value at entry ({bad[0]},{bad[1]})"
    err = _check_columns(a, b, c, acc, rtol)
    if err:
        return err
    return _check_samples(a, b, c, samples, acc, rtol)


def _wide(t, acc):
    return t.to(acc) if t.dtype != acc else t


def _sum0(t, acc, absolute: bool = False, rows: int = 4096):
    """Column sums of ``t`` in ``acc`` precision, converting a block of rows at a time (bounded memory)."""
    total = None
    for i0 in range(0, t.shape[0], rows):
        block = _wide(t[i0 : i0 + rows], acc)
        if absolute:
            block = block.abs()
        part = block.sum(dim=0)
        total = part if total is None else total + part
    return total


def _check_columns(a, b, c, acc, rtol: float, chunk: int = 2048) -> str | None:
    asum = _sum0(a, acc)
    aabs = _sum0(a, acc, absolute=True) if rtol else None
    csum = _sum0(c, acc)
    n = c.shape[1]
    for j0 in range(0, n, chunk):
        bj = _wide(b[:, j0 : j0 + chunk], acc)
        want = asum @ bj
        got = csum[j0 : j0 + chunk]
        if rtol == 0:
            diff = (got != want).nonzero()
            if len(diff):
                j = int(diff[0])
                return (
                    f"column {j0 + j} sums to {int(got[j])}, expected {int(want[j])} "
                    "(integer GEMM must be exact)"
                )
            continue
        scale = (aabs @ bj.abs()).clamp_min(1e-30)
        rel = (got - want).abs() / scale
        worst = float(rel.max())
        if not worst <= rtol:
            j = int(rel.argmax())
            return (
                f"column {j0 + j} checksum is {float(got[j]):.6g}, expected {float(want[j]):.6g} "
                f"(relative error {worst:.3g} > tolerance {rtol:g})"
            )
    return None


def _take(t, idx, dim: int):
    """``t`` indexed along ``dim``; one-byte float types (fp8) are indexed through a uint8 view."""
    import torch

    if t.dtype.is_floating_point and t.dtype.itemsize == 1:
        return _take(t.view(torch.uint8), idx, dim).view(t.dtype)
    return t[idx] if dim == 0 else t[:, idx]


def _check_samples(a, b, c, samples: int, acc, rtol: float) -> str | None:
    import torch

    if samples <= 0:
        return None
    m, n = c.shape
    gen = torch.Generator(device="cpu").manual_seed(99)
    rows = torch.randint(0, m, (samples,), generator=gen)
    cols = torch.randint(0, n, (samples,), generator=gen)
    a_s = _wide(_take(a, rows.to(a.device), 0), acc).cpu()
    b_s = _wide(_take(b, cols.to(b.device), 1), acc).cpu()
    want = (a_s * b_s.t()).sum(dim=1)
    got = _wide(c[rows.to(c.device), cols.to(c.device)], acc).cpu()
    if rtol == 0:
        diff = (got != want).nonzero()
        if len(diff):
            i = int(diff[0])
            return (
                f"entry ({int(rows[i])},{int(cols[i])}) is {int(got[i])}, expected {int(want[i])} "
                "(integer GEMM must be exact)"
            )
        return None
    # Scale by the magnitude of the terms, not the (possibly cancelling) sum.
    scale = (a_s.abs() * b_s.t().abs()).sum(dim=1).clamp_min(1e-30)
    err = (got - want).abs() / scale
    worst = float(err.max())
    if not worst <= rtol or math.isnan(worst):
        i = int(err.argmax())
        return (
            f"entry ({int(rows[i])},{int(cols[i])}) is {float(got[i]):.6g}, expected {float(want[i]):.6g} "
            f"(relative error {worst:.3g} > tolerance {rtol:g})"
        )
    return None


if __name__ == "__main__":
    import sys

    from sb_bench.__main__ import standalone_main

    sys.exit(standalone_main(GemmFlops.name))
