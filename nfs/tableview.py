"""TableFs: a posixlake table as a file tree of CSV files, served over NFSv3.

The tree (see DESIGN.md, "The NFS face")::

    /data/data.csv           the table at its current version (read / write)
    /schema.sql              CREATE TABLE for the table (read-only)
    /versions/<N>/data.csv   the table at version N (read-only time travel)

plus a scratch area with full POSIX semantics (an embedded :class:`~nfs.memfs.MemoryFs`)
for every other file or directory a client creates in ``/`` or ``/data``: editors' and
``sed -i``'s temporary files, ``cp`` targets, user files.

Reads come from a per-version rendering cache (:mod:`nfs._render_cache`).

Writes to ``data.csv`` follow the rules in docs/nfs-writes.md, which this module owns:

- each writer (client address + AUTH_SYS uid/gid, :class:`~nfs._writers.WriterKey`) stages
  its own content (:mod:`nfs._staging`); nobody else's call discards it;
- a staging is based on the version that client was shown (GETATTR, LOOKUP, READ), or on
  the recent version its first write extends (a stale page-widened append);
- it is applied as ONE commit (:mod:`nfs._apply`): base + whole lines is an INSERT, other
  content a 3-way change from its base onto the current version (last commit wins per
  key; without a key a removed row must still be there);
- it is applied when the writer is done: COMMIT on a line boundary, a FILE_SYNC append,
  a FILE_SYNC rewrite once the writer moves on, or after ``idle_seconds``; never while it
  ends mid-line or is a truncation alone; never at shutdown;
- every operation is journaled (:mod:`nfs._journal`) and fsynced before a reply promises
  it; the next TableFs for the table recovers the journals; failures found later go to
  the writer's next WRITE or COMMIT.

The only map from posixlake errors to NFS statuses is :func:`nfs_error` here.

File ids are fixed for the table's own entries (so handles survive restarts: see
:meth:`TableFs.generation`); scratch entries get ids from ``1 << 62`` up.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Final

import pyarrow as pa

from nfs._apply import (
    Applied,
    apply_content,
    apply_lines,
    arrow_schema,
    committed_write,
    header_of,
    loaded_version,
    partition_columns,
    same_bytes,
    table_identity,
)
from nfs._journal import JournalDir, JournalFile, JournalHeader, JournalOp
from nfs._render_cache import RenderCache, VersionBytes
from nfs._schema_sql import create_table_sql
from nfs._segments import DEFAULT_CACHE_BYTES, Segmenter, SegmentStore
from nfs._staging import Base, BytesBase, Staging, read_all
from nfs._writers import Bounded, Shadows, Writer, WriterKey
from nfs.memfs import IdAllocator
from nfs.nfs3 import (
    NFS_PROGRAM,
    Fattr3,
    Ftype3,
    NfsProc3,
    Nfsstat3,
    Nfstime3,
    Sattr3,
    Specdata3,
    StableHow,
)
from nfs.rpc import CallContext
from nfs.scratchfs import DEFAULT_SCRATCH_QUOTA_BYTES, ScratchFs
from nfs.vfs import (
    ACCESS3_DELETE,
    ACCESS3_EXTEND,
    ACCESS3_LOOKUP,
    ACCESS3_MODIFY,
    ACCESS3_READ,
    DirEntry,
    DirPage,
    FileId,
    FsStat,
    NfsError,
    VfsCapabilities,
    current_caller,
)
from posixlake import DatabaseOps
from posixlake.errors import (
    InvalidOperation,
    NotFound,
    PermissionDenied,
    PosixLakeError,
    SchemaError,
    SerializationError,
    VersionError,
)

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

ROOT_ID: Final = FileId(1)
DATA_DIR_ID: Final = FileId(2)
DATA_CSV_ID: Final = FileId(3)
SCHEMA_ID: Final = FileId(4)
VERSIONS_ID: Final = FileId(5)
_VERSION_BASE: Final = 1 << 40
"""/versions/<N> is ``_VERSION_BASE + 2N``, its data.csv ``_VERSION_BASE + 2N + 1``."""
_VERSION_END: Final = 1 << 61
SCRATCH_BASE: Final = 1 << 62
"""Scratch files and directories get ids from here up (fresh per boot)."""

_DATA_CSV: Final = "data.csv"
_SCHEMA: Final = "schema.sql"
_ROOT_STATIC: Final = {"schema.sql": SCHEMA_ID, "versions": VERSIONS_ID}
"""Entries of / that are not in the scratch tree ("data" is, as a directory with a fixed id)."""
_COOKIE_OFFSET: Final = 2
"""MemoryFs's readdir cookies are id + 2; the table's own entries follow the same rule."""
_FILE_MODE: Final = 0o644
_RW_MODE: Final = 0o666
_DIR_MODE: Final = 0o777
_RO_DIR_MODE: Final = 0o555
_DIR_SIZE: Final = 4096
_KEEP_SHADOWS: Final = 4
_RECENT_COMMITS: Final = 64
_NFS_PROGRAM: Final = NFS_PROGRAM
_DATA_PROCS: Final = frozenset({NfsProc3.NFSPROC3_WRITE, NfsProc3.NFSPROC3_COMMIT})
_STALE_SEARCH: Final = 16
"""How many versions back a write from a client with an unknown view is matched against."""
_MAX_CLIENTS: Final = 4096
"""Clients (and writers) whose per-client state is remembered (the oldest are forgotten)."""
DEFAULT_IDLE_SECONDS: Final = 5.0
"""A writer that never COMMITs is done after this long without a write."""
DEFAULT_ABANDON_SECONDS: Final = 3600.0
"""A staging that can never apply (mid-line, truncation alone) is given up after this long."""
_ALL_ACCESS: Final = (
    ACCESS3_READ | ACCESS3_LOOKUP | ACCESS3_MODIFY | ACCESS3_EXTEND | ACCESS3_DELETE
)


def nfs_error(err: PosixLakeError) -> NfsError:
    """Return the NFS status for a posixlake error (the only such map).

    PermissionDenied -> ACCES; NotFound / VersionError -> NOENT; bad content
    (SerializationError, which CsvFormatError is, SchemaError, InvalidOperation, which
    DuplicateKeyError is) -> INVAL; anything else -> IO.
    """
    if isinstance(err, PermissionDenied):
        status = Nfsstat3.NFS3ERR_ACCES
    elif isinstance(err, NotFound | VersionError):
        status = Nfsstat3.NFS3ERR_NOENT
    elif isinstance(err, SerializationError | SchemaError | InvalidOperation):
        status = Nfsstat3.NFS3ERR_INVAL
    else:
        status = Nfsstat3.NFS3ERR_IO
    return NfsError(status, str(err))


def _err(status: Nfsstat3, message: str = "") -> NfsError:
    return NfsError(status, message)


def _journal_error(err: OSError) -> NfsError:
    """The status for a journal that cannot be written (the write is not acknowledged)."""
    logger.error("data.csv: the write journal failed: %s", err)
    full = err.errno in (errno.ENOSPC, errno.EDQUOT)
    return _err(Nfsstat3.NFS3ERR_NOSPC if full else Nfsstat3.NFS3ERR_IO, str(err))


def _caller(ctx: CallContext | None) -> CallContext:
    if ctx is not None:
        return ctx
    return current_caller() or CallContext.local()


def default_state_dir(table_id: str) -> Path:
    """Return where the NFS server keeps its state for a table (the write journal).

    ``$POSIXLAKE_STATE_DIR``, else ``$XDG_STATE_HOME/posixlake``, else
    ``~/.local/state/posixlake``; then ``nfs/<hash of the table id>``. It must be on a
    local disk that survives a restart (fsync is what makes replies true).
    """
    root = os.environ.get("POSIXLAKE_STATE_DIR")
    if not root:
        xdg = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
        root = os.path.join(xdg, "posixlake")
    digest = hashlib.sha256(table_id.encode()).hexdigest()[:20]
    return Path(root) / "nfs" / digest


def _h8(*parts: bytes) -> bytes:
    return hashlib.sha256(b"\0".join(parts)).digest()[:8]


class TableFs:
    """The Vfs of one posixlake table (see the module docstring).

    Args:
        db: the table. Its authorizer decides what NFS callers may do: without "write"
            the share is read-only, without "read" READs are refused.
        clock: monotonic seconds, for idle detection and the version check (injected in
            tests: advance it instead of sleeping).
        wallclock: seconds since the epoch, for the times of staged and scratch files.
        idle_seconds: a writer that sends no COMMIT is done after this long without a
            write: its complete content (on a line boundary) is applied then.
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
        self._shown: Bounded[str, int] = Bounded(_MAX_CLIENTS)
        self._failures: Bounded[WriterKey, NfsError] = Bounded(_MAX_CLIENTS)
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

    # ------------------------------------------------------------ versions and content

    def _version(self) -> int:
        """The current table version: our own writes at once, others' within ``version_ttl``."""
        loaded = loaded_version(self._db)
        now = self._clock()
        if loaded != self._known_version:
            self._known_version = loaded
            self._checked_at = now
        elif now - self._checked_at >= self._ttl:
            try:
                self._known_version = self._db.version
            except PosixLakeError as err:
                raise nfs_error(err) from err
            self._checked_at = now
        if self._db.generation != self._generation:
            self._replaced()
        return self._known_version

    def _replaced(self) -> None:
        """The table was replaced under us (a restore onto its path): forget the old one.

        Renderings, shadows and what clients were shown belong to the old table's
        versions; stagings were based on them, so they are dropped and their writers get
        EIO at their next WRITE or COMMIT; the write verifier changes; data.csv handles
        of the old table go stale.
        """
        self._generation = self._db.generation
        logger.warning("the table was replaced (restored onto its path): serving the new one")
        self._cache.clear()
        self._shadows.clear()
        self._times.clear()
        self._schema_text = None
        self._shown = Bounded(_MAX_CLIENTS)
        self._scratch_base.clear()
        for w in list(self._writers.values()):
            self._drop(w)
            message = "the table was replaced while this write was staged; nothing was applied"
            self._failures.set(w.key, _err(Nfsstat3.NFS3ERR_IO, message))
        self._verifier = secrets.token_bytes(8)
        ident = table_identity(self._db)
        self._file_gen = _h8(b"file", ident, str(self._known_version).encode())

    def _rendering(self, version: int) -> VersionBytes:
        try:
            return self._cache.get(version)
        except PosixLakeError as err:
            raise nfs_error(err) from err

    def _presented(self, version: int) -> Base:
        """The bytes of data.csv at ``version`` as NFS showed them: the writer's own bytes
        while the table is exactly what that writer wrote (a shadow), else the rendering.
        """
        shadow = self._shadow(version)
        if shadow is not None:
            return BytesBase(shadow)
        return self._rendering(version)

    def _stamp_of(self, version: int) -> int:
        """The commit time of ``version`` in ns (with the version in its low digits)."""
        return self._commit_time(version).to_ns()

    def _shadow(self, version: int) -> memoryview | None:
        """The bytes a writer wrote that became ``version``, if kept (and still that version)."""
        if version > self._known_version:
            return None
        try:
            return self._shadows.get(version, self._stamp_of(version))
        except NfsError:
            return None

    def _seen_versions(self) -> Iterator[tuple[int, Base]]:
        """Recent versions whose bytes are at hand, newest first (no rendering)."""
        seen: dict[int, Base] = {r.version: r for r in self._cache.cached()}
        for v, _stamp in self._shadows.versions():
            shadow = self._shadow(v)
            if shadow is not None:
                seen[v] = BytesBase(shadow)
        for v in sorted(seen, reverse=True):
            yield v, seen[v]

    def _schema_bytes(self) -> bytes:
        version = self._version()
        if self._schema_text is None or self._schema_text[0] != version:
            text = create_table_sql(
                arrow_schema(self._db),
                primary_key=self._db.primary_key(),
                partition_by=partition_columns(self._db),
            )
            self._schema_text = (version, text.encode())
        return self._schema_text[1]

    def _commit_time(self, version: int) -> Nfstime3:
        """The commit time of ``version``, with the version in the nanoseconds (unique mtimes).

        A recent version's time comes from the newest few commits (cheap at any history
        length); an old one's from the whole history, once.
        """
        cached = self._times.get(version)
        if cached is not None:
            return cached
        try:
            behind = self._known_version - version
            if 0 <= behind < _RECENT_COMMITS:
                for info in self._db.history(behind + 1):
                    self._times.setdefault(info.version, _stamp(info.timestamp, info.version))
            if version not in self._times:
                self._times[version] = _stamp(self._db.commit_time(version), version)
        except PosixLakeError as err:
            raise nfs_error(err) from err
        return self._times[version]

    # ------------------------------------------------------------ staging and applying

    def write_verifier(self) -> bytes:
        """Return the WRITE/COMMIT verifier: new per boot, and whenever staged data is lost."""
        return self._verifier

    def _writable(self) -> None:
        if self._read_only:
            raise _err(Nfsstat3.NFS3ERR_ROFS, "the user may not write this table")

    def _base_for(self, peer: str, first: tuple[int, bytes] | None) -> tuple[int, Base]:
        """Return the version (and its bytes) a new staging of ``peer`` is based on.

        The base is what that client was shown last (a GETATTR, LOOKUP or READ of
        data.csv), else the current version. When the first write ``(offset, data)``
        reads better as made from another recent version — an append at its end, or a
        page-widened append that resends its last page(s) and adds more — that version is
        the base, so
        a client with a stale page appends to what it saw and deleted rows stay deleted.
        Only a staging that starts with a WRITE is matched so: one that starts with a
        truncation is a new file, diffed against what the client was shown.
        """
        current = self._version()
        shown = self._shown.get(peer)
        order = [current] if shown is None or shown == current else [shown, current]
        candidates = [(v, self._presented_or_none(v)) for v in order]
        if first is not None:
            # The versions the write may extend: what the client was shown, the current
            # one and those at hand; when that view is unknown (the server restarted) or
            # none fits (several processes share one client), the last few too. When
            # several fit (an emptied table's header prefixes every version; a deletion
            # of the last rows leaves a prefix), the longest is what the client resent:
            # the fewest bytes are new. A stale page-widened write covers a page, so each
            # look reads about a page of a version.
            fits: list[tuple[int, int, Base]] = []
            tried: set[int] = set()

            def look(v: int, content: Base | None) -> None:
                if v not in tried and content is not None and _fits(content, *first):
                    fits.append((content.size, v, content))
                tried.add(v)

            for v, content in [*candidates, *self._seen_versions()]:
                look(v, content)
            if shown is None or not fits:
                for v in range(current - 1, max(-1, current - _STALE_SEARCH - 1), -1):
                    if v not in tried:
                        look(v, self._presented_or_none(v))
            if fits:
                _size, v, content = max(fits, key=lambda f: (f[0], f[1]))
                return v, content
        for v, content in candidates:
            if content is not None:
                return v, content
        return current, self._presented(current)

    def _presented_or_none(self, version: int) -> Base | None:
        try:
            return self._presented(version)
        except NfsError:
            return None

    def _writer(self, ctx: CallContext, first: tuple[int, bytes] | None = None) -> Writer:
        """Return the caller's writer, starting one (see :meth:`_base_for`) if it has none."""
        key = WriterKey.of(ctx)
        w = self._writers.get(key)
        if w is None:
            version, base = self._base_for(key.peer, first)
            w = self._writers[key] = Writer(key, self._new_staging(base, version))
        return w

    def _new_staging(self, base: Base, version: int) -> Staging:
        """A staging over ``base``; past SPILL_AT its written bytes go to the state dir."""
        spill = self._state_dir / "staging"
        spill.mkdir(mode=0o700, exist_ok=True)
        return Staging(
            base,
            base_version=version,
            touched=self._clock(),
            mtime=self._wallclock(),
            spill_dir=str(spill),
        )

    def _truncate(self, size: int, ctx: CallContext) -> None:
        """Stage a truncation for the caller, durably (SETATTR replies are synchronous)."""
        w = self._writer(ctx)
        w.settled = False
        w.staging.truncate(size, touched=self._clock(), mtime=self._wallclock())
        self._record(w, size=size)
        self._make_durable(w)

    def _journal(self, w: Writer) -> JournalFile:
        if w.journal is None:
            header = JournalHeader(
                write_id=w.write_id,
                table_id=self._table_id,
                base_version=w.staging.base_version,
                base_size=w.staging.base.size,
                peer=w.key.peer,
                uid=w.key.uid,
                gid=w.key.gid,
            )
            try:
                w.journal = self._journals.create(header)
            except OSError as err:
                raise _journal_error(err) from err
        return w.journal

    def _record(self, w: Writer, *, write: tuple[int, bytes] | None = None, size: int = 0) -> None:
        """Append the operation to ``w``'s journal (buffered)."""
        journal = self._journal(w)
        try:
            if write is not None:
                journal.write(*write)
            else:
                journal.truncate(size)
        except OSError as err:
            raise _journal_error(err) from err

    def _make_durable(self, w: Writer) -> None:
        """fsync ``w``'s journal: from now on a reply may promise its bytes."""
        try:
            self._journal(w).sync()
        except OSError as err:
            raise _journal_error(err) from err

    def _raise_failure(self, key: WriterKey) -> None:
        """Raise (once) a failure found after this writer was told its write succeeded."""
        err = self._failures.pop(key)
        if err is not None:
            raise err

    def _drop(self, w: Writer) -> None:
        """Forget ``w``'s staging and delete its journal."""
        if self._writers.get(w.key) is w:
            del self._writers[w.key]
        if w.journal is not None:
            w.journal.discard()
            w.journal = None

    def _apply_writer(self, w: Writer) -> Applied:
        """Apply ``w``'s content as ONE commit; the staging is gone afterwards either way.

        Raises:
            NfsError: the write was refused (bad content: INVAL) or failed (IO).
        """
        st = w.staging
        try:
            extra = st.appended() if st.on_line_boundary() else None
            if extra is not None:  # the base plus whole lines: an INSERT, costs the lines
                lines = extra
                return self._commit(
                    lambda: apply_lines(
                        self._db, lines, header=header_of(st.base), write_id=w.write_id
                    )
                )
            if st.same_as_base():
                return Applied("unchanged", None)
            return self._apply(st, st.base_version, st.base, w.write_id)
        finally:
            self._drop(w)

    def _commit(self, fn: Callable[[], Applied]) -> Applied:
        """Run one apply; posixlake errors become NfsError (the one map: nfs_error)."""
        try:
            applied = fn()
        except PosixLakeError as err:
            logger.info("data.csv: write refused: %s", err)
            raise nfs_error(err) from err
        except pa.ArrowException as err:  # a bug below us: fail this write, keep serving
            logger.exception("data.csv: write failed")
            raise _err(Nfsstat3.NFS3ERR_IO, str(err)) from err
        finally:
            self._checked_at = -float("inf")  # re-read the version on the next call
        logger.debug("data.csv: %s", applied)
        return applied

    def _apply(
        self,
        content: Base,
        base_version: int,
        base: Base,
        write_id: str | None = None,
    ) -> Applied:
        """Commit ``content`` as data.csv, diffed against ``base_version``. Raises NfsError."""
        try:
            before = self._db.version
        except PosixLakeError as err:
            raise nfs_error(err) from err
        applied = self._commit(
            lambda: apply_content(
                self._db,
                content,
                base_version=base_version,
                base=base,
                write_id=write_id,
                keys=self._segmenter,
            )
        )
        # Keep showing the writer's bytes while the table is exactly what it wrote.
        if applied.kind != "empty" and content.size and base_version == before:
            produced = applied.version if applied.version is not None else before
            if applied.version is None or applied.version == before + 1:
                self._shadows.put(produced, self._stamp_of(produced), content)
        return applied

    @staticmethod
    def _is_append(st: Staging) -> bool:
        """Whether the staged content is its base plus whole new lines (an INSERT)."""
        return st.written and st.on_line_boundary() and st.appended() is not None

    def _idle_loop(self) -> None:
        while not self._stop.wait(max(0.05, min(self._idle, self._abandon) / 4)):
            self.poll()

    def poll(self) -> None:
        """Apply the stagings of writers that are done (idle), give up abandoned ones."""
        with self._lock:
            self._poll_locked()

    def _poll_locked(self, ctx: CallContext | None = None) -> None:
        """Apply idle and settled stagings; ``ctx``: the caller, whose settled rewrite is done
        once it sends anything but a WRITE or COMMIT (see :meth:`_settle`).
        """
        if ctx is not None:
            self._settle(ctx)
        now = self._clock()
        for w in list(self._writers.values()):
            idle = now - w.staging.touched
            if idle >= self._abandon:
                self._abandon_writer(w)
            elif idle >= self._idle and w.staging.written and w.staging.on_line_boundary():
                try:
                    self._apply_writer(w)
                except NfsError as err:
                    logger.warning("data.csv: idle write of %s refused: %s", w.key, err)
                    self._failures.set(w.key, err)

    def _settle(self, ctx: CallContext) -> None:
        """Apply the caller's settled rewrite: one its FILE_SYNC WRITE left complete.

        A client that writes a small file and closes it sends one FILE_SYNC WRITE and no
        COMMIT (the Linux client does when the content fits one WRITE); a ``-o sync``
        mount sends one per write(2). Such a rewrite is applied when its writer goes on to
        anything else (``cp x data.csv && cat data.csv``: the next open's GETATTR), or
        when it is idle. Calls made inside that writer's own WRITE or COMMIT (their
        attributes) do not count.
        """
        if ctx.prog == _NFS_PROGRAM and ctx.proc in _DATA_PROCS:
            return
        w = self._writers.get(WriterKey.of(ctx))
        if w is None or not w.settled:
            return
        try:
            self._apply_writer(w)
        except NfsError as err:
            logger.warning("data.csv: the rewrite of %s was refused: %s", w.key, err)
            self._failures.set(w.key, err)

    def _abandon_writer(self, w: Writer) -> None:
        what = "ends mid-line" if w.staging.written else "is a truncation alone"
        message = (
            f"data.csv: the staged write of {w.key} was abandoned after "
            f"{self._abandon:g} s without a write; its content {what} and was never applied"
        )
        logger.error("%s", message)
        self._drop(w)
        self._failures.set(w.key, _err(Nfsstat3.NFS3ERR_IO, message))
        # a client holding UNSTABLE writes of it must resend them at its next COMMIT
        self._verifier = secrets.token_bytes(8)

    def flush(self) -> None:
        """Make every staged write durable (fsync the journals); nothing is applied."""
        with self._lock:
            for w in self._writers.values():
                if w.journal is not None:
                    try:
                        w.journal.sync()
                    except OSError:
                        logger.exception("data.csv: journal of %s not synced", w.key)

    def close(self) -> None:
        """Stop the idle timer and close the journals (NfsServer calls this at shutdown).

        Staged writes are not applied: a writer that has not finished keeps its journal,
        which the next TableFs for the table recovers.
        """
        self._stop.set()
        if self._timer is not None and self._timer is not threading.current_thread():
            self._timer.join(5)
        self._segmenter.close()
        self._shadows.flush()
        with self._lock:
            for w in self._writers.values():
                if w.journal is not None:
                    try:
                        w.journal.close()
                    except OSError:
                        logger.exception("data.csv: journal of %s not closed", w.key)
            self._journals.release()
            self.unfinished_at_close = len(self._writers)
            if self._writers:
                logger.info(
                    "data.csv: %d unfinished staged write(s) kept for the next start",
                    len(self._writers),
                )
            self._writers.clear()
            self._scratch.close()

    def _recover(self) -> None:
        """Take over the journals an earlier server left (see :mod:`nfs._journal`)."""
        for rec in self._journals.recover(self._table_id):
            head = rec.header
            key = WriterKey(head.peer, head.uid, head.gid)
            try:
                done = committed_write(self._db, head.write_id, head.base_version)
            except PosixLakeError as err:
                raise nfs_error(err) from err
            if done is not None:
                logger.info("data.csv: staged write of %s was committed as v%d", key, done)
                rec.path.unlink(missing_ok=True)
                continue
            # a staging that starts with a truncation does not depend on its base's bytes
            # (a shadow lost at the restart may differ from the rendering), only on its
            # rows, which a 3-way apply needs
            independent = bool(rec.ops) and rec.ops[0] == JournalOp("T", 0)
            base = self._presented_or_none(head.base_version)
            if base is None or (base.size != head.base_size and not independent):
                why = f"its base version {head.base_version} cannot be shown as it was"
                self._journals.set_aside(rec, why)
                self._failures.set(key, _err(Nfsstat3.NFS3ERR_IO, f"staged write lost: {why}"))
                continue
            if key in self._writers:
                self._journals.set_aside(rec, "a newer staging of the same writer exists")
                continue
            st = self._new_staging(base, head.base_version)
            for op in rec.ops:
                if op.kind == "W":
                    st.write(op.number, op.data, touched=st.touched, mtime=st.mtime)
                else:
                    st.truncate(op.number, touched=st.touched, mtime=st.mtime)
            journal = self._journals.reopen(rec)
            self._writers[key] = Writer(key, st, head.write_id, journal)
            logger.warning(
                "data.csv: recovered the staged write of %s (%d bytes, base v%d)",
                key,
                st.size,
                head.base_version,
            )

    # ------------------------------------------------------------ ids

    @staticmethod
    def _version_of(fid: FileId) -> tuple[int, bool] | None:
        """(N, is_file) for /versions/<N> ids, else None."""
        if _VERSION_BASE <= fid < _VERSION_END:
            n, is_file = divmod(fid - _VERSION_BASE, 2)
            return n, bool(is_file)
        return None

    def _check_version(self, n: int) -> None:
        if n > self._version():
            raise _err(Nfsstat3.NFS3ERR_STALE, f"no version {n}")

    def _is_scratch(self, fid: FileId) -> bool:
        return fid >= SCRATCH_BASE and self._scratch.contains(fid)

    # ------------------------------------------------------------ Vfs: attributes

    def capabilities(self) -> VfsCapabilities:
        """Return the static properties (read-only for a user without "write")."""
        return VfsCapabilities(read_only=self._read_only, max_file_size=1 << 40)

    def root_dir(self) -> FileId:
        """Return the root's id (1)."""
        return ROOT_ID

    def generation(self, fid: FileId) -> bytes:
        """Return the handle generation of ``fid``.

        Directories and the immutable ``/versions/<N>/data.csv`` keep their handles for
        good; ``data.csv`` and ``schema.sql`` across a restart only while the table has
        not changed since the previous boot began; scratch entries per boot only.

        Raises:
            NfsError: NFS3ERR_STALE for an unknown id.
        """
        if fid in (ROOT_ID, DATA_DIR_ID, VERSIONS_ID):
            return self._table_gen
        if fid in (DATA_CSV_ID, SCHEMA_ID):
            return self._file_gen
        ver = self._version_of(fid)
        if ver is not None:
            with self._lock:
                self._check_version(ver[0])
            return self._table_gen
        if self._is_scratch(fid):
            return self._scratch.generation(fid)
        raise _err(Nfsstat3.NFS3ERR_STALE)

    def _dir_attrs(self, fid: FileId, mode: int, mtime: Nfstime3, nlink: int = 2) -> Fattr3:
        return Fattr3(
            type=Ftype3.NF3DIR,
            mode=mode,
            nlink=nlink,
            uid=0,
            gid=0,
            size=_DIR_SIZE,
            used=_DIR_SIZE,
            rdev=Specdata3(),
            fsid=self._fsid,
            fileid=fid,
            atime=mtime,
            mtime=mtime,
            ctime=mtime,
        )

    def _file_attrs(self, fid: FileId, mode: int, size: int, mtime: Nfstime3) -> Fattr3:
        return Fattr3(
            type=Ftype3.NF3REG,
            mode=mode,
            nlink=1,
            uid=0,
            gid=0,
            size=size,
            used=(size + 511) & ~511,
            rdev=Specdata3(),
            fsid=self._fsid,
            fileid=fid,
            atime=mtime,
            mtime=mtime,
            ctime=mtime,
        )

    def getattr(self, fid: FileId, ctx: CallContext | None = None) -> Fattr3:
        """Return the attributes; data.csv sizes are exact (its rendering is cached per version).

        data.csv is answered per caller (``ctx``, else the NFS call being served): a
        writer sees its staged content, anyone else the current version (which is then
        what that client was shown: see :meth:`_base_for`).
        """
        with self._lock:
            caller = _caller(ctx)
            self._poll_locked(caller)
            return self._getattr(fid, caller)

    def _mixed_dir_attrs(self, fid: FileId) -> Fattr3:
        inner = self._scratch.getattr(fid)
        table_time = self._commit_time(self._version())
        mtime = max(inner.mtime, table_time, key=Nfstime3.to_ns)
        ctime = max(inner.ctime, table_time, key=Nfstime3.to_ns)
        nlink = inner.nlink + (1 if fid == ROOT_ID else 0)  # + /versions
        return Fattr3(
            type=Ftype3.NF3DIR,
            mode=inner.mode,
            nlink=nlink,
            uid=inner.uid,
            gid=inner.gid,
            size=inner.size,
            used=inner.used,
            rdev=inner.rdev,
            fsid=self._fsid,
            fileid=fid,
            atime=mtime,
            mtime=mtime,
            ctime=ctime,
        )

    def _getattr(self, fid: FileId, ctx: CallContext) -> Fattr3:
        if fid in (ROOT_ID, DATA_DIR_ID):
            return self._mixed_dir_attrs(fid)
        if fid == DATA_CSV_ID:
            mode = _FILE_MODE if self._read_only else _RW_MODE
            w = self._writers.get(WriterKey.of(ctx))
            if w is not None:
                st = w.staging
                return self._file_attrs(fid, mode, st.size, Nfstime3.from_seconds(st.mtime))
            version = self._version()
            size = self._presented(version).size
            self._shown.set(ctx.peer or "local", version)
            return self._file_attrs(fid, mode, size, self._commit_time(version))
        if fid == SCHEMA_ID:
            version = self._version()
            return self._file_attrs(
                fid, 0o444, len(self._schema_bytes()), self._commit_time(version)
            )
        if fid == VERSIONS_ID:
            return self._dir_attrs(fid, _RO_DIR_MODE, self._commit_time(self._version()))
        ver = self._version_of(fid)
        if ver is not None:
            n, is_file = ver
            self._check_version(n)
            if is_file:
                size = self._rendering(n).size
                return self._file_attrs(fid, 0o444, size, self._commit_time(n))
            return self._dir_attrs(fid, _RO_DIR_MODE, self._commit_time(n))
        return self._scratch.getattr(fid)

    def setattr(self, fid: FileId, attrs: Sattr3, ctx: CallContext) -> Fattr3:
        """Set attributes: a size on data.csv stages a truncation, its mode, owner and times
        are accepted and ignored (``touch``, ``cp -p``); schema.sql and /versions refuse any
        change (NFS3ERR_ROFS); scratch entries behave as POSIX.
        """
        with self._lock:
            self._poll_locked(ctx)
            if fid == DATA_CSV_ID:
                if attrs.size is not None:
                    self._writable()
                    self._truncate(attrs.size, ctx)
                return self._getattr(fid, ctx)
            if fid in (SCHEMA_ID, VERSIONS_ID) or self._version_of(fid) is not None:
                if attrs != Sattr3():
                    raise _err(Nfsstat3.NFS3ERR_ROFS, "read-only")
                return self._getattr(fid, ctx)
            if fid in (ROOT_ID, DATA_DIR_ID):
                if attrs.size is not None:
                    raise _err(Nfsstat3.NFS3ERR_ISDIR)
                return self._getattr(fid, ctx)
            return self._scratch.setattr(fid, attrs, ctx)

    def access(self, fid: FileId, mask: int, ctx: CallContext) -> int:
        """Grant ACCESS3 bits: the table's files by the table's permissions, scratch by mode bits."""
        with self._lock:
            auth = self._db.authorizer
            read = ACCESS3_READ if auth.allows("read") else 0
            write = 0 if self._read_only else (ACCESS3_MODIFY | ACCESS3_EXTEND)
            if fid in (ROOT_ID, DATA_DIR_ID):
                self._scratch.getattr(fid)
                granted = ACCESS3_READ | ACCESS3_LOOKUP
                if not self._read_only:
                    granted |= ACCESS3_MODIFY | ACCESS3_EXTEND | ACCESS3_DELETE
                return mask & granted
            if fid == DATA_CSV_ID:
                return mask & (read | write)
            if fid == SCHEMA_ID:
                return mask & ACCESS3_READ
            if fid == VERSIONS_ID:
                return mask & (ACCESS3_READ | ACCESS3_LOOKUP)
            ver = self._version_of(fid)
            if ver is not None:
                self._check_version(ver[0])
                return mask & (read if ver[1] else (ACCESS3_READ | ACCESS3_LOOKUP))
            return self._scratch.access(fid, mask, ctx)

    def fsstat(self, fid: FileId) -> FsStat:
        """Return the scratch area's usage against its quota (the table's files not counted)."""
        return self._scratch.fsstat(ROOT_ID)

    # ------------------------------------------------------------ Vfs: names

    def lookup(self, dir_id: FileId, name: str, ctx: CallContext) -> FileId:
        """Return the id of ``name`` in ``dir_id``."""
        with self._lock:
            self._poll_locked(ctx)
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
            self._poll_locked(ctx)
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
            self._poll_locked(ctx)
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
                self._shown.set(ctx.peer or "local", version)
                shadow = self._shadow(version)
                if shadow is not None:
                    return _slice(shadow, offset, count)
                return self._rendering(version).read(offset, count)
            if fid == SCHEMA_ID:
                return _slice(memoryview(self._schema_bytes()), offset, count)
            if fid in (ROOT_ID, DATA_DIR_ID, VERSIONS_ID) or ver is not None:
                raise _err(Nfsstat3.NFS3ERR_ISDIR)
            return self._scratch.read(fid, offset, count, ctx)

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
            self._poll_locked(None if fid == DATA_CSV_ID else ctx)
            if fid == DATA_CSV_ID:
                self._writable()
                self._raise_failure(WriterKey.of(ctx))
                w = self._writer(ctx, (offset, data))
                w.staging.write(offset, data, touched=self._clock(), mtime=self._wallclock())
                self._record(w, write=(offset, data))
                w.settled = False
                if stable == StableHow.UNSTABLE:
                    return len(data), StableHow.UNSTABLE
                if self._is_append(w.staging):
                    self._apply_writer(w)  # whole new rows: an INSERT, nothing half-written
                else:
                    self._make_durable(w)  # a rewrite: applied at COMMIT, settled or idle
                    w.settled = w.staging.on_line_boundary()
                return len(data), StableHow.FILE_SYNC
            ver = self._version_of(fid)
            if fid in (ROOT_ID, DATA_DIR_ID, VERSIONS_ID) or (ver is not None and not ver[1]):
                raise _err(Nfsstat3.NFS3ERR_ISDIR)
            if fid == SCHEMA_ID or ver is not None:
                raise _err(Nfsstat3.NFS3ERR_ROFS, "read-only file")
            return self._scratch.write(fid, offset, data, stable, ctx)

    def commit(self, fid: FileId, offset: int, count: int, ctx: CallContext) -> None:
        """COMMIT: apply the caller's staged data.csv if it ends on a line boundary.

        Content that ends mid-line is made durable (journal fsync) and held: the writer
        may still be writing. A failure found since this writer's last reply is raised.
        """
        with self._lock:
            if fid == DATA_CSV_ID:
                key = WriterKey.of(ctx)
                self._raise_failure(key)
                w = self._writers.get(key)
                if w is None:
                    return
                if w.staging.on_line_boundary():
                    self._apply_writer(w)
                else:
                    self._make_durable(w)
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
            self._poll_locked(ctx)
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
            self._poll_locked(ctx)
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
            self._poll_locked(ctx)
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
            self._poll_locked(ctx)
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
        # the base: what this client read of data.csv last (sed -i reads it after creating
        # its temporary file), else the version when the file was created
        base_version = self._shown.get(ctx.peer or "local")
        if base_version is None:
            base_version = self._scratch_base.get(src, self._version())
        base = self._presented_or_none(base_version)
        if base is None:
            base_version = self._scratch_base.get(src, self._version())
            base = self._presented_or_none(base_version) or BytesBase(b"")
        self._apply(BytesBase(content), base_version, base, secrets.token_hex(12))
        self._scratch.pop_file(from_dir, from_name)
        self._scratch_base.pop(src, None)

    # ------------------------------------------------------------ in-process helpers

    @property
    def paths(self) -> PathOps:
        """Path-based helpers for tests and in-process callers (as root)."""
        return PathOps(self)


