"""One local SparkSession (with the cogra shim) for every Spark test of the pytest session."""

from __future__ import annotations

import os

import pytest

pyspark = pytest.importorskip("pyspark")


@pytest.fixture(scope="session")
def spark():
    """A local[2] session with ``spark.sql.extensions=...CograExtensions`` (jar built if stale)."""
    from cogra.spark import session

    spark = session(
        app_name="cogra-tests",
        master="local[2]",
        **{
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.sql.ansi.enabled": "true",
            "spark.python.worker.reuse": "true",
            "spark.driver.memory": os.environ.get("COGRA_TEST_DRIVER_MEMORY", "1g"),
            # Workers keep to the generic kernels: random query shapes over tens of
            # thousands of rows would otherwise compile a per-shape kernel each (seconds
            # of CPU apiece); the generated kernels equal the generic ones in tests/engine.
            "spark.executorEnv.COGRA_GENERATED_KERNELS": "0",
            "spark.executorEnv.COGRA_BACKGROUND_COMPILE": "0",
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    yield spark
    spark.stop()


OPERATOR = "spark.cogra.streaming.operator"


def parametrize_operators(metafunc, default_suite: set[str]) -> None:
    """Run each test of a streaming test module on both streaming operators: the default
    (``packed``) always; ``transformWithState`` (rows into the operator) for the tests in
    ``default_suite``, its runs of the others marked slow."""
    if "operator" not in metafunc.fixturenames:
        return
    rows = ("transformWithState" if metafunc.function.__name__ in default_suite
            else pytest.param("transformWithState", marks=pytest.mark.slow))
    metafunc.parametrize("operator", ["packed", rows], indirect=True)


@pytest.fixture
def operator(request):
    """The streaming operator a test's streams are planned on (``parametrize_operators``;
    a module opts in with ``pytestmark = pytest.mark.usefixtures("operator")``)."""
    if not hasattr(request, "param"):
        yield None
        return
    if "spark" not in request.fixturenames:
        if request.param != "packed":
            pytest.skip("no stream through the shim")
        yield request.param
        return
    spark = request.getfixturevalue("spark")
    spark.conf.set(OPERATOR, request.param)
    yield request.param
    spark.conf.unset(OPERATOR)
