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
    "DEFAULT_MAX_RECORD_SIZE",
    "LAST_FRAGMENT",
    "MAX_FRAGMENT_SIZE",
    "RecordError",
    "RecordReader",
    "encode_record",
    "encode_record_parts",
]

LAST_FRAGMENT: Final = 0x80000000
"""The header bit that marks the last fragment of a record."""

MAX_FRAGMENT_SIZE: Final = 0x7FFFFFFF
"""The largest fragment length a header can carry."""

DEFAULT_MAX_RECORD_SIZE: Final = 4 * 1024 * 1024 + 64 * 1024
"""Enough for a 1 MiB WRITE (our wtmax) with a wide margin."""

_HEADER: Final = struct.Struct(">I")


class RecordError(ValueError):
    """The stream breaks record marking: a record larger than the allowed maximum."""


class RecordReader:
    """Reassemble RPC records from a TCP byte stream (RFC 5531 §11).

    Args:
        max_record_size: the largest record accepted, in bytes (the sum of its
            fragments). A larger one raises `RecordError` as soon as a fragment
            header announces it, before its data is buffered.

    After a `RecordError` the stream is out of sync: the reader keeps raising, and
    the connection should be closed.
    """

    __slots__ = ("_broken", "_buf", "_fragments", "_max", "_record_len")

    def __init__(self, max_record_size: int = DEFAULT_MAX_RECORD_SIZE) -> None:
        self._max = max_record_size
        self._buf = bytearray()
        self._fragments: list[bytes] = []
        self._record_len = 0
        self._broken: RecordError | None = None

    @property
    def pending(self) -> int:
        """The number of bytes buffered that are not yet part of a returned record."""
        return len(self._buf) + self._record_len

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add bytes from the stream and return the records they complete.

        Args:
            data: the next bytes of the stream; may be empty, may split a fragment
                header or a fragment anywhere.

        Returns:
            The completed records, in stream order (possibly none). A record of
            zero fragments' payload is returned as ``b""``.

        Raises:
            RecordError: if a record would exceed `max_record_size`.
        """
        if self._broken is not None:
            raise self._broken
        buf = self._buf
        buf += data
        records: list[bytes] = []
        pos = 0
        end = len(buf)
        while end - pos >= 4:
            header: int = _HEADER.unpack_from(buf, pos)[0]
            length = header & MAX_FRAGMENT_SIZE
            if self._record_len + length > self._max:
                self._broken = RecordError(
                    f"record of at least {self._record_len + length} bytes exceeds {self._max}"
                )
                raise self._broken
            if end - pos - 4 < length:
                break
            with memoryview(buf) as view:
                fragment = bytes(view[pos + 4 : pos + 4 + length])
            pos += 4 + length
            if header & LAST_FRAGMENT:
                if self._fragments:
                    self._fragments.append(fragment)
                    records.append(b"".join(self._fragments))
                    self._fragments = []
                else:
                    records.append(fragment)
                self._record_len = 0
            else:
                self._fragments.append(fragment)
                self._record_len += length
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
