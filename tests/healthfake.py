"""A fake GPU node on disk, in the kernel's and the tools' documented layouts, for the health checks.

``make_machine(root, ...)`` writes ``root/sys`` (InfiniBand ports as in the kernel ABI,
Documentation/ABI/stable/sysfs-class-infiniband; NUMA nodes; CPU governors; the GPUs and NVSwitches on the
PCI bus, Documentation/ABI/testing/sysfs-bus-pci: ``vendor``, ``class``, the ``driver`` link),
``root/proc`` (cpuinfo, meminfo, limits, osrelease, a running nv-fabricmanager, the nvidia module's
``driver/nvidia/gpus/<bus id>``, a captured kernel log ``kmsg``), ``root/etc/os-release`` and
``root/tools`` with an ``nvidia-smi`` that answers the queries
sb_bench.health asks, from a JSON file of GPU values, in nvidia-smi's CSV format (``--format=csv,noheader``;
field names from ``nvidia-smi --help-query-gpu``; an unknown field is refused with nvidia-smi's message;
``nvlink -e``: each link's replay, recovery and CRC error counters, which :func:`bump_nvlink` raises)
and ``timedatectl``. The defaults are an 8x H100 SXM node with 8x 400G NDR ports, as the built-in
``h100-sxm-8x-ib400`` profile expects: these outputs are synthesised from the documented formats, not
recorded on a real machine.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

NVIDIA_SMI = r"""#!@PYTHON@
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
gpus = json.load(open(os.path.join(here, "gpus.json")))
args = sys.argv[1:]
if gpus == "no-driver":  # the driver is not loaded: nvidia-smi's own words, exit status 9
    print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that "
          "the latest NVIDIA driver is installed and running.")
    sys.exit(9)
planted = os.path.join(here, "throttle.json")  # plant_throttle: a slowdown active for a time window
if os.path.exists(planted) and isinstance(gpus, list):
    import time
    for w in json.load(open(planted)):
        if w["from"] <= time.time() < w["to"]:
            for g in gpus:
                if w.get("gpus") is None or g["index"] in w["gpus"]:
                    if w.get("reason"):
                        g["clocks_throttle_reasons." + w["reason"]] = "Active"
                    g.update(w.get("fields") or {})
def val(g, f, units):
    v = g.get(f, "[N/A]")
    if units and f in ("memory.total",):
        return str(v)
    if not units and f == "memory.total":
        return f"{v} MiB"
    if not units and f in ("power.limit", "power.default_limit"):
        return f"{v:.2f} W"
    return str(v)
if args and args[0].startswith("--query-gpu="):
    fields = args[0].split("=", 1)[1].split(",")
    units = "nounits" in " ".join(args)
    for f in fields:
        if f not in gpus[0]:
            print(f'Field "{f}" is not a valid field to query.', file=sys.stderr)
            sys.exit(2)
    for g in gpus:
        print(", ".join(val(g, f, units) for f in fields))
elif args and args[0].startswith("--query-remapped-rows="):
    for g in gpus:
        print(", ".join([g["pci.bus_id"], str(g.get("remap.unc", 0)), "Yes" if g.get("remap.pending") else "No",
                         "Yes" if g.get("remap.failure") else "No"]))
elif args[:2] == ["nvlink", "-s"]:
    for g in gpus:
        print(f"GPU {g['index']}: {g['name']} (UUID: GPU-00000000-0000-0000-0000-00000000000{g['index']})")
        for k in range(18):
            up = k < g.get("nvlinks_up", 18)
            print(f"\t Link {k}: " + ("26.562 GB/s" if up else "<inactive>"))
elif args[:2] == ["nvlink", "-e"]:  # the driver 5xx layout; a row's "nvlink.errors": link -> counters
    for g in gpus:
        print(f"GPU {g['index']}: {g['name']} (UUID: GPU-00000000-0000-0000-0000-00000000000{g['index']})")
        errs = g.get("nvlink.errors", {})
        for k in range(18):
            c = errs.get(str(k), {})
            print(f"\t Link {k}: Replay Errors: {c.get('replay', 0)}")
            print(f"\t Link {k}: Recovery Errors: {c.get('recovery', 0)}")
            print(f"\t Link {k}: CRC Errors: {c.get('crc_flit', 0) + c.get('crc_data', 0)}")
            print()
elif args == ["--version"]:
    print("NVIDIA-SMI version  : " + gpus[0]["driver_version"])
    print("NVML version        : " + gpus[0]["driver_version"].rsplit(".", 1)[0])
    print("DRIVER version      : " + gpus[0]["driver_version"])
    print("CUDA Version        : " + os.environ.get("FAKE_CUDA", "12.4"))
