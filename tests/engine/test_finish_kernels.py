"""The compiled common cases of the column-wise finish (common_cases) agree with the
numpy rules (by_column.numpy_item_columns) on every key, for kernel outputs built to sit
on the rules' thresholds: residues that are the value or wrapped past 2**64, bounds
just below and above FITS / RESOLVABLE / 2**64, rescaled windows whose bounds fell
below TINY, NaN, cancelling sums, exact averages around 2**53, split float sums, and
keys merging several windows.  Whatever the compiled pass decides must equal what the
numpy rules decide; what it leaves, the numpy rules decide for it.
"""

from __future__ import annotations

import math
import struct

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numba import njit

import cogra
from cogra.runtime.compiled.finish import by_column
from cogra.runtime.compiled.finish import common_cases as fk
from cogra.runtime.compiled.channels import KernelOut

QUERY = ("RETURN g, COUNT(*), COUNT(A), SUM(A.x), AVG(A.x), SUM(A.f), AVG(A.f), MIN(A.x)\n"
         "PATTERN A+\nWHERE [g]\nGROUP-BY g\nWITHIN 10 seconds SLIDE 5 seconds")
AVERAGES = ("RETURN g, AVG(A.x), AVG(A.f), MIN(A.x)\n"
            "PATTERN A+\nWHERE [g]\nGROUP-BY g\nWITHIN 10 seconds SLIDE 5 seconds")
KINDS = {QUERY: {"int", "isum", "fsplit", "fcount", "inf", "x"},  # fcount: the SUMs' non-null counts
         AVERAGES: {"fcount", "fapprox", "isum", "inf", "x"}}  # A.x has a negative value: its sum stays exact


@pytest.fixture(scope="module", params=[QUERY, AVERAGES], ids=["exact", "averages"])
def context(request) -> by_column.Context:
    """The query's real finish context (a float attribute spanning enough to be split)."""
    query = request.param
    captured: dict = {}
    original = by_column.item_columns

    def spy(ctx, out, keyed):
        captured["ctx"] = ctx
        return original(ctx, out, keyed)

    table = pa.table({"type": ["A"] * 4, "time": [0, 1, 2, 3], "g": [1, 1, 2, 2],
                      "x": [3, -5, 7, 1], "f": [0.1, 1e6, 2.5, 3.25]})
    by_column.item_columns = spy
    try:
        cogra.evaluate(query, table)
    finally:
        by_column.item_columns = original
    ctx = captured["ctx"]
    assert {entry[0] for entry in ctx.chan.slot_map} == KINDS[query]
    return ctx


@pytest.fixture(params=["generic", "generated"])
def decoder(request, monkeypatch) -> list:
    """A window per key finishes with the generic decode and item loops or the pass
    generated for the query's slots and items (window_finish); the list collects the
    generated ones that ran."""
    from cogra.runtime.compiled.codegen import kernel_cache

    ran: list = []
    if request.param == "generated":
        monkeypatch.setattr(by_column, "SPECIALIZE_MIN_KEYS", 0)
        original = kernel_cache.finisher_for

        def spy(shape):
            ran.append(shape)
            return original(shape)

        monkeypatch.setattr(kernel_cache, "finisher_for", spy)
    else:
        monkeypatch.setattr(by_column, "SPECIALIZE_MIN_KEYS", 1 << 62)
        monkeypatch.setattr(kernel_cache, "REUSE_COMPILED", False)
    ran.append(request.param)
    return ran


def decoded_by(decoder: list) -> None:
    """The decoder the fixture asked for ran (a generated one: with its shape recorded)."""
    assert (len(decoder) > 1) == (decoder[0] == "generated"), decoder


# Magnitudes where the rules change, and values just around them.
EDGES = [0.0, 1.0, 2.0**52, 2.0**53, 2.0**61, 2.0**62, 2.0**63 * (1 - 1e-6), 2.0**63, 2.0**64 * (1 - 1e-6),
         2.0**64, 2.0**64 * (1 + 1e-6), 2.0**70, 2.0**61 / 1e-6, 2.0**90, 2.0**92, 2.0**200, 2.0**-900, 2.0**-1000]


