"""What the original posixlake (the Rust project, 0.4.0 on PyPI) leaves in tables and backups.

Its tables are Delta tables plus a sidecar folder ``_metadata/`` (not Delta):

``_metadata/users.json``
    ``{"users": {name: {"username", "password_hash": "$2b$12$...", "roles": [...],
    "created_at": epoch_ms}}}``: bcrypt hashes; roles ``admin`` (every permission),
    ``read`` (read) and ``write`` (write only: no read, no delete); other role names
    grant nothing.
``_metadata/schema.json``
    ``{"version", "fields": [...], "primary_key": "id" | null}``, written by its
    ``set_primary_key``: the table's primary key (the original keeps none in Delta).
``_metadata/audit.json``, ``_metadata/schema_history.json``
    its audit trail and schema history (kept, not read).

Its backups are a copy of the table folder (every Parquet file on disk at the top level,
``_delta_log/*.json`` and ``_metadata/``) plus ``backup_metadata.json``
(``{"timestamp": ms, "total_rows", "total_files", "total_size_bytes"}``), with no
checksums. Its incremental backups hold only the log entries and Parquet files newer
than their base, and do not say which base: one is restored onto the table restored
from its base, in the same destination, as the original did.

Here they are read so that such tables stay closed without credentials (users are
checked against the bcrypt hashes, and moved into our user store at the first admin
login: :func:`posixlake.security.login`, through :mod:`posixlake.security.original`), and
their primary key is honoured. Their backups are verified and restored by
:mod:`posixlake.backup.original`.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from posixlake._authz import PERMISSIONS, Permission
from posixlake.errors import NotFound, StorageError
from posixlake.storage import ObjectStore

__all__ = [
    "BACKUP_METADATA",
    "ORIGINAL_ROLES",
    "SCHEMA_FILE",
    "USERS_FILE",
    "OriginalUser",
    "check_password",
    "has_users",
    "parse_users",
    "primary_key",
    "read_users",
    "user_record",
]

logger = logging.getLogger(__name__)

METADATA_DIR: Final = "_metadata"
USERS_FILE: Final = "_metadata/users.json"
SCHEMA_FILE: Final = "_metadata/schema.json"
BACKUP_METADATA: Final = "backup_metadata.json"
MIGRATED_BY: Final = "posixlake 0.4.0 (migrated)"

ORIGINAL_ROLES: Final[Mapping[str, frozenset[Permission]]] = {
    "admin": frozenset(PERMISSIONS),
    "read": frozenset({"read"}),
    "write": frozenset({"write"}),
}
"""The original's roles and what they grant (its ``write`` role cannot read or delete)."""

_BCRYPT_PREFIX: Final = re.compile(r"^\$2[abxy]?\$\d\d\$[./A-Za-z0-9]{53}$")
_COMMIT: Final = re.compile(r"^_delta_log/(\d{20})\.json$")
_BCRYPT_MAX_BYTES: Final = 72


# -- users -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class OriginalUser:
    """A user of ``_metadata/users.json``."""

    name: str
    password_hash: str
    roles: tuple[str, ...]
    created_at: datetime | None = None

    @property
    def permissions(self) -> frozenset[Permission]:
        """What the original granted this user."""
        out: set[Permission] = set()
        for role in self.roles:
            out |= ORIGINAL_ROLES.get(role, frozenset())
        return frozenset(out)


def _corrupt(where: str, why: str) -> StorageError:
    return StorageError(
        f"{where} (the user file of the original posixlake) is unreadable ({why}): "
        "the table stays closed; restore the file from a backup"
    )


