"""TableFs: a posixlake table as a file tree of CSV files, served over NFSv3.

The tree (see docs/design.md, "The NFS face")::

    /data/data.csv           the table at its current version (read / write)
    /schema.sql              CREATE TABLE for the table (read-only)
    /versions/<N>/data.csv   the table at version N (read-only time travel)

plus a scratch area with full POSIX semantics (a :class:`~nfs.scratchfs.ScratchFs` on disk
under the state directory) for every other file or directory a client creates in ``/`` or ``/data``: editors' and
``sed -i``'s temporary files, ``cp`` targets, user files.

Reads come from a per-version rendering cache (:mod:`nfs._render_cache`).

Writes to ``data.csv`` follow the rules in docs/nfs-writes.md, which this module owns
(implemented by :class:`nfs._tablewrites.WriteRules`; the versions shown and the error
map by :mod:`nfs._tablestate`; path-based helpers in :mod:`nfs._pathops`):

- each writer (client address + AUTH_SYS uid/gid, :class:`~nfs._writers.WriterKey`) stages
  its own content (:mod:`nfs._staging`); nobody else's call discards it;
- a staging is based on what that client READ (:class:`~nfs._writers.ReadViews`: never what
  a GETATTR, LOOKUP or ACCESS showed; reads from two versions refuse the edit with EIO), or
  its own last edit, or the recent version its first write extends (a stale page-widened
  append);
- it is applied as ONE commit (:mod:`nfs._apply`): base + whole lines is an INSERT, other
  content a 3-way change from its base onto the current version (last commit wins per
  key; without a key a removed row must still be there);
- it is applied when the writer is done: NFSv3 has no close and a COMMIT also comes
  during writeback, so a COMMIT only makes it durable; it applies after ``idle_seconds``
  without a write from its writer, at a RENAME onto data.csv, or (``echo >>``) at a
  FILE_SYNC WRITE that makes it its base plus whole lines; never with a hole, never
  mid-line unless flushed, never as a truncation alone, never at shutdown; a resend of an
  edit an earlier boot committed changes nothing;
- every operation is journaled (:mod:`nfs._journal`) and fsynced before a reply promises
  it; the next TableFs for the table recovers the journals; failures found later go to
  the writer's next WRITE or COMMIT.

The only map from posixlake errors to NFS statuses is :func:`nfs_error` here.

File ids are fixed for the table's own entries (so handles survive restarts: see
:meth:`TableFs.generation`); scratch entries get ids from ``1 << 62`` up.
"""

from __future__ import annotations

import logging
import os
import secrets
import threading
import time
from collections.abc import Callable
from pathlib import Path

from nfs._apply import (
    table_identity,
)
from nfs._journal import JournalDir
from nfs._pathops import PathOps
from nfs._render_cache import RenderCache
from nfs._segkeys import SegmentKeys
from nfs._segments import DEFAULT_CACHE_BYTES, Segmenter, SegmentStore
from nfs._staging import Base, BytesBase
from nfs._tableattrs import TableAttrs
from nfs._tablestate import (
    _COOKIE_OFFSET,
    _DATA_CSV,
    _DIR_MODE,
    _KEEP_SHADOWS,
    _MAX_CLIENTS,
    _MAX_PAGES,
    _ROOT_STATIC,
    _VERSION_BASE,
    DATA_CSV_ID,
    DATA_DIR_ID,
    DEFAULT_ABANDON_SECONDS,
    DEFAULT_IDLE_SECONDS,
    ROOT_ID,
    SCHEMA_ID,
    SCRATCH_BASE,
    VERSIONS_ID,
    _err,
    _h8,
    _slice,
    default_state_dir,
    nfs_error,
)
from nfs._tablewrites import _torn_message
from nfs._writers import Bounded, ClientPages, ReadViews, Shadows, Torn, Writer, WriterKey
from nfs.memfs import IdAllocator
from nfs.nfs3 import (
    Fattr3,
    Ftype3,
    Nfsstat3,
    Nfstime3,
    Sattr3,
    StableHow,
)
from nfs.rpc import CallContext
from nfs.scratchfs import DEFAULT_SCRATCH_QUOTA_BYTES, ScratchFs
from nfs.vfs import (
    ACCESS3_DELETE,
    ACCESS3_MODIFY,
    BOUNDED_PEER_PREFIX,
    DirEntry,
    DirPage,
    FileId,
    NfsError,
)
from posixlake import DatabaseOps