def _floats(rng: np.random.Generator, n: int) -> np.ndarray:
    edge = np.array(EDGES)[rng.integers(0, len(EDGES), n)]
    wiggle = np.array([1.0, 1 - 2**-40, 1 + 2**-40, 0.5, 3.0])[rng.integers(0, 5, n)]
    sign = np.where(rng.random(n) < 0.2, -1.0, 1.0)
    out = edge * wiggle * sign
    out[rng.random(n) < 0.02] = np.nan
    return out


def _residues(rng: np.random.Generator, n: int) -> np.ndarray:
    bits = rng.integers(0, 65, n)
    raw = rng.integers(0, 2**63, n, dtype=np.int64).view(np.uint64) * np.uint64(2) + rng.integers(0, 2, n).astype(np.uint64)
    mask = np.where(bits >= 64, np.uint64(2**64 - 1), (np.uint64(1) << bits.astype(np.uint64)) - np.uint64(1))
    out = raw & mask
    negative = rng.random(n) < 0.2  # small negative sums read as residues near 2**64
    out[negative] = (-(out[negative] & np.uint64(2**40 - 1)).astype(np.int64)).view(np.uint64)
    return out


def random_out(rng: np.random.Generator, ctx: by_column.Context, windows: int) -> KernelOut:
    chan = ctx.chan
    out = KernelOut.zeros(windows, chan)
    out.i[:] = _residues(rng, out.i.size).reshape(out.i.shape)
    out.f[:] = _floats(rng, out.f.size).reshape(out.f.shape)
    # Bounds are magnitudes; keep some consistent with their residues (the common case).
    for entry in chan.slot_map:
        if entry[0] in ("int", "isum"):
            ii, fi, bi = entry[1], entry[2], entry[2] if entry[0] == "int" else entry[3]
            out.f[:, bi] = np.abs(out.f[:, bi])
            agree = rng.random(windows) < 0.5
            small = out.i[:, ii].view(np.int64).astype(np.float64)
            out.f[agree, fi] = small[agree]
            out.f[agree, bi] = np.abs(small[agree]) * (1 + 1e-9)
        elif entry[0] == "fsplit":
            out.f[:, entry[3]] = np.abs(out.f[:, entry[3]])
            out.f[:, entry[6]] = np.abs(out.f[:, entry[6]])
        elif entry[0] in ("fcount", "fapprox"):  # counts are their own bound
            fi, bi = entry[2], entry[3]
            out.f[:, bi] = np.abs(out.f[:, bi])
            agree = rng.random(windows) < 0.5
            whole = rng.integers(-1000 if entry[0] == "fapprox" else 0, 10**6, windows).astype(np.float64)
            out.f[agree, fi] = whole[agree]
            out.f[agree, bi] = np.abs(whole[agree]) * (1 + rng.integers(0, 2, windows)[agree] * 1e-9)
    out.x[:] = rng.integers(-50, 50, out.x.shape)
    out.e[:] = np.where(rng.random(windows) < 0.7, 0, rng.integers(1, 1200, windows))
    out.r[:] = rng.random(windows) < 0.9
    return out


def random_keyed(rng: np.random.Generator, out: KernelOut, merged: bool) -> by_column.Keyed:
    w = len(out.r)
    seg = np.arange(w) // 3 if not merged else rng.integers(0, 4, w)
    groups = [(int(s % 2) if merged else int(s),) for s in range(int(seg.max()) + 1)]
    start = np.arange(w) % 3 * 5 if not merged else rng.integers(0, 3, w) * 5
    return by_column.keyed_windows(groups, seg, start, out)


