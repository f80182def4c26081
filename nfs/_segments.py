"""Segmented renderings: a version's ``data.csv`` as the header plus one CSV segment per data file.

Cost follows the change (docs/design.md, "The NFS face"). A version's bytes are the header line
followed by the CSV lines of each active data file, one **segment** per file, in a fixed
order: the add actions sorted by (modification time, path). A commit's new files are
written after the files they join, so appends land at the end of ``data.csv`` (modification
times are milliseconds: files of two commits within the same millisecond are ordered by
path), and a file that a commit removes takes its segment (only) out of the middle.
Rendering a version renders only the files no earlier version (or earlier run) rendered.

Each segment is rendered from one data file exactly as a full rendering renders its rows:
the table's schema and column order, partition columns filled from the add action's
partition values, columns missing from an older file NULL, and
:func:`posixlake.csvcodec.iter_render_csv` for the bytes. So for every version,
``render_csv(rows in segment order)`` equals the segmented bytes.

Segments live in a cache directory outside the table (:class:`SegmentStore`, by default
``$XDG_CACHE_HOME/posixlake/segments``), keyed by a digest of the table's identity (its
Delta ``metaData.id`` and URI), the file's path, size and modification time, its partition
values, the schema and the codec version. Files are written atomically (temporary file,
then rename), carry their key and length in a header and a trailer (a corrupt, truncated or
foreign file is detected, removed and rendered again), are memory-mapped when large, and
are evicted least-recently-used past a size bound. The directory is safe to delete at any
time, and a restarted server reuses it, so its first read of an unchanged table renders
nothing.

Tables whose data files cannot be read one by one as plain Parquet (deletion vectors or
column mapping: delta-rs applies them while scanning; ``snapshot_of`` refuses them, or
carries physical column names or deleted rows) fall back to ONE segment rendered from
``db.to_arrow(version=...)``: correct, cached on disk per version, but not incremental —
every new version renders the whole table again.

The first rendering of a large table renders its work units (files, or their row groups
when there are fewer files than workers) on a thread pool, at most two units per worker in
flight: most of a unit's time is Parquet decoding and the codec's Arrow compute kernels,
which release the GIL. String columns whose Parquet dictionary is small are read as
dictionaries, so the codec renders each distinct value once.
"""

from __future__ import annotations

import bisect
import contextlib
import hashlib
import json
import logging
import mmap
import os
import struct
import tempfile
import threading
import time
import weakref
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Final

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from posixlake import DatabaseOps
from posixlake.csvcodec import iter_render_csv, render_csv
from posixlake.delta._log import DeltaLog
from posixlake.delta._snapshot import DataFile, Snapshot, snapshot_of
from posixlake.engines.spark._io import table_filesystem
from posixlake.errors import InvalidOperation, IoError, NotFound, VersionError

__all__ = [
    "CODEC_VERSION",
    "DEFAULT_CACHE_BYTES",
    "Segment",
    "SegmentStore",
    "SegmentedRendering",
    "Segmenter",
    "default_cache_dir",
]

logger = logging.getLogger(__name__)

CODEC_VERSION: Final = 1
"""Part of every segment key: bump it when the codec's output for some value changes."""
DEFAULT_CACHE_BYTES: Final = 8 << 30
"""The default size bound of the segment cache directory."""
MMAP_MIN: Final = 256 << 10
"""Segments at least this large are memory-mapped; smaller ones are read into memory
(a mapping holds a file descriptor; a table of thousands of one-line files must not)."""
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

    __slots__ = ("__weakref__", "_mmap", "key", "rows", "size", "view")

    def __init__(self, key: str, view: memoryview, rows: int, mm: mmap.mmap | None = None):
        """Wrap ``view`` (which ``mm``, if given, backs)."""
        self.key = key
        self.view = view
        self.size = len(view)
        self.rows = rows
        self._mmap = mm

    def __repr__(self) -> str:
        return f"Segment({self.key[:12]}, size={self.size}, rows={self.rows})"


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
            segment = self._load(key, fh)
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
    def _load(key: str, fh: BinaryIO) -> Segment | None:
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
        mm = mmap.mmap(fh.fileno(), total, access=mmap.ACCESS_READ)
        view = memoryview(mm)[_HEAD.size : _HEAD.size + length]
        return Segment(key, view, rows, mm)

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
                segment = self._load(key, fh)
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

    def clear(self) -> None:
        """Remove every segment file (live mappings stay valid)."""
        with self._lock:
            self._index()
            assert self._sizes is not None
            for key in list(self._sizes):
                with contextlib.suppress(OSError):
                    self._path(key).unlink()
            self._sizes.clear()
            self._used.clear()


