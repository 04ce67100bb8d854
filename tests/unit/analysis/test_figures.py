"""The measured figures (analysis.figures) and the nominal peaks they are held against (sb_fleet.analysis.figures.peaks).

Expected numbers are worked out by hand from the inputs (datasheet figures, the CPU formula, the
order statistics of a handful of values), not read back from the code.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from sb_fleet.analysis.figures.figures import CV_LIMIT, build_figures, model_group, model_metric, split_run
from sb_fleet.analysis.figures.measured import figures_of
from sb_fleet.analysis.figures.peaks import cpu_gemm_peaks, host_peaks, peak_for_metric, unit_scale
from sb_fleet.analysis.fleet_results import load_fleet
from sb_fleet.analysis.superbench.metric_names import Directions, MetricInfo
from sb_fleet.report.writers.figures_md import render

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "figures"
H100 = {"gpu_model": "NVIDIA H100 80GB HBM3", "pcie_gen": 5, "pcie_width": 16}
A100 = {"gpu_model": "NVIDIA A100-SXM4-80GB", "pcie_gen": 4, "pcie_width": 16}
# An Ice Lake-SP Xeon (two AVX-512 FMA units per core), as hostprep records it.
ICX = {
    "cpu_vendor": "GenuineIntel",
    "cpu_family": 6,
    "cpu_model_number": 106,
    "cpu_model": "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz",
}


@pytest.mark.parametrize(
    "facts, fp64_gflops",
    [
        # Ice Lake-SP: 2 cores x 2.2 GHz x 8 lanes (AVX-512, fp64) x 2 (FMA) x 2 units
        ({"cpu_cores": 2, "cpu_mhz": 2200, **ICX}, 140.8),
        # Zen 3: 4 cores x 3.0 GHz x 4 lanes (256-bit) x 2 x 2 pipes
        (
            {
                "cpu_cores": 4,
                "cpu_mhz": 3000,
                "cpu_vendor": "AuthenticAMD",
                "cpu_family": 25,
                "cpu_model_number": 1,
            },
            192.0,
        ),
        # Neoverse N1: 1 core x 2.0 GHz x 2 lanes (128-bit) x 2 x 2 pipes
        ({"cpu_count": 1, "cpu_mhz": 2000, "cpu_implementer": "0x41", "cpu_part": "0xd0c"}, 16.0),
    ],
)
def test_cpu_peak_from_cores_frequency_and_core(facts: dict, fp64_gflops: float) -> None:
    peaks, notes = cpu_gemm_peaks(facts)
    assert not notes
    assert peaks["fp64"].value / 1e9 == pytest.approx(fp64_gflops)
    assert peaks["fp32"].value == pytest.approx(2 * peaks["fp64"].value)
    assert "FMA" in peaks["fp64"].source


def test_cpu_peak_needs_its_facts() -> None:
    peaks, notes = cpu_gemm_peaks({"cpu_count": 2, **ICX})
    assert peaks == {} and "cpu_mhz" in notes[0]
    assert host_peaks(None).empty()


def test_gpu_peaks_from_facts() -> None:
    hp = host_peaks({**H100, "nics": [{"ports": [{"state": "4: ACTIVE", "rate": "400 Gb/sec (4X NDR)"}]}]})
    assert hp.gpu and hp.device == "NVIDIA H100 80GB HBM3"
    assert hp.gemm["fp16_tc"].value == pytest.approx(989.4e12)  # the suite's H100 SXM row, dense
    assert hp.memory is not None and hp.memory.value == pytest.approx(3350e9)
    assert hp.pcie is not None and hp.pcie.value == pytest.approx(32e9 * 128 / 130 * 16 / 8)
    assert hp.ib is not None and hp.ib.value == pytest.approx(50e9)
    assert peak_for_metric("mem-bw/h2d_bw", hp) is hp.pcie
    assert peak_for_metric("mem-bw/d2d_bw", hp) is hp.memory
    assert peak_for_metric("nccl-bw/allreduce_8589934592_busbw", hp) is hp.nvlink
    assert peak_for_metric("nccl-bw/allreduce_8589934592_time", hp) is None
    assert peak_for_metric("gemm-flops/int8_tc_iops", hp) is hp.gemm["int8_tc"]
    assert hp.gemm["fp16_tc"].in_unit("TFLOPS") == pytest.approx(989.4)


def test_unit_scales() -> None:
    assert unit_scale("GB/s", "bytes") == 1e9
    assert unit_scale("Gb/s", "bytes") == 1e9 / 8  # small b: bits
    assert unit_scale("MB/s", "bytes") == 1e6
    assert unit_scale("GiB/s", "bytes") == 2**30
    assert unit_scale("GFLOPS", "flops") == 1e9 and unit_scale("GIOPS", "flops") == 1e9
    assert unit_scale("ms", "bytes") is None and unit_scale(None, "flops") is None


def test_names() -> None:
    assert split_run("gemm-flops/2/fp16_flops") == ("gemm-flops/fp16_flops", 2)
    assert split_run("gpt_models/pytorch-gpt2-large/0/fp16_train_throughput") == (
        "gpt_models/pytorch-gpt2-large/fp16_train_throughput",
        0,
    )
    assert split_run("nccl-bw/allreduce_1024_busbw") == ("nccl-bw/allreduce_1024_busbw", None)
    mm = model_metric("bert_models/pytorch-bert-large/fp16_inference_step_time_99.9")
    assert mm is not None and (mm.precision, mm.action, mm.kind, mm.percentile) == (
        "fp16",
        "inference",
        "step_time",
        "99.9",
    )
    assert model_metric("gemm-flops/fp16_flops") is None
    assert [
        model_group(m) for m in ("pytorch-gpt2-large", "pytorch-bert-base", "pytorch-lstm", "pytorch-vgg11")
    ] == [
        "GPT-2",
        "BERT",
        "LSTM",
        "CNNs",
    ]


def _figs(columns: list[str], rows: list[list[float]], **kw):
    return build_figures(
        [f"h{i}" for i in range(len(rows))],
        columns,
        np.array(rows, dtype=float),
        kw.pop("directions", Directions()),
        **kw,
    )


def test_fleet_statistics_pool_ranks_and_keep_a_per_rank_drill_down() -> None:
    cols = ["mem-bw/d2d_bw:0", "mem-bw/d2d_bw:1"]
    f = _figs(cols, [[1, 2], [3, 4], [5, 6]]).metrics[0]
    assert f.metric == "mem-bw/d2d_bw" and f.direction == 1
    assert (f.hosts, f.values, f.median, f.min, f.max) == (3, 6, 3.5, 1, 6)
    assert f.p5 == pytest.approx(1.25) and f.p95 == pytest.approx(5.75)  # linear interpolation of 1..6
    assert f.per_rank == (("0", 3.0, 3), ("1", 4.0, 3))
    one = _figs(cols, [[10, 20]]).metrics[0]
    assert one.hosts == 1 and one.median == 15


def test_a_failed_result_check_counts_zero() -> None:
    cols = ["gemm-flops/fp16_tc_flops:0", "gemm-flops/return_code:0"]
    figs = _figs(cols, [[700.0, 0], [690.0, 0], [9999.0, 3]])
    f = figs.metrics[0]
    assert f.invalid_hosts == 1 and f.min == 0.0 and f.max == 700.0 and f.median == 690.0
    assert any("count as zero" in n for n in figs.notes)


def test_run_to_run_spread() -> None:
    # SuperBench's per-run columns: runs 100 and 120 -> CV = 14.14 / 110; 100 and 101 -> 0.70%
    cols = ["kernel-launch/0/event_time", "kernel-launch/1/event_time"]
    noisy = _figs(cols, [[100.0, 120.0]]).metrics[0]
    assert noisy.median == 110.0 and noisy.runs == 2
    assert noisy.cv == pytest.approx(math.sqrt(200) / 110) and noisy.noisy
    calm = _figs(cols, [[100.0, 101.0]]).metrics[0]
    assert calm.cv is not None and calm.cv < CV_LIMIT and not calm.noisy
    # sb-fleet's own result files: the per-run values come beside the summary
    f = _figs(
        ["gemm-flops/fp32_flops"], [[27.0]], runs={"h0": {"gemm-flops/fp32_flops": [33.0, 21.0]}}
    ).metrics[0]
    assert f.cv == pytest.approx(math.sqrt(72) / 27) and f.noisy


def test_efficiency_against_the_hosts_peak() -> None:
    d = Directions({"gemm-flops/fp16_tc_flops": MetricInfo("GFLOPS", True)})
    peaks = {"h0": host_peaks(H100), "h1": host_peaks(H100)}
    f = _figs(["gemm-flops/fp16_tc_flops:0"], [[692_580.0], [742_050.0]], directions=d, peaks=peaks).metrics[
        0
    ]
    assert f.peak == pytest.approx(989_400.0)
    assert f.efficiency == pytest.approx((0.70 + 0.75) / 2)
    assert "H100 SXM" in f.peak_source


def test_cpu_roofline_of_the_demo_fixture() -> None:
    figs = figures_of(load_fleet(FIXTURES / "figures_cpu"))
    (rl,) = figs.rooflines
    p = {x.precision: x for x in rl.points}
    # 512^3 fp32: 2*512^3 / (4 bytes * 3 * 512^2) = 85.33 FLOP/byte; peak 281.6 GFLOPS; 27/281.6 = 9.6%
    assert p["fp32"].intensity == pytest.approx(2 * 512 / 12)
    assert p["fp32"].regime == "compute-bound" and p["fp32"].efficiency == pytest.approx(27.0 / 281.6)
    assert rl.bandwidth == pytest.approx(6000e6) and "measured" in rl.bandwidth_source
    gemm = {m.metric: m for m in figs.metrics}
    assert gemm["gemm-flops/fp32_flops"].efficiency == pytest.approx(27.0 / 281.6)
    assert gemm["gemm-flops/fp32_flops"].noisy  # runs 33 and 21


def test_models_and_collective_curves() -> None:
    figs = figures_of(load_fleet(FIXTURES / "figures_run"))
    (row,) = figs.models
    assert (row.model, row.group, row.precision) == ("gpt_models/pytorch-gpt2-large", "GPT-2", "fp16")
    assert row.values["train_throughput"] == 61.0 and row.values["inference_step_time_p99"] == 13.0
    (curve,) = figs.curves
    assert curve.op == "allreduce" and curve.sizes == (1048576, 16777216, 268435456, 8589934592)
    assert curve.busbw[0] == pytest.approx(40.4) and curve.algbw[0] == pytest.approx(40.4 / 1.75)
    assert curve.peak == pytest.approx(450.0)  # H100 NVLink, one direction


def test_results_section_golden(golden) -> None:
    """The results section of report.md and the figures of report.json on a small three-host run."""
    figs = figures_of(load_fleet(FIXTURES / "figures_run"))
    golden(GOLDEN / "results_section.md", render(figs))
    golden(GOLDEN / "figures.json", json.dumps(figs.to_json(), indent=1, sort_keys=True) + "\n")
    cpu = figures_of(load_fleet(FIXTURES / "figures_cpu"))
    golden(GOLDEN / "results_section_cpu.md", render(cpu))


CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 106
model name\t: Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz
cpu MHz\t\t: 2000.000
physical id\t: 0
core id\t\t: 0
flags\t\t: fpu sse sse2 ssse3 fma avx avx2 avx512f avx512dq

processor\t: 1
vendor_id\t: GenuineIntel
cpu MHz\t\t: 2000.000
physical id\t: 0
core id\t\t: 0
flags\t\t: fpu sse sse2 ssse3 fma avx avx2 avx512f avx512dq

processor\t: 2
vendor_id\t: GenuineIntel
cpu MHz\t\t: 2000.000
physical id\t: 0
core id\t\t: 1
flags\t\t: fpu sse sse2 ssse3 fma avx avx2 avx512f avx512dq
"""


