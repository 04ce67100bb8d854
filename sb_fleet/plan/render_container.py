"""Rendering of the container playbooks: ``container-deploy.yml`` (put the image on the hosts), each step's
playbook run inside the image, and ``cleanup.yml``. Pure apart from writing into ``playbooks/``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sb_fleet.config.fleet_config import Config
from sb_fleet.errors import ConfigError
from sb_fleet.plan.ansible_data import HOSTS_FILE, write_hosts_file
from sb_fleet.plan.container_commands import (
    ContainerSettings,
    cleanup_vars,
    deploy_vars,
    hold_registry_password,
    image_file_info,
    run_vars,
)
from sb_fleet.plan.resources import suite_dir
from sb_fleet.plan.run_plan import HostSetup, Plan
from sb_fleet.plan.templates import run_env, runner_args, template_env
from sb_fleet.safe_files import atomic_write_bytes, atomic_write_text

DEPLOY_PLAYBOOK = "container-deploy.yml"
# Runs in the image at deploy: the suite imports, torch works; its facts go into facts/<host>.json.
IMAGE_CHECK_CODE = (
    "import json, sb_bench, torch; print(json.dumps({'image_torch_version': torch.__version__, "
    "'image_torch_cuda': torch.version.cuda, 'image_gpu_count': "
    "torch.cuda.device_count() if torch.cuda.is_available() else 0}))"
)


def settings(config: Config) -> ContainerSettings:
    c = config.fleet.container
    if c is None:
        raise ConfigError(
            "config",
            "fleet.container",
            f"fleet.runtime is {config.fleet.runtime} but there is no fleet.container section",
            "give at least fleet.container.image",
        )
    return c


def render_container(plan: Plan, config: Config, run_id: str, out: Path, runs: dict[str, Path]) -> Path:
    """Write container-deploy.yml and rewrite every step playbook in ``runs`` to run in the image."""
    runtime = config.fleet.runtime
    c = settings(config)
    refuse_mpi_across_nodes(plan, runtime)
    hold_registry_password(c)
    env = template_env()
    fleet = config.fleet.model_dump()
    image = None
    if c.distribution == "tarball":
        tar = Path(c.tarball or "").expanduser()
        if not tar.is_file():
            raise ConfigError(
                "config",
                "fleet.container.tarball",
                f"{tar}: no such file",
                "save the image first (docker/podman save -o FILE IMAGE, or enroot's .sqsh)",
            )
        image = image_file_info(runtime, c, out / "image.json")  # type: ignore[arg-type]
    ctr = deploy_vars(runtime, c, run_id, image, [c.python, "-c", IMAGE_CHECK_CODE])  # type: ignore[arg-type]
    deploy = out / DEPLOY_PLAYBOOK
    atomic_write_text(
        deploy,
        env.get_template("container_deploy.yml.j2").render(
            run_id=run_id, fleet=fleet, ctr=ctr, hosts_file=HOSTS_FILE
        ),
    )
    for step in plan.steps:
        node_file = out / f"{step.id}-nodes.yml"
        ctr = run_vars(runtime, c, run_id, step.id, run_env(config))  # type: ignore[arg-type]
        atomic_write_text(
            runs[step.id],
            env.get_template("container_run.yml.j2").render(
                run_id=run_id,
                fleet=fleet,
                step=step,
                ctr=ctr,
                hosts_file=HOSTS_FILE,
                node_args_file=node_file.name if step.multi_node else None,
                runner_args=runner_args(run_id, step, config.fleet.master_port),
            ),
        )
    return deploy


def refuse_mpi_across_nodes(plan: Plan, runtime: str) -> None:
    """SuperBench's mpi mode over several nodes cannot run in containers yet: mpirun, in the first node's
    container, would reach the other nodes over SSH and start their ranks on the host, outside their
    containers (SuperBench runs an sshd in every container for this; sb-fleet does not). Refused at plan
    time, naming the entry, rather than failing on every host."""
    for step in plan.steps:
        for e in step.entries:
            if step.multi_node and e.launcher == "mpirun":
                raise ConfigError(
                    "config",
                    f"superbench.benchmarks.{e.entry}.modes",
                    f"mode mpi over {e.node_num} nodes cannot run with fleet.runtime {runtime}: mpirun in one "
                    "container would start the other nodes' ranks outside their containers",
                    "set node_num: 1 (mpirun on each node alone), use mode torch.distributed across nodes, "
                    "or run this entry with fleet.runtime: none",
                )


CACHE_WAIT_S = 60  # cleanup --cache: how long a host waits for a venv that a deploy holds


def render_cleanup(
    config: Config,
    setups: dict[str, HostSetup],
    out: Path,
    images: bool,
    workspaces: bool,
    cache: bool = False,
) -> Path:
    """``cleanup.yml`` and the hosts' values it reads (``setups``: the plan's); with ``cache``, hostprep.py
    beside it (the hosts get it on stdin)."""
    runtime = config.fleet.runtime
    ctr: dict[str, Any] = {"runtime": "none"}
    if runtime != "none":
        ctr = cleanup_vars(runtime, settings(config), images)
    hostprep = out / "hostprep.py"
    if cache:
        if not config.fleet.cache:
            raise ConfigError(
                "config",
                "fleet.cache",
                "cleanup --cache: fleet.cache is empty, so the hosts share no cache (each venv is in its "
                "workspace)",
                "remove the workspaces with --workspaces",
            )
        atomic_write_bytes(hostprep, (suite_dir() / "sb_bench" / "host" / "hostprep.py").read_bytes(), 0o644)
    write_hosts_file(setups, out)
    pb = out / "cleanup.yml"
    atomic_write_text(
        pb,
        template_env()
        .get_template("container_cleanup.yml.j2")
        .render(
            fleet=config.fleet.model_dump(),
            hosts_file=HOSTS_FILE,
            ctr=ctr,
            images=images,
            workspaces=workspaces,
            cache=cache,
            cache_wait=CACHE_WAIT_S,
            hostprep=str(hostprep.resolve()),
        ),
    )
    return pb
