"""Which blockers of an absence (docs/language.md, Absence at the edge of a pattern) each window holds: the
compiled pass of :mod:`cogra.runtime.absence`."""

from __future__ import annotations

import numpy as np

from cogra.runtime.compiled.jit import njit


@njit(cache=True)
def blockers_in_windows(window_part, starts, size, whole, btimes, brows, bounds, first, out):
    """Per window: the row of the first (``first``) or last blocker of its partition in
    ``[starts[w], starts[w] + size)`` (the whole partition where ``whole``), else -1.
    ``btimes`` / ``brows``: the blockers sorted by partition and time; partition ``p``'s
    are ``bounds[p] .. bounds[p + 1]``."""
    for w in range(window_part.shape[0]):
        p = window_part[w]
        a, z = bounds[p], bounds[p + 1]
        if a == z:
            continue
        if not whole:
            a0 = a + np.searchsorted(btimes[a:z], starts[w])
            z = a + np.searchsorted(btimes[a:z], starts[w] + size)
            a = a0
            if a >= z:
                continue
        out[w] = brows[a] if first else brows[z - 1]
