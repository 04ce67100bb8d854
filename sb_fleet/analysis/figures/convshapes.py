"""The convolution a ``cudnn-function`` metric timed, read back from its name: FLOPs and bytes per call.

``cudnn-function`` reports microseconds per call under SuperBench's name
``name_<function lowercased>_<key>_<value>..._time`` (keys sorted; ``benchmarks/sb_bench/micro/
cudnn_function.py``): ``c``, ``datatype``, ``dilation``, ``h``, ``k``, ``n``, ``pad``, ``r``, ``s``,
``stride``, ``w``. The name is the whole shape, so the roofline can place each call:

* **FLOPs per call**, the same for forward, backward-data and backward-filter:
  2·n·k·c·r·s·out_h·out_w, with out = (in + 2·pad − dilation·(r − 1) − 1) // stride + 1 — a direct
  convolution's count, so FLOPs / time is the *effective* rate (a Winograd or FFT algorithm does
  fewer operations, and its effective rate can exceed the hardware's peak);
* **bytes per call**: the *compulsory* traffic, each of the three tensors the call touches moved
  once at the datatype's element size (input n·c·h·w, weights k·c·r·s, output n·k·out_h·out_w —
  forward reads the first two and writes the third, backward-data and backward-filter read two of
  them and write the gradient of the third). The intensity FLOPs / bytes is therefore the
  *compulsory-traffic* intensity, an upper bound: a kernel that re-reads a tile moves more.

Absent keys take the benchmark's defaults (stride 1, pad 0, dilation 1, datatype float). Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

FUNCTIONS = {  # lowercased, as the metric name has it -> short label
    "cudnnconvolutionforward": "fwd",
    "cudnnconvolutionbackwarddata": "bwd-data",
    "cudnnconvolutionbackwardfilter": "bwd-filter",
}
ELEMENT_BYTES = {"float": 4, "half": 2}
_INT_KEYS = ("c", "dilation", "h", "k", "n", "pad", "r", "s", "stride", "w")
_DEFAULTS = {"stride": 1, "pad": 0, "dilation": 1}
_NAME_RE = re.compile(r"^name_(?P<fn>[a-z]+)_(?P<rest>.+)_time$")
_BENCH_RE = re.compile(r"^cudnn-function(?::[^/]*)?$")


@dataclass(frozen=True)
class ConvCall:
    function: str  # as in the name: cudnnconvolutionforward | ...backwarddata | ...backwardfilter
    n: int
    c: int
    h: int
    w: int
    k: int
    r: int
    s: int
    stride: int = 1
    pad: int = 0
    dilation: int = 1
    datatype: str = "float"  # float | half

    @property
    def out_h(self) -> int:
        return (self.h + 2 * self.pad - self.dilation * (self.r - 1) - 1) // self.stride + 1

    @property
    def out_w(self) -> int:
        return (self.w + 2 * self.pad - self.dilation * (self.s - 1) - 1) // self.stride + 1

    @property
    def flops(self) -> int:
        """2·n·k·c·r·s·out_h·out_w: one multiply-add per weight per output pixel (all three functions)."""
        return 2 * self.n * self.k * self.c * self.r * self.s * self.out_h * self.out_w

    @property
    def bytes(self) -> int:
        """Compulsory traffic: input, weights and output, each once, at the datatype's element size."""
        elems = self.n * self.c * self.h * self.w + self.k * self.c * self.r * self.s
        elems += self.n * self.k * self.out_h * self.out_w
        return ELEMENT_BYTES[self.datatype] * elems

    @property
    def intensity(self) -> float:
        """FLOPs per byte of compulsory traffic (an upper bound on what a kernel achieves)."""
        return self.flops / self.bytes

    @property
    def label(self) -> str:
        """``fwd n32 c64 56x56 k64 3x3 pad 1 float``: the call, its shape and what differs from the defaults."""
        parts = [
            FUNCTIONS[self.function],
            f"n{self.n} c{self.c} {self.h}x{self.w} k{self.k} {self.r}x{self.s}",
        ]
        parts += [
            f"{key} {getattr(self, key)}"
            for key in ("stride", "pad", "dilation")
            if getattr(self, key) != _DEFAULTS[key]
        ]
        parts.append(self.datatype)
        return " ".join(parts)


def is_conv_benchmark(bench: str) -> bool:
    """``cudnn-function`` or one of its modes (``cudnn-function:fwd``)."""
    return bool(_BENCH_RE.match(bench))


def conv_call(metric: str) -> ConvCall | None:
    """The convolution a ``cudnn-function`` metric (with or without ``cudnn-function/``, no rank) timed;
    None for any other name, an unknown function or datatype, a missing or non-positive dimension,
    or a shape whose output is empty."""
    bench, _, leaf = metric.rpartition("/")
    if bench and not is_conv_benchmark(bench):
        return None
    m = _NAME_RE.match(leaf.lower())
    if not m or m.group("fn") not in FUNCTIONS:
        return None
    tokens = m.group("rest").split("_")
    if len(tokens) % 2:
        return None
    fields: dict[str, int | str] = {}
    for key, value in zip(tokens[::2], tokens[1::2], strict=True):
        if key == "datatype":
            if value not in ELEMENT_BYTES:
                return None
            fields[key] = value
        elif key in _INT_KEYS:
            if not value.isdigit():
                return None
            fields[key] = int(value)
        else:  # a key this parser does not know could change the work: no guess
            return None
    if any(key not in fields for key in ("n", "c", "h", "w", "k", "r", "s")):
        return None
    call = ConvCall(function=m.group("fn"), **fields)  # type: ignore[arg-type]
    ints = [call.n, call.c, call.h, call.w, call.k, call.r, call.s, call.stride, call.dilation]
    if min(ints) <= 0 or call.out_h <= 0 or call.out_w <= 0:
        return None
    return call
