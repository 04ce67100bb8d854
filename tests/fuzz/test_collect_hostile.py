"""Fuzz collect's listing parser and the normaliser with hostile trees and files.

Properties: the streaming listing parser, fed any bytes in any chunking, either refuses the host
with :class:`HostRefused` or yields only safe relative paths, never holding more than ``max_files``
entries; :func:`plan_fetch` never accepts a clashing, oversized or over-budget file; the normaliser,
given result files of any shape (deep, huge numbers, NaN, strings), never raises and never writes
a non-finite number into the summary line.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sb_fleet.config.collect_budgets import CollectBudgets
from sb_fleet.fleet.fetch import HostRefused, ListingParser, plan_fetch
from sb_fleet.rundir.normalize import summarize_host

pytestmark = pytest.mark.long

N = int(os.environ.get("SB_FLEET_FUZZ_EXAMPLES", "2000"))
SETTINGS = settings(
    max_examples=N, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
)
NAMES = st.sampled_from(["x", "x/y", "a/b/c", "../e", "/abs", ".h", "a//b", "-rf", "n\nl", "é", "a/.t/b"])
RECORD = st.tuples(st.sampled_from("fdlpscbD?"), st.integers(0, 1 << 40), NAMES).map(
    lambda t: f"{t[0]} {t[1]} {t[2]}".encode() + b"\0"
)


@given(
    st.lists(st.one_of(RECORD, st.binary(max_size=40)), max_size=30), st.integers(1, 17), st.integers(1, 40)
)
@SETTINGS
def test_listing_parser(records, chunk, max_files):
    data = b"".join(records)
    p = ListingParser(max_files)
    budgets = CollectBudgets(
        host_timeout=10, max_files=max_files, max_file_bytes=1 << 30, max_host_bytes=1 << 32
    )
    try:
        for i in range(0, len(data), chunk):
            p.feed(data[i : i + chunk])
        listing = p.close()
    except HostRefused as exc:
        assert "\n" not in str(exc)
        return
    assert len(listing.files) + len(listing.dirs) <= max_files
    for rel in [*listing.files, *listing.dirs]:
        parts = rel.split("/")
        assert not rel.startswith(("/", "-")) and ".." not in parts and "" not in parts
        assert not any(x.startswith(".") for x in parts)
    with tempfile.TemporaryDirectory() as d:
        ok = plan_fetch(listing, Path(d), budgets)
    for rel, size in ok.items():
        assert size <= budgets.max_file_bytes and rel not in listing.dirs
        parts = rel.split("/")
        assert not any("/".join(parts[:i]) in listing.files for i in range(1, len(parts)))
    assert sum(ok.values()) <= budgets.max_host_bytes


LEAF = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(10**400), 10**400),
    st.text(max_size=5),
    st.none(),
    st.booleans(),
)


@given(
    st.dictionaries(
        st.sampled_from(["m1", "m2", "return_code"]), st.one_of(LEAF, st.lists(LEAF, max_size=3))
    ),
    st.integers(0, 3000),
    st.sampled_from([None, "max", "sum", "avg", "bogus"]),
)
@SETTINGS
def test_normalise_hostile_files(result, depth, op):
    with tempfile.TemporaryDirectory() as d:
        root = Path(d) / "raw" / "results" / "noop"
        root.mkdir(parents=True)
        doc = {"return_code": 0, "result": result, "reduce_op": {"m1": op, "m2": op}}
        (root / "rank0.json").write_text(json.dumps(doc).replace('"@"', "1"))
        (root / "rank1.json").write_text(
            '{"return_code": 0, "result": {"m1": ' + "[" * depth + "]" * depth + "}}"
        )
        rec = summarize_host("h", Path(d) / "raw")
        line = json.loads(rec.summary_line())  # never NaN/inf: allow_nan=False would have raised
        assert all(not isinstance(v, float) or v == v for v in line.values())
        for metric in rec.invalid:
            assert metric not in line
