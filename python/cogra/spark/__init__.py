"""Spark integration: ``MATCH_TREND`` in Spark SQL and the DataFrame API.

>>> from cogra.spark import session, match_trend
>>> spark = session()                                   # doctest: +SKIP
>>> spark.sql("SELECT * FROM MATCH_TREND(TABLE(stock), 'RETURN ... PATTERN ...')")  # doctest: +SKIP

See :mod:`cogra.spark.session` (sessions, registration), :mod:`cogra.spark.udtf` (what
Spark runs) and :mod:`cogra.spark.shim_build` (the JVM shim's offline build).
"""

from cogra.spark.session import (
    EXTENSION,
    configure,
    has_extension,
    jar_path,
    match_trend,
    register,
    session,
)

__all__ = [
    "EXTENSION",
    "configure",
    "has_extension",
    "jar_path",
    "match_trend",
    "register",
    "session",
]
