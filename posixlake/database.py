"""DatabaseOps: the Python face of a posixlake table.

A facade: each method checks permission, converts the payload to Arrow, asks the engine
or the Delta log to do the work, and returns a typed result. Every write is one Delta
commit, and a write that changes nothing makes no commit.

The original project's method names are kept as thin aliases at the end of the class.

Decisions the test suite pins (tests/posixlake/):

- A bad payload, value, key or SQL raises its PosixLakeError (SerializationError,
  SchemaError, DuplicateKeyError, QueryError, NotFound, ...) and leaves the version and
  rows unchanged; the handle stays usable.
- ``insert`` of a primary key the table (or the batch) holds raises DuplicateKeyError;
  ``insert(..., upsert=True)`` and ``merge`` are the update paths. The key check is exact,
  across processes too: a keyed insert commits only on the version it checked, and after
  losing a race re-checks the files the winner added (``DeltaLog.append_checked``).
- ``merge``: UPDATE/DELETE of a missing key and INSERT of an existing key are counted in
  ``MergeMetrics.rows_skipped``; ``strict=True`` raises InvalidOperation instead and
  commits nothing. A merge on another key than the primary key must keep it unique.
- ``delete_rows_where`` / ``update`` that match nothing, an empty merge or insert, and an
  OPTIMIZE with nothing to do make no commit (and count no commit in ``get_metrics``).
- Buffered rows are validated when buffered, invisible until flushed, and flushed by
  ``flush``, at ``buffer_rows``, by ``close`` and on leaving a ``with`` block (also when
  the block raises). A flush that fails keeps them buffered.
- A table whose directory was removed raises NotFound on the next operation and is not
  recreated; time travel to a version whose files VACUUM removed raises VersionError.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, date, datetime
from decimal import Decimal
from types import TracebackType
from typing import Any, Concatenate, Final, Literal, NamedTuple, ParamSpec, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from posixlake import buffer as buffer_mod
from posixlake._authz import AllowAll, Authorizer, Permission
from posixlake._convert import conform, python_column, to_arrow
from posixlake._keys import KeyIndex, key_values
from posixlake._merge import (
    OP_COLUMN,
    check_primary_key_after,
    duplicate_keys,
    existing_mask,
    prepare_merge_source,
)
from posixlake._metrics import Counters, timed
from posixlake.backup import (
    DEFAULT_WORKERS,
    EPOCH_MS_THRESHOLD,
    BackupMetadata,
    Progress,
    RestoreResult,
    VerifyReport,
)
from posixlake.buffer import DEFAULT_BUFFER_ROWS, BufferedKeysTaken, WriteBuffer, parse_row
from posixlake.delta import DeltaLog, quote_ident
from posixlake.engines import Engine, resolve_engine
from posixlake.engines.local import expand_paths, format_of, source_paths
from posixlake.errors import (
    DeltaLakeError,
    DuplicateKeyError,
    InvalidOperation,
    IoError,
    NotFound,
    PosixLakeError,
    QueryError,
    SchemaError,
    SerializationError,
    TableExists,
    UnknownColumns,
    VersionError,
)
from posixlake.result import QueryResult
from posixlake.security import AuditEvent, TableAuthorizer, UserInfo
from posixlake.storage import StorageConfig, normalize_uri, storage_options_for
from posixlake.types import (
    DECLARED_TYPES_PROPERTY,
    CommitInfo,
    DataSkippingStats,
    Field,
    HealthStatus,
    MergeMetrics,
    Metrics,
    OptimizeResult,
    Schema,
    VacuumResult,
    check_declared,
    declared_types,
    delta_schema,
    parse_type,
    type_string,
)

__all__ = ["Credentials", "DatabaseOps", "Optimizer"]

logger = logging.getLogger(__name__)

PRIMARY_KEY_PROPERTY = "posixlake.primaryKey"
#: commit info key naming one flush (to tell whether an interrupted flush committed)
FLUSH_ID_KEY: Final = "posixlake.flushId"


class Credentials(NamedTuple):
    """A user name and password (a plain ``(username, password)`` tuple works too)."""

    username: str
    password: str


#: epoch numbers below this are seconds (before the year 5138), at or above milliseconds
_EPOCH_MS_FROM: Final = 10**11
StorageArg = StorageConfig | Mapping[str, str] | None
_T = TypeVar("_T")
_P = ParamSpec("_P")
_R = TypeVar("_R")


class Optimizer:
    """``db.optimize``: call it to compact, or use ``.compact()`` / ``.z_order(columns)``."""

    def __init__(self, db: DatabaseOps) -> None:
        self._db = db

    def __call__(
        self,
        *,
        target_size: int | None = None,
        partition_filters: list[tuple[str, str, Any]] | None = None,
    ) -> OptimizeResult:
        """Compact small files (bin-packing); see :meth:`compact`."""
        return self.compact(target_size=target_size, partition_filters=partition_filters)

    def compact(
        self,
        *,
        target_size: int | None = None,
        partition_filters: list[tuple[str, str, Any]] | None = None,
    ) -> OptimizeResult:
        """Rewrite small files into files of about ``target_size`` bytes, in one commit.

        Args:
            target_size: bytes per output file (delta-rs' default, 100 MiB, when None).
            partition_filters: limit to partitions, e.g. ``[("day", "=", "2024-01-01")]``.
        """
        db = self._db
        db._authorize("write", "optimize")
        with db._write("optimize"):
            metrics, version = db._log.compact(
                target_size=target_size, partition_filters=partition_filters
            )
        return _optimize_result(metrics, version)

    def z_order(
        self,
        columns: Sequence[str],
        *,
        target_size: int | None = None,
        partition_filters: list[tuple[str, str, Any]] | None = None,
    ) -> OptimizeResult:
        """Rewrite files clustered by a Z-order curve over ``columns`` (better data skipping).

        Raises:
            SchemaError: a column is not in the table.
        """
        db = self._db
        db._authorize("write", "zorder")
        cols = [columns] if isinstance(columns, str) else list(columns)
        if not cols:
            raise InvalidOperation("z-order needs at least one column")
        unknown = [c for c in cols if c not in db._log.arrow_schema.names]
        if unknown:
            raise UnknownColumns(f"z-order: unknown column(s) {unknown}")
        with db._write("zorder"):
            metrics, version = db._log.z_order(
                cols, target_size=target_size, partition_filters=partition_filters
            )
        return _optimize_result(metrics, version)


def _counted(
    method: Callable[Concatenate[DatabaseOps, _P], _R],
) -> Callable[Concatenate[DatabaseOps, _P], _R]:
    """Count a call that raises a PosixLakeError in ``get_metrics().errors`` (once)."""

    def wrapper(self: DatabaseOps, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(self, *args, **kwargs)
        except PosixLakeError as err:
            self._counters.failed(err)
            raise

    functools.update_wrapper(wrapper, method)
    return wrapper


def _optimize_result(metrics: Mapping[str, Any], version: int | None) -> OptimizeResult:
    return OptimizeResult(
        files_added=int(metrics.get("numFilesAdded", 0) or 0),
        files_removed=int(metrics.get("numFilesRemoved", 0) or 0),
        partitions_optimized=int(metrics.get("partitionsOptimized", 0) or 0),
        version=version,
    )


def _sql_literal(value: Any, column: str, field: pa.Field) -> str:
    """Render a Python value, checked against the column type, as a SQL literal.

    Raises:
        SchemaError: the value does not fit the column, or is NULL for a NOT NULL column.
        InvalidOperation: the column type has no literal form (nested types).
    """
    t = field.type
    if value is None:
        if not field.nullable:
            raise SchemaError(f"update: column {column!r} is NOT NULL and cannot be set to NULL")
        return "NULL"
    if pa.types.is_nested(t):
        raise InvalidOperation(
            f"update: column {column!r} of type {t} cannot be set to a literal; use expressions="
        )
    v = python_column(pa.field(column, t, True), [value])[0].as_py()
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, float):
        text = repr(v) if math.isfinite(v) else f"'{v}'"
        return f"CAST({text} AS {_sql_type(t)})"
    if isinstance(v, int):
        return f"CAST({v} AS {_sql_type(t)})"
    if isinstance(v, Decimal):
        return f"CAST('{v:f}' AS {_sql_type(t)})"
    if isinstance(v, datetime):
        return f"CAST('{v.isoformat()}' AS TIMESTAMP)"
    if isinstance(v, date):
        return f"CAST('{v.isoformat()}' AS DATE)"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    if isinstance(v, bytes):
        return f"X'{v.hex()}'"
    raise InvalidOperation(
        f"update: column {column!r} of type {t} cannot be set to a literal; use expressions="
    )


def _sql_type(t: pa.DataType) -> str:
    names = {
        pa.int8(): "TINYINT",
        pa.int16(): "SMALLINT",
        pa.int32(): "INT",
        pa.int64(): "BIGINT",
        pa.float32(): "FLOAT",
        pa.float64(): "DOUBLE",
    }
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision},{t.scale})"
    return names.get(t, "DOUBLE")


def _as_of(value: datetime | int | float | str) -> datetime:
    """Accept a datetime, epoch milliseconds (or seconds, as the original took) or ISO text.

    A number below 10**11 is read as seconds: as milliseconds it would be before 1973.
    """
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, bool):
        raise VersionError("as_of must be a datetime, epoch milliseconds or an ISO string")
    if isinstance(value, int | float):
        seconds = value if abs(value) < _EPOCH_MS_FROM else value / 1000
        try:
            return datetime.fromtimestamp(seconds, tz=UTC)
        except (OverflowError, OSError, ValueError) as err:
            raise VersionError(f"as_of: {value!r} is not a valid epoch time") from err
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError as err:
            raise VersionError(f"as_of: not an ISO timestamp: {value!r}") from err
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    raise VersionError(
        f"as_of must be a datetime, epoch milliseconds or an ISO string, not {type(value).__name__}"
    )


class DatabaseOps:
    """A posixlake table: Delta transactions through one object.

    Build one with :meth:`create`, :meth:`open`, :meth:`create_from_csv` or
    :meth:`create_from_parquet`. Safe to share between threads. Use it as a context
    manager (or call :meth:`close`) so buffered rows are flushed.
    """

    def __init__(
        self,
        log: DeltaLog,
        *,
        engine: Engine,
        authorizer: Authorizer | None = None,
        buffer_rows: int = DEFAULT_BUFFER_ROWS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = log
        self._engine = engine
        self._auth: Authorizer = authorizer or AllowAll()
        self._buffer = WriteBuffer(buffer_rows, clock=clock)
        self._clock = clock
        self._counters = Counters(clock)
        self._keys = KeyIndex()
        self._snapshots: OrderedDict[int, DeltaLog] = OrderedDict()
        self._snapshots_generation = log.generation
        self._closed = False
        self._tags = threading.local()
        self._original_key: list[str] = []
        self._unflushed_reported = False
        buffer_mod.track(self)

    @property
    def optimize(self) -> Optimizer:
        """OPTIMIZE: ``db.optimize()``, ``db.optimize.compact()``, ``db.optimize.z_order(cols)``."""
        return Optimizer(self)  # made per use: a stored one would keep ``self`` in a cycle

    # -- construction ----------------------------------------------------------------

    @classmethod
    def create(
        cls,
        path: str | os.PathLike[str],
        schema: Schema | pa.Schema | Mapping[str, Any] | Sequence[Any],
        *,
        storage: StorageArg = None,
        credentials: tuple[str, str] | None = None,
        engine: str | Engine | None = None,
        partition_by: Sequence[str] | None = None,
        primary_key: str | Sequence[str] | None = None,
        auth: bool = False,
        master: str | None = None,
        spark: Any = None,
        buffer_rows: int = DEFAULT_BUFFER_ROWS,
        name: str | None = None,
        create_bucket: bool | None = None,
        bootstrap: bool = False,
        change_data_feed: bool = False,
        column_mapping: Literal["name", "id"] | None = None,
    ) -> DatabaseOps:
        """Create an empty table.

        Args:
            path: a local path, ``s3://bucket/prefix``, ``az://container/prefix`` or ``abfs[s]://...``.
            schema: a :class:`Schema`, a pyarrow schema, ``{"col": "Type"}`` or a list of fields.
            storage: S3/Azure configuration or delta-rs storage options.
            credentials: ``(user, password)`` of the first admin when ``auth`` is true.
            engine: ``"spark"`` (default, or ``$POSIXLAKE_ENGINE``), ``"local"`` or an Engine.
            partition_by: partition columns.
            primary_key: overrides the schema's primary key; enforced on insert.
            auth: enable users and roles (see :mod:`posixlake.security`).
            master: Spark master URL for the Spark engine (``local[*]`` by default).
            spark: an existing SparkSession to use.
            buffer_rows: ``insert_buffered`` flushes automatically at this many rows.
            name: an optional table name stored in the Delta metadata.
            create_bucket: create a missing S3 bucket or Azure container (None: as the
                storage config's ``create_bucket`` / ``create_container`` says).
            bootstrap: with ``auth`` and neither ``credentials`` nor
                ``$POSIXLAKE_ADMIN_PASSWORD``, create the table without users; this
                handle then acts as the admin ``system`` until it is closed, to create
                them (the original project's ``create_with_auth`` flow).
            change_data_feed: record the change data feed (``delta.enableChangeDataFeed``),
                read with :meth:`changes`.
            column_mapping: ``"name"`` or ``"id"`` (``delta.columnMapping.mode``): data
                files use physical column names, so :meth:`rename_column` and
                :meth:`drop_columns` change only metadata. delta-rs does not optimize or
                evolve such tables (``UnsupportedTableFeature``).

        Raises:
            TableExists: (an AlreadyExists and a DeltaLakeError, as the original raised it)
                a Delta table exists at ``path``.
            BucketNotFound: (a NotFound) the bucket or container is missing.
            NetworkError: the storage endpoint cannot be reached.
            SchemaError: an invalid schema or key.
        """
        sch = Schema.coerce(schema)
        if primary_key is not None:
            sch = Schema(sch.fields, primary_key=primary_key)
        arrow = delta_schema(sch.to_arrow())
        for col in partition_by or ():
            if col not in arrow.names:
                raise SchemaError(f"partition column {col!r} is not in the schema")
        uri = normalize_uri(path)
        options = storage_options_for(uri, storage)
        _prepare_storage(uri, storage, create=True, create_bucket=create_bucket)
        if DeltaLog.exists(uri, options):
            raise TableExists(f"a Delta table already exists at {uri}")
        config = {PRIMARY_KEY_PROPERTY: ",".join(sch.key_columns)} if sch.key_columns else None
        declared = declared_types(sch.to_arrow())
        if declared:  # e.g. UInt8 stored as Int16: kept to report and enforce it
            config = {**(config or {}), DECLARED_TYPES_PROPERTY: json.dumps(declared)}
        bootstrap = (
            auth
            and bootstrap
            and credentials is None
            and not os.environ.get("POSIXLAKE_ADMIN_PASSWORD")
        )
        if auth:
            from posixlake import security

            if not bootstrap:  # checked before any write
                credentials = security.initial_admin(credentials)
            config = {**(config or {}), security.AUTH_PROPERTY: "true"}
        if change_data_feed:
            config = {**(config or {}), "delta.enableChangeDataFeed": "true"}
        if column_mapping is not None:
            if column_mapping not in ("name", "id"):
                raise InvalidOperation(
                    f"column_mapping must be 'name' or 'id', not {column_mapping!r}"
                )
            config = {**(config or {}), "delta.columnMapping.mode": column_mapping}
        eng = resolve_engine(engine, master=master, spark=spark)
        authorizer: Authorizer | None = None
        log = DeltaLog.create(
            uri,
            arrow,
            partition_by=partition_by,
            configuration=config,
            storage_options=options,
            name=name,
        )
        if auth:
            from posixlake import security

            authorizer = security.enable_auth(uri, options, credentials, bootstrap=bootstrap)
        return cls(log, engine=eng, authorizer=authorizer, buffer_rows=buffer_rows)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        storage: StorageArg = None,
        credentials: tuple[str, str] | None = None,
        engine: str | Engine | None = None,
        master: str | None = None,
        spark: Any = None,
        buffer_rows: int = DEFAULT_BUFFER_ROWS,
    ) -> DatabaseOps:
        """Open an existing table (its latest version).

        Raises:
            NotFound: no Delta table at ``path``.
            AuthenticationError: the table has users and ``credentials`` are missing or wrong.
        """
        uri = normalize_uri(path)
        options = storage_options_for(uri, storage)
        _prepare_storage(uri, storage, create=False)
        log = DeltaLog.open(uri, options)
        from posixlake import security

        authorizer = security.login(uri, options, credentials, configuration=log.configuration)
        eng = resolve_engine(engine, master=master, spark=spark)
        db = cls(log, engine=eng, authorizer=authorizer, buffer_rows=buffer_rows)
        if PRIMARY_KEY_PROPERTY not in log.configuration:
            from posixlake import _original
            from posixlake._objstore import open_store

            # a table of the original posixlake keeps its key in _metadata/schema.json
            db._original_key = _original.primary_key(
                open_store(uri, options), log.arrow_schema.names
            )
        db._replay_write_ahead()  # after the key is known: replayed rows are checked
        return db

    @classmethod
    def create_from_csv(
        cls,
        db_path: str | os.PathLike[str],
        csv_path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        *,
        primary_key: str | Sequence[str] | None = None,
        partition_by: Sequence[str] | None = None,
        **options: Any,
    ) -> DatabaseOps:
        """Create a table from CSV file(s), inferring column types over the whole input.

        Types are Int64, Float64, Boolean, Date, Timestamp or String; a later value that
        breaks a type widens it (Int64 -> Float64 -> String). Empty fields are NULL.

        Raises:
            NotFound: no such CSV file. SerializationError: malformed CSV.
            AlreadyExists: a table exists at ``db_path``.
        """
        return cls._create_from_files(
            db_path,
            expand_paths(csv_path, suffix=".csv"),
            "csv",
            primary_key,
            partition_by,
            options,
        )

    @classmethod
    def create_from_parquet(
        cls,
        db_path: str | os.PathLike[str],
        parquet_path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        *,
        primary_key: str | Sequence[str] | None = None,
        partition_by: Sequence[str] | None = None,
        **options: Any,
    ) -> DatabaseOps:
        """Create a table from a Parquet file, a directory of them or a glob.

        Raises:
            NotFound: nothing matches. SerializationError: unreadable Parquet.
        """
        return cls._create_from_files(
            db_path,
            expand_paths(parquet_path, suffix=".parquet"),
            "parquet",
            primary_key,
            partition_by,
            options,
        )

    @classmethod
    def _create_from_files(
        cls,
        db_path: str | os.PathLike[str],
        paths: list[str],
        fmt: Literal["csv", "parquet"],
        primary_key: str | Sequence[str] | None,
        partition_by: Sequence[str] | None,
        options: dict[str, Any],
    ) -> DatabaseOps:
        eng = resolve_engine(
            options.pop("engine", None), master=options.get("master"), spark=options.get("spark")
        )
        uri = normalize_uri(db_path)
        if DeltaLog.exists(uri, storage_options_for(uri, options.get("storage"))):
            raise TableExists(f"a Delta table already exists at {uri}")
        data = eng.read_files(paths, fmt=fmt, schema=None)
        if data is None:
            # the engine (Spark) writes the files itself: staged first, committed once the
            # table exists; any failure removes the staged files
            stage = getattr(eng, "stage_files", None)
            if stage is None:
                raise InvalidOperation(f"engine {eng.name} cannot create a table from files")
            staged = stage(
                paths,
                fmt=fmt,
                uri=uri,
                storage_options=storage_options_for(uri, options.get("storage")),
                partition_by=tuple(partition_by or ()),
            )
            try:
                arrow = delta_schema(staged.schema)
                keys = Schema.from_arrow(arrow, primary_key=primary_key).key_columns
                if keys:
                    arrow = pa.schema(
                        [f.with_nullable(False) if f.name in keys else f for f in arrow]
                    )
                    staged.check_keys(keys)
                db = cls.create(
                    uri,
                    arrow,
                    engine=eng,
                    primary_key=primary_key,
                    partition_by=partition_by,
                    **options,
                )
                operation = "CREATE FROM " + fmt.upper()
                with db._write(operation):
                    outcome = staged.commit(db._log, metadata=db._metadata(operation))
                db._counters.bump(inserts=1, rows_written=outcome.rows)
            except BaseException:
                staged.discard()
                raise
            return db
        arrow = delta_schema(data.schema)
        keys = Schema.from_arrow(arrow, primary_key=primary_key).key_columns
        if keys:
            arrow = pa.schema([f.with_nullable(False) if f.name in keys else f for f in arrow])
        data = conform(data, arrow)
        dups = duplicate_keys(data, keys) if keys else []
        if dups:
            raise SchemaError(f"primary key {keys} is not unique in the input: {dups[:5]}")
        db = cls.create(
            uri, arrow, engine=eng, primary_key=primary_key, partition_by=partition_by, **options
        )
        if data.num_rows:
            db._append(data, operation="CREATE FROM " + fmt.upper())
        return db

    # -- internals -------------------------------------------------------------------

    def _authorize(self, permission: Permission, operation: str) -> None:
        if self._closed:
            raise InvalidOperation(f"{operation}: the database is closed")
        self._auth.check(permission, operation)

    def _metadata(self, operation: str) -> dict[str, str]:
        meta = {"posixlake.operation": operation}
        if self._auth.user:
            meta["posixlake.user"] = self._auth.user
        meta.update(getattr(self._tags, "value", None) or {})
        return meta

    @contextmanager
    def commit_tags(self, tags: Mapping[str, str]) -> Iterator[None]:
        """Tag the commits this thread makes inside the block (``CommitInfo.tags``).

        The NFS server tags each commit of a staged write with its write id, so that after
        a crash it can tell whether the commit was made. Keys must start with
        ``posixlake.`` (they are stored in the commit's metadata).

        Raises:
            InvalidOperation: a key without the ``posixlake.`` prefix.
        """
        bad = [k for k in tags if not k.startswith("posixlake.")]
        if bad:
            raise InvalidOperation(f"commit tags must start with 'posixlake.': {bad}")
        previous = getattr(self._tags, "value", None)
        self._tags.value = {**(previous or {}), **tags}
        try:
            yield
        finally:
            self._tags.value = previous

    class _WriteScope:
        def __init__(self, db: DatabaseOps, operation: str) -> None:
            self.db, self.operation = db, operation

        def __enter__(self) -> None:
            self.db._log.lock.acquire()
            try:
                self.started = self.db._clock()
                self.before = self.db._log.refresh()
            except BaseException as err:
                self.db._counters.failed(err)
                self.db._log.lock.release()
                raise

        def __exit__(
            self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
        ) -> None:
            try:
                if e is not None:
                    self.db._counters.failed(e)
                elif self.db._log.version != self.before:
                    self.db._counters.commit(self.started)
            finally:
                self.db._log.lock.release()

    def _write(self, operation: str) -> DatabaseOps._WriteScope:
        return DatabaseOps._WriteScope(self, operation)

    @property
    def _schema(self) -> pa.Schema:
        return self._log.arrow_schema

    def _append(
        self,
        table: pa.Table,
        *,
        operation: str,
        upsert: bool = False,
        schema_mode: Literal["merge"] | None = None,
        app_transaction: tuple[str, int] | None = None,
        extra_metadata: Mapping[str, str] | None = None,
    ) -> int:
        """Append (or upsert) a conformed table in one commit; return the new version."""
        with self._write(operation):
            key = self.key_columns  # after the refresh: another handle may have set it
            if key and upsert:
                source = table.append_column(OP_COLUMN, pa.array(["INSERT"] * table.num_rows))
                exists = existing_mask(table, self._keys.get(self._log, key), key)
                source = source.set_column(
                    source.num_columns - 1, OP_COLUMN, pc.if_else(exists, "UPDATE", "INSERT")
                )
                dups = duplicate_keys(table, key)
                if dups:
                    raise InvalidOperation(f"upsert names key(s) {dups[:5]} more than once")
                outcome = self._engine.merge(
                    self._log,
                    source,
                    key,
                    metadata={**self._metadata(operation), **(extra_metadata or {})},
                )
                self._keys.invalidate()
                self._counters.bump(inserts=1, rows_written=table.num_rows)
                return outcome.version if outcome.version is not None else self._log.version
            if key:
                values = self._keys.check_new(self._log, table, key)
                version = self._log.append_checked(
                    table,
                    check=self._keys.conflict_check(self._log, key, values),
                    metadata={**self._metadata(operation), **(extra_metadata or {})},
                    schema_mode=schema_mode,
                    app_transaction=app_transaction,
                )
                self._keys.appended(version - 1, version, table, key)
            else:
                version = self._log.append(
                    table,
                    metadata={**self._metadata(operation), **(extra_metadata or {})},
                    schema_mode=schema_mode,
                    app_transaction=app_transaction,
                )
        self._counters.bump(inserts=1, rows_written=table.num_rows)
        return version

    def _snapshot(
        self, version: int | None, as_of: datetime | int | float | str | None
    ) -> DeltaLog:
        if version is not None and as_of is not None:
            raise InvalidOperation("give version or as_of, not both")
        if version is None and as_of is None:
            self._log.refresh()
            return self._log
        self._log.refresh()
        if self._snapshots_generation != self._log.generation:  # the table was replaced
            self._snapshots.clear()
            self._snapshots_generation = self._log.generation
        if version is not None:
            if isinstance(version, bool) or not isinstance(version, int):
                raise VersionError(f"version must be an int, not {type(version).__name__}")
            cached = self._snapshots.get(version)
            if cached is not None:
                self._snapshots.move_to_end(version)
                return cached
            snap = self._log.at(version)
            self._snapshots[version] = snap
            while len(self._snapshots) > 8:
                self._snapshots.popitem(last=False)
            return snap
        assert as_of is not None
        return self._log.at(_as_of(as_of))

    # -- writes ----------------------------------------------------------------------

    @_counted
    @timed("insert")
    def insert(
        self, data: Any, *, upsert: bool = False, schema_mode: Literal["merge"] | None = None
    ) -> int:
        """Insert rows in one commit; return how many rows were written.

        Args:
            data: a dict (one row, or a columnar dict of lists), a list of dicts, JSON text
                (object, array or JSON lines), CSV text with a header, a pyarrow Table or
                RecordBatch, a pandas or polars DataFrame, any ``__arrow_c_stream__`` object,
                the path of a CSV or Parquet file (a directory, or a list of them); with the
                Spark engine also a Spark DataFrame, and files are read by a Spark job.
            upsert: with a primary key, update rows whose key exists instead of failing.
            schema_mode: ``"merge"`` adds the columns of ``data`` the table lacks (nullable,
                typed from the data) in the same commit; older rows read NULL there.

        Raises:
            SerializationError: malformed JSON or CSV. SchemaError: unknown column, missing
                NOT NULL column, wrong type. DuplicateKeyError: a key exists (or repeats).
        """
        self._authorize("write", "insert")
        if schema_mode is not None:
            return self._insert_evolving(data, schema_mode=schema_mode, upsert=upsert)
        external = getattr(self._engine, "insert_external", None)
        # the engine tells what it takes (a Spark DataFrame has __arrow_c_stream__ too);
        # an upsert is a merge, and its rows go through Arrow
        if (
            external is not None
            and not upsert
            and getattr(self._engine, "accepts", lambda d: False)(data)
        ):
            with self._write("INSERT"):
                outcome = external(
                    self._log, data, key=self.key_columns, metadata=self._metadata("INSERT")
                )
            self._keys.invalidate()
            self._counters.bump(inserts=1, rows_written=outcome.rows)
            return int(outcome.rows)
        paths = source_paths(data)
        if paths is not None:  # CSV / Parquet files, on an engine that reads them for us
            fmt, files = format_of(paths)
            table = self._engine.read_files(files, fmt=fmt, schema=self._schema)
            if table is None:
                raise InvalidOperation(f"engine {self._engine.name} cannot read files")
        else:
            table = to_arrow(data, self._schema)
        if table.num_rows == 0:
            return 0
        check_declared(table, self._declared)
        self._append(table, operation="INSERT", upsert=upsert)
        return int(table.num_rows)

    def _insert_evolving(self, data: Any, *, schema_mode: str, upsert: bool) -> int:
        """Insert rows that may bring new columns (see :mod:`posixlake._evolve`)."""
        from posixlake._evolve import evolved_schema, new_fields

        if schema_mode != "merge":
            raise InvalidOperation(f"schema_mode must be 'merge' or None, not {schema_mode!r}")
        if upsert:
            raise InvalidOperation("insert: schema_mode='merge' and upsert=True do not combine")
        if source_paths(data) is not None or getattr(self._engine, "accepts", lambda d: False)(
            data
        ):
            raise InvalidOperation(
                "insert: schema_mode='merge' takes rows in memory (dicts, JSON, Arrow, pandas, "
                "polars); for files or a Spark DataFrame, add_columns first, then insert"
            )
        fresh = new_fields(data, self._schema)
        table = to_arrow(data, evolved_schema(self._schema, fresh))
        if table.num_rows == 0:
            return 0
        self._append(table, operation="INSERT", schema_mode="merge" if fresh else None)
        return int(table.num_rows)

    def add_columns(self, columns: Any) -> int:
        """Add nullable columns in one commit; existing rows read NULL there.

        Args:
            columns: ``{"name": "Type"}`` (our type strings), a list of :class:`Field`
                or pyarrow fields, or a pyarrow schema.

        Returns:
            The new table version.

        Raises:
            SchemaError: a column exists already, or an unknown type.
        """
        from posixlake._evolve import declared_fields

        self._authorize("admin", "add_columns")
        fields = declared_fields(columns)
        with self._write("ADD COLUMNS"):
            return self._log.add_columns(fields)

    def rename_column(self, old: str, new: str) -> int:
        """Rename a column in one metadata-only commit (column-mapped tables).

        Data files are not touched; older versions keep the old name.

        Returns:
            The new table version.

        Raises:
            InvalidOperation: the table has no column mapping (the Delta table feature
                ``columnMapping``), or ``old`` is a partition or primary-key column.
            NotFound: no column ``old``. SchemaError: ``new`` names another column.
        """
        from posixlake.delta._schema import rename_column

        self._authorize("admin", "rename_column")
        with self._write("RENAME COLUMN"):
            return rename_column(
                self._log,
                old,
                new,
                metadata=self._metadata("RENAME COLUMN"),
                guarded=self._guarded_columns(),
            )

    def drop_columns(self, names: str | Sequence[str]) -> int:
        """Drop columns in one metadata-only commit (column-mapped tables).

        Returns:
            The new table version.

        Raises:
            InvalidOperation: no column mapping, a partition or primary-key column, or
                every column named. NotFound: an unknown column.
        """
        from posixlake.delta._schema import drop_columns

        self._authorize("admin", "drop_columns")
        cols = [names] if isinstance(names, str) else list(names)
        with self._write("DROP COLUMNS"):
            return drop_columns(
                self._log,
                cols,
                metadata=self._metadata("DROP COLUMNS"),
                guarded=self._guarded_columns(),
            )

    def _guarded_columns(self) -> dict[str, str]:
        """Return the columns table properties name, each with what names it."""
        out = {c: "named in posixlake.declaredTypes" for c in self._declared}
        out.update({c: "in the primary key" for c in self.key_columns})
        return out

    def changes(self, start_version: int, end_version: int | None = None) -> QueryResult:
        """Return the change data feed from ``start_version`` to ``end_version`` (inclusive).

        Rows carry the table columns plus ``_change_type`` (``insert``, ``delete``,
        ``update_preimage``, ``update_postimage``), ``_commit_version`` and
        ``_commit_timestamp``.

        Raises:
            InvalidOperation: the table does not record changes.
            VersionError: a version out of range.
        """
        self._authorize("read", "changes")
        self._log.refresh()
        return QueryResult(self._log.changes(start_version, end_version))

    def insert_buffered(self, data: Any, *, durable: bool = False) -> int:
        """Validate rows and buffer them; flush in one commit at ``buffer_rows`` rows.

        Buffered rows are not visible to queries until they are flushed (by :meth:`flush`,
        by reaching ``buffer_rows``, by :meth:`close`, by leaving a ``with`` block, at
        interpreter exit or when the handle is garbage collected).

        Args:
            data: as :meth:`insert`; one dict row or the JSON text of one object is the
                fast path (parsed now, converted with the other rows at flush).
            durable: also append the rows to a local write-ahead file, fsynced before
                this returns, so that they survive a crash: the next :meth:`open` of the
                table commits them (exactly once). From the first durable call until
                the next flush, the whole buffer is written ahead.

        Returns:
            How many rows were accepted. Bad rows raise here and are not buffered.

        Raises:
            SerializationError / SchemaError: as :meth:`insert`.
            DuplicateKeyError: a key the table holds, or one already in the buffer.
            IoError: ``durable`` and the write-ahead file cannot be written.
        """
        self._authorize("write", "insert_buffered")
        buffer_mod.arm_sigterm()
        schema = self._schema
        key = self.key_columns
        row = parse_row(data, schema)
        with self._log.lock:
            if durable and self._buffer.wal is None:
                self._start_write_ahead()
            wal = self._buffer.wal
            if row is not None:
                key_value = None
                if key:
                    key_value = row[key[0]] if len(key) == 1 else tuple(row[k] for k in key)
                    self._keys.check_values(self._log, [key_value], key, self._buffer.keys)
                if wal is not None:
                    wal.append(to_arrow([row], schema))
                full = self._buffer.add_row(row, key=key_value)
                accepted = 1
            else:
                table = to_arrow(data, schema)
                values: list[Any] = []
                if key and table.num_rows:
                    values = self._keys.check_new(self._log, table, key, self._buffer.keys)
                if wal is not None and table.num_rows:
                    wal.append(table)
                full = self._buffer.add(table, keys=values)
                accepted = table.num_rows
        if full:
            self.flush()
        return accepted

    @timed("flush")
    def flush(self) -> int:
        """Commit buffered rows (one commit); return how many rows were written.

        Raises:
            BufferedKeysTaken: (a DuplicateKeyError) another writer committed buffered
                keys meanwhile: those rows leave the buffer (``err.rejected``), the
                others stay buffered for the next flush.
            PosixLakeError: any other commit error leaves every row buffered.
        """
        if self._buffer.rows:
            self._authorize("write", "flush")
        with self._log.lock:
            taken = self._buffer.take(lambda rows: to_arrow(rows, self._schema))
            if taken is None:
                return 0
            table, keys = taken
            wal = self._buffer.wal
            before, flush_id = self._log.version, uuid.uuid4().hex
            try:
                self._append(
                    table,
                    operation="INSERT BUFFERED",
                    app_transaction=(wal.app_id, wal.version) if wal is not None else None,
                    extra_metadata={FLUSH_ID_KEY: flush_id},
                )
            except DuplicateKeyError as err:
                self._reject_taken(table, keys, err)
            except PosixLakeError:
                self._buffer.put_back(table, keys)
                raise
            except BaseException:
                # interrupted (SIGTERM's SystemExit, KeyboardInterrupt): the rows stay
                # buffered, for the exit flush, unless the commit happened
                if not self._flush_landed(before, flush_id):
                    self._buffer.put_back(table, keys)
                raise
            if wal is not None:
                wal.discard()
                self._buffer.wal = None
        if not self._buffer.rows:
            buffer_mod.disarm_sigterm_if_idle()
        return int(table.num_rows)

    def _reject_taken(self, table: pa.Table, keys: set[Any], err: DuplicateKeyError) -> None:
        """Split a flush that hit taken keys: keep the free rows buffered, raise for the rest."""
        key = self.key_columns
        ok, rejected = (
            (table, table.slice(0, 0)) if not key else self._keys.split_taken(self._log, table, key)
        )
        if not rejected.num_rows:
            self._buffer.put_back(table, keys)
            raise err
        if ok.num_rows:
            self._buffer.put_back(ok, key_values(ok, key))
        if self._buffer.wal is not None:
            self._buffer.wal.rewrite(ok)
        taken = key_values(rejected, key)
        raise BufferedKeysTaken(
            f"{rejected.num_rows} buffered row(s) have keys another writer committed first "
            f"({taken[:5]}): they left the buffer (see err.rejected); the other "
            f"{ok.num_rows} stay buffered",
            rejected,
        ) from err

    def _flush_landed(self, before: int, flush_id: str) -> bool:
        """Return whether the flush tagged ``flush_id`` committed after version ``before``."""
        try:
            self._log.refresh()
            return self._log.committed_with(FLUSH_ID_KEY, flush_id, after=before)
        except PosixLakeError as err:
            logger.error("cannot tell whether an interrupted flush committed: %s", err)
            return False  # keep the rows: a keyed table refuses them a second time

    def _start_write_ahead(self) -> None:
        """Take a write-ahead slot and write the rows already buffered to it."""
        from posixlake._wal import WriteAheadFile, wal_dir

        self._log.refresh()
        wal = WriteAheadFile(
            wal_dir(self._log.uri, self._log.storage_options),
            table_id=self._log.table_id,
            next_version=lambda app_id: (self._log.transaction_version(app_id) or 0) + 1,
        )
        pending = self._buffer.peek(lambda rows: to_arrow(rows, self._schema))
        if pending is not None and pending.num_rows:
            wal.append(pending)
        self._buffer.wal = wal

    def _replay_write_ahead(self) -> None:
        """Commit rows that a process which died left in write-ahead files (exactly once)."""
        from posixlake._wal import recover, wal_dir

        for rec in recover(wal_dir(self._log.uri, self._log.storage_options)):
            done = False
            try:
                if rec.rows is None or rec.app_id is None:
                    done = True  # nothing was acknowledged
                elif (self._log.transaction_version(rec.app_id) or 0) >= rec.version:
                    done = True  # committed before the crash
                elif rec.table_id not in (None, self._log.table_id):
                    logger.error(
                        "write-ahead file %s belongs to another table (id %s, this is %s): "
                        "kept, not replayed",
                        rec.path,
                        rec.table_id,
                        self._log.table_id,
                    )
                else:
                    self._auth.check("write", "replay buffered rows")
                    self._replay_rows(rec.rows, (rec.app_id, rec.version), rec.keep_rejected)
                    done = True
                    logger.warning(
                        "committed %d buffered row(s) that a crashed process left in %s",
                        rec.rows.num_rows,
                        rec.path,
                    )
            except PosixLakeError as err:
                logger.error("cannot replay write-ahead file %s (kept): %s", rec.path, err)
            finally:
                rec.release(done=done)

    def _replay_rows(
        self, rows: pa.Table, txn: tuple[str, int], keep: Callable[[pa.Table], str]
    ) -> None:
        key = self.key_columns
        try:
            self._append(rows, operation="INSERT BUFFERED", app_transaction=txn)
        except DuplicateKeyError:
            if not key:
                raise
            ok, rejected = self._keys.split_taken(self._log, rows, key)
            if ok.num_rows:
                self._append(ok, operation="INSERT BUFFERED", app_transaction=txn)
            where = keep(rejected)
            logger.error(
                "%d replayed buffered row(s) have keys committed meanwhile; saved in %s",
                rejected.num_rows,
                where,
            )

    @property
    def buffered_rows(self) -> int:
        """Rows waiting in the insert buffer."""
        return self._buffer.rows

    @_counted
    @timed("merge")
    def merge(
        self, rows: Any, key: str | Sequence[str] | None = None, *, strict: bool = False
    ) -> MergeMetrics:
        """Apply INSERT / UPDATE / DELETE rows (each with ``_op``) in ONE commit.

        Rows are matched on ``key`` (the primary key by default). DELETE rows need only
        the key. UPDATE rows set the columns the input carries; others keep their values.
        An UPDATE or DELETE of a missing key, or an INSERT of an existing key, is counted
        in ``rows_skipped`` (with ``strict=True`` it raises and nothing is committed).

        Raises:
            InvalidOperation: no key; a key twice in the input; skipped rows with ``strict``.
            SerializationError / SchemaError: malformed or mistyped rows.
        """
        self._authorize("write", "merge")
        if not key:
            self._log.refresh()  # the primary key another handle set counts
        key_cols = _columns_arg(key, "merge key") if key else self.key_columns
        if not key_cols:
            raise InvalidOperation("merge needs a key: pass key= or set a primary key")
        source = prepare_merge_source(rows, self._schema, key_cols)
        check_declared(source.table, self._declared)
        n_total = source.table.num_rows
        if source.count("DELETE"):
            self._authorize("delete", "merge")
        if n_total == 0:
            return MergeMetrics(0, 0, 0, 0, None)
        with self._write("MERGE"):
            exists = existing_mask(source.table, self._keys.get(self._log, key_cols), key_cols)
            op = source.table[OP_COLUMN]
            applies = pc.if_else(pc.equal(op, "INSERT"), pc.invert(exists), exists)
            skipped = n_total - int(pc.sum(applies).as_py() or 0)
            if skipped and strict:
                bad = (
                    source.table.filter(pc.invert(applies))
                    .select([*key_cols, OP_COLUMN])
                    .to_pylist()[:5]
                )
                raise InvalidOperation(
                    f"merge: {skipped} row(s) do not apply (missing or existing keys): {bad}"
                )
            todo = source.table.filter(applies)
            if todo.num_rows == 0:
                return MergeMetrics(0, 0, 0, skipped, None)
            pk = self.key_columns
            if pk and list(pk) != list(key_cols):
                check_primary_key_after(
                    self._log.read_columns(list(dict.fromkeys([*key_cols, *pk]))),
                    todo,
                    key_cols,
                    pk,
                )
            before = self._log.version
            outcome = self._engine.merge(
                self._log, todo, key_cols, metadata=self._metadata("MERGE")
            )
            todo_op = todo[OP_COLUMN]
            self._keys.merged(
                before,
                outcome.version,
                todo.filter(pc.equal(todo_op, "DELETE")).select(key_cols),
                todo.filter(pc.equal(todo_op, "INSERT")).select(key_cols),
                key_cols,
            )
        applied = outcome.inserted + outcome.updated + outcome.deleted
        self._counters.bump(
            merges=1, rows_written=outcome.inserted + outcome.updated, rows_deleted=outcome.deleted
        )
        return MergeMetrics(
            outcome.inserted, outcome.updated, outcome.deleted, n_total - applied, outcome.version
        )

    @_counted
    @timed("delete")
    def delete_rows_where(self, predicate: str) -> int:
        """Delete the rows matching a SQL predicate in one commit; return how many.

        No commit is made when nothing matches.

        Raises:
            QueryError: the predicate is empty or invalid.
        """
        self._authorize("delete", "delete")
        if not isinstance(predicate, str) or not predicate.strip():
            raise QueryError(
                "delete needs a SQL predicate, e.g. \"id = 3\" (use 'true' for all rows)"
            )
        with self._write("DELETE"):
            outcome = self._engine.delete(self._log, predicate, metadata=self._metadata("DELETE"))
            if outcome.version is not None:
                self._keys.invalidate()
        self._counters.bump(deletes=1, rows_deleted=outcome.rows)
        return outcome.rows

    @_counted
    def truncate(self) -> int:
        """Delete every row in one commit, whatever the engine; return how many.

        Nothing is rewritten: the commit removes every data file (delta-rs, no Spark
        job). No commit is made when the table is already empty.
        """
        self._authorize("delete", "truncate")
        with self._write("TRUNCATE"):
            rows, version = self._log.delete(None, metadata=self._metadata("TRUNCATE"))
            if version is not None:
                self._keys.invalidate()
        self._counters.bump(deletes=1, rows_deleted=rows)
        return rows

    @_counted
    @timed("update")
    def update(
        self,
        predicate: str | None,
        values: Mapping[str, Any] | str | None = None,
        *,
        expressions: Mapping[str, str] | None = None,
    ) -> int:
        """Set columns on the rows matching ``predicate`` (all rows with None), in one commit.

        Args:
            predicate: SQL predicate, or None for every row.
            values: column -> Python value (type-checked against the column), or the
                same as JSON object text.
            expressions: column -> SQL expression (e.g. ``{"qty": "qty + 1"}``).

        Returns:
            How many rows were updated (no commit when none).

        Raises:
            SchemaError: unknown column or a value of the wrong type.
            InvalidOperation: an update of a primary-key column.
            SerializationError: ``values`` is not a mapping (or malformed JSON object text).
            QueryError: an invalid predicate or expression.
        """
        self._authorize("write", "update")
        if predicate is not None and (not isinstance(predicate, str) or not predicate.strip()):
            raise QueryError("update: the predicate must be SQL text, or None for every row")
        values = _mapping_arg(values, "values")
        expressions = _mapping_arg(expressions, "expressions")
        for col, expr in expressions.items():
            if not isinstance(expr, str) or not expr.strip():
                raise QueryError(f"update: the expression for {col!r} must be SQL text")
        schema = self._schema
        sets: dict[str, str] = {}
        for col, value in (values or {}).items():
            if col not in schema.names:
                raise SchemaError(f"update: unknown column {col!r}")
            sets[quote_ident(col)] = _sql_literal(value, col, schema.field(col))
        for col, expr in (expressions or {}).items():
            if col not in schema.names:
                raise SchemaError(f"update: unknown column {col!r}")
            sets[quote_ident(col)] = expr
        if not sets:
            raise InvalidOperation("update needs values or expressions")
        key = self.key_columns
        touched = set(values or {}) | set(expressions or {})
        if key and touched & set(key):
            raise InvalidOperation(
                f"update cannot change primary key column(s) {sorted(touched & set(key))}; use merge"
            )
        with self._write("UPDATE"):
            outcome = self._engine.update(
                self._log, predicate, sets, metadata=self._metadata("UPDATE")
            )
        self._counters.bump(updates=1, rows_written=outcome.rows)
        return outcome.rows

    # -- replacing exact rows (a multiset diff; used by the NFS face's overwrites) --------

    @_counted
    def replace_rows(
        self,
        *,
        delete: Any,
        insert: Any,
        key: str | Sequence[str] | None = None,
        require_present: bool = False,
    ) -> tuple[int, int]:
        """Delete the rows ``delete`` names and insert ``insert``, in ONE commit (delta-rs).

        Without ``key``, rows are whole rows compared on every column (NULL equals NULL)
        and each row of ``delete`` removes one occurrence. With ``key``, a row of
        ``delete`` removes the row with its key (an update is a delete plus an insert).
        A row to delete that is not in the table is skipped, unless ``require_present``
        (whole rows only): then the write fails with ConcurrentChange, committing nothing.
        No commit when nothing changes. Rows in memory are committed directly, whatever
        the engine.

        Returns:
            (rows deleted, rows inserted)

        Raises:
            SerializationError / SchemaError: malformed or mistyped rows.
            DuplicateKeyError: with a primary key, an inserted key repeats or stays taken.
            ConcurrentChange: ``require_present`` and a row to delete is gone.
        """
        from posixlake.delta import replace_rows

        self._authorize("write", "replace_rows")
        dele, ins = to_arrow(delete, self._schema), to_arrow(insert, self._schema)
        check_declared(ins, self._declared)
        if dele.num_rows:
            self._authorize("delete", "replace_rows")
        if dele.num_rows == 0 and ins.num_rows == 0:
            return 0, 0
        match = [key] if isinstance(key, str) else list(key or [])
        for k in match:
            if k not in self._schema.names:
                raise SchemaError(f"replace_rows: key column {k!r} is not in the table")
        pk = self.key_columns
        with self._write("REPLACE ROWS"):
            if pk and ins.num_rows:
                dups = duplicate_keys(ins, pk)
                freed = existing_mask(ins, dele.select(pk), pk)
                taken = pc.and_(
                    existing_mask(ins, self._keys.get(self._log, pk), pk), pc.invert(freed)
                )
                if dups or pc.any(taken).as_py():
                    raise DuplicateKeyError(
                        f"replace_rows: inserted keys repeat or exist: {dups[:5]}"
                    )
            done = replace_rows(
                self._log,
                delete=dele,
                insert=ins,
                key=match or None,
                metadata=self._metadata("REPLACE ROWS"),
                require_present=require_present,
            )
            self._keys.invalidate()
        self._counters.bump(rows_written=done.inserted, rows_deleted=done.deleted)
        return done.deleted, done.inserted

    # -- reads -----------------------------------------------------------------------

    @_counted
    @timed("query")
    def query(
        self,
        sql: str,
        *,
        version: int | None = None,
        as_of: datetime | int | float | str | None = None,
    ) -> QueryResult:
        """Run SQL over the table (named ``data``), now or at a past version or time.

        Args:
            sql: the query, e.g. ``"SELECT name, count(*) FROM data GROUP BY name"``.
            version: a table version for time travel.
            as_of: a datetime, epoch milliseconds or ISO string for time travel.

        Raises:
            QueryError: invalid SQL. VersionError: no such version or time.
        """
        self._authorize("read", "query")
        if not isinstance(sql, str) or not sql.strip():
            raise QueryError("query needs SQL text")
        started = self._clock()
        with self._log.lock:
            snap = self._snapshot(version, as_of)
            table = self._engine.query(snap, sql)
        self._counters.query(started)
        return QueryResult(table)

    @_counted
    def to_arrow(
        self, *, version: int | None = None, as_of: datetime | int | float | str | None = None
    ) -> pa.Table:
        """Return every row of the table (now, or at a version or time) as Arrow."""
        self._authorize("read", "read")
        with self._log.lock:
            snap = self._snapshot(version, as_of)
            return snap.read_columns(None)

    @_counted
    def history(self, limit: int | None = None) -> list[CommitInfo]:
        """Return the commits, newest first."""
        self._authorize("read", "history")
        self._log.refresh()
        return self._log.history(limit)

    @property
    def version(self) -> int:
        """The latest version (catching up with other writers)."""
        return self._log.refresh()

    @property
    def commit_timeout(self) -> float:
        """Seconds a write keeps re-planning and retrying on commit conflicts.

        Defaults to ``$POSIXLAKE_COMMIT_TIMEOUT`` or 120; past it the write raises
        CommitConflict (counted as ``commits_given_up`` in :meth:`get_metrics`).
        """
        return self._log.commit_timeout

    @commit_timeout.setter
    def commit_timeout(self, seconds: float) -> None:
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds > 0:
            raise InvalidOperation(f"commit_timeout must be a positive number, not {seconds!r}")
        self._log.commit_timeout = float(seconds)

    @property
    def table_id(self) -> str:
        """The Delta ``metaData`` id of the table this handle has loaded.

        A restore onto the table's path makes a new table with a new id; the handle
        notices at its next operation, reloads, and :attr:`generation` grows.
        """
        return self._log.table_id

    @property
    def generation(self) -> int:
        """How many times this handle found its table replaced and reloaded it (from 0)."""
        return self._log.generation

    @property
    def uri(self) -> str:
        """Where the table lives."""
        return self._log.uri

    @property
    def storage_options(self) -> dict[str, str] | None:
        """The delta-rs storage options in use."""
        return self._log.storage_options

    @property
    def engine(self) -> Engine:
        """The compute engine."""
        return self._engine

    @property
    def user(self) -> str | None:
        """The authenticated user (None without auth)."""
        return self._auth.user

    @property
    def authorizer(self) -> Authorizer:
        """The permission checker in use."""
        return self._auth

    def commit_time(self, version: int) -> datetime:
        """Return when ``version`` was committed."""
        return self._log.commit_time(version)

    @property
    def _declared(self) -> dict[str, str]:
        """Declared types of the columns Delta stores as another type (e.g. UInt8)."""
        text = self._log.configuration.get(DECLARED_TYPES_PROPERTY)
        if not text:
            return {}
        try:
            value = json.loads(text)
        except ValueError:
            logger.warning("ignoring a malformed %s property", DECLARED_TYPES_PROPERTY)
            return {}
        return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}

    @property
    def schema(self) -> Schema:
        """The table schema as declared: type strings such as ``Int64``, ``UInt8``,
        ``Decimal128(10,2)``, ``List<String>`` (and the primary key)."""
        declared = self._declared
        fields = [
            Field(f.name, declared.get(f.name) or _type_text(f.type), f.nullable)
            for f in self._schema
        ]
        return Schema(fields, primary_key=self.primary_key())

    def get_schema(self) -> Schema:
        """Return the table schema."""
        self._authorize("read", "get_schema")
        return self.schema

    @property
    def key_columns(self) -> list[str]:
        """The primary-key columns as a list (empty when the table has none)."""
        value = self._log.configuration.get(PRIMARY_KEY_PROPERTY)
        if value is None:  # never set here: the original posixlake's key, if any
            return list(self._original_key)
        return [c for c in value.split(",") if c]

    def primary_key(self) -> str | list[str] | None:
        """Return the primary key: its column, a list of columns if composite, or None.

        The original project's shape (``'id'`` / ``None``); :attr:`key_columns` is
        always a list.
        """
        cols = self.key_columns
        if not cols:
            return None
        return cols[0] if len(cols) == 1 else cols

    @_counted
    def set_primary_key(self, column_name: str | Sequence[str] | None) -> None:
        """Set (or with None/empty, remove) the primary key; existing rows must be unique.

        Args:
            column_name: a column, ``"a, b"`` or a list of columns for a composite key.

        Raises:
            SchemaError: unknown column. InvalidOperation: existing duplicates or NULL keys.
        """
        self._authorize("admin", "set_primary_key")
        cols = _columns_arg(column_name, "primary key") if column_name else []
        for c in cols:
            if c not in self._schema.names:
                raise SchemaError(f"primary key column {c!r} is not in the table")
        with self._write("SET PRIMARY KEY"):
            if cols:
                current = self._log.read_columns(cols)
                for c in cols:
                    if current[c].null_count:
                        raise InvalidOperation(
                            f"column {c!r} has NULLs: it cannot be part of a primary key"
                        )
                dups = duplicate_keys(current, cols)
                if dups:
                    raise InvalidOperation(f"existing rows repeat key(s) {dups[:5]}")
            self._log.set_configuration({PRIMARY_KEY_PROPERTY: ",".join(cols)})
            self._keys.invalidate()

    @_counted
    def vacuum(
        self,
        retention_hours: int | None = None,
        *,
        dry_run: bool = False,
        enforce_retention_duration: bool = False,
    ) -> VacuumResult:
        """Delete data files that no version within the retention needs.

        An explicit ``retention_hours`` is the caller's decision, as in the original
        project: one below the table's ``delta.deletedFileRetentionDuration`` (168 hours
        by default) is honoured, with a warning in the log, because it can break time
        travel and readers still using old versions.

        Args:
            retention_hours: keep files needed by versions newer than this (the table's
                retention when None).
            dry_run: only list the files.
            enforce_retention_duration: refuse retentions shorter than the table's
                (delta-rs' guard).

        Raises:
            InvalidOperation: a negative or non-integer retention, or one below the
                table's with ``enforce_retention_duration``.
        """
        self._authorize("admin", "vacuum")
        if retention_hours is not None and (
            isinstance(retention_hours, bool)
            or not isinstance(retention_hours, int)
            or retention_hours < 0
        ):
            raise InvalidOperation("retention_hours must be a non-negative integer")
        table_hours = self._log.retention_hours
        if (
            retention_hours is not None
            and retention_hours < table_hours
            and not enforce_retention_duration
        ):
            logger.warning(
                "vacuum of %s with a retention of %d hours, below the table's %g: files "
                "that older versions and running readers may need are deleted",
                self._log.uri,
                retention_hours,
                table_hours,
            )
        with self._write("VACUUM"):
            files = self._log.vacuum(
                retention_hours,
                dry_run=dry_run,
                enforce_retention_duration=enforce_retention_duration,
            )
        return VacuumResult(tuple(files), dry_run)

    def zorder(self, columns: Sequence[str], *, target_size: int | None = None) -> OptimizeResult:
        """Z-order the table by ``columns`` (same as ``db.optimize.z_order``)."""
        return self.optimize.z_order(columns, target_size=target_size)

    @_counted
    def get_data_skipping_stats(self, predicate: str | None = None) -> DataSkippingStats:
        """Count active files, and those a predicate lets a scan skip by min/max statistics.

        Raises:
            QueryError: the predicate cannot be parsed.
        """
        self._authorize("read", "get_data_skipping_stats")
        from posixlake._skipping import skipping_stats

        self._log.refresh()
        return skipping_stats(self._log.add_actions(), self._schema, predicate)

    def get_metrics(self) -> Metrics:
        """Return operation counters since this object was opened."""
        self._authorize("read", "get_metrics")
        return self._counters.snapshot(
            self._log.contention,
            buffered_rows=self._buffer.rows,
            table_reloads=self._log.generation,
        )

    @timed("health")
    def health_check(self) -> HealthStatus:
        """Check that the table can be read; count only ACTIVE files and their bytes."""
        self._authorize("read", "health_check")
        try:
            version = self._log.refresh()
            from posixlake.backup import restore_in_progress

            if restore_in_progress(self._log.uri, self._log.storage_options):
                raise DeltaLakeError("a restore into this location has not finished")
            actions = self._log.add_actions()
            rows = actions["num_records"] if "num_records" in actions.column_names else None
            return HealthStatus(
                status="healthy",
                version=version,
                active_files=actions.num_rows,
                active_bytes=int(pc.sum(actions["size_bytes"]).as_py() or 0),
                rows=int(pc.sum(rows).as_py() or 0) if rows is not None else 0,
                location=self._log.uri,
                uptime_seconds=self._clock() - self._counters.started,
            )
        except PosixLakeError as err:
            return HealthStatus(
                "unhealthy",
                -1,
                0,
                0,
                0,
                self._log.uri,
                message=str(err),
                uptime_seconds=self._clock() - self._counters.started,
            )

    # -- users and roles (posixlake.security) -----------------------------------------

    @_counted
    def create_user(
        self,
        username: str,
        password: str,
        roles: str | Sequence[str] = ("read",),
        *,
        permissions: str | Sequence[str] = (),
        role: str | None = None,
        min_length: int = 0,
    ) -> UserInfo:
        """Add a user with roles (``admin``, ``read``, ``write``) and single permissions.

        A password under 8 characters is accepted with a warning (as the original
        project accepted it); ``min_length=8`` refuses it (the CLI's policy).

        Raises:
            PermissionDenied: not an admin. AlreadyExists: the name is taken.
            InvalidOperation: a bad name or role, an empty password or one under
                ``min_length`` characters, a table without auth.
        """
        self._authorize("admin", "create_user")
        if role is not None:  # the original's create_user(name, password, role="admin")
            roles = [role]
        return self._users("create_user").create_user(
            username, password, roles, permissions=permissions, min_length=min_length
        )

    @_counted
    def delete_user(self, name: str) -> None:
        """Remove a user (not yourself, not the last admin).

        Raises:
            PermissionDenied: not an admin. NotFound: no such user.
        """
        self._authorize("admin", "delete_user")
        self._users("delete_user").delete_user(name)

    @_counted
    def set_roles(
        self, name: str, roles: str | Sequence[str], *, permissions: str | Sequence[str] = ()
    ) -> UserInfo:
        """Replace a user's roles and single permissions (the last admin stays admin)."""
        self._authorize("admin", "set_roles")
        return self._users("set_roles").set_roles(name, roles, permissions=permissions)

    @_counted
    def change_password(
        self,
        name: str,
        new_password: str,
        *,
        old_password: str | None = None,
        min_length: int = 0,
    ) -> None:
        """Set a user's password: your own with ``old_password``, anyone's as an admin.

        A new password under 8 characters is accepted with a warning unless
        ``min_length`` refuses it (see :meth:`create_user`).

        Raises:
            AuthenticationError: a wrong ``old_password``. PermissionDenied: another
                user's password without the admin permission.
        """
        if old_password is None or name != self.user:
            self._authorize("admin", "change_password")
        elif self._closed:
            raise InvalidOperation("change_password: the database is closed")
        self._users("change_password").change_password(
            name, new_password, old_password=old_password, min_length=min_length
        )

    @_counted
    def list_users(self) -> list[UserInfo]:
        """Return the users (never their password hashes), sorted by name."""
        self._authorize("admin", "list_users")
        return self._users("list_users").list_users()

    @_counted
    def audit_log(self, *, limit: int | None = None) -> list[AuditEvent]:
        """Return the audit trail, newest first: logins, user changes, denials, backups,
        restores, and every commit with its user."""
        from posixlake import security

        self._authorize("admin", "audit_log")
        self._log.refresh()
        return security.audit_events(self._auth, self._log.history(limit), limit=limit)

    @_counted
    def enable_auth(self, credentials: tuple[str, str] | None = None) -> None:
        """Turn on users for this table; ``credentials`` (or ``$POSIXLAKE_ADMIN_PASSWORD``)
        become its first admin, and this session continues as that admin.

        Raises:
            InvalidOperation: the table already has auth.
        """
        from posixlake import security

        self._authorize("admin", "enable_auth")
        if not isinstance(self._auth, AllowAll):
            raise InvalidOperation("enable_auth: this table already has users")
        admin = security.initial_admin(credentials)
        with self._write("ENABLE AUTH"):
            authorizer = security.enable_auth(self._log.uri, self._log.storage_options, admin)
            self._log.set_configuration({security.AUTH_PROPERTY: "true"})
        self._auth = authorizer

    def _users(self, operation: str) -> TableAuthorizer:
        from posixlake import security

        return security.manager(self._auth, operation)

    # -- backup and restore (posixlake.backup) ----------------------------------------

    @_counted
    def backup(
        self,
        backup_path: str | os.PathLike[str],
        *,
        storage: StorageArg = None,
        overwrite: bool = False,
        progress: Progress | None = None,
        workers: int = DEFAULT_WORKERS,
    ) -> BackupMetadata:
        """Copy the table as of its current version into ``backup_path``, with a SHA-256 manifest.

        Writers are not blocked (the version is pinned once) and cannot make the copy
        inconsistent. ``storage`` configures ``backup_path`` (the table's own storage
        options when None and it uses the same scheme).

        Raises:
            PermissionDenied: no backup permission. AlreadyExists: ``backup_path`` is not
                empty.
        """
        from posixlake import backup as backup_mod

        self._authorize("backup", "backup")
        dest_uri = normalize_uri(backup_path)
        return backup_mod.create_backup(
            self._log,
            dest_uri,
            storage_options=self._options_near(dest_uri, storage),
            user=self.user,
            authorizer=self._auth,
            overwrite=overwrite,
            progress=progress,
            workers=workers,
        )

    @_counted
    def backup_incremental(
        self,
        base_backup_path: str | os.PathLike[str],
        incremental_path: str | os.PathLike[str],
        *,
        storage: StorageArg = None,
        base_storage: StorageArg = None,
        overwrite: bool = False,
        progress: Progress | None = None,
        workers: int = DEFAULT_WORKERS,
    ) -> BackupMetadata:
        """Copy into ``incremental_path`` only the files ``base_backup_path`` (and its
        chain) lacks, chained to it.

        Raises:
            PermissionDenied: no backup permission. BackupCorrupted: the base is damaged.
            InvalidOperation: the base is a backup of another table.
        """
        from posixlake import backup as backup_mod

        self._authorize("backup", "backup_incremental")
        dest_uri, base_uri = normalize_uri(incremental_path), normalize_uri(base_backup_path)
        return backup_mod.create_backup(
            self._log,
            dest_uri,
            base=base_uri,
            storage_options=self._options_near(dest_uri, storage),
            base_storage_options=self._options_near(base_uri, base_storage),
            user=self.user,
            authorizer=self._auth,
            overwrite=overwrite,
            progress=progress,
            workers=workers,
        )

    def _options_near(self, uri: str, storage: StorageArg) -> dict[str, str] | None:
        if storage is not None:
            return storage_options_for(uri, storage)
        mine = self._log.uri
        if "://" in uri and uri.split("://", 1)[0] == mine.split("://", 1)[0] and "://" in mine:
            return self._log.storage_options
        return None

    @staticmethod
    def verify_backup(
        path: str | os.PathLike[str],
        *,
        storage: StorageArg = None,
        progress: Progress | None = None,
        workers: int = DEFAULT_WORKERS,
    ) -> VerifyReport:
        """Hash every file of a backup (and its chain): missing, extra, corrupted files.

        Needs no table and no credentials (it reads the backup's own files).
        """
        from posixlake import backup as backup_mod

        uri = normalize_uri(path)
        return backup_mod.verify_backup(
            uri,
            storage_options=storage_options_for(uri, storage),
            progress=progress,
            workers=workers,
        )

    @staticmethod
    def get_backup_metadata(
        path: str | os.PathLike[str], *, storage: StorageArg = None
    ) -> BackupMetadata:
        """Return what a backup holds (its checked manifest)."""
        from posixlake import backup as backup_mod

        uri = normalize_uri(path)
        options = storage_options_for(uri, storage)
        return backup_mod.get_backup_metadata(uri, storage_options=options)

    @staticmethod
    def restore(
        backup: str | os.PathLike[str],
        dest: str | os.PathLike[str],
        *,
        version: int | None = None,
        as_of: datetime | int | float | str | None = None,
        overwrite: bool = False,
        credentials: tuple[str, str] | None = None,
        storage: StorageArg = None,
        backup_storage: StorageArg = None,
        progress: Progress | None = None,
        workers: int = DEFAULT_WORKERS,
    ) -> RestoreResult:
        """Rebuild a table at ``dest`` from a backup (an incremental applies its chain).

        Args:
            backup: the backup's location.
            dest: an empty or missing location (any content is replaced with ``overwrite``).
            version: rebuild the table as of this version (its log ends there).
            as_of: or as of this time (datetime, epoch milliseconds, ISO string).
            overwrite: replace a non-empty ``dest``.
            credentials: a user of the backup with the restore permission (backups of
                auth-enabled tables).
            storage: ``dest``'s storage configuration.
            backup_storage: the backup's (``storage`` when None).
            progress: ``progress(done_bytes, total_bytes)``.
            workers: parallel copies.

        Raises:
            BackupCorrupted: a missing or damaged backup file, named; nothing is left at
                ``dest``. AlreadyExists: ``dest`` is not empty. VersionError: no such version.
        """
        from posixlake import backup as backup_mod

        dest_uri, backup_uri = normalize_uri(dest), normalize_uri(backup)
        dest_opts = storage_options_for(dest_uri, storage)
        return backup_mod.restore(
            backup_uri,
            dest_uri,
            version=version,
            as_of=as_of,
            overwrite=overwrite,
            credentials=credentials,
            storage_options=dest_opts,
            backup_storage_options=(
                storage_options_for(backup_uri, backup_storage)
                if backup_storage is not None
                else dest_opts
            ),
            progress=progress,
            workers=workers,
        )

    @staticmethod
    def restore_to_transaction(
        backup: str | os.PathLike[str],
        dest: str | os.PathLike[str],
        target: int | datetime | str,
        **options: Any,
    ) -> RestoreResult:
        """Rebuild the table as of ``target``: a version, or a time (datetime or ISO string).

        For the original project's callers an int of at least ``10**11`` is epoch
        milliseconds (no table has that many versions). Options are :meth:`restore`'s.
        """
        is_int = isinstance(target, int) and not isinstance(target, bool)
        if is_int and isinstance(target, int) and target < EPOCH_MS_THRESHOLD:
            return DatabaseOps.restore(backup, dest, version=target, **options)
        return DatabaseOps.restore(backup, dest, as_of=target, **options)

    # -- lifecycle -------------------------------------------------------------------

    def close(self) -> None:
        """Flush buffered rows and release the engine. Further calls raise.

        Raises:
            BufferedKeysTaken: buffered rows whose keys another writer took (the other
                rows are committed first).
            PosixLakeError: the flush failed; the rows are reported again, loudly, at
                exit (durably buffered rows stay in their write-ahead file).
        """
        if self._closed:
            return
        try:
            try:
                self.flush()
            except BufferedKeysTaken:
                if self._buffer.rows:
                    self.flush()
                raise
        except PosixLakeError:
            self._unflushed_reported = True  # the caller got the error: no second report
            raise
        finally:
            self._closed = True
            buffer_mod.disarm_sigterm_if_idle()

    def _flush_at_exit(self, why: str) -> None:
        """Flush what is still buffered at exit or finalization; report what cannot be."""
        rows = self._buffer.rows
        if not rows:
            return
        wal = self._buffer.wal
        kept = (
            f"they are kept in the write-ahead file {wal.path} and the next open of the "
            "table commits them"
            if wal is not None
            else "they are lost (use insert_buffered(..., durable=True) to keep them)"
        )
        if self._closed:
            if not self._unflushed_reported:
                buffer_mod.report_unflushed(self._log.uri, rows, why, None, kept=kept)
            return
        try:
            self.flush()
        except BufferedKeysTaken as err:
            buffer_mod.report_unflushed(
                self._log.uri, err.rejected.num_rows, why, err, kept="their keys were taken"
            )
            self._flush_at_exit(why)
        except PosixLakeError as err:
            buffer_mod.report_unflushed(self._log.uri, rows, why, err, kept=kept)

    def __del__(self) -> None:
        buffer = getattr(self, "_buffer", None)
        if buffer is not None and buffer.rows:
            self._flush_at_exit("garbage collection of its DatabaseOps")

    def __enter__(self) -> DatabaseOps:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"DatabaseOps({self._log.uri!r}, engine={self._engine.name!r})"

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.to_arrow().to_pylist())

    # -- the original project's names (thin aliases) ---------------------------------

    def insert_json(self, json_data: Any) -> int:
        """Alias of :meth:`insert` (original name)."""
        return self.insert(json_data)

    def insert_buffered_json(self, json_data: Any) -> int:
        """Alias of :meth:`insert_buffered` (original name)."""
        return self.insert_buffered(json_data)

    def flush_write_buffer(self) -> int:
        """Alias of :meth:`flush` (original name)."""
        return self.flush()

    def merge_json(self, json_data: Any, join_column: str | None = None) -> str:
        """Alias of :meth:`merge` returning the metrics as JSON (original name)."""
        return json.dumps(self.merge(json_data, join_column).to_dict())

    def delete(self, predicate: str) -> int:
        """Alias of :meth:`delete_rows_where`."""
        return self.delete_rows_where(predicate)

    def query_json(self, sql: str) -> str:
        """Alias of :meth:`query` returning JSON rows (original name)."""
        return self.query(sql).to_json()

    def query_version(self, sql: str, version: int) -> QueryResult:
        """Alias of ``query(sql, version=...)`` (original name)."""
        return self.query(sql, version=version)

    def query_version_json(self, sql: str, version: int) -> str:
        """Alias of ``query(sql, version=...).to_json()`` (original name)."""
        return self.query(sql, version=version).to_json()

    def query_timestamp(self, sql: str, timestamp_ms: datetime | int | float | str) -> QueryResult:
        """Alias of ``query(sql, as_of=...)`` (original name)."""
        return self.query(sql, as_of=timestamp_ms)

    def query_timestamp_json(self, sql: str, timestamp_ms: datetime | int | float | str) -> str:
        """Alias of ``query(sql, as_of=...).to_json()`` (original name)."""
        return self.query(sql, as_of=timestamp_ms).to_json()

    def get_history(self, limit: int | None = None) -> list[CommitInfo]:
        """Alias of :meth:`history`."""
        return self.history(limit)

    def get_base_path(self) -> str:
        """Alias of :attr:`uri` (original name)."""
        return self.uri

    def list_parquet_files(self) -> list[str]:
        """Return the table-relative paths of the active data files (original name)."""
        self._authorize("read", "list_parquet_files")
        self._log.refresh()
        return [str(p) for p in self._log.add_actions()["path"].to_pylist()]

    def vacuum_dry_run(self, retention_hours: int | None = None) -> list[str]:
        """Alias of ``vacuum(retention_hours, dry_run=True).files`` (original name)."""
        return list(self.vacuum(retention_hours, dry_run=True).files)

    def optimize_with_target_size(self, target_size_bytes: int) -> OptimizeResult:
        """Alias of ``optimize.compact(target_size=...)`` (original name)."""
        return self.optimize.compact(target_size=target_size_bytes)

    def optimize_with_filter(self, filter: str | list[tuple[str, str, Any]]) -> OptimizeResult:
        """Alias of ``optimize.compact(partition_filters=...)`` (original name).

        Args:
            filter: ``[("day", "=", "2024-01-01")]``, or the text form
                ``"day = '2024-01-01'"`` (conditions joined with AND).
        """
        return self.optimize.compact(partition_filters=_partition_filters(filter))

    @classmethod
    def create_with_s3(
        cls, s3_path: str, schema: Any, s3_config: StorageConfig, **options: Any
    ) -> DatabaseOps:
        """Alias of ``create(s3_path, schema, storage=s3_config)`` (original name)."""
        return cls.create(s3_path, schema, storage=s3_config, **options)

    @classmethod
    def open_with_s3(cls, s3_path: str, s3_config: StorageConfig, **options: Any) -> DatabaseOps:
        """Alias of ``open(s3_path, storage=s3_config)`` (original name)."""
        return cls.open(s3_path, storage=s3_config, **options)

    @classmethod
    def create_with_azure(
        cls, azure_path: str, schema: Any, azure_config: StorageConfig, **options: Any
    ) -> DatabaseOps:
        """Alias of ``create(azure_path, schema, storage=azure_config, create_bucket=True)``.

        The original name; like the original, it creates a missing container.
        """
        options.setdefault("create_bucket", True)
        return cls.create(azure_path, schema, storage=azure_config, **options)

    @classmethod
    def open_with_azure(
        cls, azure_path: str, azure_config: StorageConfig, **options: Any
    ) -> DatabaseOps:
        """Alias of ``open(azure_path, storage=azure_config)`` (original name)."""
        return cls.open(azure_path, storage=azure_config, **options)

    @classmethod
    def create_with_auth(
        cls, path: str | os.PathLike[str], schema: Any, auth_enabled: bool = True, **options: Any
    ) -> DatabaseOps:
        """Alias of ``create(path, schema, auth=auth_enabled, bootstrap=True)`` (original name).

        Without ``credentials=``, the new handle is the bootstrap admin ``system`` until it
        is closed: ``db.create_user("admin", "secret", ["admin"])`` is the original's flow.
        """
        return cls.create(path, schema, auth=auth_enabled, bootstrap=True, **options)

    @classmethod
    def open_with_credentials(
        cls,
        path: str | os.PathLike[str],
        username: str | tuple[str, str],
        password: str | None = None,
        **options: Any,
    ) -> DatabaseOps:
        """Alias of ``open(path, credentials=...)`` (original name).

        Takes ``(path, username, password)`` or ``(path, Credentials(username, password))``.
        """
        if isinstance(username, tuple):
            if password is not None:
                raise InvalidOperation("give Credentials or a username and password, not both")
            return cls.open(path, credentials=username, **options)
        if password is None:
            raise InvalidOperation("open_with_credentials needs a password")
        return cls.open(path, credentials=(username, password), **options)

    def get_current_version(self) -> int:
        """Alias of :attr:`version` (original name)."""
        return self.version

    def get_version_history(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Return the history as dicts with version, timestamp (epoch ms) and operation (original name)."""
        return [
            {
                "version": c.version,
                "timestamp": int(c.timestamp.timestamp() * 1000),
                "operation": c.operation,
                "user": c.user,
            }
            for c in self.history(limit)
        ]

    def query_json_at_version(self, sql: str, version: int) -> str:
        """Alias of ``query(sql, version=...).to_json()`` (original name)."""
        return self.query(sql, version=version).to_json()

    def query_json_at_timestamp(self, sql: str, timestamp: datetime | int | float | str) -> str:
        """Alias of ``query(sql, as_of=...).to_json()``; epoch seconds or ms (original name)."""
        return self.query(sql, as_of=timestamp).to_json()

    @staticmethod
    def restore_with_credentials(
        backup: str | os.PathLike[str],
        dest: str | os.PathLike[str],
        username: str,
        password: str,
        **options: Any,
    ) -> RestoreResult:
        """Alias of ``restore(backup, dest, credentials=(username, password))``."""
        return DatabaseOps.restore(backup, dest, credentials=(username, password), **options)

    @staticmethod
    def restore_to_transaction_with_credentials(
        backup: str | os.PathLike[str],
        dest: str | os.PathLike[str],
        target: int | datetime | str,
        username: str,
        password: str,
        **options: Any,
    ) -> RestoreResult:
        """Alias of ``restore_to_transaction(..., credentials=(username, password))``."""
        return DatabaseOps.restore_to_transaction(
            backup, dest, target, credentials=(username, password), **options
        )


def _type_text(t: pa.DataType) -> str | pa.DataType:
    """The type string of a stored type, or the pyarrow type if no string names it."""
    text = type_string(t)
    try:
        parse_type(text)
    except SchemaError:
        return t
    return text


def _columns_arg(value: object, what: str) -> list[str]:
    """Accept ``"a"``, ``"a, b"`` or a sequence of names; raise SchemaError otherwise."""
    if isinstance(value, str):
        cols = [c.strip() for c in value.split(",") if c.strip()]
    elif isinstance(value, Sequence) and all(isinstance(c, str) for c in value):
        cols = list(value)
    else:
        raise SchemaError(f"{what}: expected a column name or a list of them, not {value!r}")
    if not cols:
        raise SchemaError(f"{what}: no column named")
    return cols


def _mapping_arg(value: object, what: str) -> dict[str, Any]:
    """Accept a mapping of column -> value (or JSON object text); raise SerializationError."""
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as err:
            raise SerializationError(f"update: {what} is malformed JSON: {err}") from err
    if not isinstance(value, Mapping):
        raise SerializationError(
            f"update: {what} must map column names to values, not {type(value).__name__}"
        )
    return {str(k): v for k, v in value.items()}


def _partition_filters(value: str | list[tuple[str, str, Any]]) -> list[tuple[str, str, Any]]:
    """Accept delta-rs partition filter tuples or ``col = 'v' AND col2 != 'w'`` text."""
    if not isinstance(value, str):
        return list(value)
    import re

    out: list[tuple[str, str, Any]] = []
    for part in re.split(r"\s+AND\s+", value.strip(), flags=re.IGNORECASE):
        m = re.fullmatch(r"\s*\"?([^\s\"=!<>]+)\"?\s*(=|!=|<>)\s*'?(.*?)'?\s*", part)
        if not m:
            raise InvalidOperation(f"cannot read partition filter {part!r}: use col = 'value'")
        op = "!=" if m.group(2) == "<>" else m.group(2)
        out.append((m.group(1), op, m.group(3)))
    return out


def _prepare_storage(
    uri: str, storage: StorageArg, *, create: bool, create_bucket: bool | None = None
) -> None:
    """Let the storage layer check (and with ``create``, make) a bucket or container."""
    if "://" in uri and not uri.startswith("file://"):
        from posixlake import storage as storage_mod

        storage_mod.prepare(uri, storage, create=create, create_bucket=create_bucket)
    elif not create and not os.path.exists(uri):
        raise NotFound(f"no table at {uri}: the path does not exist")
    elif os.path.exists(uri) and not os.path.isdir(uri):
        raise (IoError if create else NotFound)(f"{uri} is a file, not a table directory")
