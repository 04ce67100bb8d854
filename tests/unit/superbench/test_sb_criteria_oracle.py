"""Multi-rule criteria over stored values give what Python (SuperBench's eval) gives, without eval in sb-fleet.

The oracle is Python itself: SuperBench evaluates the same lambda text with ``eval`` on a dict of
{metric: value}; here the test does that (on its own generated text) and compares it with sb-fleet's
vectorised evaluation over many hosts at once. Missing values are left out: there sb-fleet's rules
are documented to differ (min/max skip NaN).
"""

from __future__ import annotations

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from sb_fleet.analysis.superbench.criteria import CriteriaError, StoredValues, parse_criteria

VALS = 'label["v"].values()'
numbers = st.one_of(
    st.sampled_from([f"min({VALS})", f"max({VALS})", f"sum({VALS})", 'len(label["v"])', 'label["n"]']),
    st.integers(-5, 40).map(str),
)


@st.composite
def expr(draw: st.DrawFn, depth: int = 0) -> str:
    if depth > 1 or draw(st.booleans()):
        return draw(numbers)
    op = draw(st.sampled_from(["+", "-", "*", "/"]))
    return f"({draw(expr(depth + 1))} {op} {draw(expr(depth + 1))})"


@st.composite
def predicate(draw: st.DrawFn) -> str:
    kind = draw(st.sampled_from(["cmp", "any", "all", "bool", "and"]))
    if kind == "any":
        return f"any({VALS})"
    if kind == "all":
        return f"all({VALS})"
    cmp = f"{draw(expr())} {draw(st.sampled_from(['<', '<=', '>', '>=', '!=']))} {draw(expr())}"
    if kind == "bool":
        return f"bool({cmp})"
    if kind == "and":
        return f"({cmp}) and not ({draw(expr())} < {draw(expr())})"
    return cmp


@settings(max_examples=300, deadline=None)
@given(
    predicate(),
    st.lists(st.lists(st.integers(0, 30).map(float), min_size=3, max_size=3), min_size=1, max_size=6),
    st.integers(0, 3),
)
def test_stored_values_criteria_agree_with_python(text: str, rows: list[list[float]], n: int) -> None:
    try:
        crit = parse_criteria(f"lambda label: {text}", value_rules={"v"})
    except CriteriaError as exc:  # only the size limits, which are sb-fleet's own, may refuse it
        assume("too complex" not in str(exc) and "characters long" not in str(exc))
        raise
    names = ("b/m0", "b/m1", "b/m2")
    vals = np.array(rows)
    got = np.broadcast_to(
        crit.evaluate({"v": StoredValues(names, vals), "n": np.full(len(rows), float(n))}), (len(rows),)
    )
    oracle = eval(f"lambda label: {text}")  # the test's own text: SuperBench's semantics
    for r, row in enumerate(rows):
        try:
            want = bool(oracle({"v": dict(zip(names, row, strict=True)), "n": n}))
        except ZeroDivisionError:
            continue  # SuperBench: an exception in a multi rule is no violation; sb-fleet: IEEE inf/NaN
        assert bool(got[r]) == want, (text, row)
