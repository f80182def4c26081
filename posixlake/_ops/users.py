"""Users and roles of a table (``posixlake.security``), as the ``db.users`` group.

``db.users.create(...)``, ``.delete``, ``.set_roles``, ``.change_password``, ``.list``
and ``.audit_log`` hold the implementation; the flat names (``db.create_user(...)``,
``db.list_users()``, ...) call them (:func:`~posixlake._ops.core.flat`).
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import TYPE_CHECKING

from posixlake._authz import AllowAll
from posixlake._ops.core import Table, TableCore, counted, flat
from posixlake.errors import InvalidOperation
from posixlake.security import AuditEvent, TableAuthorizer, UserInfo

if TYPE_CHECKING:
    from posixlake._metrics import Counters

__all__ = ["UserOps", "Users"]


class Users:
    """``db.users``: manage the users of an auth-enabled table (admin permission)."""

    def __init__(self, table: Table) -> None:
        self._table = table

    @property
    def _counters(self) -> Counters:
        return self._table.counters

    def _manager(self, operation: str) -> TableAuthorizer:
        from posixlake import security

        self._table.authorize("admin", operation)
        return security.manager(self._table.auth, operation)

    @counted
    def create(
        self,
        username: str,
        password: str,
        roles: str | Sequence[str] = ("read",),
        *,
        permissions: str | Sequence[str] = (),
        role: str | None = None,
        min_length: int = 0,
    ) -> UserInfo:
        """Add a user with roles (``admin``, ``read``, ``write``) and single permissions.

        A password under 8 characters is accepted with a warning (as the original
        project accepted it); ``min_length=8`` refuses it (the CLI's policy).

        Raises:
            PermissionDenied: not an admin. AlreadyExists: the name is taken.
            InvalidOperation: a bad name or role, an empty password or one under
                ``min_length`` characters, a table without auth.
        """
        manager = self._manager("create_user")
        if role is not None:  # the original's create_user(name, password, role="admin")
            roles = [role]
        return manager.create_user(
            username, password, roles, permissions=permissions, min_length=min_length
        )

    @counted
    def delete(self, name: str) -> None:
        """Remove a user (not yourself, not the last admin).

        Raises:
            PermissionDenied: not an admin. NotFound: no such user.
        """
        self._manager("delete_user").delete_user(name)

    @counted
    def set_roles(
        self, name: str, roles: str | Sequence[str], *, permissions: str | Sequence[str] = ()
    ) -> UserInfo:
        """Replace a user's roles and single permissions (the last admin stays admin)."""
        return self._manager("set_roles").set_roles(name, roles, permissions=permissions)

    @counted
    def change_password(
        self,
        name: str,
        new_password: str,
        *,
        old_password: str | None = None,
        min_length: int = 0,
    ) -> None:
        """Set a user's password: your own with ``old_password``, anyone's as an admin.

        A new password under 8 characters is accepted with a warning unless
        ``min_length`` refuses it (see :meth:`create`).

        Raises:
            AuthenticationError: a wrong ``old_password``. PermissionDenied: another
                user's password without the admin permission.
        """
        from posixlake import security

        table = self._table
        if old_password is None or name != table.auth.user:
            manager = self._manager("change_password")
        else:
            table.check_open("change_password")
            manager = security.manager(table.auth, "change_password")
        manager.change_password(
            name, new_password, old_password=old_password, min_length=min_length
        )

    @counted
    def list(self) -> builtins.list[UserInfo]:
        """Return the users (never their password hashes), sorted by name."""
        return self._manager("list_users").list_users()

    @counted
    def audit_log(self, *, limit: int | None = None) -> builtins.list[AuditEvent]:
        """Return the audit trail, newest first: logins, user changes, denials, backups,
        restores, and every commit with its user."""
        from posixlake import security

        table = self._table
        table.authorize("admin", "audit_log")
        table.log.refresh()
        return security.audit_events(table.auth, table.log.history(limit), limit=limit)


class UserOps(TableCore):
    """``db.users``, the flat user methods, and :meth:`enable_auth`."""

    @property
    def users(self) -> Users:
        """Users and roles: ``db.users.create(...)``, ``.delete``, ``.set_roles``,
        ``.change_password``, ``.list()``, ``.audit_log()``."""
        return Users(self._table)

    @counted
    def enable_auth(self, credentials: tuple[str, str] | None = None) -> None:
        """Turn on users for this table; ``credentials`` (or ``$POSIXLAKE_ADMIN_PASSWORD``)
        become its first admin, and this session continues as that admin.

        Raises:
            InvalidOperation: the table already has auth.
        """
        from posixlake import security

        self._authorize("admin", "enable_auth")
        if not isinstance(self._auth, AllowAll):
            raise InvalidOperation("enable_auth: this table already has users")
        admin = security.initial_admin(credentials)
        with self._write("ENABLE AUTH"):
            authorizer = security.enable_auth(self._log.uri, self._log.storage_options, admin)
            self._log.set_configuration({security.AUTH_PROPERTY: "true"})
        self._table.auth = authorizer

    # -- the flat names, each the db.users method of the same parameters ------------------

    create_user = flat("users", Users.create)
    delete_user = flat("users", Users.delete)
    set_roles = flat("users", Users.set_roles)
    change_password = flat("users", Users.change_password)
    list_users = flat("users", Users.list)
    audit_log = flat("users", Users.audit_log)
