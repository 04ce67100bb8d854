"""GPUs on the PCI bus against the GPUs the driver stack sees (``gpu.count``), on fake machines in the
kernel's sysfs layout (tests/healthfake.py): 8 on the bus and no driver, 7 of 8 seen, 8 of 8, a CPU host,
AMD GPUs through amd-smi/amdsmi, a hung driver, and sysfs content that is garbage, huge or loops."""

from __future__ import annotations

import json
import os
import sys
import time
import types
from pathlib import Path

import pytest
from sb_bench.health import runner
from sb_bench.health.gpu_checks import count_record, gpu_records, nvswitches
from sb_bench.health.gpu_source import GpuState, NvmlSource, read_gpus
from sb_bench.health.pci_bus import bus_id, gpus_on_bus, parse_amd_smi_list, read_amd, read_pci
from sb_bench.health.record import Env

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from healthfake import gpu_bus, make_machine  # noqa: E402

from .test_health_rules import H100, recorded_nvml  # noqa: E402

ALL = [gpu_bus(i) for i in range(8)]  # 0000:18:00.0 ... 0000:88:00.0


def machine(tmp_path: Path, expect: dict | None = None, **kw) -> Env:
    v = make_machine(tmp_path / "m", **kw)
    return Env(
        Path(v["sb_path_sysfs"]), Path(v["sb_path_procfs"]), Path(v["sb_tool_dir"]), tmp_path, expect or {}
    )


def gpu_count(env: Env, timeout: float = 10.0):
    recs, _ = runner._gpu(env, timeout)
    return next(r for r in recs if r.check == "gpu.count")


@pytest.mark.parametrize("expect", [None, H100], ids=["no profile", "h100 profile"])
def test_eight_on_the_bus_none_seen_because_the_driver_is_not_loaded(tmp_path, expect):
    r = gpu_count(machine(tmp_path, expect, driver_loaded=False))
    assert r.verdict == "fail" and r.value == {"seen": 0, "on_bus": 8}, r
    assert r.evidence.startswith(
        f"8 GPUs on the PCI bus, 0 seen by the driver: not seen {', '.join(ALL)} (NVIDIA, no kernel driver "
        "bound); the NVIDIA driver stack did not answer: nvidia-smi --query-gpu failed (rc 9): NVIDIA-SMI "
        "has failed because it couldn't communicate with the NVIDIA driver."
    ), r.evidence
    assert ("0 GPU(s) found, 8 expected" in r.evidence) == (expect is not None)
    assert r.source == "sysfs"


def test_no_gpu_library_and_no_nvidia_smi_is_zero_seen(tmp_path):
    env = machine(tmp_path, driver_loaded=False)

    def no_pynvml():
        raise ModuleNotFoundError("No module named 'pynvml'")

    st = read_gpus(Env(tool_dir=tmp_path / "empty"), nvml_loader=no_pynvml)
    if st.source:
        pytest.skip("this machine has an nvidia-smi on its PATH")
    r = count_record(st, env, gpus_on_bus(env))
    assert r.verdict == "fail" and r.value == {"seen": 0, "on_bus": 8}
    assert r.evidence.startswith("8 GPUs on the PCI bus, 0 seen by the driver: not seen 0000:18:00.0")
    assert r.evidence.endswith(
        "the NVIDIA driver stack did not answer: NVML: ModuleNotFoundError: No module named 'pynvml'; "
        "nvidia-smi: not found"
    ), r.evidence


def test_seven_of_eight_seen_names_the_missing_bus_id(tmp_path):
    r = gpu_count(machine(tmp_path, unseen=(3,)))
    assert r.verdict == "fail" and r.value == {"seen": 7, "on_bus": 8}
    assert r.evidence == (
        "8 GPUs on the PCI bus, 7 seen by the driver: not seen 0000:48:00.0 (NVIDIA, kernel driver nvidia)"
    ), r.evidence
    assert r.source == "nvidia-smi+sysfs"
    # with the profile: both said, the bus first
    r = gpu_count(machine(tmp_path / "p", H100, unseen=(3,)))
    assert (
        r.evidence.startswith("8 GPUs on the PCI bus, 7 seen")
        and "; 7 GPU(s) found, 8 expected" in r.evidence
    )


