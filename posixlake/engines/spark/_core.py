"""The core of :class:`~posixlake.engines.spark.SparkEngine`: its session, the snapshots
and DataFrames it reads, queries, and how a Spark job's files are committed (through
delta-rs, re-planned on conflicts by the one retry policy). See docs/design.md."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, TypeVar

import pyarrow as pa

from posixlake.delta import DeltaLog, plain_types
from posixlake.delta._commit import WrittenFile, commit_files
from posixlake.delta._features import (
    file_commit_blockers,
)
from posixlake.delta._retry import MAX_PLANNINGS
from posixlake.delta._snapshot import DataFile, Snapshot, snapshot_of
from posixlake.engines.spark._frames import (
    FILE_COL,
    FileResolver,
    discard,
    snapshot_frame,
    write_frame,
)
from posixlake.engines.spark._io import (
    WriteSpec,
)
from posixlake.engines.spark._remote import connect_query
from posixlake.engines.spark._session import (
    VALUE_CONFIG,
    add_data_source,
    build_session,
    is_connect,
    parse_remote,
    preload,
    quiet,
    spark_errors,
    translate_spark_error,
)
from posixlake.errors import (
    CommitConflict,
    InvalidOperation,
    NotFound,
    VersionError,
)

__all__ = ["MAX_ATTEMPTS", "SparkCore", "is_spark_dataframe", "rows_per_file"]

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


class SparkCore:
    """Engine on PySpark: its session, snapshots, frames, queries and commits.

    Args:
        master: Spark master URL for a session this engine builds (``local[*]`` default).
        remote: a Spark Connect server (``sc://host:15002``) to run on instead of a JVM in
            this process (default ``$POSIXLAKE_SPARK_REMOTE`` when no master is given).
        spark: a SparkSession (classic or Connect) to use instead (never stopped by the engine).
        ui: start the Spark UI in a session this engine builds.

    The session starts lazily, at the first Spark job, and is shared by engines in the
    process (Spark allows one SparkContext per JVM, and PySpark one mode per process:
    classic or Connect).
    """

    name = "spark"

    def __init__(
        self,
        *,
        master: str | None = None,
        remote: str | None = None,
        spark: Any = None,
        ui: bool = False,
    ) -> None:
        if master and remote:
            raise InvalidOperation(
                f"give a Spark master ({master}) or a Spark Connect server ({remote}), not both"
            )
        if remote:
            parse_remote(remote)  # a bad URL fails here, not at the first job
        self._master = master
        self._remote = remote
        self._spark = spark
        self._ui = ui
        self._owned = False
        self._configured = False
        self._registered = False
        self._lock = threading.RLock()
        self._snapshots: OrderedDict[tuple[str, str, int], Snapshot] = OrderedDict()
        self._frames: OrderedDict[tuple[str, str, int, bool], tuple[Any, FileResolver]] = (
            OrderedDict()
        )
        #: test seam: called with the attempt number right before each commit
        self.before_commit: Callable[[int], None] | None = None

    # -- session ----------------------------------------------------------------------

    def _session(self) -> Any:
        """The session the engine's jobs run in (built on first use).

        A session built here is not given the ``posixlake`` data source (registering it
        is a call to a Connect server that the engine's own jobs never need): that is
        done by :attr:`spark`, which hands the session out.
        """
        with self._lock:
            if self._spark is None:
                with _OWNED_LOCK:
                    running = _running_session()
                    self._spark = build_session(
                        master=self._master, remote=self._remote, ui=self._ui, data_source=False
                    )
                    key = id(self._spark)
                    # stop it on close only if we started it (or share one an engine started)
                    self._owned = running is None or key in _OWNED
                    if self._owned:
                        _OWNED[key] = _OWNED.get(key, 0) + 1
            elif not self._configured:  # a session given to the engine
                preload()
                for name, value in VALUE_CONFIG.items():
                    self._spark.conf.set(name, value)
            self._configured = True
            return self._spark

    @property
    def spark(self) -> Any:
        """The SparkSession (built on first use), with the ``posixlake`` data source."""
        session = self._session()
        with self._lock:
            if not self._registered:
                add_data_source(session)
                self._registered = True
        return session

    @property
    def remote(self) -> str | None:
        """The Spark Connect URL this engine was given (None: a JVM in this process)."""
        return self._remote

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
            self._owned = self._configured = self._registered = False

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
            built = snapshot_frame(self._session(), snap, with_file=with_file)
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
            spark = self._session()
            try:
                if is_connect(spark):
                    table = connect_query(spark, frame, sql, VIEW, lock=_VIEW_LOCK)
                else:
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

    # -- commits ------------------------------------------------------------------------

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

        snap = self.snapshot(log)
        frame, resolve = self.frame(log, with_file=True)
        return snap, rows_per_file(frame, resolve, predicate, what)

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
        for rewrites (our removes cannot carry a deletion vector descriptor).

        Files are looked at only on a table whose protocol lists deletion vectors (no
        file of another table has one): a DML run by delta-rs in place resolves no
        snapshot, whose cost grows with the number of files.
        """
        with log.lock:
            schema_json = log.table.schema().to_json()
            vectors = "deletionVectors" in set(log.table.protocol().reader_features or ())
        found = file_commit_blockers(
            log.configuration, schema_json, rewrites=rewrites, physical_names=physical_names
        )
        if rewrites and vectors and any(f.deleted_rows for f in self.snapshot(log).files):
            found = (*found, "deletionVectors")
        return found


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


def rows_per_file(
    frame: Any, resolve: Callable[[str], DataFile], predicate: str, what: str
) -> dict[str, tuple[DataFile, int]]:
    """Return, per data file of ``frame`` (read ``with_file``) with rows matching
    ``predicate``, the file and the count of those rows (one Spark job)."""
    from pyspark.sql import functions as F

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
    return touched
