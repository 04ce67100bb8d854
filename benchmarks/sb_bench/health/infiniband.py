"""InfiniBand/RoCE ports from sysfs (``/sys/class/infiniband/<hca>/ports/<n>/``; kernel ABI
Documentation/ABI/stable/sysfs-class-infiniband): state, physical state, rate, link layer, error counters,
and each HCA's firmware version."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from sb_bench.health.record import FAIL, PASS, WARN, Env, Record, read_int, read_text

ERROR_COUNTERS = (
    "link_downed",
    "link_error_recovery",
    "symbol_error",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "port_xmit_discards",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
)
_RATE = re.compile(r"^\s*([\d.]+)\s*Gb/sec")


@dataclass(frozen=True)
class Port:
    hca: str
    port: int
    state: str  # "ACTIVE" (from "4: ACTIVE")
    phys_state: str  # "LinkUp" (from "5: LinkUp")
    rate_gbps: float | None
    rate_text: str
    link_layer: str
    counters: dict[str, int] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.hca}/{self.port}"


def _word(s: str | None) -> str:
    """``4: ACTIVE`` -> ``ACTIVE``."""
    if not s:
        return "?"
    return s.split(":", 1)[1].strip() if ":" in s else s.strip()


def parse_rate(s: str | None) -> float | None:
    """``400 Gb/sec (4X NDR)`` -> 400.0."""
    m = _RATE.match(s or "")
    return float(m.group(1)) if m else None


def read_ports(env: Env) -> tuple[list[Port], dict[str, str]]:
    """Every port of every HCA, and each HCA's firmware version."""
    root = env.sys("class/infiniband")
    ports, fw = [], {}
    try:
        hcas = sorted(p for p in root.iterdir())
    except OSError:
        return [], {}
    for hca in hcas:
        fw[hca.name] = read_text(hca / "fw_ver") or "?"
        try:
            pdirs = sorted((hca / "ports").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else 0)
        except OSError:
            continue
        for p in pdirs:
            rate = read_text(p / "rate")
            counters = {}
            for c in ERROR_COUNTERS:
                v = read_int(p / "counters" / c)
                if v is not None:
                    counters[c] = v
            ports.append(
                Port(
                    hca.name,
                    int(p.name) if p.name.isdigit() else 0,
                    _word(read_text(p / "state")),
                    _word(read_text(p / "phys_state")),
                    parse_rate(rate),
                    rate or "?",
                    read_text(p / "link_layer") or "?",
                    counters,
                )
            )
    return ports, fw


def ib_records(env: Env) -> tuple[list[Record], dict[str, Any]]:
    want = lambda k, d=None: env.want("ib", k, d)  # noqa: E731
    all_ports, fw = read_ports(env)
    layer = want("link_layer", "InfiniBand")
    exclude = [re.compile(x) for x in want("exclude", [])]
    ports = [
        p
        for p in all_ports
        if (not layer or p.link_layer == layer) and not any(x.search(p.name) for x in exclude)
    ]
    expected = want("ports")
    src = "sysfs"
    recs = []
    rule = f"== {expected} {layer} ports" if expected is not None else REPORTED_RULE
    n = len(ports)
    ev = f"{n} {layer} port(s): {', '.join(p.name for p in ports) or 'none'}"
    if len(all_ports) != n:
        ev += f" ({len(all_ports) - n} other port(s) not counted)"
    recs.append(
        Record("ib.ports", FAIL if expected is not None and n != expected else PASS, n, rule, ev, src)
    )
    if not ports and not expected:
        return recs, {"ib_ports": 0, "hca_fw": _one(list(fw.values()))}
    down = [
        f"{p.name} {p.state}/{p.phys_state}" for p in ports if p.state != "ACTIVE" or p.phys_state != "LinkUp"
    ]
    recs.append(
        Record(
            "ib.state",
            FAIL if down else PASS,
            {p.name: f"{p.state}/{p.phys_state}" for p in ports},
            "every port ACTIVE/LinkUp",
            "; ".join(f"port {d}" for d in down),
            src,
        )
    )
    rate = want("rate_gbps")
    fastest = max((p.rate_gbps or 0 for p in ports), default=0)
    slow = []
    for p in ports:
        if p.rate_gbps is None:
            slow.append(f"{p.name} rate unreadable ({p.rate_text})")
        elif rate and p.rate_gbps < rate:
            slow.append(f"{p.name} at {p.rate_gbps:g} of {rate:g} Gb/s")
        elif not rate and p.rate_gbps < fastest:
            slow.append(f"{p.name} at {p.rate_gbps:g} Gb/s where another port has {fastest:g}")
    recs.append(
        Record(
            "ib.rate",
            FAIL if slow else PASS,
            {p.name: p.rate_gbps for p in ports},
            f">= {rate:g} Gb/s per port" if rate else "every port as fast as the fastest",
            "; ".join(slow),
            src,
        )
    )
    limit = want("error_counter_max", 0)
    errs = [f"{p.name} {c}={v}" for p in ports for c, v in p.counters.items() if v > limit]
    recs.append(
        Record(
            "ib.errors",
            WARN if errs else PASS,
            {p.name: {c: v for c, v in p.counters.items() if v} for p in ports},
            f"error counters <= {limit} since they were last cleared (else warn)",
            "; ".join(errs[:12]),
            src,
        )
    )
    fws = sorted(set(fw[p.hca] for p in ports))
    recs.append(
        Record(
            "ib.firmware",
            WARN if len(fws) > 1 else PASS,
            {h: fw[h] for h in sorted({p.hca for p in ports})},
            "one firmware version per host (else warn)",
            f"mixed: {fws}" if len(fws) > 1 else "",
            src,
        )
    )
    return recs, {"ib_ports": n, "hca_fw": _one(fws), "ib_rate_gbps": _one([p.rate_gbps for p in ports])}


REPORTED_RULE = "reported (no rule in the profile)"


def _one(vals: list[Any]) -> Any:
    s = sorted({str(v) for v in vals if v is not None})
    return s[0] if len(s) == 1 else (s or None)
