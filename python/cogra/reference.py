"""The two-step reference evaluator: enumerate every event trend, then aggregate.

This is the SASE-style baseline of the report (its "two-step approach"): deliberately
literal, exact and independent of the engine (it shares only the parser, ``errors.py``
and ``runtime/output.py`` with it).  Every fast executor is tested against it.

How a query is evaluated, step by step (docs/language.md defines the results,
docs/ARCHITECTURE.md the decisions):

1. **Rows -> events.**  Each row becomes an :class:`Event`: its values (a dict), its
   exact time (int; ``Fraction(x)`` for a float; integer microseconds since the epoch
   for timestamps and dates) and its type.  Rows with a null time, then rows with a null
   type, are skipped and counted.  Without a type column, a pattern naming one type
   makes every row that type; several types are a QueryError at the PATTERN clause.
2. **Windows** ``[k*step, k*step + size)`` for every integer ``k`` whose window holds an
   event (exact arithmetic); without WITHIN one window (``ResultRow.window = None``).
3. **Sub-streams.**  Within a window, events are partitioned by the *plain keys*
   (unqualified GROUP-BY attributes and ``[attr]``; NULL is a value).  Within a
   partition, every combination of one value per *variable key* (``V.attr`` in GROUP-BY
   and ``[V.attr]``) is a sub-stream: an event may play ``V`` there if it has ``V``'s
   type, passes ``V``'s local predicates and carries the combination's values for
   ``V``'s keys.  The sub-stream holds those events plus the partition's events whose
   type is not in the pattern (they break contiguity).  A keyed variable that some trends
   lack also has the sub-stream in which no event plays it (its keys NULL); the others
   count only the trends that contain it.
4. **Trends.**  ``trends_any`` by structural recursion over the pattern
   (:mod:`cogra.reference_parts.patterns`), each consecutive pair satisfying the
   predicates on adjacent events that apply to it.  Then, for ``next``/``contiguous``,
   every consecutive pair ``(e_p as U, e as V)`` must pass :meth:`_SubStream.semantics_ok`:
   no event ``e'`` of the sub-stream earlier than ``e`` is ANY-adjacent to
   ``(e_p as U)`` (``e'`` may play some ``V' in follow(U)``, is later than ``e_p``, and the
   adjacent predicates for ``(U, V')`` hold), and under ``contiguous`` no event of the
   sub-stream lies strictly between them.  Because that condition depends on the pair
   and the sub-stream only, it may equally be checked while trends are built (the
   default, ``prune=True``) or on the finished trends (``prune=False``, the literal
   filter); both give the same trends, and the tests check it.
5. **Aggregates** per trend, then summed / combined over the trends of each
   (window, output group), in the exact value domain of ARCHITECTURE.md; sub-streams
   that differ only in keys not in GROUP-BY merge.  ``runtime/output.build_table``
   types the rows and applies the overflow policy.

Decisions where the documents are silent (more in the ``reference_parts`` modules):

* Query checks the reference needs are its own (the engine's binder is not used):
  unknown variables, a RETURN attribute that is not grouped, a condition naming two plain
  or two NEXT variables, ``U.x ... NEXT(V).y`` with ``V`` unable to follow ``U``, a
  negated variable anywhere but in its own local predicates: QueryError pointing at it.
* A condition naming no variable at all (``1 = 1``) must hold for every event of a trend
  (report Def. 5); it is treated as a local predicate of every variable.
* A float time that is NaN or infinite is not a time: such rows are counted with the
  null-time rows.  A row with both a null time and a null type counts as null time.
* Nanosecond timestamps are floored to microseconds (Spark's precision); date columns
  are midnight UTC.  For timestamp/date time columns the window size and slide are
  converted to microseconds, and the windows' bounds are microseconds.
* Column names are matched exactly (case-sensitive); the type column's values are
  compared with the pattern's type names as strings.
* For grouping and keys, NaN equals NaN (as in Spark); MIN/MAX order NaN above every
  other number (Spark).  A SUM over a non-finite float is a float (``inf``/``nan``);
  AVG is then that float divided by the count.
* ``max_trends`` bounds every trend built, partial or finished, over the whole
  evaluation; past it :class:`ReferenceLimitExceeded` is raised.
* :func:`evaluate_reference` emits a data warning when rows were skipped; the counts are
  also in the table's schema metadata (``cogra.rows_null_time``,
  ``cogra.rows_null_type``).  :func:`reference_rows` only returns them.
"""