__all__ = [
    "DATA_CSV_ID",
    "DATA_DIR_ID",
    "DEFAULT_ABANDON_SECONDS",
    "DEFAULT_IDLE_SECONDS",
    "ROOT_ID",
    "SCHEMA_ID",
    "SCRATCH_BASE",
    "VERSIONS_ID",
    "PathOps",
    "TableFs",
    "default_state_dir",
    "nfs_error",
]

logger = logging.getLogger(__name__)


class TableFs(TableAttrs):
    """The Vfs of one posixlake table (see the module docstring).

    Args:
        db: the table. Its authorizer decides what NFS callers may do: without "write"
            the share is read-only, without "read" READs are refused.
        clock: monotonic seconds, for idle detection and the version check (injected in
            tests: advance it instead of sleeping).
        wallclock: seconds since the epoch, for the times of staged and scratch files.
        idle_seconds: a writer is done after this long without a write: its complete
            content is applied then (a COMMIT only makes it durable).
        abandon_seconds: a staging that cannot apply (mid-line, a truncation alone) is
            given up after this long: logged, and reported to its writer.
        state_dir: where the write journal lives (see :func:`default_state_dir`); its
            journals are recovered here, at construction.
        version_ttl: how long a checked table version is trusted before the Delta log is
            listed again (writes through ``db`` itself are seen at once).
        keep_versions: renderings kept in memory (the current one and older ones).
        segment_cache: the directory of cached CSV segments (see :mod:`nfs._segments`;
            default ``$POSIXLAKE_SEGMENT_CACHE`` or ``~/.cache/posixlake/segments``).
        segment_cache_bytes: the size bound of that cache (least recently used go).
        idle_timer: run a background thread that applies idle staged writes (otherwise
            they are applied by the next call or :meth:`poll`).
        read_only: serve the share read-only even if the user may write.
        scratch_quota: the size limit of the scratch area (``<state_dir>/scratch``).
    """

    def __init__(
        self,
        db: DatabaseOps,
        *,
        clock: Callable[[], float] = time.monotonic,
        wallclock: Callable[[], float] = time.time,
        idle_seconds: float = DEFAULT_IDLE_SECONDS,
        abandon_seconds: float = DEFAULT_ABANDON_SECONDS,
        state_dir: str | os.PathLike[str] | None = None,
        version_ttl: float = 0.5,
        keep_versions: int = 4,
        idle_timer: bool = True,
        read_only: bool = False,
        segment_cache: str | os.PathLike[str] | None = None,
        segment_cache_bytes: int = DEFAULT_CACHE_BYTES,
        scratch_quota: int = DEFAULT_SCRATCH_QUOTA_BYTES,
    ) -> None:
        self._db = db
        self._clock = clock
        self._wallclock = wallclock
        self._idle = idle_seconds
        self._abandon = max(abandon_seconds, idle_seconds)
        self._ttl = version_ttl
        self._lock = threading.RLock()
        self._segmenter = Segmenter(db, SegmentStore(segment_cache, max_bytes=segment_cache_bytes))
        self._keys = SegmentKeys(self._segmenter)
        self._cache = RenderCache(segmenter=self._segmenter, keep=keep_versions)
        self._read_only = read_only or not db.authorizer.allows("write")
        self._known_version = db.version
        self._generation = db.generation
        self._checked_at = clock()
        ident = table_identity(db)
        self._fsid = int.from_bytes(_h8(b"fsid", ident), "big") >> 1
        self._table_gen = _h8(b"table", ident)
        # handles of the files whose bytes change survive a restart only if the table has
        # not changed since this boot started
        self._file_gen = _h8(b"file", ident, str(self._known_version).encode())
        self._boot = secrets.token_bytes(8)
        self._table_id = ident.decode()
        self._state_dir = (
            Path(state_dir) if state_dir is not None else default_state_dir(self._table_id)
        )
        self._scratch = ScratchFs(
            self._state_dir / "scratch",
            wallclock,
            ids=IdAllocator(SCRATCH_BASE),
            root_id=ROOT_ID,
            root_mode=_DIR_MODE,
            fsid=self._fsid,
            max_file_size=1 << 40,
            quota_bytes=scratch_quota,
        )
        self._scratch.add_dir(ROOT_ID, "data", mode=_DIR_MODE, fid=DATA_DIR_ID)
        self._scratch_base: dict[FileId, int] = {}
        self._journals = JournalDir(self._state_dir / "journal")
        # data.csv as the last NFS writers wrote it, per version they produced (see _apply)
        self._shadows = Shadows(
            self._journals.path.with_name("shadows-" + self._journals.path.name), _KEEP_SHADOWS
        )
        self._writers: dict[WriterKey, Writer] = {}
        self._views = ReadViews(_MAX_CLIENTS)
        self._own: Bounded[str, tuple[int, Base]] = Bounded(_MAX_PAGES)
        self._began: Bounded[WriterKey, bool] = Bounded(_MAX_CLIENTS)
        self._edits_before: dict[str, list[tuple[int, int, int, int]]] | None = None
        self._failures: Bounded[WriterKey, NfsError] = Bounded(_MAX_CLIENTS)
        self._last_start = 0  # when the newest staging began (ns; see _started_ns)
        # per client: its page after its last append (see _base_for)
        self._pages = ClientPages(
            self._journals.path.with_name("pages-" + self._journals.path.name), _MAX_PAGES
        )
        self._verifier = secrets.token_bytes(8)
        self.unfinished_at_close = 0
        """Staged writes :meth:`close` kept in the journal for the next start."""
        # data.csv as the last NFS writer wrote it, per version it produced (see _apply)
        self._schema_text: tuple[int, bytes] | None = None
        self._times: dict[int, Nfstime3] = {}
        self._stop = threading.Event()
        self._timer: threading.Thread | None = None
        with self._lock:
            self._recover()
        if idle_timer:
            self._timer = threading.Thread(
                target=self._idle_loop, name="posixlake-nfs-idle", daemon=True
            )
            self._timer.start()

    @property
    def state_dir(self) -> Path:
        """Where the journal and the rest of the server's state live (the NFSv4 service
        keeps its clients there too, for their reclaims after a restart)."""
        return self._state_dir

    # ------------------------------------------------------------ Vfs: names

    def lookup(self, dir_id: FileId, name: str, ctx: CallContext) -> FileId:
        """Return the id of ``name`` in ``dir_id``."""
        with self._lock:
            self._poll_locked()
            if dir_id == ROOT_ID and name in _ROOT_STATIC:
                return _ROOT_STATIC[name]
            if dir_id == DATA_DIR_ID and name == _DATA_CSV:
                return DATA_CSV_ID
            if dir_id == VERSIONS_ID:
                if name in ("", "."):
                    return VERSIONS_ID
                if name == "..":
                    return ROOT_ID
                if not (name.isascii() and name.isdigit()) or len(name) > 18:
                    raise _err(Nfsstat3.NFS3ERR_NOENT)
                if name != str(int(name)) or int(name) > self._version():
                    raise _err(Nfsstat3.NFS3ERR_NOENT)
                return FileId(_VERSION_BASE + 2 * int(name))
            ver = self._version_of(dir_id)
            if ver is not None:
                n, is_file = ver
                self._check_version(n)
                if is_file:
                    raise _err(Nfsstat3.NFS3ERR_NOTDIR)
                if name in ("", "."):
                    return dir_id
                if name == "..":
                    return VERSIONS_ID
                if name == _DATA_CSV:
                    return FileId(dir_id + 1)
                raise _err(Nfsstat3.NFS3ERR_NOENT)
            if dir_id in (DATA_CSV_ID, SCHEMA_ID):
                raise _err(Nfsstat3.NFS3ERR_NOTDIR)
            return self._scratch.lookup(dir_id, name, ctx)

    def readdir(self, dir_id: FileId, *, after: int, max_entries: int, ctx: CallContext) -> DirPage:
        """List a directory: the table's entries merged, in cookie order, with scratch ones."""
        with self._lock:
            self._poll_locked()
            if dir_id == VERSIONS_ID:
                latest = self._version()
                names = [(1, VERSIONS_ID, "."), (2, ROOT_ID, "..")] + [
                    (3 + n, FileId(_VERSION_BASE + 2 * n), str(n)) for n in range(latest + 1)
                ]
                return self._page(names, after, max_entries)
            ver = self._version_of(dir_id)
            if ver is not None:
                n, is_file = ver
                self._check_version(n)
                if is_file:
                    raise _err(Nfsstat3.NFS3ERR_NOTDIR)
                names = [
                    (1, dir_id, "."),
                    (2, VERSIONS_ID, ".."),
                    (3, FileId(dir_id + 1), _DATA_CSV),
                ]
                return self._page(names, after, max_entries)
            if dir_id in (DATA_CSV_ID, SCHEMA_ID):
                raise _err(Nfsstat3.NFS3ERR_NOTDIR)
            page = self._scratch.readdir(dir_id, after=after, max_entries=max_entries, ctx=ctx)
            extra: list[tuple[int, FileId, str]] = []
            if dir_id == ROOT_ID:
                extra = [(fid + _COOKIE_OFFSET, fid, n) for n, fid in _ROOT_STATIC.items()]
            elif dir_id == DATA_DIR_ID:
                extra = [(DATA_CSV_ID + _COOKIE_OFFSET, DATA_CSV_ID, _DATA_CSV)]
            extra = [e for e in extra if e[0] > after]
            if not extra:
                return page
            merged = sorted(
                [(e.cookie, e.fileid, e.name) for e in page.entries] + extra, key=lambda e: e[0]
            )
            if not page.eof and page.entries:
                last = page.entries[-1].cookie
                merged = [e for e in merged if e[0] <= last]
            out = merged[:max_entries]
            eof = page.eof and len(merged) <= max_entries
            return DirPage(
                tuple(DirEntry(fid, name, cookie) for cookie, fid, name in out),
                eof,
                page.cookieverf,
            )

    @staticmethod
    def _page(names: list[tuple[int, FileId, str]], after: int, max_entries: int) -> DirPage:
        rest = [e for e in names if e[0] > after]
        out = rest[:max_entries]
        return DirPage(
            tuple(DirEntry(fid, name, cookie) for cookie, fid, name in out),
            len(rest) <= max_entries,
        )

    # ------------------------------------------------------------ Vfs: data

    def read(
        self, fid: FileId, offset: int, count: int, ctx: CallContext
    ) -> tuple[bytes | memoryview, bool]:
        """Read; the table's files are served from their cached bytes without copying."""
        with self._lock:
            self._poll_locked()
            ver = self._version_of(fid)
            if fid == DATA_CSV_ID or (ver is not None and ver[1]):
                if not self._db.authorizer.allows("read"):
                    raise _err(Nfsstat3.NFS3ERR_ACCES, "the user may not read this table")
                if ver is not None:
                    self._check_version(ver[0])
                    return self._rendering(ver[0]).read(offset, count)
                w = self._writers.get(WriterKey.of(ctx))
                if w is not None:
                    return w.staging.read(offset, count)
                version = self._version()
                shadow = self._shadow(version)
                got = (
                    _slice(shadow, offset, count)
                    if shadow is not None
                    else self._rendering(version).read(offset, count)
                )
                self._views.record(
                    ctx.peer or "local", version, offset, offset + len(got[0]), got[1]
                )
                self._own.pop(ctx.peer or "local")
                return got
            if fid == SCHEMA_ID:
                return _slice(memoryview(self._schema_bytes()), offset, count)
            if fid in (ROOT_ID, DATA_DIR_ID, VERSIONS_ID) or ver is not None:
                raise _err(Nfsstat3.NFS3ERR_ISDIR)
            return self._scratch.read(fid, offset, count, ctx)

    def read_nowait(
        self, fid: FileId, offset: int, count: int, ctx: CallContext
    ) -> tuple[bytes | memoryview, bool, Fattr3] | None:
        """Read data.csv if that needs no waiting; else None (then call `read`).

        For the transport's event loop (``NfsServer`` answers a READ there without a hop
        to a worker thread): never waits for a lock, does no IO, renders and applies
        nothing. None unless: ``fid`` is data.csv, the table lock and the table handle
        are free, no writer has a staging, the version needs no check yet
        (``version_ttl``), and its bytes and commit time are at hand. Otherwise the same
        bytes, EOF flag and effects as `read` (the caller is shown the version), with the
        attributes GETATTR gives now, taken under the same lock.
        """
        if fid != DATA_CSV_ID or not self._lock.acquire(blocking=False):
            return None
        try:
            if self._writers or self._clock() - self._checked_at >= self._ttl:
                return None  # stagings to poll, or the version to check: the full path
            state = self._db.try_loaded_state()
            if state != (self._known_version, self._generation):
                return None
            version = self._known_version
            rendering = self._cache.peek(version)
            if (
                rendering is None
                or version not in self._times
                or not self._db.authorizer.allows("read")
            ):
                return None
            shadow = self._shadow(version)
            data: bytes | memoryview
            if shadow is not None:
                data, eof = _slice(shadow, offset, count)
                size = len(shadow)
            else:
                data, eof = rendering.read(offset, count)
                size = rendering.size
            self._views.record(ctx.peer or "local", version, offset, offset + len(data), eof)
            self._own.pop(ctx.peer or "local")
            return data, eof, self._data_csv_attrs(version, size)
        finally:
            self._lock.release()

    def write(
        self, fid: FileId, offset: int, data: bytes, stable: StableHow, ctx: CallContext
    ) -> tuple[int, StableHow]:
        """Write: data.csv writes are staged for the caller (see the module docstring).

        A FILE_SYNC / DATA_SYNC write is journaled and fsynced before the reply; one that
        makes the content its base plus whole new lines is applied at once as an INSERT
        (its error is the reply's). A failure found since this writer's last reply is
        raised instead of writing.
        """
        with self._lock:
            self._poll_locked()
            if fid == DATA_CSV_ID:
                self._writable()
                self._raise_failure(WriterKey.of(ctx))
                w = self._writer(ctx, (offset, data))
                self._stage(w, write=(offset, data))
                w.flushed = False
                if stable == StableHow.UNSTABLE:
                    self._check_lines(w)
                    return len(data), StableHow.UNSTABLE
                bounded = w.key.peer.startswith(BOUNDED_PEER_PREFIX)  # NFSv4: at CLOSE
                if self._is_append(w.staging) and not w.coverage.holes() and not bounded:
                    self._apply_writer(w)  # whole new rows: an INSERT, nothing half-written
                else:  # a rewrite: applied once its writer is done (idle)
                    self._check_lines(w)
                    self._make_durable(w)
                    w.flushed = True
                return len(data), StableHow.FILE_SYNC
            ver = self._version_of(fid)
            if fid in (ROOT_ID, DATA_DIR_ID, VERSIONS_ID) or (ver is not None and not ver[1]):
                raise _err(Nfsstat3.NFS3ERR_ISDIR)
            if fid == SCHEMA_ID or ver is not None:
                raise _err(Nfsstat3.NFS3ERR_ROFS, "read-only file")
            return self._scratch.write(fid, offset, data, stable, ctx)

    def commit(self, fid: FileId, offset: int, count: int, ctx: CallContext) -> None:
        """COMMIT: make the caller's staged data.csv durable (journal fsync); apply nothing.

        The Linux client COMMITs at close() and also during writeback while the program
        still writes: a COMMIT does not end an edit (it applies once its writer is done,
        see :meth:`_poll_locked`). Lines that are bad on their own are refused here
        (:meth:`_check_lines`). A failure found since this writer's last reply is raised.
        """
        with self._lock:
            if fid == DATA_CSV_ID:
                key = WriterKey.of(ctx)
                self._raise_failure(key)
                w = self._writers.get(key)
                if w is None:
                    return
                self._check_lines(w)
                self._make_durable(w)
                w.flushed = True
                return
            if fid in (ROOT_ID, DATA_DIR_ID, VERSIONS_ID, SCHEMA_ID):
                return
            ver = self._version_of(fid)
            if ver is not None:
                self._check_version(ver[0])
                return
            self._scratch.commit(fid, offset, count, ctx)

    # ------------------------------------------------------------ Vfs: create and remove

    def _static_child(self, dir_id: FileId, name: str) -> FileId | None:
        """The id of a table entry (not scratch) named ``name`` in ``dir_id``, if any."""
        if dir_id == ROOT_ID:
            if name == "data":
                return DATA_DIR_ID
            return _ROOT_STATIC.get(name)
        if dir_id == DATA_DIR_ID and name == _DATA_CSV:
            return DATA_CSV_ID
        return None

    def _in_versions(self, dir_id: FileId) -> bool:
        return dir_id == VERSIONS_ID or self._version_of(dir_id) is not None

    def create(
        self, dir_id: FileId, name: str, attrs: Sattr3, ctx: CallContext, *, guarded: bool
    ) -> FileId:
        """Create a scratch file; UNCHECKED on data.csv opens it (a size stages a truncation)."""
        with self._lock:
            self._poll_locked()
            if self._in_versions(dir_id):
                raise _err(Nfsstat3.NFS3ERR_ROFS)
            static = self._static_child(dir_id, name)
            if static is not None:
                # GUARDED on data.csv opens it like UNCHECKED: libnfs (nfs-cp) creates its
                # target GUARDED, and data.csv always exists, so it could never be replaced.
                if guarded and static != DATA_CSV_ID:
                    raise _err(Nfsstat3.NFS3ERR_EXIST)
                if static in (DATA_DIR_ID, VERSIONS_ID):
                    raise _err(Nfsstat3.NFS3ERR_ISDIR)
                if attrs.size is not None:
                    if static == SCHEMA_ID:
                        raise _err(Nfsstat3.NFS3ERR_ROFS)
                    self._writable()
                    self._truncate(attrs.size, ctx)
                return static
            fid = self._scratch.create(dir_id, name, attrs, ctx, guarded=guarded)
            self._scratch_base.setdefault(fid, self._version())
            return fid

    def create_exclusive(
        self, dir_id: FileId, name: str, verifier: bytes, ctx: CallContext
    ) -> FileId:
        """Create a scratch file exclusively (mkstemp, cp): it remembers the table version."""
        with self._lock:
            self._poll_locked()
            if self._in_versions(dir_id):
                raise _err(Nfsstat3.NFS3ERR_ROFS)
            if self._static_child(dir_id, name) is not None:
                raise _err(Nfsstat3.NFS3ERR_EXIST)
            fid = self._scratch.create_exclusive(dir_id, name, verifier, ctx)
            self._scratch_base.setdefault(fid, self._version())
            return fid

    def mkdir(self, dir_id: FileId, name: str, attrs: Sattr3, ctx: CallContext) -> FileId:
        """Create a scratch directory."""
        with self._lock:
            if self._in_versions(dir_id):
                raise _err(Nfsstat3.NFS3ERR_ROFS)
            if self._static_child(dir_id, name) is not None:
                raise _err(Nfsstat3.NFS3ERR_EXIST)
            return self._scratch.mkdir(dir_id, name, attrs, ctx)

    def remove(self, dir_id: FileId, name: str, ctx: CallContext) -> None:
        """Remove a scratch file; removing data.csv deletes every row (one commit)."""
        with self._lock:
            self._poll_locked()
            if self._in_versions(dir_id):
                raise _err(Nfsstat3.NFS3ERR_ROFS)
            static = self._static_child(dir_id, name)
            if static == DATA_CSV_ID:
                self._writable()
                own = self._writers.get(WriterKey.of(ctx))
                if own is not None:
                    self._drop(own)
                self._apply(BytesBase(b""), self._version(), BytesBase(b""))
                return
            if static == SCHEMA_ID:
                raise _err(Nfsstat3.NFS3ERR_ACCES, "schema.sql is read-only")
            if static is not None:
                raise _err(Nfsstat3.NFS3ERR_ISDIR)
            fid = self._lookup_scratch(dir_id, name, ctx)
            self._scratch.remove(dir_id, name, ctx)
            if fid is not None:
                self._scratch_base.pop(fid, None)

    def _lookup_scratch(self, dir_id: FileId, name: str, ctx: CallContext) -> FileId | None:
        try:
            return self._scratch.lookup(dir_id, name, ctx)
        except NfsError:
            return None

    def rmdir(self, dir_id: FileId, name: str, ctx: CallContext) -> None:
        """Remove an empty scratch directory (the table's own directories stay)."""
        with self._lock:
            if self._in_versions(dir_id):
                raise _err(Nfsstat3.NFS3ERR_ROFS)
            static = self._static_child(dir_id, name)
            if static in (DATA_DIR_ID, VERSIONS_ID):
                raise _err(Nfsstat3.NFS3ERR_ACCES, "the table's directories cannot be removed")
            if static is not None:
                raise _err(Nfsstat3.NFS3ERR_NOTDIR)
            self._scratch.rmdir(dir_id, name, ctx)

    def rename(
        self,
        from_dir: FileId,
        from_name: str,
        to_dir: FileId,
        to_name: str,
        ctx: CallContext,
    ) -> None:
        """Rename scratch entries as POSIX does; a file renamed onto data.csv overwrites the table.

        The overwrite is diffed against the version the table had when the file was
        created (``sed -i`` creates its temporary file, reads data.csv, writes, renames).
        """
        with self._lock:
            self._poll_locked()
            if self._in_versions(from_dir) or self._in_versions(to_dir):
                raise _err(Nfsstat3.NFS3ERR_ROFS)
            src_static = self._static_child(from_dir, from_name)
            dst_static = self._static_child(to_dir, to_name)
            if src_static is not None:
                if src_static == dst_static:
                    return
                raise _err(Nfsstat3.NFS3ERR_ACCES, "the table's own entries cannot be moved")
            if dst_static == DATA_CSV_ID:
                self._rename_onto_table(from_dir, from_name, ctx)
                return
            if dst_static is not None:
                raise _err(Nfsstat3.NFS3ERR_ACCES, "the table's own entries cannot be replaced")
            replaced = self._lookup_scratch(to_dir, to_name, ctx)
            self._scratch.rename(from_dir, from_name, to_dir, to_name, ctx)
            if replaced is not None and not self._scratch.contains(replaced):
                self._scratch_base.pop(replaced, None)

    def _rename_onto_table(self, from_dir: FileId, from_name: str, ctx: CallContext) -> None:
        self._writable()
        src = self._scratch.lookup(from_dir, from_name, ctx)
        attrs = self._scratch.getattr(src)
        if attrs.type == Ftype3.NF3DIR:
            raise _err(Nfsstat3.NFS3ERR_ISDIR)
        # the caller must be allowed to remove the source from its directory
        if not self._scratch.access(from_dir, ACCESS3_DELETE | ACCESS3_MODIFY, ctx):
            raise _err(Nfsstat3.NFS3ERR_ACCES)
        content = self._scratch.read_all(src)
        own = self._writers.get(WriterKey.of(ctx))
        peer = ctx.peer or "local"
        if own is not None:
            # the caller's own edit of data.csv is done (it moved on to a rename): it
            # applies first, and what the caller read of data.csv was that content
            self._apply_writer(own)
        held = self._own.get(peer)
        if held is not None:  # its own last edit's bytes (what it read since)
            base_version, base = held
        else:
            # the base: what this client's READs of data.csv returned (sed -i reads it
            # after creating its temporary file), else the version when the file was made
            view = self._views.base(peer)
            if isinstance(view, Torn):
                raise _err(Nfsstat3.NFS3ERR_IO, _torn_message(view.versions))
            base_version = view if view is not None else self._scratch_base.get(src, -1)
            if base_version < 0:
                base_version = self._version()
            found = self._presented_or_none(base_version)
            if found is None:
                base_version = self._scratch_base.get(src, self._version())
                found = self._presented_or_none(base_version) or BytesBase(b"")
            base = found
        new = BytesBase(content)
        applied = self._apply(new, base_version, base, secrets.token_hex(12))
        self._holds(peer, applied, new)
        self._scratch.pop_file(from_dir, from_name)
        self._scratch_base.pop(src, None)

    # ------------------------------------------------------------ in-process helpers

    @property
    def paths(self) -> PathOps:
        """Path-based helpers for tests and in-process callers (as root)."""
        return PathOps(self)
