"""SSH settings shared by Ansible (OpenSSH) and the collector (OpenSSH's master, else paramiko).

Host keys are always verified: ``strict`` refuses unknown and changed keys;
``accept-new`` records the key of a host seen for the first time (like
OpenSSH's ``StrictHostKeyChecking=accept-new``) and still refuses a changed
one. Turning checking off takes an explicit, loudly logged option.

Ansible's master connections (ControlPersist) listen where sb-fleet says, ``<control dir>/<trust>/%C``
(:meth:`SshSettings.control_path`), so that collect finds a host's live master and runs its commands
over it (:meth:`SshSettings.master_command`) rather than opening a connection of its own.

Key exchange: OpenSSH 9.0 to 9.8 prefer ``sntrup761x25519-sha512``, whose key generation costs the control
node about 65 ms of CPU per new connection (measured: 75 ms per ``ssh host true`` against 10 ms with
``curve25519-sha256``), a third of a nightly run's control-node CPU per host. sb-fleet keeps the set OpenSSH
allows here (``ssh -G``: the system's and the user's own settings) and only moves that algorithm last
(:func:`cheap_kex_first`); ``fleet.ssh_kex: openssh`` keeps OpenSSH's order. From OpenSSH 9.9 on,
``mlkem768x25519-sha256`` (post-quantum and cheap) comes first in that set and nothing changes.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sb_fleet.config.fleet_config import FleetSettings
from sb_fleet.config.inventory import Host
from sb_fleet.safe_files import private_dir

CONTROL_DIR_FIX = (
    "remove it (rm -rf -- {path}) so that sb-fleet makes it afresh, or point XDG_RUNTIME_DIR at a "
    "directory of your own (mode 0700)"
)

# How long a master outlives its last session (ControlPersist), on every client sb-fleet or Ansible starts.
CONTROL_PERSIST_S = 120
# A unix socket's path, its NUL included, fits in sockaddr_un.sun_path: 108 bytes on Linux, 104 on the BSDs
# and macOS. OpenSSH first binds a new master at the path plus "." and 16 random characters, then renames
# it into place; %C expands to a SHA-1 in hex.
SUN_PATH = 108 if sys.platform.startswith("linux") else 104
MASTER_TEMP_SUFFIX = 17
CONNECTION_HASH = 40


def control_dir() -> Path:
    """Where OpenSSH's control sockets live: ``$XDG_RUNTIME_DIR/sb-fleet-cp`` when that is the user's own
    private directory (as systemd makes it), else ``~/.ansible/cp/sb-fleet`` (beside Ansible's own);
    never a guessable name in a directory every user can write. :func:`private_dir` checks what is there."""
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isabs(xdg):
        try:
            st = os.lstat(xdg)
        except OSError:
            st = None
        private = st is not None and st.st_uid == os.geteuid() and not (st.st_mode & 0o077)
        if private and os.path.isdir(xdg) and not os.path.islink(xdg):
            return Path(xdg) / "sb-fleet-cp"
    return Path(os.path.expanduser("~")) / ".ansible" / "cp" / "sb-fleet"


def control_path_in(directory: Path) -> str | None:
    """``<directory>/%C``, one socket per connection hash, or None where OpenSSH could not bind a master
    there (the path too long for a unix socket while the master is made) or could not read it back from
    an option (``%``, quotes, blanks): Ansible's own path then, and collect never finds a master."""
    d = str(directory)
    if not d.startswith("/") or any(c in d for c in "%\"'\\") or any(c.isspace() for c in d):
        return None
    if len(os.fsencode(d)) + 1 + CONNECTION_HASH + MASTER_TEMP_SUFFIX >= SUN_PATH:
        return None
    return f"{d}/%C"


# Key exchange algorithms whose cost per connection is tens of milliseconds of CPU on each end.
SLOW_KEX_PREFIXES = ("sntrup761",)
KEX_PROBE_HOST = "sb-fleet-kex-probe.invalid"  # a name no Host block is likely to match; never resolved
# What an algorithm's name may hold (OpenSSH's own names: curve25519-sha256@libssh.org): a list read from
# ssh -G goes onto Ansible's ssh command line (ANSIBLE_SSH_ARGS, split on blanks) only if every name fits.
KEX_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9@._+-]{0,63}")


