"""Prepare a host for the suite and report its system facts (stdlib only).

Run by ``sb-fleet deploy`` with the host's base Python, from the workspace::

    python suite/sb_bench/hostprep.py --venv --install auto --min-free-gb 5

It checks the prerequisites (Python version, free disk, GPUs when required),
builds the suite's venv on top of the base Python so an existing PyTorch
environment is reused, installs only the requirements that are missing, and
prints one JSON object of facts on stdout. Exit 0 when the host is ready,
1 with ``{"error": ...}`` when it is not.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

MIN_PY = (3, 9)
REQUIRED_IMPORTS = {"torch": "torch", "torchvision": "torchvision", "transformers": "transformers"}


def run(cmd: list[str], timeout: float = 30) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        return out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


def cpu_facts() -> dict:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kb = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    except OSError:
        pass
    return {
        "cpu_model": model or platform.processor(),
        "cpu_count": os.cpu_count(),
        "memory_gb": round(mem_kb / 1024 / 1024, 2),
    }


def gpu_facts() -> dict:
    out = run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
    if out:
        rows = [[c.strip() for c in r.split(",")] for r in out.splitlines() if r.strip()]
        cuda = ""
        head = run(["nvidia-smi"])
        if "CUDA Version:" in head:
            cuda = head.split("CUDA Version:", 1)[1].split()[0]
        return {
            "gpu_vendor": "nvidia",
            "gpu_count": len(rows),
            "gpu_model": rows[0][0],
            "gpu_models": sorted({r[0] for r in rows}),
            "driver_version": rows[0][1],
            "cuda_version": cuda,
        }
    out = run(["rocm-smi", "--showproductname", "--json"])
    if out:
        try:
            data = json.loads(out)
            names = [v.get("Card series") or v.get("Card SKU") or "AMD GPU" for v in data.values()]
            return {
                "gpu_vendor": "amd",
                "gpu_count": len(names),
                "gpu_model": names[0],
                "gpu_models": sorted(set(names)),
                "driver_version": "",
                "cuda_version": "",
            }
        except (ValueError, AttributeError):
            pass
    devs = glob.glob("/dev/nvidia[0-9]*")
    return {
        "gpu_vendor": "nvidia" if devs else None,
        "gpu_count": len(devs),
        "gpu_model": None,
        "gpu_models": [],
        "driver_version": None,
        "cuda_version": None,
    }


def make_venv(base: str, venv: Path) -> str:
    """A venv on top of ``base`` that sees base's packages, even when base is itself a venv."""
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run(
            [base, "-m", "venv", "--system-site-packages", str(venv)],
            check=True,
            capture_output=True,
            text=True,
        )
    # --system-site-packages reaches only the *base interpreter's* site-packages; when base is a
    # venv (or conda env) its own site-packages are linked with a .pth file.
    base_site = run([base, "-c", "import sysconfig;print(sysconfig.get_paths()['purelib'])"])
    mine = run([str(py), "-c", "import sysconfig;print(sysconfig.get_paths()['purelib'])"])
    if base_site and mine and base_site != mine:
        Path(mine, "_sb_fleet_base.pth").write_text(base_site + "\n")
    return str(py)


def missing_imports(py: str) -> list[str]:
    code = (
        "import importlib.util,json;"
        f"print(json.dumps([m for m in {list(REQUIRED_IMPORTS)!r} if importlib.util.find_spec(m) is None]))"
    )
    out = run([py, "-c", code], timeout=120)
    return json.loads(out) if out else list(REQUIRED_IMPORTS)


def torch_facts(py: str) -> dict:
    code = (
        "import json\ntry:\n import torch\n d={'torch_version':torch.__version__,"
        "'torch_cuda':torch.version.cuda,'torch_gpu_count':torch.cuda.device_count() if torch.cuda.is_available() else 0}\n"
        "except Exception as e:\n d={'torch_version':None,'torch_error':repr(e)[:200]}\nprint(json.dumps(d))"
    )
    out = run([py, "-c", code], timeout=180)
    return json.loads(out) if out else {"torch_version": None, "torch_error": "could not run python"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--venv", action="store_true", help="build ./venv on top of this Python")
    ap.add_argument("--install", choices=("auto", "always", "never"), default="auto")
    ap.add_argument("--requirements", default="suite/requirements.txt")
    ap.add_argument("--min-free-gb", type=float, default=1.0)
    ap.add_argument("--require-gpu", action="store_true")
    ap.add_argument(
        "--no-torch",
        action="store_true",
        help="the plan runs only host benchmarks (noop): skip the torch checks (no torch import)",
    )
    args = ap.parse_args(argv)
    facts: dict = {
        "hostname": platform.node(),
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "base_python": sys.executable,
        "workspace": os.getcwd(),
        "purelib": sysconfig.get_paths()["purelib"],
    }
    facts.update(cpu_facts())
    facts.update(gpu_facts())
    facts["free_disk_gb"] = round(shutil.disk_usage(".").free / 1e9, 2)

    def fail(msg: str) -> int:
        facts["error"] = msg
        print(json.dumps(facts))
        return 1

    if sys.version_info < MIN_PY:
        return fail(
            f"python {facts['python']} is too old; the suite needs {'.'.join(map(str, MIN_PY))}+ "
            f"(set sb_python to a newer interpreter)"
        )
    if facts["free_disk_gb"] < args.min_free_gb:
        return fail(f"only {facts['free_disk_gb']} GB free in the workspace, {args.min_free_gb} GB needed")
    if args.require_gpu and not facts.get("gpu_count"):
        return fail("no GPU found (nvidia-smi/rocm-smi/dev nodes) and fleet.require_gpu is set")
    facts["mode"] = "gpu" if facts.get("gpu_count") else "cpu"
    py = sys.executable
    try:
        if args.venv:
            py = make_venv(sys.executable, Path("venv"))
        facts["suite_python"] = py
        if args.no_torch:
            print(json.dumps(facts))
            return 0
        missing = missing_imports(py)
        if args.install == "always" or (args.install == "auto" and missing):
            r = subprocess.run(
                [py, "-m", "pip", "install", "-q", "-r", args.requirements],
                capture_output=True,
                text=True,
                check=False,
            )
            if r.returncode != 0:
                tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or [""]
                return fail(f"pip install of the suite's requirements failed: {tail[0][:300]}")
            missing = missing_imports(py)
        if missing:
            return fail(
                f"missing on the host: {', '.join(missing)} (install them, or set "
                f"fleet.install_requirements to auto)"
            )
    except subprocess.CalledProcessError as exc:
        return fail(f"cannot build the venv: {(exc.stderr or str(exc)).strip()[:300]}")
    facts.update(torch_facts(py))
    if not facts.get("torch_version"):
        return fail(f"torch does not import: {facts.get('torch_error')}")
    print(json.dumps(facts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
