"""Exact trend aggregates as a small vector of slots (report section 8, Table 9).

Every executor keeps, for some set of partial trends (all trends ending at a
variable, at an event, or waiting under ``next``), one *state vector*:

=========  =======  ===========================================================
slot       combine  meaning over the set of trends
=========  =======  ===========================================================
count      add      number of trends (slot 0, always present)
cnt V      add      number of ``V`` events, summed over the trends
sum V.x    add      sum of non-null ``V.x`` over the trends, as an exact integer
                    (floats scaled by ``2**k``, decimals by ``10**scale``)
sq V.x     add      sum of the squares of those integers (the spreads' second sums)
inf V.x    fadd     sum of the non-finite float ``V.x`` (inf/nan), float
nn V.x     add      number of non-null ``V.x`` values over the trends
min/max    min/max  extreme non-null ``V.x`` over the trends (None: none)
=========  =======  ===========================================================

A state is *extended* by an event playing ``V``: the event continues (or starts)
``count`` trends, so it adds ``count`` to ``cnt V``, ``x * count`` to ``sum V.x``,
and so on.  All arithmetic is on Python integers, so nothing overflows and every
result is exact until :mod:`cogra.runtime.output` types it.

Each aggregate function over ``V.attr`` is one :class:`AggregateEntry` of
:data:`ENTRIES`: the slots it reads (by role), which of them it reads as exact numbers,
how its value is finished from them, and whether the compiled kernels evaluate it (its
typing is its :mod:`cogra.analysis.aggregates` entry).
Adding an aggregate whose state is made of these roles is one entry (and its
:mod:`cogra.analysis.aggregates` typing); see docs/ARCHITECTURE.md, "How to add an
aggregate".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cogra.language.ast import AggFunc, Aggregate, AttrRef, Query
from cogra.runtime import spread

ADD, FADD, MIN, MAX = "add", "fadd", "min", "max"

ROLE_KINDS = {"count": ADD, "cnt": ADD, "sum": ADD, "sq": ADD, "nn": ADD, "inf": FADD, "min": MIN, "max": MAX}
"""How two states' slots of each role combine (windows merged, shared sub-streams,
sliding panes): counts and exact sums add, the non-finite sum adds as a float, the
extremes keep the smaller or larger."""


@dataclass(frozen=True)
class AggregateEntry:
    """One aggregate function over ``V.attr``, as the slot machinery sees it."""

    func: AggFunc
    roles: tuple[str, ...]
    """The slots it reads, by role (``inf`` only where the attribute is floating)."""
    exact: frozenset[str]
    """The roles it reads as exact numbers; the others only as a ratio's parts or tested
    for zero (:attr:`Layout.ratio_only`: the compiled kernels may keep those in doubles)."""
    finish: Callable[[AggFunc, dict[str, Any], int], Any]
    """Its exact value from its slots' values (by role) and the attribute's scale
    (:class:`AttributeValues`); None for NULL."""
    kernels: bool = True
    """Whether the compiled kernels evaluate it; else a query using it runs on the Python
    executors, exactly, with a :class:`~cogra.errors.CograPerformanceWarning`
    (:func:`cogra.analysis.kernel_reach.python_only_parts` names it)."""
    exact_always: bool = False
    """Whether its exact roles must be exact at every size.  A SUM past int64 is an
    overflow and an AVG a ratio, so the kernels may hand them a huge slot's double
    approximation; a spread is a difference of huge terms that cancel, so a window whose
    slots the kernels cannot decode exactly re-runs on the exact path instead."""


def _finish_sum(func: AggFunc, v: dict[str, Any], scale: int) -> Any:
    if v["nn"] == 0:
        return None
    special = v.get("inf", 0.0)
    if special != 0.0:  # a non-finite input dominates: inf, -inf or nan
        return special
    total = Fraction(v["sum"], scale)
    return total if func is AggFunc.SUM else total / v["nn"]


def _finish_spread(func: AggFunc, v: dict[str, Any], scale: int) -> Any:
    return spread.finish(func.value, v["nn"], v["sum"], v["sq"], scale, v.get("inf", 0.0))


def _extreme(func: AggFunc, v: dict[str, Any], scale: int) -> Any:
    return v[func.value.lower()]


ENTRIES: dict[AggFunc, AggregateEntry] = {e.func: e for e in (
    AggregateEntry(AggFunc.MIN, ("min",), frozenset({"min"}), _extreme),
    AggregateEntry(AggFunc.MAX, ("max",), frozenset({"max"}), _extreme),
    AggregateEntry(AggFunc.SUM, ("sum", "inf", "nn"), frozenset({"sum"}), _finish_sum),
    AggregateEntry(AggFunc.AVG, ("sum", "inf", "nn"), frozenset(), _finish_sum),
    *(AggregateEntry(f, ("sum", "sq", "inf", "nn"), frozenset({"sum", "sq", "nn"}), _finish_spread,
                     exact_always=True)
      for f in (AggFunc.VAR_POP, AggFunc.VAR_SAMP, AggFunc.STDDEV_POP, AggFunc.STDDEV_SAMP)),
)}
"""Every aggregate over an attribute (``COUNT(*)`` and ``COUNT(V)`` are a slot each:
``count`` and ``cnt V``)."""


@dataclass(frozen=True)
class ItemSlots:
    """A RETURN item that aggregates an attribute, and where its entry's slots are."""

    position: int
    """Its position among the RETURN items."""
    entry: AggregateEntry
    slots: dict[str, int]
    """Its slots' indices in the state vector, by role."""
    attribute: str


