"""The GPUs' state through one small interface, :class:`GpuSource`: NVML first, ``nvidia-smi`` where NVML
cannot be had (no ``nvidia-ml-py``, or its library does not load).

NVML calls follow the NVML API reference (docs.nvidia.com/deploy/nvml-api); ``nvidia-smi`` queries follow
``nvidia-smi --help-query-gpu`` and ``--help-query-remapped-rows``. A field a GPU does not support is None.
Each NVLink's error counters (replay, recovery, CRC of flits and of data) come from
``nvmlDeviceGetNvLinkErrorCounter`` or ``nvidia-smi nvlink -e`` (:class:`NvlinkErrors`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from sb_bench.health.pci_bus import bus_id
from sb_bench.health.record import Env

# nvml.h constants (stable across NVML versions; named as in the header).
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_TEMPERATURE_GPU = 0
NVML_NVLINK_MAX_LINKS = 18
# nvmlNvLinkErrorCounter_t: the data link layer's transmit replays and recoveries, receive CRC errors in flow
# control digits (flits) and in data
NVML_NVLINK_ERROR_DL_REPLAY = 0
NVML_NVLINK_ERROR_DL_RECOVERY = 1
NVML_NVLINK_ERROR_DL_CRC_FLIT = 2
NVML_NVLINK_ERROR_DL_CRC_DATA = 3
COUNTER_MAX = (1 << 64) - 1  # NVML's counters are unsigned long long: a bigger "count" is not one
NVLINK_LINKS_MAX = 64  # links per GPU read from nvidia-smi's output (NVML: NVML_NVLINK_MAX_LINKS)
# nvmlClocksThrottleReason* bits that mean the hardware slowed the GPU down
THROTTLE_HW = {0x8: "hw_slowdown", 0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown"}


@dataclass(frozen=True)
class NvlinkErrors:
    """One NVLink's error counters since the driver loaded or they were last reset; None: not read.
    ``crc_total`` is nvidia-smi's single "CRC Errors" count, where it does not tell flits and data apart."""

    link: int
    replay: int | None = None
    recovery: int | None = None
    crc_flit: int | None = None
    crc_data: int | None = None
    crc_total: int | None = None

    @property
    def crc(self) -> int | None:
        """CRC errors, flits and data together (None: neither read)."""
        if self.crc_total is not None:
            return self.crc_total
        parts = [v for v in (self.crc_flit, self.crc_data) if v is not None]
        return sum(parts) if parts else None

    def read(self) -> bool:
        return any(v is not None for v in (self.replay, self.recovery, self.crc))


def count(v: Any) -> int | None:
    """A counter's value as NVML types it (an unsigned 64-bit int), else None (a bool, a float, NaN, a
    negative or oversized number: not a count)."""
    if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= COUNTER_MAX:
        return v
    return None


@dataclass(frozen=True)
class GpuInfo:
    """One GPU as read by a :class:`GpuSource`; None: not supported or not readable."""

    index: int
    name: str = ""
    bus_id: str = ""
    memory_mib: float | None = None
    ecc_enabled: bool | None = None
    ecc_uncorrected_volatile: int | None = None
    ecc_uncorrected_aggregate: int | None = None
    retired_pages_pending: bool | None = None
    remap_pending: bool | None = None
    remap_failure: bool | None = None
    remap_uncorrectable: int | None = None
    throttle_hw: tuple[str, ...] | None = None  # the hardware slowdown reasons active now
    persistence: bool | None = None
    power_limit_w: float | None = None
    power_default_w: float | None = None
    temperature_c: float | None = None
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    mig_enabled: bool | None = None
    nvlink_up: int | None = None
    nvlink_total: int | None = None
    vbios: str | None = None
    inforom: str | None = None
    nvlink_errors: tuple[NvlinkErrors, ...] | None = None  # the links whose counters were read


@dataclass(frozen=True)
class GpuState:
    """Every GPU of the host and the system-wide versions, with the source that read them."""

    source: str  # "nvml", "nvidia-smi" or "" (no source)
    gpus: tuple[GpuInfo, ...] = ()
    driver: str | None = None
    cuda: str | None = None
    problem: str = ""  # why no source could read the GPUs
    notes: tuple[str, ...] = field(default_factory=tuple)
    # GPUs the source knows of but cannot use: (bus id or "", why), e.g. excluded by the driver
    # (NVreg_ExcludedGpus), no permission to open, lost
    unusable: tuple[tuple[str, str], ...] = field(default_factory=tuple)


