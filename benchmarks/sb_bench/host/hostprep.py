"""Prepare a host for the suite and report its system facts (stdlib only).

Run by ``sb-fleet deploy`` with the host's base Python, from the workspace::

    python suite/sb_bench/host/hostprep.py --venv --install auto --min-free-gb 5

It checks the prerequisites (Python version, free disk, GPUs when required),
builds the suite's venv on top of the base Python so an existing PyTorch
environment is reused, installs only the requirements that are missing, and
prints one JSON object of facts on stdout. Exit 0 when the host is ready,
1 with ``{"error": ...}`` when it is not.

Hosts may share a filesystem (a home over NFS). The workspace is one host's
(``--host``: a marker file names the inventory host that owns it, and another
host is refused with one line naming both); the venv may be shared on purpose
(``--cache``: ``venv-<digest>`` keyed by the requirements, the base Python and
the machine, built and completed under an exclusive ``flock``, checked and used
under a shared one), and the workspace's ``venv`` is a link to it. A filesystem
without locks is one line naming the file and the fix.

``--remove-cache DIR`` (``sb-fleet cleanup --cache``) removes the shared venvs,
each under its exclusive lock, so a deploy that builds or uses one is waited for.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import functools
import glob
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

MIN_PY = (3, 9)
MARKER = ".sb-fleet-host"  # in the workspace: the inventory host that owns it
REQUIRED_IMPORTS = {"torch": "torch", "torchvision": "torchvision", "transformers": "transformers"}


def run(cmd: list[str], timeout: float = 30) -> str:
    """``cmd``'s stdout when it succeeds, else "" (a tool the host lacks is looked up once, not spawned)."""
    if "/" not in cmd[0] and not _on_path(cmd[0]):
        return ""  # what the spawn would give (FileNotFoundError), without a process per missing tool
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        return out.stdout.strip() if out.returncode == 0 else ""
    except (OSError, subprocess.SubprocessError):
        return ""


@functools.cache
def _on_path(tool: str) -> bool:
    return shutil.which(tool) is not None


def os_name() -> str:
    """``platform.platform()``'s words on a glibc Linux (``Linux-<release>-<machine>-with-glibc<version>``)
    without its costs: ``uname -p`` in a child process and a scan of the interpreter's binary for the libc
    version (~10 ms of a host's CPU each night); elsewhere platform's own answer."""
    u = os.uname()
    try:
        libc, _, version = (os.confstr("CS_GNU_LIBC_VERSION") or "").partition(" ")
    except (AttributeError, ValueError, OSError):
        libc = version = ""
    if u.sysname != "Linux" or libc != "glibc" or not version:
        import platform

        return platform.platform()
    return f"{u.sysname}-{u.release}-{u.machine}-with-glibc{version}"


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
        "cpu_model": model or _processor(),
        "cpu_count": os.cpu_count(),
        "memory_gb": round(mem_kb / 1024 / 1024, 2),
        **cpu_peak_facts(),
    }


def _processor() -> str:
    import platform

    return platform.processor()


# The CPU flags that decide a nominal FLOPS peak (sb_fleet.analysis.figures.peaks): SIMD width and FMA units.
SIMD_FLAGS = ("sse2", "avx", "avx2", "fma", "avx512f", "asimd", "neon", "sve", "amx_tile")


