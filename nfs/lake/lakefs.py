"""LakeFs: every Delta table under a root as a directory, each one a table face.

The tree (see docs/design.md, "The NFS face", "The lake")::

    /                       the lake root: its tables and the prefixes leading to them
    /<prefix>/.../          a directory with a table below it
    /<table>/               exactly what ``nfs.table.tablefs.TableFs`` shows at its root:
                            data/data.csv, schema.sql, versions/<N>/, changes.csv, ...

LakeFs composes one table face per table, opened on first use (a LOOKUP into it, a READ,
an ACCESS...; listing the lake and GETATTR of a table's directory open nothing) and kept in
an LRU of at most ``max_open`` tables: past the bound the least recently used table is
closed once it has no call in flight, no staged write, and no call for ``keep_open``
seconds, or past twice the bound whatever its last call (a table with staged or
unfinished writes is never evicted; the bound is then exceeded, with a log line).

Every call on a table's file goes to that table's face with the table's own id (see
:mod:`nfs.lake.ids` for the id layout and why handles survive restarts), and so do the
optional hooks the protocol uses: ``finish``/``discard`` (NFSv4 CLOSE and lease expiry,
`nfs.protocol.vfs.EditBounds`), ``read_nowait``, ``write_verifier`` (one verifier for
the lake, changing whenever a table's changes), ``close``. Each table's own users and
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
directory (in memory), in which only ``schema.sql`` may be created (or, with a
``rows_creator``, ``data.csv``: the table made from its rows at the end of the edit, see
:mod:`nfs.lake.newrows`); its CREATE TABLE
(:mod:`nfs.lake.create`) creates the table when the writer is done: a FILE_SYNC WRITE, a
COMMIT, or the NFSv4 CLOSE (a v4 COMMIT only validates). Bad SQL: NFS3ERR_INVAL, nothing
created; a table made meanwhile at that path: NFS3ERR_EXIST. The directory's handle then
stands for the table's directory.
"""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final

from nfs.lake.create import TableSpec, parse_create_table
from nfs.lake.discovery import discover_tables
from nfs.lake.ids import InnerIds, SlotMap, lake_id, path_hash, split_id
from nfs.lake.newrows import DATA_CSV, NewRows, RowsCreator, RowsJournal, create_rows
from nfs.protocol.nfs3 import Fattr3, Ftype3, Nfsstat3, Nfstime3, Sattr3, Specdata3, StableHow
from nfs.protocol.rpc import CallContext
from nfs.protocol.vfs import (
    BOUNDED_PEER_PREFIX,
    DirEntry,
    DirPage,
    EditBounds,
    FileId,
    FsStat,
    NfsError,
    Vfs,
    VfsCapabilities,
    posix_access,
)
from nfs.table.state import DATA_CSV_ID, DEFAULT_IDLE_SECONDS, SCHEMA_ID, nfs_error
from nfs.table.tablefs import ROOT_ID, TableFs
from posixlake.errors import (
    AlreadyExists,
    AuthenticationError,
    NotFound,
    PermissionDenied,
    PosixLakeError,
)

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

DEFAULT_MAX_OPEN: Final = 64
"""Tables kept open at most (beyond it, idle ones are closed, least recently used first)."""
DEFAULT_KEEP_OPEN: Final = 30.0
"""A table used less than this many seconds ago is not closed to make room."""
LAKE_ROOT: Final = 1
DIR_MODE: Final = 0o555
DIR_SIZE: Final = 4096
_KEPT_GENERATIONS: Final = frozenset({DATA_CSV_ID, SCHEMA_ID})
"""The table-face files whose handle generation the lake keeps across an eviction."""
_TABLE_ROOT_LOCAL: Final = int(ROOT_ID)
"""The packed id of a table face's root (its fixed id 1 packs to itself)."""


@dataclass
class LakeTable:
    """One open table of a lake, as a `TableOpener` returns it.

    Attributes:
        fs: the table face.
        vfs: what calls go to: ``fs`` itself or a wrapper of it (per-user access).
    """

    fs: TableFs
    vfs: Vfs | None = None

    @property
    def target(self) -> Vfs:
        """The Vfs calls go to."""
        return self.vfs if self.vfs is not None else self.fs


TableOpener = Callable[[str], LakeTable]
"""Opens the table at a path relative to the lake root (PosixLakeError if it cannot)."""

TableCreator = Callable[[str, TableSpec], None]
"""Creates a table at a path relative to the lake root (AlreadyExists if one is there)."""

SCHEMA_SQL: Final = "schema.sql"
_PERCENT_ESCAPE: Final = re.compile("%[0-9A-Fa-f]{2}")


@dataclass
class _NewTable:
    """A directory made at the lake level (MKDIR), not a table yet: ``schema.sql`` written
    into it creates the table. Kept in memory only (an empty one is gone after a restart)."""

    path: str
    dir_local: int
    file_local: int
    mtime: Nfstime3
    schema: bytearray | None = None
    created: bool = False
    rows: NewRows | None = None
    """The staged data.csv (a table made from its rows), instead of schema.sql."""
    data_local: int = 0
    """The ``data/`` directory made in it (0: none): data.csv may be written there too."""
    in_data: bool = False
    """The staged data.csv is ``data/data.csv`` (else ``data.csv`` at the top)."""

    def names_in(self, local: int) -> tuple[str, ...]:
        """The entries of the directory ``local`` (the new directory or its data/)."""
        if local == self.data_local:
            return (DATA_CSV,) if self.rows is not None and self.in_data else ()
        top = () if self.file_name is None or self.in_data else (self.file_name,)
        return (*top, "data") if self.data_local else top

    def id_of(self, local: int, name: str) -> int | None:
        """The local id of ``name`` in the directory ``local`` (None: no such entry)."""
        if name not in self.names_in(local):
            return None
        return self.data_local if name == "data" and local == self.dir_local else self.file_local

    @property
    def file_name(self) -> str | None:
        """The one file in the directory: schema.sql, data.csv, or None yet."""
        if self.rows is not None:
            return DATA_CSV
        return SCHEMA_SQL if self.schema is not None else None

    @property
    def size(self) -> int:
        """The size of its file."""
        return len(self.rows.data if self.rows is not None else self.schema or b"")

    def read(self, offset: int, count: int) -> bytes:
        """Return ``count`` bytes of its file from ``offset`` (a copy of those only)."""
        data = self.rows.data if self.rows is not None else self.schema or b""
        return bytes(data[offset : offset + count])


