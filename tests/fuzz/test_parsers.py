"""Fuzz every parser a user (or a host) feeds: config, inventory, rules, baseline, results files, the
on-host result JSON, the runner's step spec and the collector's checksum listing.

Property, for each: no uncaught exception; a rejection is sb-fleet's own error (exit code 2 for input,
a one-line message naming the file). Inputs are valid documents mutated at random (values replaced,
keys dropped or added, text cut or spliced), plus raw garbage. 2,500 examples per parser in CI (the
Ansible-backed inventory reader, ~40 ms a file: a tenth of that, files of 1 to 10 hosts each), run as
``long`` tests; ``SB_FLEET_FUZZ_EXAMPLES`` sets the count (100000 for a long run, 200 while developing).
The examples are derandomised: every run tries the same ones, so a failure reproduces, and a smaller
budget tries nearly a subset of a larger one's (2026-11-29: 194 of 200 examples drawn with a budget of
200 were among the 400 drawn with a budget of 400). CI ran 4,000 until 2026-11-29 (~185 s of its 2-core
machine); the count went down to keep CI in 30 minutes (issue 49).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sb_fleet.errors import SbFleetError

pytestmark = pytest.mark.long

N = int(os.environ.get("SB_FLEET_FUZZ_EXAMPLES", "2500"))
SETTINGS = settings(
    max_examples=N, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
)
ROOT = Path(__file__).resolve().parents[2]

WORDS = [
    "version",
    "fleet",
    "superbench",
    "gates",
    "enable",
    "benchmarks",
    "modes",
    "name",
    "proc_num",
    "node_num",
    "prefix",
    "parallel",
    "env",
    "parameters",
    "timeout",
    "models",
    "frameworks",
    "var",
    "monitor",
    "workspace",
    "forks",
    "runtime",
    "known_hosts",
    "host_key_checking",
    "limits",
    "baseline",
    "policy",
    "local",
    "torch.distributed",
    "mpi",
    "gemm-flops",
    "noop",
    "rules",
    "function",
    "criteria",
    "categories",
    "metrics",
    "store",
    "value",
    "variance",
    "multi_rules",
    "all",
    "node",
    "return_code",
    "status",
    "ok",
    "skipped",
    "running",
    "failed",
    "ansible_host",
    "ansible_port",
    "ansible_user",
    "ansible_connection",
    "sb_workspace",
    "sb_python",
    "lambda x:x>1",
    "lambda x:__import__('os')",
    "{{ lookup('pipe','id') }}",
    "$(id)",
    "a;b",
    "~",
    "..",
    "-1",
    "0",
    "1e309",
    "nan",
    "inf",
    "null",
    "true",
    "yes",
    "off",
    "8G",
    "\x00",
    "\n",
    ":",
    "- ",
    "&a",
    "*a",
]

scalars = st.one_of(
    st.sampled_from(WORDS),
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=12),
)
# Small containers: generation must stay cheap (thousands of examples per parser within CI's budget).
values = st.one_of(
    scalars, st.lists(scalars, max_size=3), st.dictionaries(st.sampled_from(WORDS), scalars, max_size=3)
)


def mutate(draw, obj):  # noqa: ANN001, ANN201 - a hypothesis helper
    """A copy of ``obj`` with a few random changes somewhere inside."""
    choice = draw(st.integers(0, 9))
    if choice == 0:
        return draw(values)
    if isinstance(obj, dict) and obj:
        obj = dict(obj)
        key = draw(st.sampled_from(sorted(obj, key=str)))
        if choice == 1:
            del obj[key]
        elif choice == 2:
            obj[draw(st.sampled_from(WORDS))] = draw(values)
        else:
            obj[key] = mutate(draw, obj[key])
        return obj
    if isinstance(obj, list) and obj:
        obj = list(obj)
        i = draw(st.integers(0, len(obj) - 1))
        if choice == 1:
            obj.pop(i)
        else:
            obj[i] = mutate(draw, obj[i])
        return obj
    return draw(values) if choice < 5 else obj


@st.composite
def documents(draw, seeds: list, as_json: bool = False):  # noqa: ANN001, ANN201
    """Text of a mutated seed document, sometimes cut or spliced, sometimes garbage."""
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return draw(
            st.one_of(st.text(max_size=200), st.binary(max_size=200).map(lambda b: b.decode("latin-1")))
        )
    doc = draw(st.sampled_from(seeds))
    for _ in range(draw(st.integers(1, 4))):
        doc = mutate(draw, doc)
    try:
        # JSON is YAML too, and far cheaper to write than yaml.safe_dump: YAML's own syntax is exercised by
        # one document in five, and by the raw text, cuts and splices.
        if as_json or draw(st.integers(0, 4)):
            text = json.dumps(doc, allow_nan=True, indent=draw(st.sampled_from([None, 1])))
        else:
            text = yaml.safe_dump(doc, allow_unicode=True)
    except (ValueError, TypeError, yaml.YAMLError):
        text = repr(doc)
    if kind == 1 and text:
        i = draw(st.integers(0, len(text)))
        text = text[:i] + draw(st.text(max_size=10)) + text[i + draw(st.integers(0, 10)) :]
    elif kind == 2 and text:
        text = text[: draw(st.integers(0, len(text)))]
    return text


def one_line_error(fn, *args):  # noqa: ANN001, ANN201
    """Call ``fn``: a value, or sb-fleet's own error with a one-line message (anything else fails the test)."""
    try:
        return fn(*args)
    except SbFleetError as exc:
        msg = str(exc)
        assert msg and "\n" not in msg and "Traceback" not in msg, repr(msg)
        return None