def test_eight_of_eight_pass(tmp_path):
    env = machine(tmp_path)
    r = gpu_count(env)
    assert (r.verdict, r.value, r.evidence) == (
        "pass",
        {"seen": 8, "on_bus": 8},
        "8 GPUs on the PCI bus, 8 seen by the driver",
    )
    r = gpu_count(machine(tmp_path / "p", H100))
    assert (
        r.verdict == "pass"
        and r.evidence == "8 GPUs on the PCI bus, 8 seen by the driver; 8 GPU(s) found, 8 expected"
    )
    assert nvswitches(env) == 4  # the NVSwitches beside them are not GPUs


def test_a_profile_count_the_bus_agrees_with_still_fails(tmp_path):
    r = gpu_count(machine(tmp_path, H100, gpus=7))  # 7 on the bus, 7 seen, 8 expected
    assert (
        r.verdict == "fail"
        and r.evidence == "7 GPU(s) found, 8 expected; 7 GPUs on the PCI bus, 7 seen by the driver"
    )


@pytest.mark.parametrize("expect", [{}, {"gpu": {"count": 0}}], ids=["no profile", "cpu-only"])
def test_cpu_host_no_gpu_on_the_bus_none_expected_passes(tmp_path, expect):
    sysfs, procfs = tmp_path / "sys", tmp_path / "proc"
    for i, (vendor, cls) in enumerate(
        [("0x8086", "0x060000"), ("0x1af4", "0x020000"), ("0x1a03", "0x030000")]
    ):
        d = sysfs / f"bus/pci/devices/0000:00:0{i}.0"  # a host bridge, a NIC, the BMC's VGA (ASPEED)
        d.mkdir(parents=True)
        (d / "vendor").write_text(vendor + "\n")
        (d / "class").write_text(cls + "\n")
    procfs.mkdir()
    env = Env(sysfs, procfs, tmp_path / "tools", None, expect)
    r = count_record(
        GpuState("", problem="NVML: NVMLError_LibraryNotFound; nvidia-smi: not found"), env, gpus_on_bus(env)
    )
    assert r.verdict == "pass" and r.value == {"seen": 0, "on_bus": 0}
    assert r.evidence.startswith("no GPU on the PCI bus"), r.evidence
    assert [x.check for x in gpu_records(GpuState(""), env, gpus_on_bus(env))] == ["gpu.count"]


def test_bus_ids_are_normalised():
    assert bus_id("00000000:3B:00.0") == "0000:3b:00.0"  # NVML busId, nvidia-smi pci.bus_id
    assert bus_id("0000:3b:00.0") == bus_id("3b:00.0") == "0000:3b:00.0"  # sysfs, amdsmi; busIdLegacy
    assert bus_id("00010000:C1:00.1") == "10000:c1:00.1"  # a VMD domain past 0xffff, as sysfs prints it
    for bad in ("", "GPU-1234", "0000:3b:00.8", "0000:3b:00", "zz:00.0", "0000:3b:00.0\x00"):
        assert bus_id(bad) is None, bad


def test_nvml_bus_ids_match_sysfs_and_unusable_gpus_are_named(tmp_path):
    env = machine(tmp_path, gpus=3)  # on the bus: 18, 28, 38
    nvml = recorded_nvml(2)  # busId b"00000000:18:00.0", b"00000000:19:00.0"
    nvml.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(
        busId=f"00000000:{0x18 + 0x10 * h:02X}:00.0".encode()
    )
    st = NvmlSource(nvml).read()
    assert [g.bus_id for g in st.gpus] == ["00000000:18:00.0", "00000000:28:00.0"]
    r = count_record(st, env, gpus_on_bus(env))
    assert (
        r.evidence
        == "3 GPUs on the PCI bus, 2 seen by the driver: not seen 0000:38:00.0 (NVIDIA, kernel driver nvidia)"
    )

    def handle(i):  # nvmlDeviceGetCount_v2 counts a GPU whose handle then fails
        if i == 2:
            raise RuntimeError("Insufficient Permissions")
        return i

    nvml.nvmlDeviceGetCount = lambda: 3
    nvml.nvmlDeviceGetHandleByIndex = handle
    nvml.nvmlGetExcludedDeviceCount = lambda: 0
    st = NvmlSource(nvml).read()
    r = count_record(st, env, gpus_on_bus(env))
    assert r.evidence.endswith(
        "(NVIDIA, kernel driver nvidia); NVML: GPU 2 of 3: RuntimeError: Insufficient Permissions"
    )
    nvml.nvmlDeviceGetCount = lambda: 2
    nvml.nvmlGetExcludedDeviceCount = lambda: 1  # NVreg_ExcludedGpus: the driver leaves it alone
    nvml.nvmlGetExcludedDeviceInfoByIndex = lambda i: types.SimpleNamespace(
        pciInfo=types.SimpleNamespace(busId=b"00000000:38:00.0")
    )
    r = count_record(NvmlSource(nvml).read(), env, gpus_on_bus(env))
    assert (
        r.evidence
        == "3 GPUs on the PCI bus, 2 seen by the driver: not seen 0000:38:00.0 (NVIDIA, excluded by the driver (NVreg_ExcludedGpus))"
    )


