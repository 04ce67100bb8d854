"""Containers for real: podman (runc; overlay storage, else vfs) on a loopback fleet of 3 hosts (127.0.3.30-32).

Each simulated host has its own podman storage (``--root``/``--runroot`` through the inventory var
``sb_container_host_args``), so loading the image on one host does not load it on the others. The
test user logs in unprivileged; container commands use Ansible ``become`` (sudo, NOPASSWD rule set up
here). The CPU image is built once (container/build-cpu-image.sh) and cached on disk by the script's
digest, so later sessions reuse it.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from .conftest import sb_fleet
from .images import (
    IMAGE,
    LONG_BENCHMARK,
    ctrl_c_in_containers,
    ensure_containers_conf,
    ensure_sudo,
    need,
    need_root,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from fleetlib import USER, SshFleet, ensure_user  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# runc: crun fails on this machine kind's cgroups. The storage driver is probed (podman_host).
PODMAN_GLOBAL = ["--storage-driver=vfs", "--runtime=/usr/sbin/runc"]

CONFIG = """\
version: v0.4
fleet:
  known_hosts: @KNOWN_HOSTS@
  runtime: podman
  python: /usr/bin/python3
  venv: false
  install_requirements: never
  default_timeout: 180
  forks: 8
  container:
    image: @IMAGE@
    distribution: @DIST@
    @SOURCE@
    gpus: none
    pull_throttle: 2
    global_args: @GLOBAL@
superbench:
  benchmarks:
    gemm-flops:
      enable: true
      timeout: 120
      modes: [{name: local, proc_num: 1, parallel: no, env: {OMP_NUM_THREADS: 1}}]
      parameters: {m: 128, n: 128, k: 128, num_warmup: 1, num_steps: 4, min_time: 0.2, precision: [fp64, fp32]}
# Three CPU GEMMs on two shared cores land far apart from scheduling alone: the drift this test plants
# is the image's digest, judged by the software check; no throughput verdict here.
gates:
  fleet: {min_deviation: 0.9}
