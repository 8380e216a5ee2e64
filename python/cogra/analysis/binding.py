"""Bind a parsed query to an input schema and classify its predicates.

This is the one place that knows both the query and the table's columns, so every
"does this make sense" check that needs the schema lives here and fails with the
query position (report section 3.2, predicate classifier):

* equivalence predicates ``[attr]`` / ``[V.attr]`` and GROUP-BY attributes become
  sub-stream keys (plain keys partition the stream, variable keys select who may play
  a variable);
* a condition on one event is a *local predicate* of its variable;
* a condition with ``NEXT(V)`` is a *predicate on adjacent events* ``(U, V)``.

Bound expressions refer to attributes as ``Column(attr, table="cur" | "next")``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import pyarrow as pa
import sqlglot.expressions as exp

from cogra.analysis.automaton import Automaton, build_automaton
from cogra.analysis.expressions import (
    BOOLEAN,
    NUMBER,
    ROLE_CUR,
    ROLE_NEXT,
    STRING,
    TEMPORAL,
    check_types,
)
from cogra.errors import QueryError
from cogra.language.ast import (
    NEXT_MARKER,
    AggFunc,
    Aggregate,
    AttrRef,
    Condition,
    Query,
    Span,
)


@dataclass(frozen=True)
class AdjacentPredicate:
    """A condition on consecutive trend events ``(prev as U, next as V)``."""

    prev: int
    next: int
    expression: exp.Expression
    uses_prev: bool
    """Whether it reads the earlier event's attributes (then that event must be kept)."""
    source: Condition


@dataclass(frozen=True)
class BoundQuery:
    query: Query
    schema: pa.Schema
    automaton: Automaton
    type_column: str | None
    """None when the input has no type column and the pattern names one type."""
    time_column: str
    time_type: pa.DataType
    local: tuple[tuple[exp.Expression, ...], ...]
    """Per variable: bound local predicates (role ``cur``)."""
    adjacent: tuple[AdjacentPredicate, ...]
    plain_keys: tuple[str, ...]
    """Attributes every event of a sub-stream shares (plain GROUP-BY and ``[attr]``)."""
    var_keys: tuple[tuple[str, ...], ...]
    """Per variable: attributes all events playing it share (``V.attr`` keys)."""

    def pair_predicates(self, u: int, v: int) -> tuple[AdjacentPredicate, ...]:
        return tuple(p for p in self.adjacent if p.prev == u and p.next == v)

    @cached_property
    def memo(self) -> dict:
        """What later stages derive from this bound query alone (the runtime's layout and
        window spec, the compiled executor's channel layouts and kernel shapes), built once
        per bound query: a Spark worker evaluates one plan per slice and chunk (cogra.api
        caches plans by query text and schema), and rebuilding them was ~10-15% of a small
        call.  Keys are the deriving module's; values must not be mutated."""
        return {}

    # (cached: a Spark worker evaluates one bound query per slice and chunk, and the
    # engine asks these on every call -- sqlglot walks of every condition.)
    @cached_property
    def kept_variables(self) -> frozenset[int]:
        """Variables whose events a predicate on adjacent events reads later (event-grained)."""
        return frozenset(p.prev for p in self.adjacent if p.uses_prev)

    @cached_property
    def columns_used(self) -> tuple[str, ...]:
        """Every input column the query reads (for projection pushdown)."""
        cols: dict[str, None] = {self.time_column: None}
        if self.type_column:
            cols[self.type_column] = None
        for key in self.plain_keys:
            cols[key] = None
        for keys in self.var_keys:
            for key in keys:
                cols[key] = None
        for item in self.query.returns:
            if isinstance(item.value, Aggregate) and item.value.attribute:
                cols[item.value.attribute] = None
        for exprs in self.local:
            for e in exprs:
                for c in e.find_all(exp.Column):
                    cols[c.name] = None
        for p in self.adjacent:
            for c in p.expression.find_all(exp.Column):
                cols[c.name] = None
        return tuple(cols)

    @cached_property
    def predicate_columns(self) -> tuple[str, ...]:
        """The columns the local and adjacent predicates read, sorted."""
        return tuple(sorted(
            {c.name for exprs in self.local for e in exprs for c in e.find_all(exp.Column)}
            | {c.name for p in self.adjacent for c in p.expression.find_all(exp.Column)}
        ))


def kind_of_type(t: pa.DataType) -> str:
    if pa.types.is_dictionary(t):
        return kind_of_type(t.value_type)
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
        return NUMBER
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return STRING
    if pa.types.is_boolean(t):
        return BOOLEAN
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        return TEMPORAL
    return str(t)