def compare(ctx: by_column.Context, out: KernelOut, keyed: by_column.Keyed) -> int:
    """Asserts equal columns; returns how many keys the compiled pass decided itself."""
    numpy_cols = by_column.numpy_item_columns(ctx, out, keyed)
    left: list = []
    original = by_column._take_numpy_rules

    def spy(ctx_, out_, keyed_, keys, cols):
        left.append(len(keys))
        return original(ctx_, out_, keyed_, keys, cols)

    by_column._take_numpy_rules = spy
    try:
        compiled_cols = by_column._compiled_item_columns(ctx, out, keyed)
    finally:
        by_column._take_numpy_rules = original
    for i, (a, b) in enumerate(zip(compiled_cols, numpy_cols)):
        if a is None or isinstance(a.values, pa.Array):
            assert b is None or a.values.equals(b.values)
            continue
        for name in ("null", "overflow", "undecided"):
            assert np.array_equal(getattr(a, name), getattr(b, name)), (i, name)
        valid = ~(a.null | a.overflow | a.undecided)
        assert np.array_equal(np.asarray(a.values)[valid], np.asarray(b.values)[valid]), i
    return len(keyed.first) - sum(left)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the numpy rules on NaN and garbage
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), merged=st.booleans())
def test_compiled_equals_numpy_rules_on_the_thresholds(context, decoder, seed: int, merged: bool) -> None:
    rng = np.random.default_rng(seed)
    out = random_out(rng, context, 60)
    compare(context, out, random_keyed(rng, out, merged))
    if not merged:  # (merged keys decode with decode_slots)
        decoded_by(decoder)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the numpy rules on NaN and garbage
def test_a_key_of_one_window_among_merged_keys_decides_as_its_window(context, decoder) -> None:
    # Found by the property test above: a key holding one window, where other keys merge
    # several, with a split float sum between 2**92 and 2**96 (big for one window, not for
    # a merged sum). decode_slots decides such a key by its window's own rule; the numpy
    # rules applied the merged one (undecided). They now agree (by_column.merged_number).
    rng = np.random.default_rng(1267)
    out = random_out(rng, context, 60)
    compare(context, out, random_keyed(rng, out, True))


def consistent_out(rng: np.random.Generator, context, windows: int) -> KernelOut:
    """Moderate values whose bounds prove them: every key is decided by the compiled pass."""
    out = random_out(rng, context, windows)
    limbs = []  # (i, f, bound f, smallest, largest value)
    for entry in context.chan.slot_map:
        if entry[0] == "int":
            limbs.append((entry[1], entry[2], entry[2], 0, 10**6))
        elif entry[0] == "isum":
            limbs.append((entry[1], entry[2], entry[3], -1000, 10**6))
        elif entry[0] == "fsplit":  # hi * 2**32 + lo: averages below 2**53 need a small hi
            limbs += [(entry[1], entry[2], entry[3], -2, 3), (*entry[4:7], -1000, 10**6)]
        elif entry[0] == "fcount":  # doubles alone: no residue
            limbs.append((None, entry[2], entry[3], 0, 10**6))
        elif entry[0] == "fapprox":
            limbs.append((None, entry[2], entry[3], 1, 10**6))
    for ii, fi, bi, smallest, largest in limbs:
        v = rng.integers(smallest, largest, windows)
        if ii is not None:
            out.i[:, ii] = v.astype(np.int64).view(np.uint64)
        out.f[:, fi] = v
        out.f[:, bi] = np.abs(v) + 1.0
    out.e[:] = 0
    out.r[:] = True
    return out


def test_common_values_are_decided_by_the_compiled_pass(context) -> None:
    rng = np.random.default_rng(0)
    out = consistent_out(rng, context, 300)
    keyed = random_keyed(rng, out, merged=True)
    assert compare(context, out, keyed) == len(keyed.first)


@pytest.mark.parametrize("unreached", [[89], [0, 44], [3, 88, 89]])
def test_a_window_per_key_is_decoded_in_the_kernels_order(context, decoder, unreached) -> None:
    # decode_one_window_per_key reads the windows in the kernel's order (by segment) and
    # writes each key's results where the key is; a window with no finished trend has no
    # key and must write nothing wherever it lies (the last window is the last key's
    # neighbour in neither order).
    rng = np.random.default_rng(len(unreached))
    out = consistent_out(rng, context, 90)
    out.r[unreached] = False
    keyed = random_keyed(rng, out, merged=False)
    assert len(keyed.windows) == len(keyed.first) == 90 - len(unreached)
    assert compare(context, out, keyed) == len(keyed.first)
    decoded_by(decoder)


