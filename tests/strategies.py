"""Hypothesis strategies: random COGRA queries (as text) and small event streams.

Queries cover every pattern operator (SEQ, +, *, ?, |, bounded quantifiers {n,m}, NOT N
between two parts of a SEQ and at the whole pattern's edge, one type bound to several
variables), the three semantics, local and adjacent predicates (reading the earlier
event or only the later one), plain and variable-qualified grouping and equivalence,
sliding and tumbling windows, and every aggregate.  Streams are small (the two-step
reference enumerates every trend) with timestamp ties, irrelevant event types (and N, a
type only a negation may name), NULL
attribute values, negative values in some, and a few NULL times.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
from hypothesis import strategies as st

from cogra.analysis.automaton import build_automaton
from cogra.language.ast import Alt, Not, Opt, Plus, Repeat, Seq, Span, Star, Var, matches_nothing, negations

TYPES = ("A", "B", "C")
_SPAN = Span(0, 0, 1, 1)


@dataclass(frozen=True)
class GeneratedQuery:
    text: str
    variables: tuple[str, ...]
    event_types: tuple[str, ...] = TYPES


def render(p) -> str:
    if isinstance(p, Not):
        return "NOT " + render(p.var)
    if isinstance(p, Var):
        return p.event_type if p.event_type == p.name else f"{p.event_type} {p.name}"
    if isinstance(p, Seq):
        return "SEQ(" + ", ".join(render(i) for i in p.items) + ")"
    if isinstance(p, Alt):
        return "(" + " | ".join(render(o) for o in p.options) + ")"
    inner = render(p.inner)
    if not isinstance(p.inner, (Var, Seq)) or (isinstance(p.inner, Var) and p.inner.event_type != p.inner.name):
        inner = f"({inner})"
    if isinstance(p, Repeat):
        return inner + p.suffix
    return inner + {Plus: "+", Star: "*", Opt: "?"}[type(p)]


@st.composite
def patterns(draw, max_vars: int = 4, repeat: bool = True, negation: bool = True):
    counter = iter(range(100))

    def var() -> Var:
        i = next(counter)
        t = draw(st.sampled_from(TYPES))
        return Var(t, f"V{i}", _SPAN)

    def node(depth: int):
        if depth == 0:
            return var()
        kinds = ["var", "var", "seq", "plus", "star", "opt", "alt"] + (["repeat"] if repeat else [])
        kind = draw(st.sampled_from(kinds))
        if kind == "var":
            return var()
        if kind == "seq":
            n = draw(st.integers(2, 3))
            items = [node(depth - 1) for _ in range(n)]
            # NOT N between two parts that each match an event (docs/language.md, Negation).
            spots = [i for i in range(1, n) if not matches_nothing(items[i - 1]) and not matches_nothing(items[i])]
            if negation and spots and draw(st.integers(0, 2)) == 0:
                at = draw(st.sampled_from(spots))
                i = next(counter)
                items.insert(at, Not(Var(draw(st.sampled_from(TYPES + ("N",))), f"N{i}", _SPAN), _SPAN))
            return Seq(tuple(items), _SPAN)
        if kind == "alt":
            return Alt((node(depth - 1), node(depth - 1)), _SPAN)
        inner = node(depth - 1)
        if kind == "repeat":
            low = draw(st.integers(0, 3))
            high = draw(st.sampled_from([None, low, low + 1, low + 2]))
            return Repeat(inner, low, high if high != 0 else 1, _SPAN)
        return {"plus": Plus, "star": Star, "opt": Opt}[kind](inner, _SPAN)

    p = node(draw(st.integers(1, 3)))
    auto = build_automaton(p)
    if len(auto.variables) > max_vars or len(auto.names) > 10:
        p = Seq(tuple(var() for _ in range(2)), _SPAN)
    if negation and draw(st.integers(0, 2)) == 0:
        # Absence at the whole pattern's edge (docs/language.md): leading, trailing
        # or both, next to a part that matches an event.
        items = list(p.items) if isinstance(p, Seq) else [p]
        lead, trail = draw(st.sampled_from([(True, False), (False, True), (True, True)]))
        if lead and not matches_nothing(items[0]):
            items.insert(0, Not(Var(draw(st.sampled_from(TYPES + ("N",))), f"N{next(counter)}", _SPAN), _SPAN))
        if trail and not matches_nothing(items[-1]):
            items.append(Not(Var(draw(st.sampled_from(TYPES + ("N",))), f"N{next(counter)}", _SPAN), _SPAN))
        if len(items) > 1:
            p = Seq(tuple(items), _SPAN)
    return p


@st.composite
def queries(draw, windows: bool = True, grouping: bool = True, extended: bool = True,
            spreads: bool = False) -> GeneratedQuery:
    """``extended``: patterns may hold bounded quantifiers and NOT (docs/language.md);
    ``spreads``: the aggregates include VAR_*/STDDEV_* (one at least)."""
    p = draw(patterns(repeat=extended, negation=extended))
    auto = build_automaton(p)
    names = auto.variables
    negated = [n.var.name for n in negations(p)]
    semantics = draw(st.sampled_from(["any", "next", "contiguous", "skip-till-any-match"]))
    conjuncts: list[str] = []
    # local predicates
    for v in names:
        if draw(st.integers(0, 3)) == 0:
            conjuncts.append(draw(st.sampled_from([
                f"{v}.v > 1", f"{v}.v <= 3", f"{v}.v IN (1, 2, 4)", f"{v}.w IS NOT NULL",
                f"NOT {v}.v = 2", f"{v}.v BETWEEN 1 AND 3",
            ])))
    # which events block a NOT N
    for n in negated:
        if draw(st.integers(0, 2)) == 0:
            conjuncts.append(draw(st.sampled_from([f"{n}.v > 1", f"{n}.w IS NOT NULL", f"{n}.v <> 2"])))
    # predicates on adjacent events
    sv = auto.state_variables
    pairs = sorted({(sv[u], sv[v]) for v in range(len(sv)) for u in auto.pred[v]})
    if pairs and draw(st.booleans()):
        U, V = draw(st.sampled_from(pairs))
        conjuncts.append(draw(st.sampled_from([
            f"{U}.v < NEXT({V}).v", f"{U}.v >= NEXT({V}).v", f"{U}.w + 1 > NEXT({V}).w",
            f"NEXT({V}).v <> 2", f"({U}.v = NEXT({V}).v OR NEXT({V}).v > 2)",
        ])))
    group_by: list[str] = []
    # Keys on any variable: one that some trends lack has the sub-stream without it
    # (docs/language.md, Keys on optional variables); only the non-extended generator keeps
    # to mandatory ones.
    keyable = list(names) if extended else [v for v in names if auto.mandatory_variable(v)]
    if grouping:
        if draw(st.booleans()):
            group_by.append("g")
        if keyable and draw(st.integers(0, 3)) == 0:
            group_by.append(f"{draw(st.sampled_from(keyable))}.k")
        if draw(st.integers(0, 4)) == 0:
            conjuncts.append("[h]")
        if keyable and draw(st.integers(0, 4)) == 0:
            conjuncts.append(f"[{draw(st.sampled_from(keyable))}.h]")
    items = list(dict.fromkeys(group_by))
    n_aggs = draw(st.integers(1, 3))
    for _ in range(n_aggs):
        v = draw(st.sampled_from(names))
        items.append(draw(st.sampled_from([
            "COUNT(*)", f"COUNT({v})", f"SUM({v}.v)", f"MIN({v}.v)", f"MAX({v}.w)",
            f"AVG({v}.w)", f"SUM({v}.w)", f"AVG({v}.v)",
        ])))
    if spreads:
        v = draw(st.sampled_from(names))
        items.append(draw(st.sampled_from([
            f"VAR_POP({v}.v)", f"VAR_SAMP({v}.w)", f"VARIANCE({v}.v)", f"STDDEV_POP({v}.w)",
            f"STDDEV_SAMP({v}.v)", f"STDDEV({v}.w)",
        ])))
    items = list(dict.fromkeys(items))
    if not any("(" in i for i in items):
        items.append("COUNT(*)")
    text = f"RETURN {', '.join(items)}\nPATTERN {render(p)}\nSEMANTICS {semantics}"
    if conjuncts:
        text += "\nWHERE " + " AND ".join(conjuncts)
    if group_by:
        text += "\nGROUP-BY " + ", ".join(dict.fromkeys(group_by))
    if windows and draw(st.booleans()):
        size = draw(st.integers(2, 6))
        slide = draw(st.integers(1, size))
        text += f"\nWITHIN {size} seconds" + (f" SLIDE {slide} seconds" if slide != size else "")
    types = set(auto.event_types) | {n.var.event_type for n in negations(p)}
    return GeneratedQuery(text, names, tuple(sorted(types)))


@st.composite
def cases(draw, windows: bool = True, grouping: bool = True, max_events: int = 10, nan: bool = False,
          extended: bool = True, spreads: bool = False):
    """A random query and a random stream mostly made of the query's event types
    (``nan``: some ``w`` values are NaN)."""
    q = draw(queries(windows=windows, grouping=grouping, extended=extended, spreads=spreads))
    return q, draw(streams(max_events=max_events, types=q.event_types, nan=nan))


@st.composite
def streams(draw, max_events: int = 10, types: tuple[str, ...] = TYPES, nan: bool = False) -> pa.Table:
    """A stream over ``types`` (mostly) and the irrelevant type X, times 0..n with ties."""
    n = draw(st.integers(0, max_events))
    weighted = st.one_of(st.sampled_from(types), st.sampled_from(types), st.sampled_from(types + ("X",)))
    types = draw(st.lists(weighted, min_size=n, max_size=n))
    times = sorted(draw(st.lists(st.integers(0, max(n, 3)), min_size=n, max_size=n)))
    if n and draw(st.integers(0, 9)) == 0:
        times[draw(st.integers(0, n - 1))] = None
    # Some streams hold negative v: sums over never-negative values drop their |x|-bound
    # channel (channels.channel_layout), and both layouts must meet the reference.
    lowest = draw(st.sampled_from([0, 0, -3]))
    v = draw(st.lists(st.one_of(st.integers(lowest, 4), st.none()), min_size=n, max_size=n))
    floats = [0.5, 1.25, -2.0, 3.0] * 2 + ([float("nan")] if nan else [])
    w = draw(st.lists(st.one_of(st.sampled_from(floats), st.none()), min_size=n, max_size=n))
    g = draw(st.lists(st.sampled_from([0, 1]), min_size=n, max_size=n))
    k = draw(st.lists(st.sampled_from(["p", "q"]), min_size=n, max_size=n))
    h = draw(st.lists(st.sampled_from([0, 1, None]), min_size=n, max_size=n))
    return pa.table({
        "type": pa.array(types, pa.string()),
        "time": pa.array(times, pa.int64()),
        "v": pa.array(v, pa.int64()),
        "w": pa.array(w, pa.float64()),
        "g": pa.array(g, pa.int64()),
        "k": pa.array(k, pa.string()),
        "h": pa.array(h, pa.int64()),
    })