class GpuSource(Protocol):
    name: str

    def read(self) -> GpuState: ...


# -- NVML ---------------------------------------------------------------------------------------------


class NvmlSource:
    """GPUs through NVML. ``nvml`` is the ``pynvml`` module (``nvidia-ml-py``) or anything with its
    function names (tests pass recorded values)."""

    name = "nvml"

    def __init__(self, nvml: Any):
        self.nvml = nvml

    def _get(self, fn: str, *args: Any) -> Any:
        try:
            return getattr(self.nvml, fn)(*args)
        except Exception:  # NVMLError_NotSupported and friends: the field is unknown on this GPU
            return None

    def read(self) -> GpuState:
        n = self.nvml
        n.nvmlInit()
        try:
            # nvmlDeviceGetCount (v2) counts every GPU, also one whose handle then fails (no permission,
            # lost): such a GPU is not one the checks can use, and is said so
            count = n.nvmlDeviceGetCount()
            gpus, unusable = [], []
            for i in range(count):
                try:
                    h = n.nvmlDeviceGetHandleByIndex(i)
                except Exception as exc:
                    unusable.append(("", f"NVML: GPU {i} of {count}: {type(exc).__name__}: {exc}"[:200]))
                    continue
                gpus.append(self._gpu(i, h))
            for i in range(self._get("nvmlGetExcludedDeviceCount") or 0):
                info = self._get("nvmlGetExcludedDeviceInfoByIndex", i)
                b = _text(getattr(getattr(info, "pciInfo", None), "busId", None))
                unusable.append((bus_id(b) or "", "excluded by the driver (NVreg_ExcludedGpus)"))
            cuda = self._get("nvmlSystemGetCudaDriverVersion")
            return GpuState(
                "nvml",
                tuple(gpus),
                driver=_text(self._get("nvmlSystemGetDriverVersion")),
                cuda=f"{cuda // 1000}.{cuda % 1000 // 10}" if isinstance(cuda, int) else None,
                unusable=tuple(unusable),
            )
        finally:
            try:
                n.nvmlShutdown()
            except Exception:
                pass

    def _gpu(self, i: int, h: Any) -> GpuInfo:
        g = self._get
        pci = g("nvmlDeviceGetPciInfo", h)
        mem = g("nvmlDeviceGetMemoryInfo", h)
        ecc = g("nvmlDeviceGetEccMode", h)
        remap = g("nvmlDeviceGetRemappedRows", h)
        mask = g("nvmlDeviceGetCurrentClocksThrottleReasons", h)
        mig = g("nvmlDeviceGetMigMode", h)
        links = [g("nvmlDeviceGetNvLinkState", h, k) for k in range(NVML_NVLINK_MAX_LINKS)]
        known = [s for s in links if s is not None]
        limit, default = (
            g("nvmlDeviceGetPowerManagementLimit", h),
            g("nvmlDeviceGetPowerManagementDefaultLimit", h),
        )
        pending = g("nvmlDeviceGetRetiredPagesPendingStatus", h)
        return GpuInfo(
            index=i,
            name=_text(g("nvmlDeviceGetName", h)) or "",
            bus_id=_text(getattr(pci, "busId", None)) or "",
            memory_mib=mem.total / (1 << 20) if mem is not None else None,
            ecc_enabled=bool(ecc[0]) if ecc is not None else None,
            ecc_uncorrected_volatile=g(
                "nvmlDeviceGetTotalEccErrors", h, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC
            ),
            ecc_uncorrected_aggregate=g(
                "nvmlDeviceGetTotalEccErrors", h, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC
            ),
            retired_pages_pending=bool(pending) if pending is not None else None,
            # nvmlDeviceGetRemappedRows: (corrRows, uncRows, isPending, failureOccurred)
            remap_uncorrectable=int(remap[1]) if remap is not None else None,
            remap_pending=bool(remap[2]) if remap is not None else None,
            remap_failure=bool(remap[3]) if remap is not None else None,
            throttle_hw=tuple(v for b, v in THROTTLE_HW.items() if mask & b) if mask is not None else None,
            persistence=_flag(g("nvmlDeviceGetPersistenceMode", h)),
            power_limit_w=limit / 1000 if limit is not None else None,
            power_default_w=default / 1000 if default is not None else None,
            temperature_c=g("nvmlDeviceGetTemperature", h, NVML_TEMPERATURE_GPU),
            pcie_gen=g("nvmlDeviceGetCurrPcieLinkGeneration", h),
            pcie_gen_max=g("nvmlDeviceGetMaxPcieLinkGeneration", h),
            pcie_width=g("nvmlDeviceGetCurrPcieLinkWidth", h),
            pcie_width_max=g("nvmlDeviceGetMaxPcieLinkWidth", h),
            mig_enabled=bool(mig[0]) if mig is not None else None,
            nvlink_up=sum(1 for s in known if s) if known else None,
            nvlink_total=len(known) if known else None,
            vbios=_text(g("nvmlDeviceGetVbiosVersion", h)),
            inforom=_text(g("nvmlDeviceGetInforomImageVersion", h)),
            nvlink_errors=self._nvlink_errors(h, [k for k, s in enumerate(links) if s is not None]),
        )

    def _nvlink_errors(self, h: Any, links: list[int]) -> tuple[NvlinkErrors, ...] | None:
        """``nvmlDeviceGetNvLinkErrorCounter`` for each link NVML knows (its state answered), active or
        not; a counter the GPU does not support is None, a link with none read is left out."""
        out = []
        for k in links:
            e = NvlinkErrors(
                k,
                *(
                    count(self._get("nvmlDeviceGetNvLinkErrorCounter", h, k, c))
                    for c in (
                        NVML_NVLINK_ERROR_DL_REPLAY,
                        NVML_NVLINK_ERROR_DL_RECOVERY,
                        NVML_NVLINK_ERROR_DL_CRC_FLIT,
                        NVML_NVLINK_ERROR_DL_CRC_DATA,
                    )
                ),
            )
            if e.read():
                out.append(e)
        return tuple(out) if out else None


