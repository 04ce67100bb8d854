"""The host checks, from procfs and sysfs: CPU, memory, swap, kernel and OS, NUMA nodes, free disk in the
workspace, the ``memlock`` limit (RDMA pins memory), the CPU frequency governor, time synchronisation."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

from sb_bench.health.record import FAIL, PASS, WARN, Env, Record, read_text

REPORTED = "reported (no rule in the profile)"


def parse_meminfo(text: str) -> dict[str, int]:
    """``/proc/meminfo`` -> field -> kB."""
    out = {}
    for line in text.splitlines():
        k, _, v = line.partition(":")
        parts = v.split()
        if parts and parts[0].isdigit():
            out[k.strip()] = int(parts[0])
    return out


def parse_cpuinfo(text: str) -> tuple[str | None, int]:
    """``/proc/cpuinfo`` -> (model name, logical CPUs)."""
    model, n = None, 0
    for line in text.splitlines():
        k, _, v = line.partition(":")
        k = k.strip()
        if k == "processor":
            n += 1
        elif k == "model name" and model is None:
            model = v.strip()
    return model, n


def parse_limits(text: str, name: str = "Max locked memory") -> str | None:
    """``/proc/<pid>/limits`` -> the soft limit of ``name`` ("unlimited" or bytes as text)."""
    for line in text.splitlines():
        if line.startswith(name):
            parts = line[len(name) :].split()
            return parts[0] if parts else None
    return None


def parse_os_release(text: str) -> str | None:
    vals = {}
    for line in text.splitlines():
        k, _, v = line.partition("=")
        vals[k.strip()] = v.strip().strip('"')
    return vals.get("PRETTY_NAME") or (
        " ".join(x for x in (vals.get("ID"), vals.get("VERSION_ID")) if x) or None
    )


# systemd's own rule for ``NTPSynchronized`` (timedated's property, time-util.c ``ntp_synced``): the
# kernel's maximum error below 16 s (NTP's phase limit); STA_UNSYNC is ignored, as systemd ignores it.
MAX_SYNCED_ERROR_US = 16_000_000


def synced_by_maxerror(maxerror_us: int) -> bool:
    """Whether the kernel's clock counts as synchronised, by systemd's rule (see MAX_SYNCED_ERROR_US)."""
    return maxerror_us < MAX_SYNCED_ERROR_US


def kernel_maxerror() -> tuple[int | None, str]:
    """The kernel clock's maximum error in microseconds (``adjtimex(2)``, read only), or None and why."""
    import ctypes

    class Timex(ctypes.Structure):  # the head of struct timex (sys/timex.h); the rest is room
        _fields_ = [
            ("modes", ctypes.c_uint),
            ("offset", ctypes.c_long),
            ("freq", ctypes.c_long),
            ("maxerror", ctypes.c_long),
            ("rest", ctypes.c_char * 256),
        ]

    try:
        # the process's own symbols hold libc's (no ldconfig run to find it); a static or odd build: by name
        libc = ctypes.CDLL(None, use_errno=True)
        if not hasattr(libc, "adjtimex"):
            import ctypes.util

            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        tx = Timex()  # modes 0: nothing is set
        if libc.adjtimex(ctypes.byref(tx)) < 0:
            return None, f"adjtimex: errno {ctypes.get_errno()}"
        return int(tx.maxerror), "adjtimex"
    except (OSError, AttributeError) as exc:
        return None, f"adjtimex: {exc}"


def time_synced(env: Env, timeout: float) -> tuple[bool | None, str]:
    """Whether the clock is synchronised, as ``timedatectl show -p NTPSynchronized`` would say: a
    ``timedatectl`` in the tool directory answers (the operator's choice); else the kernel's word by
    systemd's own rule (adjtimex: no process, no D-Bus call to systemd-timedated, and it answers in a
    container without systemd too); ``timedatectl`` on PATH only where the kernel cannot say."""
    own = env.tool_dir is not None and env.tool("timedatectl") == str(env.tool_dir / "timedatectl")
    if not own:
        maxerror, src = kernel_maxerror()
        if maxerror is not None:
            return synced_by_maxerror(maxerror), src
    rc, out, _ = env.run(["timedatectl", "show", "-p", "NTPSynchronized", "--value"], timeout)
    if rc == 0 and out.strip() in ("yes", "no"):
        return out.strip() == "yes", "timedatectl"
    if own:  # the tool directory's timedatectl could not say: the kernel's word
        maxerror, src = kernel_maxerror()
    return (None if maxerror is None else synced_by_maxerror(maxerror)), src


