"""Run the compiled kernels for an :class:`~cogra.runtime.engine.Engine`, when they apply.

They apply to the type-grained (``any``) and pattern-grained (``next``,
``contiguous``) executors whose variables all keep coarse aggregates (no predicate
reads an earlier event), with numeric aggregated attributes (MIN/MAX also over
strings, timestamps, dates and booleans).  Anything else raises :class:`Unsupported`
and the engine uses the exact Python executors; a window whose values the kernel
cannot prove exact comes back :data:`UNDECIDED` and is re-run in Python.
"""

from __future__ import annotations

import math
from functools import cached_property
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from cogra.runtime.arrow_arrays import empty, one_array
from cogra.runtime.compiled.attribute_columns import float_columns, magnitude_limbs, square_limbs
from cogra.runtime.compiled.jit import njit
from cogra.runtime.compiled.kernel_args import AttributeRows, Channels, PairArrays, Pattern, Positions, SlotProgram

from cogra.analysis.granularity import Executor
from cogra.runtime.compiled.channels import (
    OP_MAX,
    OP_MIN,
    OP_SUM_FLOAT,
    SPLIT_SHIFT,
    decode_many,
    SPLIT_SUFFIX,
    UNDECIDED,
    base_attribute,
    square_attribute,
    Unsupported,
    KernelOut,
    channel_layout,
    float_from_key,
    float_key,
    floats_from_keys,
)

MODES = {Executor.TYPE_GRAINED: 0, Executor.MIXED_GRAINED: 0, Executor.NEXT: 1, Executor.CONTIGUOUS: 2}
from cogra.analysis.kernel_reach import checks_past_the_word  # noqa: E402
SPECIALIZE_MIN_EVENTS = 32_000_000
"""Runs over at least this many events (a window run's events, a ring run's positions)
compile the kernel generated for the query's shape (:mod:`cogra.runtime.compiled.codegen`) in the foreground
and run it.  Below, they run the generic kernel (compiled ahead of time,
:mod:`cogra.runtime.kernel_bundle`) and request the generated one in the background
(:func:`background.generated_or_requested`), or run it once compiled.  A foreground compile
must repay within its own call: q2's per-window kernel compiles in ~1 s and saves
~0.15 s per 1M events, q3's ring runs compile in ~9 s and save ~0.35 s per 1M -- the
first from ~7M events, the second from ~26M.  Below that a first call would wait for a
compile it cannot win back (the background compile serves the next calls).  Tests lower
it."""
_SPARE_I, _SPARE_F = np.zeros(1, np.int64), np.zeros(1, np.float64)
"""What a compiled fill gets for a row it does not write."""
NO_PAIR_OK = np.zeros(0, np.uint64)
"""What the window kernels get for pair bits where the query's shape checks none (read as
all ones: :meth:`KernelDriver.pair_ok_of`)."""


def times_scale(x: float, scale: int) -> float:
    """``x * scale`` as a double, inf past the double range: a float attribute whose values
    reach 1e-300 has a scale past it itself (``x * scale`` then raised OverflowError)."""
    try:
        return x * scale
    except OverflowError:
        return math.inf if x else 0.0


