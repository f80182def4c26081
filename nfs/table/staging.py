"""Staged writes to a table file: the new content, as an overlay on a base.

A :class:`Staging` is the file as one writer sees it while it writes: the base content
(the bytes of the version it started from), with the bytes it wrote laid over it, cut at
its last truncation. Only the written range is held (``buf``, covering
``[start, start + len(buf))``): in memory while small; past :data:`SPILL_AT` read from
where the writer's journal recorded the same bytes (a whole rewrite of a file of gigabytes
is neither held in memory nor written to disk twice), and only bytes no journal holds in
an unlinked temporary file (see :class:`PieceBuffer`); written bytes equal to the base's
(:meth:`Staging.write_base`: a whole rewrite that changes a row) are held as references to
the base (:meth:`Staging.same_spans` tells the compare at apply which bytes need no
reading); the base is read where the writer did not write, and never copied as a whole:
an ``echo >>`` on a file of any size costs the size of its line (and of the page the
client resends).

Invariant: content bytes ``[0, start)`` are the base's; ``[start, start + len(buf))`` are
``buf``; ``[start + len(buf), base_limit)`` are the base's again; the size is
``max(start + len(buf), base_limit)``; ``start <= base_limit`` whenever bytes below
``start`` are read. Pure: no I/O of its own, no clock (the caller stamps times).
"""

from __future__ import annotations

import bisect
import contextlib
import errno
import os
import tempfile
import weakref
from typing import Final, Protocol

__all__ = [
    "SPILL_AT",
    "Base",
    "BytesBase",
    "OwnContent",
    "PieceBuffer",
    "Source",
    "Staging",
    "read_all",
]

_LF: Final = 0x0A
SPILL_AT: Final = 64 << 20
"""Written bytes past this many leave memory: read from their journal records (or a
temporary file)."""
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


Source = tuple[int, int]
"""Where written bytes already lie in a file: ``(descriptor, offset)``. The bytes there
never change (a journal's record): a spilled buffer reads them there, with a descriptor
of its own (the file may be closed and unlinked: its bytes stay while the buffer lives)."""

_MEM: Final = -1
"""The piece source of bytes held in the buffer's memory (at their buffer position)."""
_BASE: Final = -2
"""The piece source of bytes equal to the base's (the offset: in the base)."""


