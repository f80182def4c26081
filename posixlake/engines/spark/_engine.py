"""SparkEngine: Spark computes, delta-rs commits.

Queries run as Spark SQL over the exact snapshot delta-rs resolves (a cached DataFrame
per table version, registered as the temporary view ``data``). Bulk writes and
copy-on-write DML run as Spark jobs that write Parquet files (tagged per operation) at the root of
the table; delta-rs commits the adds and removes as ONE transaction on the DeltaTable
object the operation read (see :mod:`posixlake.delta._commit`). A commit conflict makes
the operation re-plan from the new version, a bounded number of times.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import reduce
from typing import Any, Final, TypeVar

import pyarrow as pa

from posixlake.delta import DeltaLog, plain_types
from posixlake.delta._commit import WrittenFile, commit_files
from posixlake.delta._features import (
    column_mapping_mode,
    file_commit_blockers,
    physical_write_schema,
)
from posixlake.delta._retry import MAX_PLANNINGS
from posixlake.delta._snapshot import DataFile, Snapshot, snapshot_for_files, snapshot_of
from posixlake.engines.base import FileFormat, MergeOutcome, WriteOutcome
from posixlake.engines.local import LocalEngine, format_of, source_paths
from posixlake.engines.spark._frames import (
    FILE_COL,
    FileResolver,
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
    build_session,
    preload,
    quiet,
    spark_errors,
    translate_spark_error,
)
from posixlake.engines.spark._types import arrow_schema_to_spark, arrow_to_spark
from posixlake.errors import (
    CommitConflict,
    DuplicateKeyError,
    NotFound,
    PosixLakeError,
    QueryError,
    SchemaError,
    SerializationError,
    UnsupportedTableFeature,
    VersionError,
)

__all__ = ["MAX_ATTEMPTS", "SparkEngine", "StagedImport"]

logger = logging.getLogger(__name__)

#: plannings of one Spark rewrite at most (the one retry policy's bound)
MAX_ATTEMPTS: Final = MAX_PLANNINGS
VIEW: Final = "data"
_CACHE_SIZE: Final = 16
_T = TypeVar("_T")

# Spark temp views are per session; serialise "register `data` + analyse" across engines.
_VIEW_LOCK = threading.Lock()
# Sessions this module built, with how many engines use them (stopped at zero).
_OWNED: dict[int, int] = {}
_OWNED_LOCK = threading.Lock()


def _running_session() -> Any:
    """Return the SparkSession running in this process, if any."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        return None
    return SparkSession.getActiveSession() or SparkSession._instantiatedSession


def _unquote(name: str) -> str:
    """Undo ``quote_ident`` (``"a""b"`` -> ``a"b``); plain names pass through."""
    if len(name) >= 2 and name[0] == name[-1] == '"':
        return name[1:-1].replace('""', '"')
    return name


def is_spark_dataframe(data: object) -> bool:
    """Return whether ``data`` is a PySpark DataFrame (classic or Connect)."""
    cls = type(data)
    return cls.__name__ == "DataFrame" and cls.__module__.startswith("pyspark.sql")


@dataclass
class StagedImport:
    """Files an import wrote before its table exists (see :meth:`SparkEngine.stage_files`).

    Attributes:
        schema: the inferred table schema (Delta types; partition columns included).
    """

    engine: SparkEngine
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