def parse_cpuinfo(text: str, max_khz: str = "") -> dict:
    """The CPU facts a nominal FLOPS peak needs, from /proc/cpuinfo's text (and cpufreq's
    ``cpuinfo_max_freq`` in kHz when the host has it):

    * cpu_vendor, cpu_family, cpu_model_number (x86), cpu_implementer, cpu_part (Arm, as written:
      "0x41", "0xd4f") and cpu_model (the model name): which core it is (sb_fleet's cpu_uarch);
    * cpu_mhz and cpu_mhz_source: cpufreq's maximum ("cpuinfo_max_freq"), else the highest
      current clock in /proc/cpuinfo ("cpu MHz");
    * cpu_cores (physical: distinct (package, core) pairs) and cpu_flags (the SIMD subset)."""
    flags: set[str] = set()
    mhz = 0.0
    cores: set[tuple[str, str]] = set()
    ident: dict = {}
    keys = {
        "vendor_id": "cpu_vendor",
        "cpu family": "cpu_family",
        "model": "cpu_model_number",
        "model name": "cpu_model",
        "CPU implementer": "cpu_implementer",
        "CPU part": "cpu_part",
    }
    phys = core = ""
    for line in text.splitlines() + [""]:
        key, _, val = (x.strip() for x in line.partition(":"))
        if key in ("flags", "Features"):
            flags |= set(val.split()) & set(SIMD_FLAGS)
        elif key == "cpu MHz":
            try:
                mhz = max(mhz, float(val or 0))
            except ValueError:
                pass
        elif key in keys and keys[key] not in ident and val:
            ident[keys[key]] = int(val) if key in ("cpu family", "model") and val.isdigit() else val
        elif key == "physical id":
            phys = val
        elif key == "core id":
            core = val
        elif not line.strip() and core:
            cores.add((phys, core))
            phys = core = ""
    out: dict = {"cpu_flags": sorted(flags), "cpu_vendor": "", **ident}
    if max_khz.strip().isdigit() and int(max_khz.strip()) > 0:
        out["cpu_mhz"] = round(int(max_khz.strip()) / 1000, 1)
        out["cpu_mhz_source"] = "cpuinfo_max_freq"
    elif mhz:
        out["cpu_mhz"] = round(mhz, 1)
        out["cpu_mhz_source"] = "cpu MHz"
    if cores:
        out["cpu_cores"] = len(cores)
    return out


def parse_pcie(csv: str) -> dict:
    """pcie_gen / pcie_width (the first GPU's maximum link) from nvidia-smi's
    ``--query-gpu=pcie.link.gen.max,pcie.link.width.max --format=csv,noheader,nounits``."""
    first = csv.strip().splitlines()[0] if csv.strip() else ""
    cells = [c.strip() for c in first.split(",")]
    if len(cells) != 2 or not all(c.isdigit() for c in cells):
        return {}
    return {"pcie_gen": int(cells[0]), "pcie_width": int(cells[1])}


def pcie_facts() -> dict:
    """The GPUs' PCIe link (nominal host-device bandwidth, sb_fleet.analysis.figures.peaks); {} without nvidia-smi."""
    q = "--query-gpu=pcie.link.gen.max,pcie.link.width.max"
    return parse_pcie(run(["nvidia-smi", q, "--format=csv,noheader,nounits"]))


def cpu_peak_facts() -> dict:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    try:
        max_khz = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").read_text()
    except OSError:
        max_khz = ""
    return parse_cpuinfo(text, max_khz)


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


# NVML's enforced power limit (nvmlDeviceGetEnforcedPowerLimit) and its default
# (nvmlDeviceGetPowerManagementDefaultLimit), through nvidia-smi's names for them.
POWER_QUERY = [
    "nvidia-smi",
    "--query-gpu=index,enforced.power.limit,power.default_limit",
    "--format=csv,noheader,nounits",
]


def parse_power_limits(text: str) -> list[dict]:
    """Per GPU ``{index, enforced_w, default_w}`` from :data:`POWER_QUERY`'s output ("[N/A]": None)."""

    def watts(cell: str) -> float | None:
        try:
            v = float(cell)
        except ValueError:
            return None
        return v if v > 0 else None

    out = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 3 or not cells[0].isdigit():
            continue
        out.append({"index": int(cells[0]), "enforced_w": watts(cells[1]), "default_w": watts(cells[2])})
    return out


def power_facts() -> dict:
    """The GPUs' power limits in force and their defaults (none without nvidia-smi)."""
    limits = parse_power_limits(run(POWER_QUERY))
    return {"gpu_power_limits": limits} if limits else {}


