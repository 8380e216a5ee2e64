"""Drive a table through the chosen executor, sub-stream by sub-stream, window by window.

Steps (docs/ARCHITECTURE.md fixes the rules):

1. drop and count rows with a NULL time (or NULL type), sort the rest by time;
2. per variable, which rows may play it (type and local predicates) -- one bit each;
3. partition by the plain keys; within a partition, one sub-stream per combination of
   variable-key values; all sub-streams are concatenated into flat arrays;
4. every window of every sub-stream that holds an event able to play a variable;
5. evaluate the windows -- all at once in a compiled kernel when the query allows
   (:mod:`cogra.runtime.compiled`), else, or where the kernel cannot prove a value exact,
   with the pure-Python executors -- and merge the states into (window, group) rows.

Everything up to step 5 is vectorised; only the executors loop over events.
"""

from __future__ import annotations

import bisect
import warnings
import itertools
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from cogra.runtime.arrow_arrays import one_array, take
from cogra.analysis.expressions import ROLE_NEXT, Val, evaluate, truth
from cogra.analysis.granularity import Executor
from cogra.runtime.compiled.codes import PAIR_WORD_BITS, edge_bits
from cogra.analysis.plan import Plan
from cogra.errors import CograError, CograPerformanceWarning
from cogra.language.ast import AttrRef
from cogra.runtime.executors import mixed_grained
from cogra.runtime.executors import pattern_grained
from cogra.runtime.executors import type_grained
from cogra.runtime.aggregates import AttributeValues, layout_of
from cogra.runtime.context import Batch, ExecContext, PairPredicates
from cogra.runtime.output import ResultRow, build_table, check_window_range
from cogra.runtime.compiled.event_types import TypeCodes, type_codes
from cogra.runtime.physical import PhysicalPlan, WindowRun, physical_plan
from cogra.runtime.compiled.time_order import ascending
from cogra.runtime.compiled.substream_split import combination_rows, play_bits, whole_table_rows
from cogra.runtime.windows import WindowSpec, enumerate_windows, is_integral
from cogra.runtime.columns import (canonical_keys, dictionary_type_codes, key_codes, micros, numpy_column,
                                   stable_order, without_halves)

Runner = Callable[..., "list | None"]  # (batches, ctx, cut=None)

RUNNERS: dict[Executor, Runner] = {
    Executor.TYPE_GRAINED: type_grained.run,
    Executor.MIXED_GRAINED: mixed_grained.run,
    Executor.NEXT: lambda b, c, cut=None: pattern_grained.run(b, c, contiguous=False, cut=cut),
    Executor.CONTIGUOUS: lambda b, c, cut=None: pattern_grained.run(b, c, contiguous=True, cut=cut),
}


@dataclass
class Windows:
    """The windows to evaluate: window ``w`` of segment ``seg[w]`` holds events ``lo[w]:hi[w]``.

    Integral windows (and the single window without WITHIN) have int64 ``start`` values
    and ``size`` (None without WITHIN); fractional ones have ``exact_bounds`` instead.
    """

    seg: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    start: np.ndarray | None = None
    size: int | None = None
    exact_bounds: list | None = None

    def bounds(self) -> list:
        """``(start, end)`` per window (None without WITHIN), as ResultRow wants them."""
        if self.exact_bounds is not None:
            return self.exact_bounds
        if self.size is None:
            return [None] * len(self.seg)
        return [(s, s + self.size) for s in self.start.tolist()]


@dataclass
class SubStreams:
    """All sub-streams, concatenated: segment ``s`` is ``rows[seg_ptr[s]:seg_ptr[s+1]]``."""

    rows: np.ndarray  # table row of each event
    bits: np.ndarray  # uint64: variables it may play in its sub-stream
    seg_ptr: np.ndarray
    groups: list[tuple]  # output group (GROUP-BY values) per segment
    keys: list[tuple] | None = None  # per segment: (plain key values, variable-key values)
    codes: list[tuple] | None = None  # per segment: (plain key code, variable-key codes) -- as keys,
    # but distinct where values compare equal (0.0 and -0.0 are two sub-streams)