def test_nvidia_smi_that_cannot_open_one_gpu_names_it(tmp_path):
    env = machine(tmp_path)
    smi = env.tool_dir / "nvidia-smi"
    real = env.tool_dir / "nvidia-smi-real"
    smi.rename(real)
    smi.write_text(
        "#!/bin/sh\n"
        'case "$1" in --query-gpu=*)\n'
        f'  "{real}" "$@" | grep -v "00000000:48:00.0"\n'
        '  echo "Unable to determine the device handle for GPU0000:48:00.0: Unknown Error"\n'
        "  exit 15;;\n"
        "esac\n"
        f'exec "{real}" "$@"\n'
    )
    smi.chmod(0o755)
    r = gpu_count(env)
    assert r.verdict == "fail", r
    assert r.evidence == (
        "8 GPUs on the PCI bus, 7 seen by the driver: not seen 0000:48:00.0 (NVIDIA, nvidia-smi: Unable to "
        "determine the device handle for GPU0000:48:00.0: Unknown Error)"
    ), r.evidence


def test_a_hung_driver_is_zero_seen_within_the_probe_timeout(tmp_path, monkeypatch):
    env = machine(tmp_path)

    def hang(*a, **kw):
        time.sleep(30)

    monkeypatch.setattr(runner, "read_gpus", hang)
    t0 = time.monotonic()
    doc = runner.run_checks(env, 0.5, {"gpu": runner._gpu})
    assert time.monotonic() - t0 < 5
    (r,) = [x for x in doc["checks"] if x["check"] == "gpu.count"]
    assert r["verdict"] == "fail" and r["evidence"].startswith(
        "8 GPUs on the PCI bus, 0 seen by the driver: not seen"
    )
    assert r["evidence"].endswith("NVML/nvidia-smi: no answer within 0.5 s (a hung driver?)"), r["evidence"]


def amd_machine(tmp_path: Path, n: int = 8) -> Env:
    sysfs = tmp_path / "sys"
    for i in range(n):  # MI300X: class 0x1200 (processing accelerator), vendor AMD, bound to amdgpu
        d = sysfs / f"bus/pci/devices/0000:{0x05 + 0x20 * i:02x}:00.0"
        d.mkdir(parents=True)
        (d / "vendor").write_text("0x1002\n")
        (d / "class").write_text("0x120000\n")
        (sysfs / "bus/pci/drivers/amdgpu").mkdir(parents=True, exist_ok=True)
        os.symlink("../../drivers/amdgpu", d / "driver")
    vf = sysfs / "bus/pci/devices/0000:05:02.0"  # an SR-IOV virtual function is not another GPU
    vf.mkdir(parents=True)
    (vf / "vendor").write_text("0x1002\n")
    (vf / "class").write_text("0x120000\n")
    os.symlink("../0000:05:00.0", vf / "physfn")
    (tmp_path / "proc").mkdir()
    return Env(sysfs, tmp_path / "proc", tmp_path / "tools", None, {})


def amd_smi(env: Env, bdfs: list[str], rc: int = 0) -> None:
    assert env.tool_dir is not None
    env.tool_dir.mkdir(exist_ok=True)
    rows = [
        {"gpu": i, "bdf": b, "uuid": f"{i:02x}ff74a0-0000-1000-80ae-7c8cefe1f084", "kfd_id": 1000 + i}
        for i, b in enumerate(bdfs)
    ]
    (env.tool_dir / "list.json").write_text(json.dumps(rows))
    p = env.tool_dir / "amd-smi"
    p.write_text(
        f'#!/bin/sh\n[ "$1 $2" = "list --json" ] || exit 2\ncat "{env.tool_dir}/list.json"\nexit {rc}\n'
    )
    p.chmod(0o755)