def parse_gpu_ids(text: str) -> list[dict]:
    """GPU identities from ``nvidia-smi --query-gpu=index,uuid,serial,pci.bus_id --format=csv,noheader``:
    the keys that let sb-fleet follow a GPU across hosts ("[N/A]" fields become empty)."""
    out = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 4 or not cells[0].isdigit():
            continue
        index, uuid, serial, bus = (
            ("" if c.upper() in ("[N/A]", "N/A", "[NOT SUPPORTED]") else c) for c in cells
        )
        out.append({"index": int(index), "uuid": uuid, "serial": serial, "pci_bus_id": bus})
    return out


def read_ib_nics(root: Path = Path("/sys/class/infiniband")) -> list[dict]:
    """Every RDMA device's node GUID and ports (state, rate, link layer) from sysfs."""

    def read(p: Path) -> str:
        try:
            return p.read_text().strip()
        except OSError:
            return ""

    try:
        devs = sorted(root.iterdir())
    except OSError:
        return []
    nics = []
    for dev in devs:
        ports = []
        try:
            port_dirs = sorted((dev / "ports").iterdir(), key=lambda p: (len(p.name), p.name))
        except OSError:
            port_dirs = []
        for p in port_dirs:
            ports.append(
                {
                    "port": int(p.name) if p.name.isdigit() else p.name,
                    "state": read(p / "state"),
                    "rate": read(p / "rate"),
                    "link_layer": read(p / "link_layer"),
                }
            )
        nics.append({"name": dev.name, "node_guid": read(dev / "node_guid"), "ports": ports})
    return nics


def component_facts() -> dict:
    """GPU UUIDs/serials and NIC GUIDs where the hardware reports them (keys of sb-fleet's history)."""
    out: dict = {}
    ids = run(["nvidia-smi", "--query-gpu=index,uuid,serial,pci.bus_id", "--format=csv,noheader"])
    gpus = parse_gpu_ids(ids) if ids else []
    if gpus:
        out["gpus"] = gpus
    nics = read_ib_nics()
    if nics:
        out["nics"] = nics
    return out


# The line (stdout) hostprep prints once when it starts to install (a venv built, requirements installed,
# or another host's build of a shared venv waited for): sb-fleet's deadline for hostprep is then
# fleet.deploy_timeout, not the few minutes of fleet.prep_timeout (sb_fleet.plan.tasks.INSTALLING).
INSTALLING = "SB_FLEET_INSTALLING"
_said_installing: list[bool] = []


def installing() -> None:
    """Say :data:`INSTALLING`, once per process."""
    if not _said_installing:
        _said_installing.append(True)
        print(INSTALLING, flush=True)


def make_venv(base: str, venv: Path) -> str:
    """A venv on top of ``base`` that sees base's packages, even when base is itself a venv."""
    py = venv / "bin" / "python"
    if not py.exists():
        installing()
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


class SharedWorkspace(Exception):
    """The workspace belongs to another inventory host (hosts that share a filesystem)."""


class LockUnsupported(Exception):
    """The filesystem refuses file locks (an NFS mount without lockd, some FUSE filesystems)."""


# What flock(2) fails with where the filesystem has no locks (EWOULDBLOCK is another holder, not this).
NO_LOCKS = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS})
WORKSPACE_LOCK_FIX = (
    "put the workspace on a filesystem with locks (a local disk: fleet.workspace or sb_workspace "
    "such as /var/tmp/sb-fleet/{host})"
)
CACHE_LOCK_FIX = (
    "put fleet.cache on a filesystem with locks (a local disk such as /var/tmp/sb-fleet/cache), or set "
    "fleet.cache to '' for a venv in each workspace"
)


