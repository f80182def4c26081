"""``posixlake serve ROOT`` / ``mount ROOT``: a lake root, every table under it a directory.

A ROOT that is not itself a Delta table (no ``_delta_log/`` in it) but a directory, or an
object-store prefix holding objects, is served as a lake (``nfs.lake.LakeFs``); a table
keeps the single-table share exactly.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click

from cli._common import credentials, engine_kwargs, get_options, storage_for
from posixlake.errors import InvalidOperation, IoError, PermissionDenied, PosixLakeError

if TYPE_CHECKING:
    from collections.abc import Callable

    from nfs.lake import LakeFs
    from nfs.protocol.vfs import Vfs
    from nfs.table.tablefs import TableFs
    from posixlake import DatabaseOps

__all__ = ["check_lake_options", "lake_root", "open_lake"]


def lake_root(root: str) -> str | None:
    """Return the normalized ROOT if it is a lake root (not a table), else None.

    A missing local path, or an object-store location that cannot be listed or holds
    nothing, is None too: opening it as a table then reports the error as before.
    """
    from nfs.lake import is_table
    from posixlake.storage import is_local, normalize_uri, open_store, storage_options_for

    uri = normalize_uri(root)
    if is_local(uri):
        return uri if os.path.isdir(uri) and not is_table(uri) else None
    try:
        options = storage_options_for(uri, storage_for(uri))
        if is_table(uri, options) or not open_store(uri, options).has_any(""):
            return None
    except PosixLakeError:
        return None
    return uri


def open_lake(
    root: str,
    *,
    read_only: bool,
    state_dir: str | None,
    wrap: Callable[[DatabaseOps, TableFs], Vfs] | None = None,
    **tablefs: object,
) -> LakeFs:
    """Return the LakeFs of ``root`` with the shared options (storage, engine, --user).

    Each table is opened on first use with the same storage options, engine and login;
    a table with users that the login does not open is listed and refuses access.
    ``wrap`` wraps each table's face (``serve --map-uid``: per-user access).
    """
    from nfs.lake import LakeFs
    from nfs.lake.opening import lake_state_dir, table_creator, tablefs_opener
    from posixlake.storage import storage_options_for

    opts = get_options()
    storage = storage_for(root)
    login = credentials() if opts.user else None
    state = lake_state_dir(root, state_dir)
    try:
        state.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise IoError(f"cannot use the state directory: {err}") from err
    engine = engine_kwargs(computes=True, shared=False)
    opener = tablefs_opener(
        root,
        state_dir=state,
        storage=storage,
        credentials=login,
        engine=engine,
        tablefs={"read_only": read_only, **tablefs},
        wrap=None if wrap is None else _refusing(wrap),
    )
    from nfs.lake.newrows import rows_table_creator
    from nfs.table.state import DEFAULT_IDLE_SECONDS

    # with --map-uid every access is a mapped user's role on a table, and no role of any
    # table grants making a new one: tables are then made with `posixlake create`
    makes = not read_only and wrap is None
    creator = table_creator(root, storage=storage, engine=engine) if makes else None
    idle = tablefs.get("idle_seconds")
    lake = LakeFs(
        root,
        opener,
        storage_options=storage_options_for(root, storage),
        state_dir=state,
        read_only=read_only,
        creator=creator,
        rows_creator=rows_table_creator(root, storage=storage) if makes else None,
        idle_seconds=float(idle) if isinstance(idle, int | float) else DEFAULT_IDLE_SECONDS,
    )
    from nfs.protocol.vfs import NfsError

    try:
        tables = lake.tables()  # list once before listening: a root that cannot be listed fails
    except NfsError as err:
        lake.close()
        raise InvalidOperation(f"cannot list the lake {root}: {err}") from err
    if not tables:
        click.echo(
            f"Warning: {root} is not a Delta table and holds none (yet): serving it as an "
            "empty lake",
            err=True,
        )
    return lake


def _refusing(
    wrap: Callable[[DatabaseOps, TableFs], Vfs],
) -> Callable[[DatabaseOps, TableFs], Vfs]:
    """Return ``wrap`` with a table it cannot wrap (``--map-uid`` on a table without users,
    or naming a user the table does not have) refusing access instead."""

    def wrapped(db: DatabaseOps, fs: TableFs) -> Vfs:
        try:
            return wrap(db, fs)
        except InvalidOperation as err:
            raise PermissionDenied(str(err)) from err

    return wrapped


def check_lake_options(*, http_listen: str | None) -> None:
    """Refuse the options a lake root does not support yet."""
    if http_listen is not None:
        raise click.BadParameter("not supported with a lake root yet", param_hint="--http")
