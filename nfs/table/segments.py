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

The first rendering of a large table runs on a thread pool: a task per work unit (a file,
or its row groups when there are fewer files than workers) decodes the unit's batches and
queues each to be rendered; the pool renders the queued batches oldest first, and a
decoding thread renders the oldest itself while more than ``workers`` wait, so files are
decoded in parallel, the batches of one file (a table of one big file too) are rendered
in parallel, and no task waits for another. Each segment has a writer thread (one pool
for the process) that starts its units' decoding and writes their rendered chunks in row
order as they come, so the segments of units decoded
side by side are written side by side; a chunk's buffer is used again once it is in its
file (:class:`posixlake.csvcodec.LineBuffers`). At most ``workers + 1`` units are decoded
or written at once (bounded memory); a failure or an abandoned rendering makes every
writer give its temporary file up (no partial segment). A local table's data files are
memory-mapped while they are decoded (column chunks are views of the page cache).
Nearly all the time goes to Parquet decoding and the codec's compiled pass, which
release the GIL. String columns whose Parquet dictionary is small are read as
dictionaries, so the codec renders each distinct value once.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import logging
import os
import queue
import struct
import threading
import weakref
from collections import OrderedDict, deque
from collections.abc import Generator, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from functools import partial
from typing import Any, Final

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from nfs.table.segstore import (
    CODEC_VERSION,
    DEFAULT_CACHE_BYTES,
    MMAP_MIN,
    Segment,
    SegmentedRendering,
    SegmentStore,
    default_cache_dir,
)
from posixlake.csvcodec import LineBuffers, iter_render_csv, iter_render_views, render_csv
from posixlake.database import DatabaseOps
from posixlake.delta import (
    DataFile,
    DeltaLog,
    FileListing,
    Snapshot,
    loaded_log,
    log_at,
    snapshot_since,
)
from posixlake.errors import InvalidOperation, IoError, NotFound, VersionError
from posixlake.storage import table_filesystem

__all__ = [
    "CODEC_VERSION",
    "DEFAULT_CACHE_BYTES",
    "Plan",
    "Segment",
    "SegmentStore",
    "SegmentedRendering",
    "Segmenter",
    "default_cache_dir",
]

logger = logging.getLogger(__name__)