class PieceBuffer:
    """Bytes that grow and shrink like a ``bytearray``: in memory up to ``spill_at`` bytes,
    then a piece table over files (never mapped whole, never copied whole).

    Written bytes given with a :data:`Source` (a journal record holding them) are read
    there once the buffer spills, never written a second time; bytes written with
    :meth:`write_base` (equal to the base's) are read from ``base``; other bytes (base
    bytes brought in, zeros, a write not journaled) go to an unlinked temporary file. Each piece
    maps buffer bytes ``[start, end)`` to a file offset; a write replaces the pieces of
    its range, a truncation cuts them. Below ``spill_at`` the bytes are also held in
    memory and read from there (a spill then drops the memory of journaled pieces and
    writes the others out).
    """

    def __init__(
        self, *, spill_at: int = SPILL_AT, directory: str | None = None, base: Base | None = None
    ) -> None:
        """Start empty; spill into ``directory`` (default: the system's temporary one);
        ``base``: the bytes :meth:`write_base` refers to."""
        self._base = base
        self._mem: bytearray | None = bytearray()
        self._starts: list[int] = []
        self._pieces: list[tuple[int, int, int]] = []  # (end, descriptor or _MEM, offset)
        self._len = 0
        self._spill_at = spill_at
        self._dir = directory
        self._spill_fd = -1
        self._spill_end = 0
        self._fds: dict[tuple[int, int], int] = {}  # (st_dev, st_ino) -> our descriptor
        self._seen: dict[int, tuple[int, int]] = {}  # in memory: the caller's descriptors
        self._owned: list[int] = []
        self._closer = weakref.finalize(self, _close_all, self._owned)

    def __len__(self) -> int:
        return self._len

    @property
    def spilled(self) -> bool:
        """Whether the bytes live in files."""
        return self._mem is None

    @property
    def pieces(self) -> int:
        """How many pieces map the bytes (for tests and benchmarks)."""
        return len(self._pieces)

    @property
    def spill_bytes(self) -> int:
        """How many bytes went to the temporary file (not read from a source)."""
        return self._spill_end

    def _own(self, source: Source) -> Source:
        """The same bytes through a descriptor of our own (one per file)."""
        fd, offset = source
        st = os.fstat(fd)
        mine = self._fds.get((st.st_dev, st.st_ino))
        if mine is None:
            mine = os.dup(fd)  # readable: the caller's must be
            self._owned.append(mine)
            self._fds[(st.st_dev, st.st_ino)] = mine
        return mine, offset

    def _to_spill_file(self, data: bytes | memoryview) -> Source:
        """Append ``data`` to the temporary file; return where it lies."""
        if self._spill_fd < 0:
            f = tempfile.TemporaryFile(prefix="posixlake-staging-", dir=self._dir)  # noqa: SIM115
            self._spill_fd = os.dup(f.fileno())
            f.close()
            self._owned.append(self._spill_fd)
        at = self._spill_end
        view = memoryview(data).cast("B")
        done = 0
        while done < len(view):
            done += os.pwrite(self._spill_fd, view[done:], at + done)
        self._spill_end += len(view)
        return self._spill_fd, at

    def _cut(self, pos: int) -> int:
        """Make a piece start at ``pos`` (``<= len``); return its index (or the count)."""
        i = bisect.bisect_right(self._starts, pos) - 1
        if i < 0:
            return 0
        start = self._starts[i]
        end, fd, off = self._pieces[i]
        if start == pos:
            return i
        if pos >= end:
            return i + 1
        self._pieces[i] = (pos, fd, off)
        self._starts.insert(i + 1, pos)
        self._pieces.insert(i + 1, (end, fd, off + pos - start))
        return i + 1

    def _place(self, pos: int, end: int, fd: int, off: int) -> None:
        """Map ``[pos, end)`` to ``fd`` at ``off`` (``pos <= len``), replacing what was."""
        i = self._cut(pos)
        j = self._cut(end) if end < self._len else len(self._pieces)
        if i > 0:  # continues the piece before it in the same file: one piece
            p_end, p_fd, p_off = self._pieces[i - 1]
            p_start = self._starts[i - 1]
            if p_end == pos and p_fd == fd and p_off + (pos - p_start) == off:
                self._starts[i - 1 : j] = [p_start]
                self._pieces[i - 1 : j] = [(end, fd, p_off)]
                return
        self._starts[i:j] = [pos]
        self._pieces[i:j] = [(end, fd, off)]

    def _noted(self, source: Source) -> Source:
        """In memory: the caller's descriptor, noted with the file it is (a descriptor of
        our own is taken only at the spill, so a small staging holds none: a page kept
        after its journal went does not keep that file)."""
        fd, offset = source
        if fd not in self._seen:
            st = os.fstat(fd)
            self._seen[fd] = (st.st_dev, st.st_ino)
        return fd, offset

    def _spill(self, upto: int) -> None:
        """Past ``spill_at``: pieces a source holds are read there (a descriptor of our
        own), the others go to the temporary file; memory goes."""
        if self._mem is None or upto <= self._spill_at:
            return
        mem = self._mem
        mine: dict[int, int | None] = {}
        for fd, ident in self._seen.items():
            try:
                st = os.fstat(fd)
                same = (st.st_dev, st.st_ino) == ident
            except OSError:
                same = False
            mine[fd] = self._own((fd, 0))[0] if same else None  # closed, or another file
        pieces = []
        for start, (end, fd, off) in zip(self._starts, self._pieces, strict=True):
            if fd == _BASE:  # read from the base
                pieces.append((end, fd, off))
                continue
            own = None if fd == _MEM else mine[fd]
            if own is None:  # in memory, at its buffer position
                fd, off = self._to_spill_file(memoryview(mem)[start:end])
            else:
                fd = own
            pieces.append((end, fd, off))
        self._pieces = pieces
        self._mem = None
        self._seen.clear()

    def write_at(self, pos: int, data: bytes | memoryview, *, source: Source | None = None) -> None:
        """Write ``data`` at ``pos`` (``pos <= len``), extending past the end if it reaches.

        ``source``: where these same bytes lie in a file that keeps them (a journal
        record): once spilled they are read there, not written again.
        """
        n = len(data)
        if n == 0:
            return
        end = pos + n
        self._spill(end)
        if self._mem is not None:
            self._mem[pos:end] = data
            fd, off = self._noted(source) if source is not None else (_MEM, pos)
        elif source is not None:
            fd, off = self._own(source)
        else:
            fd, off = self._to_spill_file(data)
        self._place(pos, end, fd, off)
        self._len = max(self._len, end)

    def write_base(
        self, pos: int, base_at: int, length: int, data: bytes | memoryview | None = None
    ) -> None:
        """Write at ``pos`` (``pos <= len``) the ``length`` base bytes at ``base_at``
        (``data``: the same bytes, if at hand): once spilled they are read from the base."""
        if length == 0:
            return
        if self._base is None:
            raise ValueError("a PieceBuffer without a base holds no base bytes")
        end = pos + length
        self._spill(end)
        if self._mem is not None:
            if data is None:
                data = read_all(self._base, base_at, base_at + length)
            if len(data) != length:
                raise ValueError(f"base bytes [{base_at}, {base_at + length}) are not there")
            self._mem[pos:end] = data
        self._place(pos, end, _BASE, base_at)
        self._len = max(self._len, end)

    def spans(self) -> list[tuple[int, int, int]]:
        """The pieces as ``(start, end, base offset)``; the base offset is -1 for bytes
        that are not (known to be) the base's."""
        return [
            (start, end, off if fd == _BASE else -1)
            for start, (end, fd, off) in zip(self._starts, self._pieces, strict=True)
        ]

    def extend(self, data: bytes | memoryview) -> None:
        """Append ``data``."""
        self.write_at(self._len, data)

    def prepend(self, data: bytes | memoryview) -> None:
        """Insert ``data`` before the first byte (shifts every piece: rare)."""
        n = len(data)
        if n == 0:
            return
        self._spill(self._len + n)
        self._starts = [0] + [s + n for s in self._starts]
        pieces = [(end + n, fd, off + n if fd == _MEM else off) for end, fd, off in self._pieces]
        if self._mem is not None:
            self._mem[0:0] = data
            first = (n, _MEM, 0)
        else:
            fd, off = self._to_spill_file(data)
            first = (n, fd, off)
        self._pieces = [first, *pieces]
        self._len += n

    def truncate(self, size: int) -> None:
        """Cut to ``size`` bytes (``size <= len``)."""
        if size >= self._len:
            return
        i = self._cut(size)
        del self._starts[i:], self._pieces[i:]
        if self._mem is not None:
            del self._mem[size:]
        self._len = size

    def read(self, start: int, end: int) -> bytes | memoryview:
        """Return bytes ``[start, end)`` (clipped to the length)."""
        end = min(end, self._len)
        if start >= end:
            return b""
        if self._mem is not None:
            with memoryview(self._mem) as view:
                return view[start:end].tobytes()
        i = bisect.bisect_right(self._starts, start) - 1
        p_start = self._starts[i]
        p_end, fd, off = self._pieces[i]
        if end <= p_end and fd == _BASE:
            assert self._base is not None
            return bytes(read_all(self._base, off + start - p_start, off + end - p_start))
        if end <= p_end:  # one piece: one read
            return _pread_all(fd, end - start, off + start - p_start)
        out = bytearray(end - start)  # several: each read into its place (no join)
        with memoryview(out) as view:
            pos = start
            while pos < end:
                p_start = self._starts[i]
                p_end, fd, off = self._pieces[i]
                stop = min(end, p_end)
                if fd == _BASE:
                    assert self._base is not None
                    at = off + pos - p_start
                    view[pos - start : stop - start] = read_all(self._base, at, at + stop - pos)
                else:
                    _preadv_all(fd, view[pos - start : stop - start], off + pos - p_start)
                pos = stop
                i += 1
        return memoryview(out)

    def close(self) -> None:
        """Let the bytes go (the temporary file is removed, descriptors closed)."""
        self._closer()
        self._owned = []
        self._closer = weakref.finalize(self, _close_all, self._owned)
        self._fds.clear()
        self._seen.clear()
        self._spill_fd, self._spill_end = -1, 0
        self._mem, self._starts, self._pieces, self._len = bytearray(), [], [], 0


