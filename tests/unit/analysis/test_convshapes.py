"""The convolution a cudnn-function metric timed, read back from its name (analysis.convshapes).

FLOPs and bytes are worked out by hand in each case (the numbers in the comments), and again from
the formula written out here, never with the parser's own arithmetic.
"""

from __future__ import annotations

import pytest

from sb_fleet.analysis.figures.convshapes import conv_call


def _out(size: int, k: int, stride: int, pad: int, dil: int) -> int:
    return (size + 2 * pad - dil * (k - 1) - 1) // stride + 1


@pytest.mark.parametrize(
    "metric, shape, flops, nbytes",
    [
        # ResNet-50's stem, half: out (224 + 6 - 6 - 1) // 2 + 1 = 112;
        # FLOPs 2*32*64*3*7*7*112*112; bytes 2 * (32*3*224*224 + 64*3*7*7 + 32*64*112*112)
        (
            "cudnn-function/name_cudnnconvolutionforward_c_3_datatype_half_h_224_k_64_n_32_pad_3_r_7_s_7_"
            "stride_2_w_224_time",
            ("cudnnconvolutionforward", 32, 3, 224, 224, 64, 7, 7, 2, 3, 1, "half"),
            7_552_892_928,
            2 * (4_816_896 + 9_408 + 25_690_112),
        ),
        # dilation 2 keeps 28x28 with pad 2: out (28 + 4 - 4 - 1) // 1 + 1 = 28; float
        # FLOPs 2*32*32*128*3*3*28*28; bytes 4 * (32*128*28*28 + 32*128*3*3 + 32*32*28*28)
        (
            "cudnn-function/name_cudnnconvolutionbackwarddata_c_128_datatype_float_dilation_2_h_28_k_32_n_32_"
            "pad_2_r_3_s_3_stride_1_w_28_time",
            ("cudnnconvolutionbackwarddata", 32, 128, 28, 28, 32, 3, 3, 1, 2, 2, "float"),
            1_849_688_064,
            4 * (3_211_264 + 36_864 + 802_816),
        ),
        # stride, pad and dilation together, not square: out_h (17 + 2 - 3*2 - 1) // 2 + 1 = 7,
        # out_w (9 + 2 - 3*0 - 1) // 2 + 1 = 6; FLOPs 2*2*4*8*3*1*7*6 = 16128;
        # bytes 2 * (2*8*17*9 + 4*8*3*1 + 2*4*7*6)
        (
            "name_cudnnconvolutionbackwardfilter_c_8_datatype_half_dilation_3_h_17_k_4_n_2_pad_1_r_3_s_1_"
            "stride_2_w_9_time",
            ("cudnnconvolutionbackwardfilter", 2, 8, 17, 9, 4, 3, 1, 2, 1, 3, "half"),
            16_128,
            2 * (2_448 + 96 + 336),
        ),
    ],
)
def test_flops_and_bytes_of_a_named_shape(metric: str, shape: tuple, flops: int, nbytes: int) -> None:
    fn, n, c, h, w, k, r, s, stride, pad, dil, dtype = shape
    call = conv_call(metric)
    assert call is not None
    assert (call.function, call.n, call.c, call.h, call.w, call.k, call.r, call.s) == (
        fn,
        n,
        c,
        h,
        w,
        k,
        r,
        s,
    )
    assert (call.stride, call.pad, call.dilation, call.datatype) == (stride, pad, dil, dtype)
    oh, ow = _out(h, r, stride, pad, dil), _out(w, s, stride, pad, dil)
    assert flops == 2 * n * k * c * r * s * oh * ow  # the hand figure agrees with the formula
    size = {"float": 4, "half": 2}[dtype]
    assert nbytes == size * (n * c * h * w + k * c * r * s + n * k * oh * ow)
    assert call.flops == flops and call.bytes == nbytes
    assert call.intensity == pytest.approx(flops / nbytes)


def test_absent_keys_take_the_benchmarks_defaults() -> None:
    # stride 1, pad 0, dilation 1, float: out 56 - 3 + 1 = 54
    call = conv_call("name_cudnnconvolutionforward_c_64_h_56_k_64_n_32_r_3_s_3_w_56_time")
    assert call is not None and (call.stride, call.pad, call.dilation, call.datatype) == (1, 0, 1, "float")
    assert call.flops == 2 * 32 * 64 * 64 * 9 * 54 * 54
    assert call.label == "fwd n32 c64 56x56 k64 3x3 float"


def test_every_built_in_configuration_parses() -> None:
    """The suite's own names (its metric_name over its default list) all come back as their shapes."""
    from sb_bench.micro.cublas_function import metric_name
    from sb_bench.micro.cudnn_function import DEFAULT_CONFIGS

    for cfg in DEFAULT_CONFIGS:
        call = conv_call(f"cudnn-function/{metric_name(cfg)}")
        assert call is not None, cfg
        assert call.function == cfg["name"].lower()
        for key in ("n", "c", "h", "w", "k", "r", "s", "stride", "pad", "datatype"):
            assert getattr(call, key) == cfg[key], (cfg, key)


@pytest.mark.parametrize(
    "metric",
    [
        "cublas-function/name_cublassgemm_k_4_m_4_n_4_time",  # another benchmark
        "cudnn-function/return_code",
        "cudnn-function/name_cudnnconvolutionforward_c_3_h_8_k_4_n_1_r_3_s_3_w_8",  # not a time
        "cudnn-function/name_cudnnconvolutionbiasactivation_c_3_h_8_k_4_n_1_r_3_s_3_w_8_time",  # unknown call
        "cudnn-function/name_cudnnconvolutionforward_c_3_datatype_double_h_8_k_4_n_1_r_3_s_3_w_8_time",
        "cudnn-function/name_cudnnconvolutionforward_algo_1_c_3_h_8_k_4_n_1_r_3_s_3_w_8_time",  # unknown key
        "cudnn-function/name_cudnnconvolutionforward_c_3_h_8_n_1_r_3_s_3_w_8_time",  # no k
        "cudnn-function/name_cudnnconvolutionforward_c_0_h_8_k_4_n_1_r_3_s_3_w_8_time",  # zero channels
        "cudnn-function/name_cudnnconvolutionforward_c_3_h_2_k_4_n_1_r_5_s_5_w_2_time",  # empty output
    ],
)
def test_names_that_are_not_a_known_convolution(metric: str) -> None:
    assert conv_call(metric) is None


def test_a_mode_of_the_benchmark_and_superbench_casing() -> None:
    call = conv_call("cudnn-function:fwd/name_cudnnConvolutionForward_c_3_h_8_k_4_n_1_r_3_s_3_w_8_time")
    assert (
        call is not None and call.function == "cudnnconvolutionforward" and call.flops == 2 * 4 * 3 * 9 * 36
    )
