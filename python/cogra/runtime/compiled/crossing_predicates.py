"""A predicate that reads the earlier event of a pair, as the mixed-grained kernels index it.

The kernels (:mod:`cogra.runtime.compiled.aggregators.mixed_grained`) keep the earlier
variable ``U``'s events ranked by one value ``h(U)`` and let a new event ``e`` of ``V``
take those whose rank lies in a prefix, a suffix, or equals one rank.  That holds every
comparison ``h(U) op g(NEXT(V))``, and every predicate in which one such comparison ``C``
is the only part that reads ``U``: the rest reads only ``NEXT(V)`` (or nothing), so per
new event it is known whether the predicate is ``C``, ``NOT C``, true for every ``U``
with a value, true for every ``U`` at all, or false -- for example
``A.v = NEXT(B).v OR NEXT(B).v > 2`` is, per ``B`` event, either ``C`` or always true.
What a predicate is for each event is its *code*: :data:`CROSS_NONE` (no pair), a range
(:data:`CROSS_RANGES`), or :data:`CROSS_ALL`, every ``U`` event however null its value,
which the kernels read as a pair without an indexed predicate (``U``'s running total).

Why per-event ranges rather than a pair-wide operator: the operator of ``NOT C`` is the
complement of ``C``'s, so a pair whose events switch between them needs the prefix,
suffix and equal structures at once; a predicate of one operator keeps only its own.
A pair that crosses a negation (``SEQ(A, NOT N, B)``) has the negation's *guard* too, a
predicate of its own: no blocker strictly between the two events, ``A.lo = NEXT(B).hi``
over blocker counts (:data:`cogra.analysis.binding.NEGATION_COLUMN`).  With a user's
comparison on the same pair (:func:`guarded_ranges`) both are one ranked value, the pair
``(lo, h)`` in lexicographic order: counts never fall as time passes, so every earlier
event has ``lo <= NEXT(B).hi`` and those the guard lets through -- ``lo`` equal -- are the
top block of the ranks inserted so far; ordering ``h`` within the block ascending (for
``>``, ``>=``) or descending (for ``<``, ``<=``) makes the comparison a suffix of the whole
rank space, which the kernels take as they take any.  Why not a second index per pair: a
two-dimensional range in every kernel, where one rank order does it.

Anything else (``U`` read outside one comparison, a comparison that mixes both events on
one side: :func:`cogra.analysis.kernel_reach.crossing_comparison`; a predicate that holds
where the comparison is NULL but not wherever it is true or false; values float64 cannot
hold) raises :class:`Unsupported`, and the engine runs the Python executors.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import sqlglot.expressions as exp

from cogra.analysis.expressions import Val, evaluate, truth
from cogra.analysis.kernel_reach import crossing_comparison
from cogra.runtime.compiled.channels import Unsupported
from cogra.runtime.compiled.codes import CROSS_ALL, CROSS_NONE, CROSS_RANGES, USE_EQUAL, USE_PREFIX, USE_SUFFIX

_COMPLEMENT = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "=": "<>", "<>": "="}


@dataclass(frozen=True)
class Crossing:
    """One comparison ``h(cur) op g(next)`` and what the whole predicate makes of it.

    ``h``/``hv``, ``g``/``gv``: both sides as float64 arrays over all table rows, with
    their validity.  ``uses``: per row (as the new event), ``"C"`` the comparison,
    ``"not C"`` its complement, ``"valued"`` every ``U`` event whose ``h`` is not NULL,
    ``"all"`` every ``U`` event (rows in none of them take nothing); a plain comparison
    is ``"C"`` where ``g`` is valid."""

    op: str
    h: np.ndarray
    hv: np.ndarray
    g: np.ndarray
    gv: np.ndarray
    uses: dict[str, np.ndarray]

    @property
    def plain(self) -> bool:
        """Whether the predicate takes, per event, the comparison or nothing (one operator
        for every event: ``A.v < NEXT(B).v AND NEXT(B).v <> 3``)."""
        return not any(self.uses[k].any() for k in ("not C", "valued", "all"))


def split_crossing(expr: exp.Expression, columns: dict, n: int) -> Crossing:
    """The :class:`Crossing` of a bound predicate that reads the earlier event, over
    ``n`` rows of ``columns`` (attribute -> (data, valid)); :class:`Unsupported` where the
    kernels cannot index it (module docstring)."""
    found = crossing_comparison(expr)
    if isinstance(found, str):
        raise Unsupported(found)
    holder, op, cur_side, next_side = found.holder, found.op, found.cur_side, found.next_side
    h, hv = _side(cur_side, columns, n)
    g, gv = _side(next_side, columns, n)
    bare = expr
    while isinstance(bare, exp.Paren):
        bare = bare.this
    if bare is holder:
        uses = {"C": gv, "not C": _nothing(n), "valued": _nothing(n), "all": _nothing(n)}
        return Crossing(op, h, hv, g, gv, uses)
    # The rest of the predicate reads only the new event: per row, its value with the
    # comparison true, false and NULL (three-valued logic, as the Python executors).
    env = lambda role, attr: Val(*columns[attr])  # noqa: E731
    with_c = {}
    for name, literal in (("T", exp.true()), ("F", exp.false()), ("N", exp.null())):
        copy = expr.copy()
        target = next(node for node in copy.find_all(type(holder)) if node == holder)
        target.replace(literal)
        with_c[name] = truth(evaluate(copy, env), n)
    t, f, null = with_c["T"], with_c["F"], with_c["N"]
    # g NULL: the comparison is NULL for every earlier event.
    every = np.where(gv, t & f & null, null)
    unreadable = gv & null & ~(t & f)
    if unreadable.any():
        raise Unsupported(f"predicate {expr.sql()} holds where {holder.sql()} is NULL but not wherever it "
                          "is true or false")
    ranged = gv & ~null
    uses = {"C": ranged & t & ~f, "not C": ranged & f & ~t, "valued": ranged & t & f, "all": every}
    return Crossing(op, h, hv, g, gv, uses)


def _nothing(n: int) -> np.ndarray:
    return np.zeros(n, bool)


def _side(e: exp.Expression, columns: dict, n: int) -> tuple[np.ndarray, np.ndarray]:
    v = evaluate(e, lambda r, attr: Val(*columns[attr]))
    data = np.broadcast_to(np.asarray(v.data), (n,))
    valid = np.broadcast_to(np.asarray(v.valid, dtype=bool), (n,))
    if data.dtype.kind not in "iufb":
        raise Unsupported(f"{e.sql()} is not numeric")
    if data.dtype.kind in "iu" and n and np.abs(data[valid]).max(initial=0) > 2**53:
        raise Unsupported(f"{e.sql()} exceeds 2**53")
    data = data.astype(np.float64)
    if np.isnan(data[valid]).any():
        raise Unsupported(f"{e.sql()} holds NaN")
    return np.ascontiguousarray(data), np.ascontiguousarray(valid)


def op_ranges(op: str, lt: np.ndarray, le: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(a, b, eq)`` of ``h op g`` with every unused part empty (prefix ``a = 0``, suffix
    ``b = m``, ``eq = -1``): ``lt`` / ``le`` count the ranked values below / up to ``g``."""
    zero, top, no = np.zeros_like(lt), np.full_like(lt, m), np.full_like(lt, -1)
    eq = np.where(le > lt, lt, -1)
    return {
        "<": (lt, top, no), "<=": (le, top, no), ">": (zero, le, no), ">=": (zero, lt, no),
        "=": (zero, top, eq), "<>": (lt, le, no),
    }[op]