def test_amd_gpus_through_amd_smi(tmp_path):
    env = amd_machine(tmp_path)
    bus = gpus_on_bus(env)
    assert len(bus.gpus) == 8 and bus.vendors() == {"AMD"}
    ids = [g.bus_id for g in bus.gpus]
    amd_smi(env, ids[:3] + ids[4:])
    r = count_record(GpuState("", problem="nvidia-smi: not found"), env, bus, read_amd(env))
    assert (
        r.verdict == "fail"
        and r.evidence
        == "8 GPUs on the PCI bus, 7 seen by the driver: not seen 0000:65:00.0 (AMD, kernel driver amdgpu)"
    )
    assert r.source == "amd-smi+sysfs"
    amd_smi(env, ids)
    r = count_record(GpuState("", problem="nvidia-smi: not found"), env, bus, read_amd(env))
    assert r.verdict == "pass" and r.evidence.startswith("8 GPUs on the PCI bus, 8 seen by the driver")


def test_amd_gpus_through_the_amdsmi_library_and_without_any(tmp_path):
    env = amd_machine(tmp_path)
    env = Env(env.sysfs, env.procfs, tmp_path / "empty", None, {})
    bus = gpus_on_bus(env)
    lib = types.SimpleNamespace(
        amdsmi_init=lambda: None,
        amdsmi_shut_down=lambda: None,
        amdsmi_get_processor_handles=lambda: list(range(8)),
        amdsmi_get_gpu_device_bdf=lambda h: f"0000:{0x05 + 0x20 * h:02x}:00.0",
    )
    seen = read_amd(env, amdsmi_loader=lambda: lib)
    assert seen.source == "amdsmi" and len(seen.bus_ids) == 8
    assert count_record(GpuState(""), env, bus, seen).verdict == "pass"

    def gone():
        raise ModuleNotFoundError("No module named 'amdsmi'")

    seen = read_amd(env, amdsmi_loader=gone)
    if seen.source:  # an amd-smi on this machine's PATH answered
        return
    r = count_record(GpuState("", problem="nvidia-smi: not found"), env, bus, seen)
    assert r.verdict == "fail" and r.evidence.startswith("8 GPUs on the PCI bus, 0 seen by the driver")
    assert (
        "the AMD driver stack did not answer: amdsmi: ModuleNotFoundError: No module named 'amdsmi'; amd-smi: not found"
        in r.evidence
    )
    assert "NVIDIA driver stack" not in r.evidence  # no NVIDIA GPU on this bus


def test_amd_smi_list_json_shapes():
    rows = [{"gpu": 0, "bdf": "0000:0C:00.0", "uuid": "x"}, {"gpu": 1, "bdf": "N/A"}]
    assert parse_amd_smi_list(json.dumps(rows)) == ["0000:0c:00.0"]
    assert parse_amd_smi_list(json.dumps({"gpu_data": rows})) == ["0000:0c:00.0"]
    with pytest.raises(ValueError, match="not JSON"):
        parse_amd_smi_list("AMD SMI is not initialized")
    with pytest.raises(ValueError, match="not JSON"):  # nesting too deep for the parser: said, no crash
        parse_amd_smi_list("[" * 100_000 + "]" * 100_000)
    assert parse_amd_smi_list("[" * 50 + "]" * 50) == []


def hostile_sysfs(tmp_path: Path) -> Env:
    """One real GPU among garbage: binary and huge attributes, a FIFO, a directory, symlink loops, odd names."""
    dev = tmp_path / "sys/bus/pci/devices"
    dev.mkdir(parents=True)

    def entry(
        name: str, vendor: str | bytes | None = "0x10de\n", cls: str | bytes | None = "0x030200\n"
    ) -> Path:
        d = dev / name
        d.mkdir()
        for f, v in (("vendor", vendor), ("class", cls)):
            if v is not None:
                (d / f).write_bytes(v if isinstance(v, bytes) else v.encode())
        return d

    entry("0000:07:00.0")  # the one GPU
    entry("0000:08:00.0", vendor=b"\xff\xfe\x00garbage\x80")
    entry("0000:09:00.0", cls="0x10de; rm -rf /\n")
    entry("0000:0a:00.0", vendor="0x" + "10de" * 5_000_000)  # 20 MB: only its first bytes are read
    d = entry("0000:0b:00.0", vendor=None)
    os.mkfifo(d / "vendor")  # a FIFO would block a plain open()
    d = entry("0000:0c:00.0", cls=None)
    (d / "class").mkdir()
    d = entry("0000:0d:00.0", vendor=None)
    os.symlink("vendor", d / "vendor")  # a symlink to itself: ELOOP
    d = entry("0000:0e:00.0")
    os.symlink("driver", d / "driver")  # a looping driver link: no driver named, the GPU still counts
    os.symlink("0000:0f:00.0", dev / "0000:0f:00.0")  # the device entry itself loops
    entry("not-a-bus-id")
    entry("0000:10:00.0", vendor="0X10DE\n", cls="0x0302\n")  # upper case is fine; a short class is not
    procfs = tmp_path / "proc/driver/nvidia/gpus"
    procfs.mkdir(parents=True)
    (procfs / "garbage; $(reboot)").mkdir()
    (procfs / "0000:07:00.0").mkdir()
    return Env(tmp_path / "sys", tmp_path / "proc", tmp_path / "tools", None, {})


