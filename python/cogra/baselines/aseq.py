"""A-Seq-style aggregation of flattened Kleene patterns (the report's A-Seq contender, [QCRR14]).

A-Seq computes aggregates of *fixed-length* event sequence queries without building
the sequences: for ``SEQ(E1, ..., Ek)`` it keeps one counter per prefix ``E1..Ei`` and
an event of type ``Ei`` adds the counter of prefix ``i-1`` to that of prefix ``i``.
It has no Kleene closure, so, as the report does for A-Seq and Flink, a Kleene
pattern is **flattened** into the workload of fixed-length sequence queries covering
every length up to the longest possible match in the window::

    A+           ->  A, AA, AAA, ..., A^L         (L = events in the window that can be A)
    SEQ(A+, B)   ->  AB, AAB, ..., A^L B
    SEQ(A+, B+)  ->  A^i B^j for 1 <= i <= L_A, 1 <= j <= L_B

and every query keeps its own prefix counters; the answer is the sum over the
workload.  The number of queries, hence time per event and memory, grows with the
number of events per window -- the behaviour the report measures.

Implementation choices, so that the comparison is fair (not a strawman):

* **Shared prefixes**: flattened queries with an identical prefix share its counter
  (``A^3`` is a prefix of ``A^3``, ``A^4``, ... and of ``A^3 B``), so the state of a
  Kleene item is one vector indexed by its repetition count (an n-d array with one axis
  per Kleene item so far) instead of one counter array per query.  Without sharing
  the workload would cost a further factor L.
* **Only reachable prefixes are touched**: a prefix of length r needs r events, so an
  event updates the counters up to the number of events seen so far, vectorised with
  numpy.  Events with equal timestamps never follow each other: a batch of them reads
  the state from before the batch.
* Aggregates ride along with the counters (the same slots as :mod:`cogra.baselines`:
  COUNT, COUNT(V), SUM/AVG, MIN/MAX), as float64.
* Front end (binding, local predicates, equivalences and GROUP-BY as sub-streams,
  windows, output typing) shared with cogra (:mod:`cogra.baselines`).

Applies to skip-till-any-match queries whose pattern is a single variable, a Kleene-plus
variable (``A+``), or a ``SEQ`` of those (``SEQ(A+, B)``, ``SEQ(A, B+, C)``), with no
predicates on adjacent events (A-Seq supports equivalence predicates only); anything
else raises :class:`NotSupported` ("not applicable").  A state larger than
``max_cells`` counters raises :class:`BaselineLimitExceeded`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from cogra.baselines import (
    BaselineLimitExceeded,
    NotSupported,
    Prepared,
    Results,
    check_overflow_policy,
    prepare,
    substreams,
    warn_skipped,
    windows,
)
from cogra.language.ast import Pattern, Plus, Seq, Var

__all__ = ["evaluate", "NotSupported", "BaselineLimitExceeded", "check", "flatten"]

WHO = "A-Seq"
MAX_CELLS = 20_000_000


def flatten(pattern: Pattern, names: tuple[str, ...]) -> list[tuple[int, bool]]:
    """The pattern as a sequence of items ``(variable index, is Kleene plus)``."""
    if isinstance(pattern, Var):
        return [(names.index(pattern.name), False)]
    if isinstance(pattern, Plus) and isinstance(pattern.inner, Var):
        return [(names.index(pattern.inner.name), True)]
    if isinstance(pattern, Seq):
        return [item for p in pattern.items for item in flatten(p, names)]
    raise NotSupported(
        "A-Seq has no Kleene closure: only patterns that flatten into fixed-length sequences "
        "apply (a variable, V+, or SEQ of those such as SEQ(A+, B)); not "
        f"{type(pattern).__name__} patterns"
    )


def _prepare(query: Any, events: Any, type_column: str | None, time_column: str) -> tuple[Prepared, list]:
    prep = prepare(query, events, type_column=type_column, time_column=time_column, who=WHO)
    if prep.bound.adjacent:
        raise NotSupported("A-Seq supports no predicates on adjacent events (only equivalence predicates)")
    items = flatten(prep.query.pattern, prep.bound.automaton.names)
    return prep, items


def check(query: Any, schema: Any, *, type_column: str | None = None, time_column: str = "time") -> None:
    """Raise :class:`NotSupported` if A-Seq does not apply to ``query`` over ``schema``."""
    import pyarrow as pa

    _prepare(query, pa.table({f.name: pa.array([], f.type) for f in schema}), type_column, time_column)


def evaluate(
    query: Any,
    events: Any,
    *,
    type_column: str | None = None,
    time_column: str = "time",
    on_overflow: str = "error",
    max_cells: int = MAX_CELLS,
) -> Any:
    """Evaluate ``query`` over ``events`` A-Seq-style; same output as :func:`cogra.evaluate`
    (up to float64 rounding) for the queries A-Seq applies to."""
    check_overflow_policy(on_overflow)
    prep, items = _prepare(query, events, type_column, time_column)
    results = Results(prep)
    with np.errstate(over="ignore", invalid="ignore"):  # float64 counts may overflow to inf
        _run(prep, results, items, max_cells)
    warn_skipped(prep)
    return results.table(on_overflow)


def _run(prep: Prepared, results: Results, items: list, max_cells: int) -> None:
    for group, rows, plays in substreams(prep):
        times = prep.times[rows]
        for window, lo, hi in windows(prep, times):
            lin, ext = _window(prep, items, rows[lo:hi], plays[:, lo:hi], times[lo:hi], max_cells)
            results.add(window, group, lin, ext)


class _State:
    """Prefix counters of one pattern item: an array with one axis per Kleene item up to
    and including this one (the repetition count of each), plus the slot axis."""

    def __init__(self, dims: tuple[int, ...], nl: int, identity: np.ndarray):
        self.Y = np.zeros(dims + (nl,), dtype=np.float64)
        self.M = np.empty(dims + (len(identity),), dtype=np.float64)
        self.M[...] = identity


def _extend(Y: np.ndarray, M: np.ndarray, k: np.ndarray, x: np.ndarray, is_min: np.ndarray,
            identity: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The prefixes ``(Y, M)`` extended by one event with coefficients ``k`` and values ``x``."""
    Y2 = Y.copy()
    c = Y[..., :1]
    nz = np.flatnonzero(k)
    if len(nz):
        Y2[..., nz] += c * k[nz]
    if len(identity):
        M2 = np.where(is_min, np.minimum(M, x), np.maximum(M, x))
        M2 = np.where(c > 0, M2, identity)
    else:
        M2 = M
    return Y2, M2


