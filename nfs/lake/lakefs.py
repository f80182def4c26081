"""LakeFs: every Delta table under a root as a directory, each one a table face.

The tree (see docs/design.md, "The NFS face", "The lake")::

    /                       the lake root: its tables and the prefixes leading to them
    /<prefix>/.../          a directory with a table below it
    /<table>/               exactly what ``nfs.table.tablefs.TableFs`` shows at its root:
                            data/data.csv, schema.sql, versions/<N>/, changes.csv, ...

LakeFs composes one table face per table, opened on first use (a LOOKUP into it, a READ,
an ACCESS...; listing the lake and GETATTR of a table's directory open nothing) and kept in
an LRU of at most ``max_open`` tables (:mod:`nfs.lake.tables`).

Every call on a table's file goes to that table's face with the table's own id (see
:mod:`nfs.lake.ids` for the id layout and why handles survive restarts), and so do the
optional hooks the protocol uses: ``finish``/``discard`` (NFSv4 CLOSE and lease expiry,
`nfs.protocol.vfs.EditBounds`), the ``*_nowait`` methods (an open table only:
`nfs.protocol.vfs.NowaitVfs`), ``write_verifier`` (one verifier for the lake, changing
whenever a table's changes), ``close``. Each table's own users and
roles apply: a table the server's user may only read is read-only (NFS3ERR_ROFS), and a
table it may not open (no credentials, no permission) is listed, with mode 000, and
refuses access (NFS3ERR_ACCES).

The listing is cached for ``listing_ttl`` seconds (by default the table face's version
TTL): tables another process creates or removes appear and disappear within it. A handle
into a table that is gone answers NFS3ERR_STALE.

Nothing is dropped by accident: RMDIR or RENAME of a table's directory, or of a prefix
directory, is refused with NFS3ERR_ACCES and a warning log line; creating files or
directories at the lake level is refused likewise. ``rm -r table/`` removes
``data/data.csv`` first, which (as in a single-table share) deletes the rows in one commit;
the table, its directory, schema and history stay.

Tables made by writing (with a ``creator``): MKDIR at the lake level makes an empty
directory in which ``schema.sql`` (or, with a ``rows_creator``, ``data.csv``) written
creates the table (:mod:`nfs.lake.newtables`). The directory's handle then stands for the
table's directory.

The facade routes each call: an id of slot 0 is a lake directory (:mod:`nfs.lake.listing`)
or a new table's (:mod:`nfs.lake.newtables`); any other goes to its table's face, open in
the LRU of :mod:`nfs.lake.tables`. What the parts share is :class:`nfs.lake.state.LakeState`.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from nfs.lake.discovery import discover_tables
from nfs.lake.ids import lake_id, path_hash, split_id
from nfs.lake.listing import Listing, parent
from nfs.lake.newrows import DATA_CSV, RowsCreator
from nfs.lake.newtables import NewTables, TableCreator
from nfs.lake.state import DIR_MODE, LAKE_ROOT, SCHEMA_SQL, TABLE_ROOT_LOCAL, LakeState, NewTable
from nfs.lake.tables import (
    DEFAULT_KEEP_OPEN,
    DEFAULT_MAX_OPEN,
    LakeTable,
    OpenTables,
    TableOpener,
)
from nfs.protocol.nfs3 import Fattr3, Nfsstat3, Sattr3, StableHow
from nfs.protocol.nfs3.types import FileSlice, Pieces
from nfs.protocol.rpc import CallContext
from nfs.protocol.vfs import (
    DirEntry,
    DirPage,
    EditBounds,
    FileId,
    FsStat,
    NfsError,
    VfsCapabilities,
    posix_access,
)
from nfs.table.state import DEFAULT_IDLE_SECONDS
from nfs.table.tablefs import TableFs

if TYPE_CHECKING:
    from posixlake import DatabaseOps

__all__ = [
    "DEFAULT_KEEP_OPEN",
    "DEFAULT_MAX_OPEN",
    "SCHEMA_SQL",
    "LakeFs",
    "LakeTable",
    "TableCreator",
    "TableOpener",
]

logger = logging.getLogger(__name__)


class LakeFs:
    """The Vfs of a lake: every table under a root (see the module docstring).

    Args:
        root: the lake root, a local directory or an ``s3://``, ``az://``, ``abfss://`` URI.
        opener: opens one table (a path relative to ``root``) as a `LakeTable`.
        storage_options: delta-rs style options for listing an object-store root.
        state_dir: the lake's own state (``slots.json``: see :mod:`nfs.lake.ids`); None
            keeps the slots in memory (handles then survive no restart).
        listing_ttl: how long a listing of the root is trusted.
        max_open: tables kept open at most (see the module docstring).
        keep_open: a table used this recently is not closed to make room.
        read_only: serve the whole lake read-only.
        clock: monotonic seconds (injected in tests).
        wallclock: seconds since the epoch, for the lake directories' times.
        discover: lists the tables (default: :func:`nfs.lake.discovery.discover_tables`).
        creator: creates a table from a ``schema.sql`` written into a new directory (see
            the module docstring); None: directories cannot be made at the lake level.
        rows_creator: creates a table from a ``data.csv`` written into a new directory
            (:mod:`nfs.lake.newrows`; with ``creator`` only); None: only schema.sql.
        idle_seconds: an NFSv3 writer of a new table's data.csv is done after this long
            without a write (after a COMMIT, whole lines): the table is made then.
        idle_timer: run a thread that makes those tables (else :meth:`poll` does).
    """

    def __init__(
        self,
        root: str,
        opener: TableOpener,
        *,
        storage_options: Mapping[str, str] | None = None,
        state_dir: str | Path | None = None,
        listing_ttl: float = 0.5,
        max_open: int = DEFAULT_MAX_OPEN,
        keep_open: float = DEFAULT_KEEP_OPEN,
        read_only: bool = False,
        clock: Callable[[], float] = time.monotonic,
        wallclock: Callable[[], float] = time.time,
        discover: Callable[[], list[str]] | None = None,
        creator: TableCreator | None = None,
        rows_creator: RowsCreator | None = None,
        idle_seconds: float = DEFAULT_IDLE_SECONDS,
        idle_timer: bool = True,
    ) -> None:
        self.root = root
        self._state = LakeState(
            root, Path(state_dir) if state_dir is not None else None, clock, wallclock
        )
        self._tables = OpenTables(
            self._state,
            opener,
            max_open=max_open,
            keep_open=keep_open,
            boot=secrets.token_bytes(8),
        )
        self._listing = Listing(
            self._state,
            self._tables,
            discover or (lambda: discover_tables(root, storage_options)),
            ttl=listing_ttl,
        )
        self._read_only = read_only
        self._dir_mode = 0o777 if creator is not None else DIR_MODE
        self._dir_gen = path_hash("lake-dir", root).to_bytes(8, "big")
        self._unfinished_at_close = 0
        self.fsid = self._state.fsid
        self._new = NewTables(
            self._state,
            self._listing,
            creator=creator,
            rows_creator=rows_creator,
            idle_seconds=idle_seconds,
            idle_timer=idle_timer,
        )

    # ------------------------------------------------------------ the listing, open tables

    def tables(self) -> list[str]:
        """Return the tables of the lake now (paths relative to the root, sorted)."""
        return sorted(self._listing.current().tables)

    def refresh(self) -> None:
        """Forget the cached listing: the next call lists the root again."""
        self._listing.refresh()

    def listing_failure(self) -> str | None:
        """Why the root cannot be listed now (None: it can), listing it again if the
        listing is older than the TTL (the lake then shows its last listing)."""
        try:
            self._listing.current()
        except NfsError as err:
            return str(err)
        return self._listing.failure

    def open_tables(self) -> dict[str, TableFs]:
        """Return the table faces open now, by table path."""
        return self._tables.open_tables()

    def open_databases(self) -> dict[str, DatabaseOps]:
        """Return the tables open now, by table path (those whose opener gave a DatabaseOps):
        what the HTTP control plane reports figures of without opening any."""
        entries = self._tables.open_entries().items()
        return {path: t.db for path, t in entries if t.db is not None}

    @contextmanager
    def using_table(self, path: str) -> Iterator[DatabaseOps]:
        """The table at ``path``, opened if it is not (as a first NFS call in it would),
        and kept open (never evicted) until the block ends (the HTTP API's calls).

        Raises:
            KeyError: no table at ``path`` in the lake (now), or its opener gives no
                DatabaseOps.
            NfsError: the table cannot be opened (NFS3ERR_ACCES: the server's login may
                not open it).
        """
        listing = self._listing.current()
        slot = self._state.slots.slot_of(path) if path in listing.tables else None
        if slot is None:
            raise KeyError(path)
        with self._tables.using(slot, path) as table:
            if table.db is None:
                raise KeyError(path)
            yield table.db

    @property
    def opened(self) -> int:
        """Tables opened since start (for tests and metrics)."""
        return self._tables.opened

    @property
    def state_dir(self) -> Path | None:
        """The lake's state directory (the NFSv4 service keeps its clients there)."""
        return self._state.state_dir

    # ------------------------------------------------------------ routing helpers

    @contextmanager
    def _using(self, slot: int) -> Iterator[LakeTable]:
        path = self._listing.table_path(slot, self._listing.current())
        with self._tables.using(slot, path) as table:
            yield table

    def _fix(self, slot: int, attrs: Fattr3) -> Fattr3:
        return replace(attrs, fileid=self._tables.out(slot, attrs.fileid), fsid=self.fsid)

    def _writable(self, table: LakeTable) -> None:
        if table.target.capabilities().read_only:
            raise NfsError(Nfsstat3.NFS3ERR_ROFS, "the table is read-only for this server")

    def _refuse(self, what: str, path: str) -> NfsError:
        logger.warning(
            "refused %s of %s: a table directory is never removed or renamed through the share",
            what,
            path or "/",
        )
        return NfsError(
            Nfsstat3.NFS3ERR_ACCES,
            f"{what} of lake directory {path!r} refused: tables are not dropped through NFS",
        )

    def _lake_dir_change(self, dir_id: FileId, name: str, what: str) -> NfsError:
        listing = self._listing.current()
        path = self._listing.dir(split_id(dir_id)[1], listing)
        if name in listing.children.get(path, ()):
            return NfsError(Nfsstat3.NFS3ERR_EXIST, name)
        return NfsError(
            Nfsstat3.NFS3ERR_ACCES, f"cannot {what} {name!r} in the lake: only tables live here"
        )

    def _table_dir(self, dir_id: FileId) -> FileId:
        """Return the table's directory for the directory a new table was made in (a client
        that made it still holds that handle), else ``dir_id``."""
        slot, local = split_id(dir_id)
        if slot != 0:
            return dir_id
        n = self._state.new_of(local)
        if n is None or not n.created or local not in (n.dir_local, n.data_local):
            return dir_id
        table = self._state.slots.slot_of(n.path)
        if table is None:
            return dir_id
        if local == n.data_local:  # its data/: the table's
            root = lake_id(table, TABLE_ROOT_LOCAL)
            return self.lookup(root, "data", CallContext.local())
        return lake_id(table, TABLE_ROOT_LOCAL)

    def _created_rows(self, n: NewTable, local: int) -> FileId | None:
        """The id of the table's data/data.csv, for the handle of the data.csv that
        created it (its writer still holds that handle), else None."""
        if not n.created or n.rows is None or not n.rows.made or local != n.file_local:
            return None
        slot = self._state.slots.slot_of(n.path)
        if slot is None:
            return None
        table = lake_id(slot, TABLE_ROOT_LOCAL)
        ctx = CallContext.local()
        return self.lookup(self.lookup(table, "data", ctx), DATA_CSV, ctx)

    def _moved(self, local: int) -> tuple[NewTable | None, FileId | None]:
        """The new table of the lake-level ``local`` and, if it is the data.csv that made
        its table, the id of the table's data/data.csv."""
        n = self._state.new_of(local)
        return n, None if n is None else self._created_rows(n, local)

    def _refuse_late_rows(self, local: int, name: str) -> None:
        """A ``data.csv`` created at a table's top level (a second client's ``cp`` of a
        table made meanwhile from its data.csv): NFS3ERR_EXIST, not a stray file (the
        rows live in data/data.csv, where they can be added)."""
        if self._new.from_rows and local == TABLE_ROOT_LOCAL and name == DATA_CSV:
            raise NfsError(
                Nfsstat3.NFS3ERR_EXIST, f"the table exists: its rows are in data/{DATA_CSV}"
            )

    # ------------------------------------------------------------ Vfs: attributes

    def capabilities(self) -> VfsCapabilities:
        """Return the static properties (read-only if the lake is served read-only)."""
        return VfsCapabilities(read_only=self._read_only, max_file_size=1 << 40)

    def root_dir(self) -> FileId:
        """Return the lake root's id."""
        return lake_id(0, LAKE_ROOT)

    def generation(self, fid: FileId) -> bytes:
        """Return the handle generation: fixed for the lake's directories and a table's
        directory (while they exist), the table face's own for anything in a table."""
        slot, local = split_id(fid)
        listing = self._listing.current()
        if slot == 0:
            if self._state.new_of(local) is None:
                self._listing.dir(local, listing)
            return self._dir_gen
        path = self._listing.table_path(slot, listing)
        if local == TABLE_ROOT_LOCAL:
            return path_hash("lake-table", self.root, path).to_bytes(8, "big")
        return self._tables.generation(slot, path, self._tables.inner(slot, local))

    def getattr(self, fid: FileId) -> Fattr3:
        """Return the attributes; a table's directory is answered without opening it."""
        slot, local = split_id(fid)
        listing = self._listing.current()
        if slot == 0:
            n = self._state.new_of(local)
            moved = None if n is None else self._created_rows(n, local)
            if moved is not None:
                return self.getattr(moved)
            if n is not None:
                return self._new.attrs(fid, n, local)
            return self._listing.dir_attrs(
                fid, listing, self._listing.dir(local, listing), self._dir_mode
            )
        path = self._listing.table_path(slot, listing)
        if local == TABLE_ROOT_LOCAL and not self._tables.is_open(slot):
            return self._listing.dir_attrs(
                fid, listing, path, 0 if self._tables.is_refused(slot) else 0o777
            )
        inner = self._tables.inner(slot, local)
        try:
            with self._using(slot) as t:
                return self._fix(slot, t.target.getattr(inner))
        except NfsError as err:
            if local == TABLE_ROOT_LOCAL and err.status == Nfsstat3.NFS3ERR_ACCES:
                return self._listing.dir_attrs(fid, listing, path, 0)
            raise

    def setattr(self, fid: FileId, attrs: Sattr3, ctx: CallContext) -> Fattr3:
        """Set attributes of a table's file (the lake's directories refuse: ACCES)."""
        slot, local = split_id(fid)
        if slot == 0:
            n = self._state.new_of(local)
            if n is not None:
                moved = self._created_rows(n, local)
                if moved is not None:
                    return self.setattr(moved, attrs, ctx)
                self._new.truncate(n, local, attrs.size, ctx)
                return self._new.attrs(fid, n, local)
            self._listing.dir(local, self._listing.current())
            raise NfsError(Nfsstat3.NFS3ERR_ACCES, "the lake's directories cannot be changed")
        inner = self._tables.inner(slot, local)
        with self._using(slot) as t:
            self._writable(t)
            return self._fix(slot, t.target.setattr(inner, attrs, ctx))

    def access(self, fid: FileId, mask: int, ctx: CallContext) -> int:
        """Grant ACCESS3 bits: the lake's directories are r-x, a table's files its own."""
        slot, local = split_id(fid)
        listing = self._listing.current()
        if slot == 0:
            n = self._state.new_of(local)
            if n is not None:
                is_dir = local != n.file_local
                mode = 0o777 if is_dir else 0o666
                return posix_access(mask, mode=mode, uid=0, gid=0, is_dir=is_dir, ctx=ctx)
            self._listing.dir(local, listing)
            mode = self._dir_mode
            return posix_access(mask, mode=mode, uid=0, gid=0, is_dir=True, ctx=ctx)
        inner = self._tables.inner(slot, local)
        try:
            with self._using(slot) as t:
                return t.target.access(inner, mask, ctx)
        except NfsError as err:
            if err.status == Nfsstat3.NFS3ERR_ACCES:
                return 0
            raise

    def fsstat(self, fid: FileId) -> FsStat:
        """Return usage figures (a table's scratch area for a table's files)."""
        slot, local = split_id(fid)
        if slot == 0:
            return FsStat()
        inner = self._tables.inner(slot, local)
        with self._using(slot) as t:
            return t.target.fsstat(inner)

    # ------------------------------------------------------------ Vfs: names

    def lookup(self, dir_id: FileId, name: str, ctx: CallContext) -> FileId:
        """Return the id of ``name``: a table or prefix in a lake directory, else the table's."""
        dir_id = self._table_dir(dir_id)
        slot, local = split_id(dir_id)
        listing = self._listing.current()
        if slot == 0:
            n = self._new.pending(local)
            if n is not None:
                return self._new.lookup(listing, n, local, dir_id, name)
            return self._listing.lookup(listing, dir_id, self._listing.dir(local, listing), name)
        path = self._listing.table_path(slot, listing)
        if local == TABLE_ROOT_LOCAL and name == "..":
            return self._listing.id_of(parent(path), listing)
        inner = self._tables.inner(slot, local)
        with self._using(slot) as t:
            return self._tables.out(slot, t.target.lookup(inner, name, ctx))

    def readdir(self, dir_id: FileId, *, after: int, max_entries: int, ctx: CallContext) -> DirPage:
        """List a lake directory (see :func:`nfs.lake.listing.dir_page` for its cookies), a
        new table's, or a table's directory (the table face's own listing)."""
        dir_id = self._table_dir(dir_id)
        slot, local = split_id(dir_id)
        listing = self._listing.current()
        if slot == 0:
            n = self._new.pending(local)
            if n is not None:
                return self._new.readdir(
                    listing, n, local, dir_id, after=after, max_entries=max_entries
                )
            path = self._listing.dir(local, listing)
            return self._listing.readdir(
                listing, dir_id, path, after=after, max_entries=max_entries
            )
        path = self._listing.table_path(slot, listing)
        inner = self._tables.inner(slot, local)
        with self._using(slot) as t:
            page = t.target.readdir(inner, after=after, max_entries=max_entries, ctx=ctx)
        self._tables.prepare(slot, (e.fileid for e in page.entries))  # one save
        out = []
        for e in page.entries:
            if local == TABLE_ROOT_LOCAL and e.name == "..":
                fid = self._listing.id_of(parent(path), listing)
            else:
                fid = self._tables.out(slot, e.fileid)
            out.append(DirEntry(fid, e.name, e.cookie))
        return DirPage(tuple(out), page.eof, page.cookieverf)

    def create(
        self, dir_id: FileId, name: str, attrs: Sattr3, ctx: CallContext, *, guarded: bool
    ) -> FileId:
        """Create a file in a table's directory (refused at the lake level)."""
        dir_id = self._table_dir(dir_id)
        slot, local = split_id(dir_id)
        if slot == 0:
            if self._new.pending(local) is not None:
                return self._new.create_file(dir_id, name, attrs.size, ctx, guarded=guarded)
            raise self._lake_dir_change(dir_id, name, "create")
        self._refuse_late_rows(local, name)
        inner = self._tables.inner(slot, local)
        with self._using(slot) as t:
            self._writable(t)
            return self._tables.out(slot, t.target.create(inner, name, attrs, ctx, guarded=guarded))

    def create_exclusive(
        self, dir_id: FileId, name: str, verifier: bytes, ctx: CallContext
    ) -> FileId:
        """Create a file exclusively in a table's directory (refused at the lake level)."""
        dir_id = self._table_dir(dir_id)
        slot, local = split_id(dir_id)
        if slot == 0:
            if self._new.pending(local) is not None:
                return self._new.create_file(dir_id, name, None, ctx, guarded=True)
            raise self._lake_dir_change(dir_id, name, "create")
        self._refuse_late_rows(local, name)
        inner = self._tables.inner(slot, local)
        with self._using(slot) as t:
            self._writable(t)
            return self._tables.out(slot, t.target.create_exclusive(inner, name, verifier, ctx))

    def mkdir(self, dir_id: FileId, name: str, attrs: Sattr3, ctx: CallContext) -> FileId:
        """Make a directory in a table's directory (refused at the lake level)."""
        dir_id = self._table_dir(dir_id)
        slot, local = split_id(dir_id)
        if slot == 0:
            n = self._new.pending(local) if self._new.can_make else None
            if n is not None:
                return self._new.mkdir_in(n, local, name)
            if not self._new.can_make:
                raise self._lake_dir_change(dir_id, name, "make a directory")
            listing = self._listing.current()
            return self._new.mkdir(listing, self._listing.dir(local, listing), name)
        inner = self._tables.inner(slot, local)
        with self._using(slot) as t:
            self._writable(t)
            return self._tables.out(slot, t.target.mkdir(inner, name, attrs, ctx))

    def remove(self, dir_id: FileId, name: str, ctx: CallContext) -> None:
        """Remove a table's file (data.csv: every row, one commit); lake entries are
        directories (NFS3ERR_ISDIR)."""
        dir_id = self._table_dir(dir_id)
        slot, local = split_id(dir_id)
        if slot == 0:
            n = self._new.pending(local)
            if n is not None:
                self._new.remove(n, local, name)
                return
            listing = self._listing.current()
            path = self._listing.dir(local, listing)
            if name in listing.children.get(path, ()):
                raise NfsError(Nfsstat3.NFS3ERR_ISDIR, name)
            raise NfsError(Nfsstat3.NFS3ERR_NOENT, name)
        inner = self._tables.inner(slot, local)
        with self._using(slot) as t:
            self._writable(t)
            t.target.remove(inner, name, ctx)

    def rmdir(self, dir_id: FileId, name: str, ctx: CallContext) -> None:
        """Remove a directory in a table; a table's or prefix's directory: NFS3ERR_ACCES."""
        dir_id = self._table_dir(dir_id)
        slot, local = split_id(dir_id)
        if slot == 0:
            if name in (".", ".."):
                raise NfsError(Nfsstat3.NFS3ERR_INVAL, name)
            sub = self._new.pending(local)
            if sub is not None:  # in a new table directory: only its data/ is a directory
                self._new.rmdir(sub, local, name)
                return
            listing = self._listing.current()
            path = self._listing.dir(local, listing)
            if self._new.rmdir_new(f"{path}/{name}" if path else name, name):
                return  # not a table (yet): it may go
            if name in listing.children.get(path, ()):
                raise self._refuse("RMDIR", f"{path}/{name}" if path else name)
            raise NfsError(Nfsstat3.NFS3ERR_NOENT, name)
        inner = self._tables.inner(slot, local)
        with self._using(slot) as t:
            self._writable(t)
            t.target.rmdir(inner, name, ctx)

    def rename(
        self,
        from_dir: FileId,
        from_name: str,
        to_dir: FileId,
        to_name: str,
        ctx: CallContext,
    ) -> None:
        """Rename within one table; a lake entry (table or prefix): NFS3ERR_ACCES; between
        tables, or out of or into the lake level: NFS3ERR_XDEV."""
        from_dir, to_dir = self._table_dir(from_dir), self._table_dir(to_dir)
        from_slot, from_local = split_id(from_dir)
        to_slot, to_local = split_id(to_dir)
        if from_slot == 0 or to_slot == 0:
            for local in (from_local, to_local):
                if self._state.new_of(local) is not None:
                    raise NfsError(Nfsstat3.NFS3ERR_ACCES, "a new table's files cannot be renamed")
        if from_slot == 0:
            listing = self._listing.current()
            path = self._listing.dir(from_local, listing)
            if from_name in listing.children.get(path, ()):
                raise self._refuse("RENAME", f"{path}/{from_name}" if path else from_name)
            raise NfsError(Nfsstat3.NFS3ERR_NOENT, from_name)
        if to_slot != from_slot:
            raise NfsError(Nfsstat3.NFS3ERR_XDEV, "a rename between tables")
        inner_from = self._tables.inner(from_slot, from_local)
        inner_to = self._tables.inner(to_slot, to_local)
        with self._using(from_slot) as t:
            self._writable(t)
            t.target.rename(inner_from, from_name, inner_to, to_name, ctx)

    # ------------------------------------------------------------ Vfs: without waiting

    # For the transport's event loop (nfs.protocol.vfs.NowaitVfs): a call on a file of a
    # table that is open, while the listing is fresh, goes to the table face's own
    # ``*_nowait`` method; anything else (the lake's directories, a table not open, a
    # listing due, a table face that would wait) answers None: the full path.

    def _fresh_table(self, slot: int) -> str | None:
        """The path of the table of ``slot`` if the cached listing is fresh and has it."""
        if slot == 0:
            return None
        listing = self._listing.fresh()
        if listing is None:
            return None
        path = self._state.slots.table_of(slot)
        return path if path is not None and path in listing.tables else None

    def generation_nowait(self, fid: FileId) -> bytes | None:
        """`generation` of a table's directory, or of a file of an open table whose face
        tells it without waiting (and whose kept generation is settled); else None."""
        slot, local = split_id(fid)
        path = self._fresh_table(slot)
        if path is None:
            return None
        if local == TABLE_ROOT_LOCAL:
            return path_hash("lake-table", self.root, path).to_bytes(8, "big")
        with self._tables.if_open(slot) as table:
            inner = None if table is None else self._tables.inner_ids(slot).inner(local)
            if table is None or inner is None:
                return None
            return self._tables.generation_nowait(slot, inner, table)

    def getattr_nowait(self, fid: FileId, ctx: CallContext) -> Fattr3 | None:
        """`getattr` of a file of an open table, if its face answers without waiting."""
        slot, local = split_id(fid)
        if self._fresh_table(slot) is None:
            return None
        with self._tables.if_open(slot) as table:
            nowait = None if table is None else getattr(table.target, "getattr_nowait", None)
            inner = None if nowait is None else self._tables.inner_ids(slot).inner(local)
            if nowait is None or inner is None:
                return None
            attrs: Fattr3 | None = nowait(inner, ctx)
            return None if attrs is None else self._fix(slot, attrs)

    def lookup_nowait(self, dir_id: FileId, name: str, ctx: CallContext) -> FileId | None:
        """`lookup` in a directory of an open table, if its face answers without waiting
        (never a ``/partitions`` entry: numbering one may save the lake's map)."""
        slot, local = split_id(dir_id)
        if self._fresh_table(slot) is None or (local == TABLE_ROOT_LOCAL and name == ".."):
            return None
        with self._tables.if_open(slot) as table:
            nowait = None if table is None else getattr(table.target, "lookup_nowait", None)
            inner = None if nowait is None else self._tables.inner_ids(slot).inner(local)
            if nowait is None or inner is None:
                return None
            found: FileId | None = nowait(inner, name, ctx)
            return None if found is None else self._tables.out_nowait(slot, found)

    def access_nowait(self, fid: FileId, mask: int, ctx: CallContext) -> int | None:
        """`access` of a file of an open table, if its face answers without waiting."""
        slot, local = split_id(fid)
        if self._fresh_table(slot) is None:
            return None
        with self._tables.if_open(slot) as table:
            nowait = None if table is None else getattr(table.target, "access_nowait", None)
            inner = None if nowait is None else self._tables.inner_ids(slot).inner(local)
            if nowait is None or inner is None:
                return None
            granted: int | None = nowait(inner, mask, ctx)
            return granted

    def commit_nowait(self, fid: FileId, offset: int, count: int, ctx: CallContext) -> bool:
        """`commit` of a file of an open table, if its face has nothing to do for it."""
        slot, local = split_id(fid)
        if self._fresh_table(slot) is None:
            return False
        with self._tables.if_open(slot) as table:
            nowait = None if table is None else getattr(table.target, "commit_nowait", None)
            inner = None if nowait is None else self._tables.inner_ids(slot).inner(local)
            if nowait is None or inner is None:
                return False
            done: bool = nowait(inner, offset, count, ctx)
            return done

    # ------------------------------------------------------------ Vfs: data

    def read(
        self, fid: FileId, offset: int, count: int, ctx: CallContext
    ) -> tuple[bytes | memoryview, bool]:
        """Read a table's file (a lake directory: NFS3ERR_ISDIR)."""
        slot, local = split_id(fid)
        if slot == 0:
            n = self._state.new_of(local)
            if n is None or local != n.file_local:
                raise NfsError(Nfsstat3.NFS3ERR_ISDIR)
            moved = self._created_rows(n, local)
            if moved is not None:
                return self.read(moved, offset, count, ctx)
            return n.read(offset, count), offset + count >= n.size
        inner = self._tables.inner(slot, local)
        with self._using(slot) as t:
            return t.target.read(inner, offset, count, ctx)

    def read_nowait(
        self, fid: FileId, offset: int, count: int, ctx: CallContext
    ) -> tuple[bytes | memoryview | Pieces | FileSlice, bool, Fattr3] | None:
        """Read without waiting if the table is open and its face can; else None."""
        slot, local = split_id(fid)
        if self._fresh_table(slot) is None:
            return None
        with self._tables.if_open(slot) as table:
            if table is None:
                return None
            nowait = getattr(table.target, "read_nowait", None)
            inner = self._tables.inner_ids(slot).inner(local)
            if nowait is None or inner is None:
                return None
            got: tuple[bytes | memoryview | Pieces | FileSlice, bool, Fattr3] | None = nowait(
                inner, offset, count, ctx
            )
            if got is None:
                return None
            return got[0], got[1], self._fix(slot, got[2])

    def write(
        self, fid: FileId, offset: int, data: bytes, stable: StableHow, ctx: CallContext
    ) -> tuple[int, StableHow]:
        """Write a table's file (staged for the caller, as the table face does); a new
        table's schema.sql or data.csv (see :mod:`nfs.lake.newtables`)."""
        slot, local = split_id(fid)
        if slot == 0:
            _, moved = self._moved(local)
            if moved is not None:  # the handle that made the table: its data.csv now
                return self.write(moved, offset, data, stable, ctx)
            done = self._new.write(local, offset, data, stable, ctx)
            if done is None:  # the table was made from it meanwhile: the write goes there
                return self.write(fid, offset, data, stable, ctx)
            return done
        inner = self._tables.inner(slot, local)
        with self._using(slot) as t:
            self._writable(t)
            return t.target.write(inner, offset, data, stable, ctx)

    def commit(self, fid: FileId, offset: int, count: int, ctx: CallContext) -> None:
        """COMMIT a table's file (makes the caller's staged data durable)."""
        slot, local = split_id(fid)
        if slot == 0:
            n, moved = self._moved(local)
            if moved is not None:
                self.commit(moved, offset, count, ctx)
            elif n is not None:
                self._new.commit(n, local, ctx)
            return
        inner = self._tables.inner(slot, local)
        with self._using(slot) as t:
            t.target.commit(inner, offset, count, ctx)

    def write_verifier(self) -> bytes:
        """Return one WRITE/COMMIT verifier for the lake: new per boot, and whenever the
        verifier of an open table changes (it lost staged data)."""
        return self._tables.write_verifier()

    # ------------------------------------------------------------ edits and lifecycle

    def finish(self, fid: FileId, ctx: CallContext) -> object:
        """Apply the caller's staged edit of ``fid`` now (NFSv4 CLOSE), in its table."""
        slot, local = split_id(fid)
        if slot == 0:
            n, moved = self._moved(local)
            if moved is not None:  # a CLOSE resent after the table was made
                return self.finish(moved, ctx)
            if n is not None:
                self._new.finish(n, local, ctx)
            return None
        inner = self._tables.inner(slot, local)
        with self._using(slot) as t:
            if isinstance(t.target, EditBounds):
                return t.target.finish(inner, ctx)
            return None

    def discard(self, fid: FileId, ctx: CallContext) -> bool:
        """Drop the caller's staged edit of ``fid`` unapplied (an expired NFSv4 lease)."""
        slot, local = split_id(fid)
        if slot == 0:
            return self._new.discard(local, ctx)
        inner = self._tables.inner(slot, local)
        with self._using(slot) as t:
            if isinstance(t.target, EditBounds):
                return t.target.discard(inner, ctx)
            return False

    def client_mounted(self, ctx: CallContext) -> None:
        """A client mounted (an NFSv3 NULL, `nfs.protocol.vfs.MountAware`): every open
        table settles what an earlier process at its address left
        (`TableFs.client_mounted`)."""
        for fs in self.open_tables().values():
            fs.client_mounted(ctx)

    def client_mounted_nowait(self, ctx: CallContext) -> bool:
        """`client_mounted` if no open table needs to wait for it: True when every one
        settled, False when one would wait (the full path settles the rest; settling a
        table twice does nothing)."""
        return all(fs.client_mounted_nowait(ctx) for fs in self.open_tables().values())

    def poll(self) -> None:
        """Apply the idle stagings of every open table (see `TableFs.poll`), and make the
        new tables whose data.csv writer is done."""
        self._new.poll()
        for fs in self.open_tables().values():
            fs.poll()

    def close(self) -> None:
        """Close every open table (NfsServer calls this at shutdown); unfinished staged
        writes stay journaled for the next start (see `TableFs.close`)."""
        self._new.stop()
        unfinished = self._tables.close()
        unfinished += self._new.close()
        self._unfinished_at_close = unfinished

    @property
    def unfinished_at_close(self) -> int:
        """Staged writes :meth:`close` kept in the journals, over every table."""
        return self._unfinished_at_close
