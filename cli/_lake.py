"""``posixlake serve ROOT`` / ``mount ROOT``: a lake root, every table under it a directory.

A ROOT that is not itself a Delta table (no ``_delta_log/`` in it) but a directory, or an
object-store prefix holding objects, is served as a lake (``nfs.lake.LakeFs``); a table
keeps the single-table share exactly.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click

from cli._common import credentials, engine_kwargs, get_options, storage_for
from posixlake.errors import InvalidOperation, IoError, PermissionDenied, PosixLakeError

if TYPE_CHECKING:
    from collections.abc import Callable

    from cli._control import ControlPlane
    from nfs.lake import LakeFs
    from nfs.protocol.vfs import Vfs
    from nfs.table.tablefs import TableFs
    from posixlake import DatabaseOps

__all__ = ["LakeCatalog", "lake_plane", "lake_root", "open_lake"]


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


class LakeCatalog:
    """A lake's tables for the HTTP control plane (a ``cli._control.TableCatalog``), named
    by their path under the root.

    The figures are the open tables' (listing the lake opens none); a request about one
    table opens it through the lake (the same table face the NFS calls use, its LRU and
    its login), and keeps it open while the request runs.
    """

    def __init__(self, lake: LakeFs) -> None:
        self._lake = lake

    def names(self) -> list[str]:
        return self._lake.tables()

    def loaded(self) -> Mapping[str, DatabaseOps]:
        return self._lake.open_databases()

    def location(self, name: str) -> str:
        from posixlake.storage import join_uri

        return join_uri(self._lake.root, name)

    @contextmanager
    def use(self, name: str) -> Iterator[DatabaseOps]:
        from nfs.protocol.nfs3 import Nfsstat3
        from nfs.protocol.vfs import NfsError

        try:
            held = self._lake.using_table(name)
            db = held.__enter__()
        except NfsError as err:
            if err.status == Nfsstat3.NFS3ERR_ACCES:
                raise PermissionDenied(f"{name}: the server may not open it") from err
            if err.status == Nfsstat3.NFS3ERR_STALE:
                raise KeyError(name) from err  # gone since it was listed
            raise IoError(f"{name}: cannot open it: {err}") from err
        try:
            yield db
        finally:
            held.__exit__(None, None, None)


def lake_plane(
    lake: LakeFs, server: Any, listen: tuple[str, int], token: str | None
) -> ControlPlane:
    """Start the HTTP control plane of ``serve ROOT`` for a lake and its NFS server.

    Raises:
        IoError: the address cannot be bound.
    """
    from cli._control import start_plane
    from cli._prom import LakeFigures

    def figures() -> LakeFigures:
        return LakeFigures(len(lake.tables()), len(lake.open_tables()), lake.opened)

    return start_plane(
        LakeCatalog(lake),
        server,
        listen,
        token,
        share_stats=lambda: {path: fs.stats() for path, fs in lake.open_tables().items()},
        lake_stats=figures,
        ready=lake.listing_failure,
    )
