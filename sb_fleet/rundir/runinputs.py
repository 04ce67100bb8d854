"""A run's inputs: written once into the run directory when the run is created, read back by every later
command.

``create_run`` loads and validates the config and inventory, builds the plan, renders the playbooks and
writes all of it (config as given and as validated, the inventory snapshot, ``hosts.json``,
``plan.json``, ``playbooks/``). ``open_run`` reads it back — ``Plan.from_json``, the validated config,
the rendered playbooks' index — and never rewrites any of it: ``--limit`` narrows what one command does,
never what the run is. A run directory of another schema version, or a missing or corrupt input file,
is a :class:`RunDirError` naming the file.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from sb_fleet import __version__
from sb_fleet.config.fleet_config import Config, load_config
from sb_fleet.config.inventory import Inventory, load_inventory
from sb_fleet.config.slurm_inventory import Resolved, is_slurm_source, resolve
from sb_fleet.errors import InventoryError, RunDirError, UsageError
from sb_fleet.plan.render import INDEX, Rendered, render_playbooks
from sb_fleet.plan.resources import default_config, default_inventory, root
from sb_fleet.plan.run_plan import GivenRounds, Plan, build_plan
from sb_fleet.plan.workspace import check_workspace_names
from sb_fleet.rundir import runlog
from sb_fleet.rundir.rundir import RunDir
from sb_fleet.safe_files import atomic_write_bytes


@dataclass(frozen=True)
class RunInputs:
    """What a run was created with; the same for every command on its run directory."""

    rd: RunDir
    config: Config
    inventory: Inventory  # the run's hosts, as Ansible resolves them (addresses, ports, users)
    plan: Plan
    rendered: Rendered

    @property
    def run_id(self) -> str:
        return self.rd.run_id

    def select(self, limit: str | None) -> list[str]:
        """The run's hosts that ``--limit`` selects (all of them without one), in plan order."""
        if not limit:
            return list(self.plan.hosts)
        wanted = set(self.inventory.limit(limit).names())
        hosts = [h for h in self.plan.hosts if h in wanted]
        if not hosts:
            raise UsageError(
                f"--limit {limit!r} matches no host of this run ({len(self.plan.hosts)} host(s) in "
                f"{self.rd.path / 'hosts.json'})"
            )
        return hosts


def default_inputs(config: Path | None, inventory: Path | None) -> tuple[Path, Path]:
    """The config and inventory of a new run: as given, else the built-in one-machine fleet."""
    inv = inventory or default_inventory()
    if config is not None:
        return Path(config), Path(inv)
    same = Path(inv).resolve() == default_inventory().resolve()
    return (default_config() if same else root() / "configs" / "default.yaml"), Path(inv)


def plan_inputs(
    cfg_path: Path, inv_path: Path, limit: str | None = None, given: Mapping[str, GivenRounds] | None = None
) -> tuple[Config, Inventory, Plan]:
    """Load, validate and plan, touching nothing on disk (the first half of :func:`create_run`).
    A new run with ``--limit`` is a run of those hosts only; ``given``: rounds that replace a pattern
    entry's own (a follow-up pass, :mod:`sb_fleet.fleet.pattern_followup`)."""
    config, inventory, plan, _ = _plan_inputs(cfg_path, inv_path, limit, given)
    return config, inventory, plan


def _load_fleet(config: Config, inv_path: Path) -> tuple[Inventory, Resolved | None]:
    """The inventory file as given, or the fleet Slurm names for ``slurm:...`` (resolved with sinfo into a
    YAML inventory, read by Ansible like any other; :mod:`sb_fleet.config.slurm_inventory`)."""
    if not is_slurm_source(inv_path):
        return load_inventory(inv_path), None
    res = resolve(str(inv_path), config.slurm.host_vars, config.slurm.sinfo)
    tmp = Path(tempfile.mkdtemp(prefix="sb-fleet-slurm-"))  # 0700, ours
    try:
        (tmp / "slurm.yml").write_text(res.text)
        inv = load_inventory(tmp / "slurm.yml")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return inv, res


def _plan_inputs(
    cfg_path: Path, inv_path: Path, limit: str | None, given: Mapping[str, GivenRounds] | None
) -> tuple[Config, Inventory, Plan, Resolved | None]:
    config = load_config(cfg_path)
    inventory, slurm = _load_fleet(config, inv_path)
    if not inventory.hosts:
        raise InventoryError(inv_path, None, "the inventory has no host", "add the hosts to validate")
    inventory = inventory.limit(limit)
    if not inventory.hosts:
        raise UsageError(f"--limit {limit!r} matches no host of {inv_path}")
    check_workspace_names(config, inventory)  # before a {host} path is built, rendered or deleted
    plan = build_plan(config, inventory, given=given)
    if not plan.steps:
        why = "; ".join(f"{k}: {v}" for k, v in plan.unsupported.items()) or "no benchmark is enabled"
        raise UsageError(f"{cfg_path}: nothing to run ({why})")
    return config, inventory, plan, slurm