def _remove_if_stale(entry: os.DirEntry[str]) -> None:
    with contextlib.suppress(OSError):
        if time.time() - entry.stat().st_mtime > _STALE_TEMP_SECONDS:
            os.unlink(entry.path)


# -- one version -----------------------------------------------------------------------------


class SegmentedRendering:
    """The bytes of one version's ``data.csv``: the header, then segments (a drop-in for
    :class:`nfs._render_cache.Rendering`).

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
        parts: list[memoryview] = []
        starts: list[int] = []
        refs: list[tuple[str, int, int]] = []
        pos = 0
        if header:
            parts.append(memoryview(header).toreadonly())
            starts.append(0)
            pos = len(header)
        for seg in segments:
            refs.append((seg.key, pos, seg.size))
            if seg.size:
                parts.append(seg.view)
                starts.append(pos)
                pos += seg.size
        self.size = pos
        self.segments = refs
        self._parts = parts
        self._starts = starts
        self._data: memoryview | None = None
        self._lock = threading.Lock()

    def read(self, offset: int, count: int) -> tuple[memoryview | bytes, bool]:
        """Return up to ``count`` bytes at ``offset`` and whether they reach the end.

        Within one segment the bytes are a view of its mapping (no copy); a range that
        spans segments is joined into new bytes. An offset at or past the end gives empty
        bytes and True; a negative offset counts as 0.
        """
        offset = max(0, offset)
        if offset >= self.size or count <= 0:
            return memoryview(b""), offset >= self.size
        end = min(self.size, offset + count)
        i = bisect.bisect_right(self._starts, offset) - 1
        start = self._starts[i]
        part = self._parts[i]
        if end <= start + len(part):
            return part[offset - start : end - start], end >= self.size
        pieces = [part[offset - start :]]
        pos = start + len(part)
        i += 1
        while pos < end:
            part = self._parts[i]
            pieces.append(part[: end - pos])
            pos += len(part)
            i += 1
        return b"".join(pieces), end >= self.size

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


# -- building renderings -----------------------------------------------------------------


@dataclass
class SegmenterStats:
    """What a :class:`Segmenter` did (for tests and benchmarks).

    Attributes:
        rendered: segments rendered from data files (cache misses).
        reused: segments reused from this process or from the disk cache.
        whole: full-table fallback renderings.
    """

    rendered: int = 0
    reused: int = 0
    whole: int = 0


@dataclass(frozen=True)
class _Plan:
    """The files of one version, in segment order, with their keys."""

    snapshot: Snapshot
    files: tuple[DataFile, ...]
    keys: tuple[str, ...]
    header: bytes
    read_only: bool


@dataclass(frozen=True)
class _Unit:
    """Row groups of one file: the smallest piece of rendering work."""

    index: int  # the file's position in the plan's files
    row_groups: tuple[int, ...] | None = None  # None: the whole file


@dataclass(frozen=True)
class _FileKeys:
    """What one data file holds of a one-column key: its range, and the keys it repeats."""

    rows: int
    low: Any  # None: no rows
    high: Any
    nulls: bool
    repeated: pa.Table

    @classmethod
    def of(cls, keys: pa.Table) -> _FileKeys:
        import pyarrow.compute as pc

        column = keys.column(0)
        bounds = pc.min_max(column).as_py() if keys.num_rows else {"min": None, "max": None}
        return cls(
            rows=keys.num_rows,
            low=bounds["min"],
            high=bounds["max"],
            nulls=column.null_count > 0,
            repeated=_repeats([keys], keys.schema) if _may_repeat(column) else keys.slice(0, 0),
        )

    def may_hold(self, keys: pa.Table) -> bool:
        """Whether some row of ``keys`` (the same one column) falls in this file's range."""
        import pyarrow.compute as pc

        if self.rows == 0:
            return False
        if self.nulls or self.low is None:
            return True
        column = keys.column(0)
        inside = pc.and_(
            pc.greater_equal(column, pa.scalar(self.low, column.type)),
            pc.less_equal(column, pa.scalar(self.high, column.type)),
        )
        return bool(pc.any(pc.fill_null(inside, False)).as_py())


