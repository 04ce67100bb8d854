"""NVML energy against nvidia-smi's power reading over one GEMM window, for a machine with an NVIDIA GPU.

    python3 bench/gpu_energy_check.py [--seconds 10] [--device 0] [--out bench/gpu-results/energy-DATE.json]

What it checks (issue 31): the suite's meter (``sb_bench.core.energy.meter_for``: NVML's
``nvmlDeviceGetTotalEnergyConsumption`` read just before and after the window) gives a mean power
within 5% of the mean of ``nvidia-smi --query-gpu=power.draw -lms 100`` (10 Hz) sampled over the same
window of back-to-back fp16 GEMMs (8192^3, tensor cores). Then the same through the harness:
``gemm-flops`` with ``precision: [fp16_tc]`` and ``min_time`` = the window, whose ``fp16_tc_power``
must agree with nvidia-smi's mean over that run's window to 5% too, and whose
``fp16_tc_flops_per_watt`` must equal ``fp16_tc_flops / fp16_tc_power``.

Prints ``CHECK name: PASS|FAIL|SKIP detail`` lines and writes the figures, the GPU, the driver and the
configuration to ``--out`` (default ``bench/gpu-results/energy-<UTC date>.json``). Without a GPU
every check is a SKIP with the reason and the exit status is 0; a FAIL exits 1.

Note: since driver R535 ``power.draw`` is a one-second average (``power.draw.instant`` is the
instantaneous one); over a 10 s window the two means differ by well under 5%, and the first and last
second are where they disagree, so the window is long on purpose.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

TOLERANCE = 0.05
RESULTS: list[dict] = []


def record(name: str, ok: bool | None, detail: str, **data) -> None:
    status = "SKIP" if ok is None else ("PASS" if ok else "FAIL")
    RESULTS.append({"check": name, "status": status, "detail": detail, **data})
    print(f"CHECK {name}: {status} {detail}", flush=True)


class SmiSampler:
    """``nvidia-smi --query-gpu=power.draw -lms 100`` in the background; samples stamped on arrival."""

    def __init__(self, index: int, field: str = "power.draw"):
        self.proc = subprocess.Popen(
            [
                "nvidia-smi",
                "-i",
                str(index),
                f"--query-gpu={field}",
                "--format=csv,noheader,nounits",
                "-lms",
                "100",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.samples: list[tuple[float, float]] = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                self.samples.append((time.monotonic(), float(line.strip())))
            except ValueError:
                continue

    def mean(self, t0: float, t1: float) -> tuple[float | None, int]:
        inside = [w for t, w in self.samples if t0 <= t <= t1]
        return (sum(inside) / len(inside) if inside else None, len(inside))

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def gemm_window(seconds: float, device: int):
    """Back-to-back fp16 GEMMs for ``seconds`` on ``cuda:device``, the suite's meter read around them."""
    import torch
    from sb_bench.core import energy

    dev = torch.device("cuda", device)
    torch.cuda.set_device(dev)
    a = torch.randn(8192, 8192, device=dev, dtype=torch.float16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.float16)
    c = torch.empty_like(a)
    for _ in range(20):  # clocks up before the window
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize()
    meter = energy.meter_for(dev)
    if isinstance(meter, energy.NoMeter):
        return None, meter.reason, 0.0, 0.0
    t0 = time.monotonic()
    meter.start()
    while time.monotonic() - t0 < seconds:
        for _ in range(20):
            torch.matmul(a, b, out=c)
        torch.cuda.synchronize()
    reading = meter.stop()
    t1 = time.monotonic()
    meter.close()
    return reading, meter.source, t0, t1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    out = (
        args.out
        or ROOT / "bench" / "gpu-results" / f"energy-{dt.datetime.now(dt.timezone.utc):%Y-%m-%d}.json"
    )
    info: dict = {"seconds": args.seconds, "device": args.device, "tolerance": TOLERANCE}
    try:
        import torch
    except ImportError:
        torch = None  # type: ignore[assignment]
    if torch is None or not torch.cuda.is_available() or getattr(torch.version, "hip", None):
        for name in ("nvml-vs-smi", "harness-vs-smi"):
            record(name, None, "needs an NVIDIA GPU with torch (CUDA); none here")
        return 0
    info["gpu"] = torch.cuda.get_device_name(args.device)
    info["driver"] = subprocess.run(
        ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader", "-i", str(args.device)],
        capture_output=True,
        text=True,
    ).stdout.strip()
    info["torch"] = torch.__version__

    smi = SmiSampler(args.device)
    try:
        time.sleep(1.0)  # nvidia-smi's first lines
        reading, source, t0, t1 = gemm_window(args.seconds, args.device)
        if reading is None:
            record("nvml-vs-smi", None, f"no energy meter: {source}")
        else:
            ref, n = smi.mean(t0, t1)
            ok = ref is not None and abs(reading.watts - ref) <= TOLERANCE * ref
            record(
                "nvml-vs-smi",
                ok,
                f"{source}: {reading.watts:.1f} W over {reading.seconds:.2f} s; nvidia-smi power.draw mean "
                f"{ref if ref is None else round(ref, 1)} W from {n} samples (10 Hz)",
                meter_w=reading.watts,
                smi_w=ref,
                samples=n,
                source=source,
                joules=reading.joules,
            )

        from sb_bench.core.harness import run_benchmark

        h0 = time.monotonic()
        env = run_benchmark(
            "gemm-flops",
            {"precision": ["fp16_tc"], "min_time": args.seconds, "num_warmup": 20, "device": "cuda"},
        )
        h1 = time.monotonic()
        r = env.get("result", {})
        power = (r.get("fp16_tc_power") or [None])[0]
        flops = (r.get("fp16_tc_flops") or [None])[0]
        eff = (r.get("fp16_tc_flops_per_watt") or [None])[0]
        if power is None:
            record("harness-vs-smi", False, f"gemm-flops reported no fp16_tc_power: {env.get('reason')}")
        else:
            # The harness's own window (this process's monotonic clock), as its energy section records it.
            win = env["energy"]["windows"]["fp16_tc"]
            ref, n = smi.mean(win["start_monotonic"], win["start_monotonic"] + win["seconds"])
            ok = (
                ref is not None
                and abs(power - ref) <= TOLERANCE * ref
                and abs(eff - flops / power) < 1e-6 * eff
            )
            record(
                "harness-vs-smi",
                ok,
                f"fp16_tc_power {power:.1f} W, fp16_tc_flops {flops:.0f} GFLOPS, {eff:.1f} GFLOPS/W; "
                f"nvidia-smi mean {ref if ref is None else round(ref, 1)} W ({n} samples)",
                power_w=power,
                flops=flops,
                per_watt=eff,
                smi_w=ref,
                run_s=h1 - h0,
                energy=env.get("energy"),
            )
    finally:
        smi.stop()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"config": info, "checks": RESULTS}, indent=2) + "\n")
    print(f"wrote {out}")
    return 1 if any(c["status"] == "FAIL" for c in RESULTS) else 0


if __name__ == "__main__":
    sys.exit(main())
