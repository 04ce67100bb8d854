"""The native kernel-launch probe: SuperBench's empty kernel, built on the host and called from Python.

Two ways to get it, tried in this order:

1. **nvcc** (``nvcc`` on PATH, in ``$CUDA_HOME/bin`` or ``/usr/local/cuda/bin``): ``native/kernel_launch.cu``
   is built into a shared library and called through :mod:`ctypes`. Every timed window (event
   record, launch, event record; clock, launch, synchronise, clock) is native code: the
   figures are the ones SuperBench's ``kernel_launch_overhead`` binary prints.
2. **NVRTC through cuda-python** (``pip install cuda-python``; NVIDIA's own bindings, a
   one-to-one map of the CUDA driver and NVRTC C APIs, released with every CUDA version): the
   same kernel compiled at run time, launched with ``cuLaunchKernel`` between ``cuEventRecord``
   calls. Those calls are made from Python through the bindings, so each window also holds two
   binding calls (well under a microsecond each on a current host): the result says which path
   measured it (``path``).

Neither: the caller skips ``event_time`` and ``wall_time`` with the reason.

Builds are cached per user in ``$SB_BENCH_BUILD_DIR`` (default ``~/.cache/sb-bench/native``, made
0700 and refused when another user owns it), keyed by the source, the nvcc version and the
target architecture; a build is written to a temporary name and renamed into place, so ranks that
build at once never load half a library.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SOURCE = Path(__file__).resolve().parent / "native" / "kernel_launch.cu"
KERNEL = "sb_empty_kernel"
# The kernel alone, for NVRTC (no host code; extern "C" keeps its name unmangled).
NVRTC_SOURCE = b'extern "C" __global__ void sb_empty_kernel() {}\n'
BUILD_TIMEOUT_S = 300


class NativeUnavailable(Exception):
    """No way to build or load the native probe here; the message says why and what to do."""


def find_nvcc() -> str | None:
    """nvcc on PATH, else under $CUDA_HOME / $CUDA_PATH, else /usr/local/cuda; None when none."""
    found = shutil.which("nvcc")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and os.access(Path(root) / "bin" / "nvcc", os.X_OK):
            return str(Path(root) / "bin" / "nvcc")
    return None


def build_dir() -> Path:
    """The per-user build cache (0700, ours), created if missing."""
    root = Path(os.environ.get("SB_BENCH_BUILD_DIR") or Path.home() / ".cache" / "sb-bench" / "native")
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = root.stat()
    if st.st_uid != os.geteuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise NativeUnavailable(
            f"build directory {root} is not private to this user (owner uid {st.st_uid}, mode "
            f"{stat.S_IMODE(st.st_mode):o}): set SB_BENCH_BUILD_DIR to a directory of your own"
        )
    return root


def arch_flags(capability: tuple[int, int] | None) -> list[str]:
    """nvcc's target: the GPU's own architecture (SASS and PTX) when known, else nvcc's default."""
    if capability is None:
        return []
    cc = f"{capability[0]}{capability[1]}"
    return [f"-gencode=arch=compute_{cc},code=[sm_{cc},compute_{cc}]"]


def build(nvcc: str, capability: tuple[int, int] | None = None, source: Path = SOURCE) -> Path:
    """The shared library built from ``source`` (cached); NativeUnavailable with nvcc's output on failure."""
    try:
        version = subprocess.run(
            [nvcc, "--version"], capture_output=True, text=True, timeout=60, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError) as e:
        raise NativeUnavailable(f"{nvcc} --version failed: {e}") from e
    flags = ["-O2", "-shared", "-Xcompiler", "-fPIC", *arch_flags(capability)]
    key = hashlib.sha256(source.read_bytes() + version.encode() + " ".join(flags).encode()).hexdigest()[:16]
    out_dir = build_dir()
    lib = out_dir / f"kernel_launch-{key}.so"
    if lib.is_file():
        return lib
    fd, tmp = tempfile.mkstemp(prefix=".kernel_launch-", suffix=".so", dir=out_dir)
    os.close(fd)
    try:
        proc = subprocess.run(
            [nvcc, *flags, "-o", tmp, str(source)],
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_S,
            check=False,
        )
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
            raise NativeUnavailable(
                f"nvcc failed to build {source.name} (rc {proc.returncode}): {' | '.join(tail)}"
            )
        os.replace(tmp, lib)
    except subprocess.TimeoutExpired as e:
        raise NativeUnavailable(f"nvcc took over {BUILD_TIMEOUT_S}s to build {source.name}") from e
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return lib


@dataclass
class NvccLauncher:
    """The nvcc-built library, loaded: SuperBench's two loops, in native code."""

    lib: Any
    path: str = "nvcc"

    @classmethod
    def load(cls, so: Path) -> NvccLauncher:
        lib = ctypes.CDLL(str(so))
        lib.sb_kl_set_device.argtypes = [ctypes.c_int]
        lib.sb_kl_set_device.restype = ctypes.c_int
        lib.sb_kl_error_string.argtypes = [ctypes.c_int]
        lib.sb_kl_error_string.restype = ctypes.c_char_p
        for fn in (lib.sb_kl_event_time, lib.sb_kl_wall_time):
            fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_double)]
            fn.restype = ctypes.c_int
        return cls(lib)

    def _check(self, code: int, what: str) -> None:
        if code != 0:
            msg = self.lib.sb_kl_error_string(code)
            raise NativeUnavailable(f"{what}: CUDA error {code} ({(msg or b'?').decode(errors='replace')})")

    def set_device(self, index: int) -> None:
        self._check(self.lib.sb_kl_set_device(index), f"cudaSetDevice({index})")

    def event_time_ms(self, warmups: int, steps: int) -> float:
        total = ctypes.c_double(0.0)
        self._check(self.lib.sb_kl_event_time(warmups, steps, ctypes.byref(total)), "event-time loop")
        return total.value / steps

    def wall_time_ms(self, warmups: int, steps: int) -> float:
        total = ctypes.c_double(0.0)
        self._check(self.lib.sb_kl_wall_time(warmups, steps, ctypes.byref(total)), "wall-time loop")
        return total.value / steps