def test_hostprep_cpu_facts_feed_the_cpu_peak() -> None:
    from sb_bench.host.hostprep import parse_cpuinfo

    facts = parse_cpuinfo(CPUINFO, "3200000\n")  # cpufreq's maximum wins over "cpu MHz"
    assert facts["cpu_cores"] == 2  # two hyperthreads of core 0, one of core 1
    assert facts["cpu_mhz"] == 3200.0 and facts["cpu_vendor"] == "GenuineIntel"
    assert set(facts["cpu_flags"]) == {"sse2", "fma", "avx", "avx2", "avx512f"}
    peaks = host_peaks({"cpu_model": "Xeon", **facts})
    assert peaks.gemm["fp64"].value == pytest.approx(2 * 3.2e9 * 8 * 2 * 2)


def test_superbench_names_map_to_their_links() -> None:
    hp = host_peaks(H100)
    assert peak_for_metric("gpu-copy-bw/cpu_to_gpu#_by_sm_under_numa#_bw", hp) is hp.pcie
    assert peak_for_metric("gpu-copy-bw/gpu#_to_cpu_by_dma_under_numa#_bw", hp) is hp.pcie
    assert peak_for_metric("gpu-copy-bw/gpu#_to_gpu#_write_by_dma_bw", hp) is hp.nvlink
    assert peak_for_metric("nccl-bw:nvlink/allreduce_8589934592_busbw", hp) is hp.nvlink
    assert peak_for_metric("nccl-bw:ib/allreduce_8589934592_busbw", hp) is None  # across nodes: not NVLink
    assert peak_for_metric("ib-loopback/ib_write_bw_8388608", hp) is hp.ib


