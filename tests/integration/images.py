"""The CPU image that the container tests run, shared by the podman and docker modules.

container/build-cpu-image.sh builds it here without a registry (debootstrap, a CPU torch wheel,
``podman import``) as a docker-archive tarball, which ``podman load`` and ``docker load`` both take.
It is built once per version of the script and cached on disk (``SB_FLEET_IMAGE_CACHE``, default
/var/cache/sb-fleet/images), so a later session, or the other runtime's tests, reuse it.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

IMAGE = "localhost/sb-bench:cpu"
CACHE = Path(os.environ.get("SB_FLEET_IMAGE_CACHE", "/var/cache/sb-fleet/images"))
BUILD = ROOT / "container" / "build-cpu-image.sh"
CONTAINERS_CONF = Path("/etc/containers/containers.conf")
SUDOERS = Path("/etc/sudoers.d/sb-fleet-test")


def need(cmd: str) -> None:
    if not shutil.which(cmd):
        pytest.skip(f"{cmd} is not installed (.ci/apt-packages.txt; scripts/setup.sh installs it)")


def need_root(what: str) -> None:
    if os.geteuid() != 0:
        pytest.skip(f"{what} need root; CI runs as root")


def ensure_containers_conf() -> None:
    """crun fails on this machine kind's cgroups, and podman's default ulimits cannot be applied."""
    if not CONTAINERS_CONF.exists():
        CONTAINERS_CONF.parent.mkdir(parents=True, exist_ok=True)
        CONTAINERS_CONF.write_text(
            '[containers]\ndefault_ulimits = []\n\n[engine]\ncgroup_manager = "cgroupfs"\n'
        )


def ensure_sudo(user: str) -> None:
    """A NOPASSWD rule for the test's login user: container commands run with Ansible's become."""
    rule = f"{user} ALL=(root) NOPASSWD: ALL\n"
    if not SUDOERS.exists() or SUDOERS.read_text() != rule:
        tmp = SUDOERS.with_suffix(".tmp")
        tmp.write_text(rule)
        os.chmod(tmp, 0o440)
        subprocess.run(["visudo", "-cf", str(tmp)], check=True, capture_output=True)
        os.replace(tmp, SUDOERS)


def cpu_image_tarball() -> Path:
    """The CPU image as a docker-archive tarball, built once per script version (minutes the first time)."""
    need_root("building the CPU image (debootstrap, podman import)")
    for c in ("podman", "/usr/sbin/runc", "debootstrap"):
        need(c)
    ensure_containers_conf()
    key = hashlib.sha256(BUILD.read_bytes()).hexdigest()[:12]
    out = CACHE / f"sb-bench-cpu-{key}.tar"
    if out.exists():
        return out
    CACHE.mkdir(parents=True, exist_ok=True)
    # The podman and docker tests run in two pytest processes at once (scripts/run_tests.sh): one builds,
    # the other waits for it on the lock and then finds the tarball.
    with open(CACHE / f".sb-bench-cpu-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not out.exists():
            tmp = out.with_suffix(".tmp.tar")
            r = subprocess.run([str(BUILD), str(tmp), IMAGE], capture_output=True, text=True, timeout=1800)
            assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
            os.replace(tmp, out)
    return out


# A benchmark long enough to be interrupted (Ctrl-C) while it runs in every host's container.
LONG_BENCHMARK = """\
    noop:long:
      timeout: 300
      modes: [{name: local, proc_num: 1}]
      parameters: {sleep: 240}
"""


def ctrl_c_in_containers(
    fleet, inv: Path, cfg: Path, rd: Path, containers: Callable[[str], list[str]], sig: int = signal.SIGINT
) -> None:  # noqa: ANN001
    """``validate`` with :data:`LONG_BENCHMARK`; Ctrl-C (``sig``: SIGINT, or SIGTERM) once the benchmark
    runs in every host's container (``containers(host)``: the names of the runtime's containers there);
    then no container and no benchmark is left on any host, no process of the run anywhere (listed by
    the run's tags, names and directories: the control node's, the hosts', the containers'), and
    ``interrupted.json`` says each container was stopped and removed."""
    import json
    import sys
    import time

    from tests.fleetlib.hangs import run_id_of, run_processes, wait_run_gone

    names = [h.name for h in fleet.hosts]
    p = subprocess.Popen(
        [str(Path(sys.executable).parent / "sb-fleet"), "validate", "-i", str(inv), "-c", str(cfg)]
        + ["--run-dir", str(rd), "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 300
        running: set[str] = set()
        while p.poll() is None and time.monotonic() < deadline and running != set(names):
            running = {h for h in names if fleet.processes(h, b"\x00noop\x00") and containers(h)}
            time.sleep(0.2)
        assert running == set(names), f"the benchmark never ran in every host's container: {running}"
        run_id = run_id_of(rd)
        assert any(x.why == "host tag" and x.comm != "ssh" for x in run_processes(run_id, rd))
        p.send_signal(sig)
        out, err = p.communicate(timeout=180)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode != 0, out[-3000:] + err[-3000:]
    for h in names:
        assert containers(h) == [], h  # no container of the run is left
        assert fleet.processes(h, b"\x00noop\x00") == [], h  # nor its benchmark
    wait_run_gone(run_id, rd, err)
    cleanup = json.loads((rd / "interrupted.json").read_text())["cleanup"]
    assert set(cleanup) == set(names), cleanup
    assert all(v.startswith("container stopped and removed") for v in cleanup.values()), cleanup