def _flag(v: Any) -> bool | None:
    return None if v is None else bool(v)


def _text(v: Any) -> str | None:
    if v is None:
        return None
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


# -- nvidia-smi ---------------------------------------------------------------------------------------

# (query field, GpuInfo attribute, converter); the order is the CSV's column order.
SMI_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("index", "index", "int"),
    ("name", "name", "str"),
    ("pci.bus_id", "bus_id", "str"),
    ("memory.total", "memory_mib", "float"),
    ("ecc.mode.current", "ecc_enabled", "enabled"),
    ("ecc.errors.uncorrected.volatile.total", "ecc_uncorrected_volatile", "int"),
    ("ecc.errors.uncorrected.aggregate.total", "ecc_uncorrected_aggregate", "int"),
    ("retired_pages.pending", "retired_pages_pending", "yes"),
    ("clocks_throttle_reasons.hw_slowdown", "hw_slowdown", "active"),
    ("clocks_throttle_reasons.hw_thermal_slowdown", "hw_thermal_slowdown", "active"),
    ("clocks_throttle_reasons.hw_power_brake_slowdown", "hw_power_brake_slowdown", "active"),
    ("persistence_mode", "persistence", "enabled"),
    ("power.limit", "power_limit_w", "float"),
    ("power.default_limit", "power_default_w", "float"),
    ("temperature.gpu", "temperature_c", "float"),
    ("pcie.link.gen.current", "pcie_gen", "int"),
    ("pcie.link.gen.max", "pcie_gen_max", "int"),
    ("pcie.link.width.current", "pcie_width", "int"),
    ("pcie.link.width.max", "pcie_width_max", "int"),
    ("mig.mode.current", "mig_enabled", "enabled"),
    ("vbios_version", "vbios", "str"),
    ("inforom.img", "inforom", "str"),
    ("driver_version", "driver", "str"),
)
_NA = re.compile(r"^\[?(N/A|Not Supported|Unknown Error|Insufficient Permissions)\]?$", re.IGNORECASE)
_BAD_FIELD = re.compile(r'Field "([^"]+)" is not a valid field to query')


