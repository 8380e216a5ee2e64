"""The ring kernel's fused batches (``mixed_one_pass._fused_batch``) against the rows they replace.

A batch whose events all play one type-grained variable updates that variable's lane
totals in one pass per channel instead of building, contributing and adding a row per
event.  Checked here: the helper against a direct transcription of the row-by-row rules
(exact in the integer channels, to rounding in the floats), every case where it must
decline, and the ring kernel end to end against the exact Python executor on patterns
whose type-grained variables read zero, one, two and three other variables' totals.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from cogra.runtime.compiled.windows import mixed_one_pass
from cogra.runtime.compiled.channels import OP_CNT, OP_NN, OP_SUM_FLOAT, OP_SUM_INT
from cogra.runtime.compiled.aggregators.coarse_grained import RESCALE_ABOVE
from tests.compare import assert_same_result
from tests.engine.test_mixed_sliding import RING, compiled, exact, grouped
from tests.engine.test_sliding import forced

N_I, N_F = 4, 7
"""Channels of the helper tests: I = count, COUNT(V), nn(V.a), SUM(V.b); F = count,
COUNT(V), nn(V.a), SUM(V.b) and its |x|-bound, SUM(V.c) (a float) and its bound."""


def _program(nv: int) -> tuple[np.ndarray, np.ndarray]:
    """Every variable contributes COUNT(V), nn(a) / SUM(b) of an integer and SUM(c) of a
    float attribute (the channels are shared: a test state is one variable's totals)."""
    rows, ptr = [], [0]
    for v in range(nv):
        rows += [(v, OP_CNT, -1, 1, 1, -1), (v, OP_NN, 0, 2, 2, -1),
                 (v, OP_SUM_INT, 1, 3, 3, 4), (v, OP_SUM_FLOAT, 2, -1, 5, 6)]
        ptr.append(len(rows))
    return np.array(rows, np.int64), np.array(ptr, np.int64)


def _live(nv: int, narrow: int) -> tuple[np.ndarray, np.ndarray]:
    """Live channels per variable: all, except variable ``narrow`` (count only)."""
    li = np.zeros((nv, N_I + 1), np.int64)
    lf = np.zeros((nv, N_F + 1), np.int64)
    for v in range(nv):
        ci, cf = ([0], [0]) if v == narrow else (list(range(N_I)), list(range(N_F)))
        li[v, 0], lf[v, 0] = len(ci), len(cf)
        li[v, 1:1 + len(ci)] = ci
        lf[v, 1:1 + len(cf)] = cf
    return li, lf


def _rowwise(i, j, plays, pair_ok, nv, pred_ptr, pred_idx, pred_bit, start_bits, prog, op_ptr,
             a_int, a_flt, a_valid, rows, si, sf, li, lf, skip_var, slot):
    """The generic path's rules, event by event: each row read from the totals before the
    batch, then all rows added (in the variable's live channels)."""
    si, sf = si.copy(), sf.copy()
    lanes = si.shape[2]
    new = []
    for e in range(i, j):
        bits = int(plays[e]) & ~((1 << skip_var) if skip_var >= 0 else 0)
        for v in range(nv):
            if not (bits >> v) & 1:
                continue
            ri = np.zeros((N_I, lanes), np.uint64)
            rf = np.zeros((N_F, lanes))
            if (int(start_bits) >> v) & 1:
                ri[0, slot] += np.uint64(1)
                rf[0, slot] += 1.0
            for pp in range(pred_ptr[v], pred_ptr[v + 1]):
                u = pred_idx[pp]
                if (int(pair_ok[e]) >> int(pred_bit[pp])) & 1:
                    ri += si[u]
                    rf += sf[u]
            if not (rf[0] > 0).any():
                continue
            r = rows[e]
            for _, op, a, s1, s2, s3 in prog[op_ptr[v]:op_ptr[v + 1]]:
                if op != OP_CNT and not a_valid[a, r]:
                    continue
                if op in (OP_CNT, OP_NN):
                    ri[s1] += ri[0]
                    rf[s2] += rf[0]
                elif op == OP_SUM_INT:
                    ri[s1] += np.uint64(a_int[a, r]) * ri[0]
                    rf[s2] += float(a_int[a, r]) * rf[0]
                    rf[s3] += abs(float(a_int[a, r])) * rf[0]
                else:
                    rf[s2] += a_flt[a, r] * rf[0]
                    rf[s3] += abs(a_flt[a, r]) * rf[0]
            new.append((v, ri, rf))
    for v, ri, rf in new:
        ci, cf = li[v, 1:1 + li[v, 0]], lf[v, 1:1 + lf[v, 0]]
        si[v, ci] += ri[ci]
        sf[v, cf] += rf[cf]
    return si, sf


def _case(rng: np.random.Generator, nv: int, lanes: int, n_events: int, mask_bits: int,
          same_mask: bool, skip_var: int, one_variable: int | None, huge: bool):
    preds = [sorted(rng.choice(nv, rng.integers(0, nv + 1), replace=False).tolist()) for _ in range(nv)]
    pred_ptr = np.cumsum([0] + [len(p) for p in preds]).astype(np.int64)
    pred_idx = np.array([u for p in preds for u in p], np.int64)
    # Each variable's predecessors in another order, with their edges' bits (as the ring
    # kernel takes them: sliding._preds_widest_first).
    pred_bit = np.concatenate([rng.permutation(np.arange(a, z)) for a, z in zip(pred_ptr[:-1], pred_ptr[1:])]
                              + [np.zeros(0, np.int64)]).astype(np.int64)
    pred_idx = pred_idx[pred_bit]
    prog, op_ptr = _program(nv)
    narrow = int(rng.integers(0, nv))
    li, lf = _live(nv, narrow)
    si = np.zeros((nv, N_I, lanes), np.uint64)
    sf = np.zeros((nv, N_F, lanes))
    for v in range(nv):  # a state is non-zero in its live channels only
        ci, cf = li[v, 1:1 + li[v, 0]], lf[v, 1:1 + lf[v, 0]]
        si[v, ci] = rng.integers(0, 2**64, (len(ci), lanes), dtype=np.uint64)
        sf[v, cf] = rng.random((len(cf), lanes)) * (1e300 if huge else 1e6) * (rng.random(lanes) < 0.7)
    n_rows = 8
    a_int = rng.integers(-(2**40), 2**40, (2, n_rows))
    a_flt = rng.normal(0, 100, (3, n_rows))
    a_valid = rng.random((3, n_rows)) < 0.8
    v = one_variable if one_variable is not None else int(rng.integers(0, nv))
    plays = np.zeros(n_events, np.uint64)
    pair_ok = np.zeros(n_events, np.uint64)
    for e in range(n_events):
        plays[e] = np.uint64(1 << v)
        if skip_var >= 0 and rng.random() < 0.5:
            plays[e] |= np.uint64(1 << skip_var)
        width = int(pred_ptr[v + 1] - pred_ptr[v])
        bits = (mask_bits if same_mask or e == 0 else int(rng.integers(0, 2**nv))) & ((1 << width) - 1)
        # (bits past v's edges: the other variables' edges, which v's batch must not read)
        pair_ok[e] = np.uint64(((bits << int(pred_ptr[v])) | (int(rng.integers(0, 2**60)) << int(pred_ptr[v + 1])))
                               & (2**64 - 1))
    rows = rng.integers(0, n_rows, n_events)
    return dict(i=0, j=n_events, plays=plays, pair_ok=pair_ok, nv=nv, pred_ptr=pred_ptr,
                pred_idx=pred_idx, pred_bit=pred_bit, start_bits=np.uint64(rng.integers(0, 2**nv)), prog=prog,
                op_ptr=op_ptr, a_int=a_int, a_flt=a_flt, a_valid=a_valid, rows=rows,
                si=si, sf=sf, li=li, lf=lf, skip_var=skip_var, slot=int(rng.integers(0, lanes)))


def _fused(case: dict, fusable: np.ndarray) -> int:
    lanes = case["si"].shape[2]
    return mixed_one_pass._fused_batch(
        case["i"], case["j"], case["plays"], case["pair_ok"], case["nv"], case["pred_ptr"],
        case["pred_idx"], case["pred_bit"], case["start_bits"], case["prog"], case["op_ptr"], case["a_int"],
        case["a_flt"], case["a_valid"], case["rows"], case["si"], case["sf"], case["li"],
        case["lf"], fusable, case["skip_var"], case["slot"], lanes,
        np.zeros(lanes, np.uint64), np.zeros(lanes), np.zeros(N_I, np.uint64), np.zeros(N_F))


@pytest.mark.parametrize("seed", range(60))
def test_fused_batch_equals_rows(seed) -> None:
    rng = np.random.default_rng(seed)
    nv = int(rng.integers(1, 5))
    skip_var = int(rng.integers(-1, nv)) if nv > 1 else -1
    v = int(rng.choice([w for w in range(nv) if w != skip_var]))
    case = _case(rng, nv, lanes=int(rng.choice([1, 7, 60])), n_events=int(rng.integers(1, 5)),
                 mask_bits=int(rng.integers(0, 2**nv)), same_mask=True, skip_var=skip_var,
                 one_variable=v, huge=False)
    want_i, want_f = _rowwise(**case)
    status = _fused(case, np.ones(nv, np.bool_))
    assert status == 0
    np.testing.assert_array_equal(case["si"], want_i)  # exact modulo 2**64
    np.testing.assert_allclose(case["sf"], want_f, rtol=1e-12, atol=0)


def test_fused_batch_reports_large_floats() -> None:
    rng = np.random.default_rng(7)
    case = _case(rng, 2, 8, 3, mask_bits=3, same_mask=True, skip_var=-1, one_variable=1, huge=True)
    case["pred_ptr"], case["pred_idx"] = np.array([0, 0, 2]), np.array([0, 1])  # B reads A and itself
    case["pred_bit"] = np.array([0, 1])
    case["pair_ok"][:] = np.uint64(3)
    case["start_bits"] = np.uint64(0)
    case["sf"][:, 0, :] = 1e300
    with np.errstate(over="ignore"):
        want_i, _ = _rowwise(**case)
    assert _fused(case, np.ones(2, np.bool_)) == 1
    assert (np.abs(case["sf"]) > RESCALE_ABOVE).any()
    np.testing.assert_array_equal(case["si"], want_i)


@pytest.mark.parametrize("why", ["not fusable", "two variables", "other variable", "masks differ",
                                 "infinite value", "nothing played"])
def test_fused_batch_declines(why) -> None:
    rng = np.random.default_rng(3)
    case = _case(rng, 3, 8, 3, mask_bits=7, same_mask=why != "masks differ", skip_var=-1,
                 one_variable=1, huge=False)
    case["pred_ptr"], case["pred_idx"], case["pred_bit"] = np.array([0, 0, 3, 3]), np.array([2, 0, 1]), np.array([2, 0, 1])
    case["pair_ok"][:] = np.uint64(7)  # B's edges from A, B, C: bits 0-2
    fusable = np.ones(3, np.bool_)
    if why == "not fusable":
        fusable[1] = False
    elif why == "two variables":
        case["plays"][2] = np.uint64(0b011)
    elif why == "other variable":
        case["plays"][2] = np.uint64(0b100)
    elif why == "masks differ":
        case["pair_ok"][:] = [np.uint64(7), np.uint64(7), np.uint64(5)]
    elif why == "infinite value":
        case["a_flt"][2, :] = np.inf
        case["a_valid"][2, :] = True
    else:
        case["plays"][:] = 0
    before = case["si"].copy(), case["sf"].copy()
    assert _fused(case, fusable) == -1
    np.testing.assert_array_equal(case["si"], before[0])
    np.testing.assert_array_equal(case["sf"], before[1])


def test_fusable_variables() -> None:
    # A+ kept (pair A->A), then B+ and C reading type-grained totals; D reads A's tree.
    nv = 4
    pair_of = np.full((nv, nv), -1, np.int64)
    pair_of[0, 0] = 0
    pair_of[0, 3] = 1
    preds = [[0], [0, 1], [0, 1], [0]]
    pred_ptr = np.cumsum([0] + [len(p) for p in preds]).astype(np.int64)
    pred_idx = np.array([u for p in preds for u in p], np.int64)
    prog, op_ptr = _program(nv)
    got = mixed_one_pass._fusable_variables(nv, pred_ptr, pred_idx, pair_of, prog, op_ptr)
    assert got.tolist() == [False, True, True, False]


def _stream(seed: int, n: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table({
        "type": pa.array(rng.choice(["A", "B", "C", "D", "X"], n, p=[0.35, 0.25, 0.15, 0.15, 0.1])),
        "time": pa.array(np.sort(rng.integers(0, max(2, n // 3), n))),  # ties: batches of several events
        "v": pa.array(rng.integers(0, 6, n)),
        "w": pa.array(rng.integers(-4, 5, n) * 0.5),
        "g": pa.array(rng.integers(0, 2, n)),
    })


@pytest.mark.parametrize("pattern, kept, returns", [
    ("SEQ(A+, B+)", "A", "COUNT(*), SUM(B.v), AVG(B.w)"),        # B reads A and itself
    ("SEQ(A+, B*, C)", "A", "COUNT(*), COUNT(C), AVG(C.w)"),     # C reads A and B
    ("SEQ(A+, B*, C*, D)", "A", "COUNT(*), SUM(D.v), AVG(B.w)"),  # D reads A, B and C
    ("SEQ(A, B+)", "B", "COUNT(*), SUM(A.v), AVG(B.w)"),          # A starts only
    ("SEQ(A+, B+)", "B", "COUNT(*), SUM(A.v), MAX(B.v)"),         # no ring (MAX): per window
])
@pytest.mark.parametrize("seed", range(4))
def test_ring_with_fused_batches_equals_python(pattern, kept, returns, seed) -> None:
    table = _stream(seed, 160)
    query = (f"RETURN g, {returns} PATTERN {pattern} WHERE {kept}.v > NEXT({kept}).v "
             "GROUP-BY g WITHIN 12 seconds SLIDE 3 seconds")
    with forced(), grouped(RING) as calls:
        got = compiled(query, table)
    assert_same_result(got, exact(query, table), context=f"\n{query}")
    assert got.num_rows > 0
    assert bool(calls) == ("MAX" not in returns)
