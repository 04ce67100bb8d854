"""A real SSH fleet on loopback for tests and benchmarks (see shared ENVIRONMENT.md).

Every address 127.0.0.x is a distinct "host". ``SshFleet`` starts either one
sshd per host (so a test can kill, stop or firewall one host alone) or a
single sshd on 0.0.0.0 answering every address (hundreds of hosts on two
cores). Hosts log in as a dedicated unprivileged user with ``/bin/sh``.
The fleet writes its own known_hosts and an Ansible inventory; it stops only
the processes it started, by pid.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

USER = "sbtest"
SSHD = "/usr/sbin/sshd"


def ensure_user(user: str = USER) -> pwd.struct_passwd:
    """The unprivileged login user, created (and unlocked) if missing."""
    try:
        return pwd.getpwnam(user)
    except KeyError:
        r = subprocess.run(["useradd", "-m", "-s", "/bin/sh", user], capture_output=True, text=True)
        if r.returncode != 0:  # another test process (make test runs lanes side by side) may have won
            try:
                pwd.getpwnam(user)
            except KeyError:
                raise RuntimeError(f"useradd {user}: exit {r.returncode}: {r.stderr.strip()}") from None
        # useradd leaves the account locked; sshd without PAM refuses locked accounts.
        subprocess.run(["usermod", "-p", "*", user], check=True, capture_output=True)
        return pwd.getpwnam(user)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ssh(addr: str, port: int, timeout: float = 20.0) -> None:
    """Poll until an sshd answers with its banner (never a fixed sleep)."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((addr, port), timeout=1) as s:
                if s.recv(64).startswith(b"SSH-"):
                    return
        except OSError as exc:
            last = exc
        time.sleep(0.05)
    raise TimeoutError(f"sshd on {addr}:{port} not ready after {timeout}s ({last})")


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, their children, …)."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            ppid = int(Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


@dataclass
class FleetHost:
    name: str
    addr: str
    port: int
    workspace: str
    proc: subprocess.Popen | None = None
    extra_vars: dict[str, str] = field(default_factory=dict)


