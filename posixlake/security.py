"""Users, roles and permissions of auth-enabled tables, and their audit log.

Everything lives inside the table, under ``_posixlake/``, so it travels with the table
(copies, backups, local disk, S3, Azure):

``_posixlake/users/<20-digit version>.json``
    The user database. Each change writes the next version with an atomic
    create-if-absent, so two admins changing users at once never overwrite each other:
    the loser re-reads and re-applies its change (or gets a clear error, e.g. the user
    it creates now exists). Readers take the highest version; the last
    :data:`KEEP_USER_VERSIONS` versions are kept.
``_posixlake/audit/<15-digit epoch ms>-<uuid>.json``
    One JSON object per event, never rewritten: logins (failed ones too), user
    management, permission denials, backups and restores, enabling auth. Data writes
    are not duplicated here: every Delta commit already records ``posixlake.user`` and
    ``posixlake.operation`` atomically with the write, and :func:`audit_events` merges
    both sources.

The table's Delta configuration also carries ``posixlake.auth.enabled = true``: a table
whose ``_posixlake/users`` went missing (say, a copy that skipped ``_``-folders) stays
closed instead of silently opening without auth.

Passwords are hashed with scrypt (memory-hard: N=2^15, r=8, p=1, 32 MiB, about
50-120 ms per login) and a random 16-byte salt per user, and compared with
:func:`hmac.compare_digest`. An unknown user costs the same scrypt run as a known one,
and both failures raise the same :class:`AuthenticationError`.

Roles and the permissions they grant:

=========  ====  =====  ======  =====  ======  =======
role       read  write  delete  admin  backup  restore
=========  ====  =====  ======  =====  ======  =======
read       yes
write      yes   yes    yes
admin      yes   yes    yes     yes    yes     yes
=========  ====  =====  ======  =====  ======  =======

A user may also be granted single permissions (``permissions=["backup"]``), e.g. a
writer that may insert and update but not delete: ``roles=["read"],
permissions=["write"]``. Operations and the permission they need:

- read: query, to_arrow, history, get_schema, get_data_skipping_stats, get_metrics,
  health_check, iteration (and every original-name alias of these);
- write: insert, insert_buffered, flush, merge (INSERT/UPDATE rows), update,
  optimize / compact / z_order / zorder;
- delete: delete_rows_where / delete, merge rows with ``_op = DELETE``;
- admin: vacuum, set_primary_key, create_user, delete_user, set_roles, list_users,
  change_password of another user, audit_log, enable_auth;
- backup: backup, backup_incremental;
- restore: restore, restore_to_transaction (checked against the users stored in the
  backup, for a backup of an auth-enabled table).

Changing one's own password needs only the old password. Metadata properties
(``version``, ``uri``, ``schema``, ``primary_key()``, ``commit_time``) need only a
successful login. ``verify_backup`` and ``get_backup_metadata`` read a backup's files and
need no table.

A session re-reads the user database at most every :data:`SESSION_REFRESH_SECONDS`
(one HEAD request for the next version): revoked roles take effect, and a deleted user
or a password changed elsewhere ends the session with AuthenticationError.

``create(..., auth=True)`` needs the first admin's ``credentials=(user, password)``; when
they are omitted, ``$POSIXLAKE_ADMIN_PASSWORD`` (and ``$POSIXLAKE_ADMIN_USER``, default
``admin``) are used; with neither, creation fails before anything is written. There is
no default password.

Tables made by the original posixlake keep their users in ``_metadata/users.json``
(bcrypt hashes): such a table never opens without credentials. They are checked against
those hashes; the first admin login copies every user into ``_posixlake/users`` (keeping
each hash until that user logs in, when it is replaced with scrypt), and non-admin users
logging in before that get the original's permissions (its ``write`` role may insert
but neither read nor delete). See :mod:`posixlake._original`.

Test suites may lower the scrypt cost with ``$POSIXLAKE_SCRYPT_LOG2_N`` (read once per
hash; production should never set it: a warning is logged). Verification always uses
the parameters stored with each hash, so lowering it never weakens existing hashes.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import threading
import time
import unicodedata
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, cast

from posixlake._authz import PERMISSIONS, AllowAll, Authorizer, Permission
from posixlake._objstore import ObjectStore, open_store
from posixlake.errors import (
    AlreadyExists,
    AuthenticationError,
    InvalidOperation,
    NotFound,
    PermissionDenied,
    PosixLakeError,
    StorageError,
)
from posixlake.types import CommitInfo

__all__ = [
    "ADMIN_PASSWORD_ENV",
    "ADMIN_USER_ENV",
    "AUDIT_KEY",
    "AUDIT_PREFIX",
    "AUTH_PROPERTY",
    "BOOTSTRAP_USER",
    "KEEP_USER_VERSIONS",
    "MIN_PASSWORD_LENGTH",
    "ROLES",
    "SCRYPT_LOG2_N_ENV",
    "SESSION_REFRESH_SECONDS",
    "UNKNOWN_USER_PREFIX",
    "USERS_PREFIX",
    "AuditEvent",
    "AuditLog",
    "OriginalSession",
    "TableAuthorizer",
    "UserDb",
    "UserInfo",
    "UserStore",
    "audit_events",
    "auth_required",
    "check_credentials",
    "check_password_policy",
    "enable_auth",
    "hash_password",
    "initial_admin",
    "login",
    "manager",
    "record_event",
    "unknown_user_matches",
    "unknown_user_tag",
    "verify_password",
]

logger = logging.getLogger(__name__)

AUTH_PROPERTY: Final = "posixlake.auth.enabled"
"""Delta table property set on auth-enabled tables."""
USERS_PREFIX: Final = "_posixlake/users"
AUDIT_PREFIX: Final = "_posixlake/audit"
ADMIN_USER_ENV: Final = "POSIXLAKE_ADMIN_USER"
ADMIN_PASSWORD_ENV: Final = "POSIXLAKE_ADMIN_PASSWORD"
SCRYPT_LOG2_N_ENV: Final = "POSIXLAKE_SCRYPT_LOG2_N"
MIN_PASSWORD_LENGTH: Final = 8
BOOTSTRAP_USER: Final = "system"
"""The name of the session that creates an auth table without a first admin (the
original's ``create_with_auth`` flow): it holds every permission until it is closed."""
MAX_PASSWORD_LENGTH: Final = 1024
KEEP_USER_VERSIONS: Final = 20
SESSION_REFRESH_SECONDS: Final = 5.0
MAX_UPDATE_ATTEMPTS: Final = 20

SCRYPT_LOG2_N: Final = 15
SCRYPT_R: Final = 8
SCRYPT_P: Final = 1
_SALT_BYTES: Final = 16
_HASH_BYTES: Final = 32

_ALL: Final = frozenset(PERMISSIONS)
ROLES: Final[Mapping[str, frozenset[Permission]]] = {
    "read": frozenset({"read"}),
    "write": frozenset({"read", "write", "delete"}),
    "admin": _ALL,
}
"""Each role and the permissions it grants."""

_USER_NAME: Final = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}$")
_VERSION_FILE: Final = re.compile(r"^(\d{20})\.json$")
_BAD_CREDENTIALS: Final = "authentication failed: invalid username or password"


