"""A query over Spark Connect in one round trip.

Run with PySpark's public calls, "the snapshot is the view ``data``; run this SQL; give me
Arrow" costs four round trips to the Connect server, and the server analyses the plan in
each: ``createOrReplaceTempView`` (a command), ``spark.sql`` (a command that analyses the
statement and sends it back), then ``toArrow`` asks for the schema (an AnalyzePlan) before
it executes the plan. Spark Connect's SQL relation can carry the views it reads (it is what
``spark.sql("... {df} ...", df=df)`` sends): the server registers them for the statement,
analyses it, drops them and runs it, all inside one ExecutePlan whose first answer is the
result's schema. That is what :func:`connect_query` sends.

It builds the request with the plan classes of PySpark's Connect client (``SQL``,
``SubqueryAlias``) and reads the result with ``DataFrame._to_table`` (what ``toArrow``
calls after its schema request), then casts the batches to the schema the server sent,
as ``toArrow`` does: the same rows, types and errors as the four-call form.
"""

from __future__ import annotations

import threading
from typing import Any

import pyarrow as pa

from posixlake.engines.spark._session import quiet

__all__ = ["connect_query"]


def connect_query(spark: Any, frame: Any, sql: str, view: str, *, lock: threading.Lock) -> pa.Table:
    """Run ``sql`` with ``frame`` as the temporary view ``view`` on a Connect session.

    The server registers the view in the session for the statement and drops it after
    analysing it, so ``lock`` is held until the statement has run: a concurrent query of
    this process on another table must not replace ``view`` in between.

    Raises:
        PySparkException: what the server said (a parse or analysis error, a failed job).
    """
    from pyspark.sql.connect.dataframe import DataFrame
    from pyspark.sql.connect.plan import SQL, SubqueryAlias
    from pyspark.sql.pandas.types import to_arrow_schema

    statement = DataFrame(SQL(sql, None, None, [SubqueryAlias(frame._plan, view)]), spark)
    with lock, quiet():
        table, schema = statement._to_table()
    if schema is None:  # every server sends the schema first; ask for it otherwise
        schema = statement.schema
    target = to_arrow_schema(schema, error_on_duplicated_field_names_in_struct=True, timezone="UTC")
    return table.cast(target)
