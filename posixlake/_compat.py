"""The original project's names, in one place: each one -> the method it stands for.

The original posixlake (Rust, 0.4.0 on PyPI) named its operations ``insert_json``,
``query_version_json``, ``create_with_s3``, ``open_with_credentials``, ... Its users' code
runs unchanged here: :class:`OriginalNames` (the base of ``DatabaseOps``, built on the
operation parts of ``posixlake/_ops/``) is the table of its method names, one line each,
``alias = canonical``. Where the original's parameters
or return value differ (``query_version(sql, version)`` returns rows, ``merge_json``
returns JSON text), the right-hand side is a small adapter defined above the table,
marked with the canonical method it calls (the constructors' adapters, ``create_with_s3``
..., are classmethods at the end of the table); :data:`ALIASES` lists every alias with its
canonical name. New code calls the canonical, keyword-based form.

The original's module-level backup functions (``from posixlake import restore, ...``)
are at the end; their keyword names are the original's (``backup_path``,
``restore_path``, ``transaction_id``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final, Protocol, Self, TypeVar

import pyarrow as pa

from posixlake._ops.args import as_of, partition_filters
from posixlake._ops.backups import BackupOps
from posixlake._ops.buffered import BufferedOps
from posixlake._ops.maintenance import MaintenanceOps
from posixlake._ops.reads import ReadOps
from posixlake._ops.users import UserOps
from posixlake._ops.writes import WriteOps
from posixlake.backup import BackupMetadata, RestoreResult, VerifyReport, check_backup_credentials
from posixlake.errors import InvalidOperation, VersionError
from posixlake.result import QueryResult, WriteResult
from posixlake.storage import StorageConfig, normalize_uri, storage_options_for
from posixlake.types import OptimizeResult

__all__ = [
    "ALIASES",
    "OriginalNames",
    "get_backup_metadata",
    "get_backup_metadata_with_credentials",
    "restore",
    "restore_to_transaction",
    "restore_to_transaction_with_credentials",
    "restore_with_credentials",
    "verify_backup",
    "verify_backup_with_credentials",
]

_F = TypeVar("_F", bound=Callable[..., Any])
PathArg = str | os.PathLike[str]
TimePoint = datetime | int | float | str


class _Constructors(Protocol):
    """The constructors the original's ``create_with_*`` / ``open_with_*`` call
    (``DatabaseOps.create`` and ``DatabaseOps.open``)."""

    @classmethod
    def create(cls, *args: Any, **kwargs: Any) -> Self: ...

    @classmethod
    def open(cls, *args: Any, **kwargs: Any) -> Self: ...


_Db = TypeVar("_Db", bound=_Constructors)


def _adapts(canonical: str) -> Callable[[_F], _F]:
    """Mark an adapter with the canonical method it calls (its docstring says so too)."""

    def mark(fn: _F) -> _F:
        fn.__doc__ = f"The original's name for ``{canonical}``. {fn.__doc__ or ''}".strip()
        fn.__dict__["canonical"] = canonical
        return fn

    return mark


# -- adapters: the original's parameters and return values onto the canonical method ----


@_adapts("insert")
def _insert_json(self: OriginalNames, json_data: Any) -> WriteResult:
    return self.insert(json_data)


@_adapts("insert_buffered")
def _insert_buffered_json(self: OriginalNames, json_data: Any) -> WriteResult:
    return self.insert_buffered(json_data)


@_adapts("merge")
def _merge_json(self: OriginalNames, json_data: Any, join_column: str | None = None) -> str:
    """Returns the merge metrics as JSON."""
    return json.dumps(self.merge(json_data, join_column).to_dict())


@_adapts("query")
def _query_json(self: OriginalNames, sql: str) -> str:
    """Returns the rows as JSON."""
    return self.query(sql).to_json()


@_adapts("query")
def _query_version(self: OriginalNames, sql: str, version: int) -> QueryResult:
    """``query(sql, version=version)``."""
    return self.query(sql, version=version)


@_adapts("query")
def _query_version_json(self: OriginalNames, sql: str, version: int) -> str:
    """``query(sql, version=version)``, the rows as JSON."""
    return self.query(sql, version=version).to_json()


def _before_creation(self: OriginalNames, timestamp: TimePoint) -> bool:
    """Return whether ``timestamp`` is before the table's first commit (version 0)."""
    when = as_of(timestamp)
    commits = self.history()
    first = min(commits, key=lambda c: c.version, default=None)
    # Without version 0 in the log (expired log entries), "before creation" is unknown.
    return first is not None and first.version == 0 and when < first.timestamp


