"""Reads and renderings of a TableFs: which version is current, the bytes each version shows.

Owns: the version shown (our own commits at once, others' after ``version_ttl``), a
table replaced under us (a restore onto its path), the rendering of each version (the
cache), the bytes a writer wrote while the table is exactly that (shadows), commit times
(mtimes), ``schema.sql``'s text, and READ of the table's files (data.csv records what
each client was shown: the base of its next edit). See docs/design.md.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Final, Protocol

from nfs.protocol.nfs3 import Fattr3, Nfsstat3, Nfstime3
from nfs.protocol.nfs3.types import FileSlice, Pieces
from nfs.protocol.rpc import CallContext
from nfs.protocol.vfs import FileId, NfsError
from nfs.protocol.xdr import HasFileno
from nfs.table.apply import (
    Scope,
    arrow_schema,
    loaded_version,
    partition_columns,
    table_identity,
)
from nfs.table.render_cache import VersionBytes
from nfs.table.schema_sql import create_table_sql
from nfs.table.staging import Base, BytesBase
from nfs.table.state import (
    DATA_CSV_ID,
    DATA_DIR_ID,
    MAX_CLIENTS,
    MAX_PAGES,
    RECENT_COMMITS,
    ROOT_ID,
    SCHEMA_ID,
    VERSIONS_ID,
    TableState,
    nfs_error,
    short_hash,
    status_error,
    version_of,
)
from nfs.table.writers import Bounded, ReadViews, WriterKey, peer_of
from posixlake.errors import PosixLakeError

__all__ = ["SENDFILE_MIN", "EditFace", "Reads"]

logger = logging.getLogger("nfs.table.tablefs")

SENDFILE_MIN: Final = 64 << 10
"""A READ of data.csv this long or longer inside one mapped segment is sent from the
segment's file (``os.sendfile``): below it, copying the bytes costs about as little."""


class EditFace(Protocol):
    """What the write rules need of the file a writer edits (`nfs.table.writes`):
    ``/data/data.csv`` (`Reads`) or one partition's ``data.csv``
    (`nfs.table.partfiles.PartitionFace`)."""

    @property
    def part(self) -> str:
        """ "" for data.csv, else the partition's path below /partitions."""
        ...

    @property
    def scope(self) -> Scope | None:
        """The rows the file holds (None: the table's)."""
        ...

    def version(self) -> int:
        """The table version shown."""
        ...

    def presented(self, version: int) -> Base:
        """The file's bytes at ``version`` as NFS showed them (NfsError: cannot)."""
        ...

    def presented_or_none(self, version: int) -> Base | None:
        """As `presented`, None when it cannot be shown."""
        ...

    def seen_versions(self) -> Iterator[tuple[int, Base]]:
        """Recent versions of the file whose bytes are at hand, newest first."""
        ...

    def stamp_of(self, version: int) -> int:
        """The commit time of ``version`` in ns."""
        ...