_BATCH_ROWS: Final = 65_536
_SMALL_DICTIONARY: Final = 256 << 10
_INLINE_BYTES: Final = 1 << 20
"""A lone missing file up to this size (a one-row append's) is rendered on the calling
thread, whole: a hop to the pool and a look at its row groups cost more than its rows."""
_DICTIONARY_ROWS: Final = 4096
"""Files with fewer rows are not read again with dictionaries (see `_small_dictionaries`):
a second open of the file costs more than rendering their strings."""
KEY_MEMO: Final = 1 << 20
PLANS_KEPT: Final = 32
"""Plans a Segmenter keeps (more than an append's search for its base looks at, 16)."""

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
class Plan:
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
        self._headers: dict[str, bytes] = {}  # by schema digest (see `_header`)
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._last: FileListing | None = None  # the files of the newest plan, in its order
        self._plans: OrderedDict[tuple[int, int], Plan] = OrderedDict()  # (generation, version)
        # the codec's first use in a process costs the first calls of its compute
        # functions; pay them now, off the first read's path
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
            assert log is not None  # a plan not made is never kept
            return self._whole(log, version)
        return self.rendering(version, plan, range(len(plan.files)))

    def plan(self, version: int) -> Plan | None:
        """Return the files of ``version`` in segment order with their keys (None: the
        table cannot be read file by file, see the module docstring).

        Raises:
            PermissionDenied: the user may not read the table.
            VersionError: no such version.
        """
        self._db.authorizer.check("read", "read")
        return self._plan_of(version)[1]

    def rendering(self, version: int, plan: Plan, indexes: Sequence[int]) -> SegmentedRendering:
        """Return the header plus the segments of ``plan.files[i]`` for ``i`` in ``indexes``
        (in that order), rendering only those no cache holds: a partition's data.csv is
        its files' segments (see :mod:`nfs.table.partitions`).
        """
        segments: dict[int, Segment | None] = {i: self._cached(plan.keys[i]) for i in indexes}
        missing = [i for i, s in segments.items() if s is None]
        if missing:
            for i, seg in self._render(plan, missing):
                segments[i] = seg
        with self._lock:
            self.stats.reused += len(segments) - len(missing)
            self.stats.rendered += len(missing)
        done = [segments[i] for i in indexes]
        assert all(s is not None for s in done)
        return SegmentedRendering(version, plan.header, [s for s in done if s is not None])

    def close(self) -> None:
        """Stop the rendering threads and write the files of pending segments
        (renderings stay readable)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
        self.store.flush()

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
            key = digest(material)
            with self._lock:
                if len(self._keys) >= KEY_MEMO:
                    self._keys.clear()
                self._keys[memo] = key
        return key

    # -- planning ----------------------------------------------------------------------

    def _identity(self) -> str:
        if self._table_id is None:
            log = loaded_log(self._db)
            with log.lock:
                self._table_id = str(log.table.metadata().id).encode()
        return self._table_id.decode()

    def _plan_of(self, version: int) -> tuple[DeltaLog | None, Plan | None]:
        """Return a log at ``version`` and its plan (None: not readable file by file).

        The table's own log when it has ``version`` loaded (the usual case: the current
        version; no other snapshot to load), else a time-travel snapshot. The last
        `PLANS_KEPT` plans are kept (per table generation: a table replaced at its path
        numbers other content), so an earlier version asked for again (an append's
        search for its base, /versions) loads no snapshot of it; then the log is None.
        """
        live = loaded_log(self._db)
        with live.lock:  # writers through db hold it: the version cannot move meanwhile
            generation = live.generation
            if live.version == version:
                try:
                    plan = self._plan(live)
                except InvalidOperation:
                    return live, None
                self._keep_plan((generation, version), plan)
                return live, plan
        with self._lock:
            kept = self._plans.get((generation, version))
        if kept is not None:
            # the version is not the live one (any more): its files may be vacuumed
            return None, dataclasses.replace(kept, read_only=True)
        log = log_at(self._db, version)
        try:
            plan = self._plan(log)
        except InvalidOperation:
            return log, None
        self._keep_plan((generation, version), plan)
        return log, plan

    def _keep_plan(self, key: tuple[int, int], plan: Plan) -> None:
        with self._lock:
            self._plans[key] = plan
            self._plans.move_to_end(key)
            while len(self._plans) > PLANS_KEPT:
                self._plans.popitem(last=False)

    def _plan(self, log: DeltaLog) -> Plan:
        """Resolve the version's files in segment order (InvalidOperation: not per file).

        The files are listed from the last plan's (`snapshot_since`): a version that adds
        a file to a table of thousands converts one add action, not thousands.
        """
        with self._lock:
            last = self._last
        listing = snapshot_since(log, last)
        snapshot = listing.snapshot
        if snapshot.physical_schema is not None or any(f.deleted_rows for f in snapshot.files):
            # column mapping (physical names) or deletion vectors: delta-rs' scan applies
            # them; a file read on its own would not
            raise InvalidOperation("the data files are not plain Parquet")
        # the snapshot's listing carries the modification times: listing the add actions
        # again (O(files), ~20 us a file) only if it did not
        mtimes: dict[str, int | None] = {f.path: f.modification_time for f in snapshot.files}
        if any(m is None for m in mtimes.values()):
            actions = log.add_actions()
            mtimes = dict(
                zip(
                    (_unquote(p) for p in actions.column("path").to_pylist()),
                    actions.column("modification_time").to_pylist(),
                    strict=True,
                )
            )
        files = snapshot.files
        # a stable sort of files mostly in order already (those of the last plan, then
        # the added ones): about one comparison a file
        order = sorted(
            range(len(files)), key=lambda i: (int(mtimes.get(files[i].path) or 0), files[i].path)
        )
        if order != list(range(len(files))):
            listing = listing.reorder(order)
            snapshot = listing.snapshot
        digest = _schema_digest(snapshot.schema)
        keys = tuple(
            self.key_of(snapshot, f, int(mtimes.get(f.path) or 0), schema_digest=digest)
            for f in snapshot.files
        )
        if listing.ids is not None:
            with self._lock:
                if self._last is None or self._last.snapshot.version <= snapshot.version:
                    self._last = listing  # the newest version planned: the next one's base
        return Plan(
            snapshot=snapshot,
            files=snapshot.files,
            keys=keys,
            header=self._header(snapshot.schema, digest),
            read_only=log.read_only,
        )

    def _header(self, schema: pa.Schema, schema_digest: str | None = None) -> bytes:
        """Return the header line, itself cached (rendering it costs pyarrow's lazy
        imports), and kept per schema: every version of a table has the same one."""
        schema_digest = schema_digest or _schema_digest(schema)
        header = self._headers.get(schema_digest)
        if header is not None:
            return header
        key = digest(["header", CODEC_VERSION, schema_digest])
        seg = self._cached(key)
        if seg is None:
            # no rows: not schema.empty_table(), which makes pyarrow import pandas
            header = render_csv(pa.Table.from_batches([], schema=schema))
            seg = self.store.write(key, [(header, 1)])
            self._live[key] = seg
        header = bytes(seg.view)
        with self._lock:
            if len(self._headers) >= 64:
                self._headers.clear()
            self._headers[schema_digest] = header
        return header

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

    def _render(self, plan: Plan, missing: list[int]) -> Iterator[tuple[int, Segment]]:
        """Render the files at ``missing`` into the store, yielding them in that order.

        Work is split into row groups when there are fewer files than workers. A unit's
        task decodes its batches and queues each to be rendered (`_Batches`), so both
        the decoding of several units and the rendering of one unit's batches run in
        parallel. Each segment has a writer (a thread of a pool the process' Segmenters
        share, `_writers`) that starts its units' decoding and writes their chunks in
        order as they are rendered, so the segments of units decoded side by side are
        written side by side: a chunk is in its file, and its buffer free for a later
        batch, soon after it was rendered. At most ``workers + 1`` segments are written
        at once, and about as many units decoded; at most ``workers`` decoded batches
        wait to be rendered (memory stays bounded). A writer waits only for its own
        units' decoding, which never waits: renderings running at once may queue behind
        each other's writers, but never wait for each other in a circle.
        """
        snapshot = plan.snapshot
        # mapped: Parquet reads its column chunks as views of the page cache, not copies
        fs = table_filesystem(snapshot.uri, snapshot.storage_options, mapped=True)
        if len(missing) == 1 and plan.files[missing[0]].size <= _INLINE_BYTES:
            index = missing[0]
            chunks, rows = _render_unit(fs, plan, _Unit(index))
            if sum(len(chunk) for chunk in chunks) < MMAP_MIN:  # a one-row append's
                seg = self.store.write_later(plan.keys[index], b"".join(chunks), rows)
            else:
                parts: list[tuple[memoryview | bytes, int]] = [(c, 0) for c in chunks]
                parts.append((b"", rows))
                seg = self.store.write(plan.keys[index], parts)
            self._live[seg.key] = seg
            yield index, seg
            return
        groups: list[tuple[int, list[_Unit]]] = []
        split = len(missing) < self._workers
        for i in missing:
            if split:
                count = _row_groups(fs, snapshot, plan.files[i], plan.read_only)
                groups.append((i, [_Unit(i, (g,)) for g in range(count)] or [_Unit(i, ())]))
            else:
                groups.append((i, [_Unit(i)]))
        pool, writers = self._executor(), _writers()
        writing = threading.Semaphore(self._workers + 1)  # segments being written at once
        # units a writer has decoding at once: all its row groups' share of workers + 1
        ahead = max(1, (self._workers + 1) // len(groups))
        cancelled = threading.Event()
        # a rendered chunk is in its segment file once its writer asks for the next one;
        # its buffer then takes a later batch (a fresh one costs a page fault per 4 KiB)
        buffers = LineBuffers(keep=64)
        batches = _Batches(pool, snapshot.schema, buffers, cancelled, waiting=self._workers)

        def decode(unit: _Unit) -> tuple[Future[None], _Stream]:
            stream: _Stream = queue.SimpleQueue()
            task = pool.submit(_decode_unit, fs, plan, unit, batches, cancelled, stream)
            task.add_done_callback(partial(_end_if_cancelled, stream))
            return task, stream

        def parts_of(
            units: list[_Unit], decoding: deque[tuple[Future[None], _Stream]]
        ) -> Generator[tuple[Any, int]]:
            later = iter(units)
            decoding.extend(decode(unit) for unit in itertools.islice(later, ahead))
            while decoding:
                stream = decoding[0][1]
                while (batch_task := stream.get()) is not None:
                    views, rows = batch_task.result()  # a failed unit raises here
                    for view in views:
                        yield view, 0
                        buffers.release(view)  # written (SegmentStore.write)
                    yield b"", rows
                decoding.popleft()
                if (unit := next(later, None)) is not None:
                    decoding.append(decode(unit))

        def write(index: int, units: list[_Unit]) -> Segment:
            # waits only for its units' decoding (pool tasks that never wait): a writer
            # queued behind those of other renderings holds nothing a running one needs
            decoding: deque[tuple[Future[None], _Stream]] = deque()
            try:
                if cancelled.is_set():
                    raise _Cancelled
                seg = self.store.write(plan.keys[index], parts_of(units, decoding))
            except BaseException:
                cancelled.set()  # the caller starts no more writers, the others stop
                for task, _ in decoding:
                    task.cancel()
                raise
            finally:
                writing.release()
            self._live[seg.key] = seg
            return seg

        written: list[tuple[int, Future[Segment]]] = []
        try:
            for index, units in groups:
                writing.acquire()
                if cancelled.is_set():
                    writing.release()
                    break
                try:
                    written.append((index, writers.submit(write, index, units)))
                except BaseException:
                    writing.release()
                    raise
            wait([task for _, task in written])
            # a writer's own error, not the cancellation it caused in the others
            errors = [e for _, t in written if (e := t.exception()) is not None]
            for error in sorted(errors, key=lambda e: isinstance(e, _Cancelled)):
                raise error
            for index, done in written:
                yield index, done.result()
        finally:
            cancelled.set()  # units still decoding stop, writers give their files up
            wait([task for _, task in written])  # no writer outlives the rendering

    def _whole(self, log: DeltaLog, version: int) -> SegmentedRendering:
        """Fallback for tables not readable file by file: one segment, the whole version."""
        with log.lock:
            schema = log.arrow_schema
        key = digest(
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

_writer_pool: ThreadPoolExecutor | None = None
_writer_lock = threading.Lock()


def _writers() -> ThreadPoolExecutor:
    """The threads that write segment files, one per segment being written, shared by
    every Segmenter of the process (a lake's tables do not each keep threads of their
    own). A writer waits only for its own units' decoding, which never waits for a
    writer: renderings queued behind others' writers are slower, never stuck."""
    global _writer_pool
    with _writer_lock:
        if _writer_pool is None:
            _writer_pool = ThreadPoolExecutor(
                max_workers=(os.cpu_count() or 1) + 1, thread_name_prefix="posixlake-segment-writer"
            )
        return _writer_pool


