"""Staged writes to a table file: the new content, as an overlay on a base.

A :class:`Staging` is the file as one writer sees it while it writes: the base content
(the bytes of the version it started from), with the bytes it wrote laid over it, cut at
its last truncation. Only the written range is held (``buf``, covering
``[start, start + len(buf))``): in memory while small, in an unlinked temporary file
past :data:`SPILL_AT` (a whole rewrite of a file of gigabytes does not hold it in
memory); the base is read where the writer did not write, and never copied as a whole:
an ``echo >>`` on a file of any size costs the size of its line (and of the page the
client resends).

Invariant: content bytes ``[0, start)`` are the base's; ``[start, start + len(buf))`` are
``buf``; ``[start + len(buf), base_limit)`` are the base's again; the size is
``max(start + len(buf), base_limit)``; ``start <= base_limit`` whenever bytes below
``start`` are read. Pure: no I/O of its own, no clock (the caller stamps times).
"""

from __future__ import annotations

import os
import tempfile
import weakref
from typing import IO, Final, Protocol

__all__ = ["SPILL_AT", "Base", "BytesBase", "OwnContent", "SpillBuffer", "Staging", "read_all"]

_LF: Final = 0x0A
SPILL_AT: Final = 64 << 20
"""Written bytes past this many move from memory to a temporary file."""
_COPY: Final = 4 << 20


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


class SpillBuffer:
    """Bytes that grow and shrink like a ``bytearray``, in memory up to ``spill_at`` bytes,
    then in an unlinked temporary file (read and written by offset: never mapped whole)."""

    def __init__(self, *, spill_at: int = SPILL_AT, directory: str | None = None) -> None:
        """Start empty; spill into ``directory`` (default: the system's temporary one)."""
        self._mem: bytearray | None = bytearray()
        self._file: IO[bytes] | None = None
        self._len = 0
        self._spill_at = spill_at
        self._dir = directory
        self._closer: weakref.finalize[[], SpillBuffer] | None = None

    def __len__(self) -> int:
        return self._len

    @property
    def spilled(self) -> bool:
        """Whether the bytes live in a file."""
        return self._file is not None

    def _spill(self, upto: int) -> None:
        if self._file is not None or upto <= self._spill_at:
            return
        f = tempfile.TemporaryFile(prefix="posixlake-staging-", dir=self._dir)  # noqa: SIM115  (kept open: the buffer)
        assert self._mem is not None
        os.pwrite(f.fileno(), self._mem, 0)  # by descriptor, as every other access
        self._file, self._mem = f, None
        self._closer = weakref.finalize(self, f.close)  # closed when the buffer goes

    def write_at(self, pos: int, data: bytes | memoryview) -> None:
        """Write ``data`` at ``pos`` (``pos <= len``), extending past the end if it reaches."""
        end = pos + len(data)
        self._spill(end)
        if self._file is None:
            assert self._mem is not None
            self._mem[pos:end] = data
        else:
            os.pwrite(self._file.fileno(), data, pos)
        self._len = max(self._len, end)

    def extend(self, data: bytes | memoryview) -> None:
        """Append ``data``."""
        self.write_at(self._len, data)

    def prepend(self, data: bytes | memoryview) -> None:
        """Insert ``data`` before the first byte (moves the bytes: rare, costs them)."""
        if not data:
            return
        if self._file is None and self._len + len(data) <= self._spill_at:
            assert self._mem is not None
            self._mem[0:0] = data
            self._len += len(data)
            return
        moved = SpillBuffer(spill_at=self._spill_at, directory=self._dir)
        moved.extend(data)
        for pos in range(0, self._len, _COPY):
            moved.extend(self.read(pos, min(self._len, pos + _COPY)))
        self.close()
        self._mem, self._file, self._len = moved._mem, moved._file, moved._len
        if moved._closer is not None:  # the file is ours now
            moved._closer.detach()
            self._closer = weakref.finalize(self, self._file.close) if self._file else None

    def truncate(self, size: int) -> None:
        """Cut to ``size`` bytes (``size <= len``)."""
        if self._file is None:
            assert self._mem is not None
            del self._mem[size:]
        else:
            os.ftruncate(self._file.fileno(), size)
        self._len = min(self._len, size)

    def read(self, start: int, end: int) -> bytes:
        """Return bytes ``[start, end)`` (clipped to the length)."""
        end = min(end, self._len)
        if start >= end:
            return b""
        if self._file is None:
            assert self._mem is not None
            with memoryview(self._mem) as view:
                return view[start:end].tobytes()
        return os.pread(self._file.fileno(), end - start, start)

    def close(self) -> None:
        """Let the bytes go (the temporary file is removed)."""
        if self._closer is not None:
            self._closer()
            self._closer = None
        self._file, self._mem, self._len = None, bytearray(), 0


