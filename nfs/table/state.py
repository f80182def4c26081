"""The one state object of a :class:`~nfs.table.tablefs.TableFs`, and the table's fixed names.

:class:`TableState` declares and sets every attribute a TableFs has (the table handle,
clocks, the rendering cache, the scratch area, the journals, the writers and what each
client was shown); the collaborators hold it and change the parts their module
docstrings name. Also here: the table's fixed file ids and modes, the one map from
posixlake errors to NFS statuses (:func:`nfs_error`) and where the server keeps its state
(:func:`default_state_dir`). See docs/design.md.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import secrets
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Final

from nfs.protocol.memfs import IdAllocator
from nfs.protocol.nfs3 import Nfsstat3, Nfstime3
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
from nfs.table.apply import table_identity
from nfs.table.changelog import ChangeLog
from nfs.table.journal import JournalDir
from nfs.table.render_cache import RenderCache
from nfs.table.scratchfs import ScratchFs
from nfs.table.segkeys import SegmentKeys
from nfs.table.segments import SegmentedRendering, Segmenter, SegmentStore
from nfs.table.staging import Base
from nfs.table.writers import (
    Bounded,
    ClientPages,
    ReadViews,
    Shadows,
    Writer,
    WriterKey,
    peer_of,
)
from posixlake.database import DatabaseOps
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
    "CHANGES_ID",
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
CHANGES_ID: Final = FileId(6)
"""/changes.csv: the changes of the commits since the server started, growing."""
VERSION_BASE: Final = 1 << 40
"""/versions/<N> is ``VERSION_BASE + 2N``, its data.csv ``VERSION_BASE + 2N + 1``."""
VERSION_END: Final = 1 << 61
VERSION_CHANGES_BASE: Final = VERSION_END
"""/versions/<N>/changes.csv is ``VERSION_CHANGES_BASE + N`` (below ``SCRATCH_BASE``)."""
SCRATCH_BASE: Final = 1 << 62
"""Scratch files and directories get ids from here up (fresh per boot)."""

DATA_CSV: Final = "data.csv"
SCHEMA: Final = "schema.sql"
CHANGES_CSV: Final = "changes.csv"
ROOT_STATIC: Final = {"schema.sql": SCHEMA_ID, "versions": VERSIONS_ID, CHANGES_CSV: CHANGES_ID}
"""Entries of / that are not in the scratch tree ("data" is, as a directory with a fixed id)."""
COOKIE_OFFSET: Final = 2
"""MemoryFs's readdir cookies are id + 2; the table's own entries follow the same rule."""
FILE_MODE: Final = 0o644
RW_MODE: Final = 0o666
DIR_MODE: Final = 0o777
RO_DIR_MODE: Final = 0o555
DIR_SIZE: Final = 4096
KEEP_SHADOWS: Final = 4
KEEP_VERSION_CHANGES: Final = 8
RECENT_COMMITS: Final = 64
STALE_SEARCH: Final = 16
"""How many versions back a write from a client with an unknown view is matched against."""
MAX_CLIENTS: Final = 4096
"""Clients (and writers) whose per-client state is remembered (the oldest are forgotten)."""
MAX_PAGES: Final = 64
"""Clients whose page after their last append is remembered (see ``ClientPages``)."""
PAGE_BYTES: Final = 1 << 20
"""An append that wrote more than this is not remembered as its client's page."""
DEFAULT_IDLE_SECONDS: Final = 5.0
"""A writer that never COMMITs is done after this long without a write."""
DEFAULT_ABANDON_SECONDS: Final = 3600.0
"""A staging that can never apply (mid-line, truncation alone) is given up after this long."""
ALL_ACCESS: Final = ACCESS3_READ | ACCESS3_LOOKUP | ACCESS3_MODIFY | ACCESS3_EXTEND | ACCESS3_DELETE


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


def status_error(status: Nfsstat3, message: str = "") -> NfsError:
    return NfsError(status, message)


def storage_error(err: OSError) -> NfsError:
    """The status for the server's own storage failing: NOSPC when full, else IO."""
    full = err.errno in (errno.ENOSPC, errno.EDQUOT)
    return status_error(Nfsstat3.NFS3ERR_NOSPC if full else Nfsstat3.NFS3ERR_IO, str(err))


def journal_error(err: OSError) -> NfsError:
    """The status for a journal that cannot be written (the write is not acknowledged)."""
    logger.error("data.csv: the write journal failed: %s", err)
    return storage_error(err)


def caller_of(ctx: CallContext | None) -> CallContext:
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


def short_hash(*parts: bytes) -> bytes:
    return hashlib.sha256(b"\0".join(parts)).digest()[:8]


