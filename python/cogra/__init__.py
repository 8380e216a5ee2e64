"""cogra: coarse-grained event trend aggregation (COGRA) for Apache Spark.

The public surface is small: :func:`parse` a query, :func:`explain` its plan, and
:func:`evaluate` it over a pyarrow table.  Spark integration lives in ``cogra.spark``.
"""

__version__ = "0.1.0"
