"""kernel-launch as SuperBench defines it: the native empty-kernel probe is built where nvcc exists
and launched where a GPU exists; elsewhere each step skips and says why."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from sb_bench.micro import launch_native
from sb_bench.micro.launch_native import NativeUnavailable, NvccLauncher, build, find_nvcc, load_launcher
from suite_helpers import assert_metrics, run_bench

NVCC = find_nvcc()
needs_nvcc = pytest.mark.skipif(
    NVCC is None, reason="no nvcc on this host: the native kernel-launch source cannot be built here"
)
needs_gpu = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA GPU here: the empty kernel can be built but not launched"
)


@pytest.fixture
def build_root(tmp_path: Path, monkeypatch) -> Path:
    root = tmp_path / "native"
    monkeypatch.setenv("SB_BENCH_BUILD_DIR", str(root))
    return root


@needs_nvcc
def test_the_cuda_source_builds_into_a_library_with_superbenchs_two_loops(build_root: Path) -> None:
    assert NVCC is not None
    lib = build(NVCC)
    assert lib.parent == build_root and oct(build_root.stat().st_mode & 0o777) == "0o700"
    symbols = subprocess.run(["nm", "-D", str(lib)], capture_output=True, text=True, check=True).stdout
    for name in ("sb_kl_event_time", "sb_kl_wall_time", "sb_kl_set_device", "sb_kl_error_string"):
        assert f" T {name}" in symbols
    mtime = lib.stat().st_mtime_ns
    assert build(NVCC) == lib and lib.stat().st_mtime_ns == mtime  # cached: not rebuilt
    launcher = NvccLauncher.load(lib)
    assert isinstance(launcher.lib, ctypes.CDLL)
    if not torch.cuda.is_available():
        # Loaded and called for real: the CUDA runtime answers that there is no device, in words.
        with pytest.raises(NativeUnavailable, match=r"cudaSetDevice\(0\): CUDA error \d+ \(.+\)"):
            launcher.set_device(0)


@needs_nvcc
def test_a_source_that_does_not_compile_says_what_nvcc_said(build_root: Path, tmp_path: Path) -> None:
    assert NVCC is not None
    bad = tmp_path / "bad.cu"
    bad.write_text("__global__ void k() { this is not cuda }\n")
    with pytest.raises(NativeUnavailable, match=r"nvcc failed to build bad.cu \(rc \d+\): .*error"):
        build(NVCC, source=bad)
    assert not [p for p in build_root.iterdir() if p.name.startswith(".kernel_launch-")]  # no temp left


def test_a_shared_build_directory_is_refused(build_root: Path) -> None:
    build_root.mkdir(mode=0o700)
    os.chmod(build_root, 0o777)
    with pytest.raises(NativeUnavailable, match="not private to this user"):
        launch_native.build_dir()


def test_without_nvcc_or_cuda_python_the_reason_names_both(monkeypatch) -> None:
    monkeypatch.setattr(launch_native, "find_nvcc", lambda: None)
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)  # as if cuda-python were not installed
    with pytest.raises(NativeUnavailable, match="no nvcc on PATH.*cuda-python is not installed"):
        load_launcher(None)


@needs_nvcc
@needs_gpu
def test_the_empty_kernel_launches_on_the_gpu(build_root: Path) -> None:
    launcher = load_launcher(torch.cuda.get_device_capability(0))
    launcher.set_device(0)
    event = launcher.event_time_ms(10, 200)
    wall = launcher.wall_time_ms(10, 200)
    assert 0 < event < 1.0 and 0 < wall < 1.0  # microseconds, in ms, as SuperBench reports


def test_kernel_launch_on_cpu_skips_superbenchs_figures_and_measures_torchs() -> None:
    env = run_bench("kernel-launch", num_warmup=5, num_steps=200)
    assert_metrics(env, {"torch_launch_time": "ms", "back_to_back_time": "ms"})
    if not torch.cuda.is_available():
        assert "event_time" not in env["result"] and "wall_time" not in env["result"]
        assert "event_time" in env["reason"] and "no CUDA GPU here" in env["reason"]
    assert 0 < env["result"]["torch_launch_time"][0] < 5.0


def test_the_nvrtc_path_compiles_the_kernel_or_says_why(monkeypatch) -> None:
    """With no nvcc, cuda-python's NVRTC is the way; without libnvrtc or a driver it says so."""
    pytest.importorskip(
        "cuda.bindings", reason="cuda-python is not installed: the NVRTC path is not available"
    )
    monkeypatch.setattr(launch_native, "find_nvcc", lambda: None)
    launcher = load_launcher((9, 0))
    assert launcher.path == "nvrtc"
    try:
        ptx = launcher.compile_ptx()
    except NativeUnavailable as e:
        assert "NVRTC" in str(e) and "Traceback" not in str(e)
        pytest.skip(f"NVRTC is not usable on this host: {e}")
    assert b".entry sb_empty_kernel" in ptx and b".target sm_90" in ptx
    if not torch.cuda.is_available():
        with pytest.raises(NativeUnavailable, match="CUDA driver|cuInit"):
            launcher.set_device(0)
