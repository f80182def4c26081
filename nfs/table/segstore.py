"""The on-disk cache of CSV segments, and a version's segmented rendering (for
:mod:`nfs.table.segments`, which documents the layout). See docs/design.md."""

from __future__ import annotations

import bisect
import contextlib
import logging
import mmap
import os
import queue
import struct
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final

from posixlake.errors import IoError

__all__ = [
    "CODEC_VERSION",
    "DEFAULT_CACHE_BYTES",
    "MMAP_MIN",
    "OPEN_FILES",
    "PAYLOAD_OFFSET",
    "RESIDENT_MAX",
    "Segment",
    "SegmentFile",
    "SegmentStore",
    "SegmentedRendering",
    "StoreStats",
    "default_cache_dir",
]

logger = logging.getLogger("nfs.table.segments")

CODEC_VERSION: Final = 1
"""Part of every segment key: bump it when the codec's output for some value changes."""
DEFAULT_CACHE_BYTES: Final = 8 << 30
"""The default size bound of the segment cache directory."""
MMAP_MIN: Final = 256 << 10
"""Segments at least this large are memory-mapped; smaller ones are read into memory
(a mapping holds a file descriptor; a table of thousands of one-line files must not)."""
RESIDENT_MAX: Final = 1 << 30
"""The bytes of mapped segments a rendering keeps resident once read; past it, the pages
of the segments read longest ago go from the process' memory (they stay in the page
cache): reading a table of any size through NFS holds at most about this much of it,
and a table smaller than it is read again without faulting its pages back in."""
_MAGIC: Final = b"PLXSEG01"
_TRAILER: Final = b"PLXEND01"
_HEAD: Final = struct.Struct("<8s32sQQ")  # magic, key digest, payload length, rows
_TAIL: Final = struct.Struct("<Q32s8s")  # payload length, key digest, trailer magic
_SUFFIX: Final = ".seg"
_BATCH_ROWS: Final = 65_536
_SMALL_DICTIONARY: Final = 256 << 10
_KEY_MEMO: Final = 1 << 20
_STALE_TEMP_SECONDS: Final = 3600.0
_TEMP_PREFIX: Final = ".tmp-"