def _window(prep: Prepared, items: list[tuple[int, bool]], rows: np.ndarray, plays: np.ndarray,
            times: np.ndarray, max_cells: int) -> tuple[np.ndarray, np.ndarray]:
    slots = prep.slots
    nl = len(slots.linear)
    identity, is_min = slots.identity, slots.is_min
    # The workload: the longest match of each Kleene item is bounded by its candidates.
    dims: list[tuple[int, ...]] = []
    shape: tuple[int, ...] = ()
    for var, kleene in items:
        if kleene:
            shape = shape + (max(1, int(plays[var].sum())),)
        dims.append(shape)
    cells = sum(math.prod(d) for d in dims)
    if cells * (nl + len(identity)) > max_cells:
        raise BaselineLimitExceeded(
            f"A-Seq would keep {cells:,} prefix counters for {math.prod(dims[-1]) if dims[-1] else 1:,} "
            f"flattened queries (limit {max_cells:,} numbers)")
    states = [_State(d, nl, identity) for d in dims]
    item_of = {var: j for j, (var, _) in enumerate(items)}
    kleene_axis = {}  # item -> axis of its repetition count
    axis = 0
    for j, (_, kleene) in enumerate(items):
        if kleene:
            kleene_axis[j] = axis
            axis += 1
    seen = [0] * len(items)  # events so far per item: bounds the reachable repetition counts
    unit_Y = np.zeros(nl)
    unit_Y[0] = 1.0
    ev, vv = np.nonzero(plays.T)
    K, X = prep.coefficients(rows[ev], vv)
    n = len(ev)
    i = 0
    while i < n:
        t = times[ev[i]]
        j_end = i
        while j_end < n and times[ev[j_end]] == t:
            j_end += 1
        deltas: dict[int, tuple[np.ndarray, np.ndarray, tuple]] = {}
        for p in range(i, j_end):
            j = item_of[int(vv[p])]
            reach = tuple(slice(0, max(1, seen[m])) for m in kleene_axis if m < j)
            if j == 0:
                src_Y, src_M = unit_Y, identity
            else:
                st = states[j - 1]
                src_Y, src_M = st.Y[reach], st.M[reach]
            add_Y, add_M = _extend(src_Y, src_M, K[p], X[p], is_min, identity)
            st = states[j]
            if j in kleene_axis:
                r = min(seen[j], st.Y.shape[-2] - 1)  # repetitions that may exist already
                region = reach + (slice(0, r + 1),)
                dY = np.zeros(st.Y[region].shape)
                dM = np.empty(st.M[region].shape)
                dM[...] = identity
                dY[..., 0, :] = add_Y
                dM[..., 0, :] = add_M
                if r > 0:
                    more_Y, more_M = _extend(st.Y[reach + (slice(0, r),)], st.M[reach + (slice(0, r),)],
                                             K[p], X[p], is_min, identity)
                    dY[..., 1:, :] += more_Y
                    dM[..., 1:, :] = more_M
            else:
                region = reach
                dY, dM = add_Y, add_M
            if j in deltas:
                oY, oM, oregion = deltas[j]
                deltas[j] = _merge(oY, oM, oregion, dY, dM, region, is_min, identity)
            else:
                deltas[j] = (np.array(dY, dtype=np.float64), np.array(dM, dtype=np.float64), region)
        for j, (dY, dM, region) in deltas.items():
            st = states[j]
            st.Y[region] += dY
            if len(identity):
                st.M[region] = np.where(is_min, np.minimum(st.M[region], dM), np.maximum(st.M[region], dM))
        for p in range(i, j_end):
            seen[item_of[int(vv[p])]] += 1
        i = j_end
    last = states[-1]
    lin = last.Y.reshape(-1, nl).sum(axis=0)
    if not len(identity):
        return lin, identity
    flat_M = last.M.reshape(-1, len(identity))
    return lin, np.where(is_min, flat_M.min(axis=0, initial=np.inf), flat_M.max(axis=0, initial=-np.inf))


def _merge(aY, aM, aregion, bY, bM, bregion, is_min, identity):
    """Combine two deltas over regions (tuples of slices from 0) into their union region."""
    region = tuple(slice(0, max(x.stop, y.stop)) for x, y in zip(aregion, bregion))
    shape = tuple(s.stop for s in region)
    Y = np.zeros(shape + aY.shape[len(aregion):])
    M = np.empty(shape + aM.shape[len(aregion):])
    M[...] = identity
    for dY, dM, reg in ((aY, aM, aregion), (bY, bM, bregion)):
        Y[reg] += dY
        if len(identity):
            M[reg] = np.where(is_min, np.minimum(M[reg], dM), np.maximum(M[reg], dM))
    return Y, M, region
