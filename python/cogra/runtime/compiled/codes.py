"""Integer codes the kernels take as arguments, shared by their callers and the generated
sources: which rank ranges a comparison selects, how a run shares a kept variable's
totals, how many spans a rank block holds, and which bit of a pair-check word an
automaton edge has.

A leaf module, so that the code generator and the sharing logic read them without
importing the kernels.
"""

from __future__ import annotations

from typing import Iterable, Sequence

USE_PREFIX, USE_SUFFIX, USE_EQUAL = 1, 2, 4
"""Which rank ranges a comparison ``h ∘ g`` selects (flags: prefix, suffix, equal)."""

CROSS_NONE, CROSS_RANGES, CROSS_ALL = 0, 1, 2
"""Per new event (``g_valid``), what its pair's indexed predicate takes of the earlier
variable's events: none, those in the event's rank ranges, or every one -- read as a pair
without an indexed predicate, the variable's total
(:mod:`~cogra.runtime.compiled.crossing_predicates`)."""

SHARE_NONE, SHARE_SAVE, SHARE_TAKE = 0, 1, 2
"""``share_mode`` of :func:`~cogra.runtime.compiled.aggregators.mixed_grained.run_mixed_windows`:
no sharing; save the shared variable's totals; take them from the cache."""

RANK_BLOCK_SPANS = 3
"""A rank block holds this many live spans (``max_span`` positions each): the ring kernel's trees are
rebuilt when the events pass its end, about once per ``RANK_BLOCK_SPANS - 1`` spans.  A
rebuild empties the block's nodes, shifts and re-inserts the live stored vectors and sums
the nodes in one pass: with blocks of two spans that was a fifth of q3's representatives'
run (re-ranked every ~470 events), with three ~6% less in all (one more tree level); four
were no faster.  The generated run (:mod:`~cogra.runtime.compiled.codegen.pane_loading`) uses the same blocks, so both sum
in the same order."""


PAIR_WORD_BITS = 64
"""Bits of an event's pair-check word (:func:`edge_bits`): edges numbered past it read no
bit (:data:`cogra.analysis.kernel_reach.KERNEL_MAX_EDGES`)."""


def edge_bits(pred: Sequence[Iterable[int]]) -> dict[tuple[int, int], int]:
    """Each automaton edge ``(u, v)`` (``u`` in ``pred[v]``) and its bit in a pair-check
    word: the edges numbered state by state, predecessors in ascending order -- the order
    of the kernels' predecessor lists (``pred_ptr`` / ``pred_idx``), so that a kernel reads
    edge ``p`` of its list as bit ``p`` and one state's edges are consecutive bits.  Why
    not bit ``v * nv + u``: it needs ``nv ** 2`` bits, and ``A{9}`` has 81 states' pairs
    but 8 edges."""
    bits: dict[tuple[int, int], int] = {}
    for v, preds in enumerate(pred):
        for u in sorted(preds):
            bits[(u, v)] = len(bits)
    return bits
