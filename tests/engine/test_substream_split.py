"""The compiled split of plain groups into sub-streams by variable keys
(:func:`cogra.runtime.compiled.substream_split.combination_rows`) against its definition, row by
row: a combination keeps the rows that play one of its variables -- a keyed variable only
with the combination's key value -- and, under ``contiguous``, the irrelevant rows too;
a combination without a playing row has no sub-stream (unless idle events matter)."""

from __future__ import annotations

import numpy as np
import pytest

from cogra.runtime.compiled.substream_split import combination_rows


def split_by_definition(order, lo, hi, combo_group, combo_codes, codes, var_bits, combo_clear, bits, irrelevant,
                        keep_idle, idle_events_matter):
    rows, out_bits, sizes = [], [], []
    for c, g in enumerate(combo_group):
        kept = []
        for i in range(lo[g], hi[g]):
            b = int(bits[i]) & ~int(combo_clear[c])
            for j in range(codes.shape[0]):
                if codes[j, i] != combo_codes[c, j]:
                    b &= ~int(var_bits[j])
            if b or (keep_idle and irrelevant[i]):
                kept.append((int(order[i]), b))
        if not kept or not (idle_events_matter or any(b for _, b in kept)):
            sizes.append(-1)
            continue
        sizes.append(len(kept))
        rows += [r for r, _ in kept]
        out_bits += [b for _, b in kept]
    return rows, out_bits, sizes


@pytest.mark.parametrize("seed", range(12))
def test_split_equals_its_definition(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 60))
    order = rng.permutation(n).astype(np.int64)
    cuts = np.sort(rng.choice(np.arange(1, n), size=min(n - 1, 3), replace=False)) if n > 1 else np.zeros(0, np.int64)
    lo = np.concatenate([[0], cuts]).astype(np.int64)
    hi = np.concatenate([cuts, [n]]).astype(np.int64)
    keyed = int(rng.integers(0, 3))  # keyed variables among 3
    var_bits = np.array([1 << v for v in sorted(rng.choice(3, keyed, replace=False))], np.uint64)
    codes = rng.integers(0, 3, (keyed, n)).astype(np.int64)
    bits = rng.integers(0, 8, n).astype(np.uint64)
    irrelevant = (bits == 0) & (rng.random(n) < 0.5)
    combo_group = np.repeat(np.arange(len(lo)), 3).astype(np.int64)
    combo_codes = rng.integers(-1, 3, (len(combo_group), keyed)).astype(np.int64)  # -1: absent
    combo_clear = rng.integers(0, 8, len(combo_group)).astype(np.uint64) * (rng.random(len(combo_group)) < 0.5)
    for keep_idle in (False, True):
        for idle_events_matter in (False, True):
            args = (order, lo, hi, combo_group, combo_codes, codes, var_bits, combo_clear, bits, irrelevant, keep_idle,
                    idle_events_matter)
            rows, out_bits, sizes = combination_rows(*args)
            want = split_by_definition(*args)
            assert (rows.tolist(), out_bits.tolist(), sizes.tolist()) == want
