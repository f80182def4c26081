"""Who may restore a backup: the users stored in it (ours, or the original posixlake's)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

from posixlake import _original
from posixlake._authz import Permission
from posixlake.backup.chain import StoredBackup, backup_chain, open_backup
from posixlake.backup.manifest import BackupCorrupted
from posixlake.errors import PermissionDenied
from posixlake.security.original import restore_user
from posixlake.storage import normalize_uri

__all__ = [
    "check_backup_credentials",
    "check_restore_credentials",
]


_USERS_FILE = re.compile(r"^_posixlake/users/(\d{20})\.json$")


def check_backup_credentials(
    path: str | os.PathLike[str],
    credentials: Any,
    permission: Permission = "read",
    *,
    storage_options: Mapping[str, str] | None = None,
) -> str | None:
    """Authenticate ``credentials`` against the users stored in a backup.

    Returns the user name, or None for a backup of a table without users (credentials
    are then not needed and ignored, as when opening such a table).

    Raises:
        NotFound: no backup at ``path``. AuthenticationError: missing or wrong
            credentials. PermissionDenied: the user lacks ``permission``.
    """
    uri = normalize_uri(path)
    top = open_backup(uri, storage_options)
    if not top.manifest.auth:
        return None
    return check_restore_credentials(
        top, backup_chain(top, storage_options), credentials, permission
    )


def check_restore_credentials(
    top: StoredBackup,
    chain: Mapping[str, StoredBackup],
    credentials: Any,
    permission: Permission = "restore",
) -> str | None:
    """Return the user of the backup that ``credentials`` log in as (None: a table without users).

    Raises:
        AuthenticationError: missing or wrong credentials. PermissionDenied: no ``permission``.
        BackupCorrupted: an auth-enabled table's backup without its user database.
    """
    from posixlake import security

    m = top.manifest
    if not m.auth:
        return None
    users = sorted(
        (int(mm.group(1)), f)
        for f in m.files.values()
        if (mm := _USERS_FILE.match(f.path)) is not None
    )
    if not users and _original.USERS_FILE in m.files:
        return _check_original_credentials(top, chain, credentials)
    if not users:
        raise BackupCorrupted(
            f"{top.uri}: a backup of an auth-enabled table without its user database"
        )
    version, f = users[-1]
    db = security.UserDb.parse(chain[f.backup_id].read(f), version=version)
    name = security.check_credentials(db, credentials)
    if permission not in db.permissions(name):
        raise PermissionDenied(f"{permission}: user {name!r} lacks the {permission!r} permission")
    return name


def _check_original_credentials(
    top: StoredBackup, chain: Mapping[str, StoredBackup], credentials: Any
) -> str:
    """Check credentials against the original posixlake's users held in a backup."""
    f = top.manifest.files[_original.USERS_FILE]
    holder = chain[f.backup_id]
    users = _original.parse_users(holder.read(f), holder.file_uri(f.path))
    return restore_user(users, credentials)
