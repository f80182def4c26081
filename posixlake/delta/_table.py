"""The loaded Delta table: open, catch up with other writers, identity, metadata, reads.

A :class:`LoadedTable` keeps one ``DeltaTable`` loaded and moves it forward
incrementally (``update_incremental``), and loads it afresh every
``RELOAD_AFTER_COMMITS`` commits (a loaded delta-rs table slows down with each commit it
sees), so per-operation cost stays flat as the table grows and the handle lives on; a
table replaced under it (a restore onto its path) is noticed and reloaded.
:class:`~posixlake.delta.DeltaLog` adds the writes. Also here: the commit plumbing every
write shares (commit properties, the retry policy, the version a commit made).
"""

from __future__ import annotations

import io
import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final, Self, TypeVar
from urllib.parse import unquote

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, QueryBuilder, Transaction
from deltalake.exceptions import DeltaError

from posixlake.delta._arrow import plain_schema, plain_types
from posixlake.delta._features import QUERY_CONFIG
from posixlake.delta._retry import Contention, RetryPolicy
from posixlake.delta._translate import (
    NS_RANGE,
    _translated,
    quote_ident,
    retention_hours_of,
    translate,
)
from posixlake.errors import (
    CommitConflict,
    DivisionByZero,
    InvalidOperation,
    NotFound,
    QueryError,
    ValueOutOfRange,
    VersionError,
    VersionNotFound,
)
from posixlake.storage import is_local
from posixlake.types import CommitInfo

__all__ = [
    "CHECKPOINT_INTERVAL",
    "COMMIT_OPERATION_KEY",
    "TARGET_FILE_SIZE",
    "LoadedTable",
    "default_properties",
]

logger = logging.getLogger("posixlake.delta._log")

#: commit info key naming the operation of a commit made with ``create_write_transaction``
COMMIT_OPERATION_KEY: Final = "posixlake.commitOperation"
# Tables we create checkpoint every 10 commits (Delta's own default; delta-rs uses 100):
# a commit's cost grows with the commits since the last checkpoint, so this keeps
# single-row inserts flat (see benchmarks/bench_api.py).
CHECKPOINT_INTERVAL: Final = "10"
# Tables we create write data files of at most ~32 MiB (``delta.targetFileSize``; delta-rs'
# default is 100 MiB), in appends, DML, MERGE and OPTIMIZE alike. A change of one row
# rewrites the whole file holding it (delta-rs writes no deletion vectors), and MERGE
# (what an NFS overwrite becomes) costs ~3x delta-rs' UPDATE per byte rewritten: with
# 100 MiB files a one-row change after a dense ``sed -i`` cost 3x a plain UPDATE at 10M
# rows (see benchmarks/bench_rows.py). Tables created by others keep what they set.
TARGET_FILE_SIZE: Final = str(32 << 20)
# A loaded DeltaTable slows down with every commit it makes or catches up with after its
# load, checkpoints or not (delta-rs 1.6: a one-row DELETE in a 100,000-row table cost
# ~0.5 ms more per such commit: 657 ms after 800 commits through one handle, 93 ms with
# this), so :meth:`LoadedTable.refresh` loads the table afresh, from its latest
# checkpoint, after this many. A load costs a few ms locally, more for a large table on
# an object store: paid once per this many commits.
RELOAD_AFTER_COMMITS: Final = 50
_T = TypeVar("_T")


