"""disk-benchmark: sequential and random read / write / read-write with fio, in SuperBench's names.

Targets: ``block_devices`` (e.g. ``/dev/nvme0n1``) and/or a ``directory`` (fio works on a file of
``file_size`` bytes there, removed afterwards). Tests: ``seq_read``, ``seq_write``,
``seq_read_write``, ``rand_read``, ``rand_write``, ``rand_read_write`` (70% reads), each for
``runtime`` seconds, ``seq_block_size`` / ``rand_block_size``, ``iodepth``, ``numjobs``, direct I/O
(``direct: false`` where the filesystem refuses O_DIRECT, e.g. tmpfs).

Metrics per target ``<disk>`` (a device's name, or ``disk_name``/the directory's name) and test:

* ``<disk>_<test>_bs`` (bytes): the block size;
* ``<disk>_<test>_<read|write>_iops``, ``..._bw`` (MB/s, 1e6);
* ``<disk>_<test>_<read|write>_lat_ns_95.0`` / ``_99.0`` / ``_99.9``: completion latency percentiles.

Data safety: read tests on a block device run with fio's ``--readonly``. A test that writes to a
block device runs only when the device holds no filesystem, partition table or RAID/LVM signature
(``blkid -p``), has no partitions, no holders and is not mounted — or when ``force: true`` says
its data may be destroyed. Without ``blkid`` the device is assumed to hold data. Writes to a
``directory`` touch only the benchmark's own file.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from sb_bench.core.benchmark import Benchmark, CheckFailed, SkipBenchmark
from sb_bench.core.context import RankContext
from sb_bench.core.metric import Metric, Param
from sb_bench.core.registry import register
from sb_bench.micro.parsers import ParseError
from sb_bench.micro.parsers import fio as fio_parser

TESTS = {  # name -> (fio rw, directions reported)
    "seq_read": ("read", ("read",)),
    "seq_write": ("write", ("write",)),
    "seq_read_write": ("rw", ("read", "write")),
    "rand_read": ("randread", ("read",)),
    "rand_write": ("randwrite", ("write",)),
    "rand_read_write": ("randrw", ("read", "write")),
}
WRITES = {"seq_write", "seq_read_write", "rand_write", "rand_read_write"}


def disk_label(target: str, is_dir: bool, given: str = "") -> str:
    if given:
        return given
    base = os.path.basename(os.path.normpath(target)) or "root"
    return re.sub(r"[^A-Za-z0-9.-]+", "-", base) if is_dir else base


def unsafe_reason(dev: str) -> str | None:
    """Why writing to block device ``dev`` could destroy data (None: it looks blank and unused)."""
    real = os.path.realpath(dev)
    name = os.path.basename(real)
    sysdir = Path("/sys/class/block") / name
    if not Path(real).exists():
        return f"{dev} does not exist"
    parts = [p.name for p in sysdir.iterdir() if (p / "partition").exists()] if sysdir.exists() else []
    if parts:
        return f"{dev} has partitions ({', '.join(sorted(parts))})"
    holders = list((sysdir / "holders").iterdir()) if (sysdir / "holders").exists() else []
    if holders:
        return f"{dev} is held by {', '.join(h.name for h in holders)} (LVM, RAID or dm)"
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        mounts = []
    for line in mounts:
        src = line.split()[0]
        if src.startswith("/") and os.path.realpath(src) == real:
            return f"{dev} is mounted on {line.split()[1]}"
    blkid = shutil.which("blkid")
    if not blkid:
        return "blkid is not installed, so the device cannot be shown to be blank"
    proc = subprocess.run([blkid, "-p", "-o", "export", real], capture_output=True, text=True, timeout=30)
    found = dict(ln.split("=", 1) for ln in proc.stdout.splitlines() if "=" in ln)
    for key in ("TYPE", "PTTYPE"):
        if key in found:
            return f"{dev} holds {key}={found[key]}"
    if proc.returncode not in (0, 2):  # 2: nothing found
        return f"blkid -p {dev} failed ({proc.stderr.strip()[:100] or proc.returncode})"
    return None


@register
class DiskBenchmark(Benchmark):
    name = "disk-benchmark"
    description = (
        "fio sequential/random read, write, read-write per disk; metrics <disk>_<test>_bs, "
        "<disk>_<test>_<read|write>_iops, _bw (MB/s), _lat_ns_95.0/99.0/99.9"
    )
    params = {
        "block_devices": Param("list[str]", [], "block devices to test (read tests are read-only)"),
        "directory": Param("str", "", "a directory to test through a file (empty: none)"),
        "disk_name": Param("str", "", "name of the directory target in metric names (default: its basename)"),
        "tests": Param("list[str]", list(TESTS), "fio tests to run", tuple(TESTS)),
        "runtime": Param("int", 60, "seconds per test"),
        "file_size": Param(
            "size", 1 << 30, "bytes of the test file in a directory / of the device span used"
        ),
        "seq_block_size": Param("size", 128 << 10, "block size of sequential tests"),
        "rand_block_size": Param("size", 4 << 10, "block size of random tests"),
        "iodepth": Param("int", 64, "I/Os in flight per job"),
        "numjobs": Param("int", 1, "parallel fio jobs per test"),
        "ioengine": Param("str", "libaio", "fio ioengine (libaio, io_uring, psync, ...)"),
        "direct": Param("bool", True, "O_DIRECT (bypass the page cache)"),
        "force": Param("bool", False, "allow write tests on a block device that holds data (destroys it)"),
        "device": Param("str", "host", "always the host: an external tool, no torch import", ("host",)),
    }

    def _targets(self) -> list[tuple[str, str, bool]]:
        out = [(dev, disk_label(dev, False), False) for dev in self.args["block_devices"]]
        if self.args["directory"]:
            d = self.args["directory"]
            out.append((d, disk_label(d, True, self.args["disk_name"]), True))
        return out

    def metrics(self) -> list[Metric]:
        out = []
        for _, disk, _ in self._targets():
            for test in self.args["tests"]:
                out.append(Metric(f"{disk}_{test}_bs", "bytes", True, None, f"{test} block size"))
                for d in TESTS[test][1]:
                    p = f"{disk}_{test}_{d}"
                    out += [
                        Metric(f"{p}_iops", "IOPS", True, None, f"{test} {d} IOPS"),
                        Metric(f"{p}_bw", "MB/s", True, None, f"{test} {d} bandwidth"),
                    ]
                    out += [
                        Metric(f"{p}_lat_ns_{q}", "ns", False, None, f"{test} {d} completion latency p{q}")
                        for q in fio_parser.PERCENTILES
                    ]
        return out

    def setup(self, ctx: RankContext) -> None:
        if not self._targets():
            raise SkipBenchmark("no target: set block_devices or directory")
        self.fio = shutil.which("fio")
        if not self.fio:
            raise SkipBenchmark("fio is not installed (Debian/Ubuntu package fio)")
        self.blocked: dict[str, str] = {}
        for target, disk, is_dir in self._targets():
            if is_dir:
                if not os.path.isdir(target):
                    raise ValueError(f"directory {target!r} does not exist")
                continue
            if not os.path.exists(target):
                raise ValueError(f"block device {target!r} does not exist")
            writes = [t for t in self.args["tests"] if t in WRITES]
            if writes and not self.args["force"]:
                why = unsafe_reason(target)
                if why:
                    self.blocked[target] = why
                    names = [
                        m.name
                        for m in self.metrics()
                        if m.name.startswith(f"{disk}_")
                        and any(m.name.startswith(f"{disk}_{t}_") for t in writes)
                    ]
                    self.skip_metric(
                        names, f"write tests refused: {why} (set force: true to destroy its data)"
                    )

    def _fio_argv(self, target: str, is_dir: bool, test: str) -> list[str]:
        a = self.args
        rw = TESTS[test][0]
        bs = a["rand_block_size"] if test.startswith("rand") else a["seq_block_size"]
        argv = [
            self.fio,
            "--output-format=json",
            f"--name={test}",
            f"--rw={rw}",
            f"--bs={bs}",
            f"--iodepth={a['iodepth']}",
            f"--numjobs={a['numjobs']}",
            f"--ioengine={a['ioengine']}",
            f"--direct={int(a['direct'])}",
            f"--runtime={a['runtime']}",
            "--time_based",
            "--group_reporting",
            f"--size={a['file_size']}",
            "--percentile_list=95:99:99.9",
        ]
        if rw in ("rw", "randrw"):
            argv.append("--rwmixread=70")
        if is_dir:
            argv += [f"--directory={target}", f"--filename=sb-fio-{os.getpid()}.dat"]
        else:
            argv.append(f"--filename={target}")
            if test not in WRITES:
                argv.append("--readonly")
        return argv

    def run_once(self, ctx: RankContext, harness) -> dict[str, float]:
        values: dict[str, float] = {}
        for target, disk, is_dir in self._targets():
            for test in self.args["tests"]:
                if not is_dir and test in WRITES and target in self.blocked:
                    continue
                values.update(self._run_test(target, disk, is_dir, test))
        return values

    def _run_test(self, target: str, disk: str, is_dir: bool, test: str) -> dict[str, float]:
        argv = self._fio_argv(target, is_dir, test)
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=self.args["runtime"] + 600)
        finally:
            if is_dir:
                for f in Path(target).glob(f"sb-fio-{os.getpid()}.dat*"):
                    f.unlink(missing_ok=True)
        if proc.returncode != 0:
            raise RuntimeError(
                f"fio {test} on {target} exited {proc.returncode}: "
                f"{(proc.stderr or proc.stdout).strip()[-300:]}"
            )
        try:
            job = fio_parser.parse(proc.stdout)[0]
        except ParseError as exc:
            raise CheckFailed(f"fio {test} on {target}: {exc}") from None
        if job.error:
            raise RuntimeError(f"fio {test} on {target}: job error {job.error}")
        return to_metrics(disk, test, job)


def to_metrics(disk: str, test: str, job: fio_parser.Job) -> dict[str, float]:
    """SuperBench's disk-benchmark values from one parsed fio job."""
    out: dict[str, float] = {}
    for d in TESTS[test][1]:
        r = job.directions.get(d)
        if r is None:
            raise CheckFailed(f"fio {test}: no {d} I/O was done")
        p = f"{disk}_{test}_{d}"
        out[f"{p}_iops"] = r.iops
        out[f"{p}_bw"] = r.bw_bytes / 1e6
        for q, v in r.clat_ns_percentiles.items():
            out[f"{p}_lat_ns_{q}"] = v
        out[f"{disk}_{test}_bs"] = float(job.block_size[d])
    return out


if __name__ == "__main__":
    import sys

    from sb_bench.__main__ import standalone_main

    sys.exit(standalone_main(DiskBenchmark.name))