from __future__ import annotations

import itertools
import math
import warnings
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Iterable

import pyarrow as pa

from cogra import errors
from cogra.errors import DataError, QueryError
from cogra.language.limits import with_recursion_room
from cogra.language.ast import (
    Aggregate,
    AttrRef,
    Not,
    Query,
    Semantics,
    Seq,
    has_repeat,
    pattern_variables,
)
from cogra.reference_parts.aggregates import Accumulator
from cogra.reference_parts.events import Event, exact_times, group_key, time_scale
from cogra.reference_parts.patterns import (
    Budget,
    Continuations,
    Pair,
    ReferenceLimitExceeded,
    Trend,
    crossings,
    enumerate_trends,
    follow,
    required,
    without_negations,
)
from cogra.reference_parts.predicates import BoundCondition, bind_conditions
from cogra.runtime.output import ON_OVERFLOW, ResultRow, build_table, check_window_range, result_type

__all__ = ["evaluate_reference", "reference_rows", "ReferenceLimitExceeded"]

CograDataWarning = errors.CograDataWarning


# ---------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------


@with_recursion_room
def evaluate_reference(
    query: "str | Query",
    events: Any,
    *,
    type_column: str | None = None,
    time_column: str = "time",
    on_overflow: str = "error",
    max_trends: int = 2_000_000,
    prune: bool = True,
) -> pa.Table:
    """Evaluate ``query`` over ``events`` by enumerating every trend, then aggregating."""
    run = _run(query, events, type_column, time_column, on_overflow, max_trends, prune)
    skipped = {k: run.counters[k] for k in ("rows_null_time", "rows_null_type")}
    if any(skipped.values()):
        warnings.warn(
            f"{skipped['rows_null_time']} row(s) with a null time and "
            f"{skipped['rows_null_type']} row(s) with a null type are not events and were skipped",
            CograDataWarning,
            stacklevel=2,
        )
    return build_table(
        run.query,
        run.schema,
        run.rows,
        time_type=run.time_type,
        on_overflow=on_overflow,
        metadata={f"cogra.{k}": v for k, v in skipped.items()},
    )


@with_recursion_room
def reference_rows(
    query: "str | Query",
    events: Any,
    *,
    type_column: str | None = None,
    time_column: str = "time",
    on_overflow: str = "error",
    max_trends: int = 2_000_000,
    prune: bool = True,
) -> tuple[list[ResultRow], dict[str, int]]:
    """The exact result rows (unordered, untyped) and the counters
    ``rows_in``, ``rows_null_time``, ``rows_null_type``, ``trends``."""
    run = _run(query, events, type_column, time_column, on_overflow, max_trends, prune)
    return run.rows, run.counters


# ---------------------------------------------------------------------------
# The query, prepared once
# ---------------------------------------------------------------------------


@dataclass
class _Prepared:
    query: Query
    var_types: dict[str, str]  # variable -> event type
    pattern_types: frozenset[str]
    follow: dict[str, frozenset[str]]
    plain_keys: list[str]  # unqualified GROUP-BY attributes and [attr]
    var_keys: list[tuple[str, str]]  # (variable, attribute) of V.attr GROUP-BY and [V.attr]
    group_by: list[tuple[str | None, str]]  # GROUP-BY as (variable or None, attribute)
    local: dict[str, list[BoundCondition]] = field(default_factory=dict)
    adjacent: dict[tuple[str, str], list[BoundCondition]] = field(default_factory=dict)
    continuations: Continuations | None = None
    """Where the pattern has bounded quantifiers: what may follow a whole variable word."""
    pattern: Any = None
    """The pattern without its ``NOT N`` items (the words it matches)."""
    negated: dict[str, str] = field(default_factory=dict)  # NOT N: variable -> event type
    negated_local: dict[str, list[BoundCondition]] = field(default_factory=dict)
    required: frozenset[str] = frozenset()  # variables every trend contains
    crossings: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)
    """``(U, V) -> negated variables`` whose blocking events a pair ``(U, V)`` must not straddle."""
    leading: str | None = None
    """``SEQ(NOT M, ...)``: no event that could play ``M`` may precede a counted trend in
    its (window, partition) (docs/language.md, Absence at the edge of a pattern)."""
    trailing: str | None = None
    """``SEQ(..., NOT N)``: none that could play ``N`` may follow it."""


