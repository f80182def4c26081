"""DeltaLog: the only code that talks to delta-rs.

Every commit, conflict retry, time-travel resolution, history entry, optimize and vacuum
goes through here; nothing else writes ``_delta_log/``. delta-rs errors are translated
into the posixlake error tree in :func:`translate`, once.

A DeltaLog keeps one ``DeltaTable`` loaded and moves it forward incrementally
(``update_incremental``), so per-operation cost stays flat as the table grows.
"""

from __future__ import annotations

import logging
import os
import random
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, Final, Literal, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, QueryBuilder, Transaction, write_deltalake
from deltalake.exceptions import (
    CommitFailedError,
    DeltaError,
    DeltaProtocolError,
    SchemaMismatchError,
    TableNotFoundError,
)

from posixlake.delta._decimal_parts import (
    DML_HINT,
    INSERT_HINT,
    check_partitions,
    check_rows,
    decimal_partitions,
)
from posixlake.delta._features import QUERY_CONFIG, int96_out_of_range, unsupported_feature
from posixlake.errors import (
    CommitConflict,
    DeltaLakeError,
    InvalidOperation,
    IoError,
    NetworkError,
    NotFound,
    PosixLakeError,
    QueryError,
    SchemaError,
    StorageError,
    VersionError,
    VersionNotFound,
)
from posixlake.storage import is_local
from posixlake.types import CommitInfo

__all__ = [
    "Contention",
    "DeltaLog",
    "commit_timeout_from_env",
    "plain_types",
    "quote_ident",
    "translate",
]

logger = logging.getLogger(__name__)

MAX_COMMIT_RETRIES: Final = 25
#: how long a write keeps re-planning and retrying on commit conflicts, in seconds
#: (``$POSIXLAKE_COMMIT_TIMEOUT`` overrides it; ``DeltaLog.commit_timeout`` per handle)
DEFAULT_COMMIT_TIMEOUT: Final = 120.0
#: first and largest pause between two conflicting attempts, in seconds (with jitter)
BACKOFF_FIRST: Final = 0.002
BACKOFF_MAX: Final = 0.5
_ANSI: Final = re.compile(r"\x1b\[[0-9;]*m")
#: commit info key naming the operation of a commit made with ``create_write_transaction``
COMMIT_OPERATION_KEY: Final = "posixlake.commitOperation"
# Tables we create checkpoint every 10 commits (Delta's own default; delta-rs uses 100):
# a commit's cost grows with the commits since the last checkpoint, so this keeps
# single-row inserts flat (see benchmarks/bench_api.py).
CHECKPOINT_INTERVAL: Final = "10"
_T = TypeVar("_T")


def quote_ident(name: str) -> str:
    """Quote a column name for delta-rs / DataFusion SQL."""
    return '"' + name.replace('"', '""') + '"'


_INTERVAL = re.compile(r"^\s*interval\s+(\d+(?:\.\d+)?)\s+([a-z]+?)s?\s*$", re.IGNORECASE)
_UNIT_HOURS: Final[dict[str, float]] = {
    "week": 168.0,
    "day": 24.0,
    "hour": 1.0,
    "minute": 1 / 60,
    "second": 1 / 3600,
    "millisecond": 1 / 3_600_000,
    "microsecond": 1 / 3_600_000_000,
}
DEFAULT_RETENTION_HOURS: Final = 168.0


def retention_hours_of(configuration: Mapping[str, str]) -> float:
    """Return ``delta.deletedFileRetentionDuration`` (``"interval 7 days"``) in hours.

    The Delta default, one week, when the property is missing or unreadable.
    """
    text = configuration.get("delta.deletedFileRetentionDuration")
    m = _INTERVAL.match(text) if text else None
    if m is None or m.group(2).lower() not in _UNIT_HOURS:
        return DEFAULT_RETENTION_HOURS
    return float(m.group(1)) * _UNIT_HOURS[m.group(2).lower()]