def _query_at_time(self: OriginalNames, sql: str, timestamp: TimePoint) -> QueryResult:
    """``query(sql, as_of=timestamp)``, with no rows at a time before the table existed.

    The original answered a time before the table was created with no rows (``[]``);
    ``query(as_of=)`` raises VersionError there, as there is no such version.
    """
    try:
        return self.query(sql, as_of=timestamp)
    except VersionError:
        if _before_creation(self, timestamp):
            return QueryResult(pa.table({}))
        raise


@_adapts("query")
def _query_timestamp(self: OriginalNames, sql: str, timestamp_ms: TimePoint) -> QueryResult:
    """``query(sql, as_of=timestamp_ms)``: epoch milliseconds (or seconds), ISO text; no
    rows before the table existed, as in the original."""
    return _query_at_time(self, sql, timestamp_ms)


@_adapts("query")
def _query_timestamp_json(self: OriginalNames, sql: str, timestamp_ms: TimePoint) -> str:
    """``query(sql, as_of=timestamp_ms)``, the rows as JSON; ``[]`` before the table
    existed, as in the original."""
    return _query_at_time(self, sql, timestamp_ms).to_json()


@_adapts("query")
def _query_json_at_timestamp(self: OriginalNames, sql: str, timestamp: TimePoint) -> str:
    """``query(sql, as_of=timestamp)``, the rows as JSON (epoch seconds or ms); ``[]``
    before the table existed, as in the original."""
    return _query_at_time(self, sql, timestamp).to_json()


@_adapts("uri")
def _get_base_path(self: OriginalNames) -> str:
    return self.uri


@_adapts("version")
def _get_current_version(self: OriginalNames) -> int:
    return self.version


@_adapts("history")
def _get_version_history(self: OriginalNames, limit: int | None = None) -> list[dict[str, Any]]:
    """Returns dicts with version, timestamp (epoch ms), operation and user."""
    return [
        {
            "version": c.version,
            "timestamp": int(c.timestamp.timestamp() * 1000),
            "operation": c.operation,
            "user": c.user,
        }
        for c in self.history(limit)
    ]


@_adapts("vacuum")
def _vacuum_dry_run(self: OriginalNames, retention_hours: int | None = None) -> list[str]:
    """``vacuum(retention_hours, dry_run=True).files``."""
    return list(self.vacuum(retention_hours, dry_run=True).files)


@_adapts("optimize.compact")
def _optimize_with_target_size(self: OriginalNames, target_size_bytes: int) -> OptimizeResult:
    """``optimize.compact(target_size=target_size_bytes)``."""
    return self.optimize.compact(target_size=target_size_bytes)


@_adapts("optimize.compact")
def _optimize_with_filter(
    self: OriginalNames, filter: str | list[tuple[str, str, Any]]
) -> OptimizeResult:
    """``optimize.compact(partition_filters=...)``: ``[("day", "=", "2024-01-01")]`` or
    the text form ``"day = '2024-01-01'"`` (conditions joined with AND)."""
    return self.optimize.compact(partition_filters=partition_filters(filter))


@_adapts("optimize.z_order")
def _zorder(
    self: OriginalNames, columns: Sequence[str], *, target_size: int | None = None
) -> OptimizeResult:
    return self.optimize.z_order(columns, target_size=target_size)


@_adapts("restore")
def _restore_with_credentials(
    backup: PathArg, dest: PathArg, username: str, password: str, **options: Any
) -> RestoreResult:
    """``restore(backup, dest, credentials=(username, password))``."""
    return BackupOps.restore(backup, dest, credentials=(username, password), **options)


