"""Backup and restore (``posixlake.backup``): the ``db.backups`` group, the flat
``backup`` / ``backup_incremental`` names, and the static restore and inspection calls."""

from __future__ import annotations

import os
from datetime import datetime
from typing import TYPE_CHECKING, Any

from posixlake._ops.core import StorageArg, Table, TableCore, counted, flat
from posixlake.backup import (
    DEFAULT_WORKERS,
    EPOCH_MS_THRESHOLD,
    BackupMetadata,
    Progress,
    RestoreResult,
    VerifyReport,
)
from posixlake.storage import normalize_uri, storage_options_for

if TYPE_CHECKING:
    from posixlake._metrics import Counters

__all__ = ["BackupOps", "Backups"]


class Backups:
    """``db.backups``: copies of this table, full or incremental (backup permission)."""

    def __init__(self, table: Table) -> None:
        self._table = table

    @property
    def _counters(self) -> Counters:
        return self._table.counters

    @counted
    def create(
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

        table = self._table
        table.authorize("backup", "backup")
        dest_uri = normalize_uri(backup_path)
        return backup_mod.create_backup(
            table.log,
            dest_uri,
            storage_options=_options_near(table, dest_uri, storage),
            user=table.auth.user,
            authorizer=table.auth,
            overwrite=overwrite,
            progress=progress,
            workers=workers,
        )

    @counted
    def incremental(
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

        table = self._table
        table.authorize("backup", "backup_incremental")
        dest_uri, base_uri = normalize_uri(incremental_path), normalize_uri(base_backup_path)
        return backup_mod.create_backup(
            table.log,
            dest_uri,
            base=base_uri,
            storage_options=_options_near(table, dest_uri, storage),
            base_storage_options=_options_near(table, base_uri, base_storage),
            user=table.auth.user,
            authorizer=table.auth,
            overwrite=overwrite,
            progress=progress,
            workers=workers,
        )


def _options_near(table: Table, uri: str, storage: StorageArg) -> dict[str, str] | None:
    if storage is not None:
        return storage_options_for(uri, storage)
    mine = table.log.uri
    if "://" in uri and uri.split("://", 1)[0] == mine.split("://", 1)[0] and "://" in mine:
        return table.log.storage_options
    return None


class BackupOps(TableCore):
    """``db.backups``, ``backup`` / ``backup_incremental``, and the static calls that need
    no table handle (verify, inspect, restore)."""

    @property
    def backups(self) -> Backups:
        """Backups of this table: ``db.backups.create(path)``, ``.incremental(base, path)``."""
        return Backups(self._table)

    # the flat names, each the db.backups method of the same parameters
    backup = flat("backups", Backups.create)
    backup_incremental = flat("backups", Backups.incremental)

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
            return BackupOps.restore(backup, dest, version=target, **options)
        return BackupOps.restore(backup, dest, as_of=target, **options)
