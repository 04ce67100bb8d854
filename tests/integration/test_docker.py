"""Docker for real: one ``dockerd`` per loopback host (3 hosts, 127.0.27.10-12), the suite in the CPU image.

Each simulated host has a daemon of its own (own ``--data-root``, ``--exec-root``, socket and pid file; no
bridge, no iptables), which the host reaches through the inventory var ``sb_container_host_args``
(``["-H", "unix://DIR/docker.sock"]``), so loading the image on one host does not load it on the others.
The test user logs in unprivileged; docker commands use Ansible ``become`` (sudo). The image is the
tarball the podman tests build and cache (tests/integration/images.py): ``docker load`` takes podman's
docker-archive. A daemon that cannot start fails the tests with dockerd's own words; the daemons are
stopped by their pids.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import pytest

from .conftest import sb_fleet
from .images import IMAGE, LONG_BENCHMARK, ctrl_c_in_containers, ensure_sudo, need_root

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from fleetlib import USER, SshFleet, descendants, ensure_user  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LABEL = "sb-fleet.run"
START_S = 60  # dockerd is up in about a second here; a loaded machine gets a minute

CONFIG = """\
version: v0.4
fleet:
  known_hosts: @KNOWN_HOSTS@
  master_port: @MASTER_PORT@  # the fleet's own: another lane's fleet may rendezvous at once
  runtime: docker
  python: /usr/bin/python3
  venv: false
  install_requirements: never
  default_timeout: 180
  forks: 8
  container:
    image: @IMAGE@
    distribution: tarball
    tarball: @TARBALL@
    pull_throttle: 3
health: {enabled: false}
superbench:
  benchmarks:
@BENCHMARKS@
# Three hosts' CPU GEMMs on two shared cores land far apart from scheduling alone (one measured 92%
# below the others here): this module judges the container path (digests, timeouts, cleanup), not
# throughput. The software check (the image digest) and every benchmark's exit code still count.
gates:
  fleet: {enabled: false}
"""
# validate: a small GEMM (torch in the image), and SuperBench's mpi mode on one node: mpirun (Open MPI,
# built into the image) starts the rank in the container. One rank: two would rendezvous at
# 127.0.0.1:<master_port>, which the three loopback "hosts" share (--network=host), as real hosts do not.
# Then a collective across the three hosts' containers: torchrun in each, rendezvous at the first host's
# address (gloo over lo on CPU).
VALIDATE = """\
    gemm-flops:
      timeout: 120
      modes: [{name: local, proc_num: 1, parallel: no, env: {OMP_NUM_THREADS: 1}}]
      parameters: {m: 128, n: 128, k: 128, num_warmup: 1, num_steps: 4, min_time: 0.2, precision: [fp64, fp32]}
    noop:mpi:
      timeout: 60
      modes: [{name: mpi, proc_num: 1, node_num: 1}]
      parameters: {sleep: 0.2}
    nccl-bw:
      timeout: 240
      modes:
        - {name: torch.distributed, proc_num: 1, node_num: all, env: {OMP_NUM_THREADS: 1, GLOO_SOCKET_IFNAME: lo}}
      parameters: {operation: [allreduce], minbytes: 64K, maxbytes: 64K, num_warmup: 1, num_steps: 4}
"""
# A benchmark that hangs: the runner in each container kills it at its 5 s timeout. The step's own
# timeout is 5 + 60 s (fleet.step_margin): where the runner itself hangs, sb-fleet removes the
# container then.
HANG = """\
    noop:hang:
      timeout: 5
      modes: [{name: local, proc_num: 1}]
      parameters: {sleep: 600}
