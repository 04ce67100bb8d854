"""ib-loopback: InfiniBand loopback bandwidth of the host's RDMA devices, with perftest.

Runs perftest's ``ib_<cmd>_bw`` (write, read or send) as a server and a client on this host over
one device (``-d <dev>``, ``--report_gbits``) and reports, in GB/s (1e9 bytes/s: Gb/sec / 8):

* ``ib_<cmd>_bw_<msg_size>:<index>``: average bandwidth (BW average), SuperBench's current name;
* ``ib_<cmd>_bw_<msg_size>_peak:<index>``: peak bandwidth (BW peak; SuperBench reports none).

perftest's ``MB/sec`` (printed without ``--report_gbits``) is MiB/s: the parser converts it with
2**20 bytes (SuperBench's old ``/ 1000`` read 4.9% low).

Devices: the names under ``/sys/class/infiniband`` in natural order (mlx5_2 before mlx5_10) with a
port whose ``link_layer`` is ``InfiniBand`` (Ethernet/RoCE ports are left out unless
``link_layer: any``). Which are tested: ``ib_index`` when given; else ``IB_DEVICES`` indexed by
``PROC_RANK`` (SuperBench's environment); else, with several local processes, the device of index
``PROC_RANK``; else every device, one after the other, in this process. ``NUMA_NODES`` (same
indexing) binds both processes with ``numactl`` where it is installed. Without perftest or without
an RDMA device the benchmark is skipped with the reason. The parser is pure and has golden tests.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

from sb_bench.core.benchmark import Benchmark, CheckFailed, SkipBenchmark
from sb_bench.core.context import RankContext
from sb_bench.core.metric import Metric, Param
from sb_bench.core.registry import register
from sb_bench.micro.parsers import ParseError
from sb_bench.micro.parsers.perftest import error_summary, parse_bw, row_for

SYSFS_IB = "/sys/class/infiniband"
COMMANDS = ("write", "read", "send")
LINK_LAYERS = ("InfiniBand", "Ethernet", "any")


def natural_key(name: str) -> list:
    """Sort key that orders digit runs by value: mlx5_2 < mlx5_10."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def link_layers(dev: Path) -> set[str]:
    out = set()
    try:
        for port in (dev / "ports").iterdir():
            try:
                out.add((port / "link_layer").read_text().strip())
            except OSError:
                continue
    except OSError:
        pass
    return out


def rdma_devices(root: str | None = None, link_layer: str = "InfiniBand") -> list[str]:
    """RDMA device names in natural order, those with a port of ``link_layer`` (``any``: all)."""
    p = Path(root or SYSFS_IB)
    try:
        devs = sorted((d for d in p.iterdir()), key=lambda d: natural_key(d.name))
    except OSError:
        return []
    return [d.name for d in devs if link_layer == "any" or link_layer in link_layers(d)]


def _env_pick(var: str, rank: int) -> int | None:
    items = [x for x in os.environ.get(var, "").split(",") if x.strip()]
    if not items:
        return None
    return int(items[rank % len(items)])


def metric_names(cmd: str, size: int, index: int) -> tuple[str, str]:
    """SuperBench's current name (``ib_write_bw_8388608:0``) and the peak's."""
    return f"ib_{cmd}_bw_{size}:{index}", f"ib_{cmd}_bw_{size}_peak:{index}"


