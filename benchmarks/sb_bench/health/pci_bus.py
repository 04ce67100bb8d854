"""The GPUs on the PCI bus, to hold against the GPUs the driver stack sees (``lspci`` vs ``nvidia-smi -L``).

On the bus: every PCI function under ``<sysfs>/bus/pci/devices`` whose ``vendor`` is NVIDIA (``0x10de``)
or AMD (``0x1002``) and whose ``class`` is a display controller (``0x0300xx`` VGA, ``0x0302xx`` 3D,
``0x0380xx`` other) or a processing accelerator (``0x1200xx``: AMD Instinct MI200/MI300 enumerate so),
virtual functions (``physfn``) left out; and for NVIDIA every ``<procfs>/driver/nvidia/gpus/<bus id>``,
the kernel module's own list (a GPU that fell off the bus may be gone from one of them). Each GPU's bound
kernel driver (its ``driver`` link: ``nvidia``, ``nouveau``, ``vfio-pci``, none) is kept for the evidence.

Seen by the driver stack: NVML or ``nvidia-smi`` for NVIDIA (:mod:`sb_bench.health.gpu_source`), and for
AMD amdsmi (:func:`read_amd`: ``amd-smi`` in the tool directory, else the ``amdsmi`` Python library,
else ``amd-smi list --json`` on PATH).

Bus ids are compared normalised (:func:`bus_id`): NVML's ``busId`` and nvidia-smi's ``pci.bus_id`` have
an 8-digit domain (``00000000:07:00.0``), sysfs and amdsmi a 4-digit one (``0000:07:00.0``).

A host's sysfs is read defensively: at most :data:`MAX_DEVICES` entries, 64 bytes of an attribute, and
regular files only (a FIFO or a device node is never read from); an entry whose attributes are garbage,
missing or a symlink loop is counted as unreadable and named in the notes, never an exception.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sb_bench.health.record import Env

VENDORS = {"10de": "NVIDIA", "1002": "AMD"}
GPU_CLASSES = ("0300", "0302", "0380", "1200")  # class code, subclass (PCI Code and ID Assignment spec)
NVSWITCH_CLASS = "0680"  # "other bridge": NVIDIA's NVSwitch
MAX_DEVICES = 16384  # PCI functions read at most (a large server has a few hundred)
ATTR_MAX = 64  # bytes read of one sysfs attribute ("0x10de\n" is 7)

_BUS = re.compile(r"^([0-9a-f]{1,8}):([0-9a-f]{1,2}):([0-9a-f]{1,2})\.([0-7])$")
_BUS_NO_DOMAIN = re.compile(r"^([0-9a-f]{1,2}):([0-9a-f]{1,2})\.([0-7])$")


def bus_id(text: str | None) -> str | None:
    """A PCI address as sysfs names it (``%04x:%02x:%02x.%x``), from NVML/nvidia-smi's
    ``00000000:3B:00.0``, amdsmi's ``0000:3b:00.0`` or a domain-less ``3b:00.0``; None: not one."""
    s = (text or "").strip().lower()
    m = _BUS.match(s)
    if m:
        dom, bus, dev, fn = m.groups()
    else:
        m = _BUS_NO_DOMAIN.match(s)
        if not m:
            return None
        dom, (bus, dev, fn) = "0", m.groups()
    return f"{int(dom, 16):04x}:{int(bus, 16):02x}:{int(dev, 16):02x}.{fn}"


