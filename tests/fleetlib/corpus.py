"""Real faults and machine conditions for recording loopback fleets (bench/record_corpus.py, tests/corpus).

Everything here acts on this machine for real and undoes only what it did, by pid or by the exact
qdisc it added:

- ``own_names``: each simulated host's sshd runs in its own UTS and mount namespaces, with its own
  hostname and an ``/etc/hosts`` that resolves it to the host's own 127.x address. Without
  ``GLOO_SOCKET_IFNAME``, torch's gloo binds the address the hostname resolves to, so a collective
  across hosts listens on each host's own address (shapeable with tc), not all on 127.0.0.1.
- ``BusyLoops``: CPU-bound processes (optionally pinned to one CPU), for background load and for a
  busy process beside one host's benchmark.
- ``pin_tree``: a host's sshd (and its sessions) pinned to CPUs with ``taskset -a -p``; every session and benchmark
  it starts afterwards inherits the affinity.
- ``CpuGroup``: a cpu cgroup of its own (one weight for everything in it, optionally at most one
  CPU's time): a host's sshd put in one beside a busy process gets half of what a host alone gets,
  however loaded the machine is.
- ``shaped_link``: htb on ``lo`` for every packet from or to one address (ENVIRONMENT.md's recipe).
- ``SLOW_PYTHON_ENV``: the environment of a slowed interpreter, for one host's login sessions
  (``SshFleet(host_env=...)``; the run playbook sets PYTHONPATH itself, so a sitecustomize cannot
  be slipped in that way).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from . import descendants

BUSY = "while True:\n    pass\n"


def loadavg() -> tuple[float, float, float]:
    return os.getloadavg()


def cpu_busy(window: float = 3.0) -> float:
    """The fraction of all CPUs' time spent busy (not idle, not waiting for I/O) over ``window`` seconds,
    from /proc/stat: what runs now, unlike the load average, which still carries the last minute's run."""

    def sample() -> tuple[int, int]:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        return sum(fields[:8]), idle

    total0, idle0 = sample()
    time.sleep(window)
    total1, idle1 = sample()
    elapsed = total1 - total0
    return 0.0 if elapsed <= 0 else 1.0 - (idle1 - idle0) / elapsed


def wait_quiet(busy_below: float = 0.15, max_wait: float = 120.0, window: float = 3.0) -> tuple[float, float]:
    """Wait until the machine is quiet: the CPUs measured busy less than ``busy_below`` of their time over
    ``window`` seconds (at most ``max_wait`` s in all).

    Returns (seconds waited, the busy fraction when the wait ended)."""
    t0 = time.monotonic()
    while True:
        busy = cpu_busy(window)
        waited = time.monotonic() - t0
        if busy < busy_below or waited >= max_wait:
            return round(waited, 1), round(busy, 3)


def own_names(fleet_dir: Path, hosts: dict[str, str]) -> Callable[[str], list[str]]:
    """An ``sshd_wrap`` for SshFleet: host ``name`` gets the hostname ``name`` and an /etc/hosts
    naming every host of ``hosts`` (name -> address), in namespaces of its own."""
    table = "127.0.0.1 localhost\n" + "".join(f"{addr} {name}\n" for name, addr in hosts.items())
    for name in hosts:
        path = fleet_dir / f"etc-hosts-{name}"
        path.write_text(table)
        os.chmod(path, 0o644)

    def wrap(tag: str) -> list[str]:
        if tag not in hosts:
            return []
        script = 'hostname "$1" && mount --bind "$2" /etc/hosts && shift 2 && exec "$@"'
        return [
            "unshare",
            "--uts",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "sb-host-ns",
            tag,
            str(fleet_dir / f"etc-hosts-{tag}"),
        ]

    return wrap


class BusyLoops:
    """``n`` busy Python processes, each pinned to ``cpu`` when given; stopped by pid on exit.

    Each runs in a session of its own: with the kernel's autogroup scheduling (enabled here,
    /proc/sys/kernel/sched_autogroup_enabled) CPU time is shared between sessions before processes,
    and every SSH command on a simulated host is a session, so a busy loop left in the recorder's
    session would share one session's weight with sb-fleet and Ansible instead of weighing as much as
    a host."""

    def __init__(self, n: int, cpu: int | None = None, nice: int = 0):
        self.n, self.cpu, self.nice = n, cpu, nice
        self.procs: list[subprocess.Popen] = []

    def start(self) -> BusyLoops:
        for _ in range(self.n):
            argv = [sys.executable, "-c", BUSY]
            if self.nice:
                argv = ["nice", "-n", str(self.nice), *argv]
            if self.cpu is not None:
                argv = ["taskset", "-c", str(self.cpu), *argv]
            self.procs.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL, start_new_session=True))
        return self

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs.clear()

    def __enter__(self) -> BusyLoops:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def affinity(pid: int) -> str:
    r = subprocess.run(["taskset", "-c", "-p", str(pid)], capture_output=True, text=True, check=True)
    return r.stdout.rsplit(":", 1)[-1].strip()