class LoadedTable:
    """One Delta table, kept loaded: opening, catching up, identity, metadata, reads.

    The base of :class:`~posixlake.delta.DeltaLog` (which adds the writes). Thread-safe:
    operations hold an internal lock. Use :meth:`create` or :meth:`open`; :meth:`at`
    gives a read-only snapshot.
    """

    def __init__(
        self,
        dt: DeltaTable,
        uri: str,
        storage_options: Mapping[str, str] | None,
        *,
        read_only: bool = False,
    ):
        self._dt = dt
        self.uri = uri
        self.storage_options: dict[str, str] | None = (
            dict(storage_options) if storage_options else None
        )
        self.read_only = read_only
        self._lock = threading.RLock()
        self._commit_times: dict[int, datetime] = {}
        # (version, arrow schema, configuration, partition columns) of the loaded version
        self._meta: tuple[int, pa.Schema, dict[str, str], list[str]] | None = None
        #: how lost commit races are retried (bounds, back-off, counters)
        self.retry = RetryPolicy()
        # table identity: the metaData id of the loaded table, and how many times this
        # handle found the table replaced under it (restore onto the live path)
        self._table_id = self._read_table_id()
        self._generation = 0
        self._log_stat = self._stat_log_dir()
        self._loaded_version = int(dt.version())  # where ``dt`` was last loaded afresh

    @property
    def commit_timeout(self) -> float:
        """Seconds a write keeps retrying on commit conflicts before CommitConflict."""
        return self.retry.timeout

    @commit_timeout.setter
    def commit_timeout(self, seconds: float) -> None:
        self.retry.timeout = seconds

    @property
    def contention(self) -> Contention:
        """Commit-conflict figures of this handle."""
        return self.retry.contention

    # -- opening ---------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        uri: str,
        schema: pa.Schema,
        *,
        partition_by: Sequence[str] | None = None,
        configuration: Mapping[str, str] | None = None,
        storage_options: Mapping[str, str] | None = None,
        name: str | None = None,
    ) -> Self:
        """Create a new, empty table at ``uri`` (version 0).

        Raises:
            AlreadyExists: there is a Delta table at ``uri`` already (raised by the caller,
                which checks :meth:`exists` first).
            SchemaError: delta-rs refuses the schema.
        """
        with _translated(f"create table at {uri}"):
            dt = DeltaTable.create(
                uri,
                schema,
                mode="error",
                partition_by=list(partition_by) if partition_by else None,
                name=name,
                configuration={**default_properties(), **(configuration or {})},
                storage_options=dict(storage_options) if storage_options else None,
                raise_if_key_not_exists=False,
            )
        return cls(dt, uri, storage_options)

    @classmethod
    def open(cls, uri: str, storage_options: Mapping[str, str] | None = None) -> Self:
        """Load the latest version of the table at ``uri``.

        Raises:
            NotFound: there is no Delta table at ``uri``.
        """
        with _translated(f"open table at {uri}"):
            dt = DeltaTable(uri, storage_options=dict(storage_options) if storage_options else None)
        return cls(dt, uri, storage_options)

    @staticmethod
    def exists(uri: str, storage_options: Mapping[str, str] | None = None) -> bool:
        """Return whether a Delta table exists at ``uri``."""
        with _translated(f"check table at {uri}"):
            return DeltaTable.is_deltatable(
                uri, storage_options=dict(storage_options) if storage_options else None
            )

    def at(self, version: int | datetime) -> Self:
        """Return a read-only snapshot at ``version`` (a number or a point in time).

        Raises:
            VersionError: no such version, or the time is before the table existed.
        """
        with self._lock:
            latest = self._dt.version()
        if isinstance(version, int) and not isinstance(version, bool):
            if version < 0 or version > latest:
                raise VersionNotFound(
                    f"version {version} does not exist (the table has versions 0..{latest})"
                )
        elif isinstance(version, datetime):
            version = self.version_at(version if version.tzinfo else version.replace(tzinfo=UTC))
        else:
            raise VersionError(
                f"a version must be an int or a datetime, not {type(version).__name__}"
            )
        with _translated(f"load version {version}"):
            dt = DeltaTable(self.uri, version=version, storage_options=self.storage_options)
        snap = type(self)(dt, self.uri, self.storage_options, read_only=True)
        snap._commit_times = self._commit_times
        return snap

    def version_at(self, when: datetime) -> int:
        """Return the latest version committed at or before ``when``.

        Resolved from the commit timestamps in the log (milliseconds, as ``history``
        shows them), not from object modification times, which S3 and Azure round to
        the second.

        Raises:
            VersionError: ``when`` is before the table was created.
        """
        latest = self.version
        known = max(self._commit_times, default=-1)
        if known < latest:
            self.history(None if known < 0 else latest - known)
        earlier = [v for v, t in self._commit_times.items() if t <= when]
        if not earlier:
            first = min(self._commit_times.items(), key=lambda kv: kv[0], default=None)
            created = f" (created {first[1].isoformat()})" if first else ""
            raise VersionError(f"the table did not exist at {when.isoformat()}{created}")
        return max(earlier)

    # -- state -----------------------------------------------------------------------

    @property
    def table(self) -> DeltaTable:
        """The loaded delta-rs table (for engines: do not refresh it yourself)."""
        return self._dt

    @property
    def lock(self) -> threading.RLock:
        """The lock that serialises operations on this log."""
        return self._lock

    @property
    def version(self) -> int:
        """The loaded version."""
        with self._lock:
            return int(self._dt.version())

    def try_loaded_state(self) -> tuple[int, int] | None:
        """Return the loaded version and :attr:`generation` without waiting: None while
        another thread holds the log (a commit in progress)."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            return int(self._dt.version()), self._generation
        finally:
            self._lock.release()

    def refresh(self) -> int:
        """Catch up with commits made by others (lists only new log entries); return the version.

        A table replaced under this handle (a restore onto its path: another ``metaData``
        id, or a log that went backwards) is loaded afresh and :attr:`generation` grows.
        The same table is also loaded afresh (from its latest checkpoint) once
        ``RELOAD_AFTER_COMMITS`` commits were made or caught up with since its last load;
        :attr:`generation` stays.

        Raises:
            NotFound: the table's log has disappeared (a local table directory removed).
        """
        if self.read_only:
            return self.version
        with self._lock, _translated("refresh table"):
            if self._log_dir_changed():
                self._reload("its _delta_log directory was replaced")
                return int(self._dt.version())
            if int(self._dt.version()) - self._loaded_version >= RELOAD_AFTER_COMMITS:
                self._reload(f"{RELOAD_AFTER_COMMITS} commits since it was loaded")
                return int(self._dt.version())
            if self._no_new_commit():
                return int(self._dt.version())
            try:
                self._dt.update_incremental()
            except DeltaError as err:
                # an object-store table replaced by one with a shorter log
                if "invalid table version" not in str(err).lower():
                    raise
                self._reload("its log is shorter than the loaded version")
                return int(self._dt.version())
            if self._read_table_id() != self._table_id:
                self._reload("its metaData id changed")
            return int(self._dt.version())

    # -- table identity --------------------------------------------------------------

    @property
    def table_id(self) -> str:
        """The Delta ``metaData`` id of the loaded table (a restore makes a new one)."""
        with self._lock:
            return self._table_id

    @property
    def generation(self) -> int:
        """How many times this handle found its table replaced and reloaded it (from 0).

        Anything cached per version (rendered CSV, key indexes, snapshots) must be dropped
        when this changes: version numbers of the new table mean other content.
        """
        with self._lock:
            return self._generation

    def _read_table_id(self) -> str:
        try:
            return str(self._dt.metadata().id)
        except (DeltaError, OSError) as err:
            raise translate(err, what="read table metadata") from err

    def _stat_log_dir(self) -> tuple[int, int, tuple[int, int] | None] | None:
        """The identity of a local table's log: its directory's (device, inode) and its
        first commit file's (inode, ctime) when that file is there."""
        if not is_local(self.uri):
            return None
        log = os.path.join(self.uri, "_delta_log")
        try:
            st = os.stat(log)
        except OSError:
            return None
        try:
            first = os.stat(os.path.join(log, f"{0:020d}.json"))
        except OSError:  # cleaned up after a checkpoint, or a checkpoint-only log
            return (st.st_dev, st.st_ino, None)
        return (st.st_dev, st.st_ino, (first.st_ino, first.st_ctime_ns))

    def _log_dir_changed(self) -> bool:
        """Return True when a local table's log is another one than at load: another
        ``_delta_log`` directory, or another first commit in it (a table removed and made
        again at the path: a file system may give the new directory the old inode)."""
        if self._log_stat is None:
            return False
        now = self._stat_log_dir()
        if now is None:
            return False
        if now[:2] != self._log_stat[:2]:
            return True
        was_first, first = self._log_stat[2], now[2]
        # a first commit that is gone is log cleanup, not a new table
        return was_first is not None and first is not None and first != was_first

    def _reload(self, why: str) -> None:
        """Load the table at ``uri`` afresh; count a new generation if it is another table."""
        old_id, old_version = self._table_id, int(self._dt.version())
        self._dt = DeltaTable(self.uri, storage_options=self.storage_options)
        self._meta = None
        self._log_stat = self._stat_log_dir()
        self._table_id = self._read_table_id()
        version = int(self._dt.version())
        self._loaded_version = version
        if self._table_id != old_id or version < old_version:
            self._generation += 1
            self._commit_times.clear()
            logger.warning(
                "table %s was replaced (%s): reloaded at version %d (was %d, id %s -> %s)",
                self.uri,
                why,
                version,
                old_version,
                old_id,
                self._table_id,
            )

    def _no_new_commit(self) -> bool:
        """Return True when a local table certainly has no commit after the loaded version.

        Commits are numbered files, so one ``stat`` of the next commit's file answers it;
        ``update_incremental`` would list and re-read the log, a cost that grows with the
        number of commits since the last checkpoint. Object stores always refresh.

        Raises:
            NotFound: a local table's ``_delta_log`` is gone (delta-rs would otherwise
                write a commit into a recreated, empty directory).
        """
        if not is_local(self.uri):
            return False
        log_dir = os.path.join(self.uri, "_delta_log")
        nxt = os.path.join(log_dir, f"{int(self._dt.version()) + 1:020d}.json")
        if os.path.exists(nxt):
            return False
        if not os.path.isdir(log_dir):
            raise NotFound(f"no Delta table at {self.uri} any more: its _delta_log is gone")
        return True

    def _metadata(self) -> tuple[int, pa.Schema, dict[str, str], list[str]]:
        """Return schema, configuration and partition columns, cached per loaded version."""
        with self._lock:
            version = int(self._dt.version())
            meta = self._meta
            if meta is None or meta[0] != version:
                raw = pa.schema(self._dt.schema().to_arrow())
                md = self._dt.metadata()
                config = {k: v for k, v in md.configuration.items() if v is not None}
                meta = (
                    version,
                    plain_schema(raw),
                    config,
                    list(md.partition_columns),
                )
                self._meta = meta
            return meta

    @property
    def arrow_schema(self) -> pa.Schema:
        """The table schema as pyarrow (plain string/binary types)."""
        return self._metadata()[1]

    @property
    def partition_columns(self) -> list[str]:
        """The partition columns, in order."""
        return list(self._metadata()[3])

    @property
    def configuration(self) -> dict[str, str]:
        """The table configuration (Delta table properties)."""
        return dict(self._metadata()[2])

    def commit_time(self, version: int) -> datetime:
        """Return the commit time of ``version`` (cached; versions never change)."""
        cached = self._commit_times.get(version)
        if cached is not None:
            return cached
        loaded = self.version
        # the newest commits back to ``version`` (a new version's time reads one commit,
        # not the whole history, which grows by one with every append); else all of it
        for limit in ((loaded - version + 1,) if 0 <= version <= loaded else ()) + (None,):
            for info in self.history(limit):
                self._commit_times.setdefault(info.version, info.timestamp)
            if version in self._commit_times:
                break
        if version not in self._commit_times:
            raise VersionError(f"version {version} does not exist")
        return self._commit_times[version]

    def history(self, limit: int | None = None) -> list[CommitInfo]:
        """Return commits, newest first."""
        with self._lock, _translated("read history"):
            raw = self._dt.history(limit)
        out: list[CommitInfo] = []
        for entry in raw:
            version = int(entry.get("version", -1))
            ts = datetime.fromtimestamp(int(entry.get("timestamp", 0)) / 1000, tz=UTC)
            self._commit_times.setdefault(version, ts)
            params = dict(entry.get("operationParameters") or {})
            custom = {k: v for k, v in entry.items() if k.startswith("posixlake.")}
            out.append(
                CommitInfo(
                    version=version,
                    timestamp=ts,
                    # a commit of files another engine wrote is a Delta WRITE; the
                    # operation it performed (DELETE, UPDATE, MERGE) is in our own key
                    operation=str(custom.get(COMMIT_OPERATION_KEY) or entry.get("operation", "")),
                    parameters=params,
                    metrics=dict(entry.get("operationMetrics") or {}),
                    user=custom.get("posixlake.user"),
                    tags={k: str(v) for k, v in custom.items()},
                )
            )
        return out

    def add_actions(self) -> pa.Table:
        """Return the active files: path, size_bytes, num_records, partition values, min/max stats."""
        with self._lock, _translated("list files"):
            return pa.table(self._dt.get_add_actions(flatten=True))

    def file_uris(self) -> list[str]:
        """Return the absolute URIs of the active files."""
        with self._lock, _translated("list files"):
            return list(self._dt.file_uris())

    # -- reads -----------------------------------------------------------------------

    def query(self, sql: str, *, arithmetic: bool = True) -> pa.Table:
        """Run ``sql`` (table name ``data``) on the loaded version with DataFusion.

        ``arithmetic=False``: ``sql`` has no arithmetic to check for overflow (posixlake
        built it: column lists and comparisons with literals), so it is not parsed for it.

        Raises:
            QueryError: the SQL does not parse or plan, or fails while running.
            NotFound: a data file of the current version is missing.
            VersionError: a time-travel snapshot whose files VACUUM removed.
        """
        try:
            try:
                table = self._checked_query(sql) if arithmetic else self._run_query(sql)
            except ValueOutOfRange as err:
                # DataFusion types timestamp literals as nanoseconds (1677-2262): past
                # those years, say them in microseconds, as Delta stores them
                from posixlake.delta._sqlvalues import microsecond_timestamps

                fixed = (
                    microsecond_timestamps(sql, self.arrow_schema) if NS_RANGE in str(err) else None
                )
                if fixed is None:
                    raise
                table = self._run_query(fixed)
        except NotFound as err:
            if self.read_only:
                raise VersionError(
                    f"version {self.version} cannot be read: its data files were removed "
                    f"(VACUUM deletes the files of old versions): {err}"
                ) from err
            raise
        return plain_types(table)

    def _checked_query(self, sql: str) -> pa.Table:
        """Run ``sql`` with its integer arithmetic checked (an overflow is an error, as
        in Spark's ANSI mode, not a wrapped value: see :mod:`posixlake.delta._sqlvalues`).

        The arithmetic is typed by a query over ``data``; when that cannot be done (an
        operand from a subquery or an alias), or the rewritten SQL does not plan, the SQL
        runs as written.
        """
        from posixlake.delta._sqlvalues import checked_arithmetic, is_aggregate

        if not any(op in sql for op in "+-*") and "sum" not in sql.lower():
            return self._run_query(sql)

        def typed(exprs: Sequence[str]) -> list[str] | None:
            select = ", ".join(f"arrow_typeof({e}) AS t{i}" for i, e in enumerate(exprs))
            try:
                table = self._run_query(f"SELECT {select} FROM data LIMIT 1")
            except QueryError:
                return None
            if table.num_rows == 0:
                return None
            return [str(table.column(i)[0].as_py()) for i in range(table.num_columns)]

        def typeof(exprs: Sequence[str]) -> list[str] | None:
            # aggregates (SUM(x), SUM(x) + 1) and row-level expressions cannot share one
            # SELECT; a group that does not type (an alias, a subquery's column) is
            # left as written ("?")
            out = ["?"] * len(exprs)
            for aggregate in (False, True):
                at = [i for i, e in enumerate(exprs) if is_aggregate(e) == aggregate]
                types = typed([exprs[i] for i in at]) if at else None
                for i, t in zip(at, types or [], strict=False):
                    out[i] = t
            return out

        checked = checked_arithmetic({"sql": sql}, typeof).get("sql")
        if checked is None:
            return self._run_query(sql)
        try:
            return self._run_query(checked)
        except (ValueOutOfRange, DivisionByZero):
            raise
        except QueryError:
            return self._run_query(sql)  # our rewrite did not plan: the SQL as written

    def _run_query(self, sql: str) -> pa.Table:
        with self._lock:
            dt = self._dt
            with _translated("query", query=True):
                blanks = self.empty_string_partitions()
                builder = QueryBuilder(dict(QUERY_CONFIG))
                if blanks:
                    # the Delta protocol: an empty partition value is NULL (delta-rs'
                    # SQL reads it as ''; its to_pyarrow_table, Spark and others as NULL)
                    builder = builder.register("__posixlake_data", dt)
                    cols = ", ".join(
                        f"NULLIF({quote_ident(f.name)}, '') AS {quote_ident(f.name)}"
                        if f.name in blanks
                        else quote_ident(f.name)
                        for f in self.arrow_schema
                    )
                    builder.execute(
                        f"CREATE VIEW data AS SELECT {cols} FROM __posixlake_data"
                    ).read_all()
                else:
                    builder = builder.register("data", dt)
                reader = builder.execute(sql)
        with _translated("query", query=True):
            return pa.table(reader.read_all())

    def empty_string_partitions(self) -> list[str]:
        """Return the string partition columns some file of this version holds ``''`` in
        (written by delta-rs or by posixlake before 0.2; the Delta protocol reads it as NULL).

        delta-rs lists such a value as NULL among the add actions; its file pruning
        (``files("col = ''")``) tells the two apart.
        """
        parts = [
            c for c in self.partition_columns if pa.types.is_string(self.arrow_schema.field(c).type)
        ]
        if not parts:
            return []
        with self._lock:
            actions = pa.table(self._dt.get_add_actions(flatten=False))
            if actions.num_rows == 0:
                return []
            struct = actions.column("partition").combine_chunks()
            return [
                c
                for c in parts
                if struct.field(c).null_count and self._dt._table.files(f"{quote_ident(c)} = ''")
            ]

    def read_columns(
        self, columns: Sequence[str] | None = None, *, filter_sql: str | None = None
    ) -> pa.Table:
        """Read whole columns of the loaded version, optionally filtered by ``filter_sql``:
        a predicate posixlake built (comparisons with literals), which is not checked for
        arithmetic overflow as a user's query is."""
        cols = ", ".join(quote_ident(c) for c in columns) if columns else "*"
        where = f" WHERE {filter_sql}" if filter_sql else ""
        return self.query(f"SELECT {cols} FROM data{where}", arithmetic=False)

    def changes(self, start: int, end: int | None = None) -> pa.Table:
        """Return the change data feed between two versions (inclusive).

        Raises:
            InvalidOperation: the table does not record changes (``delta.enableChangeDataFeed``).
            VersionError: a version out of range.
        """
        config = self.configuration
        if (config.get("delta.enableChangeDataFeed") or "false").lower() != "true":
            raise InvalidOperation(
                f"the table at {self.uri} does not record a change data feed: create it with "
                "change_data_feed=True (or set delta.enableChangeDataFeed)"
            )
        latest = self.version
        if start < 0 or start > latest or (end is not None and (end < start or end > latest)):
            raise VersionError(
                f"changes: versions {start}..{end if end is not None else latest} are not in "
                f"0..{latest}"
            )
        with self._lock, _translated("read changes"):
            reader = self._dt.load_cdf(starting_version=start, ending_version=end)
            table = pa.table(reader.read_all())
        return plain_types(table)

    def read_file_columns(self, paths: Sequence[str], columns: Sequence[str]) -> pa.Table:
        """Read ``columns`` of the given data files (table-relative paths), concatenated.

        Only for tables without partition columns (their values are not in the files).
        """

        import pyarrow.parquet as pq

        from posixlake.storage import open_store

        tables: list[pa.Table] = []
        store = None if is_local(self.uri) else open_store(self.uri, self.storage_options)
        with _translated("read new data files"):
            for rel in paths:
                rel = unquote(rel)
                if store is None:
                    source: Any = os.path.join(self.uri, rel)
                else:
                    source = io.BytesIO(store.read_bytes(rel))
                tables.append(pq.read_table(source, columns=list(columns)))
        if not tables:
            return self.arrow_schema.empty_table().select(list(columns))
        return plain_types(pa.concat_tables(tables, promote_options="permissive"))

    @property
    def retention_hours(self) -> float:
        """The table's ``delta.deletedFileRetentionDuration`` in hours (168 by default)."""
        return retention_hours_of(self.configuration)

    def _relative(self, path: str) -> str:
        """Return ``path`` relative to the table root (delta-rs mixes both forms)."""
        for root in (self.uri, "file://" + self.uri, "file:" + self.uri):
            prefix = root.rstrip("/") + "/"
            if path.startswith(prefix):
                return path[len(prefix) :]
        return path

    def committed_with(self, key: str, value: str, *, after: int) -> bool:
        """Return whether a commit after version ``after`` carries commit info ``key: value``."""
        with self._lock, _translated("read history"):
            latest = int(self._dt.version())
            if latest <= after:
                return False
            entries = self._dt.history(latest - after)
        return any(e.get(key) == value for e in entries)

    def transaction_version(self, app_id: str) -> int | None:
        """Return the latest version of application transaction ``app_id`` committed, or None."""
        with self._lock, _translated("read application transaction"):
            version = self._dt.transaction_version(app_id)
            return None if version is None else int(version)

    def _check_writable(self) -> None:
        if self.read_only:
            raise InvalidOperation("this is a time-travel snapshot: it cannot be written")

    def _props(
        self,
        metadata: Mapping[str, Any] | None,
        *,
        app_transaction: tuple[str, int] | None = None,
        strict: bool = False,
    ) -> CommitProperties:
        """Commit properties: our metadata, and the retries the retry policy gives delta-rs."""
        return CommitProperties(
            custom_metadata=dict(metadata) if metadata else None,
            max_commit_retries=RetryPolicy.delta_rs_retries(strict=strict),
            app_transactions=[Transaction(*app_transaction)] if app_transaction else None,
        )

    def _retrying(self, what: str, fn: Callable[[], _T], *, query: bool = False) -> _T:
        """Run ``fn`` (one commit attempt) under :attr:`retry`, re-planning after conflicts.

        After a conflict the log is refreshed and ``fn`` runs again on the new version
        (delete, update, merge and optimize plan inside ``fn``).

        ``query``: ``fn`` evaluates user SQL (a predicate or expressions), so DataFusion
        errors are :class:`QueryError` (see :func:`translate`).

        Raises:
            CommitConflict: still conflicting at the policy's bound.
        """

        def attempt(_n: int) -> _T:
            with _translated(what, query=query):
                return fn()

        def refresh(_err: CommitConflict) -> None:
            with _translated("refresh table"):
                self._dt.update_incremental()

        return self.retry.run(what, attempt, on_conflict=refresh)

    def _committed(self, fn: Callable[[], _T]) -> tuple[_T, int | None]:
        """Run one delta-rs write; return its result and the version it committed.

        delta-rs moves the loaded table to the version its commit made, so the version
        is the commit's own (None when it made none): no listing, and another writer's
        commit is never taken for ours. Call it inside the attempt, under the lock.
        """
        start = self._dt.version()
        out = fn()
        end = self._dt.version()
        return out, (int(end) if end != start else None)


def default_properties() -> dict[str, str]:
    """The table properties of every table posixlake creates, empty or with its first rows
    (:meth:`LoadedTable.create`, :func:`posixlake.delta.create_with_files`); a caller's
    own configuration goes on top. Tables created by others keep what they set."""
    return {
        "delta.checkpointInterval": CHECKPOINT_INTERVAL,
        "delta.targetFileSize": TARGET_FILE_SIZE,
    }