@dataclass(frozen=True)
class Slot:
    kind: str  # ADD | FADD | MIN | MAX
    role: str  # count | cnt | sum | inf | nn | min | max
    states: tuple[int, ...]
    """The automaton states whose events write it: its variable's (none for the count)."""
    attribute: str | None


def _float_key(x: Any) -> Any:
    """Order floats as Spark does: NaN above every other value."""
    if isinstance(x, float) and math.isnan(x):
        return (1, 0.0)
    return (0, x)


class Layout:
    """The slots a query needs, and how one event updates them."""

    def __init__(self, query: Query, state_variables: Sequence[str], schema: pa.Schema):
        """``state_variables[s]``: the variable automaton state ``s`` binds
        (:attr:`cogra.analysis.automaton.Automaton.state_variables`)."""
        self.query = query
        self.names = tuple(state_variables)
        slots: list[Slot] = [Slot(ADD, "count", (), None)]
        index: dict[tuple, int] = {}

        def slot(kind: str, role: str, var: str, attr: str | None) -> int:
            key = (role, var, attr)
            if key not in index:
                index[key] = len(slots)
                states = tuple(i for i, name in enumerate(self.names) if name == var)
                slots.append(Slot(kind, role, states, attr))
            return index[key]

        self.finals: list[tuple] = []  # per RETURN item, how to read it from a state
        self.items: list[ItemSlots] = []
        """The RETURN items that aggregate an attribute."""
        for item in query.returns:
            agg = item.value
            if isinstance(agg, AttrRef):
                self.finals.append(("group",))
                continue
            assert isinstance(agg, Aggregate)
            if agg.variable is None:
                self.finals.append(("slot", 0))
                continue
            v = agg.variable
            if agg.attribute is None:
                self.finals.append(("slot", slot(ADD, "cnt", v, None)))
                continue
            entry = ENTRIES[agg.func]
            is_float = pa.types.is_floating(schema.field(agg.attribute).type)
            at = {role: slot(ROLE_KINDS[role], role, v, agg.attribute)
                  for role in entry.roles if role != "inf" or is_float}
            self.items.append(ItemSlots(len(self.finals), entry, at, agg.attribute))
            if agg.func in (AggFunc.SUM, AggFunc.AVG):  # (the shape the compiled finish reads)
                self.finals.append((agg.func.value, at["sum"], at.get("inf"), at["nn"], agg.attribute))
            elif agg.func in (AggFunc.MIN, AggFunc.MAX):
                self.finals.append(("slot", at[agg.func.value.lower()]))
            else:
                self.finals.append(("entry",))  # (finished from its entry: self.items)
        self.slots = tuple(slots)
        self.kinds = tuple(s.kind for s in slots)
        self.per_var: tuple[tuple[tuple[int, str, str | None], ...], ...] = tuple(
            tuple((i, s.role, s.attribute) for i, s in enumerate(slots) if v in s.states)
            for v in range(len(self.names))
        )
        self.attributes = tuple(sorted({s.attribute for s in slots if s.attribute}))
        self._zero = [0.0 if k == FADD else None if k in (MIN, MAX) else 0 for k in self.kinds]
        self.start_unit = list(self._zero)
        self.start_unit[0] = 1
        self.has_extremes = any(k in (MIN, MAX) for k in self.kinds)
        self.ratio_only = self._ratio_only_slots()
        self.exact_always = frozenset(item.slots[role] for item in self.items if item.entry.exact_always
                                      for role in item.entry.exact if role in item.slots)
        """The slots no approximation may stand for (:attr:`AggregateEntry.exact_always`)."""

    def _ratio_only_slots(self) -> frozenset[int]:
        """The ADD slots no RETURN item reads as an exact number: the sum and count behind
        an ``AVG`` (a double, whose quotient may come from double approximations of both --
        relative error ~1e-15, inside SEMANTICS' 1e-9), a ``SUM``'s count of non-null
        values (only ever tested for zero), and the trend count when ``COUNT(*)`` is not
        returned.  The compiled kernels keep such slots in doubles alone
        (:func:`cogra.runtime.compiled.channels.channel_layout`; sums only over values that are
        never negative, ``KernelDriver._approximate_slots``); the Python executors ignore
        this."""
        exact = {f[1] for f in self.finals if f[0] == "slot"}
        exact |= {item.slots[role] for item in self.items for role in item.entry.exact if role in item.slots}
        return frozenset(i for i, s in enumerate(self.slots)
                         if s.kind == ADD and s.role in ("count", "cnt", "nn", "sum", "sq") and i not in exact)

    def not_compiled(self) -> list[str]:
        """The functions the compiled kernels do not evaluate (:attr:`AggregateEntry.kernels`),
        by name; empty where they evaluate every aggregate."""
        return sorted({item.entry.func.value for item in self.items if not item.entry.kernels})

    # -- vector algebra --------------------------------------------------------
    def zero(self) -> list:
        return list(self._zero)

    def add_into(self, acc: list, vec: list) -> None:
        """acc += vec, slot by slot."""
        for i, kind in enumerate(self.kinds):
            b = vec[i]
            if kind == ADD or kind == FADD:
                if b:
                    acc[i] += b
            elif b is not None:
                a = acc[i]
                if a is None:
                    acc[i] = b
                elif kind == MIN:
                    if _float_key(b) < _float_key(a):
                        acc[i] = b
                elif _float_key(b) > _float_key(a):
                    acc[i] = b

    def extend(self, vec: list, var: int, row: int, values: "AttributeValues") -> None:
        """Apply the contribution of the event at ``row`` playing ``var`` (in place).

        ``vec`` already holds the trends it continues plus, for a start variable, the
        one trend it begins; ``vec[0]`` is how many trends now end at this event.
        """
        count = vec[0]
        if count == 0:
            return
        for i, role, attr in self.per_var[var]:
            if role == "cnt":
                vec[i] += count
                continue
            x = values.exact[attr][row] if role == "sum" or role == "sq" else values.raw[attr][row]
            if x is None:
                continue
            if role == "sum":
                vec[i] += x * count
            elif role == "sq":
                vec[i] += x * x * count
            elif role == "nn":
                vec[i] += count
            elif role == "inf":
                if not math.isfinite(x):
                    vec[i] += x
            else:  # min / max
                a = vec[i]
                if a is None or (
                    _float_key(x) < _float_key(a) if role == MIN else _float_key(x) > _float_key(a)
                ):
                    vec[i] = x

    # -- results ------------------------------------------------------------------
    def finalize(self, state: list, scales: dict[str, int]) -> tuple:
        """Exact value of each RETURN item (None for grouping items, filled by the caller)."""
        out: list[Any] = []
        for f in self.finals:
            if f[0] == "group":
                out.append(None)
            elif f[0] == "slot":
                out.append(state[f[1]])
            else:
                out.append(None)  # (an aggregate over an attribute: below)
        for item in self.items:
            entry = item.entry
            out[item.position] = entry.finish(entry.func, {role: state[i] for role, i in item.slots.items()},
                                              scales[item.attribute])
        return tuple(out)