def _now() -> datetime:
    return datetime.now(UTC)


def _iso(when: datetime) -> str:
    return when.isoformat(timespec="milliseconds")


# -- passwords ---------------------------------------------------------------------------


_WEAK_WARNED: list[int] = []


def _scrypt_log2_n() -> int:
    raw = os.environ.get(SCRYPT_LOG2_N_ENV)
    if not raw:
        return SCRYPT_LOG2_N
    try:
        value = int(raw)
    except ValueError as err:
        raise InvalidOperation(f"${SCRYPT_LOG2_N_ENV} must be an integer, not {raw!r}") from err
    if not 4 <= value <= 20:
        raise InvalidOperation(f"${SCRYPT_LOG2_N_ENV} must be between 4 and 20")
    if value < SCRYPT_LOG2_N and not _WEAK_WARNED:
        _WEAK_WARNED.append(value)
        logger.warning(
            "%s=%d weakens password hashing (default %d): for tests only",
            SCRYPT_LOG2_N_ENV,
            value,
            SCRYPT_LOG2_N,
        )
    return value


def _normalize_password(password: str) -> bytes:
    return unicodedata.normalize("NFC", password).encode("utf-8")


def _scrypt(password: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(
        _normalize_password(password),
        salt=salt,
        n=n,
        r=r,
        p=p,
        maxmem=256 * r * (n + p) + (1 << 20),
        dklen=_HASH_BYTES,
    )


def hash_password(password: str) -> dict[str, Any]:
    """Return a storable scrypt record (algorithm, parameters, salt, hash) of ``password``."""
    n, r, p = 1 << _scrypt_log2_n(), SCRYPT_R, SCRYPT_P
    salt = secrets.token_bytes(_SALT_BYTES)
    digest = _scrypt(password, salt, n, r, p)
    return {
        "alg": "scrypt",
        "n": n,
        "r": r,
        "p": p,
        "salt": base64.b64encode(salt).decode(),
        "hash": base64.b64encode(digest).decode(),
    }


def verify_password(password: str, record: Mapping[str, Any]) -> bool:
    """Return whether ``password`` matches a record of :func:`hash_password` (constant time).

    Records ``{"alg": "bcrypt", "hash": "$2b$..."}`` are users moved over from the
    original posixlake (see :mod:`posixlake._original`); a login replaces them with scrypt.
    """
    if record.get("alg") == "bcrypt":
        from posixlake import _original

        hashed = record.get("hash")
        if not isinstance(hashed, str):
            raise StorageError("the user database holds a malformed password record")
        return _original.check_password(password, hashed)
    try:
        n, r, p = int(record["n"]), int(record["r"]), int(record["p"])
        salt = base64.b64decode(record["salt"], validate=True)
        expected = base64.b64decode(record["hash"], validate=True)
    except (KeyError, TypeError, ValueError) as err:
        raise StorageError("the user database holds a malformed password record") from err
    if (
        record.get("alg") != "scrypt"
        or n < 2
        or n & (n - 1)
        or n > 1 << 20
        or not 1 <= r <= 32
        or not 1 <= p <= 16
    ):
        raise StorageError("the user database holds an unsupported password record")
    return hmac.compare_digest(_scrypt(password, salt, n, r, p), expected)


_DUMMY_LOCK = threading.Lock()
_DUMMY: dict[str, Any] = {}


def _burn_equal_time(password: str) -> None:
    """Spend the time of a real check, for an unknown user (no timing oracle)."""
    with _DUMMY_LOCK:
        if not _DUMMY:
            _DUMMY.update(hash_password(secrets.token_urlsafe(16)))
        record = dict(_DUMMY)
    verify_password(password, record)


def check_password_policy(password: Any, *, min_length: int = MIN_PASSWORD_LENGTH) -> str:
    """Return ``password`` if it is a string of ``min_length`` to 1024 characters.

    With ``min_length`` below :data:`MIN_PASSWORD_LENGTH` (the API's ``create_user`` and
    ``change_password`` default to 0, as the original project accepted any password), a
    shorter password is accepted with a warning in the log. The CLI keeps refusing them.

    Raises:
        InvalidOperation: not a string, empty, shorter than ``min_length`` or too long.
    """
    if not isinstance(password, str):
        raise InvalidOperation("a password must be a string")
    if not password:
        raise InvalidOperation("a password must not be empty")
    if len(password) < min_length:
        raise InvalidOperation(f"a password needs at least {min_length} characters")
    if len(password) > MAX_PASSWORD_LENGTH:
        raise InvalidOperation(f"a password may have at most {MAX_PASSWORD_LENGTH} characters")
    if len(password) < MIN_PASSWORD_LENGTH:
        logger.warning(
            "a password of %d characters is accepted, but at least %d are recommended",
            len(password),
            MIN_PASSWORD_LENGTH,
        )
    return password


def _check_user_name(name: Any) -> str:
    if not isinstance(name, str) or not _USER_NAME.match(name):
        raise InvalidOperation(
            f"invalid user name {name!r}: 1-64 characters of letters, digits, _ . @ -, "
            "not starting with . @ -"
        )
    return name


def _check_roles(
    roles: str | Sequence[str], permissions: str | Sequence[str]
) -> tuple[tuple[str, ...], tuple[Permission, ...]]:
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
class AuditEvent:
    """One entry of the audit trail."""

    timestamp: datetime
    user: str | None
    action: str
    """``login``, ``login_failed``, ``create_user``, ``permission_denied``, ``backup``,
    ``commit:<DELTA OPERATION>`` (from the Delta log), ..."""
    ok: bool = True
    target: str | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready dict."""
        return {
            "timestamp": self.timestamp.isoformat(),
            "user": self.user,
            "action": self.action,
            "ok": self.ok,
            "target": self.target,
            "detail": dict(self.detail),
        }


def _parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


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
            created_at=_parse_time(rec.get("created_at")),
            created_by=rec.get("created_by"),
            password_changed_at=_parse_time(rec.get("password_changed_at")),
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
    if (
        not isinstance(credentials, tuple | list)
        or len(credentials) != 2
        or not all(isinstance(c, str) for c in credentials)
    ):
        raise AuthenticationError("credentials must be a (username, password) pair of strings")
    name, password = credentials
    rec = db.users.get(name)
    if rec is None or len(password) > MAX_PASSWORD_LENGTH:
        _burn_equal_time(password[:MAX_PASSWORD_LENGTH])
        raise AuthenticationError(_BAD_CREDENTIALS)
    if not verify_password(password, rec.get("password", {})):
        raise AuthenticationError(_BAD_CREDENTIALS)
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


class AuditLog:
    """The append-only audit events of one table."""

    def __init__(self, store: ObjectStore, *, clock: Callable[[], datetime] = _now) -> None:
        """Use ``store``, rooted at the table."""
        self.store = store
        self._clock = clock

    def record(
        self,
        user: str | None,
        action: str,
        *,
        ok: bool = True,
        target: str | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> None:
        """Append one event (one small file). Storage failures are logged, not raised."""
        when = self._clock()
        event = AuditEvent(when, user, action, ok, target, dict(detail or {}))
        key = f"{AUDIT_PREFIX}/{int(when.timestamp() * 1000):015d}-{uuid.uuid4().hex}.json"
        try:
            self.store.write_bytes(key, json.dumps(event.to_dict()).encode(), if_absent=True)
        except PosixLakeError as err:
            logger.error("could not write audit event %s by %s: %s", action, user, err)

    def read(self, *, limit: int | None = None) -> list[AuditEvent]:
        """Return events, newest first."""
        keys = sorted(
            (e.key for e in self.store.list(AUDIT_PREFIX) if e.key.endswith(".json")),
            reverse=True,
        )
        if limit is not None:
            keys = keys[:limit]
        out = []
        for key in keys:
            try:
                doc = json.loads(self.store.read_bytes(key))
                when = _parse_time(doc.get("timestamp"))
                if when is None:
                    raise ValueError("no timestamp")
                out.append(
                    AuditEvent(
                        when,
                        doc.get("user"),
                        str(doc.get("action", "")),
                        bool(doc.get("ok", True)),
                        doc.get("target"),
                        dict(doc.get("detail") or {}),
                    )
                )
            except (ValueError, AttributeError, NotFound) as err:
                logger.warning("skipping unreadable audit event %s: %s", key, err)
        return out


# -- the authorizer ------------------------------------------------------------------------


class TableAuthorizer:
    """The logged-in user of an auth-enabled table: checks permissions, manages users."""

    def __init__(
        self,
        users: UserStore,
        audit: AuditLog,
        db: UserDb,
        user: str,
        *,
        refresh_seconds: float = SESSION_REFRESH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        bootstrap: bool = False,
    ) -> None:
        """Bind a session of ``user`` (already authenticated) to the table's stores.

        With ``bootstrap``, ``user`` is not a stored user but the session that created
        the table: it holds every permission for its lifetime (see :data:`BOOTSTRAP_USER`).
        """
        self._users = users
        self._audit = audit
        self._db = db
        self._user = user
        self._bootstrap = bootstrap
        self._record = db.users.get(user, {}) if bootstrap else db.users[user]
        self._refresh_seconds = refresh_seconds
        self._clock = clock
        self._checked_at = clock()
        self._ended: str | None = None
        self._lock = threading.Lock()

    # -- Authorizer protocol -------------------------------------------------------------

    @property
    def user(self) -> str | None:
        """The logged-in user."""
        return self._user

    @property
    def permissions(self) -> frozenset[Permission]:
        """The user's permissions."""
        if self._bootstrap:
            return frozenset(PERMISSIONS)
        self._maybe_refresh()
        if self._ended is not None:
            raise AuthenticationError(self._ended)
        return self._db.permissions(self._user)

    def check(self, permission: Permission, operation: str) -> None:
        """Return if the user holds ``permission``.

        Raises:
            PermissionDenied: naming the operation, the user and the permission.
            AuthenticationError: the user was deleted or its password changed elsewhere.
        """
        if permission in self.permissions:
            return
        self._audit.record(
            self._user,
            "permission_denied",
            ok=False,
            target=operation,
            detail={"permission": permission},
        )
        raise PermissionDenied(
            f"{operation}: user {self._user!r} lacks the {permission!r} permission"
        )

    def allows(self, permission: Permission) -> bool:
        """Return whether the user holds ``permission``."""
        return permission in self.permissions

    # -- session -----------------------------------------------------------------------

    def refresh(self) -> None:
        """Re-read the user database now (roles, deletion, password changes)."""
        with self._lock:
            self._refresh_locked(force=True)

    def _maybe_refresh(self) -> None:
        if self._clock() - self._checked_at < self._refresh_seconds:
            return
        with self._lock:
            if self._clock() - self._checked_at >= self._refresh_seconds:
                self._refresh_locked(force=False)

    def _refresh_locked(self, *, force: bool) -> None:
        self._checked_at = self._clock()
        if not force and not self._users.has_newer(self._db.version):
            return
        self._adopt(self._users.load())

    def _adopt(self, db: UserDb) -> None:
        if db.version < self._db.version:
            return
        if self._bootstrap:
            self._db = db
            return
        rec = db.users.get(self._user)
        if rec is None:
            self._ended = f"user {self._user!r} no longer exists: session ended"
        elif rec.get("password") != self._record.get("password"):
            self._ended = f"the password of {self._user!r} changed: log in again"
        if self._ended is not None:
            raise AuthenticationError(self._ended)
        assert rec is not None
        self._db = db
        self._record = rec

    @property
    def audit_log(self) -> AuditLog:
        """The table's audit log."""
        return self._audit

    # -- user management (the caller checks permissions) -------------------------------

    def list_users(self) -> list[UserInfo]:
        """Return every user, sorted by name."""
        with self._lock:
            self._adopt(self._users.load())
            db = self._db
        return [db.info(n) for n in sorted(db.users)]

    def create_user(
        self,
        name: str,
        password: str,
        roles: str | Sequence[str],
        *,
        permissions: str | Sequence[str] = (),
        min_length: int = 0,
    ) -> UserInfo:
        """Add a user (a password under ``min_length`` characters is refused).

        Raises:
            AlreadyExists: the name is taken. InvalidOperation: bad name, password, role.
        """
        _check_user_name(name)
        check_password_policy(password, min_length=min_length)
        role_t, grants = _check_roles(roles, permissions)
        record = {
            "roles": list(role_t),
            "grants": list(grants),
            "password": hash_password(password),
            "created_at": _iso(_now()),
            "created_by": self._user,
            "password_changed_at": None,
        }

        def change(users: dict[str, dict[str, Any]]) -> None:
            if name in users:
                raise AlreadyExists(f"user {name!r} already exists")
            users[name] = record

        self._commit(change, "create_user", name, {"roles": list(role_t), "grants": list(grants)})
        return self._db.info(name)

    def delete_user(self, name: str) -> None:
        """Remove a user (not yourself, not the last admin).

        Raises:
            NotFound: no such user. InvalidOperation: yourself or the last admin.
        """
        if name == self._user:
            raise InvalidOperation("you cannot delete the user you are logged in as")

        def change(users: dict[str, dict[str, Any]]) -> None:
            if name not in users:
                raise NotFound(f"no user {name!r}")
            del users[name]
            _keep_an_admin(users)

        self._commit(change, "delete_user", name, {})

    def set_roles(
        self,
        name: str,
        roles: str | Sequence[str],
        *,
        permissions: str | Sequence[str] = (),
    ) -> UserInfo:
        """Replace the roles and single-permission grants of ``name``.

        Raises:
            NotFound: no such user. InvalidOperation: bad role, or it removes the last admin.
        """
        role_t, grants = _check_roles(roles, permissions)

        def change(users: dict[str, dict[str, Any]]) -> None:
            if name not in users:
                raise NotFound(f"no user {name!r}")
            users[name]["roles"] = list(role_t)
            users[name]["grants"] = list(grants)
            _keep_an_admin(users)

        self._commit(change, "set_roles", name, {"roles": list(role_t), "grants": list(grants)})
        return self._db.info(name)

    def change_password(
        self,
        name: str,
        new_password: str,
        *,
        old_password: str | None = None,
        min_length: int = 0,
    ) -> None:
        """Set a new password for ``name``; check ``old_password`` when given.

        Raises:
            NotFound: no such user. AuthenticationError: ``old_password`` is wrong.
            InvalidOperation: the new password breaks the policy (or ``min_length``).
        """
        check_password_policy(new_password, min_length=min_length)
        if old_password is not None:
            with self._lock:
                self._adopt(self._users.load())
                db = self._db
            if name not in db.users:
                raise NotFound(f"no user {name!r}")
            try:
                check_credentials(db, (name, old_password))
            except AuthenticationError:
                self._audit.record(self._user, "change_password", ok=False, target=name)
                raise
        record = hash_password(new_password)
        stamp = _iso(_now())

        def change(users: dict[str, dict[str, Any]]) -> None:
            if name not in users:
                raise NotFound(f"no user {name!r}")
            users[name]["password"] = record
            users[name]["password_changed_at"] = stamp

        self._commit(change, "change_password", name, {})

    def _commit(
        self,
        change: Callable[[dict[str, dict[str, Any]]], None],
        action: str,
        target: str,
        detail: Mapping[str, Any],
    ) -> None:
        try:
            _old, new = self._users.update(change)
        except PosixLakeError as err:
            self._audit.record(
                self._user, action, ok=False, target=target, detail={**detail, "error": str(err)}
            )
            raise
        with self._lock:
            own = new.users.get(self._user)
            if own is not None:
                self._record = own  # our own password change keeps this session
            self._adopt(new)
            self._checked_at = self._clock()
        self._audit.record(self._user, action, target=target, detail=detail)

    def __repr__(self) -> str:
        return f"TableAuthorizer(user={self._user!r})"


def _keep_an_admin(users: Mapping[str, Mapping[str, Any]]) -> None:
    if not any(
        "admin" in _effective(r.get("roles", ()), r.get("grants", ())) for r in users.values()
    ):
        raise InvalidOperation("the table must keep at least one admin")


# -- entry points used by DatabaseOps ------------------------------------------------------


def initial_admin(credentials: Any) -> tuple[str, str]:
    """Return the first admin's (user, password) for ``create(..., auth=True)``.

    Uses ``credentials`` or else ``$POSIXLAKE_ADMIN_USER`` (default ``admin``) and
    ``$POSIXLAKE_ADMIN_PASSWORD``. Called before anything is written.

    Raises:
        AuthenticationError: no credentials and no ``$POSIXLAKE_ADMIN_PASSWORD``.
        InvalidOperation: a bad user name or a password that breaks the policy.
    """
    if credentials is None:
        password = os.environ.get(ADMIN_PASSWORD_ENV)
        if not password:
            raise AuthenticationError(
                "auth=True needs credentials=(user, password) for the first admin "
                f"(or ${ADMIN_PASSWORD_ENV}, with ${ADMIN_USER_ENV} defaulting to 'admin')"
            )
        credentials = (os.environ.get(ADMIN_USER_ENV) or "admin", password)
    if (
        not isinstance(credentials, tuple | list)
        or len(credentials) != 2
        or not all(isinstance(c, str) for c in credentials)
    ):
        raise AuthenticationError("credentials must be a (username, password) pair of strings")
    name, password = credentials
    return _check_user_name(name), check_password_policy(password)


def _stores(uri: str, storage_options: Mapping[str, str] | None) -> tuple[UserStore, AuditLog]:
    store = open_store(uri, storage_options)
    return UserStore(store), AuditLog(store)


def enable_auth(
    uri: str,
    storage_options: Mapping[str, str] | None,
    credentials: tuple[str, str] | None,
    *,
    bootstrap: bool = False,
) -> Authorizer:
    """Create the user database of a table with its first admin; return that admin's session.

    With ``bootstrap`` and no ``credentials``, the database starts without users and
    the returned session is :data:`BOOTSTRAP_USER`, holding every permission, so that it
    can create the first admin (nobody can log in before one exists).

    Raises:
        AlreadyExists: the table already has users.
        AuthenticationError / InvalidOperation: see :func:`initial_admin`.
    """
    if bootstrap and credentials is None:
        users, audit = _stores(uri, storage_options)
        db = users.create({})
        audit.record(BOOTSTRAP_USER, "enable_auth", target=BOOTSTRAP_USER)
        logger.warning(
            "the table at %s has auth but no users yet: create an admin with this "
            "handle (create_user) before closing it, or nobody can open the table",
            uri,
        )
        return TableAuthorizer(users, audit, db, BOOTSTRAP_USER, bootstrap=True)
    name, password = initial_admin(credentials)
    users, audit = _stores(uri, storage_options)
    record = {
        "roles": ["admin"],
        "grants": [],
        "password": hash_password(password),
        "created_at": _iso(_now()),
        "created_by": name,
        "password_changed_at": None,
    }
    db = users.create({name: record})
    audit.record(name, "enable_auth", target=name)
    return TableAuthorizer(users, audit, db, name)


def auth_required(
    uri: str,
    storage_options: Mapping[str, str] | None,
    configuration: Mapping[str, str] | None = None,
) -> bool:
    """Return whether the table at ``uri`` has auth (its property, or a user database)."""
    if configuration and configuration.get(AUTH_PROPERTY, "").lower() == "true":
        return True
    from posixlake import _original

    store = open_store(uri, storage_options)
    return UserStore(store).exists() or _original.has_users(store)


def login(
    uri: str,
    storage_options: Mapping[str, str] | None,
    credentials: tuple[str, str] | None,
    *,
    configuration: Mapping[str, str] | None = None,
    refresh_seconds: float = SESSION_REFRESH_SECONDS,
    clock: Callable[[], float] = time.monotonic,
) -> Authorizer | None:
    """Authenticate ``credentials`` against the table's users.

    Returns None for a table without auth (credentials, if any, are ignored): one
    existence check, plus the Delta configuration the caller already loaded.

    Raises:
        AuthenticationError: an auth-enabled table and missing or wrong credentials
            (the same message whether the user exists or not), or an auth-enabled table
            whose user database is missing.
    """
    store = open_store(uri, storage_options)
    users = UserStore(store)
    flagged = bool(configuration) and (configuration or {}).get(AUTH_PROPERTY, "").lower() == "true"
    if not flagged and not users.exists():
        return _original_login(store, users, credentials)
    audit = AuditLog(store)
    try:
        db = users.load()
    except NotFound as err:
        raise AuthenticationError(
            f"the table at {uri} requires authentication but its user database "
            f"({USERS_PREFIX}/) is missing: restore it from a backup"
        ) from err
    attempted = (
        credentials[0]
        if isinstance(credentials, tuple | list) and credentials and isinstance(credentials[0], str)
        else None
    )
    try:
        name = check_credentials(db, credentials)
    except AuthenticationError:
        _record_failed_login(audit, store, db, attempted)
        raise
    audit.record(name, "login")
    db = _upgrade_hash(users, db, name, credentials)
    return TableAuthorizer(users, audit, db, name, refresh_seconds=refresh_seconds, clock=clock)


def _upgrade_hash(users: UserStore, db: UserDb, name: str, credentials: Any) -> UserDb:
    """Replace a user's bcrypt hash (moved from the original posixlake) with scrypt.

    Called right after a successful login with the password just checked; a failure to
    write is logged and the bcrypt hash stays.
    """
    if db.users[name].get("password", {}).get("alg") != "bcrypt":
        return db
    record = hash_password(credentials[1])

    def change(all_users: dict[str, dict[str, Any]]) -> None:
        if name in all_users and all_users[name].get("password", {}).get("alg") == "bcrypt":
            all_users[name]["password"] = record

    try:
        _old, new = users.update(change)
    except PosixLakeError as err:
        logger.warning("could not rehash the password of %r with scrypt: %s", name, err)
        return db
    return new if name in new.users else db


class OriginalSession:
    """A user of the original posixlake's ``_metadata/users.json`` not yet moved over.

    A non-admin login on a table whose users have not been migrated (the first admin
    login migrates them): the user gets the permissions the original granted.
    """

    def __init__(self, name: str, permissions: frozenset[Permission], audit: AuditLog) -> None:
        """Bind the session of ``name`` (already authenticated)."""
        self._name = name
        self._permissions = permissions
        self._audit = audit

    @property
    def user(self) -> str | None:
        """The logged-in user."""
        return self._name

    @property
    def permissions(self) -> frozenset[Permission]:
        """The user's permissions (the original's roles)."""
        return self._permissions

    def check(self, permission: Permission, operation: str) -> None:
        """Return if the user holds ``permission``.

        Raises:
            PermissionDenied: naming the operation, the user and the permission.
        """
        if permission in self._permissions:
            return
        self._audit.record(
            self._name,
            "permission_denied",
            ok=False,
            target=operation,
            detail={"permission": permission},
        )
        raise PermissionDenied(
            f"{operation}: user {self._name!r} lacks the {permission!r} permission"
        )

    def allows(self, permission: Permission) -> bool:
        """Return whether the user holds ``permission``."""
        return permission in self._permissions

    @property
    def audit_log(self) -> AuditLog:
        """The table's audit log."""
        return self._audit

    def __repr__(self) -> str:
        return f"OriginalSession(user={self._name!r})"


def _original_login(store: ObjectStore, users: UserStore, credentials: Any) -> Authorizer | None:
    """Log in on a table of the original posixlake that has users (fail closed).

    Credentials are checked against its bcrypt hashes. An admin's login moves every
    user into our user store (their hashes kept until each logs in); other users get a
    session with the original's permissions.
    """
    from posixlake import _original

    found = _original.read_users(store)
    if found is None:
        return None
    audit = AuditLog(store)
    db = UserDb(0, {name: _original.user_record(u) for name, u in found.items()})
    attempted = (
        credentials[0]
        if isinstance(credentials, tuple | list) and credentials and isinstance(credentials[0], str)
        else None
    )
    try:
        name = check_credentials(db, credentials)
    except AuthenticationError:
        _record_failed_login(audit, store, db, attempted)
        raise
    audit.record(name, "login")
    if "admin" not in found[name].permissions:
        return OriginalSession(name, found[name].permissions, audit)
    try:
        migrated = users.create(db.users)
    except AlreadyExists:
        migrated = users.load()  # another admin migrated them meanwhile
        if name not in migrated.users:
            raise AuthenticationError(_BAD_CREDENTIALS) from None
    else:
        audit.record(
            name,
            "migrate_users",
            target=_original.USERS_FILE,
            detail={"users": sorted(db.users)},
        )
        logger.info("moved %d users of the original posixlake into %s", len(db.users), USERS_PREFIX)
    migrated = _upgrade_hash(users, migrated, name, credentials)
    return TableAuthorizer(users, audit, migrated, name)


def _record_failed_login(
    audit: AuditLog, store: ObjectStore, db: UserDb, attempted: str | None
) -> None:
    """Record a failed login; a name that is no user is kept only as a keyed hash.

    Such a name may be a password typed into the wrong field: it must not land verbatim
    in the audit files (or in ``users audit``).
    """
    if attempted is None or attempted in db.users:
        audit.record(attempted, "login_failed", ok=False)
        return
    audit.record(
        unknown_user_tag(store, attempted),
        "login_failed",
        ok=False,
        detail={"unknown_user": True},
    )


AUDIT_KEY: Final = "_posixlake/audit.key"
UNKNOWN_USER_PREFIX: Final = "unknown#"


def unknown_user_tag(store: ObjectStore, attempted: str | None) -> str | None:
    """Return how an unknown user name is recorded: ``unknown#`` + 16 hex of HMAC-SHA256.

    The key is a random per-table secret (``_posixlake/audit.key``, created on first
    use), so the tag cannot be reversed by guessing common passwords offline without
    the key; an admin with the key can still match repeated attempts of one name
    (:func:`unknown_user_matches`).
    """
    if attempted is None:
        return None
    key = _audit_key(store)
    if key is None:
        return UNKNOWN_USER_PREFIX + "?"
    digest = hmac.new(key, attempted.encode("utf-8", "surrogatepass"), hashlib.sha256)
    return UNKNOWN_USER_PREFIX + digest.hexdigest()[:16]


def unknown_user_matches(store: ObjectStore, tag: str, name: str) -> bool:
    """Return whether ``tag`` (from the audit log) records the user name ``name``."""
    return hmac.compare_digest(unknown_user_tag(store, name) or "", tag)


def _audit_key(store: ObjectStore) -> bytes | None:
    for _ in range(2):
        try:
            return store.read_bytes(AUDIT_KEY)
        except NotFound:
            try:
                store.write_bytes(AUDIT_KEY, secrets.token_bytes(32), if_absent=True)
            except AlreadyExists:
                continue
            except PosixLakeError as err:
                logger.error("cannot create the audit key: %s", err)
                return None
        except PosixLakeError as err:
            logger.error("cannot read the audit key: %s", err)
            return None
    return None


def manager(authorizer: Authorizer, operation: str) -> TableAuthorizer:
    """Return the user manager behind ``authorizer``.

    Raises:
        InvalidOperation: the table has no users (AllowAll).
    """
    if isinstance(authorizer, TableAuthorizer):
        return authorizer
    if isinstance(authorizer, OriginalSession):
        raise InvalidOperation(
            f"{operation}: the users of this table (made by the original posixlake) are "
            "managed once an admin has logged in, which moves them into posixlake's store"
        )
    if isinstance(authorizer, AllowAll):
        raise InvalidOperation(
            f"{operation}: this table has no users; create it with auth=True "
            "or call enable_auth(credentials)"
        )
    raise InvalidOperation(f"{operation}: the authorizer in use does not manage users")


def audit_events(
    authorizer: Authorizer, history: Iterable[CommitInfo], *, limit: int | None = None
) -> list[AuditEvent]:
    """Merge the audit log with the Delta commits (who wrote what), newest first."""
    events = manager(authorizer, "audit_log").audit_log.read(limit=limit)
    for info in history:
        events.append(
            AuditEvent(
                info.timestamp,
                info.user,
                f"commit:{info.operation}",
                True,
                None,
                {"version": info.version},
            )
        )
    events.sort(key=lambda e: e.timestamp, reverse=True)
    return events[:limit] if limit is not None else events


def record_event(
    authorizer: Authorizer,
    action: str,
    *,
    ok: bool = True,
    target: str | None = None,
    detail: Mapping[str, Any] | None = None,
) -> None:
    """Append an audit event for the session's user (no-op for a table without auth)."""
    if isinstance(authorizer, TableAuthorizer | OriginalSession):
        authorizer.audit_log.record(authorizer.user, action, ok=ok, target=target, detail=detail)
