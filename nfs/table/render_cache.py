"""The CSV rendering of table versions, cached per version (memory, or a spill file).

A :class:`Rendering` is the exact bytes of one version's ``data.csv``. Small renderings
stay in memory; one that grows past ``spill_threshold`` bytes while it is being rendered
moves to an unlinked temporary file that is memory-mapped, so a large table costs about
its Arrow form plus the threshold while rendering, and page cache afterwards. Reads are
zero-copy ``memoryview`` slices of either form.

:class:`RenderCache` keeps the most recently used renderings (``keep`` of them); a version's
bytes never change, so entries never go stale, they are only evicted. Given a
``segmenter`` (:class:`nfs.table.segments.Segmenter`), it keeps segmented renderings instead:
the same surface (``version``, ``size``, ``read``, ``data``), built from per-data-file
segments cached on disk, so a new version costs only the files it adds.
"""

from __future__ import annotations

import logging
import mmap
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from typing import Final, Generic, Protocol, TypeVar, overload

__all__ = ["DEFAULT_SPILL_THRESHOLD", "RenderCache", "Rendering", "VersionBytes"]

logger = logging.getLogger(__name__)

DEFAULT_SPILL_THRESHOLD: Final = 64 << 20
Chunks = Iterable[bytes | bytearray | memoryview]


class VersionBytes(Protocol):
    """The bytes of one version's ``data.csv``, as the read side serves them."""

    @property
    def version(self) -> int:
        """The table version."""
        ...

    @property
    def size(self) -> int:
        """The length in bytes."""
        ...

    @property
    def data(self) -> memoryview:
        """All the bytes, contiguous (may materialise them)."""
        ...

    def read(self, offset: int, count: int) -> tuple[memoryview | bytes, bool]:
        """Return up to ``count`` bytes at ``offset`` and whether they reach the end."""
        ...


R = TypeVar("R", bound=VersionBytes)


class Rendering:
    """The immutable bytes of one rendered version.

    Attributes:
        version: the table version.
        size: the length in bytes.
        spilled: whether the bytes live in a temporary file rather than in memory.
    """

    def __init__(self, version: int, chunks: Chunks, *, spill_threshold: int) -> None:
        """Consume ``chunks`` (the CSV bytes, in order), spilling past ``spill_threshold``."""
        self.version = version
        self.spilled = False
        self._mmap: mmap.mmap | None = None
        it = iter(chunks)
        buf = bytearray()
        for chunk in it:
            buf += chunk
            if len(buf) > spill_threshold:
                self._spill(buf, it)
                return
        self.size = len(buf)
        self._view = memoryview(buf).toreadonly()

    def _spill(self, head: bytearray, rest: Iterator[bytes | bytearray | memoryview]) -> None:
        with tempfile.TemporaryFile(prefix="posixlake-render-") as f:
            f.write(head)
            del head[:]
            for chunk in rest:
                f.write(chunk)
            f.flush()
            self.size = f.tell()
            # the mapping keeps the (unlinked) file alive after it is closed
            self._mmap = mmap.mmap(f.fileno(), self.size, access=mmap.ACCESS_READ)
        self.spilled = True
        self._view = memoryview(self._mmap)

    @property
    def data(self) -> memoryview:
        """Return all the bytes (a read-only view, no copy)."""
        return self._view

    def read(self, offset: int, count: int) -> tuple[memoryview, bool]:
        """Return up to ``count`` bytes at ``offset`` (a view, no copy) and whether EOF is reached.

        An offset at or past the end gives an empty view and True.
        """
        if offset >= self.size:
            return self._view[0:0], True
        end = min(self.size, offset + count)
        return self._view[offset:end], end >= self.size

    def __repr__(self) -> str:
        where = "file" if self.spilled else "memory"
        return f"Rendering(version={self.version}, size={self.size}, in {where})"


class RenderCache(Generic[R]):
    """Renderings of recent versions, rendered on first use and kept LRU.

    Thread-safe. Concurrent requests for the same version render it once.
    """

    @overload
    def __init__(
        self: RenderCache[Rendering],
        render: Callable[[int], Chunks],
        *,
        keep: int = 4,
        spill_threshold: int = DEFAULT_SPILL_THRESHOLD,
    ) -> None: ...

    @overload
    def __init__(
        self: RenderCache[R],
        render: Callable[[int], Chunks] | None = None,
        *,
        keep: int = 4,
        spill_threshold: int = DEFAULT_SPILL_THRESHOLD,
        segmenter: Callable[[int], R],
    ) -> None: ...

    def __init__(
        self,
        render: Callable[[int], Chunks] | None = None,
        *,
        keep: int = 4,
        spill_threshold: int = DEFAULT_SPILL_THRESHOLD,
        segmenter: Callable[[int], R] | None = None,
    ) -> None:
        """Build a cache.

        Args:
            render: version -> the CSV bytes of that version, in chunks (unused with
                ``segmenter``).
            keep: how many renderings to keep (the current one and a few older ones).
            spill_threshold: renderings larger than this go to a temporary file.
            segmenter: version -> its segmented rendering (e.g. a
                :class:`nfs.table.segments.Segmenter`); replaces ``render``.
        """
        if render is None and segmenter is None:
            raise TypeError("RenderCache needs render or segmenter")
        self._render = render
        self._segmenter = segmenter
        self._keep = max(1, keep)
        self._spill = spill_threshold
        self._entries: OrderedDict[int, R] = OrderedDict()
        self._lock = threading.Lock()
        self._rendering: dict[int, threading.Lock] = {}
        self.hits = 0
        """`get` calls answered from the cache."""
        self.misses = 0
        """`get` calls that rendered (or failed to)."""

    def get(self, version: int) -> R:
        """Return the rendering of ``version``, rendering it on a miss.

        Raises:
            Whatever ``render`` raises (nothing is cached then).
        """
        with self._lock:
            hit = self._entries.get(version)
            if hit is not None:
                self._entries.move_to_end(version)
                self.hits += 1
                return hit
            gate = self._rendering.setdefault(version, threading.Lock())
        with gate:
            with self._lock:
                hit = self._entries.get(version)
                if hit is not None:
                    self.hits += 1
                    return hit
                self.misses += 1
            try:
                rendering = self._build(version)
            except BaseException:
                with self._lock:
                    self._rendering.pop(version, None)
                raise
            logger.debug("rendered %r", rendering)
            with self._lock:
                self._entries[version] = rendering
                self._rendering.pop(version, None)
                while len(self._entries) > self._keep:
                    # no explicit close: a reader may still hold it; refcounting frees it
                    self._entries.popitem(last=False)
            return rendering

    def _build(self, version: int) -> R:
        if self._segmenter is not None:
            return self._segmenter(version)
        assert self._render is not None
        built = Rendering(version, self._render(version), spill_threshold=self._spill)
        return built  # type: ignore[return-value]  # R is Rendering without a segmenter

    def peek(self, version: int) -> R | None:
        """Return the cached rendering of ``version`` without rendering (None on a miss)."""
        with self._lock:
            return self._entries.get(version)

    def cached(self) -> list[R]:
        """Return the cached renderings, most recent last."""
        with self._lock:
            return list(self._entries.values())

    def clear(self) -> None:
        """Drop every rendering."""
        with self._lock:
            self._entries.clear()
