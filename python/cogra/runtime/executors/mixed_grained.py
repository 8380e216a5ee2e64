"""Mixed-grained executor: ``skip-till-any-match`` with predicates on adjacent events.

Report section 5 (Theorem 5.1, Algorithm 2).  A variable ``U`` whose events some
predicate ``(U, NEXT(V))`` reads must keep those events with their own states
(event-grained); every other variable keeps one running state (type-grained).  A
predicate that reads only the new event is checked once per new event, so it forces
nothing to be kept.  A new event playing ``V`` sums:

* ``S[U]`` for each type-grained ``U`` in predTypes(V) (if the pair's event-only
  predicates hold), and
* the states of the kept events of each event-grained ``U`` that satisfy the
  pair's predicates (all of them, through ``S[U]``, when the pair has none).
"""

from __future__ import annotations

import numpy as np

from cogra.runtime.absence import NO_CUT, Cut
from cogra.runtime.context import Batches, ExecContext


def run(batches: Batches, ctx: ExecContext, cut: Cut | None = None) -> list | None:
    layout, pred, pairs = ctx.layout, ctx.automaton.pred, ctx.pairs
    cut = cut or NO_CUT
    n = len(ctx.automaton.names)
    totals = [layout.zero() for _ in range(n)]
    finished = layout.zero()  # (absence: as in type_grained)
    kept_rows: list[list[int]] = [[] for _ in range(n)]
    kept_states: list[list[list]] = [[] for _ in range(n)]
    for batch in batches:
        start = ctx.start_vars if cut.starts(batch.time) else frozenset()
        updates = []
        for row, plays in zip(batch.rows, batch.plays):
            for v in plays:
                vec = list(layout.start_unit) if v in start else layout.zero()
                for u in pred[v]:
                    if not totals[u][0]:
                        continue
                    if not pairs.has(u, v):
                        layout.add_into(vec, totals[u])
                    elif not pairs.keeps_events[u]:
                        if pairs.check_one(u, v, None, row):
                            layout.add_into(vec, totals[u])
                    else:
                        ok = pairs.check(u, v, np.asarray(kept_rows[u], dtype=np.int64), row)
                        for i in np.flatnonzero(ok):
                            layout.add_into(vec, kept_states[u][i])
                if vec[0]:
                    layout.extend(vec, v, row, ctx.values)
                    updates.append((v, row, vec))
        for v, row, vec in updates:
            layout.add_into(totals[v], vec)
            if cut.finish_from is not None and v in ctx.automaton.final and cut.finishes(batch.time):
                layout.add_into(finished, vec)
            if pairs.keeps_events[v]:
                kept_rows[v].append(row)
                kept_states[v].append(vec)
    if cut.finish_from is not None:
        return finished if finished[0] else None
    final = layout.zero()
    for f in ctx.automaton.final:
        layout.add_into(final, totals[f])
    return final if final[0] else None