def _parse(query: "str | Query") -> Query:
    if isinstance(query, Query):
        return query
    try:
        from cogra.language import parse  # type: ignore[attr-defined]
    except ImportError:
        from cogra.language.parser import parse  # type: ignore[no-redef]
    return parse(query)


def _prepare(q: Query, columns: set[str]) -> _Prepared:
    def fail(message: str, span: Any) -> QueryError:
        return QueryError(message, q.text, span)

    variables = pattern_variables(q.pattern)
    var_types: dict[str, str] = {}
    for v in variables:
        if v.name in var_types:
            raise fail(
                f"variable {v.name} occurs twice in the pattern; bind the type to distinct "
                f"variables, e.g. {v.event_type} {v.name}1 and {v.event_type} {v.name}2",
                v.span,
            )
        var_types[v.name] = v.event_type
    names = ", ".join(var_types)
    negated = {v.name: v.event_type for v in q.negated}

    def check_var(var: str | None, span: Any) -> None:
        if var is not None and var in negated:
            raise fail(f"{var} is negated (NOT {var}): its events are in no trend", span)
        if var is not None and var not in var_types:
            raise fail(f"unknown variable {var} (the pattern binds {names})", span)

    positive = without_negations(q.pattern)
    fol = follow(positive)
    must = required(positive)
    plain_keys: list[str] = []
    var_keys: list[tuple[str, str]] = []
    for ref in [e.attribute for e in q.equivalences] + list(q.group_by):
        check_var(ref.variable, ref.span)
        if ref.variable is None:
            if ref.name not in plain_keys:
                plain_keys.append(ref.name)
        else:
            if (ref.variable, ref.name) not in var_keys:
                var_keys.append((ref.variable, ref.name))
    group_by = [(g.variable, g.name) for g in q.group_by]
    for item in q.returns:
        value = item.value
        if isinstance(value, AttrRef):
            check_var(value.variable, value.span)
            if (value.variable, value.name) not in group_by:
                raise fail(f"RETURN {value.text} is neither an aggregate nor a GROUP-BY attribute", item.span)
        else:
            check_var(value.variable, value.span)

    prep = _Prepared(
        query=q,
        var_types=var_types,
        pattern_types=frozenset(var_types.values()),
        follow=fol,
        plain_keys=plain_keys,
        var_keys=var_keys,
        group_by=group_by,
        continuations=Continuations(positive) if has_repeat(positive) else None,
        pattern=positive,
        negated=negated,
        crossings=crossings(q.pattern),
        required=must,
    )
    if isinstance(q.pattern, Seq) and len(q.pattern.items) > 1:
        first, last = q.pattern.items[0], q.pattern.items[-1]
        prep.leading = first.var.name if isinstance(first, Not) else None
        prep.trailing = last.var.name if isinstance(last, Not) else None
    prep.local = {v: [] for v in var_types}
    prep.negated_local = {v: [] for v in negated}
    for bc in bind_conditions(q, columns, fol):
        named = {bc.variable, bc.next_variable} & set(negated)
        if named and bc.kind != "local":
            raise fail(f"{min(named)} is negated (NOT {min(named)}): a predicate on adjacent events may "
                       "not name it", bc.condition.span)
        if bc.kind == "local" and bc.variable in negated:
            prep.negated_local[bc.variable].append(bc)  # type: ignore[index]
        elif bc.kind == "local":
            prep.local[bc.variable].append(bc)  # type: ignore[index]
        elif bc.kind == "constant":
            for v in var_types:
                prep.local[v].append(bc)
        else:
            v = bc.next_variable
            preceding = [bc.variable] if bc.variable else [u for u in var_types if v in fol.get(u, ())]
            for u in preceding:
                prep.adjacent.setdefault((u, v), []).append(bc)  # type: ignore[arg-type]
    return prep