def _conv(kind: str, raw: str) -> Any:
    s = raw.strip()
    if not s or _NA.match(s):
        return None
    if kind == "str":
        return s
    if kind == "int":
        return int(float(s))
    if kind == "float":
        return float(s)
    low = s.lower()
    if kind == "enabled":
        return low in ("enabled", "enable", "on", "1")
    if kind == "active":
        return low in ("active", "1")
    return low in ("yes", "true", "1", "pending")  # "yes"


def parse_query_gpu(
    text: str, fields: tuple[tuple[str, str, str], ...] = SMI_FIELDS, skipped: list[str] | None = None
) -> tuple[list[GpuInfo], str | None]:
    """``nvidia-smi --query-gpu=F,... --format=csv,noheader,nounits`` -> the GPUs and the driver version.
    A line that is not a row raises ValueError, or with ``skipped`` is appended there (nvidia-smi prints
    "Unable to determine the device handle for GPU0000:07:00.0: Unknown Error" among the rows for a GPU
    it cannot open, and exits non-zero)."""
    gpus, driver = [], None
    for line in text.splitlines():
        if not line.strip():
            continue
        cols = [c.strip() for c in line.split(", ")]
        if len(cols) != len(fields):
            if skipped is not None:
                skipped.append(line.strip()[:200])
                continue
            raise ValueError(
                f"nvidia-smi: {len(cols)} columns where {len(fields)} were asked: {line[:200]!r}"
            )
        vals: dict[str, Any] = {}
        throttle: list[str] = []
        for (_, attr, kind), raw in zip(fields, cols):  # noqa: B905 (3.9: lengths checked above)
            v = _conv(kind, raw)
            if attr in THROTTLE_HW.values():
                if v:
                    throttle.append(attr)
                vals.setdefault("_throttle_known", v is not None or vals.get("_throttle_known", False))
            elif attr == "driver":
                driver = v
            else:
                vals[attr] = v
        known = vals.pop("_throttle_known", False)
        vals["throttle_hw"] = tuple(throttle) if known else None
        if vals.get("index") is None:
            raise ValueError(f"nvidia-smi: no GPU index in {line[:200]!r}")
        gpus.append(GpuInfo(**vals))
    return gpus, driver


def parse_remapped_rows(text: str) -> dict[str, tuple[int | None, bool | None, bool | None]]:
    """``--query-remapped-rows=gpu_bus_id,remapped_rows.uncorrectable,remapped_rows.pending,
    remapped_rows.failure --format=csv,noheader`` -> bus id -> (uncorrectable rows, pending, failure)."""
    out: dict[str, tuple[int | None, bool | None, bool | None]] = {}
    for line in text.splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) != 4 or not cols[0]:
            continue
        out[_bus(cols[0])] = (_conv("int", cols[1]), _conv("yes", cols[2]), _conv("yes", cols[3]))
    return out


_LINK = re.compile(r"^\s*Link (\d+):\s*(.*)$")
_GPU = re.compile(r"^GPU (\d+):")


def parse_nvlink_status(text: str) -> dict[int, tuple[int, int]]:
    """``nvidia-smi nvlink -s`` -> GPU index -> (links up, links listed); ``<inactive>`` is down."""
    out: dict[int, tuple[int, int]] = {}
    cur: int | None = None
    for line in text.splitlines():
        m = _GPU.match(line)
        if m:
            cur = int(m.group(1))
            out[cur] = (0, 0)
            continue
        m = _LINK.match(line)
        if m and cur is not None:
            up, total = out[cur]
            out[cur] = (up + (0 if "inactive" in m.group(2).lower() else 1), total + 1)
    return out


# ``nvidia-smi nvlink -e``: per GPU a ``GPU i: ...`` line, then per link ``Link N: <counter>: <value>``.
# Drivers print "Replay Errors", "Recovery Errors" and "CRC Errors", some "CRC Flit Errors" and "CRC Data
# Errors" instead of the last; other counters (ECC, Blackwell's "Effective Errors", ...) are not read.
_SMI_NVLINK_COUNTERS = {
    "replay errors": "replay",
    "recovery errors": "recovery",
    "crc flit errors": "crc_flit",
    "crc data errors": "crc_data",
    "crc errors": "crc_total",
}
_LINK_COUNTER = re.compile(r"^\s*Link (\d{1,6}):\s*([A-Za-z][A-Za-z ]{0,60}?)\s*:\s*(\S{0,40})\s*$")
_DIGITS = re.compile(r"^\d{1,20}$")


