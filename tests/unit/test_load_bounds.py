"""Inputs refused at load, before any host is touched (issue 21): file size, YAML alias bombs, numbers
that are not finite, keys and hosts given twice, prefix placeholders, environment names; and the private
directories sb-fleet keeps its own state in."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from sb_fleet.config import yamlsrc
from sb_fleet.config.fleet_config import load_config
from sb_fleet.config.inventory import load_inventory
from sb_fleet.config.inventory_ini import duplicate_hosts
from sb_fleet.config.rulespec import read_yaml
from sb_fleet.errors import ConfigError, InfraError, InventoryError, RulesError
from sb_fleet.safe_files import private_dir

BENCH = "superbench:\n  benchmarks:\n    noop: {}\n"


def _config(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


def _bomb(levels: int = 7) -> str:
    """Each level ten aliases of the one before: 10**levels values from a few hundred bytes."""
    lines = ["superbench:", "  var:", "    l0: &l0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        lines.append(f"    l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]")
    return "\n".join(lines) + "\n  benchmarks:\n    noop: {}\n"


def test_an_alias_bomb_under_var_is_refused_with_its_line(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_config(_config(tmp_path, _bomb()))
    msg = str(e.value)
    assert "expands to 12345693 values" in msg and "aliases" in msg and "line " in msg and "\n" not in msg


def test_ordinary_anchors_and_merge_keys_still_load(tmp_path):
    text = (
        "superbench:\n  var:\n    local: &local {enable: true, timeout: 60}\n"
        "  benchmarks:\n    noop:\n      <<: *local\n    gemm-flops:\n      <<: *local\n"
    )
    cfg = load_config(_config(tmp_path, text))
    assert cfg.superbench.benchmarks["gemm-flops"].timeout == 60


def test_a_recursive_alias_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="refers to the value that holds it"):
        load_config(_config(tmp_path, "superbench:\n  var: &a {x: *a}\n  benchmarks: {noop: {}}\n"))


@pytest.mark.parametrize(
    "text, field",
    [
        ("fleet: {forks: 1e400}\n" + BENCH, "fleet.forks"),
        ("fleet: {min_free_disk_gb: 1e400}\n" + BENCH, "fleet.min_free_disk_gb"),
        ("gates: {fleet: {threshold: 1e400}}\n" + BENCH, "gates.fleet.threshold"),
        ("fleet: {forks: 1.0e+400}\n" + BENCH, "line 1"),
        ("superbench:\n  var: {a: .inf}\n  benchmarks: {noop: {}}\n", "line 2"),
        ("superbench:\n  benchmarks: {noop: {timeout: " + "9" * 5000 + "}}\n", "line 2"),
        ("superbench:\n  benchmarks: {noop: {timeout: " + "9" * 30 + "}}\n", "too large"),
    ],
)
def test_numbers_that_are_not_finite_are_exit_2_never_a_traceback(tmp_path, text, field):
    with pytest.raises(ConfigError) as e:
        load_config(_config(tmp_path, text))
    assert field in str(e.value) and e.value.exit_code == 2


def test_files_past_the_size_cap_are_refused_before_reading(tmp_path, monkeypatch):
    monkeypatch.setattr(yamlsrc, "MAX_FILE_BYTES", 1000)
    p = _config(tmp_path, BENCH + "#" * 2000 + "\n")
    with pytest.raises(ConfigError, match="more than sb-fleet reads"):
        load_config(p)
    rules = tmp_path / "rules.yaml"
    rules.write_text("#" * 2000)
    with pytest.raises(RulesError, match="more than sb-fleet reads"):
        read_yaml(rules, "rules file")
    inv = tmp_path / "inv.ini"
    inv.write_text("h1\n" + "#" * 2000 + "\n")
    with pytest.raises(InventoryError, match="more than sb-fleet reads"):
        load_inventory(inv)


def test_a_rules_file_alias_bomb_is_a_rules_error(tmp_path):
    p = tmp_path / "rules.yaml"
    p.write_text(_bomb())
    with pytest.raises(RulesError, match="aliases"):
        read_yaml(p, "rules file")


def test_a_key_given_twice_is_refused_naming_both_lines(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_config(_config(tmp_path, "fleet:\n  forks: 2\n  forks: 3\n" + BENCH))
    assert "line 3" in str(e.value) and "first on line 2" in str(e.value)


@pytest.mark.parametrize(
    "text, dup",
    [
        ("[gpu]\nh1 ansible_host=a\nh2\nh1 ansible_host=b\n", ("h1", 2, 4)),
        ("[gpu]\nn[1:4]\n[gpu]\nn3\n", ("n3", 2, 4)),
        ("[a]\nh1 ansible_host=x\n[b]\nh1 ansible_host=y\n", ("h1", 2, 4)),
        ("[a]\nh1 ansible_host=x\n[b]\nh1\n", None),  # a second group, no second definition: fine
        ("[a]\nh1\n[a:vars]\nh1=2\n", None),
    ],
)
def test_duplicate_ini_hosts(text, dup):
    assert duplicate_hosts(text) == dup


def test_duplicate_hosts_are_exit_2_naming_both_places(tmp_path):
    ini = tmp_path / "inv.ini"
    ini.write_text("[gpu]\nh1 ansible_host=10.0.0.1\nh2\nh1 ansible_host=10.0.0.2\n")
    with pytest.raises(InventoryError) as e:
        load_inventory(ini)
    assert f"{ini}:2" in str(e.value) and "line 4" in str(e.value) and e.value.exit_code == 2
    yml = tmp_path / "inv.yml"
    yml.write_text("all:\n  hosts:\n    h1: {ansible_host: a}\n    h1: {ansible_host: b}\n")
    with pytest.raises(InventoryError, match="given twice.*first on line 3"):
        load_inventory(yml)


@pytest.mark.parametrize("prefix", ["numactl -N {node}", "x {0}", "x {", "{proc_rank.x}"])
def test_unknown_prefix_placeholders_are_exit_2_naming_field_and_allowed(tmp_path, prefix):
    text = f"superbench:\n  benchmarks:\n    noop:\n      modes: [{{name: local, prefix: {prefix!r}}}]\n"
    with pytest.raises(ConfigError) as e:
        load_config(_config(tmp_path, text.replace("'", '"')))
    msg = str(e.value)
    assert "modes.0.prefix" in msg and "{proc_rank}, {proc_num}" in msg


def test_known_prefix_placeholders_and_literal_braces_load(tmp_path):
    text = 'superbench:\n  benchmarks:\n    noop:\n      modes: [{name: local, prefix: "numactl -N $(({proc_rank}/2)) {{x}} {proc_num}"}]\n'
    cfg = load_config(_config(tmp_path, text))
    assert "{proc_rank}" in cfg.superbench.benchmarks["noop"].modes[0].prefix


def test_environment_names_must_be_names(tmp_path):
    with pytest.raises(ConfigError, match="not an environment variable name"):
        load_config(_config(tmp_path, 'fleet: {env: {"A=B": 1}}\n' + BENCH))


# -- private directories ------------------------------------------------------------------------------
def test_private_dir_is_made_0700_and_reused(tmp_path):
    d = tmp_path / "a" / "b"
    private_dir(d, "test", "fix")
    for p in (d, d.parent):
        assert stat.S_IMODE(os.lstat(p).st_mode) == 0o700
    private_dir(d, "test", "fix")  # ours, private: used again


def test_private_dir_refuses_a_symlink_an_open_mode_and_a_file(tmp_path):
    target = tmp_path / "t"
    target.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(InfraError, match="symbolic link") as e:
        private_dir(link, "test", "fix it")
    assert str(link) in str(e.value) and e.value.exit_code == 3
    opened = tmp_path / "open"
    opened.mkdir()
    os.chmod(opened, 0o755)
    with pytest.raises(InfraError, match="mode is 0755"):
        private_dir(opened, "test", "fix")
    f = tmp_path / "file"
    f.write_text("")
    with pytest.raises(InfraError, match="not a directory"):
        private_dir(f, "test", "fix")


def test_private_dir_refuses_a_world_writable_parent_without_sticky_bit(tmp_path):
    parent = tmp_path / "shared"
    parent.mkdir()
    os.chmod(parent, 0o777)
    with pytest.raises(InfraError, match="every user may write it"):
        private_dir(parent / "mine", "test", "fix")


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_private_dir_refuses_another_users_directory(tmp_path):
    import pwd

    try:
        other = pwd.getpwnam("sbtest")
    except KeyError:
        other = pwd.getpwnam("nobody")
    d = tmp_path / "theirs"
    d.mkdir(mode=0o700)
    os.chown(d, other.pw_uid, other.pw_gid)
    with pytest.raises(InfraError, match=f"belongs to uid {other.pw_uid}"):
        private_dir(d, "test", "fix")


def test_inventory_sb_variables_with_jinja_are_refused_except_the_playbook_python(tmp_path):
    import sys

    from sb_fleet.config.fleet_config import load_config as _load_config
    from sb_fleet.plan.run_plan import build_plan

    for var in ("sb_workspace", "sb_python"):
        inv = tmp_path / f"{var}.ini"
        inv.write_text(f"h1 {var}=\"/x/{{{{ lookup('pipe', 'id') }}}}\"\n")
        with pytest.raises(InventoryError, match=f"{var} holds a Jinja template"):
            load_inventory(inv)
    ok = tmp_path / "ok.ini"
    ok.write_text('h1 ansible_connection=local sb_python="{{ ansible_playbook_python }}"\n')
    cfg = _load_config(_config(tmp_path, BENCH))
    plan = build_plan(cfg, load_inventory(ok), known={"noop"})
    assert plan.host_setup["h1"].base_python == sys.executable


def test_a_big_file_written_out_is_not_an_alias_bomb(tmp_path, monkeypatch):
    """The bound is on what aliases multiply: a big inventory written out in full passes (its size is
    capped on its own), the same number of values through aliases does not."""
    from sb_fleet.config.inventory import check_source

    monkeypatch.setattr(yamlsrc, "MAX_EXPANDED_NODES", 1000)
    hosts = "".join(
        f"    n{i}: {{ansible_host: 10.0.0.{i % 250}, sb_workspace: /w/{i}}}\n" for i in range(500)
    )
    inv = tmp_path / "big.yml"
    inv.write_text("all:\n  hosts:\n" + hosts)
    check_source(inv)  # 500 hosts, 2,500 values, no alias: fine
    bomb = tmp_path / "bomb.yml"
    bomb.write_text(
        "all:\n  vars:\n    a: &a [1, 1, 1, 1, 1, 1, 1, 1]\n    b: &b [*a, *a, *a, *a, *a, *a, *a, *a]\n"
        "    c: &c [*b, *b, *b, *b, *b, *b, *b, *b]\n    d: [*c, *c, *c, *c, *c, *c, *c, *c]\n"
        "  hosts: {h1: {}}\n"
    )
    with pytest.raises(InventoryError, match="through its YAML aliases"):
        check_source(bomb)


@pytest.mark.parametrize(
    "var", ["sb_tool_dir", "sb_path_procfs", "sb_health_profile", "sb_container_host_args"]
)
def test_every_sb_inventory_variable_is_refused_as_a_template(tmp_path, var):
    from sb_fleet.config.inventory import load_inventory

    value = "[\"{{ lookup('pipe','id') }}\"]" if var.endswith("args") else "\"{{ lookup('pipe','id') }}\""
    inv = tmp_path / "inv.ini"
    inv.write_text(f"[gpu]\nh1 ansible_host=127.0.0.1 {var}={value}\n")
    with pytest.raises(InventoryError, match=f"{var} holds a Jinja template"):
        load_inventory(inv)
