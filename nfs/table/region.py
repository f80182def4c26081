"""Where a rewrite of ``data.csv`` differs from the bytes its writer started from.

The common prefix and suffix of the content and its base are compared chunk by chunk
(memory stays bounded: a staging is read by range, never copied whole), then cut back to
record boundaries — a line feed inside a quoted field is not one (RFC 4180: a record
starts after a line feed that an even number of quotes precedes). What lies between is
the only part :mod:`nfs.table.apply` parses. See docs/design.md.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from nfs.table.staging import Base, Staging, read_all

__all__ = [
    "Region",
    "changed_pieces",
    "changed_regions",
    "common_prefix",
    "common_suffix",
    "header_of",
    "matching_pieces",
    "release_compared",
    "same_bytes",
    "same_records",
]

_LF: Final = 0x0A
_QUOTE: Final = b'"'
_CHUNK: Final = 4 << 20
"""Bytes compared (and copied out of a staging) at a time: memory stays bounded."""
_FIRST_STEP: Final = 64 << 10
"""Bytes compared first; each next comparison of a run reads twice as many, up to _CHUNK."""
_SCAN: Final = 64 << 10
_ANCHOR: Final = 4096
"""Bytes of the base looked for in the content to find where a change ends."""
_MIN_RUN: Final = 64 << 10
"""Same bytes shorter than this between two changes are parsed with them (one region)."""
_PROBE_LIMIT: Final = 16 << 20
"""How far past the start of a change its end is looked for (then: one region)."""
_PAIRED: Final = 1 << 20
"""A region larger than this is paired line by line (see :func:`changed_pieces`)."""
PIECE_MIN: Final = 16 << 10
"""The fewest bytes of a write :func:`matching_pieces` calls equal to the base's."""
_SHIFT_WINDOW: Final = 64 << 10
"""How far from where the last bytes of a write would lie in the base (at the last
shift) they are looked for."""


def same_bytes(a: memoryview | bytes, b: memoryview | bytes) -> bool:
    """Compare two byte strings at memcmp speed (a memoryview ``==`` goes byte by byte)."""
    return len(a) == len(b) and bool(pa.py_buffer(a).equals(pa.py_buffer(b)))


def header_of(base: Base) -> bytes:
    """Return the first line of ``base`` (with its LF), or all of it when it has none."""
    head = bytes(read_all(base, 0, 4096))
    end = head.find(b"\n")
    if end < 0:
        return bytes(read_all(base))
    return head[: end + 1]


# -- the changed region of a rewrite ------------------------------------------------------


def release_compared(base: Base, offset: int, count: int) -> None:
    """Let a mapped base's pages of a range that was compared go (RSS stays bounded)."""
    release = getattr(base, "release", None)
    if release is not None:
        release(offset, count)


def matching_pieces(
    base: Base, offset: int, data: bytes | memoryview, shift: int
) -> tuple[list[tuple[int, int, int]], int]:
    """Split a write of ``data`` at ``offset`` into pieces equal to bytes of ``base``.

    A rewrite of a file that equals its base but for a few rows is, in each write, the
    base's bytes (shifted by what the changed rows added or removed before it: ``shift``,
    the content offset minus the base offset found for the previous write), then maybe a
    changed part, then the base's bytes again at another shift. The first bytes are
    compared at ``shift``; the last are looked for (a block of ``_ANCHOR`` bytes) within
    ``_SHIFT_WINDOW`` of where they would lie; every byte called equal was compared
    (memcmp). Pieces shorter than `PIECE_MIN` are not called equal.

    Returns:
        the pieces ``(start, end, base offset)`` covering ``data`` in order (base offset
        -1: not the base's), and the shift of the last equal piece (else ``shift``).
    """
    view = memoryview(data).cast("B")
    n = len(view)
    whole = [(0, n, -1)]
    if n < PIECE_MIN or base.size == 0:
        return whole, shift
    at = offset - shift
    head = _equal_prefix(view, base, at)
    if head == n:
        return [(0, n, at)], shift
    if head < PIECE_MIN:
        head = 0
    tail, new_shift = _equal_suffix(view, base, offset, shift, head)
    if tail < PIECE_MIN:
        tail = 0
    pieces = []
    if head:
        pieces.append((0, head, at))
    if n - tail > head:
        pieces.append((head, n - tail, -1))
    if tail:
        pieces.append((n - tail, n, offset + n - tail - new_shift))
        shift = new_shift
    return (pieces if head or tail else whole), shift


