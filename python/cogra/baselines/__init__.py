"""Baseline trend aggregators that the benchmark (:mod:`cogra.bench`) compares cogra with.

The report's §9 compares COGRA with state-of-the-art approaches "implemented on top of
our platform".  Two of them live here, with the same inputs and outputs as
:func:`cogra.evaluate` for the subset of queries they support:

* :mod:`cogra.baselines.greta` -- GRETA-style event-grained graph aggregation
  (every matched event is a vertex with its own aggregate);
* :mod:`cogra.baselines.aseq` -- A-Seq-style prefix counters over the fixed-length
  sequence queries a Kleene pattern is flattened into.

The third contender, the two-step (SASE-style) evaluator, is :mod:`cogra.reference`.

This module holds what both baselines share, so that the comparison is about the
aggregation algorithm and not about the plumbing around it:

* parsing and binding reuse cogra's own front end (:func:`cogra.analysis.binding.bind`),
  so predicates, keys and windows mean exactly what they mean for the engine;
* rows are filtered (NULL time / NULL type), sorted by time and converted to numpy
  columns once; local predicates are evaluated column-at-a-time;
* sub-streams (plain keys, then variable-key combinations) and windows are found with
  vectorised numpy/Arrow code;
* per (window, output group) results are merged and typed by
  :func:`cogra.runtime.output.build_table`, so the output schema equals the engine's.

**Numbers are float64** in both baselines (the report's baselines use machine numbers
too): counts, sums and averages are exact while they stay below 2**53 and are rounded
beyond; a count past the double range becomes ``inf`` and is then reported through the
overflow policy (``on_overflow="error"`` raises, ``"null"`` gives NULL).  cogra itself
is exact; the baselines are performance contenders, not oracles.

Unsupported (raise :class:`NotSupported`, the report's "not applicable"): semantics
other than skip-till-any-match, MIN/MAX of non-numeric attributes, SUM/AVG of decimals,
date time columns; A-Seq additionally rejects predicates on adjacent events and patterns
other than ``SEQ`` of single variables and Kleene-plus variables.
"""

from __future__ import annotations

import itertools
import math
import warnings
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cogra.analysis.binding import BoundQuery, bind
from cogra.analysis.expressions import Val, evaluate, truth
from cogra.errors import CograDataWarning
from cogra.language.ast import Aggregate, AggFunc, AttrRef, Query, Semantics
from cogra.runtime.output import ON_OVERFLOW, ResultRow, build_table

__all__ = ["NotSupported", "BaselineLimitExceeded"]

MICROS = 1_000_000


class NotSupported(NotImplementedError):
    """The baseline cannot evaluate this query (the report: "not applicable")."""


class BaselineLimitExceeded(RuntimeError):
    """The baseline's state would exceed its configured size (reported as DNF)."""


# ---------------------------------------------------------------------------
# Columns
# ---------------------------------------------------------------------------


from cogra.runtime.columns import numpy_column  # noqa: E402  (one conversion for all)


def _codes(table: pa.Table, names: Sequence[str]) -> tuple[np.ndarray, list[tuple]]:
    """One integer code per row for the tuple of ``names`` values (NULL is a value),
    and the display tuple of each code."""
    n = table.num_rows
    if not names:
        return np.zeros(n, dtype=np.int64), [()]
    parts, dictionaries = [], []
    for name in names:
        col = table.column(name)
        col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        if pa.types.is_dictionary(col.type):
            col = col.dictionary_decode()
        enc = pc.dictionary_encode(col, null_encoding="encode")
        parts.append(np.asarray(enc.indices.to_numpy(zero_copy_only=False), dtype=np.int64))
        dictionaries.append(enc.dictionary.to_pylist())
    if not n:
        return np.zeros(0, dtype=np.int64), []
    stacked = np.stack(parts, axis=1)
    uniq, inverse = np.unique(stacked, axis=0, return_inverse=True)
    display = [tuple(d[int(c)] for d, c in zip(dictionaries, row)) for row in uniq]
    return inverse.reshape(-1).astype(np.int64), display