class SparkEngine:
    """Engine on PySpark: queries and DML as Spark jobs, commits through delta-rs.

    Args:
        master: Spark master URL for a session this engine builds (``local[*]`` default).
        spark: a SparkSession to use instead (never stopped by the engine).
        ui: start the Spark UI in a session this engine builds.

    The session starts lazily, at the first Spark job, and is shared by engines in the
    process (Spark allows one SparkContext per JVM).
    """

    name = "spark"

    def __init__(self, *, master: str | None = None, spark: Any = None, ui: bool = False) -> None:
        self._master = master
        self._spark = spark
        self._ui = ui
        self._owned = False
        self._registered = False
        self._lock = threading.RLock()
        self._snapshots: OrderedDict[tuple[str, str, int], Snapshot] = OrderedDict()
        self._frames: OrderedDict[tuple[str, str, int, bool], tuple[Any, FileResolver]] = (
            OrderedDict()
        )
        #: test seam: called with the attempt number right before each commit
        self.before_commit: Callable[[int], None] | None = None

    # -- session ----------------------------------------------------------------------

    @property
    def spark(self) -> Any:
        """The SparkSession (built on first use)."""
        with self._lock:
            if self._spark is None:
                with _OWNED_LOCK:
                    running = _running_session()
                    self._spark = build_session(master=self._master, ui=self._ui)
                    key = id(self._spark)
                    # stop it on close only if we started it (or share one an engine started)
                    self._owned = running is None or key in _OWNED
                    if self._owned:
                        _OWNED[key] = _OWNED.get(key, 0) + 1
            elif not self._registered:
                from posixlake.engines.spark._datasource import register_data_source

                preload()
                register_data_source(self._spark)
            self._registered = True
            return self._spark

    @property
    def started(self) -> bool:
        """Whether the engine has a session (it starts at the first Spark job)."""
        return self._spark is not None

    def close(self) -> None:
        """Drop cached plans; stop the session if this engine built it and is its last user."""
        with self._lock:
            self._frames.clear()
            self._snapshots.clear()
            if self._spark is None or not self._owned:
                return
            key = id(self._spark)
            with _OWNED_LOCK:
                _OWNED[key] = _OWNED.get(key, 1) - 1
                last = _OWNED[key] <= 0
                if last:
                    del _OWNED[key]
            if last:
                self._spark.stop()
            self._spark = None
            self._owned = False

    # -- snapshots and frames ---------------------------------------------------------

    def snapshot(self, log: DeltaLog) -> Snapshot:
        """Return the (cached) snapshot of ``log``'s loaded version."""
        with log.lock:
            key = (log.uri, str(log.table.metadata().id), log.version)
        with self._lock:
            cached = self._snapshots.get(key)
            if cached is not None:
                self._snapshots.move_to_end(key)
                return cached
        snap = snapshot_of(log)
        with self._lock:
            self._snapshots[key] = snap
            while len(self._snapshots) > _CACHE_SIZE:
                self._snapshots.popitem(last=False)
        return snap

    def frame(self, log: DeltaLog, *, with_file: bool = False) -> tuple[Any, FileResolver]:
        """Return the (cached) DataFrame of ``log``'s loaded version."""
        snap = self.snapshot(log)
        with log.lock:
            key = (log.uri, str(log.table.metadata().id), snap.version, with_file)
        with self._lock:
            cached = self._frames.get(key)
            if cached is not None:
                self._frames.move_to_end(key)
                return cached
        try:
            built = snapshot_frame(self.spark, snap, with_file=with_file)
        except spark_errors() as err:
            raise translate_spark_error(err, what="read table") from err
        with self._lock:
            self._frames[key] = built
            while len(self._frames) > _CACHE_SIZE:
                self._frames.popitem(last=False)
        return built

    # -- queries ----------------------------------------------------------------------

    def query(self, log: DeltaLog, sql: str) -> pa.Table:
        """Run Spark SQL over the snapshot (the table is the temporary view ``data``).

        Raises:
            QueryError: the SQL does not parse or analyse, or fails while running.
        """
        try:
            frame, _ = self.frame(log)
            spark = self.spark
            try:
                with _VIEW_LOCK:
                    frame.createOrReplaceTempView(VIEW)
                    result = spark.sql(sql)  # analysed now: the view is resolved here
                with quiet():
                    table = result.toArrow()
            except spark_errors() as err:
                raise translate_spark_error(err, what="query") from err
        except NotFound as err:
            if log.read_only:
                raise VersionError(
                    f"version {log.version} cannot be read: its data files were removed "
                    f"(VACUUM deletes the files of old versions): {err}"
                ) from err
            raise
        return _normalize(table, log.arrow_schema)

    # -- DML ----------------------------------------------------------------------------

    def _attempts(
        self, log: DeltaLog, what: str, fn: Callable[[int], _T], *, strict: bool = False
    ) -> _T:
        """Plan and commit with ``fn(attempt)`` until one commits, under the log's retry
        policy (:mod:`posixlake.delta._retry`): bounded, backed off, re-planned on the
        refreshed log."""
        return log.retry.run(what, fn, strict=strict, on_conflict=lambda _err: log.refresh())

    def _commit(
        self,
        log: DeltaLog,
        snap: Snapshot,
        spec: WriteSpec,
        written: Sequence[WrittenFile],
        removes: Sequence[DataFile],
        attempt: int,
        *,
        metadata: Mapping[str, Any],
        strict: bool = False,
        operation: str | None = None,
        reuse: bool = False,
    ) -> int | None:
        """Commit an attempt's files; on failure discard them (keep them with ``reuse``
        when the commit conflicts: an append's files stay valid for the next attempt)."""
        try:
            if self.before_commit is not None:
                self.before_commit(attempt)
            return commit_files(
                log,
                written,
                removes,
                snapshot=snap,
                metadata=metadata,
                strict=strict,
                operation=operation,
                physical_names=spec.physical is not None,
            )
        except CommitConflict:
            if not reuse:
                discard(spec)
            raise
        except BaseException:
            discard(spec)
            raise

    def _touched(
        self, log: DeltaLog, predicate: str, what: str
    ) -> tuple[Snapshot, dict[str, tuple[DataFile, int]]]:
        """Return the snapshot and, per file with matching rows, the file and the count."""
        from pyspark.sql import functions as F

        snap = self.snapshot(log)
        frame, resolve = self.frame(log, with_file=True)
        try:
            with quiet():
                rows = (
                    frame.where(F.coalesce(F.expr(predicate), F.lit(False)))
                    .groupBy(FILE_COL)
                    .count()
                    .collect()
                )
        except spark_errors() as err:
            raise translate_spark_error(err, what=what) from err
        touched: dict[str, tuple[DataFile, int]] = {}
        for r in rows:
            f = resolve(r[0])
            touched[f.path] = (f, int(r[1]))
        return snap, touched

    def _rewrite(
        self,
        log: DeltaLog,
        snap: Snapshot,
        files: Sequence[DataFile],
        transform: Callable[[Any], Any],
        what: str,
    ) -> tuple[WriteSpec, list[WrittenFile]]:
        """Rewrite ``files`` through ``transform`` (a DataFrame -> DataFrame) as new files."""
        spec = WriteSpec.new(log.uri, log.storage_options, snap.schema, snap.partition_columns)
        try:
            sub, _ = snapshot_frame(self.spark, snap, files=files)
            out = transform(sub)
        except spark_errors() as err:
            raise translate_spark_error(err, what=what) from err
        written = write_frame(out, spec, what=what)
        return spec, [w for w, _ in written]

    def _delta_rs_only(
        self, log: DeltaLog, *, rewrites: bool, physical_names: bool = False
    ) -> tuple[str, ...]:
        """Return the table features that only delta-rs' own writers honour (see
        :func:`posixlake.delta._features.file_commit_blockers`); deletion vectors count
        for rewrites (our removes cannot carry a deletion vector descriptor)."""
        with log.lock:
            schema_json = log.table.schema().to_json()
        found = file_commit_blockers(
            log.configuration, schema_json, rewrites=rewrites, physical_names=physical_names
        )
        if rewrites and any(f.deleted_rows for f in self.snapshot(log).files):
            found = (*found, "deletionVectors")
        return found

    def delete(
        self, log: DeltaLog, predicate: str | None, *, metadata: Mapping[str, Any]
    ) -> WriteOutcome:
        """Delete matching rows (copy-on-write of the touched files) in one commit.

        On tables whose features only delta-rs writes correctly (deletion vectors, column
        mapping, a change data feed...), delta-rs runs the DELETE (same result, one commit).
        """
        from pyspark.sql import functions as F

        features = self._delta_rs_only(log, rewrites=True)
        if features:
            logger.info("delete: delta-rs writes tables with %s", ", ".join(features))
            return LocalEngine().delete(log, predicate, metadata=metadata)
        pred = predicate if predicate is not None and predicate.strip() else "true"

        def attempt(n: int) -> WriteOutcome:
            snap, touched = self._touched(log, pred, "delete")
            if not touched:
                return WriteOutcome(0, None)
            files = [f for f, _ in touched.values()]
            keep = F.expr(f"NOT coalesce(({pred}), false)")
            spec, written = self._rewrite(log, snap, files, lambda df: df.where(keep), "delete")
            version = self._commit(
                log, snap, spec, written, files, n, metadata=metadata, operation="DELETE"
            )
            return WriteOutcome(sum(c for _, c in touched.values()), version)

        return self._attempts(log, "delete", attempt)

    def update(
        self,
        log: DeltaLog,
        predicate: str | None,
        updates: Mapping[str, str],
        *,
        metadata: Mapping[str, Any],
    ) -> WriteOutcome:
        """Set columns to SQL expressions on matching rows (copy-on-write) in one commit.

        On tables whose features only delta-rs writes correctly, delta-rs runs the UPDATE.
        """
        from pyspark.sql import functions as F

        features = self._delta_rs_only(log, rewrites=True)
        if features:
            logger.info("update: delta-rs writes tables with %s", ", ".join(features))
            return LocalEngine().update(log, predicate, updates, metadata=metadata)

        pred = predicate if predicate is not None and predicate.strip() else "true"
        sets = {_unquote(k): v for k, v in updates.items()}
        schema = log.arrow_schema
        unknown = [c for c in sets if c not in schema.names]
        if unknown:
            raise SchemaError(f"update: unknown column(s) {unknown}")

        self._check_expressions(log, pred, sets, schema)

        def transform(df: Any) -> Any:
            hit = F.coalesce(F.expr(pred), F.lit(False))
            cols = [
                F.when(hit, F.expr(sets[f.name]).cast(arrow_to_spark(f.type)))
                .otherwise(column(f.name))
                .alias(f.name)
                if f.name in sets
                else column(f.name)
                for f in schema
            ]
            return df.select(*cols)

        def attempt(n: int) -> WriteOutcome:
            snap, touched = self._touched(log, pred, "update")
            if not touched:
                return WriteOutcome(0, None)
            files = [f for f, _ in touched.values()]
            spec, written = self._rewrite(log, snap, files, transform, "update")
            version = self._commit(
                log, snap, spec, written, files, n, metadata=metadata, operation="UPDATE"
            )
            return WriteOutcome(sum(c for _, c in touched.values()), version)

        return self._attempts(log, "update", attempt)

    def _check_expressions(
        self, log: DeltaLog, predicate: str, sets: Mapping[str, str], schema: pa.Schema
    ) -> None:
        """Analyse the predicate and SET expressions; refuse text into number/boolean columns.

        Raises:
            QueryError: invalid SQL, or an expression whose type cannot be stored.
        """
        from pyspark.sql import functions as F
        from pyspark.sql import types as st

        frame, _ = self.frame(log)
        names = list(sets)
        try:
            analysed = frame.select(
                F.expr(predicate).alias("__p"),
                *[F.expr(sets[c]).alias(f"__e{i}") for i, c in enumerate(names)],
            ).schema
        except spark_errors() as err:
            raise translate_spark_error(err, what="update") from err
        for i, c in enumerate(names):
            got = analysed[f"__e{i}"].dataType
            want = schema.field(c).type
            text = isinstance(got, st.StringType | st.VarcharType | st.CharType)
            if text and (
                pa.types.is_integer(want)
                or pa.types.is_floating(want)
                or pa.types.is_decimal(want)
                or pa.types.is_boolean(want)
            ):
                raise QueryError(
                    f"update: column {c!r} is {want}, but {sets[c]!r} is text; cast it explicitly"
                )

    def merge(
        self, log: DeltaLog, source: pa.Table, key: Sequence[str], *, metadata: Mapping[str, Any]
    ) -> MergeOutcome:
        """Apply the ``_op`` rows of ``source`` by ``key`` (copy-on-write) in one commit.

        Same semantics as the local engine's MERGE: a matched UPDATE row sets the columns
        the source carries (where its ``SET_PREFIX`` mask, if any, is true), a matched
        DELETE row deletes, an unmatched INSERT row inserts; other rows do nothing.
        """
        from pyspark.sql import functions as F

        from posixlake._merge import OP_COLUMN, SET_PREFIX

        if source.num_rows == 0:
            return MergeOutcome(0, 0, 0, None)
        features = self._delta_rs_only(log, rewrites=True)
        if features:
            logger.info("merge: delta-rs writes tables with %s", ", ".join(features))
            return LocalEngine().merge(log, source, key, metadata=metadata)
        schema = log.arrow_schema
        data_cols = [
            c for c in source.column_names if c != OP_COLUMN and not c.startswith(SET_PREFIX)
        ]
        masks = {c[len(SET_PREFIX) :]: c for c in source.column_names if c.startswith(SET_PREFIX)}
        set_cols = [c for c in data_cols if c not in key]
        alias = {c: f"__posixlake_s{i}" for i, c in enumerate(source.column_names)}
        renamed = source.rename_columns([alias[c] for c in source.column_names])
        spark = self.spark
        try:
            with quiet():
                src = spark.createDataFrame(renamed, schema=arrow_schema_to_spark(renamed.schema))
        except spark_errors() as err:
            raise translate_spark_error(err, what="merge") from err
        op = F.col(alias[OP_COLUMN])
        matched_ops = ["UPDATE", "DELETE"] if set_cols else ["DELETE"]
        ud = src.where(op.isin(*matched_ops))
        ins = src.where(op == F.lit("INSERT"))
        cond = reduce(lambda a, b: a & b, [column(k) == F.col(alias[k]) for k in key])

        def rewrite(df: Any) -> Any:
            joined = df.join(F.broadcast(ud), cond, "left")
            joined = joined.where(op.isNull() | (op != F.lit("DELETE")))
            is_update = F.coalesce(op == F.lit("UPDATE"), F.lit(False))
            cols = []
            for f in schema:
                if f.name in set_cols:
                    setter = is_update
                    if f.name in masks:
                        setter = setter & F.coalesce(F.col(alias[masks[f.name]]), F.lit(False))
                    cols.append(
                        F.when(setter, F.col(alias[f.name])).otherwise(column(f.name)).alias(f.name)
                    )
                else:
                    cols.append(column(f.name))
            return joined.select(*cols)

        def inserts(target: Any) -> Any:
            keys = target.select(*[column(k) for k in key])
            fresh = ins.join(keys, cond, "left_anti")
            cols = [
                F.col(alias[f.name]).alias(f.name)
                if f.name in data_cols
                else F.lit(None).cast(arrow_to_spark(f.type)).alias(f.name)
                for f in schema
            ]
            return fresh.select(*cols)

        def attempt(n: int) -> MergeOutcome:
            snap = self.snapshot(log)
            target, resolve = self.frame(log, with_file=True)
            try:
                hits = (
                    target.join(F.broadcast(ud), cond, "inner")
                    .groupBy(F.col(FILE_COL), op.alias("op"))
                    .count()
                )
                new = (
                    inserts(target)
                    .groupBy()
                    .count()
                    .select(
                        F.lit(None).cast("string").alias(FILE_COL),
                        F.lit("INSERT").alias("op"),
                        "count",
                    )
                )
                with quiet():
                    rows = hits.unionByName(new).collect()
            except spark_errors() as err:
                raise translate_spark_error(err, what="merge") from err
            counts = {"INSERT": 0, "UPDATE": 0, "DELETE": 0}
            touched: dict[str, DataFile] = {}
            for file_value, kind, count in rows:
                counts[kind] += int(count)
                if file_value is not None:
                    f = resolve(file_value)
                    touched[f.path] = f
            if not any(counts.values()):
                return MergeOutcome(0, 0, 0, None)
            spec = WriteSpec.new(log.uri, log.storage_options, snap.schema, snap.partition_columns)
            try:
                parts = []
                if touched:
                    sub, _ = snapshot_frame(spark, snap, files=list(touched.values()))
                    parts.append(rewrite(sub))
                if counts["INSERT"]:
                    parts.append(inserts(target))
                out = reduce(lambda a, b: a.unionByName(b), parts)
            except spark_errors() as err:
                raise translate_spark_error(err, what="merge") from err
            written = [w for w, _ in write_frame(out, spec, what="merge")]
            version = self._commit(
                log,
                snap,
                spec,
                written,
                list(touched.values()),
                n,
                metadata=metadata,
                strict=bool(counts["INSERT"]),
                operation="MERGE",
            )
            return MergeOutcome(counts["INSERT"], counts["UPDATE"], counts["DELETE"], version)

        return self._attempts(log, "merge", attempt)

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


def _normalize(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """Return query results typed as the local engine returns them.

    Plain string/binary types, UTC timestamps, and the table's NOT NULL on result columns
    that are table columns (Spark reads every file column as nullable): a column named
    and typed like a NOT NULL table column, and without NULLs, is NOT NULL.
    """
    table = plain_types(table)
    fields = []
    changed = False
    for i, f in enumerate(table.schema):
        new = f
        if pa.types.is_timestamp(f.type) and f.type.tz is not None and f.type.tz != "UTC":
            new = f.with_type(pa.timestamp(f.type.unit, tz="UTC"))
        idx = schema.get_field_index(f.name)
        if (
            f.nullable
            and idx >= 0
            and not schema.field(idx).nullable
            and schema.field(idx).type == new.type
            and table.column(i).null_count == 0
        ):
            new = new.with_nullable(False)
        if new is not f:
            fields.append(new)
            changed = True
        else:
            fields.append(f)
    if not changed:
        return table
    return pa.Table.from_arrays(table.columns, schema=pa.schema(fields))