class TableState:
    """Everything one TableFs holds, declared and set here, in one place.

    The collaborators (`nfs.table.reads.Reads`, `attrs.Attributes`, `stagings.Stagings`,
    `writes.WriteRules`, `recovery.Recovery`, `names.Names`) share this one object; each
    changes the parts its module docstring names, under `lock`.

    Args: as `nfs.table.tablefs.TableFs` (which documents them).
    """

    def __init__(
        self,
        db: DatabaseOps,
        *,
        clock: Callable[[], float],
        wallclock: Callable[[], float],
        idle_seconds: float,
        abandon_seconds: float,
        state_dir: str | os.PathLike[str] | None,
        version_ttl: float,
        keep_versions: int,
        read_only: bool,
        segment_cache: str | os.PathLike[str] | None,
        segment_cache_bytes: int,
        scratch_quota: int,
    ) -> None:
        self.db = db
        self.clock = clock
        self.wallclock = wallclock
        self.idle = idle_seconds
        self.abandon = max(abandon_seconds, idle_seconds)
        self.ttl = version_ttl
        self.lock = threading.RLock()
        """Held by every call that reads or changes any of this (re-entrant)."""
        self.segmenter = Segmenter(db, SegmentStore(segment_cache, max_bytes=segment_cache_bytes))
        self.keys = SegmentKeys(self.segmenter)
        self.cache: RenderCache[SegmentedRendering] = RenderCache(
            segmenter=self.segmenter, keep=keep_versions
        )
        self.read_only = read_only or not db.authorizer.allows("write")
        # the version shown: our own writes at once, others' after `ttl` (see Reads.version)
        self.known_version = db.version
        self.generation = db.generation
        self.checked_at = clock()
        ident = table_identity(db)
        self.fsid = int.from_bytes(short_hash(b"fsid", ident), "big") >> 1
        self.table_gen = short_hash(b"table", ident)
        # handles of the files whose bytes change survive a restart only if the table has
        # not changed since this boot started
        self.file_gen = short_hash(b"file", ident, str(self.known_version).encode())
        # /versions/<N> and what is in it: good for as long as the table is this one (a
        # table restored onto the path has other versions under the same numbers)
        self.versions_gen = short_hash(b"versions", ident)
        self.boot = secrets.token_bytes(8)
        self.table_id = ident.decode()
        self.state_dir = (
            Path(state_dir) if state_dir is not None else default_state_dir(self.table_id)
        )
        self.scratch = ScratchFs(
            self.state_dir / "scratch",
            wallclock,
            ids=IdAllocator(SCRATCH_BASE),
            root_id=ROOT_ID,
            root_mode=DIR_MODE,
            fsid=self.fsid,
            max_file_size=1 << 40,
            quota_bytes=scratch_quota,
        )
        self.scratch.add_dir(ROOT_ID, "data", mode=DIR_MODE, fid=DATA_DIR_ID)
        # the table version when each scratch file was made (the base of a rename onto data.csv)
        self.scratch_base: dict[FileId, int] = {}
        self.journals = JournalDir(self.state_dir / "journal")
        # data.csv as the last NFS writers wrote it, per version they produced (see apply)
        self.shadows = Shadows(
            self.journals.path.with_name("shadows-" + self.journals.path.name), KEEP_SHADOWS
        )
        self.writers: dict[WriterKey, Writer] = {}
        """Each writer's staging of data.csv (see `drop`)."""
        self.views = ReadViews(MAX_CLIENTS)
        self.own: Bounded[str, tuple[int, Base]] = Bounded(MAX_PAGES, peer_of)
        self.began: Bounded[WriterKey, bool] = Bounded(MAX_CLIENTS)
        self.edits_before: dict[str, list[tuple[int, int, int, int]]] | None = None
        self.failures: Bounded[WriterKey, NfsError] = Bounded(MAX_CLIENTS, _peer_of_key)
        # the connection each client address last mounted on (see WriteRules.client_mounted)
        self.mounts: Bounded[str, int] = Bounded(MAX_CLIENTS)
        self.last_start = 0  # when the newest staging began (ns; see Stagings.started_ns)
        # per client: its page after its last append (see WriteRules.base_for)
        self.pages = ClientPages(
            self.journals.path.with_name("pages-" + self.journals.path.name), MAX_PAGES
        )
        self.verifier = secrets.token_bytes(8)
        self.unfinished_at_close = 0
        """Staged writes `TableFs.close` kept in the journal for the next start."""
        self.schema_text: tuple[int, bytes] | None = None
        # /changes.csv (see nfs.table.changes): from the version shown at start on; the
        # log is opened at the first look; a new log (new columns, the table replaced)
        # gets a new handle generation
        self.changes: ChangeLog | None = None
        self.changes_start = self.known_version
        self.changes_gen = short_hash(b"changes", ident, str(self.changes_start).encode())
        self.changes_of = self.generation
        """The table generation the log follows."""
        self.changes_mtime: tuple[int, Nfstime3] | None = None
        """The last version /changes.csv shows and its mtime (see Changes._stamp)."""
        self.changes_error: NfsError | None = None
        """Why the log cannot grow (a version's changes expired): every call on it fails."""
        self.version_changes: Bounded[tuple[int, int], bytes] = Bounded(KEEP_VERSION_CHANGES)
        """/versions/<N>/changes.csv by (table generation, N), the last few read."""
        self.times: dict[int, Nfstime3] = {}
        self.read_bytes = 0
        """Bytes READ returned (every file of the share), for metrics."""
        self.written_bytes = 0
        """Bytes WRITE accepted (every file of the share), for metrics."""
        self.stop = threading.Event()
        self.timer: threading.Thread | None = None

    def drop(self, w: Writer) -> None:
        """Forget ``w``'s staging and delete its journal."""
        if self.writers.get(w.key) is w:
            del self.writers[w.key]
        if w.journal is not None:
            w.journal.discard()
            w.journal = None


def version_changes_of(fid: FileId) -> int | None:
    """N for the id of /versions/<N>/changes.csv, else None."""
    if VERSION_CHANGES_BASE <= fid < SCRATCH_BASE:
        return int(fid - VERSION_CHANGES_BASE)
    return None


def is_changes(fid: FileId) -> bool:
    """Whether ``fid`` is /changes.csv or a /versions/<N>/changes.csv (read-only files)."""
    return fid == CHANGES_ID or version_changes_of(fid) is not None


def version_of(fid: FileId) -> tuple[int, bool] | None:
    """(N, is_file) for /versions/<N> ids, else None."""
    if VERSION_BASE <= fid < VERSION_END:
        n, is_file = divmod(fid - VERSION_BASE, 2)
        return n, bool(is_file)
    return None


def _peer_of_key(key: WriterKey) -> str:
    return key.peer