@_adapts("restore_to_transaction")
def _restore_to_transaction_with_credentials(
    backup: PathArg,
    dest: PathArg,
    target: int | datetime | str,
    username: str,
    password: str,
    **options: Any,
) -> RestoreResult:
    """``restore_to_transaction(..., credentials=(username, password))``."""
    return BackupOps.restore_to_transaction(
        backup, dest, target, credentials=(username, password), **options
    )


# -- the table -------------------------------------------------------------------------


class OriginalNames(WriteOps, BufferedOps, ReadOps, MaintenanceOps, UserOps, BackupOps):
    """The original project's method names on ``DatabaseOps``: ``alias = canonical``."""

    # same parameters: the canonical method itself
    delete = WriteOps.delete_rows_where
    flush_write_buffer = BufferedOps.flush
    get_history = ReadOps.history
    # adapters (each names its canonical method)
    insert_json = _insert_json  # insert
    insert_buffered_json = _insert_buffered_json  # insert_buffered
    merge_json = _merge_json  # merge -> JSON
    query_json = _query_json  # query -> JSON
    query_version = _query_version  # query(version=)
    query_version_json = _query_version_json  # query(version=) -> JSON
    query_json_at_version = _query_version_json  # query(version=) -> JSON
    query_timestamp = _query_timestamp  # query(as_of=)
    query_timestamp_json = _query_timestamp_json  # query(as_of=) -> JSON
    query_json_at_timestamp = _query_json_at_timestamp  # query(as_of=) -> JSON
    get_base_path = _get_base_path  # uri
    get_current_version = _get_current_version  # version
    get_version_history = _get_version_history  # history -> dicts
    vacuum_dry_run = _vacuum_dry_run  # vacuum(dry_run=True)
    optimize_with_target_size = _optimize_with_target_size  # optimize.compact(target_size=)
    optimize_with_filter = _optimize_with_filter  # optimize.compact(partition_filters=)
    zorder = _zorder  # optimize.z_order
    restore_with_credentials = staticmethod(_restore_with_credentials)  # restore
    restore_to_transaction_with_credentials = staticmethod(
        _restore_to_transaction_with_credentials
    )  # restore_to_transaction

    # the constructors: generic in the class, so that ``DatabaseOps.open_with_s3(...)``
    # is typed as returning a DatabaseOps

    @classmethod
    @_adapts("create")
    def create_with_s3(
        cls: type[_Db], /, s3_path: str, schema: Any, s3_config: StorageConfig, **options: Any
    ) -> _Db:
        """``create(s3_path, schema, storage=s3_config)``."""
        return cls.create(s3_path, schema, storage=s3_config, **options)

    @classmethod
    @_adapts("open")
    def open_with_s3(
        cls: type[_Db], /, s3_path: str, s3_config: StorageConfig, **options: Any
    ) -> _Db:
        """``open(s3_path, storage=s3_config)``."""
        return cls.open(s3_path, storage=s3_config, **options)

    @classmethod
    @_adapts("create")
    def create_with_azure(
        cls: type[_Db],
        /,
        azure_path: str,
        schema: Any,
        azure_config: StorageConfig,
        **options: Any,
    ) -> _Db:
        """``create(azure_path, schema, storage=azure_config, create_bucket=True)``: like the
        original, it creates a missing container."""
        options.setdefault("create_bucket", True)
        return cls.create(azure_path, schema, storage=azure_config, **options)

    @classmethod
    @_adapts("open")
    def open_with_azure(
        cls: type[_Db], /, azure_path: str, azure_config: StorageConfig, **options: Any
    ) -> _Db:
        """``open(azure_path, storage=azure_config)``."""
        return cls.open(azure_path, storage=azure_config, **options)

    @classmethod
    @_adapts("create")
    def create_with_auth(
        cls: type[_Db],
        /,
        path: PathArg,
        schema: Any,
        auth_enabled: bool = True,
        **options: Any,
    ) -> _Db:
        """``create(path, schema, auth=auth_enabled, bootstrap=True)``. Without
        ``credentials=``, the new handle is the bootstrap admin ``system`` until it is closed:
        ``db.create_user("admin", "secret", ["admin"])`` is the original's flow."""
        return cls.create(path, schema, auth=auth_enabled, bootstrap=True, **options)

    @classmethod
    @_adapts("open")
    def open_with_credentials(
        cls: type[_Db],
        /,
        path: PathArg,
        username: str | tuple[str, str],
        password: str | None = None,
        **options: Any,
    ) -> _Db:
        """``open(path, credentials=...)``: takes ``(path, username, password)`` or
        ``(path, Credentials(username, password))``."""
        if isinstance(username, tuple):
            if password is not None:
                raise InvalidOperation("give Credentials or a username and password, not both")
            return cls.open(path, credentials=username, **options)
        if password is None:
            raise InvalidOperation("open_with_credentials needs a password")
        return cls.open(path, credentials=(username, password), **options)


