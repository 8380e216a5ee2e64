"""The COGRA query language: text -> typed syntax tree (:mod:`cogra.language.ast`)."""

from cogra.language.parser import dump, parse

__all__ = ["parse", "dump"]
