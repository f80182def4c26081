"""Driver-side plumbing: DataFrames over snapshots, and Spark jobs that write table files.

Reading a snapshot: for a local table, Spark's own Parquet reader gets the exact file
list (one read per distinct partition-value tuple, the values attached as literals, so
Spark's partition discovery is never used); for object stores, many partitions, or paths
Spark would glob, a ``mapInArrow`` job reads the files with pyarrow through delta-rs'
object store. Either way the rows optionally carry the path of their file.

Writing: a ``mapInArrow`` job writes Parquet files, tagged with the operation, at the table
root and returns one row per file (see :mod:`._io`). A failed job removes its files.
"""

from __future__ import annotations

import logging
import os
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime
from decimal import Decimal
from functools import reduce
from typing import Any, Final

import pyarrow as pa

from posixlake.delta._commit import WrittenFile
from posixlake.delta._snapshot import DataFile, Snapshot, parse_partition_value
from posixlake.engines.spark._io import (
    FILE_ROW_SCHEMA,
    ReadSpec,
    WriteSpec,
    delete_files,
    delete_prefix,
    from_file_rows,
    list_prefix,
    read_data_file,
    table_filesystem,
    writer_task,
)
from posixlake.engines.spark._session import quiet, spark_errors, translate_spark_error
from posixlake.engines.spark._types import physical_spark_schema, quote, spark_schema
from posixlake.errors import PosixLakeError
from posixlake.storage import is_local, normalize_uri

__all__ = ["FILE_COL", "FileResolver", "column", "snapshot_frame", "write_frame"]

logger = logging.getLogger(__name__)

FILE_COL: Final = "__posixlake_file"
#: beyond this many distinct partition tuples, read through pyarrow instead of a union
MAX_NATIVE_GROUPS: Final = 64
#: a deletion vector with more deleted rows than this is applied by the pyarrow reader
#: (Spark's own reader filters ``_metadata.row_index`` with an IN list)
MAX_NATIVE_DELETED: Final = 10_000
_GLOB: Final = frozenset("{}[]*?\\:")


def column(name: str) -> Any:
    """Return a Spark Column for a column name (quoted: dots and spaces are literal)."""
    from pyspark.sql import functions as F

    return F.col(quote(name))


def spark_literal(value: Any, t: pa.DataType) -> Any:
    """Return a Spark literal Column of Arrow type ``t`` holding a partition value."""
    from pyspark.sql import functions as F

    from posixlake.engines.spark._types import arrow_to_spark

    target = arrow_to_spark(t)
    if value is None:
        return F.lit(None).cast(target)
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            text = value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
            return F.expr(f"TIMESTAMP '{text}Z'")
        return F.expr(f"TIMESTAMP_NTZ '{value.strftime('%Y-%m-%d %H:%M:%S.%f')}'")
    if isinstance(value, date):
        return F.expr(f"DATE '{value.isoformat()}'")
    if isinstance(value, bytes):
        return F.lit(bytearray(value)).cast(target)
    if isinstance(value, Decimal):
        return F.lit(value).cast(target)
    return F.lit(value).cast(target)


@dataclass(frozen=True)
class FileResolver:
    """Maps the file column of a snapshot frame back to the snapshot's files."""

    root: str
    native: bool
    files: dict[str, DataFile]

    def __call__(self, value: str) -> DataFile:
        """Return the DataFile a row's file-column value names."""
        if not self.native:
            return self.files[value]
        path = urllib.parse.unquote(urllib.parse.urlparse(value).path)
        rel = os.path.relpath(path, self.root).replace(os.sep, "/")
        return self.files[rel]


def _native_ok(snap: Snapshot, files: Sequence[DataFile]) -> bool:
    if not is_local(snap.uri) or not snap.data_schema.names:
        return False
    if any(ch in _GLOB for f in files for ch in f.path):
        return False
    root = normalize_uri(snap.uri)
    if any(ch in _GLOB for ch in root):
        return False
    if any(len(f.deleted_rows) > MAX_NATIVE_DELETED for f in files):
        return False
    return len({_group(snap, f) for f in files}) <= MAX_NATIVE_GROUPS


def _group(snap: Snapshot, f: DataFile) -> tuple[Any, ...]:
    """Files read by one Spark Parquet scan: same partition values, and no deletion vector
    (a file with one is scanned alone, its deleted row indexes filtered out)."""
    key = tuple(f.partition_values.get(c) for c in snap.partition_columns)
    return (*key, f.path) if f.deleted_rows else key


def snapshot_frame(
    spark: Any,
    snap: Snapshot,
    *,
    files: Sequence[DataFile] | None = None,
    with_file: bool = False,
    native: bool | None = None,
) -> tuple[Any, FileResolver]:
    """Return a DataFrame of the snapshot's rows (or of ``files`` of it), table columns in order.

    Args:
        spark: the session.
        snap: the snapshot.
        files: a subset of the snapshot's files (default: all).
        with_file: add a string column :data:`FILE_COL` naming each row's file.
        native: force (True) or forbid (False) Spark's own Parquet reader.

    Returns:
        The DataFrame and a resolver from :data:`FILE_COL` values to files.
    """
    chosen = list(snap.files if files is None else files)
    use_native = _native_ok(snap, chosen) if native is None else native
    root = normalize_uri(snap.uri) if is_local(snap.uri) else snap.uri
    resolver = FileResolver(root, use_native, {f.path: f for f in chosen})
    full = spark_schema(snap.delta_schema_json)
    if not chosen:
        from pyspark.sql.types import StringType, StructType

        schema = StructType(list(full.fields))
        if with_file:
            schema = schema.add(FILE_COL, StringType(), True)
        return spark.createDataFrame([], schema), resolver
    if use_native:
        return _native_frame(spark, snap, chosen, with_file=with_file), resolver
    return _arrow_frame(spark, snap, chosen, with_file=with_file), resolver


