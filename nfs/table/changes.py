"""The change files of a TableFs: ``/changes.csv`` (growing) and ``/versions/<N>/changes.csv``.

Owns: which commits ``/changes.csv`` shows, catching it up with the version shown, its
size, times and handle generation, and the one-commit files under ``/versions``. Both are
read-only (WRITE, SETATTR, REMOVE and RENAME are refused by the write rules, attributes and
names as for ``schema.sql``). The rows come from the change feed (``db.subscribe``,
:mod:`posixlake.feed`), rendered by :mod:`nfs.table.changelog` in the CSV contract of
``data.csv``.

**What /changes.csv covers.** The commits from the version the server showed when it
started (that commit's changes first, as ``posixlake tail`` starts with the latest
commit's) to the version it shows now, in order, each once; it grows as commits land
(any writer's: the API, NFS, Spark, delta-rs, other processes), within ``version_ttl``
of the commit as data.csv does. Bytes once shown never change; each commit that lands
raises mtime/ctime (the commit's time, and never less than one nanosecond past the last)
and, if it changed rows, the size. It is rendered at the first look and kept in an
anonymous file in the state directory; a restarted server starts a new one (a handle of
the old one stays valid only if it would show the same bytes: same table, same start).

A new log, with a new handle generation (so handles of the old one are ``NFS3ERR_STALE``
and ``tail -F`` reopens the name), starts at a commit whose columns differ from the
header's (schema evolution) and when the table is replaced under the server (a restore
onto its path). A commit whose changes can no longer be read (VACUUM removed its files
before anyone looked) ends the log: every later call on it fails with ``NFS3ERR_IO`` and
the error is logged, naming the oldest version still available; changes are never
skipped silently. The same if its file cannot be written (the state directory full:
NFS3ERR_NOSPC, else NFS3ERR_IO). A server restart starts a log from the then-current version.
"""

from __future__ import annotations

import contextlib
import logging

from nfs.protocol.nfs3 import Nfsstat3, Nfstime3
from nfs.protocol.rpc import CallContext
from nfs.protocol.vfs import FileId, NfsError
from nfs.table.apply import arrow_schema, table_identity
from nfs.table.changelog import ChangeLog, LogEnded, render_batch
from nfs.table.reads import Reads
from nfs.table.state import (
    CHANGES_ID,
    TableState,
    nfs_error,
    short_hash,
    status_error,
    storage_error,
    version_changes_of,
)
from posixlake.errors import InvalidOperation, PosixLakeError
from posixlake.feed import ChangesExpired

__all__ = ["Changes"]

logger = logging.getLogger("nfs.table.tablefs")


