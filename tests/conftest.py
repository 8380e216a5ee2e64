"""Shared pytest configuration: make `tests.*` helpers importable from any test module."""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

# No warm start in the tests' processes and the subprocesses they start (which inherit
# this environment): loading the whole bundle in the background costs each process a
# second of CPU that the tests, timing nothing, do not need. The tests of the warm start
# itself (tests/engine/test_kernel_bundle.py) remove the setting for their processes.
os.environ.setdefault("COGRA_WARM_START", "0")


import pytest  # noqa: E402


@pytest.fixture(scope="module")
def generated_kernels():
    """Make every input large enough for the per-shape generated kernels (codegen)."""
    from cogra.runtime.compiled import kernel_driver
    from cogra.runtime.compiled.windows import sliding

    old = kernel_driver.SPECIALIZE_MIN_EVENTS, sliding.SPECIALIZE_MIN_EVENTS
    kernel_driver.SPECIALIZE_MIN_EVENTS = sliding.SPECIALIZE_MIN_EVENTS = 0
    yield
    kernel_driver.SPECIALIZE_MIN_EVENTS, sliding.SPECIALIZE_MIN_EVENTS = old


@pytest.fixture(autouse=True, scope="session")
def no_reuse_of_cached_kernels():
    """Which kernel runs must not depend on what this machine compiled before: only the
    size thresholds (and the fixtures that lower them) pick the generated kernels."""
    from cogra.runtime.compiled.codegen import kernel_cache

    kernel_cache.REUSE_COMPILED = False
    yield
    kernel_cache.REUSE_COMPILED = True


@pytest.fixture(autouse=True, scope="session")
def poisoned_uninitialised_buffers():
    """The ring kernel's shared cache and the window kernels' outputs are left
    uninitialised in production; in tests they are full of garbage, so a read of a row no
    kernel wrote changes results (channels.UNFILLED_POISON)."""
    from cogra.runtime.compiled import channels

    channels.UNFILLED_POISON = True
    yield
    channels.UNFILLED_POISON = False
