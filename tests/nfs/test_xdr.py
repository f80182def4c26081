"""XDR (RFC 4506): primitives, round trips of every wire type, and the fuzz invariant."""

from __future__ import annotations

import contextlib
import dataclasses
import struct
from typing import Any, ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nfs.protocol.nfs3  # noqa: F401 - loads every wire type
from nfs.protocol.nfs3 import Ftype3, Nfsstat3
from nfs.protocol.nfs3.codec import UINT, Codec, XdrStruct, compiled_packer
from nfs.protocol.xdr import ZERO_COPY_THRESHOLD, Packer, Unpacker, XdrError
from tests.nfs.strategies_nfs import WIRE_TYPES

FAST = settings(deadline=2000, max_examples=30)


def roundtrip(value: Any) -> Any:
    p = Packer()
    value.pack(p)
    data = p.get_buffer()
    assert len(data) % 4 == 0, "XDR items are multiples of 4 bytes"
    u = Unpacker(data)
    out = type(value).unpack(u)
    u.done()
    return out


@pytest.mark.parametrize("wire_type", list(WIRE_TYPES), ids=lambda t: t.__name__)
@FAST
@given(data=st.data())
def test_unpack_pack_is_identity_and_truncation_is_an_error(
    wire_type: Any, data: st.DataObject
) -> None:
    value = data.draw(WIRE_TYPES[wire_type])
    assert roundtrip(value) == value
    p = Packer()
    value.pack(p)
    encoded = p.get_buffer()
    cut = data.draw(st.integers(0, len(encoded) - 1))
    with pytest.raises(XdrError):
        u = Unpacker(encoded[:cut])
        wire_type.unpack(u)
        u.done()


@pytest.mark.parametrize("wire_type", list(WIRE_TYPES), ids=lambda t: t.__name__)
@FAST
@given(raw=st.binary(max_size=300))
def test_any_bytes_unpack_to_a_value_or_xdr_error(wire_type: Any, raw: bytes) -> None:
    with contextlib.suppress(XdrError):
        wire_type.unpack(Unpacker(raw))


def _structs() -> list[type[XdrStruct]]:
    found: list[type[XdrStruct]] = []
    todo = list(XdrStruct.__subclasses__())
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return sorted(found, key=lambda c: c.__name__)


@pytest.mark.parametrize("cls", _structs(), ids=lambda t: t.__name__)
def test_every_field_table_covers_its_dataclass(cls: type[XdrStruct]) -> None:
    # (the round trips above cover the tables' order; a resok through its result)
    assert len(cls.XDR) == len(dataclasses.fields(cls))  # type: ignore[arg-type]


def _packed_by_hand() -> list[type[XdrStruct]]:
    generic = XdrStruct.__dict__["pack"]
    return [
        cls
        for cls in _structs()
        if cls in WIRE_TYPES and cls.__dict__.get("pack") not in (generic, compiled_packer(cls))
    ]


def test_a_subclass_of_a_compiled_struct_packs_by_its_own_fields() -> None:
    @dataclasses.dataclass(frozen=True)
    class Pair(XdrStruct):
        a: int
        b: int
        XDR: ClassVar[tuple[Codec[int], ...]] = (UINT, UINT)

    @dataclasses.dataclass(frozen=True)
    class Triple(Pair):
        c: int
        XDR = (UINT, UINT, UINT)

    assert roundtrip(Pair(1, 2)) == Pair(1, 2)  # Pair's compiled pack is installed now
    p = Packer()
    Triple(1, 2, 3).pack(p)
    assert p.get_buffer() == struct.pack(">III", 1, 2, 3)
    assert roundtrip(Triple(1, 2, 3)) == Triple(1, 2, 3)


@pytest.mark.parametrize("cls", _packed_by_hand(), ids=lambda t: t.__name__)
@FAST
@given(data=st.data())
def test_a_struct_packed_by_hand_packs_as_its_field_table_says(
    cls: type[XdrStruct], data: st.DataObject
) -> None:
    # (post_op_attr and READ3resok are packed by hand, for speed; their tables unpack)
    value = data.draw(WIRE_TYPES[cls])
    by_hand, by_table = Packer(), Packer()
    value.pack(by_hand)
    compiled_packer(cls)(value, by_table)
    assert by_hand.get_buffer() == by_table.get_buffer()