class SshFleet:
    def __init__(
        self,
        n: int,
        *,
        base: int = 10,
        shared_sshd: bool = False,
        python: str | None = None,
        root: Path | None = None,
        subnet: str = "127.0.1",
        check_torch: bool = True,
        path_prefix: str | None = None,
        sshd_wrap: Callable[[str], list[str]] | None = None,
        host_env: dict[str, dict[str, str]] | None = None,
    ):
        self.n = n
        self.shared = shared_sshd
        self.python = python or sys.executable
        self.dir = Path(root or tempfile.mkdtemp(prefix="sbf-fleet-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o755)
        self.subnet = subnet
        self.base = base
        self.user = ensure_user()
        self.hosts: list[FleetHost] = []
        self.procs: list[subprocess.Popen] = []
        self.ws_root = Path(self.user.pw_dir) / f"ws-{self.dir.name}"
        self.tmp_root = Path(self.user.pw_dir) / f"tmp-{self.dir.name}"  # each host's TMPDIR below it
        self.check_torch = check_torch
        # A directory put first on every login's PATH (a host whose tools are not what they seem).
        self.path_prefix = path_prefix
        self.rules: list[list[str]] = []  # iptables rules this fleet added (removed by heal/cleanup)
        self.mounts: list[Path] = []  # tmpfs mounts this fleet made (unmounted by cleanup)
        # A host's sshd started through a wrapper (argv before sshd's: e.g. its own namespaces), and extra
        # environment for its login sessions, per host name (tests/fleetlib/corpus.py uses both).
        self.sshd_wrap = sshd_wrap
        self.host_env = host_env or {}

    # -- keys and config -------------------------------------------------------------------------
    def _keys(self) -> None:
        for name in ("hostkey", "client"):
            p = self.dir / name
            if not p.exists():
                subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(p)], check=True)
        shutil.copy(self.dir / "client.pub", self.dir / "authorized_keys")
        os.chmod(self.dir / "authorized_keys", 0o644)
        os.chmod(self.dir / "hostkey", 0o600)

    def _sshd_config(self) -> Path:
        cfg = self.dir / "sshd_config"
        cfg.write_text(
            f"HostKey {self.dir / 'hostkey'}\n"
            f"AuthorizedKeysFile {self.dir / 'authorized_keys'}\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
            "PidFile none\nSubsystem sftp /usr/lib/openssh/sftp-server\nMaxStartups 1000:30:2000\n"
            f"AllowUsers {USER}\nLogLevel ERROR\nMaxSessions 100\n"
        )
        return cfg

    def addr(self, i: int) -> str:
        """The address of host ``i``: ``<subnet>.<base + i>``, spilling into the next /24s past .254."""
        k = self.base + i
        if k < 255:
            return f"{self.subnet}.{k}"
        a, b, c = self.subnet.split(".")
        j = k - 255
        return f"{a}.{b}.{int(c) + 1 + j // 254}.{j % 254 + 1}"

    # -- lifecycle ------------------------------------------------------------------------------------
    def start(self) -> SshFleet:
        if not Path(SSHD).exists():
            raise RuntimeError("openssh-server is not installed (apt-get install -y openssh-server)")
        Path("/run/sshd").mkdir(exist_ok=True)
        self._keys()
        cfg = self._sshd_config()
        shared_port = free_port() if self.shared else None
        if self.shared:
            self.procs.append(self._sshd(cfg, f"0.0.0.0:{shared_port}", "shared"))
        for i in range(self.n):
            addr = self.addr(i)
            port = shared_port or free_port()
            h = FleetHost(f"host{i + 1:03d}", addr, port, str(self.ws_root / f"host{i + 1:03d}"))
            if not self.shared:
                h.proc = self._sshd(cfg, f"{addr}:{port}", h.name)
                self.procs.append(h.proc)
            self.hosts.append(h)
        for h in self.hosts if not self.shared else self.hosts[:1]:
            wait_ssh(h.addr, h.port)
        self.write_known_hosts()
        self._check_python()
        return self

    def _sshd(self, cfg: Path, listen: str, tag: str) -> subprocess.Popen:
        # Each simulated host its own temporary directory, as each real node has its own /tmp: programs
        # that keep per-node state there (Open MPI's session directories, named after the machine) would
        # otherwise collide between "hosts" that are one machine.
        tmp = self.tmp_root / tag
        tmp.mkdir(parents=True, exist_ok=True, mode=0o700)
        shutil.chown(self.tmp_root, USER, USER)
        shutil.chown(tmp, USER, USER)
        extra_env = "".join(f" {k}={v}" for k, v in self.host_env.get(tag, {}).items())
        return subprocess.Popen(
            [
                *(self.sshd_wrap(tag) if self.sshd_wrap else []),
                SSHD,
                "-D",
                "-f",
                str(cfg),
                "-o",
                f"ListenAddress={listen}",
                "-o",
                f"SetEnv=TMPDIR={tmp}"
                + (f" PATH={self.path_prefix}:/usr/local/bin:/usr/bin:/bin" if self.path_prefix else "")
                + extra_env,
                "-E",
                str(self.dir / f"sshd-{tag}.log"),
            ],
            stdin=subprocess.DEVNULL,
        )

    def _check_python(self) -> None:
        code = "import torch" if self.check_torch else "import json"
        r = subprocess.run(
            ["runuser", "-u", USER, "--", self.python, "-c", code], capture_output=True, text=True
        )
        if r.returncode != 0:
            raise RuntimeError(
                f"the test user {USER} cannot run {self.python} with torch ({r.stderr.strip()[-200:]}); build the "
                f"venv from a system Python in a world-readable path (make setup does)"
            )

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs.clear()

    def cleanup(self) -> None:
        for rule in list(self.rules):
            self._iptables("-D", rule)
        self.rules.clear()
        for m in reversed(self.mounts):
            subprocess.run(["umount", "-l", str(m)], capture_output=True)
        self.mounts.clear()
        self.stop()
        shutil.rmtree(self.ws_root, ignore_errors=True)
        shutil.rmtree(self.tmp_root, ignore_errors=True)
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- per-host faults ----------------------------------------------------------------------------
    def kill(self, name: str) -> None:
        h = self.host(name)
        if h.proc is None:
            raise RuntimeError("per-host faults need one sshd per host (shared_sshd=False)")
        h.proc.terminate()
        h.proc.wait(timeout=5)

    def revive(self, name: str) -> None:
        h = self.host(name)
        h.proc = self._sshd(self.dir / "sshd_config", f"{h.addr}:{h.port}", h.name)
        self.procs.append(h.proc)
        wait_ssh(h.addr, h.port)

    def cut(self, name: str) -> None:
        """The host drops off the network mid-run: its sshd and every SSH session to it die at once,
        while the processes it runs (the benchmarks) go on, as on a real host that lost its link."""
        h = self.host(name)
        if h.proc is None:
            raise RuntimeError("per-host faults need one sshd per host (shared_sshd=False)")
        tree = [h.proc.pid, *descendants(h.proc.pid)]
        for pid in tree:
            if _comm(pid) == "sshd" or pid == h.proc.pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        h.proc.wait(timeout=5)

    def home_files(self, match: Callable[[str], bool]) -> list[str]:
        """Files anywhere in the hosts' user's home whose name ``match`` accepts, other fleets' trees left out.

        Fleets of tests that run beside this one keep their workspaces and temporary directories in the same
        home (``ws-<fleet>``, ``tmp-<fleet>``), one of them with a filesystem that never answers mounted on
        a host's workspace, where a stat waits for ever: the walk keeps to this fleet's own and the rest.
        """
        home = Path(self.user.pw_dir)
        own = {self.ws_root.name, self.tmp_root.name}
        found: list[str] = []
        for top, dirs, files in os.walk(home, onerror=lambda _e: None):
            if top == str(home):
                dirs[:] = [d for d in dirs if not d.startswith(("ws-", "tmp-")) or d in own]
            found += [os.path.join(top, f) for f in files if match(f)]
        return sorted(found)

    def processes(self, name: str, needle: bytes = b"sb_bench") -> list[int]:
        """Pids of processes of this host (found by their working directory under its workspace)."""
        ws = self.host(name).workspace
        out = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                cwd = os.readlink(f"/proc/{pid}/cwd")
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                continue
            if (cwd == ws or cwd.startswith(ws + "/")) and needle in cmd:
                out.append(int(pid))
        return out

    def partition(self, name: str) -> None:
        """Drop every packet to this host's address (a network partition; needs iptables and root)."""
        rule = ["INPUT", "-d", f"{self.host(name).addr}/32", "-j", "DROP"]
        self._iptables("-A", rule, check=True)
        self.rules.append(rule)

    def heal(self, name: str | None = None) -> None:
        """Remove the partition of one host (or of all)."""
        for rule in list(self.rules):
            if name is None or rule[2] == f"{self.host(name).addr}/32":
                self._iptables("-D", rule)
                self.rules.remove(rule)

    @staticmethod
    def _iptables(op: str, rule: list[str], check: bool = False) -> None:
        r = subprocess.run(["iptables", "-w", "5", op, *rule], capture_output=True, text=True)
        if check and r.returncode != 0:
            raise RuntimeError(f"iptables {op} {' '.join(rule)}: {r.stderr.strip()}")

    def small_disk(self, size_kb: int) -> Path:
        """A fresh tmpfs of ``size_kb`` KiB (a disk that fills up), unmounted by cleanup."""
        mnt = Path(tempfile.mkdtemp(prefix="sbf-tmpfs-"))
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_kb}k,mode=0755", "tmpfs", str(mnt)],
            check=True,
            capture_output=True,
        )
        self.mounts.append(mnt)
        return mnt

    def _sshd_tree(self, name: str) -> list[int]:
        p = self.host(name).proc
        if p is None:
            raise RuntimeError("per-host faults need one sshd per host (shared_sshd=False)")
        return [p.pid, *(c for c in descendants(p.pid) if _comm(c) == "sshd")]

    def stop_sshd(self, name: str) -> None:
        """SIGSTOP one host's sshd and its open sessions (TCP is accepted, nothing answers: a hung host)."""
        for pid in self._sshd_tree(name):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)

    def cont_sshd(self, name: str) -> None:
        for pid in self._sshd_tree(name):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def host(self, name: str) -> FleetHost:
        return next(h for h in self.hosts if h.name == name)

    # -- client side files -----------------------------------------------------------------------------
    @property
    def known_hosts(self) -> Path:
        return self.dir / "known_hosts"

    @property
    def client_key(self) -> Path:
        return self.dir / "client"

    def write_known_hosts(self) -> None:
        pub = (self.dir / "hostkey.pub").read_text().split()
        lines = [f"[{h.addr}]:{h.port} {pub[0]} {pub[1]}" for h in self.hosts]
        self.known_hosts.write_text("\n".join(lines) + "\n")

    def inventory(
        self,
        extra_hosts: list[tuple[str, str, int]] | None = None,
        name: str = "inventory.ini",
        host_vars: dict[str, dict[str, str]] | None = None,
    ) -> Path:
        """An INI inventory of the fleet; ``extra_hosts`` (name, addr, port) adds hosts that may not exist."""
        lines = ["[gpu]"]
        rows = [(h.name, h.addr, h.port, h.workspace) for h in self.hosts]
        rows += [(n, a, p, str(self.ws_root / n)) for n, a, p in (extra_hosts or [])]
        for n, a, p, ws in rows:
            extra = " ".join(f"{k}={v}" for k, v in (host_vars or {}).get(n, {}).items())
            lines.append(f"{n} ansible_host={a} ansible_port={p} sb_workspace={ws} {extra}".rstrip())
        lines += [
            "",
            "[gpu:vars]",
            f"ansible_user={USER}",
            f"ansible_ssh_private_key_file={self.client_key}",
            "ansible_python_interpreter=/usr/bin/python3",
            f"sb_python={self.python}",
        ]
        path = self.dir / name
        path.write_text("\n".join(lines) + "\n")
        return path

    @property
    def master_port(self) -> int:
        """A rendezvous port of this fleet's own (``@MASTER_PORT@`` in a config): torch's TCPStore listens
        on every address, not only the head host's, so two test fleets that run collectives at once on one
        machine (the CI's two lanes) must not share ``fleet.master_port`` (both at the default 29500, one
        fleet's ranks joined the other's store: return codes 6, 7 and 124 on every host)."""
        return 20000 + 40 * int(self.subnet.split(".")[2])

    def config(self, body: str, name: str = "config.yaml") -> Path:
        """A config file whose fleet section points at this fleet's known_hosts (and rendezvous port)."""
        path = self.dir / name
        text = body.replace("@KNOWN_HOSTS@", str(self.known_hosts))
        path.write_text(text.replace("@MASTER_PORT@", str(self.master_port)))
        return path