def parse_users(data: bytes, where: str) -> dict[str, OriginalUser]:
    """Decode ``_metadata/users.json``.

    Raises:
        StorageError: the file is not the original's user file (a table with such a file
            is never opened without credentials).
    """
    try:
        doc = json.loads(data)
        raw = doc["users"]
        if not isinstance(raw, dict):
            raise TypeError("users is not an object")
    except (ValueError, KeyError, TypeError) as err:
        raise _corrupt(where, str(err)) from err
    users: dict[str, OriginalUser] = {}
    for name, rec in raw.items():
        if not isinstance(rec, dict):
            raise _corrupt(where, f"user {name!r} is not an object")
        hashed = rec.get("password_hash")
        roles = rec.get("roles", [])
        if not isinstance(hashed, str) or not isinstance(roles, list):
            raise _corrupt(where, f"user {name!r} has no password hash or roles")
        created = rec.get("created_at")
        users[str(name)] = OriginalUser(
            name=str(name),
            password_hash=hashed,
            roles=tuple(str(r) for r in roles),
            created_at=(
                datetime.fromtimestamp(created / 1000, UTC)
                if isinstance(created, int | float) and not isinstance(created, bool)
                else None
            ),
        )
    return users


def read_users(store: ObjectStore) -> dict[str, OriginalUser] | None:
    """Return the original's users of the table in ``store`` (None: it has no user file).

    Raises:
        StorageError: the file exists but is unreadable.
    """
    try:
        data = store.read_bytes(USERS_FILE)
    except NotFound:
        return None
    return parse_users(data, f"{store.uri}/{USERS_FILE}")


def has_users(store: ObjectStore) -> bool:
    """Return whether the table in ``store`` has the original's user file."""
    return store.exists(USERS_FILE)


def check_password(password: str, hashed: str) -> bool:
    """Return whether ``password`` matches an original bcrypt hash (``$2b$12$...``).

    bcrypt reads at most 72 bytes of a password: longer ones are compared on those, as
    the original did.

    Raises:
        StorageError: ``hashed`` is not a bcrypt hash.
    """
    import bcrypt

    if not _BCRYPT_PREFIX.match(hashed):
        raise StorageError("the user database holds a malformed bcrypt hash")
    secret = password.encode("utf-8")[:_BCRYPT_MAX_BYTES]
    try:
        return bool(bcrypt.checkpw(secret, hashed.encode("ascii")))
    except ValueError as err:
        raise StorageError("the user database holds a malformed bcrypt hash") from err


def user_record(user: OriginalUser) -> dict[str, Any]:
    """Return ``user`` as a record of our user database (its bcrypt hash kept).

    ``admin`` and ``read`` become our roles; the original's ``write`` (insert only)
    becomes the single ``write`` permission; other role names granted nothing there and
    are dropped (kept under ``original_roles``).
    """
    roles = [r for r in dict.fromkeys(user.roles) if r in ("admin", "read")]
    grants = ["write"] if "write" in user.roles and "admin" not in user.roles else []
    return {
        "roles": roles,
        "grants": grants,
        "password": {"alg": "bcrypt", "hash": user.password_hash},
        "created_at": user.created_at.isoformat(timespec="milliseconds")
        if user.created_at
        else None,
        "created_by": MIGRATED_BY,
        "password_changed_at": None,
        "original_roles": list(user.roles),
    }


# -- primary key -----------------------------------------------------------------------------


def primary_key(store: ObjectStore, columns: Sequence[str]) -> list[str]:
    """Return the primary key that the original's ``_metadata/schema.json`` names.

    Empty when there is no such file, it names no key, or names a column the table
    does not have (logged: the file is then ignored).
    """
    try:
        data = store.read_bytes(SCHEMA_FILE)
    except NotFound:
        return []
    try:
        key = json.loads(data).get("primary_key")
    except (ValueError, AttributeError):
        logger.warning("%s/%s is unreadable: its primary key is ignored", store.uri, SCHEMA_FILE)
        return []
    if not key:
        return []
    cols = [key] if isinstance(key, str) else list(key) if isinstance(key, list) else []
    if not cols or any(c not in columns for c in cols):
        logger.warning(
            "%s/%s names primary key %r, which is not a column of the table: ignored",
            store.uri,
            SCHEMA_FILE,
            key,
        )
        return []
    return [str(c) for c in cols]
