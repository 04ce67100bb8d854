"""Rule criteria such as ``lambda x:x<-0.1``, parsed and evaluated without ``eval``.

SuperBench evaluates a rule's ``criteria`` string with Python's ``eval``,
so a rules file can run any code. Here the string is parsed into a syntax
tree and only a small, closed language is accepted:

- ``lambda NAME: EXPR`` with one parameter;
- numbers, ``True``/``False``, the parameter, and for ``multi_rules``
  ``NAME["rule"]``: the stored count of another rule's violations, or, for a
  rule with ``store: true`` and no criteria, its stored ``{metric: value}``;
- ``+ - * / // %``, ``**`` with a constant exponent of at most 64 in size,
  unary ``- + not``, comparisons (chained too), ``and``/``or``,
  ``A if C else B``, and the functions ``abs``, ``min``, ``max``, ``bool``;
- on stored values: ``.values()``, ``.keys()``, ``len``, ``sum``, ``min``,
  ``max``, ``any``, ``all`` and ``bool`` (``min(label["r"].values())``).
  ``min``/``max`` skip missing values (all missing: NaN, so no violation);
  ``sum`` of a missing value is NaN; ``any``/``all``/``bool`` take a number's
  truth as Python does (non-zero, and NaN, are true).

Everything else (attribute access, other calls, names, comprehensions,
strings outside a subscript) is rejected with a message naming the rule.
The whole expression must yield a truth value, checked when the rules file
is loaded. Arithmetic is done in floats; an overflow is an error, not a hang.
"""

from __future__ import annotations

import ast
import functools
import math
import operator
import warnings
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

MAX_LENGTH = 500
MAX_NODES = 200
MAX_EXPONENT = 64


class CriteriaError(ValueError):
    """The criteria text is outside the accepted language; the message says why."""


# Kinds of sub-expression: a number, a truth value, the multi_rules mapping, a rule's stored
# {metric: value} ("values"), the numbers of .values() ("sequence"), and the names of .keys().
_NUM, _BOOL, _MAP = "number", "truth value", "mapping"
_VALS, _SEQ, _KEYS = "stored values", "sequence", "sequence of names"
Node = Callable[[Any], Any]


@dataclass(frozen=True)
class StoredValues:
    """The ``{metric: value}`` a store-only rule keeps: one row per host, one column per metric."""

    names: tuple[str, ...]
    values: np.ndarray  # (hosts, metrics)

    @classmethod
    def of(cls, v: Any) -> StoredValues:
        if isinstance(v, StoredValues):
            return v
        if isinstance(v, Mapping):
            vals = np.asarray([float(x) if x is not None else np.nan for x in v.values()], dtype=float)
            return cls(tuple(str(k) for k in v), vals.reshape(1, -1))
        raise TypeError(f"{v!r} is not a rule's stored values")


_BIN = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_CMP = {
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
}
_NUM_FUNCS: dict[str, Callable[..., Any]] = {
    "abs": np.abs,
    "min": lambda *xs: functools.reduce(np.minimum, xs),
    "max": lambda *xs: functools.reduce(np.maximum, xs),
}
FUNCTIONS = ("abs", "min", "max", "bool", "len", "sum", "any", "all")


def _truth(x: Any) -> Any:
    """Python's truth of a number: non-zero, and NaN, are true."""
    x = np.asarray(x, dtype=float)
    return (x != 0) | np.isnan(x)


