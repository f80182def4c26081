"""What backup, verify and restore return."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

__all__ = [
    "BackupMetadata",
    "RestoreResult",
    "VerifyReport",
]


@dataclass(frozen=True)
class BackupMetadata:
    """What a backup holds (``get_backup_metadata``, and the result of ``backup``)."""

    path: str
    backup_id: str
    kind: Literal["full", "incremental"]
    table_version: int
    """The table version the backup is a copy of."""
    restorable_from: int
    """The oldest version ``restore(..., version=)`` can rebuild."""
    created_at: datetime
    created_by: str | None
    source: str
    table_id: str | None
    total_rows: int
    """Rows of the table at ``table_version``."""
    total_files: int
    """Files of the snapshot, wherever in the chain they are stored."""
    total_size_bytes: int
    files_copied: int
    """Files stored in this backup's own folder."""
    bytes_copied: int
    base: str | None
    """The base backup's location (incremental backups)."""
    base_backup_id: str | None
    auth: bool
    """The table has users: restoring needs credentials with the restore permission."""

    @property
    def timestamp(self) -> int:
        """Creation time in epoch milliseconds (the original project's field)."""
        return int(self.created_at.timestamp() * 1000)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {
            "path": self.path,
            "backup_id": self.backup_id,
            "kind": self.kind,
            "table_version": self.table_version,
            "restorable_from": self.restorable_from,
            "created_at": self.created_at.isoformat(),
            "created_by": self.created_by,
            "source": self.source,
            "table_id": self.table_id,
            "total_rows": self.total_rows,
            "total_files": self.total_files,
            "total_size_bytes": self.total_size_bytes,
            "files_copied": self.files_copied,
            "bytes_copied": self.bytes_copied,
            "base": self.base,
            "base_backup_id": self.base_backup_id,
            "auth": self.auth,
            "timestamp": self.timestamp,
        }


@dataclass(frozen=True)
class VerifyReport:
    """The result of :func:`verify_backup`. Paths are full locations of backup files."""

    path: str
    backup_id: str | None
    table_version: int | None
    chain: tuple[str, ...]
    """The backups checked, this one first, then its bases."""
    files_checked: int
    bytes_checked: int
    missing: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()
    corrupted: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    """Problems with the manifest, the chain or the log."""
    schema_errors: tuple[str, ...] = ()
    """Problems with the table schema: the Delta log's schema does not parse, or a live
    data file lacks a column or stores it as another type."""
    schema_checked: bool = False
    """Whether the schema could be checked (the log was readable and no file damaged)."""

    @property
    def ok(self) -> bool:
        """True when nothing is missing, corrupted, extra or wrong."""
        return not (
            self.missing or self.extra or self.corrupted or self.errors or self.schema_errors
        )

    @property
    def files_verified(self) -> int:
        """Alias of ``files_checked`` (the original project's field)."""
        return self.files_checked

    @property
    def total_size_bytes(self) -> int:
        """Alias of ``bytes_checked`` (the original project's field)."""
        return self.bytes_checked

    @property
    def schema_valid(self) -> bool:
        """Whether the table schema checked out (the original's field).

        True when the Delta log's schema parses as a Delta schema and every data file
        of the backed-up version holds each (non-partition) column with a matching
        Parquet type. False when that check failed or could not run.
        """
        return self.schema_checked and not self.schema_errors

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {
            "path": self.path,
            "backup_id": self.backup_id,
            "table_version": self.table_version,
            "ok": self.ok,
            "chain": list(self.chain),
            "files_checked": self.files_checked,
            "bytes_checked": self.bytes_checked,
            "missing": list(self.missing),
            "extra": list(self.extra),
            "corrupted": list(self.corrupted),
            "errors": list(self.errors),
            "schema_valid": self.schema_valid,
            "schema_errors": list(self.schema_errors),
        }


@dataclass(frozen=True)
class RestoreResult:
    """What :func:`restore` rebuilt."""

    path: str
    version: int
    backup_id: str
    files: int
    bytes: int

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {
            "path": self.path,
            "version": self.version,
            "backup_id": self.backup_id,
            "files": self.files,
            "bytes": self.bytes,
        }
