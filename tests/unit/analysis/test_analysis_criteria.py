"""The safe criteria parser: SuperBench's criteria work, hostile input is refused with a reason."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sb_fleet.analysis.superbench.criteria import CriteriaError, parse_criteria


@pytest.mark.parametrize(
    ("text", "arg", "expected"),
    [
        ("lambda x:x<-0.1", -0.2, True),
        ("lambda x:x<-0.1", -0.1, False),
        ("lambda x:x>0", 124, True),
        ("lambda x:x>0", 0, False),
        ("lambda x:x>1", 1.5, True),
        ("lambda x: x < -0.05 or x > 0.05", 0.06, True),
        ("lambda x: x < -0.05 or x > 0.05", 0.0, False),
        ("lambda x: -0.1 < x < 0.1", 0.0, True),
        ("lambda x: -0.1 < x < 0.1", 0.2, False),
        ("lambda x: abs(x) > 0.1", -0.2, True),
        ("lambda x: max(x, 0) * 2 >= 1", 0.5, True),
        ("lambda x: not x > 3", 2, True),
        ("lambda x: True if x > 1 else False", 2, True),
        ("lambda val: val ** 2 > 4", -3, True),
        ("lambda x: x % 2 == 1", 3, True),
        ("lambda x: x // 2 == 1", 3, True),
        ("lambda x: x / 0 > 1", 1, True),  # IEEE: 1/0 is inf
        ("lambda x: x / 0 < 1", -1, True),
        ("lambda x: 0 / 0 > x", 1, False),  # NaN compares false: no violation
    ],
)
def test_criteria_values(text: str, arg: float, expected: bool) -> None:
    assert parse_criteria(text)(arg) is expected


def test_multi_rules_criteria_reads_stored_counts() -> None:
    c = parse_criteria('lambda label:True if label["rule4"]+label["rule5"]>=2 else False')
    assert c.param_kind == "mapping"
    assert c.keys == ("rule4", "rule5")
    assert c({"rule4": 1, "rule5": 1}) is True
    assert c({"rule4": 1, "rule5": 0}) is False
    out = c.evaluate({"rule4": np.array([0, 1, 2]), "rule5": np.array([1, 1, 0])})
    assert out.tolist() == [False, True, True]


def test_vectorised_evaluation_matches_scalar() -> None:
    c = parse_criteria("lambda x: x < -0.1 and x > -0.5")
    xs = np.array([-0.6, -0.3, -0.1, 0.0, np.nan])
    assert c.evaluate(xs).tolist() == [c(float(x)) for x in xs]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('lambda x: __import__("os").system("id")', "not allowed"),
        ("lambda x: x.__class__", "attribute access"),
        ("lambda x: x.real > 0", "attribute access"),
        ("lambda x: ().__class__.__bases__[0]", "may be subscripted"),
        ("lambda x: ().__class__.__bases__ == 0", "attribute access"),
        ("lambda x: open('/etc/passwd')", "call of 'open'"),
        ("lambda x: eval('1') > 0", "call of 'eval'"),
        ("lambda x: exec('x=1')", "call of 'exec'"),
        ("lambda x: globals()", "call of 'globals'"),
        ("lambda x: 9**9**9**9 > x", "exponent"),
        ("lambda x: 10**1000 > x", "exponent"),
        ("lambda x: x ** x > 1", "exponent"),
        ("lambda x: 1e400 > x", "too large"),
        ("lambda x: [i for i in range(10**9)]", "not allowed"),
        ("lambda x: 'a' * 10**9", "not allowed"),
        ("lambda x: y > 1", "unknown name"),
        ("lambda x: x", "must yield True or False"),
        ("lambda x: x + 1", "must yield True or False"),
        ("x > 1", "must be a lambda"),
        ("lambda x, y: x > y", "exactly one"),
        ("lambda *a: True", "exactly one"),
        ("lambda x=1: x > 0", "exactly one"),
        ("lambda x: (lambda y: y)(x) > 0", "not allowed"),
        ("lambda x: (y := 1) > 0", "not allowed"),
        ("lambda x: x['a'] > 1 and x > 1", "both as a number and as a mapping"),
        ("lambda x: x[0] > 1", "quoted rule name"),
        ("lambda x: x < 1 if x else 2", "truth value"),
        ("lambda x: x >", "not a valid expression"),
        ("lambda x: " + "(" * 500 + "x" + ")" * 500 + " > 1", "characters long"),
        ("lambda x: " + "-" * 300 + "x > 1", "too complex"),
        ("lambda x: x > 1\x00", "NUL"),
    ],
)
def test_hostile_or_unsupported_criteria_are_refused(text: str, reason: str) -> None:
    with pytest.raises(CriteriaError) as exc:
        parse_criteria(text)
    assert reason in str(exc.value)


def test_non_string_criteria_refused() -> None:
    with pytest.raises(CriteriaError, match="must be a string"):
        parse_criteria(0.5)  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=120))
def test_arbitrary_text_never_escapes(text: str) -> None:
    # Whatever the text, the parser either compiles it into the small language or refuses it cleanly.
    try:
        c = parse_criteria(text)
    except CriteriaError:
        return
    assert isinstance(c(0.5), bool)


@settings(max_examples=200, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6))
def test_variance_criteria_agrees_with_python(x: float) -> None:
    assert parse_criteria("lambda x:x<-0.1")(x) == (x < -0.1)
    assert parse_criteria("lambda x: abs(x) >= 2 and not x == 5")(x) == (abs(x) >= 2 and x != 5)


def stored(*rows: list[float]):
    from sb_fleet.analysis.superbench.criteria import StoredValues

    return StoredValues(tuple(f"b/m{i}" for i in range(len(rows[0]))), np.array(rows, dtype=float))


@pytest.mark.parametrize(
    ("text", "rows", "expected"),
    [
        (
            'lambda l: bool(min(l["v"].values()) / max(l["v"].values()) < 0.95)',
            [[10, 23, 22], [22, 23, 22]],
            [True, False],
        ),
        # min/max skip a missing value; all missing is NaN, which is no violation
        (
            'lambda l: min(l["v"].values()) < 11',
            [[10, np.nan, np.nan], [np.nan, np.nan, np.nan]],
            [True, False],
        ),
        ('lambda l: sum(l["v"].values()) > 50', [[10, 23, 22], [10, np.nan, 22]], [True, False]),
        ('lambda l: len(l["v"]) == 3 and len(l["v"].keys()) == 3', [[1, 2, 3]], [True]),
        ('lambda l: any(l["v"].values())', [[0, 0, 1], [0, 0, 0], [0, np.nan, 0]], [True, False, True]),
        ('lambda l: all(l["v"].values())', [[1, 2, 3], [1, 0, 1]], [True, False]),
        ('lambda l: bool(l["v"]) and l["n"] >= 1', [[1, 2, 3]], [True]),
        ('lambda l: bool(l["n"])', [[1, 2, 3]], [True]),
    ],
)
def test_stored_values_in_multi_rules(text: str, rows: list, expected: list[bool]) -> None:
    c = parse_criteria(text, value_rules={"v"})
    out = c.evaluate({"v": stored(*rows), "n": np.ones(len(rows))})
    assert np.broadcast_to(out, (len(rows),)).tolist() == expected


def test_stored_values_from_a_plain_mapping() -> None:
    c = parse_criteria('lambda label: max(label["v"].values()) > 2', value_rules={"v"})
    assert c({"v": {"a/x": 1.0, "a/y": 3.0}}) is True


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('lambda l: l["v"].items() > 0', "only .values() and .keys()"),
        ('lambda l: l["n"].values() > 0', "only .values() and .keys()"),
        ('lambda l: sum(l["v"]) > 0', "use .values()"),
        ('lambda l: sum(l["v"].keys()) > 0', "not allowed"),
        ('lambda l: len(l["n"]) > 0', "not allowed"),
        ('lambda l: l["v"] > 0', "expected a number"),
        ('lambda l: min(l["v"].values(), 1) > 0', "expected a number"),
        ('lambda l: l["v"].values(1) > 0', "takes no arguments"),
        ("lambda x: sorted(x) > 0", "call of 'sorted'"),
    ],
)
def test_stored_values_misuse_is_refused(text: str, reason: str) -> None:
    with pytest.raises(CriteriaError) as exc:
        parse_criteria(text, value_rules={"v"})
    assert reason in str(exc.value)