def test_integers_are_big_endian_and_range_checked() -> None:
    p = Packer()
    p.pack_uint(1)
    p.pack_int(-2)
    p.pack_uhyper(3)
    p.pack_hyper(-4)
    p.pack_bool(True)
    assert p.get_buffer() == struct.pack(">Iiqqi", 1, -2, 3, -4, 1)
    with pytest.raises(XdrError):
        p.pack_uint(-1)
    with pytest.raises(XdrError):
        p.pack_uint(1 << 32)
    with pytest.raises(XdrError):
        p.pack_int(1 << 31)
    with pytest.raises(XdrError):
        p.pack_uhyper(1 << 64)
    with pytest.raises(XdrError):
        p.pack_hyper(1 << 63)


def test_opaque_is_padded_to_four_bytes() -> None:
    p = Packer()
    p.pack_opaque(b"abcde")
    assert p.get_buffer() == b"\0\0\0\x05abcde\0\0\0"
    p = Packer()
    p.pack_fopaque(3, b"xyz")
    assert p.get_buffer() == b"xyz\0"


def test_large_opaque_is_kept_by_reference() -> None:
    payload = bytes(range(256)) * (ZERO_COPY_THRESHOLD // 256 + 1)
    p = Packer()
    p.pack_uint(7)
    p.pack_opaque(payload)
    p.pack_uint(9)
    parts = p.get_buffers()
    assert any(part is payload for part in parts)
    u = Unpacker(p.get_buffer())
    assert (u.unpack_uint(), u.unpack_opaque(), u.unpack_uint()) == (7, payload, 9)


def test_memoryview_input_is_accepted() -> None:
    p = Packer()
    p.pack_opaque(memoryview(b"abc"))
    p.pack_opaque(bytearray(b"de"))
    u = Unpacker(memoryview(p.get_buffer()))
    assert u.unpack_opaque() == b"abc"
    assert u.unpack_opaque() == b"de"


def test_strings_round_trip_undecodable_bytes() -> None:
    p = Packer()
    p.pack_opaque(b"caf\xe9")  # latin-1, not UTF-8: a Linux file name can be any bytes
    name = Unpacker(p.get_buffer()).unpack_string()
    p2 = Packer()
    p2.pack_string(name)
    assert p2.get_buffer() == p.get_buffer()
    with pytest.raises(XdrError):
        Packer().pack_string("\ud800")  # a surrogate that no byte produced


@pytest.mark.parametrize(
    ("raw", "read"),
    [
        (b"\0\0\0", lambda u: u.unpack_uint()),
        (b"\0\0\0\x02", lambda u: u.unpack_bool()),
        (b"\0\0\0\x63", lambda u: u.unpack_enum(Ftype3)),
        (b"\0\0\0\x09abc", lambda u: u.unpack_opaque()),
        (b"\0\0\0\x09abcdefghi\0\0\0", lambda u: u.unpack_opaque(8)),
        (b"\0\0\0\x09abcdefghi\0\0\0", lambda u: u.unpack_string(4)),
        (b"\xff\xff\xff\xff", lambda u: u.unpack_array(u.unpack_uint)),
        (b"\0\0\0\x03\0\0\0\x01", lambda u: u.unpack_array(u.unpack_uint, 2)),
        (b"\0\0\0\x01\0\0\0\x01\0\0\0\x00", lambda u: u.unpack_list(u.unpack_uint, 0)),
        (b"\0\0\0\x01\0\0\0", lambda u: u.unpack_optional(u.unpack_uint)),
    ],
)
def test_decode_errors_are_xdr_errors(raw: bytes, read: Any) -> None:
    with pytest.raises(XdrError):
        read(Unpacker(raw))


def test_trailing_bytes_are_reported_by_done() -> None:
    u = Unpacker(b"\0\0\0\x01\0")
    assert u.unpack_uint() == 1
    assert u.remaining() == 1
    with pytest.raises(XdrError):
        u.done()


def test_xdr_error_is_a_value_error() -> None:
    assert issubclass(XdrError, ValueError)


def test_enum_decoding_gives_members() -> None:
    p = Packer()
    p.pack_enum(Nfsstat3.NFS3ERR_STALE)
    assert Unpacker(p.get_buffer()).unpack_enum(Nfsstat3) is Nfsstat3.NFS3ERR_STALE
