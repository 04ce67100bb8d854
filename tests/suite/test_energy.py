"""Energy over a timed window (sb_bench.core.energy): powercap on a fake sysfs tree through the same root
override the host uses (SB_PATH_SYSFS), NVML and amdsmi through fakes of their documented calls, and
gemm-flops on CPU reading a counter that a separate process advances at a known power."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from fleetlib.powercap import make_tree, write_counter  # noqa: E402
from sb_bench.core import energy  # noqa: E402

CPU = SimpleNamespace(type="cpu")


def wait_ready(root: Path) -> None:
    deadline = time.monotonic() + 60
    while not (root / "ready").exists():
        assert time.monotonic() < deadline, "the fake counter never started"
        time.sleep(0.02)


def zone(root: Path, name: str) -> Path:
    return root / "class" / "powercap" / name


@pytest.fixture
def sysfs(tmp_path, monkeypatch):
    root = tmp_path / "sys"
    make_tree(root, wrap_uj=1_000_000_000)
    monkeypatch.setenv("SB_PATH_SYSFS", str(root))
    return root


def test_names_follow_the_figure():
    assert energy.energy_names("fp16_tc_flops") == ("fp16_tc_flops_per_watt", "fp16_tc_power")
    assert energy.energy_names("int8_tc_iops") == ("int8_tc_iops_per_watt", "int8_tc_power")
    assert energy.energy_names("fp32_train_throughput") == (
        "fp32_train_throughput_per_watt",
        "fp32_train_power",
    )
    assert energy.energy_names("burn_gflops") == ("burn_gflops_per_watt", "burn_power")
    from sb_bench.core.metric import Metric

    eff, power = energy.energy_metrics(Metric("fp32_train_throughput", "samples/s", True, "min"))
    assert (eff.unit, eff.higher_is_better, eff.reduce, eff.energy_of) == (
        "samples/s/W",
        True,
        "min",
        "fp32_train_throughput",
    )
    assert (power.unit, power.higher_is_better, power.reduce) == ("W", False, "max")


def test_advancing_counter_sums_package_and_dram_once(sysfs):
    meter = energy.meter_for(CPU)
    assert isinstance(meter, energy.CounterMeter), meter.reason
    # package and dram of the MSR interface; not core (inside the package), not the mmio duplicate
    assert meter.source == "powercap:intel-rapl:0+intel-rapl:0:1"
    write_counter(zone(sysfs, "intel-rapl:0") / "energy_uj", 5_000_000)
    write_counter(zone(sysfs, "intel-rapl:0:1") / "energy_uj", 1_000_000)
    meter.start()
    write_counter(zone(sysfs, "intel-rapl:0") / "energy_uj", 25_000_000)  # +20 J
    write_counter(zone(sysfs, "intel-rapl-mmio:0") / "energy_uj", 25_000_000)
    write_counter(zone(sysfs, "intel-rapl:0:0") / "energy_uj", 99_000_000)
    write_counter(zone(sysfs, "intel-rapl:0:1") / "energy_uj", 3_500_000)  # +2.5 J
    reading = meter.stop()
    assert reading is not None
    assert reading.joules == pytest.approx(22.5)
    assert reading.watts == pytest.approx(22.5 / reading.seconds)


def test_wrapping_counter_counts_across_the_wrap(sysfs):
    meter = energy.meter_for(CPU)
    pkg = zone(sysfs, "intel-rapl:0") / "energy_uj"
    write_counter(pkg, 999_000_000)  # 1 J below max_energy_range_uj
    meter.start()
    write_counter(pkg, 2_000_000)  # wrapped: 1 J to the top, then 2 J
    reading = meter.stop()
    assert reading is not None and reading.joules == pytest.approx(3.0)


def test_wraps_between_polls_are_seen_by_the_thread(tmp_path, monkeypatch):
    # A counter with a 40 J range advanced at 40 W by a separate process: it wraps every second, so
    # only the meter's polling thread sees every wrap of a 2.5 s window.
    root = tmp_path / "sys"
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tests/fleetlib/powercap.py"), str(root), "40", "40000000"]
    )
    try:
        wait_ready(root)
        meter = energy.powercap_meter(root)
        assert isinstance(meter, energy.CounterMeter) and 0 < meter.poll_s < 0.25
        meter.start()
        t0 = time.monotonic()
        while time.monotonic() - t0 < 2.5:
            time.sleep(0.05)
        reading = meter.stop()
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait()
    assert reading is not None
    # The poller misses a wrap only if it stalls for a second (a miss shows as 40 J short: -40%).
    assert reading.watts == pytest.approx(40, rel=0.05)


def _read_line(path: Path, held: float = 0.0) -> int:
    """One reading of a counter as the meter takes it (an empty read through the pipe is retried), the
    file kept open ``held`` seconds after its line."""
    for _ in range(3):
        with open(path) as f:
            line = f.readline()
            t = time.monotonic()
            while time.monotonic() - t < held:
                pass
        if line.strip():
            return int(line)
    raise AssertionError(f"{path}: three empty reads")


def test_the_fake_counter_never_answers_with_a_value_from_an_earlier_read(tmp_path):
    # The fake counter (tests/fleetlib/powercap.py) is the oracle of every energy figure here. CI saw a
    # window's start read 26 s stale (a 478 W window on a 50 W counter): a reader that stayed open after
    # its line let the fake write more values, and the fake's blocking open for the next reader, entered
    # as that reader closed, kept the pipe and those values until the next reader came, who took the
    # oldest first. Planted here 300 times: a reader holds the FIFO 3 ms after its line, nobody reads for
    # 20 ms, then one read; at 100 W it must be >= 1 J later (the old fake served 3-5 of 300 stale).
    root = tmp_path / "sys"
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests/fleetlib/powercap.py"), str(root), "100"])
    counter = root / "class" / "powercap" / "intel-rapl:0" / "energy_uj"
    stale = []
    try:
        wait_ready(root)
        for _ in range(300):
            first = _read_line(counter, held=0.003)
            idle = time.monotonic()
            while time.monotonic() - idle < 0.02:
                pass
            second = _read_line(counter)
            if second - first < 1_000_000:
                stale.append((first, second))
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait()
    assert not stale, stale[:5]


def test_missing_tree_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv("SB_PATH_SYSFS", str(tmp_path / "nothing"))
    meter = energy.meter_for(CPU)
    assert isinstance(meter, energy.NoMeter)
    assert meter.reason.startswith(energy.NO_COUNTER) and str(tmp_path / "nothing") in meter.reason


def test_tree_without_package_or_dram(sysfs):
    for z in ("intel-rapl:0", "intel-rapl:0:1", "intel-rapl-mmio:0"):
        (zone(sysfs, z) / "name").write_text("psys\n")
    meter = energy.meter_for(CPU)
    assert isinstance(meter, energy.NoMeter) and "no package or dram domain" in meter.reason


def test_unreadable_counter_says_why(sysfs):
    pkg = zone(sysfs, "intel-rapl:0") / "energy_uj"
    pkg.unlink()
    pkg.mkdir()  # reading it fails even as root
    meter = energy.meter_for(CPU)
    assert isinstance(meter, energy.NoMeter)
    assert "cannot read" in meter.reason and "intel-rapl:0/energy_uj" in meter.reason


@pytest.mark.skipif(
    os.geteuid() == 0, reason="root reads a 0400 file anyway: the permission case needs a user"
)
def test_root_only_counter_names_the_fix(sysfs):
    (zone(sysfs, "intel-rapl:0") / "energy_uj").chmod(0)
    meter = energy.meter_for(CPU)
    assert isinstance(meter, energy.NoMeter) and "root only since Linux 5.10" in meter.reason


def test_garbage_and_backwards_counters(sysfs):
    pkg = zone(sysfs, "intel-rapl:0") / "energy_uj"
    meter = energy.meter_for(CPU)
    meter.start()
    write_counter(pkg, 0)
    (zone(sysfs, "intel-rapl:0") / "energy_uj").write_text("NaN\n")
    with pytest.raises(energy.EnergyUnavailable, match="not a number"):
        meter.stop()
    # A counter without a wrap range that goes back is an error, not a negative energy.
    c = energy.Counter("x", iter([5.0, 3.0]).__next__)
    c.reset()
    with pytest.raises(energy.EnergyUnavailable, match="went backwards"):
        c.update()


def test_shared_cpu_counter_gives_no_per_rank_efficiency(sysfs):
    meter = energy.meter_for(CPU, local_world_size=4)
    assert isinstance(meter, energy.NoMeter) and "4 ranks share it" in meter.reason


# -- NVML and amdsmi: fakes of the documented calls ----------------------------------------------------------
class NVMLError(Exception):
    pass


def fake_nvml(energy_mj=None, power_mw=None):
    """pynvml's two calls: the energy counter (mJ) and the power reading (mW); None raises NotSupported."""

    def call(value):
        def f(handle):
            if value is None:
                raise NVMLError("Not Supported")
            return value() if callable(value) else value

        return f

    return SimpleNamespace(
        nvmlDeviceGetTotalEnergyConsumption=call(energy_mj), nvmlDeviceGetPowerUsage=call(power_mw)
    )


