"""ib-loopback: InfiniBand/RoCE loopback bandwidth of one RDMA device, with perftest.

Runs perftest's ``ib_<cmd>_bw`` (write, read or send) as a server and a client on this host over
one device (``-d <dev>``) and reports, in GB/s (perftest's MB/sec / 1000, as SuperBench reports):

* ``ib_<cmd>_<msg_size>_ib<index>_bw``: average bandwidth (RDMA_Avg; SuperBench's name);
* ``ib_<cmd>_<msg_size>_ib<index>_peak_bw``: peak bandwidth (RDMA_Peak).

Device: ``ib_index`` (default: SuperBench's environment, ``IB_DEVICES`` indexed by ``PROC_RANK``,
else ``PROC_RANK``) into the sorted names of ``/sys/class/infiniband``; ``NUMA_NODES`` (same
indexing) binds both processes with ``numactl`` where it is installed. Without perftest or without
an RDMA device the benchmark is skipped with the reason. The parser is pure and has golden tests.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from sb_bench.benchmark import Benchmark, CheckFailed, SkipBenchmark
from sb_bench.context import RankContext
from sb_bench.metric import Metric, Param
from sb_bench.micro.parsers import ParseError
from sb_bench.micro.parsers.perftest import error_summary, parse_bw, row_for
from sb_bench.registry import register

SYSFS_IB = "/sys/class/infiniband"
COMMANDS = ("write", "read", "send")


def rdma_devices(root: str | None = None) -> list[str]:
    p = Path(root or SYSFS_IB)
    try:
        return sorted(d.name for d in p.iterdir())
    except OSError:
        return []


def _env_pick(var: str, rank: int) -> int | None:
    items = [x for x in os.environ.get(var, "").split(",") if x.strip()]
    if not items:
        return None
    return int(items[rank % len(items)])


def metric_names(cmd: str, size: int, index: int) -> tuple[str, str]:
    return f"ib_{cmd}_{size}_ib{index}_bw", f"ib_{cmd}_{size}_ib{index}_peak_bw"


@register
class IbLoopback(Benchmark):
    name = "ib-loopback"
    description = (
        "RDMA loopback bandwidth of one IB/RoCE device with perftest; metrics "
        "ib_<cmd>_<bytes>_ib<index>_bw (average) and _peak_bw (GB/s)"
    )
    params = {
        "commands": Param("list[str]", ["write"], "perftest tests: ib_<cmd>_bw", COMMANDS),
        "msg_size": Param("size", 8388608, "message size (bytes)"),
        "iters": Param("int", 2000, "iterations per measurement (perftest -n)"),
        "ib_index": Param("int", -1, "device index (-1: IB_DEVICES[PROC_RANK], else PROC_RANK)"),
        "port": Param(
            "int", 18515, "TCP port of perftest's exchange (plus the index, so ranks do not clash)"
        ),
        "gid_index": Param("int", -1, "GID index for RoCE (perftest -x; -1: perftest's default)"),
        "timeout": Param("float", 120.0, "seconds allowed for one server/client pair"),
        "device": Param("str", "host", "always the host: an external tool, no torch import", ("host",)),
    }

    def _index(self) -> int:
        if self.args["ib_index"] >= 0:
            return self.args["ib_index"]
        rank = int(os.environ.get("PROC_RANK", os.environ.get("LOCAL_RANK", "0")) or 0)
        picked = _env_pick("IB_DEVICES", rank)
        return rank if picked is None else picked

    def metrics(self) -> list[Metric]:
        i, size = self._index(), self.args["msg_size"]
        out = []
        for cmd in self.args["commands"]:
            avg, peak = metric_names(cmd, size, i)
            out += [
                Metric(avg, "GB/s", True, None, f"ib_{cmd}_bw average, device {i}"),
                Metric(peak, "GB/s", True, None, f"ib_{cmd}_bw peak, device {i}"),
            ]
        return out

    def setup(self, ctx: RankContext) -> None:
        missing = [f"ib_{c}_bw" for c in self.args["commands"] if not shutil.which(f"ib_{c}_bw")]
        if missing:
            raise SkipBenchmark(
                f"perftest's {', '.join(missing)} not installed (Debian/Ubuntu package perftest)"
            )
        devs = rdma_devices()
        if not devs:
            raise SkipBenchmark(f"no RDMA device ({SYSFS_IB} is empty or absent)")
        i = self._index()
        if i >= len(devs):
            raise SkipBenchmark(
                f"device index {i} but this host has {len(devs)} RDMA device(s): {', '.join(devs)}"
            )
        self.device = devs[i]
        self.prefix: list[str] = []
        rank = int(os.environ.get("PROC_RANK", os.environ.get("LOCAL_RANK", "0")) or 0)
        numa = _env_pick("NUMA_NODES", rank)
        if numa is not None and shutil.which("numactl"):
            self.prefix = ["numactl", f"--cpunodebind={numa}", f"--membind={numa}"]

    def _argv(self, cmd: str, client: bool) -> list[str]:
        a = self.args
        argv = [
            *self.prefix,
            f"ib_{cmd}_bw",
            "-d",
            self.device,
            "-s",
            str(a["msg_size"]),
            "-n",
            str(a["iters"]),
            "-F",
            "-p",
            str(a["port"] + self._index()),
        ]
        if a["gid_index"] >= 0:
            argv += ["-x", str(a["gid_index"])]
        return [*argv, "localhost"] if client else argv

    def run_once(self, ctx: RankContext, harness) -> dict[str, float]:
        values: dict[str, float] = {}
        for cmd in self.args["commands"]:
            text = self._run_pair(cmd)
            try:
                row = row_for(parse_bw(text), self.args["msg_size"])
            except ParseError as exc:
                raise CheckFailed(f"ib_{cmd}_bw on {self.device}: {exc}") from None
            avg, peak = metric_names(cmd, self.args["msg_size"], self._index())
            values[avg] = row.avg_gbps
            values[peak] = row.peak_gbps
        return values

    def _run_pair(self, cmd: str) -> str:
        """Start the server, run the client until it connects; the client's output."""
        deadline = time.monotonic() + self.args["timeout"]
        server = subprocess.Popen(
            self._argv(cmd, False),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            while True:
                client = subprocess.run(
                    self._argv(cmd, True),
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
                        f"ib_{cmd}_bw on {self.device} failed: "
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