# ---------------------------------------------------------------------------
# Aggregate slots
# ---------------------------------------------------------------------------


@dataclass
class Slots:
    """The per-trend-set numbers the RETURN items need, as two float64 vectors.

    *Linear* slots add up over trend sets: slot 0 is the number of trends, then
    ``cnt V`` (V events over the trends), ``sum V.x`` and ``nn V.x`` (non-null V.x over
    the trends).  *Extreme* slots combine by min or max.  An event playing ``V``
    extends a set of ``c`` trends by adding ``c * coef`` to the linear slots (``coef`` is
    1 for ``cnt V``, ``x`` for ``sum V.x``, ``[x not null]`` for ``nn V.x``, 0 for slots
    of other variables) and by combining ``x`` into ``V``'s extreme slots.
    """

    linear: list[tuple[str, int | None, str | None]] = field(default_factory=lambda: [("count", None, None)])
    extreme: list[tuple[str, int, str]] = field(default_factory=list)
    finals: list[tuple] = field(default_factory=list)

    def lin(self, role: str, var: int, attr: str | None) -> int:
        key = (role, var, attr)
        if key not in self.linear:
            self.linear.append(key)
        return self.linear.index(key)

    def ext(self, role: str, var: int, attr: str) -> int:
        key = (role, var, attr)
        if key not in self.extreme:
            self.extreme.append(key)
        return self.extreme.index(key)

    @property
    def is_min(self) -> np.ndarray:
        return np.array([r == "min" for r, _, _ in self.extreme], dtype=np.bool_)

    @property
    def identity(self) -> np.ndarray:
        """The extreme slots of an empty set of trends (+inf for MIN, -inf for MAX)."""
        return np.where(self.is_min, np.inf, -np.inf).astype(np.float64)


def _build_slots(bound: BoundQuery, who: str) -> Slots:
    q = bound.query
    names = bound.automaton.names
    slots = Slots()
    for item in q.returns:
        agg = item.value
        if isinstance(agg, AttrRef):
            slots.finals.append(("group",))
            continue
        assert isinstance(agg, Aggregate)
        if agg.variable is None:
            slots.finals.append(("count", 0))
            continue
        v = names.index(agg.variable)
        if agg.attribute is None:
            slots.finals.append(("count", slots.lin("cnt", v, None)))
            continue
        t = bound.schema.field(agg.attribute).type
        numeric = pa.types.is_integer(t) or pa.types.is_floating(t)
        if not numeric:
            raise NotSupported(f"{who} aggregates float64 numbers only; {agg.text} is over {t}")
        if agg.func in (AggFunc.SUM, AggFunc.AVG):
            s = slots.lin("sum", v, agg.attribute)
            nn = slots.lin("nn", v, agg.attribute)
            slots.finals.append((agg.func.value, s, nn, pa.types.is_integer(t)))
        elif agg.func not in (AggFunc.MIN, AggFunc.MAX):
            raise NotSupported(f"{who} aggregates with COUNT, SUM, AVG, MIN and MAX only, not {agg.text}")
        else:
            role = "min" if agg.func is AggFunc.MIN else "max"
            slots.finals.append(("extreme", slots.ext(role, v, agg.attribute), pa.types.is_integer(t)))
    return slots


# ---------------------------------------------------------------------------
# The prepared query and table
# ---------------------------------------------------------------------------