def test_a_superbench_file_without_units_still_gets_its_peaks() -> None:
    """No metrics.json: GEMM rates are GFLOPS and bandwidths GB/s, as SuperBench writes them."""
    cols = ["gemm-flops/fp16_tc_flops:0", "mem-bw/d2d_bw:0", "mem-bw/h2d_bw:0"]
    figs = _figs(cols, [[494_700.0, 2680.0, 50.4]], peaks={"h0": host_peaks(H100)})
    eff = {f.metric: f.efficiency for f in figs.metrics}
    assert eff["gemm-flops/fp16_tc_flops"] == pytest.approx(0.5)  # of 989.4 TFLOPS
    assert eff["mem-bw/d2d_bw"] == pytest.approx(0.8)  # of 3350 GB/s
    assert eff["mem-bw/h2d_bw"] == pytest.approx(50.4 / (32 * 128 / 130 * 16 / 8))


def test_hostprep_pcie_facts_and_a_real_h100s_figures() -> None:
    """nvidia-smi's answer and the facts of an H100 SXM as hostprep recorded them on one (captured)."""
    from sb_bench.host.hostprep import parse_pcie

    assert parse_pcie("5, 16\n") == {"pcie_gen": 5, "pcie_width": 16}
    assert parse_pcie("[N/A], [N/A]\n") == {} and parse_pcie("") == {}
    facts = {
        "cpu_model": "Intel(R) Xeon(R) Processor",
        "cpu_count": 16,
        "cpu_flags": ["amx_tile", "avx", "avx2", "avx512f", "fma", "sse2"],
        "cpu_mhz": 2100.0,
        "cpu_cores": 16,
        "gpu_count": 1,
        "gpu_model": "NVIDIA H100 80GB HBM3",
        **parse_pcie("5, 16"),
    }
    hp = host_peaks(facts)
    assert hp.gpu and "H100 SXM" in hp.gemm["bf16_tc"].source
    assert hp.memory is not None and hp.memory.value == 3350e9
    assert hp.pcie is not None and round(hp.pcie.value / 1e9, 1) == 63.0