def system_records(env: Env, timeout: float = 10.0) -> tuple[list[Record], dict[str, Any]]:
    want = lambda k, d=None: env.want("host", k, d)  # noqa: E731
    recs: list[Record] = []
    model, ncpu = parse_cpuinfo(read_text(env.proc("cpuinfo")) or "")
    cores = want("cpus_min")
    recs.append(
        Record(
            "host.cpu",
            FAIL if cores and ncpu < cores else PASS,
            {"model": model, "cpus": ncpu},
            f">= {cores} logical CPUs" if cores else REPORTED,
            f"{ncpu} x {model}",
            "procfs",
        )
    )
    mem = parse_meminfo(read_text(env.proc("meminfo")) or "")
    gib = round(mem.get("MemTotal", 0) / (1 << 20), 1)
    mmin = want("memory_gib_min")
    recs.append(
        Record(
            "host.memory",
            FAIL if mmin and gib < mmin else PASS,
            gib,
            f">= {mmin} GiB" if mmin else REPORTED,
            f"MemTotal {gib} GiB",
            "procfs",
        )
    )
    swap = round(mem.get("SwapTotal", 0) / (1 << 20), 1)
    swap_ok = want("swap")
    recs.append(
        Record(
            "host.swap",
            WARN if swap_ok is False and swap > 0 else PASS,
            swap,
            "no swap (else warn)" if swap_ok is False else REPORTED,
            f"SwapTotal {swap} GiB",
            "procfs",
        )
    )
    kernel = read_text(env.proc("sys/kernel/osrelease"))
    osname = parse_os_release(read_text(env.etc / "os-release") or "")
    recs.append(
        Record(
            "host.kernel",
            PASS,
            {"kernel": kernel, "os": osname},
            "reported; fleet drift judges it",
            f"{osname}, kernel {kernel}",
            "procfs",
        )
    )
    nodes = 0
    try:
        nodes = sum(1 for p in env.sys("devices/system/node").iterdir() if re.fullmatch(r"node\d+", p.name))
    except OSError:
        pass
    nwant = want("numa_nodes")
    recs.append(
        Record(
            "host.numa",
            FAIL if nwant and nodes != nwant else PASS,
            nodes,
            f"== {nwant} NUMA nodes" if nwant else REPORTED,
            f"{nodes} NUMA node(s)",
            "sysfs",
        )
    )
    recs.append(_disk(env, want("free_disk_gib_min")))
    lim = parse_limits(read_text(env.proc("self/limits")) or "")
    need = want("memlock_unlimited")
    recs.append(
        Record(
            "host.memlock",
            WARN if need and lim != "unlimited" else PASS,
            lim,
            "memlock unlimited for RDMA (else warn)" if need else REPORTED,
            f"Max locked memory {lim}",
            "procfs",
        )
    )
    govs: dict[str, int] = {}
    try:
        for c in env.sys("devices/system/cpu").iterdir():
            if re.fullmatch(r"cpu\d+", c.name):
                g = read_text(c / "cpufreq" / "scaling_governor")
                if g:
                    govs[g] = govs.get(g, 0) + 1
    except OSError:
        pass
    gwant = want("governor")
    other = {g: n for g, n in govs.items() if gwant and g != gwant}
    recs.append(
        Record(
            "host.governor",
            WARN if other else PASS,
            govs or None,
            f"every CPU's governor {gwant} (else warn)" if gwant else REPORTED,
            f"{other} not {gwant}" if other else "",
            "sysfs",
        )
    )
    synced, src = time_synced(env, timeout)
    twant = want("time_sync", True)
    recs.append(
        Record(
            "host.time_sync",
            WARN if twant and synced is False else PASS,
            synced,
            "clock synchronised (else warn)" if twant else REPORTED,
            {True: "synchronised", False: "NOT synchronised", None: "unknown"}[synced],
            src,
        )
    )
    facts = {
        "cpu_model": model,
        "kernel": kernel,
        "os": osname,
        "memlock": lim,
        "governor": sorted(govs)[0] if len(govs) == 1 else (sorted(govs) or None),
        "numa_nodes": nodes,
    }
    return recs, facts


def _disk(env: Env, gmin: float | None) -> Record:
    ws = env.workspace
    if ws is None:
        return Record("host.disk", PASS, None, REPORTED, "no workspace given", "statvfs")
    p = Path(os.path.expanduser(str(ws)))
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        free = round(shutil.disk_usage(p).free / (1 << 30), 1)
    except OSError as exc:
        return Record("host.disk", WARN, None, REPORTED, f"{p}: {exc.strerror}", "statvfs")
    return Record(
        "host.disk",
        FAIL if gmin and free < gmin else PASS,
        free,
        f">= {gmin} GiB free in the workspace" if gmin else REPORTED,
        f"{free} GiB free at {p}",
        "statvfs",
    )