def test_nvml_energy_counter_is_preferred():
    ticks = iter([1_000_000, 1_000_000, 1_450_000])  # probe, start, stop: 450 J
    meter = energy.nvml_meter(fake_nvml(energy_mj=lambda: next(ticks), power_mw=300_000), "h")
    assert meter.source == "nvml-energy"
    meter.start()
    reading = meter.stop()
    assert reading is not None and reading.joules == pytest.approx(450.0)


def test_nvml_without_energy_counter_samples_power():
    meter = energy.nvml_meter(fake_nvml(energy_mj=None, power_mw=250_000), "h", hz=50)
    assert meter.source == "nvml-power-sampled@50Hz"
    meter.start()
    t0 = time.monotonic()
    while time.monotonic() - t0 < 0.3:
        time.sleep(0.02)
    reading = meter.stop()
    assert reading is not None and reading.watts == pytest.approx(250.0)
    assert reading.seconds >= 0.3


def test_nvml_without_either_says_why():
    meter = energy.nvml_meter(fake_nvml(), "h")
    assert isinstance(meter, energy.NoMeter) and meter.reason.startswith(energy.NO_COUNTER)


@pytest.mark.parametrize("key", ["energy_accumulator", "power"])
def test_amdsmi_counter_in_either_key(key):
    counts = iter([100, 100, 100 + 2_000_000])

    def get(handle):
        return {key: next(counts), "counter_resolution": 15.3, "timestamp": 0}

    meter = energy.amdsmi_meter(SimpleNamespace(amdsmi_get_energy_count=get), "h")
    assert meter.source == "amdsmi-energy"
    meter.start()
    reading = meter.stop()
    assert reading is not None and reading.joules == pytest.approx(2_000_000 * 15.3 / 1e6)


