"""What keeps a query off the compiled kernels, known from the query alone.

The compiled kernels (:mod:`cogra.runtime.compiled`) evaluate every query the language
takes but for the parts named here; such a query runs on the Python executors, exactly
and 10-100x slower, and ``cogra.explain`` names the part.  Other reasons depend on the
data (a uint64 column, values beyond 2**53 in a comparison, NaN) and are known only when
the query runs: :class:`cogra.errors.CograPerformanceWarning` says which.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import sqlglot.expressions as exp

from cogra.analysis.expressions import ROLE_CUR, ROLE_NEXT
from cogra.language.ast import Aggregate
from cogra.runtime.aggregates import ENTRIES
from cogra.runtime.compiled.codes import PAIR_WORD_BITS, edge_bits

if TYPE_CHECKING:  # pragma: no cover
    from cogra.analysis.binding import BoundQuery

KERNEL_MAX_EDGES = PAIR_WORD_BITS
"""Automaton edges (pairs of a state and a predecessor state) whose predicates on the new
event alone the kernels read as a bit: an event's pair checks are one 64-bit word, a bit
per edge (:func:`~cogra.runtime.compiled.codes.edge_bits`).  Edges numbered past it read
no bit and pass; their checks are indexed per pair like a predicate that reads the
earlier event (:func:`checks_past_the_word`).  Why not a wider word: every kernel would
carry it for the rare automaton past 64 edges (optional keys on long repetitions)."""


def checks_past_the_word(bound: "BoundQuery") -> tuple[tuple[int, int], ...]:
    """The edges numbered past :data:`KERNEL_MAX_EDGES` that carry a predicate on the new
    event alone: the compiled executor indexes them per pair, keeping the earlier
    variable's events, since the word has no bit for them."""
    edge = edge_bits(bound.automaton.pred)
    return tuple(sorted({(p.prev, p.next) for p in bound.adjacent
                         if not p.uses_prev and edge.get((p.prev, p.next), 0) >= KERNEL_MAX_EDGES}))


COMPARISONS = {exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">=", exp.EQ: "=", exp.NEQ: "<>"}
_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "<>": "<>"}


@dataclass(frozen=True)
class CrossingComparison:
    """The one comparison of a predicate that reads the earlier event: ``cur_side op
    next_side`` (``holder``: the comparison node, in the predicate's tree)."""

    holder: exp.Expression
    op: str
    cur_side: exp.Expression
    next_side: exp.Expression


def crossing_comparison(expr: exp.Expression) -> CrossingComparison | str:
    """The comparison that holds every read of the earlier event in a bound predicate, or
    why there is none the kernels index (:mod:`cogra.runtime.compiled.crossing_predicates`)."""
    reading = [node for node in expr.find_all(exp.Column) if node.table == ROLE_CUR]
    if not reading:
        return f"{expr.sql()} reads no earlier event"
    holder = reading[0].parent
    while holder is not None and not (type(holder) in COMPARISONS and all(_inside(c, holder) for c in reading)):
        holder = holder.parent
    if holder is None:
        return f"{expr.sql()} reads the earlier event outside one comparison"
    op = COMPARISONS[type(holder)]
    left, right = holder.this, holder.expression
    if _roles(left) == {ROLE_CUR} and _roles(right) <= {ROLE_NEXT}:
        return CrossingComparison(holder, op, left, right)
    if _roles(right) == {ROLE_CUR} and _roles(left) <= {ROLE_NEXT}:
        return CrossingComparison(holder, _FLIP[op], right, left)
    return f"{expr.sql()} mixes the two events on one side of {holder.sql()}"


def python_only_parts(bound: "BoundQuery") -> tuple[str, ...]:
    """The parts of the query that keep it off the compiled kernels (empty: none)."""
    names = bound.automaton.names
    parts = []
    by_pair: dict[tuple[int, int], list] = {}
    for p in bound.adjacent:
        if p.uses_prev:
            by_pair.setdefault((p.prev, p.next), []).append(p)
    for (u, v), preds in sorted(by_pair.items()):
        user = [p for p in preds if not p.guard]
        sources = list({id(p.source): p.source for p in user}.values())
        if len(user) > 1:
            texts = " and ".join(getattr(s, "text", str(s)) for s in sources)
            parts.append(f"{texts} both read {names[u]} for its next {names[v]} (the kernels index one "
                         "comparison per pair)")
            continue
        if not user:
            continue  # negations' guards alone: blocker counts, indexed as one
        found = crossing_comparison(user[0].expression)
        if isinstance(found, str):
            parts.append(f"{getattr(sources[0], 'text', found)}: the kernels index a predicate on the earlier "
                         "event by one comparison of its value with the new event's")
        elif found.op == "<>" and len(preds) > 1:
            parts.append(f"{getattr(sources[0], 'text', found.holder.sql())}: across a negation the kernels "
                         "index a comparison in one order of its value, not <>")
    for item in bound.query.returns:
        agg = item.value
        if isinstance(agg, Aggregate) and agg.func in ENTRIES and not ENTRIES[agg.func].kernels:
            parts.append(f"{item.text}: no compiled kernel evaluates {agg.func.value}")
    return tuple(dict.fromkeys(parts))  # (one predicate on several pairs: named once)


def _roles(node: exp.Expression) -> set[str]:
    return {c.table for c in node.find_all(exp.Column)}


def _inside(node: exp.Expression | None, ancestor: exp.Expression) -> bool:
    while node is not None:
        if node is ancestor:
            return True
        node = node.parent
    return False


__all__ = [
    "KERNEL_MAX_EDGES", "CrossingComparison", "checks_past_the_word", "crossing_comparison",
    "python_only_parts",
]
