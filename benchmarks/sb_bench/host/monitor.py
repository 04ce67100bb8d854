"""System health sampled while benchmarks run: is a slow GPU throttling, failing, or fine?

A background thread samples every ``interval`` seconds:

* per GPU, through NVML (``nvidia-ml-py``, where installed and a driver answers): temperature,
  power and power limit, SM and memory clocks, utilisation, memory used, ECC error counts
  (volatile corrected/uncorrected), retired pages (single/double bit, pending), remapped rows,
  the clock-throttle reasons (thermal, power cap, hardware slowdown ...) and XID error events;
* for the host (always; the equivalents on a CPU-only host): CPU utilisation and clock, memory
  used, the hottest thermal zone, EDAC memory error counts (corrected/uncorrected: the host's
  ECC), and the CPU's thermal-throttle event count.

Field names follow SuperBench's monitor (``gpu_temperature``, ``gpu_power_limit``,
``gpu_corrected_ecc``, ``gpu_uncorrected_ecc``, ``gpu_remap_*``, ``cpu_usage``, ``mem_used`` ...).
:meth:`Monitor.summary` reduces the samples to min/max/avg/last per field, the counters' increase
over the run, the throttle reasons seen and the XIDs — what a report needs to say "GPU 3 was
power-capped at 300 W and 83 °C during gemm-flops".

Used two ways: the harness samples around every benchmark when ``SB_MONITOR_INTERVAL`` (seconds)
is set and puts the summary in the result's ``monitor`` field (each rank watches its own GPU; local
rank 0 also watches the host); and ``python -m sb_bench.host.monitor --interval 1 --out FILE.jsonl``
samples a whole step until it is stopped or ``--duration`` runs out, printing the summary.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

# NVML clock-throttle reason bits (nvml.h, nvmlClocksThrottleReason*).
THROTTLE_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
# Reasons that mean the GPU ran slower than it could (not idle, not a user setting).
SLOWDOWN = {
    "sw_power_cap",
    "hw_slowdown",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
}


def decode_throttle(mask: int) -> list[str]:
    return [name for bit, name in THROTTLE_REASONS.items() if mask & bit]


# -- host (procfs / sysfs) -------------------------------------------------------------------------
class HostSource:
    """CPU, memory, temperature and EDAC counters from /proc and /sys (no dependency)."""

    def __init__(self, root: str = "/"):
        self.root = Path(root)
        self._last_cpu: tuple[int, int] | None = None
        self.sample()  # prime the CPU-time delta

    def _read(self, rel: str) -> str | None:
        try:
            return (self.root / rel).read_text()
        except OSError:
            return None

    def sample(self) -> dict[str, float]:
        out: dict[str, float] = {}
        stat = self._read("proc/stat")
        if stat:
            vals = [int(x) for x in stat.splitlines()[0].split()[1:]]
            idle, total = vals[3] + (vals[4] if len(vals) > 4 else 0), sum(vals)
            if self._last_cpu:
                di, dt = idle - self._last_cpu[0], total - self._last_cpu[1]
                if dt > 0:
                    out["cpu_usage"] = 100.0 * (1 - di / dt)
            self._last_cpu = (idle, total)
        mem = self._read("proc/meminfo")
        if mem:
            info = {ln.split(":")[0]: int(ln.split()[1]) for ln in mem.splitlines() if len(ln.split()) >= 2}
            if "MemTotal" in info:
                out["mem_total"] = info["MemTotal"] / 1024.0  # MiB
                out["mem_used"] = (
                    info["MemTotal"] - info.get("MemAvailable", info.get("MemFree", 0))
                ) / 1024.0
        freqs = []
        for f in sorted((self.root / "sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq/scaling_cur_freq")):
            try:
                freqs.append(int(f.read_text()) / 1000.0)
            except (OSError, ValueError):
                pass
        if not freqs and (cpuinfo := self._read("proc/cpuinfo")):
            freqs = [float(ln.split(":")[1]) for ln in cpuinfo.splitlines() if ln.startswith("cpu MHz")]
        if freqs:
            out["cpu_clock_avg"] = sum(freqs) / len(freqs)
            out["cpu_clock_min"] = min(freqs)
        temps = []
        for z in (self.root / "sys/class/thermal").glob("thermal_zone*/temp"):
            try:
                temps.append(int(z.read_text()) / 1000.0)
            except (OSError, ValueError):
                pass
        if temps:
            out["cpu_temperature"] = max(temps)
        ce = ue = None
        for mc in (self.root / "sys/devices/system/edac/mc").glob("mc[0-9]*"):
            try:
                ce = (ce or 0) + int((mc / "ce_count").read_text())
                ue = (ue or 0) + int((mc / "ue_count").read_text())
            except (OSError, ValueError):
                pass
        if ce is not None:
            out["mem_corrected_ecc"] = float(ce)
            out["mem_uncorrected_ecc"] = float(ue or 0)
        throttles = 0
        seen = False
        for f in (self.root / "sys/devices/system/cpu").glob(
            "cpu[0-9]*/thermal_throttle/core_throttle_count"
        ):
            try:
                throttles += int(f.read_text())
                seen = True
            except (OSError, ValueError):
                pass
        if seen:
            out["cpu_throttle_count"] = float(throttles)
        load = self._read("proc/loadavg")
        if load:
            out["load_avg_1m"] = float(load.split()[0])
        return out


# -- GPUs (NVML) --------------------------------------------------------------------------------
class NvmlSource:
    """Per-GPU health through NVML. Raises at construction when NVML is unusable."""

    def __init__(self, devices: list[str] | None = None):
        import pynvml  # nvidia-ml-py

        self.nv = pynvml
        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        self.handles: dict[str, Any] = {}
        for d in devices if devices is not None else [str(i) for i in range(count)]:
            if d.startswith("GPU-") or d.startswith("MIG-"):
                h = pynvml.nvmlDeviceGetHandleByUUID(d)
                idx = str(pynvml.nvmlDeviceGetIndex(h))
            else:
                h, idx = pynvml.nvmlDeviceGetHandleByIndex(int(d)), str(int(d))
            self.handles[idx] = h
        self.events = None
        self.xids: dict[str, list[int]] = {i: [] for i in self.handles}
        try:
            es = pynvml.nvmlEventSetCreate()
            for h in self.handles.values():
                pynvml.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, es)
            self.events = es
        except Exception:
            self.events = None  # not supported (e.g. some virtualised GPUs): no XID counting

    def _try(self, fn, *args):
        """``fn(*args)``, or None when it fails or is None (a function this pynvml lacks)."""
        if fn is None:
            return None
        try:
            return fn(*args)
        except Exception:
            return None

    def _call(self, name: str, *args):
        """NVML function ``name`` if this pynvml has it (old ones lack e.g. the row remapper)."""
        return self._try(getattr(self.nv, name, None), *args)

    def _const(self, name: str, default: int) -> int:
        return int(getattr(self.nv, name, default))

    def _drain_xids(self) -> None:
        if self.events is None:
            return
        nv = self.nv
        index_of = {id(h): i for i, h in self.handles.items()}
        while True:
            try:
                ev = (
                    nv.nvmlEventSetWait_v2(self.events, 0)
                    if hasattr(nv, "nvmlEventSetWait_v2")
                    else nv.nvmlEventSetWait(self.events, 0)
                )
            except Exception:
                return
            idx = self._try(nv.nvmlDeviceGetIndex, ev.device)
            key = str(idx) if idx is not None else index_of.get(id(ev.device), "?")
            self.xids.setdefault(key, []).append(int(ev.eventData))

    def sample(self) -> dict[str, dict[str, Any]]:
        nv = self.nv
        self._drain_xids()
        out: dict[str, dict[str, Any]] = {}
        for idx, h in self.handles.items():
            g: dict[str, Any] = {}
            t = self._try(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
            if t is not None:
                g["gpu_temperature"] = float(t)
            p = self._try(nv.nvmlDeviceGetPowerUsage, h)
            if p is not None:
                g["gpu_power"] = p / 1000.0
            pl = self._try(nv.nvmlDeviceGetEnforcedPowerLimit, h)
            if pl is not None:
                g["gpu_power_limit"] = pl / 1000.0
            for name, clk in (("gpu_sm_clock", nv.NVML_CLOCK_SM), ("gpu_mem_clock", nv.NVML_CLOCK_MEM)):
                c = self._try(nv.nvmlDeviceGetClockInfo, h, clk)
                if c is not None:
                    g[name] = float(c)
            u = self._try(nv.nvmlDeviceGetUtilizationRates, h)
            if u is not None:
                g["gpu_usage"] = float(u.gpu)
            m = self._try(nv.nvmlDeviceGetMemoryInfo, h)
            if m is not None:
                g["gpu_mem_used"] = m.used / 2**20
                g["gpu_mem_total"] = m.total / 2**20
            for name, kind in (
                ("gpu_corrected_ecc", self._const("NVML_MEMORY_ERROR_TYPE_CORRECTED", 0)),
                ("gpu_uncorrected_ecc", self._const("NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1)),
            ):
                e = self._call("nvmlDeviceGetTotalEccErrors", h, kind, self._const("NVML_VOLATILE_ECC", 0))
                if e is not None:
                    g[name] = float(e)
            for name, cause in (
                (
                    "gpu_retired_pages_sbe",
                    self._const("NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS", 0),
                ),
                ("gpu_retired_pages_dbe", self._const("NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR", 1)),
            ):
                pages = self._call("nvmlDeviceGetRetiredPages", h, cause)
                if pages is not None:
                    g[name] = float(len(pages))
            pend = self._call("nvmlDeviceGetRetiredPagesPendingStatus", h)
            if pend is not None:
                g["gpu_retired_pages_pending"] = float(pend)
            rr = self._call("nvmlDeviceGetRemappedRows", h)
            if rr is not None:
                g.update(remapped_rows(rr))
            hist = self._call("nvmlDeviceGetRowRemapperHistogram", h)
            if hist is not None:
                g.update(remap_histogram(hist))
            fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
                nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None
            )
            mask = self._try(fn, h) if fn else None
            if mask is not None:
                g["gpu_throttle_reasons"] = decode_throttle(int(mask))
            out[idx] = g
        return out

    def close(self) -> None:
        try:
            if self.events is not None:
                self.nv.nvmlEventSetFree(self.events)
            self.nv.nvmlShutdown()
        except Exception:
            pass


def remapped_rows(rr: Any) -> dict[str, float]:
    """SuperBench's fields from nvmlDeviceGetRemappedRows: (correctable, uncorrectable, pending, failure)."""
    vals = list(rr)
    names = (
        "gpu_remap_correctable_error",
        "gpu_remap_uncorrectable_error",
        "gpu_remap_pending",
        "gpu_remap_failure",
    )
    return {n: float(v) for n, v in zip(names, vals[: len(names)])}  # noqa: B905 - Python 3.9


