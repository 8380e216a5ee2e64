"""A query's *shape*: what a generated kernel is specialised for, and its module's name.

Two queries with equal shapes share one generated module (and its compiled code): the
semantics, the variables' predTypes, start and final variables, and the slot program
decide the loop; attribute names and constants do not.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    mode: int  # 0 any, 1 next, 2 contiguous
    nv: int
    preds: tuple[tuple[int, ...], ...]
    start: tuple[int, ...]
    final: tuple[int, ...]
    ops: tuple[tuple[int, int, int, int, int, int], ...]  # (var, op, attr, s1, s2, s3)
    n_i: int
    n_f: int
    x_is_min: tuple[bool, ...]
    pair_checks: tuple[tuple[int, int], ...]  # (u, v) pairs gated by pair_ok bits
    loads: tuple | None = None
    """``(v, live_i, live_f, live_x)``: the module's ``kernel_loading`` never computes
    variable ``v``; it loads v's totals per batch from a cache of its live channels
    (:mod:`cogra.runtime.compiled.sharing.kept_totals`)."""
    live: tuple | None = None
    """``(live_i, live_f)``: per variable, the integer and float channels its states can
    hold non-empty (``KernelDriver._live_channels``); with ``loads``, the module has the
    ring kernel's loading run ``ring_loading`` (:mod:`pane_loading`)."""
    absence: tuple[bool, bool] = (False, False)
    """Whether the pattern has a leading and a trailing ``NOT`` (docs/language.md, Absence at the edge of a pattern):
    the module's ``kernel`` then takes each window's cut-offs (``start_until``,
    ``finish_from``: :mod:`cogra.runtime.absence`) after its outputs."""
    saves: tuple | None = None
    """``(v, pair_flags, tree_i, tree_f)``: with ``live``, the module has the ring kernel's
    representatives' run ``ring_saving`` (:mod:`pane_loading`) for the shared variable
    ``v``, whose one indexed pair has flags ``pair_flags`` and keeps channels ``tree_i`` /
    ``tree_f`` in its trees."""

    @property
    def key(self) -> str:
        """The generated module's name: a hash of the shape.  (Not cached on the instance: a
        cached value would join the fields in ``__dict__``, which callers copy.  Memoized in
        :data:`_KEYS` instead: the ring asks for it per batch, and hashing the shape's
        fields costs ~0.4 us where its repr and SHA-256 cost ~9.)"""
        key = _KEYS.get(self)
        if key is None:
            if len(_KEYS) >= _KEYS_MAX:
                _KEYS.clear()
            key = _KEYS[self] = hashlib.sha256(repr(self).encode()).hexdigest()[:20]
        return key


_KEYS: dict[Shape, str] = {}


_KEYS_MAX = 4096