"""


# -- the daemons --------------------------------------------------------------------------------------
@dataclass
class Dockerd:
    dir: Path
    proc: subprocess.Popen

    @property
    def sock(self) -> Path:
        return self.dir / "docker.sock"

    @property
    def host_args(self) -> list[str]:
        return ["-H", f"unix://{self.sock}"]

    def log(self) -> str:
        try:
            return (self.dir / "dockerd.log").read_text()[-3000:]
        except OSError:
            return ""

    def docker(self, *args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        r = subprocess.run(
            ["docker", *self.host_args, *args], capture_output=True, text=True, timeout=timeout
        )
        assert not check or r.returncode == 0, f"docker {' '.join(args)}: {r.stderr.strip()}"
        return r

    def ours(self) -> list[str]:
        """The names of sb-fleet's containers on this daemon, running or not (the API: cheap to poll)."""
        q = urllib.parse.quote(json.dumps({"label": [LABEL]}))
        body = _get(self.sock, f"/containers/json?all=1&filters={q}")
        assert body is not None, f"dockerd on {self.sock} does not answer:\n{self.log()}"
        return [n.lstrip("/") for c in json.loads(body) for n in c.get("Names") or []]


def _get(sock: Path, path: str) -> bytes | None:
    """GET ``path`` from the daemon's API over its socket; the body, or None when it does not answer."""
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5)
            s.connect(str(sock))
            s.sendall(f"GET {path} HTTP/1.0\r\nHost: docker\r\n\r\n".encode())
            chunks = []
            while chunk := s.recv(65536):
                chunks.append(chunk)
    except OSError:
        return None
    head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].split()
    return body if len(status) > 1 and status[1] == b"200" else None


def _ping(sock: Path) -> bool:
    """The daemon's API answers (GET /_ping): a poll, no docker client start-up."""
    return _get(sock, "/_ping") == b"OK"


def start_dockerd(d: Path) -> Dockerd:
    d.mkdir(parents=True)
    argv = [
        "dockerd",
        "--data-root",
        str(d / "root"),
        "--exec-root",
        str(d / "exec"),
        "-H",
        f"unix://{d / 'docker.sock'}",
        "-p",
        str(d / "dockerd.pid"),
        # Several daemons side by side: none touches the host's network set-up (containers use the host's).
        "--bridge=none",
        "--iptables=false",
        "--ip-masq=false",
        "--log-level=warn",
    ]
    with open(d / "dockerd.log", "w") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    return Dockerd(d, proc)


def wait_ready(dk: Dockerd) -> None:
    deadline = time.monotonic() + START_S
    while not _ping(dk.sock):
        if dk.proc.poll() is not None:
            pytest.fail(f"dockerd ({dk.dir}) exited with {dk.proc.returncode}:\n{dk.log()}")
        if time.monotonic() > deadline:
            pytest.fail(f"dockerd ({dk.dir}) did not answer on {dk.sock} within {START_S} s:\n{dk.log()}")
        time.sleep(0.1)