@register
class IbLoopback(Benchmark):
    name = "ib-loopback"
    description = (
        "RDMA loopback bandwidth of the InfiniBand devices with perftest; metrics "
        "ib_<cmd>_bw_<bytes>:<index> (average) and ib_<cmd>_bw_<bytes>_peak:<index> (GB/s)"
    )
    params = {
        "commands": Param("list[str]", ["write"], "perftest tests: ib_<cmd>_bw", COMMANDS),
        "msg_size": Param("size", 8388608, "message size (bytes)"),
        "iters": Param("int", 2000, "iterations per measurement (perftest -n)"),
        "ib_index": Param(
            "int",
            -1,
            "device index (-1: IB_DEVICES[PROC_RANK]; else PROC_RANK with several processes; else all)",
        ),
        "link_layer": Param("str", "InfiniBand", "ports to test (RoCE: Ethernet)", LINK_LAYERS),
        "port": Param(
            "int", 18515, "TCP port of perftest's exchange (plus the index, so ranks do not clash)"
        ),
        "gid_index": Param("int", -1, "GID index for RoCE (perftest -x; -1: perftest's default)"),
        "timeout": Param("float", 120.0, "seconds allowed for one server/client pair"),
        "device": Param("str", "host", "always the host: an external tool, no torch import", ("host",)),
    }

    def _indices(self) -> list[int]:
        if self.args["ib_index"] >= 0:
            return [self.args["ib_index"]]
        rank = int(os.environ.get("PROC_RANK", os.environ.get("LOCAL_RANK", "0")) or 0)
        picked = _env_pick("IB_DEVICES", rank)
        if picked is not None:
            return [picked]
        if int(os.environ.get("PROC_NUM", os.environ.get("LOCAL_WORLD_SIZE", "1")) or 1) > 1:
            return [rank]
        return list(range(len(rdma_devices(SYSFS_IB, self.args["link_layer"])))) or [0]

    def metrics(self) -> list[Metric]:
        size = self.args["msg_size"]
        out = []
        for i in self._indices():
            for cmd in self.args["commands"]:
                avg, peak = metric_names(cmd, size, i)
                # The device index is in the name and one rank tests each device: "max" keeps the
                # node's column as SuperBench names it (ib_write_bw_8388608:3), with no :<rank> added.
                out += [
                    Metric(avg, "GB/s", True, "max", f"ib_{cmd}_bw average, device {i}"),
                    Metric(peak, "GB/s", True, "max", f"ib_{cmd}_bw peak, device {i}"),
                ]
        return out

    def setup(self, ctx: RankContext) -> None:
        missing = [f"ib_{c}_bw" for c in self.args["commands"] if not shutil.which(f"ib_{c}_bw")]
        if missing:
            raise SkipBenchmark(
                f"perftest's {', '.join(missing)} not installed (Debian/Ubuntu package perftest)"
            )
        layer = self.args["link_layer"]
        devs = rdma_devices(SYSFS_IB, layer)
        if not devs:
            what = "RDMA device" if layer == "any" else f"RDMA device with an {layer} port"
            raise SkipBenchmark(f"no {what} ({SYSFS_IB} is empty or absent)")
        self.targets: list[tuple[int, str]] = []
        for i in self._indices():
            if i >= len(devs):
                raise SkipBenchmark(
                    f"device index {i} but this host has {len(devs)} {layer} RDMA device(s): {', '.join(devs)}"
                )
            self.targets.append((i, devs[i]))
        self.prefix: list[str] = []
        rank = int(os.environ.get("PROC_RANK", os.environ.get("LOCAL_RANK", "0")) or 0)
        numa = _env_pick("NUMA_NODES", rank)
        if numa is not None and shutil.which("numactl"):
            self.prefix = ["numactl", f"--cpunodebind={numa}", f"--membind={numa}"]

    def _argv(self, cmd: str, client: bool, index: int, device: str) -> list[str]:
        a = self.args
        argv = [
            *self.prefix,
            f"ib_{cmd}_bw",
            "-d",
            device,
            "-s",
            str(a["msg_size"]),
            "-n",
            str(a["iters"]),
            "-F",
            "--report_gbits",
            "-p",
            str(a["port"] + index),
        ]
        if a["gid_index"] >= 0:
            argv += ["-x", str(a["gid_index"])]
        return [*argv, "localhost"] if client else argv

    def run_once(self, ctx: RankContext, harness) -> dict[str, float]:
        values: dict[str, float] = {}
        for index, device in self.targets:
            for cmd in self.args["commands"]:
                text = self._run_pair(cmd, index, device)
                try:
                    row = row_for(parse_bw(text), self.args["msg_size"])
                except ParseError as exc:
                    raise CheckFailed(f"ib_{cmd}_bw on {device}: {exc}") from None
                avg, peak = metric_names(cmd, self.args["msg_size"], index)
                values[avg] = row.avg_gbps
                values[peak] = row.peak_gbps
        return values

    def _run_pair(self, cmd: str, index: int, device: str) -> str:
        """Start the server, run the client until it connects; the client's output."""
        deadline = time.monotonic() + self.args["timeout"]
        server = subprocess.Popen(
            self._argv(cmd, False, index, device),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            while True:
                client = subprocess.run(
                    self._argv(cmd, True, index, device),
                    capture_output=True,
                    text=True,
                    timeout=max(1.0, deadline - time.monotonic()),
                )
                out = client.stdout + client.stderr
                if client.returncode == 0:
                    return out
                # The server may not listen yet: retry while it is alive and time remains.
                if server.poll() is not None or time.monotonic() > deadline - 1:
                    srv = server.stdout.read() if server.stdout else ""
                    raise RuntimeError(
                        f"ib_{cmd}_bw on {device} failed: "
                        f"{error_summary(out) or error_summary(srv) or out.strip()[-200:]}"
                    )
                time.sleep(0.5)
        finally:
            if server.poll() is None:
                os.killpg(server.pid, 15)
                try:
                    server.wait(5)
                except subprocess.TimeoutExpired:
                    os.killpg(server.pid, 9)
                    server.wait()


if __name__ == "__main__":
    import sys

    from sb_bench.__main__ import standalone_main

    sys.exit(standalone_main(IbLoopback.name))