def _may_repeat(column: pa.ChunkedArray[Any]) -> bool:
    """Whether a column may hold a value twice: False when it strictly increases (keys
    inserted in order, the usual case: one vectorized pass) or counts as many distinct
    values as rows."""
    import pyarrow.compute as pc

    n = len(column)
    if n < 2:
        return False
    flat = column.combine_chunks()
    with contextlib.suppress(pa.ArrowNotImplementedError, pa.ArrowInvalid):
        if pc.all(pc.less(flat.slice(0, n - 1), flat.slice(1))).as_py():
            return False
    return len(pc.unique(flat)) != n - (column.null_count - 1 if column.null_count else 0)


def _repeats(tables: Sequence[pa.Table], schema: pa.Schema) -> pa.Table:
    """Return the distinct rows (keys) that occur more than once in ``tables`` together."""
    import pyarrow.compute as pc

    if not tables:
        return schema.empty_table()
    keys = pa.concat_tables([t.cast(schema) for t in tables])
    if keys.num_rows < 2:
        return schema.empty_table()
    if keys.num_columns == 1 and not _may_repeat(keys.column(0)):
        return schema.empty_table()  # a hash set of the values, cheaper than counting
    counts = keys.group_by(schema.names).aggregate([([], "count_all")])
    return counts.filter(pc.greater(counts["count_all"], 1)).select(schema.names).cast(schema)