def _equal_prefix(view: memoryview, base: Base, at: int) -> int:
    """How many first bytes of ``view`` equal ``base``'s from ``at`` (memcmp, bisected)."""
    if at < 0 or at >= base.size:
        return 0
    m = min(len(view), base.size - at)
    other = read_all(base, at, at + m)
    if same_bytes(view[:m], other):
        return m
    lo, hi = 0, m  # view[:lo] == other[:lo]; view[:hi] != other[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if same_bytes(view[:mid], other[:mid]):
            lo = mid
        else:
            hi = mid
    return lo


def _equal_suffix(
    view: memoryview, base: Base, offset: int, shift: int, floor: int
) -> tuple[int, int]:
    """How many last bytes of ``view`` (written at ``offset``; not below ``floor``) equal
    bytes of ``base``, found near the last ``shift``; and the shift they are at."""
    n = len(view)
    if n - floor < max(PIECE_MIN, _ANCHOR):
        return 0, shift
    anchor = bytes(view[n - _ANCHOR :])
    expected = offset + n - _ANCHOR - shift
    lo = max(0, expected - _SHIFT_WINDOW)
    hi = min(base.size, expected + _SHIFT_WINDOW + _ANCHOR)
    if hi - lo < _ANCHOR:
        return 0, shift
    found = bytes(read_all(base, lo, hi)).find(anchor)
    if found < 0:
        return 0, shift
    end = lo + found + _ANCHOR  # base offset of view[n]
    m = min(n - floor, end)
    other = read_all(base, end - m, end)
    if same_bytes(view[n - m :], other):
        return m, offset + n - end
    lo_, hi_ = _ANCHOR, m  # the last lo_ bytes are equal; the last hi_ are not
    while hi_ - lo_ > 1:
        mid = (lo_ + hi_) // 2
        if same_bytes(view[n - mid :], other[m - mid :]):
            lo_ = mid
        else:
            hi_ = mid
    return lo_, offset + n - end


def _count_quotes(data: memoryview) -> int:
    obj = data.obj
    if isinstance(obj, bytes | bytearray) and len(obj) == len(data):  # a whole chunk: no copy
        return obj.count(_QUOTE)
    return bytes(data).count(_QUOTE)


def common_prefix(a: Base, b: Base) -> tuple[int, int]:
    """Return the length of the longest common prefix of ``a`` and ``b`` (chunk by chunk),
    and a count of the quote characters it holds, right modulo 2 (what
    :func:`changed_regions` needs: the parity tells a record boundary; counted on the same
    pass: a mapped base is read once).

    A staging over ``b`` whose first bytes are known to be ``b``'s (`Staging.same_spans`:
    written as base bytes, or never written) is not read there, and only the quotes after
    the last record start known in ``b`` before them are counted (see :func:`_even_floor`).
    """
    limit = min(a.size, b.size)
    known = min(limit, _known_prefix(a, b))
    if known == 0:
        return _common_run(a, 0, b, 0, limit)
    floor = _even_floor(b, known)
    quotes = _quotes(b, floor, known)
    run, more = _common_run(a, known, b, known, limit - known)
    return known + run, quotes + more


def same_records(content: Base, base: Base, end: int) -> int:
    """Return how many first bytes of ``content[:end]`` are whole records of ``base`` at
    the same offsets, the header line included (0: not even the header): the rows those
    records hold are the base's. ``end`` must be a record start of ``content`` (or its
    size)."""
    header = len(header_of(base))
    if header == 0 or end < header:
        return 0
    same, quotes = common_prefix(content, base)
    if same >= end:  # content[:end] is the base's: the same records up to ``end``
        return end
    if same < header:
        return 0
    return _record_start_at_or_before(base, same, header, quotes)


def _known_prefix(a: Base, b: Base) -> int:
    """How many first bytes of ``a`` are known to be ``b``'s at the same offsets (``a`` a
    staging over ``b``), without reading them."""
    if not isinstance(a, Staging) or a.base is not b:
        return 0
    pos = 0
    for lo, hi, at in a.same_spans():
        if lo != pos or at != lo:
            break
        pos = hi
    return pos


def _known_suffix(a: Base, b: Base) -> int:
    """How many last bytes of ``a`` are known to be the last bytes of ``b`` (``a`` a
    staging over ``b``), without reading them."""
    if not isinstance(a, Staging) or a.base is not b:
        return 0
    shift = b.size - a.size
    end = a.size
    for lo, hi, at in reversed(a.same_spans()):
        if hi != end or at - lo != shift:
            break
        end = lo
    return a.size - end


