"""The ``posixlake`` PySpark data source: read and write posixlake tables from any Spark job.

::

    spark.read.format("posixlake").load(uri)                             # latest version
    spark.read.format("posixlake").option("versionAsOf", 3).load(uri)
    spark.read.format("posixlake").option("timestampAsOf", "2024-05-01T00:00:00Z").load(uri)
    df.write.format("posixlake").mode("append").save(uri)
    df.write.format("posixlake").mode("overwrite").option("partitionBy", "day").save(uri)

Reads resolve the snapshot with delta-rs (exact file list, partition values from the
log) and read the files with pyarrow through delta-rs' object store, so local, S3 and
Azure tables work without Hadoop connector jars. Writes put Parquet files, tagged per write,
at the table root from the executors and commit them on the driver through delta-rs
in ONE transaction (``overwrite`` replaces every row); a failed job removes its files.
Writing to a path without a table creates it (``partitionBy`` and ``primaryKey``
options apply then). A table's primary key is enforced on append.

Other options are delta-rs storage options (``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``,
``azure_storage_account_name``...).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    EqualTo,
    In,
    InputPartition,
    IsNull,
    WriterCommitMessage,
)

from posixlake.delta import DeltaLog
from posixlake.delta._commit import WrittenFile, commit_files, create_with_files
from posixlake.delta._snapshot import Snapshot, parse_partition_value, snapshot_of
from posixlake.engines.spark._io import (
    ReadSpec,
    WriteSpec,
    check_schema_names,
    delete_prefix,
    read_data_file,
    table_filesystem,
    write_tables,
)
from posixlake.engines.spark._types import spark_schema, spark_schema_to_arrow
from posixlake.errors import InvalidOperation, VersionError
from posixlake.storage import normalize_uri
from posixlake.types import delta_schema

__all__ = ["PosixLakeDataSource", "register_data_source"]

logger = logging.getLogger(__name__)

FORMAT: Final = "posixlake"
PRIMARY_KEY_PROPERTY: Final = "posixlake.primaryKey"
_OWN_OPTIONS: Final = frozenset(
    {"path", "versionasof", "timestampasof", "partitionby", "primarykey", "filesperpartition"}
)


def register_data_source(spark: Any) -> None:
    """Register the ``posixlake`` format on a SparkSession (idempotent)."""
    spark.dataSource.register(PosixLakeDataSource)


def _options(options: Mapping[str, str]) -> tuple[str, dict[str, str] | None]:
    """Return the table URI and the delta-rs storage options among data source options."""
    path = options.get("path")
    if not path:
        raise InvalidOperation("the posixlake format needs a path: .load(uri) or .save(uri)")
    uri = normalize_uri(path)
    storage = {k: str(v) for k, v in options.items() if k.lower() not in _OWN_OPTIONS}
    return uri, storage or None


def _resolve(options: Mapping[str, str]) -> Snapshot:
    """Resolve the snapshot the options ask for (latest, versionAsOf or timestampAsOf)."""
    uri, storage = _options(options)
    log = DeltaLog.open(uri, storage)
    version = options.get("versionAsOf")
    when = options.get("timestampAsOf")
    if version is not None and when is not None:
        raise VersionError("give versionAsOf or timestampAsOf, not both")
    if version is not None:
        try:
            log = log.at(int(version))
        except ValueError as err:
            raise VersionError(f"versionAsOf must be an integer, not {version!r}") from err
    elif when is not None:
        try:
            parsed = datetime.fromisoformat(str(when).replace("Z", "+00:00"))
        except ValueError as err:
            raise VersionError(f"timestampAsOf must be an ISO timestamp, not {when!r}") from err
        log = log.at(parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC))
    return snapshot_of(log)


class _FilesPartition(InputPartition):
    """A group of file indexes read by one task."""

    def __init__(self, indexes: list[int]) -> None:
        super().__init__(indexes)
        self.indexes = indexes


class _Reader(DataSourceReader):
    def __init__(self, snap: Snapshot, files_per_partition: int) -> None:
        self.snap_json = snap.to_json()
        self.spec = ReadSpec(
            uri=snap.uri,
            storage_options=dict(snap.storage_options) if snap.storage_options else None,
            schema=snap.schema,
            partition_columns=snap.partition_columns,
            files=snap.files,
            physical_schema=snap.physical_schema,
        )
        self.files_per_partition = max(1, files_per_partition)
        self.keep: list[int] = list(range(len(snap.files)))

    def pushFilters(self, filters: list[Any]) -> Any:
        """Prune files by filters on partition columns; Spark still applies every filter."""
        # values Spark and pyarrow give alike (not timestamps: time zones, not floats: NaN)
        parts = {
            c
            for c in self.spec.partition_columns
            if (t := self.spec.schema.field(c).type)
            and (
                pa.types.is_string(t)
                or pa.types.is_integer(t)
                or pa.types.is_boolean(t)
                or pa.types.is_date(t)
            )
        }
        for flt in filters:
            col = flt.attribute[0] if len(flt.attribute) == 1 else None
            if col in parts:
                if isinstance(flt, EqualTo):
                    self._prune(col, lambda v, target=flt.value: v is not None and v == target)
                elif isinstance(flt, In):
                    values = list(flt.value)
                    self._prune(col, lambda v, vs=values: v is not None and v in vs)
                elif isinstance(flt, IsNull):
                    self._prune(col, lambda v: v is None)
            yield flt

    def _prune(self, col: str, keep: Any) -> None:
        files = self.spec.files
        self.keep = [i for i in self.keep if keep(files[i].partition_values.get(col))]

    def partitions(self) -> Sequence[InputPartition]:
        """One task per ``filesPerPartition`` files (default 1)."""
        n = self.files_per_partition
        chunks = [self.keep[i : i + n] for i in range(0, len(self.keep), n)]
        return [_FilesPartition(c) for c in chunks] or [_FilesPartition([])]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Yield the rows of the partition's files as Arrow batches."""
        indexes: list[int] = partition.value
        if not indexes:
            return
        fs = table_filesystem(self.spec.uri, self.spec.storage_options)
        for i in indexes:
            yield from read_data_file(fs, self.spec, self.spec.files[i])