class Engine:
    """Evaluates one plan over one table; see the module docstring for the steps."""

    def __init__(self, plan: Plan, table: pa.Table, *, compiled: bool | None = None):
        self.plan = plan
        b = plan.bound
        self.bound = b
        self.counters = {"rows_in": table.num_rows, "rows_null_time": 0, "rows_null_type": 0}
        time_col = table.column(b.time_column)
        type_col = table.column(b.type_column) if b.type_column is not None else None
        if (time_col.null_count or pa.types.is_floating(time_col.type)
                or (type_col is not None and type_col.null_count)):  # (else every row is an event)
            valid = pc.is_valid(time_col)
            if pa.types.is_floating(time_col.type):  # NaN and infinite times are no times either
                valid = pc.and_(valid, pc.fill_null(pc.is_finite(time_col), False))
            n_valid_time = int(pc.sum(valid).as_py() or 0)
            self.counters["rows_null_time"] = table.num_rows - n_valid_time
            if type_col is not None:
                valid = pc.and_(valid, pc.is_valid(type_col))
                self.counters["rows_null_type"] = n_valid_time - int(pc.sum(valid).as_py() or 0)
            if int(pc.sum(valid).as_py() or 0) != table.num_rows:
                table = table.filter(valid)
        # Keep only the columns the query reads; sort by time unless already sorted.
        table = canonical_keys(without_halves(table.select(list(b.columns_used))),
                               {*b.plain_keys, *(a for keys in b.var_keys for a in keys)})
        times = one_array(table.column(b.time_column))
        if pa.types.is_timestamp(times.type):
            times = times.cast(pa.int64())
        times_np = times.to_numpy(zero_copy_only=False)
        # The type codes are read in the table's order, checking that order on the way;
        # a table that must be sorted takes its codes along (one byte per row).
        type_names = sorted(set(b.automaton.event_types) | {n.event_type for n in b.negations})
        found = (type_codes(table.column(b.type_column), type_names, times_np)
                 if b.type_column is not None else None)
        ordered = found.ordered if found is not None and found.ordered is not None else ascending(times_np)
        self._plain_codes = None
        if not ordered and b.plain_keys:
            # Sorted by key, then time (as Spark hands a partition over): every sub-stream
            # lies within one key and is in time order already -- no sort needed.
            codes = key_codes(table, b.plain_keys)
            by_key = stable_order(codes[0], len(codes[1]))
            same_key = np.diff(codes[0][by_key]) == 0
            if bool(np.all(np.diff(times_np[by_key])[same_key] >= 0)):
                ordered, self._plain_codes = True, codes
        if ordered:
            self.table = table
        else:
            by_time = pc.sort_indices(table, [(b.time_column, "ascending")])
            self.table = table.take(by_time)
            if found is not None:
                found = found._replace(codes=found.codes[by_time.to_numpy()], ordered=True)
        self.n = self.table.num_rows
        col = self.table.column(b.time_column)
        if ordered and not pa.types.is_timestamp(col.type):  # (already read above, in order)
            self.time_np = np.asarray(times_np, dtype=np.int64 if pa.types.is_integer(col.type) else np.float64)
        else:
            self.time_np = self._numeric_times()
        memo = b.memo  # (built once per bound query: cogra.analysis.binding.BoundQuery.memo)
        if "engine" not in memo:
            memo["engine"] = (WindowSpec.of(b.query.window, b.time_type), layout_of(b))
        self.windows, self.layout = memo["engine"]
        if self.n and self.windows.size is not None and self.time_np.dtype.kind == "i":
            check_window_range(int(self.time_np.min()), int(self.time_np.max()), self.windows.size,
                               self.windows.step, b.query.window)
        self.columns = {name: numpy_column(self.table.column(name)) for name in b.predicate_columns}
        self.pairs = PairPredicates(b, self.columns)
        self.absent_types: tuple[str, ...] = ()
        """Pattern types no event of the input has (a misspelled type matches nothing)."""
        self._row_types(type_names, found)
        if b.guarding_negations:
            self._blocker_counts()
        self._cuts: tuple[Any, Any] | None = None
        """(the windows they were computed for, their absence cut-offs: :meth:`cuts_of`)"""
        self.use_compiled = compiled
        self.idle_events_matter = False
        """Streaming under contiguous: an irrelevant event alone must reach the states it
        breaks, so its sub-stream and windows are kept (see cogra.runtime.stream)."""
        self.stats = {"windows": 0, "windows_fast": 0, "windows_exact": 0}
        self._times_at: tuple[np.ndarray, np.ndarray] | None = None
        self._trend_ends: tuple[np.ndarray, tuple[np.ndarray, np.ndarray]] | None = None
        """(the sub-streams' play bits it was computed from, enumeration.trend_ends)"""
        self.float_stats: dict = {}
        """Per floating attribute, its :class:`~cogra.runtime.compiled.attribute_columns.FloatStats`
        (filled with :attr:`scales`; the compiled executor's layout reads them)."""
        self.scratch: dict = {}
        """Working arrays of the kernels and the finish, reused block after block of
        windows (:mod:`cogra.runtime.compiled.scratch`)."""

    # -- per-row facts ---------------------------------------------------------------
    def _numeric_times(self) -> np.ndarray:
        """Times as numbers: seconds, or µs since the epoch for timestamps (floored)."""
        col = self.table.column(self.bound.time_column)
        if pa.types.is_timestamp(col.type):
            return micros(col)
        return np.asarray(col.to_numpy(), dtype=np.int64 if pa.types.is_integer(col.type) else np.float64)

    @cached_property
    def times(self) -> list:
        """Exact times for the Python path: ints, floats, or µs."""
        col = self.table.column(self.bound.time_column)
        if pa.types.is_timestamp(col.type):
            return self.time_np.tolist()
        return col.to_pylist()

    @cached_property
    def values(self) -> AttributeValues:
        return AttributeValues(self.table, self.layout.attributes, self.scales)

    @cached_property
    def ctx(self) -> ExecContext:
        return ExecContext(self.bound.automaton, self.layout, self.values, self.pairs)

    def _row_types(self, named: list[str], found: TypeCodes | None) -> None:
        """Each row's event type as a small code (``found``: :func:`type_codes`' codes of
        the ``named`` types, where that pass applied), and what a code means: the play bits of
        its type's states (:attr:`type_bits`) and whether the pattern names it at all
        (:attr:`type_irrelevant`); each variable's local predicates as a mask over rows
        with the states they narrow (:attr:`local_bits`, :attr:`local_ok`).  The
        sub-streams' play bits are folded from these in one compiled pass
        (:func:`~cogra.runtime.compiled.substream_split.play_bits`); a boolean mask per
        state took a pass per state and two more to fold them."""
        b = self.bound
        a = b.automaton
        col = self.table.column(b.type_column) if b.type_column is not None else None
        if col is None:  # every row has every type: code 0 for all, and "another type" is none
            names: list = []
            codes = np.zeros(self.n, np.int8)
            present = set(a.event_types)
        else:
            names = list(named)
            if found is not None:  # a string column, its named types compared in one pass
                codes, seen = found.codes, found.seen
                present = {n for n, hit in zip(names, seen.tolist()) if hit}
            else:
                col = one_array(col)
                if not pa.types.is_dictionary(col.type):
                    col = pc.dictionary_encode(col.cast(pa.string()))
                names = col.dictionary.cast(pa.string()).to_pylist()
                present = set(names)
                codes = dictionary_type_codes(col.indices, len(names))
        self.absent_types = () if self.n == 0 else tuple(
            t for t in dict.fromkeys(a.event_types) if t not in present)
        index = {n: i for i, n in enumerate(names)}
        self._type_index = index
        self._type_codes = codes
        self.type_bits = np.zeros(len(names) + 1, np.uint64)
        """Per type code: the states its rows may play (before local predicates)."""
        self.type_irrelevant = np.ones(len(names) + 1, bool)
        """Per type code: whether the pattern's variables do not name it (negated types aside)."""
        for v, t in enumerate(a.event_types):
            c = 0 if col is None else index.get(t)  # (None: a type the dictionary lacks, no row has it)
            if c is not None:
                self.type_bits[c] |= np.uint64(1 << v)
                self.type_irrelevant[c] = False
        # States of one variable (repetitions, presence copies) share its type and local
        # predicates, so they share one mask.
        slot_of: dict[str, int] = {}
        local_bits: list[int] = []
        local_ok: list[np.ndarray] = []
        for v, variable in enumerate(a.state_variables):
            if not b.local[v]:
                continue
            if variable not in slot_of:
                slot_of[variable] = len(local_bits)
                local_bits.append(0)
                local_ok.append(self._local_truth(b.local[v]))
            local_bits[slot_of[variable]] |= 1 << v
        self.local_bits = np.asarray(local_bits, np.uint64)
        """Per variable with local predicates: its states' bits (rows ``local_ok`` refuses do not play them)."""
        self.local_ok = np.stack(local_ok) if local_ok else np.zeros((0, 1), bool)
        self.blocker_masks = [self._rows_of_type(neg.event_type) & self._local_truth(neg.local)
                              if neg.local else self._rows_of_type(neg.event_type) for neg in b.negations]
        """Per negation: the rows that block its guarded steps (its type, its local predicates)."""

    def _local_truth(self, local: Sequence) -> np.ndarray:
        """Per row, whether it satisfies every predicate of ``local`` (a variable's)."""
        mask = np.ones(self.n, dtype=bool)
        for e in local:
            mask &= truth(evaluate(e, lambda role, attr: Val(*self.columns[attr])), self.n)
        return mask

    def _rows_of_type(self, event_type: str) -> np.ndarray:
        """Per row, whether it has type ``event_type`` (every row, without a type column)."""
        if self.bound.type_column is None:
            return np.ones(self.n, dtype=bool)
        code = self._type_index.get(event_type)
        return np.zeros(self.n, dtype=bool) if code is None else self._type_codes == code

    def _row_play_bits(self) -> np.ndarray:
        """Per row, the states it may play (its type's, narrowed by local predicates)."""
        return play_bits(self._type_codes, self.type_bits, self.local_bits, self.local_ok)

    @cached_property
    def irrelevant(self) -> np.ndarray:
        """Per row, whether its type is none of the pattern's variables' (negated types aside)."""
        return self.type_irrelevant[self._type_codes]

    def _partition_codes(self) -> tuple[np.ndarray, np.ndarray]:
        """:func:`key_codes` of the plain keys, computed once per engine (the blocker counts
        and the sub-streams both need them)."""
        if self._plain_codes is None:
            self._plain_codes = key_codes(self.table, self.bound.plain_keys)
        return self._plain_codes

    def partition_of_rows(self) -> np.ndarray:
        """Per table row, its partition's code (the plain keys'; 0 for all without keys)."""
        if not self.bound.plain_keys:
            return np.zeros(self.n, np.int64)
        return np.asarray(self._partition_codes()[0], np.int64)

    def cuts_of(self, subs: "SubStreams", wins: "Windows") -> Any:
        """The absence cut-offs of ``wins`` (:func:`cogra.runtime.absence.cutoffs`; None
        without an edge negation), computed once per array of windows."""
        if self.bound.leading is None and self.bound.trailing is None:
            return None
        if self._cuts is None or self._cuts[0] is not wins:
            from cogra.runtime.absence import cutoffs

            self._cuts = (wins, cutoffs(self, subs, wins))
        return self._cuts[1]

    def _blocker_counts(self) -> None:
        """The negations' derived columns (:data:`cogra.analysis.binding.NEGATION_COLUMN`):
        per row, its partition's blocking events up to its time (``lo``) and before it
        (``hi``).  Counted over the rows sorted by partition and time, so two rows of one
        partition differ by exactly the blockers between them; windows need nothing: a
        blocker between two events of a window lies in it.  Variable keys do not restrict
        blockers (docs/language.md, Negation).  Rows are in time order within each partition
        (``__init__``), so a stable counting sort by partition gives (partition, time)."""
        b = self.bound
        n = self.n
        if b.plain_keys:
            pid, reps = self._partition_codes()
            order = stable_order(pid, len(reps))
        else:
            pid, order = np.zeros(n, np.int64), np.arange(n, dtype=np.int64)
        t, p = self.time_np[order], pid[order]
        new = np.ones(n, dtype=bool)
        new[1:] = (p[1:] != p[:-1]) | (t[1:] != t[:-1])
        run_start = np.flatnonzero(new)
        run_end = np.append(run_start[1:], n)
        run = np.cumsum(new) - 1
        valid = np.ones(n, dtype=bool)
        for neg, blocks in zip(b.negations, self.blocker_masks):
            if neg.edge is not None:
                continue  # an absence: cut-offs per window instead (cogra.runtime.absence)
            before = np.concatenate([[0], np.cumsum(blocks[order], dtype=np.int64)])
            lo, hi = np.empty(n, np.int64), np.empty(n, np.int64)
            lo[order] = before[run_end[run]]
            hi[order] = before[run_start[run]]
            self.columns[neg.lo] = (lo, valid)
            self.columns[neg.hi] = (hi, valid)

    def pair_ok_bits(self) -> np.ndarray:
        """Per row, edge ``(u, v)``'s bit (:func:`~cogra.runtime.compiled.codes.edge_bits`):
        playing v it may follow u (predicates on the new event only)."""
        edge = edge_bits(self.bound.automaton.pred)
        bits = np.full(self.n, np.iinfo(np.uint64).max, dtype=np.uint64)
        for (u, v), preds in self.pairs.by_pair.items():
            alone = [p for p in preds if not p.uses_prev]  # (the others: checked per pair by the executor)
            if not alone:
                continue
            if edge[(u, v)] >= PAIR_WORD_BITS:
                continue  # no bit: indexed per pair (kernel_reach.checks_past_the_word)
            bits[~self.new_event_passes(alone)] &= ~np.uint64(1 << edge[(u, v)])
        return bits

    def new_event_passes(self, preds: Sequence[Any]) -> np.ndarray:
        """Per row, whether it passes ``preds``, predicates on adjacent events that read the
        new event alone."""
        ok = np.ones(self.n, dtype=bool)
        for p in preds:
            ok &= truth(evaluate(p.expression, lambda role, attr: Val(*self.columns[attr])), self.n)
        return ok

    def contiguous_pair_ok_bits(self, subs: "SubStreams", bits: np.ndarray) -> np.ndarray | None:
        """``bits`` (:meth:`pair_ok_bits`) with the predicates that read the earlier event
        folded in, as a new array, under ``contiguous`` where that is exact; else None.

        Under ``contiguous`` an event's only possible predecessors are the events at the
        sub-stream's previous timestamp (docs/language.md, Event matching semantics: nothing
        may lie strictly
        between).  When that timestamp holds a single event, the predecessor is a fact of
        the stream, not of a partial trend, so ``A.x < NEXT(A).x`` can be decided per row
        like a predicate on the new event alone -- and the variable needs no per-event
        state: the pattern-grained kernel (and window sharing) apply.  It needs each row in
        one sub-stream (no variable keys) and no tie at any predecessor timestamp; a
        window's first event has its predecessor outside the window, where the kernel's
        state is empty, so windows need nothing extra.
        """
        b = self.bound
        if self.plan.executor is not Executor.CONTIGUOUS or any(b.var_keys):
            return None
        pos_rows = subs.rows
        n_pos = len(pos_rows)
        prev_row = np.arange(self.n, dtype=np.int64)  # rows without a predecessor: themselves
        has_prev = np.zeros(self.n, dtype=bool)
        if n_pos > 1:
            t = self.time_np[pos_rows]
            seg_start = np.zeros(n_pos, dtype=bool)
            seg_start[subs.seg_ptr[:-1][subs.seg_ptr[:-1] < n_pos]] = True
            new_time = np.ones(n_pos, dtype=bool)
            new_time[1:] = t[1:] != t[:-1]
            new_time |= seg_start
            # First position of each position's time group, and of the group before it.
            group_first = np.maximum.accumulate(np.where(new_time, np.arange(n_pos), 0))
            before = group_first - 1
            exists = (group_first > 0) & ~seg_start[group_first]
            prev_first = group_first[np.maximum(before, 0)]
            if bool(np.any(exists & (prev_first != before))):
                return None  # a tie at some predecessor timestamp: kept per event
            idx = np.flatnonzero(exists)
            prev_row[pos_rows[idx]] = pos_rows[before[idx]]
            has_prev[pos_rows[idx]] = True
        edge = edge_bits(b.automaton.pred)
        bits = bits.copy()
        for (u, v), preds in self.pairs.by_pair.items():
            reading = [p for p in preds if p.uses_prev]
            if not reading:
                continue
            if edge[(u, v)] >= PAIR_WORD_BITS:
                return None  # no bit to fold it into: kept per event
            ok = np.ones(self.n, dtype=bool)
            for p in reading:
                def env(role: str, attr: str, _prev=prev_row) -> Val:
                    data, valid = self.columns[attr]
                    if role == ROLE_NEXT:
                        return Val(data, valid)
                    return Val(data[_prev], valid[_prev])
                ok &= truth(evaluate(p.expression, env), self.n)
            bits[has_prev & ~ok] &= ~np.uint64(1 << edge[(u, v)])
        return bits

    # -- sub-streams ----------------------------------------------------------------------
    def substreams(self) -> SubStreams:
        b = self.bound
        nv = len(b.automaton.names)
        keep_idle = self.plan.executor is Executor.CONTIGUOUS
        if not b.plain_keys and not b.keyed_states and nv:
            return self._whole_table(keep_idle)
        bits_all = self._row_play_bits() if nv else np.zeros(self.n, dtype=np.uint64)
        pid, pid_rep = self._partition_codes()
        # One partition (no plain keys): the rows are in order already, nothing to gather.
        one = len(pid_rep) <= 1
        order = stable_order(pid, len(pid_rep))
        pid_sorted = pid if one else pid[order]
        bounds = np.zeros(0, np.int64) if one else np.flatnonzero(np.diff(pid_sorted)) + 1
        starts = np.concatenate([[0], bounds]).astype(np.int64)
        ends = np.concatenate([bounds, [len(order)]]).astype(np.int64)
        plain_values = self._key_values(b.plain_keys, pid_rep)
        # Per keyed variable, its first state stands for it; its bits cover all its states.
        keyed_vars = list(b.keyed_states)
        var_masks = [sum(1 << s for s in b.automaton.states_of(b.automaton.state_variables[v]))
                     for v in keyed_vars]
        by_names: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}  # q3: A and B both key on company
        for v in keyed_vars:
            names = tuple(b.var_keys[v])
            if names not in by_names:
                by_names[names] = key_codes(self.table, names)
        var_codes = {v: by_names[tuple(b.var_keys[v])] for v in keyed_vars}
        var_values = {v: self._key_values(b.var_keys[v], var_codes[v][1]) for v in keyed_vars}
        # A keyed variable some trends lack also has the combination "absent" (code -1):
        # the sub-stream in which no event plays it, its keys NULL (docs/language.md, Keys on
        # optional variables).
        a = b.automaton
        optional = [j for j, v in enumerate(keyed_vars) if a.state_variables[v] in a.presence]
        for j in optional:
            var_values[keyed_vars[j]].append(tuple(None for _ in b.var_keys[keyed_vars[j]]))

        # The rows' facts in partition order, gathered once.
        order = order.astype(np.int64, copy=False)
        bits_sorted = bits_all if one else bits_all[order]
        codes = np.empty((len(keyed_vars), len(order)), np.int64)
        plays: list[np.ndarray] = []
        for j, v in enumerate(keyed_vars):
            codes[j] = var_codes[v][0][order]
            plays.append((bits_sorted & np.uint64(var_masks[j])) != 0)
        # Each plain group's combinations of the keyed variables' values that some row plays.
        combo_group: list[int] = []
        combos: list[tuple] = []
        for g, (s, e) in enumerate(zip(starts.tolist(), ends.tolist())):
            choices = []
            for j, v in enumerate(keyed_vars):
                played = np.bincount(codes[j, s:e][plays[j][s:e]], minlength=len(var_codes[v][1]))
                choices.append(np.flatnonzero(played).tolist() + ([-1] if j in optional else []))
            for combo in itertools.product(*choices):  # (): the group itself, without keyed variables
                combo_group.append(g)
                combos.append(combo)
        flag_of = {j: 1 << a.presence.index(a.state_variables[keyed_vars[j]]) for j in optional}
        combo_clear = np.asarray([a.ends_not_in(sum(flag_of[j] for j in optional if combo[j] >= 0))
                                  for combo in combos], np.uint64)
        rows, bits, sizes = combination_rows(
            order, starts, ends, np.asarray(combo_group, np.int64),
            np.asarray(combos, np.int64).reshape(len(combos), len(keyed_vars)), codes,
            np.asarray(var_masks, np.uint64), combo_clear, bits_sorted, self.irrelevant if one else self.irrelevant[order],
            keep_idle, self.idle_events_matter)
        seg_sizes, groups, keys, key_codes_ = [], [], [], []
        for g, combo, size in zip(combo_group, combos, sizes.tolist()):
            if size < 0:
                continue
            plain = plain_values[pid_sorted[starts[g]]]
            seg_sizes.append(size)
            combo_values = {v: var_values[v][c] for v, c in zip(keyed_vars, combo)}
            groups.append(self._output_group(dict(zip(b.plain_keys, plain)), combo_values))
            keys.append((tuple(plain), tuple(combo_values[v] for v in keyed_vars)))
            key_codes_.append((int(pid_sorted[starts[g]]), tuple(int(c) for c in combo)))
        seg_ptr = np.concatenate([[0], np.cumsum(seg_sizes)]).astype(np.int64)
        return SubStreams(rows, bits, seg_ptr, groups, keys, key_codes_)

    def _whole_table(self, keep_idle: bool) -> SubStreams:
        """:meth:`substreams` of a query without keys: the table is one sub-stream."""
        clear = np.uint64(self.bound.automaton.ends_not_in(0))
        rows, bits, times, playing = whole_table_rows(self._type_codes, self.type_bits, self.type_irrelevant,
                                                      self.local_bits, self.local_ok, clear, keep_idle, self.time_np)
        self._times_at = (rows, times)
        if len(rows) == 0 or not (self.idle_events_matter or playing):
            return SubStreams(rows[:0], bits[:0], np.zeros(1, np.int64), [], [], [])
        group = self._output_group({}, {})
        return SubStreams(rows, bits, np.array([0, len(rows)], np.int64), [group], [((), ())], [(0, ())])

    def _key_values(self, names: Sequence[str], rep_rows: np.ndarray) -> list[tuple]:
        if not names:
            return [()] * max(1, len(rep_rows))
        cols = [self.table.column(k).take(pa.array(rep_rows)).to_pylist() for k in names]
        return list(zip(*cols))

    def _output_group(self, plain: dict, combo_values: dict) -> tuple:
        b = self.bound
        out = []
        for ref in b.query.group_by:
            if ref.variable is None:
                out.append(plain[ref.name])
            else:
                v = b.automaton.states_of(ref.variable)[0]
                out.append(combo_values[v][b.var_keys[v].index(ref.name)])
        return tuple(out)

    # -- windows --------------------------------------------------------------------------
    def _active_events(self, subs: SubStreams) -> np.ndarray:
        """Per position: whether its event opens windows (plays a variable, or any event
        where idle ones matter)."""
        return np.ones(len(subs.bits), bool) if self.idle_events_matter else subs.bits != 0

    def window_ranges(self, subs: SubStreams, finishing: bool = False) -> "Windows":
        """Every window of every sub-stream that holds an active event; ``finishing``: only
        those that may hold a finished trend (:meth:`_windows_that_may_finish`, filtered
        as the windows are enumerated where they are integral)."""
        if self.windows.size is None:  # one window per segment with an active event
            from cogra.runtime.compiled.windows.enumeration import playing_segments

            seg_ptr = np.asarray(subs.seg_ptr, np.int64)
            seg = (np.flatnonzero(np.diff(seg_ptr) > 0) if self.idle_events_matter
                   else playing_segments(seg_ptr, subs.bits))
            wins = Windows(seg, seg_ptr[seg], seg_ptr[seg + 1], start=np.zeros(len(seg), np.int64), size=None)
            return self._windows_that_may_finish(subs, wins) if finishing else wins
        active = self._active_events(subs)
        times = self.times_at(subs.rows)
        if is_integral(self.windows, self.bound.time_type):
            size = int(self.windows.size)
            ends = self._finish_ends(subs) if finishing else None
            seg, start, lo, hi = enumerate_windows(subs.seg_ptr, times, active, self.windows, ends)
            return Windows(seg, lo, hi, start=start, size=size)
        # Fractional windows or float times: exact arithmetic in Python.
        segs, bounds, los, his = [], [], [], []
        exact = self.times
        for s in range(len(subs.seg_ptr) - 1):
            a, z = int(subs.seg_ptr[s]), int(subs.seg_ptr[s + 1])
            sub_times = [exact[r] for r in subs.rows[a:z].tolist()]
            act = [sub_times[i] for i in range(z - a) if active[a + i]]
            for window in self.windows.windows_of(act):
                segs.append(s)
                bounds.append(window)
                los.append(a + bisect.bisect_left(sub_times, window[0]))
                his.append(a + bisect.bisect_left(sub_times, window[1]))
        as_i64 = lambda x: np.asarray(x, dtype=np.int64)  # noqa: E731
        return Windows(as_i64(segs), as_i64(los), as_i64(his), exact_bounds=bounds)

    def times_at(self, rows: np.ndarray) -> np.ndarray:
        """The times of table rows ``rows``, gathered once per array of rows (into Arrow's
        pool, :func:`~cogra.runtime.arrow_arrays.take`): the windows and the kernels over
        one evaluation's sub-streams read the same."""
        if self._times_at is None or self._times_at[0] is not rows:
            self._times_at = (rows, take(self.time_np, rows))
        return self._times_at[1]

    def _windows_that_may_finish(self, subs: SubStreams, wins: "Windows") -> "Windows":
        """``wins`` without the windows that cannot hold a finished trend (no event that
        may start one followed by one that may finish it; they have no result row): q2
        as printed enumerates 2.68M windows for 1M rides, of which 1.16M pass (981k have
        a trend), and the kernels, copies and keys of the rest are saved.  Integral
        windows only (fractional ones are few and go through Python), and not with kept
        variables: sub-streams that share a kept variable's totals
        (:mod:`cogra.runtime.compiled.sharing.kept_totals`) walk their windows side by side, and a
        window one of them drops may be one another reads."""
        if wins.start is None or wins.exact_bounds is not None or not len(wins.seg):
            return wins
        from cogra.runtime.compiled.windows.enumeration import kept_windows, may_finish, windows_may_finish

        lo, hi = np.asarray(wins.lo, np.int64), np.asarray(wins.hi, np.int64)
        if wins.size is None and self._trend_ends is None:
            # One window per sub-stream: scan from its ends (per-event arrays cost a pass
            # over every event, 8 ms per 3M).
            if not self._drops_windows():
                return wins
            keep = windows_may_finish(subs.bits, *self._start_final_bits(), lo, hi)
        else:
            ends = self._finish_ends(subs)
            if ends is None:
                return wins
            keep = may_finish(*ends, lo, hi)
        if keep.all():
            return wins
        arrays = (np.asarray(x, np.int64) for x in (wins.seg, wins.start, wins.lo, wins.hi))
        seg, start, lo, hi = kept_windows(keep, *arrays)
        return Windows(seg, lo, hi, start=start, size=wins.size)

    def _finish_ends(self, subs: SubStreams) -> tuple[np.ndarray, np.ndarray] | None:
        """:func:`enumeration.trend_ends` of the sub-streams' positions, which decide
        whether a window may finish (:meth:`_windows_that_may_finish`), or None where no
        window is dropped: with kept variables, or where every window holds a trend."""
        if not self._drops_windows():
            return None
        if self._trend_ends is None or self._trend_ends[0] is not subs.bits:
            # per event, once per evaluation (its blocks of windows share it)
            from cogra.runtime.compiled.windows.enumeration import trend_ends

            self._trend_ends = subs.bits, trend_ends(subs.bits, *self._start_final_bits())
        return self._trend_ends[1]

    def _start_final_bits(self) -> tuple[np.uint64, np.uint64]:
        """The play bits of the automaton's start states and of its final states."""
        a = self.bound.automaton
        return np.uint64(sum(1 << v for v in a.start)), np.uint64(sum(1 << v for v in a.final))

    def _drops_windows(self) -> bool:
        """Whether some windows may hold no finished trend and are dropped: not with kept
        variables (see :meth:`_windows_that_may_finish`), nor where every event that plays
        a variable may start and finish a trend (``A+``): every window holds one."""
        if self.bound.kept_variables:
            return False
        a = self.bound.automaton
        # (checking A+'s windows took 7 ms per 1.9M windows, to drop none)
        return not (set(a.start) == set(a.final) == set(range(len(a.names))) and not self.idle_events_matter)

    def _window_blocks(self, subs: SubStreams, driver: Any) -> "Iterator[Windows] | None":
        """The windows that may finish, enumerated block by block of starts
        (:func:`cogra.runtime.compiled.windows.blockwise.blocks`) where the compiled finish takes
        them and there are enough; else None (:meth:`window_ranges` enumerates them at
        once).  Not with kept variables: the mixed-grained kernels' per-call set-up (trees,
        shared rows) would be paid per block, and their windows are far fewer per event."""
        from cogra.runtime.compiled.finish import by_column
        from cogra.runtime.compiled.windows import blockwise

        spec = self.windows
        if (driver is None or driver.kept or spec.size is None or not is_integral(spec, self.bound.time_type)
                or not by_column.applies(self, driver)):
            return None
        times = driver.times_of(subs.rows, subs.bits)  # the kernels' own, computed once
        size, step = int(spec.size), int(spec.step)
        if blockwise.too_few(subs.seg_ptr, times, size, step):
            return None
        active = self._active_events(subs)
        blocks = blockwise.blocks(subs.seg_ptr, times, active, size, step, self._finish_ends(subs),
                                  self.scratch)
        if blocks is None:
            return None
        return (Windows(seg, lo, hi, start=start, size=size) for seg, start, lo, hi in blocks)

    # -- evaluation -------------------------------------------------------------------------
    def _python_state(self, subs: SubStreams, lo: int, hi: int, cut: Any = None) -> list | None:
        """One window's state by the Python executors; ``cut``: its absence cut-offs
        (:class:`cogra.runtime.absence.Cut`)."""
        runner = RUNNERS[self.plan.executor]
        keep_idle = self.plan.executor is Executor.CONTIGUOUS
        nv = len(self.bound.automaton.names)
        times = self.times
        rows = subs.rows[lo:hi].tolist()
        plays = [tuple(v for v in range(nv) if (int(b) >> v) & 1) for b in subs.bits[lo:hi].tolist()]
        batches: list[Batch] = []
        i = 0
        while i < len(rows):
            t = times[rows[i]]
            j = i
            while j < len(rows) and times[rows[j]] == t:
                j += 1
            sel = [k for k in range(i, j) if keep_idle or plays[k]]
            if sel:
                batches.append(Batch(t, tuple(rows[k] for k in sel), tuple(plays[k] for k in sel)))
            i = j
        return runner(batches, self.ctx, cut)

    def result_table(self, *, on_overflow: str = "error", metadata: dict | None = None) -> pa.Table:
        """The typed result (see :func:`cogra.runtime.output.build_table`).

        Where the compiled kernels ran and the output allows it, the kernels' channels
        become Arrow columns directly (:mod:`cogra.runtime.compiled.finish.by_column`), without a Python
        object per row; otherwise rows go through :meth:`run` and ``build_table``.
        Background compiles the call requests start when it returns
        (:func:`cogra.runtime.compiled.codegen.background.compiles_after_the_call`).
        """
        from cogra.runtime.compiled.codegen.background import compiles_after_the_call

        with compiles_after_the_call():
            return self._result_table(on_overflow, metadata)

    def _result_table(self, on_overflow: str, metadata: dict | None) -> pa.Table:
        from cogra.runtime.compiled.windows import chunked

        # -- one window over the whole table, chunk of rows after chunk (None: does not apply)
        if self.physical.windows.offers(WindowRun.CHUNKS):
            table = chunked.result_table(self, on_overflow=on_overflow, metadata=metadata)
            if table is not None:
                return table
        subs = self.substreams()
        driver = self._kernel_driver(subs)
        blocks = self._window_blocks(subs, driver)
        if blocks is not None:
            table = self._table_by_blocks(driver, subs, blocks, on_overflow, metadata)
            if table is not None:
                return table  # else an overflow to report: the row path words it
        wins = self.window_ranges(subs, finishing=True)
        if driver is not None and len(wins.seg) and blocks is None:
            from cogra.runtime.compiled.finish import by_column

            if by_column.applies(self, driver) and wins.start is not None:
                table = self._table_by_blocks(driver, subs, [wins], on_overflow, metadata)
                if table is not None:
                    return table  # else an overflow to report: the row path words it
        self.stats["windows"] = len(wins.seg)
        out = self._run_kernels(subs, wins, driver)
        return build_table(self.bound.query, self.bound.schema, self._rows(subs, wins, driver, out),
                           time_type=self.bound.time_type, on_overflow=on_overflow, metadata=metadata)

    def _table_by_blocks(self, driver: Any, subs: SubStreams, blocks: "Iterable[Windows]", on_overflow: str,
                         metadata: dict | None) -> pa.Table | None:
        """The result through the compiled finish (:mod:`cogra.runtime.compiled.finish.by_column`), block
        of windows after block (:meth:`_window_blocks`, or all windows as one); None when
        an overflow must raise.  The blocks' tables are the result's chunks, in output order."""
        from cogra.runtime.compiled.finish import by_column

        exact_before = self.stats["windows_exact"]
        tables = []
        n = 0
        for block in blocks:
            if not len(block.seg):
                continue  # none of its windows may finish
            n += len(block.seg)
            out = self._run_kernels(subs, block, driver, rows_may_be_shared=True)
            table = by_column.result_table(self, driver, subs, block, out, on_overflow=on_overflow,
                                           metadata=metadata)
            if table is None:
                return None
            tables.append(table)
        self.stats["windows"] = n
        self.stats["windows_fast"] = n - (self.stats["windows_exact"] - exact_before)
        if not tables:  # no window may finish
            return build_table(self.bound.query, self.bound.schema, [], time_type=self.bound.time_type,
                               on_overflow=on_overflow, metadata=metadata)
        return tables[0] if len(tables) == 1 else pa.concat_tables(tables)

    def _run_kernels(self, subs: SubStreams, wins: "Windows", driver: Any, rows_may_be_shared: bool = False):
        """The kernels' output for ``wins`` (channels, undecoded); None where the compiled
        driver ``driver`` is None (unsupported) or there are no windows.  A row per window,
        unless ``rows_may_be_shared`` (the compiled finish reads :attr:`KernelOut.row_first`)."""
        if driver is None or not len(wins.seg):
            return None
        out = None
        cuts = self.cuts_of(subs, wins)
        if cuts is not None:
            # Absence: every window from its own events and cut-offs (the sliding and
            # shared-rows runs combine windows' work, which the cut-offs tell apart).
            out = driver.run_raw(subs, wins.lo, wins.hi, cuts)
            return out if rows_may_be_shared else out.per_window()
        shared = self.physical.windows
        if wins.start is not None and (shared.offers(WindowRun.SHARED_PANES) or shared.offers(WindowRun.SHARED_LANES)):
            # -- sliding-window hook (cogra.runtime.compiled.windows.sliding): windows share their panes'
            # work when the query slides; None means the data does not repay it.
            from cogra.runtime.compiled.windows import sliding

            out = sliding.run_raw(driver, self, subs, wins.seg, wins.start, wins.lo, wins.hi)
        if out is None and driver.kept:
            # -- sub-streams that hold the same events for the kept variable share its rows
            # (cogra.runtime.compiled.sharing.kept_totals); None where that does not apply.
            from cogra.runtime.compiled.sharing import kept_totals

            out = kept_totals.run_raw(driver, self, subs, wins)
        if out is None:
            out = driver.run_raw(subs, wins.lo, wins.hi)
        return out if rows_may_be_shared else out.per_window()

    def state_of(self, subs: SubStreams, wins: "Windows", w: int, driver: Any, out: Any,
                 row: int | None = None) -> list | None:
        """Window ``w``'s exact state: decoded from the kernel's row ``row`` (default ``w``),
        or re-run in Python."""
        if driver is not None and out is not None:
            from cogra.runtime.compiled.channels import decode

            row = w if row is None else row
            if not out.r[row]:
                return None
            state = decode(driver.chan, self.layout, out.i[row], out.f[row], out.x[row], int(out.e[row]),
                           driver.x_decoders, self.scales)
            if state is not driver.UNDECIDED:
                return state
        self.stats["windows_exact"] += 1
        return self._python_state(subs, int(wins.lo[w]), int(wins.hi[w]), self._cut(subs, wins, w))

    def _cut(self, subs: SubStreams, wins: "Windows", w: int) -> Any:
        """Window ``w``'s absence cut-offs as exact times (None without an edge negation)."""
        cuts = self.cuts_of(subs, wins)
        return None if cuts is None else cuts.cut(w, self.times)

    def _rows(self, subs: SubStreams, wins: "Windows", driver: Any, out: Any) -> list[ResultRow]:
        n = len(wins.seg)
        if driver is not None and out is not None:
            states = driver.decode(out)
            pending = [w for w, st in enumerate(states) if st is driver.UNDECIDED]
            self.stats["windows_fast"] = n - len(pending)
        else:
            states, pending = [None] * n, range(n)
        for w in pending:
            states[w] = self._python_state(subs, int(wins.lo[w]), int(wins.hi[w]), self._cut(subs, wins, w))
        self.stats["windows_exact"] = len(pending)
        bounds = wins.bounds()
        merged: dict[tuple, list] = {}
        for w, state in enumerate(states):
            if state is None:
                continue
            key = (bounds[w], subs.groups[int(wins.seg[w])])
            if key in merged:
                self.layout.add_into(merged[key], state)
            else:
                merged[key] = state
        return [self.result_row(window, group, state) for (window, group), state in merged.items()]

    def result_row(self, window: Any, group: tuple, state: list) -> ResultRow:
        values = list(self.layout.finalize(state, self.scales))
        for i, g in zip(self.group_item_positions, group):
            if i >= 0:
                values[i] = g
        return ResultRow(window, tuple(values), group)

    @property
    def physical(self) -> PhysicalPlan:
        """The query's physical plan (:mod:`cogra.runtime.physical`): the window runs it may take."""
        return physical_plan(self.plan)

    @cached_property
    def scales(self) -> dict[str, int]:
        from cogra.runtime.compiled.attribute_columns import attribute_scales

        for attr in self.layout.attributes:  # (their stats through stats_of, which keeps what the kernels reuse)
            if pa.types.is_floating(self.table.schema.field(attr).type):
                self.stats_of(attr)
        return attribute_scales(self.table, self.layout.attributes, self.float_stats)

    def stats_of(self, attr: str) -> Any:
        """A floating attribute's :class:`~cogra.runtime.compiled.attribute_columns.FloatStats`
        over this table (computed with :attr:`scales`, or here where the scales came from
        elsewhere: a stream's)."""
        found = self.float_stats.get(attr)
        if found is None:
            from cogra.runtime.compiled.attribute_columns import float_stats

            # An attribute that some AVG sums keeps its doubles: the compiled executor
            # reads them where the sum is approximate (never negative; see
            # KernelDriver._approximate_slots), and then needs no copy of its own.
            averaged = any(self.layout.slots[i].attribute == attr and self.layout.slots[i].role == "sum"
                           for i in self.layout.ratio_only)
            found = self.float_stats[attr] = float_stats(self.table.column(attr), keep_doubles=averaged)
        return found

    def _kernel_driver(self, subs: SubStreams | None = None):
        if self.use_compiled is False:
            return None
        from cogra.runtime.compiled.kernel_driver import KernelDriver, Unsupported

        try:
            return KernelDriver(self, subs=subs)
        except Unsupported as why:
            if self.use_compiled:
                raise CograError(f"compiled=True, but the compiled kernels do not evaluate this query: {why} "
                                 "(compiled=None runs it on the Python executors, exactly)") from None
            self.stats["fast_unsupported"] = str(why)
            warnings.warn(f"MATCH_TREND evaluates this query on the Python executors (exact, 10-100x slower "
                          f"than the compiled kernels): {why}", CograPerformanceWarning, stacklevel=2)
            return None

    @cached_property
    def group_item_positions(self) -> list[int]:
        """Positions of RETURN grouping items, in GROUP-BY order of their attribute."""
        q = self.bound.query
        pos = []
        for ref in q.group_by:
            hit = [i for i, it in enumerate(q.returns)
                   if isinstance(it.value, AttrRef) and it.value.text == ref.text]
            pos.append(hit[0] if hit else -1)
        return pos


__all__ = ["Engine", "numpy_column", "key_codes", "SubStreams", "Windows", "ROLE_NEXT"]