class KernelDriver:
    UNDECIDED = UNDECIDED

    def __init__(self, engine: Any, *, streaming: bool = False, subs: Any = None, table_rows: bool = True):
        """``streaming``: encodings must not depend on the data (the streaming engine
        carries states across batches): every float sum is split into two limbs, and
        MIN/MAX over strings (ranks in the batch's dictionary) is refused.  ``subs``: the
        sub-streams about to be run; under ``contiguous`` they may show that no variable
        needs per-event state (:meth:`Engine.contiguous_pair_ok_bits`).  ``table_rows``:
        whether to build the attributes' rows of the whole table; without, the caller
        loads them chunk by chunk (:meth:`load_rows`,
        :mod:`cogra.runtime.compiled.windows.chunked`)."""
        b = engine.bound
        self.engine = engine
        self.streaming = streaming
        executor = engine.plan.executor
        if executor not in MODES:
            raise Unsupported(f"the {executor.value} executor has no compiled kernel yet")
        missing = engine.layout.not_compiled()
        if missing:
            raise Unsupported(f"{', '.join(missing)} run on the exact Python executors (no compiled kernel "
                              "evaluates them)")
        self.nv = len(b.automaton.names)
        self.mode = MODES[executor]
        never_negative = self._never_negative_sums(engine, streaming)
        self.approximate = self._approximate_slots(engine.layout, never_negative)
        self.split, self.inexact = self._wide_float_sums(engine, streaming, self.approximate)
        self.square_limbs = self._square_limbs(engine, self.inexact)
        # The channel layout and what follows from it alone (live channels, kernel shapes)
        # are built once per bound query and encoding (BoundQuery.memo): the encoding
        # decisions above are the only data they depend on.
        memo = b.memo.setdefault(("fast", self.split, self.inexact, never_negative, self.approximate,
                                  self.square_limbs), {})
        if "chan" not in memo:
            memo["chan"] = channel_layout(engine.layout, engine.table.schema, self.split, self.inexact,
                                          never_negative, self.approximate, self.square_limbs)
        self.chan = memo["chan"]
        self.shapes: dict = memo.setdefault("shapes", {})
        """Shapes built for this query and encoding, by what they were built from
        (:meth:`shape`'s arguments; ``sliding._shared_shape``'s): the ring asks once per
        batch of groups, and every call of a Spark worker's slices would rebuild them."""
        self._memo = memo
        self.table_rows = table_rows
        self._attribute_arrays(engine.table if table_rows else engine.table.slice(0, 0))
        a = b.automaton
        self.pred_ptr = np.zeros(self.nv + 1, np.int64)
        preds: list[int] = []
        for v in range(self.nv):  # (the order of codes.edge_bits: edge p is pair bit p)
            preds += sorted(a.pred[v])
            self.pred_ptr[v + 1] = len(preds)
        self.pred_idx = np.asarray(preds, dtype=np.int64)
        self.start_bits = np.uint64(sum(1 << v for v in a.start))
        self.final_bits = np.uint64(sum(1 << v for v in a.final))
        prog = self.chan.program
        self.op_ptr = np.searchsorted(prog[:, 0], np.arange(self.nv + 1)).astype(np.int64)
        self._pair_ok: np.ndarray | None = None
        self.past_the_word = checks_past_the_word(b)
        """Edges past the pair word's 64 bits with predicates on the new event alone: indexed
        per pair instead (a code per new event, every earlier event or none), which keeps
        their earlier variables' events (:data:`cogra.runtime.compiled.codes.PAIR_WORD_BITS`)."""
        self.kept = b.kept_variables | {u for u, _ in self.past_the_word}
        if self.kept and subs is not None and not self.past_the_word:
            folded = engine.contiguous_pair_ok_bits(subs, self.pair_ok)
            if folded is not None:
                self.pair_ok, self.kept = folded, frozenset()
        self.pair_all = False
        """Whether some event takes every earlier event of its pair (``CROSS_ALL``: the
        kernels read the pair there as one without an indexed predicate)."""
        if self.kept:
            self._indexed_pairs()
        self._per_positions: dict = {}

    def _indexed_pairs(self) -> None:
        """Index each predicate that reads the earlier event by ``h(U)``
        (:mod:`cogra.runtime.compiled.crossing_predicates`): per pair, the ranks of ``h`` and,
        per new event, the rank ranges it takes and its code (``g_valid``)."""
        from cogra.runtime.compiled.aggregators.mixed_grained import pair_ranges, unique_inverse, value_bounds
        from cogra.runtime.compiled.crossing_predicates import (CROSS_ALL, CROSS_NONE, guarded_ranges, mixed_ranges,
                                                                split_crossing)

        eng = self.engine
        n, nv = eng.n, self.nv
        self.pair_of = np.full((nv, nv), -1, np.int64)
        flags, ms, h_rank, h_valid, q_a, q_b, q_eq, g_valid = ([] for _ in range(8))
        for (u, v), preds in eng.pairs.by_pair.items():
            reading = [p for p in preds if p.uses_prev]
            alone = [p for p in preds if not p.uses_prev] if (u, v) in self.past_the_word else []
            if not reading and not alone:
                continue
            user = [p for p in reading if not p.guard]
            if len(user) > 1:
                raise Unsupported(f"several predicates read {eng.bound.automaton.names[u]} for one pair")
            if not reading:  # an edge past the pair word, checked on the new event alone (below)
                zeros = np.zeros(n, np.int64)
                fl, m, ranks, hv, a, bnd, eq, code = (0, 1, zeros, np.ones(n, bool), zeros, zeros,
                                                      np.full(n, -1, np.int64), np.full(n, CROSS_ALL, np.int8))
            elif len(reading) > 1:  # a negation's guards, and the user's predicate
                pair = guarded_ranges([p.expression for p in reading if p.guard],
                                      user[0].expression if user else None, eng.columns, n)
                # (every row ranks, a NULL value first in its block; no prefix is taken)
                fl, m, ranks, hv, a, bnd, eq, code = (pair.flags, pair.m, pair.ranks, np.ones(n, bool),
                                                      np.zeros(n, np.int64), pair.b, pair.eq, pair.code)
            else:
                crossing = split_crossing(reading[0].expression, eng.columns, n)
                h, hv, g, gv = crossing.h, crossing.hv, crossing.g, crossing.gv
                vals, inverse = unique_inverse(h[hv])
                m = len(vals)
                ranks = np.zeros(n, np.int64)
                ranks[hv] = inverse
                # Usually both sides read one attribute (A.price > NEXT(A).price): then each
                # value's rank is known and no search over the (often ~n) distinct values is needed.
                same = bool(np.array_equal(hv, gv) and np.array_equal(h[hv], g[gv]))
                if crossing.plain:
                    fl, a, bnd, eq = pair_ranges(crossing.op, vals, g, ranks if same else None)
                    code = crossing.uses["C"].astype(np.int8)  # (CROSS_RANGES where it holds, else none)
                else:
                    lt, le = value_bounds(vals, g, ranks if same else None)
                    fl, a, bnd, eq, code = mixed_ranges(crossing, lt, le, m)
            if alone:  # (the new event's own check: where it fails, no earlier event)
                code = np.where(eng.new_event_passes(alone), code, CROSS_NONE).astype(np.int8)
            self.pair_all = self.pair_all or bool((code == CROSS_ALL).any())
            self.pair_of[u, v] = len(flags)
            for out, x in zip((flags, ms, h_rank, h_valid, q_a, q_b, q_eq, g_valid),
                              (fl, m, ranks, hv, a, bnd, eq, code)):
                out.append(x)
        self.pair_flags = np.asarray(flags, np.int64)
        self.m_of = np.asarray(ms, np.int64)
        stack = lambda xs, dt: np.stack(xs).astype(dt) if xs else np.zeros((0, n), dt)  # noqa: E731
        self.h_rank, self.h_valid = stack(h_rank, np.int64), stack(h_valid, np.bool_)
        self.q_a, self.q_b, self.q_eq = stack(q_a, np.int64), stack(q_b, np.int64), stack(q_eq, np.int64)
        self.g_valid = stack(g_valid, np.int8)
        self.kept_bits = np.uint64(sum(1 << u for u in self.kept))
        if "live" not in self._memo:
            self._memo["live"] = self._live_channels()
        self.var_live_i, self.var_live_f, self.var_live_x = self._memo["live"]
        # Per indexed pair (u, v): the channels of u's states, which its Fenwick nodes carry.
        owner = np.zeros(max(1, len(self.pair_flags)), np.int64)
        us, vs = np.nonzero(self.pair_of >= 0)
        owner[self.pair_of[us, vs]] = us
        self.live_i, self.live_f, self.live_x = (arr[owner] for arr in
                                                 (self.var_live_i, self.var_live_f, self.var_live_x))

    def _live_channels(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per variable: the channels a state of it can hold non-empty.

        A variable's states hold the trend count, what its own events write (the slot
        program) and what flows in from its predTypes -- so in ``SEQ(A+, B+)`` with
        ``AVG(B.price)``, A's kept states only ever carry counts, and the Fenwick trees
        over them add 2 channels instead of 10.  Row ``v`` of each array (integer, float,
        MIN/MAX key channels) is ``[n, channel_1, .., channel_n]``."""
        a = self.engine.bound.automaton
        c = self.chan
        # The modular trend count (channel 0) only feeds exact slots: live iff there is one.
        exact = any(op not in (OP_MIN, OP_MAX, OP_SUM_FLOAT) and s1 >= 0
                    for _var, op, _attr, s1, _s2, _s3 in c.program.tolist()) or c.slot_map[0][0] == "int"
        live = [({0} if exact else set(), {0}, set()) for _ in range(self.nv)]
        for var, op, _attr, s1, s2, s3 in c.program.tolist():
            li, lf, lx = live[var]
            if op in (OP_MIN, OP_MAX):
                lx.add(s1)
                continue
            if op != OP_SUM_FLOAT and s1 >= 0:
                li.add(s1)
            lf.update(k for k in (s2, s3) if k >= 0)
        changed = True
        while changed:
            changed = False
            for v in range(self.nv):
                for u in a.pred[v]:
                    for mine, theirs in zip(live[v], live[u]):
                        if not theirs <= mine:
                            mine |= theirs
                            changed = True
        out = []
        for j, width in enumerate((c.n_i, c.n_f, len(c.x_is_min))):
            arr = np.zeros((self.nv, width + 1), np.int64)
            for v in range(self.nv):
                chans = sorted(live[v][j])
                arr[v, 0] = len(chans)
                arr[v, 1:1 + len(chans)] = chans
            out.append(arr)
        return out[0], out[1], out[2]

    # -- inputs ------------------------------------------------------------------------
    @staticmethod
    def _approximate_slots(layout: Any, never_negative: frozenset[str]) -> frozenset[int]:
        """The slots kept in doubles alone (:func:`channel_layout`): ``layout.ratio_only``,
        but sums only over values that are never negative -- a double sum of signed values
        may cancel, and a window whose bound shows it would take the exact Python path."""
        return frozenset(i for i in layout.ratio_only
                         if layout.slots[i].role != "sum" or layout.slots[i].attribute in never_negative)

    @staticmethod
    def _wide_float_sums(engine: Any, streaming: bool = False,
                         approximate: frozenset[int] = frozenset()) -> tuple[frozenset[str], frozenset[str]]:
        """Float attributes whose scaled values ``x * 2**k`` are wide: below 2**93 they are
        split into two exact limbs, beyond that summed in double."""
        split, inexact = set(), set()
        for idx, slot in enumerate(engine.layout.slots):
            attr = slot.attribute
            if slot.role != "sum" or not pa.types.is_floating(engine.table.schema.field(attr).type):
                continue
            if idx in approximate:
                continue  # summed in double (channels.channel_layout)
            if streaming:
                split.add(attr)
            widest = times_scale(engine.stats_of(attr).largest, engine.scales[attr])
            # One limb leaves 2**63 / widest for the trend counts that multiply each value;
            # past 2**31 two limbs keep sums exact up to about 2**94.
            if widest >= 2.0**93 or engine.scales[attr] >= 2**1023:  # (a scale past doubles: tiny values)
                if streaming:
                    raise Unsupported(f"values of {attr} span more than 2**93 (exact float sums)")
                inexact.add(attr)
            elif widest >= 2.0**31:
                split.add(attr)
        return frozenset(split), frozenset(inexact)

    @staticmethod
    def _square_limbs(engine: Any, inexact: frozenset[str]) -> tuple[tuple[str, int], ...]:
        """Per attribute whose squares a spread sums (its ``sq`` slot), how many 32-bit limbs
        hold the widest value's exact square in this table (:func:`channels.channel_layout`;
        streams do not carry spreads: :func:`cogra.runtime.stream.unsupported_reason`)."""
        found = []
        schema = engine.table.schema
        for attr in sorted({s.attribute for s in engine.layout.slots if s.role == "sq"}):
            t = schema.field(attr).type
            if pa.types.is_dictionary(t):
                t = t.value_type
            floating = pa.types.is_floating(t)
            if attr in inexact:
                # Its sum is a double: no window's spread could be decided on the kernels.
                raise Unsupported(f"values of {attr} span more than 2**93 (a spread of them runs exactly)")
            if not (floating or pa.types.is_integer(t)):
                raise Unsupported(f"{attr} is {t}")
            if floating:
                widest = times_scale(engine.stats_of(attr).largest, engine.scales[attr])
                bits = math.frexp(widest)[1] if widest > 0 else 0
            else:
                col = engine.table.column(attr)
                if pa.types.is_dictionary(col.type):
                    col = one_array(col).dictionary_decode()
                ends = pc.min_max(col).as_py()
                bits = max(abs(ends["min"] or 0), abs(ends["max"] or 0)).bit_length()
            found.append((attr, max(1, -(-2 * bits // SPLIT_SHIFT))))
        return tuple(found)

    @staticmethod
    def _never_negative_sums(engine: Any, streaming: bool = False) -> frozenset[str]:
        """Summed attributes with no negative value in this table: their sums keep no
        |x|-bound channel (:func:`channel_layout`; prices, volumes and distances mostly).
        None when streaming: the layout must hold for batches not seen yet."""
        if streaming:
            return frozenset()
        found = set()
        for attr in {s.attribute for s in engine.layout.slots if s.role == "sum"}:
            col = engine.table.column(attr)
            if pa.types.is_dictionary(col.type):
                col = one_array(col).dictionary_decode()
            if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
                continue  # refused by _attribute_arrays
            if pa.types.is_floating(col.type):
                smallest = engine.stats_of(attr).smallest  # (NaN is refused for sums anyway)
            else:
                smallest = pc.min(col).as_py()  # nulls skipped
            if smallest is None or smallest >= 0:
                found.add(attr)
        return frozenset(found)

    def load_rows(self, table: pa.Table) -> None:
        """The attributes' rows (``a_int``, ``a_flt``, ``a_valid``, ``a_key``) of ``table``, a
        slice of the engine's: the kernels then read row ``r`` of the slice as ``r``.
        Encodings stay those of the whole table (the scales, which sums are exact)."""
        self._attribute_arrays(table)

    def _attribute_arrays(self, table: pa.Table) -> None:
        # The previous rows' matrices go first (chunk after chunk: Arrow's pool hands their
        # memory to the next ones instead of asking the system for more).
        self.a_int = self.a_flt = self.a_valid = self.a_key = None
        attrs = self.chan.attributes
        n = table.num_rows
        k = max(1, len(attrs))
        dtypes = {"a_int": np.int64, "a_flt": np.float64, "a_valid": np.bool_, "a_key": np.int64}
        matrices: dict[str, np.ndarray] = {}

        def full(name: str) -> np.ndarray:
            """The kernels' matrix ``name`` (attributes x rows), allocated at its first row
            written, uninitialised, from Arrow's pool (:func:`~cogra.runtime.arrow_arrays.empty`):
            the rows no operation reads are never written, and a matrix with none written
            is one column wide (zeroing four matrices of 3M rows took ~4 ms)."""
            if name not in matrices:
                matrices[name] = empty((k, n), dtypes[name])
            return matrices[name]

        decoders: dict[str, Callable[[int], Any]] = {}
        vectorised: dict[str, Callable[[np.ndarray], list]] = {}
        arrow: dict[str, Callable[[np.ndarray], pa.Array]] = {}
        sums = {s.attribute for s in self.engine.layout.slots if s.role in ("sum", "nn")}
        self.exact_sums = exact_sums = {s.attribute for i, s in enumerate(self.engine.layout.slots)
                                        if s.role == "sum" and i not in self.approximate}  # the others read a_flt
        # What the slot program's operations read of each attribute (channels.OP_*): the
        # rows nothing reads are not filled -- for 3M prices under AVG, 48 MB not written.
        # MIN/MAX count as reading the doubles too: the mixed kernels' lanes take every
        # operation but the integer ones from them.
        ops = {j: {int(op) for op, a in zip(self.chan.program[:, 1], self.chan.program[:, 2]) if a == j}
               for j in range(len(attrs))}
        for j, attr in enumerate(attrs):
            if base_attribute(attr) != attr:
                continue  # a limb (#lo, #sqJ): filled with its attribute's row
            want_key = bool(ops[j] & {OP_MIN, OP_MAX})
            want_flt = want_key or OP_SUM_FLOAT in ops[j]
            col = one_array(table.column(attr))
            t = col.type
            if pa.types.is_dictionary(t):
                col = col.dictionary_decode()
                t = col.type
            if col.null_count:
                full("a_valid")[j] = np.asarray(col.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
            else:
                full("a_valid")[j] = True
            if pa.types.is_integer(t):
                if t.bit_width == 64 and not pa.types.is_signed_integer(t):
                    raise Unsupported(f"{attr} is uint64")
                ints = pc.fill_null(col, 0).cast(pa.int64()).to_numpy()
                full("a_int")[j] = ints  # (always: the rescale bound reads it, _largest_summed)
                if want_flt:
                    full("a_flt")[j] = ints.astype(np.float64)
                if want_key:
                    full("a_key")[j] = ints
                decoders[attr] = int
                vectorised[attr] = lambda keys: keys.tolist()
                arrow[attr] = (lambda tt: lambda keys: pa.array(keys, pa.int64()).cast(tt))(t)
            elif pa.types.is_floating(t):
                flts = (pc.fill_null(col, 0.0) if col.null_count else col).cast(pa.float64()).to_numpy()
                if attr not in self.split:
                    stats = self.engine.stats_of(attr)
                    if attr in sums and not stats.all_finite:
                        raise Unsupported(f"{attr} holds inf or nan")
                    if want_flt and stats.doubles is not None and len(attrs) == 1 and len(stats.doubles) == n:
                        matrices["a_flt"] = stats.doubles.reshape(1, n)  # copied by the stats' pass
                        want_flt = False
                    want_int = attr in exact_sums and attr not in self.inexact
                    if want_flt or want_int or want_key:
                        # One compiled pass: the doubles, the scaled integers (exact: a power
                        # of two; below 2**62, or the sum is inexact) and the order keys.
                        float_columns(flts, times_scale(1.0, self.engine.scales[attr]), want_flt, want_int, want_key,
                                      full("a_flt")[j] if want_flt else _SPARE_F,
                                      full("a_int")[j] if want_int else _SPARE_I,
                                      full("a_key")[j] if want_key else _SPARE_I)
                else:
                    if attr in sums and not np.isfinite(flts).all():
                        raise Unsupported(f"{attr} holds inf or nan")
                    full("a_flt")[j] = flts
                    scaled = flts * float(self.engine.scales[attr])  # exact: a power of two
                    hi = np.floor(scaled / 2.0**SPLIT_SHIFT)
                    lo_j = attrs.index(attr + SPLIT_SUFFIX)
                    full("a_int")[j] = hi.astype(np.int64)
                    full("a_int")[lo_j] = (scaled - hi * 2.0**SPLIT_SHIFT).astype(np.int64)
                    full("a_valid")[lo_j] = full("a_valid")[j]
                    full("a_key")[j] = float_key(flts)
                decoders[attr] = float_from_key
                vectorised[attr] = lambda keys: floats_from_keys(keys).tolist()
                arrow[attr] = (lambda tt: lambda keys: pa.array(floats_from_keys(keys)).cast(tt))(t)
            elif attr in sums:
                raise Unsupported(f"{attr} is {t}")
            elif pa.types.is_string(t) or pa.types.is_large_string(t):
                if self.streaming:
                    raise Unsupported(f"MIN/MAX of the string attribute {attr} (ranks differ per batch)")
                uniq = pc.unique(pc.drop_null(col)).to_pylist()
                ordered = sorted(uniq)
                rank = {v: i for i, v in enumerate(ordered)}
                full("a_key")[j] = np.fromiter((rank.get(v, 0) for v in col.to_pylist()), np.int64, n)
                decoders[attr] = ordered.__getitem__
                arrow[attr] = (lambda d: lambda keys: d.take(pa.array(keys, pa.int64())))(
                    pa.array(ordered, type=t) if ordered else pa.array([""], type=t))
            elif pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_boolean(t):
                storage = pa.int32() if pa.types.is_date32(t) else pa.int64()
                if pa.types.is_boolean(t):
                    storage = pa.int8()
                ints = pc.fill_null(col.cast(storage), 0).cast(pa.int64()).to_numpy()
                full("a_key")[j] = ints
                decoders[attr] = bool if pa.types.is_boolean(t) else (
                    lambda tt, st: lambda k: pa.scalar(k, st).cast(tt).as_py())(t, storage)
                if pa.types.is_boolean(t):
                    arrow[attr] = lambda keys: pa.array(keys != 0, pa.bool_())
                else:
                    arrow[attr] = (lambda tt, st: lambda keys: pa.array(keys, pa.int64()).cast(st).view(tt))(
                        t, storage)
            else:
                raise Unsupported(f"{attr} is {t}")
        for attr, count in self.square_limbs:  # the exact squares' limbs, from the exact values
            j = attrs.index(attr)
            a_int, a_valid = full("a_int"), full("a_valid")
            parts = magnitude_limbs(a_int[j], a_int[attrs.index(attr + SPLIT_SUFFIX)] if attr in self.split else None)
            for limb, values in enumerate(square_limbs(parts, count)):
                jj = attrs.index(square_attribute(attr, limb))
                a_int[jj] = values
                a_valid[jj] = a_valid[j]
        for name, dtype in dtypes.items():
            setattr(self, name, matrices[name] if name in matrices else np.zeros((k, 1), dtype))
        self.x_decoders = []
        self.x_vectorised = []
        self.x_arrow = []
        """Per MIN/MAX channel: int64 keys (never the identity) to an Arrow array of the attribute's type."""
        for slot in self.engine.layout.slots:
            if slot.kind in ("min", "max"):
                self.x_decoders.append(decoders[slot.attribute])
                self.x_vectorised.append(vectorised.get(slot.attribute))
                self.x_arrow.append(arrow[slot.attribute])

    # -- run ----------------------------------------------------------------------------
    def run(self, subs: Any, lo: np.ndarray, hi: np.ndarray) -> list:
        """Decoded states of windows ``[lo, hi)`` (None: no trend; UNDECIDED: re-run exactly)."""
        return self.decode(self.run_raw(subs, lo, hi))

    def decode(self, out: KernelOut) -> list:
        return decode_many(self.chan, self.engine.layout, out.i, out.f, out.x, out.e, out.r,
                           self.x_decoders, self.engine.scales, self.x_vectorised)

    def per_positions(self, name: str, rows: np.ndarray, plays: np.ndarray, compute: Callable[[], Any]) -> Any:
        """``compute()``, once per ``name`` and positions ``(rows, plays)`` (the same array
        objects): the blocks of windows an evaluation runs in turn
        (:mod:`cogra.runtime.compiled.windows.blockwise`) share their positions' event times,
        batch bounds and the like instead of re-deriving them from every event."""
        hit = self._per_positions.get(name)
        if hit is None or hit[0] is not rows or hit[1] is not plays:
            hit = (rows, plays, compute())
            self._per_positions[name] = hit
        return hit[2]

    def times_of(self, rows: np.ndarray, plays: np.ndarray) -> np.ndarray:
        """The event times of positions ``rows`` (see :meth:`per_positions`)."""
        return self.engine.times_at(rows)

    def max_batch_of(self, rows: np.ndarray, plays: np.ndarray) -> int:
        """:meth:`_max_batch` of positions ``rows`` (see :meth:`per_positions`)."""
        return self.per_positions("max_batch", rows, plays,
                                  lambda: self._max_batch(self.times_of(rows, plays), plays))

    def run_raw(self, subs: Any, lo: np.ndarray, hi: np.ndarray, cuts: Any = None) -> KernelOut:
        """Run the kernel over windows ``[lo, hi)`` of ``subs``; the channels, undecoded.
        ``cuts``: the windows' absence cut-offs (:class:`cogra.runtime.absence.Cutoffs`),
        which the generic and the generated window kernels take."""
        from cogra.runtime.compiled.aggregators.coarse_grained import run_windows

        rows = subs.rows
        plays = subs.bits
        if cuts is None and any(self.shape().absence):
            raise ValueError("a query with an absence runs each window with its cut-offs (Engine._run_kernels)")
        if self.kept:
            return self.run_mixed(rows, plays, lo, hi, cuts=cuts)
        times = self.times_of(rows, plays)
        a_int, a_flt, a_valid, a_key = self.a_int, self.a_flt, self.a_valid, self.a_key
        c = self.chan
        out = KernelOut.unfilled(len(lo), c)  # both kernels write every window's row
        outs = (out.i, out.f, out.x, out.e, out.r)
        lo, hi = lo.astype(np.int64), hi.astype(np.int64)
        generated = (times, plays, self.pair_ok_of(rows, plays), a_int, a_flt, a_valid, a_key,
                     rows, lo, hi)
        cut_arrays = cuts.kernel_arrays(self.engine.time_np) if cuts is not None else (times[:0], times[:0])
        after = cut_arrays if cuts is not None else ()  # (the generated kernel of an absence takes them last)
        specialized = self._specialized(len(rows), lo, hi, lambda bound: (*generated, bound, *outs, *after))
        if specialized is not None:
            kernel, rescale_above = specialized
            kernel(*generated, rescale_above, *outs, *after)
        else:
            max_batch = self.max_batch_of(rows, plays)
            run_windows(self.pattern, Positions(times, plays, self.pair_ok_of(rows, plays), rows), self.slots,
                        self.attributes, lo, hi, max_batch, Channels(*outs), *cut_arrays)
        return out

    @cached_property
    def pattern(self) -> Pattern:
        """The automaton as the generic kernels take it (:mod:`kernel_args`)."""
        return Pattern(int(self.mode), int(self.nv), self.pred_ptr, self.pred_idx, self.start_bits, self.final_bits)

    @cached_property
    def slots(self) -> SlotProgram:
        """The slot program as the generic kernels take it."""
        c = self.chan
        return SlotProgram(c.program, self.op_ptr, c.x_is_min, int(c.n_i), int(c.n_f))

    @property
    def attributes(self) -> AttributeRows:
        """The attributes' rows loaded last (the table's, or a chunk's: :meth:`load_rows`)."""
        return AttributeRows(self.a_int, self.a_flt, self.a_valid, self.a_key)

    @property
    def pair_ok(self) -> np.ndarray:
        """Per table row, :meth:`Engine.pair_ok_bits` (or their contiguous fold), computed at
        first use: the generated kernels of a query without pair checks never read them."""
        if self._pair_ok is None:
            self._pair_ok = self.engine.pair_ok_bits()
        return self._pair_ok

    @pair_ok.setter
    def pair_ok(self, bits: np.ndarray) -> None:
        self._pair_ok = bits

    def pair_ok_of(self, rows: np.ndarray, plays: np.ndarray) -> np.ndarray:
        """The pair predicates' bits of positions ``rows`` (see :meth:`per_positions`) for
        the window kernels (generic, sliding, generated), which take an empty array for all
        ones: they get one where the query's shape has no pair checks, instead of a gather
        over every position (~4 ms per 1M events; ~40 ms over fresh memory), and then read
        no pair bit at all."""
        if not self.shape().pair_checks:
            return NO_PAIR_OK
        return self.per_positions("pair_ok", rows, plays, lambda: self.pair_ok[rows])

    def run_mixed(self, rows: np.ndarray, plays: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                  share: Any = None, cuts: Any = None) -> KernelOut:
        """The mixed-grained kernel over windows ``[lo, hi)`` of the positions ``rows``
        (table rows) playing ``plays``; the channels, undecoded.

        ``share`` (:class:`cogra.runtime.compiled.sharing.saved_totals.Share`): save the shared
        variable's rows, or take them from the cache -- then no predicate reads an
        earlier event here, and the kernel builds no trees.  ``cuts``: the windows' absence
        cut-offs (:class:`cogra.runtime.absence.Cutoffs`)."""
        from cogra.runtime.compiled.aggregators.mixed_grained import run_mixed_windows
        from cogra.runtime.compiled.codes import SHARE_TAKE
        from cogra.runtime.compiled.sharing.saved_totals import Share

        share = share or Share.none(self)
        times = self.engine.time_np[rows]
        c = self.chan
        out = KernelOut.zeros(len(lo), c)
        lo, hi = lo.astype(np.int64), hi.astype(np.int64)
        max_window = max(1, int((hi - lo).max())) if len(lo) else 1
        max_batch = self._max_batch(times, plays)
        p = self.no_pair_arrays if share.mode == SHARE_TAKE else self.pair_arrays
        run_mixed_windows(
            self.pattern, Positions(times, plays, self.pair_ok[rows], rows), self.slots, self.attributes,
            self.kept_bits, p, lo, hi, max_batch, max_window, Channels(out.i, out.f, out.x, out.e, out.r),
            share.arguments(),
            *(cuts.kernel_arrays(self.engine.time_np) if cuts is not None else (times[:0], times[:0])),
        )
        return out

    @cached_property
    def pair_arrays(self) -> "PairArrays":
        """The indexed pairs as the mixed-grained kernels take them."""
        return PairArrays(self.pair_of, self.pair_flags, self.m_of, self.live_i, self.live_f, self.live_x,
                          (self.h_rank, self.h_valid, self.q_a, self.q_b, self.q_eq, self.g_valid))

    @cached_property
    def no_pair_arrays(self) -> "PairArrays":
        """As :attr:`pair_arrays`, with no indexed pair (runs that load a shared variable)."""
        none_i, none_b = np.zeros((0, 1), np.int64), np.zeros((0, 1), np.bool_)
        live = np.zeros((1, 1), np.int64)
        return PairArrays(np.full_like(self.pair_of, -1), np.zeros(0, np.int64), np.zeros(0, np.int64),
                          live, live, live, (none_i, none_b, none_i, none_i, none_i, np.zeros((0, 1), np.int8)))

    @cached_property
    def _largest_summed(self) -> float:
        """max(1, |x|) over every summed value as the kernels hold it (table-wide, once)."""
        summed = [j for j, attr in enumerate(self.chan.attributes)
                  if any(s.attribute == base_attribute(attr) and s.role in ("sum", "sq")
                         for s in self.engine.layout.slots)]
        biggest = 1.0
        squares = {square_attribute(attr, j) for attr, count in self.square_limbs for j in range(count)}
        for j in summed:
            attr = self.chan.attributes[j]
            if attr in squares:
                biggest = max(biggest, 2.0**SPLIT_SHIFT)  # (a limb is below 2**32)
                continue
            schema = self.engine.table.schema
            floating = attr in schema.names and pa.types.is_floating(schema.field(attr).type)
            if floating and attr not in self.split:  # (from the pass that found the scale)
                stats = self.engine.stats_of(attr)
                if attr in self.inexact:
                    biggest = max(biggest, stats.largest)
                elif attr in self.exact_sums:  # (else a_int is all 0)
                    biggest = max(biggest, times_scale(stats.largest, self.engine.scales[attr]))
                continue
            if not self.table_rows:  # (the rows loaded are a chunk's: read the table's column)
                col = self.engine.table.column(attr.removesuffix(SPLIT_SUFFIX))
                largest = pc.max(pc.abs(col.cast(pa.float64()))).as_py() or 0.0
                scale = self.engine.scales.get(attr.removesuffix(SPLIT_SUFFIX), 1) if attr in self.split else 1
                biggest = max(biggest, times_scale(largest, scale))
                continue
            # Exact sums accumulate the scaled integers (a_int), inexact ones the doubles.
            source = self.a_flt[j] if attr in self.inexact else self.a_int[j]
            largest = float(np.max(np.abs(source), where=self.a_valid[j], initial=0))
            if attr in self.split:
                largest *= 2.0**SPLIT_SHIFT
            biggest = max(biggest, largest)
        return biggest

    def _specialized(self, n_events: int, lo: np.ndarray, hi: np.ndarray,
                     arguments: Callable[[float], tuple]):
        """A generated kernel and its rescale bound, when it pays off and is safe; else
        None, and the kernel may be compiled in the background for later calls
        (:func:`background.generated_or_requested`; ``arguments(bound)``: the call's
        arguments, for their types -- the generic kernel needs no bound, so none is
        computed for it)."""
        if self.kept or len(lo) == 0:
            return None
        from cogra.runtime.compiled.codegen.background import generated_or_requested
        from cogra.runtime.compiled.codegen.kernel_cache import kernel_for

        shape = self.shape()
        if generated_or_requested(shape, "kernel", n_events, SPECIALIZE_MIN_EVENTS, self.engine.n,
                                  lambda: arguments(0.0)):  # (only the types count)
            bound = self.rescale_bound(lo, hi)
            return None if bound is None else (kernel_for(shape), bound)
        return None

    def rescale_bound(self, lo: np.ndarray, hi: np.ndarray) -> float | None:
        """The generated kernels' rescale bound for windows ``[lo, hi)``, or None if no
        sound bound leaves them room.

        Trend counts are watched against a bound such that no slot can reach inf
        before the next check: sums are at most count * window * max|x|, and one batch
        multiplies counts by at most 1 + window * nv."""
        window = float(max(1, _longest(lo, hi)))
        biggest = self._largest_summed
        bound = 2.0**1000 / (window * biggest * (1.0 + window * self.nv))
        return bound if bound > 2.0**620 else None

    @staticmethod
    def specialize_min_events() -> int:
        """:data:`SPECIALIZE_MIN_EVENTS`, read when asked (tests lower it), for the runs of
        other modules that hold an executor: the sharing runs and the ring's generated runs."""
        return SPECIALIZE_MIN_EVENTS

    def shape(self, loads: tuple | None = None, live: bool = False):
        """The query's shape, for the generated kernels (:mod:`cogra.runtime.compiled.codegen`); ``loads``: see
        :attr:`query_shape.Shape.loads`; ``live``: with the variables' live channels
        (:attr:`query_shape.Shape.live`)."""
        from cogra.runtime.compiled.codegen.query_shape import Shape

        memo = (loads, live)
        if memo in self.shapes:
            return self.shapes[memo]
        b = self.engine.bound
        self.shapes[memo] = Shape(
            mode=self.mode, nv=self.nv,
            preds=tuple(tuple(sorted(b.automaton.pred[v])) for v in range(self.nv)),
            start=tuple(sorted(b.automaton.start)), final=tuple(sorted(b.automaton.final)),
            ops=tuple(tuple(int(x) for x in row) for row in self.chan.program),
            n_i=self.chan.n_i, n_f=self.chan.n_f,
            x_is_min=tuple(bool(x) for x in self.chan.x_is_min),
            pair_checks=tuple(sorted(self.engine.pairs.by_pair)),
            loads=loads,
            absence=(b.leading is not None, b.trailing is not None),
            live=tuple(tuple(tuple(int(k) for k in row[1:1 + row[0]]) for row in arr)
                       for arr in (self.var_live_i, self.var_live_f)) if live else None,
        )
        return self.shapes[memo]

    @staticmethod
    def _max_batch(times: np.ndarray, plays: np.ndarray) -> int:
        """The most (event, variable) rows one timestamp's batch holds (at least 1)."""
        return max(1, int(_largest_batch(times, plays)))


@njit(cache=True)
def _largest_batch(times, plays):
    """The largest sum of ``plays``' set bits over a run of equal ``times``, in one pass
    (with numpy: six passes and four temporaries, ~8 ms per 400k positions)."""
    best = 0
    run = 0
    for i in range(times.shape[0]):
        if i > 0 and times[i] != times[i - 1]:
            run = 0
        x = plays[i]
        while x:
            x &= x - np.uint64(1)
            run += 1
        if run > best:
            best = run
    return best


@njit(cache=True)
def _longest(lo, hi):
    """``max(hi - lo)`` (0 if empty) without a temporary of every window's length."""
    best = 0
    for w in range(lo.shape[0]):
        if hi[w] - lo[w] > best:
            best = hi[w] - lo[w]
    return best


__all__ = ["KernelDriver", "Unsupported", "UNDECIDED"]