def parse_nvlink_errors(text: str) -> dict[int, tuple[NvlinkErrors, ...]]:
    """``nvidia-smi nvlink -e`` -> GPU index -> its links' counters (those with one read), by link. A value
    that is not a count (``N/A``, a sign, a fraction, more than 64 bits) is None; links past
    ``NVLINK_LINKS_MAX``, lines of no known counter and text before the first GPU are skipped."""
    raw: dict[int, dict[int, dict[str, int | None]]] = {}
    cur: dict[int, dict[str, int | None]] | None = None
    for line in text.splitlines():
        m = _GPU.match(line)
        if m:
            cur = raw.setdefault(int(m.group(1)), {})
            continue
        m = _LINK_COUNTER.match(line)
        if not m or cur is None:
            continue
        link, name, value = int(m.group(1)), m.group(2).strip().lower(), m.group(3)
        attr = _SMI_NVLINK_COUNTERS.get(name)
        if attr is None or link >= NVLINK_LINKS_MAX:
            continue
        cur.setdefault(link, {})[attr] = count(int(value)) if _DIGITS.match(value) else None
    out = {}
    for gpu, links in raw.items():
        errs = tuple(e for k, v in sorted(links.items()) if (e := NvlinkErrors(k, **v)).read())
        if errs:
            out[gpu] = errs
    return out


def parse_smi_version(text: str) -> dict[str, str]:
    """``nvidia-smi --version`` (driver 535+) -> {"driver": ..., "cuda": ...}."""
    out = {}
    for line in text.splitlines():
        k, _, v = line.partition(":")
        key = k.strip().lower()
        if key == "driver version":
            out["driver"] = v.strip()
        elif key == "cuda version":
            out["cuda"] = v.strip()
    return out


def _bus(b: str) -> str:
    """PCI bus ids compared as nvidia-smi prints them in one place and NVML/the kernel in another
    (``00000000:3B:00.0`` -> ``0000:3b:00.0``: :func:`sb_bench.health.pci_bus.bus_id`)."""
    return bus_id(b) or b.strip().lower()


class SmiSource:
    """GPUs through ``nvidia-smi`` (found in the tool directory first)."""

    name = "nvidia-smi"

    def __init__(self, env: Env, timeout: float = 10.0):
        self.env, self.timeout = env, timeout

    def _smi(self, *args: str) -> tuple[int, str, str]:
        return self.env.run(["nvidia-smi", *args], self.timeout)

    def query(self) -> tuple[list[GpuInfo], str | None, list[str], list[str]]:
        """The GPU query -> (GPUs, driver, notes, lines about GPUs it could not open). A field this
        nvidia-smi does not know is dropped (and named) and asked again; a failure with no row raises."""
        fields, dropped = list(SMI_FIELDS), []
        for _ in range(len(SMI_FIELDS)):
            q = ",".join(f for f, _, _ in fields)
            rc, out, err = self._smi(f"--query-gpu={q}", "--format=csv,noheader,nounits")
            m = _BAD_FIELD.search(out + err)
            if rc != 0 and m and any(f == m.group(1) for f, _, _ in fields):
                fields = [f for f in fields if f[0] != m.group(1)]
                dropped.append(m.group(1))
                continue
            skipped: list[str] = []
            gpus, driver = parse_query_gpu(out, tuple(fields), skipped if rc != 0 else None)
            if rc != 0 and not gpus:
                raise RuntimeError(f"nvidia-smi --query-gpu failed (rc {rc}): {(err or out).strip()[:300]}")
            if rc != 0:  # some GPUs answered: the others are named
                skipped += [x.strip()[:200] for x in err.splitlines() if x.strip()][:8]
            return gpus, driver, [f"nvidia-smi does not know {d}" for d in dropped], skipped
        raise RuntimeError("nvidia-smi rejected every field")

    def read(self) -> GpuState:
        from concurrent.futures import ThreadPoolExecutor  # here: ~6 ms of imports only nvidia-smi needs

        with ThreadPoolExecutor(5) as pool:
            fq = pool.submit(self.query)
            fr = pool.submit(
                self._smi,
                "--query-remapped-rows=gpu_bus_id,remapped_rows.uncorrectable,remapped_rows.pending,"
                "remapped_rows.failure",
                "--format=csv,noheader",
            )
            fn = pool.submit(self._smi, "nvlink", "-s")
            fe = pool.submit(self._smi, "nvlink", "-e")
            fv = pool.submit(self._smi, "--version")
            gpus, driver, notes, failed = fq.result()
            rc, out, _ = fr.result()
            remap = parse_remapped_rows(out) if rc == 0 else {}
            rc, out, _ = fn.result()
            links = parse_nvlink_status(out) if rc == 0 else {}
            rc, out, _ = fe.result()
            nvlink_errors = parse_nvlink_errors(out) if rc == 0 else {}
            rc, out, _ = fv.result()
            ver = parse_smi_version(out) if rc == 0 else {}
        merged = []
        for g in gpus:
            r = remap.get(_bus(g.bus_id))
            if r is not None:
                g = replace(g, remap_uncorrectable=r[0], remap_pending=r[1], remap_failure=r[2])
            if g.index in links and links[g.index][1]:
                g = replace(g, nvlink_up=links[g.index][0], nvlink_total=links[g.index][1])
            if g.index in nvlink_errors:
                g = replace(g, nvlink_errors=nvlink_errors[g.index])
            merged.append(g)
        return GpuState(
            "nvidia-smi",
            tuple(merged),
            driver or ver.get("driver"),
            ver.get("cuda"),
            notes=tuple(notes),
            unusable=tuple((_failed_bus(x), f"nvidia-smi: {x}") for x in failed),
        )


