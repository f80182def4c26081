"""DatabaseOps: the Python face of a posixlake table.

A facade: each method checks permission, converts the payload to Arrow, asks the engine
or the Delta log to do the work, and returns a typed result. Every write is one Delta
commit, and a write that changes nothing makes no commit.

The operations live in cohesive parts (``posixlake/_ops/``): ``core`` (the ``Table``:
state, permission checks, the write scope), ``writes``, ``buffered``, ``reads``,
``maintenance`` (``db.optimize``, vacuum), ``users`` (``db.users``), ``backups``
(``db.backups``, restore), ``create`` (tables from files) and ``args`` (argument forms, SQL
literals). DatabaseOps adds the constructors to :class:`~posixlake._compat.OriginalNames`,
the table of the original project's names, which is built on those parts.

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

import json
import os
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

import pyarrow as pa

from posixlake._authz import Authorizer
from posixlake._compat import OriginalNames
from posixlake._ops.core import PRIMARY_KEY_PROPERTY, StorageArg
from posixlake._ops.create import create_from_files, prepare_storage
from posixlake._ops.maintenance import Optimizer
from posixlake.buffer import DEFAULT_BUFFER_ROWS
from posixlake.delta import DeltaLog
from posixlake.engines import Engine, resolve_engine
from posixlake.engines.local import expand_paths
from posixlake.errors import InvalidOperation, SchemaError, TableExists
from posixlake.storage import storage_options_for, table_uri
from posixlake.types import DECLARED_TYPES_PROPERTY, Schema, declared_types, delta_schema

if TYPE_CHECKING:
    from posixlake.feed import ChangeFeed

__all__ = ["PRIMARY_KEY_PROPERTY", "Credentials", "DatabaseOps", "Optimizer"]


class Credentials(NamedTuple):
    """A user name and password (a plain ``(username, password)`` tuple works too)."""

    username: str
    password: str


class DatabaseOps(OriginalNames):
    """A posixlake table: Delta transactions through one object.

    Build one with :meth:`create`, :meth:`open`, :meth:`create_from_csv` or
    :meth:`create_from_parquet`. Safe to share between threads. Use it as a context
    manager (or call :meth:`close`) so buffered rows are flushed.

    Groups: ``db.optimize`` (compaction, Z-order), ``db.users`` (users and roles),
    ``db.backups`` (full and incremental backups).
    """

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
        remote: str | None = None,
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
            remote: a Spark Connect server for the Spark engine (``sc://host:15002``;
                default ``$POSIXLAKE_SPARK_REMOTE`` when no ``master`` is given): the
                engine runs there instead of starting a JVM in this process.
            spark: an existing SparkSession (classic or Connect) to use.
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
        uri = table_uri(path)
        options = storage_options_for(uri, storage)
        prepare_storage(uri, storage, create=True, create_bucket=create_bucket)
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
        eng = resolve_engine(engine, master=master, remote=remote, spark=spark)
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
        remote: str | None = None,
        spark: Any = None,
        buffer_rows: int = DEFAULT_BUFFER_ROWS,
    ) -> DatabaseOps:
        """Open an existing table (its latest version).

        The options mean what they mean in :meth:`create` (``engine``, ``master``,
        ``remote``, ``spark``...).

        Raises:
            NotFound: no Delta table at ``path``.
            AuthenticationError: the table has users and ``credentials`` are missing or wrong.
        """
        uri = table_uri(path)
        options = storage_options_for(uri, storage)
        prepare_storage(uri, storage, create=False)
        log = DeltaLog.open(uri, options)
        from posixlake import security

        authorizer = security.login(uri, options, credentials, configuration=log.configuration)
        eng = resolve_engine(engine, master=master, remote=remote, spark=spark)
        db = cls(log, engine=eng, authorizer=authorizer, buffer_rows=buffer_rows)
        if PRIMARY_KEY_PROPERTY not in log.configuration:
            from posixlake import _original
            from posixlake.storage import open_store

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
        types: Mapping[str, Any] | None = None,
        schema: Schema | pa.Schema | Mapping[str, Any] | Sequence[Any] | None = None,
        **options: Any,
    ) -> DatabaseOps:
        """Create a table from CSV file(s), inferring column types over the whole input.

        A column gets Int64, Float64, Boolean, Date, Timestamp (values with a zone) or
        TimestampNtz (values without) only if no value changes what it says; otherwise
        it is String: ``08123``, ``+15551234`` and ``007`` stay text, an integer beyond
        Int64 too (:mod:`posixlake.csvcodec._infer` has the rules). Empty fields are NULL.
        Files in another CSV dialect take ``csv_options=`` (a
        :class:`~posixlake.csvcodec.CsvOptions` or a dict: ``delimiter``, ``quote``,
        ``null``, ``encoding``, ``header``; without a header, columns are ``column0``...).

        Args:
            types: column -> type (``{"zip": "String", "amount": "Decimal128(10,2)"}``)
                for columns not to infer; the CSV is then read in-process on any engine.
            schema: every column and its type (and a primary key); the header may list
                them in any order; a column the files lack is NULL.

        Raises:
            NotFound: no such CSV file. SerializationError: malformed CSV, or a value that
                does not fit its given type (naming the file, line, column and value);
                nothing is created. SchemaError: an unknown type or column.
            AlreadyExists: a table exists at ``db_path``.
        """
        return create_from_files(
            cls,
            db_path,
            expand_paths(csv_path, suffix=".csv"),
            "csv",
            primary_key,
            partition_by,
            options,
            types=types,
            schema=schema,
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
        return create_from_files(
            cls,
            db_path,
            expand_paths(parquet_path, suffix=".parquet"),
            "parquet",
            primary_key,
            partition_by,
            options,
        )

    def subscribe(self, from_version: int | None = None, **options: Any) -> ChangeFeed:
        """Follow the table's commits: a :class:`~posixlake.feed.ChangeFeed` (``for`` or
        ``async for``) of one change batch per version from ``from_version`` on (None:
        from the next commit). See :func:`posixlake.feed.open_feed` for ``options``.

        Raises:
            VersionError: a negative ``from_version``. ChangesExpired (while iterating):
                VACUUM removed a version's files; it names the oldest version available.
        """
        self._authorize("read", "subscribe")
        from posixlake.feed import open_feed

        return open_feed(
            self._log.uri, self._log.storage_options, from_version=from_version, **options
        )

    def __enter__(self) -> DatabaseOps:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"DatabaseOps({self._log.uri!r}, engine={self._engine.name!r})"
