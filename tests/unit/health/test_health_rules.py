"""The host-side rules, the NVML source through its small interface (recorded values), the probe runner's
timeouts, and the checks on fake machines in the kernel's documented sysfs/procfs layout."""

from __future__ import annotations

import sys
import time
import types
from dataclasses import replace
from pathlib import Path

import pytest
from sb_bench.health.gpu_checks import gpu_records
from sb_bench.health.gpu_source import GpuInfo, GpuState, NvmlSource, read_gpus
from sb_bench.health.infiniband import ib_records
from sb_bench.health.record import Env
from sb_bench.health.runner import run_checks
from sb_bench.health.system import system_records
from sb_bench.health.xid import xid_record

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from healthfake import make_machine  # noqa: E402

H100 = {
    "gpu": {"count": 8, "model": "H100", "pcie_width": 16, "pcie_gen": 5, "nvlinks": 18, "ecc": True},
    "ib": {"ports": 8, "rate_gbps": 400},
    "host": {"memlock_unlimited": True},
}


def good(i: int, **kw) -> GpuInfo:
    base = GpuInfo(
        i,
        "NVIDIA H100 80GB HBM3",
        f"0000:{i:02x}:00.0",
        81559.0,
        True,
        0,
        0,
        None,
        False,
        False,
        0,
        (),
        True,
        700.0,
        700.0,
        30.0,
        1,
        5,
        16,
        16,
        False,
        18,
        18,
        "96.00",
        "G520",
    )
    return replace(base, **kw)


def verdicts(recs) -> dict[str, tuple[str, str]]:
    return {r.check: (r.verdict, r.evidence) for r in recs}


def test_healthy_gpus_pass_and_the_idle_gen_is_not_judged():
    st = GpuState("nvml", tuple(good(i) for i in range(8)), "550.54.15", "12.4")
    v = verdicts(gpu_records(st, Env(expect=H100)))
    assert {k: x[0] for k, x in v.items()} == dict.fromkeys(v, "pass")


@pytest.mark.parametrize(
    ("over", "check", "words"),
    [
        ({"pcie_width": 8}, "gpu.pcie", "x8 of x16"),
        ({"pcie_gen_max": 4}, "gpu.pcie", "max gen 4, gen 5 expected"),
        ({"remap_pending": True, "remap_uncorrectable": 2}, "gpu.row_remap", "row remap pending"),
        ({"remap_failure": True}, "gpu.row_remap", "row remapping failed"),
        ({"retired_pages_pending": True}, "gpu.row_remap", "retired page pending"),
        ({"ecc_uncorrected_volatile": 1}, "gpu.ecc_volatile", "1 volatile uncorrectable"),
        ({"throttle_hw": ("hw_power_brake_slowdown",)}, "gpu.throttle", "hw_power_brake_slowdown"),
        ({"nvlink_up": 16}, "gpu.nvlink", "16 of 18 NVLinks up"),
        ({"ecc_enabled": False}, "gpu.ecc_mode", "ECC off, on expected"),
        ({"name": "NVIDIA A100-SXM4-80GB"}, "gpu.model", "mixed models"),
    ],
)
def test_one_bad_gpu_fails_its_check(over, check, words):
    gpus = [good(i) for i in range(8)]
    gpus[3] = replace(gpus[3], **over)
    v = verdicts(gpu_records(GpuState("nvml", tuple(gpus)), Env(expect=H100)))
    assert v[check][0] == "fail" and words in v[check][1], v[check]
    assert sum(1 for x in v.values() if x[0] == "fail") == 1, v


def test_warnings_and_counts():
    gpus = [good(i) for i in range(7)]
    gpus[0] = replace(gpus[0], power_limit_w=500.0, persistence=False, ecc_uncorrected_aggregate=3)
    v = verdicts(
        gpu_records(
            GpuState("nvidia-smi", tuple(gpus)), Env(expect={"gpu": {**H100["gpu"], "persistence": True}})
        )
    )
    assert v["gpu.count"] == ("fail", "7 GPU(s) found, 8 expected")
    assert v["gpu.power_limit"][0] == "warn" and "500 W below its default 700 W" in v["gpu.power_limit"][1]
    assert v["gpu.persistence"][0] == "warn" and v["gpu.ecc_aggregate"][0] == "warn"


def test_no_gpu_source():
    st = GpuState("", problem="nvidia-smi: not found")
    assert verdicts(gpu_records(st, Env(expect=H100)))["gpu.count"] == (
        "fail",
        "0 GPU(s) found, 8 expected (nvidia-smi: not found)",
    )
    assert verdicts(gpu_records(st, Env()))["gpu.count"][0] == "pass"  # no GPU expected: nothing to fail


