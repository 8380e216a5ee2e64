"""Type-grained executor: ``skip-till-any-match`` without predicates on adjacent events.

Report section 4 (Theorem 4.1, Algorithm 1), generalised from counts to the state
vectors of :mod:`cogra.runtime.aggregates` and from event types to variables.  With
no predicate between adjacent events, a new event playing ``V`` is adjacent to every
earlier event playing any ``U`` in ``predTypes(V)``, so one running state per variable
suffices and events are dropped as soon as they have updated it:

    e.state  = [V is a start variable] + sum over U in predTypes(V) of S[U]
    S[V]    += e.state
    final    = sum over final variables F of S[F]

Events of one timestamp never follow each other, so a batch reads the states from
before the batch and writes afterwards.

Absence (docs/language.md, Absence at the edge of a pattern; ``cut``:
:class:`cogra.runtime.absence.Cut`): start
variables start nothing after the window's first leading blocker, and with a trailing
one the final state sums the final variables' updates of the batches from its time on
instead of their totals.
"""

from __future__ import annotations

from cogra.runtime.absence import NO_CUT, Cut
from cogra.runtime.context import Batches, ExecContext


def run(batches: Batches, ctx: ExecContext, cut: Cut | None = None) -> list | None:
    layout, pred = ctx.layout, ctx.automaton.pred
    cut = cut or NO_CUT
    n = len(ctx.automaton.names)
    totals = [layout.zero() for _ in range(n)]
    finished = layout.zero()  # (with a trailing blocker: the trends ending from it on)
    for batch in batches:
        start = ctx.start_vars if cut.starts(batch.time) else frozenset()
        updates = []
        for row, plays in zip(batch.rows, batch.plays):
            for v in plays:
                vec = list(layout.start_unit) if v in start else layout.zero()
                for u in pred[v]:
                    if totals[u][0]:
                        layout.add_into(vec, totals[u])
                if vec[0]:
                    layout.extend(vec, v, row, ctx.values)
                    updates.append((v, vec))
        for v, vec in updates:
            layout.add_into(totals[v], vec)
            if cut.finish_from is not None and v in ctx.automaton.final and cut.finishes(batch.time):
                layout.add_into(finished, vec)
    if cut.finish_from is not None:
        return finished if finished[0] else None
    final = layout.zero()
    for f in ctx.automaton.final:
        layout.add_into(final, totals[f])
    return final if final[0] else None
