"""ONC RPC record marking over a byte stream (RFC 5531 §11).

On TCP an RPC message is a *record* sent as one or more *fragments*. Each fragment
starts with a 4-byte big-endian header: the top bit is set on the last fragment of
the record, the low 31 bits are the fragment length.

`RecordReader.feed()` is sans-IO: give it the bytes as they arrive, in pieces of
any size, and it returns the records completed by them. `encode_record()` frames
a payload for sending. This module is pure: no IO and no imports from `nfs`.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final

__all__ = [
    "DEFAULT_MAX_FRAGMENTS",
    "DEFAULT_MAX_RECORD_SIZE",
    "LAST_FRAGMENT",
    "MAX_FRAGMENT_SIZE",
    "RecordError",
    "RecordReader",
    "encode_record",
    "encode_record_parts",
    "record_mark",
]

LAST_FRAGMENT: Final = 0x80000000
"""The header bit that marks the last fragment of a record."""

MAX_FRAGMENT_SIZE: Final = 0x7FFFFFFF
"""The largest fragment length a header can carry."""

DEFAULT_MAX_RECORD_SIZE: Final = 4 * 1024 * 1024 + 64 * 1024
"""Enough for a 1 MiB WRITE (our wtmax) with a wide margin."""

DEFAULT_MAX_FRAGMENTS: Final = 1024
"""Fragments per record; real clients send one (Linux: one per record up to 2 GiB)."""

_HEADER: Final = struct.Struct(">I")


class RecordError(ValueError):
    """The stream breaks record marking: a record larger than the allowed maximum."""


class RecordReader:
    """Reassemble RPC records from a TCP byte stream (RFC 5531 §11).

    Args:
        max_record_size: the largest record accepted, in bytes (the sum of its
            fragments). A larger one raises `RecordError` as soon as a fragment
            header announces it, before its data is buffered.
        max_fragments: the most fragments one record may have. Real clients send
            one; a stream of tiny fragments costs parsing time for no payload, so
            it is refused with `RecordError` too.

    Memory: a partial record is kept in one buffer (never one object per
    fragment), so the reader holds at most about ``max_record_size`` plus one
    fragment header and the bytes of the last `feed` that are not yet parsed.

    After a `RecordError` the stream is out of sync: the reader keeps raising, and
    the connection should be closed.
    """

    __slots__ = ("_broken", "_buf", "_fragments", "_max", "_max_fragments", "_record")

    def __init__(
        self,
        max_record_size: int = DEFAULT_MAX_RECORD_SIZE,
        *,
        max_fragments: int = DEFAULT_MAX_FRAGMENTS,
    ) -> None:
        self._max = max_record_size
        self._max_fragments = max_fragments
        self._buf = bytearray()
        self._record = bytearray()
        self._fragments = 0
        self._broken: RecordError | None = None

    @property
    def pending(self) -> int:
        """The number of bytes buffered that are not yet part of a returned record."""
        return len(self._buf) + len(self._record)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add bytes from the stream and return the records they complete.

        Args:
            data: the next bytes of the stream; may be empty, may split a fragment
                header or a fragment anywhere.

        Returns:
            The completed records, in stream order (possibly none). A record of
            zero fragments' payload is returned as ``b""``.

        Raises:
            RecordError: if a record would exceed `max_record_size` or
                `max_fragments`.
        """
        if self._broken is not None:
            raise self._broken
        buf = self._buf
        if not buf and not self._record and len(data) >= 4 and memoryview(data).itemsize == 1:
            # the common case: nothing kept, the bytes are one whole one-fragment record
            header: int = _HEADER.unpack_from(data, 0)[0]
            length = header & MAX_FRAGMENT_SIZE
            if header & LAST_FRAGMENT and length + 4 == len(data) and length <= self._max:
                self._fragments = 0
                return [bytes(data[4:])]
        buf += data
        records: list[bytes] = []
        pos = 0
        end = len(buf)
        with memoryview(buf) as view:
            while end - pos >= 4:
                header = _HEADER.unpack_from(buf, pos)[0]
                length = header & MAX_FRAGMENT_SIZE
                if len(self._record) + length > self._max:
                    self._broken = RecordError(
                        f"record of at least {len(self._record) + length} bytes exceeds {self._max}"
                    )
                    break
                if end - pos - 4 < length:
                    break
                with view[pos + 4 : pos + 4 + length] as fragment:
                    pos += 4 + length
                    self._fragments += 1
                    if header & LAST_FRAGMENT:
                        if self._record:
                            self._record += fragment
                            records.append(bytes(self._record))
                            self._record = bytearray()
                        else:
                            records.append(bytes(fragment))
                        self._fragments = 0
                    elif self._fragments >= self._max_fragments:
                        self._broken = RecordError(
                            f"record of more than {self._max_fragments} fragments"
                        )
                        break
                    else:
                        self._record += fragment
        if self._broken is not None:
            buf.clear()
            self._record = bytearray()
            raise self._broken
        if pos:
            del buf[:pos]
        return records


def encode_record(payload: bytes | bytearray | memoryview) -> bytes:
    """Frame `payload` as one record (a single fragment unless it is over 2 GiB).

    Args:
        payload: the RPC message.

    Returns:
        The bytes to send: fragment header(s) followed by the payload.
    """
    return b"".join(encode_record_parts([payload]))


def record_mark(size: int) -> bytes:
    """Return the header of a record of ``size`` bytes sent as one (last) fragment.

    Raises:
        ValueError: if ``size`` does not fit one fragment (`MAX_FRAGMENT_SIZE`).
    """
    if not 0 <= size <= MAX_FRAGMENT_SIZE:
        raise ValueError(f"a record of {size} bytes needs more than one fragment")
    return _HEADER.pack(size | LAST_FRAGMENT)


def encode_record_parts(
    parts: Sequence[bytes | bytearray | memoryview],
) -> list[bytes | bytearray | memoryview]:
    """Frame a payload given as several buffers, without joining them.

    The record-marking header is prepended as one more buffer, so a transport can
    write header and (large) payload without copying the payload.

    Args:
        parts: the RPC message, in pieces.

    Returns:
        The buffers to send in order.
    """
    total = sum(memoryview(p).nbytes for p in parts)
    if total <= MAX_FRAGMENT_SIZE:
        return [_HEADER.pack(total | LAST_FRAGMENT), *parts]
    data = memoryview(b"".join(parts))
    out: list[bytes | bytearray | memoryview] = []
    for start in range(0, total, MAX_FRAGMENT_SIZE):
        chunk = data[start : start + MAX_FRAGMENT_SIZE]
        last = LAST_FRAGMENT if start + len(chunk) >= total else 0
        out.append(_HEADER.pack(len(chunk) | last))
        out.append(chunk)
    return out