class Segmenter:
    """Build :class:`SegmentedRendering` s of one table's versions from cached segments.

    Callable as ``segmenter(version)``, which is what ``RenderCache(segmenter=...)`` expects.
    Thread-safe; concurrent calls render a shared missing segment at most twice (the
    second write replaces the first with the same bytes).
    """

    def __init__(
        self,
        db: DatabaseOps,
        store: SegmentStore | None = None,
        *,
        workers: int | None = None,
        table_id: bytes | None = None,
    ) -> None:
        """Render ``db``'s versions into ``store`` (default: a store at the default directory).

        Args:
            db: the table.
            store: the segment cache.
            workers: threads rendering in parallel (default: the number of CPUs).
            table_id: the table's identity (default: its Delta metaData id).
        """
        self._db = db
        self.store = store if store is not None else SegmentStore()
        self._workers = max(1, workers or os.cpu_count() or 1)
        self._table_id = table_id
        self.stats = SegmenterStats()
        self._live: weakref.WeakValueDictionary[str, Segment] = weakref.WeakValueDictionary()
        self._keys: dict[tuple[str, int, int, str, str], str] = {}
        self._repeated: dict[tuple[int, tuple[str, ...]], pa.Table] = {}
        self._file_keys: dict[tuple[str, tuple[str, ...]], _FileKeys] = {}
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        # the codec's first use in a process costs a lazy import inside pyarrow (pandas,
        # on the first pa.scalar: 0.3-0.8 s); pay it now, off the first read's path
        self._executor().submit(_warm_up)

    # -- public ----------------------------------------------------------------------

    def __call__(self, version: int) -> SegmentedRendering:
        """Return the rendering of ``version``, rendering only segments no cache holds.

        Raises:
            PermissionDenied: the user may not read the table.
            VersionError: no such version, or its data files were vacuumed (and are not cached).
            NotFound: a data file of the current version is missing.
        """
        self._db.authorizer.check("read", "read")
        log, plan = self._plan_of(version)
        if plan is None:
            return self._whole(log, version)
        segments: list[Segment | None] = [self._cached(k) for k in plan.keys]
        missing = [i for i, s in enumerate(segments) if s is None]
        if missing:
            for i, seg in self._render(plan, missing):
                segments[i] = seg
        with self._lock:
            self.stats.reused += len(plan.keys) - len(missing)
            self.stats.rendered += len(missing)
        done = [s for s in segments if s is not None]
        assert len(done) == len(segments)
        return SegmentedRendering(version, plan.header, done)

    def rows_with_keys(self, version: int, keys: pa.Table) -> pa.Table | None:
        """Return the rows of ``version`` whose key columns equal a row of ``keys``.

        Reads only what may hold them: a file whose partition values, whose known key
        range (see :meth:`repeated_keys`) or whose row groups' min/max statistics exclude
        every key is skipped; of the others the key columns are read first, and the whole
        rows only of row groups that hold a key. Returns None when the version's files
        cannot be read one by one (deletion vectors, column mapping). Rows have the
        version's schema, in segment order.

        Raises:
            PermissionDenied, VersionError, NotFound: as :meth:`__call__`.
        """
        self._db.authorizer.check("read", "read")
        _log, plan = self._plan_of(version)
        if plan is None:
            return None
        snapshot = plan.snapshot
        schema = snapshot.schema
        names = keys.column_names
        keys = keys.cast(pa.schema([schema.field(n) for n in names]))
        fs = table_filesystem(snapshot.uri, snapshot.storage_options)
        found: list[pa.Table] = []
        for i, data_file in enumerate(plan.files):
            with self._lock:
                info = self._file_keys.get((plan.keys[i], tuple(names)))
            if info is not None and not info.may_hold(keys):
                continue
            rows = _rows_with_keys(fs, plan, data_file, keys)
            if rows is not None and rows.num_rows:
                found.append(rows)
        if not found:
            return schema.empty_table()
        return pa.concat_tables(found)

    def repeated_keys(self, version: int, key: Sequence[str]) -> pa.Table | None:
        """Return the key values that ``version`` holds more than once (usually none).

        Incremental: each data file's key range and the keys it repeats are read once
        (files are immutable) and remembered; the key columns of several files are read
        together only where their ranges overlap. A key of several columns, or one that is
        a partition column, reads every file's keys (remembered per version). None when
        the version's files cannot be read one by one.
        """
        self._db.authorizer.check("read", "read")
        names = tuple(key)
        memo = (version, names)
        with self._lock:
            known = self._repeated.get(memo)
        if known is not None:
            return known
        _log, plan = self._plan_of(version)
        if plan is None:
            return None
        snapshot = plan.snapshot
        fs = table_filesystem(snapshot.uri, snapshot.storage_options)
        schema = pa.schema([snapshot.schema.field(k) for k in names])
        if len(names) == 1 and names[0] not in snapshot.partition_columns:
            repeated = self._repeated_by_ranges(fs, plan, schema)
        else:
            repeated = _repeats([_key_columns(fs, plan, f, schema) for f in plan.files], schema)
        with self._lock:
            if len(self._repeated) >= 4:
                self._repeated.pop(next(iter(self._repeated)))
            self._repeated[memo] = repeated
        return repeated

    def _repeated_by_ranges(self, fs: pafs.FileSystem, plan: _Plan, schema: pa.Schema) -> pa.Table:
        names = tuple(schema.names)
        infos: list[_FileKeys] = []
        for i, data_file in enumerate(plan.files):
            memo = (plan.keys[i], names)
            with self._lock:
                info = self._file_keys.get(memo)
            if info is None:
                info = _FileKeys.of(_key_columns(fs, plan, data_file, schema))
                with self._lock:
                    if len(self._file_keys) >= _KEY_MEMO:
                        self._file_keys.clear()
                    self._file_keys[memo] = info
            infos.append(info)
        found = [info.repeated for info in infos if info.repeated.num_rows]
        if any(info.nulls for info in infos):  # NULL keys: no range to compare
            return _repeats([_key_columns(fs, plan, f, schema) for f in plan.files], schema)
        order = sorted((i for i, info in enumerate(infos) if info.rows), key=lambda i: infos[i].low)
        group: list[int] = []
        high: Any = None
        for i in [*order, -1]:
            if i >= 0 and group and infos[i].low <= high:
                group.append(i)
                high = max(high, infos[i].high)
                continue
            if len(group) > 1:  # files whose key ranges overlap: join their keys
                tables = [_key_columns(fs, plan, plan.files[j], schema) for j in group]
                found.append(_repeats(tables, schema))
            if i >= 0:
                group, high = [i], infos[i].high
        if not found:
            return schema.empty_table()
        union = pa.concat_tables([t.cast(schema) for t in found])
        return union.group_by(schema.names).aggregate([]).select(schema.names).cast(schema)

    def close(self) -> None:
        """Stop the rendering threads (renderings stay readable)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)

    def key_of(
        self,
        snapshot: Snapshot,
        data_file: DataFile,
        modification_time: int,
        *,
        schema_digest: str | None = None,
    ) -> str:
        """Return the cache key of one data file's segment (a hex SHA-256).

        The key covers the table (its Delta id and URI), the file (path, size,
        modification time, partition values), the schema and partition columns, and
        :data:`CODEC_VERSION`. Memoised per file: a version of a table with many files
        costs a dictionary lookup per file it shares with earlier versions.
        """
        schema_digest = schema_digest or _schema_digest(snapshot.schema)
        memo = (data_file.path, data_file.size, modification_time, schema_digest, snapshot.uri)
        key = self._keys.get(memo)
        if key is None:
            material = [
                "file",
                CODEC_VERSION,
                self._identity(),
                snapshot.uri,
                data_file.path,
                data_file.size,
                modification_time,
                data_file.serialized_partition_values(snapshot.schema),
                list(snapshot.partition_columns),
                schema_digest,
            ]
            key = _digest(material)
            with self._lock:
                if len(self._keys) >= _KEY_MEMO:
                    self._keys.clear()
                self._keys[memo] = key
        return key

    # -- planning ----------------------------------------------------------------------

    def _identity(self) -> str:
        if self._table_id is None:
            log = self._db._log
            with log.lock:
                self._table_id = str(log.table.metadata().id).encode()
        return self._table_id.decode()

    def _plan_of(self, version: int) -> tuple[DeltaLog, _Plan | None]:
        """Return a log at ``version`` and its plan (None: not readable file by file).

        The table's own log when it has ``version`` loaded (the usual case: the current
        version; no other snapshot to load), else a time-travel snapshot.
        """
        live: DeltaLog = self._db._log
        with live.lock:  # writers through db hold it: the version cannot move meanwhile
            if live.version == version:
                try:
                    return live, self._plan(live)
                except InvalidOperation:
                    return live, None
        log: DeltaLog = self._db._snapshot(version, None)
        try:
            return log, self._plan(log)
        except InvalidOperation:
            return log, None

    def _plan(self, log: DeltaLog) -> _Plan:
        """Resolve the version's files in segment order (InvalidOperation: not per file)."""
        snapshot = snapshot_of(log)
        if snapshot.physical_schema is not None or any(f.deleted_rows for f in snapshot.files):
            # column mapping (physical names) or deletion vectors: delta-rs' scan applies
            # them; a file read on its own would not
            raise InvalidOperation("the data files are not plain Parquet")
        actions = log.add_actions()
        mtimes = dict(
            zip(
                (_unquote(p) for p in actions.column("path").to_pylist()),
                actions.column("modification_time").to_pylist(),
                strict=True,
            )
        )
        order = sorted(snapshot.files, key=lambda f: (int(mtimes.get(f.path) or 0), f.path))
        digest = _schema_digest(snapshot.schema)
        keys = tuple(
            self.key_of(snapshot, f, int(mtimes.get(f.path) or 0), schema_digest=digest)
            for f in order
        )
        return _Plan(
            snapshot=snapshot,
            files=tuple(order),
            keys=keys,
            header=self._header(snapshot.schema),
            read_only=log.read_only,
        )

    def _header(self, schema: pa.Schema) -> bytes:
        """Return the header line, itself cached (rendering it costs pyarrow's lazy imports)."""
        key = _digest(["header", CODEC_VERSION, _schema_digest(schema)])
        seg = self._cached(key)
        if seg is None:
            seg = self.store.write(key, [(render_csv(schema.empty_table()), 1)])
            self._live[key] = seg
        return bytes(seg.view)

    def _cached(self, key: str) -> Segment | None:
        seg = self._live.get(key)
        if seg is None:
            seg = self.store.open(key)
            if seg is not None:
                self._live[key] = seg
        return seg

    # -- rendering ---------------------------------------------------------------------

    def _executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    max_workers=self._workers, thread_name_prefix="posixlake-segments"
                )
            return self._pool

    def _render(self, plan: _Plan, missing: list[int]) -> Iterator[tuple[int, Segment]]:
        """Render the files at ``missing`` into the store, yielding them as they complete.

        Work is split into row groups when there are fewer files than workers, and at
        most two units per worker are in flight (memory stays bounded).
        """
        snapshot = plan.snapshot
        fs = table_filesystem(snapshot.uri, snapshot.storage_options)
        units: list[_Unit] = []
        split = len(missing) < self._workers
        for i in missing:
            if split:
                groups = _row_groups(fs, snapshot, plan.files[i], plan.read_only)
                units.extend(_Unit(i, (g,)) for g in range(groups))
                if groups == 0:
                    units.append(_Unit(i, ()))
            else:
                units.append(_Unit(i))
        pool = self._executor()
        window = 2 * self._workers
        pending: deque[tuple[_Unit, Future[tuple[list[bytes], int]]]] = deque()
        queue = iter(units)

        def fill() -> None:
            while len(pending) < window:
                unit = next(queue, None)
                if unit is None:
                    return
                task = pool.submit(_render_unit, fs, plan, unit)
                pending.append((unit, task))

        def parts_of(index: int) -> Iterator[tuple[bytes, int]]:
            while pending and pending[0][0].index == index:
                _, task = pending.popleft()
                fill()
                chunks, rows = task.result()
                for chunk in chunks:
                    yield chunk, 0
                yield b"", rows

        try:
            fill()
            while pending:
                index = pending[0][0].index
                seg = self.store.write(plan.keys[index], parts_of(index))
                self._live[seg.key] = seg
                yield index, seg
        finally:
            for _, task in pending:
                task.cancel()

    def _whole(self, log: DeltaLog, version: int) -> SegmentedRendering:
        """Fallback for tables not readable file by file: one segment, the whole version."""
        with log.lock:
            schema = log.arrow_schema
        key = _digest(
            ["whole", CODEC_VERSION, self._identity(), log.uri, version, _schema_digest(schema)]
        )
        seg = self._cached(key)
        if seg is None:
            table = self._db.to_arrow(version=version)
            seg = self.store.write(
                key,
                ((c, 0) for c in iter_render_csv(table, header=False, schema=table.schema)),
            )
            self._live[key] = seg
            with self._lock:
                self.stats.whole += 1
        else:
            with self._lock:
                self.stats.reused += 1
        return SegmentedRendering(version, self._header(schema), [seg])


