"""The Ansible-free INI reader (names and groups for ``report -i``; with each host's variables for
every other command) against Ansible itself.

The oracle is Ansible's own inventory code (``load_inventory`` with the fast reader switched off):
for every file the reader accepts it must give the same hosts, in the same order, with the same
groups and the same variables; for every file Ansible refuses it must decline (``None``) so that
Ansible words the error.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sb_fleet.config import inventory as inv_mod
from sb_fleet.config.inventory_ini import expand_range, read_inventory, read_names_and_groups
from sb_fleet.errors import InventoryError


def ansible_reads(path: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[str, ...]]] | None:
    """What Ansible's own code makes of ``path`` (names and sorted groups), or None when it refuses it."""
    with monkeypatch.context() as m:
        m.setattr(inv_mod, "read_names_and_groups", lambda source: None)
        m.setattr(inv_mod, "check_source", lambda path: None)  # Ansible's reading, not sb-fleet's refusals
        try:
            inv = inv_mod.load_inventory(path, with_vars=False)
        except InventoryError:
            return None
    return [(h.name, h.groups) for h in inv.hosts]


Full = list[tuple[str, tuple[str, ...], dict]]


def ansible_reads_vars(path: Path, monkeypatch: pytest.MonkeyPatch) -> Full | None:
    """What Ansible's own code makes of ``path`` with each host's variables, or None when it refuses it."""
    with monkeypatch.context() as m:
        m.setattr(inv_mod, "read_inventory", lambda source: None)
        m.setattr(inv_mod, "check_source", lambda path: None)
        m.setattr(inv_mod, "_check_host", lambda source, h: None)  # sb-fleet's own refusals, not Ansible's
        try:
            inv = inv_mod.load_inventory(path)
        except InventoryError:
            return None
    return [(h.name, h.groups, h.vars) for h in inv.hosts]


def fast_reads_vars(path: Path) -> Full | None:
    """The reader's answer as load_inventory keeps it (values made plain as Ansible's are)."""
    got = read_inventory(path)
    return (
        None if got is None else [(n, g, {k: inv_mod._plain(v) for k, v in hv.items()}) for n, g, hv in got]
    )


def check_vars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, name: str = "hosts.ini"):  # noqa: ANN201
    p = tmp_path / name
    p.write_text(text)
    fast = fast_reads_vars(p)
    want = ansible_reads_vars(p, monkeypatch)
    if not want:
        assert not fast, (text, fast)
    elif fast is not None:
        assert fast == want, text
        assert [list(v) for _, _, v in fast] == [list(v) for _, _, v in want], "the same order of keys"
    return fast, want


def check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, name: str = "hosts.ini"):  # noqa: ANN201
    p = tmp_path / name
    p.write_text(text)
    fast = read_names_and_groups(p)
    want = ansible_reads(p, monkeypatch)
    if want is None or not want:
        assert fast is None or not fast, (text, fast)
    elif fast is not None:
        assert fast == want, text
    return fast, want


ACCEPTED = {
    "flat with vars": """\
[gpu]
node01 ansible_host=10.0.0.1 sb_workspace=/scratch
node02 ansible_host=10.0.0.2 ansible_ssh_common_args='-o ProxyJump="bastion host"'  # a comment
; another comment
[gpu:vars]
ansible_user=svc
[all:vars]
ansible_python_interpreter=/usr/bin/python3
""",
    "ungrouped first, then groups": "lonely\nalso ansible_port=2222\n[a]\nx\nalso\n[b]\ny\nx\n",
    "children declared before and after": """\
[cluster:children]
rack1
rack2
[rack1]
r1n[01:04]
[rack2]
r2n[1:3]
[cluster:vars]
k=v
[spare]
s1
""",
    "nested children, one parent a level": "[top:children]\nmid\n[mid:children]\nleaf\n[leaf]\nh1\nh2\n[mid]\nh3\n",
    "ranges with step and several ranges": "[g]\nn[00:10:5]x[1:2]\nm[8:11]\n",
    "host in many groups": "[a]\nh1\nh2\n[b]\nh2\nh1\n[c:children]\na\n[d:children]\nc\nb\n",
    "all hosts section": "[all]\nh1\n[g]\nh2\n",
}


