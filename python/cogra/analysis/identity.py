"""A query's identity: what a streaming evaluation's state depends on.

A stream's state (its open windows' aggregate states or their rows, per group) is only
meaningful to the query that wrote it.  Restarted from its checkpoint with another
pattern, semantics, window or key, the state would be read by a query it does not belong
to: windows closed before the restart would come from the old query, later ones from the
new, the one open across the restart from neither.  So the identity is stored with the
state and compared when a stream continues from it (:class:`cogra.OnlineEvaluation`'s
snapshots; the shim's checkpoint check, ``CheckpointIdentity.scala``), and a difference is
an error (:class:`~cogra.errors.CheckpointError`; through the shim, one that names each
changed clause, from the ``canonical`` and ``text`` of each :class:`Clause`).

The identity is the parsed query, clause by clause, without positions (reformatting a
query or writing ``any`` for the default semantics changes nothing), plus what binds it
to its input: the type and time columns, the columns it reads and their types, and the
extra keys of ``PARTITION BY``.  The watermark's delay and the overflow mode are not part
of it: the state means the same under another delay or mode.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Iterable, Sequence

import pyarrow as pa

from cogra.language.ast import Query
from cogra.language.parser import clause_texts, dump, parse

FORMAT = 1

_SECTIONS = {"returns": "RETURN", "pattern": "PATTERN", "semantics": "SEMANTICS", "where": "WHERE",
             "group_by": "GROUP-BY", "window": "WITHIN"}
_SPAN = re.compile(r" @\d+:\d+")
_DURATION = re.compile(r"^(\s*)(within|slide) .* = (\S+) s$")


@dataclass(frozen=True)
class Clause:
    """One part of the identity: ``canonical`` decides equality, ``text`` is what an
    error shows (the clause as written)."""

    name: str
    canonical: str
    text: str


@dataclass(frozen=True)
class QueryIdentity:
    """The clauses of a query and its binding to the input, in a fixed order."""

    clauses: tuple[Clause, ...]

    def fingerprint(self) -> str:
        """A short hash of the canonical clauses (equal identities, equal fingerprints)."""
        digest = hashlib.sha256()
        for c in self.clauses:
            digest.update(f"{c.name}\0{c.canonical}\0".encode())
        return digest.hexdigest()[:32]

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, "fingerprint": self.fingerprint(),
                           "clauses": [{"name": c.name, "canonical": c.canonical, "text": c.text}
                                       for c in self.clauses]}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "QueryIdentity":
        data = json.loads(text)
        return cls(tuple(Clause(c["name"], c["canonical"], c["text"]) for c in data["clauses"]))


def _canonical_sections(query: Query) -> dict[str, str]:
    """The tree dump split by clause, positions removed, durations as seconds."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in _SPAN.sub("", dump(query)).splitlines()[1:]:
        if not line.startswith("    "):
            head = line.strip().split(" ", 1)
            current = _SECTIONS[head[0]]
            sections[current] = [line.strip()]
        else:
            sections[current].append(_DURATION.sub(r"\1\2 \3 s", line))
    return {name: "\n".join(lines) for name, lines in sections.items()}


def query_identity(
    query: str | Query,
    schema: pa.Schema | None = None,
    *,
    type_column: str | None = None,
    time_column: str = "time",
    columns: Iterable[str] | None = None,
    partition_by: Sequence[str] = (),
) -> QueryIdentity:
    """The identity of ``query`` over ``schema`` (see the module docstring).

    ``columns``: the input columns the evaluation reads (default: all of ``schema``);
    ``partition_by``: the SQL text of ``PARTITION BY`` expressions, if any."""
    q = parse(query) if isinstance(query, str) else query
    written = clause_texts(q.text)
    canonical = _canonical_sections(q)
    clauses = []
    for name in ("RETURN", "PATTERN", "SEMANTICS", "WHERE", "GROUP-BY", "WITHIN"):
        text = written.get(name, "")
        if name == "SEMANTICS" and not text:
            text = f"{q.semantics.value} (the default)"
        clauses.append(Clause(name, canonical[name], text))
    clauses.append(Clause("type column", str(type_column), type_column or "(none)"))
    clauses.append(Clause("time column", time_column, time_column))
    if schema is not None:
        names = list(columns) if columns is not None else schema.names
        typed = ", ".join(f"{n} {schema.field(n).type}" for n in names if n in schema.names)
        clauses.append(Clause("input columns", typed, typed))
    keys = ", ".join(partition_by)
    clauses.append(Clause("PARTITION BY", keys, keys))
    return QueryIdentity(tuple(clauses))


__all__ = ["Clause", "QueryIdentity", "query_identity"]