def create_run(
    run_dir: Path | None,
    cfg_path: Path,
    inv_path: Path,
    limit: str | None = None,
    given: Mapping[str, GivenRounds] | None = None,
) -> RunInputs:
    """A new run directory with every input written once."""
    config, inventory, plan, slurm = _plan_inputs(cfg_path, inv_path, limit, given)
    rd = RunDir.create(run_dir)
    runlog.attach(rd.path)  # the libraries' log records go to logs/libraries.log from here on
    atomic_write_bytes(rd.path / "config.yaml", cfg_path.read_bytes())
    rd.write_json("config.json", config.model_dump(mode="json"))
    inv_dir = rd.sub("inventory")
    if slurm is not None:
        # The fleet Slurm named is this run's inventory: later commands and sub-runs read the snapshot.
        snap = inv_dir / "slurm.yml"
        atomic_write_bytes(snap, slurm.text.encode())
        atomic_write_bytes(inv_dir / "slurm-query.json", slurm.record_json().encode())
        inventory = Inventory((str(snap),), inventory.hosts)
    # An inventory holding secrets is not copied; hosts.json keeps the hosts with secrets masked.
    elif not any(h.has_secrets() for h in inventory.hosts) and inv_path.is_file():
        atomic_write_bytes(inv_dir / inv_path.name, inv_path.read_bytes())
    rd.write_json("inventory/hosts.json", inventory.to_json())
    rd.write_json(
        "hosts.json",
        {"schema_version": 1, "hosts": [{"name": h.name, "groups": list(h.groups)} for h in inventory.hosts]},
    )
    rd.write_json("plan.json", plan.to_json())
    rendered = render_playbooks(
        plan, config, inventory, rd.run_id, rd.sub("playbooks"), config_dir=cfg_path.resolve().parent
    )
    rd.update_manifest(
        config_source=str(cfg_path.resolve()),
        inventory_sources=[str(Path(s).resolve()) for s in inventory.sources],
        python=sys.version.split()[0],
        sb_fleet_version=__version__,
        ansible_core=_ansible_version(),
    )
    return RunInputs(rd, config, inventory, plan, rendered)


def open_run(path: Path, config: Path | None = None, inventory: Path | None = None) -> RunInputs:
    """An existing run directory's inputs, read back. ``config``/``inventory`` given again must be the
    ones the run was created with: a run's inputs never change."""
    rd = RunDir.open(path)
    runlog.attach(rd.path)
    manifest = rd.manifest()
    if config is not None and Path(config).resolve() != (rd.path / "config.yaml").resolve():
        given = Path(config).read_bytes() if Path(config).is_file() else None
        if given != _read_bytes(rd.path / "config.yaml"):
            raise UsageError(
                f"{rd.path} was created with another config ({manifest.get('config_source')}); a run's "
                f"inputs are fixed: leave out -c, or start a new run with another --run-dir"
            )
    sources = [str(s) for s in manifest.get("inventory_sources") or []]
    if inventory is not None and str(Path(inventory).resolve()) not in sources:
        raise UsageError(
            f"{rd.path} was created with the inventory {', '.join(sources) or '?'}; a run's inputs are "
            f"fixed: leave out -i, or start a new run with another --run-dir"
        )
    try:
        cfg = Config.model_validate(rd.read_json("config.json"))
    except ValidationError as exc:
        raise RunDirError(
            f"{rd.path / 'config.json'}: not a config this sb-fleet reads ({exc.errors()[0]['msg']})"
        ) from None
    plan_data = rd.read_json("plan.json")
    if plan_data is None:
        raise RunDirError(f"{rd.path / 'plan.json'}: missing; this run directory was never planned")
    try:
        plan = Plan.from_json(plan_data)
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise RunDirError(f"{rd.path / 'plan.json'}: not a plan this sb-fleet reads ({exc})") from None
    index = rd.read_json(f"playbooks/{INDEX}")
    try:
        rendered = Rendered.from_json(index, rd.path / "playbooks")
    except (AttributeError, KeyError, TypeError) as exc:
        raise RunDirError(f"{rd.path / 'playbooks' / INDEX}: missing or foreign ({exc})") from None
    inv = _run_inventory(rd, sources, plan)
    return RunInputs(rd, cfg, inv, plan, rendered)


def _run_inventory(rd: RunDir, sources: list[str], plan: Plan) -> Inventory:
    """The inventory the run was created with: its sources where they still exist (they may hold
    connection variables and secrets that the run directory does not keep), else the snapshot."""
    present = [s for s in sources if Path(s).exists()]
    snap = [
        p
        for p in sorted((rd.path / "inventory").glob("*"))
        if p.is_file() and p.name not in ("hosts.json", "slurm-query.json")
    ]
    if present and len(present) == len(sources):
        inv = load_inventory(list(present))
    elif snap:
        inv = load_inventory(snap[0])
    else:
        raise RunDirError(
            f"{rd.path}: the run's inventory ({', '.join(sources) or '?'}) is gone and the run directory "
            f"holds no copy (it had secrets); restore the inventory file"
        )
    missing = [h for h in plan.hosts if h not in set(inv.names())]
    if missing:
        raise RunDirError(
            f"{rd.path}: host(s) {', '.join(missing[:5])} of this run are no longer in its inventory "
            f"{', '.join(inv.sources)}; restore them or start a new run"
        )
    keep = set(plan.hosts)
    return Inventory(inv.sources, tuple(h for h in inv.hosts if h.name in keep))


def _read_bytes(p: Path) -> bytes | None:
    try:
        return p.read_bytes()
    except OSError:
        return None


def _ansible_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("ansible-core")
    except Exception:
        return None
