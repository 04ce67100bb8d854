"""sb_path_sysfs: a per-host sysfs root that reaches the benchmarks as SB_PATH_SYSFS (docs/energy.md)."""

from __future__ import annotations

import pytest

from sb_fleet.config.inventory import load_inventory
from sb_fleet.errors import InventoryError


def test_plain_absolute_path_is_kept(tmp_path):
    inv = tmp_path / "inv.ini"
    inv.write_text("n1 ansible_host=10.0.0.1 sb_path_sysfs=/host/sys\nn2 ansible_host=10.0.0.2\n")
    hosts = load_inventory(inv).hosts
    assert hosts[0].vars["sb_path_sysfs"] == "/host/sys" and "sb_path_sysfs" not in hosts[1].vars


@pytest.mark.parametrize("value", ["relative/sys", "/sys/{{ lookup('pipe','id') }}", "/sys{% raw %}"])
def test_template_syntax_or_relative_path_is_refused(tmp_path, value):
    inv = tmp_path / "inv.yaml"
    inv.write_text(
        "all:\n  hosts:\n    n1:\n      ansible_host: 10.0.0.1\n      sb_path_sysfs: " + repr(value) + "\n"
    )
    with pytest.raises(InventoryError) as err:
        load_inventory(inv)
    msg = str(err.value)
    assert "n1" in msg and "sb_path_sysfs" in msg and "plain absolute path" in msg