def translate(err: Exception, *, what: str, query: bool = False) -> PosixLakeError:
    """Map a delta-rs (or object store) error to the posixlake error tree.

    Args:
        err: the exception delta-rs raised.
        what: a short description of the operation, used in the message.
        query: the error came from running SQL: any error that is not about storage is
            a :class:`QueryError` (a cast failing at run time included).
    """
    text = _ANSI.sub("", str(err))
    low = text.lower()
    if "could not create local directory" in low:
        return IoError(f"{what}: {text.splitlines()[0]}")
    if isinstance(err, TableNotFoundError) or "invalid table location" in low:
        return NotFound(f"{what}: no Delta table there ({text.splitlines()[0]})")
    unsupported = unsupported_feature(text, what=what)
    if unsupported is not None:  # not a conflict: retrying cannot help
        return unsupported
    if isinstance(err, CommitFailedError):
        return CommitConflict(f"{what}: commit conflict: {text}")
    if isinstance(err, SchemaMismatchError):
        return SchemaError(f"{what}: {text}")
    if "timestamp_ntz columns but does not have" in low:
        # delta-rs enables the timestampNtz feature for top-level, struct and list columns
        # but not for a timestamp without time zone inside a map
        return SchemaError(
            f"{what}: delta-rs cannot create a table with a timestamp without time zone "
            f"inside a map; use Timestamp (UTC) there: {text}"
        )
    if isinstance(err, DeltaProtocolError):
        return InvalidOperation(f"{what}: {text}")
    if any(
        s in low
        for s in (
            "connection refused",
            "dns error",
            "error sending request",
            "timed out",
            "tcp connect",
        )
    ):
        return NetworkError(f"{what}: storage endpoint unreachable: {text}")
    if any(
        s in low
        for s in (
            "sql error",
            "parsererror",
            "parser error",
            "schema error",
            "no field named",
            "plan(",
            "error during planning",
            "type_coercion",
        )
    ):
        return QueryError(f"{what}: {text}")
    if "not found" in low and ("object at location" in low or "no such file" in low):
        return NotFound(f"{what}: a data file is missing (removed by VACUUM or by hand): {text}")
    if "invalid retention period" in low:
        return InvalidOperation(f"{what}: {text}")
    if "failed validation check" in low or "invariant violations" in low:
        return SchemaError(f"{what}: a NOT NULL column or constraint is violated: {text}")
    if any(
        s in low
        for s in (
            "access denied",
            "forbidden",
            "invalidaccesskeyid",
            "signaturedoesnotmatch",
            "authorizationfailure",
            "403",
        )
    ):
        return StorageError(f"{what}: access denied by storage: {text}")
    if query and not any(s in low for s in ("no such file", "not found", "object store")):
        return QueryError(f"{what}: {text}")
    if "invalid data type" in low or "cast error" in low or "arrow error" in low:
        return SchemaError(f"{what}: {text}")
    if isinstance(err, DeltaError):
        return DeltaLakeError(f"{what}: {text}")
    return DeltaLakeError(f"{what}: {type(err).__name__}: {text}")


@contextmanager
def _translated(what: str, *, query: bool = False) -> Iterator[None]:
    try:
        yield
    except PosixLakeError:
        raise
    except (DeltaError, OSError, pa.ArrowException) as err:
        raise translate(err, what=what, query=query) from err
    except Exception as err:
        # DataFusion raises a bare Exception for errors while a query runs (a failed
        # cast, a division by zero); anything of another class is not ours to translate
        if type(err) is not Exception:
            raise
        raise translate(err, what=what, query=query) from err


def plain_types(table: pa.Table) -> pa.Table:
    """Cast view and large types that DataFusion returns to their plain forms."""

    def plain(t: pa.DataType) -> pa.DataType:
        if pa.types.is_string_view(t) or pa.types.is_large_string(t):
            return pa.string()
        if pa.types.is_binary_view(t) or pa.types.is_large_binary(t):
            return pa.binary()
        if pa.types.is_list_view(t) or pa.types.is_large_list(t) or pa.types.is_large_list_view(t):
            return pa.list_(pa.field("element", plain(t.value_type), t.value_field.nullable))
        if pa.types.is_list(t):
            return pa.list_(
                pa.field(t.value_field.name, plain(t.value_type), t.value_field.nullable)
            )
        if pa.types.is_struct(t):
            return pa.struct([pa.field(f.name, plain(f.type), f.nullable) for f in t])
        if pa.types.is_map(t):
            return pa.map_(
                plain(t.key_type), pa.field("value", plain(t.item_type), t.item_field.nullable)
            )
        return t

    target = pa.schema(
        [pa.field(f.name, plain(f.type), f.nullable, f.metadata) for f in table.schema]
    )
    if target.equals(table.schema):
        return table
    columns = [
        col
        if col.type.equals(f.type)
        else pa.chunked_array([_plain_array(c, f.type) for c in col.chunks], f.type)
        for col, f in zip(table.columns, target, strict=True)
    ]
    return pa.Table.from_arrays(columns, schema=target)