def _even_floor(data: Base, pos: int) -> int:
    """A record start at or before ``pos`` known without reading: the start of the last
    segment of a rendering (``segments``: ``(key, start, length)`` per data file, each
    whole records, so an even number of quotes precede it) that starts there; else 0."""
    segments: Sequence[tuple[str, int, int]] | None = getattr(data, "segments", None)
    if not segments:
        return 0
    starts = [start for _key, start, _length in segments]
    i = bisect.bisect_right(starts, pos) - 1
    return starts[i] if i >= 0 else 0


def _common_run(a: Base, at: int, b: Base, bt: int, limit: int) -> tuple[int, int]:
    """Return the length (at most ``limit``) of the longest common prefix of ``a[at:]``
    and ``b[bt:]``, and how many quote characters it holds; ``b``'s compared pages are
    let go."""
    pos = quotes = 0
    step = _FIRST_STEP  # doubling: a short run (the next change is near) reads little
    while pos < limit:
        n = min(step, limit - pos)
        step = min(2 * step, _CHUNK)
        x, y = read_all(a, at + pos, at + pos + n), read_all(b, bt + pos, bt + pos + n)
        if same_bytes(x, y):
            quotes += _count_quotes(x)
            del x, y
            release_compared(b, bt + pos, n)
            pos += n
            continue
        lo, hi = 0, n  # x[:lo] == y[:lo]; x[:hi] != y[:hi]
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if same_bytes(x[:mid], y[:mid]):
                lo = mid
            else:
                hi = mid
        return pos + lo, quotes + _count_quotes(x[:lo])
    return limit, quotes


def common_suffix(a: Base, b: Base, limit: int) -> int:
    """Return the length (at most ``limit``) of the longest common suffix of ``a`` and ``b``
    (the last bytes of a staging known to be ``b``'s are not read: `_known_suffix`)."""
    known = min(limit, _known_suffix(a, b))
    return known + _common_back(a, a.size - known, b, b.size - known, limit - known)


def _common_back(a: Base, a_end: int, b: Base, b_end: int, limit: int) -> int:
    """Return the length (at most ``limit``) of the longest common suffix of ``a[:a_end]``
    and ``b[:b_end]``; ``b``'s compared pages are let go."""
    got = 0
    step = _FIRST_STEP
    while got < limit:
        n = min(step, limit - got)
        step = min(2 * step, _CHUNK)
        x = read_all(a, a_end - got - n, a_end - got)
        y = read_all(b, b_end - got - n, b_end - got)
        if same_bytes(x, y):
            del x, y
            release_compared(b, b_end - got - n, n)
            got += n
            continue
        lo, hi = 0, n  # x[n-lo:] == y[n-lo:]; x[n-hi:] != y[n-hi:]
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if same_bytes(x[n - mid :], y[n - mid :]):
                lo = mid
            else:
                hi = mid
        return got + lo
    return limit


def _quotes(data: Base, start: int, end: int) -> int:
    """Count the quote characters of ``data[start:end]``."""
    total = 0
    for pos in range(start, end, _CHUNK):
        total += bytes(read_all(data, pos, min(end, pos + _CHUNK))).count(_QUOTE)
    return total


def _record_start_at_or_before(data: Base, pos: int, floor: int, quotes: int) -> int:
    """Return the last record start in ``[floor, pos]`` (``floor`` is one).

    A record starts after a line feed that an even number of quotes precedes (RFC 4180:
    quotes inside a field are doubled). ``quotes``: the number of quotes in ``data[:pos]``.
    """
    end = pos
    while end > floor:
        start = max(floor, end - _SCAN)
        chunk = bytes(read_all(data, start, end))
        i = len(chunk)
        while True:
            j = chunk.rfind(b"\n", 0, i)
            if j < 0:
                break
            after = quotes - chunk.count(_QUOTE, j + 1)  # quotes before start + j + 1
            if after % 2 == 0:
                return start + j + 1
            i = j
        quotes -= chunk.count(_QUOTE)
        end = start
    return floor