@dataclass
class _Message(WriterCommitMessage):
    files: list[dict[str, Any]] = field(default_factory=list)


class _Writer(DataSourceArrowWriter):
    def __init__(
        self,
        uri: str,
        storage: dict[str, str] | None,
        schema: pa.Schema,
        partition_by: tuple[str, ...],
        key: tuple[str, ...],
        exists: bool,
        overwrite: bool,
    ) -> None:
        self.spec = WriteSpec.new(uri, storage, schema, partition_by)
        self.key = key
        self.exists = exists
        self.overwrite = overwrite

    def write(self, iterator: Iterator[pa.RecordBatch]) -> _Message:
        """Write this task's rows as Parquet files (runs on an executor)."""
        tables = (pa.Table.from_batches([b]) for b in iterator)
        written = write_tables(self.spec, tables)
        return _Message([w.to_row() for w, _ in written])

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Commit every task's files in ONE transaction (runs on the driver)."""
        adds = [
            WrittenFile.from_row(r) for m in messages if isinstance(m, _Message) for r in m.files
        ]
        try:
            self._commit(adds)
        except BaseException:
            delete_prefix(self.spec.uri, self.spec.storage_options, self.spec.prefix)
            raise

    def _commit(self, adds: list[WrittenFile]) -> None:
        spec = self.spec
        meta = {
            "posixlake.operation": "SPARK WRITE " + ("OVERWRITE" if self.overwrite else "APPEND")
        }
        if not self.exists:
            assert spec.schema is not None
            if not self.key:
                create_with_files(  # version 0 holds the rows
                    spec.uri,
                    spec.schema,
                    adds,
                    partition_by=spec.partition_by,
                    storage_options=spec.storage_options,
                    metadata=meta,
                )
                return
            # delta-rs refuses unknown properties in a create with files: create, then add
            _check_keys(spec, adds, self.key, None)
            created = DeltaLog.create(
                spec.uri,
                spec.schema,
                partition_by=spec.partition_by,
                configuration={PRIMARY_KEY_PROPERTY: ",".join(self.key)},
                storage_options=spec.storage_options,
            )
            commit_files(created, adds, [], metadata=meta)
            return
        log = DeltaLog.open(spec.uri, spec.storage_options)

        def attempt(_n: int) -> None:
            if self.key:
                _check_keys(spec, adds, self.key, None if self.overwrite else log)
            if not adds and not self.overwrite:
                return
            commit_files(
                log,
                adds,
                [],
                mode="overwrite" if self.overwrite else "append",
                metadata=meta,
                strict=bool(self.key),
            )

        log.retry.run(
            f"write to {spec.uri}",
            attempt,
            strict=bool(self.key),
            on_conflict=lambda _err: log.refresh(),
        )

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Remove every file the job wrote."""
        delete_prefix(self.spec.uri, self.spec.storage_options, self.spec.prefix)


def _check_keys(
    spec: WriteSpec, adds: list[WrittenFile], key: Sequence[str], log: DeltaLog | None
) -> None:
    """Refuse repeated keys in the new files, and (with ``log``) keys the table holds."""
    import pyarrow.parquet as pq

    from posixlake._merge import check_insert_keys

    assert spec.schema is not None
    fs = table_filesystem(spec.uri, spec.storage_options)
    stored = [k for k in key if k not in spec.partition_by]
    parts = []
    for f in adds:
        with fs.open_input_file(f.path) as handle:
            t = pq.read_table(handle, columns=stored)
        for k in key:
            if k in spec.partition_by:
                kind = spec.schema.field(k).type
                value = parse_partition_value(f.partition_values.get(k), kind)
                t = t.append_column(k, pa.array([value] * t.num_rows, kind))
        parts.append(t.select(list(key)))
    if not parts:
        return
    new = pa.concat_tables(parts)
    existing = log.read_columns(list(key)) if log is not None else new.schema.empty_table()
    check_insert_keys(new, existing.cast(new.schema), list(key))  # DuplicateKeyError


class PosixLakeDataSource(DataSource):
    """Spark data source ``posixlake`` (see the module docstring for the options)."""

    @classmethod
    def name(cls) -> str:
        """Return the format name, ``posixlake``."""
        return FORMAT

    def schema(self) -> Any:
        """Return the Spark schema of the snapshot the options select."""
        return spark_schema(_resolve(self.options).delta_schema_json)

    def reader(self, schema: Any) -> DataSourceReader:
        """Return a reader of the snapshot (resolved again: this runs in another process)."""
        snap = _resolve(self.options)
        if spark_schema(snap.delta_schema_json) != schema:
            raise InvalidOperation(
                f"the schema of {snap.uri} changed while planning the read; read it again"
            )
        per = int(self.options.get("filesPerPartition", "1"))
        return _Reader(snap, per)

    def writer(self, schema: Any, overwrite: bool) -> DataSourceArrowWriter:
        """Return a writer appending to (or overwriting) the table, creating it if needed."""
        uri, storage = _options(self.options)
        names = [f.name for f in schema.fields]
        if DeltaLog.exists(uri, storage):
            log = DeltaLog.open(uri, storage)
            table_schema = log.arrow_schema
            check_schema_names(names, table_schema)
            config = log.configuration.get(PRIMARY_KEY_PROPERTY, "")
            key = tuple(c for c in config.split(",") if c)
            return _Writer(
                uri, storage, table_schema, tuple(log.partition_columns), key, True, overwrite
            )
        arrow = delta_schema(spark_schema_to_arrow(schema))
        parts = tuple(
            c.strip() for c in self.options.get("partitionBy", "").split(",") if c.strip()
        )
        key = tuple(c.strip() for c in self.options.get("primaryKey", "").split(",") if c.strip())
        for c in (*parts, *key):
            if c not in arrow.names:
                raise InvalidOperation(f"column {c!r} is not in the data")
        if key:
            arrow = pa.schema([f.with_nullable(False) if f.name in key else f for f in arrow])
        return _Writer(uri, storage, arrow, parts, key, False, overwrite)
