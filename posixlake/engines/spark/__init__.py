"""The Spark engine: Spark computes, delta-rs commits.

This package is the only code that imports ``pyspark``. :class:`SparkEngine` runs
queries as Spark SQL over the snapshot delta-rs resolves, bulk writes and copy-on-write
DML as Spark jobs whose files delta-rs commits in one transaction, and
:class:`PosixLakeDataSource` lets any Spark job read and write posixlake tables with
``format("posixlake")``.
"""

from posixlake.engines.spark._datasource import PosixLakeDataSource, register_data_source
from posixlake.engines.spark._engine import MAX_ATTEMPTS, SparkEngine, StagedImport
from posixlake.engines.spark._session import (
    DEFAULT_MASTER,
    JAVA_PACKAGE,
    SparkUnavailableError,
    build_session,
    check_java,
)

__all__ = [
    "DEFAULT_MASTER",
    "JAVA_PACKAGE",
    "MAX_ATTEMPTS",
    "PosixLakeDataSource",
    "SparkEngine",
    "SparkUnavailableError",
    "StagedImport",
    "build_session",
    "check_java",
    "register_data_source",
]