def _record_start_at_or_after(data: Base, pos: int, quotes: int) -> int:
    """Return the first record start at or after ``pos`` (the end of ``data`` is one).

    ``quotes``: the number of quotes in ``data[:pos]``; ``pos`` must not be inside the
    header.
    """
    if pos > 0 and read_all(data, pos - 1, pos)[0] == _LF and quotes % 2 == 0:
        return pos
    start = pos
    while start < data.size:
        chunk = bytes(read_all(data, start, min(data.size, start + _SCAN)))
        i = 0
        while True:
            j = chunk.find(b"\n", i)
            if j < 0:
                break
            if (quotes + chunk.count(_QUOTE, 0, j)) % 2 == 0:
                return start + j + 1
            i = j + 1
        quotes += chunk.count(_QUOTE)
        start += len(chunk)
    return data.size


@dataclass(frozen=True)
class Region:
    """A part of a rewrite that differs from its base, cut at record boundaries.

    ``content[content_start:content_end]`` replaces ``base[base_start:base_end]``; the
    bytes between two regions (and before the first, after the last) are the same in
    both, so the records there are the same rows.
    """

    base_start: int
    base_end: int
    content_start: int
    content_end: int

    @property
    def size(self) -> int:
        """The bytes parsed for this region (its base and its content side)."""
        return (self.base_end - self.base_start) + (self.content_end - self.content_start)


@dataclass(frozen=True)
class _Run:
    """Where a change ends: ``base[first:end]`` equals the content ``shift`` bytes on;
    ``first`` is a record start; ``quotes``: the quote characters of ``base[:end]``."""

    first: int
    end: int
    shift: int
    quotes: int


def changed_regions(
    content: Base, base: Base, same: int, quotes_before: int
) -> list[Region] | None:
    """Return the regions of ``content`` that differ from ``base``, or None.

    ``same`` and ``quotes_before``: what :func:`common_prefix` returned.

    After the common prefix, the end of each change is looked for: a block of the base a
    little further on, found in the content near where it would be, and the same bytes
    from there on for at least ``_MIN_RUN`` (the next change starts where they stop). So
    edits far apart are far-apart small regions, and what lies between them is compared,
    never parsed. The last region ends at the common suffix.

    None when the base has no header line or the content changes it (a whole parse
    reports or handles that). However much changed, the regions' rows are read by
    :func:`changed_pieces`, a chunk at a time.
    """
    n = base.size
    header = len(header_of(base))
    if n == 0 or header > same or read_all(base, header - 1, header)[0] != _LF:
        return None
    suffix = common_suffix(content, base, min(n, content.size) - same)
    delta = content.size - n
    tail = n - suffix  # base[tail:] == content[tail + delta:]
    regions: list[Region] = []
    start = _record_start_at_or_before(base, same, header, quotes_before)
    shift = 0  # content position - base position, before the current change
    changed, quotes = same, quotes_before  # where the current change starts; quotes before
    while True:
        run = _end_of_change(content, base, changed, shift, tail, tail + delta, quotes)
        if run is None:
            break
        region = Region(start, run.first, start + shift, run.first + run.shift)
        regions.append(region)
        start = _record_start_at_or_before(base, run.end, run.first, run.quotes)
        shift, changed, quotes = run.shift, run.end, run.quotes
    base_end = _record_start_at_or_after(base, tail, quotes + _quotes(base, changed, tail))
    # changed bytes right before a record of the base must end a line of their own, else
    # a whole parse joins them with that record
    if (
        base_end == tail
        and tail < n
        and tail + delta > start + shift
        and read_all(content, tail + delta - 1, tail + delta)[0] != _LF
    ):
        more = quotes + _quotes(base, changed, tail + 1)
        base_end = _record_start_at_or_after(base, tail + 1, more)
    base_end = max(base_end, start)
    content_end = base_end + delta
    if content_end < start + shift:
        return None
    last = Region(start, base_end, start + shift, content_end)
    if last.size or not regions:
        regions.append(last)
    return regions


