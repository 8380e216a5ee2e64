"""Vectorised evaluation of WHERE conditions (sqlglot trees) over numpy columns.

A bound condition refers to attributes through two *roles*: ``cur`` (the event a
local predicate filters, or the earlier event ``U`` of an adjacent pair) and ``next``
(the later event, ``NEXT(V)``).  The engine evaluates a local predicate once over a
whole column, and a predicate on adjacent events once per new event against the
array of kept earlier events (``next`` values are scalars that broadcast).

SQL three-valued logic is kept with an explicit validity mask next to each value;
a condition that ends up NULL counts as false.  Types are checked statically
(:func:`check_types`) so that a mistyped comparison fails at analysis, not in a worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, Union

import numpy as np
import sqlglot.expressions as exp

from cogra.errors import QueryError

ROLE_CUR = "cur"
ROLE_NEXT = "next"

Data = Union[np.ndarray, Any]
Valid = Union[np.ndarray, bool]


@dataclass(frozen=True)
class Val:
    """A column or scalar value with its validity (False where SQL NULL)."""

    data: Data
    valid: Valid


Env = Callable[[str, str], Val]
"""``env(role, attribute)`` returns the value of an attribute for a role."""

_COMPARE = {
    exp.EQ: np.equal,
    exp.NEQ: np.not_equal,
    exp.GT: np.greater,
    exp.GTE: np.greater_equal,
    exp.LT: np.less,
    exp.LTE: np.less_equal,
}
_ARITH = (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod)


def literal_value(node: exp.Literal) -> Any:
    if node.is_string:
        return node.this
    text = node.this
    try:
        return int(text)
    except ValueError:
        return float(text)


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
WIDE_ABOVE = 2.0**62
"""Integer arithmetic whose float estimate reaches this magnitude is redone exactly."""


def _is_wide(x: Data) -> bool:
    """Exact numbers beyond int64: a Python int out of its range, a Fraction, or an object
    array of such (decimal columns of more than 15 digits, widened integer results)."""
    if isinstance(x, np.ndarray):
        if x.dtype != object or not x.size:
            return False
        first = x.flat[0]
        return isinstance(first, (int, Fraction)) and not isinstance(first, bool)
    if isinstance(x, bool):
        return False
    return isinstance(x, Fraction) or (isinstance(x, int) and not INT64_MIN <= x <= INT64_MAX)


def _widened(node: exp.Expression, v: Val) -> Val:
    """``v`` as exact numbers: integer arrays as Python ints, numeric literals as the exact
    decimal they spell (``0.1`` is 1/10, as Spark reads a decimal literal); floats stay
    floats (a float meets an exact number as Python compares them: exactly)."""
    if isinstance(node, exp.Paren):
        return _widened(node.this, v)
    if isinstance(node, exp.Literal) and not node.is_string:
        return Val(Fraction(node.this), v.valid)
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        return Val(-Fraction(node.this.this), v.valid)
    data = v.data
    if isinstance(data, np.ndarray) and data.dtype.kind in "iu":
        return Val(data.astype(object), v.valid)
    if isinstance(data, np.integer):
        return Val(int(data), v.valid)
    return v


def _operands(nodes: list[exp.Expression], env: Env) -> list[Val]:
    """The values of ``nodes``, all exact where one of them is beyond int64 (so that numpy
    never compares or computes with a number it cannot hold)."""
    vals = [evaluate(n, env) for n in nodes]
    if any(_is_wide(v.data) for v in vals):
        vals = [_widened(n, v) for n, v in zip(nodes, vals)]
    return vals


def _integral(x: Data) -> bool:
    if isinstance(x, np.ndarray):
        return x.dtype.kind in "iu"
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _arithmetic(op: Callable, a: Data, b: Data) -> Data:
    """``op(a, b)`` for +, -, *: in int64 where the result fits, else exactly (SQL
    integers never wrap around)."""
    if _integral(a) and _integral(b):
        estimate = op(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
        if np.any(np.abs(estimate) >= WIDE_ABOVE):
            return op(_as_objects(a), _as_objects(b))
    return op(a, b)


def _as_objects(x: Data) -> Data:
    if isinstance(x, np.ndarray):
        return x.astype(object)
    return int(x)


_exact_fmod = np.frompyfunc(lambda x, y: (abs(x) % abs(y)) * (1 if x >= 0 else -1), 2, 1)


def evaluate(node: exp.Expression, env: Env) -> Val:
    """Evaluate a bound expression tree to a :class:`Val`."""
    if isinstance(node, exp.Paren):
        return evaluate(node.this, env)
    if isinstance(node, exp.Column):
        return env(node.table, node.name)
    if isinstance(node, exp.Literal):
        return Val(literal_value(node), True)
    if isinstance(node, exp.Boolean):
        return Val(bool(node.this), True)
    if isinstance(node, exp.Null):
        return Val(0, False)
    if isinstance(node, exp.Neg):
        v = evaluate(node.this, env)
        if isinstance(v.data, (int, Fraction)) and not isinstance(v.data, bool):
            return Val(-v.data, v.valid)  # a literal: exact, whatever its size
        if _integral(v.data) and np.any(np.equal(v.data, INT64_MIN)):
            return Val(np.negative(_as_objects(v.data)), v.valid)  # -(-2**63) needs 64 bits
        return Val(np.negative(v.data), v.valid)
    if isinstance(node, exp.Not):
        v = evaluate(node.this, env)
        return Val(np.logical_not(v.data), v.valid)
    if isinstance(node, exp.And):
        return _and(evaluate(node.this, env), evaluate(node.expression, env))
    if isinstance(node, exp.Or):
        return _or(evaluate(node.this, env), evaluate(node.expression, env))
    if isinstance(node, exp.Is):
        v = evaluate(node.this, env)
        if isinstance(node.expression, exp.Boolean):  # IS TRUE / IS FALSE: never NULL
            data = v.data if node.expression.this else np.logical_not(v.data)
            return Val(np.logical_and(v.valid, data), True)
        return Val(np.logical_not(v.valid), True)
    if type(node) in _COMPARE:
        a, b = _operands([node.this, node.expression], env)
        return Val(compare(type(node), a.data, b.data), np.logical_and(a.valid, b.valid))
    if isinstance(node, exp.In):
        x, *items = _operands([node.this, *node.expressions], env)
        out: Val | None = None
        for v in items:
            eq = Val(compare(exp.EQ, x.data, v.data), np.logical_and(x.valid, v.valid))
            out = eq if out is None else _or(out, eq)
        assert out is not None  # the parser rejects IN ()
        return out
    if isinstance(node, exp.Between):
        x, lo, hi = _operands([node.this, node.args["low"], node.args["high"]], env)

        def between(lo: Val, hi: Val) -> Val:
            return _and(Val(compare(exp.GTE, x.data, lo.data), np.logical_and(x.valid, lo.valid)),
                        Val(compare(exp.LTE, x.data, hi.data), np.logical_and(x.valid, hi.valid)))

        if node.args.get("symmetric"):  # either bound may be the lower one
            return _or(between(lo, hi), between(hi, lo))
        return between(lo, hi)
    if isinstance(node, _ARITH):
        a, b = _operands([node.this, node.expression], env)
        valid = np.logical_and(a.valid, b.valid)
        if isinstance(node, exp.Add):
            return Val(_arithmetic(np.add, a.data, b.data), valid)
        if isinstance(node, exp.Sub):
            return Val(_arithmetic(np.subtract, a.data, b.data), valid)
        if isinstance(node, exp.Mul):
            return Val(_arithmetic(np.multiply, a.data, b.data), valid)
        # Division and modulo by zero give NULL (Spark without ANSI; never a crash).
        zero = np.equal(b.data, 0)
        safe = np.where(zero, 1, b.data)
        valid = np.logical_and(valid, np.logical_not(zero))
        if isinstance(node, exp.Div):
            return Val(np.true_divide(a.data, safe), valid)
        if _is_wide(a.data) or _is_wide(safe):
            return Val(_exact_fmod(a.data, safe), valid)
        return Val(np.fmod(a.data, safe), valid)
    raise TypeError(f"unsupported expression {node.sql()}")


def _floating(x: Data) -> bool:
    return (isinstance(x, np.ndarray) and x.dtype.kind == "f") or isinstance(x, float)


def _isnan(x: Data) -> Data:
    """Where ``x`` is NaN (exact numbers never are)."""
    if isinstance(x, np.ndarray) and x.dtype.kind == "f":
        return np.isnan(x)
    if isinstance(x, float):
        return x != x
    return np.zeros(len(x), bool) if isinstance(x, np.ndarray) else False


def compare(op: type, a: Data, b: Data) -> Data:
    """``a op b`` (``op`` one of exp.EQ, NEQ, LT, LTE, GT, GTE), with NaN as Spark orders
    it: equal to itself and above every other number (as the reference evaluates it,
    and as Spark reads a filter pushed below MATCH_TREND)."""
    if not (_floating(a) or _floating(b)):
        return _COMPARE[op](a, b)
    if op in (exp.GT, exp.GTE):  # b < a, b <= a
        a, b, op = b, a, exp.LT if op is exp.GT else exp.LTE
    nan_a, nan_b = _isnan(a), _isnan(b)
    equal = np.logical_or(np.equal(a, b), np.logical_and(nan_a, nan_b))
    if op is exp.EQ:
        return equal
    if op is exp.NEQ:
        return np.logical_not(equal)
    less = np.logical_or(np.less(a, b), np.logical_and(np.logical_not(nan_a), nan_b))
    return less if op is exp.LT else np.logical_or(less, equal)


def truth(v: Val, n: int) -> np.ndarray:
    """A condition's result as a boolean array of length ``n`` (NULL -> False)."""
    out = np.logical_and(v.data, v.valid)
    return np.broadcast_to(np.asarray(out, dtype=bool), (n,))


