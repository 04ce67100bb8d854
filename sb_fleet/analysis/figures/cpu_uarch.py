"""Which CPU core a host has, and what its floating-point pipes can do per cycle.

A CPU's nominal FLOPS peak is cores x clock x FLOP per cycle per core, and FLOP per cycle is a
property of the core's microarchitecture, not of its instruction-set flags: AMD Zen 4 accepts
AVX-512 but runs it on 256-bit datapaths; Intel Skylake-SP and Cascade Lake sell the same core
with one or two AVX-512 FMA units depending on the SKU; Arm Neoverse V1 and V2 have four 128-bit
(V1: two 256-bit SVE) FMA pipes where N1 has two. So the core is identified from the facts the
on-host suite records (``sb_bench.host.hostprep.parse_cpuinfo``): vendor, family and model for
x86, implementer and part for Arm, plus the model name where the SKU decides, and looked up in
the table below. A core that is not in the table gives no peak and says why; never a guess.

Sources (vendors' documentation; the figures are per core per cycle, one FMA = 2 FLOP):

* Intel: *Intel 64 and IA-32 Architectures Optimization Reference Manual* (two 512-bit FMA
  ports, 0 and 5, on server cores with AVX-512; port 5's FMA fused off on some Xeon Scalable
  SKUs) and Intel ARK's "# of AVX-512 FMA Units" per SKU (Skylake-SP / Cascade Lake: Platinum
  and Gold 6xxx two, Gold 5xxx one except 5122 and 5222, Silver and Bronze one; Cooper Lake,
  Ice Lake-SP, Sapphire, Emerald and Granite Rapids Platinum/Gold/Silver two). Family/model
  numbers: Linux ``arch/x86/include/asm/intel-family.h``.
* AMD: *Software Optimization Guide* for family 17h models 30h+ (Zen 2), 19h (Zen 3 and Zen 4)
  and 1Ah (Zen 5): two FMA pipes per core; 256-bit datapaths on Zen 2, 3 and 4 (Zen 4 executes a
  512-bit operation as two 256-bit halves), 512-bit on Zen 5 EPYC and desktop parts. Family/model
  ranges: Linux ``arch/x86/kernel/cpu/amd.c`` (``bsp_init_amd``).
* Arm: *Arm Neoverse N1 / V1 / V2 Software Optimization Guide*: N1 and N2 two 128-bit ASIMD FMA
  pipes; V1 two 256-bit SVE pipes (four 128-bit for Neon); V2 four 128-bit pipes. CPU part
  numbers: the Technical Reference Manuals' MIDR_EL1 (N1 0xd0c, V1 0xd40, N2 0xd49, V2 0xd4f;
  NVIDIA Grace is Neoverse V2).

Pure: facts in, a :class:`CpuCore` or a reason out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

INTEL_SOURCE = "Intel Optimization Reference Manual and ARK (# of AVX-512 FMA Units)"
AMD_SOURCE = "AMD Software Optimization Guide"
ARM_SOURCE = "Arm Neoverse Software Optimization Guide"


@dataclass(frozen=True)
class CpuCore:
    """One core's floating-point throughput: ``pipes`` FMA pipes, each ``bits`` wide."""

    name: str  # "Zen 4 (EPYC 9004 Genoa)"
    bits: int  # width of one FMA pipe's datapath
    pipes: int  # FMA pipes per core
    source: str

    def flop_per_cycle(self, element_bits: int) -> int:
        """FLOP per cycle per core for an element size (32: fp32, 64: fp64); an FMA is 2 FLOP."""
        return self.bits // element_bits * 2 * self.pipes


# (family, first model, last model, core name, datapath bits, FMA pipes); first match wins.
AMD_CORES: tuple[tuple[int, int, int, str, int, int], ...] = (
    (0x17, 0x30, 0x4F, "Zen 2", 256, 2),
    (0x17, 0x60, 0x7F, "Zen 2", 256, 2),
    (0x17, 0x90, 0x91, "Zen 2", 256, 2),
    (0x17, 0xA0, 0xAF, "Zen 2", 256, 2),
    (0x19, 0x00, 0x0F, "Zen 3", 256, 2),
    (0x19, 0x20, 0x5F, "Zen 3", 256, 2),
    (0x19, 0x10, 0x1F, "Zen 4", 256, 2),  # AVX-512 as two 256-bit halves
    (0x19, 0x60, 0xAF, "Zen 4", 256, 2),
    (0x1A, 0x00, 0x1F, "Zen 5 (EPYC 9005)", 512, 2),
    (0x1A, 0x40, 0x4F, "Zen 5 (desktop)", 512, 2),
)
# Zen 5 models whose datapath differs by part (mobile Strix Point / Krackan 256-bit, Strix Halo
# 512-bit): no peak rather than a guess.
AMD_UNTABLED = ((0x1A, 0x20, 0x2F), (0x1A, 0x60, 0x7F))

