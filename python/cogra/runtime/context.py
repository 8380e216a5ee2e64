"""What every executor needs besides the events: automaton, aggregates, predicates.

Executors consume one sub-stream of one window as a sequence of :data:`Batch` es --
the events sharing one timestamp, in time order (ties are never adjacent, so a batch
is computed from the state before it).  Each event comes with the variables it may
play in this sub-stream (after type, local predicates and key checks); an event that
may play nothing is still passed, because under ``contiguous`` it breaks trends.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from cogra.analysis.automaton import Automaton
from cogra.analysis.binding import AdjacentPredicate, BoundQuery
from cogra.analysis.expressions import ROLE_CUR, Val, evaluate
from cogra.runtime.aggregates import AttributeValues, Layout


@dataclass(frozen=True)
class Batch:
    time: object
    rows: tuple[int, ...]
    plays: tuple[tuple[int, ...], ...]
    """Per row: the variables it may play (possibly none)."""


Batches = Iterable[Batch]


class PairPredicates:
    """Evaluates the predicates on adjacent events of each pair ``(U, V)``.

    ``columns`` maps an attribute to ``(data, valid)`` numpy arrays over all rows.
    """

    def __init__(self, bound: BoundQuery, columns: dict[str, tuple[np.ndarray, np.ndarray]]):
        n = len(bound.automaton.names)
        self.columns = columns
        self.by_pair: dict[tuple[int, int], tuple[AdjacentPredicate, ...]] = {}
        for p in bound.adjacent:
            self.by_pair[(p.prev, p.next)] = self.by_pair.get((p.prev, p.next), ()) + (p,)
        kept = bound.kept_variables
        self.keeps_events = tuple(var in kept for var in range(n))
        """Per variable U: must events playing U be kept (a predicate reads their attributes)?"""

    def has(self, u: int, v: int) -> bool:
        return (u, v) in self.by_pair

    def check(self, u: int, v: int, prev_rows: np.ndarray, row: int) -> np.ndarray:
        """Which of ``prev_rows`` (playing U) may be followed by ``row`` playing V."""
        ok = np.ones(len(prev_rows), dtype=bool)
        for p in self.by_pair.get((u, v), ()):
            def env(role: str, attr: str) -> Val:
                data, valid = self.columns[attr]
                if role == ROLE_CUR:
                    return Val(data[prev_rows], valid[prev_rows])
                return Val(data[row], bool(valid[row]))

            res = evaluate(p.expression, env)
            ok &= np.broadcast_to(np.logical_and(res.data, res.valid), ok.shape)
        return ok

    def check_one(self, u: int, v: int, prev_row: int | None, row: int) -> bool:
        """The pair check for a single earlier event (or none, when no predicate reads it)."""
        prev = np.array([row if prev_row is None else prev_row], dtype=np.int64)
        return bool(self.check(u, v, prev, row)[0])


@dataclass
class ExecContext:
    automaton: Automaton
    layout: Layout
    values: AttributeValues
    pairs: PairPredicates
    start_vars: frozenset[int] = field(init=False)

    def __post_init__(self) -> None:
        self.start_vars = self.automaton.start

