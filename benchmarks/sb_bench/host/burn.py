"""A soak round's load on one node: a GEMM stress for the rest of the round, its telemetry sampled throughout.

``sb-fleet accept`` starts it on every node of a soak round after the round's benchmarks (campaign key
``load:``, docs/campaigns.md "The load and telemetry")::

    python -m sb_bench.host.burn --kind gpu-burn|cpu-gemm --seconds N --interval S [--size M] [--threads T]
        [--sysfs DIR --procfs DIR --tool-dir DIR]

* ``gpu-burn``: every CUDA GPU of the node multiplies the same two ``size x size`` bf16 matrices back to
  back (sb_bench.micro.gpu_burn's loop: every second's last product is compared with the first, wrong
  entries counted); on a node without CUDA it does nothing and says so (``skipped``).
* ``cpu-gemm``: a float32 GEMM loop on the node's allotted cores (its CPU affinity; ``--threads`` fewer)
  through numpy's BLAS (its import is a tenth of torch's: the cores are busy sooner), else torch, else a
  Python loop on one core; every second's last product is compared with the first.

The process ends by itself: after ``--seconds`` (its own deadline, whatever became of the control node
that started it; SIGALRM a grace later ends it even if a GEMM hangs), on SIGTERM/SIGINT/SIGHUP (sb-fleet's
stop), and when its stdout is gone (a line every sample: the control node's client died). It prints one
line per sample (``sb-load: <n>``) and last ``SB_LOAD_SUMMARY <json>``: its start and end (epoch
seconds), the work done and the telemetry's summary (sb_bench.host.load_telemetry).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from sb_bench.health.record import Env
from sb_bench.host.load_telemetry import Summary, fabric_counters, kernel_xids, open_source

SUMMARY_MARK = "SB_LOAD_SUMMARY"
KINDS = ("gpu-burn", "cpu-gemm")
GRACE_S = 30  # SIGALRM this long after the deadline: the process ends even if a GEMM never returns
CHECK_S = 1.0  # a worker compares its product with the first this often (and looks at the stop flag)


class Work:
    """What the workers did: GEMMs, floating point operations, wrong entries; when the first GEMM ended."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.gemms = 0
        self.flops = 0.0
        self.errors = 0
        self.working_from: float | None = None
        self.problem = ""

    def add(self, gemms: int, flops: float, errors: int) -> None:
        with self.lock:
            if self.working_from is None:
                self.working_from = time.time()
            self.gemms += gemms
            self.flops += flops
            self.errors += errors


def allotted_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def torch_loop(stop: threading.Event, work: Work, device: str, size: int, dtype_name: str) -> None:
    """gpu_burn's loop on one device: the same product again and again, checked every CHECK_S."""
    import torch

    from sb_bench.micro.gpu_burn import count_mismatches

    dtype = getattr(torch, dtype_name)
    gen = torch.Generator(device="cpu").manual_seed(4242)
    a = torch.randn(size, size, generator=gen).to(device, dtype)
    b = torch.randn(size, size, generator=gen).to(device, dtype)
    c = torch.empty(size, size, device=device, dtype=dtype)
    torch.matmul(a, b, out=c)
    ref = c.clone()
    rtol = 2e-2 if dtype_name in ("float16", "bfloat16") else 1e-4
    cuda = device.startswith("cuda")
    n = 1
    while not stop.is_set():
        t_end = time.monotonic() + CHECK_S
        k = 0
        while time.monotonic() < t_end and not stop.is_set():
            torch.matmul(a, b, out=c)
            k += 1
            if cuda and k % 8 == 0:
                torch.cuda.synchronize(device)  # no more than a few GEMMs queued ahead of the stop flag
        if cuda:
            torch.cuda.synchronize(device)
        work.add(k + n, 2.0 * size**3 * (k + n), count_mismatches(c, ref, rtol))
        n = 0


def numpy_loop(stop: threading.Event, work: Work, size: int) -> None:
    import numpy as np

    rng = np.random.default_rng(4242)
    a = rng.standard_normal((size, size), dtype=np.float32)
    b = rng.standard_normal((size, size), dtype=np.float32)
    ref = a @ b
    while not stop.is_set():
        t_end, k = time.monotonic() + CHECK_S, 0
        c = ref
        while time.monotonic() < t_end and not stop.is_set():
            c = a @ b
            k += 1
        scale = float(abs(ref).max()) or 1.0
        work.add(k, 2.0 * size**3 * k, int((abs(c - ref) > 1e-4 * scale).sum()))


def python_loop(stop: threading.Event, work: Work) -> None:
    x = 0
    while not stop.is_set():
        t_end, k = time.monotonic() + CHECK_S, 0
        while time.monotonic() < t_end:
            for i in range(10000):
                x = (x * 31 + i) & 0xFFFF
            k += 1
        work.add(k, 0.0, 0)


def start_workers(
    kind: str, size: int, threads: int, stop: threading.Event, work: Work
) -> list[threading.Thread]:
    """The load's thread: it loads torch (seconds: the telemetry is sampled meanwhile) and runs the loop,
    one thread a GPU; where the load cannot run here it ends at once, ``work.problem`` saying why."""
    t = threading.Thread(target=guarded, args=(launch, (kind, size, threads, stop, work), work), daemon=True)
    t.start()
    return [t]