def _plain_array(arr: pa.Array, target: pa.DataType) -> pa.Array:
    """Convert ``arr`` to ``target``, rebuilding nested arrays level by level.

    A plain ``cast`` of a nested array re-checks nullability, and a NULL struct (or list)
    whose NOT NULL child holds a null slot under it would fail for no reason; rebuilding
    keeps each level's validity as it is.
    """
    if arr.type.equals(target):
        return arr
    mask = arr.is_null() if arr.null_count else None
    if pa.types.is_struct(target):
        children = [
            _plain_array(arr.field(i), target.field(i).type) for i in range(target.num_fields)
        ]
        fields = [target.field(i) for i in range(target.num_fields)]
        return pa.StructArray.from_arrays(children, fields=fields, mask=mask)
    if pa.types.is_map(target):
        if not pa.types.is_map(arr.type):
            return arr.cast(target)
        offsets, start, stop = _rebased_offsets(arr)
        return pa.MapArray.from_arrays(
            offsets,
            _plain_array(arr.keys.slice(start, stop - start), target.key_type),
            _plain_array(arr.items.slice(start, stop - start), target.item_type),
            type=target,
            mask=mask,
        )
    if pa.types.is_list(target):
        if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
            return pa.array(arr.to_pylist(), type=target)  # list views: rare, by value
        offsets, start, stop = _rebased_offsets(arr)
        return pa.ListArray.from_arrays(
            offsets,
            _plain_array(arr.values.slice(start, stop - start), target.value_type),
            type=target,
            mask=mask,
        )
    return arr.cast(target)


def _rebased_offsets(arr: pa.Array) -> tuple[pa.Array, int, int]:
    """Return a list/map array's offsets as a new int32 array starting at 0, and the
    range of its child values they cover (a sliced array's offsets start anywhere)."""
    offsets = arr.offsets
    start = int(offsets[0].as_py()) if len(offsets) else 0
    stop = int(offsets[-1].as_py()) if len(offsets) else 0
    return pc.subtract(offsets, start).cast(pa.int32()), start, stop


def _has_timestamps(schema: pa.Schema) -> bool:
    """Return whether any column (nested ones included) is a timestamp."""

    def walk(t: pa.DataType) -> bool:
        if pa.types.is_timestamp(t):
            return True
        if pa.types.is_struct(t):
            return any(walk(t.field(i).type) for i in range(t.num_fields))
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            return walk(t.value_type)
        if pa.types.is_map(t):
            return walk(t.key_type) or walk(t.item_type)
        return False

    return any(walk(f.type) for f in schema)


def _in_ns_range(value: Any) -> bool:
    """Return whether a statistics timestamp lies where nanoseconds since 1970 fit."""
    if not isinstance(value, datetime):
        return False
    when = value if value.tzinfo else value.replace(tzinfo=UTC)
    return _NS_LOW < when < _NS_HIGH


_NS_LOW: Final = datetime(1677, 9, 22, tzinfo=UTC)
_NS_HIGH: Final = datetime(2262, 4, 10, tzinfo=UTC)


def commit_timeout_from_env() -> float:
    """Return ``$POSIXLAKE_COMMIT_TIMEOUT`` (seconds) or :data:`DEFAULT_COMMIT_TIMEOUT`.

    Raises:
        InvalidOperation: the variable is set but not a positive number.
    """
    raw = os.environ.get("POSIXLAKE_COMMIT_TIMEOUT")
    if raw is None or raw == "":
        return DEFAULT_COMMIT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0 or not value < float("inf"):
        raise InvalidOperation(
            f"POSIXLAKE_COMMIT_TIMEOUT must be a positive number of seconds, not {raw!r}"
        )
    return value


def backoff(attempt: int, rng: random.Random) -> float:
    """Return the pause before retry ``attempt`` (0-based): exponential, capped, jittered.

    Full jitter in [0.5, 1.5) of ``min(BACKOFF_MAX, BACKOFF_FIRST * 2**attempt)``, so that
    writers that collided once do not collide again in lockstep.
    """
    base: float = min(BACKOFF_MAX, BACKOFF_FIRST * float(2 ** min(attempt, 20)))
    return base * (0.5 + rng.random())