def test_without_a_profile_the_gpus_are_judged_against_each_other():
    gpus = [good(i) for i in range(4)]
    gpus[2] = replace(gpus[2], nvlink_up=12)
    v = verdicts(gpu_records(GpuState("nvml", tuple(gpus)), Env()))
    assert v["gpu.nvlink"][0] == "fail" and "12 NVLinks up where another GPU has 18" in v["gpu.nvlink"][1]


class NVMLError(Exception):
    pass


def recorded_nvml(n: int = 2, pending_gpu: int | None = None) -> types.SimpleNamespace:
    """pynvml's calls with values as the NVML API reference types them (recorded from its documentation:
    bytes or str names, nvmlPciInfo_t.busId, nvmlMemory_t.total in bytes, (current, pending) modes, the
    remapped-rows 4-tuple, limits in mW); NVLink links past 17 and retired pages raise NotSupported."""

    def not_supported(*a):
        raise NVMLError("Not Supported")

    def nvlink(h, link):
        if link >= 18:
            raise NVMLError("Invalid Argument")
        return 0 if (h == 1 and link < 2) else 1

    return types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: n,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: b"NVIDIA H100 80GB HBM3",
        nvmlDeviceGetPciInfo=lambda h: types.SimpleNamespace(busId=f"00000000:{0x18 + h:02X}:00.0".encode()),
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(total=85520809984),
        nvmlDeviceGetEccMode=lambda h: (1, 1),
        nvmlDeviceGetTotalEccErrors=lambda h, t, c: 0,
        nvmlDeviceGetRetiredPagesPendingStatus=not_supported,
        nvmlDeviceGetRemappedRows=lambda h: (0, 1, 1, 0) if h == pending_gpu else (0, 0, 0, 0),
        nvmlDeviceGetCurrentClocksThrottleReasons=lambda h: 0x1 | (0x40 if h == 1 else 0),
        nvmlDeviceGetPersistenceMode=lambda h: 1,
        nvmlDeviceGetPowerManagementLimit=lambda h: 700000,
        nvmlDeviceGetPowerManagementDefaultLimit=lambda h: 700000,
        nvmlDeviceGetTemperature=lambda h, s: 31,
        nvmlDeviceGetCurrPcieLinkGeneration=lambda h: 5,
        nvmlDeviceGetMaxPcieLinkGeneration=lambda h: 5,
        nvmlDeviceGetCurrPcieLinkWidth=lambda h: 16,
        nvmlDeviceGetMaxPcieLinkWidth=lambda h: 16,
        nvmlDeviceGetMigMode=lambda h: (0, 0),
        nvmlDeviceGetNvLinkState=nvlink,
        nvmlDeviceGetVbiosVersion=lambda h: "96.00.89.00.01",
        nvmlDeviceGetInforomImageVersion=lambda h: "G520.0200.00.05",
        nvmlSystemGetDriverVersion=lambda: "550.54.15",
        nvmlSystemGetCudaDriverVersion=lambda: 12040,
    )


def test_nvml_source_reads_recorded_values():
    st = NvmlSource(recorded_nvml(pending_gpu=0)).read()
    assert st.source == "nvml" and st.driver == "550.54.15" and st.cuda == "12.4"
    g0, g1 = st.gpus
    assert g0.name == "NVIDIA H100 80GB HBM3" and g0.bus_id == "00000000:18:00.0"
    assert round(g0.memory_mib) == 81559 and g0.ecc_enabled is True and g0.retired_pages_pending is None
    assert (g0.remap_pending, g0.remap_uncorrectable, g0.remap_failure) == (True, 1, False)
    assert g0.throttle_hw == () and g1.throttle_hw == ("hw_thermal_slowdown",)  # gpu_idle is not a slowdown
    assert (g0.nvlink_up, g0.nvlink_total, g1.nvlink_up) == (18, 18, 16)
    assert (g0.power_limit_w, g0.pcie_width, g0.mig_enabled, g0.persistence) == (700.0, 16, False, True)
    v = verdicts(gpu_records(st, Env(expect={"gpu": {"count": 2, "nvlinks": 18}})))
    assert v["gpu.row_remap"][0] == "fail" and v["gpu.throttle"][0] == "fail" and v["gpu.nvlink"][0] == "fail"


