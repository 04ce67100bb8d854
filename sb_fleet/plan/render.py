"""Rendering: the plan as files Ansible and the on-host runner read, written once into ``playbooks/``.

Pure apart from writing into the run directory; the values that reach the templates come from
:mod:`sb_fleet.plan.templates`, the container playbooks from :mod:`sb_fleet.plan.render_container`.
"""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
from dataclasses import dataclass
from pathlib import Path

from sb_fleet.config.fleet_config import Config
from sb_fleet.config.inventory import Inventory
from sb_fleet.plan import ansible_data
from sb_fleet.plan.host_exec import EXEC_HOSTS_FILE, exec_hosts_doc
from sb_fleet.plan.render_container import render_container
from sb_fleet.plan.render_health import health_vars, render_check
from sb_fleet.plan.resources import suite_dir
from sb_fleet.plan.run_plan import Plan
from sb_fleet.plan.templates import run_env, runner_args, step_spec, template_env
from sb_fleet.safe_files import atomic_write_bytes, atomic_write_json, atomic_write_text

INDEX = "index.json"  # playbooks/index.json: what was rendered, read back by later commands


@dataclass(frozen=True)
class Rendered:
    deploy: Path
    runs: dict[str, Path]  # step id -> playbook
    suite_archive: Path
    suite_digest: str
    image_deploy: Path | None = None  # container-deploy.yml with fleet.runtime docker/podman/enroot
    check: Path | None = None  # check.yml: the health checks (None in a run directory made before them)
    # deploy-suite.yml: the suite's transfer, run for the hosts deploy.yml's exec found without it (None in
    # a run directory made before: its deploy.yml ends such hosts' play with that task itself)
    deploy_suite: Path | None = None
    # exec-hosts.json: what each host's deploy exec needs (sb_fleet.plan.host_exec; None in a run directory
    # made before: its deploy.yml builds the command in Ansible's Jinja per host)
    exec_hosts: Path | None = None

    def to_json(self) -> dict:
        return {
            "deploy": self.deploy.name,
            "runs": {k: v.name for k, v in self.runs.items()},
            "suite_archive": self.suite_archive.name,
            "suite_digest": self.suite_digest,
            "image_deploy": self.image_deploy.name if self.image_deploy else None,
            "check": self.check.name if self.check else None,
            "deploy_suite": self.deploy_suite.name if self.deploy_suite else None,
            "exec_hosts": self.exec_hosts.name if self.exec_hosts else None,
        }

    @classmethod
    def from_json(cls, d: dict, out: Path) -> Rendered:
        """The playbooks rendered into ``out`` (KeyError/TypeError on a foreign index)."""
        return cls(
            out / d["deploy"],
            {str(k): out / v for k, v in d["runs"].items()},
            out / d["suite_archive"],
            str(d["suite_digest"]),
            out / d["image_deploy"] if d.get("image_deploy") else None,
            out / d["check"] if d.get("check") else None,
            out / d["deploy_suite"] if d.get("deploy_suite") else None,
            out / d["exec_hosts"] if d.get("exec_hosts") else None,
        )


def suite_archive_bytes(src: Path | None = None) -> tuple[bytes, str]:
    """A reproducible tar.gz of the suite (sorted, fixed mtimes) and its digest, named by content."""
    src = src or suite_dir()
    files = sorted(
        p
        for p in src.rglob("*")
        if p.is_file()
        and "__pycache__" not in p.parts
        and not p.name.endswith((".pyc", ".egg-info"))
        and ".egg-info" not in str(p)
    )
    h = hashlib.sha256()
    for p in files:
        h.update(str(p.relative_to(src)).encode() + b"\0" + p.read_bytes())
    digest = h.hexdigest()[:16]
    buf = io.BytesIO()
    import gzip

    # Level 6, not 9: 2.5x less CPU on every run's start for <1% more bytes (the digest is of the contents).
    with (
        gzip.GzipFile(fileobj=buf, mode="wb", mtime=0, compresslevel=6) as gz,
        tarfile.open(fileobj=gz, mode="w") as tar,
    ):
        for p in files:
            info = tar.gettarinfo(str(p), arcname=f"suite-{digest}/{p.relative_to(src)}")
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            info.mode = 0o755 if p.stat().st_mode & 0o100 else 0o644
            with open(p, "rb") as f:
                tar.addfile(info, f)
    return buf.getvalue(), digest


