"""Bulk writes of :class:`~posixlake.engines.spark.SparkEngine`: inserts of DataFrames and
files as Spark jobs, and tables created from files (staged, then committed). See
docs/design.md."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import reduce
from typing import Any

import pyarrow as pa

from posixlake.delta import DeltaLog
from posixlake.delta._commit import WrittenFile, commit_files
from posixlake.delta._features import (
    column_mapping_mode,
    physical_write_schema,
)
from posixlake.delta._snapshot import Snapshot, snapshot_for_files
from posixlake.engines.base import FileFormat, WriteOutcome
from posixlake.engines.local import format_of, source_paths
from posixlake.engines.spark._core import SparkCore, is_spark_dataframe
from posixlake.engines.spark._frames import (
    column,
    discard,
    files_snapshot,
    snapshot_frame,
    write_frame,
)
from posixlake.engines.spark._io import (
    FILE_ROW_SCHEMA,
    WriteSpec,
    check_schema_names,
    import_task,
)
from posixlake.engines.spark._session import (
    quiet,
    spark_errors,
    translate_spark_error,
)
from posixlake.errors import (
    DuplicateKeyError,
    PosixLakeError,
    SchemaError,
    SerializationError,
    UnsupportedTableFeature,
)

__all__ = ["SparkBulk", "StagedImport", "write_frame_rows"]

logger = logging.getLogger("posixlake.engines.spark._engine")


@dataclass
class StagedImport:
    """Files an import wrote before its table exists (see :meth:`SparkEngine.stage_files`).

    Attributes:
        schema: the inferred table schema (Delta types; partition columns included).
    """

    engine: SparkBulk
    spec: WriteSpec
    schema: pa.Schema
    files: list[WrittenFile] = field(default_factory=list)

    @property
    def rows(self) -> int:
        """Rows in the staged files."""
        return sum(f.num_records for f in self.files)

    def _snapshot(self, schema: pa.Schema | None = None) -> Snapshot:
        snap = snapshot_for_files(
            self.spec.uri,
            self.spec.storage_options,
            schema or self.schema,
            self.spec.partition_by,
            [],
        )
        return files_snapshot(snap, self.files)

    def check_keys(self, key: Sequence[str]) -> None:
        """Check that ``key`` is unique and never NULL in the staged rows.

        Raises:
            SchemaError: a NULL key or a repeated key (naming up to five).
        """
        if not self.files or not key:
            return
        from pyspark.sql import functions as F

        spark = self.engine.spark
        frame, _ = snapshot_frame(spark, self._snapshot())
        keys = [column(k) for k in key]
        nulls = reduce(lambda a, b: a | b, [c.isNull() for c in keys])
        try:
            with quiet():
                if frame.where(nulls).limit(1).count():
                    raise SchemaError(f"primary key column(s) {list(key)} have NULLs in the input")
                dups = frame.groupBy(*keys).count().where(F.col("count") > 1).limit(5).collect()
        except spark_errors() as err:
            raise translate_spark_error(err, what="check keys") from err
        if dups:
            shown = [r[0] if len(key) == 1 else tuple(r[: len(key)]) for r in dups]
            raise SchemaError(f"primary key {list(key)} is not unique in the input: {shown}")

    def commit(self, log: DeltaLog, *, metadata: Mapping[str, Any]) -> WriteOutcome:
        """Commit the staged files to the (new, empty) table ``log`` in one transaction."""
        if not self.files:
            discard(self.spec)
            return WriteOutcome(0, None)
        version = commit_files(log, self.files, [], metadata=metadata)
        return WriteOutcome(self.rows, version)

    def discard(self) -> None:
        """Remove the staged files."""
        discard(self.spec)


class SparkBulk(SparkCore):
    """Inserts and imports as Spark jobs."""

    # -- bulk writes ----------------------------------------------------------------------

    def read_files(
        self, paths: Sequence[str], *, fmt: FileFormat, schema: pa.Schema | None
    ) -> pa.Table | None:
        """Return None: Spark writes imported files itself (see :meth:`stage_files`)."""
        return None

    def accepts(self, data: object) -> bool:
        """Return whether :meth:`insert_external` takes ``data``: a Spark DataFrame or file paths."""
        return is_spark_dataframe(data) or source_paths(data) is not None

    def append_files(self, log: DeltaLog, paths: Sequence[str], *, fmt: FileFormat) -> WriteOutcome:
        """Append the rows of CSV or Parquet files in one commit (a Spark job)."""
        return self._insert(log, ("files", fmt, list(paths)), key=(), metadata={})

    def insert_external(
        self, log: DeltaLog, data: Any, *, key: Sequence[str], metadata: Mapping[str, Any]
    ) -> WriteOutcome:
        """Insert a Spark DataFrame or CSV / Parquet files as a Spark job, in one commit.

        Executors write the rows as Parquet files; delta-rs commits them all at once.
        With a primary key, a key repeated in the data or already in the table raises
        :class:`DuplicateKeyError` and nothing is committed (a concurrent commit makes
        the check run again on the new version).

        Raises:
            SchemaError: unknown columns, a missing NOT NULL column, values that do not
                fit. DuplicateKeyError: see above. NotFound: a path matches nothing.
        """
        if is_spark_dataframe(data):
            return self._insert(log, ("frame", data), key=key, metadata=metadata)
        paths = source_paths(data)
        if paths is None:
            raise SerializationError(f"the Spark engine cannot insert a {type(data).__name__}")
        fmt, files = format_of(paths)
        return self._insert(log, ("files", fmt, files), key=key, metadata=metadata)

    def _insert(
        self,
        log: DeltaLog,
        source: tuple[Any, ...],
        *,
        key: Sequence[str],
        metadata: Mapping[str, Any],
    ) -> WriteOutcome:
        log.check_write("insert", rewrites=False)  # before any Spark job
        features = self._delta_rs_only(log, rewrites=False, physical_names=True)
        if features:
            raise UnsupportedTableFeature(
                f"insert: the table at {log.uri} uses the Delta table feature(s) "
                f"{', '.join(features)}, which files written by Spark would break; insert "
                "the rows as Arrow / pandas / dicts (delta-rs writes them) or use engine='local'",
                features,
            )
        schema = log.arrow_schema
        parts = tuple(log.partition_columns)
        spec = WriteSpec.new(log.uri, log.storage_options, schema, parts)
        if column_mapping_mode(log.configuration) != "none":
            with log.lock:  # the schema of the same version
                schema = log.arrow_schema
                schema_json = log.table.schema().to_json()
            spec = replace(spec, schema=schema, physical=physical_write_schema(schema_json, schema))
        spark = self.spark
        if source[0] == "frame":
            df = source[1]
            check_schema_names(list(df.columns), schema)
            written = write_frame(df, spec, what="insert")
        else:
            _, fmt, files = source
            try:
                with quiet():
                    job = spark.range(
                        0, len(files), 1, numPartitions=max(1, len(files))
                    ).mapInArrow(
                        import_task(spec, files, fmt=fmt, schema=schema),
                        FILE_ROW_SCHEMA,
                    )
            except spark_errors() as err:
                raise translate_spark_error(err, what="insert") from err
            written = [(w, s) for w, s in write_frame_rows(job, spec, what="insert") if w.path]
        adds = [w for w, _ in written]
        rows = sum(w.num_records for w in adds)
        if rows == 0:
            discard(spec)
            return WriteOutcome(0, None)

        def attempt(n: int) -> WriteOutcome:
            snap = self.snapshot(log)
            if key:
                try:
                    self._check_new_keys(log, snap, adds, key)
                except BaseException:
                    discard(spec)
                    raise
            version = self._commit(
                log, snap, spec, adds, [], n, metadata=metadata, strict=bool(key), reuse=True
            )
            return WriteOutcome(rows, version)

        try:
            return self._attempts(log, "insert", attempt, strict=bool(key))
        except BaseException:  # nothing committed (commit_files raises only before)
            discard(spec)
            raise

    def _check_new_keys(
        self, log: DeltaLog, snap: Snapshot, adds: Sequence[WrittenFile], key: Sequence[str]
    ) -> None:
        from pyspark.sql import functions as F

        keys = [column(k) for k in key]
        table, _ = self.frame(log)
        try:
            new, _ = snapshot_frame(self.spark, files_snapshot(snap, adds))
            with quiet():
                dups = new.groupBy(*keys).count().where(F.col("count") > 1).limit(5).collect()
                clash = (
                    []
                    if dups
                    else new.select(*keys)
                    .join(table.select(*keys), list(key), "left_semi")
                    .limit(5)
                    .collect()
                )
        except spark_errors() as err:
            raise translate_spark_error(err, what="insert") from err
        if dups:
            shown = [r[0] if len(key) == 1 else tuple(r[: len(key)]) for r in dups]
            raise DuplicateKeyError(f"duplicate primary key in the inserted rows: {shown}")
        if clash:
            shown = [r[0] if len(key) == 1 else tuple(r) for r in clash]
            raise DuplicateKeyError(
                f"primary key already exists: {shown} (use merge, or insert(..., upsert=True), to update rows)"
            )

    def stage_files(
        self,
        paths: Sequence[str],
        *,
        fmt: FileFormat,
        uri: str,
        storage_options: Mapping[str, str] | None,
        partition_by: Sequence[str] = (),
    ) -> StagedImport:
        """Write CSV / Parquet files into a table folder before the table exists.

        CSV types are inferred over each whole file as the local engine does; several
        files unify their types the same way. Files whose types widen are rewritten.

        Raises:
            SerializationError: malformed input, or files with incompatible types.
            SchemaError: a partition column that is not in the data.
        """
        spec = WriteSpec.new(uri, storage_options, None, partition_by)
        spark = self.spark
        try:
            with quiet():
                job = spark.range(0, len(paths), 1, numPartitions=max(1, len(paths))).mapInArrow(
                    import_task(spec, list(paths), fmt=fmt, schema=None),
                    FILE_ROW_SCHEMA,
                )
        except spark_errors() as err:
            raise translate_spark_error(err, what=f"import {fmt}") from err
        rows = write_frame_rows(job, spec, what=f"import {fmt}")
        inputs = [s for w, s in rows if not w.path]
        written = [(w, s) for w, s in rows if w.path]
        try:
            unified = _unify(inputs)
            for c in partition_by:
                if c not in unified.names:
                    raise SchemaError(f"partition column {c!r} is not in the schema")
            stale = [w for w, s in written if not s.equals(unified)]
            files = [w for w, s in written if s.equals(unified)]
            if stale:
                files.extend(self._restage(spec, unified, stale))
        except BaseException:
            discard(spec)
            raise
        return StagedImport(self, spec, unified, files)

    def _restage(
        self, spec: WriteSpec, schema: pa.Schema, stale: list[WrittenFile]
    ) -> list[WrittenFile]:
        """Rewrite staged files whose types widened, to the unified schema."""
        from posixlake.engines.spark._io import delete_files

        snap = snapshot_for_files(spec.uri, spec.storage_options, schema, spec.partition_by, [])
        # the old files hold narrower types: read them with the arrow reader, which casts
        old = files_snapshot(snap, stale)
        # another tag: write_frame's clean-up of orphans must not see the other staged files
        target = WriteSpec(
            spec.uri, spec.storage_options, f"{spec.prefix}restaged", schema, spec.partition_by
        )
        frame, _ = snapshot_frame(self.spark, old, native=False)
        written = [w for w, _ in write_frame(frame, target, what="import")]
        delete_files(spec.uri, spec.storage_options, [w.path for w in stale])
        return written


def write_frame_rows(
    job: Any, spec: WriteSpec, *, what: str
) -> list[tuple[WrittenFile, pa.Schema]]:
    """Collect a job that already yields file rows; remove its files if it fails."""
    from posixlake.engines.spark._io import from_file_rows

    try:
        with quiet():
            rows = job.collect()
    except PosixLakeError:
        discard(spec)
        raise
    except spark_errors() as err:
        discard(spec)
        raise translate_spark_error(err, what=what, default=SerializationError) from err
    return from_file_rows([r.asDict() for r in rows])


def _unify(schemas: Sequence[pa.Schema]) -> pa.Schema:
    """Unify input schemas as the local engine concatenates tables (permissive promotion)."""
    if not schemas:
        raise SerializationError("no input files")
    if len(schemas) == 1:
        return schemas[0]
    try:
        return pa.unify_schemas(list(schemas), promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
        raise SerializationError(f"the files have incompatible schemas: {err}") from err
