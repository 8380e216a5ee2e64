"""WHERE conditions for the reference: classification and a tiny SQL evaluator.

Every condition (a boolean conjunct that is not an equivalence ``[attr]``) is bound
once against the input's column names:

* ``local``     -- names exactly one variable ``V`` and no ``NEXT``: it filters the
                   events that may play ``V``;
* ``adjacent``  -- names ``NEXT(V)`` and at most one plain variable ``U``: it must
                   hold for every consecutive pair ``(e_p as U, e as V)`` of a trend
                   (every ``U`` that may precede ``V`` when no ``U`` is named);
* ``constant``  -- names no variable at all (``1 = 1``): every event of a trend must
                   satisfy it (report Def. 5), so it is checked like a local predicate
                   of every variable.

A bare identifier (``Column`` without a table) is an attribute of the conjunct's only
plain variable when the input has such a column, else a string literal
(``M.activity = passive``); a bare identifier that names a column in a conjunct with no
plain variable (or several) is ambiguous: :class:`QueryError`.

Evaluation is row at a time over Python values with SQL three-valued logic (``None``
is NULL; a condition holds only when it evaluates to ``True``).  Numbers are exact:
ints stay ints, finite floats become ``Fraction(x)`` (their exact binary value),
decimals and numeric literals (``1.1``) exact ``Fraction``\\ s; non-finite floats stay
floats.  Comparisons follow Spark for NaN (NaN equals NaN and is larger than every
other number).  ``x / 0`` and ``x % 0`` are NULL (Spark without ANSI mode); ``%`` takes
the sign of the dividend, as in Spark/Java.  Comparing or computing with values of
incompatible kinds (a string and a number, ...) raises :class:`DataError` naming the
condition.
"""

from __future__ import annotations

import decimal
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Callable, Mapping

import sqlglot.expressions as exp

from cogra.errors import DataError, QueryError
from cogra.language.ast import NEXT_MARKER, Condition, Query

# ---------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------


def sql_value(value: Any) -> Any:
    """A column value as the evaluator sees it (exact numbers; everything else as is)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return Fraction(value) if math.isfinite(value) else value
    if isinstance(value, decimal.Decimal):
        return Fraction(value) if value.is_finite() else float(value)
    return value


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, Fraction, float)) and not isinstance(v, bool)


def _is_nan(v: Any) -> bool:
    return isinstance(v, float) and math.isnan(v)


class _Clash(Exception):
    """Values of incompatible kinds met in an operator (turned into a DataError)."""


def _kind(v: Any) -> str:
    return "number" if _is_number(v) else type(v).__name__


def compare(a: Any, b: Any) -> int:
    """-1, 0 or 1 for two non-NULL values of the same kind (Spark's NaN order)."""
    if _is_number(a) and _is_number(b):
        if _is_nan(a) or _is_nan(b):
            return (1 if _is_nan(a) else 0) - (1 if _is_nan(b) else 0)
        return (a > b) - (a < b)
    if _kind(a) != _kind(b):
        raise _Clash(f"cannot compare {a!r} ({_kind(a)}) with {b!r} ({_kind(b)})")
    try:
        return (a > b) - (a < b)
    except TypeError as err:
        raise _Clash(f"cannot compare {a!r} with {b!r}: {err}") from None


def _arith(op: str, a: Any, b: Any) -> Any:
    if a is None or b is None:
        return None
    if not (_is_number(a) and _is_number(b)):
        raise _Clash(f"cannot compute {a!r} {op} {b!r}: both sides must be numbers")
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if b == 0:
        return None  # x / 0 and x % 0 are NULL
    if isinstance(a, float) or isinstance(b, float):
        return a / b if op == "/" else math.fmod(a, b)
    if op == "/":
        return Fraction(a) / Fraction(b)
    # % : remainder with the sign of the dividend (Spark, Java), not Python's floor mod.
    quotient = Fraction(a) / Fraction(b)
    return a - b * math.trunc(quotient)


def _and(a: Any, b: Any) -> Any:
    if a is False or b is False:
        return False
    if a is None or b is None:
        return None
    return True


def _or(a: Any, b: Any) -> Any:
    if a is True or b is True:
        return True
    if a is None or b is None:
        return None
    return False


def _boolean(v: Any) -> Any:
    if v is None or isinstance(v, bool):
        return v
    raise _Clash(f"{v!r} is not a boolean")


def _literal(node: exp.Literal) -> Any:
    if node.is_string:
        return node.this
    text = node.this
    value = Fraction(text)
    if value.denominator == 1 and not any(c in text for c in ".eE"):
        return int(value)
    return value


_COMPARISONS: dict[type, Callable[[int], bool]] = {
    exp.EQ: lambda c: c == 0,
    exp.NEQ: lambda c: c != 0,
    exp.LT: lambda c: c < 0,
    exp.LTE: lambda c: c <= 0,
    exp.GT: lambda c: c > 0,
    exp.GTE: lambda c: c >= 0,
}
_ARITHMETIC: dict[type, str] = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.Mod: "%"}

