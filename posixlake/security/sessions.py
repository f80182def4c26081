"""Entry points of DatabaseOps: enabling auth on a table, logging in, the first admin."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from posixlake._authz import Authorizer
from posixlake.errors import AlreadyExists, AuthenticationError, NotFound, PosixLakeError
from posixlake.security._time import iso, now
from posixlake.security.audit import AuditLog, unknown_user_tag
from posixlake.security.authorizer import (
    BOOTSTRAP_USER,
    SESSION_REFRESH_SECONDS,
    OriginalSession,
    TableAuthorizer,
)
from posixlake.security.original import user_db
from posixlake.security.passwords import check_password_policy, hash_password
from posixlake.security.users import (
    BAD_CREDENTIALS,
    USERS_PREFIX,
    UserDb,
    UserStore,
    check_credentials,
    check_user_name,
    credential_pair,
)
from posixlake.storage import ObjectStore, open_store

__all__ = [
    "ADMIN_PASSWORD_ENV",
    "ADMIN_USER_ENV",
    "AUTH_PROPERTY",
    "auth_required",
    "enable_auth",
    "initial_admin",
    "login",
]

logger = logging.getLogger(__name__)

AUTH_PROPERTY: Final = "posixlake.auth.enabled"
"""Delta table property set on auth-enabled tables."""
ADMIN_USER_ENV: Final = "POSIXLAKE_ADMIN_USER"
ADMIN_PASSWORD_ENV: Final = "POSIXLAKE_ADMIN_PASSWORD"


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
    name, password = credential_pair(credentials)
    return check_user_name(name), check_password_policy(password)


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
        "created_at": iso(now()),
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
    name = _authenticate(audit, store, db, credentials)
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
    db = user_db(found)
    name = _authenticate(audit, store, db, credentials)
    if "admin" not in found[name].permissions:
        return OriginalSession(name, found[name].permissions, audit)
    try:
        migrated = users.create(db.users)
    except AlreadyExists:
        migrated = users.load()  # another admin migrated them meanwhile
        if name not in migrated.users:
            raise AuthenticationError(BAD_CREDENTIALS) from None
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


def _authenticate(audit: AuditLog, store: ObjectStore, db: UserDb, credentials: Any) -> str:
    """Check ``credentials`` against ``db`` and record the login (or the failed attempt).

    Raises:
        AuthenticationError: missing or wrong credentials.
    """
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
    return name


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
