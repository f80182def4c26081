"""XDR encoding and decoding (RFC 4506), small enough to own.

`Packer` appends big-endian XDR items to a buffer; `Unpacker` reads them back from
a bytes-like object. Every decode failure (short buffer, bad enum or bool value,
oversized opaque/string/array, trailing bytes when checked) raises `XdrError`,
never `IndexError` or `struct.error`. This module is pure: no IO and no imports
from `nfs`.

Large opaque payloads (READ data) are kept by reference: `Packer.pack_opaque`
stores a chunk of at least `ZERO_COPY_THRESHOLD` bytes as its own buffer instead
of copying it, and `Packer.get_buffers()` returns the list of buffers for a
vectored write. `Packer.get_buffer()` joins them when one `bytes` is wanted. READ data
that is a range of a file may come as a `FileSlice`: `Packer.get_parts()` keeps it (for a
transport that sends it from the file, ``os.sendfile``), `Packer.get_buffers()` gives its
bytes in memory instead.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable, Sequence
from typing import Final, Protocol, TypeVar

__all__ = [
    "ZERO_COPY_THRESHOLD",
    "Buffer",
    "FileSlice",
    "HasFileno",
    "Packer",
    "Part",
    "Pieces",
    "Unpacker",
    "XdrError",
]

T = TypeVar("T")
E = TypeVar("E", bound=enum.IntEnum)

Buffer = bytes | bytearray | memoryview
"""A bytes-like object accepted by the packer and the unpacker."""


class HasFileno(Protocol):
    """An open file (its descriptor stays valid while the object lives)."""

    def fileno(self) -> int: ...


class FileSlice:
    """Bytes that are a range of a file, held twice: as a view of them in memory (a
    mapping of the file) and as the file and the offset (READ data a transport may send
    with ``os.sendfile``, without touching the bytes).

    ``len()`` is the number of bytes, ``bytes()`` copies them.

    Attributes:
        view: the bytes (what is sent where the file cannot be).
        file: the open file holding them, kept open as long as this object lives.
        offset: where they start in ``file``.
    """

    __slots__ = ("file", "offset", "view")

    def __init__(self, view: memoryview, file: HasFileno, offset: int) -> None:
        self.view = view
        self.file = file
        self.offset = offset

    def __len__(self) -> int:
        return len(self.view)

    def __bytes__(self) -> bytes:
        return bytes(self.view)


Part = bytes | memoryview | FileSlice
"""One buffer of an encoded message, or a range of a file (`Packer.get_parts`)."""


class Pieces:
    """Bytes held in several buffers, packed as one opaque without joining them (READ data
    that spans the parts of a rendering: a copy of 1 MiB saved). A part may be a
    `FileSlice` (kept as one by `Packer.get_parts`).

    ``len()`` is the number of bytes, ``bytes()`` joins them.
    """

    __slots__ = ("_size", "parts")

    def __init__(self, parts: Sequence[Buffer | FileSlice]) -> None:
        self.parts: tuple[bytes | memoryview | FileSlice, ...] = tuple(
            p if isinstance(p, bytes | FileSlice) else memoryview(p).cast("B") for p in parts
        )
        self._size = sum(len(p) for p in self.parts)

    def __len__(self) -> int:
        return self._size

    def __bytes__(self) -> bytes:
        return b"".join(p.view if isinstance(p, FileSlice) else p for p in self.parts)


ZERO_COPY_THRESHOLD: Final = 16 * 1024
"""Opaque payloads at least this long are kept by reference, not copied."""

_U32: Final = struct.Struct(">I")
_I32: Final = struct.Struct(">i")
_U64: Final = struct.Struct(">Q")
_I64: Final = struct.Struct(">q")
_PAD: Final = (b"", b"\0\0\0", b"\0\0", b"\0")
_MAX_U32: Final = 0xFFFFFFFF
_MAX_U64: Final = 0xFFFFFFFFFFFFFFFF


class XdrError(ValueError):
    """Malformed XDR data, or a value that cannot be encoded (RFC 4506)."""


def _pad_len(n: int) -> int:
    return (4 - n % 4) % 4


class Packer:
    """Encode XDR items (RFC 4506 §4) into a list of buffers.

    Small items go into a growing `bytearray`; an opaque payload of at least
    `ZERO_COPY_THRESHOLD` bytes is appended by reference (the caller must not
    mutate it until the buffers are written). Values out of range for their XDR
    type raise `XdrError`.
    """

    __slots__ = ("_chunks", "_cur")

    def __init__(self, head: bytes = b"") -> None:
        """Start empty, or with ``head`` (already encoded) in."""
        self._chunks: list[Part] = []
        self._cur = bytearray(head)

    # -- integers (RFC 4506 §4.1-4.5)

    def pack_uint(self, value: int) -> None:
        """Append an unsigned 32-bit integer (§4.2)."""
        if not 0 <= value <= _MAX_U32:
            raise XdrError(f"unsigned int out of range: {value}")
        self._cur += _U32.pack(value)

    def pack_int(self, value: int) -> None:
        """Append a signed 32-bit integer (§4.1)."""
        if not -0x80000000 <= value <= 0x7FFFFFFF:
            raise XdrError(f"int out of range: {value}")
        self._cur += _I32.pack(value)

    def pack_uhyper(self, value: int) -> None:
        """Append an unsigned 64-bit integer (§4.5)."""
        if not 0 <= value <= _MAX_U64:
            raise XdrError(f"unsigned hyper out of range: {value}")
        self._cur += _U64.pack(value)

    def pack_hyper(self, value: int) -> None:
        """Append a signed 64-bit integer (§4.5)."""
        if not -(1 << 63) <= value < (1 << 63):
            raise XdrError(f"hyper out of range: {value}")
        self._cur += _I64.pack(value)

    def pack_bool(self, value: bool) -> None:
        """Append a boolean as 0 or 1 (§4.4)."""
        self._cur += _U32.pack(1 if value else 0)

    def pack_enum(self, value: int) -> None:
        """Append an enum member as a signed 32-bit integer (§4.3)."""
        if not -0x80000000 <= value <= 0x7FFFFFFF:
            raise XdrError(f"int out of range: {value}")
        self._cur += _I32.pack(value)

    # -- opaque data and strings (RFC 4506 §4.9-4.11)

    def pack_fopaque(self, size: int, data: Buffer) -> None:
        """Append fixed-length opaque data of exactly `size` bytes (§4.9).

        Raises:
            XdrError: if `data` is not `size` bytes long.
        """
        view = memoryview(data).cast("B") if not isinstance(data, bytes) else data
        if len(view) != size:
            raise XdrError(f"fixed opaque needs {size} bytes, got {len(view)}")
        self._append_data(view)

    def pack_opaque(self, data: Buffer | Pieces | FileSlice, max_size: int | None = None) -> None:
        """Append variable-length opaque data: length, bytes, zero padding (§4.10).

        `Pieces` are appended piece by piece (large ones by reference), padded once; a
        large `FileSlice` is appended as it is (`get_parts`).

        Raises:
            XdrError: if `data` is longer than `max_size` or 2**32 - 1.
        """
        if isinstance(data, Pieces):
            n = len(data)
            if n > (_MAX_U32 if max_size is None else max_size):
                raise XdrError(f"opaque too long: {n} > {max_size}")
            self._cur += _U32.pack(n)
            for part in data.parts:
                if not isinstance(part, FileSlice):
                    self._append_unpadded(part)
                elif len(part) < ZERO_COPY_THRESHOLD:
                    self._append_unpadded(part.view)
                else:
                    if self._cur:
                        self._chunks.append(bytes(self._cur))
                        self._cur = bytearray()
                    self._chunks.append(part)
            pad = _pad_len(n)
            if pad:
                self._cur += _PAD[4 - pad]
            return
        if isinstance(data, FileSlice):
            if len(data) < ZERO_COPY_THRESHOLD:
                self.pack_opaque(data.view, max_size)
                return
            n = len(data)
            if n > (_MAX_U32 if max_size is None else max_size):
                raise XdrError(f"opaque too long: {n} > {max_size}")
            self._cur += _U32.pack(n)
            self._chunks.append(bytes(self._cur))
            self._cur = bytearray()
            self._chunks.append(data)
            pad = _pad_len(n)
            if pad:
                self._cur += _PAD[4 - pad]
            return
        view = memoryview(data).cast("B") if not isinstance(data, bytes) else data
        n = len(view)
        if n > (_MAX_U32 if max_size is None else max_size):
            raise XdrError(f"opaque too long: {n} > {max_size}")
        if n < ZERO_COPY_THRESHOLD:  # a handle, a name: into the buffer, padded
            self._cur += _U32.pack(n)
            self._cur += view
            if n & 3:
                self._cur += _PAD[n & 3]
            return
        self._cur += _U32.pack(n)
        self._append_data(view)

    def pack_string(self, value: str, max_size: int | None = None) -> None:
        """Append a string as UTF-8 opaque data (§4.11).

        Undecodable bytes received earlier (kept as lone surrogates by
        `Unpacker.unpack_string`) are restored byte for byte.

        Raises:
            XdrError: if the string cannot be encoded or is too long.
        """
        try:
            raw = value.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError as err:
            raise XdrError(f"string not encodable: {value!r}") from err
        self.pack_opaque(raw, max_size)

    def _append_data(self, data: bytes | memoryview) -> None:
        self._append_unpadded(data)
        pad = _pad_len(len(data))
        if pad:
            self._cur += _PAD[4 - pad]

    def _append_unpadded(self, data: bytes | memoryview) -> None:
        if len(data) >= ZERO_COPY_THRESHOLD:
            if self._cur:
                self._chunks.append(bytes(self._cur))
                self._cur = bytearray()
            self._chunks.append(data)
        else:
            self._cur += data

    # -- composite types (RFC 4506 §4.12-4.19)

    def pack_array(self, items: Sequence[T], pack_item: Callable[[T], None]) -> None:
        """Append a counted (variable-length) array (§4.13)."""
        self.pack_uint(len(items))
        for item in items:
            pack_item(item)

    def pack_optional(self, value: T | None, pack_item: Callable[[T], None]) -> None:
        """Append optional data: a bool, then the value if present (§4.19)."""
        if value is None:
            self.pack_bool(False)
        else:
            self.pack_bool(True)
            pack_item(value)

    def pack_list(self, items: Sequence[T], pack_item: Callable[[T], None]) -> None:
        """Append a linked list (``*next`` chains, §4.19): TRUE + item ..., FALSE."""
        for item in items:
            self.pack_bool(True)
            pack_item(item)
        self.pack_bool(False)

    def pack_struct(self, st: struct.Struct, *values: int) -> None:
        """Append integers with a precompiled big-endian `struct.Struct` (a fast path).

        Raises:
            XdrError: if a value does not fit its field.
        """
        try:
            self._cur += st.pack(*values)
        except struct.error as err:
            raise XdrError(str(err)) from err

    def pack_raw(self, data: Buffer) -> None:
        """Append already-encoded bytes as they are (no length, no padding)."""
        self._cur += data

    # -- output

    def __len__(self) -> int:
        return sum(len(c) for c in self._chunks) + len(self._cur)

    def get_buffers(self) -> list[bytes | memoryview]:
        """Return the encoded data as a list of buffers, for a vectored write (a
        `FileSlice` as its view)."""
        return [c.view if isinstance(c, FileSlice) else c for c in self.get_parts()]

    def get_parts(self) -> list[Part]:
        """Return the encoded data as `get_buffers` does, but a `FileSlice` as it is."""
        if self._cur:
            return [*self._chunks, bytes(self._cur)]
        return list(self._chunks)

    def get_buffer(self) -> bytes:
        """Return the encoded data as one `bytes` object."""
        if not self._chunks:
            return bytes(self._cur)
        return b"".join(self.get_buffers())


class Unpacker:
    """Decode XDR items (RFC 4506) from a bytes-like object.

    All methods raise `XdrError` on malformed input. Opaque data and strings are
    returned as copies (`bytes`, `str`), so the source buffer may be reused.
    Pad bytes are skipped without being checked, as most implementations do.
    """

    __slots__ = ("_data", "_pos")

    def __init__(self, data: Buffer, offset: int = 0) -> None:
        self._data = memoryview(data).cast("B") if not isinstance(data, bytes) else data
        self._pos = offset

    @property
    def position(self) -> int:
        """The offset of the next byte to decode."""
        return self._pos

    def remaining(self) -> int:
        """Return how many bytes are left to decode."""
        return len(self._data) - self._pos

    def done(self) -> None:
        """Check that all the data was consumed.

        Raises:
            XdrError: if bytes are left over.
        """
        if self._pos < len(self._data):
            raise XdrError(f"{len(self._data) - self._pos} trailing bytes")

    def rest(self) -> bytes:
        """Return (and consume) every byte that is left."""
        out = bytes(self._data[self._pos :])
        self._pos = len(self._data)
        return out

    def _take(self, n: int) -> int:
        pos = self._pos
        end = pos + n
        if end > len(self._data):
            raise XdrError(
                f"short buffer: need {n} bytes at offset {pos}, have {len(self._data) - pos}"
            )
        self._pos = end
        return pos

    # -- integers

    def unpack_struct(self, st: struct.Struct) -> tuple[int, ...]:
        """Read integers with a precompiled big-endian `struct.Struct` (a fast path)."""
        pos = self._take(st.size)
        values: tuple[int, ...] = st.unpack_from(self._data, pos)
        return values

    def unpack_uint(self) -> int:
        """Read an unsigned 32-bit integer (§4.2)."""
        pos = self._pos
        if pos + 4 > len(self._data):
            self._take(4)  # raises
        self._pos = pos + 4
        value: int = _U32.unpack_from(self._data, pos)[0]
        return value

    def unpack_int(self) -> int:
        """Read a signed 32-bit integer (§4.1)."""
        pos = self._pos
        if pos + 4 > len(self._data):
            self._take(4)  # raises
        self._pos = pos + 4
        value: int = _I32.unpack_from(self._data, pos)[0]
        return value

    def unpack_uhyper(self) -> int:
        """Read an unsigned 64-bit integer (§4.5)."""
        pos = self._pos
        if pos + 8 > len(self._data):
            self._take(8)  # raises
        self._pos = pos + 8
        value: int = _U64.unpack_from(self._data, pos)[0]
        return value

    def unpack_hyper(self) -> int:
        """Read a signed 64-bit integer (§4.5)."""
        pos = self._pos
        if pos + 8 > len(self._data):
            self._take(8)  # raises
        self._pos = pos + 8
        value: int = _I64.unpack_from(self._data, pos)[0]
        return value

    def unpack_bool(self) -> bool:
        """Read a boolean (§4.4).

        Raises:
            XdrError: if the value is neither 0 nor 1.
        """
        value = self.unpack_uint()
        if value > 1:
            raise XdrError(f"bad bool value {value}")
        return value == 1

    def unpack_enum(self, enum_type: type[E]) -> E:
        """Read an enum (§4.3) and convert it to `enum_type`.

        Raises:
            XdrError: if the value is not a member of `enum_type`.
        """
        value = self.unpack_int()
        try:
            return enum_type(value)
        except ValueError as err:
            raise XdrError(f"bad {enum_type.__name__} value {value}") from err

    # -- opaque data and strings

    def unpack_fopaque(self, size: int) -> bytes:
        """Read fixed-length opaque data of `size` bytes plus padding (§4.9)."""
        pos = self._take((size + 3) & ~3)
        return bytes(self._data[pos : pos + size])

    def unpack_opaque(self, max_size: int | None = None) -> bytes:
        """Read variable-length opaque data (§4.10).

        Raises:
            XdrError: if the length exceeds `max_size` or the data is short.
        """
        # in line (a file handle or a name in nearly every call): the length, the bytes
        data = self._data
        start = self._pos + 4
        if start > len(data):
            self._take(4)  # raises
        n: int = _U32.unpack_from(data, start - 4)[0]
        if max_size is not None and n > max_size:
            raise XdrError(f"opaque too long: {n} > {max_size}")
        end = start + ((n + 3) & ~3)
        if end > len(data):
            self._pos = start
            self._take(end - start)  # raises
        self._pos = end
        return bytes(data[start : start + n])

    def unpack_string(self, max_size: int | None = None) -> str:
        """Read a string (§4.11) as UTF-8; invalid bytes become lone surrogates.

        `Packer.pack_string` turns such a string back into the same bytes.
        """
        return self.unpack_opaque(max_size).decode("utf-8", "surrogateescape")

    # -- composite types

    def unpack_array(self, unpack_item: Callable[[], T], max_size: int | None = None) -> list[T]:
        """Read a counted array (§4.13).

        Raises:
            XdrError: if the count exceeds `max_size` or the data left.
        """
        n = self.unpack_uint()
        if max_size is not None and n > max_size:
            raise XdrError(f"array too long: {n} > {max_size}")
        if n > self.remaining():  # every XDR item takes at least 4 bytes; cheap DoS guard
            raise XdrError(f"array count {n} exceeds the data left")
        return [unpack_item() for _ in range(n)]

    def unpack_optional(self, unpack_item: Callable[[], T]) -> T | None:
        """Read optional data (§4.19): a bool, then the value if it is TRUE."""
        if self.unpack_bool():
            return unpack_item()
        return None

    def unpack_list(self, unpack_item: Callable[[], T], max_size: int | None = None) -> list[T]:
        """Read a linked list (``*next`` chains, §4.19) written by `Packer.pack_list`.

        Raises:
            XdrError: if there are more than `max_size` items or the data is short.
        """
        items: list[T] = []
        while self.unpack_bool():
            if max_size is not None and len(items) >= max_size:
                raise XdrError(f"list too long: > {max_size}")
            items.append(unpack_item())
        return items
