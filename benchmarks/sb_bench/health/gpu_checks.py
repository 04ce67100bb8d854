"""The GPU checks: pure rules over a :class:`~sb_bench.health.gpu_source.GpuState` and the expectations.

Each rule's threshold comes from the ``gpu`` expectations the control node hands in (a SKU profile);
without one, a rule that needs it reports the value only (pass, rule ``reported``). One rule needs no
profile: the GPUs on the PCI bus (:mod:`sb_bench.health.pci_bus`) must all be seen by the driver stack.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sb_bench.health.gpu_source import GpuInfo, GpuState, NvlinkErrors
from sb_bench.health.pci_bus import BusGpu, BusGpus, Seen, bus_id, nvswitch_count
from sb_bench.health.record import FAIL, PASS, WARN, Env, Record

REPORTED = "reported (no rule in the profile)"


def _who(g: GpuInfo) -> str:
    return f"GPU {g.index}" + (f" ({g.bus_id})" if g.bus_id else "")


def _per_gpu(
    check: str,
    st: GpuState,
    value: Callable[[GpuInfo], Any],
    bad: Callable[[GpuInfo], str | None],
    rule: str,
    verdict: str = FAIL,
) -> Record:
    """One record over every GPU: ``bad`` says what is wrong with one GPU (None: nothing)."""
    vals = {str(g.index): value(g) for g in st.gpus}
    problems = [f"{_who(g)}: {p}" for g in st.gpus if (p := bad(g))]
    return Record(check, verdict if problems else PASS, vals, rule, "; ".join(problems), st.source)


def _gpus(n: int) -> str:
    return f"{n} GPU" + ("" if n == 1 else "s")


def _missing(gpus: list[BusGpu], why: dict[str, str], limit: int = 16) -> str:
    """``0000:07:00.0 (no kernel driver bound)``, grouped: the ids of one vendor and driver together."""
    groups: dict[str, list[str]] = {}
    for g in gpus:
        drv = why.get(g.bus_id) or (
            "no kernel driver bound" if g.driver is None else f"kernel driver {g.driver}"
        )
        groups.setdefault(f"{g.vendor}, {drv}", []).append(g.bus_id)
    parts, shown = [], 0
    for label, ids in groups.items():
        take = ids[: max(0, limit - shown)]
        shown += len(take)
        if take:
            parts.append(f"{', '.join(take)} ({label})")
    more = len(gpus) - shown
    return "; ".join(parts) + (f" and {more} more" if more > 0 else "")


def count_record(st: GpuState, env: Env, bus: BusGpus | None = None, amd: Seen | None = None) -> Record:
    """``gpu.count``: the GPUs the driver stack sees (NVML/nvidia-smi, amdsmi for AMD GPUs) against the
    GPUs on the PCI bus, profile or not (fewer seen fails, naming both counts and the bus ids not seen:
    "8 GPUs on the PCI bus, 0 seen by the driver: ..."), and against the profile's count. ``bus`` None:
    the bus was not read, only the profile judges."""
    count = env.want("gpu", "count")
    amd_ids = amd.bus_ids if amd is not None else ()
    n = len(st.gpus) + len(amd_ids)
    sources = [x for x in (st.source, amd.source if amd is not None else "") if x]
    nothing = "" if sources else (st.problem or "no GPU driver stack answered")
    failed: list[str] = []
    info: list[str] = []
    value: Any = n
    rule = f"== {count}" if count is not None else REPORTED
    if bus is not None and bus.readable:
        m = len(bus.gpus)
        value = {"seen": n, "on_bus": m}
        rule = "every GPU on the PCI bus seen by the driver" + (f"; == {count}" if count is not None else "")
        if n < m:
            failed.append(_short_of_bus(st, bus, amd, n))
            nothing = ""  # said in it
        elif m:
            more = " (more than the bus shows: a partial sysfs?)" if n > m else ""
            info.append(f"{_gpus(m)} on the PCI bus, {n} seen by the driver{more}")
        else:
            info.append("no GPU on the PCI bus" + (f", {n} seen by the driver" if n else ""))
    if count is not None:
        msg = f"{n} GPU(s) found, {count} expected"
        if n != count:
            failed.append(msg + (f" ({nothing})" if nothing else ""))
            nothing = ""
        else:
            info.append(msg)
    elif sources and (bus is None or not bus.readable):
        info.append(f"{n} GPU(s) found")
    if nothing:
        info.append(nothing)
    if bus is not None:
        info.extend(bus.notes if bus.readable else [f"PCI bus not read: {'; '.join(bus.notes)}"])
    return Record(
        "gpu.count",
        FAIL if failed else PASS,
        value,
        rule,
        "; ".join([*failed, *info]),
        "+".join([*sources, *(["sysfs"] if bus is not None else [])]),
    )


def _short_of_bus(st: GpuState, bus: BusGpus, amd: Seen | None, n: int) -> str:
    seen_ids = {b for b in (bus_id(g.bus_id) for g in st.gpus) if b}
    seen_ids |= set(amd.bus_ids if amd is not None else ())
    not_seen = [g for g in bus.gpus if g.bus_id not in seen_ids]
    ev = f"{_gpus(len(bus.gpus))} on the PCI bus, {n} seen by the driver"
    why = {b: w for b, w in st.unusable if b}
    ev += f": not seen {_missing(not_seen, why)}" if not_seen else " (the driver named no bus ids)"
    causes = [w for b, w in st.unusable if not b]
    vendors = bus.vendors()
    if "NVIDIA" in vendors and not st.source:
        causes.append(f"the NVIDIA driver stack did not answer: {st.problem or 'no source'}")
    if "AMD" in vendors and (amd is None or not amd.source):
        causes.append(f"the AMD driver stack did not answer: {amd.problem if amd else 'not asked'}")
    return ev + "".join(f"; {c}" for c in causes)


def gpu_records(st: GpuState, env: Env, bus: BusGpus | None = None, amd: Seen | None = None) -> list[Record]:
    want = lambda k, d=None: env.want("gpu", k, d)  # noqa: E731
    recs: list[Record] = [count_record(st, env, bus, amd)]
    if not st.source:
        return recs
    model = want("model")
    names = sorted({g.name for g in st.gpus})
    problems = []
    if len(names) > 1:
        problems.append(f"mixed models on one host: {names}")
    if model and any(model.lower() not in g.name.lower() for g in st.gpus):
        problems.append(f"model {names} does not contain {model!r}")
    recs.append(
        Record(
            "gpu.model",
            FAIL if problems else PASS,
            names[0] if len(names) == 1 else names,
            f"contains {model!r}" if model else "one model per host",
            "; ".join(problems),
            st.source,
        )
    )
    mem = want("memory_gib_min")
    recs.append(
        _per_gpu(
            "gpu.memory",
            st,
            lambda g: g.memory_mib,
            lambda g: (
                f"{g.memory_mib / 1024:.1f} GiB < {mem} GiB"
                if mem and g.memory_mib is not None and g.memory_mib / 1024 < mem
                else None
            ),
            f">= {mem} GiB" if mem else REPORTED,
        )
    )
    ecc = want("ecc")
    recs.append(
        _per_gpu(
            "gpu.ecc_mode",
            st,
            lambda g: g.ecc_enabled,
            lambda g: (
                f"ECC {'on' if g.ecc_enabled else 'off'}, {'on' if ecc else 'off'} expected"
                if ecc is not None and g.ecc_enabled is not None and g.ecc_enabled != ecc
                else None
            ),
            f"ECC {'enabled' if ecc else 'disabled'}" if ecc is not None else REPORTED,
        )
    )
    vmax = want("ecc_uncorrected_volatile_max", 0)
    recs.append(
        _per_gpu(
            "gpu.ecc_volatile",
            st,
            lambda g: g.ecc_uncorrected_volatile,
            lambda g: (
                f"{g.ecc_uncorrected_volatile} volatile uncorrectable ECC errors"
                if (g.ecc_uncorrected_volatile or 0) > vmax
                else None
            ),
            f"volatile uncorrectable ECC <= {vmax}",
        )
    )
    amax = want("ecc_uncorrected_aggregate_max", 0)
    recs.append(
        _per_gpu(
            "gpu.ecc_aggregate",
            st,
            lambda g: g.ecc_uncorrected_aggregate,
            lambda g: (
                f"{g.ecc_uncorrected_aggregate} aggregate uncorrectable ECC errors"
                if (g.ecc_uncorrected_aggregate or 0) > amax
                else None
            ),
            f"aggregate uncorrectable ECC <= {amax} (else warn)",
            WARN,
        )
    )
    recs.append(
        _per_gpu(
            "gpu.row_remap",
            st,
            lambda g: {
                "pending": g.remap_pending,
                "failure": g.remap_failure,
                "uncorrectable": g.remap_uncorrectable,
                "retired_pages_pending": g.retired_pages_pending,
            },
            _remap_problem,
            "no row remap pending or failed, no retired page pending (a GPU reset applies them)",
        )
    )
    recs.append(
        _per_gpu(
            "gpu.throttle",
            st,
            lambda g: list(g.throttle_hw) if g.throttle_hw is not None else None,
            lambda g: f"hardware slowdown active: {', '.join(g.throttle_hw)}" if g.throttle_hw else None,
            "no HW slowdown, HW thermal slowdown or HW power brake",
        )
    )
    pers = want("persistence")
    recs.append(
        _per_gpu(
            "gpu.persistence",
            st,
            lambda g: g.persistence,
            lambda g: "persistence mode off" if pers and g.persistence is False else None,
            "persistence mode on (else warn)" if pers else REPORTED,
            WARN,
        )
    )
    recs.append(
        _per_gpu(
            "gpu.power_limit",
            st,
            lambda g: [g.power_limit_w, g.power_default_w],
            lambda g: (
                f"power limit {g.power_limit_w:g} W below its default {g.power_default_w:g} W"
                if g.power_limit_w is not None
                and g.power_default_w is not None
                and g.power_limit_w < g.power_default_w - 0.5
                else None
            ),
            "power limit >= default (else warn)",
            WARN,
        )
    )
    tmax = want("temperature_max_c")
    recs.append(
        _per_gpu(
            "gpu.temperature",
            st,
            lambda g: g.temperature_c,
            lambda g: (
                f"{g.temperature_c:g} C > {tmax} C before any load"
                if tmax is not None and g.temperature_c is not None and g.temperature_c > tmax
                else None
            ),
            f"<= {tmax} C before the benchmarks (else warn)" if tmax is not None else REPORTED,
            WARN,
        )
    )
    links = want("nvlinks")
    most = max((g.nvlink_up or 0 for g in st.gpus), default=0)
    recs.append(
        _per_gpu(
            "gpu.nvlink",
            st,
            lambda g: [g.nvlink_up, g.nvlink_total],
            lambda g: _nvlink_problem(g, links, most),
            f"{links} NVLinks up per GPU" if links else "every GPU has as many NVLinks up as the best one",
        )
    )
    recs.append(nvlink_errors_record(st, want("nvlink_error_max", 0)))
    gen, width = want("pcie_gen"), want("pcie_width")
    recs.append(
        _per_gpu(
            "gpu.pcie",
            st,
            lambda g: f"gen{g.pcie_gen}/{g.pcie_gen_max} x{g.pcie_width}/{g.pcie_width_max}",
            lambda g: _pcie_problem(g, gen, width),
            "link width == its max"
            + (f" == x{width}" if width else "")
            + (f"; max gen >= {gen}" if gen else "")
            + " (the current gen drops at idle: not judged)",
        )
    )
    mig = want("mig")
    recs.append(
        _per_gpu(
            "gpu.mig",
            st,
            lambda g: g.mig_enabled,
            lambda g: (
                f"MIG {'on' if g.mig_enabled else 'off'}, {'on' if mig else 'off'} expected"
                if mig is not None and g.mig_enabled is not None and g.mig_enabled != mig
                else None
            ),
            f"MIG {'enabled' if mig else 'disabled'}" if mig is not None else REPORTED,
        )
    )
    return recs


def _remap_problem(g: GpuInfo) -> str | None:
    if g.remap_failure:
        return "row remapping failed (the GPU needs service)"
    if g.remap_pending:
        return f"row remap pending ({g.remap_uncorrectable or 0} uncorrectable rows): reset the GPU"
    if g.retired_pages_pending:
        return "retired page pending: reset the GPU"
    return None


def _nvlink_problem(g: GpuInfo, want: int | None, most: int) -> str | None:
    if g.nvlink_up is None:
        return f"NVLink state unreadable, {want} expected" if want else None
    if want and g.nvlink_up < want:
        return f"{g.nvlink_up} of {want} NVLinks up"
    if not want and g.nvlink_up < most:
        return f"{g.nvlink_up} NVLinks up where another GPU has {most}"
    return None


def _link_value(e: NvlinkErrors) -> dict[str, int | None]:
    """A link's counters as the document carries them: the ones not zero, and None for one not read
    (``crc`` is flits and data together; its parts only where they were read apart)."""
    vals = {"replay": e.replay, "recovery": e.recovery, "crc": e.crc}
    if e.crc_total is None:
        vals |= {"crc_flit": e.crc_flit, "crc_data": e.crc_data}
    return {k: v for k, v in vals.items() if v != 0}


def nvlink_errors_record(st: GpuState, limit: int) -> Record:
    """``gpu.nvlink_errors``: each NVLink's replay, recovery and CRC (flit + data) error counters since the
    driver loaded or they were last reset, ``"<gpu>/<link>"`` -> the counters not zero, for every link read;
    a counter above ``limit`` warns (as ``ib.errors``: a link that retries still carries data, slower). A
    soak watches their growth (``nvlink.replay[<gpu>/<link>]``: sb_fleet.campaign.stage_judgement)."""
    value: dict[str, dict[str, int | None]] = {}
    over: list[str] = []
    for g in st.gpus:
        for e in g.nvlink_errors or ():
            value[f"{g.index}/{e.link}"] = _link_value(e)
            bad = [
                f"{c}={v}"
                for c in ("replay", "recovery", "crc")
                if (v := getattr(e, c)) is not None and v > limit
            ]
            if bad:
                over.append(f"GPU {g.index} link {e.link}: {', '.join(bad)}")
    ev = "; ".join(over[:12]) + (f" and {len(over) - 12} more links" if len(over) > 12 else "")
    if not value:
        ev = "no NVLink error counters read (no NVLink, or the driver does not report them)"
    return Record(
        "gpu.nvlink_errors",
        WARN if over else PASS,
        value,
        f"NVLink replay, recovery and CRC error counters <= {limit} per link since the driver loaded or "
        "they were last reset (else warn)",
        ev,
        st.source,
    )


def _pcie_problem(g: GpuInfo, gen: int | None, width: int | None) -> str | None:
    out = []
    if g.pcie_width is not None and g.pcie_width_max is not None and g.pcie_width < g.pcie_width_max:
        out.append(f"PCIe link x{g.pcie_width} of x{g.pcie_width_max}")
    elif width and g.pcie_width is not None and g.pcie_width < width:
        out.append(f"PCIe link x{g.pcie_width}, x{width} expected")
    if gen and g.pcie_gen_max is not None and g.pcie_gen_max < gen:
        out.append(f"PCIe max gen {g.pcie_gen_max}, gen {gen} expected")
    return "; ".join(out) or None


def nvswitches(env: Env) -> int:
    """NVSwitch devices on the PCI bus (vendor 0x10de, class 0x0680xx: 'other bridge')."""
    return nvswitch_count(env)


def fabric_manager_record(env: Env) -> Record | None:
    """On NVSwitch systems, nv-fabricmanager must run (without it CUDA reports no GPU memory peers)."""
    switches = nvswitches(env)
    required = env.want("gpu", "fabric_manager")
    if not switches and not required:
        return None
    running = []
    try:
        for p in env.procfs.iterdir():
            if p.name.isdigit():
                try:
                    comm = (p / "comm").read_text().strip()
                except OSError:
                    continue
                if comm.startswith("nv-fabricmanager"):
                    running.append(p.name)
    except OSError:
        pass
    ok = bool(running)
    ev = f"{switches} NVSwitch(es); nv-fabricmanager " + (
        f"running (pid {', '.join(running)})" if ok else "not running"
    )
    return Record(
        "gpu.fabric_manager",
        PASS if ok else FAIL,
        {"nvswitches": switches, "running": ok},
        "nv-fabricmanager runs where NVSwitches are",
        ev,
        "sysfs+procfs",
    )


def gpu_facts(st: GpuState) -> dict[str, Any]:
    def one(vals: list[Any]) -> Any:
        s = sorted({str(v) for v in vals if v is not None})
        return s[0] if len(s) == 1 else (s or None)

    g = st.gpus
    return {
        "gpu_source": st.source or None,
        "gpu_count": len(g),
        "gpu_model": one([x.name for x in g]),
        "driver": st.driver,
        "cuda": st.cuda,
        "vbios": one([x.vbios for x in g]),
        "inforom": one([x.inforom for x in g]),
        "ecc_mode": one([x.ecc_enabled for x in g]),
        "persistence": one([x.persistence for x in g]),
        "mig": one([x.mig_enabled for x in g]),
        "power_limit_w": one([x.power_limit_w for x in g]),
    }