def needs_torch(plan: Plan) -> bool:
    """Whether a host needs PyTorch for this plan: False only when every benchmark runs on the host
    alone (``device`` fixed to ``host``, e.g. ``noop``), so deploy then skips the torch checks."""
    try:
        from sb_bench.core import registry

        for e in plan.entries():
            dev = registry.get(e.benchmark).all_params().get("device")
            if dev is None or tuple(dev.choices or ()) != ("host",):
                return True
        return False
    except Exception:
        return True


def check_rendered(paths: list[Path]) -> None:
    """Fail here, not on 500 hosts, if a template produced invalid YAML."""
    for p in paths:
        ansible_data.load(p.read_text())


def suite_b64_path(archive: Path) -> Path:
    """The suite archive in base64, beside it: what the suite's transfer sends on the host's stdin
    (deploy-suite.yml's lookup, sb-fleet's own ssh client's stdin)."""
    return archive.with_name(archive.name + ".b64")


def render_playbooks(
    plan: Plan, config: Config, inventory: Inventory, run_id: str, out: Path, config_dir: Path | None = None
) -> Rendered:
    """Write the deploy, check and run playbooks, step specs and the suite archive under ``out``
    (``config_dir``: where the config's relative paths, e.g. health.profiles, start)."""
    out = Path(out)
    env = template_env()
    hosts_file = ansible_data.write_hosts_file(plan.host_setup, out)
    data, digest = suite_archive_bytes()
    archive = out / f"suite-{digest}.tar.gz"
    if not archive.exists():
        atomic_write_bytes(archive, data, 0o644)
    b64 = suite_b64_path(archive)  # the deploy task sends it on stdin
    if not b64.exists():
        atomic_write_bytes(b64, base64.b64encode(data), 0o644)
    fleet = config.fleet.model_dump()
    if config.fleet.runtime != "none":  # the image brings torch: the host needs neither a venv nor torch
        fleet["venv"] = False
    health = health_vars(config, out, config_dir or Path.cwd())
    deploy, deploy_suite = out / "deploy.yml", out / "deploy-suite.yml"
    for part, pb in (("fast", deploy), ("suite", deploy_suite)):
        atomic_write_text(
            pb,
            env.get_template("deploy.yml.j2").render(part=part, run_id=run_id, suite_b64=str(b64.resolve())),
        )
    exec_hosts = out / EXEC_HOSTS_FILE
    atomic_write_json(
        exec_hosts,
        exec_hosts_doc(
            plan.host_setup,
            inventory,
            fleet,
            health,
            digest,
            needs_torch(plan) and config.fleet.runtime == "none",
        ),
    )
    runs = {}
    for step in plan.steps:
        spec = out / f"{step.id}.json"
        atomic_write_json(spec, step_spec(run_id, step))
        node_file = None
        if step.multi_node:
            node_args: dict[str, list[str]] = {}
            for g in step.groups:
                node_args.update(g.node_args(inventory, config.fleet.master_port))
            node_file = out / f"{step.id}-nodes.yml"
            atomic_write_text(node_file, ansible_data.dump({"sb_node_args": node_args}))
        pb = out / f"{step.id}.yml"
        atomic_write_text(
            pb,
            env.get_template("run.yml.j2").render(
                run_id=run_id,
                fleet=fleet,
                step=step,
                hosts_file=hosts_file.name,
                node_args_file=node_file.name if node_file else None,
                runner_args=runner_args(run_id, step, config.fleet.master_port),
                run_env_list=[f"{k}={v}" for k, v in run_env(config).items()],
            ),
        )
        runs[step.id] = pb
    image = None
    if (
        config.fleet.runtime != "none"
    ):  # the steps run in the image; container-deploy.yml puts it on the hosts
        image = render_container(plan, config, run_id, out, runs)
    check = render_check(health, out)
    check_rendered([hosts_file, deploy, deploy_suite, check, *runs.values(), *([image] if image else [])])
    rendered = Rendered(deploy, runs, archive, digest, image, check, deploy_suite, exec_hosts)
    atomic_write_json(out / INDEX, rendered.to_json())
    return rendered