def cheap_kex_first(algorithms: Sequence[str]) -> tuple[str, ...]:
    """The same algorithms, the slow ones moved last (their own order kept): what OpenSSH may use is
    unchanged, only what it prefers."""
    slow = [a for a in algorithms if a.startswith(SLOW_KEX_PREFIXES)]
    return (*(a for a in algorithms if a not in slow), *slow)


@functools.lru_cache(maxsize=1)
def openssh_kex() -> tuple[str, ...]:
    """The key exchange algorithms this machine's ``ssh`` offers a host (``ssh -G``, which reads the system's
    and the user's ssh_config and connects nowhere), in its order; empty where ssh cannot say."""
    try:
        r = subprocess.run(
            ["ssh", "-G", KEX_PROBE_HOST],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return ()
    for line in r.stdout.splitlines() if r.returncode == 0 else ():
        key, _, value = line.partition(" ")
        if key == "kexalgorithms":
            names = tuple(value.strip().split(","))
            return names if all(KEX_NAME.fullmatch(a) for a in names) else ()
    return ()


def kex_option(order: str) -> tuple[str, ...]:
    """The ``KexAlgorithms`` list sb-fleet passes ssh (``fleet.ssh_kex``), or () where OpenSSH's own order
    stands: ``openssh``, an ssh that cannot say its list, or one whose order is already cheap first."""
    if order != "cheap-first":
        return ()
    have = openssh_kex()
    cheap = cheap_kex_first(have)
    return cheap if cheap != have else ()


def kex_settings(kex: Sequence[str]) -> tuple[str, ...]:
    """The ssh ``-o`` setting for a :func:`kex_option` list (none for ())."""
    return (f"KexAlgorithms={','.join(kex)}",) if kex else ()


@dataclass(frozen=True)
class SshSettings:
    known_hosts: Path
    policy: str  # strict | accept-new | off
    connect_timeout: int = 10
    kex: tuple[str, ...] = ()  # OpenSSH's KexAlgorithms, in sb-fleet's order; () leaves ssh's own

    @classmethod
    def from_fleet(
        cls, fleet: FleetSettings, accept_new: bool = False, insecure_off: bool = False
    ) -> SshSettings:
        kh = Path(os.path.expanduser(fleet.known_hosts or "~/.ssh/known_hosts")).resolve()
        policy = "off" if insecure_off else ("accept-new" if accept_new else fleet.host_key_checking)
        return cls(kh, policy, fleet.ssh_connect_timeout, kex_option(fleet.ssh_kex))

    def trust_dir(self) -> Path:
        # A master connection is reused without any new host key check, so one verified under other
        # trust settings (another known_hosts, accept-new, off) must never serve this run: the control
        # directory is keyed by them. (Short: unix socket paths are limited to ~108 bytes.)
        trust = hashlib.sha256(f"{self.known_hosts}\0{self.policy}".encode()).hexdigest()[:10]
        return control_dir() / trust

    def control_path(self) -> str | None:
        """Where Ansible's master to a host listens (OpenSSH's ``%C`` in it: the hash of this machine's
        name, the host, its port and the user), or None where Ansible picks its own."""
        return control_path_in(self.trust_dir())

    def _trust_options(self) -> list[str]:
        strict = {"strict": "yes", "accept-new": "accept-new", "off": "no"}[self.policy]
        return [
            f"StrictHostKeyChecking={strict}",
            f"UserKnownHostsFile={self.known_hosts}",
            f"ConnectTimeout={self.connect_timeout}",
            *kex_settings(self.kex),  # with the trust options: every connection ssh makes itself gets it
        ]

    def openssh_args(self) -> str:
        opts = ["ControlMaster=auto", f"ControlPersist={CONTROL_PERSIST_S}s", *self._trust_options()]
        opts += ["ServerAliveInterval=5", "ServerAliveCountMax=3"]
        cp = self.control_path()
        if cp is not None:  # Ansible then adds no ControlPath of its own
            opts.append(f"ControlPath={cp}")
        return " ".join(f"-o {o}" for o in opts)

    def ansible_env(self) -> dict[str, str]:
        cp = self.trust_dir()
        for d in (cp.parent, cp):  # each checked itself: sb-fleet's own directories, down from root
            private_dir(d, "SSH control sockets", CONTROL_DIR_FIX.format(path=d))
        return {
            "ANSIBLE_HOST_KEY_CHECKING": "False" if self.policy == "off" else "True",
            "ANSIBLE_SSH_ARGS": self.openssh_args(),
            "ANSIBLE_SSH_CONTROL_PATH_DIR": str(cp),
            "ANSIBLE_TIMEOUT": str(self.connect_timeout),
        }

    def master_options(self, host: Host) -> list[str] | None:
        """OpenSSH options that reach ``host`` through Ansible's master only, or None where its path is
        Ansible's own (or the host's extra ssh arguments do not parse). They name the host as Ansible does (its ``ansible_port`` and ``ansible_user`` only
        where the inventory gives them, then its ``ansible_ssh_common_args`` and ``ansible_ssh_extra_args``),
        so that ``%C`` is the master's. They come first, and OpenSSH takes an option's first value: never a
        master of its own (``ControlMaster=no``), never a prompt (``BatchMode``), and should the master be
        gone, any connection ssh makes itself is verified under this run's host key policy."""
        cp = self.control_path()
        if cp is None:
            return None
        out = ["-o", "ControlMaster=no", "-o", f"ControlPath={cp}", "-o", "BatchMode=yes"]
        for opt in self._trust_options():
            out += ["-o", opt]
        out += ["-o", "LogLevel=ERROR"]
        named = self._host_options(host)
        return None if named is None else out + named

    def _host_options(self, host: Host) -> list[str] | None:
        """The options that name ``host`` as Ansible's ssh connection does (so that ``%C`` is its master's),
        or None where its extra ssh arguments do not parse."""
        out: list[str] = []
        port = host.vars.get("ansible_port") or host.vars.get("ansible_ssh_port")
        if port:
            out += ["-o", f"Port={port}"]
        key = host.vars.get("ansible_ssh_private_key_file") or host.vars.get("ansible_private_key_file")
        if key:
            out += ["-o", f'IdentityFile="{os.path.expanduser(str(key))}"']
        if host.user:
            out += ["-o", f'User="{host.user}"']  # quoted as Ansible quotes it
        for var in ("ansible_ssh_common_args", "ansible_ssh_extra_args"):
            if host.vars.get(var):
                try:
                    out += shlex.split(str(host.vars[var]))
                except ValueError:  # unbalanced quotes: Ansible cannot use them either; no master route
                    return None
        return out

    def exec_command(self, host: Host, command: str) -> list[str] | None:
        """The ssh client that runs ``command`` (one line for the host's login shell, as Ansible's raw
        task sends it) on ``host`` the way Ansible's ssh connection would (sb_fleet.fleet.direct_exec):
        its master made or reused at :meth:`control_path` (ControlPersist, so that collect rides it),
        this run's host key policy and key exchange, public keys only, never a prompt; None where the
        path is Ansible's own or the host's extra ssh arguments do not parse."""
        cp = self.control_path()
        named = self._host_options(host)
        if cp is None or named is None:
            return None
        out: list[str] = []
        for opt in (
            "ControlMaster=auto",
            f"ControlPersist={CONTROL_PERSIST_S}s",
            *self._trust_options(),
            "ServerAliveInterval=5",
            "ServerAliveCountMax=3",
            f"ControlPath={cp}",
            "BatchMode=yes",
            "LogLevel=ERROR",
            "KbdInteractiveAuthentication=no",
            "PasswordAuthentication=no",
            "PreferredAuthentications=gssapi-with-mic,gssapi-keyex,hostbased,publickey",
        ):
            out += ["-o", opt]
        return ["ssh", *out, *named, "-T", "--", host.address, command]

    def master_command(self, host: Host, command: str) -> list[str] | None:
        """The argv that runs ``command`` (one shell line, as paramiko's exec sends it) on ``host`` over
        its master, or None (see :meth:`master_options`)."""
        opts = self.master_options(host)
        return None if opts is None else ["ssh", *opts, "-T", "--", host.address, command]

    def master_control(self, host: Host, op: str = "check") -> list[str] | None:
        """``ssh -O check`` (exit 0 while ``host``'s master runs) or ``-O exit`` (it ends): a question to
        the local socket, no network."""
        opts = self.master_options(host)
        return None if opts is None else ["ssh", *opts, "-O", op, "--", host.address]
