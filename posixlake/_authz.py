"""The permission check every DatabaseOps operation makes.

``posixlake.security`` provides the real authorizer for auth-enabled tables; a table
without auth uses :class:`AllowAll`.
"""

from __future__ import annotations

from typing import Literal, Protocol

__all__ = ["PERMISSIONS", "AllowAll", "Authorizer", "Permission"]

Permission = Literal["read", "write", "delete", "admin", "backup", "restore"]
PERMISSIONS: tuple[Permission, ...] = ("read", "write", "delete", "admin", "backup", "restore")


class Authorizer(Protocol):
    """Decides whether the current user may perform an operation."""

    @property
    def user(self) -> str | None:
        """The authenticated user name (None without auth)."""
        ...

    def check(self, permission: Permission, operation: str) -> None:
        """Return if allowed.

        Raises:
            PermissionDenied: naming ``operation`` and the missing ``permission``.
        """
        ...

    def allows(self, permission: Permission) -> bool:
        """Return whether ``permission`` is granted (no exception)."""
        ...


class AllowAll:
    """The authorizer of a table without users: everything is allowed."""

    @property
    def user(self) -> str | None:
        """No user."""
        return None

    def check(self, permission: Permission, operation: str) -> None:
        """Allow."""

    def allows(self, permission: Permission) -> bool:
        """Allow."""
        return True
