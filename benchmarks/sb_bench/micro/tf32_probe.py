"""Does a float32 GEMM really run in float32? A probe that TF32 gets wrong, compared exactly.

TF32 keeps 10 of float32's 23 mantissa bits. The probe multiplies ``A`` (entries ``1 + j·2**-13``
with ``j`` odd, 1 <= j < 1024: 14 significant bits) by a 0/1 selection matrix ``B`` (one 1 per
column), so every output entry is one input entry times 1 plus zeros: exact in float32 with any
summation order, and wrong in TF32, which rounds the input to 11 significant bits. The probe runs
at the benchmark's own shape so cuBLAS picks the kernel the benchmark times.

Why it matters: NVIDIA's PyTorch containers set ``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1``, which
makes cuBLAS run float32 GEMMs as TF32 even with ``allow_tf32 = False``; ``fp32_flops`` would then
report the TF32 rate, and a relative-error check of 1e-4 cannot tell.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def probe_inputs(m: int, n: int, k: int, device: Any) -> tuple[Any, Any, Any]:
    """(A, B, expected C) in float32 for an m x n x k product, built on ``device`` (every step is
    exact in float32: j·2**-13 and 1 + j·2**-13 need at most 14 significant bits)."""
    import torch

    gen = torch.Generator(device="cpu").manual_seed(7)
    j = torch.randint(0, 512, (m, k), generator=gen, dtype=torch.int32).to(device) * 2 + 1
    a = j.to(torch.float32).mul_(2.0**-13).add_(1.0)  # odd j: not representable in TF32
    del j
    cols = torch.arange(n, device=device) % k
    b = torch.zeros(k, n, dtype=torch.float32, device=device)
    b[cols, torch.arange(n, device=device)] = 1.0
    want = a[:, cols]
    return a, b, want


def runs_as_tf32(matmul: Callable[[Any, Any], Any], m: int, n: int, k: int, device: Any) -> str | None:
    """A description of the mismatch when ``matmul`` (float32 in, float32 out) is not exact
    float32 arithmetic at this shape; None when it is."""
    import torch

    a, b, want = probe_inputs(m, n, k, device)
    got = matmul(a, b)
    wrong = got != want
    count = int(wrong.sum())
    if count == 0:
        return None
    i, j = divmod(int(wrong.flatten().to(torch.uint8).argmax()), n)
    return (
        f"{count} of {got.numel()} probe entries inexact, e.g. ({i},{j}) = {float(got[i, j]):.9g}, "
        f"exactly {float(want[i, j]):.9g}"
    )


def fp32_gemm_runs_as_tf32(
    ctx: Any,
    m: int,
    n: int,
    k: int,
    what: str,
    matmul: Callable[[Any, Any], Any] | None = None,
    cpu: bool = False,
) -> str | None:
    """The skip reason of an fp32 GEMM benchmark (``what``) whose float32 ``matmul`` (default
    ``torch.matmul``) is not exact float32 at this shape; None when it is, and on CPUs (no TF32
    there) unless ``cpu``. The probe is capped at 4096 per side so it never outweighs the benchmark's own
    memory."""
    if not (ctx.is_cuda or cpu):
        return None
    import torch

    found = runs_as_tf32(matmul or torch.matmul, min(m, 4096), min(n, 4096), min(k, 4096), ctx.device)
    if found is None:
        return None
    return (
        f"{what}: float32 GEMMs run as TF32 on this host although allow_tf32 is off ({found}); "
        "is TORCH_ALLOW_TF32_CUBLAS_OVERRIDE set by the launcher?"
    )
