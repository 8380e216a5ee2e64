"""The session extension that registers MATCH_TREND: its class, and whether a session
has it.  Apart from :mod:`cogra.spark.session` so that what sessions use
(:mod:`cogra.spark.workers`) need not import it."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

#: The session extension class (the same name as ``shim_build.EXTENSION_CLASS``).
EXTENSION = "org.apache.spark.sql.cogra.CograExtensions"


def has_extension(spark: "SparkSession") -> bool:
    """Whether ``spark`` was built with the cogra session extension."""
    try:
        value = spark.conf.get("spark.sql.extensions", "") or ""
    except Exception:  # noqa: BLE001 - a Connect server may refuse to read some settings
        return False
    return EXTENSION in [x.strip() for x in value.split(",")]


__all__ = ["EXTENSION", "has_extension"]
