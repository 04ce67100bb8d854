"""Fixtures that start a real SSH fleet on loopback (tests/fleetlib)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from fleetlib import SshFleet  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SB_FLEET = str(Path(sys.executable).parent / "sb-fleet")

# Small CPU config for the fleet: one thread per benchmark process, since every "host" shares two cores.
FLEET_CONFIG = """\
version: v0.4
fleet:
  known_hosts: @KNOWN_HOSTS@
  python: /usr/bin/python3
  venv: true
  install_requirements: never
  default_timeout: 120
  forks: 32
superbench:
  var:
    cpu_local: &cpu_local
      enable: true
      modes:
        - name: local
          proc_num: 1
          parallel: no
          env: {OMP_NUM_THREADS: 1}
  benchmarks:
    gemm-flops:
      <<: *cpu_local
      timeout: 120
      parameters: {m: 128, n: 128, k: 128, num_warmup: 1, num_steps: 4, min_time: 0.2, precision: [fp64, fp32]}
# Four CPU GEMMs on two shared cores land up to ~30% apart from scheduling alone (CI once failed a good
# host of this fleet). These tests judge the flow (every host ends with its outcome and its figures);
# the verdict's statistics are tested on planted faults elsewhere (tests/unit, bench/verdict_quality.py).
gates:
  fleet: {min_deviation: 0.5}
"""


def _need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("the loopback SSH fleet needs root (useradd, sshd); CI runs as root")


@contextmanager
def started_fleet(n: int, subnet: str, **kw) -> Iterator[SshFleet]:
    """A real sshd fleet of ``n`` hosts on ``<subnet>.10`` onwards, stopped (its own processes only) after."""
    _need_root()
    # Not under pytest's tmp dir: that is private to root, and sshd reads authorized_keys as the user.
    f = SshFleet(n, base=10, subnet=subnet, **kw)
    f.start()
    try:
        yield f
    finally:
        f.cleanup()


@pytest.fixture(scope="session")
def fleet():
    """Four real sshd hosts on 127.0.1.10-13, one sshd each, as an unprivileged user."""
    with started_fleet(4, "127.0.1") as f:
        yield f


@pytest.fixture
def fleet_config(fleet: SshFleet):
    return fleet.config(FLEET_CONFIG)


def sb_fleet(*args: str, timeout: float = 600, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the real console script, as a user would."""
    return subprocess.run(
        [SB_FLEET, *args, "--quiet"]
        if args and args[0] in ("deploy", "run", "collect", "validate")
        else [SB_FLEET, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(ROOT),
        env={**os.environ, **(env or {})},
    )


def close_masters(inventory: Path, known_hosts: Path, policy: str = "strict") -> int:
    """End the OpenSSH master connections (ControlPersist) sb-fleet keeps to this inventory's hosts, as
    a night between two runs does: ``ssh -O exit`` on each host's own (never another test's), then wait
    until none answers. Returns how many were open."""
    from sb_fleet.config.inventory import load_inventory
    from sb_fleet.fleet.fetch import master_alive
    from sb_fleet.fleet.ssh import SshSettings

    ssh = SshSettings(known_hosts.resolve(), policy)
    hosts = list(load_inventory(inventory).hosts)
    alive = [h for h in hosts if master_alive(h, ssh)]
    for h in alive:
        argv = ssh.master_control(h, "exit")
        assert argv is not None
        subprocess.run(argv, capture_output=True, timeout=10, check=False)
    deadline = time.monotonic() + 10
    while any(master_alive(h, ssh) for h in alive):
        assert time.monotonic() < deadline, "an SSH master still answers after ssh -O exit"
        time.sleep(0.05)
    return len(alive)


@pytest.fixture(scope="session")
def cpu_image() -> Path:
    """The CPU image tarball that the podman and docker tests load (tests/integration/images.py)."""
    from .images import cpu_image_tarball

    return cpu_image_tarball()