else:
    print("fake nvidia-smi: unsupported arguments " + " ".join(args), file=sys.stderr)
    sys.exit(2)
"""


def bump_nvlink(tools: Path, gpu: int, link: int, counter: str = "replay", by: int = 1) -> None:
    """Add ``by`` to one NVLink error counter (``replay``, ``recovery``, ``crc_flit``, ``crc_data``) of a
    fake machine's GPU (its nvidia-smi index), as the link would count errors; ``tools`` is its
    ``sb_tool_dir``. The file is replaced whole (a reader sees the old or the new counters)."""
    path = Path(tools) / "gpus.json"
    rows = json.loads(path.read_text())
    c = rows[gpu].setdefault("nvlink.errors", {}).setdefault(str(link), {})
    c[counter] = c.get(counter, 0) + by
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(rows))
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def gpu_bus(i: int) -> str:
    """GPU i's PCI address as sysfs names it (nvidia-smi prints it ``00000000:18:00.0``)."""
    return f"0000:{0x18 + 0x10 * i:02x}:00.0"


def gpu_row(i: int, driver: str = "550.54.15", **over: Any) -> dict[str, Any]:
    bus = f"00000000:{0x18 + 0x10 * i:02X}:00.0"
    row = {
        "index": i,
        "name": "NVIDIA H100 80GB HBM3",
        "pci.bus_id": bus,
        "memory.total": 81559,
        "ecc.mode.current": "Enabled",
        "ecc.errors.uncorrected.volatile.total": 0,
        "ecc.errors.uncorrected.aggregate.total": 0,
        "retired_pages.pending": "[N/A]",
        "clocks_throttle_reasons.hw_slowdown": "Not Active",
        "clocks_throttle_reasons.hw_thermal_slowdown": "Not Active",
        "clocks_throttle_reasons.hw_power_brake_slowdown": "Not Active",
        "clocks_throttle_reasons.sw_thermal_slowdown": "Not Active",
        "clocks_throttle_reasons.sw_power_cap": "Not Active",
        "clocks.sm": 1980,
        "clocks.mem": 2619,
        "power.draw": 72.5,
        "ecc.errors.corrected.volatile.total": 0,
        "persistence_mode": "Enabled",
        "power.limit": 700.0,
        "power.default_limit": 700.0,
        "temperature.gpu": 33,
        "pcie.link.gen.current": 1,  # idle: the link trains down; the max is what counts
        "pcie.link.gen.max": 5,
        "pcie.link.width.current": 16,
        "pcie.link.width.max": 16,
        "mig.mode.current": "Disabled",
        "vbios_version": "96.00.89.00.01",
        "inforom.img": "G520.0200.00.05",
        "driver_version": driver,
    }
    row.update(over)
    return row


def _w(p: Path, text: str, mode: int = 0o644) -> None:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    os.chmod(p, mode)


