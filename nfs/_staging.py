"""Staged writes to a table file: the new content, as an overlay on a base.

A :class:`Staging` is the file as one writer sees it while it writes: the base content
(the bytes of the version it started from), with the bytes it wrote laid over it, cut at
its last truncation. Only the written range is held in memory (``buf``, covering
``[start, start + len(buf))``); the base is read where the writer did not write, and
never copied as a whole: an ``echo >>`` on a file of any size costs the size of its
line (and of the page the client resends).

Invariant: content bytes ``[0, start)`` are the base's; ``[start, start + len(buf))`` are
``buf``; ``[start + len(buf), base_limit)`` are the base's again; the size is
``max(start + len(buf), base_limit)``; ``start <= base_limit`` whenever bytes below
``start`` are read. Pure: no I/O of its own, no clock (the caller stamps times).
"""

from __future__ import annotations

from typing import Final, Protocol

__all__ = ["Base", "BytesBase", "Staging", "read_all"]

_LF: Final = 0x0A


class Base(Protocol):
    """Immutable bytes read by range (a rendering of a version, or bytes in memory)."""

    @property
    def size(self) -> int:
        """The length in bytes."""
        ...

    def read(self, offset: int, count: int) -> tuple[memoryview | bytes, bool]:
        """Return exactly ``min(count, size - offset)`` bytes at ``offset``, and EOF."""
        ...


class BytesBase:
    """A :class:`Base` over bytes in memory."""

    def __init__(self, data: bytes | memoryview) -> None:
        """Wrap ``data`` (not copied)."""
        self._view = memoryview(data)

    @property
    def size(self) -> int:
        """The length in bytes."""
        return len(self._view)

    def read(self, offset: int, count: int) -> tuple[memoryview | bytes, bool]:
        """Return up to ``count`` bytes at ``offset`` (a view) and whether EOF is reached."""
        end = min(len(self._view), offset + count)
        return self._view[offset:end], end >= len(self._view)


def read_all(base: Base, start: int = 0, end: int | None = None) -> memoryview:
    """Return ``base`` bytes ``[start, end)`` (a view when one read gives them, else a copy)."""
    stop = base.size if end is None else min(end, base.size)
    if start >= stop:
        return memoryview(b"")
    data, _ = base.read(start, stop - start)
    return memoryview(data)


class Staging:
    """The pending new content of one table file.

    Attributes:
        base_version: the table version the writer started from.
        touched: when (caller's clock) it was last written or truncated.
        mtime: when (wall clock, seconds) it was last written or truncated.
        written: whether any WRITE came (a staging of truncations alone is not content).
    """

    def __init__(self, base: Base, *, base_version: int, touched: float, mtime: float) -> None:
        """Start from ``base`` (the content of ``base_version``); nothing written yet."""
        self.base_version = base_version
        self._base = base
        self._base_size = base.size
        self._base_limit = self._base_size
        self._start = self._base_size
        self._buf = bytearray()
        self.touched = touched
        self.mtime = mtime
        self.written = False

    @property
    def base(self) -> Base:
        """The content the writer started from."""
        return self._base

    @property
    def size(self) -> int:
        """The size of the new content."""
        return max(self._start + len(self._buf), self._base_limit)

    def _base_bytes(self, start: int, end: int) -> memoryview:
        return read_all(self._base, start, end)

    def _extend_to(self, offset: int) -> None:
        """Make ``buf`` reach ``offset``: base bytes where the base reaches, else zeros."""
        have = self._start + len(self._buf)
        if offset <= have:
            return
        upto = min(offset, self._base_limit)
        if upto > have:
            self._buf += self._base_bytes(have, upto)
        if offset > self._start + len(self._buf):
            self._buf += bytes(offset - self._start - len(self._buf))

    def write(self, offset: int, data: bytes | memoryview, *, touched: float, mtime: float) -> None:
        """Write ``data`` at ``offset`` (a hole before it reads as base bytes or zeros)."""
        if offset < self._start:
            # below the written range: bring the base bytes in between into buf
            self._buf[0:0] = self._base_bytes(offset, min(self._start, self._base_limit))
            self._start = offset
        self._extend_to(offset)
        pos = offset - self._start
        self._buf[pos : pos + len(data)] = data
        self.touched, self.mtime = touched, mtime
        self.written = True

    def truncate(self, size: int, *, touched: float, mtime: float) -> None:
        """Set the size: cut, or extend with zeros."""
        current = self.size
        if size < current:
            if size <= self._start:
                self._buf.clear()
                self._start = min(self._start, size)
            else:
                del self._buf[size - self._start :]
            self._base_limit = min(self._base_limit, size)
        else:
            self._extend_to(current)  # the base tail becomes part of buf, then zeros
            self._base_limit = min(self._base_limit, current)
            self._extend_to(size)
        self.touched, self.mtime = touched, mtime

    def read(self, offset: int, count: int) -> tuple[bytes, bool]:
        """Return up to ``count`` bytes at ``offset`` and whether the end is reached."""
        size = self.size
        if offset >= size:
            return b"", True
        end = min(size, offset + count)
        lo = self._start
        if lo <= offset and end <= lo + len(self._buf):  # within what was written: one copy
            with memoryview(self._buf) as view:
                return view[offset - lo : end - lo].tobytes(), end >= size
        return bytes(self._range(offset, end)), end >= size

    def _range(self, start: int, end: int) -> bytearray:
        out = bytearray()
        lo, hi = self._start, self._start + len(self._buf)
        if start < lo:
            out += self._base_bytes(start, min(end, lo))
        if end > lo and start < hi:
            out += self._buf[max(start, lo) - lo : min(end, hi) - lo]
        if end > hi:
            out += self._base_bytes(max(start, hi), min(end, self._base_limit))
        return out

    def content(self) -> memoryview:
        """Return the whole new content (copies the base where it is still used).

        The view may share this staging's buffer: release it before writing again.
        """
        if self._start == 0 and self._start + len(self._buf) >= self._base_limit:
            return memoryview(self._buf)
        return memoryview(self._range(0, self.size))

    def appended(self) -> memoryview | None:
        """Return the bytes added after the base when the content is the base plus more.

        That is: the base is non-empty, whole (no truncation cut it) and ends a line, the
        bytes written over it equal it (a client resending the page it had), and
        something follows it. Costs the written range, not the file.
        """
        size = self._base_size
        if size == 0 or self._base_limit < size or self.size <= size or self._start > size:
            return None  # an empty base has no header: the content is a new file
        if self._base_bytes(size - 1, size)[0] != _LF:
            return None  # the base does not end a line: the first added bytes continue it
        over = size - self._start
        if over > 0 and bytes(self._buf[:over]) != bytes(self._base_bytes(self._start, size)):
            return None
        return memoryview(bytes(self._buf[over:]))

    def same_as_base(self) -> bool:
        """Return whether the content is byte for byte the base."""
        if self.size != self._base_size or self._base_limit != self._base_size:
            return False
        return bytes(self._buf) == bytes(
            self._base_bytes(self._start, self._start + len(self._buf))
        )

    def on_line_boundary(self) -> bool:
        """Return whether the content is empty or ends with a line feed."""
        size = self.size
        if size == 0:
            return True
        return self._range(size - 1, size)[0] == _LF

    def __repr__(self) -> str:
        return f"Staging(base_version={self.base_version}, size={self.size})"
