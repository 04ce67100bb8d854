"""SSH settings shared by Ansible (OpenSSH) and the collector (paramiko).

Host keys are always verified: ``strict`` refuses unknown and changed keys;
``accept-new`` records the key of a host seen for the first time (like
OpenSSH's ``StrictHostKeyChecking=accept-new``) and still refuses a changed
one. Turning checking off takes an explicit, loudly logged option.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from sb_fleet.config.fleet_config import FleetSettings
from sb_fleet.safe_files import private_dir

CONTROL_DIR_FIX = (
    "remove it (rm -rf -- {path}) so that sb-fleet makes it afresh, or point XDG_RUNTIME_DIR at a "
    "directory of your own (mode 0700)"
)


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


@dataclass(frozen=True)
class SshSettings:
    known_hosts: Path
    policy: str  # strict | accept-new | off
    connect_timeout: int = 10

    @classmethod
    def from_fleet(
        cls, fleet: FleetSettings, accept_new: bool = False, insecure_off: bool = False
    ) -> SshSettings:
        kh = Path(os.path.expanduser(fleet.known_hosts or "~/.ssh/known_hosts")).resolve()
        policy = "off" if insecure_off else ("accept-new" if accept_new else fleet.host_key_checking)
        return cls(kh, policy, fleet.ssh_connect_timeout)

    def openssh_args(self) -> str:
        strict = {"strict": "yes", "accept-new": "accept-new", "off": "no"}[self.policy]
        args = [
            "-o ControlMaster=auto",
            "-o ControlPersist=120s",
            f"-o StrictHostKeyChecking={strict}",
            f"-o UserKnownHostsFile={self.known_hosts}",
            f"-o ConnectTimeout={self.connect_timeout}",
            "-o ServerAliveInterval=5",
            "-o ServerAliveCountMax=3",
        ]
        return " ".join(args)

    def ansible_env(self) -> dict[str, str]:
        # A master connection is reused without any new host key check, so one verified under other
        # trust settings (another known_hosts, accept-new, off) must never serve this run: the control
        # directory is keyed by them. (Short: unix socket paths are limited to ~108 bytes.)
        trust = hashlib.sha256(f"{self.known_hosts}\0{self.policy}".encode()).hexdigest()[:10]
        root = control_dir()
        for d in (root, root / trust):  # each checked itself: sb-fleet's own directories, down from root
            private_dir(d, "SSH control sockets", CONTROL_DIR_FIX.format(path=d))
        cp = root / trust
        return {
            "ANSIBLE_HOST_KEY_CHECKING": "False" if self.policy == "off" else "True",
            "ANSIBLE_SSH_ARGS": self.openssh_args(),
            "ANSIBLE_SSH_CONTROL_PATH_DIR": str(cp),
            "ANSIBLE_TIMEOUT": str(self.connect_timeout),
        }
