"""Container command sets (docker, podman, enroot) against golden files; config validation; digests.

The podman commands also run for real in tests/integration/test_container.py; docker and enroot are
checked here only as rendered commands (no Docker engine or enroot on this machine kind).
A missing golden fails; ``pytest --update-goldens`` rewrites them after an intended change.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import pytest
from pydantic import ValidationError

from sb_fleet.config.fleet_config import FleetSettings
from sb_fleet.plan import container_commands as ct
from sb_fleet.plan.container_commands import ContainerSettings, RunTarget, V, cat

GOLDEN = Path(__file__).parent / "golden" / "container"
RUNTIMES = ("docker", "podman", "enroot")

SETTINGS = {
    "tarball": ContainerSettings(
        image="registry.example.com/gpu/sb-bench:24.05",
        distribution="tarball",
        tarball="/srv/images/sb-bench-24.05.tar",
        shm_size="32g",
        extra_run_args=["--cap-add", "IPC_LOCK"],
        pull_throttle=16,
        gpus="all",
    ),
    "registry": ContainerSettings(
        image="registry.example.com/gpu/sb-bench:24.05",
        auth={"registry": "registry.example.com", "username": "svc-bench", "password_env": "SB_REGISTRY_PW"},
        ipc_host=False,
        global_args=["--log-level=warn"],
    ),
}


def _commands(runtime: str, c: ContainerSettings) -> dict:
    t = RunTarget(cat("sb-r1-step01-", V("inventory_hostname")), "r1")
    run = ct.run_cmd(
        runtime,
        c,
        t,
        ["python3", V("sb_runner_args", splat=True)],  # type: ignore[arg-type]
        {"GLOO_SOCKET_IFNAME": "ib0"},
    )
    out: dict = {
        "become": ct.uses_become(runtime, c),  # type: ignore[arg-type]
        "login": ct.login_cmd(runtime, c),  # type: ignore[arg-type]
        "logout": ct.logout_cmd(runtime, c),  # type: ignore[arg-type]
        "pull": ct.pull_cmd(runtime, c),  # type: ignore[arg-type]
        "load": ct.load_cmd(runtime, c),  # type: ignore[arg-type]
        "create": ct.create_cmd(runtime, c),  # type: ignore[arg-type]
        "inspect": ct.inspect_cmd(runtime, c),  # type: ignore[arg-type]
        "run": run,
        **{f"cleanup {k}": v for k, v in ct.cleanup_cmds(runtime, c, images=True).items()},  # type: ignore[arg-type]
    }
    shown = {k: ct.to_display(v) if isinstance(v, list) else v for k, v in out.items()}
    shown["run (ansible)"] = ct.to_ansible(run)
    shown["digest (ansible)"] = ct.digest_expr(runtime, "sb_img")  # type: ignore[arg-type]
    return shown


@pytest.mark.parametrize("dist", sorted(SETTINGS))
@pytest.mark.parametrize("runtime", RUNTIMES)
def test_commands_match_golden(runtime, dist, golden):
    got = json.dumps(_commands(runtime, SETTINGS[dist]), indent=2) + "\n"
    golden(GOLDEN / f"{runtime}-{dist}.json", got)


def test_gpu_and_network_flags_per_runtime():
    c = SETTINGS["tarball"]  # gpus: all
    t = RunTarget("n", "r1")
    docker = ct.to_display(ct.run_cmd("docker", c, t, ["x"], {}))
    podman = ct.to_display(ct.run_cmd("podman", c, t, ["x"], {}))
    enroot = ct.to_display(ct.run_cmd("enroot", c, t, ["x"], {}))
    assert "--gpus" in docker and docker[docker.index("--gpus") + 1] == "all"
    assert "--device" in podman and podman[podman.index("--device") + 1] == "nvidia.com/gpu=all"
    assert "NVIDIA_VISIBLE_DEVICES=all" in enroot
    for argv in (docker, podman):
        assert "--network=host" in argv and "--ipc=host" in argv and argv[-2:] == [c.image, "x"]
        assert argv[argv.index("--ulimit") + 1] == "memlock=-1"
    cpu = c.model_copy(update={"gpus": "none", "ipc_host": False})
    argv = ct.to_display(ct.run_cmd("docker", cpu, t, ["x"], {}))
    assert "--gpus" not in argv and "--ulimit" not in argv and argv[argv.index("--shm-size") + 1] == "32g"


# Facts as hostprep records them (facts/<host>.json): what picks each host's device flags.
_IB_PORT = {"port": 1, "state": "4: ACTIVE", "rate": "200 Gb/sec (4X HDR)", "link_layer": "InfiniBand"}
FACTS = {
    "ndv4 (8 A100, 8 HDR IB)": {
        "gpu_vendor": "nvidia",
        "gpu_count": 8,
        "gpu_model": "NVIDIA A100-SXM4-80GB",
        "nics": [
            {"name": f"mlx5_{i}", "node_guid": "0c42:a103:0016:054c", "ports": [_IB_PORT]} for i in range(8)
        ],
    },
    "8 H100, no RDMA": {"gpu_vendor": "nvidia", "gpu_count": 8, "gpu_model": "NVIDIA H100 80GB HBM3"},
    "8 MI300X": {"gpu_vendor": "amd", "gpu_count": 8, "gpu_model": "AMD Instinct MI300X"},
    "cpu only (the loopback fleet)": {"gpu_vendor": None, "gpu_count": 0, "gpu_model": None},
    "no facts": None,
    "hostile facts": {
        "gpu_vendor": "nvidia --privileged",
        "gpu_count": "8; rm -rf /",
        "nics": [{"name": "x", "ports": "--device /dev/mem"}],
    },
    "count is not a number": {"gpu_vendor": "nvidia", "gpu_count": True, "nics": "mlx5_0"},
}
DEVICE_SETTINGS = {
    "auto (default)": {},
    "gpus: all": {"gpus": "all"},
    "gpus: none, infiniband: all": {"gpus": "none", "infiniband": "all"},
    "none": {"gpus": "none", "infiniband": "none"},
}


def _resolved(argv: list, devices: list[str]) -> list[str]:
    """The argv as the host runs it: the device splat replaced by that host's flags."""
    out: list[str] = []
    for t in ct.to_display(argv):
        out += devices if t == f"<{ct.DEVICES.expr}>..." else [t]
    return out


