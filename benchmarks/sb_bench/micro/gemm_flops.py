"""gemm-flops: matrix-multiply throughput per precision, checked for correctness.

FLOPs counted: 2·M·N·K per GEMM (one multiply and one add per inner-product
term), reported in GFLOPS (int8: GIOPS). Each product is compared, on a
sample of output entries, with the same entries computed in float64 from the
same inputs; a device that is fast but wrong fails the benchmark.
"""

from __future__ import annotations

from sb_bench.benchmark import Benchmark, Case, SkipBenchmark
from sb_bench.context import RankContext
from sb_bench.metric import Metric, Param
from sb_bench.registry import register

# precision -> (torch dtype name, relative tolerance of the sampled check)
PRECISIONS: dict[str, tuple[str, float]] = {
    "fp64": ("float64", 1e-9),
    "fp32": ("float32", 1e-4),
    "fp16": ("float16", 2e-2),
    "bf16": ("bfloat16", 5e-2),
}


@register
class GemmFlops(Benchmark):
    name = "gemm-flops"
    description = "GEMM throughput per precision (GFLOPS), each product checked against a float64 reference"
    params = {
        "m": Param("int", 1024, "rows of A and C"),
        "n": Param("int", 1024, "columns of B and C"),
        "k": Param("int", 1024, "columns of A, rows of B"),
        "precision": Param("list[str]", ["fp64", "fp32", "fp16", "bf16"], "precisions to measure",
                           tuple(PRECISIONS)),
        "check_samples": Param("int", 64, "output entries compared with the float64 reference"),
    }

    def metrics(self) -> list[Metric]:
        return [Metric(f"{p}_flops", "GFLOPS", True, None) for p in self.args["precision"]]

    def cases(self, ctx: RankContext):
        import torch

        m, n, k = self.args["m"], self.args["n"], self.args["k"]
        for prec in self.args["precision"]:
            dtype_name, tol = PRECISIONS[prec]
            dtype = getattr(torch, dtype_name)
            gen = torch.Generator(device="cpu").manual_seed(1234)
            a = torch.randn(m, k, generator=gen).to(ctx.device, dtype)
            b = torch.randn(k, n, generator=gen).to(ctx.device, dtype)
            c = torch.empty(m, n, device=ctx.device, dtype=dtype)
            try:
                torch.matmul(a, b, out=c)
            except RuntimeError as exc:
                raise SkipBenchmark(f"{prec} matmul unsupported on {ctx.device.type}: {exc}") from exc
            flops = 2.0 * m * n * k

            def step(a=a, b=b, c=c):
                torch.matmul(a, b, out=c)

            def check(a=a, b=b, c=c, tol=tol):
                return check_product(a, b, c, self.args["check_samples"], tol)

            yield Case(prec, step, lambda s, p=prec, f=flops: {f"{p}_flops": f / s / 1e9}, check)


def check_product(a, b, c, samples: int, rtol: float) -> str | None:
    """Compare sampled entries of ``c`` with ``a @ b`` in float64; an error message or None."""
    import torch

    m, n = c.shape
    gen = torch.Generator(device="cpu").manual_seed(99)
    rows = torch.randint(0, m, (samples,), generator=gen)
    cols = torch.randint(0, n, (samples,), generator=gen)
    a64 = a[rows.to(a.device)].double().cpu()
    b64 = b[:, cols.to(b.device)].double().cpu()
    want = (a64 * b64.t()).sum(dim=1)
    got = c[rows.to(c.device), cols.to(c.device)].double().cpu()
    # Scale the tolerance by the magnitude of the terms, not the (possibly cancelling) sum.
    scale = (a64.abs() * b64.t().abs()).sum(dim=1).clamp_min(1e-30)
    err = ((got - want).abs() / scale)
    if not torch.isfinite(got).all():
        return "non-finite values in the product"
    worst = float(err.max())
    if worst > rtol:
        i = int(err.argmax())
        return (f"entry ({int(rows[i])},{int(cols[i])}) is {float(got[i]):.6g}, expected {float(want[i]):.6g} "
                f"(relative error {worst:.3g} > tolerance {rtol:g})")
    return None


if __name__ == "__main__":
    import sys

    from sb_bench.__main__ import standalone_main

    sys.exit(standalone_main(GemmFlops.name))
