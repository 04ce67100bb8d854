"""cudnn-function: the convolution shapes real models run, timed one by one (us per call), per GPU.

The equivalent of SuperBench's cudnn-function through PyTorch (cuDNN on NVIDIA GPUs, with
``cudnn.benchmark`` on so cuDNN picks its fastest algorithm during warm-up). Each configuration
names the cuDNN function it stands for:

* ``cudnnConvolutionForward``: ``conv2d(x, w)``;
* ``cudnnConvolutionBackwardData``: the input gradient (``aten.convolution_backward``, input only);
* ``cudnnConvolutionBackwardFilter``: the weight gradient (weight only).

Shapes (NCHW input ``n,c,h,w``; ``k`` filters of ``r x s``; ``stride``, ``pad``, ``dilation``;
``datatype`` float or half) come from ResNet-50, VGG-16 and DenseNet-121 training at batch 32.
FLOPs per call, all three functions: 2·n·k·c·r·s·out_h·out_w.

Metric names: ``name_<function lowercased>_<key>_<value>..._time`` (keys sorted), us per call.
Forward and backward-data results are checked on batch element 0 against float64 on the CPU
(tolerance relative to the same convolution of absolute values); backward-filter sums over the
batch and is checked where the float64 reference is small enough (``check_max_macs``).
On a CPU the same calls run on the CPU's convolution kernels (oneDNN) under the same names.
"""

from __future__ import annotations

import json

from sb_bench.core.benchmark import Benchmark, Case
from sb_bench.core.context import RankContext
from sb_bench.core.metric import Metric, Param
from sb_bench.core.registry import register
from sb_bench.micro.cublas_function import metric_name

FUNCTIONS = ("cudnnConvolutionForward", "cudnnConvolutionBackwardData", "cudnnConvolutionBackwardFilter")

_SHAPES = [
    # ResNet-50: stem 7x7/2, a 3x3 and a 1x1 of stage 1, a 3x3 of stage 3.
    {"n": 32, "c": 3, "h": 224, "w": 224, "k": 64, "r": 7, "s": 7, "stride": 2, "pad": 3},
    {"n": 32, "c": 64, "h": 56, "w": 56, "k": 64, "r": 3, "s": 3, "stride": 1, "pad": 1},
    {"n": 32, "c": 64, "h": 56, "w": 56, "k": 256, "r": 1, "s": 1, "stride": 1, "pad": 0},
    {"n": 32, "c": 256, "h": 14, "w": 14, "k": 256, "r": 3, "s": 3, "stride": 1, "pad": 1},
    # VGG-16 conv2: 3x3, 128 channels at 112 x 112.
    {"n": 32, "c": 128, "h": 112, "w": 112, "k": 128, "r": 3, "s": 3, "stride": 1, "pad": 1},
    # DenseNet-121 dense layer: 3x3, 128 -> 32 (growth rate) at 28 x 28.
    {"n": 32, "c": 128, "h": 28, "w": 28, "k": 32, "r": 3, "s": 3, "stride": 1, "pad": 1},
]
DEFAULT_CONFIGS: list[dict] = [
    {"name": fn, **shape, "datatype": dt} for fn in FUNCTIONS for shape in _SHAPES for dt in ("float", "half")
]
_TOL = {"float": 5e-3, "half": 2e-2}  # float: cuDNN may use TF32 (on by default) or Winograd/FFT


def parse_configs(text: str) -> list[dict]:
    if not text:
        return [dict(c) for c in DEFAULT_CONFIGS]
    data = json.loads(text)
    configs = data if isinstance(data, list) else [data]
    for c in configs:
        if not isinstance(c, dict) or c.get("name") not in FUNCTIONS:
            raise ValueError(f"config {c!r}: 'name' must be one of {', '.join(FUNCTIONS)}")
        for key in ("n", "c", "h", "w", "k", "r", "s"):
            if not isinstance(c.get(key), int) or c[key] <= 0:
                raise ValueError(f"config {c!r}: {key!r} must be a positive integer")
        if c.get("datatype", "float") not in _TOL:
            raise ValueError(f"config {c!r}: datatype must be float or half")
    return configs


def _geometry(cfg: dict) -> tuple[int, int, int]:
    stride, pad, dil = cfg.get("stride", 1), cfg.get("pad", 0), cfg.get("dilation", 1)
    return stride, pad, dil


