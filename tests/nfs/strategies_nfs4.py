"""Hypothesis strategies for the NFSv4.0 wire types (`nfs.protocol.nfs4.types`, `nfs.protocol.nfs4.ops`)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from nfs.protocol.nfs4 import ops as o
from nfs.protocol.nfs4.types import (
    ATTR_CODECS,
    ChangeInfo4,
    Fattr4,
    Fattr4Id,
    Fsid4,
    NfsFtype4,
    Nfsstat4,
    Nfstime4,
    OpNum4,
    SetTime4,
    Specdata4,
    Stateid4,
    StateOwner4,
    encode_fattr,
)

u32 = st.integers(0, 0xFFFFFFFF)
u64 = st.integers(0, 0xFFFFFFFFFFFFFFFF)
i64 = st.integers(-(1 << 63), (1 << 63) - 1)
verf = st.binary(min_size=8, max_size=8)
names = st.text(min_size=1, max_size=40)
strings = st.text(max_size=40)
bitmaps = st.lists(u32, max_size=4).map(tuple)
blobs = st.binary(max_size=200)

stateids = st.builds(Stateid4, u32, st.binary(min_size=12, max_size=12))
owners = st.builds(StateOwner4, u64, st.binary(max_size=64))
cinfos = st.builds(ChangeInfo4, st.booleans(), u64, u64)
times = st.builds(Nfstime4, i64, st.integers(0, 999_999_999))
settimes = st.builds(SetTime4, st.none() | times)
specdata = st.builds(Specdata4, u32, u32)

A = Fattr4Id
_ATTR_VALUES: dict[int, st.SearchStrategy[Any]] = {
    A.SUPPORTED_ATTRS: bitmaps,
    A.TYPE: st.sampled_from(NfsFtype4),
    A.FSID: st.builds(Fsid4, u64, u64),
    A.RDATTR_ERROR: u32,
    A.FILEHANDLE: st.binary(max_size=128),
    A.OWNER: strings,
    A.OWNER_GROUP: strings,
    A.RAWDEV: specdata,
    A.TIME_ACCESS: times,
    A.TIME_DELTA: times,
    A.TIME_METADATA: times,
    A.TIME_MODIFY: times,
    A.TIME_ACCESS_SET: settimes,
    A.TIME_MODIFY_SET: settimes,
}
_U32_ATTRS = {A.FH_EXPIRE_TYPE, A.LEASE_TIME, A.ACLSUPPORT, A.MAXLINK, A.MAXNAME, A.MODE}
_U32_ATTRS |= {A.NUMLINKS}
_BOOL_ATTRS = {
    A.LINK_SUPPORT,
    A.SYMLINK_SUPPORT,
    A.NAMED_ATTR,
    A.UNIQUE_HANDLES,
    A.CANSETTIME,
    A.CASE_INSENSITIVE,
    A.CASE_PRESERVING,
    A.CHOWN_RESTRICTED,
    A.HOMOGENEOUS,
    A.NO_TRUNC,
}


def attr_value(bit: int) -> st.SearchStrategy[Any]:
    """A value of attribute ``bit``."""
    if bit in _ATTR_VALUES:
        return _ATTR_VALUES[bit]
    if bit in _U32_ATTRS:
        return u32
    if bit in _BOOL_ATTRS:
        return st.booleans()
    return u64


attr_maps = st.lists(st.sampled_from(sorted(ATTR_CODECS)), unique=True, max_size=12).flatmap(
    lambda bits: st.fixed_dictionaries({b: attr_value(b) for b in bits})
)
"""``{attribute: value}`` maps of supported attributes."""

fattrs = attr_maps.map(encode_fattr)
wire_fattrs = st.builds(Fattr4, bitmaps, blobs)

createtypes = st.one_of(
    st.builds(o.CreateType4, st.just(NfsFtype4.NF4LNK), linkdata=strings),
    st.builds(
        o.CreateType4, st.sampled_from([NfsFtype4.NF4BLK, NfsFtype4.NF4CHR]), devdata=specdata
    ),
    st.builds(
        o.CreateType4,
        st.sampled_from([NfsFtype4.NF4DIR, NfsFtype4.NF4SOCK, NfsFtype4.NF4FIFO, NfsFtype4.NF4REG]),
    ),
)
openflags = st.one_of(
    st.just(o.OpenFlag4()),
    st.builds(o.OpenFlag4, st.sampled_from([o.UNCHECKED4, o.GUARDED4]), createattrs=wire_fattrs),
    st.builds(o.OpenFlag4, st.just(o.EXCLUSIVE4), createverf=verf),
)
claims = st.one_of(
    st.builds(o.OpenClaim4, st.sampled_from([o.CLAIM_NULL, o.CLAIM_DELEGATE_PREV]), file=names),
    st.builds(o.OpenClaim4, st.just(o.CLAIM_PREVIOUS), delegate_type=u32),
    st.builds(o.OpenClaim4, st.just(o.CLAIM_DELEGATE_CUR), file=names, delegate_stateid=stateids),
)
lockers = st.one_of(
    st.builds(o.Locker4, st.builds(o.OpenToLockOwner4, u32, stateids, u32, owners)),
    st.builds(o.Locker4, st.builds(o.ExistLockOwner4, stateids, u32)),
)

O = OpNum4  # noqa: E741
ARGS: dict[OpNum4, st.SearchStrategy[Any]] = {
    O.OP_ACCESS: st.builds(o.AccessArgs, u32),
    O.OP_CLOSE: st.builds(o.CloseArgs, u32, stateids),
    O.OP_COMMIT: st.builds(o.CommitArgs, u64, u32),
    O.OP_CREATE: st.builds(o.CreateArgs, createtypes, names, wire_fattrs),
    O.OP_DELEGPURGE: st.builds(o.ClientidArgs, u64),
    O.OP_DELEGRETURN: st.builds(o.StateidArgs, stateids),
    O.OP_GETATTR: st.builds(o.GetattrArgs, bitmaps),
    O.OP_GETFH: st.just(o.Void()),
    O.OP_LINK: st.builds(o.NameArgs, names),
    O.OP_LOCK: st.builds(o.LockArgs, u32, st.booleans(), u64, u64, lockers),
    O.OP_LOCKT: st.builds(o.LocktArgs, u32, u64, u64, owners),
    O.OP_LOCKU: st.builds(o.LockuArgs, u32, u32, stateids, u64, u64),
    O.OP_LOOKUP: st.builds(o.NameArgs, names),
    O.OP_LOOKUPP: st.just(o.Void()),
    O.OP_NVERIFY: st.builds(o.FattrArgs, wire_fattrs),
    O.OP_OPEN: st.builds(o.OpenArgs, u32, u32, u32, owners, openflags, claims),
    O.OP_OPENATTR: st.builds(o.OpenattrArgs, st.booleans()),
    O.OP_OPEN_CONFIRM: st.builds(o.OpenConfirmArgs, stateids, u32),
    O.OP_OPEN_DOWNGRADE: st.builds(o.OpenDowngradeArgs, stateids, u32, u32, u32),
    O.OP_PUTFH: st.builds(o.PutfhArgs, st.binary(max_size=128)),
    O.OP_PUTPUBFH: st.just(o.Void()),
    O.OP_PUTROOTFH: st.just(o.Void()),
    O.OP_READ: st.builds(o.ReadArgs, stateids, u64, u32),
    O.OP_READDIR: st.builds(o.ReaddirArgs, u64, verf, u32, u32, bitmaps),
    O.OP_READLINK: st.just(o.Void()),
    O.OP_REMOVE: st.builds(o.NameArgs, names),
    O.OP_RENAME: st.builds(o.RenameArgs, names, names),
    O.OP_RENEW: st.builds(o.ClientidArgs, u64),
    O.OP_RESTOREFH: st.just(o.Void()),
    O.OP_SAVEFH: st.just(o.Void()),
    O.OP_SECINFO: st.builds(o.NameArgs, names),
    O.OP_SETATTR: st.builds(o.SetattrArgs, stateids, wire_fattrs),
    O.OP_SETCLIENTID: st.builds(
        o.SetclientidArgs, verf, st.binary(max_size=100), u32, strings, strings, u32
    ),
    O.OP_SETCLIENTID_CONFIRM: st.builds(o.SetclientidConfirmArgs, u64, verf),
    O.OP_VERIFY: st.builds(o.FattrArgs, wire_fattrs),
    O.OP_WRITE: st.builds(o.WriteArgs, stateids, u64, u32, blobs),
    O.OP_RELEASE_LOCKOWNER: st.builds(o.OwnerArgs, owners),
    O.OP_ILLEGAL: st.just(o.Void()),
}
"""The arguments of every operation."""

BODIES: dict[type[Any], st.SearchStrategy[Any]] = {
    o.AccessResOk: st.builds(o.AccessResOk, u32, u32),
    Stateid4: stateids,
    o.VerfRes: st.builds(o.VerfRes, verf),
    o.CreateResOk: st.builds(o.CreateResOk, cinfos, bitmaps),
    Fattr4: wire_fattrs,
    o.FhRes: st.builds(o.FhRes, st.binary(max_size=128)),
    ChangeInfo4: cinfos,
    o.OpenResOk: st.builds(o.OpenResOk, stateids, cinfos, u32, bitmaps),
    o.ReadResOk: st.builds(o.ReadResOk, st.booleans(), blobs),
    o.ReaddirResOk: st.builds(
        o.ReaddirResOk,
        verf,
        st.lists(st.builds(o.Entry4, u64, names, wire_fattrs), max_size=4).map(tuple),
        st.booleans(),
    ),
    o.LinkText: st.builds(o.LinkText, strings),
    o.RenameResOk: st.builds(o.RenameResOk, cinfos, cinfos),
    o.SecinfoResOk: st.builds(
        o.SecinfoResOk, st.lists(st.sampled_from([0, 1, 2]), max_size=4).map(tuple)
    ),
    o.AttrSet: st.builds(o.AttrSet, bitmaps),
    o.SetclientidResOk: st.builds(o.SetclientidResOk, u64, verf),
    o.ClientAddr4: st.builds(o.ClientAddr4, strings, strings),
    o.WriteResOk: st.builds(o.WriteResOk, u32, u32, verf),
    o.Lock4Denied: st.builds(o.Lock4Denied, u64, u64, u32, owners),
}
"""A value of every result body type."""


@st.composite
def results(draw: st.DrawFn, op: OpNum4 | None = None) -> o.Nfs4Res:
    """A result of ``op`` (any op by default) with any status and the body it selects."""
    if op is None:
        op = draw(st.sampled_from(OpNum4))
    status = draw(st.sampled_from(Nfsstat4))
    want = o.body_type(op, status)
    return o.Nfs4Res(op, status, draw(BODIES[want]) if want is not None else None)


ops = st.sampled_from(sorted(ARGS)).flatmap(lambda op: st.builds(o.Nfs4Op, st.just(op), ARGS[op]))
compound_args = st.builds(
    o.Compound4Args,
    strings,
    u32,
    st.lists(ops.filter(lambda x: x.op != OpNum4.OP_ILLEGAL), max_size=6).map(tuple),
)
compound_res = st.builds(
    o.Compound4Res, st.sampled_from(Nfsstat4), strings, st.lists(results(), max_size=6).map(tuple)
)