def test_segments_longer_than_a_tile_are_decoded_in_tiles(context, decoder) -> None:
    # Three segments of 600, 900 and 1400 windows (tiles of 512: the longest, last one
    # spans three), unreached windows at a tile's edges and inside; every key decided,
    # as the numpy rules decide it.
    from cogra.runtime.compiled.finish import common_cases

    lengths = [600, 900, 1400]
    assert lengths[-1] > 2 * common_cases.TILE
    n = sum(lengths)
    rng = np.random.default_rng(7)
    out = consistent_out(rng, context, n)
    out.r[[0, 511, 512, 599, 600 + 5, 1499, 1500 + 1023, 1500 + 1024, n - 1]] = False
    seg = np.repeat(np.arange(3), lengths)
    start = np.concatenate([np.arange(m) * 5 for m in lengths])
    keyed = by_column.keyed_windows([(0,), (1,), (2,)], seg, start, out)
    assert len(keyed.windows) == len(keyed.first) == n - 9
    assert compare(context, out, keyed) == len(keyed.first)
    decoded_by(decoder)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the numpy rules on NaN and garbage
@pytest.mark.parametrize("seed", range(6))
def test_shared_rows_finish_as_their_windows_would(context, decoder, seed: int) -> None:
    # The sliding kernel writes one row for consecutive windows over the same events
    # (KernelOut.row_first): each row is decoded once and written to each of its windows'
    # keys.  The columns equal those of the same channels with a row per window, and the
    # numpy rules' (compare), with unreached rows, and rows of one window or of hundreds.
    from cogra.runtime.compiled.finish import common_cases

    rng = np.random.default_rng(seed)
    lengths = [700, 1300, 40]
    seg = np.repeat(np.arange(3), lengths)
    start = np.concatenate([np.arange(m) * 5 for m in lengths])
    new_row = (rng.random(len(seg)) < (0.5 if seed % 2 else 0.002)) | np.r_[True, seg[1:] != seg[:-1]]
    row_first = np.append(np.flatnonzero(new_row), len(seg)).astype(np.int64)
    shared = (random_out if seed < 3 else consistent_out)(rng, context, len(row_first) - 1)
    shared.r[rng.random(len(shared.r)) < 0.1] = False
    shared.row_first = row_first
    per_window = shared.per_window()
    assert per_window.row_first is None and len(per_window.e) == len(seg)
    groups = [(0,), (1,), (2,)]
    keyed = by_column.keyed_windows(groups, seg, start, shared)
    assert keyed.window_key is not None
    if seed % 2:  # short rows: a segment's rows span several tiles
        assert np.bincount(seg[row_first[:-1]]).max() > common_cases.TILE
    else:  # long rows: a row's windows span more keys than a tile has rows
        assert np.diff(row_first).max() > common_cases.TILE
    theirs = by_column.keyed_windows(groups, seg, start, per_window)
    assert np.array_equal(keyed.start, theirs.start) and np.array_equal(keyed.gid, theirs.gid)
    assert np.array_equal(per_window.e[theirs.windows], shared.e[keyed.windows])  # rows, not windows
    compare(context, shared, keyed)
    ours = by_column._compiled_item_columns(context, shared, keyed)
    for a, b in zip(ours, by_column._compiled_item_columns(context, per_window, theirs)):
        if a is None or isinstance(a.values, pa.Array):
            continue
        for name in ("null", "overflow", "undecided"):
            assert np.array_equal(getattr(a, name), getattr(b, name)), name
        valid = ~(a.null | a.overflow | a.undecided)
        assert np.array_equal(np.asarray(a.values)[valid], np.asarray(b.values)[valid])
    decoded_by(decoder)


