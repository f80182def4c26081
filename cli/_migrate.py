"""``posixlake migrate``: move what the original posixlake kept beside a table into ours."""

from __future__ import annotations

from typing import Final

import click

from cli._common import (
    echo_json,
    get_options,
    json_option,
    open_table,
    storage_for,
    storage_options,
    table_argument,
    user_option,
)
from posixlake.database import PRIMARY_KEY_PROPERTY
from posixlake.delta import DeltaLog
from posixlake.errors import PermissionDenied
from posixlake.security import TableAuthorizer, UserStore
from posixlake.security.original import has_users as has_original_users
from posixlake.storage import normalize_uri, open_store, storage_options_for

__all__ = ["COMMANDS"]


@click.command()
@table_argument
@storage_options
@user_option
@json_option
def migrate(table: str) -> None:
    """Move an original posixlake table's users and key into posixlake.

    \b
    Its users (_metadata/users.json, bcrypt) move into posixlake's user store, as the
    first login of one of its admins does; log in with --user NAME, an admin of the
    original (each user keeps its password). Its primary key (_metadata/schema.json)
    is stored in the Delta table's properties (one commit). The original's files stay.

    \b
    Example:
      posixlake migrate /data/old-table --user alice
    """
    opts = get_options()
    uri = normalize_uri(table)
    options = storage_options_for(uri, storage_for(uri))
    store = open_store(uri, options)
    had_original = has_original_users(store)
    had_ours = UserStore(store).exists()
    if had_original and not had_ours and not opts.user:
        raise click.UsageError(
            f"{uri} has users of the original posixlake: log in as one of its admins with "
            "--user NAME (password from $POSIXLAKE_PASSWORD or a prompt)"
        )
    moved: list[str] = []
    key: list[str] = []
    with open_table(table) as db:
        if had_original and not had_ours:
            if not isinstance(db.authorizer, TableAuthorizer):
                raise PermissionDenied(
                    f"migrate: user {db.user!r} is not an admin of the table: the users move "
                    "over at an admin's login"
                )
            moved = [u.name for u in db.list_users()]
        if PRIMARY_KEY_PROPERTY not in DeltaLog.open(db.uri, options).configuration:
            key = db.key_columns
            if key:
                db.set_primary_key(key)
        version = db.version
    if opts.json:
        echo_json({"table": uri, "users": moved, "primary_key": key, "version": version})
        return
    if moved:
        click.echo(f"Moved {len(moved)} users into posixlake's user store: {', '.join(moved)}")
    elif had_original:
        click.echo("The users were moved over already.")
    if key:
        click.echo(f"Stored the primary key ({', '.join(key)}) in the table (version {version}).")
    if not had_original and not key:
        click.echo(
            f"Nothing to migrate: {uri} has no users or primary key of the original "
            "posixlake left to move."
        )


COMMANDS: Final[list[click.Command]] = [migrate]