@dataclass
class Prepared:
    """Everything a baseline needs, computed once per evaluation."""

    query: Query
    bound: BoundQuery
    schema: pa.Schema
    table: pa.Table  # valid rows, sorted by time
    times: np.ndarray  # int64 (int seconds or µs) or float64, per row of ``table``
    plays: np.ndarray  # bool (n_vars, n_rows): type matches and local predicates hold
    slots: Slots
    columns: dict[str, tuple[np.ndarray, np.ndarray]]
    counters: dict[str, int]
    window_size: Fraction | None
    window_step: Fraction | None

    @property
    def n_vars(self) -> int:
        return len(self.bound.automaton.names)

    def coefficients(self, rows: np.ndarray, variables: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For events ``rows`` playing ``variables`` (equal-length arrays): what each adds
        per trend to the linear slots (float64 (n, n_linear); slot 0 stays 0) and its value
        in the extreme slots (float64 (n, n_extreme); the identity where it has none)."""
        slots = self.slots
        n = len(rows)
        coef = np.zeros((n, len(slots.linear)), dtype=np.float64)
        xval = np.empty((n, len(slots.extreme)), dtype=np.float64)
        xval[:] = slots.identity
        for s, (role, var, attr) in enumerate(slots.linear):
            if role == "count":
                continue
            mine = variables == var
            if role == "cnt":
                coef[mine, s] = 1.0
            else:
                x, ok = self._floats(attr)
                coef[mine, s] = (x if role == "sum" else ok)[rows[mine]]
        for s, (role, var, attr) in enumerate(slots.extreme):
            mine = variables == var
            x, ok = self._floats(attr)
            r = rows[mine]
            xval[mine, s] = np.where(ok[r] > 0, x[r], slots.identity[s])
        return coef, xval

    def _floats(self, attr: str) -> tuple[np.ndarray, np.ndarray]:
        """An attribute as float64 (NULL -> 0) and its non-null indicator as float64."""
        cache = self.__dict__.setdefault("_float_cache", {})
        if attr not in cache:
            data, ok = self.columns[attr]
            cache[attr] = (np.where(ok, data.astype(np.float64), 0.0), ok.astype(np.float64))
        return cache[attr]


def prepare(query: Any, events: Any, *, type_column: str | None, time_column: str, who: str) -> Prepared:
    """Bind ``query`` to ``events`` with cogra's front end and precompute the columns."""
    from cogra.api import as_table, parse

    q = parse(query)
    table = as_table(events)
    bound = bind(q, table.schema, type_column=type_column, time_column=time_column)
    if q.semantics is not Semantics.ANY:
        raise NotSupported(f"{who} supports skip-till-any-match only, not {q.semantics.value}")
    if bound.automaton.repeated or bound.negations:
        raise NotSupported(f"{who} supports neither bounded quantifiers nor NOT (the report's Kleene "
                           "patterns only)")
    slots = _build_slots(bound, who)
    time_type = bound.time_type
    if pa.types.is_date(time_type):
        raise NotSupported(f"{who} does not support date time columns")

    # Rows -> events: drop NULL (and non-finite) times, then NULL types; sort by time.
    n_in = table.num_rows
    tcol = table.column(time_column)
    valid = pc.is_valid(tcol)
    if pa.types.is_floating(tcol.type):
        valid = pc.and_(valid, pc.is_finite(tcol))
    n_time = int(pc.sum(valid).as_py() or 0)
    if bound.type_column is not None:
        valid = pc.and_(valid, pc.is_valid(table.column(bound.type_column)))
    n_ok = int(pc.sum(valid).as_py() or 0)
    counters = {"rows_in": n_in, "rows_null_time": n_in - n_time, "rows_null_type": n_time - n_ok}
    table = table.filter(valid)
    table = table.take(pc.sort_indices(table, [(time_column, "ascending")]))
    times, _ = numpy_column(table.column(time_column))
    times = times.astype(np.float64 if pa.types.is_floating(time_type) else np.int64, copy=False)

    # Columns the predicates and aggregates read.
    needed = {s[2] for s in slots.linear if s[2]} | {s[2] for s in slots.extreme}
    for exprs in bound.local:
        for e in exprs:
            needed |= {c.name for c in e.find_all(_column_class())}
    for p in bound.adjacent:
        needed |= {c.name for c in p.expression.find_all(_column_class())}
    columns = {name: numpy_column(table.column(name)) for name in sorted(needed)}

    # Who may play each variable: type and local predicates.
    n = table.num_rows
    auto = bound.automaton
    types = None
    if bound.type_column is not None:
        types = np.asarray(table.column(bound.type_column).cast(pa.string()).to_numpy(zero_copy_only=False),
                           dtype=object)
    plays = np.zeros((len(auto.names), n), dtype=bool)
    for v, event_type in enumerate(auto.event_types):
        mask = np.ones(n, dtype=bool) if types is None else (types == event_type)
        for e in bound.local[v]:
            def env(role: str, attr: str) -> Val:
                data, ok = columns[attr]
                return Val(data, ok)

            mask &= truth(evaluate(e, env), n)
        plays[v] = mask

    size = step = None
    if q.window is not None:
        scale = MICROS if pa.types.is_timestamp(time_type) else 1
        size, step = q.window.size * scale, q.window.step * scale
    return Prepared(q, bound, bound.schema, table, times, plays, slots, columns, counters, size, step)


def _column_class():
    from sqlglot.expressions import Column

    return Column


# ---------------------------------------------------------------------------
# Sub-streams and windows
# ---------------------------------------------------------------------------


def substreams(prep: Prepared) -> Iterator[tuple[tuple, np.ndarray, np.ndarray]]:
    """Yield ``(output group values, rows, plays)`` per sub-stream.

    ``rows`` are indices into ``prep.table`` in time order (only rows that may play some
    variable: under skip-till-any-match nothing else matters); ``plays`` is the bool
    matrix (n_vars, len(rows)) of who may play what in this sub-stream.
    """
    b = prep.bound
    n_vars = prep.n_vars
    plain_code, plain_display = _codes(prep.table, b.plain_keys)
    var_codes = [(_codes(prep.table, keys) if keys else None) for keys in b.var_keys]
    relevant = prep.plays.any(axis=0)
    order = np.flatnonzero(relevant)
    order = order[np.argsort(plain_code[order], kind="stable")]
    bounds = np.flatnonzero(np.diff(plain_code[order])) + 1
    for rows in np.split(order, bounds):
        if not len(rows):
            continue
        pkey = plain_display[int(plain_code[rows[0]])]
        base = prep.plays[:, rows]
        choices: list[list[int | None]] = []
        for v in range(n_vars):
            if var_codes[v] is None:
                choices.append([None])
            else:
                choices.append(sorted(set(np.unique(var_codes[v][0][rows[base[v]]]).tolist())))
        for combo in itertools.product(*choices):
            masks = base.copy()
            for v, c in enumerate(combo):
                if c is not None:
                    masks[v] &= var_codes[v][0][rows] == c
            keep = masks.any(axis=0)
            if not keep.any():
                continue
            group = []
            for ref in b.query.group_by:
                if ref.variable is None:
                    group.append(pkey[b.plain_keys.index(ref.name)])
                else:
                    v = b.automaton.names.index(ref.variable)
                    group.append(var_codes[v][1][combo[v]][b.var_keys[v].index(ref.name)])
            yield tuple(group), rows[keep], masks[:, keep]


def _exact(t: Any) -> Fraction:
    return Fraction(t.item() if hasattr(t, "item") else t)


def windows(prep: Prepared, times: np.ndarray) -> list[tuple[Any, int, int]]:
    """The windows ``[k*step, k*step + size)`` holding any of ``times`` (sorted), as
    ``(bounds, lo, hi)`` with ``times[lo:hi]`` inside; bounds None without WITHIN."""
    n = len(times)
    if prep.window_size is None:
        return [(None, 0, n)] if n else []
    size, step = prep.window_size, prep.window_step
    ks: set[int] = set()
    for t in np.unique(times):
        ft = _exact(t)
        ks.update(range(math.floor((ft - size) / step) + 1, math.floor(ft / step) + 1))
    out = []
    for k in sorted(ks):
        start, end = k * step, k * step + size
        lo, hi = _index(times, start), _index(times, end)
        if hi > lo:
            out.append(((_plain(start), _plain(end)), lo, hi))
    return out


def _index(times: np.ndarray, bound: Fraction) -> int:
    """The first index whose time is >= ``bound`` (exact comparison)."""
    i = int(np.searchsorted(times, float(bound), side="left"))
    while i > 0 and _exact(times[i - 1]) >= bound:
        i -= 1
    while i < len(times) and _exact(times[i]) < bound:
        i += 1
    return i


def _plain(x: Fraction) -> Any:
    return int(x) if x.denominator == 1 else x


# ---------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------


class Results:
    """Per (window, output group): summed linear slots and combined extreme slots."""

    def __init__(self, prep: Prepared):
        self.prep = prep
        self.is_min = prep.slots.is_min
        self.groups: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}

    def add(self, window: Any, group: tuple, linear: np.ndarray, extreme: np.ndarray) -> None:
        if not linear[0] > 0:
            return
        key = (window, group)
        if key in self.groups:
            lin, ext = self.groups[key]
            lin += linear
            ext[:] = np.where(self.is_min, np.minimum(ext, extreme), np.maximum(ext, extreme))
        else:
            self.groups[key] = (linear.astype(np.float64).copy(), extreme.astype(np.float64).copy())

    def table(self, on_overflow: str) -> pa.Table:
        with np.errstate(over="ignore", invalid="ignore"):
            return self._table(on_overflow)

    def _table(self, on_overflow: str) -> pa.Table:
        prep = self.prep
        q = prep.query
        rows = []
        for (window, group), (lin, ext) in self.groups.items():
            values: list[Any] = []
            group_items = _group_positions(q)
            for i, f in enumerate(prep.slots.finals):
                if f[0] == "group":
                    values.append(group[group_items[i]])
                elif f[0] == "count":
                    values.append(_as_int(lin[f[1]]))
                elif f[0] == "extreme":
                    x = ext[f[1]]
                    if math.isinf(x):
                        values.append(None)
                    else:
                        values.append(int(x) if f[2] else float(x))
                else:
                    func, s, nn, integral = f
                    if not lin[nn] > 0:
                        values.append(None)
                    elif func == "SUM":
                        values.append(_as_int(lin[s]) if integral else float(lin[s]))
                    else:
                        values.append(float(lin[s] / lin[nn]))
            rows.append(ResultRow(window, tuple(values)))
        return build_table(q, prep.schema, rows, time_type=prep.bound.time_type, on_overflow=on_overflow,
                           metadata={f"cogra.{k}": v for k, v in prep.counters.items()})


def _group_positions(q: Query) -> dict[int, int]:
    """RETURN position of each grouping item -> its index in GROUP-BY."""
    out = {}
    texts = [g.text for g in q.group_by]
    for i, item in enumerate(q.returns):
        if isinstance(item.value, AttrRef):
            out[i] = texts.index(item.value.text)
    return out


_TOO_BIG = 2**70  # not an int64: the overflow policy of build_table applies


def _as_int(x: float) -> int:
    if not math.isfinite(x):
        return _TOO_BIG
    return int(round(x))


def check_overflow_policy(on_overflow: str) -> None:
    if on_overflow not in ON_OVERFLOW:
        raise ValueError(f"on_overflow must be one of {ON_OVERFLOW}, not {on_overflow!r}")


def warn_skipped(prep: Prepared) -> None:
    c = prep.counters
    if c["rows_null_time"] or c["rows_null_type"]:
        warnings.warn(
            f"{c['rows_null_time']} row(s) with a NULL time and {c['rows_null_type']} with a NULL "
            "type are not events and were skipped",
            CograDataWarning,
            stacklevel=3,
        )