def _canonical(name: str, value: Any) -> str:
    fn = value.__func__ if isinstance(value, classmethod | staticmethod) else value
    return str(getattr(fn, "canonical", getattr(fn, "__name__", name)))


#: every method alias of the original and the canonical method it calls
ALIASES: Final[Mapping[str, str]] = {
    name: _canonical(name, value)
    for name, value in vars(OriginalNames).items()
    if not name.startswith("_")
}


# -- the original's module-level backup functions ------------------------------------------


def _login(backup_path: PathArg, username: str, password: str, storage: Any) -> None:
    uri = normalize_uri(backup_path)
    check_backup_credentials(
        uri, (username, password), "read", storage_options=storage_options_for(uri, storage)
    )


def get_backup_metadata(backup_path: PathArg, **options: Any) -> BackupMetadata:
    """Alias of :meth:`DatabaseOps.get_backup_metadata` (original name)."""
    return BackupOps.get_backup_metadata(backup_path, **options)


def get_backup_metadata_with_credentials(
    backup_path: PathArg, username: str, password: str, **options: Any
) -> BackupMetadata:
    """Check the user against the backup's users (read permission), then return its metadata.

    Raises:
        AuthenticationError / PermissionDenied: for a backup of an auth-enabled table.
    """
    _login(backup_path, username, password, options.get("storage"))
    return BackupOps.get_backup_metadata(backup_path, **options)


def verify_backup(backup_path: PathArg, **options: Any) -> VerifyReport:
    """Alias of :meth:`DatabaseOps.verify_backup` (original name)."""
    return BackupOps.verify_backup(backup_path, **options)


def verify_backup_with_credentials(
    backup_path: PathArg, username: str, password: str, **options: Any
) -> VerifyReport:
    """Check the user against the backup's users (read permission), then verify it."""
    _login(backup_path, username, password, options.get("storage"))
    return BackupOps.verify_backup(backup_path, **options)


def restore(backup_path: PathArg, restore_path: PathArg, **options: Any) -> RestoreResult:
    """Alias of :meth:`DatabaseOps.restore` (original name)."""
    return BackupOps.restore(backup_path, restore_path, **options)


def restore_with_credentials(
    backup_path: PathArg, restore_path: PathArg, username: str, password: str, **options: Any
) -> RestoreResult:
    """Alias of ``DatabaseOps.restore(..., credentials=(username, password))``."""
    return _restore_with_credentials(backup_path, restore_path, username, password, **options)


def restore_to_transaction(
    backup_path: PathArg, restore_path: PathArg, transaction_id: int, **options: Any
) -> RestoreResult:
    """Alias of :meth:`DatabaseOps.restore_to_transaction`: a version, or epoch ms."""
    return BackupOps.restore_to_transaction(backup_path, restore_path, transaction_id, **options)


def restore_to_transaction_with_credentials(
    backup_path: PathArg,
    restore_path: PathArg,
    transaction_id: int,
    username: str,
    password: str,
    **options: Any,
) -> RestoreResult:
    """Alias of ``restore_to_transaction(..., credentials=(username, password))``."""
    return _restore_to_transaction_with_credentials(
        backup_path, restore_path, transaction_id, username, password, **options
    )