# Intel family 6 server cores: model -> (core name, rule for the FMA units).
INTEL_CORES: dict[int, tuple[str, str]] = {
    0x55: ("Skylake-SP / Cascade Lake / Cooper Lake", "sku"),
    0x6A: ("Ice Lake-SP", "two"),
    0x6C: ("Ice Lake-D", "two"),
    0x8F: ("Sapphire Rapids", "two"),
    0xCF: ("Emerald Rapids", "two"),
    0xAD: ("Granite Rapids", "two"),
    0xAE: ("Granite Rapids-D", "two"),
}

# Arm Ltd. (implementer 0x41) cores: part -> (core name, datapath bits, FMA pipes).
ARM_CORES: dict[int, tuple[str, int, int]] = {
    0xD0C: ("Neoverse N1", 128, 2),
    0xD40: ("Neoverse V1", 256, 2),
    0xD49: ("Neoverse N2", 128, 2),
    0xD4F: ("Neoverse V2", 128, 4),
}

_XEON_SKU = re.compile(r"Xeon\(R\)\s+(?P<tier>Platinum|Gold|Silver|Bronze)\s+(?P<num>\d{4})", re.I)


def _int(v: Any) -> int | None:
    """An int from a fact: 25, "25", "0x41", "0xd0c"; None otherwise."""
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, int):
        return v
    s = str(v).strip().lower()
    try:
        return int(s, 16) if s.startswith("0x") else int(s)
    except ValueError:
        return None


def skylake_fma_units(model_name: str) -> int | str:
    """AVX-512 FMA units of a Skylake-SP / Cascade Lake / Cooper Lake Xeon from its model name
    (Intel ARK); a reason when the name does not say which SKU it is."""
    m = _XEON_SKU.search(model_name)
    if not m:
        return (
            f"model name {model_name!r} names no Xeon Scalable SKU, and these parts have one or two "
            "AVX-512 FMA units by SKU"
        )
    tier, num = m.group("tier").lower(), m.group("num")
    if tier == "platinum" or (tier == "gold" and num[0] == "6"):
        return 2
    if tier == "gold" and num[0] == "5":
        # 5122 and 5222 have two; 53xx are Cooper Lake (two); the other 51xx/52xx one
        return 2 if num in ("5122", "5222") or num.startswith("53") else 1
    return 1  # Silver 41xx/42xx, Bronze 31xx/32xx


def identify_core(facts: Mapping[str, Any]) -> CpuCore | str:
    """The host's core from its CPU facts, or the reason it cannot be told (no peak then)."""
    vendor = str(facts.get("cpu_vendor") or "")
    name = str(facts.get("cpu_model") or "")
    family, model = _int(facts.get("cpu_family")), _int(facts.get("cpu_model_number"))
    if vendor == "AuthenticAMD":
        if family is None or model is None:
            return "the facts lack cpu_family / cpu_model_number (re-run with this version's hostprep)"
        for fam, lo, hi in AMD_UNTABLED:
            if family == fam and lo <= model <= hi:
                return f"AMD family {family:#x} model {model:#x}: Zen 5 with a datapath (256 or 512-bit) that varies by part"
        for fam, lo, hi, core, bits, pipes in AMD_CORES:
            if family == fam and lo <= model <= hi:
                return CpuCore(core, bits, pipes, AMD_SOURCE)
        return f"AMD family {family:#x} model {model:#x} is not a tabled core (Zen 2 to Zen 5)"
    if vendor == "GenuineIntel":
        if family is None or model is None:
            return "the facts lack cpu_family / cpu_model_number (re-run with this version's hostprep)"
        entry = INTEL_CORES.get(model) if family == 6 else None
        if entry is None:
            return (
                f"Intel family {family} model {model:#x} is not a tabled core (Skylake-SP to Granite Rapids)"
            )
        core, rule = entry
        if rule == "two" and re.search(r"\bBronze\b", name, re.I):
            return f"{core} Bronze SKU ({name}): its AVX-512 FMA unit count is not tabled"
        units = skylake_fma_units(name) if rule == "sku" else 2
        if isinstance(units, str):
            return f"{core}: {units}"
        return CpuCore(core, 512, units, INTEL_SOURCE)
    implementer, part = _int(facts.get("cpu_implementer")), _int(facts.get("cpu_part"))
    if implementer is not None or part is not None:
        if implementer != 0x41 or part is None:
            return f"Arm implementer {facts.get('cpu_implementer')} part {facts.get('cpu_part')} is not a tabled core"
        arm = ARM_CORES.get(part)
        if arm is None:
            return f"Arm part {part:#x} is not a tabled core (Neoverse N1, N2, V1, V2)"
        core, bits, pipes = arm
        return CpuCore(core, bits, pipes, ARM_SOURCE)
    return f"CPU vendor {vendor or 'unknown'} is not tabled (Intel, AMD, Arm Neoverse)"