def test_read_gpus_falls_back_to_nvidia_smi_and_the_tool_dir_wins(tmp_path):
    env_vars = make_machine(tmp_path / "m", gpus=2)
    env = Env(
        Path(env_vars["sb_path_sysfs"]), Path(env_vars["sb_path_procfs"]), Path(env_vars["sb_tool_dir"])
    )

    def broken():
        raise NVMLError("NVML Shared Library Not Found")

    st = read_gpus(env, nvml_loader=lambda: recorded_nvml(4))
    assert (
        st.source == "nvidia-smi" and len(st.gpus) == 2
    )  # a tool dir with nvidia-smi stands in for the GPUs
    bare = Env(tool_dir=tmp_path / "empty")
    assert read_gpus(bare, nvml_loader=lambda: recorded_nvml(4)).source == "nvml"
    none = read_gpus(bare, nvml_loader=broken)
    if none.source == "":  # no nvidia-smi on this machine's PATH either
        assert "NVML Shared Library Not Found" in none.problem and "nvidia-smi: not found" in none.problem


def test_unknown_smi_field_is_dropped_and_named(tmp_path):
    import json

    env_vars = make_machine(tmp_path / "m", gpus=1)
    gj = Path(env_vars["sb_tool_dir"]) / "gpus.json"
    rows = json.loads(gj.read_text())
    del rows[0]["inforom.img"]  # an nvidia-smi that does not know this field
    gj.write_text(json.dumps(rows))
    st = read_gpus(Env(tool_dir=Path(env_vars["sb_tool_dir"])))
    assert st.gpus[0].inforom is None and st.gpus[0].vbios == "96.00.89.00.01"
    assert any("inforom.img" in n for n in st.notes)


def machine_env(tmp_path: Path, **kw) -> Env:
    v = make_machine(tmp_path / "m", **kw)
    return Env(Path(v["sb_path_sysfs"]), Path(v["sb_path_procfs"]), Path(v["sb_tool_dir"]), tmp_path, H100)


def test_ib_port_down_and_half_rate(tmp_path):
    env = machine_env(tmp_path, ib_state={2: ("1: DOWN", "3: Disabled")}, ib_rate={5: "200 Gb/sec (4X HDR)"})
    v = verdicts(ib_records(env)[0])
    assert v["ib.ports"][0] == "pass"
    assert v["ib.state"] == ("fail", "port mlx5_2/1 DOWN/Disabled")
    assert v["ib.rate"] == ("fail", "mlx5_5/1 at 200 of 400 Gb/s")
    assert v["ib.errors"][0] == "pass" and v["ib.firmware"][0] == "pass"


def test_ib_missing_ports_and_counters(tmp_path):
    env = machine_env(tmp_path, ib_ports=6)
    (env.sysfs / "class/infiniband/mlx5_1/ports/1/counters/symbol_error").write_text("17\n")
    recs, facts = ib_records(env)
    v = verdicts(recs)
    assert v["ib.ports"][0] == "fail" and "6 InfiniBand port(s)" in v["ib.ports"][1]
    assert v["ib.errors"] == ("warn", "mlx5_1/1 symbol_error=17")
    assert facts["hca_fw"] == "28.39.1002" and facts["ib_rate_gbps"] == "400.0"


def test_xid_classes(tmp_path):
    fatal = "[ 1.0] NVRM: Xid (PCI:0000:48:00): 79, pid=0, GPU has fallen off the bus.\n"
    app = "[ 2.0] NVRM: Xid (PCI:0000:48:00): 13, pid=7, Graphics Exception\n"
    odd = "[ 3.0] NVRM: Xid (PCI:0000:48:00): 999, something new\n"
    assert xid_record(machine_env(tmp_path / "a")).verdict == "pass"
    r = xid_record(machine_env(tmp_path / "b", kmsg=app + fatal))
    assert (
        r.verdict == "fail"
        and r.value == {"13": 1, "79": 1}
        and r.evidence.startswith("XID 79 on 0000:48:00")
    )
    assert xid_record(machine_env(tmp_path / "c", kmsg=app + odd)).verdict == "warn"
    env = machine_env(tmp_path / "d", kmsg=app)
    env = replace(env, expect={"xid": {"fail": [13], "warn": []}})  # a profile may count it as the GPU's
    assert xid_record(env).verdict == "fail"


def test_xid_from_dmesg_in_the_tool_dir(tmp_path):
    env = machine_env(tmp_path)
    d = env.tool_dir / "dmesg"
    d.write_text("#!/bin/sh\necho '[ 9.9] NVRM: Xid (PCI:0000:18:00): 48, DBE'\n")
    d.chmod(0o755)
    r = xid_record(env)
    assert r.verdict == "fail" and r.source == "dmesg (tool dir)"


