"""The default workspace is unique per host on a shared home ({host} is the inventory name); an explicit
sb_workspace is taken as written (the deploy-time marker refuses one that several hosts share); a host
name that cannot stand for {host} in a path is refused when the run is planned."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sb_fleet.config.fleet_config import load_config
from sb_fleet.config.inventory import load_inventory
from sb_fleet.errors import InventoryError
from sb_fleet.plan.run_plan import build_plan
from sb_fleet.plan.workspace import unsafe_reason
from sb_fleet.rundir.runinputs import plan_inputs


def _plan(tmp_path, fleet: str, inventory: str):
    c = tmp_path / "c.yaml"
    c.write_text(f"{fleet}superbench:\n  benchmarks:\n    noop: {{}}\n")
    i = tmp_path / "i.ini"
    i.write_text(inventory)
    return build_plan(load_config(c), load_inventory(i), known={"noop"})


def test_default_workspace_names_the_inventory_host(tmp_path):
    plan = _plan(tmp_path, "", "node1\nnode2\n")
    assert plan.host_setup["node1"].workspace == "~/.sb-fleet/hosts/node1"
    assert plan.host_setup["node2"].workspace == "~/.sb-fleet/hosts/node2"


def test_explicit_workspaces(tmp_path):
    inv = "a sb_workspace=/scratch/{host}/sb\nb sb_workspace=/shared/sb\nc\n"
    plan = _plan(tmp_path, "fleet: {workspace: /nfs/sbf}\n", inv)
    assert plan.host_setup["a"].workspace == "/scratch/a/sb"
    assert plan.host_setup["b"].workspace == "/shared/sb"  # as written
    assert plan.host_setup["c"].workspace == "/nfs/sbf"


# -- a host name that cannot stand for {host} in a path: refused when the run is planned (exit 2) --------
UNSAFE = ["node/1", "..", "../etc", "a..b", ".hidden", "-rf", "a b", "{{x}}", "n;rm", ""]


@pytest.mark.parametrize("name", UNSAFE)
def test_unsafe_names(name):
    assert unsafe_reason(name)


@pytest.mark.parametrize("name", ["node1", "gpu-001.cluster.local", "10.0.0.1", "fe80::1", "u@n_2+x"])
def test_safe_names(name):
    assert unsafe_reason(name) is None


def _yaml_inventory(tmp_path, hosts: dict[str, dict]) -> Path:
    i = tmp_path / "inv.yml"
    i.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    return i


def test_plan_refuses_a_host_name_unsafe_in_the_workspace(tmp_path):
    c = tmp_path / "c.yaml"
    c.write_text("superbench:\n  benchmarks:\n    noop: {}\n")
    inv = _yaml_inventory(tmp_path, {"ok1": {}, "../../etc": {}})
    with pytest.raises(InventoryError) as e:
        plan_inputs(c, inv)
    msg = str(e.value)
    assert "\n" not in msg and e.value.exit_code == 2
    assert msg.startswith(f"{inv}: host '../../etc': ")
    assert "~/.sb-fleet/hosts/{host} (fleet.workspace): it contains '/'" in msg
    assert "set sb_workspace for this host to a path without {host}, or rename the host" in msg


def test_a_workspace_without_host_takes_any_name(tmp_path):
    """The name only matters where {host} puts it in a path: its own sb_workspace, or a fleet.workspace
    without {host}, takes it as it is; an sb_workspace with {host} is checked too."""
    c = tmp_path / "c.yaml"
    c.write_text("superbench:\n  benchmarks:\n    noop: {}\n")
    inv = _yaml_inventory(tmp_path, {"ok1": {}, "a/b": {"sb_workspace": "/scratch/ab"}})
    _, _, plan = plan_inputs(c, inv)
    assert plan.host_setup["a/b"].workspace == "/scratch/ab"
    inv = _yaml_inventory(tmp_path, {"a b": {"sb_workspace": "/scratch/{host}"}})
    with pytest.raises(
        InventoryError, match=r"host 'a b': .* /scratch/\{host\} \(its sb_workspace\): it contains ' '"
    ):
        plan_inputs(c, inv)
    c.write_text("fleet: {workspace: /nfs/sbf}\nsuperbench:\n  benchmarks:\n    noop: {}\n")
    _, _, plan = plan_inputs(c, _yaml_inventory(tmp_path, {"..": {}}))
    assert plan.host_setup[".."].workspace == "/nfs/sbf"


def test_cli_dry_run_refuses_the_name_with_one_line(tmp_path):
    """As a user meets it: ``sb-fleet validate --dry-run`` on an INI inventory, exit 2, one line, no
    traceback, and no run directory left behind."""
    c = tmp_path / "c.yaml"
    c.write_text("superbench:\n  benchmarks:\n    noop: {}\n")
    inv = tmp_path / "inv.ini"
    inv.write_text("[gpu]\nnode1 ansible_connection=local\nnode/2 ansible_connection=local\n")
    run_dir = tmp_path / "run"
    sb = str(Path(sys.executable).parent / "sb-fleet")
    args = [sb, "validate", "--dry-run", "-i", str(inv), "-c", str(c), "--run-dir", str(run_dir)]
    r = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""
    [line] = r.stderr.strip().splitlines()
    assert line.startswith(f"sb-fleet: error: {inv}: host 'node/2': the name cannot stand for {{host}}")
    assert "set sb_workspace for this host" in line and "rename the host" in line
    assert not run_dir.exists()