def test_a_real_h100_gemm_run_against_its_peak() -> None:
    """A gemm-flops result captured on an H100 SXM (3 runs; facts as hostprep records them): the
    efficiency sb-fleet derives from the facts agrees with the one the benchmark measured on the GPU."""
    figs = figures_of(load_fleet(FIXTURES / "figures_h100"))
    by = {f.metric: f for f in figs.metrics}
    for prec in ("fp16_tc", "bf16_tc", "tf32_tc", "fp32"):
        f = by[f"gemm-flops/{prec}_flops"]
        own = by[f"gemm-flops/{prec}_efficiency"]  # % from the benchmark itself
        assert f.efficiency == pytest.approx(own.median / 100, rel=1e-9)
        assert f.runs == 3 and f.cv is not None and f.cv < 0.01 and not f.noisy
    (rl,) = figs.rooflines
    point = {p.precision: p for p in rl.points}["fp16_tc"]
    assert point.regime == "compute-bound" and 0.6 < point.efficiency < 0.75  # ~66.6% measured
    assert "default 8192^3" in rl.shape_note  # the file says m = 0: the suite's GPU default


@pytest.mark.filterwarnings("error")
def test_sparse_fleets_give_figures_without_warnings() -> None:
    """Missing values everywhere (absent GPUs, failed benchmarks, a host with nothing): no warning, no NaN."""
    rng = np.random.default_rng(3)
    cols = [
        *(f"gemm-flops/fp16_tc_flops:{g}" for g in range(4)),
        *(f"gemm-flops/{r}/fp32_flops:0" for r in range(3)),
        "gemm-flops/return_code:0",
        "mem-bw/d2d_bw:0",
        "cpu-memory-bw-latency/mem_max_bandwidth_all_reads_bw",
        "nccl-bw/allreduce_1024_busbw",
        "nccl-bw/allreduce_2048_busbw",
        "nccl-bw/allreduce_2048_algbw",
    ]
    for n in (1, 3, 12):
        vals = rng.uniform(1, 100, (n, len(cols)))
        vals[rng.random(vals.shape) < 0.5] = np.nan
        vals[0, :] = np.nan
        hosts = [f"h{i}" for i in range(n)]
        peaks = {
            h: host_peaks(H100 if i % 2 else {"cpu_cores": 2, "cpu_mhz": 2000, **ICX})
            for i, h in enumerate(hosts)
        }
        figs = build_figures(hosts, cols, vals, Directions(), peaks, {"h1": {cols[0]: [1.0, 1.1]}}, {})
        doc = json.dumps(figs.to_json(), allow_nan=False)  # every number finite or null
        assert "NaN" not in doc
        # one host that reported nothing: no section at all; else one with the values that are there
        assert (render(figs) == "") if n == 1 else (render(figs).count("\n") > 3)


