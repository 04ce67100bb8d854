"""Collect over Ansible's OpenSSH master: the control path sb-fleet names, and the argv that reaches a
host through the master only (no host needed).

The ``%C`` test runs the real ``ssh -G`` (it prints the configuration a command line gives, without
connecting): the master's path as Ansible's command line makes it and as collect's names it must be one.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from sb_fleet.config.inventory import Host
from sb_fleet.fleet import ssh as ssh_mod
from sb_fleet.fleet.ssh import (
    CONNECTION_HASH,
    MASTER_TEMP_SUFFIX,
    SUN_PATH,
    SshSettings,
    control_path_in,
)

SETTINGS = SshSettings(Path("/etc/kh"), "strict", 7)


def _dir_of_length(n: int) -> Path:
    """An absolute directory path of exactly ``n`` bytes."""
    return Path("/" + "d" * (n - 1))


def test_control_path_is_the_hash_in_the_directory():
    assert control_path_in(Path("/root/.ansible/cp/sb-fleet/0123456789")) == (
        "/root/.ansible/cp/sb-fleet/0123456789/%C"
    )


def test_control_path_leaves_room_for_the_masters_temporary_name():
    # The longest directory whose socket, with OpenSSH's temporary suffix and the NUL, still fits.
    longest = SUN_PATH - 1 - 1 - CONNECTION_HASH - MASTER_TEMP_SUFFIX
    assert control_path_in(_dir_of_length(longest)) is not None
    assert control_path_in(_dir_of_length(longest + 1)) is None
    final = control_path_in(_dir_of_length(longest))
    assert final is not None
    assert len(final.replace("%C", "c" * CONNECTION_HASH)) + MASTER_TEMP_SUFFIX + 1 == SUN_PATH


@pytest.mark.parametrize("d", ["/a b/cp", "/a%b/cp", '/a"b/cp', "/a'b", "/a\\b", "relative/cp", "/a\tb"])
def test_control_path_refuses_what_an_option_cannot_carry(d):
    assert control_path_in(Path(d)) is None


def test_openssh_args_name_the_control_path(monkeypatch):
    monkeypatch.setattr(ssh_mod, "control_dir", lambda: Path("/run/user/0/sb-fleet-cp"))
    args = SETTINGS.openssh_args()
    cp = SETTINGS.control_path()
    assert cp is not None and cp.startswith("/run/user/0/sb-fleet-cp/") and cp.endswith("/%C")
    assert f"-o ControlPath={cp}" in args
    assert "-o ControlMaster=auto" in args and "-o StrictHostKeyChecking=yes" in args
    # Ansible adds a ControlPath of its own only where its ssh_args hold none (its ssh plugin's
    # "found only ControlPersist; added ControlPath").
    assert any("controlpath" in a.lower() for a in shlex.split(args))


def test_a_too_long_control_dir_keeps_ansibles_own_path(monkeypatch):
    monkeypatch.setattr(ssh_mod, "control_dir", lambda: Path("/home/" + "u" * 80 + "/.ansible/cp/sb-fleet"))
    assert SETTINGS.control_path() is None
    assert "ControlPath" not in SETTINGS.openssh_args()
    host = Host("gpu1", ("gpu",), {"ansible_host": "10.0.0.1"})
    assert SETTINGS.master_options(host) is None
    assert SETTINGS.master_command(host, "true") is None
    assert SETTINGS.master_control(host) is None


def test_master_options_come_first_and_name_the_host_as_ansible_does(monkeypatch):
    monkeypatch.setattr(ssh_mod, "control_dir", lambda: Path("/run/user/0/sb-fleet-cp"))
    host = Host(
        "gpu1",
        ("gpu",),
        {
            "ansible_host": "10.0.0.1",
            "ansible_port": 2222,
            "ansible_user": "bench",
            "ansible_ssh_private_key_file": "/keys/id",
            "ansible_ssh_common_args": "-o ControlMaster=auto -o BatchMode=no -o ProxyJump=jump",
        },
    )
    argv = SETTINGS.master_command(host, "cd ~ && ls")
    assert argv is not None
    assert argv[:7] == [
        "ssh",
        "-o",
        "ControlMaster=no",
        "-o",
        f"ControlPath={SETTINGS.control_path()}",
        "-o",
        "BatchMode=yes",
    ]
    opts = [argv[i + 1] for i, a in enumerate(argv) if a == "-o"]
    # OpenSSH takes an option's first value: the inventory's own args cannot turn these off.
    first = {}
    for o in opts:
        k, _, v = o.partition("=")
        first.setdefault(k, v)
    assert first["ControlMaster"] == "no" and first["BatchMode"] == "yes"
    assert first["StrictHostKeyChecking"] == "yes" and first["UserKnownHostsFile"] == "/etc/kh"
    assert first["Port"] == "2222" and first["User"] == '"bench"' and first["IdentityFile"] == '"/keys/id"'
    assert first["ProxyJump"] == "jump"
    assert argv[-4:] == ["-T", "--", "10.0.0.1", "cd ~ && ls"]
    assert SETTINGS.master_control(host, "exit")[-4:] == ["-O", "exit", "--", "10.0.0.1"]


def test_no_port_or_user_where_the_inventory_gives_none(monkeypatch):
    # Ansible passes neither then (ssh's own config decides): %C must see the same.
    monkeypatch.setattr(ssh_mod, "control_dir", lambda: Path("/run/user/0/sb-fleet-cp"))
    opts = SETTINGS.master_options(Host("gpu1", ("gpu",), {}))
    assert opts is not None
    assert not any(o.startswith(("Port=", "User=", "IdentityFile=")) for o in opts)
    assert SETTINGS.master_command(Host("gpu1", ("gpu",), {}), "true")[-2] == "gpu1"


def _ssh_G(argv: list[str]) -> str:
    r = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
        env={**os.environ, "HOME": "/nonexistent"},
    )
    return next(line.split(" ", 1)[1] for line in r.stdout.splitlines() if line.startswith("controlpath "))


@pytest.mark.skipif(shutil.which("ssh") is None, reason="no OpenSSH client")
@pytest.mark.parametrize(
    "hvars",
    [
        {"ansible_host": "127.0.31.10", "ansible_port": 40022, "ansible_user": "sbtest"},
        {"ansible_host": "127.0.31.11"},
        {
            "ansible_ssh_port": "2200",
            "ansible_ssh_user": "x",
            "ansible_ssh_common_args": "-o Compression=yes",
        },
    ],
)
def test_collect_names_the_same_master_as_ansibles_command_line(monkeypatch, hvars):
    """``ssh -G`` expands ``%C`` for both command lines: Ansible's, in its ssh plugin's order (ssh_args,
    Port, IdentityFile, User, ConnectTimeout, common and extra args, the host), and collect's."""
    monkeypatch.setattr(ssh_mod, "control_dir", lambda: Path("/run/user/0/sb-fleet-cp"))
    host = Host("gpu7", ("gpu",), hvars)
    ansible = ["ssh", "-G", *shlex.split(SETTINGS.openssh_args())]
    if host.vars.get("ansible_port") or host.vars.get("ansible_ssh_port"):
        ansible += ["-o", f"Port={host.port}"]
    if host.user:
        ansible += ["-o", f'User="{host.user}"']
    ansible += ["-o", "ConnectTimeout=7", *shlex.split(str(host.vars.get("ansible_ssh_common_args", "")))]
    ansible.append(host.address)
    ours = SETTINGS.master_control(host)
    assert ours is not None
    mine = ["ssh", "-G", *ours[1 : ours.index("-O")], host.address]
    want = _ssh_G(ansible)
    assert want.startswith("/run/user/0/sb-fleet-cp/")
    assert _ssh_G(mine) == want