SUPPORTED = (
    exp.Column,
    exp.Identifier,
    exp.Literal,
    exp.Boolean,
    exp.Null,
    exp.Paren,
    exp.Neg,
    exp.Not,
    exp.And,
    exp.Or,
    exp.In,
    exp.Between,
    exp.Is,
    exp.NullSafeEQ,
    *_COMPARISONS,
    *_ARITHMETIC,
)


def evaluate(node: exp.Expression, column: Callable[[exp.Column], Any]) -> Any:
    """The SQL value of ``node``; ``column(c)`` gives the value of a Column node."""
    ev = lambda n: evaluate(n, column)  # noqa: E731
    if isinstance(node, exp.Column):
        return column(node)
    if isinstance(node, exp.Literal):
        return _literal(node)
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Paren):
        return ev(node.this)
    if isinstance(node, exp.Neg):
        v = ev(node.this)
        if v is None:
            return None
        if not _is_number(v):
            raise _Clash(f"cannot negate {v!r}")
        return -v
    if isinstance(node, exp.Not):
        v = _boolean(ev(node.this))
        return None if v is None else not v
    if isinstance(node, exp.And):
        return _and(_boolean(ev(node.this)), _boolean(ev(node.expression)))
    if isinstance(node, exp.Or):
        return _or(_boolean(ev(node.this)), _boolean(ev(node.expression)))
    if type(node) in _COMPARISONS:
        a, b = ev(node.this), ev(node.expression)
        if a is None or b is None:
            return None
        return _COMPARISONS[type(node)](compare(a, b))
    if isinstance(node, exp.NullSafeEQ):
        a, b = ev(node.this), ev(node.expression)
        if a is None or b is None:
            return a is None and b is None
        return compare(a, b) == 0
    if type(node) in _ARITHMETIC:
        return _arith(_ARITHMETIC[type(node)], ev(node.this), ev(node.expression))
    if isinstance(node, exp.In):
        v = ev(node.this)
        if v is None:
            return None
        saw_null = False
        for item in node.expressions:
            w = ev(item)
            if w is None:
                saw_null = True
            elif compare(v, w) == 0:
                return True
        return None if saw_null else False
    if isinstance(node, exp.Between):
        v, low, high = ev(node.this), ev(node.args["low"]), ev(node.args["high"])

        def between(low: Any, high: Any) -> bool | None:
            above = None if v is None or low is None else compare(v, low) >= 0
            below = None if v is None or high is None else compare(v, high) <= 0
            return _and(above, below)

        if node.args.get("symmetric"):  # x BETWEEN SYMMETRIC a AND b: either order
            return _or(between(low, high), between(high, low))
        return between(low, high)
    if isinstance(node, exp.Is):
        v = ev(node.this)
        target = node.expression
        if isinstance(target, exp.Null):
            return v is None
        if isinstance(target, exp.Boolean):
            return v is bool(target.this)
    raise _Clash(f"unsupported expression {node.sql()!r}")  # pragma: no cover - bind rejects


# ---------------------------------------------------------------------------
# Binding
# ---------------------------------------------------------------------------