class Reads:
    """The versions a TableFs shows and the bytes of its files; the `EditFace` of
    ``/data/data.csv``."""

    part: Final = ""
    scope: Final = None

    def __init__(self, state: TableState) -> None:
        self._s = state

    def version(self) -> int:
        """The current table version: our own writes at once, others' within ``version_ttl``
        of the last look at the log (our own writes do not count as one: a commit another
        process made before them shows as soon as the ttl since that look is over)."""
        loaded = loaded_version(self._s.db)
        now = self._s.clock()
        if loaded != self._s.known_version:
            self._s.known_version = loaded
        if now - self._s.checked_at >= self._s.ttl:
            try:
                self._s.known_version = self._s.db.version
            except PosixLakeError as err:
                raise nfs_error(err) from err
            self._s.checked_at = now
        if self._s.db.generation != self._s.generation:
            self.replaced()
        return self._s.known_version

    def replaced(self) -> None:
        """The table was replaced under us (a restore onto its path): forget the old one.

        Renderings, shadows and what clients were shown belong to the old table's
        versions; stagings were based on them, so they are dropped and their writers get
        EIO at their next WRITE or COMMIT; the write verifier changes; data.csv handles
        of the old table go stale.
        """
        self._s.generation = self._s.db.generation
        logger.warning("the table was replaced (restored onto its path): serving the new one")
        self._s.cache.clear()
        self._s.shadows.clear()
        self._s.pages.clear()
        self._s.times.clear()
        self._s.schema_text = None
        self._s.views = ReadViews(MAX_CLIENTS)
        self._s.own = Bounded(MAX_PAGES, peer_of)
        self._s.edits_before = None
        self._s.scratch_base.clear()
        for w in list(self._s.writers.values()):
            self._s.drop(w)
            message = "the table was replaced while this write was staged; nothing was applied"
            self._s.failures.set(w.key, status_error(Nfsstat3.NFS3ERR_IO, message))
        self._s.verifier = secrets.token_bytes(8)
        ident = table_identity(self._s.db)
        self._s.file_gen = short_hash(b"file", ident, str(self._s.known_version).encode())
        # the restored table may keep the Delta table id (a backup's log): a new salt, so
        # no handle of the old table's /versions/<N> reads the new table's version N
        self._s.versions_gen = short_hash(b"versions", ident, secrets.token_bytes(8))

    def rendering(self, version: int) -> VersionBytes:
        try:
            return self._s.cache.get(version)
        except PosixLakeError as err:
            raise nfs_error(err) from err

    def presented(self, version: int) -> Base:
        """The bytes of data.csv at ``version`` as NFS showed them: the writer's own bytes
        while the table is exactly what that writer wrote (a shadow), else the rendering.
        """
        shadow = self.shadow(version)
        if shadow is not None:
            return BytesBase(shadow)
        return self.rendering(version)

    def stamp_of(self, version: int) -> int:
        """The commit time of ``version`` in ns (with the version in its low digits)."""
        return self.commit_time(version).to_ns()

    def shadow(self, version: int) -> memoryview | None:
        """The bytes a writer wrote that became ``version``, if kept (and still that version)."""
        if version > self._s.known_version or not self._s.shadows.holds_any():
            return None
        try:
            return self._s.shadows.get(version, self.stamp_of(version))
        except NfsError:
            return None

    def seen_versions(self) -> Iterator[tuple[int, Base]]:
        """Recent versions whose bytes are at hand, newest first (no rendering)."""
        seen: dict[int, Base] = {r.version: r for r in self._s.cache.cached()}
        for v, _stamp in self._s.shadows.versions():
            shadow = self.shadow(v)
            if shadow is not None:
                seen[v] = BytesBase(shadow)
        for v in sorted(seen, reverse=True):
            yield v, seen[v]

    def schema_bytes(self) -> bytes:
        version = self.version()
        if self._s.schema_text is None or self._s.schema_text[0] != version:
            text = create_table_sql(
                arrow_schema(self._s.db),
                primary_key=self._s.db.primary_key(),
                partition_by=partition_columns(self._s.db),
            )
            self._s.schema_text = (version, text.encode())
        return self._s.schema_text[1]

    def commit_time(self, version: int) -> Nfstime3:
        """The commit time of ``version``, with the version in the nanoseconds (unique mtimes).

        A recent version's time comes from the newest few commits (cheap at any history
        length); an old one's from the whole history, once.
        """
        cached = self._s.times.get(version)
        if cached is not None:
            return cached
        try:
            behind = self._s.known_version - version
            if 0 <= behind < RECENT_COMMITS:
                for info in self._s.db.history(behind + 1):
                    self._s.times.setdefault(info.version, _stamp(info.timestamp, info.version))
            if version not in self._s.times:
                self._s.times[version] = _stamp(self._s.db.commit_time(version), version)
        except PosixLakeError as err:
            raise nfs_error(err) from err
        return self._s.times[version]

    def presented_or_none(self, version: int) -> Base | None:
        try:
            return self.presented(version)
        except NfsError:
            return None

    def check_version(self, n: int) -> None:
        if n > self.version():
            raise status_error(Nfsstat3.NFS3ERR_STALE, f"no version {n}")

    def read(
        self, fid: FileId, offset: int, count: int, ctx: CallContext
    ) -> tuple[bytes | memoryview, bool]:
        """Read; the table's files are served from their cached bytes without copying."""
        ver = version_of(fid)
        if fid == DATA_CSV_ID or (ver is not None and ver[1]):
            if not self._s.db.authorizer.allows("read"):
                raise status_error(Nfsstat3.NFS3ERR_ACCES, "the user may not read this table")
            if ver is not None:
                self.check_version(ver[0])
                return self.rendering(ver[0]).read(offset, count)
            w = self._s.writers.get(WriterKey.of(ctx))
            if w is not None:
                return w.staging.read(offset, count)
            version = self.version()
            shadow = self.shadow(version)
            got = (
                _slice(shadow, offset, count)
                if shadow is not None
                else self.rendering(version).read(offset, count)
            )
            self._s.views.record(ctx.peer or "local", version, offset, offset + len(got[0]), got[1])
            self._s.own.pop(ctx.peer or "local")
            return got
        if fid == SCHEMA_ID:
            return _slice(memoryview(self.schema_bytes()), offset, count)
        if fid in (ROOT_ID, DATA_DIR_ID, VERSIONS_ID) or ver is not None:
            raise status_error(Nfsstat3.NFS3ERR_ISDIR)
        return self._s.scratch.read(fid, offset, count, ctx)

    def read_nowait(
        self,
        fid: FileId,
        offset: int,
        count: int,
        ctx: CallContext,
        attrs: Callable[[int, int], Fattr3],
    ) -> tuple[bytes | memoryview | Pieces | FileSlice, bool, Fattr3] | None:
        """Read data.csv if that needs no waiting; else None (then call `read`).

        For the transport's event loop (``NfsServer`` answers a READ there without a hop
        to a worker thread): never waits for a lock, does no IO, renders and applies
        nothing. None unless: ``fid`` is data.csv, the table lock and the table handle
        are free, no writer has a staging, the version needs no check yet
        (``version_ttl``), and its bytes and commit time are at hand. Otherwise the same
        bytes, EOF flag and effects as `read` (the caller is shown the version), with the
        attributes GETATTR gives now (``attrs(version, size)``), taken under the same lock.
        A range across the rendering's parts (the header, segments) comes as `Pieces`,
        not joined into a copy.
        """
        if fid != DATA_CSV_ID or not self._s.lock.acquire(blocking=False):
            return None
        try:
            version = self.settled_locked()
            if version is None or not self._s.db.authorizer.allows("read"):
                return None
            shown = self.shown_nowait_locked(version)
            if shown is None:
                return None
            data: bytes | memoryview | Pieces | FileSlice
            if isinstance(shown, memoryview):
                data, eof = _slice(shown, offset, count)
                size = len(shown)
            else:
                data, eof = _read_unjoined(shown, offset, count)
                size = shown.size
            self._s.views.record(ctx.peer or "local", version, offset, offset + len(data), eof)
            self._s.own.pop(ctx.peer or "local")
            return data, eof, attrs(version, size)
        finally:
            self._s.lock.release()

    def settled_locked(self) -> int | None:
        """The version shown to a caller without a staging, if telling it needs no waiting
        (the lock is held): None while a writer has a staging (the stagings to poll),
        once ``version_ttl`` has passed since the last look at the log (the version to
        check), while the table handle is busy or has moved on (a commit, a table
        replaced), or before the version's commit time is known (the mtime)."""
        if self._s.writers or self._s.clock() - self._s.checked_at >= self._s.ttl:
            return None
        state = self._s.db.try_loaded_state()
        if state != (self._s.known_version, self._s.generation):
            return None
        version = self._s.known_version
        return version if version in self._s.times else None

    def shown_nowait_locked(self, version: int) -> memoryview | VersionBytes | None:
        """The bytes data.csv shows at a settled ``version`` (`settled_locked`): a writer's
        shadow or the cached rendering; None if the version is not rendered yet."""
        rendering = self._s.cache.peek(version)
        if rendering is None:
            return None
        shadow = self.shadow(version)
        return shadow if shadow is not None else rendering

    def data_csv_size_nowait_locked(self, version: int) -> int | None:
        """The size of data.csv at a settled ``version``, or None (not rendered yet)."""
        shown = self.shown_nowait_locked(version)
        if shown is None:
            return None
        return len(shown) if isinstance(shown, memoryview) else shown.size