def pin_tree(pid: int, cpus: str) -> dict[int, str]:
    """Pin a process and everything below it (all their threads) to ``cpus``: a host's sshd and the
    sessions it already has (Ansible's multiplexed connections outlive a run), so that everything the
    host starts afterwards inherits the affinity. Returns each pinned pid's former affinity."""
    before = {}
    for p in [pid, *descendants(pid)]:
        try:
            before[p] = affinity(p)
            subprocess.run(["taskset", "-a", "-c", "-p", cpus, str(p)], capture_output=True, check=True)
        except subprocess.CalledProcessError:
            continue  # gone meanwhile
    return before


class CpuGroup:
    """A cgroup (v1 ``cpu`` controller) of its own: the processes in it, and every process they start
    afterwards, share one weight (``cpu.shares``, by default that of one ordinary process) against the
    rest of the machine. On exit every process still in it goes back to the root group and the group is
    removed."""

    def __init__(
        self,
        name: str,
        shares: int = 1024,
        cpus: float | None = None,
        period_us: int = 5000,
        root: Path = Path("/sys/fs/cgroup/cpu"),
    ):
        self.root = root
        self.path = root / name
        self.shares = shares
        self.cpus = cpus  # at most this many CPUs' time in all (CFS quota), None: no cap
        # The quota's period: short, so that each of a benchmark's timed samples (>= 20 ms) sees the cap
        # as an even share rather than full speed, then a stop (the default period is 100 ms).
        self.period_us = period_us

    def __enter__(self) -> CpuGroup:
        if not (self.root / "cpu.shares").exists():
            raise RuntimeError(f"no cgroup v1 cpu controller at {self.root}")
        self.path.mkdir(exist_ok=True)
        (self.path / "cpu.shares").write_text(str(self.shares))
        if self.cpus is not None:
            (self.path / "cpu.cfs_quota_us").write_text("-1")
            (self.path / "cpu.cfs_period_us").write_text(str(self.period_us))
            (self.path / "cpu.cfs_quota_us").write_text(str(int(self.period_us * self.cpus)))
        return self

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def add_tree(self, pid: int) -> list[int]:
        """The process and everything below it (see pin_tree); returns the pids moved."""
        moved = []
        for p in [pid, *descendants(pid)]:
            with contextlib.suppress(OSError):
                self.add(p)
                moved.append(p)
        return moved

    def pids(self) -> list[int]:
        return [int(x) for x in (self.path / "cgroup.procs").read_text().split()]

    def __exit__(self, *exc: object) -> None:
        for _ in range(3):
            for pid in self.pids():
                with contextlib.suppress(OSError):
                    (self.root / "cgroup.procs").write_text(str(pid))
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.2)


@contextlib.contextmanager
def shaped_link(addr: str, rate: str, dev: str = "lo") -> Iterator[list[str]]:
    """Every packet from or to ``addr`` on ``dev`` through an htb class of ``rate``; the qdisc is
    removed on exit, pass or fail. Yields the tc commands that planted it. Refuses to replace a
    root qdisc someone else put on the device."""
    if not shutil.which("tc"):
        raise RuntimeError("tc is not installed (apt-get install -y iproute2)")
    shown = subprocess.run(["tc", "qdisc", "show", "dev", dev], capture_output=True, text=True).stdout
    if "htb" in shown or "tbf" in shown:
        raise RuntimeError(f"{dev} already has a shaping qdisc ({shown.strip()}); not touching it")
    cmds = [
        ["tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "10"],
        ["tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:10", "htb", "rate", "100gbit"],
        [
            "tc",
            "class",
            "add",
            "dev",
            dev,
            "parent",
            "1:",
            "classid",
            "1:20",
            "htb",
            "rate",
            rate,
            "ceil",
            rate,
        ],
    ]
    for field in ("dst", "src"):
        cmds.append(
            ["tc", "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32"]
            + ["match", "ip", field, f"{addr}/32", "flowid", "1:20"]
        )
    try:
        for c in cmds:
            subprocess.run(c, check=True, capture_output=True, text=True)
        yield [" ".join(c) for c in cmds]
    finally:
        subprocess.run(["tc", "qdisc", "del", "dev", dev, "root"], capture_output=True)


# A slowed interpreter: every Python process of the host traces each memory allocation (a documented
# CPython setting, left on by a debugging session). Measured here: an empty function call 68 -> 372 ns,
# a small dict and str 0.66 -> 8.7 us, a torch op from Python 5.3 -> 9.0 us, `import torch` 3.2 -> 7.8 s;
# C kernels (GEMM, gloo) unaffected. PYTHONTRACEMALLOC=25 (25 frames per allocation) made `import torch`
# take two minutes: too slow to finish the benchmarks within their timeouts.
SLOW_PYTHON_ENV = {"PYTHONTRACEMALLOC": "1"}
