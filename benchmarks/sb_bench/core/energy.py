"""Energy over a timed window: the mean power of the window and the efficiency of each compute figure.

A :class:`Meter` is read just before and just after the window a figure is timed over (the harness
does it around every timed case). Where the energy comes from, per platform (the first that works):

* NVIDIA GPU: NVML's total energy counter, ``nvmlDeviceGetTotalEnergyConsumption`` (mJ since the
  driver loaded; Volta and later). Where it is not supported: ``nvmlDeviceGetPowerUsage`` (mW)
  sampled at :data:`SAMPLE_HZ` in a thread over the window and integrated (trapezoids); the source
  then says so (``nvml-power-sampled@20Hz``);
* AMD GPU: amdsmi's energy accumulator, ``amdsmi_get_energy_count`` (counts x ``counter_resolution``
  µJ), where the ``amdsmi`` package and a driver are present;
* CPU: the powercap counters ``<sysfs>/class/powercap/*/energy_uj`` of every package domain and
  every DRAM domain (summed; ``core``/``uncore`` are inside the package, ``psys`` covers the whole
  platform, so neither is added). A counter wraps at ``max_energy_range_uj``; the meter reads it
  in a thread often enough to see every wrap. ``<sysfs>`` is ``$SB_PATH_SYSFS`` (the inventory
  variable ``sb_path_sysfs``), default ``/sys``;
* none of these: :class:`NoMeter` with the reason; the figure is reported without an efficiency,
  never with a guessed one.

A CPU counter covers the whole socket: with more than one rank on the host the ranks share it,
and no per-rank efficiency is reported (the reason says so).

Metric names (see docs/energy.md): the figure ``<name>`` gets ``<name>_per_watt`` (its unit per
watt, higher is better) and ``<stem>_power`` (W, lower is better), where ``<stem>`` is the figure's
name without its unit word (``fp16_tc_flops`` -> ``fp16_tc_power``, ``fp32_train_throughput`` ->
``fp32_train_power``).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sb_bench.core.metric import Metric

SAMPLE_HZ = 20.0  # power sampling where there is no energy counter (the issue asks for >= 10 Hz)
# The highest power one powercap domain is assumed to draw, to read a wrapping counter often enough.
MAX_DOMAIN_W = 2000.0
NO_COUNTER = "no energy counter on this host"
# Unit words a figure's name ends with; the power metric's name replaces them with "power".
_UNIT_WORDS = ("flops", "iops", "throughput", "gflops", "tflops", "gbps", "bw")


def energy_names(figure: str) -> tuple[str, str]:
    """(efficiency, power) metric names of a compute figure."""
    stem = figure
    for word in _UNIT_WORDS:
        if stem.endswith("_" + word):
            stem = stem[: -len(word) - 1]
            break
        if stem == word:
            stem = ""
            break
    return f"{figure}_per_watt", (f"{stem}_power" if stem else "power")


def energy_metrics(figure: Metric) -> list[Metric]:
    """The two metrics a compute figure gets: its efficiency (``<unit>/W``) and its window's mean power."""
    eff, power = energy_names(figure.name)
    power_reduce = {"min": "max", "max": "min"}.get(figure.reduce or "", figure.reduce)
    return [
        Metric(
            eff,
            f"{figure.unit}/W",
            figure.higher_is_better,
            figure.reduce,
            f"{figure.name} / mean power of its timed window",
            energy_of=figure.name,
        ),
        Metric(
            power,
            "W",
            False,
            power_reduce,
            f"mean power over {figure.name}'s timed window (energy / time)",
            energy_of=figure.name,
        ),
    ]


def figure_values(figure: str, value: float, reading: Reading | None) -> dict[str, float]:
    """The efficiency and power values of ``figure`` measured over ``reading`` (none without one)."""
    if reading is None or not reading.watts > 0:
        return {}
    eff, power = energy_names(figure)
    return {eff: value / reading.watts, power: reading.watts}


@dataclass(frozen=True)
class Reading:
    """Energy over one window."""

    joules: float
    seconds: float
    source: str
    start: float = 0.0  # time.monotonic() when the window began (this host's clock)

    @property
    def watts(self) -> float:
        return self.joules / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict:
        return {
            "joules": round(self.joules, 6),
            "seconds": round(self.seconds, 6),
            "watts": round(self.watts, 4),
            "source": self.source,
            "start_monotonic": round(self.start, 6),
        }