def _native_frame(spark: Any, snap: Snapshot, files: list[DataFile], *, with_file: bool) -> Any:
    from pyspark.sql import functions as F

    root = normalize_uri(snap.uri)
    logical = spark_schema(snap.delta_schema_json)
    if snap.physical_schema is None:
        data_struct = spark_schema(snap.delta_schema_json, exclude=snap.partition_columns)
        stored = {n: n for n in snap.schema.names}
    else:  # column mapping: the files hold physical names, nested ones included
        data_struct = physical_spark_schema(snap.delta_schema_json, exclude=snap.partition_columns)
        stored = dict(zip(snap.schema.names, snap.physical_schema.names, strict=True))
    groups: dict[tuple[Any, ...], list[DataFile]] = {}
    for f in files:
        groups.setdefault(_group(snap, f), []).append(f)
    frames = []
    for members in groups.values():
        paths = [os.path.join(root, f.path) for f in members]
        df = spark.read.schema(data_struct).parquet(*paths)
        if members[0].deleted_rows:  # one file per group (see _group)
            deleted = list(members[0].deleted_rows)
            df = df.where(~F.col("_metadata.row_index").isin(deleted))
        values = members[0].partition_values
        cols = [
            spark_literal(values.get(f.name), f.type).alias(f.name)
            if f.name in snap.partition_columns
            else column(stored[f.name]).alias(f.name)
            if stored[f.name] == f.name
            else column(stored[f.name]).cast(logical[f.name].dataType).alias(f.name)
            for f in snap.schema
        ]
        if with_file:
            cols.append(F.col("_metadata.file_path").alias(FILE_COL))
        frames.append(df.select(*cols))
    return reduce(lambda a, b: a.unionAll(b), frames)


def reader_task(spec: ReadSpec) -> Any:
    """Return a ``mapInArrow`` function reading the files whose indexes it receives."""

    def run(batches: Any) -> Any:
        fs = table_filesystem(spec.uri, spec.storage_options)
        for batch in batches:
            for idx in batch.column(0).to_pylist():
                yield from read_data_file(fs, spec, spec.files[idx])

    return run


def _arrow_frame(spark: Any, snap: Snapshot, files: list[DataFile], *, with_file: bool) -> Any:
    from pyspark.sql.types import StringType

    spec = ReadSpec(
        uri=snap.uri,
        storage_options=dict(snap.storage_options) if snap.storage_options else None,
        schema=snap.schema,
        partition_columns=snap.partition_columns,
        files=tuple(files),
        file_column=FILE_COL if with_file else None,
        physical_schema=snap.physical_schema,
    )
    struct = spark_schema(snap.delta_schema_json)
    if with_file:
        struct = struct.add(FILE_COL, StringType(), True)
    slots = max(1, min(len(files), 4 * _parallelism(spark)))
    with quiet():
        return spark.range(0, len(files), 1, numPartitions=slots).mapInArrow(
            reader_task(spec), struct
        )


def _parallelism(spark: Any) -> int:
    """Return the session's default parallelism (Spark Connect has no SparkContext: 8)."""
    errors: tuple[type[BaseException], ...] = (AttributeError, *spark_errors())
    try:
        return int(spark.sparkContext.defaultParallelism)
    except errors:
        return 8


def files_snapshot(snap: Snapshot, written: Sequence[WrittenFile]) -> Snapshot:
    """Return a snapshot made of newly written files (to read them back with Spark)."""
    files = tuple(
        DataFile(
            w.path,
            w.size,
            w.num_records,
            {
                k: parse_partition_value(v, snap.schema.field(k).type)
                for k, v in w.partition_values.items()
            },
        )
        for w in written
    )
    return replace(snap, files=files)


def write_frame(df: Any, spec: WriteSpec, *, what: str) -> list[tuple[WrittenFile, pa.Schema]]:
    """Run a Spark job writing ``df``'s rows as Parquet files tagged ``spec.prefix``.

    On failure everything under the prefix is removed and the error is translated; on
    success files of failed task attempts (not reported) are removed too.

    Raises:
        PosixLakeError: what the job raised (a SchemaError for rows that do not fit...).
    """
    try:
        with quiet():
            rows = df.mapInArrow(writer_task(spec), FILE_ROW_SCHEMA).collect()
    except PosixLakeError:
        delete_prefix(spec.uri, spec.storage_options, spec.prefix)
        raise
    except spark_errors() as err:
        delete_prefix(spec.uri, spec.storage_options, spec.prefix)
        raise translate_spark_error(err, what=what) from err
    written = from_file_rows([r.asDict() for r in rows])
    keep = {w.path for w, _ in written}
    orphans = [p for p in list_prefix(spec.uri, spec.storage_options, spec.prefix) if p not in keep]
    if orphans:
        logger.debug("removing %d file(s) of failed task attempts", len(orphans))
        delete_files(spec.uri, spec.storage_options, orphans)
    return written


def discard(spec: WriteSpec) -> None:
    """Remove everything a write under ``spec`` produced."""
    delete_prefix(spec.uri, spec.storage_options, spec.prefix)
