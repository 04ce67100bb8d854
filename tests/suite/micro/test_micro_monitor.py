"""The system-health monitor: host sources from a fake /proc and /sys, GPU sources from a fake NVML."""

from __future__ import annotations

import sys
import types

import pytest
from sb_bench.host import monitor
from sb_bench.host.monitor import HostSource, Monitor, NvmlSource, decode_throttle, summarize
from suite_helpers import run_bench


def _fake_root(tmp_path, idle: int, ce: int = 0, ue: int = 0, throttles: int = 0):
    (tmp_path / "proc").mkdir(exist_ok=True)
    (tmp_path / "proc/stat").write_text(f"cpu  100 0 100 {idle} 0 0 0 0 0 0\ncpu0 1 2 3 4\n")
    (tmp_path / "proc/meminfo").write_text(
        "MemTotal:       2048000 kB\nMemFree: 100 kB\nMemAvailable:   1024000 kB\n"
    )
    (tmp_path / "proc/loadavg").write_text("1.50 1.00 0.50 1/100 42\n")
    freq = tmp_path / "sys/devices/system/cpu/cpu0/cpufreq"
    freq.mkdir(parents=True, exist_ok=True)
    (freq / "scaling_cur_freq").write_text("2400000\n")
    thr = tmp_path / "sys/devices/system/cpu/cpu0/thermal_throttle"
    thr.mkdir(parents=True, exist_ok=True)
    (thr / "core_throttle_count").write_text(f"{throttles}\n")
    zone = tmp_path / "sys/class/thermal/thermal_zone0"
    zone.mkdir(parents=True, exist_ok=True)
    (zone / "temp").write_text("71500\n")
    mc = tmp_path / "sys/devices/system/edac/mc/mc0"
    mc.mkdir(parents=True, exist_ok=True)
    (mc / "ce_count").write_text(f"{ce}\n")
    (mc / "ue_count").write_text(f"{ue}\n")


def test_host_source_and_counters(tmp_path):
    _fake_root(tmp_path, idle=800)
    src = HostSource(str(tmp_path))
    _fake_root(tmp_path, idle=900, ce=3, throttles=5)  # 100 busy + 100 idle jiffies later
    s = src.sample()
    assert s["cpu_usage"] == pytest.approx(0.0)
    assert s["mem_total"] == pytest.approx(2000.0) and s["mem_used"] == pytest.approx(1000.0)
    assert s["cpu_clock_avg"] == 2400.0 and s["cpu_temperature"] == 71.5
    assert s["mem_corrected_ecc"] == 3.0 and s["cpu_throttle_count"] == 5.0


def test_summary_counters_and_alerts():
    samples = [
        {
            "time": 0.0,
            "host": {"cpu_usage": 10.0, "cpu_throttle_count": 1.0},
            "gpus": {
                "0": {
                    "gpu_temperature": 60.0,
                    "gpu_uncorrected_ecc": 0.0,
                    "gpu_throttle_reasons": ["gpu_idle"],
                }
            },
        },
        {
            "time": 2.0,
            "host": {"cpu_usage": 30.0, "cpu_throttle_count": 4.0},
            "gpus": {
                "0": {
                    "gpu_temperature": 88.0,
                    "gpu_uncorrected_ecc": 2.0,
                    "gpu_throttle_reasons": ["sw_power_cap", "hw_thermal_slowdown"],
                }
            },
        },
    ]
    s = summarize(samples, 1.0, xids={"0": [79]})
    assert s["samples"] == 2 and s["duration_s"] == 2.0
    assert s["host"]["cpu_usage"] == {"min": 10.0, "max": 30.0, "avg": 20.0, "last": 30.0}
    assert s["gpus"]["0"]["gpu_temperature"]["max"] == 88.0
    assert s["gpus"]["0"]["gpu_uncorrected_ecc"]["increase"] == 2.0
    assert s["gpus"]["0"]["throttle_reasons"] == ["gpu_idle", "hw_thermal_slowdown", "sw_power_cap"]
    alerts = " | ".join(s["alerts"])
    assert "GPU 0 throttled: hw_thermal_slowdown, sw_power_cap" in alerts
    assert "GPU 0 XID 79" in alerts and "gpu_uncorrected_ecc rose by 2" in alerts
    assert "CPU thermal throttling: 3 events" in alerts


def test_throttle_bits():
    assert decode_throttle(0x4 | 0x40) == ["sw_power_cap", "hw_thermal_slowdown"]
    assert decode_throttle(0) == []