def flock(fd: int, path: Path, op: int, fix: str) -> None:
    """``fcntl.flock``; a filesystem without locks is one line that names the file and the fix."""
    try:
        fcntl.flock(fd, op)
    except OSError as exc:
        if exc.errno not in NO_LOCKS:
            raise
        name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
        raise LockUnsupported(
            f"cannot lock {path}: its filesystem does not support file locks ({name}: {exc.strerror}), "
            f"which sb-fleet needs where hosts may share a directory; {fix}"
        ) from None


def claim_workspace(ws: Path, host: str) -> None:
    """Mark ``ws`` as ``host``'s, or refuse it when the marker names another host.

    The check and the write happen under an exclusive lock on the marker, so hosts that deploy at
    once onto one shared directory get one owner and a clear refusal each, never a race."""
    path = ws / MARKER
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        flock(fd, path, fcntl.LOCK_EX, WORKSPACE_LOCK_FIX)
        try:
            owner = json.loads(os.pread(fd, 4096, 0).decode(errors="replace") or "{}")
        except ValueError:
            owner = {}
        other = str(owner.get("host") or "") if isinstance(owner, dict) else ""
        if other and other != host:
            raise SharedWorkspace(
                f"workspace {ws} is host {other}'s (marker {path}), and {host} sees it too: the hosts share "
                f"a filesystem; give each host its own workspace (put {{host}} in fleet.workspace, as the "
                f"default ~/.sb-fleet/hosts/{{host}} does, or set sb_workspace per host), or delete the "
                f"marker if {other} no longer uses it"
            )
        if not other:
            data = {"host": host, "hostname": os.uname().nodename, "since": _now()}
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(data) + "\n").encode(), 0)
            os.fsync(fd)
    finally:
        os.close(fd)  # drops the lock


def _now() -> str:
    import datetime as _dt

    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def venv_key(base: str, requirements: Path) -> str:
    """The shared venv's name: the requirements' digest, with what a venv is bound to (the base
    interpreter's path and version, the machine)."""
    import hashlib  # here: only a shared venv needs it (~5 ms of imports: OpenSSL's library)

    h = hashlib.sha256()
    try:
        h.update(requirements.read_bytes())
    except OSError:
        h.update(b"no requirements")
    # The path as given, not resolved: a venv and its base interpreter resolve to one binary, yet
    # their packages differ (the shared venv links the base's site-packages).
    for part in (os.path.abspath(base), sys.prefix, sys.version, os.uname().machine):
        h.update(b"\0" + part.encode())
    return h.hexdigest()[:16]


def link_venv(ws_venv: Path, target: Path) -> None:
    """Point the workspace's ``venv`` at the shared one (atomically: a new link renamed into place)."""
    if ws_venv.is_symlink() and os.readlink(ws_venv) == str(target):
        return
    if ws_venv.exists() and not ws_venv.is_symlink():  # a venv of its own from an older sb-fleet
        old = ws_venv.with_name(f".venv-old-{os.getpid()}")
        ws_venv.rename(old)
        shutil.rmtree(old, ignore_errors=True)
    tmp = ws_venv.with_name(f".venv-link-{os.getpid()}")
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    tmp.symlink_to(target)
    os.replace(tmp, ws_venv)


class Lock:
    """An flock on ``path``, held until :meth:`release` (or the process ends).

    A venv's lock is taken shared by whoever uses the venv (a deploy past its build) and exclusive by
    whoever changes it (a build, ``--remove-cache``), which also unlinks the file: a lock taken on a
    file that was unlinked meanwhile is taken again on the new one."""

    def __init__(self, path: Path, fix: str = CACHE_LOCK_FIX):
        self.path = path
        self.fix = fix
        self.fd = -1

    def acquire(self, op: int) -> Lock:
        """Wait for the lock (``op``: LOCK_SH or LOCK_EX); with LOCK_NB, BlockingIOError when held."""
        while True:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            except FileNotFoundError:  # the directory went away between the two calls: again
                continue
            try:
                flock(fd, self.path, op, self.fix)
                st = os.fstat(fd)
                try:
                    now = os.stat(self.path)
                    same = (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)
                except FileNotFoundError:
                    same = False
            except BaseException:
                os.close(fd)
                raise
            if same:
                self.fd = fd
                return self
            os.close(fd)

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