def launch(kind: str, size: int, threads: int, stop: threading.Event, work: Work) -> None:
    if kind == "gpu-burn":
        try:
            import torch

            n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        except ImportError:
            n = 0
        if not n:
            work.problem = "skipped: gpu-burn needs a CUDA GPU (torch with CUDA); none here"
            return
        gpus = [
            threading.Thread(
                target=guarded, args=(torch_loop, (stop, work, f"cuda:{i}", size or 8192, "bfloat16"), work)
            )
            for i in range(n)
        ]
        for t in gpus:
            t.start()
        for t in gpus:
            t.join()
        return
    n = min(allotted_cores(), threads) if threads > 0 else allotted_cores()
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(n)  # before numpy or torch loads its BLAS
    try:
        import numpy  # noqa: F401  (a tenth of torch's import: the cores are busy sooner)
    except ImportError:
        pass
    else:
        numpy_loop(stop, work, size or 512)
        return
    try:
        import torch
    except ImportError:
        work.problem = "neither numpy nor torch here: a Python loop on one core"
        python_loop(stop, work)
        return
    torch.set_num_threads(n)
    torch_loop(stop, work, "cpu", size or 512, "float32")


def guarded(fn: Any, args: tuple[Any, ...], work: Work) -> None:
    try:
        fn(*args)
    except Exception as exc:  # a GPU that fails under load: said in the summary, the others go on
        with work.lock:
            work.problem = (work.problem + "; " if work.problem else "") + f"{type(exc).__name__}: {exc}"[
                :300
            ]


def say(line: str) -> bool:
    """A line on stdout; False when it is gone (the control node's client died)."""
    try:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
        return True
    except (BrokenPipeError, OSError):
        return False


def _fabric(env: Env, gpus: bool) -> dict[str, int]:
    """The fabric's counters now (load_telemetry.fabric_counters); none where they cannot be read."""
    try:
        return fabric_counters(env, nvlink=gpus)
    except Exception:  # noqa: BLE001 - the load goes on; the rounds' health checks read them too
        return {}


def run(args: argparse.Namespace) -> dict[str, Any]:
    start = time.time()
    deadline = time.monotonic() + args.seconds
    signal.alarm(int(args.seconds + GRACE_S))  # SIGALRM's default action ends the process
    stop = threading.Event()

    def on_signal(_sig: int, _frame: Any) -> None:
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    env = Env(Path(args.sysfs), Path(args.procfs), Path(args.tool_dir) if args.tool_dir else None)
    work = Work()
    workers = start_workers(args.kind, args.size, args.threads, stop, work)
    source, why = open_source(env)
    xid_start = kernel_xids(env)
    fabric_start = _fabric(env, source is not None)
    summary = Summary(args.interval)
    gone = False
    while not stop.is_set() and time.monotonic() < deadline:
        if source is not None:
            try:
                summary.add(time.time() - start, source.sample())
            except Exception as exc:  # a source that fails mid-load: the load goes on
                why = f"telemetry: {type(exc).__name__}: {exc}"[:300]
        if not say(f"sb-load: {summary.samples}"):
            gone = True
            break
        stop.wait(max(0.0, min(args.interval, deadline - time.monotonic())))
    stop.set()
    for t in workers:
        t.join(timeout=GRACE_S / 2)
    end = time.time()
    if source is not None:
        source.close()
    tele = summary.to_json()
    xid_end = kernel_xids(env)
    if xid_start is not None and xid_end is not None:
        tele["counters"]["xid"] = [xid_start, xid_end]
    fabric_end = _fabric(env, source is not None)
    for name, first in fabric_start.items():
        if name in fabric_end:
            tele["counters"][name] = [first, fabric_end[name]]
    nvml_xids = getattr(source, "xids", None)
    if isinstance(nvml_xids, dict):
        tele["counters"]["xid_events"] = [0, sum(len(v) for v in nvml_xids.values())]
    busy = (end - work.working_from) if work.working_from is not None else 0.0
    return {
        "kind": args.kind,
        "start": round(start, 3),
        "working_from": round(work.working_from, 3) if work.working_from is not None else None,
        "end": round(end, 3),
        "ended_by": "lost the control node"
        if gone
        else "deadline"
        if time.monotonic() >= deadline
        else "stop",
        "workers": len(workers),
        "gemms": work.gemms,
        "gflops": round(work.flops / busy / 1e9, 2) if busy > 0 else None,
        "errors": work.errors,
        "problem": work.problem,
        "telemetry_source": getattr(source, "name", "") if source is not None else "",
        "telemetry_problem": why,
        "telemetry": tele,
    }


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m sb_bench.host.burn", description=__doc__.split("\n")[0])
    ap.add_argument("--kind", choices=KINDS, required=True)
    ap.add_argument("--seconds", type=float, required=True, help="the load's own deadline, from its start")
    ap.add_argument("--interval", type=float, default=5.0, help="seconds between telemetry samples")
    ap.add_argument("--size", type=int, default=0, help="matrix size (0: 8192 on a GPU, 512 on a CPU)")
    ap.add_argument(
        "--threads", type=int, default=0, help="cpu-gemm: at most this many cores (0: all allotted)"
    )
    ap.add_argument("--sysfs", default="/sys")
    ap.add_argument("--procfs", default="/proc")
    ap.add_argument("--tool-dir", default="")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not (0 < args.seconds <= 7 * 86400) or not (0.1 <= args.interval <= 3600):
        print("burn: --seconds must be in (0, 604800] and --interval in [0.1, 3600]", file=sys.stderr)
        return 2
    doc = run(args)
    say(f"{SUMMARY_MARK} {json.dumps(doc, sort_keys=True)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
