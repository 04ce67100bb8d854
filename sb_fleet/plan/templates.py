"""What the playbook templates and the on-host runner are given: the template environment, the step spec,
the runner's arguments and the benchmark processes' environment. Pure.

Templates live in ``playbooks/*.j2`` and use ``[[ ]]``/``[% %]`` so that Ansible's own ``{{ }}`` pass
through untouched. Every value from a config or inventory is filled in through the ``data`` filter
(:mod:`sb_fleet.plan.ansible_data`: YAML with each string tagged ``!unsafe``), so Ansible takes it as
data and never templates it; sb-fleet's own Ansible expressions and names go through ``yjson``/``tojson``
(a JSON literal is valid YAML), so no value can break the playbook either.
"""

from __future__ import annotations

import base64
import json

import jinja2

from sb_fleet.config.fleet_config import Config
from sb_fleet.plan import ansible_data
from sb_fleet.plan.resources import playbooks_dir
from sb_fleet.plan.run_plan import Step
from sb_fleet.plan.tasks import TAG, TASKS

SPEC_VERSION = 1


def template_env() -> jinja2.Environment:
    """The Jinja2 environment of the playbook templates, with ``tasks``, ``yjson`` (JSON, no HTML escaping)
    and ``data`` (a value Ansible takes as data, never as a template)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(playbooks_dir())),
        variable_start_string="[[",
        variable_end_string="]]",
        block_start_string="[%",
        block_end_string="%]",
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["yjson"] = lambda v: json.dumps(v)
    env.filters["data"] = ansible_data.literal
    env.globals["tasks"] = dict(TASKS)
    env.globals["tag"] = dict(TAG)
    return env


def step_spec(run_id: str, step: Step) -> dict:
    spec = {
        "schema_version": SPEC_VERSION,
        "run_id": run_id,
        "step": step.id,
        "entries": [e.spec() for e in step.entries],
    }
    if step.run_timeout is not None:
        spec["run_timeout"] = step.run_timeout  # the host's deadline for every step together
    return spec


def runner_args(run_id: str, step: Step, master_port: int) -> list[str]:
    # The spec travels inline in argv (no secrets in it): one task per host and step, no file copy.
    # Base64, so neither Ansible's templating nor any shell can read anything into it.
    spec = json.dumps(step_spec(run_id, step), separators=(",", ":"), sort_keys=True)
    return [
        "-m",
        "sb_bench.host.runner",
        "--spec-b64",
        base64.b64encode(spec.encode()).decode(),
        "--results",
        f"runs/{run_id}/results",
        "--master-port",
        str(master_port),
    ]


def run_env(config: Config) -> dict[str, str]:
    """Environment of the benchmark processes: ``fleet.env``, plus the monitor's interval when enabled."""
    env = {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in config.fleet.env.items()}
    mon = config.superbench.monitor
    if mon is not None and mon.enable:
        env.setdefault("SB_MONITOR_INTERVAL", str(mon.sample_interval))
    return env
