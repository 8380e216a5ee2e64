"""The registry of ``cogra`` subcommands that live with optional parts (``cogra bench``,
the Spark commands): such a module registers its subcommands here when imported, and
``cogra.cli`` imports it only when its dependencies are present.  A module of its own so
that those modules need not import ``cogra.cli`` (which imports them)."""

from __future__ import annotations

import argparse
from typing import Callable

Register = Callable[[argparse._SubParsersAction], None]

REGISTERED: list[Register] = []


def extra_command(register: Register) -> Register:
    """Decorator for modules that add subcommands (keeps optional dependencies optional)."""
    REGISTERED.append(register)
    return register


__all__ = ["REGISTERED", "Register", "extra_command"]