def default_cache_dir() -> Path:
    """Return the default segment cache directory.

    ``$POSIXLAKE_SEGMENT_CACHE`` if set, else ``$XDG_CACHE_HOME/posixlake/segments``
    (``~/.cache/posixlake/segments``).
    """
    explicit = os.environ.get("POSIXLAKE_SEGMENT_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "posixlake" / "segments"


# -- one segment ---------------------------------------------------------------------------


class Segment:
    """The immutable CSV bytes of one data file (whole lines, each ending in LF).

    Attributes:
        key: the hex digest naming the segment (see :meth:`Segmenter.key_of`).
        size: the length in bytes.
        rows: the number of lines.
        view: the bytes (a read-only view of a mapping or of memory).
    """

    __slots__ = ("__weakref__", "_mmap", "_source", "key", "rows", "size", "view")

    def __init__(
        self,
        key: str,
        view: memoryview,
        rows: int,
        mm: mmap.mmap | None = None,
        source: tuple[str, int, int] | None = None,
    ):
        """Wrap ``view`` (which ``mm``, if given, backs: a mapping of the file ``source``,
        its path, device and inode, the payload at `PAYLOAD_OFFSET`)."""
        self.key = key
        self.view = view
        self.size = len(view)
        self.rows = rows
        self._mmap = mm
        self._source = source

    def file(self) -> SegmentFile | None:
        """The segment's file, open (the bytes at `PAYLOAD_OFFSET` + i are ``view[i]``),
        for sending its bytes without touching them (``os.sendfile``); None if the
        segment is not mapped from a file or that file is gone or replaced.

        The last `OPEN_FILES` files asked for stay open; a file also stays open as long
        as the caller holds it.
        """
        return None if self._source is None else _OPEN_FILES.get(self._source)

    @property
    def mapped(self) -> bool:
        """Whether the bytes are a file mapping (their pages can be let go: `release`)."""
        return self._mmap is not None

    def release(self, start: int, end: int) -> None:
        """Let the pages of bytes ``[start, end)`` go from this process' memory (a mapped
        segment only; the bytes stay readable, from the page cache or the file)."""
        if self._mmap is None or end <= start:
            return
        page = mmap.PAGESIZE
        lo = (_HEAD.size + start) // page * page
        hi = min(len(self._mmap), -(-(_HEAD.size + end) // page) * page)
        if hi > lo:
            self._mmap.madvise(mmap.MADV_DONTNEED, lo, hi - lo)

    def __repr__(self) -> str:
        return f"Segment({self.key[:12]}, size={self.size}, rows={self.rows})"


class SegmentFile:
    """An open segment file (read-only), closed when the last reference goes."""

    __slots__ = ("_fd",)

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def fileno(self) -> int:
        """The file descriptor (valid while this object lives)."""
        return self._fd

    def __del__(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)


class _OpenFiles:
    """The segment files open for sending (`Segment.file`), the last `OPEN_FILES` asked
    for: a bound on the descriptors a long table's segments hold."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._files: OrderedDict[tuple[str, int, int], SegmentFile] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, source: tuple[str, int, int]) -> SegmentFile | None:
        with self._lock:
            got = self._files.get(source)
            if got is not None:
                self._files.move_to_end(source)
                return got
        path, dev, ino = source
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return None
        file = SegmentFile(fd)
        try:
            st = os.fstat(fd)
        except OSError:
            return None
        if (st.st_dev, st.st_ino) != (dev, ino):  # removed and written again: not ours
            return None
        with self._lock:
            file = self._files.setdefault(source, file)
            self._files.move_to_end(source)
            while len(self._files) > self._capacity:
                self._files.popitem(last=False)  # closed once no reply holds it
        return file


OPEN_FILES: Final = 64
"""Segment files kept open for sending (`Segment.file`)."""

PAYLOAD_OFFSET: Final = _HEAD.size
"""Where a segment's bytes start in its file."""

_OPEN_FILES: Final = _OpenFiles(OPEN_FILES)


# -- the on-disk cache ---------------------------------------------------------------------


@dataclass
class StoreStats:
    """Counters of a :class:`SegmentStore` (for tests and benchmarks).

    Attributes:
        hits: segments found valid on disk.
        misses: segments not on disk.
        rejected: files found corrupt, truncated or of another key (removed).
        written: segments written.
        evicted: files removed to stay under the size bound.
    """

    hits: int = 0
    misses: int = 0
    rejected: int = 0
    written: int = 0
    evicted: int = 0


class SegmentStore:
    """A directory of segment files, size-bounded, least recently used evicted first.

    Thread-safe, and safe to share between processes (files appear by rename; a reader's
    mapping outlives an eviction by another process). Deleting the directory, or any file
    in it, at any time only costs renders.

    File layout: a header (magic, the key's 32-byte digest, payload length, rows), the
    payload, and a trailer (payload length, the digest again, magic). A file whose size,
    header or trailer disagree with the key asked for is rejected, removed and rendered
    again. The payload itself is not checksummed (that would read the whole table at a
    restart): a file rewritten in place with the same length goes undetected.
    """

    def __init__(
        self, root: str | os.PathLike[str] | None = None, *, max_bytes: int = DEFAULT_CACHE_BYTES
    ):
        """Use (and create) the directory ``root`` (default :func:`default_cache_dir`).

        Args:
            root: the cache directory.
            max_bytes: evict least recently used files past this total size.
        """
        self.root = Path(root) if root is not None else default_cache_dir()
        self.max_bytes = max(0, max_bytes)
        self.stats = StoreStats()
        self._lock = threading.Lock()
        self._sizes: dict[str, int] | None = None  # key -> file size, loaded on first use
        self._used: dict[str, float] = {}
        self._tick = 0.0
        # small segments given to `write_later`, until their files are written
        self._pending: dict[str, Segment] = {}
        self._written = threading.Condition(self._lock)

    def _path(self, key: str) -> Path:
        return self.root / (key + _SUFFIX)

    def _index(self) -> dict[str, int]:
        """Return the file sizes by key, scanning the directory once (under the lock)."""
        if self._sizes is None:
            self.root.mkdir(parents=True, exist_ok=True)
            sizes: dict[str, int] = {}
            with os.scandir(self.root) as it:
                for entry in it:
                    if entry.name.startswith(_TEMP_PREFIX):
                        _remove_if_stale(entry)  # left by a writer that died
                        continue
                    if not entry.name.endswith(_SUFFIX):
                        continue
                    with contextlib.suppress(OSError):
                        st = entry.stat()
                        key = entry.name[: -len(_SUFFIX)]
                        sizes[key] = st.st_size
                        self._used[key] = st.st_mtime
            self._sizes = sizes
        return self._sizes

    def total_bytes(self) -> int:
        """Return the bytes the cache holds (as this process knows it)."""
        with self._lock:
            return sum(self._index().values())

    def open(self, key: str) -> Segment | None:
        """Return the segment ``key`` from disk, or None if it is missing or invalid.

        An invalid file (wrong magic, key, length or trailer) is removed.
        """
        with self._lock:
            pending = self._pending.get(key)
        if pending is not None:
            return pending
        path = self._path(key)
        try:
            fh = open(path, "rb")  # noqa: SIM115 - closed below, the mapping outlives it
        except FileNotFoundError:
            with self._lock:
                self.stats.misses += 1
            return None
        except OSError as err:
            logger.warning("segment cache: cannot open %s: %s", path, err)
            with self._lock:
                self.stats.misses += 1
            return None
        with fh:
            segment = self._load(key, fh, path)
        with self._lock:
            if segment is None:
                self.stats.rejected += 1
                index = self._index()
                index.pop(key, None)
                self._used.pop(key, None)
            else:
                self.stats.hits += 1
                self._touch(key)
        if segment is None:
            logger.warning("segment cache: %s is corrupt or not %s; rendering again", path, key)
            with contextlib.suppress(OSError):
                path.unlink()
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # recency survives a restart
        return segment

    @staticmethod
    def _load(key: str, fh: BinaryIO, path: Path) -> Segment | None:
        digest = bytes.fromhex(key)
        total = os.fstat(fh.fileno()).st_size
        if total < _HEAD.size + _TAIL.size:
            return None
        fh.seek(0)
        magic, found, length, rows = _HEAD.unpack(fh.read(_HEAD.size))
        if magic != _MAGIC or found != digest or total != _HEAD.size + length + _TAIL.size:
            return None
        fh.seek(_HEAD.size + length)
        t_length, t_digest, t_magic = _TAIL.unpack(fh.read(_TAIL.size))
        if t_magic != _TRAILER or t_digest != digest or t_length != length:
            return None
        if length < MMAP_MIN:
            fh.seek(_HEAD.size)
            payload = fh.read(length)
            if len(payload) != length:
                return None
            return Segment(key, memoryview(payload).toreadonly(), rows)
        st = os.fstat(fh.fileno())
        mm = mmap.mmap(fh.fileno(), total, access=mmap.ACCESS_READ)
        view = memoryview(mm)[_HEAD.size : _HEAD.size + length]
        return Segment(key, view, rows, mm, (str(path), st.st_dev, st.st_ino))

    def write(self, key: str, parts: Iterable[tuple[bytes | memoryview, int]]) -> Segment:
        """Store the concatenation of ``parts`` (bytes, rows) as segment ``key``; return it.

        Written to a temporary file in the directory, then renamed into place, so a reader
        (in any process) sees a whole file or none. Evicts past the size bound.

        Raises:
            IoError: the cache directory cannot be written.
        """
        digest = bytes.fromhex(key)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=_TEMP_PREFIX, suffix=_SUFFIX, dir=self.root)
        except OSError as err:
            raise IoError(f"segment cache {self.root}: {err}") from err
        try:
            with os.fdopen(fd, "w+b") as fh:
                fh.write(_HEAD.pack(_MAGIC, digest, 0, 0))
                length = rows = 0
                for chunk, n in parts:
                    fh.write(chunk)
                    length += len(chunk)
                    rows += n
                fh.write(_TAIL.pack(length, digest, _TRAILER))
                fh.seek(0)
                fh.write(_HEAD.pack(_MAGIC, digest, length, rows))
                fh.flush()
                os.replace(tmp, self._path(key))
                segment = self._load(key, fh, self._path(key))
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        assert segment is not None
        with self._lock:
            self.stats.written += 1
            self._index()[key] = _HEAD.size + length + _TAIL.size
            self._touch(key)
            self._evict(keep=key)
        return segment

    def write_later(self, key: str, payload: bytes, rows: int) -> Segment:
        """Return segment ``key`` of ``payload`` (``rows`` lines) now; its file is
        written on a background thread (see `write`), and until then `open` gives it.

        For a small segment on a reply's path: creating a file costs about 0.3 ms on
        some file systems (ext4 here), more than rendering a one-row append. The file is
        derived data: one lost (the process ends first, or the write fails: logged) only
        costs a render. `flush` waits for the files given so far.
        """
        segment = Segment(key, memoryview(payload).toreadonly(), rows)
        with self._lock:
            self._pending[key] = segment
        _LATER.put((self, key))
        return segment

    def flush(self) -> None:
        """Wait until the files of the segments given to `write_later` are written."""
        with self._written:
            self._written.wait_for(lambda: not self._pending)

    def _write_pending(self, key: str) -> None:
        """Write the file of pending segment ``key`` (the background thread)."""
        with self._lock:
            segment = self._pending.get(key)
        try:
            if segment is not None:
                self.write(key, [(segment.view, segment.rows)])
        except Exception:  # a cache file: logged, rendered again if needed
            logger.warning("segment cache: cannot write %s", key, exc_info=True)
        finally:
            with self._written:
                self._pending.pop(key, None)
                self._written.notify_all()

    def _touch(self, key: str) -> None:
        # wall-clock time like the mtimes of the scan, strictly increasing in this process
        self._tick = max(self._tick + 1e-6, time.time())
        self._used[key] = self._tick

    def _evict(self, *, keep: str) -> None:
        index = self._index()
        total = sum(index.values())
        if total <= self.max_bytes:
            return
        for key in sorted(index, key=lambda k: self._used.get(k, 0.0)):
            if total <= self.max_bytes:
                break
            if key == keep:
                continue
            total -= index.pop(key)
            self._used.pop(key, None)
            self.stats.evicted += 1
            # a live mapping of it stays valid: POSIX keeps an unlinked file's pages
            with contextlib.suppress(OSError):
                self._path(key).unlink()

    def read_note(self, name: str) -> bytes | None:
        """Return the small file ``name`` kept beside the segments, or None if missing.

        Notes are derived data too (see `write_note`): not counted in the size bound,
        and a reader must check what one says against the table.
        """
        try:
            return (self.root / name).read_bytes()
        except OSError:
            return None

    def write_note(self, name: str, data: bytes) -> bool:
        """Keep ``data`` as the small file ``name`` beside the segments, atomically (a
        temporary file renamed into place); best effort: False if it cannot be written."""
        tmp = None
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=_TEMP_PREFIX, suffix=".note", dir=self.root)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, self.root / name)
            return True
        except OSError as err:
            logger.debug("segment cache %s: cannot keep %s: %s", self.root, name, err)
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            return False

    def clear(self) -> None:
        """Remove every segment file (live mappings stay valid)."""
        self.flush()  # a file written after this would outlive the clearing
        with self._lock:
            self._index()
            assert self._sizes is not None
            for key in list(self._sizes):
                with contextlib.suppress(OSError):
                    self._path(key).unlink()
            self._sizes.clear()
            self._used.clear()