def _quiet(fn: Callable[..., Any], *a: Any, **kw: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return fn(*a, **kw)


def _seq_min(v: np.ndarray) -> Any:
    return np.full(v.shape[:-1], np.nan) if v.shape[-1] == 0 else _quiet(np.nanmin, v, axis=-1)


def _seq_max(v: np.ndarray) -> Any:
    return np.full(v.shape[:-1], np.nan) if v.shape[-1] == 0 else _quiet(np.nanmax, v, axis=-1)


_SEQ_FUNCS: dict[str, tuple[Callable[[np.ndarray], Any], str]] = {
    "min": (_seq_min, _NUM),
    "max": (_seq_max, _NUM),
    "sum": (lambda v: np.sum(v, axis=-1), _NUM),
    "any": (lambda v: np.any(_truth(v), axis=-1), _BOOL),
    "all": (lambda v: np.all(_truth(v), axis=-1), _BOOL),
}


@dataclass(frozen=True)
class Criteria:
    """A compiled criteria: call it with a number (or, for multi_rules, a mapping of rule name -> count)."""

    text: str
    param_kind: str  # "number" or "mapping"
    keys: tuple[str, ...]  # the names subscripted, for multi_rules
    _fn: Node

    def __call__(self, arg: float | Mapping[str, Any]) -> bool:
        return bool(np.all(self.evaluate(arg)))

    def evaluate(self, arg: Any) -> Any:
        """Evaluate on a number or a whole array of numbers (or a mapping of arrays) at once.

        Arithmetic follows IEEE floats: a division by zero or an overflow gives inf or NaN,
        and a comparison with NaN is false, so it never counts as a violation.
        """
        try:
            with np.errstate(all="ignore"):
                return self._fn(arg)
        except KeyError as exc:
            raise CriteriaError(f"criteria {self.text!r}: no stored rule {exc.args[0]!r}") from None
        except (ArithmeticError, ValueError, TypeError) as exc:
            raise CriteriaError(f"criteria {self.text!r} failed: {exc}") from None

    def __str__(self) -> str:
        return self.text


class _Compiler:
    def __init__(self, text: str, value_rules: frozenset[str]):
        self.text = text
        self.param = ""
        self.param_kind: str | None = None
        self.keys: list[str] = []
        self.value_rules = value_rules

    def fail(self, node: ast.AST | None, what: str) -> CriteriaError:
        col = getattr(node, "col_offset", None)
        at = f" at column {col + 1}" if isinstance(col, int) else ""
        return CriteriaError(f"{what}{at} in {_short(self.text)!r}")

    def _use_param(self, kind: str, node: ast.AST) -> None:
        if self.param_kind is None:
            self.param_kind = kind
        elif self.param_kind != kind:
            raise self.fail(node, f"'{self.param}' is used both as a number and as a mapping")

    def number(self, node: ast.expr) -> Node:
        """Compile an operand that must be a number (a truth value counts as 0 or 1, as in Python)."""
        fn, kind = self.compile(node)
        if kind == _BOOL:

            def as_float(a: Any, f: Node = fn) -> Any:
                return np.asarray(f(a), dtype=float)

            return as_float
        self._need(kind, _NUM, node)
        return fn

    def compile(self, node: ast.expr) -> tuple[Node, str]:
        if isinstance(node, ast.Constant):
            v = node.value
            if isinstance(v, bool):
                return (lambda _a, v=v: np.bool_(v)), _BOOL
            if isinstance(v, (int, float)):
                try:
                    f = float(v)
                except OverflowError:
                    raise self.fail(node, "number too large") from None
                if not math.isfinite(f):
                    raise self.fail(node, "number too large")
                const = np.float64(f)
                return (lambda _a, c=const: c), _NUM
            raise self.fail(node, f"constant {v!r} is not allowed here (only numbers and True/False)")
        if isinstance(node, ast.Name):
            if node.id == self.param:
                self._use_param(_NUM, node)
                return (lambda a: _as_number(a)), _NUM
            if node.id in ("True", "False"):
                val = node.id == "True"
                return (lambda _a, v=val: np.bool_(v)), _BOOL
            raise self.fail(node, f"unknown name {node.id!r} (only the lambda's parameter {self.param!r})")
        if isinstance(node, ast.Subscript):
            if not (isinstance(node.value, ast.Name) and node.value.id == self.param):
                raise self.fail(node, f'only {self.param}["rule name"] may be subscripted')
            key = node.slice
            if not (isinstance(key, ast.Constant) and isinstance(key.value, str)):
                raise self.fail(node, "a subscript must be a quoted rule name")
            self._use_param(_MAP, node)
            name = key.value
            self.keys.append(name)
            if name in self.value_rules:
                return (lambda a, k=name: StoredValues.of(a[k])), _VALS
            return (lambda a, k=name: _as_number(a[k])), _NUM
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.Not):
                inner, kind = self.compile(node.operand)
                self._need(kind, _BOOL, node.operand)
                return (lambda a, f=inner: np.logical_not(f(a))), _BOOL
            inner = self.number(node.operand)
            if isinstance(node.op, ast.USub):
                return (lambda a, f=inner: -f(a)), _NUM
            if isinstance(node.op, ast.UAdd):
                return inner, _NUM
            raise self.fail(node, f"operator {type(node.op).__name__} is not allowed")
        if isinstance(node, ast.BinOp):
            op = _BIN.get(type(node.op))
            if op is None:
                raise self.fail(node, f"operator {type(node.op).__name__} is not allowed")
            left = self.number(node.left)
            if isinstance(node.op, ast.Pow):
                exp = _constant_number(node.right)
                if exp is None:
                    raise self.fail(node, "an exponent must be a plain number")
                if abs(exp) > MAX_EXPONENT:
                    raise self.fail(node, f"exponent {exp:g} is too large (at most {MAX_EXPONENT})")
                return (lambda a, f=left, e=exp: _pow(f(a), e)), _NUM
            right = self.number(node.right)
            return (lambda a, f=left, g=right, o=op: o(f(a), g(a))), _NUM
        if isinstance(node, ast.Compare):
            fns = [self.number(node.left)] + [self.number(c) for c in node.comparators]
            ops = []
            for o in node.ops:
                cmp_fn = _CMP.get(type(o))
                if cmp_fn is None:
                    raise self.fail(node, f"comparison {type(o).__name__} is not allowed")
                ops.append(cmp_fn)

            def compare(a: Any, fns: list[Node] = fns, ops: list = ops) -> Any:
                left = fns[0](a)
                out: Any = True
                for op_, fn in zip(ops, fns[1:], strict=True):
                    right = fn(a)
                    out = np.logical_and(out, op_(left, right))
                    left = right
                return out

            return compare, _BOOL
        if isinstance(node, ast.BoolOp):
            fns = []
            for operand in node.values:
                fn, k = self.compile(operand)
                self._need(k, _BOOL, operand)
                fns.append(fn)
            # Both sides are always evaluated: values are whole columns of hosts at once.
            if isinstance(node.op, ast.And):
                return (lambda a, fs=fns: functools.reduce(np.logical_and, (f(a) for f in fs))), _BOOL
            return (lambda a, fs=fns: functools.reduce(np.logical_or, (f(a) for f in fs))), _BOOL
        if isinstance(node, ast.IfExp):
            test, tk = self.compile(node.test)
            self._need(tk, _BOOL, node.test)
            body, bk = self.compile(node.body)
            orelse, ok = self.compile(node.orelse)
            if bk != ok or bk not in (_NUM, _BOOL):
                raise self.fail(node, "both branches of 'if ... else' must be numbers, or both truth values")
            return (lambda a, t=test, b=body, o=orelse: np.where(t(a), b(a), o(a))), bk
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, ast.Attribute):
            raise self.fail(node, f"attribute access '.{node.attr}' is not allowed")
        raise self.fail(node, f"{type(node).__name__} is not allowed")

    def call(self, node: ast.Call) -> tuple[Node, str]:
        func = node.func
        if isinstance(func, ast.Attribute):
            # label["rule"].values() / .keys(): the only method calls there are.
            target, kind = self.compile(func.value)
            if kind != _VALS or func.attr not in ("values", "keys"):
                raise self.fail(
                    func,
                    f"attribute access '.{func.attr}' is not allowed (only .values() and .keys() of stored values)",
                )
            if node.args or node.keywords:
                raise self.fail(node, f".{func.attr}() takes no arguments")
            if func.attr == "values":
                return (lambda a, t=target: t(a).values), _SEQ
            return (lambda a, t=target: t(a).names), _KEYS
        if not isinstance(func, ast.Name) or func.id not in FUNCTIONS:
            what = ast.unparse(func) if hasattr(ast, "unparse") else "function"
            raise self.fail(node, f"call of {what!r} is not allowed (only {', '.join(FUNCTIONS)})")
        name = func.id
        if node.keywords:
            raise self.fail(node, f"{name}() takes no keyword arguments")
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                raise self.fail(arg, "*arguments are not allowed")
        if len(node.args) == 1 and name != "abs":
            inner, kind = self.compile(node.args[0])
            if kind in (_VALS, _SEQ, _KEYS):
                return self._on_collection(node, name, inner, kind)
            if name == "bool":
                if kind == _BOOL:
                    return inner, _BOOL
                self._need(kind, _NUM, node.args[0])
                return (lambda a, f=inner: _truth(f(a))), _BOOL
            raise self.fail(
                node,
                f"{name}() of one {kind} is not allowed (it takes stored values, e.g. {name}(label['r'].values()))",
            )
        if name == "abs":
            if len(node.args) != 1:
                raise self.fail(node, "abs() takes one argument")
        elif name in ("min", "max"):
            if len(node.args) < 2:
                raise self.fail(node, f"{name}() takes at least two numbers, or one rule's .values()")
        else:
            raise self.fail(node, f"{name}() takes one argument")
        args = [self.number(arg) for arg in node.args]
        fn = _NUM_FUNCS[name]
        return (lambda a, fs=args, fn=fn: fn(*(f(a) for f in fs))), _NUM

    def _on_collection(self, node: ast.Call, name: str, inner: Node, kind: str) -> tuple[Node, str]:
        if name == "len":
            if kind == _VALS:
                return (lambda a, f=inner: np.float64(len(f(a).names))), _NUM
            return (lambda a, f=inner: np.float64(np.shape(f(a))[-1] if np.ndim(f(a)) else len(f(a)))), _NUM
        if name == "bool":
            if kind == _VALS:
                return (lambda a, f=inner: np.bool_(len(f(a).names) > 0)), _BOOL
            return (
                lambda a, f=inner: np.bool_(np.shape(f(a))[-1] > 0 if np.ndim(f(a)) else len(f(a)) > 0)
            ), _BOOL
        if kind != _SEQ or name not in _SEQ_FUNCS:
            hint = "use .values()" if kind == _VALS else "only len() of names"
            raise self.fail(node, f"{name}() of {kind} is not allowed ({hint})")
        red, out_kind = _SEQ_FUNCS[name]
        return (lambda a, f=inner, r=red: r(np.asarray(f(a), dtype=float))), out_kind

    def _need(self, got: str, want: str, node: ast.AST) -> None:
        if got != want:
            raise self.fail(node, f"expected a {want} here, got a {got}")