VARS = {
    # every kind of value the ini plugin reads, on host lines (shlex first) and in :vars sections
    "literals": """\
[gpu]
h1 a=1 b=1.5 c=True d=None e=[1,'x'] f={'k':1} g="{'k': 2}" h=(1,2) i=... j=1j k=0x10 l=1_000 m=-3
h2 s='quoted' t="two words" u=yes v= w=a=b x=127.0.0.1 y='{{ inventory_hostname }}' z=é
[gpu:vars]
p=1 # a comment Python's parser drops
q=two words # and one it keeps
r = 'spaced'
s={'nested': [1, {'d': ...}]}
""",
    # all, then groups by depth, then by name; the host's own lines last, later lines winning
    "precedence": """\
[rack1]
h1 own=rack1line
h2
[rack2]
h1 own=rack2line
[gpu:children]
rack1
rack2
[fleet:children]
gpu
[rack1:vars]
lvl=rack1
same=rack1
[rack2:vars]
lvl=rack2
same=rack2
[gpu:vars]
lvl=gpu
g=gpu
[fleet:vars]
lvl=fleet
f=fleet
[all:vars]
lvl=all
a=all
same=all
""",
    "ungrouped and all": """\
loner x=1
both
[g]
both y=2
[all]
direct
[ungrouped:vars]
u=ungrouped
[all:vars]
u=all
a=1
[g:vars]
u=g
""",
    # hostile values stay data: template syntax as text, nesting past the parser's limit as text
    "hostile": (
        '[g]\nh t=\'{{ lookup("pipe", "id") }}\' deep='
        + "[" * 150
        + "]" * 150
        + " deeper="
        + "[" * 3000
        + "]" * 3000
        + "\n[g:vars]\nj={% raw %}x{% endraw %}\n"
    ),
    "a group's vars declared twice, a host in two groups": "[a]\nh k=1\n[b]\nh k=2\n[a:vars]\nv=1\n[b:vars]\nv=2\n[a:vars]\nv=3\n",
}


@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_the_reader_agrees_with_ansible(case, tmp_path, monkeypatch):
    fast, want = check(tmp_path, monkeypatch, ACCEPTED[case])
    assert want and fast == want
    fast_v, want_v = check_vars(tmp_path, monkeypatch, ACCEPTED[case])
    assert want_v and fast_v == want_v


@pytest.mark.parametrize("case", sorted(VARS))
def test_the_variables_are_ansible_s(case, tmp_path, monkeypatch):
    fast, want = check_vars(tmp_path, monkeypatch, VARS[case])
    assert want and fast == want


VARS_DECLINED = {
    "ansible_group_priority": "[a]\nh\n[b]\nh\n[a:vars]\nansible_group_priority=10\nx=a\n[b:vars]\nx=b\n",
    "a set": "[g]\nh s={1,2}\n",
    "bytes": "[g]\nh\n[g:vars]\nb=b'x'\n",
    "a name that is not an identifier": "[g]\nh k-1=v\n",
}


@pytest.mark.parametrize("case", sorted(VARS_DECLINED))
def test_the_reader_leaves_variables_ansible_treats_apart_to_ansible(case, tmp_path, monkeypatch):
    fast, want = check_vars(tmp_path, monkeypatch, VARS_DECLINED[case])
    assert fast is None
    assert read_names_and_groups(tmp_path / "hosts.ini") is not None  # names and groups are still read


@pytest.mark.parametrize("where", ["beside", "cwd"])
@pytest.mark.parametrize("sub", ["group_vars", "host_vars"])
def test_vars_directories_leave_the_file_to_ansible(where, sub, tmp_path, monkeypatch):
    inv = tmp_path / "inv" / "hosts.ini"
    inv.parent.mkdir()
    inv.write_text("[gpu]\nh1 x=1\n")
    run = tmp_path / "run"
    run.mkdir()
    monkeypatch.chdir(run)
    d = (inv.parent if where == "beside" else run) / sub
    d.mkdir()
    (d / ("gpu.yml" if sub == "group_vars" else "h1.yml")).write_text("x: 2\ny: from-the-directory\n")
    want = ansible_reads_vars(inv, monkeypatch)
    got = [(h.name, h.groups, h.vars) for h in inv_mod.load_inventory(inv).hosts]
    if where == "beside":
        assert read_inventory(inv) is None
        assert want == [("h1", ("gpu",), {"x": 1 if sub == "group_vars" else 2, "y": "from-the-directory"})]
    else:  # outside a play, Ansible does not look in the working directory: neither does the reader
        assert want == [("h1", ("gpu",), {"x": 1})] == fast_reads_vars(inv)
    assert got == want