@dataclass
class BoundCondition:
    """One WHERE condition, classified and with every Column node resolved."""

    condition: Condition
    kind: str  # "local", "adjacent" or "constant"
    variable: str | None  # the plain variable (local: V; adjacent: U or None)
    next_variable: str | None  # adjacent: V of NEXT(V)
    # id(Column node) -> ("plain", attr) | ("next", attr) | ("literal", text)
    resolution: dict[int, tuple[str, str]] = field(default_factory=dict)

    @property
    def attributes(self) -> set[str]:
        """Input columns this condition reads."""
        return {name for how, name in self.resolution.values() if how != "literal"}

    def holds(self, plain_row: Mapping[str, Any] | None, next_row: Mapping[str, Any] | None) -> bool:
        """Whether the condition is TRUE for these rows (plain variable's, NEXT's)."""

        def column(node: exp.Column) -> Any:
            how, name = self.resolution[id(node)]
            if how == "literal":
                return name
            row = plain_row if how == "plain" else next_row
            assert row is not None
            return sql_value(row[name])

        try:
            return evaluate(self.condition.expression, column) is True
        except _Clash as clash:
            span = self.condition.span
            raise DataError(
                f"condition {self.condition.text!r} (line {span.line}, column {span.column}) "
                f"cannot be evaluated: {clash}"
            ) from None


def bind_conditions(
    query: Query, columns: set[str], follow: Mapping[str, frozenset[str]]
) -> list[BoundCondition]:
    """Classify and resolve every condition of ``query`` against the input columns.

    ``follow[U]`` is the set of variables that may immediately follow ``U``; an adjacent
    predicate ``U.x ... NEXT(V).y`` needs ``V in follow[U]``.
    """
    variables = {v.name for v in query.variables + query.negated}  # NOT N: local predicates only
    bound = []
    for cond in query.conditions:
        bound.append(_bind_one(query, cond, variables, columns, follow))
    return bound


def _bind_one(
    query: Query,
    cond: Condition,
    variables: set[str],
    columns: set[str],
    follow: Mapping[str, frozenset[str]],
) -> BoundCondition:
    def fail(message: str, span: Any = None) -> QueryError:
        return QueryError(message, query.text, span or cond.span)

    def span_of(name: str, variable: str | None, is_next: bool) -> Any:
        for ref in cond.references:
            if ref.attribute == name and ref.variable == variable and ref.is_next == is_next:
                return ref.span
        return cond.span

    for node in cond.expression.walk():
        if not isinstance(node, SUPPORTED):
            raise fail(f"unsupported expression {node.sql()!r} in condition {cond.text!r}")

    plain: list[str] = []
    nexts: list[str] = []
    for col in cond.expression.find_all(exp.Column):
        var = col.table or None
        if var is None:
            continue
        is_next = col.text("db") == NEXT_MARKER
        if var not in variables:
            raise fail(
                f"unknown variable {var} (the pattern binds {', '.join(sorted(variables))})",
                span_of(col.name, var, is_next),
            )
        target = nexts if is_next else plain
        if var not in target:
            target.append(var)
    if len(nexts) > 1:
        raise fail(f"condition names NEXT of two variables ({', '.join(nexts)}); at most one is allowed")
    if len(plain) > 1:
        raise fail(
            f"condition names two variables ({', '.join(plain)}); a condition relates one "
            "event to itself or to NEXT(V)"
        )
    u = plain[0] if plain else None
    v = nexts[0] if nexts else None
    if v is not None and u is not None and v not in follow.get(u, frozenset()):
        raise fail(f"{u} can never be immediately followed by {v} in the pattern, so NEXT({v}) cannot follow {u}")
    if v is not None:
        kind = "adjacent"
    elif u is not None:
        kind = "local"
    else:
        kind = "constant"
    result = BoundCondition(cond, kind, u, v)
    for col in cond.expression.find_all(exp.Column):
        name = col.name
        if col.table:
            result.resolution[id(col)] = ("next" if col.text("db") == NEXT_MARKER else "plain", name)
        elif name in columns:
            if u is None:
                raise fail(
                    f"bare identifier {name} is ambiguous: it is a column of the input, but the "
                    f"condition names no plain variable to take it from; write V.{name} "
                    f"(or quote a string: '{name}')",
                    span_of(name, None, False),
                )
            result.resolution[id(col)] = ("plain", name)
        else:
            result.resolution[id(col)] = ("literal", name)
    return result
