"""The kernels' arguments, grouped as typed structures (numba takes a ``NamedTuple`` as
one argument and compiles its fields' reads to plain loads).

Every generic kernel (:func:`coarse_grained.run_windows`, :func:`pane_maps.run_sliding`,
the mixed-grained ones) reads the same few groups -- the automaton and semantics, the
positions of the sub-streams' events, the slot program, the attributes' rows, the
output channels -- and then its own arguments.  A group is built once per query
(:class:`Pattern`, :class:`SlotProgram`), per table or chunk (:class:`AttributeRows`)
or per run (:class:`Positions`, :class:`Channels`); the kernels unpack them on entry,
so their bodies read the same names as before.

Why not numba's ``jitclass`` or ``structref``: their instances box and unbox through
Python objects at each call, their types do not pickle into numba's cache as plainly,
and nothing here needs methods.  A call with these groups costs ~2.5 µs more in numba's
dispatcher than the flat arguments (typing the tuples), against kernels that run for
milliseconds; the kernel benchmark (``cogra bench --experiments kernel``: one window of
1M events per executor and aggregate) runs each case within its noise (±5%) of the
flat arguments' time.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Pattern(NamedTuple):
    """The automaton as the kernels walk it (:class:`~cogra.runtime.compiled.kernel_driver.KernelDriver`)."""

    mode: int
    """0 ``any`` (type-grained), 1 ``next``, 2 ``contiguous``."""
    nv: int
    """The automaton's states (variables, a repeated one per occurrence)."""
    pred_ptr: np.ndarray
    """int64 [nv + 1]: state ``v``'s predecessors are ``pred_idx[pred_ptr[v]:pred_ptr[v + 1]]``."""
    pred_idx: np.ndarray
    start_bits: np.ndarray
    """uint64 bit sets over states: the states a trend may start in."""
    final_bits: np.ndarray
    """... and may end in."""


class Positions(NamedTuple):
    """The events a run reads, in sub-stream order (one position per event)."""

    times: np.ndarray
    """int64: each position's event time."""
    plays: np.ndarray
    """uint64: the states each position's event may play (bits)."""
    pair_ok: np.ndarray
    """uint64: per position, the pair predicates that hold with its predecessor (bits; empty:
    the query checks none)."""
    rows: np.ndarray
    """int64: each position's table row (the attributes' column)."""


class SlotProgram(NamedTuple):
    """How an event playing a state updates the channels (:func:`channels.channel_layout`)."""

    program: np.ndarray
    """int64 [n_ops, 6]: (state, op, attribute, a, b, c), sorted by state."""
    op_ptr: np.ndarray
    """int64 [nv + 1]: state ``v``'s operations are rows ``op_ptr[v]:op_ptr[v + 1]``."""
    x_is_min: np.ndarray
    """bool [n_x]: MIN (True) or MAX per extreme channel."""
    n_i: int
    n_f: int


class AttributeRows(NamedTuple):
    """The attributes the operations read, one row per (synthetic) attribute, one column per
    table row (:meth:`KernelDriver._attribute_arrays`)."""

    a_int: np.ndarray
    a_flt: np.ndarray
    a_valid: np.ndarray
    a_key: np.ndarray


class Channels(NamedTuple):
    """A kernel's output rows (:class:`~cogra.runtime.compiled.channels.KernelOut`'s arrays)."""

    i: np.ndarray
    f: np.ndarray
    x: np.ndarray
    e: np.ndarray
    r: np.ndarray


class PairArrays(NamedTuple):
    """Per indexed pair ``p = (u, v)`` (:meth:`KernelDriver._indexed_pairs`): its number
    ``pair_of[u, v]``, comparison flags, value count, the channels u's states carry, and
    ``ranks`` -- ``(h_rank, h_valid, q_a, q_b, q_eq, g_valid)``, by table row: what the
    mixed-grained kernels index a predicate on the earlier event by."""

    pair_of: np.ndarray
    pair_flags: np.ndarray
    m_of: np.ndarray
    live_i: np.ndarray
    live_f: np.ndarray
    live_x: np.ndarray
    ranks: tuple


__all__ = ["AttributeRows", "Channels", "PairArrays", "Pattern", "Positions", "SlotProgram"]