def _and(a: Val, b: Val) -> Val:
    a_false = np.logical_and(a.valid, np.logical_not(a.data))
    b_false = np.logical_and(b.valid, np.logical_not(b.data))
    any_false = np.logical_or(a_false, b_false)
    both_true = np.logical_and(np.logical_and(a.valid, a.data), np.logical_and(b.valid, b.data))
    return Val(both_true, np.logical_or(any_false, both_true))


def _or(a: Val, b: Val) -> Val:
    a_true = np.logical_and(a.valid, a.data)
    b_true = np.logical_and(b.valid, b.data)
    any_true = np.logical_or(a_true, b_true)
    both_false = np.logical_and(
        np.logical_and(a.valid, np.logical_not(a.data)),
        np.logical_and(b.valid, np.logical_not(b.data)),
    )
    return Val(any_true, np.logical_or(any_true, both_false))


# ---------------------------------------------------------------------------
# Static typing
# ---------------------------------------------------------------------------

NUMBER, STRING, BOOLEAN, TEMPORAL, NULL = "number", "string", "boolean", "temporal", "null"


def check_types(
    node: exp.Expression,
    kind_of: Callable[[exp.Column], str],
    fail: Callable[[exp.Expression, str], QueryError],
    render: Callable[[exp.Expression], str] = lambda n: n.sql(),
) -> str:
    """Infer the kind of ``node``; raise ``fail(node, message)`` on a type mismatch.

    The whole condition must be boolean.  ``render`` writes sub-expressions in
    messages (as the user wrote them).
    """

    def infer(n: exp.Expression) -> str:
        if isinstance(n, exp.Paren):
            return infer(n.this)
        if isinstance(n, exp.Column):
            return kind_of(n)
        if isinstance(n, exp.Literal):
            return STRING if n.is_string else NUMBER
        if isinstance(n, exp.Boolean):
            return BOOLEAN
        if isinstance(n, exp.Null):
            return NULL
        if isinstance(n, exp.Neg) or isinstance(n, _ARITH):
            for child in ([n.this] if isinstance(n, exp.Neg) else [n.this, n.expression]):
                k = infer(child)
                if k not in (NUMBER, NULL):
                    raise fail(child, f"arithmetic needs numbers, but {render(child)} is a {k}")
            return NUMBER
        if isinstance(n, (exp.And, exp.Or)):
            for child in (n.this, n.expression):
                _want_bool(child, infer(child))
            return BOOLEAN
        if isinstance(n, exp.Not):
            _want_bool(n.this, infer(n.this))
            return BOOLEAN
        if isinstance(n, exp.Is):
            k = infer(n.this)
            if isinstance(n.expression, exp.Boolean) and k not in (BOOLEAN, NULL):
                raise fail(n, f"IS {'TRUE' if n.expression.this else 'FALSE'} needs a condition, "
                           f"but {render(n.this)} is a {k}")
            return BOOLEAN
        if type(n) in _COMPARE:
            _comparable(n, [n.this, n.expression])
            return BOOLEAN
        if isinstance(n, exp.In):
            _comparable(n, [n.this, *n.expressions])
            return BOOLEAN
        if isinstance(n, exp.Between):
            _comparable(n, [n.this, n.args["low"], n.args["high"]])
            return BOOLEAN
        raise fail(n, f"unsupported expression {render(n)!r} (supported: arithmetic, comparisons, "
                   "AND/OR/NOT, IN, BETWEEN, IS [NOT] NULL)")

    def _want_bool(child: exp.Expression, k: str) -> None:
        if k not in (BOOLEAN, NULL):
            raise fail(child, f"{render(child)} is a {k}, not a condition")

    def _comparable(n: exp.Expression, operands: list[exp.Expression]) -> None:
        kinds = {infer(o) for o in operands} - {NULL}
        for o in operands:
            if infer(o) not in (NUMBER, STRING, BOOLEAN, TEMPORAL, NULL):
                raise fail(n, f"cannot compare {render(o)} ({infer(o)}): only IS [NOT] NULL "
                           "applies to it")
        if len(kinds) > 1:
            raise fail(n, "cannot compare " + " with ".join(
                f"{render(o)} ({infer(o)})" for o in operands))

    kind = infer(node)
    if kind not in (BOOLEAN, NULL):
        raise fail(node, f"{render(node)} is a {kind}, not a condition")
    return kind