"""


@pytest.fixture(scope="session")
def podman_host():
    """Root, podman + runc, the containers.conf this machine kind needs, sudo for the test user."""
    need_root("container tests (podman, useradd, sudoers)")
    for c in ("podman", "/usr/sbin/runc", "sudo", "debootstrap"):
        need(c)
    ensure_containers_conf()
    ensure_user()
    ensure_sudo(USER)
    r = subprocess.run(
        ["runuser", "-u", USER, "--", "sudo", "-n", "podman", "--version"], capture_output=True, text=True
    )
    assert r.returncode == 0, f"sudo for {USER} does not work: {r.stderr}"
    # Native overlay where the kernel and file system allow it (starting a container is then instant),
    # else vfs, which works everywhere but copies the whole image for every container.
    probe = Path(tempfile.mkdtemp(prefix="sbf-ovl-", dir="/var/tmp"))
    try:
        ok = (
            subprocess.run(
                [
                    "podman",
                    "--storage-driver=overlay",
                    "--root",
                    str(probe / "root"),
                    "--runroot",
                    str(probe / "run"),
                    "info",
                ],
                capture_output=True,
                text=True,
            ).returncode
            == 0
        )
    finally:
        shutil.rmtree(probe, ignore_errors=True)
    PODMAN_GLOBAL[0] = "--storage-driver=overlay" if ok else "--storage-driver=vfs"


def _storage_args(storage: Path) -> list[str]:
    # podman refuses a runroot longer than 50 characters: a short one per storage, derived from its path.
    run = f"/run/sbf-{hashlib.sha1(str(storage).encode()).hexdigest()[:10]}"
    return ["--root", str(storage / "root"), "--runroot", run]


def _podman(storage: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["podman", *PODMAN_GLOBAL, *_storage_args(storage), *args],
        capture_output=True,
        text=True,
        check=check,
    )


@pytest.fixture(scope="module")
def ctr_fleet(podman_host):
    f = SshFleet(3, base=30, subnet="127.0.3")
    f.start()
    f.storage = Path(f"/var/tmp/sbf-ctr-{f.dir.name}")  # type: ignore[attr-defined]
    host_vars = {}
    for h in f.hosts:
        args = _storage_args(f.storage / h.name)  # type: ignore[attr-defined]
        host_vars[h.name] = {"sb_container_host_args": "'" + json.dumps(args, separators=(",", ":")) + "'"}
    f.ctr_inventory = f.inventory(name="ctr.ini", host_vars=host_vars)  # type: ignore[attr-defined]
    yield f
    f.cleanup()
    for h in f.hosts:  # containers a failed test left behind, before their storage goes
        _podman(f.storage / h.name, "rm", "-af", check=False)  # type: ignore[attr-defined]
        shutil.rmtree(_storage_args(f.storage / h.name)[3], ignore_errors=True)  # type: ignore[attr-defined]
    shutil.rmtree(f.storage, ignore_errors=True)  # type: ignore[attr-defined]


def _config(fleet: SshFleet, name: str, dist: str, source: str, image: str = IMAGE) -> Path:
    body = CONFIG.replace("@DIST@", dist).replace("@SOURCE@", source).replace("@IMAGE@", image)
    return fleet.config(body.replace("@GLOBAL@", json.dumps(PODMAN_GLOBAL)), name=name)


def _json(p: Path) -> dict:
    return json.loads(p.read_text())


def test_tarball_deploy_run_in_container_digest_check_and_cleanup(ctr_fleet, cpu_image, tmp_path):
    from sb_fleet.plan.container_commands import archive_digest

    fleet = ctr_fleet
    inv = fleet.ctr_inventory
    cfg = _config(fleet, "tarball.yaml", "tarball", f"tarball: {cpu_image}")
    expected = archive_digest(cpu_image)
    assert expected and expected.startswith("sha256:")
    names = [h.name for h in fleet.hosts]

    # 1. first deploy: the tarball is copied, checked and loaded on every host
    rd1 = tmp_path / "deploy1"
    t0 = time.monotonic()
    r = sb_fleet("deploy", "-i", str(inv), "-c", str(cfg), "--run-dir", str(rd1), timeout=1200)
    first_s = time.monotonic() - t0
    assert r.returncode == 0, r.stdout + r.stderr
    table = _json(rd1 / "containers.json")
    for h in names:
        assert table["hosts"][h]["deploy_digest"] == expected
        assert table["hosts"][h]["image_loaded"] is True
        facts = _json(rd1 / "facts" / f"{h}.json")
        assert facts["image_digest"] == expected
        assert facts["image_torch_version"]  # the suite imported torch inside the image on this host
        assert _podman(fleet.storage / h, "image", "exists", IMAGE, check=False).returncode == 0
        # the tarball copy is gone once loaded
        assert not list(Path(fleet.host(h).workspace).glob("images/*.tar"))

    # 2. deploy again: every host already holds this digest, nothing is copied or loaded
    rd2 = tmp_path / "run"
    t0 = time.monotonic()
    r = sb_fleet("deploy", "-i", str(inv), "-c", str(cfg), "--run-dir", str(rd2), timeout=600)
    second_s = time.monotonic() - t0
    assert r.returncode == 0, r.stdout + r.stderr
    table = _json(rd2 / "containers.json")
    assert all(table["hosts"][h]["image_loaded"] is False for h in names), table
    print(
        f"\ntarball deploy to {len(names)} hosts: first {first_s:.1f} s, again (same digest) {second_s:.1f} s, "
        f"image {cpu_image.stat().st_size / 1e6:.0f} MB"
    )

    # 3. drift: host003's image changes after deploy (someone rebuilt it in place)
    s3 = fleet.storage / "host003"
    _podman(s3, "run", "--name", "drift", "--network=host", IMAGE, "true")
    _podman(s3, "commit", "-q", "drift", IMAGE)
    _podman(s3, "rm", "drift")

    # 4. run inside the containers, collect, report
    r = sb_fleet("run", "--run-dir", str(rd2), "-i", str(inv), "-c", str(cfg), timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    r = sb_fleet("collect", "--run-dir", str(rd2), "-i", str(inv), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [json.loads(x) for x in (rd2 / "results-summary.jsonl").read_text().splitlines()]
    summary = {d["node"]: d for d in lines}
    assert sorted(summary) == names
    for h in names:
        assert summary[h]["gemm-flops/return_code"] == 0
        assert summary[h]["gemm-flops/fp32_flops"] > 0
        run_id = _json(rd2 / "manifest.json")["run_id"]
        rank0 = Path(fleet.host(h).workspace) / "runs" / run_id / "results" / "gemm-flops" / "rank0.json"
        assert rank0.stat().st_uid == fleet.user.pw_uid  # written as the login user, not root
    table = _json(rd2 / "containers.json")
    run_digests = {h: table["hosts"][h]["run_digest"] for h in names}
    assert run_digests["host001"] == run_digests["host002"] == expected
    assert run_digests["host003"] != expected and run_digests["host003"].startswith("sha256:")
    assert _json(rd2 / "facts" / "host003.json")["image_digest"] == run_digests["host003"]

    r = sb_fleet("report", str(rd2))
    report = _json(rd2 / "report.json")
    hosts = {h["name"]: h for h in report["hosts"]}
    sw = [i for i in hosts["host003"]["issues"] if i["metric"] == "image_digest"]
    assert sw and sw[0]["check"] == "software", hosts["host003"]
    assert hosts["host003"]["verdict"] == "fail"
    for h in ("host001", "host002"):
        assert not [i for i in hosts[h]["issues"] if i["metric"] == "image_digest"]
    md = (rd2 / "report.md").read_text()
    assert "ran a different container image than the majority" in md and "host003" in md, md

    # 5. Ctrl-C while a long benchmark runs in every host's container: each container is stopped and
    # removed over SSH (sudo -n, the host's --root/--runroot), no benchmark is left running
    body = CONFIG.replace("@DIST@", "tarball").replace("@SOURCE@", f"tarball: {cpu_image}")
    body = body.replace("@IMAGE@", IMAGE).replace("@GLOBAL@", json.dumps(PODMAN_GLOBAL))
    head, _, tail = body.partition("  benchmarks:\n")
    long_cfg = fleet.config(
        head + "  benchmarks:\n" + LONG_BENCHMARK + tail[tail.index("# Three CPU") :], name="long.yaml"
    )

    def ours(h: str) -> list[str]:
        return _podman(fleet.storage / h, "ps", "-a", "-q").stdout.split()

    ctrl_c_in_containers(fleet, inv, long_cfg, tmp_path / "long", ours)

    # 6. cleanup: containers and, on request, the image
    _podman(
        fleet.storage / "host001", "create", "--name", "leftover", "--label", "sb-fleet.run=x", IMAGE, "true"
    )
    r = sb_fleet(
        "cleanup",
        "-i",
        str(inv),
        "-c",
        str(cfg),
        "--images",
        "--run-dir",
        str(tmp_path / "clean"),
        "--quiet",
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    for h in names:
        assert _podman(fleet.storage / h, "image", "exists", IMAGE, check=False).returncode != 0
        assert _podman(fleet.storage / h, "ps", "-a", "-q").stdout.strip() == ""


def test_registry_password_is_never_written(ctr_fleet, podman_host, tmp_path):
    """Pull with a login: the password (from an env var) reaches podman on stdin only; it appears in
    no file of the run directory, even though the login fails (nothing listens at the registry)."""
    fleet = ctr_fleet
    pw = "pw-" + secrets.token_hex(12)
    src = "auth: {registry: '127.0.3.250:5999', username: tester, password_env: SBF_TEST_REGISTRY_PW}"
    cfgp = _config(fleet, "registry.yaml", "registry", src, image="127.0.3.250:5999/sb-bench:cpu")
    rd = tmp_path / "reg"
    before = set(Path("/dev/shm").glob("sb-fleet-*"))
    r = sb_fleet(
        "deploy",
        "-i",
        str(fleet.ctr_inventory),
        "-c",
        str(cfgp),
        "--run-dir",
        str(rd),
        "--limit",
        "host001",
        env={"SBF_TEST_REGISTRY_PW": pw},
        timeout=300,
    )
    assert r.returncode in (1, 3), r.stdout + r.stderr
    outcome = _json(rd / "outcomes.json")["hosts"]["host001"]
    assert "registry login" in outcome["reason"], outcome
    assert pw not in r.stdout + r.stderr
    for p in rd.rglob("*"):
        if p.is_file():
            assert pw.encode() not in p.read_bytes(), f"the password leaked into {p}"
    assert set(Path("/dev/shm").glob("sb-fleet-*")) == before  # the temporary secret file is gone


REGISTRY_ADDR = "127.0.3.250:5000"
REGISTRIES_CONF = Path("/etc/containers/registries.conf.d/sb-fleet-test.conf")


@pytest.fixture(scope="module")
def registry(podman_host, cpu_image, tmp_path_factory):
    """A real registry (Debian's docker-registry, htpasswd auth, plain HTTP) holding the CPU image."""
    need("docker-registry")
    import bcrypt

    d = tmp_path_factory.mktemp("registry")
    user, pw = "tester", "pw-" + secrets.token_hex(12)
    (d / "htpasswd").write_text(f"{user}:{bcrypt.hashpw(pw.encode(), bcrypt.gensalt(rounds=5)).decode()}\n")
    (d / "config.yml").write_text(
        f"version: 0.1\nlog: {{level: error}}\nstorage: {{filesystem: {{rootdirectory: {d / 'data'}}}}}\n"
        f"http: {{addr: '{REGISTRY_ADDR}'}}\n"
        f"auth: {{htpasswd: {{realm: sb-fleet-test, path: {d / 'htpasswd'}}}}}\n"
    )
    rule = f'[[registry]]\nlocation = "{REGISTRY_ADDR}"\ninsecure = true\n'  # plain HTTP, test only
    if not REGISTRIES_CONF.exists() or REGISTRIES_CONF.read_text() != rule:
        REGISTRIES_CONF.parent.mkdir(parents=True, exist_ok=True)
        REGISTRIES_CONF.write_text(rule)
    proc = subprocess.Popen(
        ["docker-registry", "serve", str(d / "config.yml")],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=(log := open(d / "registry.log", "w")),  # noqa: SIM115 - closed in finally
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection((REGISTRY_ADDR.split(":")[0], 5000), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, (d / "registry.log").read_text()
                time.sleep(0.1)
        store = d / "push-store"  # load the tarball into a private storage and push from there
        _podman(store, "load", "-q", "-i", str(cpu_image))
        ref = f"{REGISTRY_ADDR}/sb-bench:cpu"
        _podman(store, "push", "-q", "--creds", f"{user}:{pw}", IMAGE, ref)
        _podman(store, "rmi", "-af", check=False)
        shutil.rmtree(store, ignore_errors=True)
        shutil.rmtree(_storage_args(store)[3], ignore_errors=True)
        yield {"ref": ref, "user": user, "password": pw}
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


def _intervals(run_dir: Path, stage: str, task: str) -> list[tuple[float, float]]:
    """(start, end) of ``task`` on each host, from ansible-runner's job events."""
    import datetime as dt

    out = []
    for f in (run_dir / "ansible" / stage / "artifacts" / stage / "job_events").glob("*.json"):
        e = json.loads(f.read_text())
        ed = e.get("event_data") or {}
        if e.get("event") == "runner_on_ok" and ed.get("task") == task:
            out.append(tuple(dt.datetime.fromisoformat(ed[k]).timestamp() for k in ("start", "end")))
    return out  # type: ignore[return-value]


def test_registry_pull_with_login_throttled(ctr_fleet, registry, cpu_image, tmp_path):
    """Pull from a real registry: login with the password from an env var (stdin only), pulls
    throttled to 2 hosts at once, the pulled image's digest recorded, credentials gone afterwards."""
    from sb_fleet.plan.container_commands import archive_digest

    fleet = ctr_fleet
    src = (
        f"auth: {{registry: '{REGISTRY_ADDR}', username: {registry['user']}, "
        "password_env: SBF_TEST_REGISTRY_PW}"
    )
    cfg = _config(fleet, "registry-ok.yaml", "registry", src, image=registry["ref"])
    rd = tmp_path / "pull"
    r = sb_fleet(
        "deploy",
        "-i",
        str(fleet.ctr_inventory),
        "-c",
        str(cfg),
        "--run-dir",
        str(rd),
        env={"SBF_TEST_REGISTRY_PW": registry["password"]},
        timeout=900,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    table = _json(rd / "containers.json")
    want = archive_digest(cpu_image)
    assert {table["hosts"][h.name]["deploy_digest"] for h in fleet.hosts} == {want}
    pulls = sorted(_intervals(rd, "deploy-image", "pull the image"))
    assert len(pulls) == 3
    # hosts pulling at each pull's start; 0.5 s of slack: a task's recorded end trails its slot's release
    overlap = max(sum(1 for s, e in pulls if s <= t < e - 0.5) for t, _ in pulls)
    assert overlap <= 2, pulls  # pull_throttle: 2
    for p in rd.rglob("*"):
        if p.is_file():
            assert registry["password"].encode() not in p.read_bytes(), f"the password leaked into {p}"
    for h in fleet.hosts:
        assert not (Path(h.workspace) / ".sb-registry-auth").exists()


def test_a_workspace_hosts_share_is_refused_before_the_container_part(ctr_fleet, podman_host, tmp_path):
    """fleet.runtime podman with one explicit sb_workspace for every host (a shared filesystem): deploy's
    hostprep claims the workspace before the image stage, so the hosts after the first get the same
    one-line refusal as without containers and never reach the container runtime. The owner goes on to
    the image stage (its pull fails here: nothing listens at the registry, which shows it got there)."""
    fleet = ctr_fleet
    shared = Path(fleet.user.pw_dir) / "ctr-shared-ws"
    shutil.rmtree(shared, ignore_errors=True)
    lines = ["[gpu]"]
    for h in fleet.hosts:
        args = json.dumps(_storage_args(fleet.storage / h.name), separators=(",", ":"))  # type: ignore[attr-defined]
        lines.append(
            f"{h.name} ansible_host={h.addr} ansible_port={h.port} sb_workspace=~/ctr-shared-ws "
            f"sb_container_host_args='{args}'"
        )
    lines += ["", "[gpu:vars]", f"ansible_user={USER}", f"ansible_ssh_private_key_file={fleet.client_key}"]
    lines += ["ansible_python_interpreter=/usr/bin/python3", f"sb_python={fleet.python}"]
    inv = fleet.dir / "ctr-shared.ini"
    inv.write_text("\n".join(lines) + "\n")
    cfg = _config(fleet, "shared.yaml", "registry", "", image="127.0.3.250:5999/sb-bench:cpu")
    rd = tmp_path / "shared"
    try:
        r = sb_fleet("deploy", "-i", str(inv), "-c", str(cfg), "--run-dir", str(rd), timeout=600)
        assert r.returncode in (1, 3), r.stdout + r.stderr
        deploy = {o["host"]: o for o in _json(rd / "outcomes" / "deploy.json")["hosts"]}
        owner = json.loads((shared / ".sb-fleet-host").read_text())["host"]
        assert deploy[owner]["reason"].startswith("image: "), deploy  # it reached the container part
        refused = {h: o["reason"] for h, o in deploy.items() if h != owner}
        assert len(refused) == len(fleet.hosts) - 1
        for h, why in refused.items():
            assert deploy[h]["outcome"] == "failed" and "\n" not in why
            assert f"workspace {shared} is host {owner}'s (marker {shared}/.sb-fleet-host)" in why
            assert f"and {h} sees it too" in why
            assert "put {host} in fleet.workspace" in why and "sb_workspace per host" in why
        # the refused hosts never reached the container runtime: the image stage ran on the owner alone
        events = (rd / "ansible").rglob("job_events/*.json")
        image_hosts = {
            json.loads(p.read_text()).get("event_data", {}).get("host")
            for p in events
            if "deploy-image" in str(p)
        }
        assert image_hosts - {None} == {owner}, image_hosts
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def test_sigterm_in_roots_image_load_leaves_no_process_and_no_container(ctr_fleet, cpu_image, tmp_path):
    """SIGTERM to validate while root's ``podman load`` (become) runs on the hosts: afterwards no process
    of the run is left (control node, hosts, root's, any container's: listed by the run's tags, names and
    directories) and no container labelled with the run, on any host."""
    import signal

    from tests.fleetlib.hangs import run_id_of, run_processes, wait_for, wait_run_gone

    fleet = ctr_fleet
    names = [h.name for h in fleet.hosts]
    for h in names:  # a fresh host: deploy loads the image (an earlier test may have loaded it)
        _podman(fleet.storage / h, "rmi", "-f", IMAGE, check=False)
    cfg = _config(fleet, "term-load.yaml", "tarball", f"tarball: {cpu_image}")
    rd = tmp_path / "term-load"
    t0 = time.monotonic()
    p = subprocess.Popen(
        [str(Path(sys.executable).parent / "sb-fleet"), "validate", "-i", str(fleet.ctr_inventory)]
        + ["-c", str(cfg), "--run-dir", str(rd), "--quiet"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        run_id = run_id_of(rd)

        def loading() -> list:
            return [x for x in run_processes(run_id, rd) if x.comm == "podman" and " load " in x.cmdline]

        wait_for(lambda: loading() or p.poll() is not None, 240, "root's podman load, tagged with the run")
        assert p.poll() is None, p.communicate()
        assert any(x.why == "host tag" for x in loading()), loading()
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode in (1, 3, 130), out[-2000:] + err[-3000:]
    # root's load ended by the stop itself, before sb-fleet returned (not left to finish on its own)
    assert not loading(), "\n".join(map(str, loading())) + "\n" + err[-2000:]
    wait_run_gone(run_id, rd, err)
    for h in names:
        ctrs = _podman(fleet.storage / h, "ps", "-a", "-q", "--filter", f"label=sb-fleet.run={run_id}")
        assert ctrs.stdout.split() == [], (h, ctrs.stdout)
    print(f"\nSIGTERM in the image load: {time.monotonic() - t0:.1f} s")
