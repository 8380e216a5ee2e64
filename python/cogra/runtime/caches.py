"""Where compiled kernels are cached on disk: a writable place on every machine.

Two caches hold machine code between processes:

* the generated per-shape kernels (:mod:`cogra.runtime.compiled.codegen`) and their numba
  caches, in :func:`cache_root` ``/kernels``;
* numba's cache of the generic kernels (``@njit(cache=True)``), by numba's own rule
  beside the package's sources (``__pycache__``) or else in the user's cache directory.

A Spark executor's ``HOME`` may be unwritable (YARN and Kubernetes containers, service
accounts) and an installed package's directory often is.  Without a writable place the
generated kernels failed with ``FileNotFoundError`` and numba refuses ``cache=True`` at
import.  So the root is the first writable one of ``$COGRA_CACHE``, ``~/.cache/cogra``,
Spark's local directories (``$SPARK_LOCAL_DIRS``, which executors set) and the temporary
directory; and where numba would find no place of its own, ``NUMBA_CACHE_DIR`` is set to
:func:`cache_root` ``/numba`` before any kernel is compiled (:func:`ensure_numba_cache`,
called by ``import cogra``).
"""

from __future__ import annotations

import functools
import os
import sys
import tempfile
from pathlib import Path

from cogra.errors import CograError

CACHE_ENV = "COGRA_CACHE"


def _writable(path: Path) -> bool:
    """Whether ``path`` is (or can be made) a directory this process can write to -- by
    trying, as numba does: permission bits say nothing for root or on read-only mounts."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
        return True
    except OSError:
        return False


def candidates() -> list[Path]:
    """The places :func:`cache_root` tries, in order (without ``$COGRA_CACHE``)."""
    places = []
    home = os.environ.get("HOME") or os.path.expanduser("~")
    if home and home != "~":
        places.append(Path(home) / ".cache" / "cogra")
    for local in filter(None, os.environ.get("SPARK_LOCAL_DIRS", "").split(",")):
        places.append(Path(local) / "cogra-cache")
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    places.append(Path(tempfile.gettempdir()) / f"cogra-cache-{uid}")
    return places


@functools.lru_cache(maxsize=None)
def _root(explicit: str | None, home: str | None, local_dirs: str | None) -> Path:
    if explicit:
        path = Path(explicit)
        if not _writable(path):
            raise CograError(f"{CACHE_ENV}={explicit} is not a directory this process can write to: "
                             "set it to one (the compiled kernels are cached there), or unset it")
        return path
    for path in candidates():
        if _writable(path):
            return path
    raise CograError("no writable directory for the compiled kernels' cache (tried "
                     + ", ".join(str(p) for p in candidates()) + f"): set {CACHE_ENV}")


def cache_root() -> Path:
    """The first writable of ``$COGRA_CACHE``, ``~/.cache/cogra``, ``$SPARK_LOCAL_DIRS``
    and the temporary directory (decided once per setting)."""
    return _root(os.environ.get(CACHE_ENV) or None, os.environ.get("HOME"), os.environ.get("SPARK_LOCAL_DIRS"))


def _numba_has_a_place() -> bool:
    """Whether numba finds a cache directory of its own for the package's kernels: beside
    the sources, or its user-wide one (``~/.cache/numba``, as numba names it)."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return True
    package = Path(__file__).resolve().parent
    sources = {path.parent for path in package.rglob("*.py") if "__pycache__" not in path.parts}
    if all(_writable(directory / "__pycache__") for directory in sources):
        return True
    home = os.environ.get("HOME") or os.path.expanduser("~")
    return bool(home) and home != "~" and _writable(Path(home) / ".cache" / "numba")


def ensure_numba_cache() -> None:
    """Give numba a cache directory where it would find none (see the module docstring)."""
    if _numba_has_a_place():
        return
    os.environ["NUMBA_CACHE_DIR"] = str(cache_root() / "numba")
    if "numba" in sys.modules:  # numba read its settings at import: read them again
        from numba.core import config

        config.reload_config()


__all__ = ["CACHE_ENV", "cache_root", "candidates", "ensure_numba_cache"]