class Contention:
    """Commit-conflict figures of one table handle (thread-safe).

    Attributes:
        conflicts: commit attempts that lost to a concurrent commit.
        retries: attempts made again after a conflict (re-planned on the new version).
        gave_up: writes that failed because the commit deadline passed.
        waited_s: total seconds spent in back-off pauses.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.conflicts = 0
        self.retries = 0
        self.gave_up = 0
        self.waited_s = 0.0

    def conflict(self) -> None:
        with self._lock:
            self.conflicts += 1

    def retry(self, waited: float) -> None:
        with self._lock:
            self.retries += 1
            self.waited_s += waited

    def give_up(self) -> None:
        with self._lock:
            self.gave_up += 1


class DeltaLog:
    """One Delta table, kept loaded. Thread-safe: operations hold an internal lock.

    Use :meth:`create` or :meth:`open`; :meth:`at` gives a read-only snapshot.
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
        #: seconds a write keeps retrying on commit conflicts before CommitConflict
        self.commit_timeout = commit_timeout_from_env()
        self.contention = Contention()
        self._rng = random.Random()
        self._sleep: Callable[[float], None] = time.sleep
        self._clock: Callable[[], float] = time.monotonic
        # table identity: the metaData id of the loaded table, and how many times this
        # handle found the table replaced under it (restore onto the live path)
        self._table_id = self._read_table_id()
        self._generation = 0
        self._log_stat = self._stat_log_dir()

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
    ) -> DeltaLog:
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
                configuration={
                    "delta.checkpointInterval": CHECKPOINT_INTERVAL,
                    **(configuration or {}),
                },
                storage_options=dict(storage_options) if storage_options else None,
                raise_if_key_not_exists=False,
            )
        return cls(dt, uri, storage_options)

    @classmethod
    def open(cls, uri: str, storage_options: Mapping[str, str] | None = None) -> DeltaLog:
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

    def at(self, version: int | datetime) -> DeltaLog:
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
        snap = DeltaLog(dt, self.uri, self.storage_options, read_only=True)
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

    def refresh(self) -> int:
        """Catch up with commits made by others (lists only new log entries); return the version.

        A table replaced under this handle (a restore onto its path: another ``metaData``
        id, or a log that went backwards) is loaded afresh and :attr:`generation` grows.

        Raises:
            NotFound: the table's log has disappeared (a local table directory removed).
        """
        if self.read_only:
            return self.version
        with self._lock, _translated("refresh table"):
            if self._log_dir_changed():
                self._reload("its _delta_log directory was replaced")
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

    def _stat_log_dir(self) -> tuple[int, int] | None:
        if not is_local(self.uri):
            return None
        try:
            st = os.stat(os.path.join(self.uri, "_delta_log"))
        except OSError:
            return None
        return (st.st_dev, st.st_ino)

    def _log_dir_changed(self) -> bool:
        """Return True when a local table's ``_delta_log`` is another directory than at load."""
        if self._log_stat is None:
            return False
        now = self._stat_log_dir()
        return now is not None and now != self._log_stat

    def _reload(self, why: str) -> None:
        """Load the table at ``uri`` afresh; count a new generation if it is another table."""
        old_id, old_version = self._table_id, int(self._dt.version())
        self._dt = DeltaTable(self.uri, storage_options=self.storage_options)
        self._meta = None
        self._log_stat = self._stat_log_dir()
        self._table_id = self._read_table_id()
        version = int(self._dt.version())
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
                    plain_types(raw.empty_table()).schema,
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

    def set_configuration(self, properties: Mapping[str, str]) -> int:
        """Set table properties in one commit; return the new version."""
        self._check_writable()
        with self._lock, _translated("set table properties"):
            self._dt.alter.set_table_properties(dict(properties), raise_if_not_exists=False)
            return self._dt.version()

    def commit_time(self, version: int) -> datetime:
        """Return the commit time of ``version`` (cached; versions never change)."""
        cached = self._commit_times.get(version)
        if cached is not None:
            return cached
        for info in self.history():
            self._commit_times.setdefault(info.version, info.timestamp)
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

    def query(self, sql: str) -> pa.Table:
        """Run ``sql`` (table name ``data``) on the loaded version with DataFusion.

        Raises:
            QueryError: the SQL does not parse or plan, or fails while running.
            NotFound: a data file of the current version is missing.
            VersionError: a time-travel snapshot whose files VACUUM removed.
        """
        try:
            with self._lock:
                dt = self._dt
                with _translated("query", query=True):
                    reader = QueryBuilder(dict(QUERY_CONFIG)).register("data", dt).execute(sql)
            with _translated("query", query=True):
                table = pa.table(reader.read_all())
        except NotFound as err:
            if self.read_only:
                raise VersionError(
                    f"version {self.version} cannot be read: its data files were removed "
                    f"(VACUUM deletes the files of old versions): {err}"
                ) from err
            raise
        return plain_types(table)

    def read_columns(
        self, columns: Sequence[str] | None = None, *, filter_sql: str | None = None
    ) -> pa.Table:
        """Read whole columns of the loaded version (optionally filtered by a SQL predicate)."""
        cols = ", ".join(quote_ident(c) for c in columns) if columns else "*"
        where = f" WHERE {filter_sql}" if filter_sql else ""
        return self.query(f"SELECT {cols} FROM data{where}")

    # -- writes ----------------------------------------------------------------------

    def _check_writable(self) -> None:
        if self.read_only:
            raise InvalidOperation("this is a time-travel snapshot: it cannot be written")

    def _props(
        self,
        metadata: Mapping[str, Any] | None,
        *,
        app_transaction: tuple[str, int] | None = None,
        retries: int = MAX_COMMIT_RETRIES,
    ) -> CommitProperties:
        return CommitProperties(
            custom_metadata=dict(metadata) if metadata else None,
            max_commit_retries=retries,
            app_transactions=[Transaction(*app_transaction)] if app_transaction else None,
        )

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

    def _retrying(self, what: str, fn: Callable[[], _T], *, query: bool = False) -> _T:
        """Run ``fn`` (one commit attempt), re-planning on commit conflicts until the deadline.

        After a conflict the log is refreshed and ``fn`` runs again on the new version
        (delete, update, merge and optimize plan inside ``fn``), after a jittered,
        exponentially growing pause, until :attr:`commit_timeout` seconds have passed.
        Conflicts, retries and give-ups are counted in :attr:`contention`.

        ``query``: ``fn`` evaluates user SQL (a predicate or expressions), so DataFusion
        errors are :class:`QueryError` (see :func:`translate`).

        Raises:
            CommitConflict: still conflicting when the deadline passed.
        """
        deadline = self._clock() + self.commit_timeout
        attempt = 0
        while True:
            try:
                with _translated(what, query=query):
                    return fn()
            except CommitConflict as err:
                self._wait_after_conflict(what, attempt, deadline, err)
                attempt += 1
                with _translated("refresh table"):
                    self._dt.update_incremental()

    def _count_at(self, version: int) -> int:
        """Return the number of rows of ``version`` (deletion vectors applied)."""
        with _translated(f"count rows of version {version}"):
            dt = DeltaTable(self.uri, version=version, storage_options=self.storage_options)
            reader = QueryBuilder(dict(QUERY_CONFIG)).register("t", dt)
            table = pa.table(reader.execute("SELECT count(*) AS n FROM t").read_all())
        return int(table.column(0)[0].as_py())

    def _unproven_files(self) -> list[str]:
        """Return the active files whose statistics do not show every top-level timestamp
        within the nanosecond range (those files' footers must be looked at)."""
        import urllib.parse

        schema = self.arrow_schema
        columns = [f.name for f in schema if pa.types.is_timestamp(f.type)]
        nested = any(_has_timestamps(pa.schema([f])) for f in schema if f.name not in columns)
        with self._lock, _translated("list files"):
            actions = pa.table(self._dt.get_add_actions(flatten=True))
        paths = [urllib.parse.unquote(p) for p in actions.column("path").to_pylist()]
        if nested:
            return paths
        names = set(actions.column_names)
        proven = [True] * len(paths)
        rows = actions.column("num_records").to_pylist() if "num_records" in names else None
        for c in columns:
            if c in self.partition_columns:
                continue  # partition values live in the log, not in the files
            lo = actions.column(f"min.{c}").to_pylist() if f"min.{c}" in names else None
            hi = actions.column(f"max.{c}").to_pylist() if f"max.{c}" in names else None
            nulls = (
                actions.column(f"null_count.{c}").to_pylist()
                if f"null_count.{c}" in names
                else None
            )
            for i in range(len(paths)):
                all_null = (
                    nulls is not None
                    and rows is not None
                    and nulls[i] is not None
                    and nulls[i] == rows[i]
                )
                if all_null:
                    continue
                low = lo[i] if lo is not None else None
                high = hi[i] if hi is not None else None
                if low is None or high is None or not (_in_ns_range(low) and _in_ns_range(high)):
                    proven[i] = False
        return [p for p, ok in zip(paths, proven, strict=True) if not ok]

    def _check_rewrite_safe(self, what: str) -> None:
        """Refuse a delta-rs rewrite of files it would read wrongly.

        delta-rs' DML and OPTIMIZE read INT96 timestamps as nanoseconds: a value outside
        1677-2262 (Spark's 9999-12-31, 0001-01-01) would be silently rewritten as another
        date. Such files are refused (the Spark engine rewrites them correctly).

        Raises:
            UnsupportedTableFeature: naming the files.
        """
        from posixlake.errors import UnsupportedTableFeature

        schema = self.arrow_schema
        risky = decimal_partitions(schema, self.partition_columns)
        if risky:
            check_partitions(self._dt.partitions(), risky, what=what)
        if not _has_timestamps(schema):
            return
        bad = int96_out_of_range(self.uri, self.storage_options, schema, self._unproven_files())
        if bad:
            raise UnsupportedTableFeature(
                f"{what}: {len(bad)} data file(s) store INT96 timestamps outside 1677-2262 "
                f"(e.g. {bad[0]}), which delta-rs' {what} would rewrite as wrong dates; "
                "use engine='spark' for this write",
                ("int96Timestamps",),
            )

    def check_new_rows(self, rows: pa.Table, what: str, *, dml: bool = False) -> None:
        """Refuse rows whose partition values delta-rs would write wrongly.

        Raises:
            InvalidOperation: see :mod:`posixlake.delta._decimal_parts`.
        """
        risky = decimal_partitions(self.arrow_schema, self.partition_columns)
        if risky:
            check_rows(rows, risky, what=what, hint=DML_HINT if dml else INSERT_HINT)

    def _check_updated_partitions(self, predicate: str | None, updates: Mapping[str, str]) -> None:
        """Refuse an UPDATE that would set a decimal partition column to a value delta-rs
        writes wrongly (the new values are computed by a query first)."""
        risky = decimal_partitions(self.arrow_schema, self.partition_columns)
        exprs = {c: updates[quote_ident(c)] for c in risky if quote_ident(c) in updates}
        if not exprs:
            return
        where = f" WHERE {predicate}" if predicate else ""
        select = ", ".join(f"{e} AS {quote_ident(c)}" for c, e in exprs.items())
        with _translated("update", query=True):
            reader = QueryBuilder(dict(QUERY_CONFIG)).register("t", self._dt)
            values = pa.table(reader.execute(f"SELECT DISTINCT {select} FROM t{where}").read_all())
        check_rows(values, list(exprs), what="update", hint=DML_HINT)

    def _wait_after_conflict(
        self, what: str, attempt: int, deadline: float, err: CommitConflict
    ) -> None:
        """Count a conflict and pause before the next attempt, or raise past the deadline."""
        self.contention.conflict()
        pause = backoff(attempt, self._rng)
        if self._clock() + pause > deadline:
            self.contention.give_up()
            raise CommitConflict(
                f"{what}: still conflicting with concurrent writers after {attempt + 1} "
                f"attempts in {self.commit_timeout:g} s (raise POSIXLAKE_COMMIT_TIMEOUT "
                "or DatabaseOps.commit_timeout to wait longer)"
            ) from err
        logger.debug("%s: commit conflict, retrying in %.3f s", what, pause)
        self._sleep(pause)
        self.contention.retry(pause)

    def append(
        self,
        data: pa.Table,
        *,
        metadata: Mapping[str, Any] | None = None,
        schema_mode: Literal["merge"] | None = None,
        app_transaction: tuple[str, int] | None = None,
    ) -> int:
        """Append ``data`` as one commit; return the new version (retried on conflicts).

        Args:
            schema_mode: ``"merge"`` adds the columns of ``data`` that the table lacks
                (nullable) in the same commit.
            app_transaction: ``(app id, version)`` recorded in the same commit (a Delta
                ``txn`` action), so a replay can tell that these rows were committed.
        """
        self._check_writable()
        self.check_new_rows(data, "append")
        props = self._props(metadata, app_transaction=app_transaction)
        with self._lock:

            def attempt() -> int:
                write_deltalake(
                    self._dt,
                    data,
                    mode="append",
                    schema_mode=schema_mode,
                    commit_properties=props,
                )
                return self._dt.version()

            return self._retrying("append", attempt)

    def add_columns(self, fields: Sequence[pa.Field]) -> int:
        """Add nullable columns in one commit; return the new version.

        Raises:
            SchemaError: a column exists, or a type Delta cannot store.
        """
        from deltalake import Field as DeltaField
        from deltalake import Schema as DeltaSchema

        self._check_writable()
        existing = set(self.arrow_schema.names)
        clash = [f.name for f in fields if f.name in existing]
        if clash:
            raise SchemaError(f"add columns: column(s) {clash} exist already")
        with self._lock:
            with _translated("add columns"):
                delta = DeltaSchema.from_arrow(pa.schema([f.with_nullable(True) for f in fields]))
                new = [DeltaField.from_json(f.to_json()) for f in delta.fields]

            def attempt() -> int:
                self._dt.alter.add_columns(new, commit_properties=self._props(None))
                return int(self._dt.version())

            return self._retrying("add columns", attempt)

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

    def append_checked(
        self,
        data: pa.Table,
        *,
        check: Callable[[list[str] | None], None],
        metadata: Mapping[str, Any] | None = None,
        schema_mode: Literal["merge"] | None = None,
        app_transaction: tuple[str, int] | None = None,
    ) -> int:
        """Append ``data`` as one commit that is never rebased blindly over another commit.

        The commit is tried on the loaded version only. When another writer committed
        first, the log moves forward and ``check`` sees what changed before the next
        attempt: the table-relative paths of the data files added since (or None when
        files were also removed, or the table is partitioned: then ``check`` must look
        at the whole table). ``check`` raises (e.g. DuplicateKeyError) to abandon the
        append; otherwise it is retried until :attr:`commit_timeout`.

        Returns:
            The committed version.

        Raises:
            CommitConflict: still conflicting at the deadline. Whatever ``check`` raises.
        """
        self._check_writable()
        self.check_new_rows(data, "append")
        props = self._props(metadata, app_transaction=app_transaction, retries=0)
        with self._lock:
            deadline = self._clock() + self.commit_timeout
            attempt = 0
            while True:
                try:
                    with _translated("append"):
                        write_deltalake(
                            self._dt,
                            data,
                            mode="append",
                            schema_mode=schema_mode,
                            commit_properties=props,
                        )
                        return int(self._dt.version())
                except CommitConflict as err:
                    with _translated("refresh table"):
                        before = self._dt._table.get_add_file_sizes()
                        self._dt.update_incremental()
                        after = self._dt._table.get_add_file_sizes()
                    if self._read_table_id() != self._table_id:
                        self._reload("its metaData id changed")
                        check(None)
                    elif self.partition_columns or any(p not in after for p in before):
                        check(None)
                    else:
                        check([p for p in after if p not in before])
                    self._wait_after_conflict("append", attempt, deadline, err)
                    attempt += 1

    def read_file_columns(self, paths: Sequence[str], columns: Sequence[str]) -> pa.Table:
        """Read ``columns`` of the given data files (table-relative paths), concatenated.

        Only for tables without partition columns (their values are not in the files).
        """
        import io
        from urllib.parse import unquote

        import pyarrow.parquet as pq

        from posixlake._objstore import open_store

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

    def delete(
        self, predicate: str | None, *, metadata: Mapping[str, Any] | None = None
    ) -> tuple[int, int | None]:
        """Delete rows matching ``predicate`` (all rows when None) in one commit.

        Returns:
            (rows deleted, new version or None when nothing matched and nothing was committed)
        """
        self._check_writable()
        with self._lock:
            before = self._dt.version()

            def attempt() -> dict[str, Any]:
                return self._dt.delete(predicate, commit_properties=self._props(metadata))

            if predicate is not None:
                self._check_rewrite_safe("delete")
            result = self._retrying("delete", attempt, query=True)
            after = self._dt.version()
            if after == before:
                return 0, None
            reported = result.get("num_deleted_rows")
            with_dvs = "deletionVectors" in set(self._dt.protocol().reader_features or ())
            if (
                reported is None
                or (not reported and result.get("num_removed_files"))
                or (with_dvs and result.get("num_removed_files"))
            ):
                # delta-rs counts the rows of files a partition predicate removes whole
                # from their statistics: a file without numRecords counts 0, and a file
                # with a deletion vector counts its deleted rows again; count instead
                rows = self._count_at(after - 1) - self._count_at(after)
            else:
                rows = int(reported)
            return rows, after

    def update(
        self,
        predicate: str | None,
        updates: Mapping[str, str],
        *,
        metadata: Mapping[str, Any] | None = None,
    ) -> tuple[int, int | None]:
        """Set columns to SQL expressions where ``predicate`` holds, in one commit.

        Returns:
            (rows updated, new version or None when nothing was committed)
        """
        self._check_writable()
        with self._lock:
            before = self._dt.version()

            def attempt() -> dict[str, Any]:
                return self._dt.update(
                    updates=dict(updates),
                    predicate=predicate,
                    commit_properties=self._props(metadata),
                )

            self._check_rewrite_safe("update")
            self._check_updated_partitions(predicate, updates)
            result = self._retrying("update", attempt, query=True)
            rows = int(result.get("num_updated_rows", 0) or 0)
            after = self._dt.version()
            return rows, (after if after != before else None)

    def merge_ops(
        self,
        source: pa.Table,
        key: Sequence[str],
        *,
        op_column: str = "_op",
        metadata: Mapping[str, Any] | None = None,
    ) -> tuple[int, int, int, int | None]:
        """Apply INSERT / UPDATE / DELETE rows of ``source`` (by ``op_column``) in one commit.

        Returns:
            (inserted, updated, deleted, new version or None when nothing changed)
        """
        self._check_writable()
        from posixlake._merge import SET_PREFIX

        data_cols = [
            c for c in source.column_names if c != op_column and not c.startswith(SET_PREFIX)
        ]
        predicate = " AND ".join(f"t.{quote_ident(k)} = s.{quote_ident(k)}" for k in key)
        op = f"s.{quote_ident(op_column)}"

        def assign(c: str) -> str:
            mask = SET_PREFIX + c
            if mask in source.column_names:
                return f"CASE WHEN s.{quote_ident(mask)} THEN s.{quote_ident(c)} ELSE t.{quote_ident(c)} END"
            return f"s.{quote_ident(c)}"

        set_cols = {quote_ident(c): assign(c) for c in data_cols if c not in key}
        all_cols = {quote_ident(c): f"s.{quote_ident(c)}" for c in data_cols}
        with self._lock:
            before = self._dt.version()

            def attempt() -> dict[str, Any]:
                merger = self._dt.merge(
                    source,
                    predicate,
                    source_alias="s",
                    target_alias="t",
                    commit_properties=self._props(metadata),
                )
                if set_cols:
                    merger = merger.when_matched_update(
                        updates=set_cols, predicate=f"{op} = 'UPDATE'"
                    )
                merger = merger.when_matched_delete(predicate=f"{op} = 'DELETE'")
                merger = merger.when_not_matched_insert(
                    updates=all_cols, predicate=f"{op} = 'INSERT'"
                )
                return merger.execute()

            self._check_rewrite_safe("merge")
            self.check_new_rows(source, "merge", dml=True)
            result = self._retrying("merge", attempt)
            after = self._dt.version()
            return (
                int(result.get("num_target_rows_inserted", 0) or 0),
                int(result.get("num_target_rows_updated", 0) or 0),
                int(result.get("num_target_rows_deleted", 0) or 0),
                after if after != before else None,
            )

    def compact(
        self,
        *,
        target_size: int | None = None,
        partition_filters: list[tuple[str, str, Any]] | None = None,
    ) -> tuple[dict[str, Any], int | None]:
        """Run OPTIMIZE (bin-packing compaction); return delta-rs metrics and the new version."""
        self._check_writable()
        with self._lock:
            before = self._dt.version()

            def attempt() -> dict[str, Any]:
                return self._dt.optimize.compact(
                    partition_filters=partition_filters,
                    target_size=target_size,
                    commit_properties=self._props(None),
                )

            self._check_rewrite_safe("optimize")
            result = self._retrying("optimize", attempt)
            after = self._dt.version()
            return result, (after if after != before else None)

    def z_order(
        self,
        columns: Sequence[str],
        *,
        target_size: int | None = None,
        partition_filters: list[tuple[str, str, Any]] | None = None,
    ) -> tuple[dict[str, Any], int | None]:
        """Run Z-ORDER on ``columns``; return delta-rs metrics and the new version."""
        self._check_writable()
        with self._lock:
            before = self._dt.version()

            def attempt() -> dict[str, Any]:
                return self._dt.optimize.z_order(
                    list(columns),
                    partition_filters=partition_filters,
                    target_size=target_size,
                    commit_properties=self._props(None),
                )

            self._check_rewrite_safe("z-order")
            result = self._retrying("z-order", attempt)
            after = self._dt.version()
            return result, (after if after != before else None)

    def vacuum(
        self, retention_hours: int | None, *, dry_run: bool, enforce_retention_duration: bool
    ) -> list[str]:
        """Delete (or list, with ``dry_run``) files no longer referenced and older than the retention.

        Returns:
            The table-relative paths of the files deleted (or that would be). delta-rs
            lists every expired tombstone, also files an earlier vacuum already deleted;
            those are left out, and when nothing is left no vacuum is committed.
        """
        self._check_writable()
        from posixlake._objstore import open_store

        with self._lock, _translated("vacuum"):
            listed = self._dt.vacuum(
                retention_hours=retention_hours,
                dry_run=True,
                enforce_retention_duration=enforce_retention_duration,
            )
            store = open_store(self.uri, self.storage_options)
            present = [p for p in (self._relative(f) for f in listed) if store.exists(p)]
            if present and not dry_run:
                self._dt.vacuum(
                    retention_hours=retention_hours,
                    dry_run=False,
                    enforce_retention_duration=enforce_retention_duration,
                )
            return present

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