def _needed_columns(prep: _Prepared) -> dict[str, Any]:
    """Input columns the query reads, each with where it is used (for messages)."""
    q = prep.query
    needed: dict[str, Any] = {}
    for ref in [e.attribute for e in q.equivalences] + list(q.group_by):
        needed.setdefault(ref.name, ref)
    for item in q.returns:
        value = item.value
        if isinstance(value, AttrRef):
            needed.setdefault(value.name, value)
        elif value.attribute is not None:
            needed.setdefault(value.attribute, value)
    for cond in q.conditions:
        for ref in cond.references:
            if ref.variable is not None:
                needed.setdefault(ref.attribute, ref)
    return needed


# ---------------------------------------------------------------------------
# One sub-stream
# ---------------------------------------------------------------------------


class _SubStream:
    """The events of one (window, partition, variable-key combination)."""

    def __init__(self, prep: _Prepared, events: list[Event], plays: dict[Event, frozenset[str]],
                 blockers: dict[str, list[Any]] | None = None, present: frozenset[str] = frozenset()):
        self.prep = prep
        self.present = present  # keyed variables every counted trend must contain
        self.events = events  # in time order
        self.blockers = blockers or {}  # NOT N -> times of the partition's events that could play N
        self.times = [e.time for e in events]
        self.plays = plays  # event -> variables it may play here
        self._first_adjacent: dict[Pair, Any] = {}
        self._adjacent: dict[tuple[Pair, Pair], bool] = {}  # memo of adjacent_ok
        self._first_extension: dict[tuple, Any] = {}

    def adjacent_ok(self, prev: Pair, nxt: Pair) -> bool:
        """``nxt`` may follow ``prev`` under skip-till-any-match (times aside): ``V`` may
        follow ``U`` in the pattern and the predicates on adjacent ``(U, V)`` hold."""
        if (prev, nxt) not in self._adjacent:
            (ep, u), (e, v) = prev, nxt
            conds = self.prep.adjacent.get((u, v), ())
            self._adjacent[(prev, nxt)] = v in self.prep.follow.get(u, ()) and all(
                c.holds(ep.values, e.values) for c in conds
            ) and not self.blocked(prev, nxt)
        return self._adjacent[(prev, nxt)]

    def blocked(self, prev: Pair, nxt: Pair) -> bool:
        """The pair crosses a ``NOT N`` with an event that could play ``N`` strictly between."""
        for negated in self.prep.crossings.get((prev[1], nxt[1]), ()):
            times = self.blockers.get(negated, [])
            if bisect_left(times, nxt[0].time) > bisect_right(times, prev[0].time):
                return True
        return False

    def any_adjacent(self, prev: Pair, nxt: Pair) -> bool:
        """The pair is ANY-adjacent (docs/language.md, Event matching semantics)."""
        return prev[0].time < nxt[0].time and self.adjacent_ok(prev, nxt)

    def first_adjacent_time(self, prev: Pair) -> Any:
        """The earliest time of an event ANY-adjacent to ``prev`` (None if there is none)."""
        if prev not in self._first_adjacent:
            found = None
            for e2 in self.events:
                if any(self.any_adjacent(prev, (e2, v2)) for v2 in self.plays.get(e2, ())):
                    found = e2.time
                    break  # events are in time order
            self._first_adjacent[prev] = found
        return self._first_adjacent[prev]

    def first_extension_time(self, prefix: Trend) -> Any:
        """The earliest time of an event that can extend the partial trend ``prefix``
        (docs/language.md, Event matching semantics: its variable may follow the prefix's
        whole variable word, and the pair with the prefix's last event is ANY-adjacent times
        and predicates aside from the pattern's follow sets); None if there is none."""
        word = tuple(v for _, v in prefix)
        key = (prefix[-1], word)
        if key not in self._first_extension:
            allowed = self.prep.continuations.after(word)
            ep, u = prefix[-1]
            found = None
            for e2 in self.events:
                if e2.time <= ep.time:
                    continue
                if any(v2 in allowed and all(c.holds(ep.values, e2.values)
                                             for c in self.prep.adjacent.get((u, v2), ()))
                       and not self.blocked(prefix[-1], (e2, v2))
                       for v2 in self.plays.get(e2, ())):
                    found = e2.time
                    break
            self._first_extension[key] = found
        return self._first_extension[key]

    def trend_semantics_ok(self, trend: Trend) -> bool:
        """Every consecutive pair of ``trend`` passes ``next``/``contiguous``, "can extend"
        read from the whole prefix (patterns with bounded quantifiers)."""
        for i in range(1, len(trend)):
            earliest = self.first_extension_time(trend[:i])
            if earliest is not None and earliest < trend[i][0].time:
                return False
            if not self._contiguous_ok(trend[i - 1], trend[i]):
                return False
        return True

    def _contiguous_ok(self, prev: Pair, nxt: Pair) -> bool:
        """Under contiguous: no event of the sub-stream strictly between ``prev`` and ``nxt``."""
        if self.prep.query.semantics is not Semantics.CONT:
            return True
        between = bisect_left(self.times, nxt[0].time) - bisect_right(self.times, prev[0].time)
        return between == 0

    def semantics_ok(self, prev: Pair, nxt: Pair) -> bool:
        """The extra condition ``next``/``contiguous`` put on a consecutive pair."""
        semantics = self.prep.query.semantics
        if semantics is Semantics.ANY:
            return True
        # next: no event e' with e'.time < e.time is ANY-adjacent to (e_p as U)
        earliest = self.first_adjacent_time(prev)
        if earliest is not None and earliest < nxt[0].time:
            return False
        return self._contiguous_ok(prev, nxt)

    def trends(self, budget: Budget, prune: bool) -> list[Trend]:
        players: dict[str, list[Event]] = {v: [] for v in self.prep.var_types}
        for e in self.events:
            for v in self.plays.get(e, ()):
                players[v].append(e)
        repeats = self.prep.continuations is not None
        if prune and not repeats:
            pair_ok = lambda p, n: self.adjacent_ok(p, n) and self.semantics_ok(p, n)  # noqa: E731
        else:
            pair_ok = self.adjacent_ok
        found = enumerate_trends(self.prep.pattern, players, lambda e: e.time, pair_ok, budget)
        if repeats and self.prep.query.semantics is not Semantics.ANY:
            # "Can extend" depends on the whole prefix: filter finished trends, literally.
            found = {t for t in found if self.trend_semantics_ok(t)}
        elif not prune:  # the literal filter of docs/language.md, Event matching semantics
            found = {t for t in found if all(self.semantics_ok(p, n) for p, n in zip(t, t[1:]))}
        if self.present:
            found = {t for t in found if self.present <= {v for _, v in t}}
        if self.prep.leading is not None:  # absence (docs/language.md), literally
            blockers = self.blockers.get(self.prep.leading, [])
            found = {t for t in found if not any(b < t[0][0].time for b in blockers)}
        if self.prep.trailing is not None:
            blockers = self.blockers.get(self.prep.trailing, [])
            found = {t for t in found if not any(b > t[-1][0].time for b in blockers)}
        return list(found)


