"""The state every part of the facade shares, and the steps every operation takes.

:class:`Table` is one handle's table: its Delta log, engine, authorizer, counters and
clock, with the steps every operation goes through (the permission check, the write scope
— the table lock, a refresh, commit counting — and commit metadata). It knows nothing of
the facade, so the groups (``db.users``, ``db.backups``, ``db.optimize``) and the create
path hold a :class:`Table`, not the handle.

:class:`TableCore` is the handle's own state (it builds the :class:`Table` and the write
buffer in its ``__init__``, where every attribute is declared) and the shared steps that
need it: the append of a conformed table (with the primary-key check), time-travel
snapshots, and the table's properties. The operation mixins (``posixlake/_ops/*.py``) are
built on it.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from types import TracebackType
from typing import Any, Concatenate, Final, Literal, ParamSpec, Protocol, TypeVar, cast

import pyarrow as pa
import pyarrow.compute as pc

from posixlake import buffer as buffer_mod
from posixlake._authz import AllowAll, Authorizer, Permission
from posixlake._keys import KeyIndex
from posixlake._merge import OP_COLUMN, duplicate_keys, existing_mask
from posixlake._metrics import Counters
from posixlake._ops.args import as_of as as_of_point
from posixlake._ops.args import type_text
from posixlake.buffer import DEFAULT_BUFFER_ROWS, WriteBuffer
from posixlake.delta import DeltaLog
from posixlake.engines import Engine
from posixlake.errors import InvalidOperation, PosixLakeError, VersionError
from posixlake.storage import StorageConfig
from posixlake.types import DECLARED_TYPES_PROPERTY, Field, Schema

__all__ = [
    "FLUSH_ID_KEY",
    "PRIMARY_KEY_PROPERTY",
    "StorageArg",
    "Table",
    "TableCore",
    "counted",
    "flat",
    "logger",
]

#: the facade's logger, whichever part of it logs (users filter on this name)
logger = logging.getLogger("posixlake.database")

PRIMARY_KEY_PROPERTY: Final = "posixlake.primaryKey"
#: commit info key naming one flush (to tell whether an interrupted flush committed)
FLUSH_ID_KEY: Final = "posixlake.flushId"

StorageArg = StorageConfig | Mapping[str, str] | None


class _HasCounters(Protocol):
    @property
    def _counters(self) -> Counters: ...


_S = TypeVar("_S", bound=_HasCounters)
_P = ParamSpec("_P")
_R = TypeVar("_R")


def counted(
    method: Callable[Concatenate[_S, _P], _R],
) -> Callable[Concatenate[_S, _P], _R]:
    """Count a call that raises a PosixLakeError in ``get_metrics().errors`` (once)."""

    def wrapper(self: _S, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(self, *args, **kwargs)
        except PosixLakeError as err:
            self._counters.failed(err)
            raise

    functools.update_wrapper(wrapper, method)
    return wrapper


def flat(
    group: str, method: Callable[Concatenate[Any, _P], _R]
) -> Callable[Concatenate[TableCore, _P], _R]:
    """Make a flat method (``db.create_user``) of a group's method (``db.users.create``).

    The flat name takes the group method's parameters (``inspect.signature`` shows them)
    and calls it on ``getattr(db, group)``.
    """

    def call(self: TableCore, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        return method(getattr(self, group), *args, **kwargs)

    functools.update_wrapper(call, method)
    call.__doc__ = f"Same as ``db.{group}.{method.__name__}`` (:meth:`{method.__qualname__}`)."
    return call


class Table:
    """One handle's table and the steps every operation takes (see the module docstring).

    Holds no reference to the handle: a group made from it (``db.users``) keeps nothing
    else alive.
    """

    def __init__(
        self, log: DeltaLog, *, engine: Engine, authorizer: Authorizer, clock: Callable[[], float]
    ) -> None:
        self.log: Final = log
        self.engine: Final = engine
        #: the permission checker; :meth:`DatabaseOps.enable_auth` replaces it
        self.auth: Authorizer = authorizer
        self.clock: Final = clock
        self.counters: Final = Counters(clock)
        #: set once by ``close``; every permission check then fails
        self.closed = False
        #: this thread's commit tags (``DatabaseOps.commit_tags``)
        self.tags: Final = threading.local()

    def check_open(self, operation: str) -> None:
        """Raise InvalidOperation once the handle is closed."""
        if self.closed:
            raise InvalidOperation(f"{operation}: the database is closed")

    def authorize(self, permission: Permission, operation: str) -> None:
        """Check that the handle is open and its user holds ``permission``.

        Raises:
            InvalidOperation: the handle is closed. PermissionDenied: the user lacks it.
        """
        if self.closed:  # check_open, inline: this runs once per operation
            raise InvalidOperation(f"{operation}: the database is closed")
        self.auth.check(permission, operation)

    def metadata(self, operation: str) -> dict[str, str]:
        """Return the commit metadata of ``operation``: its name, the user, the tags."""
        meta = {"posixlake.operation": operation}
        if self.auth.user:
            meta["posixlake.user"] = self.auth.user
        meta.update(getattr(self.tags, "value", None) or {})
        return meta

    class _WriteScope:
        def __init__(self, table: Table, operation: str) -> None:
            self.table, self.operation = table, operation

        def __enter__(self) -> None:
            table = self.table
            table.log.lock.acquire()
            try:
                self.started = table.clock()
                self.before = table.log.refresh()
            except BaseException as err:
                table.counters.failed(err)
                table.log.lock.release()
                raise

        def __exit__(
            self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
        ) -> None:
            table = self.table
            try:
                if e is not None:
                    table.counters.failed(e)
                elif table.log.version != self.before:
                    table.counters.commit(self.started)
            finally:
                table.log.lock.release()

    def write(self, operation: str) -> Table._WriteScope:
        """Hold the table lock around a write: refresh first, count the commit (or the
        failure) at the end."""
        return Table._WriteScope(self, operation)


class TableCore:
    """A handle's state and shared steps (see the module docstring)."""

    def __init__(
        self,
        log: DeltaLog,
        *,
        engine: Engine,
        authorizer: Authorizer | None = None,
        buffer_rows: int = DEFAULT_BUFFER_ROWS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._table = Table(log, engine=engine, authorizer=authorizer or AllowAll(), clock=clock)
        # the mixins' short names for the Table's fixed parts (the same objects; plain
        # attributes, not properties: they are read on every operation)
        self._log: Final = self._table.log
        self._engine: Final = self._table.engine
        self._clock: Final = self._table.clock
        self._counters: Final = self._table.counters
        self._buffer = WriteBuffer(buffer_rows)
        self._keys = KeyIndex()
        self._snapshots: OrderedDict[int, DeltaLog] = OrderedDict()
        self._snapshots_generation = log.generation
        #: the original posixlake's key (``DatabaseOps.open`` sets it for such tables)
        self._original_key: list[str] = []
        self._unflushed_reported = False
        # every handle is a DatabaseOps, whose BufferedOps part flushes at exit
        buffer_mod.track(cast("buffer_mod.Buffering", self))

    # the mixins' short names for the Table's changing parts and its steps

    @property
    def _auth(self) -> Authorizer:
        return self._table.auth

    @property
    def _closed(self) -> bool:
        return self._table.closed

    def _authorize(self, permission: Permission, operation: str) -> None:
        self._table.authorize(permission, operation)

    def _metadata(self, operation: str) -> dict[str, str]:
        return self._table.metadata(operation)

    def _write(self, operation: str) -> Table._WriteScope:
        return self._table.write(operation)

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
        local = self._table.tags
        previous = getattr(local, "value", None)
        local.value = {**(previous or {}), **tags}
        try:
            yield
        finally:
            local.value = previous

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
    ) -> int | None:
        """Append (or upsert) a conformed table in one commit; return the version it made.

        None only for an upsert that changed nothing (no commit).
        """
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
                return outcome.version
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
        return self._log.at(as_of_point(as_of))

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
    def loaded_version(self) -> int:
        """The version this handle has loaded, without listing the log (its own writes
        move it at once; :attr:`version` also catches up with other writers)."""
        return int(self._log.version)

    def try_loaded_state(self) -> tuple[int, int] | None:
        """Return (:attr:`loaded_version`, :attr:`generation`) without waiting, or None
        while another thread is committing through this handle."""
        return self._log.try_loaded_state()

    @property
    def arrow_schema(self) -> pa.Schema:
        """The table's stored Arrow schema (the physical types Delta keeps)."""
        return self._log.arrow_schema

    @property
    def partition_columns(self) -> list[str]:
        """The table's partition columns (empty when it has none)."""
        return list(self._log.partition_columns)

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
            Field(f.name, declared.get(f.name) or type_text(f.type), f.nullable)
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
