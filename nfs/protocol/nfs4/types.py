"""NFSv4.0 wire types (RFC 7530 §2, §5, RFC 7531 the XDR): statuses, op numbers, stateids,
bitmaps and the attribute codec (fattr4).

`Fattr4` is the wire form (a bitmap and the packed values); `encode_fattr` and
`decode_fattr` turn it into a ``{attribute number: value}`` map and back, one codec per
attribute in `ATTR_CODECS` (values in increasing attribute order, RFC 7530 §5.1).

Sans-IO and pure: imports only `nfs.protocol.xdr` and the field codecs of `nfs.protocol.nfs3.codec`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from nfs.protocol.nfs3.codec import (
    BOOL,
    UHYPER,
    UINT,
    Codec,
    XdrStruct,
    enum_of,
    fopaque,
    opaque,
    string,
)
from nfs.protocol.xdr import Packer, Unpacker, XdrError

__all__ = [
    "ATTR_CODECS",
    "BITMAP",
    "NFS4_FHSIZE",
    "NFS4_OPAQUE_LIMIT",
    "NFS4_VERIFIER_SIZE",
    "NFS_V4",
    "AttrNotSupp",
    "ChangeInfo4",
    "Fattr4",
    "Fattr4Id",
    "Fsid4",
    "NfsFtype4",
    "Nfsstat4",
    "Nfstime4",
    "OpNum4",
    "SetTime4",
    "Specdata4",
    "StateOwner4",
    "Stateid4",
    "bitmap_of",
    "bits_of",
    "decode_fattr",
    "encode_fattr",
]

NFS_V4: Final = 4
NFS4_FHSIZE: Final = 128
NFS4_VERIFIER_SIZE: Final = 8
NFS4_OPAQUE_LIMIT: Final = 1024
MAX_NAME: Final = 4096


class Nfsstat4(enum.IntEnum):
    """nfsstat4 (RFC 7530 §13.1)."""

    NFS4_OK = 0
    NFS4ERR_PERM = 1
    NFS4ERR_NOENT = 2
    NFS4ERR_IO = 5
    NFS4ERR_NXIO = 6
    NFS4ERR_ACCESS = 13
    NFS4ERR_EXIST = 17
    NFS4ERR_XDEV = 18
    NFS4ERR_NOTDIR = 20
    NFS4ERR_ISDIR = 21
    NFS4ERR_INVAL = 22
    NFS4ERR_FBIG = 27
    NFS4ERR_NOSPC = 28
    NFS4ERR_ROFS = 30
    NFS4ERR_MLINK = 31
    NFS4ERR_NAMETOOLONG = 63
    NFS4ERR_NOTEMPTY = 66
    NFS4ERR_DQUOT = 69
    NFS4ERR_STALE = 70
    NFS4ERR_BADHANDLE = 10001
    NFS4ERR_BAD_COOKIE = 10003
    NFS4ERR_NOTSUPP = 10004
    NFS4ERR_TOOSMALL = 10005
    NFS4ERR_SERVERFAULT = 10006
    NFS4ERR_BADTYPE = 10007
    NFS4ERR_DELAY = 10008
    NFS4ERR_SAME = 10009
    NFS4ERR_DENIED = 10010
    NFS4ERR_EXPIRED = 10011
    NFS4ERR_LOCKED = 10012
    NFS4ERR_GRACE = 10013
    NFS4ERR_FHEXPIRED = 10014
    NFS4ERR_SHARE_DENIED = 10015
    NFS4ERR_WRONGSEC = 10016
    NFS4ERR_CLID_INUSE = 10017
    NFS4ERR_RESOURCE = 10018
    NFS4ERR_MOVED = 10019
    NFS4ERR_NOFILEHANDLE = 10020
    NFS4ERR_MINOR_VERS_MISMATCH = 10021
    NFS4ERR_STALE_CLIENTID = 10022
    NFS4ERR_STALE_STATEID = 10023
    NFS4ERR_OLD_STATEID = 10024
    NFS4ERR_BAD_STATEID = 10025
    NFS4ERR_BAD_SEQID = 10026
    NFS4ERR_NOT_SAME = 10027
    NFS4ERR_LOCK_RANGE = 10028
    NFS4ERR_SYMLINK = 10029
    NFS4ERR_RESTOREFH = 10030
    NFS4ERR_LEASE_MOVED = 10031
    NFS4ERR_ATTRNOTSUPP = 10032
    NFS4ERR_NO_GRACE = 10033
    NFS4ERR_RECLAIM_BAD = 10034
    NFS4ERR_RECLAIM_CONFLICT = 10035
    NFS4ERR_BADXDR = 10036
    NFS4ERR_LOCKS_HELD = 10037
    NFS4ERR_OPENMODE = 10038
    NFS4ERR_BADOWNER = 10039
    NFS4ERR_BADCHAR = 10040
    NFS4ERR_BADNAME = 10041
    NFS4ERR_BAD_RANGE = 10042
    NFS4ERR_LOCK_NOTSUPP = 10043
    NFS4ERR_OP_ILLEGAL = 10044
    NFS4ERR_DEADLOCK = 10045
    NFS4ERR_FILE_OPEN = 10046
    NFS4ERR_ADMIN_REVOKED = 10047
    NFS4ERR_CB_PATH_DOWN = 10048


class OpNum4(enum.IntEnum):
    """nfs_opnum4 (RFC 7530 §16): the operations of a COMPOUND."""

    OP_ACCESS = 3
    OP_CLOSE = 4
    OP_COMMIT = 5
    OP_CREATE = 6
    OP_DELEGPURGE = 7
    OP_DELEGRETURN = 8
    OP_GETATTR = 9
    OP_GETFH = 10
    OP_LINK = 11
    OP_LOCK = 12
    OP_LOCKT = 13
    OP_LOCKU = 14
    OP_LOOKUP = 15
    OP_LOOKUPP = 16
    OP_NVERIFY = 17
    OP_OPEN = 18
    OP_OPENATTR = 19
    OP_OPEN_CONFIRM = 20
    OP_OPEN_DOWNGRADE = 21
    OP_PUTFH = 22
    OP_PUTPUBFH = 23
    OP_PUTROOTFH = 24
    OP_READ = 25
    OP_READDIR = 26
    OP_READLINK = 27
    OP_REMOVE = 28
    OP_RENAME = 29
    OP_RENEW = 30
    OP_RESTOREFH = 31
    OP_SAVEFH = 32
    OP_SECINFO = 33
    OP_SETATTR = 34
    OP_SETCLIENTID = 35
    OP_SETCLIENTID_CONFIRM = 36
    OP_VERIFY = 37
    OP_WRITE = 38
    OP_RELEASE_LOCKOWNER = 39
    OP_ILLEGAL = 10044


class NfsFtype4(enum.IntEnum):
    """nfs_ftype4 (RFC 7530 §2.2)."""

    NF4REG = 1
    NF4DIR = 2
    NF4BLK = 3
    NF4CHR = 4
    NF4LNK = 5
    NF4SOCK = 6
    NF4FIFO = 7
    NF4ATTRDIR = 8
    NF4NAMEDATTR = 9


class Fattr4Id(enum.IntEnum):
    """The attribute numbers this server knows (RFC 7530 §5.6, §5.7)."""

    SUPPORTED_ATTRS = 0
    TYPE = 1
    FH_EXPIRE_TYPE = 2
    CHANGE = 3
    SIZE = 4
    LINK_SUPPORT = 5
    SYMLINK_SUPPORT = 6
    NAMED_ATTR = 7
    FSID = 8
    UNIQUE_HANDLES = 9
    LEASE_TIME = 10
    RDATTR_ERROR = 11
    ACLSUPPORT = 13
    CANSETTIME = 15
    CASE_INSENSITIVE = 16
    CASE_PRESERVING = 17
    CHOWN_RESTRICTED = 18
    FILEHANDLE = 19
    FILEID = 20
    FILES_AVAIL = 21
    FILES_FREE = 22
    FILES_TOTAL = 23
    HOMOGENEOUS = 26
    MAXFILESIZE = 27
    MAXLINK = 28
    MAXNAME = 29
    MAXREAD = 30
    MAXWRITE = 31
    MODE = 33
    NO_TRUNC = 34
    NUMLINKS = 35
    OWNER = 36
    OWNER_GROUP = 37
    RAWDEV = 41
    SPACE_AVAIL = 42
    SPACE_FREE = 43
    SPACE_TOTAL = 44
    SPACE_USED = 45
    TIME_ACCESS = 47
    TIME_ACCESS_SET = 48
    TIME_DELTA = 51
    TIME_METADATA = 52
    TIME_MODIFY = 53
    TIME_MODIFY_SET = 54
    MOUNTED_ON_FILEID = 55


BITMAP: Final[Codec[tuple[int, ...]]] = Codec(
    lambda p, v: p.pack_array(v, p.pack_uint),
    lambda u: tuple(u.unpack_array(u.unpack_uint, 64)),
)
"""bitmap4: uint32<> (at most 64 words accepted)."""


def bits_of(bitmap: tuple[int, ...]) -> list[int]:
    """Return the bit numbers set in a bitmap4, in increasing order."""
    return [w * 32 + b for w, word in enumerate(bitmap) for b in range(32) if word >> b & 1]


def bitmap_of(bits: Any) -> tuple[int, ...]:
    """Return the shortest bitmap4 with `bits` set (no trailing zero words)."""
    words: list[int] = []
    for bit in bits:
        w, b = divmod(int(bit), 32)
        while len(words) <= w:
            words.append(0)
        words[w] |= 1 << b
    return tuple(words)


@dataclass(frozen=True)
class Stateid4(XdrStruct):
    """stateid4 (RFC 7530 §9.1.4): a seqid and 12 opaque bytes."""

    seqid: int
    other: bytes
    XDR = (UINT, fopaque(12))


@dataclass(frozen=True)
class StateOwner4(XdrStruct):
    """state_owner4 / open_owner4 / lock_owner4 (RFC 7530 §9.1.1)."""

    clientid: int
    owner: bytes
    XDR = (UHYPER, opaque(NFS4_OPAQUE_LIMIT))


@dataclass(frozen=True)
class ChangeInfo4(XdrStruct):
    """change_info4 (RFC 7530 §3.3.3)."""

    atomic: bool
    before: int
    after: int
    XDR = (BOOL, UHYPER, UHYPER)


@dataclass(frozen=True)
class Fsid4(XdrStruct):
    """fsid4 (RFC 7530 §3.3.8)."""

    major: int
    minor: int
    XDR = (UHYPER, UHYPER)


@dataclass(frozen=True)
class Specdata4(XdrStruct):
    """specdata4 (RFC 7530 §3.3.11)."""

    specdata1: int
    specdata2: int
    XDR = (UINT, UINT)


_HYPER: Final[Codec[int]] = Codec(Packer.pack_hyper, Unpacker.unpack_hyper)


@dataclass(frozen=True)
class Nfstime4(XdrStruct):
    """nfstime4 (RFC 7530 §3.3.1): signed seconds, nanoseconds < 10**9."""

    seconds: int
    nseconds: int
    XDR = (_HYPER, UINT)

    def __post_init__(self) -> None:
        if not 0 <= self.nseconds < 1_000_000_000:
            raise XdrError(f"nfstime4 nseconds out of range: {self.nseconds}")


@dataclass(frozen=True)
class SetTime4:
    """settime4 (RFC 7530 §3.3.6): the server's time (``time`` None) or the client's."""

    time: Nfstime4 | None = None

    def pack(self, p: Packer) -> None:
        """Append the time_how4 discriminant and the client's time if given."""
        if self.time is None:
            p.pack_uint(0)  # SET_TO_SERVER_TIME4
        else:
            p.pack_uint(1)  # SET_TO_CLIENT_TIME4
            self.time.pack(p)

    @classmethod
    def unpack(cls, u: Unpacker) -> SetTime4:
        """Read a settime4."""
        how = u.unpack_uint()
        if how == 0:
            return cls(None)
        if how == 1:
            return cls(Nfstime4.unpack(u))
        raise XdrError(f"bad time_how4 {how}")


