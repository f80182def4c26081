"""NFSv3 constants, enums and the basic data types (RFC 1813 §2.5, §2.6).

`Nfsstat3` is here, below `nfs.protocol.vfs`: the Vfs raises `NfsError(Nfsstat3...)` and returns
`Fattr3`, and the procedures (`nfs.protocol.nfs3.procedures`) import the Vfs, so the import
graph has no cycle. Hot types (`Fattr3`, `WccAttr`, `Nfstime3`) pack through one
`struct.Struct`; the rest declare their fields' codecs (`nfs.protocol.nfs3.codec`).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Final

from nfs.protocol.nfs3.codec import UHYPER, UINT, XdrStruct, optional, string
from nfs.protocol.xdr import FileSlice, Packer, Pieces, Unpacker, XdrError

__all__ = [
    "DONT_CHANGE",
    "FATTR3_SIZE",
    "FSF3_CANSETTIME",
    "FSF3_HOMOGENEOUS",
    "FSF3_LINK",
    "FSF3_SYMLINK",
    "MAX_NAME_BYTES",
    "MAX_PATH_BYTES",
    "NFS3_COOKIEVERFSIZE",
    "NFS3_CREATEVERFSIZE",
    "NFS3_FHSIZE",
    "NFS3_WRITEVERFSIZE",
    "NFS_PROGRAM",
    "NFS_V3",
    "NO_ATTR",
    "NO_FH",
    "NO_GUARD",
    "NO_WCC",
    "ZERO_VERF",
    "Createmode3",
    "DirOpArgs3",
    "Fattr3",
    "FileSlice",
    "Ftype3",
    "NfsFh3",
    "NfsProc3",
    "Nfsstat3",
    "Nfstime3",
    "Pieces",
    "PostOpAttr",
    "PostOpFh3",
    "PreOpAttr",
    "Sattr3",
    "Sattrguard3",
    "SetTime",
    "Specdata3",
    "StableHow",
    "TimeHow",
    "WccAttr",
    "WccData",
    "padded",
]

NFS_PROGRAM: Final = 100003
NFS_V3: Final = 3
NFS3_FHSIZE: Final = 64
NFS3_COOKIEVERFSIZE: Final = 8
NFS3_CREATEVERFSIZE: Final = 8
NFS3_WRITEVERFSIZE: Final = 8
MAX_NAME_BYTES: Final = 4096
"""Decoding limit for filename3 (longer is garbage); names over the Vfs's name_max
but within this get NFS3ERR_NAMETOOLONG."""
MAX_PATH_BYTES: Final = 4096
"""Decoding limit for nfspath3."""

# FSINFO properties (RFC 1813 §3.3.19)
FSF3_LINK: Final = 0x0001
FSF3_SYMLINK: Final = 0x0002
FSF3_HOMOGENEOUS: Final = 0x0008
FSF3_CANSETTIME: Final = 0x0010

ZERO_VERF: Final = bytes(8)


class Nfsstat3(enum.IntEnum):
    """nfsstat3 (RFC 1813 §2.6)."""

    NFS3_OK = 0
    NFS3ERR_PERM = 1
    NFS3ERR_NOENT = 2
    NFS3ERR_IO = 5
    NFS3ERR_NXIO = 6
    NFS3ERR_ACCES = 13
    NFS3ERR_EXIST = 17
    NFS3ERR_XDEV = 18
    NFS3ERR_NODEV = 19
    NFS3ERR_NOTDIR = 20
    NFS3ERR_ISDIR = 21
    NFS3ERR_INVAL = 22
    NFS3ERR_FBIG = 27
    NFS3ERR_NOSPC = 28
    NFS3ERR_ROFS = 30
    NFS3ERR_MLINK = 31
    NFS3ERR_NAMETOOLONG = 63
    NFS3ERR_NOTEMPTY = 66
    NFS3ERR_DQUOT = 69
    NFS3ERR_STALE = 70
    NFS3ERR_REMOTE = 71
    NFS3ERR_BADHANDLE = 10001
    NFS3ERR_NOT_SYNC = 10002
    NFS3ERR_BAD_COOKIE = 10003
    NFS3ERR_NOTSUPP = 10004
    NFS3ERR_TOOSMALL = 10005
    NFS3ERR_SERVERFAULT = 10006
    NFS3ERR_BADTYPE = 10007
    NFS3ERR_JUKEBOX = 10008


class Ftype3(enum.IntEnum):
    """ftype3 (RFC 1813 §2.5)."""

    NF3REG = 1
    NF3DIR = 2
    NF3BLK = 3
    NF3CHR = 4
    NF3LNK = 5
    NF3SOCK = 6
    NF3FIFO = 7


class StableHow(enum.IntEnum):
    """stable_how (RFC 1813 §3.3.7)."""

    UNSTABLE = 0
    DATA_SYNC = 1
    FILE_SYNC = 2


class Createmode3(enum.IntEnum):
    """createmode3 (RFC 1813 §3.3.8)."""

    UNCHECKED = 0
    GUARDED = 1
    EXCLUSIVE = 2


class TimeHow(enum.IntEnum):
    """time_how (RFC 1813 §2.5)."""

    DONT_CHANGE = 0
    SET_TO_SERVER_TIME = 1
    SET_TO_CLIENT_TIME = 2


class NfsProc3(enum.IntEnum):
    """NFSv3 procedure numbers (RFC 1813 §3)."""

    NFSPROC3_NULL = 0
    NFSPROC3_GETATTR = 1
    NFSPROC3_SETATTR = 2
    NFSPROC3_LOOKUP = 3
    NFSPROC3_ACCESS = 4
    NFSPROC3_READLINK = 5
    NFSPROC3_READ = 6
    NFSPROC3_WRITE = 7
    NFSPROC3_CREATE = 8
    NFSPROC3_MKDIR = 9
    NFSPROC3_SYMLINK = 10
    NFSPROC3_MKNOD = 11
    NFSPROC3_REMOVE = 12
    NFSPROC3_RMDIR = 13
    NFSPROC3_RENAME = 14
    NFSPROC3_LINK = 15
    NFSPROC3_READDIR = 16
    NFSPROC3_READDIRPLUS = 17
    NFSPROC3_FSSTAT = 18
    NFSPROC3_FSINFO = 19
    NFSPROC3_PATHCONF = 20
    NFSPROC3_COMMIT = 21


# ================================================================ basic types (§2.5)

_TIME: Final = struct.Struct(">II")


@dataclass(frozen=True)
class Nfstime3:
    """nfstime3 (RFC 1813 §2.5): seconds and nanoseconds since the epoch."""

    seconds: int = 0
    nseconds: int = 0

    def pack(self, p: Packer) -> None:
        """Append seconds and nseconds."""
        p.pack_struct(_TIME, self.seconds, self.nseconds)

    @classmethod
    def unpack(cls, u: Unpacker) -> Nfstime3:
        """Read seconds and nseconds."""
        s, ns = u.unpack_struct(_TIME)
        return cls(s, ns)

    @classmethod
    def from_ns(cls, ns: int) -> Nfstime3:
        """Convert nanoseconds since the epoch (clamped to the u32 seconds range)."""
        s, n = divmod(max(ns, 0), 1_000_000_000)
        if s > 0xFFFFFFFF:
            return cls(0xFFFFFFFF, 999_999_999)
        return cls(s, n)

    @classmethod
    def from_seconds(cls, t: float) -> Nfstime3:
        """Convert a float timestamp (time.time())."""
        return cls.from_ns(round(t * 1_000_000_000))

    def to_ns(self) -> int:
        """Return nanoseconds since the epoch."""
        return self.seconds * 1_000_000_000 + self.nseconds


@dataclass(frozen=True)
class Specdata3(XdrStruct):
    """specdata3 (RFC 1813 §2.5): device numbers."""

    specdata1: int = 0
    specdata2: int = 0
    XDR = (UINT, UINT)


@dataclass(frozen=True)
class NfsFh3:
    """nfs_fh3 (RFC 1813 §2.5): an opaque file handle of at most 64 bytes."""

    data: bytes

    def pack(self, p: Packer) -> None:
        """Append the handle as opaque<64>."""
        p.pack_opaque(self.data, NFS3_FHSIZE)

    @classmethod
    def unpack(cls, u: Unpacker) -> NfsFh3:
        """Read a handle; over 64 bytes raises `XdrError`."""
        return cls(u.unpack_opaque(NFS3_FHSIZE))


def _unpack_ftype(value: int) -> Ftype3:
    try:
        return Ftype3(value)
    except ValueError as err:
        raise XdrError(f"bad ftype3 {value}") from err


_FATTR3: Final = struct.Struct(">IIIIIQQIIQQIIIIII")


@dataclass(frozen=True)
class Fattr3:
    """fattr3 (RFC 1813 §2.5): file attributes (84 bytes on the wire).

    `mode` holds permission bits only (0o7777), as RFC 1813 defines it.
    """

    type: Ftype3
    mode: int
    nlink: int
    uid: int
    gid: int
    size: int
    used: int
    rdev: Specdata3
    fsid: int
    fileid: int
    atime: Nfstime3
    mtime: Nfstime3
    ctime: Nfstime3

    def pack(self, p: Packer) -> None:
        """Append the attributes."""
        p.pack_raw(self.wire())

    def wire(self) -> bytes:
        """The attributes as XDR: packed once per value (it is frozen; a server keeps the
        attributes of an unchanged file and sends them in nearly every reply).

        Raises:
            XdrError: if a field does not fit its XDR type.
        """
        got: bytes | None = self.__dict__.get("_wire")
        if got is None:
            got = self.__dict__["_wire"] = self._pack_fields()
        return got

    def post_op_wire(self) -> bytes:
        """These attributes as a post_op_attr (TRUE, then `wire`), packed once per value."""
        got: bytes | None = self.__dict__.get("_post_op")
        if got is None:
            got = self.__dict__["_post_op"] = _TRUE + self.wire()
        return got

    def _pack_fields(self) -> bytes:
        p = Packer()
        p.pack_struct(
            _FATTR3,
            self.type,
            self.mode,
            self.nlink,
            self.uid,
            self.gid,
            self.size,
            self.used,
            self.rdev.specdata1,
            self.rdev.specdata2,
            self.fsid,
            self.fileid,
            self.atime.seconds,
            self.atime.nseconds,
            self.mtime.seconds,
            self.mtime.nseconds,
            self.ctime.seconds,
            self.ctime.nseconds,
        )
        return p.get_buffer()

    @classmethod
    def unpack(cls, u: Unpacker) -> Fattr3:
        """Read the attributes."""
        v = u.unpack_struct(_FATTR3)
        return cls(
            _unpack_ftype(v[0]),
            v[1],
            v[2],
            v[3],
            v[4],
            v[5],
            v[6],
            Specdata3(v[7], v[8]),
            v[9],
            v[10],
            Nfstime3(v[11], v[12]),
            Nfstime3(v[13], v[14]),
            Nfstime3(v[15], v[16]),
        )

    def wcc_attr(self) -> WccAttr:
        """Return the size, mtime and ctime subset (for pre-op attributes)."""
        return WccAttr(self.size, self.mtime, self.ctime)


FATTR3_SIZE: Final = _FATTR3.size


# ================================================================ §2.6 (defined in the procedures)


@dataclass(frozen=True)
class PostOpAttr(XdrStruct):
    """post_op_attr (RFC 1813 §2.6): optional attributes after an operation."""

    attributes: Fattr3 | None = None
    XDR = (optional(Fattr3),)

    def pack(self, p: Packer) -> None:
        """Append attributes_follow and the attributes (by hand: in nearly every reply)."""
        attributes = self.attributes
        p.pack_raw(_FALSE if attributes is None else attributes.post_op_wire())

    def xdr_size(self) -> int:
        """Return the encoded size in bytes."""
        return 4 + (FATTR3_SIZE if self.attributes is not None else 0)


NO_ATTR: Final = PostOpAttr()

_FALSE: Final = b"\0\0\0\0"
_TRUE: Final = b"\0\0\0\1"
_WCC_ATTR: Final = struct.Struct(">QIIII")


@dataclass(frozen=True)
class WccAttr:
    """wcc_attr (RFC 1813 §2.6): size, mtime and ctime before an operation."""

    size: int
    mtime: Nfstime3
    ctime: Nfstime3

    def pack(self, p: Packer) -> None:
        """Append size, mtime, ctime."""
        m, c = self.mtime, self.ctime
        p.pack_struct(_WCC_ATTR, self.size, m.seconds, m.nseconds, c.seconds, c.nseconds)

    @classmethod
    def unpack(cls, u: Unpacker) -> WccAttr:
        """Read size, mtime, ctime."""
        size, ms, mn, cs, cn = u.unpack_struct(_WCC_ATTR)
        return cls(size, Nfstime3(ms, mn), Nfstime3(cs, cn))


@dataclass(frozen=True)
class PreOpAttr(XdrStruct):
    """pre_op_attr (RFC 1813 §2.6): optional attributes before an operation."""

    attributes: WccAttr | None = None
    XDR = (optional(WccAttr),)


@dataclass(frozen=True)
class WccData(XdrStruct):
    """wcc_data (RFC 1813 §2.6): weak cache consistency data (before and after)."""

    before: PreOpAttr = PreOpAttr()
    after: PostOpAttr = NO_ATTR
    XDR = (PreOpAttr, PostOpAttr)


NO_WCC: Final = WccData()


def padded(n: int) -> int:
    """Return `n` rounded up to the XDR unit (4 bytes)."""
    return (n + 3) & ~3


@dataclass(frozen=True)
class PostOpFh3(XdrStruct):
    """post_op_fh3 (RFC 1813 §2.6): an optional file handle."""

    handle: NfsFh3 | None = None
    XDR = (optional(NfsFh3),)

    def xdr_size(self) -> int:
        """Return the encoded size in bytes."""
        if self.handle is None:
            return 4
        return 8 + padded(len(self.handle.data))


NO_FH: Final = PostOpFh3()


@dataclass(frozen=True)
class SetTime:
    """set_atime / set_mtime (RFC 1813 §2.6): how to set a time, and the time if the client's."""

    how: TimeHow = TimeHow.DONT_CHANGE
    time: Nfstime3 | None = None

    def pack(self, p: Packer) -> None:
        """Append the discriminant and, for SET_TO_CLIENT_TIME, the time."""
        p.pack_enum(self.how)
        if self.how == TimeHow.SET_TO_CLIENT_TIME:
            if self.time is None:
                raise XdrError("SET_TO_CLIENT_TIME needs a time")
            self.time.pack(p)

    @classmethod
    def unpack(cls, u: Unpacker) -> SetTime:
        """Read the discriminant and, for SET_TO_CLIENT_TIME, the time."""
        how = u.unpack_enum(TimeHow)
        if how == TimeHow.SET_TO_CLIENT_TIME:
            return cls(how, Nfstime3.unpack(u))
        return cls(how)


DONT_CHANGE: Final = SetTime()


@dataclass(frozen=True)
class Sattr3(XdrStruct):
    """sattr3 (RFC 1813 §2.6): attributes to set; None means "don't set"."""

    mode: int | None = None
    uid: int | None = None
    gid: int | None = None
    size: int | None = None
    atime: SetTime = DONT_CHANGE
    mtime: SetTime = DONT_CHANGE
    XDR = (optional(UINT), optional(UINT), optional(UINT), optional(UHYPER), SetTime, SetTime)


@dataclass(frozen=True)
class Sattrguard3(XdrStruct):
    """sattrguard3 (RFC 1813 §3.3.2): apply SETATTR only if ctime still equals this."""

    obj_ctime: Nfstime3 | None = None
    XDR = (optional(Nfstime3),)


NO_GUARD: Final = Sattrguard3()


@dataclass(frozen=True)
class DirOpArgs3(XdrStruct):
    """diropargs3 (RFC 1813 §2.6): a directory handle and a name in it."""

    dir: NfsFh3
    name: str
    XDR = (NfsFh3, string(MAX_NAME_BYTES))
