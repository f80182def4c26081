"""The state a :class:`~nfs.table.tablefs.TableFs` keeps, and the versions it shows.

Split out of :mod:`nfs.table.tablefs` (which documents the tree and owns the rules): the
table's fixed file ids and modes, the one map from posixlake errors to NFS statuses
(:func:`nfs_error`), where the server keeps its state (:func:`default_state_dir`), and
:class:`TableState`: the attributes of a TableFs and what it shows of each version (the
current version, renderings, the writers' own bytes, commit times). See docs/design.md.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import secrets
import threading
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Final

from nfs.protocol.nfs3 import (
    Nfsstat3,
    Nfstime3,
)
from nfs.protocol.rpc import CallContext
from nfs.protocol.vfs import (
    ACCESS3_DELETE,
    ACCESS3_EXTEND,
    ACCESS3_LOOKUP,
    ACCESS3_MODIFY,
    ACCESS3_READ,
    FileId,
    NfsError,
    current_caller,
)
from nfs.table.apply import (
    arrow_schema,
    loaded_version,
    partition_columns,
    same_bytes,
    table_identity,
)
from nfs.table.journal import JournalDir
from nfs.table.render_cache import RenderCache, VersionBytes
from nfs.table.schema_sql import create_table_sql
from nfs.table.scratchfs import ScratchFs
from nfs.table.segkeys import SegmentKeys
from nfs.table.segments import SegmentedRendering, Segmenter
from nfs.table.staging import Base, BytesBase, read_all
from nfs.table.writers import Bounded, ClientPages, ReadViews, Shadows, Writer, WriterKey
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
    "TableState",
    "default_state_dir",
    "nfs_error",
]

logger = logging.getLogger("nfs.table.tablefs")

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
_STALE_SEARCH: Final = 16
"""How many versions back a write from a client with an unknown view is matched against."""
_MAX_CLIENTS: Final = 4096
"""Clients (and writers) whose per-client state is remembered (the oldest are forgotten)."""
_MAX_PAGES: Final = 64
"""Clients whose page after their last append is remembered (see ``ClientPages``)."""
_PAGE_BYTES: Final = 1 << 20
"""An append that wrote more than this is not remembered as its client's page."""
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


def _storage_error(err: OSError) -> NfsError:
    """The status for the server's own storage failing: NOSPC when full, else IO."""
    full = err.errno in (errno.ENOSPC, errno.EDQUOT)
    return _err(Nfsstat3.NFS3ERR_NOSPC if full else Nfsstat3.NFS3ERR_IO, str(err))


def _journal_error(err: OSError) -> NfsError:
    """The status for a journal that cannot be written (the write is not acknowledged)."""
    logger.error("data.csv: the write journal failed: %s", err)
    return _storage_error(err)


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


class TableState:
    """The attributes of a TableFs (set by its constructor) and the versions it shows."""

    _db: DatabaseOps
    _clock: Callable[[], float]
    _wallclock: Callable[[], float]
    _idle: float
    _abandon: float
    _ttl: float
    _lock: threading.RLock
    _segmenter: Segmenter
    _keys: SegmentKeys
    _cache: RenderCache[SegmentedRendering]
    _read_only: bool
    _known_version: int
    _generation: int
    _checked_at: float
    _fsid: int
    _table_gen: bytes
    _file_gen: bytes
    _boot: bytes
    _table_id: str
    _state_dir: Path
    _scratch: ScratchFs
    _scratch_base: dict[FileId, int]
    _journals: JournalDir
    _shadows: Shadows
    _writers: dict[WriterKey, Writer]
    _views: ReadViews
    _own: Bounded[str, tuple[int, Base]]
    _began: Bounded[WriterKey, bool]
    _edits_before: dict[str, list[tuple[int, int, int, int]]] | None
    _failures: Bounded[WriterKey, NfsError]
    _last_start: int
    _pages: ClientPages
    _verifier: bytes
    unfinished_at_close: int
    _schema_text: tuple[int, bytes] | None
    _times: dict[int, Nfstime3]
    _stop: threading.Event
    _timer: threading.Thread | None

    # ------------------------------------------------------------ versions and content

    def _version(self) -> int:
        """The current table version: our own writes at once, others' within ``version_ttl``
        of the last look at the log (our own writes do not count as one: a commit another
        process made before them shows as soon as the ttl since that look is over)."""
        loaded = loaded_version(self._db)
        now = self._clock()
        if loaded != self._known_version:
            self._known_version = loaded
        if now - self._checked_at >= self._ttl:
            try:
                self._known_version = self._db.version
            except PosixLakeError as err:
                raise nfs_error(err) from err
            self._checked_at = now
        if self._db.generation != self._generation:
            self._replaced()
        return self._known_version

    def _drop(self, w: Writer) -> None:
        """Forget ``w``'s staging and its journal (:class:`~nfs.table.writes.WriteRules`)."""
        raise NotImplementedError

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
        self._pages.clear()
        self._times.clear()
        self._schema_text = None
        self._views = ReadViews(_MAX_CLIENTS)
        self._own = Bounded(_MAX_PAGES)
        self._edits_before = None
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