def test_device_flags_from_facts_match_golden(golden):
    """Each host's GPU and RDMA flags, from its facts, per runtime and setting; and SuperBench's docker
    run as an NDv4 host runs it (--gpus all, --device /dev/infiniband, --ulimit memlock=-1, host network
    and IPC). A host's facts choose among constant flags, never write one."""
    base = ContainerSettings(image="nvcr.io/nvidia/pytorch:24.05-py3")
    table: dict = {}
    for setting, upd in DEVICE_SETTINGS.items():
        c = base.model_copy(update=upd)
        for name, facts in FACTS.items():
            row = table.setdefault(setting, {}).setdefault(name, {})
            for rt in RUNTIMES:
                row[rt] = [*ct.forced_device_args(rt, c), *ct.host_device_args(rt, c, facts)]  # type: ignore[arg-type]
    t = RunTarget("sb-r1-step01-node001", "r1")
    ndv4 = ct.host_device_args("docker", base, FACTS["ndv4 (8 A100, 8 HDR IB)"])
    table["docker run on ndv4"] = _resolved(ct.run_cmd("docker", base, t, ["python3", "-m", "x"], {}), ndv4)
    shm = base.model_copy(update={"ipc_host": False})
    table["docker run on ndv4, ipc_host: false"] = _resolved(
        ct.run_cmd("docker", shm, t, ["python3"], {}), ndv4
    )
    golden(GOLDEN / "devices.json", json.dumps(table, indent=2) + "\n")
    for setting in table.values():
        if isinstance(setting, dict):
            for rt in RUNTIMES:
                assert setting["hostile facts"][rt] == setting["no facts"][rt]
                assert setting["count is not a number"][rt] == setting["no facts"][rt]


def test_device_vars_are_per_host_and_reach_the_run_command():
    c = ContainerSettings(image="x/y:1")
    v = ct.device_vars("docker", c, {"n1": FACTS["ndv4 (8 A100, 8 HDR IB)"], "n2": None})
    assert v == {
        ct.DEVICE_VAR: {
            "n1": ["--gpus", "all", "--device", "/dev/infiniband", "--ulimit", "memlock=-1"],
            "n2": [],
        }
    }
    expr = ct.to_ansible(ct.run_cmd("docker", c, RunTarget("n", "r1"), ["x"], {}))
    assert f"({ct.DEVICES.expr})" in expr


