"""Helpers of the two-step reference evaluator (:mod:`cogra.reference`).

* :mod:`.events` -- rows to events: exact times, grouping keys;
* :mod:`.aggregates` -- aggregates per trend and over trends, in the exact value domain;
* :mod:`.predicates` -- a row-at-a-time evaluator of WHERE conditions (sqlglot trees)
  with SQL three-valued logic, and the classification of conditions into local
  predicates and predicates on adjacent events;
* :mod:`.patterns` -- nullable / first / last / follow / required-variable sets of a
  pattern, and the enumeration of ``trends_any`` by structural recursion.

Nothing here imports the engine (``cogra.analysis``, ``cogra.runtime``): the reference
must be able to catch the engine's mistakes, not repeat them.
"""