def test_host_checks(tmp_path):
    env = machine_env(tmp_path)
    recs, facts = system_records(env)
    v = verdicts(recs)
    assert all(x[0] == "pass" for x in v.values()), v
    assert facts["kernel"] == "5.15.0-1056-azure" and facts["os"] == "Ubuntu 22.04.4 LTS"
    assert facts["numa_nodes"] == 2 and facts["memlock"] == "unlimited" and facts["governor"] == "performance"
    (env.procfs / "self/limits").write_text("Max locked memory         65536    65536    bytes\n")
    strict = replace(
        env, expect={"host": {"memlock_unlimited": True, "governor": "performance", "free_disk_gib_min": 1e9}}
    )
    v = verdicts(system_records(strict)[0])
    assert v["host.memlock"][0] == "warn" and v["host.disk"][0] == "fail"


def test_probe_timeout_and_error_are_records():
    def slow(env, t):
        time.sleep(30)
        return [], {}

    def broken(env, t):
        raise RuntimeError("driver said no")

    t0 = time.monotonic()
    doc = run_checks(Env(expect={"timeouts": {"slow": 0.2}}), 5.0, {"slow": slow, "broken": broken})
    assert time.monotonic() - t0 < 5  # the hung probe does not hold the others
    v = {r["check"]: r for r in doc["checks"]}
    assert (
        v["slow.probe"]["verdict"] == "fail" and "did not finish within 0.2 s" in v["slow.probe"]["evidence"]
    )
    assert v["broken.probe"]["verdict"] == "fail" and "driver said no" in v["broken.probe"]["evidence"]
    assert doc["verdict"] == "fail"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="adjtimex is Linux's")
def test_the_clock_falls_back_to_the_kernels_word_when_timedatectl_cannot_say(tmp_path):
    """No systemd (a container, this CI): timedatectl fails and the kernel's adjtimex answers, through
    libc's symbol in the process itself (no ldconfig run to find libc)."""
    from sb_bench.health.system import time_synced

    tools = tmp_path / "tools"
    tools.mkdir()
    fake = tools / "timedatectl"
    fake.write_text("#!/bin/sh\necho 'System has not been booted with systemd' >&2\nexit 1\n")
    fake.chmod(0o755)
    synced, source = time_synced(Env(Path("/sys"), Path("/proc"), tools, None, {}), 5.0)
    assert source == "adjtimex" and synced in (True, False)


def test_the_kernels_clock_counts_as_synchronised_by_systemds_rule():
    """timedated's NTPSynchronized (systemd time-util.c ``ntp_synced``): the kernel's maximum error below
    16 s, NTP's phase limit, at which an unsynchronised kernel clock's error stops growing."""
    from sb_bench.health.system import synced_by_maxerror

    assert synced_by_maxerror(0) and synced_by_maxerror(15_999_999)
    assert not synced_by_maxerror(16_000_000) and not synced_by_maxerror(2**40)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="adjtimex is Linux's")
def test_the_clock_check_starts_no_timedatectl_where_the_kernel_answers(tmp_path, monkeypatch):
    """No tool directory of its own: the kernel's word, read in the process; a ``timedatectl`` on PATH
    (here one that leaves a mark, and would say "yes") is not started (a process and a D-Bus call to
    systemd-timedated on every host, for the value the kernel already holds)."""
    from sb_bench.health.system import kernel_maxerror, synced_by_maxerror, time_synced

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    mark = tmp_path / "started"
    fake = bin_dir / "timedatectl"
    fake.write_text(f"#!/bin/sh\ntouch {mark}\necho yes\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path('/usr/bin')}:{Path('/bin')}")
    synced, source = time_synced(Env(Path("/sys"), Path("/proc"), None, None, {}), 5.0)
    maxerror, _ = kernel_maxerror()
    assert maxerror is not None and maxerror >= 0
    assert (synced, source) == (synced_by_maxerror(maxerror), "adjtimex")
    assert not mark.exists()


def test_a_timedatectl_in_the_tool_directory_answers_first(tmp_path):
    """The operator's tool directory comes first, as for every tool the checks run."""
    from sb_bench.health.system import time_synced

    tools = tmp_path / "tools"
    tools.mkdir()
    for word, want in (("yes", True), ("no", False)):
        fake = tools / "timedatectl"
        fake.write_text(f"#!/bin/sh\necho {word}\n")
        fake.chmod(0o755)
        assert time_synced(Env(Path("/sys"), Path("/proc"), tools, None, {}), 5.0) == (want, "timedatectl")
