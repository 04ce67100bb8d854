"""Rule criteria such as ``lambda x:x<-0.1``, parsed and evaluated without ``eval``.

SuperBench evaluates a rule's ``criteria`` string with Python's ``eval``,
so a rules file can run any code. Here the string is parsed into a syntax
tree and only a small, closed language is accepted:

- ``lambda NAME: EXPR`` with one parameter;
- numbers, ``True``/``False``, the parameter, and for ``multi_rules``
  ``NAME["rule"]`` (the stored count of another rule's violations);
- ``+ - * / // %``, ``**`` with a constant exponent of at most 64 in size,
  unary ``- + not``, comparisons (chained too), ``and``/``or``,
  ``A if C else B``, and the functions ``abs``, ``min``, ``max``.

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

MAX_LENGTH = 500
MAX_NODES = 200
MAX_EXPONENT = 64


class CriteriaError(ValueError):
    """The criteria text is outside the accepted language; the message says why."""


_NUM, _BOOL, _MAP = "number", "truth value", "mapping"
Node = Callable[[Any], Any]

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
_FUNCS: dict[str, Callable[..., Any]] = {
    "abs": np.abs,
    "min": lambda *xs: functools.reduce(np.minimum, xs),
    "max": lambda *xs: functools.reduce(np.maximum, xs),
}


@dataclass(frozen=True)
class Criteria:
    """A compiled criteria: call it with a number (or, for multi_rules, a mapping of rule name -> count)."""

    text: str
    param_kind: str  # "number" or "mapping"
    keys: tuple[str, ...]  # the names subscripted, for multi_rules
    _fn: Node

    def __call__(self, arg: float | Mapping[str, float]) -> bool:
        return bool(self.evaluate(arg))

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
    def __init__(self, text: str):
        self.text = text
        self.param = ""
        self.param_kind: str | None = None
        self.keys: list[str] = []

    def fail(self, node: ast.AST | None, what: str) -> CriteriaError:
        col = getattr(node, "col_offset", None)
        at = f" at column {col + 1}" if isinstance(col, int) else ""
        return CriteriaError(f"{what}{at} in {_short(self.text)!r}")

    def _use_param(self, kind: str, node: ast.AST) -> None:
        if self.param_kind is None:
            self.param_kind = kind
        elif self.param_kind != kind:
            raise self.fail(node, f"'{self.param}' is used both as a number and as a mapping")

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
            return (lambda a, k=name: _as_number(a[k])), _NUM
        if isinstance(node, ast.UnaryOp):
            inner, kind = self.compile(node.operand)
            if isinstance(node.op, ast.Not):
                return (lambda a, f=inner: np.logical_not(f(a))), _BOOL
            self._need(kind, _NUM, node.operand)
            if isinstance(node.op, ast.USub):
                return (lambda a, f=inner: -f(a)), _NUM
            if isinstance(node.op, ast.UAdd):
                return inner, _NUM
            raise self.fail(node, f"operator {type(node.op).__name__} is not allowed")
        if isinstance(node, ast.BinOp):
            op = _BIN.get(type(node.op))
            if op is None:
                raise self.fail(node, f"operator {type(node.op).__name__} is not allowed")
            left, lk = self.compile(node.left)
            self._need(lk, _NUM, node.left)
            if isinstance(node.op, ast.Pow):
                exp = _constant_number(node.right)
                if exp is None:
                    raise self.fail(node, "an exponent must be a plain number")
                if abs(exp) > MAX_EXPONENT:
                    raise self.fail(node, f"exponent {exp:g} is too large (at most {MAX_EXPONENT})")
                return (lambda a, f=left, e=exp: _pow(f(a), e)), _NUM
            right, rk = self.compile(node.right)
            self._need(rk, _NUM, node.right)
            return (lambda a, f=left, g=right, o=op: o(f(a), g(a))), _NUM
        if isinstance(node, ast.Compare):
            parts = [self.compile(node.left)]
            for c in node.comparators:
                parts.append(self.compile(c))
            for (_, k), n in zip(parts, [node.left, *node.comparators], strict=True):
                self._need(k, _NUM, n)
            ops = []
            for o in node.ops:
                cmp_fn = _CMP.get(type(o))
                if cmp_fn is None:
                    raise self.fail(node, f"comparison {type(o).__name__} is not allowed")
                ops.append(cmp_fn)
            fns = [p[0] for p in parts]

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
            if bk != ok:
                raise self.fail(node, "both branches of 'if ... else' must be of the same kind")
            return (lambda a, t=test, b=body, o=orelse: np.where(t(a), b(a), o(a))), bk
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCS:
                what = ast.unparse(node.func) if hasattr(ast, "unparse") else "function"
                raise self.fail(node, f"call of {what!r} is not allowed (only abs, min, max)")
            if node.keywords or not node.args:
                raise self.fail(node, f"{node.func.id}() takes plain numeric arguments")
            if node.func.id == "abs" and len(node.args) != 1:
                raise self.fail(node, "abs() takes one argument")
            if node.func.id in ("min", "max") and len(node.args) < 2:
                raise self.fail(node, f"{node.func.id}() takes at least two arguments")
            args = []
            for arg in node.args:
                if isinstance(arg, ast.Starred):
                    raise self.fail(arg, "*arguments are not allowed")
                fn, k = self.compile(arg)
                self._need(k, _NUM, arg)
                args.append(fn)
            func = _FUNCS[node.func.id]
            return (lambda a, fs=args, fn=func: fn(*(f(a) for f in fs))), _NUM
        if isinstance(node, ast.Attribute):
            raise self.fail(node, f"attribute access '.{node.attr}' is not allowed")
        raise self.fail(node, f"{type(node).__name__} is not allowed")

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


def parse_criteria(text: str) -> Criteria:
    """Compile a criteria string. Raises :class:`CriteriaError` with the reason."""
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
    comp = _Compiler(text)
    comp.param = a.args[0].arg
    try:
        fn, kind = comp.compile(lam.body)
    except RecursionError:
        raise CriteriaError(f"criteria is nested too deeply in {_short(text)!r}") from None
    if kind != _BOOL:
        raise CriteriaError(f"criteria must yield True or False (a comparison), not a {kind}, in {text!r}")
    return Criteria(text=text, param_kind=comp.param_kind or _NUM, keys=tuple(comp.keys), _fn=fn)