VENV_DONE = ".sb-fleet-done"  # in a shared venv: built and its requirements installed


def venv_ready(target: Path, no_torch: bool) -> bool:
    py = target / "bin" / "python"
    if not py.exists():
        return False
    return no_torch or ((target / VENV_DONE).is_file() and not missing_imports(str(py)))


def shared_venv(args: argparse.Namespace, target: Path) -> tuple[Lock, str]:
    """The shared venv ``target``, ready: (its lock, held shared so that ``--remove-cache`` waits for this
    deploy, and '' or why the venv is not ready).

    A venv already built is only checked, under the shared lock, so hosts deploying at once onto one
    cache do not queue; one that is not (or ``--install always``) is built, checked and completed under
    the exclusive lock, so hosts wait instead of racing; then it is checked again, shared."""
    lock = Lock(target.with_name(target.name + ".lock"))
    for attempt in range(2):
        lock.acquire(fcntl.LOCK_SH)
        if (attempt or args.install != "always") and venv_ready(target, args.no_torch):
            return lock, ""
        lock.release()
        if attempt:
            break
        installing()  # built here, or another host's build waited for
        lock.acquire(fcntl.LOCK_EX)
        try:
            make_venv(sys.executable, target)
            if not args.no_torch:
                err = ensure_requirements(str(target / "bin" / "python"), args)
                if err:
                    return lock, err
                (target / VENV_DONE).write_text(_now() + "\n")
        finally:
            lock.release()
    return (
        lock,
        f"the shared venv {target} went away while this host deployed (sb-fleet cleanup --cache?): deploy again",
    )


def listing(directory: Path, pattern: str) -> list[Path]:
    """The entries of ``directory`` that match ``pattern``; none when it is not there. Hosts that share
    a cache clean it at once, and the last to finish removes the directory, maybe while another lists it
    (a glob's scandir raises FileNotFoundError then, whatever an is_dir() just before said)."""
    try:
        return list(directory.glob(pattern))
    except OSError:
        return []


