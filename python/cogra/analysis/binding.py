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

from cogra.analysis.aggregates import spec as aggregate_spec
from cogra.analysis.automaton import AmbiguousNegation, Automaton, TooManyPositions, build_automaton
from cogra.analysis.presence import with_presence
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
    Aggregate,
    AttrRef,
    Condition,
    Not,
    Query,
    Span,
    edge_negations,
    negations,
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
    guard: bool = False
    """Whether it is a negation's guard ``e_p.lo = e.hi`` (:data:`NEGATION_COLUMN`), not
    the user's: both sides are blocker counts, which never fall as time passes."""


NEGATION_COLUMN = "__cogra_not_{k}_{side}"
"""Per negation ``k``, two derived per-row counts of its blocking events in the row's
partition (plain keys): ``..._lo`` up to and including the row's time, ``..._hi`` strictly
before it.  A step ``(e_p, e)`` that crosses the negation is adjacent only when
``e_p.lo = e.hi``: no blocking event lies strictly between them."""


@dataclass(frozen=True)
class BoundNegation:
    """``NOT N`` bound: which events block (type and local predicates), and the derived
    columns its guarded steps compare (:data:`NEGATION_COLUMN`)."""

    variable: str
    event_type: str
    local: tuple[exp.Expression, ...]
    source: Not
    lo: str
    hi: str
    edge: str | None = None
    """``"leading"`` / ``"trailing"``: an absence at the whole pattern's edge
    (docs/language.md, Absence at the edge of a pattern), which filters complete trends per
    window and guards no step (its
    :attr:`lo` / :attr:`hi` columns are not derived); None: it guards the steps crossing it."""


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
    """Per automaton state: its variable's bound local predicates (role ``cur``)."""
    adjacent: tuple[AdjacentPredicate, ...]
    plain_keys: tuple[str, ...]
    """Attributes every event of a sub-stream shares (plain GROUP-BY and ``[attr]``)."""
    var_keys: tuple[tuple[str, ...], ...]
    """Per automaton state: attributes all events playing its variable share (``V.attr``
    keys; every state of a repeated variable has its variable's keys, and one sub-stream
    gives all of them one value)."""
    negations: tuple[BoundNegation, ...] = ()
    """The pattern's ``NOT N``; their guarded steps are predicates in :attr:`adjacent`
    (the edge ones', :attr:`leading` and :attr:`trailing`, guard none)."""

    @property
    def leading(self) -> BoundNegation | None:
        """``SEQ(NOT N, P)``: a trend counts only if no event of ``N`` lies before it in its window."""
        return next((n for n in self.negations if n.edge == "leading"), None)

    @property
    def trailing(self) -> BoundNegation | None:
        """``SEQ(P, NOT N)``: a trend counts only if no event of ``N`` lies after it in its window."""
        return next((n for n in self.negations if n.edge == "trailing"), None)

    @property
    def guarding_negations(self) -> tuple[BoundNegation, ...]:
        """The negations between two parts of a SEQ (docs/language.md, Negation), whose
        blocker counts the engine derives."""
        return tuple(n for n in self.negations if n.edge is None)

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
    def keyed_states(self) -> tuple[int, ...]:
        """Per variable with variable keys, its first state: a sub-stream gives all states
        of one variable the same key values, so they split the stream as one."""
        a = self.automaton
        return tuple(v for v in range(len(a.names))
                     if self.var_keys[v] and a.states_of(a.state_variables[v])[0] == v)

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
                if c.name not in self.derived_columns:
                    cols[c.name] = None
        for n in self.negations:
            for e in n.local:
                for c in e.find_all(exp.Column):
                    cols[c.name] = None
        return tuple(cols)

    @cached_property
    def derived_columns(self) -> frozenset[str]:
        """Columns the engine derives (the negations' blocker counts), not in the input."""
        return frozenset(name for n in self.guarding_negations for name in (n.lo, n.hi))

    @cached_property
    def predicate_columns(self) -> tuple[str, ...]:
        """The input columns the local, adjacent and negated-variable predicates read, sorted."""
        return tuple(sorted(
            {c.name for exprs in self.local for e in exprs for c in e.find_all(exp.Column)}
            | {c.name for p in self.adjacent for c in p.expression.find_all(exp.Column)
               if c.name not in self.derived_columns}
            | {c.name for n in self.negations for e in n.local for c in e.find_all(exp.Column)}
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
"""The kernels keep the automaton states an event plays in a sub-stream as the bits of
one int64 word (a state per variable, or per repetition of a repeated one)."""


class _Binder:
    def __init__(self, query: Query, schema: pa.Schema):
        self.q = query
        self.schema = schema
        try:
            self.automaton = build_automaton(query.pattern)
        except AmbiguousNegation as ambiguous:
            node = negations(query.pattern)[ambiguous.args[0]]
            raise self.error(f"{node.text} is ambiguous under the repetition around it: one step of a "
                             "trend crosses it in one reading of the pattern and not in another; "
                             "write the repetitions out", node.span)
        except TooManyPositions:
            raise self.error(f"the pattern's repetitions unroll to more than {MAX_VARIABLES} automaton "
                             f"states; cogra evaluates patterns of at most {MAX_VARIABLES}", query.pattern.span)
        self.names = self.automaton.names
        self.negated = {v.name: v for v in self.automaton.negated}
        if len(self.names) > MAX_VARIABLES:
            what = (f"needs {len(self.names)} automaton states (a state per repetition)"
                    if self.automaton.repeated else f"binds {len(self.names)} variables")
            raise self.error(f"the pattern {what}; cogra evaluates patterns of at most {MAX_VARIABLES}",
                             query.pattern.span)

    # -- helpers -----------------------------------------------------------
    def error(self, message: str, span: Span | None) -> QueryError:
        return QueryError(message, self.q.text, span)

    def field_index(self, name: str, span: Span | None = None) -> int:
        """The position of input column ``name`` (-1 if none); an error where several columns
        have that name (a join's output, say), which the query would read ambiguously --
        Arrow's lookup by name finds none of them."""
        found = self.schema.get_all_field_indices(name)
        if len(found) > 1:
            raise self.error(f"the input has {len(found)} columns named {name!r}, which the query reads; "
                             "rename all but one (in Spark, alias them)", span)
        return found[0] if found else -1

    def column(self, name: str, span: Span | None, what: str = "column") -> pa.DataType:
        idx = self.field_index(name, span)
        if idx < 0:
            cols = ", ".join(self.schema.names)
            raise self.error(f"no {what} {name!r} in the input (its columns are: {cols})", span)
        return self.schema.field(idx).type

    def var_states(self, name: str, span: Span) -> tuple[int, ...]:
        """The automaton states that bind variable ``name`` (several where it is repeated)."""
        states = self.automaton.states_of(name)
        if not states and name in self.negated:
            raise self.error(f"{name} is negated (NOT {name}): its events are in no trend, so only a "
                             f"local predicate on {name} alone (deciding which events block) may name it",
                             span)
        if not states:
            raise self.error(f"unknown variable {name} (the pattern binds "
                             f"{', '.join(self.automaton.variables)})", span)
        return states

    # -- the passes ----------------------------------------------------------
    def bind(self, type_column: str | None, time_column: str) -> BoundQuery:
        time_type = self._time(time_column)
        type_col = self._type(type_column)
        plain_keys, var_keys = self._keys()
        self._aggregates()
        local, adjacent, negated_local = self._conditions()
        leading, trailing = edge_negations(self.q.pattern)
        bound_negations = tuple(
            BoundNegation(n.var.name, n.var.event_type, tuple(negated_local[n.var.name]), n,
                          NEGATION_COLUMN.format(k=k, side="lo"), NEGATION_COLUMN.format(k=k, side="hi"),
                          "leading" if n is leading else "trailing" if n is trailing else None)
            for k, n in enumerate(negations(self.q.pattern)))
        adjacent += tuple(self._guards(bound_negations))
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
            negations=bound_negations,
        )

    def _guards(self, bound: tuple[BoundNegation, ...]) -> list[AdjacentPredicate]:
        """Each step that crosses a negation, as a predicate on adjacent events:
        ``e_p.lo = e.hi`` -- no blocking event strictly between them."""
        out = []
        for u, v, k in self.automaton.guards:
            n = bound[k]
            expr = exp.EQ(this=exp.column(n.lo, table=ROLE_CUR), expression=exp.column(n.hi, table=ROLE_NEXT))
            out.append(AdjacentPredicate(u, v, expr, True, n.source, guard=True))  # type: ignore[arg-type]
        return out

    def _time(self, time_column: str) -> pa.DataType:
        idx = self.field_index(time_column)
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
        idx = self.field_index(type_column)
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
        """Plain keys, and per state its variable's keys.  Keys on a variable some trends
        lack give the automaton presence flags (:mod:`cogra.analysis.presence`)."""
        plain: dict[str, None] = {}
        by_var: dict[str, dict[str, None]] = {}
        refs: list[AttrRef] = list(self.q.group_by) + [e.attribute for e in self.q.equivalences]
        for ref in refs:
            self.column(ref.name, ref.span, "attribute")
            if ref.variable is None:
                plain[ref.name] = None
                continue
            self.var_states(ref.variable, ref.span)
            by_var.setdefault(ref.variable, {})[ref.name] = None
        optional = tuple(v for v in self.automaton.variables
                         if v in by_var and not self.automaton.mandatory_variable(v))
        if optional:
            self.automaton = with_presence(self.automaton, optional)
            self.names = self.automaton.names
            if len(self.names) > MAX_VARIABLES:
                raise self.error(
                    f"keys on {', '.join(optional)}, which some trends lack, need {len(self.names)} "
                    f"automaton states (trends with and without them); cogra evaluates at most "
                    f"{MAX_VARIABLES}", self.q.pattern.span)
        per_state = tuple(tuple(by_var.get(v, {})) for v in self.automaton.state_variables)
        return tuple(plain), per_state

    def _aggregates(self) -> None:
        for item in self.q.returns:
            agg = item.value
            if isinstance(agg, AttrRef):
                self.column(agg.name, agg.span, "attribute")
                continue
            assert isinstance(agg, Aggregate)
            if agg.variable is not None:
                self.var_states(agg.variable, agg.span)
            if agg.attribute is None:
                continue
            t = self.column(agg.attribute, agg.span, "attribute")
            entry = aggregate_spec(agg.func)
            if kind_of_type(t) not in entry.accepts:
                raise self.error(f"{agg.text} needs {entry.needs}, but {agg.attribute} is {t}", agg.span)

    def _conditions(self) -> tuple[tuple[tuple[exp.Expression, ...], ...], tuple[AdjacentPredicate, ...],
                                   dict[str, list[exp.Expression]]]:
        local: list[list[exp.Expression]] = [[] for _ in self.names]
        adjacent: list[AdjacentPredicate] = []
        negated_local: dict[str, list[exp.Expression]] = {name: [] for name in self.negated}
        for cond in self.q.conditions:
            plain = sorted(cond.variables)
            nexts = sorted(cond.next_variables)
            named = [r for r in cond.references if r.variable in self.negated]
            if named and (nexts or len(plain) > 1):
                r = named[0]
                raise self.error(f"{r.variable} is negated (NOT {r.variable}): its events are in no trend, so "
                                 "a predicate on adjacent events may not name it; a local predicate on "
                                 f"{r.variable} alone decides which events block", r.span)
            for r in cond.references:
                if r.variable is not None:
                    if not named:
                        self.var_states(r.variable, r.span)
                    self.column(r.attribute, r.span, "attribute")
            if named:  # a local predicate of a negated variable: which events block
                negated_local[plain[0]].append(self._bind_expression(cond, plain[0]))
                continue
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
                targets = range(len(self.names)) if owner is None else self.automaton.states_of(owner)
                for i in targets:
                    local[i].append(expr)
                continue
            nexts_states = self.automaton.states_of(nexts[0])
            pred = self.automaton.pred
            if owner is None:
                pairs = [(u, v) for v in nexts_states for u in sorted(pred[v])]
                if not pairs:
                    raise self.error(f"NEXT({nexts[0]}): no variable ever precedes {nexts[0]} in the pattern", cond.span)
                adjacent += [AdjacentPredicate(u, v, expr, False, cond) for u, v in pairs]
                continue
            owners = set(self.automaton.states_of(owner))
            pairs = [(u, v) for v in nexts_states for u in sorted(pred[v]) if u in owners]
            if not pairs:
                raise self.error(
                    f"{nexts[0]} never comes right after {owner} in the pattern, so this "
                    f"predicate on adjacent events ({owner}, NEXT({nexts[0]})) can never apply",
                    cond.span,
                )
            adjacent += [AdjacentPredicate(u, v, expr, True, cond) for u, v in pairs]
        return tuple(tuple(x) for x in local), tuple(adjacent), negated_local

    def _bind_expression(self, cond: Condition, owner: str | None) -> exp.Expression:
        """Resolve bare identifiers (attribute or string), type-check, rewrite to roles."""
        from cogra.language.parser import condition_sql

        def resolve(node: exp.Expression) -> exp.Expression:
            if not isinstance(node, exp.Column) or node.table or node.text("db"):
                return node
            if self.field_index(node.name, cond.span) < 0:
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
