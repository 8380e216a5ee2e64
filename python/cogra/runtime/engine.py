"""Drive a table through the chosen executor, sub-stream by sub-stream, window by window.

Steps (docs/ARCHITECTURE.md fixes the rules):

1. drop and count rows with a NULL time (or NULL type), sort the rest by time;
2. per variable, which rows may play it: the type matches and its local predicates hold;
3. partition by the plain keys; within a partition, one sub-stream per combination of
   variable-key values;
4. per sub-stream, every window that holds an event able to play a variable; the
   window's events, batched by timestamp, go through the executor;
5. merge the per-sub-stream states into (window, output group) rows.
"""

from __future__ import annotations

import bisect
import itertools
from collections import defaultdict
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from sqlglot.expressions import Column as _Column

from cogra.analysis.expressions import ROLE_CUR, Val, evaluate, truth
from cogra.analysis.granularity import Executor
from cogra.analysis.plan import Plan
from cogra.language.ast import AttrRef
from cogra.runtime import mixed_grained, next_cont, type_grained
from cogra.runtime.aggregates import AttributeValues, Layout
from cogra.runtime.context import Batch, ExecContext, PairPredicates
from cogra.runtime.output import ResultRow
from cogra.runtime.windows import WindowSpec

Runner = Callable[[Sequence[Batch], ExecContext], "list | None"]

RUNNERS: dict[Executor, Runner] = {
    Executor.TYPE_GRAINED: type_grained.run,
    Executor.MIXED_GRAINED: mixed_grained.run,
    Executor.NEXT: lambda b, c: next_cont.run(b, c, contiguous=False),
    Executor.CONTIGUOUS: lambda b, c: next_cont.run(b, c, contiguous=True),
}