def _stamp(when: datetime, version: int) -> Nfstime3:
    """A commit time (milliseconds in Delta) with the version in the sub-millisecond digits."""
    ms = int(when.timestamp() * 1000)
    return Nfstime3.from_ns(ms * 1_000_000 + version % 1_000_000)


def _fits(content: Base, offset: int, data: bytes) -> bool:
    """Whether a write of ``data`` at ``offset`` reads as made from a view of ``content``:
    at its end (an append), or from a page at or before its end resending the rest of it
    and adding more (the Linux client widens a write to its cached page). Reads only the
    bytes the write covers.
    """
    size = content.size
    if offset >= size:
        return offset == size
    end = offset + len(data)
    return end > size and same_bytes(
        read_all(content, offset, size), memoryview(data)[: size - offset]
    )


def _slice(data: memoryview, offset: int, count: int) -> tuple[memoryview, bool]:
    size = len(data)
    if offset >= size:
        return data[0:0], True
    end = min(size, offset + count)
    return data[offset:end], end >= size


class PathOps:
    """Path-based calls on a :class:`TableFs` (``"/data/data.csv"``), as one caller.

    Errors are :class:`~nfs.vfs.NfsError`, as over NFS.
    """

    def __init__(self, fs: TableFs, ctx: CallContext | None = None) -> None:
        """Act on ``fs`` as ``ctx`` (root by default)."""
        self.fs = fs
        self.ctx = ctx if ctx is not None else CallContext.local()

    def resolve(self, path: str) -> FileId:
        """Return the id at ``path``."""
        fid = self.fs.root_dir()
        for part in path.split("/"):
            if part:
                fid = self.fs.lookup(fid, part, self.ctx)
        return fid

    def _parent(self, path: str) -> tuple[FileId, str]:
        head, _, name = path.rstrip("/").rpartition("/")
        return self.resolve(head or "/"), name

    def getattr(self, path: str) -> Fattr3:
        """Return the attributes at ``path`` (as this caller sees them)."""
        return self.fs.getattr(self.resolve(path), self.ctx)

    def readdir(self, path: str) -> list[str]:
        """Return the names in a directory, in listing order, without "." and ".."."""
        fid = self.resolve(path)
        names: list[str] = []
        after = 0
        while True:
            page = self.fs.readdir(fid, after=after, max_entries=64, ctx=self.ctx)
            names += [e.name for e in page.entries if e.name not in (".", "..")]
            if page.eof or not page.entries:
                return names
            after = page.entries[-1].cookie

    def read_file(self, path: str, *, offset: int = 0, count: int | None = None) -> bytes:
        """Return the bytes of a file (all of it, or ``count`` bytes at ``offset``)."""
        fid = self.resolve(path)
        out = bytearray()
        pos = offset
        while count is None or len(out) < count:
            want = 1 << 20 if count is None else min(1 << 20, count - len(out))
            data, eof = self.fs.read(fid, pos, want, self.ctx)
            out += data
            pos += len(data)
            if eof or not data:
                break
        return bytes(out)

    def write_file(
        self,
        path: str,
        data: bytes,
        *,
        offset: int = 0,
        stable: StableHow = StableHow.FILE_SYNC,
        truncate: bool = False,
        commit: bool = True,
    ) -> int:
        """Write ``data`` at ``offset`` (creating the file; ``truncate`` empties it first).

        ``commit`` then sends COMMIT, as a client's ``close()`` does: for data.csv that is
        when the new content is applied (its error is raised here).
        """
        try:
            fid = self.resolve(path)
        except NfsError as err:
            if err.status != Nfsstat3.NFS3ERR_NOENT:
                raise
            parent, name = self._parent(path)
            fid = self.fs.create(parent, name, Sattr3(mode=0o644), self.ctx, guarded=False)
        if truncate:
            self.fs.setattr(fid, Sattr3(size=0), self.ctx)
        count, _ = self.fs.write(fid, offset, data, stable, self.ctx)
        if commit:
            self.fs.commit(fid, 0, 0, self.ctx)
        return count

    def truncate(self, path: str, size: int = 0) -> None:
        """Set the size of a file."""
        self.fs.setattr(self.resolve(path), Sattr3(size=size), self.ctx)

    def commit(self, path: str) -> None:
        """COMMIT a file's unstable writes."""
        self.fs.commit(self.resolve(path), 0, 0, self.ctx)

    def remove_file(self, path: str) -> None:
        """Remove a file."""
        parent, name = self._parent(path)
        self.fs.remove(parent, name, self.ctx)

    def rename(self, src: str, dst: str) -> None:
        """Rename ``src`` to ``dst``."""
        a, an = self._parent(src)
        b, bn = self._parent(dst)
        self.fs.rename(a, an, b, bn, self.ctx)

    def mkdir(self, path: str, mode: int = 0o755) -> FileId:
        """Create a directory."""
        parent, name = self._parent(path)
        return self.fs.mkdir(parent, name, Sattr3(mode=mode), self.ctx)

    def rmdir(self, path: str) -> None:
        """Remove an empty directory."""
        parent, name = self._parent(path)
        self.fs.rmdir(parent, name, self.ctx)