def make_machine(
    root: Path,
    *,
    gpus: int = 8,
    gpu_over: dict[int, dict[str, Any]] | None = None,
    driver: str = "550.54.15",
    ib_ports: int = 8,
    ib_state: dict[int, tuple[str, str]] | None = None,
    ib_rate: dict[int, str] | None = None,
    kmsg: str = "",
    python: str | None = None,
    unseen: tuple[int, ...] = (),
    driver_loaded: bool = True,
) -> dict[str, str]:
    """Write a fake node under ``root``; its inventory variables (sb_path_sysfs, sb_path_procfs, sb_tool_dir).

    ``gpus`` GPUs are on the PCI bus (3D controllers of vendor NVIDIA, bound to the ``nvidia`` driver);
    nvidia-smi lists them all but those in ``unseen`` (indices on the bus). ``driver_loaded`` False: no
    GPU is bound to a driver, the nvidia module lists none and nvidia-smi fails as it does then."""
    root = Path(root)
    sysfs, procfs, tools = root / "sys", root / "proc", root / "tools"
    for i in range(ib_ports):
        hca = sysfs / "class/infiniband" / f"mlx5_{i}"
        _w(hca / "fw_ver", "28.39.1002\n")
        port = hca / "ports/1"
        state, phys = (ib_state or {}).get(i, ("4: ACTIVE", "5: LinkUp"))
        _w(port / "state", state + "\n")
        _w(port / "phys_state", phys + "\n")
        _w(port / "rate", (ib_rate or {}).get(i, "400 Gb/sec (4X NDR)") + "\n")
        _w(port / "link_layer", "InfiniBand\n")
        for c in ("link_downed", "symbol_error", "port_rcv_errors", "link_error_recovery"):
            _w(port / "counters" / c, "0\n")
    for n in range(2):
        (sysfs / f"devices/system/node/node{n}").mkdir(parents=True, exist_ok=True)
    for c in range(4):
        _w(sysfs / f"devices/system/cpu/cpu{c}/cpufreq/scaling_governor", "performance\n")
    for i in range(gpus):  # each a device directory, linked from bus/pci/devices as the kernel does
        bus = gpu_bus(i)
        dev = sysfs / "devices/pci0000:00" / bus
        _w(dev / "vendor", "0x10de\n")
        _w(dev / "class", "0x030200\n")
        _w(dev / "device", "0x2330\n")
        link = sysfs / "bus/pci/devices" / bus
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(f"../../../devices/pci0000:00/{bus}", link)
        if driver_loaded:
            (sysfs / "bus/pci/drivers/nvidia").mkdir(parents=True, exist_ok=True)
            os.symlink("../../../bus/pci/drivers/nvidia", dev / "driver")
            _w(
                procfs / "driver/nvidia/gpus" / bus / "information",
                f"Model: \t\t NVIDIA H100 80GB HBM3\nBus Location: \t {bus}\n",
            )
    for s in range(4):  # NVSwitches (vendor NVIDIA, class "other bridge")
        dev = sysfs / f"bus/pci/devices/0000:{0xC0 + s:02x}:00.0"
        _w(dev / "vendor", "0x10de\n")
        _w(dev / "class", "0x068000\n")
    _w(
        procfs / "cpuinfo",
        "".join(f"processor\t: {i}\nmodel name\t: Fake Xeon Platinum 8480C\n\n" for i in range(4)),
    )
    _w(
        procfs / "meminfo",
        "MemTotal:       2113798144 kB\nMemFree:        2000000000 kB\nSwapTotal:             0 kB\n",
    )
    _w(procfs / "sys/kernel/osrelease", "5.15.0-1056-azure\n")
    _w(
        procfs / "self/limits",
        "Limit                     Soft Limit           Hard Limit           Units\n"
        "Max locked memory         unlimited            unlimited            bytes\n",
    )
    _w(procfs / "4242/comm", "nv-fabricmanager\n")
    _w(procfs / "kmsg", kmsg)
    _w(root / "etc/os-release", 'PRETTY_NAME="Ubuntu 22.04.4 LTS"\nID=ubuntu\nVERSION_ID="22.04"\n')
    rows = [gpu_row(i, driver, **(gpu_over or {}).get(i, {})) for i in range(gpus) if i not in unseen]
    for k, row in enumerate(rows):  # nvidia-smi numbers the GPUs it sees
        row["index"] = k
    _w(tools / "gpus.json", json.dumps(rows if driver_loaded else "no-driver"))
    _w(tools / "nvidia-smi", NVIDIA_SMI.replace("@PYTHON@", python or sys.executable), 0o755)
    _w(tools / "timedatectl", "#!/bin/sh\necho yes\n", 0o755)
    for d in (root, sysfs, procfs, tools):
        os.chmod(d, 0o755)
    return {"sb_path_sysfs": str(sysfs), "sb_path_procfs": str(procfs), "sb_tool_dir": str(tools)}


def plant_throttle(
    tools: Path,
    start: float,
    seconds: float,
    reason: str = "hw_thermal_slowdown",
    gpus: list[int] | None = None,
) -> None:
    """The fake nvidia-smi in ``tools`` reports ``reason`` active on ``gpus`` (None: every GPU) from
    ``start`` (epoch seconds) for ``seconds``; earlier plantings are kept."""
    plant_window(tools, start, seconds, {"reason": reason, "gpus": gpus})


def plant_readings(
    tools: Path, start: float, seconds: float, fields: dict[str, Any], gpus: list[int] | None = None
) -> None:
    """The fake nvidia-smi in ``tools`` reports ``fields`` (nvidia-smi's names: ``temperature.gpu``,
    ``clocks.sm``) on ``gpus`` (None: every GPU) from ``start`` for ``seconds``."""
    plant_window(tools, start, seconds, {"reason": None, "fields": fields, "gpus": gpus})


def plant_window(tools: Path, start: float, seconds: float, what: dict[str, Any]) -> None:
    path = Path(tools) / "throttle.json"
    windows = json.loads(path.read_text()) if path.exists() else []
    windows.append({"from": start, "to": start + seconds, **what})
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(windows))
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