class Changes:
    """The bytes and attributes of the table's change files (see the module docstring)."""

    def __init__(self, state: TableState, reads: Reads) -> None:
        self._s = state
        self._reads = reads

    # ------------------------------------------------------------ /changes.csv

    def log(self) -> ChangeLog:
        """Return /changes.csv's log, caught up with the version shown (opened at first).

        Raises:
            NfsError: IO once a commit's changes expired; ACCES without "read"; the
                status of another posixlake error (:func:`~nfs.table.state.nfs_error`).
        """
        s = self._s
        if s.changes_error is not None:
            raise s.changes_error
        shown = self._reads.version()  # notices a replaced table first
        if s.changes_of != s.generation:
            self._restart(shown, "the table was replaced (restored onto its path)")
        for _ in range(3):  # a restart for new columns or a replaced table, then again
            if s.changes is None:
                s.changes = self._open(s.changes_start)
            log = s.changes
            try:
                log.catch_up(shown)
            except LogEnded as err:
                self._restart(err.version, f"the columns changed: {err}")
                continue
            except ChangesExpired as err:
                logger.error("changes.csv ends: %s", err)
                s.changes_error = status_error(
                    Nfsstat3.NFS3ERR_IO, f"changes.csv cannot grow: {err}"
                )
                raise s.changes_error from err
            except OSError as err:  # the state directory is full or failing
                logger.error("changes.csv ends: its file cannot be written: %s", err)
                s.changes_error = storage_error(err)
                raise s.changes_error from err
            except InvalidOperation as err:  # the feed found the table replaced
                self._restart(self._reads.version(), str(err))
                continue
            except PosixLakeError as err:
                self._stamp(log)
                raise nfs_error(err) from err
            self._stamp(log)
            return log
        raise status_error(Nfsstat3.NFS3ERR_IO, "changes.csv: the table keeps changing under it")

    def _open(self, start: int) -> ChangeLog:
        s = self._s
        try:
            feed = s.db.subscribe(from_version=start)
        except PosixLakeError as err:
            raise nfs_error(err) from err
        try:
            return ChangeLog(feed, arrow_schema(s.db).names, s.state_dir / "changes")
        except OSError as err:
            feed.close()
            raise storage_error(err) from err
        except BaseException:
            feed.close()
            raise

    def _restart(self, start: int, why: str) -> None:
        """Start a new log at ``start`` (old handles go stale)."""
        s = self._s
        logger.warning("changes.csv starts again at version %d: %s", start, why)
        if s.changes is not None:
            s.changes.close()
        s.changes = None
        s.changes_start = start
        s.changes_of = s.generation
        s.changes_mtime = None
        s.changes_gen = short_hash(b"changes", table_identity(s.db), str(start).encode())

    def _stamp(self, log: ChangeLog) -> None:
        """Raise mtime to the last commit appended: its time, never backwards, never equal."""
        s = self._s
        last = max(log.last_version, log.start)
        if s.changes_mtime is not None and s.changes_mtime[0] >= last:
            return
        when = self._reads.commit_time(last).to_ns()
        if s.changes_mtime is not None:
            when = max(when, s.changes_mtime[1].to_ns() + 1)
        s.changes_mtime = (last, Nfstime3.from_ns(when))

    def generation(self) -> bytes:
        """/changes.csv's handle generation, after catching up (a new log, a new one).

        A log that cannot catch up (no "read", an expired commit) keeps its generation:
        the call on the handle gets that error itself.
        """
        with contextlib.suppress(NfsError):
            self.log()
        return self._s.changes_gen

    def close(self) -> None:
        """Close the log (TableFs.close)."""
        if self._s.changes is not None:
            self._s.changes.close()
            self._s.changes = None

    # ------------------------------------------------------------ both kinds

    def size_and_time(self, fid: FileId) -> tuple[int, Nfstime3]:
        """Return the size and mtime of a change file (``fid``: see `is_changes`)."""
        if fid == CHANGES_ID:
            log = self.log()
            assert self._s.changes_mtime is not None
            return log.size, self._s.changes_mtime[1]
        n = self._version(fid)
        return len(self.of_version(n)), self._reads.commit_time(n)

    def read(self, fid: FileId, offset: int, count: int, ctx: CallContext) -> tuple[bytes, bool]:
        """READ a change file (the table's "read" permission is needed)."""
        if not self._s.db.authorizer.allows("read"):
            raise status_error(Nfsstat3.NFS3ERR_ACCES, "the user may not read this table")
        if fid == CHANGES_ID:
            return self.log().read(offset, count)
        data = self.of_version(self._version(fid))
        if offset >= len(data):
            return b"", True
        end = min(len(data), offset + count)
        return data[offset:end], end >= len(data)

    # ------------------------------------------------------------ /versions/<N>/changes.csv

    def _version(self, fid: FileId) -> int:
        n = version_changes_of(fid)
        if n is None:
            raise status_error(Nfsstat3.NFS3ERR_STALE)
        self._reads.check_version(n)
        return n

    def of_version(self, n: int) -> bytes:
        """The changes of commit ``n`` alone: a header, then its rows (kept for the last few).

        Raises:
            NfsError: NOENT if its changes can no longer be read (VACUUM), ACCES without
                "read", else the status of the posixlake error.
        """
        key = (self._s.generation, n)
        cached = self._s.version_changes.get(key)
        if cached is not None:
            return cached
        try:
            with self._s.db.subscribe(from_version=n) as feed:
                batch = feed.step()
        except PosixLakeError as err:
            raise nfs_error(err) from err
        if batch is None:
            raise status_error(Nfsstat3.NFS3ERR_STALE, f"no version {n}")
        data = render_batch(batch, header=True)
        self._s.version_changes.set(key, data)
        return data