@dataclass
class _KeptGens:
    """The data.csv / schema.sql handle generations a lake keeps for one table's slot."""

    table_gen: bytes
    face: weakref.ref[LakeTable]
    """The open table whose generations ``seen`` are (a change under it: a replacement)."""
    seen: dict[int, bytes] = field(default_factory=dict)
    kept: dict[int, bytes] = field(default_factory=dict)


@dataclass
class _Open:
    table: LakeTable
    verifier: bytes
    active: int = 0
    last_used: float = 0.0


@dataclass(frozen=True)
class _Listing:
    at: float
    tables: frozenset[str]
    children: Mapping[str, tuple[str, ...]]
    dir_local: Mapping[str, int]
    dir_path: Mapping[int, str]
    mtime: Nfstime3
    subdirs: Mapping[str, int] = field(default_factory=dict)


def _parent(path: str) -> str:
    return path.rpartition("/")[0]


def _build(
    tables: list[str], at: float, mtime: Nfstime3, old: _Listing | None, new: list[str]
) -> _Listing:
    children: dict[str, set[str]] = {"": set()}
    for path in new:  # directories made to hold a new table: empty lake directories
        children.setdefault(path, set())
        children.setdefault(_parent(path), set()).add(path.rpartition("/")[2])
    for table in tables:
        parts = table.split("/")
        for i in range(len(parts)):
            here = "/".join(parts[:i])
            children.setdefault(here, set()).add(parts[i])
    dir_local: dict[str, int] = {"": LAKE_ROOT}
    dir_path: dict[int, str] = {LAKE_ROOT: ""}
    for path in sorted(children):
        if path == "":
            continue
        local = path_hash("dir", path) & ((1 << 40) - 1)
        while local in (0, LAKE_ROOT) or local in dir_path:  # a collision: probe, path order
            local = (local + 1) & ((1 << 40) - 1)
        dir_local[path] = local
        dir_path[local] = path
    listed = {p: tuple(sorted(c)) for p, c in children.items()}
    if old is not None and old.children == listed:
        mtime = old.mtime
    subdirs = {p: len(c) for p, c in listed.items()}
    return _Listing(at, frozenset(tables), listed, dir_local, dir_path, mtime, subdirs)


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
        if max_open < 1:
            raise ValueError("max_open must be at least 1")
        self.root = root
        self._opener = opener
        self._discover = discover or (lambda: discover_tables(root, storage_options))
        self._state_dir = Path(state_dir) if state_dir is not None else None
        self._slots = SlotMap(self._state_dir / "slots.json" if self._state_dir else None)
        self._ttl = listing_ttl
        self._max_open = max_open
        self._keep_open = keep_open
        self._read_only = read_only
        self._clock = clock
        self._wallclock = wallclock
        self._lock = threading.Lock()
        self._refresh_lock = threading.RLock()
        self._listing: _Listing | None = None
        self._open: OrderedDict[int, _Open] = OrderedDict()
        self._opening: dict[int, threading.Lock] = {}
        self._ids: dict[int, InnerIds] = {}
        self._refused: set[int] = set()
        self._file_gens: dict[int, _KeptGens] = {}
        self._creator = creator
        self._dir_mode = 0o777 if creator is not None else DIR_MODE
        self._new: dict[str, _NewTable] = {}
        self._new_ids: dict[int, _NewTable] = {}
        self._rows_creator = rows_creator if creator is not None else None
        self._idle = idle_seconds
        self._rows_journal = RowsJournal(
            self._state_dir if self._rows_creator is not None else None
        )
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None
        self._boot = secrets.token_bytes(8)
        self._retired = 0
        self._closed = False
        self._unfinished_at_close = 0
        self.fsid = path_hash("lake-fsid", root) >> 1
        self._dir_gen = path_hash("lake-dir", root).to_bytes(8, "big")
        self.opened = 0
        """Tables opened since start (for tests and metrics)."""
        if self._rows_creator is not None:
            self._recover_rows()
            if idle_timer:
                self._timer = threading.Thread(
                    target=self._idle_loop, name="posixlake-lake-idle", daemon=True
                )
                self._timer.start()

    # ------------------------------------------------------------ the listing

    def _current(self) -> _Listing:
        listing = self._listing
        if listing is not None and self._clock() - listing.at < self._ttl:
            return listing
        with self._refresh_lock:
            listing = self._listing
            if listing is not None and self._clock() - listing.at < self._ttl:
                return listing
            try:
                tables = self._discover()
            except (PosixLakeError, OSError) as err:
                if listing is None:
                    raise NfsError(Nfsstat3.NFS3ERR_IO, f"cannot list {self.root}: {err}") from err
                logger.warning("cannot list %s, showing the last listing: %s", self.root, err)
                tables = sorted(listing.tables)
            self._slots.assign(tables)
            self._refused.clear()  # tried again: permissions may have changed
            now = Nfstime3.from_seconds(self._wallclock())
            with self._lock:
                for path in set(tables) & self._new.keys():  # made meanwhile, elsewhere too
                    self._new.pop(path).created = True
                new = [p for p, n in self._new.items() if not n.created]
            fresh = _build(tables, self._clock(), now, listing, new)
            self._listing = fresh
        if listing is not None and listing.tables - fresh.tables:
            self._close_gone(fresh)
        return fresh

    def tables(self) -> list[str]:
        """Return the tables of the lake now (paths relative to the root, sorted)."""
        return sorted(self._current().tables)

    def refresh(self) -> None:
        """Forget the cached listing: the next call lists the root again."""
        self._listing = None if self._listing is None else replace(self._listing, at=-1e300)

    # ------------------------------------------------------------ open tables

    def _table_path(self, slot: int, listing: _Listing) -> str:
        path = self._slots.table_of(slot)
        if path is None or path not in listing.tables:
            raise NfsError(Nfsstat3.NFS3ERR_STALE, "no such table (any more)")
        return path

    def _inner_ids(self, slot: int) -> InnerIds:
        with self._lock:
            ids = self._ids.get(slot)
            if ids is None:
                ids = self._ids[slot] = InnerIds()
            return ids

    @contextmanager
    def _using(self, slot: int) -> Iterator[LakeTable]:
        path = self._table_path(slot, self._current())
        entry = self._acquire(slot, path)
        try:
            yield entry.table
        finally:
            with self._lock:
                entry.active -= 1
                entry.last_used = self._clock()
        self._evict()

    def _acquire(self, slot: int, path: str) -> _Open:
        with self._lock:
            if self._closed:
                raise NfsError(Nfsstat3.NFS3ERR_IO, "the lake is closed")
            if slot in self._refused:  # tried again after the next listing, not per call
                raise NfsError(Nfsstat3.NFS3ERR_ACCES, f"{path}: the server may not open it")
            entry = self._open.get(slot)
            if entry is not None:
                entry.active += 1
                self._open.move_to_end(slot)
                return entry
            opening = self._opening.setdefault(slot, threading.Lock())
        with opening:  # one opener of a table at a time, and none while it closes
            with self._lock:
                entry = self._open.get(slot)
                if entry is not None:
                    entry.active += 1
                    self._open.move_to_end(slot)
                    return entry
            try:
                table = self._opener(path)
            except (AuthenticationError, PermissionDenied) as err:
                self._refused.add(slot)
                raise NfsError(Nfsstat3.NFS3ERR_ACCES, f"{path}: {err}") from err
            except NotFound as err:
                raise NfsError(Nfsstat3.NFS3ERR_STALE, f"{path}: {err}") from err
            except PosixLakeError as err:
                raise nfs_error(err) from err
            except OSError as err:
                raise NfsError(Nfsstat3.NFS3ERR_IO, f"{path}: {err}") from err
            entry = _Open(table, _verifier(table.target), active=1, last_used=self._clock())
            with self._lock:
                closed = self._closed
                if not closed:
                    self._open[slot] = entry
                    self.opened += 1
            if closed:  # the server stopped while this table opened
                self._close_table(slot, entry)
                raise NfsError(Nfsstat3.NFS3ERR_IO, "the lake is closed")
            logger.info("opened table %s", path)
            return entry

    def _evict(self) -> None:
        """Close least recently used idle tables while more than ``max_open`` are open.

        A table used less than ``keep_open`` seconds ago stays while at most twice
        ``max_open`` are open; past that (a scan reading every table of a large lake) the
        least recently used go too, so that the open tables (file descriptors, timer
        threads) stay bounded whatever the lake's size. Never one with a call in flight
        or a staged write.
        """
        while True:
            with self._lock:
                if len(self._open) <= self._max_open:
                    return
                now = self._clock()
                crowded = len(self._open) > 2 * self._max_open
                candidates = [
                    (slot, e)
                    for slot, e in self._open.items()
                    if e.active == 0 and (crowded or now - e.last_used >= self._keep_open)
                ]
            if not any(self._close_idle(slot, e) for slot, e in candidates):
                logger.debug(
                    "%d tables open (bound %d): none idle", len(self._open), self._max_open
                )
                return

    def _close_idle(self, slot: int, e: _Open) -> bool:
        """Close the table of ``slot`` if it is still ``e``, idle, without staged writes.

        Holds the slot's opening lock throughout: a call arriving meanwhile waits for the
        close and then opens the table again (never a second face beside the closing one:
        it would take a second journal directory and a second scratch lock). The table
        leaves the LRU before its staged writes are counted, so no write can slip in
        between the count and the close.
        """
        with self._opening_lock(slot):
            with self._lock:
                if self._open.get(slot) is not e or e.active:
                    return False  # used meanwhile
                del self._open[slot]
            if e.table.fs.stats().staged_writers:
                with self._lock:  # back, still the least recently used
                    self._open[slot] = e
                    self._open.move_to_end(slot, last=False)
                return False
            self._close_table(slot, e)
            return True

    def _opening_lock(self, slot: int) -> threading.Lock:
        with self._lock:
            return self._opening.setdefault(slot, threading.Lock())

    def _close_gone(self, listing: _Listing) -> None:
        with self._lock:
            gone = [
                (slot, e)
                for slot, e in self._open.items()
                if e.active == 0 and self._slots.table_of(slot) not in listing.tables
            ]
        for slot, e in gone:
            with self._opening_lock(slot):  # as in _close_idle: no open during the close
                with self._lock:
                    if self._open.get(slot) is not e or e.active:
                        continue
                    del self._open[slot]
                self._close_table(slot, e)

    def _close_table(self, slot: int, e: _Open) -> None:
        if _verifier(e.table.target) != e.verifier:
            # it lost staged data: the lake's verifier must not go back to what its
            # writers hold once the table is no longer open (evicted, gone, stopped)
            with self._lock:
                self._retired += 1
        close = getattr(e.table.target, "close", None)
        (close if callable(close) else e.table.fs.close)()
        logger.info("closed table %s", self._slots.table_of(slot))

    def open_tables(self) -> dict[str, TableFs]:
        """Return the table faces open now, by table path."""
        with self._lock:
            items = list(self._open.items())
        return {self._slots.table_of(slot) or "?": e.table.fs for slot, e in items}

    # ------------------------------------------------------------ id helpers

    def _out(self, slot: int, inner: int) -> FileId:
        return lake_id(slot, self._inner_ids(slot).local(inner))

    def _inner(self, slot: int, local: int) -> FileId:
        inner = self._inner_ids(slot).inner(local)
        if inner is None:
            raise NfsError(Nfsstat3.NFS3ERR_STALE, "a handle of an earlier server")
        return inner

    def _dir(self, local: int, listing: _Listing) -> str:
        path = listing.dir_path.get(local)
        if path is None:
            raise NfsError(Nfsstat3.NFS3ERR_STALE, "no such lake directory (any more)")
        return path

    def _id_of(self, path: str, listing: _Listing) -> FileId:
        """The id of a lake entry: a table's root or a prefix directory."""
        if path in listing.tables:
            slot = self._slots.slot_of(path)
            assert slot is not None  # assigned at listing
            return lake_id(slot, _TABLE_ROOT_LOCAL)
        return lake_id(0, listing.dir_local[path])

    def _fix(self, slot: int, attrs: Fattr3) -> Fattr3:
        return replace(attrs, fileid=self._out(slot, attrs.fileid), fsid=self.fsid)

    def _dir_attrs(self, fid: FileId, listing: _Listing, path: str, mode: int) -> Fattr3:
        return Fattr3(
            type=Ftype3.NF3DIR,
            mode=mode,
            nlink=2 + listing.subdirs.get(path, 0),
            uid=0,
            gid=0,
            size=DIR_SIZE,
            used=DIR_SIZE,
            rdev=Specdata3(),
            fsid=self.fsid,
            fileid=fid,
            atime=listing.mtime,
            mtime=listing.mtime,
            ctime=listing.mtime,
        )

    def _is_open(self, slot: int) -> bool:
        with self._lock:
            return slot in self._open

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

    # ------------------------------------------------------------ tables made by writing

    def _new_of(self, local: int) -> _NewTable | None:
        with self._lock:
            return self._new_ids.get(local)

    def _pending(self, local: int) -> _NewTable | None:
        """The new table whose directory or schema.sql ``local`` is (STALE once it is a
        table, for anything but its attributes and the end of the edit that made it)."""
        n = self._new_of(local)
        if n is not None and n.created:
            raise NfsError(Nfsstat3.NFS3ERR_STALE, f"{n.path} is a table now")
        return n

    def _table_dir(self, dir_id: FileId) -> FileId:
        """Return the table's directory for the directory a new table was made in (a client
        that made it still holds that handle), else ``dir_id``."""
        slot, local = split_id(dir_id)
        if slot != 0:
            return dir_id
        n = self._new_of(local)
        if n is None or not n.created or local not in (n.dir_local, n.data_local):
            return dir_id
        table = self._slots.slot_of(n.path)
        if table is None:
            return dir_id
        if local == n.data_local:  # its data/: the table's
            root = lake_id(table, _TABLE_ROOT_LOCAL)
            return self.lookup(root, "data", CallContext.local())
        return lake_id(table, _TABLE_ROOT_LOCAL)

    def _rebuild(self, add: str | None = None) -> None:
        """List the lake again from the last listing after a change made here."""
        with self._refresh_lock:
            old = self._current()
            tables = set(old.tables)
            if add is not None:
                self._slots.assign([add])
                tables.add(add)
            with self._lock:
                new = [p for p, n in self._new.items() if not n.created]
            now = Nfstime3.from_seconds(self._wallclock())
            self._listing = _build(sorted(tables), old.at, now, old, new)

    def _make_new(self, path: str) -> FileId:
        with self._lock:
            if path in self._new:
                raise NfsError(Nfsstat3.NFS3ERR_EXIST, path)
            self._new[path] = _NewTable(path, 0, 0, Nfstime3.from_seconds(self._wallclock()))
        self._rebuild()
        listing = self._current()
        with self._lock:
            n = self._new[path]
            n.dir_local = listing.dir_local[path]
            local = path_hash("new-schema", self.root, path) & ((1 << 40) - 1)
            while local in (0, LAKE_ROOT) or local in listing.dir_path or local in self._new_ids:
                local = (local + 1) & ((1 << 40) - 1)
            n.file_local = local
            self._new_ids[n.dir_local] = n
            self._new_ids[n.file_local] = n
        logger.info("new table directory %s: write its schema.sql to create the table", path)
        return lake_id(0, n.dir_local)

    def _make_new_data(self, n: _NewTable) -> FileId:
        """MKDIR ``data`` in a new table directory: where its data.csv may be written
        (``mkdir -p sales/data && cp rows.csv sales/data/data.csv``)."""
        if self._rows_creator is None or (n.file_name is not None and not n.in_data):
            raise NfsError(
                Nfsstat3.NFS3ERR_ACCES, f"{n.path} is not a table yet: write its schema.sql"
            )
        with self._lock:
            if n.data_local:
                raise NfsError(Nfsstat3.NFS3ERR_EXIST, "data")
            local = path_hash("new-data", self.root, n.path) & ((1 << 40) - 1)
            taken = self._listing.dir_path if self._listing is not None else {}
            while local in (0, LAKE_ROOT) or local in taken or local in self._new_ids:
                local = (local + 1) & ((1 << 40) - 1)
            n.data_local = local
            self._new_ids[local] = n
            n.mtime = Nfstime3.from_seconds(self._wallclock())
        return lake_id(0, local)

    def _drop_new(self, n: _NewTable) -> None:
        with self._lock:
            self._new.pop(n.path, None)
            self._new_ids.pop(n.dir_local, None)
            self._new_ids.pop(n.file_local, None)
            if n.data_local:
                self._new_ids.pop(n.data_local, None)
        self._rebuild()

    def _create(self, n: _NewTable) -> None:
        """Create the table ``n``'s schema.sql describes (one table, or NFS3ERR_EXIST)."""
        with self._refresh_lock:
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
                self._new.pop(n.path, None)
            logger.info("created table %s from its schema.sql", n.path)
            self._rebuild(add=n.path)

    def _new_attrs(self, fid: FileId, n: _NewTable, local: int) -> Fattr3:
        if local == n.file_local:
            size = n.size
            return Fattr3(
                type=Ftype3.NF3REG,
                mode=0o644,
                nlink=1,
                uid=0,
                gid=0,
                size=size,
                used=(size + 511) & ~511,
                rdev=Specdata3(),
                fsid=self.fsid,
                fileid=fid,
                atime=n.mtime,
                mtime=n.mtime,
                ctime=n.mtime,
            )
        return Fattr3(
            type=Ftype3.NF3DIR,
            mode=0o777,
            nlink=2,
            uid=0,
            gid=0,
            size=DIR_SIZE,
            used=DIR_SIZE,
            rdev=Specdata3(),
            fsid=self.fsid,
            fileid=fid,
            atime=n.mtime,
            mtime=n.mtime,
            ctime=n.mtime,
        )

    def _new_file(
        self, dir_id: FileId, name: str, size: int | None, ctx: CallContext, *, guarded: bool
    ) -> FileId:
        local = split_id(dir_id)[1]
        n = self._pending(local)
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
            return self._new_rows_file(n, size, ctx, guarded=guarded, in_data=in_data)
        with self._lock:
            if n.schema is not None and guarded:
                raise NfsError(Nfsstat3.NFS3ERR_EXIST, name)
            if n.schema is None:
                n.schema = bytearray()
            if size is not None:
                del n.schema[size:]
                n.schema.extend(bytes(size - len(n.schema)))
            n.mtime = Nfstime3.from_seconds(self._wallclock())
        return lake_id(0, n.file_local)

    def _new_rows_file(
        self, n: _NewTable, size: int | None, ctx: CallContext, *, guarded: bool, in_data: bool
    ) -> FileId:
        """CREATE (or a truncation) of a new table's data.csv: the caller's staging."""
        with self._lock:
            rows = n.rows
            if rows is not None and (guarded or not rows.owned_by(ctx)):
                # one writer creates the table; another gets EEXIST (it may add rows to
                # the table once it is made, by the usual rules of its data.csv)
                raise NfsError(Nfsstat3.NFS3ERR_EXIST, f"{n.path}/{DATA_CSV} is being written")
            try:
                if rows is None:
                    rows = self._rows_journal.start(n.path, ctx, self._clock(), in_data=in_data)
                    n.rows, n.in_data = rows, in_data
                if size is not None:
                    rows.truncate(size, self._clock())
            except OSError as err:
                raise NfsError(Nfsstat3.NFS3ERR_IO, f"cannot journal {n.path}: {err}") from err
            n.mtime = Nfstime3.from_seconds(self._wallclock())
        return lake_id(0, n.file_local)

    def _check_rows_lost(self, n: _NewTable) -> None:
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

    def _refuse_late_rows(self, local: int, name: str) -> None:
        """A ``data.csv`` created at a table's top level (a second client's ``cp`` of a
        table made meanwhile from its data.csv): NFS3ERR_EXIST, not a stray file (the
        rows live in data/data.csv, where they can be added)."""
        if self._rows_creator is not None and local == _TABLE_ROOT_LOCAL and name == DATA_CSV:
            raise NfsError(
                Nfsstat3.NFS3ERR_EXIST, f"the table exists: its rows are in data/{DATA_CSV}"
            )

    def _created_rows(self, n: _NewTable, local: int) -> FileId | None:
        """The id of the table's data/data.csv, for the handle of the data.csv that
        created it (its writer still holds that handle), else None."""
        if not n.created or n.rows is None or not n.rows.made or local != n.file_local:
            return None
        slot = self._slots.slot_of(n.path)
        if slot is None:
            return None
        table = lake_id(slot, _TABLE_ROOT_LOCAL)
        ctx = CallContext.local()
        return self.lookup(self.lookup(table, "data", ctx), DATA_CSV, ctx)

    def _create_rows(self, n: _NewTable) -> None:
        """Create the table from ``n``'s staged data.csv (one commit), or raise (INVAL:
        the bytes are dropped; EXIST: a table was made there meanwhile, dropped too)."""
        with self._refresh_lock:
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
                    n.mtime = Nfstime3.from_seconds(self._wallclock())  # clients revalidate
                    self._new.pop(n.path, None)
                self._rebuild(add=n.path)  # before the writer's next call goes to it
            logger.info("created table %s from its data.csv", n.path)

    def _poll_rows(self) -> None:
        """Create the tables whose NFSv3 writer of data.csv is done (idle)."""
        now = self._clock()
        with self._lock:
            due = [
                n
                for n in self._new.values()
                if n.rows is not None and not n.created and n.rows.done(now, self._idle)
            ]
        for n in due:
            try:
                self._create_rows(n)
            except NfsError as err:
                logger.warning("%s: table not made at idle: %s", n.path, err)

    def _idle_loop(self) -> None:
        while not self._stop.wait(max(0.05, self._idle / 4)):
            self._poll_rows()

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
            try:
                self._make_new(path)
            except NfsError:
                self._rows_journal.set_aside(rec, f"{path} cannot be made here again")
                continue
            with self._lock:
                n = self._new[path]
                n.rows = self._rows_journal.restore(rec, self._clock())
            if in_data:
                n.in_data = True
                self._make_new_data(n)
            logger.info("%s: staged data.csv of %s recovered", path, n.rows.peer)

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
        listing = self._current()
        if slot == 0:
            if self._new_of(local) is None:
                self._dir(local, listing)
            return self._dir_gen
        path = self._table_path(slot, listing)
        if local == _TABLE_ROOT_LOCAL:
            return path_hash("lake-table", self.root, path).to_bytes(8, "big")
        inner = self._inner(slot, local)
        with self._using(slot) as t:
            gen = t.target.generation(inner)
            # data.csv, schema.sql and a partition's data.csv: what data.csv's generation is
            if inner not in _KEPT_GENERATIONS and gen != t.target.generation(DATA_CSV_ID):
                return gen
            table_gen = t.target.generation(ROOT_ID)
        # The table face gives data.csv and schema.sql (and each partition's data.csv) a
        # generation fixed at its start (the table's version then), for the life of a
        # single-table server, and a new one if the table is replaced under it (a
        # restore). A lake closes and reopens its tables (the LRU), so it keeps the first
        # generation of this boot across reopenings, while the table is the same table
        # and no open face of it saw it replaced. (Scratch files' generations are per
        # face: never kept, as their ids are handed out again.)
        with self._lock:
            kept = self._file_gens.get(slot)
            face = None if kept is None else kept.face()
            other = kept is None or kept.table_gen != table_gen  # another table at the path
            replaced = kept is not None and face is t and kept.seen.get(inner, gen) != gen
            if kept is None or other or replaced:
                kept = self._file_gens[slot] = _KeptGens(table_gen, weakref.ref(t))
            elif face is not t:  # reopened: what the new face says is its own start
                kept.face, kept.seen = weakref.ref(t), {}
            kept.seen[inner] = gen
            return kept.kept.setdefault(inner, gen)

    def getattr(self, fid: FileId) -> Fattr3:
        """Return the attributes; a table's directory is answered without opening it."""
        slot, local = split_id(fid)
        listing = self._current()
        if slot == 0:
            n = self._new_of(local)
            moved = None if n is None else self._created_rows(n, local)
            if moved is not None:
                return self.getattr(moved)
            if n is not None:
                return self._new_attrs(fid, n, local)
            return self._dir_attrs(fid, listing, self._dir(local, listing), self._dir_mode)
        path = self._table_path(slot, listing)
        if local == _TABLE_ROOT_LOCAL and not self._is_open(slot):
            return self._dir_attrs(fid, listing, path, 0 if slot in self._refused else 0o777)
        inner = self._inner(slot, local)
        try:
            with self._using(slot) as t:
                return self._fix(slot, t.target.getattr(inner))
        except NfsError as err:
            if local == _TABLE_ROOT_LOCAL and err.status == Nfsstat3.NFS3ERR_ACCES:
                return self._dir_attrs(fid, listing, path, 0)
            raise

    def setattr(self, fid: FileId, attrs: Sattr3, ctx: CallContext) -> Fattr3:
        """Set attributes of a table's file (the lake's directories refuse: ACCES)."""
        slot, local = split_id(fid)
        if slot == 0:
            n = self._new_of(local)
            if n is not None:
                moved = self._created_rows(n, local)
                if moved is not None:
                    return self.setattr(moved, attrs, ctx)
                name = n.file_name
                if attrs.size is not None and local == n.file_local and not n.created and name:
                    where = n.data_local if n.in_data else n.dir_local
                    self._new_file(lake_id(0, where), name, attrs.size, ctx, guarded=False)
                return self._new_attrs(fid, n, local)
            self._dir(local, self._current())
            raise NfsError(Nfsstat3.NFS3ERR_ACCES, "the lake's directories cannot be changed")
        inner = self._inner(slot, local)
        with self._using(slot) as t:
            self._writable(t)
            return self._fix(slot, t.target.setattr(inner, attrs, ctx))

    def access(self, fid: FileId, mask: int, ctx: CallContext) -> int:
        """Grant ACCESS3 bits: the lake's directories are r-x, a table's files its own."""
        slot, local = split_id(fid)
        listing = self._current()
        if slot == 0:
            n = self._new_of(local)
            if n is not None:
                is_dir = local != n.file_local
                mode = 0o777 if is_dir else 0o666
                return posix_access(mask, mode=mode, uid=0, gid=0, is_dir=is_dir, ctx=ctx)
            self._dir(local, listing)
            mode = self._dir_mode
            return posix_access(mask, mode=mode, uid=0, gid=0, is_dir=True, ctx=ctx)
        inner = self._inner(slot, local)
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
        inner = self._inner(slot, local)
        with self._using(slot) as t:
            return t.target.fsstat(inner)

    # ------------------------------------------------------------ Vfs: names

    def lookup(self, dir_id: FileId, name: str, ctx: CallContext) -> FileId:
        """Return the id of ``name``: a table or prefix in a lake directory, else the table's."""
        dir_id = self._table_dir(dir_id)
        slot, local = split_id(dir_id)
        listing = self._current()
        if slot == 0:
            n = self._pending(local)
            if n is not None and local in (n.dir_local, n.data_local):
                if name == ".":
                    return dir_id
                if name == "..":
                    if local == n.data_local:
                        return lake_id(0, n.dir_local)
                    return self._id_of(_parent(n.path), listing)
                found = n.id_of(local, name)
                if found is not None:
                    return lake_id(0, found)
                raise NfsError(Nfsstat3.NFS3ERR_NOENT, name)
            if n is not None:
                raise NfsError(Nfsstat3.NFS3ERR_NOTDIR, name)
            path = self._dir(local, listing)
            if name == ".":
                return dir_id
            if name == "..":
                return self._id_of(_parent(path), listing)
            if name not in listing.children.get(path, ()):
                raise NfsError(Nfsstat3.NFS3ERR_NOENT, name)
            return self._id_of(f"{path}/{name}" if path else name, listing)
        path = self._table_path(slot, listing)
        if local == _TABLE_ROOT_LOCAL and name == "..":
            return self._id_of(_parent(path), listing)
        inner = self._inner(slot, local)
        with self._using(slot) as t:
            return self._out(slot, t.target.lookup(inner, name, ctx))

    def readdir(self, dir_id: FileId, *, after: int, max_entries: int, ctx: CallContext) -> DirPage:
        """List a lake directory, or a table's directory (the table face's own listing).

        A lake directory's cookies are "." 1, ".." 2 and, for an entry, a hash of its name
        (entries come in cookie order): a cookie stays valid, and means the same place,
        while tables appear and disappear between two pages, so a client paging through
        lists every entry that stays exactly once (a position would skip or repeat one).
        """
        dir_id = self._table_dir(dir_id)
        slot, local = split_id(dir_id)
        listing = self._current()
        if slot == 0:
            n = self._pending(local)
            if n is not None and local not in (n.dir_local, n.data_local):
                raise NfsError(Nfsstat3.NFS3ERR_NOTDIR)
            path = n.path if n is not None else self._dir(local, listing)
            children = listing.children.get(path, ())
            if n is not None:
                children = n.names_in(local)
            if after < 0:
                raise NfsError(Nfsstat3.NFS3ERR_BAD_COOKIE)
            keyed = [(1, "."), (2, ".."), *sorted((_cookie(c), c) for c in children)]
            rest = [(cookie, name) for cookie, name in keyed if cookie > after]
            entries = []
            for cookie, name in rest[:max_entries]:
                if name == ".":
                    fid = dir_id
                elif name == ".." and n is not None and local == n.data_local:
                    fid = lake_id(0, n.dir_local)
                elif name == "..":
                    fid = self._id_of(_parent(path), listing)
                elif n is not None:
                    fid = lake_id(0, n.id_of(local, name) or n.file_local)
                else:
                    fid = self._id_of(f"{path}/{name}" if path else name, listing)
                entries.append(DirEntry(fid, name, cookie))
            return DirPage(tuple(entries), len(rest) <= max_entries)
        path = self._table_path(slot, listing)
        inner = self._inner(slot, local)
        with self._using(slot) as t:
            page = t.target.readdir(inner, after=after, max_entries=max_entries, ctx=ctx)
        out = []
        for e in page.entries:
            if local == _TABLE_ROOT_LOCAL and e.name == "..":
                fid = self._id_of(_parent(path), listing)
            else:
                fid = self._out(slot, e.fileid)
            out.append(DirEntry(fid, e.name, e.cookie))
        return DirPage(tuple(out), page.eof, page.cookieverf)

    def _lake_dir_change(self, dir_id: FileId, name: str, what: str) -> NfsError:
        listing = self._current()
        path = self._dir(split_id(dir_id)[1], listing)
        if name in listing.children.get(path, ()):
            return NfsError(Nfsstat3.NFS3ERR_EXIST, name)
        return NfsError(
            Nfsstat3.NFS3ERR_ACCES, f"cannot {what} {name!r} in the lake: only tables live here"
        )

    def create(
        self, dir_id: FileId, name: str, attrs: Sattr3, ctx: CallContext, *, guarded: bool
    ) -> FileId:
        """Create a file in a table's directory (refused at the lake level)."""
        dir_id = self._table_dir(dir_id)
        slot, local = split_id(dir_id)
        if slot == 0:
            if self._pending(local) is not None:
                return self._new_file(dir_id, name, attrs.size, ctx, guarded=guarded)
            raise self._lake_dir_change(dir_id, name, "create")
        self._refuse_late_rows(local, name)
        inner = self._inner(slot, local)
        with self._using(slot) as t:
            self._writable(t)
            return self._out(slot, t.target.create(inner, name, attrs, ctx, guarded=guarded))

    def create_exclusive(
        self, dir_id: FileId, name: str, verifier: bytes, ctx: CallContext
    ) -> FileId:
        """Create a file exclusively in a table's directory (refused at the lake level)."""
        dir_id = self._table_dir(dir_id)
        slot, local = split_id(dir_id)
        if slot == 0:
            if self._pending(local) is not None:
                return self._new_file(dir_id, name, None, ctx, guarded=True)
            raise self._lake_dir_change(dir_id, name, "create")
        self._refuse_late_rows(local, name)
        inner = self._inner(slot, local)
        with self._using(slot) as t:
            self._writable(t)
            return self._out(slot, t.target.create_exclusive(inner, name, verifier, ctx))

    def mkdir(self, dir_id: FileId, name: str, attrs: Sattr3, ctx: CallContext) -> FileId:
        """Make a directory in a table's directory (refused at the lake level)."""
        dir_id = self._table_dir(dir_id)
        slot, local = split_id(dir_id)
        if slot == 0:
            n = self._pending(local) if self._creator is not None else None
            if n is not None and name == "data" and local == n.dir_local:
                return self._make_new_data(n)
            if n is not None:
                raise NfsError(
                    Nfsstat3.NFS3ERR_ACCES,
                    f"{n.path} is not a table yet: write its schema.sql"
                    + (" or data.csv" if self._rows_creator is not None else "")
                    + " to make it",
                )
            if self._creator is None:
                raise self._lake_dir_change(dir_id, name, "make a directory")
            listing = self._current()
            path = self._dir(local, listing)
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
            return self._make_new(f"{path}/{name}" if path else name)
        inner = self._inner(slot, local)
        with self._using(slot) as t:
            self._writable(t)
            return self._out(slot, t.target.mkdir(inner, name, attrs, ctx))

    def remove(self, dir_id: FileId, name: str, ctx: CallContext) -> None:
        """Remove a table's file (data.csv: every row, one commit); lake entries are
        directories (NFS3ERR_ISDIR)."""
        dir_id = self._table_dir(dir_id)
        slot, local = split_id(dir_id)
        if slot == 0:
            n = self._pending(local)
            if n is not None:
                with self._lock:
                    if name == "data" and local == n.dir_local and n.data_local:
                        raise NfsError(Nfsstat3.NFS3ERR_ISDIR, name)
                    if n.id_of(local, name) != n.file_local:
                        raise NfsError(Nfsstat3.NFS3ERR_NOENT, name)
                    n.schema = None
                    if n.rows is not None:  # the staged rows go (their journal too)
                        n.rows.drop()
                        n.rows = None
                return
            listing = self._current()
            path = self._dir(local, listing)
            if name in listing.children.get(path, ()):
                raise NfsError(Nfsstat3.NFS3ERR_ISDIR, name)
            raise NfsError(Nfsstat3.NFS3ERR_NOENT, name)
        inner = self._inner(slot, local)
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
            sub = self._pending(local)
            if sub is not None:  # in a new table directory: only its data/ is a directory
                if name != "data" or local != sub.dir_local or not sub.data_local:
                    raise NfsError(Nfsstat3.NFS3ERR_NOENT, name)
                if sub.names_in(sub.data_local):
                    raise NfsError(Nfsstat3.NFS3ERR_NOTEMPTY, name)
                with self._lock:
                    self._new_ids.pop(sub.data_local, None)
                    sub.data_local = 0
                return
            listing = self._current()
            path = self._dir(local, listing)
            with self._lock:
                new = self._new.get(f"{path}/{name}" if path else name)
            if new is not None and not new.created:  # not a table (yet): it may go
                if new.names_in(new.dir_local):
                    raise NfsError(Nfsstat3.NFS3ERR_NOTEMPTY, name)
                self._drop_new(new)
                return
            if name in listing.children.get(path, ()):
                raise self._refuse("RMDIR", f"{path}/{name}" if path else name)
            raise NfsError(Nfsstat3.NFS3ERR_NOENT, name)
        inner = self._inner(slot, local)
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
                if self._new_of(local) is not None:
                    raise NfsError(Nfsstat3.NFS3ERR_ACCES, "a new table's files cannot be renamed")
        if from_slot == 0:
            listing = self._current()
            path = self._dir(from_local, listing)
            if from_name in listing.children.get(path, ()):
                raise self._refuse("RENAME", f"{path}/{from_name}" if path else from_name)
            raise NfsError(Nfsstat3.NFS3ERR_NOENT, from_name)
        if to_slot != from_slot:
            raise NfsError(Nfsstat3.NFS3ERR_XDEV, "a rename between tables")
        inner_from = self._inner(from_slot, from_local)
        inner_to = self._inner(to_slot, to_local)
        with self._using(from_slot) as t:
            self._writable(t)
            t.target.rename(inner_from, from_name, inner_to, to_name, ctx)

    # ------------------------------------------------------------ Vfs: data

    def read(
        self, fid: FileId, offset: int, count: int, ctx: CallContext
    ) -> tuple[bytes | memoryview, bool]:
        """Read a table's file (a lake directory: NFS3ERR_ISDIR)."""
        slot, local = split_id(fid)
        if slot == 0:
            n = self._new_of(local)
            if n is None or local != n.file_local:
                raise NfsError(Nfsstat3.NFS3ERR_ISDIR)
            moved = self._created_rows(n, local)
            if moved is not None:
                return self.read(moved, offset, count, ctx)
            return n.read(offset, count), offset + count >= n.size
        inner = self._inner(slot, local)
        with self._using(slot) as t:
            return t.target.read(inner, offset, count, ctx)

    def read_nowait(
        self, fid: FileId, offset: int, count: int, ctx: CallContext
    ) -> tuple[bytes | memoryview, bool, Fattr3] | None:
        """Read without waiting if the table is open and its face can; else None."""
        slot, local = split_id(fid)
        listing = self._listing
        if slot == 0 or listing is None or self._clock() - listing.at >= self._ttl:
            return None
        path = self._slots.table_of(slot)
        if path is None or path not in listing.tables:
            return None
        with self._lock:
            entry = self._open.get(slot)
            if entry is None:
                return None
            entry.active += 1
        try:
            nowait = getattr(entry.table.target, "read_nowait", None)
            inner = self._inner_ids(slot).inner(local)
            if nowait is None or inner is None:
                return None
            got: tuple[bytes | memoryview, bool, Fattr3] | None = nowait(inner, offset, count, ctx)
            if got is None:
                return None
            return got[0], got[1], self._fix(slot, got[2])
        finally:
            with self._lock:
                entry.active -= 1
                entry.last_used = self._clock()

    def write(
        self, fid: FileId, offset: int, data: bytes, stable: StableHow, ctx: CallContext
    ) -> tuple[int, StableHow]:
        """Write a table's file (staged for the caller, as the table face does)."""
        slot, local = split_id(fid)
        if slot == 0:
            n = self._new_of(local)
            moved = None if n is None else self._created_rows(n, local)
            if moved is not None:  # the handle that made the table: its data.csv now
                return self.write(moved, offset, data, stable, ctx)
            return self._write_new(local, offset, data, stable, ctx)
        inner = self._inner(slot, local)
        with self._using(slot) as t:
            self._writable(t)
            return t.target.write(inner, offset, data, stable, ctx)

    def _write_new(
        self, local: int, offset: int, data: bytes, stable: StableHow, ctx: CallContext
    ) -> tuple[int, StableHow]:
        """WRITE of a new table's schema.sql: kept until the writer is done (a COMMIT, a
        FILE_SYNC write, an NFSv4 CLOSE), which creates the table."""
        n = self._new_of(local)
        if n is None or local != n.file_local:
            raise NfsError(Nfsstat3.NFS3ERR_ISDIR)
        self._check_rows_lost(n)
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
            n.mtime = Nfstime3.from_seconds(self._wallclock())
        if stable == StableHow.UNSTABLE:
            return len(data), StableHow.UNSTABLE
        self._create(n)
        return len(data), StableHow.FILE_SYNC

    def _write_rows(
        self, n: _NewTable, offset: int, data: bytes, stable: StableHow, ctx: CallContext
    ) -> tuple[int, StableHow]:
        """WRITE of a new table's data.csv: journaled, staged for its writer only (one
        that comes while the table is being made goes to its data/data.csv after)."""
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
                    rows.write(offset, data, stable, self._clock())
                except OSError as err:
                    raise NfsError(Nfsstat3.NFS3ERR_IO, f"cannot journal {n.path}: {err}") from err
                n.mtime = Nfstime3.from_seconds(self._wallclock())
                return len(data), stable
        return self.write(lake_id(0, n.file_local), offset, data, stable, ctx)

    def _commit_rows(self, n: _NewTable, ctx: CallContext) -> None:
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

    def commit(self, fid: FileId, offset: int, count: int, ctx: CallContext) -> None:
        """COMMIT a table's file (makes the caller's staged data durable)."""
        slot, local = split_id(fid)
        if slot == 0:
            n = self._new_of(local)
            moved = None if n is None else self._created_rows(n, local)
            if moved is not None:
                self.commit(moved, offset, count, ctx)
                return
            if n is not None and local == n.file_local:
                self._check_rows_lost(n)
            if n is None or n.created or local != n.file_local:
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
            return
        inner = self._inner(slot, local)
        with self._using(slot) as t:
            t.target.commit(inner, offset, count, ctx)

    def write_verifier(self) -> bytes:
        """Return one WRITE/COMMIT verifier for the lake: new per boot, and whenever the
        verifier of an open table changes (it lost staged data)."""
        digest = hashlib.sha256(self._boot)
        with self._lock:
            entries = list(self._open.items())
            digest.update(self._retired.to_bytes(8, "big"))
        for slot, e in entries:
            now = _verifier(e.table.target)
            if now != e.verifier:
                digest.update(slot.to_bytes(8, "big") + now)
        return digest.digest()[:8]

    # ------------------------------------------------------------ edits and lifecycle

    def finish(self, fid: FileId, ctx: CallContext) -> object:
        """Apply the caller's staged edit of ``fid`` now (NFSv4 CLOSE), in its table."""
        slot, local = split_id(fid)
        if slot == 0:
            n = self._new_of(local)
            moved = None if n is None else self._created_rows(n, local)
            if moved is not None:  # a CLOSE resent after the table was made
                return self.finish(moved, ctx)
            if n is not None and local == n.file_local:
                self._check_rows_lost(n)
            if n is not None and not n.created and local == n.file_local:
                if n.rows is not None and n.rows.owned_by(ctx):
                    self._create_rows(n)
                elif n.schema:
                    self._create(n)
            return None
        inner = self._inner(slot, local)
        with self._using(slot) as t:
            if isinstance(t.target, EditBounds):
                return t.target.finish(inner, ctx)
            return None

    def discard(self, fid: FileId, ctx: CallContext) -> bool:
        """Drop the caller's staged edit of ``fid`` unapplied (an expired NFSv4 lease)."""
        slot, local = split_id(fid)
        if slot == 0:
            n = self._new_of(local)
            if n is None or n.created or n.rows is None or not n.rows.owned_by(ctx):
                return False
            with self._lock:
                logger.warning("%s/%s: staged rows of %s dropped", n.path, DATA_CSV, ctx.peer)
                n.rows.drop()
                n.rows = None
            return True
        inner = self._inner(slot, local)
        with self._using(slot) as t:
            if isinstance(t.target, EditBounds):
                return t.target.discard(inner, ctx)
            return False

    @property
    def state_dir(self) -> Path | None:
        """The lake's state directory (the NFSv4 service keeps its clients there)."""
        return self._state_dir

    def poll(self) -> None:
        """Apply the idle stagings of every open table (see `TableFs.poll`)."""
        self._poll_rows()
        for fs in self.open_tables().values():
            fs.poll()

    def close(self) -> None:
        """Close every open table (NfsServer calls this at shutdown); unfinished staged
        writes stay journaled for the next start (see `TableFs.close`)."""
        self._stop.set()
        if self._timer is not None and self._timer is not threading.current_thread():
            self._timer.join(5)
        with self._lock:
            self._closed = True
            entries = list(self._open.items())
            self._open.clear()
            staged = 0
            for n in self._new.values():  # unfinished: journaled for the next start
                if n.rows is not None and n.rows.journal is not None:
                    n.rows.journal.close()
                    staged += 1
        self._rows_journal.close()
        unfinished = staged
        for slot, e in entries:
            self._close_table(slot, e)
            unfinished += e.table.fs.unfinished_at_close
        self._unfinished_at_close = unfinished

    @property
    def unfinished_at_close(self) -> int:
        """Staged writes :meth:`close` kept in the journals, over every table."""
        return self._unfinished_at_close


def _cookie(name: str) -> int:
    """Return the READDIR cookie of a lake directory's entry ``name`` (3 .. 2^62 + 2)."""
    return 3 + path_hash("cookie", name) % (1 << 62)


def _verifier(vfs: Vfs) -> bytes:
    own = getattr(vfs, "write_verifier", None)
    return bytes(own()) if callable(own) else b""