@pytest.mark.skipif(shutil.which("ssh") is None, reason="no OpenSSH client")
@pytest.mark.parametrize(
    "hvars",
    [
        {"ansible_host": "127.0.31.10", "ansible_port": 40022, "ansible_user": "sbtest"},
        {"ansible_host": "127.0.31.11", "ansible_ssh_common_args": "-o ProxyJump=jump -o Compression=yes"},
        {"ansible_ssh_port": "2200", "ansible_ssh_user": "x", "ansible_ssh_private_key_file": "/k/id"},
    ],
)
def test_sb_fleets_own_exec_makes_the_master_collect_finds(monkeypatch, hvars):
    """validate's exec over sb-fleet's own client (sb_fleet.fleet.direct_exec): ``ssh -G`` gives its
    command line the master path that collect's names, with a master of its own made and kept
    (ControlPersist), this run's host key policy first, and never a prompt."""
    monkeypatch.setattr(ssh_mod, "control_dir", lambda: Path("/run/user/0/sb-fleet-cp"))
    host = Host("gpu7", ("gpu",), hvars)
    argv = SETTINGS.exec_command(host, "echo $HOME; exit 3")
    assert argv is not None and argv[-4:] == ["-T", "--", host.address, "echo $HOME; exit 3"]
    ours = SETTINGS.master_control(host)
    assert ours is not None
    g = ["ssh", "-G", *argv[1:-4], host.address]
    assert _ssh_G(g) == _ssh_G(["ssh", "-G", *ours[1 : ours.index("-O")], host.address])
    r = subprocess.run(
        g, capture_output=True, text=True, timeout=10, check=True, env={**os.environ, "HOME": "/nonexistent"}
    )
    conf = dict(line.split(" ", 1) for line in r.stdout.splitlines() if " " in line)
    assert conf["controlmaster"] == "auto" and conf["controlpersist"] == "120"
    assert conf["stricthostkeychecking"] == "true" and conf["batchmode"] == "yes"
    assert conf["passwordauthentication"] == "no" and conf["kbdinteractiveauthentication"] == "no"