def stop_dockerd(dk: Dockerd) -> None:
    """Stop the daemon by its pid (its containerd with it), then what it left mounted, then its files."""
    tree = [dk.proc.pid, *descendants(dk.proc.pid)]
    if dk.proc.poll() is None:
        dk.proc.send_signal(signal.SIGTERM)
        try:
            dk.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            dk.proc.kill()
            dk.proc.wait(timeout=10)
    for pid in tree[1:]:  # a containerd of this daemon's that it did not take down
        try:
            if Path(f"/proc/{pid}/comm").read_text().startswith("containerd"):
                os.kill(pid, signal.SIGKILL)
        except (OSError, ProcessLookupError):
            pass
    prefix = str(dk.dir) + "/"
    mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    for m in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", m], capture_output=True)  # DIR/exec/netns/default among them
    shutil.rmtree(dk.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def docker_fleet():
    need_root("the docker tests (dockerd, useradd, sudoers)")
    missing = [c for c in ("dockerd", "docker", "sudo") if not shutil.which(c)]
    if missing:
        pytest.fail(
            f"{', '.join(missing)} not installed: apt-get install docker.io sudo (.ci/apt-packages.txt)"
        )
    ensure_user()
    ensure_sudo(USER)
    # Short paths: the daemons' sockets (and containerd's below them) must fit a socket address.
    root = Path("/var/tmp") / f"sbf-dk-{secrets.token_hex(3)}"
    f = SshFleet(3, base=10, subnet="127.0.27")
    daemons: dict[str, Dockerd] = {}
    try:
        f.start()
        for h in f.hosts:
            daemons[h.name] = start_dockerd(root / h.name)
        for dk in daemons.values():
            wait_ready(dk)
        host_vars = {
            h: {"sb_container_host_args": "'" + json.dumps(dk.host_args, separators=(",", ":")) + "'"}
            for h, dk in daemons.items()
        }
        f.docker_inventory = f.inventory(name="docker.ini", host_vars=host_vars)  # type: ignore[attr-defined]
        f.daemons = daemons  # type: ignore[attr-defined]
        yield f
    finally:
        f.cleanup()
        for dk in daemons.values():
            stop_dockerd(dk)
        shutil.rmtree(root, ignore_errors=True)


def _config(fleet: SshFleet, name: str, tarball: Path, benchmarks: str) -> Path:
    body = CONFIG.replace("@IMAGE@", IMAGE).replace("@TARBALL@", str(tarball))
    return fleet.config(body.replace("@BENCHMARKS@", benchmarks.rstrip("\n")), name=name)


def _json(p: Path) -> dict:
    return json.loads(p.read_text())


def _summary(run_dir: Path) -> dict[str, dict]:
    lines = (run_dir / "results-summary.jsonl").read_text().splitlines()
    return {d["node"]: d for d in map(json.loads, lines)}


# -- the tests ----------------------------------------------------------------------------------------
def test_validate_with_docker_from_the_tarball(docker_fleet, cpu_image, tmp_path):
    """validate on 3 hosts, each with its own dockerd: the tarball copied, checked and loaded, the digest
    recorded for every host, the benchmarks (SuperBench's mpi mode among them, and a torch.distributed
    collective across the three hosts' containers) run in containers, the report passes, and no
    container of the run is left on any daemon."""
    from sb_fleet.plan.ansible_data import load as load_data
    from sb_fleet.plan.container_commands import DEVICE_VAR, archive_digest

    fleet = docker_fleet
    cfg = _config(fleet, "validate.yaml", cpu_image, VALIDATE)
    expected = archive_digest(cpu_image)
    assert expected and expected.startswith("sha256:")
    names = [h.name for h in fleet.hosts]
    rd = tmp_path / "validate"
    t0 = time.monotonic()
    r = sb_fleet(
        "validate", "-i", str(fleet.docker_inventory), "-c", str(cfg), "--run-dir", str(rd), timeout=900
    )
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    table = _json(rd / "containers.json")
    assert table["runtime"] == "docker"
    for h in names:
        row = table["hosts"][h]
        assert row["deploy_digest"] == row["run_digest"] == expected, row
        assert row["image_loaded"] is True
        facts = _json(rd / "facts" / f"{h}.json")
        assert facts["image_digest"] == expected and facts["image_torch_version"]
        dk = fleet.daemons[h]
        got = dk.docker("image", "inspect", "--format", "{{.Id}}", IMAGE).stdout.strip()
        assert got == expected  # the image this host's own daemon holds
        assert dk.ours() == []  # every container of the run is gone (--rm)
        assert not list(Path(fleet.host(h).workspace).glob("images/*.tar"))  # the copy is gone once loaded
    # A CPU host's facts give its containers no GPU or RDMA flags; the run stage passed them per host.
    extravars = load_data((rd / "ansible" / "run-step01" / "extravars.yml").read_text())
    assert extravars[DEVICE_VAR] == {h: [] for h in names}, extravars
    summary = _summary(rd)
    assert sorted(summary) == names
    for h in names:
        assert summary[h]["gemm-flops/return_code"] == 0
        assert summary[h]["gemm-flops/fp32_flops"] > 0
        assert summary[h]["noop:mpi/return_code"] == 0, summary[h]
        run_id = _json(rd / "manifest.json")["run_id"]
        res = Path(fleet.host(h).workspace) / "runs" / run_id / "results"
        assert (res / "gemm-flops" / "rank0.json").stat().st_uid == fleet.user.pw_uid  # the login user's
        assert [p.name for p in (res / "noop:mpi").glob("rank*.json")] == ["rank0.json"]
        assert (res / "noop:mpi" / "mpi" / "appfile").is_file()  # started by mpirun, in the container
    for i, h in enumerate(names):  # one world of three ranks, one per host's container
        assert summary[h]["nccl-bw/return_code"] == 0, summary[h]
        # 3 ranks: all-reduce busbw = algbw * 2(n-1)/n (64K rounded down to whole elements per rank)
        (busbw,) = [k for k in summary[h] if k.startswith("nccl-bw/allreduce_") and k.endswith("_busbw")]
        assert summary[h][busbw] == pytest.approx(
            summary[h][busbw.replace("_busbw", "_algbw")] * 4 / 3, rel=1e-3
        )
        res = Path(fleet.host(h).workspace) / "runs" / run_id / "results"
        assert _json(res / "nccl-bw" / f"rank{i}.json")["world_size"] == 3
    report = _json(rd / "report.json")
    assert {h["name"]: h["verdict"] for h in report["hosts"]} == dict.fromkeys(names, "pass"), report["hosts"]
    print(f"\nvalidate with docker, 3 hosts, {cpu_image.stat().st_size / 1e6:.0f} MB tarball: {took:.1f} s")


def _runner_pid(dk: Dockerd, name: str) -> int | None:
    """The host pid of the container's first process (the runner), from the daemon's API."""
    body = _get(dk.sock, f"/containers/{urllib.parse.quote(name)}/json")
    if body is None:
        return None
    return int(json.loads(body)["State"]["Pid"]) or None


def test_ctrl_c_stops_and_removes_every_hosts_container(docker_fleet, cpu_image, tmp_path):
    """Ctrl-C while the benchmarks run in their containers: sb-fleet stops each host's container (the
    runtime signals the runner, its first process, which stops its benchmark) and removes it, says so
    in interrupted.json, and leaves no container and no benchmark on any host."""
    fleet = docker_fleet
    cfg = _config(fleet, "long.yaml", cpu_image, LONG_BENCHMARK)
    # SIGTERM here (the podman test sends SIGINT): a stop is a stop, whichever signal brings it
    ctrl_c_in_containers(
        fleet,
        fleet.docker_inventory,
        cfg,
        tmp_path / "long",
        lambda h: fleet.daemons[h].ours(),
        signal.SIGTERM,
    )


def test_drift_flagged_hung_benchmark_and_hung_runner_killed_and_cleanup(docker_fleet, cpu_image, tmp_path):
    """Deploy again (every host already holds the digest: nothing loaded), host003's image rebuilt in
    place, then a run whose benchmark hangs. On host002 and host003 the runner in the container kills it
    at its 5 s timeout and the container ends with the step. On host001 the runner itself hangs
    (SIGSTOP): at the step's timeout sb-fleet removes the container, and the benchmark with it. The
    report flags host003's digest; cleanup --images removes containers and image from every daemon."""
    from sb_fleet.plan.container_commands import archive_digest

    fleet = docker_fleet
    inv = str(fleet.docker_inventory)
    cfg = _config(fleet, "hang.yaml", cpu_image, HANG)
    expected = archive_digest(cpu_image)
    names = [h.name for h in fleet.hosts]
    rd = tmp_path / "run"
    r = sb_fleet("deploy", "-i", inv, "-c", str(cfg), "--run-dir", str(rd), timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    table = _json(rd / "containers.json")
    assert all(table["hosts"][h]["image_loaded"] is False for h in names), table

    # drift: host003's image changes after deploy (someone rebuilt it in place)
    d3 = fleet.daemons["host003"]
    d3.docker("run", "--name", "drift", "--network", "host", IMAGE, "true")
    d3.docker("commit", "drift", IMAGE)
    d3.docker("rm", "drift")

    # the run; on host001, once its benchmark runs, the runner (the container's first process) stops
    d1 = fleet.daemons["host001"]
    stopped: int | None = None
    t0 = time.monotonic()
    p = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "sb-fleet"),
            "run",
            "--run-dir",
            str(rd),
            "-i",
            inv,
            "-c",
            str(cfg),
        ]
        + ["--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = t0 + 300
        while p.poll() is None and time.monotonic() < deadline:
            if stopped is None and fleet.processes("host001", b"\x00noop\x00"):
                (name,) = d1.ours()
                stopped = _runner_pid(d1, name)
                assert stopped, name
                os.kill(stopped, signal.SIGSTOP)
            time.sleep(0.2)
        out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    took = time.monotonic() - t0
    assert stopped, "host001's benchmark never ran in a container of sb-fleet's"
    assert p.returncode == 1, out[-3000:] + err[-3000:]  # host001 timed out: a host fault
    run_id = _json(rd / "manifest.json")["run_id"]
    for h in names:
        assert fleet.daemons[h].ours() == [], h  # no container of the step is left
        assert fleet.processes(h, b"\x00noop\x00") == [], h  # nor the hung benchmark
    outcome = _json(rd / "outcomes" / "run.json")
    run_out = {o["host"]: o for o in outcome["hosts"]}
    assert run_out["host001"]["outcome"] == "timeout", run_out["host001"]
    assert run_out["host001"]["reason"].endswith("its container was removed"), run_out[
        "host001"
    ]  # by sb-fleet
    assert took < 65 + 60, took  # the step's timeout, and sb-fleet's own work around it
    for h in ("host002", "host003"):
        status = _json(Path(fleet.host(h).workspace) / "runs" / run_id / "results" / "status.json")
        hang = status["entries"]["noop:hang"]
        assert hang["status"] == "timeout" and hang["duration_s"] < 30, hang  # the runner killed it at 5 s
    r = sb_fleet("collect", "--run-dir", str(rd), "-i", inv, timeout=300)
    summary = _summary(rd)
    for h in ("host002", "host003"):
        assert summary[h]["noop:hang/return_code"] != 0, summary[h]
    table = _json(rd / "containers.json")
    assert table["hosts"]["host001"]["run_digest"] == table["hosts"]["host002"]["run_digest"] == expected
    drifted = table["hosts"]["host003"]["run_digest"]
    assert drifted != expected and drifted.startswith("sha256:")
    assert _json(rd / "facts" / "host003.json")["image_digest"] == drifted

    sb_fleet("report", str(rd))
    hosts = {h["name"]: h for h in _json(rd / "report.json")["hosts"]}
    sw = [i for i in hosts["host003"]["issues"] if i["metric"] == "image_digest"]
    assert sw and sw[0]["check"] == "software" and hosts["host003"]["verdict"] == "fail", hosts["host003"]
    for h in ("host001", "host002"):
        assert not [i for i in hosts[h]["issues"] if i["metric"] == "image_digest"]
    md = (rd / "report.md").read_text()
    assert "ran a different container image than the majority" in md and "host003" in md

    # cleanup: containers (one left behind on host001) and, on request, the image
    d1.docker("create", "--name", "leftover", "--label", f"{LABEL}=x", IMAGE, "true")
    r = sb_fleet(
        "cleanup",
        "-i",
        inv,
        "-c",
        str(cfg),
        "--images",
        "--run-dir",
        str(tmp_path / "clean"),
        "--quiet",
        timeout=300,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    for h in names:
        dk = fleet.daemons[h]
        assert dk.docker("ps", "-a", "-q").stdout.strip() == "", h
        assert dk.docker("image", "inspect", IMAGE, check=False).returncode != 0, h