# cudnn-function's names in the fixtures, and their FLOPs per call worked out by hand:
FWD_HALF = "name_cudnnconvolutionforward_c_64_datatype_half_h_56_k_64_n_32_pad_1_r_3_s_3_stride_1_w_56_time"
FWD_HALF_FLOPS = 2 * 32 * 64 * 64 * 3 * 3 * 56 * 56  # out (56 + 2 - 2 - 1) + 1 = 56
FWD_HALF_BYTES = 2 * (32 * 64 * 56 * 56 + 64 * 64 * 3 * 3 + 32 * 64 * 56 * 56)
BWD_DATA_DIL = "name_cudnnconvolutionbackwarddata_c_128_datatype_float_dilation_2_h_28_k_32_n_32_pad_2_r_3_s_3_stride_1_w_28_time"
BWD_DATA_DIL_FLOPS = 2 * 32 * 32 * 128 * 3 * 3 * 28 * 28  # out (28 + 4 - 2*2 - 1) + 1 = 28
BWD_DATA_DIL_BYTES = 4 * (32 * 128 * 28 * 28 + 32 * 128 * 3 * 3 + 32 * 32 * 28 * 28)
H100_HBM = 3350e9


def test_conv_points_on_the_roofline() -> None:
    """Each cudnn-function call a host timed is a point: FLOPs from its name over its time, against the
    GEMM roof of its datatype (half: fp16_tc; float: tf32_tc, as cuDNN runs it on an H100)."""
    figs = figures_of(load_fleet(FIXTURES / "figures_run"))
    rl = {r.host: r for r in figs.rooflines}
    conv = {p.metric.rpartition("/")[2]: p for p in rl["gpu-a"].points if p.kind == "conv"}
    assert len(conv) == 3 and all(p.kind == "gemm" for p in rl["gpu-a"].points[:1])
    fwd = conv[FWD_HALF]  # 25 us on both ranks
    assert fwd.attained == pytest.approx(FWD_HALF_FLOPS / 25e-6)
    assert fwd.intensity == pytest.approx(FWD_HALF_FLOPS / FWD_HALF_BYTES)  # 287.2 FLOP/byte
    # ridge of fp16_tc on an H100 SXM: 989.4 TFLOPS / 3350 GB/s = 295 FLOP/byte > 287: memory-bound
    assert fwd.roof == "fp16_tc" and fwd.peak == pytest.approx(989.4e12) and fwd.regime == "memory-bound"
    assert fwd.efficiency == pytest.approx(fwd.attained / (fwd.intensity * H100_HBM))
    assert "memory-bound at 31% of the memory roof" in fwd.sentence and fwd.precision == "half"
    bwd = conv[BWD_DATA_DIL]  # 12.0 and 12.5 us: the median of the two ranks' rates
    rate = (BWD_DATA_DIL_FLOPS / 12e-6 + BWD_DATA_DIL_FLOPS / 12.5e-6) / 2
    assert (
        bwd.attained == pytest.approx(rate) and bwd.roof == "tf32_tc" and bwd.peak == pytest.approx(494.7e12)
    )
    assert bwd.intensity == pytest.approx(BWD_DATA_DIL_FLOPS / BWD_DATA_DIL_BYTES)
    assert "dilation 2 float" in bwd.label
    filt = next(p for p in conv.values() if "bwd-filter" in p.label)
    # 2*32*256*256*9*14*14 FLOPs in 15 us, intensity 973 > 295: compute-bound
    assert filt.regime == "compute-bound"
    assert filt.efficiency == pytest.approx(2 * 32 * 256 * 256 * 9 * 14 * 14 / 15e-6 / 989.4e12)
    assert "compute-bound at 50% of peak (compute roof fp16_tc)" in filt.sentence


