"""The default workspace is unique per host on a shared home ({host} is the inventory name); an explicit
sb_workspace is taken as written (the deploy-time marker refuses one that several hosts share)."""

from __future__ import annotations

from sb_fleet.config import load_config
from sb_fleet.inventory import load_inventory
from sb_fleet.plan import build_plan


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