def numpy_column(col: pa.ChunkedArray | pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """``(data, valid)`` for vectorised predicates; NULLs get a harmless filler."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    t = col.type
    if pa.types.is_dictionary(t):
        col = col.dictionary_decode()
        t = col.type
    valid = np.asarray(col.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    if pa.types.is_timestamp(t):
        col = col.cast(pa.timestamp("us", tz=t.tz)).cast(pa.int64())
    elif pa.types.is_date(t):
        col = col.cast(pa.date32()).cast(pa.int32())
    elif pa.types.is_decimal(t):
        col = col.cast(pa.float64())
    if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
        data = np.asarray(pc.fill_null(col, "").to_numpy(zero_copy_only=False), dtype=object)
    elif pa.types.is_boolean(col.type):
        data = np.asarray(pc.fill_null(col, False).to_numpy(zero_copy_only=False), dtype=bool)
    elif pa.types.is_null(col.type):
        data = np.zeros(len(col))
    else:
        data = pc.fill_null(col, 0).to_numpy(zero_copy_only=False)
    return data, valid


def exact_times(col: pa.ChunkedArray) -> list:
    """Times as exact Python numbers: ints, floats (exact in comparisons), or µs."""
    t = col.type
    if pa.types.is_timestamp(t):
        return col.cast(pa.timestamp("us", tz=t.tz)).cast(pa.int64()).to_pylist()
    return col.to_pylist()


class Engine:
    """Evaluates one plan over one table; see the module docstring for the steps."""

    def __init__(self, plan: Plan, table: pa.Table):
        self.plan = plan
        b = plan.bound
        self.bound = b
        self.counters = {"rows_in": table.num_rows, "rows_null_time": 0, "rows_null_type": 0}
        valid = pc.is_valid(table.column(b.time_column))
        self.counters["rows_null_time"] = table.num_rows - int(pc.sum(valid).as_py() or 0)
        if b.type_column is not None:
            type_ok = pc.and_(valid, pc.is_valid(table.column(b.type_column)))
            self.counters["rows_null_type"] = int(pc.sum(valid).as_py() or 0) - int(
                pc.sum(type_ok).as_py() or 0
            )
            valid = type_ok
        table = table.filter(valid)
        table = table.take(pc.sort_indices(table, [(b.time_column, "ascending")]))
        self.table = table
        self.n = table.num_rows
        self.times = exact_times(table.column(b.time_column))
        self.windows = WindowSpec.of(b.query.window, b.time_type)
        self.layout = Layout(b.query, b.automaton.names, b.schema)
        self.values = AttributeValues(table, self.layout.attributes)
        pred_columns = sorted(
            {c.name for exprs in b.local for e in exprs for c in e.find_all(_Column)}
            | {c.name for p in b.adjacent for c in p.expression.find_all(_Column)}
        )
        self.columns = {name: numpy_column(table.column(name)) for name in pred_columns}
        self.ctx = ExecContext(b.automaton, self.layout, self.values, PairPredicates(b, self.columns))
        self.plays_mask = self._plays_masks()

    # -- per-variable masks ----------------------------------------------------------
    def _plays_masks(self) -> list[np.ndarray]:
        b = self.bound
        masks = []
        types = None
        if b.type_column is not None:
            types = np.asarray(
                self.table.column(b.type_column).cast(pa.string()).to_numpy(zero_copy_only=False),
                dtype=object,
            )
        for v, event_type in enumerate(b.automaton.event_types):
            mask = np.ones(self.n, dtype=bool) if types is None else (types == event_type)
            for e in b.local[v]:
                def env(role: str, attr: str) -> Val:
                    data, valid = self.columns[attr]
                    return Val(data, valid)

                mask &= truth(evaluate(e, env), self.n)
            masks.append(mask)
        if types is not None:
            self.irrelevant = ~np.isin(types, list(set(b.automaton.event_types)))
        else:
            self.irrelevant = np.zeros(self.n, dtype=bool)
        return masks

    # -- sub-streams ----------------------------------------------------------------------
    def _key_tuples(self, names: Sequence[str]) -> list[tuple]:
        if not names:
            return [()] * self.n
        cols = [self.table.column(k).to_pylist() for k in names]
        return list(zip(*cols))

    def substreams(self) -> Iterator[tuple[dict, np.ndarray, list[tuple[int, ...]]]]:
        """Yield ``(key values, rows, plays)`` per sub-stream; rows in time order."""
        b = self.bound
        n_vars = len(b.automaton.names)
        plain = self._key_tuples(b.plain_keys)
        var_key_values = [self._key_tuples(keys) if keys else None for keys in b.var_keys]
        partitions: dict[tuple, list[int]] = defaultdict(list)
        for row, key in enumerate(plain):
            partitions[key].append(row)
        for key, rows_list in partitions.items():
            rows = np.asarray(rows_list, dtype=np.int64)
            base = [self.plays_mask[v][rows] for v in range(n_vars)]
            choices: list[list[Any]] = []
            for v in range(n_vars):
                if var_key_values[v] is None:
                    choices.append([None])
                else:
                    vals = var_key_values[v]
                    choices.append(sorted({vals[r] for r in rows[base[v]]}, key=_tuple_order))
            for combo in itertools.product(*choices):
                masks = []
                for v in range(n_vars):
                    if combo[v] is None:
                        masks.append(base[v])
                    else:
                        vals = var_key_values[v]
                        masks.append(base[v] & np.fromiter(
                            (vals[r] == combo[v] for r in rows), dtype=bool, count=len(rows)))
                stacked = np.stack(masks) if masks else np.zeros((0, len(rows)), dtype=bool)
                any_play = stacked.any(axis=0)
                if not any_play.any():
                    continue
                keep = any_play | self.irrelevant[rows]
                sub_rows = rows[keep]
                sub = stacked[:, keep]
                plays = [tuple(np.flatnonzero(sub[:, i]).tolist()) for i in range(len(sub_rows))]
                keys = {"plain": dict(zip(b.plain_keys, key)), "vars": combo}
                yield keys, sub_rows, plays

    # -- windows and batches --------------------------------------------------------------
    def _batches(self, rows: np.ndarray, plays: list[tuple[int, ...]], lo: int, hi: int,
                 keep_idle: bool) -> list[Batch]:
        out: list[Batch] = []
        times = self.times
        i = lo
        while i < hi:
            t = times[rows[i]]
            j = i
            while j < hi and times[rows[j]] == t:
                j += 1
            sel = [k for k in range(i, j) if keep_idle or plays[k]]
            if sel:
                out.append(Batch(t, tuple(int(rows[k]) for k in sel), tuple(plays[k] for k in sel)))
            i = j
        return out

    def run(self) -> list[ResultRow]:
        b = self.bound
        runner = RUNNERS[self.plan.executor]
        keep_idle = self.plan.executor is Executor.CONTIGUOUS
        merged: dict[tuple, list] = {}
        for keys, rows, plays in self.substreams():
            sub_times = [self.times[r] for r in rows]
            active = [sub_times[i] for i in range(len(rows)) if plays[i]]
            for window in self.windows.windows_of(active):
                if window is None:
                    lo, hi = 0, len(rows)
                else:
                    lo = bisect.bisect_left(sub_times, window[0])
                    hi = bisect.bisect_left(sub_times, window[1])
                state = runner(self._batches(rows, plays, lo, hi, keep_idle), self.ctx)
                if state is None:
                    continue
                group = self._output_group(keys)
                slot = (window, group)
                if slot in merged:
                    self.layout.add_into(merged[slot], state)
                else:
                    merged[slot] = state
        results = []
        for (window, group), state in merged.items():
            values = list(self.layout.finalize(state, self.values))
            for i, g in zip(self._group_item_positions(), group):
                if i >= 0:
                    values[i] = g
            results.append(ResultRow(self.windows.bounds(window), tuple(values)))
        return results

    def _output_group(self, keys: dict) -> tuple:
        b = self.bound
        out = []
        for ref in b.query.group_by:
            if ref.variable is None:
                out.append(keys["plain"][ref.name])
            else:
                v = b.automaton.names.index(ref.variable)
                combo = keys["vars"][v]
                out.append(combo[b.var_keys[v].index(ref.name)])
        return tuple(out)

    def _group_item_positions(self) -> list[int]:
        """Positions of RETURN grouping items, in GROUP-BY order of their attribute."""
        q = self.bound.query
        pos = []
        for ref in q.group_by:
            hit = [i for i, it in enumerate(q.returns)
                   if isinstance(it.value, AttrRef) and it.value.text == ref.text]
            pos.append(hit[0] if hit else -1)
        return pos


def _tuple_order(values: tuple) -> tuple:
    """Sort key for key tuples that may hold NULLs (NULL first)."""
    return tuple((0, 0) if v is None else (1, v) for v in values)