def _stamp(when: datetime, version: int) -> Nfstime3:
    """A commit time (milliseconds in Delta) with the version in the sub-millisecond digits."""
    ms = int(when.timestamp() * 1000)
    return Nfstime3.from_ns(ms * 1_000_000 + version % 1_000_000)


def _read_unjoined(
    rendering: VersionBytes, offset: int, count: int
) -> tuple[bytes | memoryview | Pieces | FileSlice, bool]:
    """``rendering.read``, but a range across a segmented rendering's parts (the header,
    one segment per data file: ``segments``, ``(key, start, length)`` each) as `Pieces`, a
    view of each part, instead of a joined copy; and a range (or a piece) of `SENDFILE_MIN`
    bytes or more inside one mapped segment as a `FileSlice` (its view, and where it lies
    in the segment's file: the transport sends it from the file)."""
    segments: Sequence[tuple[str, int, int]] | None = getattr(rendering, "segments", None)
    if segments is None:
        return rendering.read(offset, count)
    end = min(rendering.size, offset + count)
    cuts = [start for _, start, length in segments if length and offset < start < end]
    read_file = getattr(rendering, "read_file", None)
    if not cuts:
        got = _file_slice(read_file, offset, end - offset)
        if got is None:
            return rendering.read(offset, count)
        return got, end >= rendering.size
    pieces: list[bytes | memoryview | FileSlice] = []
    for a, b in zip([offset, *cuts], [*cuts, end], strict=True):
        piece = _file_slice(read_file, a, b - a)
        pieces.append(rendering.read(a, b - a)[0] if piece is None else piece)
    return Pieces(pieces), end >= rendering.size


def _file_slice(
    read_file: Callable[[int, int], tuple[memoryview, HasFileno, int, bool] | None] | None,
    offset: int,
    count: int,
) -> FileSlice | None:
    """Bytes ``[offset, offset + count)`` of a segmented rendering as a `FileSlice` of a
    segment's file (``read_file``: `SegmentedRendering.read_file`), if they are at least
    `SENDFILE_MIN` long and lie in one mapped segment; else None."""
    if read_file is None or count < SENDFILE_MIN:
        return None
    got = read_file(offset, count)
    if got is None:
        return None
    view, file, at, _ = got
    return FileSlice(view, file, at)


def _slice(data: memoryview, offset: int, count: int) -> tuple[memoryview, bool]:
    size = len(data)
    if offset >= size:
        return data[0:0], True
    end = min(size, offset + count)
    return data[offset:end], end >= size