class _FakeNvml(types.ModuleType):
    """Enough of pynvml for NvmlSource: two GPUs, GPU 1 power-capped with one XID 48."""

    NVML_TEMPERATURE_GPU, NVML_CLOCK_SM, NVML_CLOCK_MEM = 0, 1, 2
    NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC = 0, 1, 0
    (
        NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
        NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
    ) = 0, 1
    nvmlEventTypeXidCriticalError = 8

    def __init__(self):
        super().__init__("pynvml")
        self.pending = [types.SimpleNamespace(device=1, eventData=48)]

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetIndex(self, h):
        return h

    def nvmlEventSetCreate(self):
        return "set"

    def nvmlEventSetFree(self, s):
        pass

    def nvmlDeviceRegisterEvents(self, h, kind, s):
        pass

    def nvmlEventSetWait_v2(self, s, timeout):
        if not self.pending:
            raise RuntimeError("NVML_ERROR_TIMEOUT")
        return self.pending.pop()

    def nvmlDeviceGetTemperature(self, h, kind):
        return 60 + 20 * h

    def nvmlDeviceGetPowerUsage(self, h):
        return 400000 if h else 150000

    def nvmlDeviceGetEnforcedPowerLimit(self, h):
        return 400000

    def nvmlDeviceGetClockInfo(self, h, kind):
        return 1410 - 300 * h if kind == 1 else 1593

    def nvmlDeviceGetUtilizationRates(self, h):
        return types.SimpleNamespace(gpu=99, memory=40)

    def nvmlDeviceGetMemoryInfo(self, h):
        return types.SimpleNamespace(used=2**30, total=80 * 2**30)

    def nvmlDeviceGetTotalEccErrors(self, h, kind, counter):
        return 0

    def nvmlDeviceGetRetiredPages(self, h, cause):
        return []

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h):
        return 0

    def nvmlDeviceGetRemappedRows(self, h):
        return (0, 0, 0, 0)

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return 0x4 if h else 0x0


def test_nvml_source_with_fake_driver(monkeypatch):
    fake = _FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    src = NvmlSource(None)
    s = src.sample()
    assert s["1"]["gpu_power"] == 400.0 and s["1"]["gpu_sm_clock"] == 1110.0
    assert s["1"]["gpu_throttle_reasons"] == ["sw_power_cap"]
    assert s["0"]["gpu_throttle_reasons"] == []
    assert src.xids == {"0": [], "1": [48]}
    summary = summarize([{"time": 0.0, "gpus": s}], 1.0, xids=src.xids)
    assert "GPU 1 throttled: sw_power_cap" in summary["alerts"] and "GPU 1 XID 48" in summary["alerts"]


def test_monitor_thread_and_missing_nvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails as on a host without nvidia-ml-py
    with Monitor(0.05) as mon:
        pass
    s = mon.summary()
    assert s["samples"] >= 2 and "cpu_usage" in s["host"] or "mem_used" in s["host"]
    assert any("nvidia-ml-py not installed" in n for n in s["notes"])


def test_rank_gpu_selection(monkeypatch):
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.setenv("PROC_RANK", "2")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    assert monitor.gpus_for_this_rank() == ["2"]  # local mode: one GPU visible per process
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aaa,GPU-bbb")
    assert monitor.gpus_for_this_rank() == ["GPU-bbb"]


def test_harness_attaches_monitor_summary(monkeypatch):
    monkeypatch.setenv("SB_MONITOR_INTERVAL", "0.05")
    monkeypatch.setitem(sys.modules, "pynvml", None)
    env = run_bench("kernel-launch", num_warmup=1, num_steps=20)
    assert env["status"] == "ok"
    assert env["monitor"]["samples"] >= 2 and "host" in env["monitor"]
    monkeypatch.setenv("SB_MONITOR_INTERVAL", "0")
    assert "monitor" not in run_bench("kernel-launch", num_warmup=1, num_steps=5)


class _OldNvml(_FakeNvml):
    """An old pynvml: no row-remapper functions at all (attribute access raises)."""

    def __getattribute__(self, name):
        if name in ("nvmlDeviceGetRemappedRows", "nvmlDeviceGetRowRemapperHistogram"):
            raise AttributeError(name)
        return super().__getattribute__(name)


def test_old_pynvml_without_row_remapper_still_samples(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _OldNvml())
    s = NvmlSource(None).sample()
    assert s["1"]["gpu_power"] == 400.0
    assert not any(k.startswith("gpu_remap") for k in s["1"])


class _RemapNvml(_FakeNvml):
    def nvmlDeviceGetRemappedRows(self, h):
        return (3, 1, 0, 0) if h else (0, 0, 0, 0)

    def nvmlDeviceGetRowRemapperHistogram(self, h):
        # nvmlRowRemapperHistogramValues_t's fields, as pynvml returns them.
        return types.SimpleNamespace(max=630, high=10, partial=0, low=0, none=2 if h else 0)


def test_row_remapper_fields_and_histogram(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", _RemapNvml())
    s = NvmlSource(None).sample()
    assert s["1"]["gpu_remap_correctable_error"] == 3.0 and s["1"]["gpu_remap_uncorrectable_error"] == 1.0
    assert {k: s["1"][k] for k in ("gpu_remap_max", "gpu_remap_high", "gpu_remap_none")} == {
        "gpu_remap_max": 630.0,
        "gpu_remap_high": 10.0,
        "gpu_remap_none": 2.0,
    }
    summary = summarize([{"time": 0.0, "gpus": s}], 1.0)
    assert any("GPU 1: 2 memory bank(s) have no spare rows" in a for a in summary["alerts"])
    assert not any(a.startswith("GPU 0:") for a in summary["alerts"])


def test_ngpus_mode_watches_every_gpu_it_drives(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    assert monitor.gpus_for_ngpus(2) == ["4", "5"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert monitor.gpus_for_ngpus(8) == [str(i) for i in range(8)]
    monkeypatch.setenv("SB_MONITOR_INTERVAL", "1")
    monkeypatch.setenv("PROC_RANK", "0")
    monkeypatch.setitem(sys.modules, "pynvml", _FakeNvml())
    mon = monitor.from_env(ngpus=2)
    assert sorted(mon.nvml.handles) == ["0", "1"]
    assert sorted(monitor.from_env().nvml.handles) == ["0"]  # one rank, one GPU