def test_sb_fleets_own_exec_has_no_path_where_collect_has_none(monkeypatch):
    monkeypatch.setattr(ssh_mod, "control_dir", lambda: Path("/home/" + "u" * 80 + "/.ansible/cp/sb-fleet"))
    assert SETTINGS.exec_command(Host("gpu1", ("gpu",), {}), "true") is None
    monkeypatch.setattr(ssh_mod, "control_dir", lambda: Path("/run/user/0/sb-fleet-cp"))
    bad = Host("gpu1", ("gpu",), {"ansible_ssh_common_args": "-o 'ProxyJump=unbalanced"})
    assert SETTINGS.exec_command(bad, "true") is None


# -- key exchange order (fleet.ssh_kex) ------------------------------------------------------------------
OPENSSH_92 = [
    "sntrup761x25519-sha512",
    "sntrup761x25519-sha512@openssh.com",
    "curve25519-sha256",
    "curve25519-sha256@libssh.org",
    "ecdh-sha2-nistp256",
    "ecdh-sha2-nistp384",
    "ecdh-sha2-nistp521",
    "diffie-hellman-group-exchange-sha256",
    "diffie-hellman-group16-sha512",
    "diffie-hellman-group18-sha512",
    "diffie-hellman-group14-sha256",
]
OPENSSH_99 = ["mlkem768x25519-sha256", "sntrup761x25519-sha512", "curve25519-sha256", "ecdh-sha2-nistp256"]


def test_the_slow_exchange_goes_last_and_nothing_is_added_or_lost():
    got = ssh_mod.cheap_kex_first(OPENSSH_92)
    assert got[:2] == ("curve25519-sha256", "curve25519-sha256@libssh.org")
    assert got[-2:] == ("sntrup761x25519-sha512", "sntrup761x25519-sha512@openssh.com")
    assert sorted(got) == sorted(OPENSSH_92) and len(got) == len(OPENSSH_92)
    assert ssh_mod.cheap_kex_first(OPENSSH_99)[0] == "mlkem768x25519-sha256"  # post-quantum and cheap
    assert ssh_mod.cheap_kex_first(["sntrup761x25519-sha512"]) == ("sntrup761x25519-sha512",)