def test_amdsmi_not_supported_says_why():
    def get(handle):
        raise RuntimeError("AMDSMI_STATUS_NOT_SUPPORTED")

    meter = energy.amdsmi_meter(SimpleNamespace(amdsmi_get_energy_count=get), "h")
    assert isinstance(meter, energy.NoMeter) and "NOT_SUPPORTED" in meter.reason


# -- gemm-flops on CPU, reading a counter a separate process advances at 60 W -------------------------------
@pytest.fixture
def powered_sysfs(tmp_path, monkeypatch):
    root = tmp_path / "sys"
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests/fleetlib/powercap.py"), str(root), "60"])
    try:
        wait_ready(root)
        monkeypatch.setenv("SB_PATH_SYSFS", str(root))
        yield root
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait()


def test_gemm_flops_reports_power_and_efficiency_per_precision(powered_sysfs):
    pytest.importorskip("torch")
    from suite_helpers import run_bench

    env = run_bench("gemm-flops", m=64, n=64, k=64, num_warmup=1, duration=0.5, precision=["fp64", "fp32"])
    assert env["status"] == "ok", env["reason"]
    r = env["result"]
    for p in ("fp64", "fp32"):
        power = r[f"{p}_power"][0]
        assert power == pytest.approx(60, rel=0.05)
        assert r[f"{p}_flops_per_watt"][0] == pytest.approx(r[f"{p}_flops"][0] / power)
        assert env["metrics"][f"{p}_flops_per_watt"]["unit"] == "GFLOPS/W"
        assert env["metrics"][f"{p}_power"]["higher_is_better"] is False
    assert env["energy"]["source"] == "powercap:intel-rapl:0+intel-rapl:0:1"
    assert set(env["energy"]["windows"]) == {"fp64", "fp32"}
    # The tensor-core precisions are skipped with their own reason, and their energy metrics with them.
    assert "fp16_tc_power" not in r