OP_FLAGS = {"<": USE_PREFIX, "<=": USE_PREFIX, ">": USE_SUFFIX, ">=": USE_SUFFIX, "=": USE_EQUAL,
            "<>": USE_PREFIX | USE_SUFFIX}


def mixed_ranges(c: Crossing, lt: np.ndarray, le: np.ndarray, m: int) -> tuple[int, np.ndarray, np.ndarray,
                                                                                np.ndarray, np.ndarray]:
    """``(flags, a, b, eq, code)`` of a predicate that is not the comparison alone: per row
    the ranges of what it uses there (``valued``: the prefix of every rank), the code
    :data:`CROSS_RANGES` where it uses ranges, :data:`CROSS_ALL` where it takes every
    earlier event, else :data:`CROSS_NONE`."""
    a = np.zeros_like(lt)
    b = np.full_like(lt, m)
    eq = np.full_like(lt, -1)
    flags = 0
    for use, op in (("C", c.op), ("not C", _COMPLEMENT[c.op])):
        where = c.uses[use]
        if where.any():
            oa, ob, oq = op_ranges(op, lt, le, m)
            a, b, eq = np.where(where, oa, a), np.where(where, ob, b), np.where(where, oq, eq)
            flags |= OP_FLAGS[op]
    if c.uses["valued"].any():
        a = np.where(c.uses["valued"], m, a)
        flags |= USE_PREFIX
    code = np.full(len(lt), CROSS_NONE, np.int8)
    code[c.uses["C"] | c.uses["not C"] | c.uses["valued"]] = CROSS_RANGES
    code[c.uses["all"]] = CROSS_ALL
    return flags, a.astype(np.int64), b.astype(np.int64), eq.astype(np.int64), code