# ---------------------------------------------------------------------------
# The evaluation
# ---------------------------------------------------------------------------


@dataclass
class _Run:
    query: Query
    schema: pa.Schema
    time_type: pa.DataType
    rows: list[ResultRow]
    counters: dict[str, int]


def _run(
    query: "str | Query",
    events: Any,
    type_column: str | None,
    time_column: str,
    on_overflow: str,
    max_trends: int,
    prune: bool,
) -> _Run:
    if on_overflow not in ON_OVERFLOW:
        raise ValueError(f"on_overflow must be one of {ON_OVERFLOW}, not {on_overflow!r}")
    q = _parse(query)
    table = events if isinstance(events, pa.Table) else pa.table(events)
    schema = table.schema
    columns = set(schema.names)
    prep = _prepare(q, columns)

    # Columns: type, time, and everything the query reads.  A type column that is named
    # must exist; by default it is "type", and a single-type pattern may do without it.
    if type_column is not None and type_column not in columns:
        raise QueryError(f"no type column {type_column!r} in the input (columns: {', '.join(schema.names)})")
    type_column = "type" if type_column is None else type_column
    has_type = type_column in columns
    named_types = prep.pattern_types | frozenset(prep.negated.values())
    if not has_type and len(named_types) > 1:
        raise QueryError(
            f"the input has no type column {type_column!r}, but the pattern names several event "
            f"types ({', '.join(sorted(named_types))}); pass type_column=... naming the "
            "column that holds each row's type",
            q.text,
            q.pattern.span,
        )
    if time_column not in columns:
        raise DataError(f"no time column {time_column!r} in the input (columns: {', '.join(schema.names)})")
    for name, ref in _needed_columns(prep).items():
        if name not in columns:
            where = getattr(ref, "span", None)
            at = f" (line {where.line}, column {where.column})" if where else ""
            raise DataError(
                f"the query reads column {name!r}{at}, but the input has no such column "
                f"(columns: {', '.join(schema.names)})"
            )
    for item in q.returns:
        result_type(item, schema)  # SUM/AVG of a non-numeric column: DataError now, not later

    # 1. Rows -> events.
    times, time_type = exact_times(table.column(time_column), time_column)
    types = table.column(type_column).to_pylist() if has_type else None
    only_type = next(iter(named_types))
    counters = {"rows_in": table.num_rows, "rows_null_time": 0, "rows_null_type": 0, "trends": 0}
    stream: list[Event] = []
    try:
        rows = table.to_pylist()
    except OverflowError as e:  # a timestamp past year 9999: no Python datetime holds it
        raise DataError(f"the reference evaluator reads rows as Python values, and {e} "
                        "(timestamps must lie in years 1-9999)") from None
    for i, values in enumerate(rows):
        if times[i] is None:
            counters["rows_null_time"] += 1
            continue
        if types is not None and types[i] is None:
            counters["rows_null_type"] += 1
            continue
        typ = (types[i] if isinstance(types[i], str) else str(types[i])) if types is not None else only_type
        stream.append(Event(i, times[i], typ, values))
    stream.sort(key=lambda e: (e.time, e.row))

    # The variables each event may play by type and local predicates (window-independent).
    base_plays: dict[Event, frozenset[str]] = {}
    for e in stream:
        base_plays[e] = frozenset(
            v
            for v, t in prep.var_types.items()
            if t == e.type and all(c.holds(e.values, None) for c in prep.local[v])
        )

    # 2. Windows and 3a. partitions by plain keys.
    if q.window is not None and stream and all(isinstance(e.time, int) for e in stream):
        scale = time_scale(time_type)
        check_window_range(stream[0].time, stream[-1].time, q.window.size * scale,
                           q.window.step * scale, q.window)
    buckets: dict[tuple[Any, tuple], list[Event]] = {}
    plain_values: dict[tuple, list[Any]] = {}  # partition key -> display values
    for e in stream:
        pkey = tuple(group_key(e.values[k]) for k in prep.plain_keys)
        plain_values.setdefault(pkey, [e.values[k] for k in prep.plain_keys])
        for window in _windows(q, e.time, time_scale(time_type)):
            buckets.setdefault((window, pkey), []).append(e)

    # 3b-5. Sub-streams, trends, aggregates.
    budget = Budget(max_trends)
    aggregates = [it.value if isinstance(it.value, Aggregate) else None for it in q.returns]
    groups: dict[tuple[Any, tuple], tuple[list[Any], Accumulator]] = {}
    for (window, pkey), bucket in buckets.items():
        for combo, substream in _substreams(prep, bucket, base_plays):
            found = substream.trends(budget, prune)
            if not found:
                continue
            counters["trends"] += len(found)
            display = dict(zip(prep.plain_keys, plain_values[pkey]))
            group_values = [
                display[name] if var is None else combo[(var, name)][1] for var, name in prep.group_by
            ]
            gkey = (window, tuple(group_key(v) for v in group_values))
            if gkey not in groups:
                returned = [
                    group_values[prep.group_by.index((it.value.variable, it.value.name))]
                    if isinstance(it.value, AttrRef)
                    else None
                    for it in q.returns
                ]
                groups[gkey] = (returned, Accumulator(aggregates), tuple(group_values))
            acc = groups[gkey][1]
            for trend in found:
                acc.add_trend(trend)

    rows = [
        ResultRow(window, acc.values(returned), group)
        for (window, _), (returned, acc, group) in groups.items()
    ]
    return _Run(q, schema, time_type, rows, counters)