def test_gemm_flops_without_counter_reports_the_figure_and_the_reason(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from suite_helpers import run_bench

    monkeypatch.setenv("SB_PATH_SYSFS", str(tmp_path / "none"))
    env = run_bench("gemm-flops", m=32, n=32, k=32, num_warmup=1, num_steps=2, min_time=0, precision=["fp32"])
    assert env["status"] == "ok" and env["result"]["fp32_flops"][0] > 0
    assert "fp32_power" not in env["result"] and "fp32_flops_per_watt" not in env["result"]
    assert "skipped fp32_flops_per_watt, fp32_power: no energy counter on this host" in env["reason"]
    assert env["energy"]["reason"].startswith(energy.NO_COUNTER)


def test_gpu_burn_reports_power_over_the_whole_load(powered_sysfs):
    pytest.importorskip("torch")
    from suite_helpers import run_bench

    env = run_bench("gpu-burn", duration=1.0, m=64, device="cpu")
    assert env["status"] == "ok", env["reason"]
    r = env["result"]
    assert r["burn_power"][0] == pytest.approx(60, rel=0.05)
    assert r["burn_gflops_per_watt"][0] == pytest.approx(r["burn_gflops"][0] / r["burn_power"][0])
    assert env["energy"]["windows"]["burn"]["seconds"] >= 1.0


def test_model_reports_throughput_per_watt_per_action(powered_sysfs):
    pytest.importorskip("torch")
    sys.path.insert(0, str(ROOT / "tests" / "suite" / "model"))
    from model_tiny import tiny_params
    from suite_helpers import run_bench

    params = tiny_params("pytorch-lstm", input_size=16, hidden_size=32, num_layers=2, seq_len=6)
    env = run_bench("pytorch-lstm", **{**params, "num_steps": 1, "duration": 0.5})
    assert env["status"] == "ok", env["reason"]
    r = env["result"]
    for action in ("train", "inference"):
        power = r[f"fp32_{action}_power"][0]
        assert power == pytest.approx(60, rel=0.1)
        tput = r[f"fp32_{action}_throughput"][0]
        assert r[f"fp32_{action}_throughput_per_watt"][0] == pytest.approx(tput / power)
        assert env["metrics"][f"fp32_{action}_throughput_per_watt"]["unit"] == "samples/s/W"


def test_a_sysfs_that_cannot_be_listed_costs_only_the_efficiency(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from suite_helpers import run_bench

    # powercap is a file, not a directory: listing it fails inside the meter's set-up
    (tmp_path / "class").mkdir()
    (tmp_path / "class" / "powercap").write_text("not a directory\n")
    monkeypatch.setenv("SB_PATH_SYSFS", str(tmp_path))
    env = run_bench("gemm-flops", m=32, n=32, k=32, num_warmup=1, num_steps=2, min_time=0, precision=["fp32"])
    assert env["status"] == "ok" and env["result"]["fp32_flops"][0] > 0
    assert "fp32_power" not in env["result"] and "no energy counter on this host" in env["reason"]