def remove_cache(cache: Path, wait: float) -> dict:
    """Remove the shared venvs in ``cache`` (``sb-fleet cleanup --cache``), each under its exclusive lock:
    a deploy that builds or uses one holds its lock, and this waits up to ``wait`` seconds for it, else
    leaves that venv and names it. A removed venv is renamed aside under the lock, deleted after it."""
    out: dict = {"cache": str(cache), "removed": [], "busy": []}
    names = sorted({p.name.removesuffix(".lock") for p in listing(cache, "venv-*")})
    for name in names:
        lock = Lock(cache / f"{name}.lock")
        deadline = time.monotonic() + wait
        while True:
            try:
                lock.acquire(fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    out["busy"].append(name)
                    break
                time.sleep(0.2)
        if lock.fd < 0:
            continue
        try:
            trash = cache / f".{name}.removed-{os.getpid()}"
            if (cache / name).exists():
                os.rename(cache / name, trash)
            os.unlink(lock.path)
        finally:
            lock.release()
        shutil.rmtree(trash, ignore_errors=True)
        out["removed"].append(name)
    for stale in listing(cache, ".venv-*.removed-*"):
        shutil.rmtree(stale, ignore_errors=True)  # one an interrupted cleanup left
    with contextlib.suppress(OSError):
        cache.rmdir()  # only when empty: anything else there is not sb-fleet's to delete
    if out["busy"]:
        out["error"] = (
            f"{cache}: {', '.join(out['busy'])} in use by a deploy on a host that shares this cache "
            f"(its lock was held for {wait:g} s); left in place, run sb-fleet cleanup --cache again"
        )
    return out


def missing_imports(py: str) -> list[str]:
    code = (
        "import importlib.util,json;"
        f"print(json.dumps([m for m in {list(REQUIRED_IMPORTS)!r} if importlib.util.find_spec(m) is None]))"
    )
    out = run([py, "-c", code], timeout=120)
    return json.loads(out) if out else list(REQUIRED_IMPORTS)


def ensure_requirements(py: str, args: argparse.Namespace) -> str:
    """Install what the suite needs into ``py``'s environment; '' when ready, else why not."""
    missing = missing_imports(py)
    if args.install == "always" or (args.install == "auto" and missing):
        installing()
        r = subprocess.run(
            [py, "-m", "pip", "install", "-q", "-r", args.requirements],
            capture_output=True,
            text=True,
            check=False,
        )
        if r.returncode != 0:
            tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or [""]
            return f"pip install of the suite's requirements failed: {tail[0][:300]}"
        missing = missing_imports(py)
    if missing:
        return f"missing on the host: {', '.join(missing)} (install them, or set fleet.install_requirements to auto)"
    return ""


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
        "--host", default="", help="inventory name of this host: the workspace is marked as its own"
    )
    ap.add_argument(
        "--cache",
        default="",
        help="directory for caches hosts may share (the venv, keyed by the requirements' digest); "
        "empty: the venv lives in the workspace",
    )
    ap.add_argument(
        "--no-torch",
        action="store_true",
        help="the plan runs only host benchmarks (noop): skip the torch checks (no torch import)",
    )
    ap.add_argument(
        "--remove-cache",
        metavar="DIR",
        help="sb-fleet cleanup --cache: remove the shared venvs in DIR, each under its lock; prints JSON",
    )
    ap.add_argument(
        "--wait", type=float, default=60.0, help="--remove-cache: seconds to wait for a venv in use"
    )
    args = ap.parse_args(argv)
    if args.remove_cache:
        try:
            done = remove_cache(Path(os.path.expanduser(args.remove_cache)).absolute(), args.wait)
        except LockUnsupported as exc:
            done = {"cache": args.remove_cache, "error": str(exc)}
        print(json.dumps(done))
        return 1 if done.get("error") else 0
    facts: dict = {
        "hostname": os.uname().nodename,
        "os": os_name(),
        "python": sys.version.split()[0],
        "base_python": sys.executable,
        "workspace": os.getcwd(),
        "purelib": sysconfig.get_paths()["purelib"],
    }
    facts.update(cpu_facts())
    facts.update(gpu_facts())
    facts.update(power_facts())
    facts.update(component_facts())
    facts.update(pcie_facts())
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
    if args.host:
        try:
            claim_workspace(Path.cwd(), args.host)
        except (SharedWorkspace, LockUnsupported) as exc:
            return fail(str(exc))
    py = sys.executable
    try:
        if args.venv and args.cache:
            cache = Path(os.path.expanduser(args.cache)).absolute()
            target = cache / f"venv-{venv_key(sys.executable, Path(args.requirements))}"
            _lock, err = shared_venv(args, target)  # held (shared) until this process ends
            if err:
                return fail(err)
            link_venv(Path("venv"), target)
            facts["venv"] = str(target)
            py = str(Path.cwd() / "venv" / "bin" / "python")
        elif args.venv:
            py = make_venv(sys.executable, Path("venv"))
        facts["suite_python"] = py
        if args.no_torch:
            print(json.dumps(facts))
            return 0
        if not (args.venv and args.cache):
            err = ensure_requirements(py, args)
            if err:
                return fail(err)
    except LockUnsupported as exc:
        return fail(str(exc))
    except subprocess.CalledProcessError as exc:
        return fail(f"cannot build the venv: {(exc.stderr or str(exc)).strip()[:300]}")
    except OSError as exc:
        return fail(f"cannot set up the venv: {exc}")
    facts.update(torch_facts(py))
    if not facts.get("torch_version"):
        return fail(f"torch does not import: {facts.get('torch_error')}")
    print(json.dumps(facts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
