"""How deep a query may nest, and the recursion room its evaluation needs.

Parsing (sqlglot's recursive descent, ~20 Python frames per parenthesis), binding and
evaluating a condition all walk trees recursively; Python's default limit of 1,000 frames
stopped at 49 nested parentheses in WHERE.  Queries up to :data:`MAX_NESTING` levels (and
conditions of up to :data:`MAX_CONDITION_TOKENS` tokens: an OR chain of 1,000 terms is a
tree 1,000 deep) run with a higher limit while cogra works on them
(:func:`recursion_room`); deeper ones are a :class:`~cogra.errors.QueryError` at the token
that passes the limit.  Why not rewrite every walker as a loop: sqlglot's own parser and
generator are recursive.
"""

from __future__ import annotations

import functools
import sys
import threading
from contextlib import contextmanager
from typing import Callable, Iterator, TypeVar

MAX_NESTING = 100
"""Brackets (parentheses, ``SEQ(``, ``[``) open at once, plus postfix operators in a row."""
MAX_CONDITION_TOKENS = 10_000
"""Tokens in one WHERE conjunct."""
RECURSION_LIMIT = 30_000
"""Python frames allowed while cogra parses, binds or evaluates (the default is 1,000)."""

_lock = threading.Lock()
_depth = 0
_previous = 0


@contextmanager
def recursion_room() -> Iterator[None]:
    """Raise the interpreter's recursion limit to :data:`RECURSION_LIMIT` for the duration
    (reentrant, and across threads: restored when the last user leaves)."""
    global _depth, _previous
    with _lock:
        if _depth == 0:
            _previous = sys.getrecursionlimit()
            if _previous < RECURSION_LIMIT:
                sys.setrecursionlimit(RECURSION_LIMIT)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and sys.getrecursionlimit() == RECURSION_LIMIT:
                sys.setrecursionlimit(_previous)


F = TypeVar("F", bound=Callable)


def with_recursion_room(function: F) -> F:
    """``function`` run inside :func:`recursion_room`."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        with recursion_room():
            return function(*args, **kwargs)

    return wrapper  # type: ignore[return-value]
