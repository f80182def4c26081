"""User commands: ``posixlake users enable|add|list|remove|passwd|roles|audit``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

import click

from cli._common import (
    echo_json,
    engine_accepted,
    get_options,
    iso_time,
    json_option,
    new_password,
    open_table,
    storage_options,
    table_argument,
    user_option,
)
from posixlake import DatabaseOps
from posixlake.security import MIN_PASSWORD_LENGTH, ROLES, UserInfo

__all__ = ["COMMANDS"]

_PERMISSIONS: Final = ("read", "write", "delete", "admin", "backup", "restore")

_role_option = click.option(
    "--role",
    "-r",
    "roles",
    multiple=True,
    type=click.Choice(sorted(ROLES), case_sensitive=False),
    help="A role (repeatable): read; write (read, write, delete); admin (everything).",
)
_permission_option = click.option(
    "--permission",
    "-p",
    "permissions",
    multiple=True,
    type=click.Choice(_PERMISSIONS, case_sensitive=False),
    help="A single permission besides the roles (repeatable), e.g. backup.",
)


@contextmanager
def _admin_session(table: str) -> Iterator[DatabaseOps]:
    """Open a table that has users (a clear message when it has none)."""
    with open_table(table) as db:
        if db.user is None:
            raise click.ClickException(
                f"{db.uri} has no users: turn them on with "
                f"`posixlake users enable {table} --user NAME`"
            )
        yield db


def _user_line(u: UserInfo) -> str:
    extra = f" +{','.join(u.grants)}" if u.grants else ""
    return f"{u.name:<20} {','.join(u.roles) + extra:<24} {', '.join(sorted(u.permissions))}"


@click.group()
def users() -> None:
    """Manage the users of a table (log in as an admin with --user).

    \b
    Roles: read; write (read, write, delete); admin (everything, incl. backup and restore).
    Keep passwords off the command line: the login password comes from
    $POSIXLAKE_PASSWORD or a prompt (--password works, with a warning), a new password
    from $POSIXLAKE_NEW_PASSWORD or a prompt typed twice.

    \b
    Examples:
      posixlake users enable /data/sales --user admin
      posixlake users add /data/sales bob --role write --user admin
      posixlake users list /data/sales --user admin
    """


@users.command()
@table_argument
@engine_accepted
@storage_options
@user_option
@json_option
def enable(table: str) -> None:
    """Turn on users for a table; --user becomes its first admin.

    \b
    Example:
      posixlake users enable /data/sales --user admin
    """
    admin = get_options().user
    if not admin:
        raise click.UsageError("give the first admin's name with --user NAME")
    get_options().user = None  # the table has no users yet: open it without a login
    with open_table(table) as db:
        db.enable_auth((admin, new_password(admin)))
    if get_options().json:
        echo_json({"table": db.uri, "auth": True, "admin": admin})
    else:
        click.echo(f"Users enabled on {db.uri}; {admin} is an admin")


@users.command("add")
@table_argument
@click.argument("name")
@_role_option
@_permission_option
@engine_accepted
@storage_options
@user_option
@json_option
def add(table: str, name: str, roles: tuple[str, ...], permissions: tuple[str, ...]) -> None:
    """Add user NAME (role read unless --role is given).

    \b
    Examples:
      posixlake users add /data/sales bob --role write --user admin
      POSIXLAKE_NEW_PASSWORD=... posixlake users add /data/sales ci --role read -p backup -u admin
    """
    with _admin_session(table) as db:
        password = new_password(name)
        info = db.create_user(
            name,
            password,
            list(roles) or ["read"],
            permissions=permissions,
            min_length=MIN_PASSWORD_LENGTH,  # the API accepts shorter ones, the CLI does not
        )
    if get_options().json:
        echo_json(info.to_dict())
    else:
        click.echo(f"Added {info.name}: {', '.join(sorted(info.permissions))}")


@users.command("list")
@table_argument
@engine_accepted
@storage_options
@user_option
@json_option
def list_(table: str) -> None:
    """List the users, their roles and permissions.

    \b
    Example:
      posixlake users list /data/sales --user admin
    """
    with _admin_session(table) as db:
        found = db.list_users()
    if get_options().json:
        echo_json([u.to_dict() for u in found])
        return
    click.echo(f"{'USER':<20} {'ROLES':<24} PERMISSIONS")
    for u in found:
        click.echo(_user_line(u))


@users.command()
@table_argument
@click.argument("name")
@engine_accepted
@storage_options
@user_option
@json_option
def remove(table: str, name: str) -> None:
    """Remove user NAME (not yourself, not the last admin).

    \b
    Example:
      posixlake users remove /data/sales bob --user admin
    """
    with _admin_session(table) as db:
        db.delete_user(name)
    if get_options().json:
        echo_json({"removed": name})
    else:
        click.echo(f"Removed {name}")


@users.command()
@table_argument
@click.argument("name", required=False)
@engine_accepted
@storage_options
@user_option
@json_option
def passwd(table: str, name: str | None) -> None:
    """Change the password of NAME (default: your own, the --user one).

    Your own password needs only your current one; another user's needs an admin.

    \b
    Examples:
      posixlake users passwd /data/sales --user bob
      posixlake users passwd /data/sales bob --user admin
    """
    me = get_options().user
    if not me:
        raise click.UsageError("log in with --user NAME")
    target = name or me
    with _admin_session(table) as db:
        old = get_options().password if target == me else None
        db.change_password(
            target, new_password(target), old_password=old, min_length=MIN_PASSWORD_LENGTH
        )
    if get_options().json:
        echo_json({"user": target, "password_changed": True})
    else:
        click.echo(f"Password of {target} changed")


@users.command()
@table_argument
@click.argument("name")
@_role_option
@_permission_option
@engine_accepted
@storage_options
@user_option
@json_option
def roles(table: str, name: str, roles: tuple[str, ...], permissions: tuple[str, ...]) -> None:
    """Replace the roles and single permissions of user NAME.

    \b
    Example:
      posixlake users roles /data/sales bob --role read --permission backup --user admin
    """
    if not roles and not permissions:
        raise click.UsageError("give --role and/or --permission")
    with _admin_session(table) as db:
        info = db.set_roles(name, list(roles), permissions=permissions)
    if get_options().json:
        echo_json(info.to_dict())
    else:
        click.echo(f"{info.name}: {', '.join(sorted(info.permissions)) or 'no permissions'}")


@users.command()
@table_argument
@click.option("--limit", "-n", type=click.IntRange(min=1), help="Show only the newest N events.")
@engine_accepted
@storage_options
@user_option
@json_option
def audit(table: str, limit: int | None) -> None:
    """Show the audit trail, newest first.

    Logins (failed ones too), user changes, permission denials, backups and writes.

    \b
    Example:
      posixlake users audit /data/sales --limit 20 --user admin
    """
    with _admin_session(table) as db:
        events = db.audit_log(limit=limit)
    if get_options().json:
        echo_json([e.to_dict() for e in events])
        return
    for e in events:
        status = "ok" if e.ok else "FAILED"
        target = f" {e.target}" if e.target else ""
        click.echo(f"{iso_time(e.timestamp)}  {e.user or '-':<16} {e.action}{target} {status}")


COMMANDS: Final[list[click.Command]] = [users]