def _warm_up() -> None:
    # built from buffers: pa.array([...]) would make pyarrow import pandas (0.25 s, some
    # 40 MB), which nothing in the rendering needs
    x = pa.Array.from_buffers(pa.float64(), 1, [None, pa.py_buffer(struct.pack("=d", 1.5))])
    bounds = pa.py_buffer(struct.pack("=ii", 0, 1))
    y = pa.Array.from_buffers(pa.string(), 1, [None, bounds, pa.py_buffer(b"a")])
    render_csv(pa.RecordBatch.from_arrays([x, y], names=["x", "y"]))


def digest(material: Any) -> str:
    text = json.dumps(material, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _schema_digest(schema: pa.Schema) -> str:
    return hashlib.sha256(schema.serialize().to_pybytes()).hexdigest()


def _unquote(path: str) -> str:
    import urllib.parse

    return urllib.parse.unquote(path)


def open_file(fs: pafs.FileSystem, snapshot: Snapshot, data_file: DataFile, read_only: bool) -> Any:
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
    with open_file(fs, snapshot, data_file, read_only) as handle:
        return int(pq.ParquetFile(handle).metadata.num_row_groups)


_Rendered = tuple[list[memoryview], int]
"""The CSV text of some rows (views of Arrow buffers, see ``iter_render_views``), and how
many rows."""

_Stream = queue.SimpleQueue[Future[_Rendered] | None]
"""A unit's renderings, in row order as its batches are decoded, then None (see
`_decode_unit`)."""


class _Cancelled(Exception):
    """A rendering was abandoned: its writers give their segment files up."""


def _unit_batches(fs: pafs.FileSystem, plan: Plan, unit: _Unit) -> Iterator[pa.RecordBatch]:
    """Decode one unit's rows as batches with the table's columns (see `assemble`)."""
    snapshot = plan.snapshot
    data_file = plan.files[unit.index]
    if unit.row_groups == ():
        return
    schema = snapshot.schema
    parts = snapshot.partition_columns
    with open_file(fs, snapshot, data_file, plan.read_only) as handle:
        pf = pq.ParquetFile(handle, coerce_int96_timestamp_unit="us")
        present = set(pf.schema_arrow.names)
        wanted = [f.name for f in schema if f.name not in parts and f.name in present]
        if pf.metadata.num_rows == 0:
            return
        groups = list(unit.row_groups) if unit.row_groups is not None else None
        few = pf.metadata.num_rows < _DICTIONARY_ROWS
        small = [] if few else _small_dictionaries(pf, schema, wanted, groups)
        if small:
            pf = pq.ParquetFile(handle, coerce_int96_timestamp_unit="us", read_dictionary=small)
        batches = pf.iter_batches(
            batch_size=_BATCH_ROWS, row_groups=groups, columns=wanted, use_threads=False
        )
        for batch in batches:
            yield assemble(batch, schema, parts, data_file)


def _render_batch(batch: pa.RecordBatch, schema: pa.Schema, buffers: LineBuffers) -> _Rendered:
    """Render one batch's rows as CSV lines (runs on a worker thread), into ``buffers``
    (the writer releases each chunk once it is in the segment file)."""
    views = list(iter_render_views(batch, header=False, schema=schema, buffers=buffers))
    return views, batch.num_rows


def _render_unit(fs: pafs.FileSystem, plan: Plan, unit: _Unit) -> _Rendered:
    """Render one unit's rows as CSV lines, on the calling thread."""
    schema = plan.snapshot.schema
    rows = 0

    def counted() -> Iterator[pa.RecordBatch]:
        nonlocal rows
        for batch in _unit_batches(fs, plan, unit):
            rows += batch.num_rows
            yield batch

    views = list(iter_render_views(counted(), header=False, schema=schema))
    return views, rows


class _Batches:
    """Decoded batches waiting to be rendered, oldest first: one queue for every unit of
    a rendering, so the batches the writers wait for are rendered first.

    A unit's task puts each batch it decodes here and hands the pool a task that renders
    the oldest waiting batch (an idle thread renders batches of a unit that another one
    decodes). While more than ``waiting`` batches wait, the decoding thread renders the
    oldest itself before it decodes on: the decoded batches held stay bounded, and no
    thread of the pool ever waits for another (it cannot deadlock).
    """

    def __init__(
        self,
        pool: ThreadPoolExecutor,
        schema: pa.Schema,
        buffers: LineBuffers,
        cancelled: threading.Event,
        waiting: int,
    ) -> None:
        self._pool = pool
        self._schema = schema
        self._buffers = buffers
        self._cancelled = cancelled
        self._waiting = waiting
        self._queue: deque[tuple[pa.RecordBatch, Future[_Rendered]]] = deque()

    def put(self, batch: pa.RecordBatch) -> Future[_Rendered]:
        """Queue ``batch``; return its rendering (see `render_oldest`)."""
        task: Future[_Rendered] = Future()
        self._queue.append((batch, task))  # deque appends and pops are atomic
        self._pool.submit(self.render_oldest)
        while len(self._queue) > self._waiting:
            self.render_oldest()
        return task

    def render_oldest(self) -> None:
        """Render the batch that waited longest, if any, into its task (runs on a thread
        of the pool); an abandoned rendering's batches are dropped unrendered."""
        try:
            batch, task = self._queue.popleft()
        except IndexError:
            return  # rendered already, by the thread that decoded it or another
        if not task.set_running_or_notify_cancel():
            return
        if self._cancelled.is_set():
            task.set_exception(_Cancelled())
            return
        try:
            task.set_result(_render_batch(batch, self._schema, self._buffers))
        except BaseException as err:  # noqa: BLE001 - the writer waiting for it raises it
            task.set_exception(err)


def _decode_unit(
    fs: pafs.FileSystem,
    plan: Plan,
    unit: _Unit,
    batches: _Batches,
    cancelled: threading.Event,
    out: _Stream,
) -> None:
    """Decode one unit's batches into ``batches`` (runs on a thread of the pool), putting
    their renderings into ``out`` in row order as it goes, then None; a failure, or the
    rendering abandoned (``cancelled``), ends ``out`` with a failed rendering instead."""
    try:
        for batch in _unit_batches(fs, plan, unit):
            if cancelled.is_set():
                raise _Cancelled
            out.put(batches.put(batch))
    except BaseException as err:  # noqa: BLE001 - the unit's writer raises it
        out.put(_failed(err))
        return
    out.put(None)


def _end_if_cancelled(out: _Stream, task: Future[None]) -> None:
    """A unit cancelled before it ran still ends its stream (its writer waits on it)."""
    if task.cancelled():
        out.put(_failed(_Cancelled()))


def _failed(err: BaseException) -> Future[_Rendered]:
    task: Future[_Rendered] = Future()
    task.set_exception(err)
    return task


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


def assemble(
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
