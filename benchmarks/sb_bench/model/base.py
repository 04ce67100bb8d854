"""The shared training and inference harness of every ``pytorch-<model>`` benchmark.

A model family (CNN, GPT-2, BERT, LSTM) supplies only its model and its
synthetic samples; this module owns the rest, the same way for all of them:

* **Precision.** fp32 runs as is; fp16 and bf16 run as a practitioner runs
  mixed precision: fp32 master weights, ``torch.autocast`` around the forward
  pass, and a ``GradScaler`` for fp16. fp8 (``fp8_hybrid``, ``fp8_e4m3``) swaps
  Linear/LayerNorm layers for Transformer Engine's and runs under its
  ``fp8_autocast``; it needs Transformer Engine and a GPU of compute
  capability 8.9 or newer, and is left out with the reason elsewhere.
  Configs may spell precisions as SuperBench does (``float32``, ``float16``,
  ``bfloat16``); metric names use ``fp32``/``fp16``/``bf16`` as SuperBench does.
* **Timing.** Each step is timed alone: CUDA events on a GPU (recorded without
  stalling the host; read once the loop has finished), ``perf_counter`` on the
  CPU. A training step is host-to-device copy, forward, loss, backward and
  optimizer step; an inference step is copy and forward without gradients.
  Warm-up steps are not timed. Nothing in the timed loop waits for the GPU
  except what the figure needs (fp16's ``GradScaler`` reads its overflow flag
  back every step, as in any fp16 training).
* **Loading the GPU** (defaults; SuperBench's parameters, given, give SuperBench's
  behaviour). ``batch_size: 0`` (the default) is a per-model batch that keeps a
  large GPU busy (``gpu_batch``: ResNet-50 256 as NVIDIA's published runs, scaled
  down on GPUs with less than 80 GiB), 32 (SuperBench's) on CPUs. ``data: auto``
  keeps a pool of synthetic batches resident on the device (no host copy in the
  timed loop), unless ``pin_memory`` or ``num_workers`` is given, which selects
  SuperBench's DataLoader of host batches (``data: loader``; copies are
  ``non_blocking`` from pinned memory when ``pin_memory`` is on). CNNs run
  ``channels_last`` on GPUs (``channels_last: auto``), the layout tensor cores want.
* **Device busy** (``p_a_device_busy``, %): the share of the timed loop's wall time
  the device spent on the steps' work. On a GPU the work of a step is timed with
  CUDA events after a sleep kernel has held the stream long enough for the host to
  queue the whole step, so no host gap is counted; on a CPU it is the time inside
  the steps over the loop's wall time (what is left went to fetching and copying
  batches). Below 90% the host, not the device, set the pace: the report marks the
  figure ``host-bound``.
* **fp32** on NVIDIA GPUs allows TF32 (``allow_tf32`` on, as SuperBench does): the
  figure is a TF32 tensor-core figure. ``force_fp32: true`` gives IEEE fp32.
* **Distributed.** Under torchrun, training wraps the model in
  DistributedDataParallel (NCCL on GPUs, gloo on CPU). The step time every rank
  reports is the slowest rank's mean step time (a straggler is what slows a
  real job) and throughput is per GPU: ``batch_size / step time``. Inference
  runs on each rank alone.
* **Does it train?** Before timing, a few optimizer steps run on one fixed
  synthetic batch (the same on every rank, dropout seeded the same way each
  time); the loss must be finite and lower afterwards. Every timed step's loss
  must be finite too, and under DDP the replicas must still hold the same
  weights. A fast step that produces NaN is a failed result, not a number.
* **Metrics**, per precision ``p`` and action ``a`` (train/inference):
  ``p_a_step_time`` (ms), ``p_a_throughput`` (samples/s per GPU), for
  inference the percentiles ``p_inference_step_time_<q>`` and
  ``p_inference_throughput_<q>`` for q in 50, 90, 95, 99, 99.9 (nearest-rank,
  as SuperBench computes them), ``p_a_tflops`` for transformer models, and on
  GPUs ``p_a_mem_allocated`` / ``p_a_max_mem_allocated`` (GiB, at the end of
  the action and its peak).
"""

from __future__ import annotations

import contextlib
import copy
import gc
import math
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

from sb_bench.core.benchmark import Benchmark, CheckFailed, SkipBenchmark
from sb_bench.core.context import RankContext
from sb_bench.core.energy import energy_metrics
from sb_bench.core.metric import Metric, Param
from sb_bench.model.catalog import PERCENTILES, PRECISION_ALIASES

ACTIONS = ("train", "inference")
FP8 = ("fp8_hybrid", "fp8_e4m3")
CHECK_SEED = 20240611
BUSY_LIMIT = 90.0  # % device busy below which a figure measures the host (report: host-bound)
DEVICE_POOL_BATCHES = 4  # distinct synthetic batches kept on the device (data: device)
REFERENCE_GPU_GIB = 80.0  # GPU memory the per-model GPU batches are sized for
# A data set keeps at most this many distinct samples (indexed modulo) so a
# large sample_count of big images does not fill the host's memory.
SAMPLE_POOL = 128


