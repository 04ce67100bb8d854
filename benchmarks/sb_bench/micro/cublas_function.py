"""cublas-function: the GEMM shapes real models run, timed one by one (us per call), per GPU.

The equivalent of SuperBench's cublas-function through PyTorch (which calls cuBLAS on NVIDIA GPUs):
each configuration names the cuBLAS function it stands for and its SuperBench parameters, and is
run as the torch call that reaches that function:

* ``cublasSgemm``: float32 ``matmul`` with TF32 off; ``cublasSgemmStridedBatched``: float32 ``bmm``;
* ``cublasGemmEx`` / ``cublasGemmStridedBatchedEx``: ``matmul`` / ``bmm`` in ``datatype`` (half or
  float); ``use_tensor_core: true`` with float allows TF32 (half GEMMs use tensor cores anyway);
* ``cublasCgemm`` / ``cublasCgemm3mStridedBatched``: complex64 ``matmul`` / ``bmm`` (PyTorch has no
  3M variant: the batched complex GEMM it calls is timed under SuperBench's name).

``transa``/``transb`` = 1 store the operand transposed (k x m, n x k) and pass its transposed view,
so cuBLAS sees the other layout. FLOPs per call: 2·m·n·k·batchCount (complex: 8·m·n·k·batchCount).

Metric names follow SuperBench's: ``name_<function lowercased>_<key>_<value>..._time`` with the
parameter keys sorted and lowercased, e.g. ``name_cublassgemm_k_1024_m_64_n_4096_transa_0_transb_0_time``.
The first matrix of each product is checked against float64 / complex128 on sampled entries.
On a CPU the same calls run on the CPU's BLAS under the same names.

Every float32 configuration that must not use TF32 (``cublasSgemm``, ``cublasSgemmStridedBatched``,
``cublasGemmEx`` float without ``use_tensor_core``) first runs the TF32 probe
(:mod:`sb_bench.micro.tf32_probe`) through the same torch call at its own shape: NVIDIA's containers set
``TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1``, which turns these into TF32 GEMMs behind the code's back (the
harness clears it, a launcher may not). A configuration whose probe comes out inexact is skipped with
the reason, not timed as fp32. On a CPU the probe runs where its inputs stay under
``PROBE_CPU_ELEMENTS`` (a CPU BLAS has no TF32; the probe there checks the probe).
"""

from __future__ import annotations

import json

from sb_bench.core.benchmark import Benchmark, Case
from sb_bench.core.context import RankContext
from sb_bench.core.metric import Metric, Param
from sb_bench.core.registry import register
from sb_bench.micro.tf32_probe import runs_as_tf32

PROBE_CPU_ELEMENTS = 4 * 2**20  # m·k + k·n + m·n float32 entries a CPU probe may allocate

FUNCTIONS = (
    "cublasSgemm",
    "cublasSgemmStridedBatched",
    "cublasGemmEx",
    "cublasGemmStridedBatchedEx",
    "cublasCgemm",
    "cublasCgemm3mStridedBatched",
)