def test_a_step_that_outlives_its_timeout_has_its_container_removed(tmp_path):
    """The run playbook removes the step's container by name when the run task ends without an exit
    code (Ansible's task timeout): docker and podman keep a container whose client was killed."""
    from sb_fleet.config.fleet_config import Config
    from sb_fleet.plan.ansible_data import load as load_rendered
    from sb_fleet.plan.render_container import render_container
    from sb_fleet.plan.run_plan import Plan, RunEntry, Step

    step = Step("step01", (RunEntry("g", "g", "gemm-flops", {}, ({"name": "local"},), 60),), 120)
    plan = Plan(("h1",), {}, (step,), ("g",))
    for rt in RUNTIMES:
        cfg = Config(
            fleet={"runtime": rt, "container": SETTINGS["registry"].model_dump()},
            superbench={"benchmarks": {}},
        )
        runs = {"step01": tmp_path / f"{rt}-step01.yml"}
        render_container(plan, cfg, "r1", tmp_path, runs)
        tasks = load_rendered(runs["step01"].read_text())[0]["tasks"]
        block = next(t for t in tasks if "block" in t)
        assert block["block"][0]["timeout"] == 120
        if rt == "enroot":  # the container is the run's own process: nothing outlives the task
            assert "always" not in block
            continue
        rm = block["always"][0]
        assert rm["when"] == "sb_runner.rc is not defined" and rm["failed_when"] is False
        argv = rm["ansible.builtin.command"]["argv"]
        assert '"rm", "-f", ("sb-r1-step01-" ~ inventory_hostname' in argv, argv


def test_the_password_is_never_in_a_command():
    c = SETTINGS["registry"]
    for rt in RUNTIMES:
        text = json.dumps(_commands(rt, c))
        assert "password-stdin" in text or rt == "enroot"
        assert "SB_REGISTRY_PW" not in text  # not even the variable's name: the playbook reads a file


def test_config_validation():
    ok = {"image": "nvcr.io/nvidia/pytorch:24.05-py3"}
    ContainerSettings(**ok)
    bad = [
        {**ok, "image": "bad image"},
        {**ok, "image": "x/{{ lookup('pipe','id') }}"},
        {**ok, "extra_run_args": ["{{ evil }}"]},
        {**ok, "distribution": "tarball"},  # no tarball path
        {**ok, "tarball": "/x.tar"},  # tarball path with registry distribution
        {**ok, "shm_size": "lots"},
        {**ok, "auth": {"registry": "r", "username": "u", "password": "hunter2"}},  # inline: refused
        {**ok, "auth": {"registry": "r", "username": "u"}},
        {**ok, "auth": {"registry": "r", "username": "u", "password_env": "A", "password_file": "/f"}},
        {**ok, "auth": {"registry": "r", "username": "u", "password_env": "not a name"}},
        {**ok, "typo": 1},
    ]
    for b in bad:
        with pytest.raises(ValidationError):
            ContainerSettings(**b)
    with pytest.raises(ValidationError, match="container"):
        FleetSettings(runtime="podman")
    assert FleetSettings(runtime="enroot", container=ok).container.image == ok["image"]


PODMAN_INSPECT = json.dumps(
    [{"Id": "a" * 64, "Digest": "sha256:" + "b" * 64, "RepoTags": ["localhost/x:cpu"]}]
)
DOCKER_INSPECT = json.dumps([{"Id": "sha256:" + "c" * 64, "RepoDigests": []}])


@pytest.mark.parametrize(
    ("runtime", "out", "want"),
    [
        ("podman", PODMAN_INSPECT, "sha256:" + "a" * 64),
        ("docker", DOCKER_INSPECT, "sha256:" + "c" * 64),
        ("podman", "[]", None),
        ("docker", "", None),
        ("podman", "Error: not json", None),
        ("enroot", "d" * 64 + "  /ws/images/x.sqsh\n", "sha256:" + "d" * 64),
        ("enroot", "", None),
        ("enroot", "sha256sum: /ws/images/x.sqsh: No such file", None),
    ],
)
def test_parse_digest(runtime, out, want):
    assert ct.parse_digest(runtime, out) == want


