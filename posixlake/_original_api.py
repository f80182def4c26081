"""The original project's module-level backup functions, as thin aliases.

``from posixlake import restore, verify_backup, ...`` works as it did with the original;
each function forwards to the keyword-based implementation on :class:`DatabaseOps`
(its ``DatabaseOps`` method aliases are grouped at the end of that class). Keyword
names are the original's (``backup_path``, ``restore_path``, ``transaction_id``);
extra keywords (``storage=``, ``workers=``, ...) are those of the implementation.
"""

from __future__ import annotations

import os
from typing import Any

from posixlake.backup import BackupMetadata, RestoreResult, VerifyReport, check_backup_credentials
from posixlake.database import DatabaseOps
from posixlake.storage import normalize_uri, storage_options_for

__all__ = [
    "get_backup_metadata",
    "get_backup_metadata_with_credentials",
    "restore",
    "restore_to_transaction",
    "restore_to_transaction_with_credentials",
    "restore_with_credentials",
    "verify_backup",
    "verify_backup_with_credentials",
]

PathArg = str | os.PathLike[str]


def _login(backup_path: PathArg, username: str, password: str, storage: Any) -> None:
    uri = normalize_uri(backup_path)
    check_backup_credentials(
        uri, (username, password), "read", storage_options=storage_options_for(uri, storage)
    )


def get_backup_metadata(backup_path: PathArg, **options: Any) -> BackupMetadata:
    """Alias of :meth:`DatabaseOps.get_backup_metadata` (original name)."""
    return DatabaseOps.get_backup_metadata(backup_path, **options)


def get_backup_metadata_with_credentials(
    backup_path: PathArg, username: str, password: str, **options: Any
) -> BackupMetadata:
    """Check the user against the backup's users (read permission), then return its metadata.

    Raises:
        AuthenticationError / PermissionDenied: for a backup of an auth-enabled table.
    """
    _login(backup_path, username, password, options.get("storage"))
    return DatabaseOps.get_backup_metadata(backup_path, **options)


def verify_backup(backup_path: PathArg, **options: Any) -> VerifyReport:
    """Alias of :meth:`DatabaseOps.verify_backup` (original name)."""
    return DatabaseOps.verify_backup(backup_path, **options)


def verify_backup_with_credentials(
    backup_path: PathArg, username: str, password: str, **options: Any
) -> VerifyReport:
    """Check the user against the backup's users (read permission), then verify it."""
    _login(backup_path, username, password, options.get("storage"))
    return DatabaseOps.verify_backup(backup_path, **options)


def restore(backup_path: PathArg, restore_path: PathArg, **options: Any) -> RestoreResult:
    """Alias of :meth:`DatabaseOps.restore` (original name)."""
    return DatabaseOps.restore(backup_path, restore_path, **options)


def restore_with_credentials(
    backup_path: PathArg, restore_path: PathArg, username: str, password: str, **options: Any
) -> RestoreResult:
    """Alias of ``DatabaseOps.restore(..., credentials=(username, password))``."""
    return DatabaseOps.restore_with_credentials(
        backup_path, restore_path, username, password, **options
    )


def restore_to_transaction(
    backup_path: PathArg, restore_path: PathArg, transaction_id: int, **options: Any
) -> RestoreResult:
    """Alias of :meth:`DatabaseOps.restore_to_transaction`: a version, or epoch ms."""
    return DatabaseOps.restore_to_transaction(backup_path, restore_path, transaction_id, **options)


def restore_to_transaction_with_credentials(
    backup_path: PathArg,
    restore_path: PathArg,
    transaction_id: int,
    username: str,
    password: str,
    **options: Any,
) -> RestoreResult:
    """Alias of ``restore_to_transaction(..., credentials=(username, password))``."""
    return DatabaseOps.restore_to_transaction_with_credentials(
        backup_path, restore_path, transaction_id, username, password, **options
    )
