"""The GPUs' telemetry sampled through a soak round's load (sb_bench.host.burn), kept compact.

Each sample reads every GPU's temperature, SM and memory clocks, power, clock-slowdown reasons and volatile
ECC counts. The source is chosen as the health checks choose theirs (sb_bench.health.gpu_source.read_gpus):
a tool directory holding ``nvidia-smi`` stands in for the machine (a test host, a wrapper); else NVML
(sb_bench.host.monitor's source, which also counts XID events); else ``nvidia-smi`` on PATH; else none
(a CPU node: the load's summary says so). XIDs are also counted in the kernel log at the load's start and
end (sb_bench.health.xid).

:class:`Summary` reduces the samples as they come to a few numbers per node (pure: unit-tested without
a GPU): the samples and how many of them had a slowdown reason active (a *throttled window*: one sample
interval), per reason; the hottest temperature, the lowest SM and memory clocks, the mean power; the
counters at the first and the last sample.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol

from sb_bench.health.record import Env

# The slowdown reasons that make a throttled window: the GPU slowed by heat or by the hardware. A power cap
# (sw_power_cap) is how a GPU under a full load normally runs: reported (seconds), never counted.
THROTTLING = ("hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
REPORTED = (*THROTTLING, "sw_power_cap")

# nvidia-smi --query-gpu fields (nvidia-smi --help-query-gpu), the sample's key, the converter
SMI_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("index", "index", "int"),
    ("temperature.gpu", "gpu_temperature", "float"),
    ("clocks.sm", "gpu_sm_clock", "float"),
    ("clocks.mem", "gpu_mem_clock", "float"),
    ("power.draw", "gpu_power", "float"),
    ("ecc.errors.uncorrected.volatile.total", "gpu_uncorrected_ecc", "float"),
    ("ecc.errors.corrected.volatile.total", "gpu_corrected_ecc", "float"),
    *((f"clocks_throttle_reasons.{r}", r, "active") for r in REPORTED),
)
COUNTERS = ("gpu_uncorrected_ecc", "gpu_corrected_ecc")
NA = ("n/a", "[n/a]", "not supported", "[not supported]", "unknown error", "[unknown error]", "")


def _value(kind: str, raw: str) -> Any:
    s = raw.strip()
    if s.lower() in NA:
        return None
    if kind == "active":
        return s.lower() in ("active", "1")
    try:
        return int(float(s)) if kind == "int" else float(s.split()[0])
    except ValueError:
        return None


def parse_smi(text: str, fields: tuple[tuple[str, str, str], ...]) -> dict[str, dict[str, Any]]:
    """``nvidia-smi --query-gpu=... --format=csv,noheader,nounits`` -> GPU index -> the sample's fields
    (``gpu_throttle_reasons``: the reasons active). A line that is not a row is left out."""
    out: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        cols = [c.strip() for c in line.split(", ")]
        if len(cols) != len(fields) or not line.strip():
            continue
        g: dict[str, Any] = {"gpu_throttle_reasons": []}
        for (_, key, kind), raw in zip(fields, cols):  # noqa: B905 (3.9: lengths checked above)
            v = _value(kind, raw)
            if kind == "active":
                if v:
                    g["gpu_throttle_reasons"].append(key)
            elif v is not None:
                g[key] = v
        if "index" in g:
            out[str(g.pop("index"))] = g
    return out


class Source(Protocol):
    name: str

    def sample(self) -> dict[str, dict[str, Any]]: ...

    def close(self) -> None: ...


class SmiTelemetry:
    """Samples through ``nvidia-smi``; a field this nvidia-smi does not know is dropped once (and named)."""

    name = "nvidia-smi"

    def __init__(self, env: Env, timeout: float = 10.0):
        self.env, self.timeout = env, timeout
        self.fields = SMI_FIELDS
        self.dropped: list[str] = []

    def sample(self) -> dict[str, dict[str, Any]]:
        for _ in range(len(SMI_FIELDS)):
            q = ",".join(f for f, _, _ in self.fields)
            argv = ["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader,nounits"]
            rc, out, err = self.env.run(argv, self.timeout)
            bad = [f for f, _, _ in self.fields if f'Field "{f}" is not a valid field' in out + err]
            if rc != 0 and bad and bad[0] != "index":
                self.fields = tuple(x for x in self.fields if x[0] != bad[0])
                self.dropped.append(bad[0])
                continue
            return parse_smi(out, self.fields) if rc == 0 else {}
        return {}

    def close(self) -> None:
        pass


def open_source(env: Env) -> tuple[Source | None, str]:
    """The telemetry source of this host (see the module's docstring), or None and why."""
    if env.tool_dir is not None and (env.tool_dir / "nvidia-smi").is_file():
        return SmiTelemetry(env), ""
    why = ""
    try:
        from sb_bench.host.monitor import NvmlSource

        return NvmlSource(), ""
    except Exception as exc:  # no nvidia-ml-py, no driver: nvidia-smi, else none
        why = f"NVML: {type(exc).__name__}: {exc}"[:200]
    if env.tool("nvidia-smi") is not None:
        return SmiTelemetry(env), ""
    return None, f"no GPU telemetry ({why}; nvidia-smi: not found)"


# The fabric's error counters read at the load's start and end (summed over the node's ports and links):
# the name each has in the load's ``counters``. InfiniBand from sysfs (sb_bench.health.infiniband), NVLink
# through the GPU source the health checks use (NVML's nvmlDeviceGetNvLinkErrorCounter, else nvidia-smi
# nvlink -e).
IB_COUNTERS = {
    "symbol_error": "ib_symbol_error",
    "link_downed": "ib_link_downed",
    "link_error_recovery": "ib_link_error_recovery",
    "port_rcv_errors": "ib_port_rcv_errors",
    "port_xmit_discards": "ib_port_xmit_discards",
    "local_link_integrity_errors": "ib_local_link_integrity_errors",
}
NVLINK_COUNTERS = ("nvlink_replay", "nvlink_recovery", "nvlink_crc")


def fabric_counters(env: Env, nvlink: bool, timeout: float = 5.0) -> dict[str, int]:
    """The node's InfiniBand and (``nvlink``) NVLink error counters now, each summed over its ports or
    links; a counter no port or link reports is left out."""
    from sb_bench.health.infiniband import read_ports

    out: dict[str, int] = {}
    ports, _ = read_ports(env)
    for key, name in IB_COUNTERS.items():
        vals = [p.counters[key] for p in ports if key in p.counters]
        if vals:
            out[name] = sum(vals)
    if not nvlink:
        return out
    from sb_bench.health.gpu_source import read_gpus

    links = [e for g in read_gpus(env, timeout=timeout).gpus for e in g.nvlink_errors or ()]
    for name, read in (
        ("nvlink_replay", lambda e: e.replay),
        ("nvlink_recovery", lambda e: e.recovery),
        (
            "nvlink_crc",
            lambda e: (
                e.crc_total
                if e.crc_total is not None
                else None
                if e.crc_flit is None and e.crc_data is None
                else (e.crc_flit or 0) + (e.crc_data or 0)
            ),
        ),
    ):
        vals = [v for e in links if (v := read(e)) is not None]
        if vals:
            out[name] = sum(vals)
    return out


def kernel_xids(env: Env) -> int | None:
    """XID lines in the kernel log now (None: the log cannot be read)."""
    from sb_bench.health.xid import kernel_log, parse_xids

    text, _ = kernel_log(env, 10.0)
    return None if text is None else len(parse_xids(text))


@dataclass
class Summary:
    """The samples of one load reduced as they come (a few numbers, whatever the load's length)."""

    interval: float
    samples: int = 0
    throttled: int = 0  # samples with a THROTTLING reason active on any GPU
    reasons: dict[str, int] = field(default_factory=dict)  # reason -> samples with it active
    max_temp: float = -math.inf
    min_sm: float = math.inf
    min_mem: float = math.inf
    power_sum: float = 0.0
    power_n: int = 0
    first: dict[str, float] = field(default_factory=dict)
    last: dict[str, float] = field(default_factory=dict)
    gpus: int = 0
    throttled_at: list[float] = field(default_factory=list)  # the first throttled samples' times

    def add(self, t: float, gpus: dict[str, dict[str, Any]]) -> None:
        if not gpus:
            return
        self.samples += 1
        self.gpus = max(self.gpus, len(gpus))
        active: set[str] = set()
        power = [g["gpu_power"] for g in gpus.values() if isinstance(g.get("gpu_power"), (int, float))]
        for g in gpus.values():
            active.update(r for r in g.get("gpu_throttle_reasons") or [] if r in REPORTED)
            if isinstance(g.get("gpu_temperature"), (int, float)):
                self.max_temp = max(self.max_temp, float(g["gpu_temperature"]))
            if isinstance(g.get("gpu_sm_clock"), (int, float)):
                self.min_sm = min(self.min_sm, float(g["gpu_sm_clock"]))
            if isinstance(g.get("gpu_mem_clock"), (int, float)):
                self.min_mem = min(self.min_mem, float(g["gpu_mem_clock"]))
        if power:
            self.power_sum += sum(power)  # the node's power: its GPUs' together
            self.power_n += 1
        for r in active:
            self.reasons[r] = self.reasons.get(r, 0) + 1
        if active & set(THROTTLING):
            self.throttled += 1
            if len(self.throttled_at) < 10:
                self.throttled_at.append(round(t, 1))
        counts = {
            c: sum(float(g[c]) for g in gpus.values() if isinstance(g.get(c), (int, float)))
            for c in COUNTERS
            if any(isinstance(g.get(c), (int, float)) for g in gpus.values())
        }
        if not self.first:
            self.first = counts
        self.last = counts

    def to_json(self) -> dict[str, Any]:
        def num(v: float) -> float | None:
            return None if math.isinf(v) else round(v, 1)

        counters = {c: [self.first[c], self.last.get(c, self.first[c])] for c in self.first}
        return {
            "samples": self.samples,
            "interval_s": self.interval,
            "gpus": self.gpus,
            "throttled_windows": self.throttled,
            "throttled_s": round(self.throttled * self.interval, 1),
            "reasons_s": {r: round(n * self.interval, 1) for r, n in sorted(self.reasons.items())},
            "throttled_at": self.throttled_at,
            "max_temp_c": num(self.max_temp),
            "min_sm_mhz": num(self.min_sm),
            "min_mem_mhz": num(self.min_mem),
            "mean_power_w": round(self.power_sum / self.power_n, 1) if self.power_n else None,
            "counters": counters,
        }
