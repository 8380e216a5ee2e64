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
inf V.x    fadd     sum of the non-finite float ``V.x`` (inf/nan), float
nn V.x     add      number of non-null ``V.x`` values over the trends
min/max    min/max  extreme non-null ``V.x`` over the trends (None: none)
=========  =======  ===========================================================

A state is *extended* by an event playing ``V``: the event continues (or starts)
``count`` trends, so it adds ``count`` to ``cnt V``, ``x * count`` to ``sum V.x``,
and so on.  All arithmetic is on Python integers, so nothing overflows and every
result is exact until :mod:`cogra.runtime.output` types it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cogra.language.ast import AggFunc, Aggregate, AttrRef, Query

ADD, FADD, MIN, MAX = "add", "fadd", "min", "max"


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
            elif agg.func in (AggFunc.SUM, AggFunc.AVG):
                is_float = pa.types.is_floating(schema.field(agg.attribute).type)
                s = slot(ADD, "sum", v, agg.attribute)
                inf = slot(FADD, "inf", v, agg.attribute) if is_float else None
                nn = slot(ADD, "nn", v, agg.attribute)
                self.finals.append((agg.func.value, s, inf, nn, agg.attribute))
            else:
                kind = MIN if agg.func is AggFunc.MIN else MAX
                self.finals.append(("slot", slot(kind, kind, v, agg.attribute)))
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

    def _ratio_only_slots(self) -> frozenset[int]:
        """The ADD slots no RETURN item reads as an exact number: the sum and count behind
        an ``AVG`` (a double, whose quotient may come from double approximations of both --
        relative error ~1e-15, inside SEMANTICS' 1e-9), a ``SUM``'s count of non-null
        values (only ever tested for zero), and the trend count when ``COUNT(*)`` is not
        returned.  The compiled kernels keep such slots in doubles alone
        (:func:`cogra.runtime.compiled.channels.channel_layout`; sums only over values that are
        never negative, ``KernelDriver._approximate_slots``); the Python executors ignore
        this."""
        exact = {f[1] for f in self.finals if f[0] in ("slot", "SUM")}
        return frozenset(i for i, s in enumerate(self.slots)
                         if s.kind == ADD and s.role in ("count", "cnt", "nn", "sum") and i not in exact)

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
            x = values.exact[attr][row] if role == "sum" else values.raw[attr][row]
            if x is None:
                continue
            if role == "sum":
                vec[i] += x * count
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
                func, s, inf, nn, attr = f
                n = state[nn]
                if n == 0:
                    out.append(None)
                    continue
                special = state[inf] if inf is not None else 0.0
                if special != 0.0:  # a non-finite input dominates: inf, -inf or nan
                    out.append(special)
                    continue
                total = Fraction(state[s], scales[attr])
                out.append(total if func == "SUM" else total / n)
        return tuple(out)


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
        return x.size == 0 or float(np.abs(x).max()) * k < 2.0**62