# Shapes from real models (training, mixed precision where the model uses it).
DEFAULT_CONFIGS: list[dict] = [
    # BERT-base, batch 8 x seq 512 = 4096 tokens, hidden 768: QKV projection, FFN up and down.
    {
        "name": "cublasGemmEx",
        "m": 4096,
        "n": 2304,
        "k": 768,
        "transa": 0,
        "transb": 0,
        "datatype": "half",
        "use_tensor_core": True,
    },
    {
        "name": "cublasGemmEx",
        "m": 4096,
        "n": 3072,
        "k": 768,
        "transa": 0,
        "transb": 1,
        "datatype": "half",
        "use_tensor_core": True,
    },
    {
        "name": "cublasGemmEx",
        "m": 4096,
        "n": 768,
        "k": 3072,
        "transa": 1,
        "transb": 0,
        "datatype": "half",
        "use_tensor_core": True,
    },
    # BERT-base attention: 8 x 12 heads, Q.K^T (512 x 512 x 64) and P.V (512 x 64 x 512).
    {
        "name": "cublasGemmStridedBatchedEx",
        "m": 512,
        "n": 512,
        "k": 64,
        "transa": 0,
        "transb": 1,
        "batchCount": 96,
        "datatype": "half",
        "use_tensor_core": True,
    },
    {
        "name": "cublasGemmStridedBatchedEx",
        "m": 512,
        "n": 64,
        "k": 512,
        "transa": 0,
        "transb": 0,
        "batchCount": 96,
        "datatype": "half",
        "use_tensor_core": True,
    },
    # GPT-2 large, seq 1024, hidden 1280: FFN up, in float32 with TF32.
    {
        "name": "cublasGemmEx",
        "m": 1024,
        "n": 5120,
        "k": 1280,
        "transa": 0,
        "transb": 0,
        "datatype": "float",
        "use_tensor_core": True,
    },
    # LSTM, hidden 1024, batch 64: the four gates of one step in float32.
    {"name": "cublasSgemm", "m": 64, "n": 4096, "k": 1024, "transa": 0, "transb": 0},
    # VGG-16 fc6, batch 64: 25088 -> 4096.
    {"name": "cublasSgemm", "m": 64, "n": 4096, "k": 25088, "transa": 0, "transb": 1},
    # ResNet-50 classifier, batch 32: 2048 -> 1000.
    {
        "name": "cublasGemmEx",
        "m": 32,
        "n": 1000,
        "k": 2048,
        "transa": 0,
        "transb": 1,
        "datatype": "float",
        "use_tensor_core": False,
    },
    # Multi-head attention in float32 (batch 16 x 16 heads, seq 256, head 64).
    {
        "name": "cublasSgemmStridedBatched",
        "m": 256,
        "n": 256,
        "k": 64,
        "transa": 0,
        "transb": 1,
        "batchCount": 256,
    },
    # Complex GEMMs of FFT-based convolution and spectral layers.
    {"name": "cublasCgemm", "m": 512, "n": 512, "k": 32, "transa": 1, "transb": 0},
    {
        "name": "cublasCgemm3mStridedBatched",
        "m": 64,
        "n": 32,
        "k": 128,
        "transa": 0,
        "transb": 1,
        "batchCount": 544,
    },
]

_DT_TOL = {"float32": 1e-4, "tf32": 5e-3, "float16": 2e-2, "complex64": 1e-4}


def metric_name(cfg: dict) -> str:
    """SuperBench's name: the function and its sorted, lowercased parameters."""
    parts = [
        f"{str(k).lower()}_{str(v).lower()}"
        for k, v in sorted(cfg.items(), key=lambda kv: str(kv[0]).lower())
        if k != "name"
    ]
    return "_".join(["name", str(cfg["name"]).lower(), *parts, "time"])


def parse_configs(text: str) -> list[dict]:
    """Configurations from a JSON object or list (SuperBench's ``config_json_str``); built-ins when empty."""
    if not text:
        return [dict(c) for c in DEFAULT_CONFIGS]
    data = json.loads(text) if isinstance(text, str) else text
    configs = data if isinstance(data, list) else [data]
    for c in configs:
        if not isinstance(c, dict) or c.get("name") not in FUNCTIONS:
            raise ValueError(f"config {c!r}: 'name' must be one of {', '.join(FUNCTIONS)}")
        for key in ("m", "n", "k"):
            if not isinstance(c.get(key), int) or c[key] <= 0:
                raise ValueError(f"config {c!r}: {key!r} must be a positive integer")
    return configs


def _kind(cfg: dict) -> tuple[str, bool]:
    """(torch dtype name, allow_tf32) for a configuration."""
    fn = cfg["name"]
    if fn.startswith("cublasC"):
        return "complex64", False
    if fn.startswith("cublasS"):
        return "float32", False
    if cfg.get("datatype", "float") == "half":
        return "float16", False
    return "float32", bool(cfg.get("use_tensor_core", False))