_DIRECTION = {">": 1, ">=": 1, "<": -1, "<=": -1, "=": 0}


@dataclass(frozen=True)
class GuardedPair:
    """A pair's guards and user comparison as one indexed predicate: ``ranks`` (per row as
    the earlier event; ``m`` distinct), and per row as the new event the suffix ``b`` and
    equal rank ``eq`` it takes under ``flags`` (never a prefix), and its code."""

    flags: int
    m: int
    ranks: np.ndarray
    b: np.ndarray
    eq: np.ndarray
    code: np.ndarray


def guarded_ranges(guards: list[exp.Expression], user: exp.Expression | None, columns: dict,
                   n: int) -> GuardedPair:
    """The :class:`GuardedPair` of a pair with the negations' ``guards`` (``lo = NEXT.hi``)
    and at most one predicate of the user's that reads the earlier event (module
    docstring); :class:`Unsupported` where the user's needs both orders of its value
    (``<>``, or a comparison and its complement)."""
    from cogra.runtime.compiled.aggregators.mixed_grained import unique_inverse, value_bounds

    lo, hi = [], []
    for guard in guards:
        found = crossing_comparison(guard)
        assert not isinstance(found, str) and found.op == "=", guard.sql()
        lo.append(_side(found.cur_side, columns, n)[0].astype(np.int64))
        hi.append(_side(found.next_side, columns, n)[0].astype(np.int64))
    # The guards' counts as one: each tuple's index among the tuples of earlier and new events.
    _, block = np.unique(np.stack([np.concatenate([x, y]) for x, y in zip(lo, hi)], axis=1), axis=0,
                         return_inverse=True)
    block = block.reshape(-1).astype(np.int64)
    block_lo, block_hi = block[:n], block[n:]
    if user is None:
        c = Crossing("=", np.zeros(n), _nothing(n), np.zeros(n), _nothing(n),
                     {"C": _nothing(n), "not C": _nothing(n), "valued": _nothing(n), "all": np.ones(n, bool)})
    else:
        c = split_crossing(user, columns, n)
    ops = [op for use, op in (("C", c.op), ("not C", _COMPLEMENT[c.op])) if c.uses[use].any()]
    if "<>" in ops or {_DIRECTION[op] for op in ops} >= {1, -1}:
        raise Unsupported(f"{user.sql() if user is not None else ''} compares across a negation in both "
                          "orders of its value")
    ascending = all(_DIRECTION[op] >= 0 for op in ops)
    vals, inverse = unique_inverse(c.h[c.hv])
    m_h = len(vals)
    h_rank = np.zeros(n, np.int64)
    h_rank[c.hv] = inverse
    # Within a block: NULL first (0), then the values in the comparison's order (1 .. m_h).
    h_key = np.where(c.hv, 1 + h_rank if ascending else m_h - h_rank, 0)
    width = m_h + 2
    keys = block_lo * width + h_key
    distinct = np.unique(keys)
    m = len(distinct)
    lt, le = value_bounds(vals, c.g)
    flags = 0
    b = np.full(n, m, np.int64)
    eq = np.full(n, -1, np.int64)
    code = np.full(n, CROSS_NONE, np.int8)

    def suffix(where: np.ndarray, key_in_block: np.ndarray | int) -> None:
        nonlocal b, flags
        b = np.where(where, np.searchsorted(distinct, block_hi * width + key_in_block, side="left"), b)
        flags |= USE_SUFFIX

    for use, op in (("C", c.op), ("not C", _COMPLEMENT[c.op])):
        where = c.uses[use]
        if not where.any():
            continue
        if op == "=":
            key = block_hi * width + (1 + lt if ascending else m_h - lt)
            pos = np.minimum(np.searchsorted(distinct, key), m - 1)
            hit = where & (le > lt) & (distinct[pos] == key) if m else where & False
            eq = np.where(hit, pos, eq)
            flags |= USE_EQUAL
        else:
            suffix(where, {">": 1 + le, ">=": 1 + lt, "<": m_h - lt + 1, "<=": m_h - le + 1}[op])
        code[where] = CROSS_RANGES
    for use, key_in_block in (("valued", 1), ("all", 0)):
        where = c.uses[use]
        if where.any():
            suffix(where, key_in_block)
            code[where] = CROSS_RANGES
    ranks = np.searchsorted(distinct, keys).astype(np.int64)
    return GuardedPair(flags, m, ranks, b.astype(np.int64), eq.astype(np.int64), code)


__all__ = ["Crossing", "GuardedPair", "guarded_ranges", "mixed_ranges", "op_ranges", "split_crossing"]
