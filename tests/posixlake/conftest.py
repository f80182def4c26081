"""Fixtures of the DatabaseOps suite: real tables in tmp_path, on every engine.

``engine`` runs a test on the local engine and, marked ``spark``, on the Spark engine
with ONE SparkSession shared by the whole test session. With
``POSIXLAKE_TEST_SPARK=connect`` that session is a Spark Connect client of a server the
run starts (and stops) itself: scripts/test.sh runs the Spark suites that way too.
PySpark runs one mode per process (classic or Connect), hence a run per mode.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final

import pytest

from posixlake.engines import Engine, LocalEngine

if TYPE_CHECKING:
    from posixlake.engines.spark import ConnectServer

SPARK_MODE_ENV: Final = "POSIXLAKE_TEST_SPARK"


def spark_connect_mode() -> bool:
    """Whether this run's Spark session is a Spark Connect client."""
    return os.environ.get(SPARK_MODE_ENV, "").strip().lower() == "connect"


classic_only = pytest.mark.skipif(
    spark_connect_mode(), reason="about the JVM in this process (a classic session)"
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def spark_connect_server() -> Iterator[ConnectServer | None]:
    """In Spark Connect mode, a Connect server for the run (stopped at the end; one that
    does not start fails the tests that need it); else None."""
    if not spark_connect_mode():
        yield None
        return
    from posixlake.engines.spark import start_server, stop_server

    server, _ = start_server(port=_free_port(), master="local[2]")
    try:
        yield server
    finally:
        stop_server(server.port)


@pytest.fixture(scope="session")
def spark_session(spark_connect_server: ConnectServer | None) -> Iterator[Any]:
    """One SparkSession for the whole test run (stopped at the end): a local one, or in
    Spark Connect mode a client of :func:`spark_connect_server`."""
    from posixlake.engines.spark import build_session

    if spark_connect_server is None:
        session = build_session(master="local[2]")
    else:
        session = build_session(remote=spark_connect_server.url)
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