@register
class CublasFunction(Benchmark):
    name = "cublas-function"
    description = (
        "cuBLAS GEMM calls with shapes from real models (BERT, GPT-2, LSTM, VGG, ResNet); "
        "metrics name_<function>_<key>_<value>..._time (us per call)"
    )
    params = {
        "config_json_str": Param(
            "str",
            "",
            "a JSON object or list of configurations (SuperBench's format); empty: the built-in list",
        ),
        "check_samples": Param("int", 16, "sampled output entries checked per configuration"),
    }

    def metrics(self) -> list[Metric]:
        return [
            Metric(metric_name(c), "us", False, None, f"{c['name']} call")
            for c in parse_configs(self.args["config_json_str"])
        ]

    def setup(self, ctx: RankContext) -> None:
        import torch

        self.configs = parse_configs(self.args["config_json_str"])
        self._tf32 = torch.backends.cuda.matmul.allow_tf32

    def teardown(self, ctx: RankContext) -> None:
        import torch

        torch.backends.cuda.matmul.allow_tf32 = self._tf32

    def cases(self, ctx: RankContext):
        import torch

        for cfg in self.configs:
            dtype_name, tf32 = _kind(cfg)
            dtype = getattr(torch, dtype_name)
            m, n, k = cfg["m"], cfg["n"], cfg["k"]
            batch = int(cfg.get("batchCount", 0))
            gen = torch.Generator(device="cpu").manual_seed(33931)
            lead = (batch,) if batch else ()

            def operand(rows, cols, trans, lead=lead, gen=gen, dtype=dtype):
                shape = (*lead, cols, rows) if trans else (*lead, rows, cols)
                t = torch.randn(
                    *shape, generator=gen, dtype=torch.complex64 if dtype.is_complex else torch.float32
                )
                t = t.to(ctx.device, dtype)
                return t.transpose(-1, -2) if trans else t

            a = operand(m, k, cfg.get("transa", 0))
            b = operand(k, n, cfg.get("transb", 0))
            c = torch.empty(*lead, m, n, device=ctx.device, dtype=dtype)
            if ctx.is_cuda:
                torch.backends.cuda.matmul.allow_tf32 = tf32
            fn = torch.bmm if batch else torch.matmul
            name = metric_name(cfg)
            if dtype_name == "float32" and not tf32:
                inexact = self._probe(ctx, fn, m, n, k, batch)
                if inexact:
                    self.skip_metric(
                        name,
                        f"{cfg['name']}: float32 GEMMs run as TF32 on this host although allow_tf32 is off "
                        f"({inexact}); is TORCH_ALLOW_TF32_CUBLAS_OVERRIDE set by the launcher?",
                    )
                    continue

            def step(a=a, b=b, c=c, fn=fn):
                fn(a, b, out=c)

            tol = _DT_TOL["tf32" if tf32 and ctx.is_cuda else dtype_name]

            def check(a=a, b=b, c=c, batch=batch, tol=tol):
                if batch:
                    a, b, c = a[0], b[0], c[0]
                return sampled_check(a, b, c, self.args["check_samples"], tol)

            yield Case(name, step, lambda s, name=name: {name: s * 1e6}, check)

    @staticmethod
    def _probe(ctx: RankContext, fn, m: int, n: int, k: int, batch: int) -> str | None:
        """The TF32 probe through ``fn`` (matmul, or bmm on one batch entry) at this shape; None when exact."""
        if not ctx.is_cuda and m * k + k * n + m * n > PROBE_CPU_ELEMENTS:
            return None  # no TF32 on a CPU BLAS: not worth the memory at this size

        def product(a, b, fn=fn, batch=batch):
            return fn(a.unsqueeze(0), b.unsqueeze(0))[0] if batch else fn(a, b)

        return runs_as_tf32(product, m, n, k, ctx.device)


def sampled_check(a, b, c, samples: int, rtol: float) -> str | None:
    """Sampled entries of ``c`` against ``a @ b`` in float64 / complex128."""
    import torch

    if samples <= 0:
        return None
    wide = torch.complex128 if c.dtype.is_complex else torch.float64
    m, n = c.shape
    gen = torch.Generator(device="cpu").manual_seed(7)
    rows = torch.randint(0, m, (samples,), generator=gen)
    cols = torch.randint(0, n, (samples,), generator=gen)
    a_s = a[rows.to(a.device)].to(wide).cpu()
    b_s = b[:, cols.to(b.device)].to(wide).cpu()
    want = (a_s * b_s.t()).sum(dim=1)
    got = c[rows.to(c.device), cols.to(c.device)].to(wide).cpu()
    scale = (a_s.abs() * b_s.t().abs()).sum(dim=1).clamp_min(1e-30)
    err = (got - want).abs() / scale
    if not torch.isfinite(err).all() or float(err.max()) > rtol:
        i = int(torch.nan_to_num(err, nan=float("inf")).argmax())
        return f"entry ({int(rows[i])},{int(cols[i])}) is {complex(got[i])}, expected {complex(want[i])} (tolerance {rtol:g})"
    return None


if __name__ == "__main__":
    import sys

    from sb_bench.__main__ import standalone_main

    sys.exit(standalone_main(CublasFunction.name))
