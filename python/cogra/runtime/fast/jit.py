"""numba options the kernels share."""

from __future__ import annotations


def _without_refcounts() -> dict:
    """``{"_nrt": False}`` where this numba accepts it, else ``{}``.

    Every array argument of a call that is not inlined costs the callee an atomic
    reference-count increment and decrement (numba's runtime, NRT).  Helpers called once
    or twice per event with 4-15 array arguments paid ~10% of the ring kernel's time on q3
    that way (perf: ``NRT_incref``/``NRT_decref``).  A helper that allocates nothing and
    makes no array views (no slices) needs no runtime, and compiled without it has no
    reference counts to pay.  ``_nrt`` is numba's private option: where a release lacks
    it, the helpers compile as before, with reference counts.
    """
    try:
        from numba.core.cpu import CPUTargetOptions
    except ImportError:  # pragma: no cover - a numba without the module
        return {}
    return {"_nrt": False} if hasattr(CPUTargetOptions, "_nrt") else {}


NO_REFCOUNTS = _without_refcounts()
"""Extra ``njit`` options for helpers whose every statement reads or writes single array
elements (see :func:`_without_refcounts`).  Only for those: a helper that copies a row
(``out[w] = s[k]``) may need a temporary for some argument types, and then fails to
compile at the first call with those types ("NRT required but not enabled") -- as the
generic kernels' ``_emit_window`` did, which is why they keep their reference counts."""