class _Later:
    """The thread that writes the files of `SegmentStore.write_later` (one per process,
    started on first use), in the order they were given."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[SegmentStore, str]] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def put(self, item: tuple[SegmentStore, str]) -> None:
        self._queue.put(item)
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="posixlake-segment-files", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        while True:
            store, key = self._queue.get()
            store._write_pending(key)


_LATER: Final = _Later()


def _remove_if_stale(entry: os.DirEntry[str]) -> None:
    with contextlib.suppress(OSError):
        if time.time() - entry.stat().st_mtime > _STALE_TEMP_SECONDS:
            os.unlink(entry.path)


# -- one version -----------------------------------------------------------------------------


class SegmentedRendering:
    """The bytes of one version's ``data.csv``: the header, then segments (a drop-in for
    :class:`nfs.table.render_cache.Rendering`).

    Attributes:
        version: the table version.
        size: the length in bytes (the header plus every segment).
        header: the header line.
        segments: ``(key, start, length)`` per data file, in file order; ``start`` is the
            offset of the segment's first byte in ``data.csv``.
    """

    spilled: Final = True  # the bytes live in (cache) files, not in this object

    def __init__(self, version: int, header: bytes, segments: Sequence[Segment]) -> None:
        """Lay ``segments`` out after ``header``."""
        self.version = version
        self.header = header
        self._keep = tuple(segments)  # the mappings live as long as this rendering
        self._segs: list[Segment] = []
        self._seg_starts: list[int] = []
        parts: list[memoryview] = []
        starts: list[int] = []
        mapped: list[Segment | None] = []  # per part: its segment, if mapped
        refs: list[tuple[str, int, int]] = []
        pos = 0
        if header:
            parts.append(memoryview(header).toreadonly())
            starts.append(0)
            mapped.append(None)
            pos = len(header)
        for seg in segments:
            refs.append((seg.key, pos, seg.size))
            self._segs.append(seg)
            self._seg_starts.append(pos)
            if seg.size:
                parts.append(seg.view)
                starts.append(pos)
                mapped.append(seg if seg.mapped else None)
                pos += seg.size
        self.size = pos
        self.segments = refs
        self._parts = parts
        self._starts = starts
        self._mapped = mapped
        # the mapped segments read, least recently first, and their bytes (RESIDENT_MAX)
        self._resident: OrderedDict[Segment, None] = OrderedDict()
        self._resident_bytes = 0
        self._resident_lock = threading.Lock()
        self._data: memoryview | None = None
        self._lock = threading.Lock()

    def read(self, offset: int, count: int) -> tuple[memoryview | bytes, bool]:
        """Return up to ``count`` bytes at ``offset`` and whether they reach the end.

        Within one segment the bytes are a view of its mapping (no copy); a range that
        spans segments is joined into new bytes. An offset at or past the end gives empty
        bytes and True; a negative offset counts as 0.

        Past `RESIDENT_MAX` bytes of mapped segments read, the pages of those read
        longest ago are let go (`Segment.release`); a view returned earlier stays valid
        (its bytes come back from the page cache when used).
        """
        offset = max(0, offset)
        if offset >= self.size or count <= 0:
            return memoryview(b""), offset >= self.size
        end = min(self.size, offset + count)
        i = bisect.bisect_right(self._starts, offset) - 1
        start = self._starts[i]
        part = self._parts[i]
        if end <= start + len(part):
            seg = self._mapped[i]
            if seg is not None:
                self._served_from(seg, end - offset)
            return part[offset - start : end - start], end >= self.size
        pieces = [part[offset - start :]]
        pos = start + len(part)
        i += 1
        while pos < end:
            part = self._parts[i]
            pieces.append(part[: end - pos])
            pos += len(part)
            i += 1
        data = b"".join(pieces)  # copied: the mapped pages can go now
        for seg, piece in zip(self._mapped[i - len(pieces) : i], pieces, strict=True):
            if seg is not None:
                self._served_from(seg, len(piece))
        return data, end >= self.size

    def read_file(
        self, offset: int, count: int
    ) -> tuple[memoryview, SegmentFile, int, bool] | None:
        """`read` a range that lies in one mapped segment whose file is at hand (see
        `Segment.file`): its view, the segment's file and the range's offset in it, and
        whether it reaches the end; None otherwise (then call `read`). Counts towards
        `RESIDENT_MAX` as `read` does."""
        offset = max(0, offset)
        if offset >= self.size or count <= 0:
            return None
        end = min(self.size, offset + count)
        i = bisect.bisect_right(self._starts, offset) - 1
        start = self._starts[i]
        part = self._parts[i]
        seg = self._mapped[i]
        if seg is None or end > start + len(part):
            return None
        file = seg.file()
        if file is None:
            return None
        self._served_from(seg, end - offset)
        at = offset - start
        return part[at : end - start], file, PAYLOAD_OFFSET + at, end >= self.size

    def _served_from(self, seg: Segment, nbytes: int) -> None:
        """Note that ``seg`` was read; past `RESIDENT_MAX` bytes of segments read, let the
        pages of those read longest ago go."""
        del nbytes  # a segment read in part may be resident whole: counted whole
        with self._resident_lock:
            if seg in self._resident:
                self._resident.move_to_end(seg)
                return
            self._resident[seg] = None
            self._resident_bytes += seg.size
            gone = []
            while self._resident_bytes > RESIDENT_MAX and len(self._resident) > 1:
                old, _ = self._resident.popitem(last=False)
                self._resident_bytes -= old.size
                gone.append(old)
        for old in gone:  # releasing pages another thread reads is harmless
            old.release(0, old.size)

    def release(self, offset: int, count: int) -> None:
        """Let the mapped pages of bytes ``[offset, offset + count)`` go from memory (after a
        one-off pass over them: comparing a rewrite; they stay readable)."""
        end = min(self.size, offset + count)
        i = max(0, bisect.bisect_right(self._seg_starts, offset) - 1)
        while i < len(self._segs) and self._seg_starts[i] < end:
            seg, start = self._segs[i], self._seg_starts[i]
            seg.release(max(0, offset - start), min(seg.size, end - start))
            i += 1

    @property
    def data(self) -> memoryview:
        """Return all the bytes as one contiguous read-only view.

        Materialised on first use into an unlinked, memory-mapped temporary file (a copy
        of the whole file: prefer :meth:`read`), except when there is a single part.
        """
        if len(self._parts) <= 1:
            return self._parts[0] if self._parts else memoryview(b"")
        with self._lock:
            if self._data is None:
                with tempfile.TemporaryFile(prefix="posixlake-segments-") as f:
                    for part in self._parts:
                        f.write(part)
                    f.flush()
                    mm = mmap.mmap(f.fileno(), self.size, access=mmap.ACCESS_READ)
                self._data = memoryview(mm)
            return self._data

    def __repr__(self) -> str:
        return (
            f"SegmentedRendering(version={self.version}, size={self.size}, "
            f"segments={len(self.segments)})"
        )
