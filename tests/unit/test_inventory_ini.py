"""The Ansible-free INI reader (names and groups, for ``report -i``) against Ansible itself.

The oracle is Ansible's own inventory code (``load_inventory`` with the fast reader switched off):
for every file the reader accepts it must give the same hosts, in the same order, with the same
groups; for every file Ansible refuses it must decline (``None``) so that Ansible words the error.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sb_fleet.config import inventory as inv_mod
from sb_fleet.config.inventory_ini import expand_range, read_names_and_groups
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


@pytest.mark.parametrize("case", sorted(ACCEPTED))
def test_the_reader_agrees_with_ansible(case, tmp_path, monkeypatch):
    fast, want = check(tmp_path, monkeypatch, ACCEPTED[case])
    assert want and fast == want


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
GOOD_VARS = ["k=v", "ansible_port=22", "x='a b'", 'y="c d"', "#c", "e=", "f=[1,2]"]
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
    st.just("raw"), st.sampled_from(["", "# c", "; c", "k=v", "gpu", "rack1", "spare", "[bad section]"])
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
    fast = read_names_and_groups(p)
    with pytest.MonkeyPatch.context() as m:
        want = ansible_reads(p, m)
    if not want:
        assert not fast, (text, fast)
    elif fast is not None:
        nested = text.count(":children]") > 1
        if nested:  # Ansible's own order among several parents' children follows set iteration
            assert sorted(fast) == sorted(want), text
        else:
            assert fast == want, text