def _windows(q: Query, t: Any, scale: Fraction) -> list[tuple[Any, Any] | None]:
    """The windows ``[k*step, k*step + size)`` that contain time ``t`` (exactly)."""
    if q.window is None:
        return [None]
    size, step = q.window.size * scale, q.window.step * scale
    # k*step <= t  and  t < k*step + size
    k_max = math.floor(Fraction(t) / step)
    k_min = math.floor((Fraction(t) - size) / step) + 1
    return [(_plain(k * step), _plain(k * step + size)) for k in range(k_min, k_max + 1)]


def _plain(x: Fraction) -> Any:
    return int(x) if x.denominator == 1 else x


ABSENT = object()
"""The combination value of an optional keyed variable no event plays."""


def _substreams(
    prep: _Prepared, bucket: list[Event], base_plays: dict[Event, frozenset[str]]
) -> Iterable[tuple[dict[tuple[str, str], tuple[Any, Any]], _SubStream]]:
    """Every variable-key combination of one (window, partition), with its sub-stream.

    A combination maps each variable key ``(V, attr)`` to ``(key value, display value)``.
    Blocking events of a ``NOT N`` are the (window, partition)'s events that could play
    ``N``, whatever the variable keys (docs/language.md, Negation).
    """
    blockers = {
        n: [e.time for e in bucket if e.type == t and all(c.holds(e.values, None) for c in prep.negated_local[n])]
        for n, t in prep.negated.items()
    }
    # Per keyed variable, one value per key attribute; a variable some trends lack also
    # has "absent" (docs/language.md, Keys on optional variables): the sub-stream where no
    # event plays it, whose
    # trends have its keys NULL.  Elsewhere only the trends with it count.
    keyed = list(dict.fromkeys(var for var, _ in prep.var_keys))
    attrs_of = {var: [attr for v, attr in prep.var_keys if v == var] for var in keyed}
    options: list[list[Any]] = []
    for var in keyed:
        attrs = attrs_of[var]
        seen: dict[Any, Any] = {}
        for e in bucket:
            if var in base_plays[e]:
                seen.setdefault(tuple(group_key(e.values[a]) for a in attrs), tuple(e.values[a] for a in attrs))
        absent = [ABSENT] if var not in prep.required else []
        options.append(list(seen.items()) + absent)
    for chosen in itertools.product(*options):
        combo: dict[tuple[str, str], tuple[Any, Any]] = {}
        absent_vars = set()
        for var, choice in zip(keyed, chosen):
            attrs = attrs_of[var]
            if choice is ABSENT:
                absent_vars.add(var)
                combo.update({(var, a): (None, None) for a in attrs})
            else:
                combo.update({(var, a): (k, d) for a, k, d in zip(attrs, *choice)})
        members: list[Event] = []
        plays: dict[Event, frozenset[str]] = {}
        for e in bucket:
            can = frozenset(
                v
                for v in base_plays[e]
                if v not in absent_vars
                and all(group_key(e.values[attr]) == combo[(var, attr)][0] for var, attr in prep.var_keys if var == v)
            )
            if can:
                plays[e] = can
                members.append(e)
            elif e.type not in prep.pattern_types:
                members.append(e)  # irrelevant type (or one only under NOT): stays, breaks contiguity
        present = frozenset(keyed) - absent_vars
        yield combo, _SubStream(prep, members, plays, blockers, present)
