"""A real Slurm cluster on this machine for tests (see shared ENVIRONMENT.md): a private munged, one
slurmctld and one ``slurmd -N nodeK`` per node, each node with its own loopback NodeAddr and Port, all
from the test's own slurm.conf (``SLURM_CONF``). Needs root and Debian's slurmctld, slurmd,
slurm-client and munge. Readiness is polled; daemons are stopped by the pids in their pid files."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from tests.fleetlib import free_port


def _pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


class SlurmCluster:
    def __init__(
        self, addrs: list[str], partition: str = "gpu", prefix: str = "slnode", root: Path | None = None
    ):
        self.n = len(addrs)
        self.addrs = list(addrs)
        self.partition = partition
        self.dir = Path(root) if root else Path(tempfile.mkdtemp(prefix="sb-slurm-"))
        os.chmod(self.dir, 0o755)
        self.conf = self.dir / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.names = [f"{prefix}{i + 1}" for i in range(self.n)]

    def addr(self, i: int) -> str:
        return self.addrs[i]

    def _write_conf(self) -> None:
        d = self.dir
        ctl_port = free_port()
        lines = [
            "ClusterName=sbtest",
            f"SlurmctldHost={socket.gethostname().split('.')[0]}(127.0.0.1)",
            f"SlurmctldPort={ctl_port}",
            "AuthType=auth/munge",
            f"AuthInfo=socket={d}/munge/munge.sock",
            "SlurmUser=root",
            f"StateSaveLocation={d}/state",
            f"SlurmdSpoolDir={d}/spool-%n",
            f"SlurmctldPidFile={d}/slurmctld.pid",
            f"SlurmdPidFile={d}/slurmd-%n.pid",
            f"SlurmctldLogFile={d}/slurmctld.log",
            f"SlurmdLogFile={d}/slurmd-%n.log",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "ReturnToService=2",
            "MpiDefault=none",
            "AccountingStorageType=accounting_storage/none",
            "SlurmdTimeout=30",
        ]
        for i, name in enumerate(self.names):
            lines.append(f"NodeName={name} NodeAddr={self.addr(i)} Port={free_port()} CPUs=1 RealMemory=200")
        lines.append(f"PartitionName={self.partition} Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
        self.conf.write_text("\n".join(lines) + "\n")
        (d / "state").mkdir()

    def _munged(self) -> None:
        m = self.dir / "munge"
        m.mkdir()
        shutil.chown(m, "munge", "munge")
        os.chmod(m, 0o755)
        subprocess.run(
            [
                "runuser", "-u", "munge", "--", "munged",
                "--socket", str(m / "munge.sock"),
                "--pid-file", str(m / "munged.pid"),
                "--log-file", str(m / "munged.log"),
                "--seed-file", str(m / "munged.seed"),
            ],
            check=True, capture_output=True, timeout=30,
        )  # fmt: skip
        self._wait(lambda: (m / "munge.sock").exists(), "munged socket")

    def _wait(self, ok, what: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ok():
                return
            time.sleep(0.1)
        logs = "\n".join(
            f"--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted(self.dir.glob("*.log")) if p.is_file()
        )
        raise TimeoutError(f"slurm test cluster: {what} not ready after {timeout}s\n{logs}")

    def sh(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv), env=self.env, capture_output=True, text=True, timeout=60, check=check
        )

    def start(self) -> SlurmCluster:
        self._write_conf()
        self._munged()
        subprocess.run(["slurmctld", "-f", str(self.conf), "-i"], env=self.env, check=True, timeout=30)
        for name in self.names:
            subprocess.run(["slurmd", "-f", str(self.conf), "-N", name], env=self.env, check=True, timeout=30)

        def all_idle() -> bool:
            r = self.sh("sinfo", "-h", "-N", "-o", "%N %T", check=False)
            states = dict(ln.split() for ln in r.stdout.splitlines() if len(ln.split()) == 2)
            return len(states) == self.n and all(s == "idle" for s in states.values())

        self._wait(all_idle, "all nodes idle")
        return self

    def states(self) -> dict[str, tuple[str, str]]:
        r = self.sh("sinfo", "-h", "-N", "-o", "%N|%T|%E")
        out = {}
        for ln in r.stdout.splitlines():
            n, s, reason = ln.split("|", 2)
            out[n] = (s.rstrip("*~#%$@^-!"), reason)  # flags such as * (not responding this moment)
        return out

    def stop(self) -> None:
        pids = [_pid(self.dir / f"slurmd-{n}.pid") for n in self.names]
        pids += [_pid(self.dir / "slurmctld.pid"), _pid(self.dir / "munge" / "munged.pid")]
        for pid in pids:
            if pid:
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 20
        for pid in pids:
            while pid and time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
                time.sleep(0.05)
            if pid and Path(f"/proc/{pid}").exists():
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.dir, ignore_errors=True)