DEFAULT_TYPE_COLUMN = "type"
"""The type column when none is named (``type_column=None``)."""


def bind(
    query: Query,
    schema: pa.Schema,
    *,
    type_column: str | None = None,
    time_column: str = "time",
) -> BoundQuery:
    """Check ``query`` against ``schema`` and classify its predicates."""
    binder = _Binder(query, schema)
    return binder.bind(type_column, time_column)


MAX_VARIABLES = 64
"""The kernels keep a sub-stream's variables as the bits of one int64 word."""


class _Binder:
    def __init__(self, query: Query, schema: pa.Schema):
        self.q = query
        self.schema = schema
        self.automaton = build_automaton(query.pattern)
        self.names = self.automaton.names
        if len(self.names) > MAX_VARIABLES:
            raise self.error(f"the pattern binds {len(self.names)} variables; cogra evaluates "
                             f"patterns of at most {MAX_VARIABLES}", query.pattern.span)

    # -- helpers -----------------------------------------------------------
    def error(self, message: str, span: Span | None) -> QueryError:
        return QueryError(message, self.q.text, span)

    def column(self, name: str, span: Span | None, what: str = "column") -> pa.DataType:
        idx = self.schema.get_field_index(name)
        if idx < 0:
            cols = ", ".join(self.schema.names)
            raise self.error(f"no {what} {name!r} in the input (its columns are: {cols})", span)
        return self.schema.field(idx).type

    def var_index(self, name: str, span: Span) -> int:
        if name not in self.names:
            raise self.error(f"unknown variable {name} (the pattern binds {', '.join(self.names)})", span)
        return self.names.index(name)

    # -- the passes ----------------------------------------------------------
    def bind(self, type_column: str | None, time_column: str) -> BoundQuery:
        time_type = self._time(time_column)
        type_col = self._type(type_column)
        plain_keys, var_keys = self._keys()
        self._aggregates()
        local, adjacent = self._conditions()
        return BoundQuery(
            query=self.q,
            schema=self.schema,
            automaton=self.automaton,
            type_column=type_col,
            time_column=time_column,
            time_type=time_type,
            local=local,
            adjacent=adjacent,
            plain_keys=plain_keys,
            var_keys=var_keys,
        )

    def _time(self, time_column: str) -> pa.DataType:
        idx = self.schema.get_field_index(time_column)
        if idx < 0:
            raise QueryError(
                f"the input has no time column {time_column!r} (its columns are: "
                f"{', '.join(self.schema.names)}); name it with time_column=...",
            )
        t = self.schema.field(idx).type
        if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_timestamp(t)):
            raise QueryError(
                f"time column {time_column!r} is {t}; it must be a number of seconds or a timestamp"
            )
        return t

    def _type(self, type_column: str | None) -> str | None:
        """The type column: the one named, which must exist, or by default ``type``; an
        input without the default reads every row as the pattern's type, if it names one."""
        named = type_column is not None
        type_column = DEFAULT_TYPE_COLUMN if type_column is None else type_column
        idx = self.schema.get_field_index(type_column)
        types = self.q.event_types
        if idx < 0 and named:
            raise QueryError(
                f"no type column {type_column!r} in the input (its columns are: "
                f"{', '.join(self.schema.names)}); name an existing column with type_column=..."
                + ("" if len(types) > 1 else ", or leave it out to read every row as a "
                   f"{types[0]} event")
            )
        if idx < 0:
            if len(types) == 1:
                return None
            span = self.q.variables[0].span
            raise self.error(
                f"the input has no type column {type_column!r}, but the pattern names several "
                f"event types ({', '.join(types)}); name the column with type_column=...",
                span,
            )
        t = self.schema.field(idx).type
        if kind_of_type(t) != STRING:
            raise QueryError(f"type column {type_column!r} is {t}; it must hold strings")
        return type_column

    def _keys(self) -> tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]:
        plain: dict[str, None] = {}
        per_var: list[dict[str, None]] = [{} for _ in self.names]
        refs: list[AttrRef] = list(self.q.group_by) + [e.attribute for e in self.q.equivalences]
        for ref in refs:
            self.column(ref.name, ref.span, "attribute")
            if ref.variable is None:
                plain[ref.name] = None
                continue
            v = self.var_index(ref.variable, ref.span)
            if not self.automaton.mandatory(v):
                raise self.error(
                    f"{ref.text} needs {ref.variable} in every trend, but some trends of the "
                    f"pattern have no {ref.variable}; group or partition by a variable that "
                    "every trend contains",
                    ref.span,
                )
            per_var[v][ref.name] = None
        return tuple(plain), tuple(tuple(d) for d in per_var)

    def _aggregates(self) -> None:
        for item in self.q.returns:
            agg = item.value
            if isinstance(agg, AttrRef):
                self.column(agg.name, agg.span, "attribute")
                continue
            assert isinstance(agg, Aggregate)
            if agg.variable is not None:
                self.var_index(agg.variable, agg.span)
            if agg.attribute is None:
                continue
            t = self.column(agg.attribute, agg.span, "attribute")
            kind = kind_of_type(t)
            if agg.func in (AggFunc.SUM, AggFunc.AVG) and kind != NUMBER:
                raise self.error(f"{agg.text} needs a numeric attribute, but {agg.attribute} is {t}", agg.span)
            if agg.func in (AggFunc.MIN, AggFunc.MAX) and kind not in (NUMBER, STRING, TEMPORAL, BOOLEAN):
                raise self.error(f"{agg.text} needs an orderable attribute, but {agg.attribute} is {t}", agg.span)

    def _conditions(self) -> tuple[tuple[tuple[exp.Expression, ...], ...], tuple[AdjacentPredicate, ...]]:
        local: list[list[exp.Expression]] = [[] for _ in self.names]
        adjacent: list[AdjacentPredicate] = []
        for cond in self.q.conditions:
            plain = sorted(cond.variables)
            nexts = sorted(cond.next_variables)
            for r in cond.references:
                if r.variable is not None:
                    self.var_index(r.variable, r.span)
                    self.column(r.attribute, r.span, "attribute")
            if len(nexts) > 1:
                raise self.error(
                    f"a condition may name one NEXT variable, this one names {', '.join(nexts)}", cond.span
                )
            if len(plain) > 1:
                raise self.error(
                    f"this condition relates {' and '.join(plain)}, which need not be adjacent; "
                    "only predicates on adjacent events (with NEXT(V)) may name two events",
                    cond.span,
                )
            owner = plain[0] if plain else None
            expr = self._bind_expression(cond, owner)
            if not nexts:
                # A condition on no variable (``1 = 0``) must hold for every event of a trend.
                targets = range(len(self.names)) if owner is None else [self.names.index(owner)]
                for i in targets:
                    local[i].append(expr)
                continue
            v = self.names.index(nexts[0])
            if owner is None:
                preds = self.automaton.pred[v]
                if not preds:
                    raise self.error(f"NEXT({nexts[0]}): no variable ever precedes {nexts[0]} in the pattern", cond.span)
                adjacent += [AdjacentPredicate(u, v, expr, False, cond) for u in sorted(preds)]
                continue
            u = self.names.index(owner)
            if u not in self.automaton.pred[v]:
                raise self.error(
                    f"{nexts[0]} never comes right after {owner} in the pattern, so this "
                    f"predicate on adjacent events ({owner}, NEXT({nexts[0]})) can never apply",
                    cond.span,
                )
            adjacent.append(AdjacentPredicate(u, v, expr, True, cond))
        return tuple(tuple(x) for x in local), tuple(adjacent)

    def _bind_expression(self, cond: Condition, owner: str | None) -> exp.Expression:
        """Resolve bare identifiers (attribute or string), type-check, rewrite to roles."""
        from cogra.language.parser import condition_sql

        def resolve(node: exp.Expression) -> exp.Expression:
            if not isinstance(node, exp.Column) or node.table or node.text("db"):
                return node
            if self.schema.get_field_index(node.name) < 0:
                return exp.Literal.string(node.name)
            if owner is None:
                raise self.error(
                    f"{node.name} is a column, but this condition has no single variable it could "
                    f"belong to; write V.{node.name} (an attribute) or '{node.name}' (a string)",
                    cond.span,
                )
            return exp.column(node.name, table=owner)

        resolved = cond.expression.copy().transform(resolve)

        def kind(col: exp.Column) -> str:
            return kind_of_type(self.schema.field(col.name).type)

        check_types(resolved, kind, lambda n, msg: self.error(msg, cond.span), condition_sql)

        def to_role(node: exp.Expression) -> exp.Expression:
            if not isinstance(node, exp.Column):
                return node
            role = ROLE_NEXT if node.text("db") == NEXT_MARKER else ROLE_CUR
            return exp.column(node.name, table=role)

        return resolved.transform(to_role)