class EnergyUnavailable(Exception):
    """This counter cannot be read here (the message says why)."""


# -- the one small interface every platform implements --------------------------------------------
class Meter:
    """Energy of a window: :meth:`start`, then :meth:`stop` returns the :class:`Reading`."""

    source: str = ""
    reason: str = ""  # why there is no reading (NoMeter), else ""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> Reading | None:
        raise NotImplementedError

    @contextlib.contextmanager
    def window(self) -> Iterator[list[Reading]]:
        """``with meter.window() as out:`` — ``out`` holds the reading after the block (or stays empty)."""
        out: list[Reading] = []
        self.start()
        try:
            yield out
        finally:
            r = self.stop()
            if r is not None:
                out.append(r)

    def close(self) -> None:
        pass


class NoMeter(Meter):
    def __init__(self, reason: str):
        self.reason = reason

    def start(self) -> None:
        pass

    def stop(self) -> Reading | None:
        return None


@dataclass
class Counter:
    """One cumulative energy counter: ``read()`` in joules; it wraps to 0 after ``wrap_j`` (None: never)."""

    name: str
    read: Callable[[], float]
    wrap_j: float | None = None
    last: float = 0.0
    total: float = 0.0

    def reset(self) -> None:
        self.last, self.total = self.read(), 0.0

    def update(self) -> None:
        now = self.read()
        if now >= self.last:
            self.total += now - self.last
        elif self.wrap_j:
            self.total += self.wrap_j - self.last + now
        else:
            raise EnergyUnavailable(f"energy counter {self.name} went backwards ({self.last} -> {now})")
        self.last = now


class CounterMeter(Meter):
    """Sum of cumulative counters over a window; a thread reads wrapping counters every ``poll_s``."""

    def __init__(self, counters: list[Counter], source: str, poll_s: float | None = None):
        self.counters = counters
        self.source = source
        wraps = [c.wrap_j for c in counters if c.wrap_j]
        # Read at least four times per shortest wrap at the highest plausible power.
        self.poll_s = poll_s if poll_s is not None else (min(wraps) / MAX_DOMAIN_W / 4 if wraps else 0.0)
        self.poll_s = max(self.poll_s, 0.02) if self.poll_s else 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0
        self._error: str | None = None

    def _update(self) -> None:
        with self._lock:
            for c in self.counters:
                c.update()

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self._update()
            except Exception as exc:  # noqa: BLE001 - kept for stop() to report
                self._error = str(exc)
                return

    def start(self) -> None:
        self._error = None
        # Each end of the window is stamped at the middle of its reads: a read that is slow to
        # return (a busy host) shifts neither end.
        before = time.monotonic()
        with self._lock:
            for c in self.counters:
                c.reset()
        self._t0 = (before + time.monotonic()) / 2
        if self.poll_s:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="sb-energy", daemon=True)
            self._thread.start()

    def stop(self) -> Reading | None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        before = time.monotonic()
        self._update()
        seconds = (before + time.monotonic()) / 2 - self._t0
        if self._error:
            raise EnergyUnavailable(self._error)
        return Reading(sum(c.total for c in self.counters), seconds, self.source, self._t0)


class SampledPowerMeter(Meter):
    """Power (W) sampled at ``hz`` in a thread over the window, integrated with trapezoids."""

    def __init__(self, read_w: Callable[[], float], source: str, hz: float = SAMPLE_HZ):
        self.read_w = read_w
        self.source = source
        self.period = 1.0 / hz
        self._samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        self._samples.append((time.monotonic(), float(self.read_w())))

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            self._sample()

    def start(self) -> None:
        self._samples = []
        self._sample()
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="sb-power", daemon=True)
        self._thread.start()

    def stop(self) -> Reading | None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        self._sample()
        s = self._samples
        joules = sum((s[i][0] - s[i - 1][0]) * (s[i][1] + s[i - 1][1]) / 2 for i in range(1, len(s)))
        return Reading(joules, s[-1][0] - s[0][0], self.source, s[0][0])