def _short(text: str) -> str:
    return text if len(text) <= 80 else text[:77] + "..."


def _constant_number(node: ast.expr) -> float | None:
    sign = 1.0
    while isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        if isinstance(node.op, ast.USub):
            sign = -sign
        node = node.operand
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, (int, float))
        and not isinstance(node.value, bool)
    ):
        try:
            return sign * float(node.value)
        except OverflowError:
            return math.inf
    return None


def _pow(base: Any, exp: float) -> Any:
    # Floats only, so a large power is inf rather than a huge integer that takes forever.
    return np.power(np.asarray(base, dtype=float), exp)


def _as_number(v: Any) -> Any:
    if isinstance(v, (bool, str)) or v is None:
        raise TypeError(f"{v!r} is not a number")
    return np.asarray(v, dtype=float)


def parse_criteria(text: str, value_rules: Collection[str] = ()) -> Criteria:
    """Compile a criteria string. Raises :class:`CriteriaError` with the reason.

    ``value_rules`` names the store-only rules: their ``label["name"]`` is a ``{metric: value}``.
    """
    if not isinstance(text, str):
        raise CriteriaError(f"criteria must be a string like 'lambda x: x < -0.1', not {type(text).__name__}")
    if len(text) > MAX_LENGTH:
        raise CriteriaError(f"criteria is {len(text)} characters long (at most {MAX_LENGTH})")
    if "\x00" in text:
        raise CriteriaError("criteria contains a NUL character")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        msg = exc.msg if isinstance(exc, SyntaxError) else type(exc).__name__
        raise CriteriaError(f"not a valid expression ({msg}) in {_short(text)!r}") from None
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise CriteriaError(
            f"criteria is too complex (more than {MAX_NODES} syntax nodes) in {_short(text)!r}"
        )
    lam = tree.body
    if not isinstance(lam, ast.Lambda):
        raise CriteriaError(f"criteria must be a lambda such as 'lambda x: x < -0.1', got {text!r}")
    a = lam.args
    if (
        len(a.args) != 1
        or a.posonlyargs
        or a.kwonlyargs
        or a.vararg
        or a.kwarg
        or a.defaults
        or a.kw_defaults
    ):
        raise CriteriaError(f"the lambda must take exactly one plain parameter in {text!r}")
    comp = _Compiler(text, frozenset(value_rules))
    comp.param = a.args[0].arg
    try:
        fn, kind = comp.compile(lam.body)
    except RecursionError:
        raise CriteriaError(f"criteria is nested too deeply in {_short(text)!r}") from None
    if kind != _BOOL:
        raise CriteriaError(f"criteria must yield True or False (a comparison), not a {kind}, in {text!r}")
    return Criteria(text=text, param_kind=comp.param_kind or _NUM, keys=tuple(comp.keys), _fn=fn)