def test_an_ansible_setting_in_the_environment_leaves_the_file_to_ansible(tmp_path, monkeypatch):
    inv = tmp_path / "hosts.ini"
    inv.write_text("[a]\nh\n[a:vars]\nd={'x': 1}\n[all:vars]\nd={'y': 2}\n")
    assert read_inventory(inv) == [("h", ("a",), {"d": {"x": 1}})]
    monkeypatch.setenv("ANSIBLE_HASH_BEHAVIOUR", "merge")
    assert read_inventory(inv) is None
    # Ansible reads its settings once, at import: a fresh process shows that it merged them
    code = f"from sb_fleet.config.inventory import load_inventory; print(load_inventory({str(inv)!r}).hosts[0].vars)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "{'d': {'y': 2, 'x': 1}}", r.stdout + r.stderr


def test_load_inventory_reads_a_plain_file_without_importing_ansible(tmp_path):
    inv = tmp_path / "hosts.ini"
    inv.write_text("[gpu]\nh1 ansible_host=10.0.0.1 ansible_port=2222\n[gpu:vars]\nansible_user=svc\n")
    code = (
        "import sys; from sb_fleet.config.inventory import load_inventory; "
        f"h = load_inventory({str(inv)!r}).hosts[0]; "
        "print(h.vars, any(m == 'ansible' or m.startswith('ansible.') for m in sys.modules))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[-1] == "False", r.stdout
    assert "'ansible_port': 2222" in r.stdout and "'ansible_user': 'svc'" in r.stdout


def test_a_file_without_extension_that_starts_with_a_section(tmp_path, monkeypatch):
    fast, want = check(tmp_path, monkeypatch, "# fleet\n[gpu]\nh1\nh2\n", name="hosts")
    assert fast == want == [("h1", ("gpu",)), ("h2", ("gpu",))]


DECLINED = {
    "a port": "[g]\nh1:2222\n",
    "an IPv6 address": "[g]\nfe80::1\n",
    "an alphabetic range": "[g]\nh[a:c]\n",
    "undeclared child": "[g:children]\nmissing\n",
    "vars of an undeclared group": "[g:vars]\nk=v\n",
    "a loop": "[a:children]\nb\n[b:children]\na\n",
    "an unknown section type": "[g:hostz]\nh1\n",
    "a host var without =": "[g]\nh1 novalue\n",
    "unbalanced quotes": "[g]\nh1 k='v\n",
    "unequal range widths": "[g]\nh[01:100]\n",
    "a YAML marker": "---\n",
}


@pytest.mark.parametrize("case", sorted(DECLINED))
def test_the_reader_declines_what_it_does_not_know(case, tmp_path, monkeypatch):
    fast, _ = check(tmp_path, monkeypatch, DECLINED[case])
    assert fast is None


def test_other_formats_go_to_ansible(tmp_path, monkeypatch):
    for name, text in [
        ("hosts.yml", "all:\n  hosts:\n    h1:\n"),
        ("hosts", "h1\nh2\n"),  # no extension and no section first: the YAML plugin sees it first
        ("hosts.ini", "$ANSIBLE_VAULT;1.1;AES256\n6162\n"),
    ]:
        p = tmp_path / name
        p.write_text(text)
        assert read_names_and_groups(p) is None, name
    monkeypatch.setenv("ANSIBLE_INVENTORY_ENABLED", "ini")
    p = tmp_path / "x.ini"
    p.write_text("[g]\nh1\n")
    assert read_names_and_groups(p) is None


def test_expand_range_is_ansible_s():
    from ansible.plugins.inventory import expand_hostname_range

    for pattern in ["gpu[001:012]", "a[0:20:7]b[1:2]c", "x[9:11]", "y[5:3]", "z[0:0]"]:
        assert expand_range(pattern) == expand_hostname_range(pattern), pattern


def test_load_inventory_uses_the_reader_only_without_vars(tmp_path):
    p = tmp_path / "hosts.ini"
    p.write_text("[gpu]\nh1 ansible_host=10.0.0.1\n[gpu:vars]\nansible_user=u\n")
    fast = inv_mod.load_inventory(p, with_vars=False)
    full = inv_mod.load_inventory(p)
    assert [(h.name, h.groups) for h in fast.hosts] == [(h.name, h.groups) for h in full.hosts]
    assert fast.hosts[0].vars == {} and full.hosts[0].vars["ansible_host"] == "10.0.0.1"


@pytest.mark.parametrize(
    "name,text,where",
    [
        ("a.yml", "all:\n  hosts:\n    ungrouped: {}\n", None),  # Ansible raised a bare Exception
        ("b.yml", "all:\n  children:\n    gpu:\n      hosts:\n        h1:\n        all:\n", None),
        ("c.ini", "[gpu]\nh1\nungrouped ansible_host=10.0.0.2\n", "line 3"),  # Ansible dropped it
        ("d.ini", "all\n", "line 1"),
    ],
)
def test_a_host_named_after_an_implicit_group_is_refused_with_its_line(tmp_path, name, text, where):
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(InventoryError) as err:
        inv_mod.load_inventory(p)
    msg = str(err.value)
    assert "implicit groups" in msg and str(p) in msg and "rename the host" in msg, msg
    assert (where in msg) if where else ("line" not in msg.split(":")[1]), msg


# -- generated inventories ----------------------------------------------------------------------------
# Mostly valid pieces (each repeated, so most files are valid), some that Ansible refuses or that
# the reader declines.
GOOD_GROUPS = ["gpu", "cpu", "rack1", "rack2", "spare"]
BAD_GROUPS = ["all", "ungrouped", "bad-name", "g x", "_x"]
GOOD_HOSTS = ["h1", "h2", "h3", "node01", "10.0.0.1", "n[1:3]", "n[01:03]", "m[0:9:4]x[1:2]", "w[2:1]"]
BAD_HOSTS = ["h1:22", "fe80::1", "a;b", "q'x", "---", "ä", "b[a:c]", "r[01:1]", "u[1:2", "v]"]
GOOD_VARS = [
    "k=v",
    "ansible_port=22",
    "x='a b'",
    'y="c d"',
    "#c",
    "e=",
    "f=[1,2]",
    "k=1.5",
    "x=None",
    "k=(1,)",
]
BAD_VARS = ["noeq", "z='open", "\\"]
sections = st.tuples(
    st.just("section"),
    st.sampled_from(GOOD_GROUPS * 4 + BAD_GROUPS),
    st.sampled_from(["", ":vars", ":children", ""] * 3 + [":hosts", ":bogus"]),
)
hosts = st.tuples(
    st.just("host"),
    st.sampled_from(GOOD_HOSTS * 6 + BAD_HOSTS),
    st.lists(st.sampled_from(GOOD_VARS * 8 + BAD_VARS), max_size=3),
)
raw = st.tuples(
    st.just("raw"),
    st.sampled_from(["", "# c", "; c", "k=v", "k=2", "x = 'g'", "gpu", "rack1", "spare", "[bad section]"]),
)
lines = st.one_of(sections, hosts, hosts, hosts, raw)


def render(parts) -> str:  # noqa: ANN001
    out = []
    for p in parts:
        if p[0] == "section":
            out.append(f"[{p[1]}{p[2]}]")
        elif p[0] == "host":
            out.append(" ".join([p[1], *p[2]]))
        else:
            out.append(p[1])
    return "\n".join(out) + "\n"


@given(st.lists(lines, min_size=1, max_size=12))
@settings(
    max_examples=120, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
)
def test_generated_inventories_agree_with_ansible(tmp_path_factory, parts):
    d = tmp_path_factory.mktemp("inv")
    text = render(parts)
    p = d / "hosts.ini"
    p.write_text(text)
    agree_on_generated(p, text, with_vars=True)


def agree_on_generated(p: Path, text: str, with_vars: bool) -> None:
    """The reader (names and groups; with ``with_vars``, each host's variables too) against Ansible on a
    generated file: equal where it reads the file, and it declines every file Ansible refuses."""
    nested = text.count(":children]") > 1  # Ansible's own order among several parents' children: set order
    pairs = [(read_names_and_groups(p), ansible_reads)]
    if with_vars:
        pairs.append((fast_reads_vars(p), ansible_reads_vars))
    for fast, oracle in pairs:
        with pytest.MonkeyPatch.context() as m:
            want = oracle(p, m)
        if not want:
            assert not fast, (text, fast)
        elif fast is not None:
            assert sorted(map(repr, fast)) == sorted(map(repr, want)) if nested else fast == want, text