# nvmlRowRemapperHistogramValues_t: banks by how many spare rows they have left.
REMAP_HISTOGRAM = ("max", "high", "partial", "low", "none")


def remap_histogram(hist: Any) -> dict[str, float]:
    """SuperBench's ``gpu_remap_max/high/partial/low/none`` from nvmlDeviceGetRowRemapperHistogram:
    banks with all, most, some, few, no spare rows left (``none`` > 0: a bank is out of spares)."""
    out = {}
    for f in REMAP_HISTOGRAM:
        v = getattr(hist, f, None)
        if v is not None:
            out[f"gpu_remap_{f}"] = float(v)
    return out


# -- the monitor ------------------------------------------------------------------------------------
class Monitor:
    """Sample in a daemon thread; ``summary()`` after ``stop()``."""

    def __init__(
        self,
        interval: float = 1.0,
        gpus: list[str] | None = None,
        host: bool = True,
        out: str | os.PathLike | None = None,
        use_nvml: bool = True,
    ):
        self.interval = max(0.01, float(interval))
        self.samples: list[dict] = []
        self.notes: list[str] = []
        self.host = HostSource() if host else None
        self.nvml = None
        if use_nvml and gpus != []:
            try:
                self.nvml = NvmlSource(gpus)
            except ImportError:
                self.notes.append("nvidia-ml-py not installed: no GPU health")
            except Exception as exc:
                self.notes.append(f"NVML unavailable: {type(exc).__name__}: {exc}"[:200])
        self.out = Path(out) if out else None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample_now(self) -> dict:
        s: dict[str, Any] = {"time": time.time()}
        if self.host is not None:
            s["host"] = self.host.sample()
        if self.nvml is not None:
            s["gpus"] = self.nvml.sample()
        self.samples.append(s)
        if self.out is not None:
            with open(self.out, "a") as f:
                f.write(json.dumps(s) + "\n")
        return s

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sample_now()
            except Exception as exc:  # a monitor must never take the benchmark down
                self.notes.append(f"sampling failed: {type(exc).__name__}: {exc}"[:200])
                return

    def start(self) -> Monitor:
        self.sample_now()
        self._thread = threading.Thread(target=self._loop, name="sb-monitor", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            self.sample_now()
        except Exception:
            pass
        if self.nvml is not None:
            self.nvml.close()

    def __enter__(self) -> Monitor:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def summary(self) -> dict:
        return summarize(
            self.samples, self.interval, self.notes, xids=self.nvml.xids if self.nvml is not None else None
        )


_COUNTERS = {
    "gpu_corrected_ecc",
    "gpu_uncorrected_ecc",
    "gpu_retired_pages_sbe",
    "gpu_retired_pages_dbe",
    "gpu_remap_correctable_error",
    "gpu_remap_uncorrectable_error",
    "mem_corrected_ecc",
    "mem_uncorrected_ecc",
    "cpu_throttle_count",
}


def _reduce(series: dict[str, list]) -> dict[str, dict]:
    out = {}
    for k, vals in series.items():
        nums = [v for v in vals if isinstance(v, (int, float))]
        if not nums:
            continue
        d = {"min": min(nums), "max": max(nums), "avg": sum(nums) / len(nums), "last": nums[-1]}
        if k in _COUNTERS:
            d["increase"] = nums[-1] - nums[0]
        out[k] = d
    return out


def summarize(
    samples: list[dict],
    interval: float,
    notes: list[str] | None = None,
    xids: dict[str, list[int]] | None = None,
) -> dict:
    """min/max/avg/last per field (host, and per GPU), counters' increase, throttle reasons, XIDs."""
    host: dict[str, list] = {}
    gpus: dict[str, dict[str, list]] = {}
    reasons: dict[str, set] = {}
    for s in samples:
        for k, v in (s.get("host") or {}).items():
            host.setdefault(k, []).append(v)
        for idx, per_gpu in (s.get("gpus") or {}).items():
            for k, v in per_gpu.items():
                if k == "gpu_throttle_reasons":
                    reasons.setdefault(idx, set()).update(v)
                else:
                    gpus.setdefault(idx, {}).setdefault(k, []).append(v)
    out: dict[str, Any] = {
        "interval_s": interval,
        "samples": len(samples),
        "duration_s": (samples[-1]["time"] - samples[0]["time"]) if len(samples) > 1 else 0.0,
        "host": _reduce(host),
        "gpus": {},
    }
    alerts = []
    for idx in sorted(set(gpus) | set(reasons), key=lambda x: (len(x), x)):
        g: dict[str, Any] = dict(_reduce(gpus.get(idx, {})))
        seen = sorted(reasons.get(idx, set()))
        g["throttle_reasons"] = seen
        g["xid"] = list((xids or {}).get(idx, []))
        slow = sorted(set(seen) & SLOWDOWN)
        if slow:
            alerts.append(f"GPU {idx} throttled: {', '.join(slow)}")
        if g["xid"]:
            alerts.append(f"GPU {idx} XID {', '.join(map(str, g['xid']))}")
        for k in ("gpu_uncorrected_ecc", "gpu_retired_pages_dbe", "gpu_remap_uncorrectable_error"):
            if g.get(k, {}).get("increase", 0) > 0:
                alerts.append(f"GPU {idx} {k} rose by {g[k]['increase']:g}")
        if g.get("gpu_remap_none", {}).get("last", 0) > 0:
            alerts.append(
                f"GPU {idx}: {g['gpu_remap_none']['last']:g} memory bank(s) have no spare rows left"
            )
        if g.get("gpu_remap_failure", {}).get("last", 0) > 0:
            alerts.append(f"GPU {idx}: a row remapping failed")
        out["gpus"][idx] = g
    if host.get("cpu_throttle_count") and out["host"]["cpu_throttle_count"].get("increase", 0) > 0:
        alerts.append(f"CPU thermal throttling: {out['host']['cpu_throttle_count']['increase']:g} events")
    if out["host"].get("mem_uncorrected_ecc", {}).get("increase", 0) > 0:
        alerts.append("host memory uncorrected ECC errors rose")
    out["alerts"] = alerts
    out["notes"] = list(notes or [])
    return out


def gpus_for_this_rank() -> list[str] | None:
    """The NVML identity of this rank's GPU from CUDA_VISIBLE_DEVICES and LOCAL_RANK/PROC_RANK.

    (NVML ignores CUDA_VISIBLE_DEVICES; NVML and CUDA order agree on the usual servers, where
    CUDA_DEVICE_ORDER=PCI_BUS_ID or all GPUs are the same model.) None: every GPU.
    """
    local = os.environ.get("LOCAL_RANK", os.environ.get("PROC_RANK"))
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if local is None and not visible:
        return None
    rank = int(local or 0)
    if visible:
        return [visible[rank % len(visible)]]
    return [str(rank)]


def gpus_for_ngpus(ngpus: int) -> list[str]:
    """The GPUs a single process drives when it starts ``ngpus`` ranks itself (nccl-bw's ngpus):
    the first ``ngpus`` of CUDA_VISIBLE_DEVICES, else of every GPU."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    return visible[:ngpus] if visible else [str(i) for i in range(ngpus)]


def from_env(ngpus: int = 1) -> Monitor | None:
    """The harness's monitor: on when ``SB_MONITOR_INTERVAL`` > 0; ``ngpus`` > 1 watches every GPU
    the process drives, not only its own rank's."""
    try:
        interval = float(os.environ.get("SB_MONITOR_INTERVAL", "0") or 0)
    except ValueError:
        return None
    if interval <= 0:
        return None
    local = int(os.environ.get("LOCAL_RANK", os.environ.get("PROC_RANK", "0")) or 0)
    gpus = gpus_for_ngpus(ngpus) if ngpus > 1 else gpus_for_this_rank()
    return Monitor(interval, gpus=gpus, host=local == 0)


def main(argv: list[str] | None = None) -> int:
    import argparse  # here: every rank imports this module (harness), and argparse is ~10 ms of its start

    ap = argparse.ArgumentParser(prog="python -m sb_bench.host.monitor", description=__doc__.splitlines()[0])
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between samples")
    ap.add_argument(
        "--duration", type=float, default=0.0, help="stop after this many seconds (0: at SIGTERM/SIGINT)"
    )
    ap.add_argument("--out", help="append every sample to this JSON-lines file")
    ap.add_argument("--summary", help="write the summary here (default: print it)")
    args = ap.parse_args(argv)
    stop = threading.Event()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: stop.set())
    mon = Monitor(args.interval, out=args.out).start()
    stop.wait(args.duration if args.duration > 0 else None)
    mon.stop()
    text = json.dumps(mon.summary(), indent=1)
    if args.summary:
        from sb_bench.core.result import write_result

        write_result(args.summary, mon.summary())
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
