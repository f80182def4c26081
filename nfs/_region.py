"""Where a rewrite of ``data.csv`` differs from the bytes its writer started from.

The common prefix and suffix of the content and its base are compared chunk by chunk
(memory stays bounded: a staging is read by range, never copied whole), then cut back to
record boundaries — a line feed inside a quoted field is not one (RFC 4180: a record
starts after a line feed that an even number of quotes precedes). What lies between is
the only part :mod:`nfs._apply` parses. See docs/design.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import pyarrow as pa

from nfs._staging import Base, read_all

__all__ = ["Region", "changed_region", "common_prefix", "header_of", "same_bytes"]

_LF: Final = 0x0A
_QUOTE: Final = b'"'
_CHUNK: Final = 4 << 20
"""Bytes compared (and copied out of a staging) at a time: memory stays bounded."""
_SCAN: Final = 64 << 10


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


def _released(base: Base, offset: int, count: int) -> None:
    """Let a mapped base's pages of a range that was compared go (RSS stays bounded)."""
    release = getattr(base, "release", None)
    if release is not None:
        release(offset, count)


def _count_quotes(data: memoryview) -> int:
    obj = data.obj
    if isinstance(obj, bytes) and len(obj) == len(data):  # a whole chunk: no copy
        return obj.count(_QUOTE)
    return bytes(data).count(_QUOTE)


def common_prefix(a: Base, b: Base) -> tuple[int, int]:
    """Return the length of the longest common prefix of ``a`` and ``b`` (chunk by chunk),
    and how many quote characters it holds (what :func:`changed_region` needs, counted on
    the same pass: a mapped base is read once)."""
    limit = min(a.size, b.size)
    pos = quotes = 0
    while pos < limit:
        n = min(_CHUNK, limit - pos)
        x, y = read_all(a, pos, pos + n), read_all(b, pos, pos + n)
        if same_bytes(x, y):
            quotes += _count_quotes(x)
            del x, y
            _released(b, pos, n)
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


def _common_suffix(a: Base, b: Base, limit: int) -> int:
    """Return the length (at most ``limit``) of the longest common suffix of ``a`` and ``b``."""
    got = 0
    while got < limit:
        n = min(_CHUNK, limit - got)
        x = read_all(a, a.size - got - n, a.size - got)
        y = read_all(b, b.size - got - n, b.size - got)
        if same_bytes(x, y):
            del x, y
            _released(b, b.size - got - n, n)
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
    """Where a rewrite differs from its base, cut at record boundaries.

    ``content[start:content_end]`` replaces ``base[start:base_end]``; the bytes before
    ``start`` (the header and the records the writer left as they were) and after the
    ends are the same in both.
    """

    start: int
    base_end: int
    content_end: int


def changed_region(content: Base, base: Base, same: int, quotes_before: int) -> Region | None:
    """Return the region of ``content`` that differs from ``base``, or None.

    ``same`` and ``quotes_before``: what :func:`common_prefix` returned.

    None when the base has no header line or the content changes it (a whole parse
    reports or handles that), and when the region is most of the file (a whole parse
    costs the same).
    """
    n = base.size
    header = len(header_of(base))
    if n == 0 or header > same or read_all(base, header - 1, header)[0] != _LF:
        return None
    suffix = _common_suffix(content, base, min(n, content.size) - same)
    start = _record_start_at_or_before(base, same, header, quotes_before)
    delta = content.size - n
    tail = n - suffix  # base[tail:] == content[tail + delta:]
    base_end = _record_start_at_or_after(base, tail, quotes_before + _quotes(base, same, tail))
    # changed bytes right before a record of the base must end a line of their own, else
    # a whole parse joins them with that record
    if (
        base_end == tail
        and tail < n
        and tail + delta > start
        and read_all(content, tail + delta - 1, tail + delta)[0] != _LF
    ):
        quotes = quotes_before + _quotes(base, same, tail + 1)
        base_end = _record_start_at_or_after(base, tail + 1, quotes)
    base_end = max(base_end, start)
    content_end = base_end + delta
    if content_end < start:
        return None
    if (base_end - start) + (content_end - start) > n:
        return None  # most of the file changed: parse it whole
    return Region(start, base_end, content_end)
