"""The NFSv4.0 codec (nfs.protocol.nfs4.types, nfs.protocol.nfs4.ops): round trips of every type, the
attribute codec, and the fuzz invariant (any bytes give a value or XdrError)."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nfs.protocol.nfs4 import ops as o
from nfs.protocol.nfs4.types import (
    AttrNotSupp,
    Fattr4,
    Fattr4Id,
    Nfsstat4,
    OpNum4,
    bitmap_of,
    bits_of,
    decode_fattr,
    encode_fattr,
)
from nfs.protocol.xdr import Packer, Unpacker, XdrError
from tests.nfs import strategies_nfs4 as s


def roundtrip(value: Any, unpack: Any) -> Any:
    p = Packer()
    value.pack(p)
    u = Unpacker(p.get_buffer())
    out = unpack(u)
    u.done()
    return out


@pytest.mark.parametrize("op", sorted(s.ARGS), ids=lambda op: op.name)
@given(data=st.data())
def test_every_operation_s_arguments_round_trip(op: OpNum4, data: st.DataObject) -> None:
    args = data.draw(s.ARGS[op])
    assert roundtrip(args, o.ARG_TYPES[op].unpack) == args


def test_every_operation_has_arguments_and_a_strategy() -> None:
    assert set(o.ARG_TYPES) == set(OpNum4) == set(s.ARGS)


@pytest.mark.parametrize("op", sorted(OpNum4), ids=lambda op: op.name)
@given(data=st.data())
def test_every_operation_s_results_round_trip(op: OpNum4, data: st.DataObject) -> None:
    res = data.draw(s.results(op))
    assert roundtrip(res, o.Nfs4Res.unpack) == res


@given(s.compound_args)
def test_compound_args_round_trip(args: o.Compound4Args) -> None:
    assert roundtrip(args, o.Compound4Args.unpack) == args


@given(s.compound_res)
def test_compound_results_round_trip(res: o.Compound4Res) -> None:
    assert roundtrip(res, o.Compound4Res.unpack) == res


@given(s.attr_maps)
def test_attribute_values_round_trip_through_fattr4(values: dict[int, Any]) -> None:
    fattr = encode_fattr(values)
    assert bits_of(fattr.mask) == sorted(values)
    assert decode_fattr(roundtrip(fattr, Fattr4.unpack)) == values


@given(st.sets(st.integers(0, 200)))
def test_bitmaps_hold_exactly_their_bits(bits: set[int]) -> None:
    bitmap = bitmap_of(bits)
    assert bits_of(bitmap) == sorted(bits)
    assert not bitmap or bitmap[-1] != 0


def test_an_unknown_attribute_is_attrnotsupp_not_garbage() -> None:
    with pytest.raises(AttrNotSupp):
        decode_fattr(Fattr4(bitmap_of([12]), b""))  # acl: not supported
    with pytest.raises(AttrNotSupp):
        encode_fattr({12: ()})


def test_attribute_values_must_fill_the_opaque_exactly() -> None:
    good = encode_fattr({Fattr4Id.SIZE: 5})
    with pytest.raises(XdrError):
        decode_fattr(Fattr4(good.mask, good.vals + b"\0\0\0\0"))
    with pytest.raises(XdrError):
        decode_fattr(Fattr4(good.mask, good.vals[:4]))


def test_an_unknown_operation_ends_the_compound_as_illegal() -> None:
    p = Packer()
    p.pack_string("t")
    p.pack_uint(0)
    p.pack_uint(3)
    p.pack_uint(OpNum4.OP_PUTROOTFH)
    p.pack_uint(9999)  # no such operation: what follows cannot be decoded
    p.pack_uint(0xDEADBEEF)
    args = o.Compound4Args.unpack(Unpacker(p.get_buffer()))
    assert [op.op for op in args.ops] == [OpNum4.OP_PUTROOTFH, OpNum4.OP_ILLEGAL]


def test_a_result_body_must_be_the_one_its_status_selects() -> None:
    with pytest.raises(XdrError):
        o.Nfs4Res(OpNum4.OP_CLOSE, Nfsstat4.NFS4_OK).pack(Packer())
    with pytest.raises(XdrError):
        o.Nfs4Res(OpNum4.OP_CLOSE, Nfsstat4.NFS4ERR_INVAL, o.AttrSet(())).pack(Packer())
    # SETATTR's bitmap follows every status
    res = o.Nfs4Res(OpNum4.OP_SETATTR, Nfsstat4.NFS4ERR_PERM, o.AttrSet(()))
    assert roundtrip(res, o.Nfs4Res.unpack) == res


@given(st.binary(max_size=300))
def test_any_bytes_decode_to_a_compound_or_xdr_error(data: bytes) -> None:
    with contextlib.suppress(XdrError):
        o.Compound4Args.unpack(Unpacker(data))


@given(s.compound_args, st.data())
def test_a_truncated_compound_is_xdr_error(args: o.Compound4Args, data: st.DataObject) -> None:
    p = Packer()
    args.pack(p)
    raw = p.get_buffer()
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(XdrError):
        u = Unpacker(raw[:cut])
        o.Compound4Args.unpack(u)
        u.done()