@pytest.fixture(scope="module")
def work():
    d = Path(tempfile.mkdtemp(prefix="sbf-fuzz-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


# -- config ---------------------------------------------------------------------------------------------
# Small seeds keep each example cheap (10,000 per parser in CI); cpu.yaml is trimmed to two benchmarks.
_cpu = yaml.safe_load((ROOT / "configs" / "cpu.yaml").read_text())
_cpu["superbench"]["benchmarks"] = dict(list(_cpu["superbench"]["benchmarks"].items())[:2])
_cpu["superbench"].pop("var", None)
CONFIG_SEEDS = [_cpu]
CONFIG_SEEDS.append(
    {
        "version": "v0.4",
        "fleet": {"forks": 8, "venv": False, "known_hosts": "/x"},
        "superbench": {
            "benchmarks": {
                "noop": {
                    "timeout": 5,
                    "modes": [{"name": "local", "proc_num": 2}],
                    "parameters": {"sleep": 1},
                }
            }
        },
        "gates": {"fleet": {"enabled": False}, "policy": {}},
    }
)


@given(st.data())
@SETTINGS
def test_config(work, data):
    from sb_fleet.config.fleet_config import load_config

    p = work / "config.yaml"
    p.write_text(data.draw(documents(CONFIG_SEEDS)), errors="surrogatepass")
    cfg = one_line_error(load_config, p)
    if cfg is not None:  # an accepted config also plans without a crash
        from sb_fleet.config.inventory import Host, Inventory
        from sb_fleet.plan.run_plan import build_plan

        inv = Inventory(("x",), (Host("h1", (), {"ansible_connection": "local"}),))
        one_line_error(build_plan, cfg, inv)


# -- inventory ------------------------------------------------------------------------------------------
inv_vars = st.dictionaries(
    st.one_of(
        st.sampled_from(
            [
                "ansible_host",
                "ansible_port",
                "ansible_user",
                "ansible_connection",
                "sb_workspace",
                "sb_python",
                "ansible_ssh_private_key_file",
                "ansible_password",
                "ansible_python_interpreter",
            ]
        ),
        st.from_regex(r"[a-z_][a-z0-9_]{0,10}", fullmatch=True),
    ),
    values,
    max_size=5,
)
host_names = st.one_of(
    st.sampled_from(["h1", "a;touch x", "$(id)", "q'\"", "gpu[01:02]", "ä", "-x", "a b"]),
    st.text(min_size=1, max_size=12),
)


@given(st.lists(st.tuples(host_names, inv_vars), min_size=1, max_size=10), st.booleans(), st.data())
@settings(
    max_examples=N // 10,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_inventory(work, hosts, as_ini, data):
    """Ansible reads the file (slow: ~40 ms each), so each example is a file of up to 10 hosts."""
    from sb_fleet.config.inventory import load_inventory
    from sb_fleet.plan.run_plan import host_setup

    if as_ini:
        p = work / "inv.ini"
        lines = ["[gpu]"] + [
            f"{n} " + " ".join(f"{k}={json.dumps(v)}" for k, v in hv.items()) for n, hv in hosts
        ]
        text = "\n".join(lines)
    else:
        p = work / "inv.yml"
        doc = {"all": {"hosts": dict(hosts)}}
        if data.draw(st.booleans()):
            doc = mutate(data.draw, doc)
        try:
            text = yaml.safe_dump(doc, allow_unicode=True)
        except (ValueError, TypeError, yaml.YAMLError):
            text = repr(doc)
    p.write_text(text, errors="surrogatepass")
    inv = one_line_error(load_inventory, p)
    if inv is not None:
        from sb_fleet.config.fleet_config import Config

        cfg = Config.model_validate({"superbench": {"benchmarks": {}}})
        for h in inv.hosts:  # what sb-fleet derives from a host's vars never crashes either
            h.public_vars(), h.is_local  # noqa: B018
            one_line_error(lambda h=h: (h.address, h.port, h.user, host_setup(h, cfg)))
        one_line_error(inv.limit, data.draw(st.sampled_from(["h1", "gpu", "*", "a*,!b", "", "x[0:1]"])))


@given(st.lists(st.data(), min_size=1, max_size=1))
@settings(
    max_examples=N // 10,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_inventory_ini_reader_agrees_with_ansible(work, datas):
    """sb-fleet's names-and-groups INI reader (report -i) against Ansible's own code: equal where it
    reads a file, and it declines every file Ansible refuses (Ansible then words the error)."""
    from tests.unit.test_inventory_ini import agree_on_generated, lines, render

    text = render(datas[0].draw(st.lists(lines, min_size=1, max_size=30)))
    p = work / "hosts.ini"
    p.write_text(text)
    agree_on_generated(p, text, with_vars=False)


# -- rules and baseline -----------------------------------------------------------------------------------
RULE_SEEDS = [
    {
        "version": "v0.4",
        "superbench": {
            "rules": {
                "gflops": {
                    "function": "variance",
                    "criteria": "lambda x:x<-0.1",
                    "categories": "GFLOPS",
                    "metrics": ["gemm-flops/fp64_flops:\\d*", "gemm-flops/fp32_flops"],
                },
                "launch": {
                    "function": "value",
                    "criteria": "lambda x:x>1",
                    "categories": "KernelLaunch",
                    "metrics": ["kernel-launch/.*_time:\\d*"],
                },
                "all": {
                    "function": "multi_rules",
                    "criteria": "lambda label:True if label['gflops']+label['launch']>1 else False",
                    "categories": "FailedTest",
                },
            }
        },
    }
]
BASELINE_SEEDS = [
    {"gemm-flops/fp32_flops": 1.5e4, "mem-bw/h2d_bw:0": 24.1, "kernel-launch/event_time": 0.005}
]


@given(st.data())
@SETTINGS
def test_rules(work, data):
    from sb_fleet.analysis.superbench.rules import load_rules

    p = work / "rules.yaml"
    p.write_text(data.draw(documents(RULE_SEEDS)), errors="surrogatepass")
    one_line_error(load_rules, p)


@given(st.data())
@SETTINGS
def test_baseline(work, data):
    from sb_fleet.analysis.superbench.baseline import load_baseline

    p = work / "baseline.json"
    p.write_text(data.draw(documents(BASELINE_SEEDS, as_json=True)), errors="surrogatepass")
    one_line_error(load_baseline, p)


# -- results files ------------------------------------------------------------------------------------------
SUMMARY_LINE = {
    "node": "h1",
    "gemm-flops/fp32_flops": 1.2e4,
    "gemm-flops/return_code": 0,
    "mem-bw/h2d_bw:0": 24.0,
    "mem-bw/h2d_bw:1": 23.9,
}


@given(st.lists(st.data(), min_size=1, max_size=1), st.integers(1, 6))
@SETTINGS
def test_results_summary(work, datas, nlines):
    from sb_fleet.analysis.fleet_results import parse_summary

    data = datas[0]
    lines = [data.draw(documents([SUMMARY_LINE], as_json=True)).replace("\n", " ") for _ in range(nlines)]
    p = work / "results-summary.jsonl"
    p.write_bytes(
        "\n".join(lines).encode("utf-8", "surrogatepass") + data.draw(st.sampled_from([b"", b"\n", b"\xff"]))
    )
    res = one_line_error(parse_summary, p)
    if res is not None:
        hosts, cols, matrix, problems = res
        assert matrix.shape == (len(hosts), len(cols))
        assert all("\n" not in str(getattr(pr, "message", "")) for pr in problems)


ENVELOPE = {
    "schema_version": 1,
    "name": "noop",
    "type": "micro",
    "run_count": 1,
    "return_code": 0,
    "status": "ok",
    "reason": "",
    "start_time": "2026-01-01 00:00:00",
    "end_time": "2026-01-01 00:00:01",
    "rank": 0,
    "world_size": 1,
    "raw_data": {"step_time": [[0.1]]},
    "result": {"step_time": [0.1], "return_code": [0]},
    "reduce_op": {"step_time": "max", "return_code": None},
    "metrics": {
        "step_time": {"name": "step_time", "unit": "ms", "higher_is_better": False, "reduce_op": "max"}
    },
}


@given(st.data())
@SETTINGS
def test_on_host_result_json(work, data):
    """A host's rank files, whatever they hold, cost at most their own benchmark: never an exception."""
    from sb_fleet.rundir.normalize import summarize_host

    raw = work / "raw"
    for old in raw.rglob("rank*.json"):
        old.unlink()
    for rank in range(data.draw(st.integers(1, 3))):
        d = raw / "results" / data.draw(st.sampled_from(["noop", "noop:b", "m/pytorch-x"]))
        d.mkdir(parents=True, exist_ok=True)
        (d / f"rank{rank}.json").write_text(
            data.draw(documents([ENVELOPE], as_json=True)), errors="surrogatepass"
        )
    hr = summarize_host("h1", raw)
    json.loads(hr.summary_line())  # the summary line is valid JSON (no NaN/inf)
    line = json.loads(hr.summary_line())
    for key, st_ in hr.statuses.items():
        # Every entry the host ran has its return code(s) in the summary line, as integers ...
        codes = [
            v for k, v in line.items() if k == f"{key}/return_code" or k.startswith(f"{key}/return_code:")
        ]
        assert codes and all(isinstance(c, int) and not isinstance(c, bool) for c in codes), (key, line)
        # ... and its status word agrees with them: "ok"/"skipped" only when every rank returned 0,
        # and a rank that did not return 0 never leaves the entry "ok", "skipped" or "running".
        assert isinstance(st_.status, str) and st_.status, key
        if any(c != 0 for c in codes):
            assert st_.status not in ("ok", "skipped", "running"), (key, st_, codes)
        else:
            assert st_.status in ("ok", "skipped") and st_.return_code == 0, (key, st_, codes)
    assert all(isinstance(p, str) and "\n" not in p for p in hr.problems)


@pytest.mark.parametrize(
    "ranks",
    [
        {0: {"return_code": 1, "status": "skipped"}},  # a failing rank that calls itself skipped
        {0: {"return_code": 2, "status": "ok"}},
        {0: {"return_code": -9, "status": "failed"}, 1: {"return_code": 0, "status": "ok"}},  # killed
        {0: {"return_code": 0, "status": "ok"}, 1: {"return_code": 0, "status": "skipped"}},
    ],
)
def test_on_host_status_cases_found_by_the_property(ranks):
    """Cases the property above holds for and random generation rarely reaches."""
    from sb_fleet.rundir.normalize import HostRecord, reduce_entry

    rec = HostRecord("h1")
    reduce_entry("noop", ranks, rec)
    st_ = rec.statuses["noop"]
    if any(d["return_code"] for d in ranks.values()):
        assert st_.status not in ("ok", "skipped", "running") and st_.return_code != 0, st_
    else:
        assert st_.status == "ok" and st_.return_code == 0, st_


SPEC = {
    "schema_version": 1,
    "run_id": "r",
    "step": "step01",
    "entries": [
        {
            "key": "noop",
            "benchmark": "noop",
            "params": {},
            "timeout": 5,
            "modes": [{"name": "local", "proc_num": 1}],
        }
    ],
}


@given(st.data())
@SETTINGS
def test_runner_spec(data):
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from sb_bench.host.runner import SpecError, parse_spec

    try:
        spec = parse_spec(data.draw(documents([SPEC], as_json=True)), "spec")
        assert isinstance(spec, dict)
    except SpecError as exc:
        assert "\n" not in str(exc)


@given(
    st.lists(
        st.one_of(
            st.tuples(
                st.text(alphabet="0123456789abcdef", min_size=64, max_size=64),
                st.one_of(
                    st.sampled_from(
                        [
                            "./noop/rank0.json",
                            "../../etc/passwd",
                            "/abs",
                            "./.x.part",
                            "./a//b",
                            "-rf",
                            "./ok/file",
                            "./a/../b",
                        ]
                    ),
                    st.text(max_size=30),
                ),
            ).map(lambda t: f"{t[0]}  {t[1]}"),
            st.text(max_size=80),
        ),
        max_size=8,
    )
)
@SETTINGS
def test_collect_listing(lines):
    """A host's checksum listing can never make the collector write outside the results directory."""
    from sb_fleet.fleet.fetch import parse_listing

    out = parse_listing("\n".join(lines))
    for rel, digest in out.items():
        assert len(digest) == 64 and not rel.startswith(("/", "-", ".")) and ".." not in rel.split("/")
        assert "" not in rel.split("/")