def test_a_failed_conv_check_counts_zero() -> None:
    """gpu-c's rank 0 failed cudnn-function's check (return code 3): every convolution of the host is
    worth nothing, as a GEMM is, and the report says so."""
    figs = figures_of(load_fleet(FIXTURES / "figures_run"))
    (rl,) = [r for r in figs.rooflines if r.host == "gpu-c"]
    conv = [p for p in rl.points if p.kind == "conv"]
    assert len(conv) == 3 and all(p.attained == 0.0 and not p.valid for p in conv)
    assert all("result check failed, counted as 0 FLOPS (valid FLOPS)" in p.sentence for p in conv)
    assert any(n.startswith("cudnn-function: the result check failed on 1 host(s)") for n in figs.notes)
    text = render(figs)
    assert "conv fwd n32 c64 56x56 k64 3x3 pad 1 half: result check failed" in text
    # a one-host run whose only rank failed has no conv values at all: the note still says it
    alone = _figs(
        ["gemm-flops/fp32_flops", "cudnn-function/return_code"], [[27.0, 3]], peaks={"h0": host_peaks(CPU)}
    )
    assert not [p for rl in alone.rooflines for p in rl.points if p.kind == "conv"]
    assert any("cudnn-function: the result check failed on 1 host(s)" in n for n in alone.notes)


