"""SparkEngine: Spark computes, delta-rs commits.

Queries run as Spark SQL over the exact snapshot delta-rs resolves (a cached DataFrame
per table version, registered as the temporary view ``data``). Bulk writes and
copy-on-write DML run as Spark jobs that write Parquet files (tagged per operation) at the root of
the table; delta-rs commits the adds and removes as ONE transaction on the DeltaTable
object the operation read (see :mod:`posixlake.delta._commit`). A commit conflict makes
the operation re-plan from the new version, a bounded number of times.
"""

from __future__ import annotations

from posixlake.engines.spark._bulk import SparkBulk, StagedImport
from posixlake.engines.spark._core import MAX_ATTEMPTS
from posixlake.engines.spark._dml import SparkDml

__all__ = ["MAX_ATTEMPTS", "SparkEngine", "StagedImport"]


class SparkEngine(SparkDml, SparkBulk):
    """Engine on PySpark: queries and DML as Spark jobs, commits through delta-rs.

    Args:
        master: Spark master URL for a session this engine builds (``local[*]`` default).
        remote: a Spark Connect server (``sc://host:15002``) to run on instead of a JVM in
            this process (default ``$POSIXLAKE_SPARK_REMOTE`` when no master is given).
        spark: a SparkSession (classic or Connect) to use instead (never stopped by the engine).
        ui: start the Spark UI in a session this engine builds.

    The session starts lazily, at the first Spark job, and is shared by engines in the
    process (Spark allows one SparkContext per JVM). The parts: session, snapshots,
    queries and commits in :mod:`._core`, DML in :mod:`._dml`, bulk writes in
    :mod:`._bulk`.
    """

    name = "spark"
