"""Users, roles and permissions of auth-enabled tables.

(Foundation placeholder: tables without auth only. The security issue replaces this
module with users stored under ``_posixlake/``.)
"""

from __future__ import annotations

from collections.abc import Mapping

from posixlake._authz import Authorizer
from posixlake.errors import InvalidOperation

__all__ = ["enable_auth", "login"]


def enable_auth(
    uri: str, storage_options: Mapping[str, str] | None, credentials: tuple[str, str] | None
) -> Authorizer:
    """Turn on users and roles for a new table."""
    raise InvalidOperation("auth-enabled tables are not available yet")


def login(
    uri: str, storage_options: Mapping[str, str] | None, credentials: tuple[str, str] | None
) -> Authorizer | None:
    """Return the authorizer for ``credentials`` (None for a table without auth)."""
    return None
