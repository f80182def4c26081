"""The original project's users (``_metadata/users.json``, read by :mod:`posixlake._original`)
as a user database of ours, and the restore check of its backups."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from posixlake._original import OriginalUser, has_users, user_record
from posixlake.errors import PermissionDenied
from posixlake.security.users import UserDb, check_credentials

__all__ = ["has_users", "restore_user", "user_db"]  # has_users: for `posixlake migrate`


def user_db(users: Mapping[str, OriginalUser]) -> UserDb:
    """Return ``users`` as a user database of ours (version 0, their bcrypt hashes kept)."""
    return UserDb(0, {name: user_record(u) for name, u in users.items()})


def restore_user(users: Mapping[str, OriginalUser], credentials: Any) -> str:
    """Return the user that ``credentials`` log in as, if it may restore.

    Checked as every login is (:func:`posixlake.security.check_credentials`): one message
    and one cost for an unknown user and a wrong password.

    Raises:
        AuthenticationError: missing or wrong credentials.
        PermissionDenied: the user lacks the original's restore permission.
    """
    name = check_credentials(user_db(users), credentials)
    if "restore" not in users[name].permissions:
        raise PermissionDenied(f"restore: user {name!r} lacks the 'restore' permission")
    return name