def test_generated_finishers_are_keyed_by_slots_and_items_not_scales() -> None:
    # The scale bits of approximate sums depend on the data: read at run time, they do not
    # make a new finisher; a slot's kind or columns, or an item's operation, do.
    from cogra.runtime.compiled.codegen import window_finish as gen

    slots = np.array([[fk.KIND_COUNT, 0, 0, 0, 0, 0, 0], [fk.KIND_APPROX_SUM, 0, 1, 1, 48, 0, 0],
                      [fk.KIND_APPROX_COUNT, 0, 2, 2, 0, 0, 0]], np.int64)
    items = [(gen.ITEM_COUNT, 0, 0), (gen.ITEM_AVERAGE, 1, 2)]
    other_scale = slots.copy()
    other_scale[1, 4] = 12
    other_column = slots.copy()
    other_column[1, 2] = 2
    shape = gen.DecodeShape.of(slots, items)
    assert shape == gen.DecodeShape.of(other_scale, items)
    assert shape.key != gen.DecodeShape.of(other_column, items).key
    assert shape.key != gen.DecodeShape.of(slots, [(gen.ITEM_COUNT, 0, 0), (gen.ITEM_FLOAT_SUM, 1, 2)]).key
    source = gen.generate(shape)
    assert "scale_1 = slots[1, 4]" in source and "_window(0, out_i[d, 0]" in source
    assert "item_scale_1 = scales[1]" in source and "average_item(s1, v1, m1, p1, s2, v2, m2, p2" in source


@pytest.mark.parametrize("loaded", [False, True])
def test_a_few_keys_finish_with_a_generated_pass_only_once_it_is_loaded(monkeypatch, loaded: bool) -> None:
    # A compiled (say bundled) pass for a handful of keys costs more to load than the
    # generic loops take; one this process has loaded already runs.
    from cogra.runtime.compiled.codegen import kernel_cache

    asked, ran = [], []
    monkeypatch.setattr(kernel_cache, "is_compiled", lambda shape, function: True)
    monkeypatch.setattr(kernel_cache, "is_loaded", lambda shape: asked.append(shape) or loaded)
    monkeypatch.setattr(kernel_cache, "finisher_for", lambda shape: ran.append(shape) or (lambda *args: False))
    finished = []
    original = by_column._finished_in_one_pass

    def spy(*args):
        result = original(*args)
        finished.append(result)
        return result

    monkeypatch.setattr(by_column, "_finished_in_one_pass", spy)
    table = pa.table({"type": ["A", "A", "B", "A"], "time": [0, 1, 2, 3], "g": [1, 2, 1, 2]})
    query = "RETURN g, COUNT(*) PATTERN SEQ(A+, B) WHERE [g] GROUP-BY g"
    if loaded:  # (the stand-in pass fills nothing: only that it ran is checked)
        cogra.evaluate(query, table, compiled=True)
        assert len(ran) == 1 and len(asked) == 1
        return
    result = cogra.evaluate(query, table, compiled=True).to_pylist()
    assert asked and finished == [None] and not ran
    assert result == [{"g": 1, "COUNT(*)": 1}]


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_keys_merged_by_start_equal_the_sorted_keys(data) -> None:
    # common_cases.keys_by_start merges the segments' runs by (start, group rank); where
    # it applies, the keys are those keyed_windows gets by sorting, and each window's key
    # is its place among them.  Rows may be shared by consecutive windows of a segment
    # (KernelOut.row_first): then ``reached`` is per row.
    from cogra.runtime.compiled.finish import common_cases as fk

    n_seg = data.draw(st.integers(1, 6))
    spread = data.draw(st.sampled_from([1, 1, 1000]))  # sparse starts may exceed the sweep's budget
    seg, start = [], []
    for s in range(n_seg):
        starts = sorted(set(data.draw(st.lists(st.integers(-15, 15), max_size=20))))
        seg += [s] * len(starts)
        start += [x * spread * (s + 1 if spread > 1 else 1) for x in starts]
    seg, start = np.asarray(seg, np.int64), np.asarray(start, np.int64)
    order = np.argsort(seg, kind="stable")
    seg, start = seg[order], start[order]
    shared = data.draw(st.booleans())
    if shared:  # a new row at every segment's first window, and wherever drawn
        new_row = [w == 0 or seg[w] != seg[w - 1] or data.draw(st.booleans()) for w in range(len(seg))]
        row_first = np.append(np.flatnonzero(new_row), len(seg)).astype(np.int64)
        row_of = np.repeat(np.arange(len(row_first) - 1), np.diff(row_first))
    else:
        row_first, row_of = np.zeros(0, np.int64), np.arange(len(seg))
    n_rows = len(row_first) - 1 if shared else len(seg)
    reached_rows = np.asarray(data.draw(st.lists(st.booleans(), min_size=n_rows, max_size=n_rows)), bool)
    distinct = data.draw(st.booleans())
    seg_rank = (np.asarray(data.draw(st.permutations(range(n_seg))), np.int64) if distinct
                else np.asarray(data.draw(st.lists(st.integers(0, 1), min_size=n_seg, max_size=n_seg)), np.int64))
    if data.draw(st.booleans()):  # every row reached: said by an empty ``reached``
        reached_rows[:] = True
    given_reached = np.zeros(0, bool) if reached_rows.all() else reached_rows
    n, key_start, key_group, window_key = fk.keys_by_start(seg, start, given_reached, row_first, seg_rank)
    present = np.unique(seg)
    if len(np.unique(seg_rank[present])) < len(present):
        assert n == -1  # two segments of one output group
        return
    if 2 * len(present) * len(np.unique(start)) <= 4 * len(seg) + 64:
        assert n >= 0  # within the sweep's budget, it applies
    if n < 0:
        return
    ids = np.flatnonzero(reached_rows[row_of])
    want = ids[np.lexsort((seg_rank[seg[ids]], start[ids]))]
    assert key_start[:n].tolist() == start[want].tolist()
    assert key_group[:n].tolist() == seg_rank[seg[want]].tolist()
    want_key = np.full(len(seg), -1)
    want_key[want] = np.arange(len(want))
    assert window_key.tolist() == want_key.tolist()