def test_hostile_sysfs_is_a_clear_outcome_not_a_crash(tmp_path):
    env = hostile_sysfs(tmp_path)
    t0 = time.monotonic()
    scan = read_pci(env)
    bus = gpus_on_bus(env, scan)
    assert time.monotonic() - t0 < 5
    assert [g.bus_id for g in bus.gpus] == ["0000:07:00.0", "0000:0e:00.0"]
    assert bus.gpus[1].driver is None
    assert set(scan.unreadable) == {
        f"0000:{x}:00.0" for x in ("08", "09", "0a", "0b", "0c", "0d", "0f", "10")
    }
    r = count_record(GpuState("", problem="nvidia-smi: not found"), env, bus)
    assert r.verdict == "fail" and r.evidence.startswith(
        "2 GPUs on the PCI bus, 0 seen by the driver: not seen 0000:07:00.0, 0000:0e:00.0 (NVIDIA, no kernel "
        "driver bound); the NVIDIA driver stack did not answer: nvidia-smi: not found"
    ), r.evidence
    assert "8 PCI device(s) with an unreadable vendor or class: 0000:08:00.0" in r.evidence
    recs, _ = runner._gpu(env, 2.0)  # the whole probe: records, no exception
    assert {x.check for x in recs} == {"gpu.count"}


def test_unreadable_pci_tree_is_said(tmp_path):
    (tmp_path / "sys/bus/pci").mkdir(parents=True)
    os.symlink("devices", tmp_path / "sys/bus/pci/devices")  # loops
    env = Env(tmp_path / "sys", tmp_path / "proc", None, None, {})
    bus = gpus_on_bus(env)
    assert not bus.readable and "PCI devices unreadable" in bus.notes[0]
    r = count_record(GpuState("", problem="nvidia-smi: not found"), env, bus)
    assert r.verdict == "pass" and r.value == 0 and "PCI bus not read: PCI devices unreadable" in r.evidence
    r = count_record(GpuState("", problem="nvidia-smi: not found"), Env(expect=H100), bus)
    assert r.verdict == "fail" and r.evidence.startswith("0 GPU(s) found, 8 expected (nvidia-smi: not found)")


def test_without_the_nvidia_driver_nvml_is_not_loaded_and_the_reason_says_so(tmp_path, monkeypatch):
    """NVML answers only through the NVIDIA kernel driver, which makes ``/proc/driver/nvidia``: where that
    is absent, pynvml is not imported (~20 ms of a host's CPU) and the evidence names the missing driver;
    where it is there, NVML is asked as before."""
    from sb_bench.health import gpu_source

    calls: list[str] = []

    def no_driver_nvml():
        calls.append("loaded")
        raise RuntimeError("NVML Shared Library Not Found")

    monkeypatch.setattr(gpu_source, "_import_pynvml", no_driver_nvml)
    procfs = tmp_path / "proc"
    procfs.mkdir()
    st = read_gpus(Env(procfs=procfs, tool_dir=tmp_path / "empty"))
    assert calls == []
    assert st.problem.startswith(f"NVML: no NVIDIA driver loaded ({procfs / 'driver/nvidia'} absent)")
    (procfs / "driver" / "nvidia").mkdir(parents=True)
    st = read_gpus(Env(procfs=procfs, tool_dir=tmp_path / "empty"))
    assert calls == ["loaded"] and "NVML Shared Library Not Found" in st.problem