class Staging:
    """The pending new content of one table file.

    Attributes:
        base_version: the table version the writer started from.
        touched: when (caller's clock) it was last written or truncated.
        mtime: when (wall clock, seconds) it was last written or truncated.
        written: whether any WRITE came (a staging of truncations alone is not content).
    """

    def __init__(
        self,
        base: Base,
        *,
        base_version: int,
        touched: float,
        mtime: float,
        spill_at: int = SPILL_AT,
        spill_dir: str | None = None,
    ) -> None:
        """Start from ``base`` (the content of ``base_version``); nothing written yet.

        ``spill_at`` / ``spill_dir``: see :class:`SpillBuffer`.
        """
        self.base_version = base_version
        self._base = base
        self._base_size = base.size
        self._base_limit = self._base_size
        self._start = self._base_size
        self._buf = SpillBuffer(spill_at=spill_at, directory=spill_dir)
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
            for pos in range(have, upto, _COPY):
                self._buf.extend(self._base_bytes(pos, min(upto, pos + _COPY)))
        gap = offset - self._start - len(self._buf)
        while gap > 0:
            n = min(gap, _COPY)
            self._buf.extend(bytes(n))
            gap -= n

    def write(self, offset: int, data: bytes | memoryview, *, touched: float, mtime: float) -> None:
        """Write ``data`` at ``offset`` (a hole before it reads as base bytes or zeros)."""
        if offset < self._start:
            # below the written range: bring the base bytes in between into buf
            self._buf.prepend(self._base_bytes(offset, min(self._start, self._base_limit)))
            self._start = offset
        self._extend_to(offset)
        self._buf.write_at(offset - self._start, data)
        self.touched, self.mtime = touched, mtime
        self.written = True

    def truncate(self, size: int, *, touched: float, mtime: float) -> None:
        """Set the size: cut, or extend with zeros."""
        current = self.size
        if size < current:
            if size <= self._start:
                self._buf.truncate(0)
                self._start = min(self._start, size)
            else:
                self._buf.truncate(size - self._start)
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
            return self._buf.read(offset - lo, end - lo), end >= size
        return bytes(self._range(offset, end)), end >= size

    def _range(self, start: int, end: int) -> bytearray:
        out = bytearray()
        lo, hi = self._start, self._start + len(self._buf)
        if start < lo:
            out += self._base_bytes(start, min(end, lo))
        if end > lo and start < hi:
            out += self._buf.read(max(start, lo) - lo, min(end, hi) - lo)
        if end > hi:
            out += self._base_bytes(max(start, hi), min(end, self._base_limit))
        return out

    def content(self) -> memoryview:
        """Return the whole new content, copied into memory (prefer :meth:`read`)."""
        return memoryview(self._range(0, self.size))

    def close(self) -> None:
        """Let the written bytes go (a spilled buffer's file is removed)."""
        self._buf.close()

    @property
    def overlay_size(self) -> int:
        """How many bytes were written over (or after) the base."""
        return len(self._buf)

    def overlay_range(self) -> tuple[int, int]:
        """Where the bytes written over (or after) the base lie: ``[lo, hi)``."""
        return self._start, self._start + len(self._buf)

    def overlay(self) -> tuple[int, bytes]:
        """The written bytes over the base and where they start (content that extends
        its base: no truncation cut it)."""
        return self._start, bytes(self._buf.read(0, len(self._buf)))

    def flattened(self) -> Staging:
        """The same content over the first base that is not a Staging (one level deep).

        A client's page after an append is kept as the staging of that append, and its
        next append may be staged over it: flattening keeps the chain short. Only for
        content that extends its base (no truncation cut it).
        """
        base = self._base
        if not isinstance(base, Staging):
            return self
        root = base.flattened()
        low = min(self._start, root._start)
        out = Staging(
            root._base, base_version=root.base_version, touched=self.touched, mtime=self.mtime
        )
        out.write(
            low, memoryview(self._range(low, self.size)), touched=self.touched, mtime=self.mtime
        )
        return out

    def appended_at(self) -> int | None:
        """Return where the bytes added after the base start (the base's size) when the
        content is the base plus more; else None.

        That is: the base is non-empty, whole (no truncation cut it) and ends a line, the
        bytes written over it equal it (a client resending the page it had), and
        something follows it. Compares the resent range a chunk at a time: memory stays
        bounded whatever the size.
        """
        size = self._base_size
        if size == 0 or self._base_limit < size or self.size <= size or self._start > size:
            return None  # an empty base has no header: the content is a new file
        if self._base_bytes(size - 1, size)[0] != _LF:
            return None  # the base does not end a line: the first added bytes continue it
        for pos in range(0, size - self._start, _COPY):
            end = min(size - self._start, pos + _COPY)
            mine = self._buf.read(pos, end)
            if mine != bytes(self._base_bytes(self._start + pos, self._start + end)):
                return None
        return size

    def same_as_base(self) -> bool:
        """Return whether the content is byte for byte the base.

        Bytes below the written range are the base's; past it, the base's too unless a
        truncation cut the base (then the written range reaches the end): so the
        written range alone is compared, also after a truncation rewritten with the
        same bytes.
        """
        if self.size != self._base_size:
            return False
        for pos in range(0, len(self._buf), _COPY):
            end = min(len(self._buf), pos + _COPY)
            mine = self._buf.read(pos, end)
            if mine != bytes(self._base_bytes(self._start + pos, self._start + end)):
                return False
        return True

    def on_line_boundary(self) -> bool:
        """Return whether the content is empty or ends with a line feed."""
        size = self.size
        if size == 0:
            return True
        return self._range(size - 1, size)[0] == _LF

    def __repr__(self) -> str:
        return f"Staging(base_version={self.base_version}, size={self.size})"


class OwnContent(BytesBase):
    """A client's own last edit, as it wrote it (the base of its next edit): not the bytes
    of any version, so a journal keeps them itself, never a shadow's file."""