CPU = {"cpu_cores": 2, "cpu_mhz": 2200, "cpu_flags": ["sse2", "avx", "avx2", "fma", "avx512f"], **ICX}


def test_conv_points_on_a_cpu_and_without_a_gemm() -> None:
    """On a CPU float convolutions go against the fp32 peak; half has no CPU peak, so no verdict. No GEMM
    measured: the convolutions alone make the roofline."""
    d = Directions({f"cudnn-function/{FWD_HALF}": MetricInfo("ms", False)})
    fwd_float = FWD_HALF.replace("half", "float")
    cols = [
        f"cudnn-function/{fwd_float}",
        f"cudnn-function/{FWD_HALF}",
        "cpu-memory-bw-latency/mem_max_bandwidth_all_reads_bw",
    ]
    figs = _figs(cols, [[200_000.0, 900.0, 6.0]], directions=d, peaks={"h0": host_peaks(CPU)})
    (rl,) = figs.rooflines
    assert rl.shape_note == "" and rl.bandwidth == pytest.approx(6e9)  # no unit given: GB/s
    flt, half = rl.points
    assert flt.roof == "fp32" and flt.peak == pytest.approx(281.6e9)  # 2 x 2.2 GHz x 16 lanes x 2 x 2
    assert flt.attained == pytest.approx(FWD_HALF_FLOPS / 0.2)  # no unit: us per call, as the suite says
    assert flt.regime == "compute-bound" and flt.efficiency == pytest.approx(FWD_HALF_FLOPS / 0.2 / 281.6e9)
    assert half.roof == "" and half.peak is None and half.regime == "unknown"
    assert half.attained == pytest.approx(FWD_HALF_FLOPS / 0.9)  # 900 ms, as metrics.json says
    assert "(no peak known)" in half.sentence
    assert half.intensity == pytest.approx(2 * flt.intensity)  # half the bytes


@pytest.mark.parametrize(
    "facts, float_roof, half_roof",
    [
        (H100, "tf32_tc", "fp16_tc"),  # cuDNN runs float as TF32 on sm_80 and newer
        ({"gpu_model": "Tesla V100-SXM2-32GB"}, "fp32", "fp16_tc"),  # no TF32 before Ampere
        ({"gpu_model": "AMD Instinct MI300X"}, "fp32", "fp16_tc"),  # MIOpen: float as float
        (CPU, "fp32", ""),
    ],
)
def test_the_compute_roof_of_a_convolution(facts: dict, float_roof: str, half_roof: str) -> None:
    from sb_fleet.analysis.figures.figures import conv_roof

    hp = host_peaks(facts)
    assert (conv_roof("float", hp), conv_roof("half", hp)) == (float_roof, half_roof)
    assert conv_roof("float", None) == ""


