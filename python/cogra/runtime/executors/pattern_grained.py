"""Pattern-grained executor for ``skip-till-next-match`` and ``contiguous``.

The report's Algorithm 3 keeps only the last matched event; that is wrong in general
(docs/language.md, Event matching semantics: ``SEQ(A, B)`` on ``a1 a2 b3`` has two trends
under ``next``).
What is true is that a partial trend ending at ``(e_p as U)`` is extended by the
*first* events that can extend it and by no later one.  So, per variable ``U``, we
keep the summed state of the partial trends that are still *waiting* for their first
extension:

* a batch of events at time ``t`` extends every waiting trend it is adjacent to,
  and those trends stop waiting (they were extended by their first adjacent events);
* under ``contiguous`` every waiting trend that the batch did not extend dies too,
  since the batch now lies between it and anything later;
* the batch's new partial trends start waiting.

Where a predicate on adjacent events reads the earlier event, waiting trends are
kept per event (each earlier event has its own first adjacent event); otherwise per
variable, and the cost stays linear.
"""

from __future__ import annotations

import numpy as np

from cogra.runtime.absence import NO_CUT, Cut
from cogra.runtime.context import Batches, ExecContext


def run(batches: Batches, ctx: ExecContext, *, contiguous: bool, cut: Cut | None = None) -> list | None:
    """``cut``: absence (docs/language.md, Absence at the edge of a pattern) -- no trend
    starts after the window's
    first leading blocker, and only those ending from its last trailing one on finish."""
    layout, pred, pairs = ctx.layout, ctx.automaton.pred, ctx.pairs
    cut = cut or NO_CUT
    n = len(ctx.automaton.names)
    final_vars = ctx.automaton.final
    waiting = [layout.zero() for _ in range(n)]  # type-grained variables
    waiting_rows: list[list[int]] = [[] for _ in range(n)]  # event-grained variables
    waiting_states: list[list[list]] = [[] for _ in range(n)]
    final = layout.zero()
    for batch in batches:
        start = ctx.start_vars if cut.starts(batch.time) else frozenset()
        updates = []
        extended_vars: set[int] = set()
        extended_events: list[set[int]] = [set() for _ in range(n)]
        for row, plays in zip(batch.rows, batch.plays):
            for v in plays:
                vec = list(layout.start_unit) if v in start else layout.zero()
                for u in pred[v]:
                    if pairs.keeps_events[u]:
                        if not waiting_rows[u]:
                            continue
                        ok = pairs.check(u, v, np.asarray(waiting_rows[u], dtype=np.int64), row)
                        for i in np.flatnonzero(ok):
                            layout.add_into(vec, waiting_states[u][i])
                            extended_events[u].add(int(i))
                    elif not pairs.has(u, v) or pairs.check_one(u, v, None, row):
                        if waiting[u][0]:
                            layout.add_into(vec, waiting[u])
                        extended_vars.add(u)
                if vec[0]:
                    layout.extend(vec, v, row, ctx.values)
                    updates.append((v, row, vec))
        if contiguous:
            waiting = [layout.zero() for _ in range(n)]
            waiting_rows = [[] for _ in range(n)]
            waiting_states = [[] for _ in range(n)]
        else:
            for u in extended_vars:
                waiting[u] = layout.zero()
            for u, gone in enumerate(extended_events):
                if gone:
                    waiting_rows[u] = [r for i, r in enumerate(waiting_rows[u]) if i not in gone]
                    waiting_states[u] = [s for i, s in enumerate(waiting_states[u]) if i not in gone]
        for v, row, vec in updates:
            if v in final_vars and cut.finishes(batch.time):
                layout.add_into(final, vec)
            if pairs.keeps_events[v]:
                waiting_rows[v].append(row)
                waiting_states[v].append(vec)
            else:
                layout.add_into(waiting[v], vec)
    return final if final[0] else None