def layout_of(bound: Any) -> Layout:
    """The layout of a bound query, built once (``BoundQuery.memo``): the engine and the
    physical plan read the same one."""
    memo = bound.memo
    if "layout" not in memo:
        memo["layout"] = Layout(bound.query, bound.automaton.state_variables, bound.schema)
    return memo["layout"]


class AttributeValues:
    """Per-row attribute values of a table, in the forms the slots need.

    ``raw[attr][row]``: the Python value (None for NULL) for MIN/MAX and non-null
    tests.  ``exact[attr][row]``: an integer ``x * scale[attr]`` (exact for ints,
    floats and decimals) or None for NULL and non-finite floats.
    """

    def __init__(self, table: pa.Table, attributes: Sequence[str],
                 scales: dict[str, int]):
        self.raw: dict[str, list] = {}
        self.exact: dict[str, list] = {}
        self.scale = scales
        for attr in attributes:
            col = table.column(attr)
            raw = col.to_pylist()
            self.raw[attr] = raw
            t = col.type
            k = self.scale[attr]
            if pa.types.is_floating(t) and self._fits_int64(col, k):
                flts = pc.fill_null(col, float("nan")).to_numpy(zero_copy_only=False)
                finite = np.isfinite(flts)
                scaled = (np.where(finite, flts, 0.0) * float(k)).astype(np.int64).tolist()
                self.exact[attr] = [s if ok else None for s, ok in zip(scaled, finite.tolist())]
            elif pa.types.is_floating(t):
                self.exact[attr] = [
                    None if x is None or not math.isfinite(x) else int(Fraction(x) * k) for x in raw
                ]
            elif pa.types.is_decimal(t):
                self.exact[attr] = [None if x is None else int(x.scaleb(t.scale)) for x in raw]
            elif pa.types.is_integer(t):
                self.exact[attr] = raw
            else:
                self.exact[attr] = [None] * len(raw)


    @staticmethod
    def _fits_int64(col: pa.ChunkedArray, k: int) -> bool:
        """Whether every finite ``x * k`` is below 2**62 (then float arithmetic is exact)."""
        x = pc.drop_null(col).to_numpy(zero_copy_only=False)
        x = x[np.isfinite(x)]
        # (exactly: a scale that reaches tiny values is past the double range itself)
        return x.size == 0 or Fraction(float(np.abs(x).max())) * k < 2**62