def test_conv_points_of_a_large_fleet_are_medians() -> None:
    """Beyond a rack (19 hosts) one roofline of the fleet's medians: a failed host counts zero there too."""
    n = 21
    cols = [f"cudnn-function/{FWD_HALF}:0", "cudnn-function/return_code:0", "gemm-flops/fp16_tc_flops:0"]
    rows = [[20.0 + i, 3 if i == 0 else 0, 700_000.0] for i in range(n)]  # host 0: 20 us but wrong
    figs = _figs(cols, rows, peaks={f"h{i}": host_peaks(H100) for i in range(n)})
    (rl,) = figs.rooflines
    assert rl.host == "fleet median (21 hosts)"
    (conv,) = [p for p in rl.points if p.kind == "conv"]
    rates = sorted([0.0] + [FWD_HALF_FLOPS / ((20.0 + i) * 1e-6) for i in range(1, n)])
    assert conv.attained == pytest.approx(rates[n // 2]) and conv.valid


def test_the_roofline_plot_keys_gemm_and_conv_points() -> None:
    from sb_fleet.report.writers.figure_plots import roofline_svg
    from sb_fleet.report.writers.figures_html import render as render_html

    figs = figures_of(load_fleet(FIXTURES / "figures_run"))
    svg = roofline_svg(next(r for r in figs.rooflines if r.host == "gpu-c"))
    for text in ("GEMM", "convolution", "check failed (0 FLOPS)", "fp16_tc roof", "tf32_tc roof"):
        assert text in svg, text
    page = render_html(figs)
    assert "3 convolution(s): 1 compute-bound (median 50% of peak), 2 memory-bound" in page
    assert "3 convolution(s): 3 with a failed result check, counted as 0 FLOPS (valid FLOPS)" in page


def test_a_conv_above_its_roof_and_one_without_a_memory_roof() -> None:
    """FLOPs are a direct convolution's: a Winograd kernel's effective rate can pass the peak, and the
    sentence says why; with no memory bandwidth known the point is only held against its peak."""
    col = f"cudnn-function/{FWD_HALF.replace('half', 'float')}"
    bw = "cpu-memory-bw-latency/mem_max_bandwidth_all_reads_bw"
    fast = _figs([col, bw], [[20_000.0, 6.0]], peaks={"h0": host_peaks(CPU)})
    (p,) = fast.rooflines[0].points
    assert p.efficiency == pytest.approx(FWD_HALF_FLOPS / 0.02 / 281.6e9)  # 131%
    assert "compute-bound at 131% of peak (compute roof fp32; above the roof" in p.sentence
    assert "Winograd" in p.sentence
    (q,) = _figs([col], [[40_000.0]], peaks={"h0": host_peaks(CPU)}).rooflines[0].points
    assert q.regime == "unknown" and q.sentence.endswith("at 66% of peak (no memory roof known)")


def test_nvls_allreduce_above_the_nvlink_peak_is_shown_with_its_reason() -> None:
    """All-reduce with NVLink SHARP on 8 H100 SXM reaches ~480 GB/s bus bandwidth, above the
    450 GB/s per-direction link rate: the report says why, never a bare 107%."""
    cols = ["nccl-bw:nvlink/allreduce_8589934592_busbw:0", "nccl-bw:nvlink/allgather_8589934592_busbw:0"]
    figs = _figs(cols, [[480.0, 360.0]], peaks={"h0": host_peaks(H100)})
    by = {f.metric: f for f in figs.metrics}
    ar = by["nccl-bw:nvlink/allreduce_8589934592_busbw"]
    assert ar.efficiency == pytest.approx(480 / 450)
    assert "NVLink SHARP (NVLS)" in ar.above_peak
    assert by["nccl-bw:nvlink/allgather_8589934592_busbw"].above_peak == ""  # 80%: nothing to explain
    text = render(figs)
    row = next(line for line in text.splitlines() if "`allreduce_8589934592_busbw`" in line)
    assert "106.7% (above peak: see notes)" in row
    assert any("NVLS" in n and "107% of peak" in n for n in figs.notes)
    assert "NVLS" in text.split("### Notes on the figures", 1)[1]


def test_a_large_fleet_of_two_models_has_one_median_roofline_each() -> None:
    """Beyond a rack, one roofline of the medians per hardware model (the most common first), not only
    the most common model's."""
    cols = ["gemm-flops/fp16_tc_flops:0"]
    rows = [[700_000.0] for _ in range(25)]
    peaks = {f"h{i}": host_peaks(H100 if i < 15 else A100) for i in range(25)}
    figs = _figs(cols, rows, peaks=peaks)
    assert [(rl.host, rl.device) for rl in figs.rooflines] == [
        ("fleet median (15 hosts)", host_peaks(H100).device),
        ("fleet median (10 hosts)", host_peaks(A100).device),
    ]
