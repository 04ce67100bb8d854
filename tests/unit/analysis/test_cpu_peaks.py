"""CPU peaks from the microarchitecture: one /proc/cpuinfo sample per tabled core.

The expected FLOP per cycle per core are the vendors' figures, worked by hand (FMA pipes x lanes
x 2), not read back from the table: Zen 2/3/4 two 256-bit FMA pipes (fp32: 2 x 8 x 2 = 32; Zen 4
runs AVX-512 as two halves, so still 32), Zen 5 EPYC two 512-bit (64); Skylake-SP / Cascade Lake
Gold 6xxx and Platinum two 512-bit FMA units (64), Silver and Gold 5xxx one (32); Ice Lake-SP to
Granite Rapids two (64); Neoverse N1 two 128-bit (16), V1 two 256-bit (32), V2 four 128-bit (32).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from sb_bench.host.hostprep import parse_cpuinfo

from sb_fleet.analysis.figures.cpu_uarch import identify_core
from sb_fleet.analysis.figures.peaks import cpu_gemm_peaks, host_peaks

SAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "cpuinfo"


@pytest.mark.parametrize(
    "sample, core, fp32_per_cycle",
    [
        ("skylake-sp-gold-6148.txt", "Skylake-SP", 64),
        ("cascade-lake-silver-4210.txt", "Cascade Lake", 32),  # one AVX-512 FMA unit
        ("cascade-lake-gold-5218.txt", "Cascade Lake", 32),  # one AVX-512 FMA unit
        ("ice-lake-sp-platinum-8380.txt", "Ice Lake-SP", 64),
        ("sapphire-rapids-platinum-8480p.txt", "Sapphire Rapids", 64),
        ("emerald-rapids-platinum-8592p.txt", "Emerald Rapids", 64),
        ("granite-rapids-6980p.txt", "Granite Rapids", 64),
        ("zen2-epyc-7742.txt", "Zen 2", 32),
        ("zen3-epyc-7763.txt", "Zen 3", 32),
        ("zen3-epyc-kvm-captured.txt", "Zen 3", 32),
        ("zen4-epyc-9654.txt", "Zen 4", 32),  # avx512f in its flags, 256-bit datapaths
        ("zen5-epyc-9755.txt", "Zen 5", 64),
        ("neoverse-n1-ampere-altra.txt", "Neoverse N1", 16),
        ("neoverse-v1-graviton3.txt", "Neoverse V1", 32),
        ("neoverse-v2-grace.txt", "Neoverse V2", 32),
    ],
)
def test_cpu_peak_per_microarchitecture(sample: str, core: str, fp32_per_cycle: int) -> None:
    facts = {"cpu_count": 2, **parse_cpuinfo((SAMPLES / sample).read_text(), "3000000\n")}
    assert facts["cpu_mhz"] == 3000.0 and facts["cpu_mhz_source"] == "cpuinfo_max_freq"
    found = identify_core(facts)
    assert not isinstance(found, str), found
    assert core in found.name
    peaks, notes = cpu_gemm_peaks(facts)
    assert not notes
    per_core_cycle = peaks["fp32"].value / (2 * 3.0e9)
    assert per_core_cycle == pytest.approx(fp32_per_cycle)
    assert peaks["fp64"].value == pytest.approx(peaks["fp32"].value / 2)
    assert "maximum clock" in peaks["fp32"].source and core in peaks["fp32"].source


def test_zen4_epyc_reads_32_fp32_flop_per_cycle_not_64() -> None:
    """The issue's case: family 25 model 17 has avx512f, and a flags-only rule gave 64."""
    facts = parse_cpuinfo((SAMPLES / "zen4-epyc-9654.txt").read_text())
    assert facts["cpu_family"] == 25 and facts["cpu_model_number"] == 17 and "avx512f" in facts["cpu_flags"]
    peaks, _ = cpu_gemm_peaks(facts)
    assert peaks["fp32"].value / (facts["cpu_cores"] * facts["cpu_mhz"] * 1e6) == pytest.approx(32)


def test_without_cpufreq_the_current_clock_is_used_and_named() -> None:
    facts = parse_cpuinfo((SAMPLES / "zen3-epyc-kvm-captured.txt").read_text(), "")
    assert facts["cpu_mhz_source"] == "cpu MHz" and facts["cpu_mhz"] == pytest.approx(2445.4)
    peaks, _ = cpu_gemm_peaks(facts)
    assert "current clock" in peaks["fp64"].source


@pytest.mark.parametrize(
    "facts, reason",
    [
        (parse_cpuinfo((SAMPLES / "haswell-e5-2690v3.txt").read_text()), "model 0x3f is not a tabled core"),
        (
            {
                **parse_cpuinfo((SAMPLES / "skylake-sp-gold-6148.txt").read_text()),
                "cpu_model": "Intel Xeon Processor (Skylake)",
            },
            "names no Xeon Scalable SKU",
        ),
        ({"cpu_vendor": "AuthenticAMD", "cpu_family": 26, "cpu_model_number": 0x24}, "varies by part"),
        (
            {"cpu_vendor": "AuthenticAMD", "cpu_family": 23, "cpu_model_number": 1},
            "not a tabled core",
        ),  # Zen 1
        ({"cpu_implementer": "0x41", "cpu_part": "0xd08"}, "part 0xd08 is not a tabled core"),  # Cortex-A72
        ({"cpu_vendor": "GenuineIntel"}, "lack cpu_family"),  # facts from an older hostprep
        ({"cpu_flags": ["avx512f", "fma"]}, "not tabled"),  # flags alone: no guess
    ],
)
def test_unknown_microarchitecture_gets_no_peak_with_the_reason(facts: dict, reason: str) -> None:
    peaks, notes = cpu_gemm_peaks({"cpu_cores": 8, "cpu_mhz": 2600, **facts})
    assert peaks == {}
    assert len(notes) == 1 and notes[0].startswith("no CPU peak") and reason in notes[0]
    hp = host_peaks({"cpu_cores": 8, "cpu_mhz": 2600, **facts})
    assert hp.gemm == {} and reason in hp.notes[0]


def test_garbage_cpuinfo_gives_no_peak_not_a_traceback() -> None:
    facts = parse_cpuinfo("cpu MHz : fast\nmodel : x\ncpu family : \x00\n" + "flags : " + "avx " * 10000)
    peaks, notes = cpu_gemm_peaks({"cpu_count": 2, **facts})
    assert peaks == {} and notes
