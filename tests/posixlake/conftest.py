"""Fixtures of the DatabaseOps suite: real tables in tmp_path, on every engine.

``engine`` runs a test on the local engine and, marked ``spark``, on the Spark engine
with ONE SparkSession shared by the whole test session.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from posixlake.engines import Engine, LocalEngine


@pytest.fixture(scope="session")
def spark_session() -> Iterator[Any]:
    """One local SparkSession for the whole test run (stopped at the end)."""
    from posixlake.engines.spark import build_session

    session = build_session(master="local[2]")
    yield session
    session.stop()


@pytest.fixture(params=["local", pytest.param("spark", marks=pytest.mark.spark)])
def engine(request: pytest.FixtureRequest) -> Engine:
    """Each engine in turn: the test must pass on both."""
    if request.param == "local":
        return LocalEngine()
    from posixlake.engines.spark import SparkEngine

    return SparkEngine(spark=request.getfixturevalue("spark_session"))


@pytest.fixture
def local_engine() -> Engine:
    """The local engine only (for tests of engine-independent behaviour)."""
    return LocalEngine()
