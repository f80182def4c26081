"""Users and roles: the versioned user database under ``_posixlake/users/`` and credential checks."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, cast

from posixlake._authz import PERMISSIONS, Permission
from posixlake.errors import (
    AlreadyExists,
    AuthenticationError,
    InvalidOperation,
    NotFound,
    StorageError,
)
from posixlake.security._time import parse_time
from posixlake.security.passwords import MAX_PASSWORD_LENGTH, burn_equal_time, verify_password
from posixlake.storage import ObjectStore

__all__ = [
    "BAD_CREDENTIALS",
    "KEEP_USER_VERSIONS",
    "MAX_UPDATE_ATTEMPTS",
    "ROLES",
    "USERS_PREFIX",
    "UserDb",
    "UserInfo",
    "UserStore",
    "check_credentials",
    "check_roles",
    "check_user_name",
    "credential_pair",
    "keep_an_admin",
]

logger = logging.getLogger(__name__)

USERS_PREFIX: Final = "_posixlake/users"
KEEP_USER_VERSIONS: Final = 20
MAX_UPDATE_ATTEMPTS: Final = 20

_ALL: Final = frozenset(PERMISSIONS)
ROLES: Final[Mapping[str, frozenset[Permission]]] = {
    "read": frozenset({"read"}),
    "write": frozenset({"read", "write", "delete"}),
    "admin": _ALL,
}
"""Each role and the permissions it grants."""

_USER_NAME: Final = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}$")
_VERSION_FILE: Final = re.compile(r"^(\d{20})\.json$")
BAD_CREDENTIALS: Final = "authentication failed: invalid username or password"


def check_user_name(name: Any) -> str:
    """Return ``name`` if it is a valid user name.

    Raises:
        InvalidOperation: not 1-64 letters, digits, ``_ . @ -`` (not starting with ``. @ -``).
    """
    if not isinstance(name, str) or not _USER_NAME.match(name):
        raise InvalidOperation(
            f"invalid user name {name!r}: 1-64 characters of letters, digits, _ . @ -, "
            "not starting with . @ -"
        )
    return name


def check_roles(
    roles: str | Sequence[str], permissions: str | Sequence[str]
) -> tuple[tuple[str, ...], tuple[Permission, ...]]:
    """Return known ``roles`` and single ``permissions`` without repeats.

    Raises:
        InvalidOperation: an unknown role or permission, or neither given.
    """
    role_list = [roles] if isinstance(roles, str) else list(roles)
    perm_list = [permissions] if isinstance(permissions, str) else list(permissions)
    for r in role_list:
        if r not in ROLES:
            raise InvalidOperation(f"unknown role {r!r}: roles are {sorted(ROLES)}")
    for p in perm_list:
        if p not in PERMISSIONS:
            raise InvalidOperation(f"unknown permission {p!r}: permissions are {list(PERMISSIONS)}")
    if not role_list and not perm_list:
        raise InvalidOperation("a user needs at least one role or permission")
    return tuple(dict.fromkeys(role_list)), tuple(
        cast(Permission, p) for p in dict.fromkeys(perm_list)
    )


def _effective(roles: Iterable[str], grants: Iterable[str]) -> frozenset[Permission]:
    perms: set[Permission] = set()
    for r in roles:
        perms |= ROLES.get(r, frozenset())
    perms |= {g for g in grants if g in PERMISSIONS}
    return frozenset(perms)


# -- value types ---------------------------------------------------------------------------


@dataclass(frozen=True)
class UserInfo:
    """A user as :meth:`DatabaseOps.list_users` shows it (never the password hash)."""

    name: str
    roles: tuple[str, ...]
    grants: tuple[Permission, ...]
    """Single permissions granted besides the roles."""
    permissions: frozenset[Permission]
    """Every permission the user has (roles and grants)."""
    created_at: datetime | None = None
    created_by: str | None = None
    password_changed_at: datetime | None = None

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {
            "name": self.name,
            "roles": list(self.roles),
            "grants": list(self.grants),
            "permissions": sorted(self.permissions),
            "created_at": self.created_at.isoformat() if self.created_at else None,
            "created_by": self.created_by,
            "password_changed_at": (
                self.password_changed_at.isoformat() if self.password_changed_at else None
            ),
        }


@dataclass(frozen=True)
class UserDb:
    """One version of the user database (immutable)."""

    version: int
    users: Mapping[str, Mapping[str, Any]]

    @classmethod
    def parse(cls, data: bytes, *, version: int | None = None) -> UserDb:
        """Decode a user-database file.

        Raises:
            StorageError: the file is not a user database.
        """
        try:
            doc = json.loads(data)
            users = doc["users"]
            stored_version = int(doc["version"])
        except (ValueError, KeyError, TypeError) as err:
            raise StorageError("the user database file is corrupt") from err
        if not isinstance(users, dict) or (version is not None and stored_version != version):
            raise StorageError("the user database file is corrupt (version mismatch)")
        return cls(stored_version, users)

    def encode(self) -> bytes:
        """Return the file content."""
        return json.dumps(
            {"format": 1, "version": self.version, "users": self.users},
            sort_keys=True,
            indent=1,
        ).encode()

    def info(self, name: str) -> UserInfo:
        """Return the public view of user ``name``."""
        rec = self.users[name]
        roles = tuple(rec.get("roles", ()))
        grants = tuple(cast(Permission, g) for g in rec.get("grants", ()))
        return UserInfo(
            name=name,
            roles=roles,
            grants=grants,
            permissions=_effective(roles, grants),
            created_at=parse_time(rec.get("created_at")),
            created_by=rec.get("created_by"),
            password_changed_at=parse_time(rec.get("password_changed_at")),
        )

    def permissions(self, name: str) -> frozenset[Permission]:
        """Return the permissions of ``name`` (empty for an unknown user)."""
        rec = self.users.get(name)
        if rec is None:
            return frozenset()
        return _effective(rec.get("roles", ()), rec.get("grants", ()))

    def admins(self) -> list[str]:
        """Return the users holding the admin permission."""
        return [n for n in self.users if "admin" in self.permissions(n)]


def credential_pair(credentials: Any) -> tuple[str, str]:
    """Return ``credentials`` as a (user, password) pair.

    Raises:
        AuthenticationError: not a pair of strings.
    """
    if (
        not isinstance(credentials, tuple | list)
        or len(credentials) != 2
        or not all(isinstance(c, str) for c in credentials)
    ):
        raise AuthenticationError("credentials must be a (username, password) pair of strings")
    return str(credentials[0]), str(credentials[1])


def check_credentials(db: UserDb, credentials: Any) -> str:
    """Return the user name if ``credentials`` match a user of ``db``.

    Raises:
        AuthenticationError: missing, malformed or wrong credentials (one message for an
            unknown user and a wrong password).
    """
    if credentials is None:
        raise AuthenticationError(
            "this table requires credentials: open(path, credentials=(user, password))"
        )
    name, password = credential_pair(credentials)
    rec = db.users.get(name)
    if rec is None or len(password) > MAX_PASSWORD_LENGTH:
        burn_equal_time(password[:MAX_PASSWORD_LENGTH])
        raise AuthenticationError(BAD_CREDENTIALS)
    if not verify_password(password, rec.get("password", {})):
        raise AuthenticationError(BAD_CREDENTIALS)
    return str(name)


# -- storage -----------------------------------------------------------------------------


def _version_key(version: int) -> str:
    return f"{USERS_PREFIX}/{version:020d}.json"


class UserStore:
    """The versioned user database of one table (see the module docstring)."""

    def __init__(self, store: ObjectStore) -> None:
        """Use ``store``, rooted at the table."""
        self.store = store

    def exists(self) -> bool:
        """Return whether the table has a user database (one cheap listing)."""
        return self.store.has_any(USERS_PREFIX)

    def _versions(self) -> list[int]:
        out = []
        for entry in self.store.list(USERS_PREFIX):
            m = _VERSION_FILE.match(entry.key.rsplit("/", 1)[-1])
            if m and entry.key.count("/") == USERS_PREFIX.count("/") + 1:
                out.append(int(m.group(1)))
        return sorted(out)

    def load(self) -> UserDb:
        """Return the latest version.

        Raises:
            NotFound: the table has no user database.
            StorageError: the latest version is unreadable.
        """
        for _attempt in range(MAX_UPDATE_ATTEMPTS):
            versions = self._versions()
            if not versions:
                raise NotFound(f"no user database under {self.store.uri}/{USERS_PREFIX}")
            try:
                data = self.store.read_bytes(_version_key(versions[-1]))
            except NotFound:
                continue  # pruned between list and read: list again
            return UserDb.parse(data, version=versions[-1])
        raise StorageError("the user database keeps changing: gave up reading it")

    def has_newer(self, version: int) -> bool:
        """Return whether a version after ``version`` exists (one or two HEAD requests).

        Versions are written in sequence; if ``version`` itself was pruned, newer ones exist.
        """
        return self.store.exists(_version_key(version + 1)) or not self.store.exists(
            _version_key(version)
        )

    def create(self, users: Mapping[str, Mapping[str, Any]]) -> UserDb:
        """Write version 1 (AlreadyExists if the table has users)."""
        if self.exists():
            raise AlreadyExists(f"the table at {self.store.uri} already has users")
        db = UserDb(1, dict(users))
        self.store.write_bytes(_version_key(1), db.encode(), if_absent=True)
        return db

    def update(self, change: Callable[[dict[str, dict[str, Any]]], None]) -> tuple[UserDb, UserDb]:
        """Apply ``change`` (which edits a copy of the users) and write the next version.

        A concurrent update makes the write fail; the change is then re-applied on the
        newer version (``change`` may raise, e.g. AlreadyExists, and nothing is written).

        Returns:
            (the version the change was applied to, the new version)
        """
        for _attempt in range(MAX_UPDATE_ATTEMPTS):
            old = self.load()
            users = json.loads(json.dumps(old.users))
            change(users)
            new = UserDb(old.version + 1, users)
            try:
                self.store.write_bytes(_version_key(new.version), new.encode(), if_absent=True)
            except AlreadyExists:
                logger.debug("user database changed concurrently; retrying")
                continue
            self._prune(new.version)
            return old, new
        raise StorageError("the user database keeps changing: gave up updating it")

    def _prune(self, latest: int) -> None:
        if latest <= KEEP_USER_VERSIONS or latest % 5:
            return
        for v in self._versions():
            if v <= latest - KEEP_USER_VERSIONS:
                self.store.delete(_version_key(v))


def keep_an_admin(users: Mapping[str, Mapping[str, Any]]) -> None:
    """Return if some user of ``users`` is an admin.

    Raises:
        InvalidOperation: no admin would be left.
    """
    if not any(
        "admin" in _effective(r.get("roles", ()), r.get("grants", ())) for r in users.values()
    ):
        raise InvalidOperation("the table must keep at least one admin")
