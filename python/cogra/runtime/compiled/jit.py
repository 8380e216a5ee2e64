"""How the kernels are compiled: numba's ``njit`` with the shipped kernels as its cache's
fallback, and the options the kernels share."""

from __future__ import annotations

from typing import Any, Callable

import numba

from cogra.runtime.kernel_bundle import use_bundle


def njit(*args: Any, **options: Any) -> Any:
    """``numba.njit``, whose ``cache=True`` dispatchers also look in the kernels compiled
    ahead of time that ship with cogra (:mod:`cogra.runtime.kernel_bundle`) before
    compiling.  Used as numba's: ``@njit(cache=True, ...)`` or ``@njit``."""
    if args and callable(args[0]):
        return use_bundle(numba.njit(*args, **options))

    def decorate(function: Callable) -> Any:
        return use_bundle(numba.njit(*args, **options)(function))

    return decorate


def _without_refcounts() -> dict:
    """``{"_nrt": False}`` where this numba accepts it, else ``{}``.

    Every array argument of a call that is not inlined costs the callee an atomic
    reference-count increment and decrement (numba's runtime, NRT).  Helpers called once
    or twice per event with 4-15 array arguments paid ~10% of the ring kernel's time on q3
    that way (perf: ``NRT_incref``/``NRT_decref``).  A helper that allocates nothing and
    makes no array views (no slices) needs no runtime, and compiled without it has no
    reference counts to pay.  Inlining (``inline="always"``) does not help: numba inlines
    at the level of its IR and still counts the inlined call's array arguments -- the
    sliding-window sharing kernel spent 40% of its time that way (1M stock events at 10/s,
    ``SLIDE 1 second``: 0.80 -> 0.46 s as calls without them).  Where the helper is small
    and its caller's loop hot, inlined can still win (LLVM optimises it into the loop):
    the grouped mixed-grained kernel ran ~10% slower with its helpers as such calls.
    Measure before moving a helper.  ``_nrt`` is numba's private option: where a release
    lacks it, the helpers compile as before, with reference counts.
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
generic kernels' ``_emit_window`` did, which is why they keep their reference counts.

A function compiled so compiles the functions it calls with the same options, and numba
keeps that compile for all their callers with the same argument types (and in its disk
cache): a callee that returned an array it allocated, compiled without reference counts,
handed a reference-counted caller elsewhere a freed array (heap corruption).  So whatever
such a function calls must return no array either (mixed_one_pass's loop, whose radix sort
returns a flag)."""
NO_REFCOUNTS_SOURCE = "".join(f", {k}={v!r}" for k, v in NO_REFCOUNTS.items())
"""``NO_REFCOUNTS`` as extra ``njit`` arguments in generated source (``@njit(cache=True{..})``)."""
