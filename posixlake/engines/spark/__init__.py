"""The Spark engine: Spark computes, delta-rs commits.

This package is the only code that imports ``pyspark``, and it does so lazily: the engine
can be constructed (it is the default) on a machine without PySpark or Java, and says
what to install at its first Spark job. :class:`SparkEngine` runs queries as Spark SQL
over the snapshot delta-rs resolves, bulk writes and copy-on-write DML as Spark jobs
whose files delta-rs commits in one transaction; :class:`PosixLakeDataSource` lets any
Spark job read and write posixlake tables with ``format("posixlake")``. The engine runs
on a JVM in this process or, given ``remote="sc://host:port"``, as a client of a Spark
Connect server (:func:`start_server` runs the one PySpark ships).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from posixlake.engines.spark._connect import (
    ConnectServer,
    find_server,
    running_servers,
    start_server,
    stop_server,
)
from posixlake.engines.spark._engine import MAX_ATTEMPTS, SparkEngine, StagedImport
from posixlake.engines.spark._leases import lease_session
from posixlake.engines.spark._session import (
    DEFAULT_CONNECT_PORT,
    DEFAULT_MASTER,
    JAVA_PACKAGE,
    JVM_LOGGER,
    REMOTE_ENV,
    SparkUnavailableError,
    build_session,
    check_java,
    check_remote,
    is_connect,
)

if TYPE_CHECKING:
    from posixlake.engines.spark._datasource import PosixLakeDataSource, register_data_source

__all__ = [
    "DEFAULT_CONNECT_PORT",
    "DEFAULT_MASTER",
    "JAVA_PACKAGE",
    "JVM_LOGGER",
    "MAX_ATTEMPTS",
    "REMOTE_ENV",
    "ConnectServer",
    "PosixLakeDataSource",
    "SparkEngine",
    "SparkUnavailableError",
    "StagedImport",
    "build_session",
    "check_java",
    "check_remote",
    "find_server",
    "is_connect",
    "lease_session",
    "register_data_source",
    "running_servers",
    "start_server",
    "stop_server",
]


def __getattr__(name: str) -> Any:
    """Import the data source (which needs PySpark) on first use."""
    if name in ("PosixLakeDataSource", "register_data_source"):
        from posixlake.engines.spark import _datasource

        return getattr(_datasource, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
