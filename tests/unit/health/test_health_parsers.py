"""The health checks' parsers on captured outputs (tests/unit/fixtures/health/README.md says where each
format comes from; all are synthesised from documentation, none recorded on a real machine)."""

from __future__ import annotations

from pathlib import Path

from sb_bench.health.gpu_source import (
    SMI_FIELDS,
    parse_nvlink_status,
    parse_query_gpu,
    parse_remapped_rows,
    parse_smi_version,
)
from sb_bench.health.infiniband import parse_rate
from sb_bench.health.system import parse_cpuinfo, parse_limits, parse_meminfo, parse_os_release
from sb_bench.health.xid import parse_xids

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "health"


def text(name: str) -> str:
    return (FIX / name).read_text()


def test_query_gpu_csv():
    gpus, driver = parse_query_gpu(text("nvidia-smi-query-gpu.csv"))
    assert driver == "550.54.15" and [g.index for g in gpus] == [0, 1, 2]
    g0, g1, g2 = gpus
    assert g0.name == "NVIDIA H100 80GB HBM3" and g0.bus_id == "00000000:18:00.0"
    assert g0.memory_mib == 81559 and g0.ecc_enabled is True and g0.ecc_uncorrected_volatile == 0
    assert g0.retired_pages_pending is None  # [N/A] on a GPU that remaps rows instead
    assert g0.throttle_hw == () and g0.persistence is True and g0.mig_enabled is False
    assert (g0.pcie_gen, g0.pcie_gen_max, g0.pcie_width, g0.pcie_width_max) == (1, 5, 16, 16)
    assert g0.vbios == "96.00.89.00.01" and g0.inforom == "G520.0200.00.05"
    assert g1.throttle_hw == ("hw_slowdown",) and g1.persistence is False and g1.mig_enabled is True
    assert (g1.ecc_uncorrected_volatile, g1.ecc_uncorrected_aggregate) == (2, 5)
    assert (g1.power_limit_w, g1.power_default_w, g1.temperature_c, g1.pcie_width) == (500.0, 700.0, 64.0, 8)
    # [Not Supported] and [N/A] are unknown, never False or 0
    assert g2.ecc_enabled is None and g2.ecc_uncorrected_volatile is None and g2.throttle_hw is None
    assert g2.power_limit_w is None and g2.mig_enabled is None


def test_query_gpu_refuses_a_short_row():
    import pytest

    with pytest.raises(ValueError, match="columns"):
        parse_query_gpu("0, NVIDIA H100 80GB HBM3\n")
    sub = SMI_FIELDS[:3]
    gpus, driver = parse_query_gpu("4, NVIDIA A100-SXM4-80GB, 00000000:07:00.0\n", sub)
    assert gpus[0].index == 4 and driver is None and gpus[0].throttle_hw is None


def test_remapped_rows():
    r = parse_remapped_rows(text("nvidia-smi-remapped-rows.csv"))
    assert r["0000:18:00.0"] == (0, False, False)
    assert r["0000:2a:00.0"] == (3, True, False)
    assert r["0000:3a:00.0"] == (512, False, True)


def test_nvlink_status():
    assert parse_nvlink_status(text("nvidia-smi-nvlink-s.txt")) == {0: (3, 3), 1: (1, 3)}


def test_smi_version():
    assert parse_smi_version(text("nvidia-smi-version.txt")) == {"driver": "550.54.15", "cuda": "12.4"}


def test_xids_in_both_kernel_log_formats():
    events = parse_xids(text("kernel-log-xid.txt"))
    assert [(pci, code) for pci, code, _ in events] == [
        ("0000:01:00", 3),
        ("0000:03:00", 79),
        ("0000:10:1c", 63),
        ("0000:3b:00", 13),
        ("0000:3b:00", 48),
        ("0000:2b:00", 79),
    ]
    assert events[1][2] == "GPU has fallen off the bus."


def test_ib_rate():
    assert parse_rate("400 Gb/sec (4X NDR)") == 400.0
    assert parse_rate("200 Gb/sec (4X HDR)") == 200.0
    assert parse_rate("2.5 Gb/sec (1X SDR)") == 2.5
    assert parse_rate("garbage") is None and parse_rate(None) is None


def test_procfs_parsers():
    m = parse_meminfo(text("meminfo"))
    assert m["MemTotal"] == 1847564252 and m["SwapTotal"] == 8388604
    assert parse_cpuinfo(text("cpuinfo")) == ("Intel(R) Xeon(R) Platinum 8480C", 2)
    assert parse_limits(text("limits")) == "8388608"
    assert parse_os_release(text("os-release")) == "Ubuntu 22.04.4 LTS"
    assert parse_os_release("ID=rocky\nVERSION_ID=9.3\n") == "rocky 9.3"