class NvrtcLauncher:
    """The same kernel through NVRTC and the driver API (cuda-python's ``cuda.bindings``)."""

    path = "nvrtc"

    def __init__(self, capability: tuple[int, int] | None):
        try:
            from cuda.bindings import driver, nvrtc  # type: ignore[import-not-found]
        except ImportError as e:
            raise NativeUnavailable(
                "no nvcc on this host and cuda-python is not installed (pip install cuda-python)"
            ) from e
        self.drv, self.nvrtc = driver, nvrtc
        self._src = NVRTC_SOURCE
        self._cap = capability
        self._func = None

    def _ok(self, result: Any, what: str) -> Any:
        err, *rest = result if isinstance(result, tuple) else (result,)
        if int(err) != 0:
            raise NativeUnavailable(f"{what}: {err}")
        return rest[0] if len(rest) == 1 else rest

    def compile_ptx(self) -> bytes:
        """The kernel as PTX for this GPU's architecture (NVRTC; no GPU needed)."""
        n = self.nvrtc
        try:
            prog = self._ok(
                n.nvrtcCreateProgram(self._src, b"kernel_launch.cu", 0, [], []), "nvrtcCreateProgram"
            )
            opts = [f"--gpu-architecture=compute_{self._cap[0]}{self._cap[1]}".encode()] if self._cap else []
            self._ok(n.nvrtcCompileProgram(prog, len(opts), opts), "nvrtcCompileProgram")
            size = self._ok(n.nvrtcGetPTXSize(prog), "nvrtcGetPTXSize")
            ptx = b" " * size
            self._ok(n.nvrtcGetPTX(prog, ptx), "nvrtcGetPTX")
            n.nvrtcDestroyProgram(prog)
        except NativeUnavailable:
            raise
        except Exception as e:  # the bindings raise when libnvrtc cannot be found or loaded
            raise NativeUnavailable(f"NVRTC: {type(e).__name__}: {str(e).splitlines()[0]}") from e
        return ptx

    def set_device(self, index: int) -> None:
        ptx = self.compile_ptx()
        d = self.drv
        try:
            self._ok(d.cuInit(0), "cuInit")
            dev = self._ok(d.cuDeviceGet(index), "cuDeviceGet")
            ctx = self._ok(d.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
            self._ok(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
            module = self._ok(d.cuModuleLoadData(ptx), "cuModuleLoadData")
            self._func = self._ok(d.cuModuleGetFunction(module, KERNEL.encode()), "cuModuleGetFunction")
        except NativeUnavailable:
            raise
        except Exception as e:  # no libcuda (no driver) and the like
            raise NativeUnavailable(f"CUDA driver: {type(e).__name__}: {str(e).splitlines()[0]}") from e

    def _launch(self) -> Any:
        return self.drv.cuLaunchKernel(self._func, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0)

    def event_time_ms(self, warmups: int, steps: int) -> float:
        d = self.drv
        start = self._ok(d.cuEventCreate(0), "cuEventCreate")
        stop = self._ok(d.cuEventCreate(0), "cuEventCreate")
        total = 0.0
        for i in range(warmups + steps):
            d.cuEventRecord(start, 0)
            self._launch()
            d.cuEventRecord(stop, 0)
            self._ok(d.cuEventSynchronize(stop), "cuEventSynchronize")
            ms = self._ok(d.cuEventElapsedTime(start, stop), "cuEventElapsedTime")
            if i >= warmups:
                total += ms
        d.cuEventDestroy(start)
        d.cuEventDestroy(stop)
        return total / steps

    def wall_time_ms(self, warmups: int, steps: int) -> float:
        d = self.drv
        for _ in range(warmups):
            self._launch()
            self._ok(d.cuCtxSynchronize(), "cuCtxSynchronize")
        total = 0.0
        for _ in range(steps):
            t0 = time.perf_counter()
            self._launch()
            d.cuCtxSynchronize()
            total += time.perf_counter() - t0
        return total / steps * 1e3


def load_launcher(capability: tuple[int, int] | None) -> NvccLauncher | NvrtcLauncher:
    """The best launcher this host allows: nvcc-built, else NVRTC; NativeUnavailable with both reasons."""
    nvcc = find_nvcc()
    why = "no nvcc on PATH, $CUDA_HOME/bin or /usr/local/cuda/bin"
    if nvcc:
        try:
            return NvccLauncher.load(build(nvcc, capability))
        except (NativeUnavailable, OSError) as e:
            why = str(e)
    try:
        return NvrtcLauncher(capability)
    except NativeUnavailable as e:
        raise NativeUnavailable(f"{why}; {e}") from e
