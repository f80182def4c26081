"""Tables made by writing: directories made by MKDIR at the lake level, and the table
made from the ``schema.sql`` or ``data.csv`` written into one.

:class:`NewTables` (with a ``creator``) makes an empty directory in memory
(:class:`~nfs.lake.state.NewTable`), in which only ``schema.sql`` may be created (or,
with a ``rows_creator``, ``data.csv`` or ``data/data.csv``: the table made from its rows
at the end of the edit, see :mod:`nfs.lake.newrows`). Its CREATE TABLE
(:mod:`nfs.lake.create`) creates the table when the writer is done: a FILE_SYNC WRITE,
a COMMIT, or the NFSv4 CLOSE (a v4 COMMIT only validates). Bad SQL: NFS3ERR_INVAL,
nothing created; a table made meanwhile at that path: NFS3ERR_EXIST. An NFSv3 writer of
data.csv is done after ``idle_seconds`` without a write (a timer thread, or
:meth:`NewTables.poll`); staged rows an earlier server left are recovered at start.
Routing a call here (an id of slot 0 that is a new table's) is the facade's:
:class:`~nfs.lake.lakefs.LakeFs`. See docs/design.md, "The lake".
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from typing import Final

from nfs.lake.create import TableSpec, parse_create_table
from nfs.lake.ids import lake_id, path_hash, split_id
from nfs.lake.listing import Listing, Tree, dir_page, parent
from nfs.lake.newrows import DATA_CSV, RowsCreator, RowsJournal, create_rows
from nfs.lake.state import LAKE_ROOT, SCHEMA_SQL, LakeState, NewTable, lake_attrs
from nfs.protocol.nfs3 import Fattr3, Nfsstat3, StableHow
from nfs.protocol.rpc import CallContext
from nfs.protocol.vfs import BOUNDED_PEER_PREFIX, DirPage, FileId, NfsError
from nfs.table.state import nfs_error
from posixlake.errors import AlreadyExists, PosixLakeError

__all__ = ["NewTables", "TableCreator"]

logger = logging.getLogger(__name__)

_PERCENT_ESCAPE: Final = re.compile("%[0-9A-Fa-f]{2}")

TableCreator = Callable[[str, TableSpec], None]
"""Creates a table at a path relative to the lake root (AlreadyExists if one is there)."""


class NewTables:
    """The directories made at the lake level and the tables made in them (see the
    module docstring).

    Args:
        state: the lake's shared state (its new tables, lock, clocks, slots).
        listing: the lake's listing (rebuilt when a directory or a table is made).
        creator: creates a table from its schema.sql; None: no directory can be made.
        rows_creator: creates a table from its data.csv (with ``creator`` only); None:
            only schema.sql.
        idle_seconds: an NFSv3 writer of a new table's data.csv is done after this long
            without a write (after a COMMIT, whole lines): the table is made then.
        idle_timer: run a thread that makes those tables (else :meth:`poll` does).
    """

    def __init__(
        self,
        state: LakeState,
        listing: Listing,
        *,
        creator: TableCreator | None,
        rows_creator: RowsCreator | None,
        idle_seconds: float,
        idle_timer: bool,
    ) -> None:
        self._state = state
        self._lock = state.lock
        self._listing = listing
        self._creator = creator
        self._rows_creator = rows_creator if creator is not None else None
        self._idle = idle_seconds
        self._rows_journal = RowsJournal(
            state.state_dir if self._rows_creator is not None else None
        )
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None
        if self._rows_creator is not None:
            self._recover_rows()
            if idle_timer:
                self._timer = threading.Thread(
                    target=self._idle_loop, name="posixlake-lake-idle", daemon=True
                )
                self._timer.start()

    @property
    def can_make(self) -> bool:
        """Whether directories (new tables) can be made at the lake level."""
        return self._creator is not None

    @property
    def from_rows(self) -> bool:
        """Whether a table can be made from its data.csv too."""
        return self._rows_creator is not None

    def pending(self, local: int) -> NewTable | None:
        """The new table whose directory or file ``local`` is (STALE once it is a table,
        for anything but its attributes and the end of the edit that made it)."""
        n = self._state.new_of(local)
        if n is not None and n.created:
            raise NfsError(Nfsstat3.NFS3ERR_STALE, f"{n.path} is a table now")
        return n

    # ------------------------------------------------------------ directories

    def mkdir(self, listing: Tree, path: str, name: str) -> FileId:
        """MKDIR ``name`` in the lake directory ``path``: a new table's directory."""
        if name in listing.children.get(path, ()):
            raise NfsError(Nfsstat3.NFS3ERR_EXIST, name)
        if name.startswith((".", "_")) or "/" in name:
            raise NfsError(
                Nfsstat3.NFS3ERR_ACCES, f"{name!r}: a table's name cannot start with . or _"
            )
        if _PERCENT_ESCAPE.search(name):
            # delta-rs commits version 0 at the literal path, then reads the table at the
            # percent-decoded one: the table would be made and never open again
            raise NfsError(
                Nfsstat3.NFS3ERR_ACCES,
                f"{name!r}: a table's name cannot hold a %XX escape (Delta decodes it)",
            )
        return self._make(f"{path}/{name}" if path else name)

    def mkdir_in(self, n: NewTable, local: int, name: str) -> FileId:
        """MKDIR in the new table directory ``n`` (only its ``data``)."""
        if name == "data" and local == n.dir_local:
            return self._make_data(n)
        raise NfsError(
            Nfsstat3.NFS3ERR_ACCES,
            f"{n.path} is not a table yet: write its schema.sql"
            + (" or data.csv" if self._rows_creator is not None else "")
            + " to make it",
        )

    def _make(self, path: str) -> FileId:
        st = self._state
        with self._lock:
            if path in st.new:
                raise NfsError(Nfsstat3.NFS3ERR_EXIST, path)
            st.new[path] = NewTable(path, 0, 0, st.now())
        self._listing.rebuild()
        listing = self._listing.current()
        with self._lock:
            n = st.new[path]
            n.dir_local = listing.dir_local[path]
            local = path_hash("new-schema", st.root, path) & ((1 << 40) - 1)
            while local in (0, LAKE_ROOT) or local in listing.dir_path or local in st.new_ids:
                local = (local + 1) & ((1 << 40) - 1)
            n.file_local = local
            st.new_ids[n.dir_local] = n
            st.new_ids[n.file_local] = n
        logger.info("new table directory %s: write its schema.sql to create the table", path)
        return lake_id(0, n.dir_local)

    def _make_data(self, n: NewTable) -> FileId:
        """MKDIR ``data`` in a new table directory: where its data.csv may be written
        (``mkdir -p sales/data && cp rows.csv sales/data/data.csv``)."""
        if self._rows_creator is None or (n.file_name is not None and not n.in_data):
            raise NfsError(
                Nfsstat3.NFS3ERR_ACCES, f"{n.path} is not a table yet: write its schema.sql"
            )
        st = self._state
        with self._lock:
            if n.data_local:
                raise NfsError(Nfsstat3.NFS3ERR_EXIST, "data")
            local = path_hash("new-data", st.root, n.path) & ((1 << 40) - 1)
            last = self._listing.last()
            taken = last.dir_path if last is not None else {}
            while local in (0, LAKE_ROOT) or local in taken or local in st.new_ids:
                local = (local + 1) & ((1 << 40) - 1)
            n.data_local = local
            st.new_ids[local] = n
            n.mtime = st.now()
        return lake_id(0, local)

    def rmdir(self, sub: NewTable, local: int, name: str) -> None:
        """RMDIR ``name`` in the new table directory ``sub`` (only its empty ``data``)."""
        if name != "data" or local != sub.dir_local or not sub.data_local:
            raise NfsError(Nfsstat3.NFS3ERR_NOENT, name)
        if sub.names_in(sub.data_local):
            raise NfsError(Nfsstat3.NFS3ERR_NOTEMPTY, name)
        with self._lock:
            self._state.new_ids.pop(sub.data_local, None)
            sub.data_local = 0

    def rmdir_new(self, path: str, name: str) -> bool:
        """RMDIR of a new table's directory at ``path``: dropped if empty (NOTEMPTY if
        not); False if ``path`` is no such directory (or a table already)."""
        with self._lock:
            new = self._state.new.get(path)
        if new is None or new.created:
            return False
        if new.names_in(new.dir_local):
            raise NfsError(Nfsstat3.NFS3ERR_NOTEMPTY, name)
        st = self._state
        with self._lock:
            st.new.pop(new.path, None)
            st.new_ids.pop(new.dir_local, None)
            st.new_ids.pop(new.file_local, None)
            if new.data_local:
                st.new_ids.pop(new.data_local, None)
        self._listing.rebuild()
        return True

    def lookup(self, tree: Tree, n: NewTable, local: int, dir_id: FileId, name: str) -> FileId:
        """LOOKUP of ``name`` in the new table's directory or its data/ (``local``)."""
        if local not in (n.dir_local, n.data_local):
            raise NfsError(Nfsstat3.NFS3ERR_NOTDIR, name)
        if name == ".":
            return dir_id
        if name == "..":
            if local == n.data_local:
                return lake_id(0, n.dir_local)
            return self._listing.id_of(parent(n.path), tree)
        found = n.id_of(local, name)
        if found is not None:
            return lake_id(0, found)
        raise NfsError(Nfsstat3.NFS3ERR_NOENT, name)

    def readdir(
        self, tree: Tree, n: NewTable, local: int, dir_id: FileId, *, after: int, max_entries: int
    ) -> DirPage:
        """READDIR of the new table's directory or its data/ (``local``)."""
        if local not in (n.dir_local, n.data_local):
            raise NfsError(Nfsstat3.NFS3ERR_NOTDIR)

        def id_of(name: str) -> FileId:
            if name == ".":
                return dir_id
            if name == ".." and local == n.data_local:
                return lake_id(0, n.dir_local)
            if name == "..":
                return self._listing.id_of(parent(n.path), tree)
            return lake_id(0, n.id_of(local, name) or n.file_local)

        return dir_page(n.names_in(local), after, max_entries, id_of)

    # ------------------------------------------------------------ attributes

    def attrs(self, fid: FileId, n: NewTable, local: int) -> Fattr3:
        """The attributes of the new table's directory, its data/ or its file."""
        if local == n.file_local:
            return lake_attrs(
                fid, self._state.fsid, mode=0o644, mtime=n.mtime, nlink=1, size=n.size
            )
        return lake_attrs(fid, self._state.fsid, mode=0o777, mtime=n.mtime)

    def truncate(self, n: NewTable, local: int, size: int | None, ctx: CallContext) -> None:
        """SETATTR of the new table's file: a size truncates (or extends) it."""
        name = n.file_name
        if size is not None and local == n.file_local and not n.created and name:
            where = n.data_local if n.in_data else n.dir_local
            self.create_file(lake_id(0, where), name, size, ctx, guarded=False)

    # ------------------------------------------------------------ its file

    def create_file(
        self, dir_id: FileId, name: str, size: int | None, ctx: CallContext, *, guarded: bool
    ) -> FileId:
        """CREATE (or a truncation) of schema.sql or data.csv in a new table directory."""
        local = split_id(dir_id)[1]
        n = self.pending(local)
        assert n is not None
        in_data = bool(n.data_local) and local == n.data_local
        allowed = (SCHEMA_SQL, DATA_CSV) if self._rows_creator is not None else (SCHEMA_SQL,)
        if in_data:
            allowed = (DATA_CSV,)
        if name not in allowed:
            raise NfsError(
                Nfsstat3.NFS3ERR_ACCES,
                f"only {' or '.join(allowed)} can be written into the new table directory {n.path}",
            )
        if n.file_name is not None and n.file_name != name:
            raise NfsError(
                Nfsstat3.NFS3ERR_ACCES,
                f"{n.path} is made from its {n.file_name}: {name} cannot be written too",
            )
        if name == DATA_CSV:
            if n.rows is not None and n.in_data != in_data:
                where = "data/data.csv" if n.in_data else DATA_CSV
                raise NfsError(Nfsstat3.NFS3ERR_EXIST, f"{n.path}/{where} is being written")
            return self._rows_file(n, size, ctx, guarded=guarded, in_data=in_data)
        with self._lock:
            if n.schema is not None and guarded:
                raise NfsError(Nfsstat3.NFS3ERR_EXIST, name)
            if n.schema is None:
                n.schema = bytearray()
            if size is not None:
                del n.schema[size:]
                n.schema.extend(bytes(size - len(n.schema)))
            n.mtime = self._state.now()
        return lake_id(0, n.file_local)

    def _rows_file(
        self, n: NewTable, size: int | None, ctx: CallContext, *, guarded: bool, in_data: bool
    ) -> FileId:
        """CREATE (or a truncation) of a new table's data.csv: the caller's staging."""
        st = self._state
        with self._lock:
            rows = n.rows
            if rows is not None and (guarded or not rows.owned_by(ctx)):
                # one writer creates the table; another gets EEXIST (it may add rows to
                # the table once it is made, by the usual rules of its data.csv)
                raise NfsError(Nfsstat3.NFS3ERR_EXIST, f"{n.path}/{DATA_CSV} is being written")
            try:
                if rows is None:
                    rows = self._rows_journal.start(n.path, ctx, st.clock(), in_data=in_data)
                    n.rows, n.in_data = rows, in_data
                if size is not None:
                    rows.truncate(size, st.clock())
            except OSError as err:
                raise NfsError(Nfsstat3.NFS3ERR_IO, f"cannot journal {n.path}: {err}") from err
            n.mtime = st.now()
        return lake_id(0, n.file_local)

    def remove(self, n: NewTable, local: int, name: str) -> None:
        """REMOVE of the new table's file: its bytes (and staged rows) go."""
        with self._lock:
            if name == "data" and local == n.dir_local and n.data_local:
                raise NfsError(Nfsstat3.NFS3ERR_ISDIR, name)
            if n.id_of(local, name) != n.file_local:
                raise NfsError(Nfsstat3.NFS3ERR_NOENT, name)
            n.schema = None
            if n.rows is not None:  # the staged rows go (their journal too)
                n.rows.drop()
                n.rows = None

    def check_rows_lost(self, n: NewTable) -> None:
        """Raise NFS3ERR_EXIST (dropping the staged rows) when another process made a
        table at ``n``'s path while its data.csv was being written."""
        with self._lock:
            rows = n.rows
            if not n.created or rows is None or rows.made:
                return
            if rows.journal is not None:
                logger.warning(
                    "%s/%s: staged rows of %s dropped: a table was made there meanwhile",
                    n.path,
                    DATA_CSV,
                    rows.peer,
                )
                rows.drop()
        raise NfsError(Nfsstat3.NFS3ERR_EXIST, f"a table was made at {n.path} meanwhile")

    def write(
        self, local: int, offset: int, data: bytes, stable: StableHow, ctx: CallContext
    ) -> tuple[int, StableHow] | None:
        """WRITE of a new table's schema.sql (kept until the writer is done: a COMMIT, a
        FILE_SYNC write, an NFSv4 CLOSE, which creates the table) or data.csv. None: the
        table was made from this data.csv meanwhile (the write goes to the table)."""
        n = self._state.new_of(local)
        if n is None or local != n.file_local:
            raise NfsError(Nfsstat3.NFS3ERR_ISDIR)
        self.check_rows_lost(n)
        if n.created:
            with self._lock:
                resent = n.schema is not None and n.schema[offset : offset + len(data)] == data
            if resent:  # the write that made the table again: its reply was lost
                return len(data), StableHow.FILE_SYNC
            raise NfsError(Nfsstat3.NFS3ERR_ACCES, f"{n.path} is a table: schema.sql is read-only")
        if n.rows is not None:
            return self._write_rows(n, offset, data, stable, ctx)
        with self._lock:
            buf = n.schema if n.schema is not None else bytearray()
            if len(buf) < offset:
                buf.extend(bytes(offset - len(buf)))
            buf[offset : offset + len(data)] = data
            n.schema = buf
            n.mtime = self._state.now()
        if stable == StableHow.UNSTABLE:
            return len(data), StableHow.UNSTABLE
        self._create(n)
        return len(data), StableHow.FILE_SYNC

    def _write_rows(
        self, n: NewTable, offset: int, data: bytes, stable: StableHow, ctx: CallContext
    ) -> tuple[int, StableHow] | None:
        """WRITE of a new table's data.csv: journaled, staged for its writer only (one
        that comes while the table is being made goes to its data/data.csv after: None)."""
        with self._lock:
            rows = n.rows
        if rows is None or not rows.owned_by(ctx):
            raise NfsError(Nfsstat3.NFS3ERR_EXIST, f"{n.path}/{DATA_CSV} is being written")
        with rows.lock:
            if not rows.made:
                assert self._rows_creator is not None
                limit = self._rows_creator.max_bytes
                if offset + len(data) > limit:
                    logger.warning(
                        "%s/%s: staged rows of %s dropped: past %d bytes",
                        n.path,
                        DATA_CSV,
                        rows.peer,
                        limit,
                    )
                    with self._lock:
                        rows.drop()
                        n.rows = None
                    raise NfsError(
                        Nfsstat3.NFS3ERR_FBIG,
                        f"{n.path}/{DATA_CSV} past {limit} bytes: load a file this large with "
                        "posixlake create --from-csv",
                    )
                try:
                    rows.write(offset, data, stable, self._state.clock())
                except OSError as err:
                    raise NfsError(Nfsstat3.NFS3ERR_IO, f"cannot journal {n.path}: {err}") from err
                n.mtime = self._state.now()
                return len(data), stable
        return None

    def commit(self, n: NewTable, local: int, ctx: CallContext) -> None:
        """COMMIT of a new table's file: schema.sql creates the table (an NFSv4 COMMIT
        only validates it: the table is made at the CLOSE); data.csv is made durable."""
        if local == n.file_local:
            self.check_rows_lost(n)
        if n.created or local != n.file_local:
            return
        if n.rows is not None:
            self._commit_rows(n, ctx)
            return
        if (ctx.peer or "").startswith(BOUNDED_PEER_PREFIX):  # created at its CLOSE
            try:
                parse_create_table(bytes(n.schema or b"").decode("utf-8", "replace"))
            except PosixLakeError as err:
                raise NfsError(Nfsstat3.NFS3ERR_INVAL, str(err)) from err
            return
        self._create(n)

    def _commit_rows(self, n: NewTable, ctx: CallContext) -> None:
        """COMMIT of a new table's data.csv: durable, and checked (at most 1 MiB of it:
        bad CSV fails here, and its bytes are dropped); the table is made at the end of
        the edit (the NFSv4 CLOSE, or NFSv3's idle window), never here."""
        with self._lock:
            rows = n.rows
        if rows is None or not rows.owned_by(ctx):
            return
        with rows.lock:
            if rows.made:
                return
            try:
                rows.sync()
            except OSError as err:
                raise NfsError(Nfsstat3.NFS3ERR_IO, f"cannot journal {n.path}: {err}") from err
            try:
                rows.check()
            except NfsError as err:
                logger.warning(
                    "%s/%s: staged rows of %s dropped: %s", n.path, DATA_CSV, rows.peer, err
                )
                with self._lock:
                    rows.drop()
                    n.rows = None
                raise

    def finish(self, n: NewTable, local: int, ctx: CallContext) -> None:
        """The end of the caller's edit of the new table's file (NFSv4 CLOSE): the table
        is made from it."""
        if local == n.file_local:
            self.check_rows_lost(n)
        if not n.created and local == n.file_local:
            if n.rows is not None and n.rows.owned_by(ctx):
                self._create_rows(n)
            elif n.schema:
                self._create(n)

    def discard(self, local: int, ctx: CallContext) -> bool:
        """Drop the caller's staged data.csv of a new table (an expired NFSv4 lease)."""
        n = self._state.new_of(local)
        if n is None or n.created or n.rows is None or not n.rows.owned_by(ctx):
            return False
        with self._lock:
            logger.warning("%s/%s: staged rows of %s dropped", n.path, DATA_CSV, ctx.peer)
            n.rows.drop()
            n.rows = None
        return True

    # ------------------------------------------------------------ making the table

    def _create(self, n: NewTable) -> None:
        """Create the table ``n``'s schema.sql describes (one table, or NFS3ERR_EXIST)."""
        with self._state.refresh_lock:
            if n.created:
                return
            try:
                spec = parse_create_table(bytes(n.schema or b"").decode("utf-8"))
            except UnicodeDecodeError as err:
                raise NfsError(Nfsstat3.NFS3ERR_INVAL, f"schema.sql is not UTF-8: {err}") from err
            except PosixLakeError as err:
                raise NfsError(Nfsstat3.NFS3ERR_INVAL, str(err)) from err
            assert self._creator is not None  # MKDIR needs one
            try:
                self._creator(n.path, spec)
            except AlreadyExists as err:
                raise NfsError(Nfsstat3.NFS3ERR_EXIST, f"{n.path}: {err}") from err
            except PosixLakeError as err:
                raise nfs_error(err) from err
            with self._lock:
                n.created = True
                self._state.new.pop(n.path, None)
            logger.info("created table %s from its schema.sql", n.path)
            self._listing.rebuild(add=n.path)

    def _create_rows(self, n: NewTable) -> None:
        """Create the table from ``n``'s staged data.csv (one commit), or raise (INVAL:
        the bytes are dropped; EXIST: a table was made there meanwhile, dropped too)."""
        with self._state.refresh_lock:
            rows = n.rows
            if n.created or rows is None:
                return
            assert self._rows_creator is not None
            with rows.lock:  # the writer's calls wait: they go to the table after
                try:
                    create_rows(self._rows_creator, n.path, rows)
                except NfsError as err:
                    if err.status in (Nfsstat3.NFS3ERR_INVAL, Nfsstat3.NFS3ERR_EXIST):
                        logger.warning(
                            "%s/%s: staged rows of %s dropped, no table made: %s",
                            n.path,
                            DATA_CSV,
                            rows.peer or "a local caller",
                            err,
                        )
                        with self._lock:
                            rows.drop()
                            n.rows = None
                    raise
                with self._lock:
                    rows.made = True
                    n.created = True
                    n.mtime = self._state.now()  # clients revalidate
                    self._state.new.pop(n.path, None)
                self._listing.rebuild(add=n.path)  # before the writer's next call goes to it
            logger.info("created table %s from its data.csv", n.path)

    def poll(self) -> None:
        """Create the tables whose NFSv3 writer of data.csv is done (idle)."""
        now = self._state.clock()
        with self._lock:
            due = [
                n
                for n in self._state.new.values()
                if n.rows is not None and not n.created and n.rows.done(now, self._idle)
            ]
        for n in due:
            try:
                self._create_rows(n)
            except NfsError as err:
                logger.warning("%s: table not made at idle: %s", n.path, err)

    def _idle_loop(self) -> None:
        while not self._stop.wait(max(0.05, self._idle / 4)):
            self.poll()

    def _recover_rows(self) -> None:
        """Take over the staged data.csv of new tables an earlier server left."""
        assert self._rows_creator is not None
        for path, in_data, rec in self._rows_journal.recover():
            try:
                made = self._rows_creator.made_by(path, rec.header.write_id)
            except PosixLakeError as err:
                logger.error("cannot check %s for its staged data.csv: %s", path, err)
                continue
            if made:
                logger.info("%s: its staged data.csv was committed as the table", path)
                rec.path.unlink(missing_ok=True)
                continue
            if made is not None:
                self._rows_journal.set_aside(rec, f"another table was made at {path}")
                continue
            if any(op.kind not in ("W", "T") for op in rec.ops):
                # base records need a base; a new table's data.csv has none
                self._rows_journal.set_aside(
                    rec, "it holds base records, which a new table's journal never does"
                )
                continue
            try:
                self._make(path)
            except NfsError:
                self._rows_journal.set_aside(rec, f"{path} cannot be made here again")
                continue
            with self._lock:
                n = self._state.new[path]
                n.rows = self._rows_journal.restore(rec, self._state.clock())
            if in_data:
                n.in_data = True
                self._make_data(n)
            logger.info("%s: staged data.csv of %s recovered", path, n.rows.peer)

    def stop(self) -> None:
        """Stop the idle timer (the lake is closing)."""
        self._stop.set()
        if self._timer is not None and self._timer is not threading.current_thread():
            self._timer.join(5)

    def close(self) -> int:
        """Close the journals of the unfinished new tables (kept for the next start);
        return how many there were."""
        with self._lock:
            staged = 0
            for n in self._state.new.values():  # unfinished: journaled for the next start
                if n.rows is not None and n.rows.journal is not None:
                    n.rows.journal.close()
                    staged += 1
        self._rows_journal.close()
        return staged