# -- helpers ---------------------------------------------------------------------------------


def _warm_up() -> None:
    render_csv(pa.table({"x": pa.array([1.5], pa.float64()), "y": pa.array(["a"])}))


def _digest(material: Any) -> str:
    text = json.dumps(material, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _schema_digest(schema: pa.Schema) -> str:
    return hashlib.sha256(schema.serialize().to_pybytes()).hexdigest()


def _unquote(path: str) -> str:
    import urllib.parse

    return urllib.parse.unquote(path)


def _open_file(
    fs: pafs.FileSystem, snapshot: Snapshot, data_file: DataFile, read_only: bool
) -> Any:
    try:
        return fs.open_input_file(data_file.path)
    except FileNotFoundError as err:
        if read_only:
            raise VersionError(
                f"version {snapshot.version} cannot be read: its data file {data_file.path} "
                "was removed (VACUUM deletes the files of old versions)"
            ) from err
        raise NotFound(f"data file {data_file.path} of {snapshot.uri} is missing") from err
    except OSError as err:
        raise IoError(f"cannot open {data_file.path} of {snapshot.uri}: {err}") from err


def _row_groups(
    fs: pafs.FileSystem, snapshot: Snapshot, data_file: DataFile, read_only: bool
) -> int:
    with _open_file(fs, snapshot, data_file, read_only) as handle:
        return int(pq.ParquetFile(handle).metadata.num_row_groups)


def _render_unit(fs: pafs.FileSystem, plan: _Plan, unit: _Unit) -> tuple[list[bytes], int]:
    """Render one unit's rows as CSV lines (runs on a worker thread)."""
    snapshot = plan.snapshot
    data_file = plan.files[unit.index]
    if unit.row_groups == ():
        return [], 0
    schema = snapshot.schema
    parts = snapshot.partition_columns
    with _open_file(fs, snapshot, data_file, plan.read_only) as handle:
        pf = pq.ParquetFile(handle, coerce_int96_timestamp_unit="us")
        present = set(pf.schema_arrow.names)
        wanted = [f.name for f in schema if f.name not in parts and f.name in present]
        if pf.metadata.num_rows == 0:
            return [], 0
        groups = list(unit.row_groups) if unit.row_groups is not None else None
        small = _small_dictionaries(pf, schema, wanted, groups)
        if small:
            pf = pq.ParquetFile(handle, coerce_int96_timestamp_unit="us", read_dictionary=small)
        batches = pf.iter_batches(
            batch_size=_BATCH_ROWS, row_groups=groups, columns=wanted, use_threads=False
        )
        rows = 0

        def assembled() -> Iterator[pa.RecordBatch]:
            nonlocal rows
            for batch in batches:
                rows += batch.num_rows
                yield _assemble(batch, schema, parts, data_file)

        chunks = list(iter_render_csv(assembled(), header=False, schema=schema))
    return chunks, rows


def _rows_with_keys(
    fs: pafs.FileSystem, plan: _Plan, data_file: DataFile, keys: pa.Table
) -> pa.Table | None:
    """Return the rows of one file whose key equals a row of ``keys`` (None: none can)."""
    import pyarrow.compute as pc

    snapshot = plan.snapshot
    schema = snapshot.schema
    parts = snapshot.partition_columns
    candidates = keys
    for name in keys.column_names:
        if name in parts:  # one value for the whole file
            value = data_file.partition_values.get(name)
            column = candidates.column(name)
            mask = pc.is_null(column) if value is None else pc.equal(column, value)
            candidates = candidates.filter(pc.fill_null(mask, False))
    if candidates.num_rows == 0:
        return None
    with _open_file(fs, snapshot, data_file, plan.read_only) as handle:
        pf = pq.ParquetFile(handle, coerce_int96_timestamp_unit="us")
        meta = pf.metadata
        index = {meta.schema.column(i).path: i for i in range(meta.num_columns)}
        groups = []
        for g in range(meta.num_row_groups):
            if _may_hold(meta.row_group(g), index, candidates, parts):
                groups.append(g)
        if not groups:
            return None
        present = set(pf.schema_arrow.names)
        names = candidates.column_names
        stored = [n for n in names if n not in parts and n in present]
        if stored:  # the key columns first: the whole rows only where a key is
            key_rows = pf.read_row_groups(groups, columns=stored, use_threads=False)
            probe = candidates.select(stored)
            key_rows = key_rows.cast(probe.schema)
            key_rows = key_rows.append_column("__i", pa.array(range(key_rows.num_rows), pa.int64()))
            hits = key_rows.join(probe, keys=stored, join_type="left semi").column("__i")
            if len(hits) == 0:
                return None
        wanted = [f.name for f in schema if f.name not in parts and f.name in present]
        read = pf.read_row_groups(groups, columns=wanted, use_threads=False)
        if stored:
            read = read.take(hits.take(pc.sort_indices(hits)))  # in file order
    batches = [_assemble(b, schema, parts, data_file) for b in read.to_batches()]
    if not batches:
        return None
    rows = pa.Table.from_batches(batches, schema=batches[0].schema).cast(schema)
    return rows.join(candidates, keys=names, join_type="left semi").select(schema.names)


def _key_columns(
    fs: pafs.FileSystem, plan: _Plan, data_file: DataFile, schema: pa.Schema
) -> pa.Table:
    """Return the columns of ``schema`` (key columns) of one data file's rows."""
    snapshot = plan.snapshot
    parts = snapshot.partition_columns
    with _open_file(fs, snapshot, data_file, plan.read_only) as handle:
        pf = pq.ParquetFile(handle, coerce_int96_timestamp_unit="us")
        present = set(pf.schema_arrow.names)
        wanted = [f.name for f in schema if f.name not in parts and f.name in present]
        n = pf.metadata.num_rows
        read = pf.read(columns=wanted, use_threads=False) if wanted else None
    arrays: list[pa.Array[Any] | pa.ChunkedArray[Any]] = []
    for f in schema:
        if f.name in parts:
            value = data_file.partition_values.get(f.name)
            arrays.append(
                pa.nulls(n, f.type) if value is None else pa.repeat(value, n).cast(f.type)
            )
        elif read is not None and f.name in wanted:
            arrays.append(read.column(f.name).cast(f.type))
        else:
            arrays.append(pa.nulls(n, f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def _may_hold(group: Any, index: dict[str, int], keys: pa.Table, parts: Sequence[str]) -> bool:
    """Whether a row group's min/max statistics admit some row of ``keys`` (True: unknown)."""
    import pyarrow.compute as pc

    mask: Any = None
    for name in keys.column_names:
        if name in parts:
            continue
        i = index.get(name)
        if i is None:
            return True
        stats = group.column(i).statistics
        if stats is None or not stats.has_min_max:
            return True
        column = keys.column(name)
        try:
            low = pa.scalar(stats.min, column.type)
            high = pa.scalar(stats.max, column.type)
            inside = pc.and_(pc.greater_equal(column, low), pc.less_equal(column, high))
        except (pa.ArrowException, TypeError, ValueError):
            return True  # statistics of a type we do not compare: read the group
        inside = pc.fill_null(inside, stats.null_count is None or stats.null_count > 0)
        mask = inside if mask is None else pc.and_(mask, inside)
    return mask is None or bool(pc.any(mask).as_py())


def _small_dictionaries(
    pf: pq.ParquetFile, schema: pa.Schema, wanted: Sequence[str], groups: list[int] | None
) -> list[str]:
    """Return the string columns that are dictionary-encoded with a small dictionary in
    every row group to read: read as dictionaries, the codec renders each distinct value
    once (a writer falls back from a dictionary that grows past ~1 MiB, so small means
    that every page uses it).
    """
    text = [
        f.name
        for f in schema
        if f.name in wanted and (pa.types.is_string(f.type) or pa.types.is_large_string(f.type))
    ]
    if not text:
        return []
    meta = pf.metadata
    index = {meta.schema.column(i).path: i for i in range(meta.num_columns)}
    out = []
    for name in text:
        i = index.get(name)
        if i is None:
            continue
        ok = True
        for g in groups if groups is not None else range(meta.num_row_groups):
            col = meta.row_group(g).column(i)
            start = col.dictionary_page_offset
            if not col.has_dictionary_page or not start:
                ok = False
                break
            if col.data_page_offset - start > _SMALL_DICTIONARY:
                ok = False
                break
        if ok:
            out.append(name)
    return out


def _assemble(
    batch: pa.RecordBatch, schema: pa.Schema, parts: Sequence[str], data_file: DataFile
) -> pa.RecordBatch:
    """Give a file's batch the table's columns: partition values, NULLs for missing ones."""
    n = batch.num_rows
    names = batch.schema.names
    arrays: list[pa.Array[Any]] = []
    for f in schema:
        if f.name in parts:
            value = data_file.partition_values.get(f.name)
            if value is None:
                arrays.append(pa.nulls(n, f.type))
            else:
                # one dictionary value: the codec renders it once
                indices = pa.repeat(pa.scalar(0, pa.int32()), n)
                arrays.append(pa.DictionaryArray.from_arrays(indices, pa.array([value], f.type)))
        elif f.name in names:
            col = batch.column(names.index(f.name))
            kind = col.type
            if isinstance(kind, pa.DictionaryType) and kind.value_type == f.type:
                arrays.append(col)  # read as a dictionary (see _small_dictionaries)
            else:
                arrays.append(col if kind == f.type else col.cast(f.type))
        else:
            arrays.append(pa.nulls(n, f.type))
    return pa.RecordBatch.from_arrays(arrays, names=schema.names)
