"""The container stages: render the container playbooks, put the image on every host, clean up.

Called by the spine when ``fleet.runtime`` is docker, podman or enroot:
``render_container`` (from ``render_playbooks``) writes ``container-deploy.yml``
and rewrites each step's playbook to run inside the image; ``deploy_images``
(from the deploy stage) runs ``container-deploy.yml`` on the hosts the host
preparation left fit and records each host's image digest; ``cleanup`` is
the ``sb-fleet cleanup`` command.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sb_fleet.config import Config
from sb_fleet.container import (
    ContainerSettings,
    cleanup_vars,
    deploy_vars,
    hold_registry_password,
    image_file_info,
    record_digests,
    registry_secret,
    run_vars,
)
from sb_fleet.errors import ConfigError
from sb_fleet.outcome import HostOutcome, Outcome
from sb_fleet.plan import Plan
from sb_fleet.rundir import atomic_write_text

if TYPE_CHECKING:
    from sb_fleet.workflow import Options, Session

DEPLOY_PLAYBOOK = "container-deploy.yml"
CHECK_TASK = "the suite runs in the image"
# Runs in the image at deploy: the suite imports, torch works; its facts go into facts/<host>.json.
IMAGE_CHECK = (
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


def _jenv() -> Any:
    """The spine's template environment, plus ``yjson``: JSON without HTML escaping (readable YAML)."""
    from sb_fleet.render import _env

    env = _env()
    env.filters["yjson"] = lambda v: json.dumps(v)
    return env


def render_container(plan: Plan, config: Config, run_id: str, out: Path, runs: dict[str, Path]) -> Path:
    """Write container-deploy.yml and rewrite every step playbook in ``runs`` to run in the image."""
    from sb_fleet.render import run_env, runner_args

    runtime = config.fleet.runtime
    c = settings(config)
    hold_registry_password(c)
    env = _jenv()
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
    ctr = deploy_vars(runtime, c, run_id, image, [c.python, "-c", IMAGE_CHECK])  # type: ignore[arg-type]
    deploy = out / DEPLOY_PLAYBOOK
    atomic_write_text(
        deploy, env.get_template("container_deploy.yml.j2").render(run_id=run_id, fleet=fleet, ctr=ctr)
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
                node_args_file=str(node_file.resolve()) if step.multi_node else None,
                runner_args=runner_args(run_id, step, config.fleet.master_port),
            ),
        )
    return deploy


def render_cleanup(config: Config, out: Path, images: bool, workspaces: bool) -> Path:
    runtime = config.fleet.runtime
    ctr: dict[str, Any] = {"runtime": "none"}
    if runtime != "none":
        ctr = cleanup_vars(runtime, settings(config), images)
    pb = out / "cleanup.yml"
    atomic_write_text(
        pb,
        _jenv()
        .get_template("container_cleanup.yml.j2")
        .render(fleet=config.fleet.model_dump(), ctr=ctr, images=images, workspaces=workspaces),
    )
    return pb


def _check_facts(res: dict[str, Any]) -> dict[str, Any]:
    out = str((res.get(CHECK_TASK) or {}).get("stdout") or "").strip()
    try:
        d = json.loads(out.splitlines()[-1]) if out else {}
    except ValueError:
        return {}
    return d if isinstance(d, dict) else {}


def deploy_images(s: Session, outcomes: dict[str, HostOutcome]) -> None:
    """Put the image on every host deploy left fit; a host that fails gets a failed deploy outcome."""
    from sb_fleet.execute import run_playbook
    from sb_fleet.rundir import safe_name
    from sb_fleet.workflow import _python_for_ansible

    c = settings(s.config)
    hosts = [h for h, o in outcomes.items() if o.outcome == Outcome.OK]
    t0 = time.monotonic()
    with s.progress.stage("deploy image", hosts), registry_secret(c):
        res = run_playbook(
            "deploy-image",
            s.rd.path / "playbooks" / DEPLOY_PLAYBOOK,
            s.inventory,
            hosts,
            s.rd.sub("ansible", "deploy-image"),
            s.ssh,
            s.forks,
            _python_for_ansible(),
            s.progress.update,
        )
    for h, o in res.outcomes.items():
        if o.outcome != Outcome.OK:
            outcomes[h] = HostOutcome(h, "deploy", o.outcome, f"image: {o.reason}")
    record_digests(s.rd, s.config.fleet.runtime, "deploy", res.results)
    for h, r in res.results.items():
        extra = _check_facts(r)
        if extra:
            path = f"facts/{safe_name(h)}.json"
            s.rd.write_json(path, {**s.rd.read_json(path, {"host": h}), **extra})
    table = s.rd.read_json("containers.json", {"schema_version": 1, "hosts": {}})
    table["deploy_seconds"] = round(time.monotonic() - t0, 2)
    s.rd.write_json("containers.json", table)


def record_run(s: Session, results: dict[str, dict[str, dict[str, Any]]]) -> None:
    """After a run step: the digest of the image each host ran."""
    record_digests(s.rd, s.config.fleet.runtime, "run", results)


def cleanup(opts: Options, images: bool, workspaces: bool) -> int:
    """``sb-fleet cleanup``: remove sb-fleet's containers, and on request the image and workspaces."""
    from sb_fleet import workflow as wf
    from sb_fleet.execute import run_playbook
    from sb_fleet.outcomes import exit_code, save_stage

    s = wf.open_session(opts)
    start = wf.utcnow()
    pb = render_cleanup(s.config, s.rd.sub("playbooks"), images, workspaces)
    if opts.dry_run:
        print(pb.read_text())
        return 0
    hosts = list(s.plan.hosts)
    with s.progress.stage("cleanup", hosts):
        res = run_playbook(
            "cleanup",
            pb,
            s.inventory,
            hosts,
            s.rd.sub("ansible", "cleanup"),
            s.ssh,
            s.forks,
            wf._python_for_ansible(),
            s.progress.update,
        )
    save_stage(s.rd, "cleanup", res.outcomes)
    code = exit_code({h: {"outcome": o.outcome.value} for h, o in res.outcomes.items()})
    wf.finish(s, start, code)
    for h, o in res.outcomes.items():
        print(f"{h}: {o.outcome.value}{' - ' + o.reason if o.reason else ''}")
    print(f"run directory: {s.rd.path}")
    return code