# -- CPUs: powercap ----------------------------------------------------------------------------------
def sysfs_root() -> Path:
    """The sysfs root: ``$SB_PATH_SYSFS`` (the inventory variable ``sb_path_sysfs``), default ``/sys``."""
    return Path(os.environ.get("SB_PATH_SYSFS") or "/sys")


def _domain_kind(name: str) -> str | None:
    if name.startswith("package"):
        return "package"
    if name == "dram":
        return "dram"
    return None


def powercap_meter(sysfs: Path | None = None) -> Meter:
    """The package and DRAM powercap domains under ``<sysfs>/class/powercap``, or a NoMeter saying why."""
    base = (sysfs or sysfs_root()) / "class" / "powercap"
    if not base.is_dir():
        return NoMeter(f"{NO_COUNTER} (no {base})")
    zones: dict[str, list[Path]] = {}
    for zone in sorted(base.iterdir()):
        if not (zone / "energy_uj").exists():
            continue
        try:
            kind = _domain_kind((zone / "name").read_text().strip())
        except OSError:
            continue
        if kind:
            # intel-rapl-mmio duplicates intel-rapl's package counter: one interface only.
            zones.setdefault(zone.name.split(":", 1)[0], []).append(zone)
    if not zones:
        return NoMeter(f"{NO_COUNTER} (no package or dram domain with energy_uj under {base})")
    iface = "intel-rapl" if "intel-rapl" in zones else sorted(zones)[0]
    counters = []
    for zone in zones[iface]:
        energy = zone / "energy_uj"

        def read(p: Path = energy) -> float:
            return _read_uj(p) / 1e6

        try:
            wrap = _read_uj(zone / "max_energy_range_uj") / 1e6
            read()
        except EnergyUnavailable as exc:
            return NoMeter(f"{NO_COUNTER} readable: {exc}")
        counters.append(Counter(zone.name, read, wrap or None))
    return CounterMeter(counters, f"powercap:{'+'.join(c.name for c in counters)}")