def test_keys_by_start_refuses_windows_out_of_walk_order() -> None:
    from cogra.runtime.compiled.finish import common_cases as fk

    seg = np.array([0, 0, 1], np.int64)
    reached = np.ones(3, bool)
    rank = np.array([0, 1], np.int64)
    every = np.zeros(0, np.int64)
    assert fk.keys_by_start(seg, np.array([5, 3, 1], np.int64), reached, every, rank)[0] == -1
    assert fk.keys_by_start(seg, np.array([3, 5, 1], np.int64), reached, every, rank)[0] == 3


@njit
def _both_ldexp(x, e):
    return fk._ldexp(x, e), math.ldexp(x, e)


EDGE_EXPONENTS = [-1100, -1075, -1074, -1023, -1022, -1021, -1, 0, 1, 52, 1022, 1023, 1024, 1100]


@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=True, allow_infinity=True, width=64),
       st.one_of(st.integers(-1200, 1200), st.sampled_from(EDGE_EXPONENTS)))
def test_table_ldexp_equals_libm_bit_for_bit(x: float, e: int) -> None:
    """The decode's ``_ldexp`` (a product with a tabled power of two) gives libm's ldexp
    exactly, rounding into subnormals and overflowing to infinity included."""
    mine, libm = _both_ldexp(x, e)
    assert struct.pack("<d", mine) == struct.pack("<d", libm) or (math.isnan(mine) and math.isnan(libm))


def test_table_ldexp_rounds_into_subnormals_as_libm() -> None:
    """Values that land between subnormals (the one place a product could round twice)."""
    rng = np.random.default_rng(7)
    for x in rng.uniform(1.0, 2.0, 2000):
        for e in (-1023, -1030, -1050, -1073, -1074):
            mine, libm = _both_ldexp(float(x), e)
            assert struct.pack("<d", mine) == struct.pack("<d", libm), (x, e)