def _conv_call(fn: str, x, w, gy, stride: int, pad: int, dil: int):
    import torch

    if fn == "cudnnConvolutionForward":
        return torch.nn.functional.conv2d(x, w, None, stride, pad, dil)
    mask = [True, False, False] if fn == "cudnnConvolutionBackwardData" else [False, True, False]
    gx, gw, _ = torch.ops.aten.convolution_backward(
        gy, x, w, None, [stride] * 2, [pad] * 2, [dil] * 2, False, [0, 0], 1, mask
    )
    return gx if mask[0] else gw


@register
class CudnnFunction(Benchmark):
    name = "cudnn-function"
    description = (
        "cuDNN convolution forward / backward-data / backward-filter with shapes from ResNet-50, VGG-16, "
        "DenseNet-121; metrics name_<function>_<key>_<value>..._time (us per call)"
    )
    params = {
        "config_json_str": Param(
            "str", "", "a JSON object or list of configurations; empty: the built-in list"
        ),
        "check_max_macs": Param(
            "int", 4_000_000_000, "largest float64 reference (multiply-adds) computed for a check"
        ),
    }

    def metrics(self) -> list[Metric]:
        return [
            Metric(metric_name(c), "us", False, None, f"{c['name']} call")
            for c in parse_configs(self.args["config_json_str"])
        ]

    def setup(self, ctx: RankContext) -> None:
        import torch

        self.configs = parse_configs(self.args["config_json_str"])
        self._bench = torch.backends.cudnn.benchmark
        torch.backends.cudnn.benchmark = True

    def teardown(self, ctx: RankContext) -> None:
        import torch

        torch.backends.cudnn.benchmark = self._bench

    def cases(self, ctx: RankContext):
        import torch

        for cfg in self.configs:
            dtype = torch.float16 if cfg.get("datatype", "float") == "half" else torch.float32
            stride, pad, dil = _geometry(cfg)
            gen = torch.Generator(device="cpu").manual_seed(11)
            n, c, h, w, k, r, s = (cfg[key] for key in ("n", "c", "h", "w", "k", "r", "s"))
            x = torch.randn(n, c, h, w, generator=gen).to(ctx.device, dtype)
            wt = torch.randn(k, c, r, s, generator=gen).to(ctx.device, dtype)
            oh = (h + 2 * pad - dil * (r - 1) - 1) // stride + 1
            ow = (w + 2 * pad - dil * (s - 1) - 1) // stride + 1
            gy = torch.randn(n, k, oh, ow, generator=gen).to(ctx.device, dtype)
            fn = cfg["name"]
            holder = [None]

            def step(fn=fn, x=x, wt=wt, gy=gy, holder=holder, geo=(stride, pad, dil)):
                holder[0] = _conv_call(fn, x, wt, gy, *geo)

            name = metric_name(cfg)
            macs = n * k * c * r * s * oh * ow
            tol = _TOL[cfg.get("datatype", "float")]

            def check(fn=fn, x=x, wt=wt, gy=gy, holder=holder, macs=macs, tol=tol, geo=(stride, pad, dil)):
                return conv_check(fn, x, wt, gy, holder[0], geo, tol, macs, self.args["check_max_macs"])

            yield Case(name, step, lambda sec, name=name: {name: sec * 1e6}, check)


def conv_check(fn: str, x, w, gy, got, geo, rtol: float, macs: int, max_macs: int) -> str | None:
    """Compare one call's output with float64 on the CPU (batch element 0, or the whole weight gradient)."""
    import torch

    if got is None or not bool(torch.isfinite(got).all()):
        return f"{fn}: non-finite output"
    stride, pad, dil = geo
    d = torch.float64
    if fn == "cudnnConvolutionBackwardFilter":
        if macs > max_macs:
            return None
        xs, gys, out = x.to("cpu", d), gy.to("cpu", d), got.to("cpu", d)
    else:
        gys = gy[:1].to("cpu", d) if gy is not None else None
        xs, out = x[:1].to("cpu", d), got[:1].to("cpu", d)
    ws = w.to("cpu", d)
    want = _conv_call(fn, xs, ws, gys, stride, pad, dil)
    scale = _conv_call(
        fn, xs.abs(), ws.abs(), gys.abs() if gys is not None else None, stride, pad, dil
    ).clamp_min(1e-30)
    err = ((out - want).abs() / scale).max()
    if float(err) > rtol:
        return f"{fn}: relative error {float(err):.3g} > tolerance {rtol:g}"
    return None


if __name__ == "__main__":
    import sys

    from sb_bench.__main__ import standalone_main

    sys.exit(standalone_main(CudnnFunction.name))