def _read_uj(path: Path) -> int:
    try:
        for _ in range(3):  # an empty read (a counter served through a pipe between two values) is retried
            with open(path) as f:
                text = f.readline().strip()  # a sysfs attribute is one line
            if text:
                break
    except PermissionError:
        raise EnergyUnavailable(
            f"{path} is not readable by this user (root only since Linux 5.10; grant read access "
            "with a udev rule or chmod, see docs/energy.md)"
        ) from None
    except OSError as exc:
        raise EnergyUnavailable(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        value = int(text)
    except ValueError:
        raise EnergyUnavailable(f"{path} holds {text[:40]!r}, not a number of µJ") from None
    if value < 0:
        raise EnergyUnavailable(f"{path} holds a negative energy ({value})")
    return value


# -- NVIDIA: NVML --------------------------------------------------------------------------------------
def nvml_meter(nv: Any, handle: Any, hz: float = SAMPLE_HZ) -> Meter:
    """NVML's energy counter for ``handle``; its power reading sampled at ``hz`` where the counter is
    not supported; a NoMeter where neither is. ``nv`` is the ``pynvml`` module (nvidia-ml-py)."""
    try:
        nv.nvmlDeviceGetTotalEnergyConsumption(handle)
    except Exception as energy_exc:  # NVMLError_NotSupported before Volta, or no such function
        try:
            nv.nvmlDeviceGetPowerUsage(handle)
        except Exception as power_exc:
            return NoMeter(
                f"{NO_COUNTER}: NVML has neither the energy counter ({energy_exc}) nor a power "
                f"reading ({power_exc}) for this GPU"
            )
        return SampledPowerMeter(
            lambda: nv.nvmlDeviceGetPowerUsage(handle) / 1e3, f"nvml-power-sampled@{hz:g}Hz", hz
        )
    return CounterMeter(
        [Counter("nvml", lambda: nv.nvmlDeviceGetTotalEnergyConsumption(handle) / 1e3)], "nvml-energy", 0.0
    )


def _nvml_handle(nv: Any, device: Any) -> Any:
    """This rank's GPU in NVML: by the UUID torch reports, else by CUDA_VISIBLE_DEVICES and the index."""
    import torch

    idx = device.index if device.index is not None else torch.cuda.current_device()
    uuid = getattr(torch.cuda.get_device_properties(idx), "uuid", None)
    if uuid is not None:
        text = str(uuid)
        with contextlib.suppress(Exception):
            return nv.nvmlDeviceGetHandleByUUID(text if text.startswith("GPU-") else f"GPU-{text}")
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if visible:
        v = visible[idx % len(visible)]
        return nv.nvmlDeviceGetHandleByUUID(v) if not v.isdigit() else nv.nvmlDeviceGetHandleByIndex(int(v))
    return nv.nvmlDeviceGetHandleByIndex(idx)


def _nvidia_meter(device: Any) -> Meter:
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return NoMeter(f"{NO_COUNTER}: the nvidia-ml-py package (pynvml) is not installed")
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return NoMeter(f"{NO_COUNTER}: NVML does not start ({exc})")
    try:
        meter = nvml_meter(pynvml, _nvml_handle(pynvml, device))
    except Exception as exc:
        meter = NoMeter(f"{NO_COUNTER}: NVML does not find this rank's GPU ({exc})")
    meter.close = pynvml.nvmlShutdown  # type: ignore[method-assign]
    return meter


# -- AMD: amdsmi ---------------------------------------------------------------------------------------
def amdsmi_meter(smi: Any, handle: Any) -> Meter:
    """amdsmi's energy accumulator for ``handle`` (``amdsmi_get_energy_count``), or a NoMeter."""

    def read() -> float:
        got = smi.amdsmi_get_energy_count(handle)
        # The accumulator is "energy_accumulator" in ROCm 6.1+, "power" before (the same counter).
        count = got.get("energy_accumulator", got.get("power"))
        return float(count) * float(got["counter_resolution"]) / 1e6

    try:
        read()
    except Exception as exc:
        return NoMeter(f"{NO_COUNTER}: amdsmi has no energy counter for this GPU ({exc})")
    return CounterMeter([Counter("amdsmi", read)], "amdsmi-energy", 0.0)


def _amd_meter(device: Any) -> Meter:
    try:
        import amdsmi
    except ImportError:
        return NoMeter(f"{NO_COUNTER}: the amdsmi package is not installed")
    try:
        amdsmi.amdsmi_init()
        handles = amdsmi.amdsmi_get_processor_handles()
    except Exception as exc:
        return NoMeter(f"{NO_COUNTER}: amdsmi does not start ({exc})")
    import torch

    idx = device.index if device.index is not None else torch.cuda.current_device()
    visible = [
        v.strip()
        for v in (
            os.environ.get("HIP_VISIBLE_DEVICES") or os.environ.get("ROCR_VISIBLE_DEVICES") or ""
        ).split(",")
        if v.strip()
    ]
    phys = int(visible[idx % len(visible)]) if visible and visible[0].isdigit() else idx
    if phys >= len(handles):
        return NoMeter(f"{NO_COUNTER}: amdsmi lists {len(handles)} GPUs, this rank's is {phys}")
    meter = amdsmi_meter(amdsmi, handles[phys])
    meter.close = amdsmi.amdsmi_shut_down  # type: ignore[method-assign]
    return meter


# -- choosing one ------------------------------------------------------------------------------------
def meter_for(device: Any, local_world_size: int = 1) -> Meter:
    """The meter of this rank's device (see the module doc); a NoMeter says why there is none."""
    if os.environ.get("SB_ENERGY", "").strip().lower() in ("0", "off", "false", "no"):
        return NoMeter("energy measurement is off (SB_ENERGY=off)")
    kind = getattr(device, "type", "cpu")
    if kind == "cuda":
        import torch

        return _amd_meter(device) if getattr(torch.version, "hip", None) else _nvidia_meter(device)
    if kind != "cpu":
        return NoMeter(f"{NO_COUNTER} for a {kind} benchmark")
    meter = powercap_meter()
    if isinstance(meter, NoMeter) or local_world_size <= 1:
        return meter
    return NoMeter(
        f"the CPU energy counter covers the whole socket and {local_world_size} ranks share it on "
        "this host: no per-rank efficiency (run one process per host to measure it)"
    )
