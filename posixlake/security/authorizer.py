"""Sessions: the logged-in user of an auth-enabled table (checks permissions, manages users)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from posixlake._authz import PERMISSIONS, AllowAll, Authorizer, Permission
from posixlake.errors import (
    AlreadyExists,
    AuthenticationError,
    InvalidOperation,
    NotFound,
    PermissionDenied,
    PosixLakeError,
)
from posixlake.security._time import iso, now
from posixlake.security.audit import AuditEvent, AuditLog
from posixlake.security.passwords import check_password_policy, hash_password
from posixlake.security.users import (
    UserDb,
    UserInfo,
    UserStore,
    check_credentials,
    check_roles,
    check_user_name,
    keep_an_admin,
)
from posixlake.types import CommitInfo

__all__ = [
    "BOOTSTRAP_USER",
    "SESSION_REFRESH_SECONDS",
    "OriginalSession",
    "TableAuthorizer",
    "audit_events",
    "manager",
    "record_event",
]


BOOTSTRAP_USER: Final = "system"
"""The name of the session that creates an auth table without a first admin (the
original's ``create_with_auth`` flow): it holds every permission until it is closed."""
SESSION_REFRESH_SECONDS: Final = 5.0


def _denied(audit: AuditLog, user: str, permission: Permission, operation: str) -> PermissionDenied:
    """Record that ``user`` was refused ``operation``; return the error to raise."""
    audit.record(
        user, "permission_denied", ok=False, target=operation, detail={"permission": permission}
    )
    return PermissionDenied(f"{operation}: user {user!r} lacks the {permission!r} permission")


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
        raise _denied(self._audit, self._user, permission, operation)

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
        check_user_name(name)
        check_password_policy(password, min_length=min_length)
        role_t, grants = check_roles(roles, permissions)
        record = {
            "roles": list(role_t),
            "grants": list(grants),
            "password": hash_password(password),
            "created_at": iso(now()),
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
            keep_an_admin(users)

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
        role_t, grants = check_roles(roles, permissions)

        def change(users: dict[str, dict[str, Any]]) -> None:
            if name not in users:
                raise NotFound(f"no user {name!r}")
            users[name]["roles"] = list(role_t)
            users[name]["grants"] = list(grants)
            keep_an_admin(users)

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
        stamp = iso(now())

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
        raise _denied(self._audit, self._name, permission, operation)

    def allows(self, permission: Permission) -> bool:
        """Return whether the user holds ``permission``."""
        return permission in self._permissions

    @property
    def audit_log(self) -> AuditLog:
        """The table's audit log."""
        return self._audit

    def __repr__(self) -> str:
        return f"OriginalSession(user={self._name!r})"


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