def _end_of_change(
    content: Base, base: Base, changed: int, shift: int, tail: int, content_tail: int, quotes: int
) -> _Run | None:
    """Find where a change that starts at ``base[changed]`` (``content[changed + shift]``)
    ends: a run of the same bytes, at least ``_MIN_RUN`` long or up to the common suffix,
    that holds a record boundary after its first byte. None when none is found within
    ``_PROBE_LIMIT`` bytes (the change then reaches the suffix).

    A block of ``_ANCHOR`` base bytes ``d`` bytes on is looked for in the content within
    ``2d`` bytes of the change, for ``d`` growing fourfold: the cost follows the change.
    ``quotes``: the quote characters of ``base[:changed]``.
    """
    c = changed + shift
    d = _ANCHOR
    while d <= _PROBE_LIMIT:
        at = changed + d
        if at + _ANCHOR > tail:
            return None
        block = bytes(read_all(base, at, at + _ANCHOR))
        window = bytes(read_all(content, c, min(content_tail, c + 2 * d + _ANCHOR)))
        found = window.find(block)
        d *= 4
        if found < 0:
            continue
        moved = c + found - at
        limit = min(tail - at, content_tail - (at + moved))
        length, run_quotes = _common_run(content, at + moved, base, at, limit)
        whole = at + length == tail and moved == content_tail - tail
        if length < _MIN_RUN and not whole:
            continue
        # the same bytes may begin before the block: the change ends where they begin
        back = _common_back(content, at + moved, base, at, min(at - changed, at + moved - c))
        begin = at - back
        before = quotes + _quotes(base, changed, begin)
        first = _record_start_at_or_after(base, begin + 1, before + _quotes(base, begin, begin + 1))
        if first > at + length:
            continue  # no record starts inside the run
        return _Run(first, at + length, moved, before + _quotes(base, begin, at) + run_quotes)
    return None


def changed_pieces(content: Base, base: Base, region: Region) -> Iterator[tuple[bytes, bytes]]:
    """Yield ``(base records, content records)``: the records of ``region`` that hold its
    changes, whole records on each side, so the rows of all pieces, base side and content
    side, differ as the region's do.

    A small region is one piece. A large one (edits everywhere: ``sed -i 's/Paris/Lyon/'``)
    is read ``_CHUNK`` bytes at a time and its records are paired in order, the n-th base
    record with the n-th content record; a pair of equal records is the same row on both
    sides and is dropped, so only changed records are parsed and memory stays bounded.
    Any pairing is right (records left over, or misaligned by an inserted one, just stay
    in the pieces). A record is usually a line; one whose quoted field holds a line feed
    spans lines, and pairing goes on after it (only a chunk holding no whole record, a
    record larger than ``_CHUNK``, ends the pairing: the rest is yielded as it is).
    """
    b, c = region.base_start, region.content_start
    if region.size > _PAIRED:
        while b < region.base_end and c < region.content_end:
            x = bytes(read_all(base, b, min(region.base_end, b + _CHUNK)))
            y = bytes(read_all(content, c, min(region.content_end, c + len(x) + (len(x) >> 2))))
            old, new = _records(x), _records(y)
            if not len(old) or not len(new):
                break
            k = min(len(old), len(new))
            old, new = old.slice(0, k), new.slice(0, k)
            differ = pc.indices_nonzero(pc.invert(pc.equal(old, new)))
            if len(differ):
                yield _joined(old.take(differ)), _joined(new.take(differ))
            b += _bytes_of(old)
            c += _bytes_of(new)
    if b < region.base_end or c < region.content_end:
        yield (
            bytes(read_all(base, b, region.base_end)),
            bytes(read_all(content, c, region.content_end)),
        )


def _records(data: bytes) -> pa.Array:
    """The whole records at the start of ``data`` (which starts a record), each with its
    final line feed: a line feed ends a record when an even number of quotes precede it
    (RFC 4180), so a quoted field holding a line feed stays inside its record."""
    end = data.rfind(b"\n")
    if end < 0:
        return pa.array([], pa.binary())
    lines = pc.split_pattern(pa.array([data[:end]], pa.binary()), pattern=b"\n").values
    ends = pc.cumulative_sum(pc.add(pc.binary_length(lines).cast(pa.int64()), 1))
    odd = pc.cumulative_sum(pc.bit_wise_and(pc.count_substring(lines, pattern=b'"'), 1))
    bounds = pc.filter(ends, pc.equal(pc.bit_wise_and(odd, 1), 0))
    offsets = pa.concat_arrays([pa.array([0], pa.int64()), bounds]).cast(pa.int32())
    return pa.BinaryArray.from_buffers(
        pa.binary(), len(bounds), [None, offsets.buffers()[1], pa.py_buffer(data)]
    )


def _bytes_of(records: pa.Array) -> int:
    """The bytes ``records`` took (their line feeds are theirs)."""
    return int(pc.sum(pc.binary_length(records)).as_py() or 0)


def _joined(records: pa.Array) -> bytes:
    """``records`` as CSV text (each ends with its line feed)."""
    one = pa.ListArray.from_arrays(pa.array([0, len(records)], pa.int32()), records)
    return bytes(pc.binary_join(one, b"")[0].as_py())