_BUS_IN_TEXT = re.compile(r"([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])")


def _failed_bus(line: str) -> str:
    """The bus id nvidia-smi names in a line about a GPU it could not open ("" when none)."""
    m = _BUS_IN_TEXT.search(line)
    return (bus_id(m.group(1)) or "") if m else ""


def _smi_read(env: Env, timeout: float, problems: list[str]) -> GpuState:
    """The GPUs through nvidia-smi; one that fails (no driver: "NVIDIA-SMI has failed because it couldn't
    communicate with the NVIDIA driver", rc 9) is no source, with its words."""
    try:
        st = SmiSource(env, timeout).read()
    except (RuntimeError, ValueError, OSError) as exc:
        return GpuState("", problem="; ".join([*problems, str(exc)[:400]]))
    return replace(st, notes=(*st.notes, *problems))


def read_gpus(env: Env, nvml_loader: Callable[[], Any] | None = None, timeout: float = 10.0) -> GpuState:
    """The GPUs through NVML when it loads and answers, else through nvidia-smi, else no source (why)."""
    problems: list[str] = []
    # a tool directory that holds nvidia-smi stands in for this machine's GPUs (a test host, a wrapper)
    if env.tool_dir is not None and (env.tool_dir / "nvidia-smi").is_file():
        return _smi_read(env, timeout, problems)
    nvml = None
    driver = env.proc("driver/nvidia")
    if nvml_loader is None and not driver.exists():
        # NVML answers only through the NVIDIA kernel driver, which makes this directory when it loads (a
        # container given GPUs gets it mounted): without it, no NVML import and load (~20 ms of a host's
        # CPU where pynvml is installed) for the same failure, and a plainer reason
        problems.append(f"NVML: no NVIDIA driver loaded ({driver} absent)")
    else:
        try:
            nvml = (nvml_loader or _import_pynvml)()
        except Exception as exc:
            problems.append(f"NVML: {type(exc).__name__}: {exc}")
    if nvml is not None:
        try:
            return NvmlSource(nvml).read()
        except Exception as exc:  # no driver, library not found: nvidia-smi is the fallback
            problems.append(f"NVML: {type(exc).__name__}: {exc}"[:300])
    if env.tool("nvidia-smi") is not None:
        return _smi_read(env, timeout, problems)
    return GpuState("", problem="; ".join([*problems, "nvidia-smi: not found"]))


def _import_pynvml() -> Any:
    import pynvml  # nvidia-ml-py; optional

    return pynvml