def _pread_all(fd: int, count: int, offset: int) -> bytes:
    data = os.pread(fd, count, offset)
    if len(data) == count:
        return data
    parts = [data]
    got = len(data)
    while got < count:
        more = os.pread(fd, count - got, offset + got)
        if not more:
            raise OSError(errno.EIO, f"staged bytes missing from their file at {offset + got}")
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def _preadv_all(fd: int, into: memoryview, offset: int) -> None:
    got = 0
    while got < len(into):
        n = os.preadv(fd, [into[got:]], offset + got)
        if n == 0:
            raise OSError(errno.EIO, f"staged bytes missing from their file at {offset + got}")
        got += n


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)
    fds.clear()


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

        ``spill_at`` / ``spill_dir``: see :class:`PieceBuffer`.
        """
        self.base_version = base_version
        self._base = base
        self._base_size = base.size
        self._base_limit = self._base_size
        self._start = self._base_size
        self._buf = PieceBuffer(spill_at=spill_at, directory=spill_dir, base=base)
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

    def write(
        self,
        offset: int,
        data: bytes | memoryview,
        *,
        touched: float,
        mtime: float,
        source: Source | None = None,
    ) -> None:
        """Write ``data`` at ``offset`` (a hole before it reads as base bytes or zeros).

        ``source``: where the same bytes lie in a file that keeps them, readable (the
        writer's journal record): past ``spill_at`` they are read there (see
        :class:`PieceBuffer`).
        """
        if offset < self._start:
            # below the written range: bring the base bytes in between into buf
            self._buf.prepend(self._base_bytes(offset, min(self._start, self._base_limit)))
            self._start = offset
        self._extend_to(offset)
        self._buf.write_at(offset - self._start, data, source=source)
        self.touched, self.mtime = touched, mtime
        self.written = True

    def write_base(
        self,
        offset: int,
        base_at: int,
        length: int,
        *,
        touched: float,
        mtime: float,
        data: bytes | memoryview | None = None,
    ) -> None:
        """Write at ``offset`` the ``length`` base bytes at ``base_at`` (``data``: the same
        bytes, if at hand): as :meth:`write` of them, but held as a reference to the base
        (a rewrite equal to its base but for a row holds that row; see `PieceBuffer`)."""
        if base_at < 0 or base_at + length > self._base_size:
            raise ValueError(f"base bytes [{base_at}, {base_at + length}) are past its end")
        if offset < self._start:
            self._buf.prepend(self._base_bytes(offset, min(self._start, self._base_limit)))
            self._start = offset
        self._extend_to(offset)
        self._buf.write_base(offset - self._start, base_at, length, data)
        self.touched, self.mtime = touched, mtime
        self.written = True

    def same_spans(self) -> list[tuple[int, int, int]]:
        """The ranges of the content known to be base bytes without reading them, as
        ``(start, end, base offset)``, in order: below the written range (the base's at
        the same offset), the written bytes that :meth:`write_base` laid down, and the
        base's tail past the written range."""
        out: list[tuple[int, int, int]] = []
        if self._start > 0:
            out.append((0, min(self._start, self._base_limit), 0))
        for lo, hi, at in self._buf.spans():
            if at >= 0:
                out.append((self._start + lo, self._start + hi, at))
        hi = self._start + len(self._buf)
        if self._base_limit > hi:
            out.append((hi, self._base_limit, hi))
        return [(a, b, at) for a, b, at in out if b > a]

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

    def read(self, offset: int, count: int) -> tuple[memoryview | bytes, bool]:
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
    def spill_bytes(self) -> int:
        """How many written bytes went to a temporary file (see :class:`PieceBuffer`)."""
        return self._buf.spill_bytes

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
        for lo, hi, at in self._buf.spans():
            if at == self._start + lo:
                continue  # written as the base's own bytes at the same place
            for pos in range(lo, hi, _COPY):
                end = min(hi, pos + _COPY)
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