def read_attr(path: Path, limit: int = ATTR_MAX) -> str | None:
    """A small sysfs attribute, stripped and lower case; None when it is missing, not a regular file
    (a FIFO would block, a device node is not sysfs), unreadable or a symlink loop."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError):
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, limit).decode("ascii", "replace").strip().lower()
    except OSError:
        return None
    finally:
        os.close(fd)


def _hex(text: str | None, digits: int) -> str | None:
    """``0x10de`` -> ``10de`` (exactly ``digits`` hex digits after 0x), else None."""
    if text is None or not re.fullmatch(rf"0x[0-9a-f]{{{digits}}}", text):
        return None
    return text[2:]


@dataclass(frozen=True)
class PciDevice:
    bus_id: str
    vendor: str  # 4 hex digits
    pci_class: str  # 6 hex digits
    driver: str | None  # the bound kernel driver; None: none
    virtual_function: bool = False


@dataclass(frozen=True)
class PciScan:
    """What ``<sysfs>/bus/pci/devices`` holds, read defensively."""

    devices: tuple[PciDevice, ...] = ()
    readable: bool = True  # False: the device list itself could not be read (then nothing is known)
    problem: str = ""
    unreadable: tuple[str, ...] = ()  # entries whose vendor or class could not be read
    truncated: bool = False


def read_pci(env: Env) -> PciScan:
    root = env.sys("bus/pci/devices")
    names: list[str] = []
    truncated = False
    try:
        with os.scandir(root) as it:
            for e in it:
                if len(names) >= MAX_DEVICES:
                    truncated = True
                    break
                names.append(e.name)
    except OSError as exc:
        return PciScan(readable=False, problem=f"{root}: {exc.strerror or exc}")
    devices, unreadable = [], []
    for name in sorted(names):
        bid = bus_id(name)
        if bid is None:
            continue  # not a PCI address: not a device entry
        d = root / name
        vendor, cls = _hex(read_attr(d / "vendor"), 4), _hex(read_attr(d / "class"), 6)
        if vendor is None or cls is None:
            unreadable.append(bid)
            continue
        try:  # the driver link names the driver's directory (a dangling or looping link names none)
            link = d / "driver"
            driver: str | None = os.path.basename(os.readlink(link)) if os.path.isdir(link) else None
        except (OSError, ValueError):
            driver = None
        devices.append(PciDevice(bid, vendor, cls, driver, os.path.lexists(d / "physfn")))
    return PciScan(tuple(devices), unreadable=tuple(unreadable), truncated=truncated)


@dataclass(frozen=True)
class BusGpu:
    bus_id: str
    vendor: str  # "NVIDIA" or "AMD"
    driver: str | None  # the bound kernel driver (None: none; "?": known to procfs only)


@dataclass(frozen=True)
class BusGpus:
    """The GPUs on the PCI bus; ``readable`` False: the bus could not be read (its count is unknown)."""

    gpus: tuple[BusGpu, ...] = ()
    readable: bool = True
    notes: tuple[str, ...] = field(default_factory=tuple)

    def vendors(self) -> set[str]:
        return {g.vendor for g in self.gpus}


def gpus_on_bus(env: Env, scan: PciScan | None = None) -> BusGpus:
    """NVIDIA and AMD GPUs from sysfs (and NVIDIA's from ``<procfs>/driver/nvidia/gpus``)."""
    scan = read_pci(env) if scan is None else scan
    notes = []
    if not scan.readable:
        notes.append(f"PCI devices unreadable ({scan.problem})")
    if scan.unreadable:
        shown = ", ".join(scan.unreadable[:5]) + (" ..." if len(scan.unreadable) > 5 else "")
        notes.append(f"{len(scan.unreadable)} PCI device(s) with an unreadable vendor or class: {shown}")
    if scan.truncated:
        notes.append(f"more than {MAX_DEVICES} PCI devices: the rest not read")
    found: dict[str, BusGpu] = {}
    for d in scan.devices:
        if d.vendor in VENDORS and d.pci_class[:4] in GPU_CLASSES and not d.virtual_function:
            found[d.bus_id] = BusGpu(d.bus_id, VENDORS[d.vendor], d.driver)
    procfs = env.proc("driver/nvidia/gpus")
    try:
        with os.scandir(procfs) as it:
            listed = [e.name for e in itertools.islice(it, MAX_DEVICES)]
    except OSError:
        listed = []  # no nvidia module loaded (or no such procfs): sysfs alone
    for name in listed:
        bid = bus_id(name)
        if bid is not None and bid not in found:
            found[bid] = BusGpu(bid, "NVIDIA", "nvidia")  # the nvidia module lists it: it is bound there
    readable = scan.readable or bool(listed)
    return BusGpus(tuple(found[b] for b in sorted(found)), readable, tuple(notes))


def nvswitch_count(env: Env, scan: PciScan | None = None) -> int:
    """NVSwitch devices on the PCI bus (vendor 0x10de, class 0x0680xx)."""
    scan = read_pci(env) if scan is None else scan
    return sum(1 for d in scan.devices if d.vendor == "10de" and d.pci_class[:4] == NVSWITCH_CLASS)


# -- AMD: what amdsmi sees --------------------------------------------------------------------------


@dataclass(frozen=True)
class Seen:
    """The GPUs a driver library or tool lists, by bus id; ``source`` empty: none answered (``problem``)."""

    source: str
    bus_ids: tuple[str, ...] = ()
    problem: str = ""


def parse_amd_smi_list(text: str) -> list[str]:
    """``amd-smi list --json`` (a list of ``{"gpu": 0, "bdf": "0000:0c:00.0", "uuid": ...}``; a wrapping
    object is looked through) -> the bus ids it names."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        raise ValueError(f"amd-smi list: not JSON: {text.strip()[:200]!r}") from None
    out: list[str] = []

    def walk(v: Any, depth: int) -> None:
        if depth > 4 or len(out) > MAX_DEVICES:
            return
        if isinstance(v, dict):
            b = bus_id(v.get("bdf") if isinstance(v.get("bdf"), str) else None)
            if b is not None:
                out.append(b)
                return
            for x in v.values():
                walk(x, depth + 1)
        elif isinstance(v, list):
            for x in v[:MAX_DEVICES]:
                walk(x, depth + 1)

    walk(data, 0)
    return out


def read_amd(env: Env, timeout: float = 10.0, amdsmi_loader: Callable[[], Any] | None = None) -> Seen:
    """The AMD GPUs the driver stack lists: ``amd-smi`` in the tool directory (it stands in for this
    machine's GPUs, as nvidia-smi does), else the amdsmi Python library, else ``amd-smi`` on PATH."""
    problems: list[str] = []

    def cli() -> Seen:
        rc, out, err = env.run(["amd-smi", "list", "--json"], timeout)
        if rc != 0:
            first = (err or out).strip().splitlines()[:1]
            return Seen("", problem=f"amd-smi list failed (rc {rc}): {first[0][:200] if first else ''}")
        try:
            return Seen("amd-smi", tuple(parse_amd_smi_list(out)))
        except ValueError as exc:
            return Seen("", problem=str(exc))

    if env.tool_dir is not None and (env.tool_dir / "amd-smi").is_file():
        return cli()
    try:
        lib = (amdsmi_loader or _import_amdsmi)()
    except Exception as exc:  # not installed, its library does not load
        lib = None
        problems.append(f"amdsmi: {type(exc).__name__}: {exc}"[:300])
    if lib is not None:
        try:
            lib.amdsmi_init()
            try:
                ids = [lib.amdsmi_get_gpu_device_bdf(h) for h in lib.amdsmi_get_processor_handles()]
            finally:
                try:
                    lib.amdsmi_shut_down()
                except Exception:
                    pass
            return Seen("amdsmi", tuple(b for b in (bus_id(str(x)) for x in ids) if b))
        except Exception as exc:  # the amdgpu driver is not loaded, ...
            problems.append(f"amdsmi: {type(exc).__name__}: {exc}"[:300])
    if env.tool("amd-smi") is not None:
        seen = cli()
        return seen if seen.source else Seen("", problem="; ".join([*problems, seen.problem]))
    return Seen("", problem="; ".join([*problems, "amd-smi: not found"]))


def _import_amdsmi() -> Any:
    import amdsmi  # ROCm's amdsmi Python library; optional

    return amdsmi