@dataclass(frozen=True)
class Fattr4(XdrStruct):
    """fattr4 (RFC 7530 §3.3.13): which attributes, and their values packed in bit order."""

    mask: tuple[int, ...] = ()
    vals: bytes = b""
    XDR = (BITMAP, opaque())


class AttrNotSupp(XdrError):
    """A fattr4 names an attribute this server does not know (NFS4ERR_ATTRNOTSUPP)."""


def _wire(cls: Any) -> Codec[Any]:
    return Codec(lambda p, v: v.pack(p), cls.unpack)


_OWNER: Final = string(NFS4_OPAQUE_LIMIT)
_TIME: Final = _wire(Nfstime4)
_SETTIME: Final = _wire(SetTime4)
_NSTAT: Final[Codec[int]] = Codec(Packer.pack_uint, Unpacker.unpack_uint)

A = Fattr4Id
ATTR_CODECS: Final[Mapping[int, Codec[Any]]] = {
    A.SUPPORTED_ATTRS: BITMAP,
    A.TYPE: enum_of(NfsFtype4),
    A.FH_EXPIRE_TYPE: UINT,
    A.CHANGE: UHYPER,
    A.SIZE: UHYPER,
    A.LINK_SUPPORT: BOOL,
    A.SYMLINK_SUPPORT: BOOL,
    A.NAMED_ATTR: BOOL,
    A.FSID: _wire(Fsid4),
    A.UNIQUE_HANDLES: BOOL,
    A.LEASE_TIME: UINT,
    A.RDATTR_ERROR: _NSTAT,
    A.ACLSUPPORT: UINT,
    A.CANSETTIME: BOOL,
    A.CASE_INSENSITIVE: BOOL,
    A.CASE_PRESERVING: BOOL,
    A.CHOWN_RESTRICTED: BOOL,
    A.FILEHANDLE: opaque(NFS4_FHSIZE),
    A.FILEID: UHYPER,
    A.FILES_AVAIL: UHYPER,
    A.FILES_FREE: UHYPER,
    A.FILES_TOTAL: UHYPER,
    A.HOMOGENEOUS: BOOL,
    A.MAXFILESIZE: UHYPER,
    A.MAXLINK: UINT,
    A.MAXNAME: UINT,
    A.MAXREAD: UHYPER,
    A.MAXWRITE: UHYPER,
    A.MODE: UINT,
    A.NO_TRUNC: BOOL,
    A.NUMLINKS: UINT,
    A.OWNER: _OWNER,
    A.OWNER_GROUP: _OWNER,
    A.RAWDEV: _wire(Specdata4),
    A.SPACE_AVAIL: UHYPER,
    A.SPACE_FREE: UHYPER,
    A.SPACE_TOTAL: UHYPER,
    A.SPACE_USED: UHYPER,
    A.TIME_ACCESS: _TIME,
    A.TIME_ACCESS_SET: _SETTIME,
    A.TIME_DELTA: _TIME,
    A.TIME_METADATA: _TIME,
    A.TIME_MODIFY: _TIME,
    A.TIME_MODIFY_SET: _SETTIME,
    A.MOUNTED_ON_FILEID: UHYPER,
}
"""The codec of each attribute's value (RFC 7530 §5.6, §5.7)."""


def encode_fattr(values: Mapping[int, Any]) -> Fattr4:
    """Pack ``{attribute: value}`` as a fattr4 (values in increasing attribute order).

    Raises:
        AttrNotSupp: an attribute without a codec.
        XdrError: a value that does not fit its type.
    """
    p = Packer()
    for bit in sorted(values):
        codec = ATTR_CODECS.get(bit)
        if codec is None:
            raise AttrNotSupp(f"attribute {bit} not supported")
        codec.pack(p, values[bit])
    return Fattr4(bitmap_of(values), p.get_buffer())


def decode_fattr(fattr: Fattr4) -> dict[int, Any]:
    """Unpack a fattr4 into ``{attribute: value}``.

    Raises:
        AttrNotSupp: the mask names an attribute without a codec.
        XdrError: the values are short, malformed or followed by extra bytes.
    """
    u = Unpacker(fattr.vals)
    out: dict[int, Any] = {}
    for bit in bits_of(fattr.mask):
        codec = ATTR_CODECS.get(bit)
        if codec is None:
            raise AttrNotSupp(f"attribute {bit} not supported")
        out[bit] = codec.unpack(u)
    u.done()
    return out
