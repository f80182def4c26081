"""Staged writes to a table file: the new content, built from WRITEs over a base.

A :class:`Staging` is the file as the writer sees it while it writes: the bytes it wrote,
over the base content (the rendering of the version it started from) where it did not
write, cut at the last truncation. The base is copied only where a WRITE leaves a gap
below it, so a writer that truncates first (``cat x > f``) or rewrites the whole file from
offset 0 (the Linux client's page-widened ``echo >>``) never copies it.

Invariant: ``buf`` holds the new content's bytes ``[0, len(buf))``; bytes
``[len(buf), base_limit)`` are the base's; the size is ``max(len(buf), base_limit)``.
Pure: no I/O, no clock (the caller stamps times).
"""

from __future__ import annotations

from typing import Final

__all__ = ["Staging"]

_LF: Final = 0x0A


class Staging:
    """The pending new content of one table file.

    Attributes:
        base_version: the table version the writer started from.
        touched: when (caller's clock) it was last written or truncated.
        mtime: when (wall clock, seconds) it was last written or truncated.
        written: whether any WRITE came (a staging of truncations alone is not content).
    """

    def __init__(
        self, base: memoryview | bytes, *, base_version: int, touched: float, mtime: float
    ) -> None:
        """Start from ``base`` (the content of ``base_version``); nothing written yet."""
        self.base_version = base_version
        self._base = memoryview(base)
        self._buf = bytearray()
        self._base_limit = len(self._base)
        self.touched = touched
        self.mtime = mtime
        self.written = False

    @property
    def base(self) -> memoryview:
        """The content the writer started from."""
        return self._base

    @property
    def size(self) -> int:
        """The size of the new content."""
        return max(len(self._buf), self._base_limit)

    def _fill_to(self, offset: int) -> None:
        """Make ``buf`` cover ``[0, offset)``: base bytes where the base reaches, else zeros."""
        have = len(self._buf)
        if offset <= have:
            return
        upto = min(offset, self._base_limit)
        if upto > have:
            self._buf += self._base[have:upto]
        if offset > len(self._buf):
            self._buf += bytes(offset - len(self._buf))

    def write(self, offset: int, data: bytes | memoryview, *, touched: float, mtime: float) -> None:
        """Write ``data`` at ``offset`` (a hole before it reads as base bytes or zeros)."""
        self._fill_to(offset)
        end = offset + len(data)
        self._buf[offset:end] = data
        self.touched, self.mtime = touched, mtime
        self.written = True

    def truncate(self, size: int, *, touched: float, mtime: float) -> None:
        """Set the size: cut, or extend with zeros."""
        if size < len(self._buf):
            del self._buf[size:]
        self._base_limit = min(self._base_limit, size)
        self._fill_to(size)
        self.touched, self.mtime = touched, mtime

    def read(self, offset: int, count: int) -> tuple[bytes, bool]:
        """Return up to ``count`` bytes at ``offset`` and whether the end is reached."""
        size = self.size
        if offset >= size:
            return b"", True
        end = min(size, offset + count)
        have = len(self._buf)
        if end <= have:
            out = bytes(self._buf[offset:end])
        elif offset >= have:
            out = bytes(self._base[offset:end])
        else:
            out = bytes(self._buf[offset:]) + bytes(self._base[have:end])
        return out, end >= size

    def content(self) -> memoryview:
        """Return the whole new content (copies the base tail only if it is still used)."""
        if self._base_limit > len(self._buf):
            self._fill_to(self._base_limit)
        return memoryview(self._buf)[: self.size]

    def on_line_boundary(self) -> bool:
        """Return whether the content is empty or ends with a line feed."""
        size = self.size
        if size == 0:
            return True
        if size <= len(self._buf):
            return self._buf[size - 1] == _LF
        return self._base[size - 1] == _LF

    def __repr__(self) -> str:
        return f"Staging(base_version={self.base_version}, size={self.size})"