@pytest.mark.parametrize(
    ("order", "have", "passed"),
    [
        ("cheap-first", tuple(OPENSSH_92), True),
        ("openssh", tuple(OPENSSH_92), False),
        ("cheap-first", ("curve25519-sha256", "sntrup761x25519-sha512"), False),  # already cheap first
        ("cheap-first", (), False),  # an ssh that cannot say its list
    ],
)
def test_kexalgorithms_is_passed_only_where_it_changes_opensshs_order(monkeypatch, order, have, passed):
    monkeypatch.setattr(ssh_mod, "openssh_kex", lambda: have)
    monkeypatch.setattr(ssh_mod, "control_dir", lambda: Path("/run/user/0/sb-fleet-cp"))
    kex = ssh_mod.kex_option(order)
    s = SshSettings(Path("/etc/kh"), "strict", 7, kex)
    args = s.openssh_args()
    master_opts = s.master_options(Host("h1", ("gpu",), {"ansible_host": "10.0.0.1"}))
    assert master_opts is not None
    master = " ".join(master_opts)
    if passed:
        opt = "KexAlgorithms=" + ",".join(ssh_mod.cheap_kex_first(have))
        assert f"-o {opt}" in args and opt in master
    else:
        assert kex == () and "KexAlgorithms" not in args + master


@pytest.mark.parametrize(
    "line", ["kexalgorithms curve25519-sha256,x -oProxyCommand=y", "kexalgorithms curve25519-sha256,,x"]
)
def test_a_list_with_a_name_ssh_would_not_print_is_not_passed(monkeypatch, line):
    """Whatever ssh -G says goes onto Ansible's ssh command line: a name outside OpenSSH's alphabet (a
    blank, an empty entry) leaves OpenSSH's own order rather than reach it."""
    done = subprocess.CompletedProcess(["ssh"], 0, stdout=f"user root\n{line}\n", stderr="")
    monkeypatch.setattr(ssh_mod.subprocess, "run", lambda *a, **k: done)
    ssh_mod.openssh_kex.cache_clear()
    try:
        assert ssh_mod.openssh_kex() == ()
        assert ssh_mod.kex_option("cheap-first") == ()
    finally:
        ssh_mod.openssh_kex.cache_clear()


def test_opensshs_own_list_is_read_from_ssh_g():
    if shutil.which("ssh") is None:
        pytest.skip("no OpenSSH client here")
    ssh_mod.openssh_kex.cache_clear()
    have = ssh_mod.openssh_kex()
    assert have and all("," not in a and " " not in a for a in have)
    assert any(a.startswith("curve25519") for a in have)


def test_a_master_of_sb_fleets_own_client_is_ridden_without_asking_while_it_persists():
    """Collect skips ``ssh -O check`` for a host whose exec client (ControlMaster=auto, ControlPersist)
    ended moments ago in this process, and asks again once the master may have gone."""
    from sb_fleet.fleet.fetch import MASTER_TRUSTED_S, master_known

    assert 0 < MASTER_TRUSTED_S < ssh_mod.CONTROL_PERSIST_S
    assert not master_known(None, 1000.0)  # no client of ours reached the host: ask ssh
    assert master_known(1000.0, 1000.0)
    assert master_known(1000.0, 1000.0 + MASTER_TRUSTED_S - 0.5)
    assert not master_known(1000.0, 1000.0 + MASTER_TRUSTED_S)  # it may have timed out: ask ssh
    assert not master_known(1000.0, 999.0)  # a clock that went back proves nothing


def test_the_exec_client_persists_its_master_as_long_as_collect_assumes():
    settings = SshSettings(Path("/etc/kh"), "strict", 7)
    argv = settings.exec_command(Host("h1", ("gpu",), {"ansible_host": "10.0.0.1"}), "true")
    if argv is None:
        pytest.skip("no control path on this machine")
    assert f"ControlPersist={ssh_mod.CONTROL_PERSIST_S}s" in argv
    assert "ControlMaster=auto" in argv
