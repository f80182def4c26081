"""TableFs: a posixlake table as a file tree of CSV files, served over NFSv3.

The tree (see docs/design.md, "The NFS face")::

    /data/data.csv              the table at its current version (read / write)
    /schema.sql                 CREATE TABLE for the table (read-only)
    /changes.csv                the changes of each commit since the server started,
                                growing as commits land (read-only; ``tail -f``)
    /versions/<N>/data.csv      the table at version N (read-only time travel)
    /versions/<N>/changes.csv   the changes commit N made (read-only)
    /partitions/<col>=<value>/.../data.csv
                                a partitioned table's partitions (Hive-style), each the
                                rows of one partition at the current version (read /
                                write, that partition's rows only)

plus a scratch area with full POSIX semantics (a :class:`~nfs.table.scratchfs.ScratchFs` on disk
under the state directory) for every other file or directory a client creates in ``/`` or ``/data``: editors' and
``sed -i``'s temporary files, ``cp`` targets, user files.

Reads come from a per-version rendering cache (:mod:`nfs.table.render_cache`).

TableFs is a thin facade: each Vfs call takes the table lock (applying the stagings of
writers that are done first, where the call sees data.csv) and delegates to one
collaborator, all holding one :class:`~nfs.table.state.TableState`:

- :class:`~nfs.table.reads.Reads` (``reads.py``): the version shown, renderings, shadows,
  commit times, READ;
- :class:`~nfs.table.attrs.Attributes` (``attrs.py``): GETATTR, SETATTR, ACCESS, FSSTAT,
  handle generations;
- :class:`~nfs.table.names.Names` (``names.py``): LOOKUP, READDIR, CREATE, MKDIR, REMOVE,
  RMDIR, RENAME;
- :class:`~nfs.table.writes.WriteRules` (``writes.py``): WRITE and COMMIT of data.csv and
  when a staging applies;
- :class:`~nfs.table.stagings.Stagings` (``stagings.py``): each writer's staging and journal;
- :class:`~nfs.table.recovery.Recovery` (``recovery.py``): journals of an earlier server;
- :class:`~nfs.table.changes.Changes` (``changes.py``): ``changes.csv`` and
  ``versions/<N>/changes.csv``, from the change feed;
- :class:`~nfs.table.partfiles.PartitionFiles` (``partfiles.py``): ``/partitions``, a
  partitioned table's partitions as directories (:mod:`nfs.table.partitions`).

Writes to ``data.csv`` follow the rules in docs/nfs-writes.md (the versions shown and the
error map are :mod:`nfs.table.state`'s; path-based helpers in :mod:`nfs.table.pathops`):

- each writer (client address + AUTH_SYS uid/gid, :class:`~nfs.table.writers.WriterKey`) stages
  its own content (:mod:`nfs.table.staging`); nobody else's call discards it;
- a staging is based on what that client READ (:class:`~nfs.table.writers.ReadViews`: never what
  a GETATTR, LOOKUP or ACCESS showed; reads from two versions refuse the edit with EIO), or
  its own last edit, or the recent version its first write extends (a stale page-widened
  append);
- it is applied as ONE commit (:mod:`nfs.table.apply`): base + whole lines is an INSERT, other
  content a 3-way change from its base onto the current version (last commit wins per
  key; without a key a removed row must still be there);
- it is applied when the writer is done: NFSv3 has no close and a COMMIT also comes
  during writeback, so a COMMIT only makes it durable; it applies after ``idle_seconds``
  without a write from its writer, at a RENAME onto data.csv, or (``echo >>``) at a
  FILE_SYNC WRITE that makes it its base plus whole lines; never with a hole, never
  mid-line unless flushed, never as a truncation alone, never at shutdown; a resend of an
  edit an earlier boot committed changes nothing;
- every operation is journaled (:mod:`nfs.table.journal`) and fsynced before a reply promises
  it; the next TableFs for the table recovers the journals; failures found later go to
  the writer's next WRITE or COMMIT.

The only map from posixlake errors to NFS statuses is :func:`~nfs.table.state.nfs_error`.

File ids are fixed for the table's own entries (so handles survive restarts: see
:meth:`TableFs.generation`); scratch entries get ids from ``1 << 62`` up.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nfs.protocol.nfs3 import Fattr3, Nfsstat3, Sattr3, StableHow
from nfs.protocol.nfs3.types import FileSlice, Pieces
from nfs.protocol.rpc import CallContext
from nfs.protocol.vfs import DirPage, FileId, FsStat, NfsError, VfsCapabilities
from nfs.table.apply import Applied
from nfs.table.attrs import Attributes
from nfs.table.changes import Changes
from nfs.table.journal import JournalDir
from nfs.table.names import Names
from nfs.table.partfiles import PartitionFiles
from nfs.table.partitions import PARTITIONS_ID, is_partition_entry
from nfs.table.pathops import PathOps
from nfs.table.reads import Reads
from nfs.table.recovery import Recovery
from nfs.table.render_cache import VersionBytes
from nfs.table.scratchfs import DEFAULT_SCRATCH_QUOTA_BYTES
from nfs.table.segments import DEFAULT_CACHE_BYTES
from nfs.table.stagings import Stagings
from nfs.table.state import (
    CHANGES_ID,
    DATA_CSV,
    DATA_CSV_ID,
    DATA_DIR_ID,
    DEFAULT_ABANDON_SECONDS,
    DEFAULT_IDLE_SECONDS,
    ROOT_ID,
    ROOT_STATIC,
    SCHEMA_ID,
    SCRATCH_BASE,
    VERSIONS_ID,
    TableState,
    caller_of,
    default_state_dir,
    is_changes,
    nfs_error,
    version_of,
)
from nfs.table.writers import Writer, WriterKey
from nfs.table.writes import WriteRules
from posixlake.database import DatabaseOps

__all__ = [
    "CHANGES_ID",
    "DATA_CSV_ID",
    "DATA_DIR_ID",
    "DEFAULT_ABANDON_SECONDS",
    "DEFAULT_IDLE_SECONDS",
    "PARTITIONS_ID",
    "ROOT_ID",
    "SCHEMA_ID",
    "SCRATCH_BASE",
    "VERSIONS_ID",
    "PathOps",
    "TableFs",
    "TableFsStats",
    "default_state_dir",
    "is_changes",
    "is_partition_entry",
    "nfs_error",
    "version_of",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TableFsStats:
    """A TableFs's counters (`TableFs.stats`).

    Attributes:
        read_bytes: bytes READ returned since start (every file of the share).
        written_bytes: bytes WRITE accepted since start.
        staged_writers: writers with a staged, unapplied edit of data.csv now.
        staged_bytes: the size of their staged content.
        journaled_bytes: the size of their journals on disk.
        render_cache_hits: renderings of a version found in the cache.
        render_cache_misses: renderings that had to be built (from cached segments).
        changes_csv_bytes: the size of /changes.csv (0 until first looked at).
    """

    read_bytes: int
    written_bytes: int
    staged_writers: int
    staged_bytes: int
    journaled_bytes: int
    render_cache_hits: int
    render_cache_misses: int
    changes_csv_bytes: int


class TableFs:
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
        segment_cache: the directory of cached CSV segments (see :mod:`nfs.table.segments`;
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
        self._s = TableState(
            db,
            clock=clock,
            wallclock=wallclock,
            idle_seconds=idle_seconds,
            abandon_seconds=abandon_seconds,
            state_dir=state_dir,
            version_ttl=version_ttl,
            keep_versions=keep_versions,
            read_only=read_only,
            segment_cache=segment_cache,
            segment_cache_bytes=segment_cache_bytes,
            scratch_quota=scratch_quota,
        )
        self._reads = Reads(self._s)
        self._parts = PartitionFiles(self._s, self._reads)
        self._stagings = Stagings(self._s, self._reads)
        self._rules = WriteRules(self._s, self._reads, self._stagings, self._parts)
        self._changes = Changes(self._s, self._reads)
        self._attrs = Attributes(self._s, self._reads, self._rules, self._changes, self._parts)
        self._names = Names(self._s, self._reads, self._rules, self._parts)
        with self._s.lock:
            Recovery(self._s, self._rules.face, self._stagings).recover()
        if idle_timer:
            self._s.timer = threading.Thread(
                target=self._idle_loop, name="posixlake-nfs-idle", daemon=True
            )
            self._s.timer.start()

    # ------------------------------------------------------------ Vfs: attributes

    def capabilities(self) -> VfsCapabilities:
        """Return the static properties (read-only for a user without "write")."""
        return self._attrs.capabilities()

    def root_dir(self) -> FileId:
        """Return the root's id (1)."""
        return self._attrs.root_dir()

    def generation(self, fid: FileId) -> bytes:
        """Return the handle generation of ``fid`` (see `Attributes.generation`)."""
        return self._attrs.generation(fid)

    def getattr(self, fid: FileId, ctx: CallContext | None = None) -> Fattr3:
        """Return the attributes; data.csv's per caller (``ctx``, else the call being
        served): a writer sees its staged content, anyone else the current version."""
        with self._s.lock:
            caller = caller_of(ctx)
            self._rules.poll_locked()
            return self._attrs.of(fid, caller)

    def setattr(self, fid: FileId, attrs: Sattr3, ctx: CallContext) -> Fattr3:
        """Set attributes (a size on data.csv stages a truncation)."""
        with self._s.lock:
            self._rules.poll_locked()
            return self._attrs.setattr(fid, attrs, ctx)

    def access(self, fid: FileId, mask: int, ctx: CallContext) -> int:
        """Grant ACCESS3 bits: the table's files by its permissions, scratch by mode bits."""
        with self._s.lock:
            return self._attrs.access(fid, mask, ctx)

    def fsstat(self, fid: FileId) -> FsStat:
        """Return the scratch area's usage against its quota."""
        return self._attrs.fsstat(fid)

    # ------------------------------------------------------------ Vfs: without waiting

    # For the transport's event loop (nfs.protocol.vfs.NowaitVfs): the same answers as
    # the calls above, or None when they would wait (the table lock held elsewhere, a
    # writer's staging to poll, the version due for a check, the table handle busy, a
    # rendering or commit time not at hand) or concern another file.

    def generation_nowait(self, fid: FileId) -> bytes | None:
        """`generation` of the table's directories, data.csv and schema.sql, or None."""
        return self._attrs.generation_nowait(fid)

    def getattr_nowait(self, fid: FileId, ctx: CallContext) -> Fattr3 | None:
        """`getattr` of /, /data, /versions and data.csv if it needs no waiting, or None."""
        lock = self._s.lock
        if not lock.acquire(blocking=False):
            return None
        try:
            version = self._reads.settled_locked()
            return None if version is None else self._attrs.of_nowait(fid, version)
        finally:
            lock.release()

    def lookup_nowait(self, dir_id: FileId, name: str, ctx: CallContext) -> FileId | None:
        """`lookup` of data.csv in /data, and of data, schema.sql, versions and
        changes.csv in /; None for other names."""
        if dir_id == DATA_DIR_ID:
            return DATA_CSV_ID if name == DATA_CSV else None
        if dir_id != ROOT_ID:
            return None
        if name in ROOT_STATIC:
            return ROOT_STATIC[name]
        if name != "data" or not self._s.lock.acquire(blocking=False):
            return None
        try:  # a scratch entry: the caller needs search permission on /
            fid = self._s.scratch.lookup(ROOT_ID, name, ctx)
        except NfsError:
            return None
        finally:
            self._s.lock.release()
        return fid if fid == DATA_DIR_ID else None

    def commit_nowait(self, fid: FileId, offset: int, count: int, ctx: CallContext) -> bool:
        """`commit` of data.csv when it has nothing to do (see
        `WriteRules.commit_idle_locked`): True; False when it would do or wait for anything."""
        lock = self._s.lock
        if not lock.acquire(blocking=False):
            return False
        try:
            return self._rules.commit_idle_locked(fid, ctx)
        finally:
            lock.release()

    def access_nowait(self, fid: FileId, mask: int, ctx: CallContext) -> int | None:
        """`access` of the table's directories, data.csv and schema.sql, or None."""
        lock = self._s.lock
        if not lock.acquire(blocking=False):
            return None
        try:
            return self._attrs.access_nowait(fid, mask, ctx)
        finally:
            lock.release()

    # ------------------------------------------------------------ Vfs: names

    def lookup(self, dir_id: FileId, name: str, ctx: CallContext) -> FileId:
        """Return the id of ``name`` in ``dir_id``."""
        with self._s.lock:
            self._rules.poll_locked()
            return self._names.lookup(dir_id, name, ctx)

    def readdir(self, dir_id: FileId, *, after: int, max_entries: int, ctx: CallContext) -> DirPage:
        """List a directory: the table's entries merged, in cookie order, with scratch ones."""
        with self._s.lock:
            self._rules.poll_locked()
            return self._names.readdir(dir_id, after=after, max_entries=max_entries, ctx=ctx)

    def create(
        self, dir_id: FileId, name: str, attrs: Sattr3, ctx: CallContext, *, guarded: bool
    ) -> FileId:
        """Create a scratch file; UNCHECKED on data.csv opens it (a size stages a truncation)."""
        with self._s.lock:
            self._rules.poll_locked()
            return self._names.create(dir_id, name, attrs, ctx, guarded=guarded)

    def create_exclusive(
        self, dir_id: FileId, name: str, verifier: bytes, ctx: CallContext
    ) -> FileId:
        """Create a scratch file exclusively (mkstemp, cp): it remembers the table version."""
        with self._s.lock:
            self._rules.poll_locked()
            return self._names.create_exclusive(dir_id, name, verifier, ctx)

    def mkdir(self, dir_id: FileId, name: str, attrs: Sattr3, ctx: CallContext) -> FileId:
        """Create a scratch directory."""
        with self._s.lock:
            return self._names.mkdir(dir_id, name, attrs, ctx)

    def remove(self, dir_id: FileId, name: str, ctx: CallContext) -> None:
        """Remove a scratch file; removing data.csv deletes every row (one commit)."""
        with self._s.lock:
            self._rules.poll_locked()
            self._names.remove(dir_id, name, ctx)

    def rmdir(self, dir_id: FileId, name: str, ctx: CallContext) -> None:
        """Remove an empty scratch directory (the table's own directories stay)."""
        with self._s.lock:
            self._names.rmdir(dir_id, name, ctx)

    def rename(
        self,
        from_dir: FileId,
        from_name: str,
        to_dir: FileId,
        to_name: str,
        ctx: CallContext,
    ) -> None:
        """Rename as POSIX does; a file renamed onto data.csv overwrites the table."""
        with self._s.lock:
            self._rules.poll_locked()
            self._names.rename(from_dir, from_name, to_dir, to_name, ctx)

    # ------------------------------------------------------------ Vfs: data

    def read(
        self, fid: FileId, offset: int, count: int, ctx: CallContext
    ) -> tuple[bytes | memoryview, bool]:
        """Read; the table's files are served from their cached bytes without copying."""
        with self._s.lock:
            self._rules.poll_locked()
            if is_changes(fid):
                got: tuple[bytes | memoryview, bool] = self._changes.read(fid, offset, count, ctx)
            elif is_partition_entry(fid):
                got = self._parts.read(fid, offset, count, ctx)
            else:
                got = self._reads.read(fid, offset, count, ctx)
            self._s.read_bytes += len(got[0])
            return got

    def read_nowait(
        self, fid: FileId, offset: int, count: int, ctx: CallContext
    ) -> tuple[bytes | memoryview | Pieces | FileSlice, bool, Fattr3] | None:
        """Read data.csv if that needs no waiting; else None (see `Reads.read_nowait`)."""
        got = self._reads.read_nowait(fid, offset, count, ctx, self._attrs.data_csv_attrs)
        if got is not None:
            self._s.read_bytes += len(got[0])  # racy by at most a concurrent count: metrics
        return got

    def write(
        self, fid: FileId, offset: int, data: bytes, stable: StableHow, ctx: CallContext
    ) -> tuple[int, StableHow]:
        """Write: data.csv writes are staged for the caller (see `WriteRules.write`)."""
        with self._s.lock:
            self._rules.poll_locked()
            if is_partition_entry(fid) and not self._parts.node(fid).is_file:
                raise NfsError(Nfsstat3.NFS3ERR_ISDIR)
            done = self._rules.write(fid, offset, data, stable, ctx)
            self._s.written_bytes += done[0]
            return done

    def commit(self, fid: FileId, offset: int, count: int, ctx: CallContext) -> None:
        """COMMIT: make the caller's staged data.csv durable; apply nothing."""
        with self._s.lock:
            if is_partition_entry(fid) and not self._parts.node(fid).is_file:
                return  # a directory: nothing to make durable (STALE if gone)
            self._rules.commit(fid, offset, count, ctx)

    def write_verifier(self) -> bytes:
        """Return the WRITE/COMMIT verifier: new per boot, and whenever staged data is lost."""
        return self._rules.write_verifier()

    # ------------------------------------------------------------ edits and lifecycle

    def finish(self, fid: FileId, ctx: CallContext) -> Applied | None:
        """Apply the caller's staged edit of ``fid`` now (see `WriteRules.finish`); an
        NFSv4 CLOSE (``nfs.protocol.vfs.EditBounds``)."""
        return self._rules.finish(fid, ctx)

    def discard(self, fid: FileId, ctx: CallContext) -> bool:
        """Drop the caller's staged edit of ``fid`` unapplied (see `WriteRules.discard`):
        an NFSv4 client whose lease expired."""
        return self._rules.discard(fid, ctx)

    def client_mounted(self, ctx: CallContext) -> None:
        """A client mounted (an NFSv3 NULL on a connection, `nfs.protocol.vfs.MountAware`):
        what an earlier process at its address left is settled (see
        `WriteRules.client_mounted`)."""
        try:
            self._rules.client_mounted(ctx)
        except Exception:  # a NULL never fails: the state stays as it was
            logger.exception("data.csv: settling what %s left failed", ctx.peer)

    def client_mounted_nowait(self, ctx: CallContext) -> bool:
        """`client_mounted` if that needs no waiting (see
        `WriteRules.client_mounted_nowait`): True when done, False with no effect."""
        return self._rules.client_mounted_nowait(ctx)

    @property
    def state_dir(self) -> Path:
        """Where the journal and the rest of the server's state live (the NFSv4 service
        keeps its clients there too, for their reclaims after a restart)."""
        return self._s.state_dir

    def poll(self) -> None:
        """Apply the stagings of writers that are done (idle), give up abandoned ones."""
        self._rules.poll()

    def flush(self) -> None:
        """Make every staged write durable (fsync the journals); nothing is applied."""
        self._stagings.flush()

    def _idle_loop(self) -> None:
        s = self._s
        while not s.stop.wait(max(0.05, min(s.idle, s.abandon) / 4)):
            self.poll()

    def close(self) -> None:
        """Stop the idle timer and close the journals (NfsServer calls this at shutdown).

        Staged writes are not applied: a writer that has not finished keeps its journal,
        which the next TableFs for the table recovers.
        """
        s = self._s
        s.stop.set()
        if s.timer is not None and s.timer is not threading.current_thread():
            s.timer.join(5)
        s.segmenter.close()
        s.shadows.flush()
        with s.lock:
            for w in s.writers.values():
                if w.journal is not None:
                    try:
                        w.journal.close()
                    except OSError:
                        logger.exception("data.csv: journal of %s not closed", w.key)
            s.journals.release()
            s.unfinished_at_close = len(s.writers)
            if s.writers:
                logger.info(
                    "data.csv: %d unfinished staged write(s) kept for the next start",
                    len(s.writers),
                )
            s.writers.clear()
            s.scratch.close()
            self._changes.close()

    def stats(self) -> TableFsStats:
        """Return the share's counters (for metrics; cheap: no IO but a stat per journal)."""
        s = self._s
        with s.lock:
            writers = list(s.writers.values())
            staged = sum(w.staging.size for w in writers)
            journaled = 0
            for w in writers:
                if w.journal is not None:
                    with contextlib.suppress(OSError):  # discarded meanwhile: none
                        journaled += w.journal.path.stat().st_size
            return TableFsStats(
                read_bytes=s.read_bytes,
                written_bytes=s.written_bytes,
                staged_writers=len(writers),
                staged_bytes=staged,
                journaled_bytes=journaled,
                render_cache_hits=s.cache.hits,
                render_cache_misses=s.cache.misses,
                changes_csv_bytes=s.changes.size if s.changes is not None else 0,
            )

    @property
    def unfinished_at_close(self) -> int:
        """Staged writes :meth:`close` kept in the journal for the next start."""
        return self._s.unfinished_at_close

    # ------------------------------------------------------------ in-process helpers

    @property
    def paths(self) -> PathOps:
        """Path-based helpers for tests and in-process callers (as root)."""
        return PathOps(self)

    # the tests' window on the state (they drive the clock, hold the lock, look at the
    # journals and writers, read a version's rendering)

    @property
    def _db(self) -> DatabaseOps:
        return self._s.db

    @property
    def _clock(self) -> Callable[[], float]:
        return self._s.clock

    @property
    def _lock(self) -> threading.RLock:
        return self._s.lock

    @property
    def _journals(self) -> JournalDir:
        return self._s.journals

    @property
    def _writers(self) -> dict[WriterKey, Writer]:
        return self._s.writers

    def _version(self) -> int:
        return self._reads.version()

    def _rendering(self, version: int) -> VersionBytes:
        return self._reads.rendering(version)