def _archive(path: Path, config_name: str) -> None:
    with tarfile.open(path, "w") as tar:
        data = json.dumps([{"Config": config_name, "RepoTags": ["x:1"], "Layers": []}]).encode()
        info = tarfile.TarInfo("manifest.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))


def test_archive_digest_docker_and_oci_layouts(tmp_path):
    h = "e" * 64
    _archive(tmp_path / "a.tar", f"{h}.json")  # podman save / docker < 25
    _archive(tmp_path / "b.tar", f"blobs/sha256/{h}")  # docker >= 25 (OCI layout)
    assert ct.archive_digest(tmp_path / "a.tar") == ct.archive_digest(tmp_path / "b.tar") == f"sha256:{h}"
    (tmp_path / "c.tar").write_bytes(b"not a tar")
    assert ct.archive_digest(tmp_path / "c.tar") is None
    c = ContainerSettings(image="x/y:1", distribution="tarball", tarball=str(tmp_path / "a.tar"))
    cache = tmp_path / "image.json"
    info = ct.image_file_info("podman", c, cache)
    assert info.digest == f"sha256:{h}" and len(info.sha256) == 64 and len(info.sha1) == 40
    assert ct.image_file_info("podman", c, cache) == info  # from the cache
    assert ct.image_file_info("enroot", c.model_copy(), None).digest == f"sha256:{info.sha256}"


def test_registry_secret_from_env_is_hidden_and_removed(monkeypatch):
    c = SETTINGS["registry"]
    monkeypatch.setenv("SB_REGISTRY_PW", "s3cret-value")
    with ct.registry_secret(c):
        path = Path(os.environ[ct.SECRET_FILE_ENV])
        assert path.read_text() == "s3cret-value"
        assert oct(path.stat().st_mode & 0o777) == "0o600"
        assert "SB_REGISTRY_PW" not in os.environ  # ansible-runner records the environment it is given
    assert os.environ["SB_REGISTRY_PW"] == "s3cret-value"
    assert ct.SECRET_FILE_ENV not in os.environ
    assert not path.exists() and not path.parent.exists()


def test_registry_secret_missing_is_a_config_error(monkeypatch):
    from sb_fleet.errors import ConfigError

    monkeypatch.delenv("SB_REGISTRY_PW", raising=False)
    with pytest.raises(ConfigError, match="SB_REGISTRY_PW"), ct.registry_secret(SETTINGS["registry"]):
        pass


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("dist", sorted(SETTINGS))
def test_rendered_container_playbooks_are_valid_yaml(runtime, dist, tmp_path):
    from sb_fleet.config.fleet_config import Config
    from sb_fleet.plan.ansible_data import load as load_rendered
    from sb_fleet.plan.render_container import render_cleanup, render_container
    from sb_fleet.plan.run_plan import Plan, RunEntry, Step

    c = SETTINGS[dist]
    if dist == "tarball":
        tar = tmp_path / "img.tar"
        _archive(tar, f"{'f' * 64}.json")
        c = c.model_copy(update={"tarball": str(tar)})
    cfg = Config(fleet={"runtime": runtime, "container": c.model_dump()}, superbench={"benchmarks": {}})
    step = Step(
        "step01", (RunEntry("gemm-flops", "gemm-flops", "gemm-flops", {}, ({"name": "local"},), 60),), 120
    )
    plan = Plan(("h1",), {}, (step,), ("gemm-flops",))
    runs = {"step01": tmp_path / "step01.yml"}
    deploy = render_container(plan, cfg, "r1", tmp_path, runs)
    for p in (
        deploy,
        runs["step01"],
        render_cleanup(cfg, {}, tmp_path, images=True, workspaces=True, cache=True),
    ):
        doc = load_rendered(p.read_text())
        assert doc[0]["hosts"] == "all"
    text = deploy.read_text()
    if dist == "registry":
        assert "no_log: true" in text and "throttle:" in text
    else:
        assert "push the image tarball" in text and "checksum_algorithm: sha256" in text


def test_software_check_flags_the_host_off_the_majority_digest(tmp_path):
    import numpy as np

    from sb_fleet.analysis.fleet_results import Fleet
    from sb_fleet.analysis.software import check_software

    a, b = "sha256:" + "1" * 64, "sha256:" + "2" * 64
    (tmp_path / "facts").mkdir()
    for h, d in {"n1": a, "n2": a, "n3": b}.items():
        (tmp_path / "facts" / f"{h}.json").write_text(json.dumps({"host": h, "image_digest": d}))
    fleet = Fleet(str(tmp_path), ["n1", "n2", "n3", "n4"], ["x"], np.ones((4, 1)), run_dir=tmp_path)
    issues, warnings = check_software(fleet)
    assert list(issues) == [2]  # n3's row; n4 recorded no digest (no container run): not judged
    i = issues[2][0]
    assert (i.metric, i.check, i.severity) == ("image_digest", "software", "fail")
    assert "222222222222" in i.detail and "2 of 3" in i.detail
    assert warnings and "n3" in warnings[0]
    (tmp_path / "facts" / "n3.json").write_text(json.dumps({"host": "n3", "image_digest": a}))
    assert check_software(fleet) == ({}, [])


def test_host_image_facts_from_task_results():
    inspect = {"rc": 0, "stdout": PODMAN_INSPECT}
    assert ct.host_image_facts("podman", {"image digest": inspect, "load the image": {"rc": 0}}) == {
        "image_digest": "sha256:" + "a" * 64,
        "image_loaded": True,
    }
    # a skipped load (same digest already there) leaves an empty result
    assert (
        ct.host_image_facts("podman", {"image digest": inspect, "load the image": {}})["image_loaded"]
        is False
    )
    assert ct.host_image_facts("none", {"image digest": inspect}) == {}


def test_password_env_leaves_the_environment_at_render(monkeypatch):
    """Every ansible-runner stage writes its environment to artifacts/<stage>/command: the password
    variable must be gone before the first stage runs, and still reach the login."""
    monkeypatch.setenv("SB_REGISTRY_PW", "held-value")
    monkeypatch.setattr(ct, "_HELD", {})
    ct.hold_registry_password(SETTINGS["registry"])
    assert "SB_REGISTRY_PW" not in os.environ
    with ct.registry_secret(SETTINGS["registry"]):
        assert Path(os.environ[ct.SECRET_FILE_ENV]).read_text() == "held-value"
    assert "SB_REGISTRY_PW" not in os.environ


def test_ansible_accepts_every_rendered_container_playbook(tmp_path):
    """ansible-playbook --syntax-check on the deploy/run/cleanup playbooks of every runtime and
    distribution: the paths no test runs live here (docker, enroot, registry pulls) still parse."""
    import subprocess
    import sys

    from sb_fleet.config.fleet_config import Config
    from sb_fleet.plan.render_container import render_cleanup, render_container
    from sb_fleet.plan.run_plan import Plan, RunEntry, Step

    step = Step("step01", (RunEntry("g", "g", "gemm-flops", {}, ({"name": "local"},), 60),), 120)
    plan = Plan(("h1",), {}, (step,), ("g",))
    books = []
    tar = tmp_path / "img.tar"
    _archive(tar, f"{'f' * 64}.json")
    for rt in RUNTIMES:
        for dist, c in SETTINGS.items():
            if dist == "tarball":
                c = c.model_copy(update={"tarball": str(tar)})
            out = tmp_path / f"{rt}-{dist}"
            out.mkdir()
            cfg = Config(fleet={"runtime": rt, "container": c.model_dump()}, superbench={"benchmarks": {}})
            runs = {"step01": out / "step01.yml"}
            books += [render_container(plan, cfg, "r1", out, runs), runs["step01"]]
            books.append(render_cleanup(cfg, {}, out, images=True, workspaces=True, cache=True))
    inv = tmp_path / "inv.ini"
    inv.write_text("h1 ansible_connection=local\n")
    bindir = Path(sys.executable).parent
    r = subprocess.run(
        [str(bindir / "ansible-playbook"), "--syntax-check", "-i", str(inv), *map(str, books)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "ANSIBLE_NOCOLOR": "1"},
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]


def test_the_outcome_says_whether_the_outlived_container_was_removed():
    from sb_fleet.fleet.stages.run_stage import removed
    from sb_fleet.outcome import HostOutcome, Outcome
    from sb_fleet.plan.tasks import CONTAINER_REMOVE

    o = HostOutcome(
        "h1", "run", Outcome.TIMEOUT, "step01: run step01: Task failed: Timed out after 65 second(s)."
    )
    assert removed(o, {CONTAINER_REMOVE: {"rc": 0, "stdout": "sb-r1-step01-h1"}}).reason.endswith(
        "Timed out after 65 second(s).; its container was removed"
    )
    gone = removed(o, {CONTAINER_REMOVE: {"rc": 1, "stderr": "Error: cannot connect to the daemon\n"}})
    assert (
        gone.outcome == Outcome.TIMEOUT
        and "removing its container failed (Error: cannot connect" in gone.reason
    )
    assert removed(o, {CONTAINER_REMOVE: {"skipped": True}}) == o
    assert removed(o, {}) == o
    ok = HostOutcome("h1", "run", Outcome.OK)
    assert removed(ok, {CONTAINER_REMOVE: {"skipped": True}}) == ok


@pytest.mark.parametrize("runtime", RUNTIMES)
def test_mpi_across_nodes_in_containers_is_refused_at_plan_time(runtime, tmp_path):
    """mpirun in one container cannot start the other nodes' ranks in theirs: a clear error naming the
    entry and what to do, before any host is touched; mpi on one node, and torchrun across nodes, pass."""
    from sb_fleet.config.fleet_config import Config
    from sb_fleet.errors import ConfigError
    from sb_fleet.plan.render_container import render_container
    from sb_fleet.plan.run_plan import NodeGroup, Plan, RunEntry, Step

    cfg = Config(
        fleet={"runtime": runtime, "container": SETTINGS["registry"].model_dump()},
        superbench={"benchmarks": {}},
    )
    mpi = ({"name": "mpi", "proc_num": 1, "node_num": 2},)
    group = NodeGroup(("h1", "h2"), "10.0.0.1", mpi={"members": []})
    across = RunEntry("ib", "ib-traffic", "ib-loopback", {}, mpi, 60, True, 2, launcher="mpirun")
    plan = Plan(("h1", "h2"), {}, (Step("step01", (across,), 120, (group,)),), ("ib",))
    with pytest.raises(
        ConfigError, match=r"superbench\.benchmarks\.ib-traffic\.modes: mode mpi over 2 nodes"
    ):
        render_container(plan, cfg, "r1", tmp_path, {"step01": tmp_path / "s1.yml"})
    one = RunEntry(
        "ib", "ib-traffic", "ib-loopback", {}, ({"name": "mpi", "proc_num": 2},), 60, launcher="mpirun"
    )
    torchrun = RunEntry("nccl", "nccl-bw", "nccl-bw", {}, ({"name": "torch.distributed"},), 60, True, 2)
    tgroup = NodeGroup(("h1", "h2"), "10.0.0.1")
    plan = Plan(
        ("h1", "h2"),
        {},
        (Step("step01", (one,), 120), Step("step02", (torchrun,), 120, (tgroup,))),
        ("ib", "nccl"),
    )
    runs = {"step01": tmp_path / "s1.yml", "step02": tmp_path / "s2.yml"}
    render_container(plan, cfg, "r1", tmp_path, runs)
    assert runs["step02"].is_file()


@pytest.mark.parametrize("host", ["gpu001", "node-7.rack2", "we ird$name", "üni", "a/b"])
def test_ctrl_c_names_the_container_the_run_playbook_started(host):
    """The interrupted run stops each host's container by the name the run playbook gave it (an Ansible
    expression there, Python here): evaluated with Ansible's regex_replace (re.sub), they agree."""
    import re

    import jinja2

    c = ContainerSettings(image="x/y:1")
    expr = ct.run_vars("docker", c, "r1", "step01", {})["remove"]
    env = jinja2.Environment()
    env.filters["regex_replace"] = lambda value, pattern, repl: re.sub(pattern, repl, value)
    argv = env.compile_expression(expr.removeprefix("{{").removesuffix("}}").strip())(inventory_hostname=host)
    assert argv[-1] == ct.step_container_name("r1", "step01", host)


def test_ctrl_c_stop_command_per_runtime():
    c = ContainerSettings(image="x/y:1", global_args=["--log-level", "error"])
    assert ct.interrupt_argv("docker", c, ["-H", "unix:///d.sock"]) == [
        "sudo",
        "-n",
        "docker",
        "--log-level",
        "error",
        "-H",
        "unix:///d.sock",
    ]
    quiet = ContainerSettings(image="x/y:1", become=False)
    assert ct.interrupt_argv("podman", quiet, "not a list") == ["podman"]  # garbage host args: none
    assert ct.interrupt_argv("enroot", c, None) is None  # the runner's own process: stopping it suffices
