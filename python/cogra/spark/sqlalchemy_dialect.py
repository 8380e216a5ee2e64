"""``hive+cogra://``: PyHive's SQLAlchemy dialect, reading a Spark Thrift server's catalog.

BI tools (Superset, Redash) list a database's tables and views through SQLAlchemy's
inspector.  PyHive's ``hive://`` dialect reads them as Hive prints them: the first column
of ``SHOW TABLES`` is the table's name in Hive, the namespace in Spark, so against
``cogra thriftserver`` it lists ``default`` once per table; and it recognises a missing
table by Hive's error text, so ``has_table`` raises on Spark's.  This dialect is PyHive's
with those three answers read from Spark's ``SHOW TABLES`` and ``SHOW VIEWS``
(``namespace, tableName | viewName, isTemporary``).  Temporary views are left out: they
live in one connection's session, and a tool's other pooled connections do not see them.

Registered as the SQLAlchemy dialect ``hive.cogra`` (the ``sqlalchemy.dialects`` entry
point in pyproject.toml): ``create_engine("hive+cogra://USER@HOST:PORT/default")``.  Needs
PyHive (``pip install 'pyhive[hive_pure_sasl]'``), as ``hive://`` does.
"""

from __future__ import annotations

from typing import Any

from pyhive.sqlalchemy_hive import HiveDialect
from sqlalchemy import text


class SparkThriftDialect(HiveDialect):
    """PyHive's dialect, with the catalog read as a Spark Thrift server prints it."""

    driver = "cogra"
    supports_statement_cache = False  # (as PyHive's: its compiler caches nothing)

    @classmethod
    def import_dbapi(cls) -> Any:
        """PyHive's DB-API module (SQLAlchemy 2's name for PyHive's ``dbapi()``)."""
        from pyhive import hive

        return hive

    def _names(self, connection: Any, command: str, schema: str | None) -> list[str]:
        query = command + (" IN " + self.identifier_preparer.quote_identifier(schema) if schema else "")
        rows = connection.execute(text(query)).fetchall()
        return [row[1] for row in rows if not _is_true(row[2])]

    def get_view_names(self, connection: Any, schema: str | None = None, **kw: Any) -> list[str]:
        return self._names(connection, "SHOW VIEWS", schema)

    def get_table_names(self, connection: Any, schema: str | None = None, **kw: Any) -> list[str]:
        views = set(self.get_view_names(connection, schema))
        return [name for name in self._names(connection, "SHOW TABLES", schema) if name not in views]

    def has_table(self, connection: Any, table_name: str, schema: str | None = None, **kw: Any) -> bool:
        wanted = table_name.lower()  # (Spark's catalog names are case-insensitive)
        return any(name.lower() == wanted for name in self._names(connection, "SHOW TABLES", schema))


def _is_true(value: Any) -> bool:
    return value is True or str(value).lower() == "true"


dialect = SparkThriftDialect

__all__ = ["SparkThriftDialect", "dialect"]