def model_params(*, optimizer: str, lr: float, batch_size: int = 0) -> dict[str, Param]:
    """The parameters every model benchmark has (SuperBench's names and defaults)."""
    return {
        "num_warmup": Param("int", 64, "untimed steps before timing (the training check's steps count)"),
        "num_steps": Param("int", 2048, "timed steps per action (ignored when duration > 0)"),
        "batch_size": Param(
            "int", batch_size, "samples per step on each rank; 0: the model's GPU default (32 on CPUs)"
        ),
        "sample_count": Param("int", 1024, "samples in the synthetic data set (rounded up to whole batches)"),
        "precision": Param(
            "list[str]",
            ["float32", "float16"],
            "precisions to run (float32/fp32, float16/fp16, bfloat16/bf16, fp8_hybrid, fp8_e4m3)",
            tuple(PRECISION_ALIASES),
        ),
        "model_action": Param("list[str]", ["train"], "what to measure: train and/or inference", ACTIONS),
        "pin_memory": Param("bool", False, "pin host batches so the copy to the GPU is asynchronous"),
        "num_workers": Param("int", 8, "DataLoader worker processes preparing batches (data: loader)"),
        "data": Param(
            "str",
            "auto",
            "batches from 'device' (a resident pool) or 'loader' (SuperBench's DataLoader); auto: loader "
            "when pin_memory or num_workers is given, else device",
            ("auto", "device", "loader"),
        ),
        "channels_last": Param("str", "auto", "CNNs: NHWC layout (auto: on GPUs)", ("auto", "true", "false")),
        "optimizer": Param("str", optimizer, "optimizer of the training action", ("sgd", "adam", "adamw")),
        "lr": Param("float", lr, "learning rate"),
        "check_steps": Param("int", 3, "optimizer steps of the training check on a fixed batch (>= 1)"),
        "force_fp32": Param("bool", False, "GPU: compute fp32 in full fp32, not TF32"),
    }


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (numpy's ``method='nearest'``, which SuperBench uses)."""
    s = sorted(values)
    return s[int(round(q / 100.0 * (len(s) - 1)))]


def is_oom(exc: BaseException) -> bool:
    text = str(exc).lower()
    return type(exc).__name__ == "OutOfMemoryError" or any(
        s in text
        for s in ("out of memory", "not enough memory", "can't allocate memory", "cannot allocate memory")
    )


@contextlib.contextmanager
def oom_as_memory_error() -> Iterator[None]:
    """Report the CPU allocator's failure the way the harness reports a GPU OOM."""
    try:
        yield
    except RuntimeError as exc:
        if is_oom(exc) and type(exc).__name__ != "OutOfMemoryError":
            raise MemoryError(f"out of memory: {str(exc).strip().splitlines()[-1][:300]}") from exc
        raise


def fp8_unavailable(device: Any) -> str | None:
    """Why fp8 cannot run here, or None."""
    if device.type != "cuda":
        return "fp8 needs a CUDA GPU with FP8 tensor cores (compute capability >= 8.9); this rank runs on CPU"
    import torch

    cap = torch.cuda.get_device_capability(device)
    if cap < (8, 9):
        return (
            f"fp8 needs compute capability >= 8.9; {torch.cuda.get_device_name(device)} is {cap[0]}.{cap[1]}"
        )
    try:
        import transformer_engine.pytorch as te  # noqa: F401
    except Exception as exc:  # not installed, or built for another CUDA
        return (
            f"fp8 needs NVIDIA Transformer Engine, which does not import here ({type(exc).__name__}: {exc})"
        )
    return None


class SyntheticSamples:
    """A map-style data set of ``length`` samples cycling over a pool of random ones."""

    def __init__(self, pool: tuple, length: int):
        self.pool = pool
        self.n = int(pool[0].shape[0])
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> tuple:
        j = i % self.n
        return tuple(t[j] for t in self.pool)


def grad_scaler(torch: Any, device_type: str) -> Any:
    """fp16's gradient scaler on any torch the suite accepts: ``torch.amp.GradScaler`` exists from
    torch 2.3; before it, CUDA's is ``torch.cuda.amp.GradScaler`` and CPUs have none (fp16 on a CPU
    then trains unscaled)."""
    amp = getattr(torch, "amp", None)
    if amp is not None and hasattr(amp, "GradScaler"):
        return amp.GradScaler(device_type)
    if device_type == "cuda":
        return torch.cuda.amp.GradScaler()
    return None


class Precision:
    """Autocast, gradient scaling and fp8 for one precision on one device."""

    def __init__(self, name: str, device: Any):
        import torch

        self.name = name
        self.device_type = device.type
        self.dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(name)
        if name in FP8:
            self.dtype = torch.bfloat16
        self.scaler = grad_scaler(torch, device.type) if name == "fp16" else None
        self.fp8_recipe = None
        if name in FP8:
            from transformer_engine.common import recipe

            fmt = recipe.Format.HYBRID if name == "fp8_hybrid" else recipe.Format.E4M3
            self.fp8_recipe = recipe.DelayedScaling(
                fp8_format=fmt, amax_history_len=16, amax_compute_algo="max"
            )

    def autocast(self) -> contextlib.AbstractContextManager:
        import torch

        stack = contextlib.ExitStack()
        if self.dtype is not None:
            stack.enter_context(torch.autocast(self.device_type, dtype=self.dtype))
        if self.fp8_recipe is not None:
            import transformer_engine.pytorch as te

            stack.enter_context(te.fp8_autocast(enabled=True, fp8_recipe=self.fp8_recipe))
        return stack

    def scale(self) -> float:
        return float(self.scaler.get_scale()) if self.scaler is not None else 1.0


def to_transformer_engine(module: Any) -> Any:
    """Replace Linear and LayerNorm layers with Transformer Engine's (weights copied), in place.

    Layers whose shapes FP8 GEMMs cannot take (dimensions not multiples of 16)
    stay as they are.
    """
    import torch
    import transformer_engine.pytorch as te

    for name, child in list(module.named_children()):
        if isinstance(child, torch.nn.Linear):
            if child.in_features % 16 or child.out_features % 16:
                continue
            new = te.Linear(
                child.in_features,
                child.out_features,
                bias=child.bias is not None,
                params_dtype=child.weight.dtype,
                device=child.weight.device,
            )
            with torch.no_grad():
                new.weight.copy_(child.weight)
                if child.bias is not None:
                    new.bias.copy_(child.bias)
            setattr(module, name, new)
        elif isinstance(child, torch.nn.LayerNorm):
            new = te.LayerNorm(
                child.normalized_shape[0],
                eps=child.eps,
                params_dtype=child.weight.dtype,
                device=child.weight.device,
            )
            with torch.no_grad():
                new.weight.copy_(child.weight)
                new.bias.copy_(child.bias)
            setattr(module, name, new)
        else:
            to_transformer_engine(child)
    return module


class ModelBenchmark(Benchmark):
    """Base of the ``pytorch-<model>`` benchmarks: a family supplies the model and its samples."""

    kind = "model"
    params: ClassVar[dict[str, Param]] = model_params(optimizer="sgd", lr=0.01)
    supported_precisions: ClassVar[tuple[str, ...]] = ("fp32", "fp16", "bf16")
    reports_tflops: ClassVar[bool] = False
    gpu_batch: ClassVar[int] = 32  # batch_size 0 on a GPU with REFERENCE_GPU_GIB of memory
    image_input: ClassVar[bool] = False  # 4-D image batches (CNNs): channels_last applies

    # -- what a family provides -------------------------------------------------------------------
    def build_model(self) -> Any:
        """The model in fp32, built on the current default device; ``model(*inputs)`` returns logits."""
        raise NotImplementedError

    def make_samples(self, n: int, gen: Any) -> tuple:
        """``n`` random samples: a tuple of tensors whose last one holds the class labels."""
        raise NotImplementedError

    def loss(self, output: Any, labels: Any) -> Any:
        import torch

        return torch.nn.functional.cross_entropy(output.float(), labels)

    def forward_flops(self, model: Any) -> float:
        """FLOPs of one sample's forward pass (transformer families)."""
        raise NotImplementedError

    @classmethod
    def validate(cls, args: dict[str, Any]) -> None:
        """Family-specific parameter checks: raise ValueError."""

    # -- declarations ------------------------------------------------------------------------------
    @classmethod
    def parse_params(cls, given: dict[str, Any]) -> dict[str, Any]:
        args = super().parse_params(given)
        precisions: list[str] = []
        for p in args["precision"]:
            metric = PRECISION_ALIASES[p]
            if metric not in cls.supported_precisions:
                raise ValueError(
                    f"parameter precision: {p} is not supported by {cls.name} "
                    f"(supported: {', '.join(cls.supported_precisions)})"
                )
            if metric not in precisions:
                precisions.append(metric)
        args["precision"] = precisions
        args["model_action"] = list(dict.fromkeys(args["model_action"]))
        if not precisions or not args["model_action"]:
            raise ValueError("parameters precision and model_action must not be empty")
        for k in ("sample_count", "check_steps"):
            if args[k] < 1:
                raise ValueError(f"parameter {k}: must be >= 1")
        if args["batch_size"] < 0:
            raise ValueError("parameter batch_size: must be >= 1, or 0 for the model's default")
        given_keys = {str(k).replace("-", "_") for k in (given or {})}
        superbench_data = bool(given_keys & {"pin_memory", "num_workers"})
        if args["data"] == "auto":
            args["data"] = "loader" if superbench_data else "device"
        if args["channels_last"] == "auto" and superbench_data:
            args["channels_last"] = "false"  # SuperBench's data parameters: SuperBench's NCHW too
        if args["num_workers"] < 0:
            raise ValueError("parameter num_workers: must be >= 0")
        if not args["lr"] > 0:
            raise ValueError("parameter lr: must be > 0")
        cls.validate(args)
        return args

    def _on_gpu(self) -> bool:
        dev = self.args["device"]
        if dev != "auto":
            return dev == "cuda"
        torch = sys.modules.get("torch")  # at run time torch is loaded; `list` must not load it
        return True if torch is None else bool(torch.cuda.is_available())

    def metrics(self) -> list[Metric]:
        out: list[Metric] = []
        gpu = self._on_gpu()
        for p in self.args["precision"]:
            for a in self.args["model_action"]:
                out.append(
                    Metric(f"{p}_{a}_step_time", "ms", False, "max", f"mean {a} step time (slowest rank)")
                )
                tput = Metric(
                    f"{p}_{a}_throughput", "samples/s", True, "min", f"{a} samples per second per GPU"
                )
                out += [tput, *energy_metrics(tput)]  # <p>_<a>_throughput_per_watt, <p>_<a>_power
                if a == "inference":
                    for q in PERCENTILES:
                        out.append(
                            Metric(
                                f"{p}_inference_step_time_{q}",
                                "ms",
                                False,
                                "max",
                                f"p{q} of the inference step time",
                            )
                        )
                        out.append(
                            Metric(
                                f"{p}_inference_throughput_{q}",
                                "samples/s",
                                True,
                                "min",
                                f"p{q} of the per-step inference throughput",
                            )
                        )
                if self.reports_tflops:
                    out.append(Metric(f"{p}_{a}_tflops", "TFLOPS", True, "min", f"achieved {a} TFLOPS"))
                out.append(
                    Metric(
                        f"{p}_{a}_device_busy",
                        "%",
                        True,
                        "min",
                        f"share of the {a} loop's wall time the device spent on the steps' work",
                    )
                )
                if gpu:
                    out.append(
                        Metric(
                            f"{p}_{a}_mem_allocated",
                            "GiB",
                            False,
                            "max",
                            f"GPU memory allocated at the end of {a}",
                        )
                    )
                    out.append(
                        Metric(
                            f"{p}_{a}_max_mem_allocated",
                            "GiB",
                            False,
                            "max",
                            f"peak GPU memory allocated during {a}",
                        )
                    )
        return out

    def precision_unavailable(self, p: str, ctx: RankContext) -> str | None:
        """Why precision ``p`` cannot run on this rank's device, or None."""
        return fp8_unavailable(ctx.device) if p in FP8 else None

    # -- setup -------------------------------------------------------------------------------------
    def setup(self, ctx: RankContext) -> None:
        import torch

        self.unavailable: dict[str, str] = {}
        for p in self.args["precision"]:
            why = self.precision_unavailable(p, ctx)
            if why:
                self.unavailable[p] = why
        if len(self.unavailable) == len(self.args["precision"]):
            raise SkipBenchmark("; ".join(f"{p}: {why}" for p, why in self.unavailable.items()))
        for p, why in self.unavailable.items():
            # The other precisions still run; the result's reason says why these metrics are absent.
            names = [m.name for m in self.metrics() if m.name.startswith(f"{p}_")]
            skip = getattr(self, "skip_metric", None)  # Benchmark.skip_metric where the spine has it
            if skip is not None:
                skip(names, why)
        if ctx.is_cuda:
            torch.backends.cudnn.benchmark = True
            torch.backends.cuda.matmul.allow_tf32 = not self.args["force_fp32"]
            torch.backends.cudnn.allow_tf32 = not self.args["force_fp32"]
        self.batch = self.args["batch_size"] or self.default_batch(ctx)
        cl = self.args["channels_last"]
        self.channels_last = self.image_input and (cl == "true" or (cl == "auto" and ctx.is_cuda))
        with oom_as_memory_error():
            torch.manual_seed(1234)  # the same initial weights on every rank
            with torch.device(ctx.device):
                self.model = self.build_model()
            if self.channels_last:
                self.model = self.model.to(memory_format=torch.channels_last)
            self.models: dict[str, Any] = {}
            self.ddp: dict[int, Any] = {}
            self._make_data(ctx)

    def default_batch(self, ctx: RankContext) -> int:
        """batch_size 0: ``gpu_batch`` on a GPU (halved per halving of memory below
        REFERENCE_GPU_GIB), SuperBench's 32 on a CPU."""
        if not ctx.is_cuda:
            return 32
        import torch

        gib = torch.cuda.get_device_properties(ctx.device).total_memory / 2**30
        batch = self.gpu_batch
        while gib < REFERENCE_GPU_GIB / 1.5 and batch > 1:
            batch //= 2
            gib *= 2
        return batch

    def _make_data(self, ctx: RankContext) -> None:
        import torch
        from torch.utils.data import DataLoader, DistributedSampler

        bs, world = self.batch, ctx.world_size
        count = math.ceil(self.args["sample_count"] / (bs * world)) * bs * world
        gen = torch.Generator().manual_seed(5678 + ctx.rank)
        self._iter: Iterator | None = None
        self._checks = 0
        self.pin = bool(self.args["pin_memory"] and ctx.is_cuda)
        self.loader = None
        if self.args["data"] == "device":
            # A few distinct batches, made once and kept on the device: the timed loop copies nothing.
            pool = self.make_samples(bs * DEVICE_POOL_BATCHES, gen)
            pool = tuple(self._device_tensor(t, ctx) for t in pool)
            self.device_batches = [
                tuple(t[i * bs : (i + 1) * bs] for t in pool) for i in range(DEVICE_POOL_BATCHES)
            ]
            self._pool_i = 0
            return
        pool = self.make_samples(min(count, max(bs, SAMPLE_POOL)), gen)
        data = SyntheticSamples(pool, count)
        sampler = DistributedSampler(data, world, ctx.rank, shuffle=False) if ctx.distributed else None
        workers = self.args["num_workers"]
        self.loader = DataLoader(
            data,
            batch_size=bs,
            sampler=sampler,
            shuffle=False,
            drop_last=True,
            num_workers=workers,
            pin_memory=self.pin,
            persistent_workers=workers > 0,
        )

    def _device_tensor(self, t: Any, ctx: RankContext) -> Any:
        import torch

        t = t.to(ctx.device, non_blocking=self.pin)
        if self.channels_last and t.dim() == 4:
            t = t.contiguous(memory_format=torch.channels_last)
        return t

    def _next_batch(self) -> tuple:
        if self.loader is None:
            self._pool_i = (self._pool_i + 1) % len(self.device_batches)
            return self.device_batches[self._pool_i]
        while True:
            if self._iter is None:
                self._iter = iter(self.loader)
            try:
                return next(self._iter)
            except StopIteration:
                self._iter = None

    def teardown(self, ctx: RankContext) -> None:
        for attr in ("model", "models", "ddp", "loader", "_iter", "device_batches"):
            if hasattr(self, attr):
                delattr(self, attr)
        gc.collect()
        if ctx.is_cuda:
            import torch

            torch.cuda.empty_cache()

    # -- running -----------------------------------------------------------------------------------
    def run_once(self, ctx: RankContext, harness: Any) -> dict[str, float]:
        self._harness = harness  # its energy meter is read around every timed loop
        values: dict[str, float] = {}
        with oom_as_memory_error():
            for p in self.args["precision"]:
                if p in self.unavailable:
                    continue
                model = self._model_for(p)
                prec = Precision(p, ctx.device)
                got: dict[str, float] = {}
                try:
                    for action in self.args["model_action"]:
                        if action == "train":
                            got.update(self._train(ctx, model, prec))
                        else:
                            got.update(self._inference(ctx, model, prec))
                except RuntimeError as exc:
                    # A CPU without fp16/bf16 kernels for a layer (oneDNN's LSTM on CPUs without
                    # AVX-512) cannot run that precision: the others still run. On GPUs it is a failure.
                    if ctx.is_cuda or p == "fp32" or is_oom(exc):
                        raise
                    why = f"{p} does not run on this CPU: {str(exc).strip().splitlines()[0][:200]}"
                    skip = getattr(self, "skip_metric", None)
                    if skip is None:
                        raise
                    skip([m.name for m in self.metrics() if m.name.startswith(f"{p}_")], why)
                    continue
                values.update(got)
        return values

    def _model_for(self, p: str) -> Any:
        if p not in FP8:
            return self.model
        if "fp8" not in self.models:
            self.models["fp8"] = to_transformer_engine(copy.deepcopy(self.model))
        return self.models["fp8"]

    def _wrapped(self, ctx: RankContext, model: Any) -> Any:
        if not ctx.distributed:
            return model
        if id(model) not in self.ddp:
            from torch.nn.parallel import DistributedDataParallel as DDP

            ids = [ctx.device.index] if ctx.is_cuda else None
            self.ddp[id(model)] = DDP(model, device_ids=ids)
        return self.ddp[id(model)]

    def _optimizer(self, model: Any) -> Any:
        import torch

        kind, lr = self.args["optimizer"], self.args["lr"]
        if kind == "sgd":
            return torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
        if kind == "adam":
            return torch.optim.Adam(model.parameters(), lr=lr)
        return torch.optim.AdamW(model.parameters(), lr=lr)

    def _to_device(self, batch: tuple, ctx: RankContext) -> tuple:
        """The batch on the device: a no-op for the resident pool; a copy (asynchronous from pinned
        memory) for the loader's host batches."""
        return tuple(self._device_tensor(t, ctx) for t in batch)

    def _train_step_fn(
        self, ctx: RankContext, module: Any, opt: Any, prec: Precision
    ) -> Callable[[tuple], Any]:
        scaler = prec.scaler

        def step(batch: tuple) -> Any:
            *inputs, labels = self._to_device(batch, ctx)
            with prec.autocast():
                loss = self.loss(module(*inputs), labels)
            opt.zero_grad(set_to_none=True)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                opt.step()
            return loss.detach()

        return step

    def _check_trains(self, ctx: RankContext, model: Any, step: Callable, prec: Precision) -> int:
        """The loss of the fixed batch must fall below its first value within the check's optimizer steps.

        Each step's loss is the batch's loss before that step's update; one more forward pass after the
        last update gives the final value. Returns the steps taken.
        """
        import torch

        # A fresh batch for every check (precisions share the model, which by now may have learnt the last
        # one), the same on every rank so DDP's averaged gradient descends on it.
        self._checks += 1
        gen = torch.Generator().manual_seed(CHECK_SEED + self._checks)
        fixed = tuple(self._device_tensor(t, ctx) for t in self.make_samples(self.batch, gen))
        want = self.args["check_steps"]
        seen: list[float] = []
        done = attempts = 0
        # fp16's gradient scaler skips the steps whose gradients overflow while it calibrates.
        while done < want and attempts < want + 24:
            torch.manual_seed(CHECK_SEED)  # the same dropout masks every time
            before = prec.scale()
            value = float(step(fixed))
            attempts += 1
            if not math.isfinite(value):
                raise CheckFailed(
                    f"{prec.name} training: loss is {value} at step {attempts} on a fixed batch"
                )
            seen.append(value)
            if prec.scale() >= before:
                done += 1
        torch.manual_seed(CHECK_SEED)
        with torch.no_grad(), prec.autocast():
            *inputs, labels = fixed
            after = float(self.loss(model(*inputs), labels))
        first = seen[0]
        if not math.isfinite(after):
            raise CheckFailed(
                f"{prec.name} training diverged: loss on a fixed batch went from {first:.6g} "
                f"to {after} after {done} optimizer steps"
            )
        best = min([*seen[1:], after])
        if done == 0 or not best < first:
            raise CheckFailed(
                f"{prec.name} training does not train: loss on a fixed batch went from {first:.6g} "
                f"to {after:.6g} after {done} optimizer steps (lowest {best:.6g}; lr "
                f"{self.args['lr']:g} with {self.args['optimizer']})"
            )
        return attempts

    def _train(self, ctx: RankContext, model: Any, prec: Precision) -> dict[str, float]:
        import torch

        module = self._wrapped(ctx, model)
        module.train()
        opt = self._optimizer(model)
        step = self._train_step_fn(ctx, module, opt, prec)
        self._reset_memory(ctx)
        warm = self._check_trains(ctx, model, step, prec)
        for _ in range(max(0, self.args["num_warmup"] - warm)):
            step(self._next_batch())
        times, losses, wall_ms = self._timed_loop(ctx, step, collective=ctx.distributed)
        bad = [i for i, v in enumerate(torch.stack(losses).float().cpu().tolist()) if not math.isfinite(v)]
        if bad:
            raise CheckFailed(
                f"{prec.name} training: loss is not finite at timed step {bad[0] + 1} "
                f"({len(bad)} of {len(losses)} steps)"
            )
        step_ms = sum(times) / len(times)
        if ctx.distributed:
            step_ms = self._all_reduce_max(ctx, step_ms)
            self._check_replicas(ctx, model, prec.name)
        out = self._rates(prec.name, "train", step_ms, model, 3.0)
        out.update(self._busy(ctx, prec.name, "train", step, times, wall_ms))
        out.update(self._memory(ctx, prec.name, "train"))
        del opt
        return out

    def _inference(self, ctx: RankContext, model: Any, prec: Precision) -> dict[str, float]:
        import torch

        model.eval()
        last: list[Any] = []

        def step(batch: tuple) -> Any:
            *inputs, _ = self._to_device(batch, ctx)
            with prec.autocast():
                out = model(*inputs)
            return out

        self._reset_memory(ctx)
        try:
            with torch.no_grad():
                for _ in range(self.args["num_warmup"]):
                    step(self._next_batch())
                times, last, wall_ms = self._timed_loop(ctx, step, collective=False, keep_last=True)
                busy = self._busy(ctx, prec.name, "inference", step, times, wall_ms)
        finally:
            model.train()
        if not bool(torch.isfinite(last[-1].float()).all()):
            raise CheckFailed(f"{prec.name} inference: the model's output is not finite")
        bs = self.batch
        out = self._rates(prec.name, "inference", sum(times) / len(times), model, 1.0)
        tput = [bs * 1000.0 / t for t in times]
        for q in PERCENTILES:
            out[f"{prec.name}_inference_step_time_{q}"] = percentile(times, float(q))
            out[f"{prec.name}_inference_throughput_{q}"] = percentile(tput, float(q))
        out.update(busy)
        out.update(self._memory(ctx, prec.name, "inference"))
        return out

    def _rates(
        self, p: str, action: str, step_ms: float, model: Any, flops_factor: float
    ) -> dict[str, float]:
        if not step_ms > 0:
            raise CheckFailed(f"{p} {action}: measured a non-positive step time ({step_ms!r} ms)")
        tput = self.batch * 1000.0 / step_ms
        out = {f"{p}_{action}_step_time": step_ms, f"{p}_{action}_throughput": tput}
        harness = getattr(self, "_harness", None)
        if harness is not None:  # the timed loop's power and the throughput per watt
            out.update(harness.measure(f"{p}_{action}", out, getattr(self, "_reading", None)))
        if self.reports_tflops:
            out[f"{p}_{action}_tflops"] = flops_factor * self.forward_flops(model) * tput / 1e12
        return out

    def _timed_loop(
        self, ctx: RankContext, step: Callable, *, collective: bool, keep_last: bool = False
    ) -> tuple[list[float], list[Any], float]:
        """Per-step times (ms), the steps' results (or only the last one), and the loop's wall time
        (ms, from the first batch fetched to the device idle after the last step)."""
        import torch

        duration = float(self.args["duration"])
        steps = self.args["num_steps"]
        deadline = time.monotonic() + duration
        results: list[Any] = []
        marks: list[Any] = []
        cuda = ctx.is_cuda
        ctx.sync()
        harness = getattr(self, "_harness", None)
        meter = harness.energy_window() if harness is not None else None
        if meter is not None:
            meter.start()
        wall0 = time.perf_counter()
        i = 0
        while True:
            batch = self._next_batch()
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                r = step(batch)
                end.record()
                marks.append((start, end))
            else:
                t0 = time.perf_counter()
                r = step(batch)
                marks.append(time.perf_counter() - t0)
            if keep_last:
                results[:] = [r]
            else:
                results.append(r)
            i += 1
            if duration > 0:
                stop = time.monotonic() >= deadline
                if collective:  # every DDP rank must take the same number of steps
                    stop = self._all_reduce_max(ctx, float(stop)) > 0
                if stop:
                    break
            elif i >= steps:
                break
        if cuda:
            torch.cuda.synchronize(ctx.device)
            wall_ms = (time.perf_counter() - wall0) * 1000.0
            times = [s.elapsed_time(e) for s, e in marks]
        else:
            wall_ms = (time.perf_counter() - wall0) * 1000.0
            times = [t * 1000.0 for t in marks]
        self._reading = harness.end_window(meter, "model") if harness is not None and meter else None
        return times, results, wall_ms

    def _busy(
        self, ctx: RankContext, p: str, action: str, step: Callable, times: list[float], wall_ms: float
    ) -> dict[str, float]:
        """``p_action_device_busy``: the device's work over the loop's wall time (%), at most 100."""
        if not wall_ms > 0:
            return {}
        if ctx.is_cuda:
            work = self._device_step_ms(ctx, step)
            if work is None:
                skip = getattr(self, "skip_metric", None)
                if skip is not None:
                    skip(
                        f"{p}_{action}_device_busy",
                        "the step's device time could not be isolated (no torch.cuda._sleep, or the host "
                        "took longer to queue a step than the longest hold)",
                    )
                return {}
            work_ms = work * len(times)
        else:
            work_ms = sum(times)  # the host is the device: the loop's time not spent in the steps
        return {f"{p}_{action}_device_busy": min(100.0, 100.0 * work_ms / wall_ms)}

    def _device_step_ms(self, ctx: RankContext, step: Callable, probes: int = 3) -> float | None:
        """Device time of one step with every host gap removed (ms; median of ``probes``): a sleep
        kernel holds the stream while the host queues the step, then CUDA events time the queued
        work back to back. A host synchronisation inside the step (fp16's GradScaler) lets the part
        after it be queued only as it runs, so that part keeps its gaps: an upper bound there."""
        import torch

        sleep = getattr(torch.cuda, "_sleep", None)
        if sleep is None:
            return None
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize(ctx.device)
        a.record()
        sleep(1_000_000)
        b.record()
        b.synchronize()
        cycles_per_ms = 1_000_000 / max(a.elapsed_time(b), 1e-3)
        hold_ms, out = 20.0, []
        grad = torch.is_grad_enabled()
        for _ in range(probes + 2):
            batch = self._next_batch()  # (a loader's batch: its copy is part of the step's work)
            torch.cuda.synchronize(ctx.device)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            sleep(int(hold_ms * cycles_per_ms))
            t0 = time.perf_counter()
            start.record()
            with torch.set_grad_enabled(grad):
                step(batch)
            end.record()
            host_ms = (time.perf_counter() - t0) * 1000.0
            end.synchronize()
            # Always the same number of probe steps: under DDP every rank must take as many.
            if host_ms < 0.8 * hold_ms:
                out.append(start.elapsed_time(end))
            else:
                hold_ms = min(4 * host_ms + 10.0, 5000.0)  # the host outran the hold: hold longer
        return sorted(out[-probes:])[len(out[-probes:]) // 2] if out else None

    def _comm_device(self, ctx: RankContext) -> Any:
        import torch

        return ctx.device if ctx.backend == "nccl" else torch.device("cpu")

    def _all_reduce_max(self, ctx: RankContext, value: float) -> float:
        import torch
        import torch.distributed as dist

        t = torch.tensor([value], dtype=torch.float64, device=self._comm_device(ctx))
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())

    def _check_replicas(self, ctx: RankContext, model: Any, p: str) -> None:
        """DDP keeps every replica's weights equal; compare a checksum across ranks."""
        import torch
        import torch.distributed as dist

        with torch.no_grad():
            total = sum(float(q.double().sum()) for q in model.parameters())
        t = torch.tensor([total, -total], dtype=torch.float64, device=self._comm_device(ctx))
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        hi, lo = float(t[0]), -float(t[1])
        if abs(hi - lo) > 1e-9 * max(1.0, abs(hi)):
            raise CheckFailed(f"{p} training: DDP replicas diverged (weight checksums {lo!r} .. {hi!r})")

    def _reset_memory(self, ctx: RankContext) -> None:
        if ctx.is_cuda:
            import torch

            torch.cuda.reset_peak_memory_stats(ctx.device)

    def _memory(self, ctx: RankContext, p: str, action: str) -> dict[str, float]:
        if not ctx.is_cuda:
            return {}
        import torch

        gib = float(1 << 30)
        return {
            f"{p}_{action}_mem_allocated": torch.cuda.memory_allocated(ctx.device) / gib,
            f"{p}_{action}_max_mem_allocated": torch.cuda.max_memory_allocated(ctx.device) / gib,
        }


def matmul_weights(module: Any) -> int:
    """Elements of the weight matrices that multiply activations (Linear, parallel Linear, Conv1D)."""
    import torch

    n = 0
    for m in module.modules():
        if isinstance(m, torch.nn.Linear) or type(m).__name__.endswith(("Conv1D", "Linear")):
            w = getattr(m, "weight", None)
            if w is not None and w.dim() == 2:
                n += w.numel()
    return n


def transformer_forward_flops(
    *, seq_len: int, layers: int, hidden: int, per_token_weights: int, per_sample_weights: int
) -> float:
    """Forward FLOPs of one sequence: 2 per multiply-add of every weight matrix applied to each token,
    plus attention's two ``seq x seq`` products per layer (QK^T and AV, counted in full)."""
    return 2.0 * seq_len * per_token_weights + 2.0 * per_sample_weights + 4.0 * layers * seq_len**2 * hidden


# batch_size 0 on an 80 GiB GPU: big enough to keep it busy at seq_len 512, small enough to fit in fp32.
TRANSFORMER_GPU_BATCH = {
    "bert-base": 64,
    "bert-large": 32,
    "gpt2-small": 32,
    "gpt2-medium": 16,
    "gpt2-large": 8,
    "gpt2-xl": 4,
}


def transformer_class(
    base: type, name: str, size: tuple[int, int, int], class_name: str, head: str, module: str
) -> type:
    """A registered-ready class for one published size of a transformer family (GPT-2, BERT)."""
    hidden, layers, heads = size
    params = {
        **model_params(optimizer="adamw", lr=1e-4),
        "seq_len": Param("int", 512, "tokens per sample"),
        "num_classes": Param("int", 100, f"classes of the classifier on {head}"),
    }
    attrs = {
        "name": f"pytorch-{name}",
        "size": size,
        "description": f"{name} (hidden {hidden}, {layers} layers, {heads} heads): training/inference on "
        "synthetic tokens",
        "params": params,
        "gpu_batch": TRANSFORMER_GPU_BATCH.get(name, 16),
        "__module__": module,
    }
    return type(class_name, (base,), attrs)


def family_main(default: str) -> int:
    """``python -m sb_bench.model.<family> [pytorch-<model>] [--flags]``: one model of a family standalone."""
    from sb_bench.__main__ import standalone_main

    name = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else default
    return standalone_main(name, [a for a in sys.argv[1:] if a != name])