def mpi_login_key(fleet: SshFleet) -> None:
    """The login user's own key, authorised on every host: mpirun on one host reaches the others with it
    (on a real cluster the users' keys or host-based authentication do this)."""
    home = Path(pwd.getpwnam(USER).pw_dir)
    ssh = home / ".ssh"
    key = ssh / "id_ed25519"
    if not key.exists():
        ssh.mkdir(mode=0o700, exist_ok=True)
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        shutil.chown(ssh, USER, USER)
        shutil.chown(key, USER, USER)
        shutil.chown(key.with_suffix(".pub"), USER, USER)
    with open(fleet.dir / "authorized_keys", "a") as f:
        f.write(key.with_suffix(".pub").read_text())


# A pair-wise tcp-bw in mpi mode over the fleet (tests/integration/test_patterns.py, bench/pattern_speed.py):
# @PORT@ the rendezvous port, @TIMEOUT@ the benchmark's timeout.
PAIR_WISE_TCP = """\
version: v0.4
fleet:
  known_hosts: @KNOWN_HOSTS@
  python: /usr/bin/python3
  venv: true
  install_requirements: never
  forks: 32
  # below the ephemeral range (Linux: 32768-60999): a port an outgoing connection holds cannot be
  # listened on (EADDRINUSE), and away from torch's default, which other tests on this machine use
  master_port: @PORT@
  env: {GLOO_SOCKET_IFNAME: lo, OMP_NUM_THREADS: 1}
superbench:
  benchmarks:
    tcp-bw:
      timeout: @TIMEOUT@
      modes:
        - name: mpi
          proc_num: 1
          mca: {oob_tcp_if_include: lo}
          pattern: {type: pair-wise}
      parameters: {size: 8M, num_warmup: 1, num_steps: 3}
"""
