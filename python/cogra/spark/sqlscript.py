"""SQL scripts for ``cogra sql -f``: split into statements, substitute ``${NAME}``.

``spark.sql`` runs one statement at a time and cannot tell where a statement of a file
ends, so a script is split on the semicolons that are outside string literals, quoted
identifiers and comments (a ``;`` inside a MATCH_TREND query text is data). Comments are
dropped while splitting: the ``${COGRA_DATA}`` that ``sql/setup.sql`` mentions in its
comments must neither be substituted nor reported as undefined.

Substitution happens here rather than through Spark's own variable substitution so that
it also works against a Spark Connect server and so that an undefined variable is an
error naming the variable, not a ``Path does not exist: .../${COGRA_DATA}/stock`` later.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Mapping

#: ``${NAME}``, ``${hivevar:NAME}`` (spark-sql's -d) and ``${env:NAME}``; other prefixes
#: (``${spark:...}``, ``${hiveconf:...}``) and dotted names are left to Spark.
_VARIABLE = re.compile(r"\$\{(?:(hivevar|env):)?([A-Za-z_][A-Za-z0-9_]*)\}")


class ScriptError(ValueError):
    """A script that cannot be run as written (unterminated literal, undefined variable)."""


@dataclass(frozen=True)
class Statement:
    """One statement of a script: its text (comments removed) and where it starts."""

    text: str
    source: str
    line: int

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}"


def split_statements(script: str, source: str = "<string>") -> list[Statement]:
    """The non-empty statements of ``script``, in order, without their terminating ``;``.

    Understands Spark SQL's lexical rules as far as splitting needs: '...' and "..."
    strings with backslash escapes (a doubled quote closes and reopens, which splits the
    same way), `...` identifiers, ``--`` line comments and (nested) ``/* */`` comments.
    """
    statements: list[Statement] = []
    buf: list[str] = []
    start_line: int | None = None
    line = 1
    i, n = 0, len(script)

    def flush() -> None:
        nonlocal buf, start_line
        text = "".join(buf).strip()
        if text:
            statements.append(Statement(text, source, start_line or line))
        buf, start_line = [], None

    while i < n:
        c = script[i]
        if c == "-" and script.startswith("--", i):
            end = script.find("\n", i)
            i = n if end < 0 else end  # keep the newline itself
            continue
        if c == "/" and script.startswith("/*", i):
            depth, j, opened = 1, i + 2, line
            while j < n and depth:
                if script.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif script.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    line += script[j] == "\n"
                    j += 1
            if depth:
                raise ScriptError(f"{source}:{opened}: unterminated /* comment")
            buf.append(" ")
            i = j
            continue
        if c == ";":
            flush()
            i += 1
            continue
        if not c.isspace() and start_line is None:
            start_line = line
        if c in "'\"`":
            j, opened = i + 1, line
            while j < n and script[j] != c:
                if script[j] == "\\" and c != "`":
                    j += 1
                if j < n and script[j] == "\n":
                    line += 1
                j += 1
            if j >= n:
                raise ScriptError(f"{source}:{opened}: unterminated {c} quote")
            buf.append(script[i : j + 1])
            i = j + 1
            continue
        line += c == "\n"
        buf.append(c)
        i += 1
    flush()
    return statements


def substitute(text: str, variables: Mapping[str, str], where: str = "",
               environ: Mapping[str, str] | None = None) -> str:
    """Replace ``${NAME}`` / ``${hivevar:NAME}`` by ``variables[NAME]``, else by the
    environment variable ``NAME``; ``${env:NAME}`` reads the environment only.

    Raises :class:`ScriptError` for a variable that is defined nowhere.
    """
    env = os.environ if environ is None else environ

    def value(m: re.Match[str]) -> str:
        prefix, name = m.group(1), m.group(2)
        if prefix != "env" and name in variables:
            return variables[name]
        if name in env:
            return env[name]
        how = f"set the environment variable {name}" if prefix == "env" else \
            f"pass -d {name}=VALUE or set the environment variable {name}"
        raise ScriptError(f"{where + ': ' if where else ''}${{{m.group(0)[2:-1]}}} is not defined ({how})")

    return _VARIABLE.sub(value, text)


def resolve(statements: list[Statement], variables: Mapping[str, str],
            environ: Mapping[str, str] | None = None) -> list[Statement]:
    """The statements with their variables substituted, all checked before any runs."""
    return [Statement(substitute(s.text, variables, s.where, environ), s.source, s.line)
            for s in statements]


def parse_definitions(items: list[str] | None) -> dict[str, str]:
    """``["A=1", "B=x=y"]`` -> ``{"A": "1", "B": "x=y"}`` (the -d / --define options)."""
    out: dict[str, str] = {}
    for item in items or ():
        name, sep, value = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ScriptError(f"bad definition {item!r}: expected NAME=VALUE")
        out[name] = value
    return out
