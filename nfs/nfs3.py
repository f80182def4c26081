"""NFS version 3 (RFC 1813): wire types and the 22 procedures, over a `Vfs`.

Wire types keep the RFC 1813 names (`Fattr3` is fattr3, `Lookup3Args` is
LOOKUP3args, `Nfsstat3.NFS3ERR_NOENT`, ...) so that grep finds the spec. Each is a
frozen dataclass with ``pack(p)`` and a classmethod ``unpack(u)``. A result union
``XXX3res`` is a dataclass with `status`, `resok` (set when status is NFS3_OK)
and `resfail` (the failure arm); where the RFC's resok and resfail carry the same
fields (SETATTR, REMOVE, RMDIR, RENAME, LINK) the fields are flat.

Each procedure is a function ``nfsproc3_xxx(service, args, ctx) -> XXX3res``:
decode the handle, call the Vfs, build the result. `NfsError(status)` from the
Vfs becomes that status, with the wcc / post-op attributes the RFC defines for
the failure arm. `NFS3_PROCEDURES` maps every `NfsProc3` to its procedure;
`Nfs3Service.rpc_program()` binds them to a Vfs for the `nfs.rpc.Dispatcher`.

File handles (`HandleCodec`): ``b"PXL1"`` + FileId (u64) + the Vfs's 8-byte
generation, 20 bytes. Another length or prefix is NFS3ERR_BADHANDLE; a generation
that no longer matches (or an id the Vfs does not know) is NFS3ERR_STALE.

Sans-IO: no sockets, no clock (times come from the Vfs).
"""

from __future__ import annotations

import enum
import logging
import secrets
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from nfs.rpc import VOID, CallContext, Packable, RpcProcedure, RpcProgram, Void
from nfs.vfs import (
    ACCESS3_DELETE,
    ACCESS3_EXTEND,
    ACCESS3_MODIFY,
    FileId,
    NfsError,
    Vfs,
    calling,
)
from nfs.xdr import Packer, Unpacker, XdrError

__all__ = [
    "DEFAULT_LIMITS",
    "FH_MAGIC",
    "FH_SIZE",
    "FSF3_CANSETTIME",
    "FSF3_HOMOGENEOUS",
    "FSF3_LINK",
    "FSF3_SYMLINK",
    "NFS3_COOKIEVERFSIZE",
    "NFS3_CREATEVERFSIZE",
    "NFS3_FHSIZE",
    "NFS3_PROCEDURES",
    "NFS3_WRITEVERFSIZE",
    "NFS_PROGRAM",
    "NFS_V3",
    "ZERO_VERF",
    "Access3Args",
    "Access3Res",
    "Access3ResOk",
    "Commit3Args",
    "Commit3Res",
    "Commit3ResOk",
    "Create3Args",
    "Create3Res",
    "Create3ResOk",
    "CreateHow3",
    "Createmode3",
    "DirOpArgs3",
    "Dirlist3",
    "Dirlistplus3",
    "Entry3",
    "Entryplus3",
    "Fattr3",
    "Fsinfo3Args",
    "Fsinfo3Res",
    "Fsinfo3ResOk",
    "Fsstat3Args",
    "Fsstat3Res",
    "Fsstat3ResOk",
    "Ftype3",
    "Getattr3Args",
    "Getattr3Res",
    "Getattr3ResOk",
    "HandleCodec",
    "Link3Args",
    "Link3Res",
    "Lookup3Args",
    "Lookup3Res",
    "Lookup3ResOk",
    "Mkdir3Args",
    "Mkdir3Res",
    "Mknod3Args",
    "Mknod3Res",
    "Mknoddata3",
    "Nfs3Limits",
    "Nfs3Service",
    "NfsFh3",
    "NfsProc3",
    "Nfsstat3",
    "Nfstime3",
    "Pathconf3Args",
    "Pathconf3Res",
    "Pathconf3ResOk",
    "PostOpAttr",
    "PostOpFh3",
    "PreOpAttr",
    "Procedure",
    "Read3Args",
    "Read3Res",
    "Read3ResOk",
    "Readdir3Args",
    "Readdir3Res",
    "Readdir3ResOk",
    "Readdirplus3Args",
    "Readdirplus3Res",
    "Readdirplus3ResOk",
    "Readlink3Args",
    "Readlink3Res",
    "Readlink3ResOk",
    "Remove3Args",
    "Remove3Res",
    "Rename3Args",
    "Rename3Res",
    "Rmdir3Args",
    "Rmdir3Res",
    "Sattr3",
    "Sattrguard3",
    "SetTime",
    "Setattr3Args",
    "Setattr3Res",
    "Specdata3",
    "StableHow",
    "Symlink3Args",
    "Symlink3Res",
    "Symlinkdata3",
    "TimeHow",
    "WccAttr",
    "WccData",
    "Write3Args",
    "Write3Res",
    "Write3ResOk",
]

logger = logging.getLogger(__name__)

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


_TIME: Final = struct.Struct(">II")


@dataclass(frozen=True)
class Specdata3:
    """specdata3 (RFC 1813 §2.5): device numbers."""

    specdata1: int = 0
    specdata2: int = 0

    def pack(self, p: Packer) -> None:
        """Append both numbers."""
        p.pack_struct(_TIME, self.specdata1, self.specdata2)

    @classmethod
    def unpack(cls, u: Unpacker) -> Specdata3:
        """Read both numbers."""
        a, b = u.unpack_struct(_TIME)
        return cls(a, b)


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


@dataclass(frozen=True)
class PostOpAttr:
    """post_op_attr (RFC 1813 §2.6): optional attributes after an operation."""

    attributes: Fattr3 | None = None

    def pack(self, p: Packer) -> None:
        """Append the optional attributes."""
        p.pack_optional(self.attributes, lambda a: a.pack(p))

    @classmethod
    def unpack(cls, u: Unpacker) -> PostOpAttr:
        """Read the optional attributes."""
        return cls(u.unpack_optional(lambda: Fattr3.unpack(u)))

    def xdr_size(self) -> int:
        """Return the encoded size in bytes."""
        return 4 + (FATTR3_SIZE if self.attributes is not None else 0)


NO_ATTR: Final = PostOpAttr()


@dataclass(frozen=True)
class WccAttr:
    """wcc_attr (RFC 1813 §2.6): size, mtime and ctime before an operation."""

    size: int
    mtime: Nfstime3
    ctime: Nfstime3

    def pack(self, p: Packer) -> None:
        """Append size, mtime, ctime."""
        p.pack_struct(
            _WCC_ATTR,
            self.size,
            self.mtime.seconds,
            self.mtime.nseconds,
            self.ctime.seconds,
            self.ctime.nseconds,
        )

    @classmethod
    def unpack(cls, u: Unpacker) -> WccAttr:
        """Read size, mtime, ctime."""
        size, ms, mn, cs, cn = u.unpack_struct(_WCC_ATTR)
        return cls(size, Nfstime3(ms, mn), Nfstime3(cs, cn))


_WCC_ATTR: Final = struct.Struct(">QIIII")


@dataclass(frozen=True)
class PreOpAttr:
    """pre_op_attr (RFC 1813 §2.6): optional attributes before an operation."""

    attributes: WccAttr | None = None

    def pack(self, p: Packer) -> None:
        """Append the optional attributes."""
        p.pack_optional(self.attributes, lambda a: a.pack(p))

    @classmethod
    def unpack(cls, u: Unpacker) -> PreOpAttr:
        """Read the optional attributes."""
        return cls(u.unpack_optional(lambda: WccAttr.unpack(u)))


@dataclass(frozen=True)
class WccData:
    """wcc_data (RFC 1813 §2.6): weak cache consistency data (before and after)."""

    before: PreOpAttr = PreOpAttr()
    after: PostOpAttr = NO_ATTR

    def pack(self, p: Packer) -> None:
        """Append before, then after."""
        self.before.pack(p)
        self.after.pack(p)

    @classmethod
    def unpack(cls, u: Unpacker) -> WccData:
        """Read before, then after."""
        return cls(PreOpAttr.unpack(u), PostOpAttr.unpack(u))


NO_WCC: Final = WccData()


@dataclass(frozen=True)
class PostOpFh3:
    """post_op_fh3 (RFC 1813 §2.6): an optional file handle."""

    handle: NfsFh3 | None = None

    def pack(self, p: Packer) -> None:
        """Append the optional handle."""
        p.pack_optional(self.handle, lambda h: h.pack(p))

    @classmethod
    def unpack(cls, u: Unpacker) -> PostOpFh3:
        """Read the optional handle."""
        return cls(u.unpack_optional(lambda: NfsFh3.unpack(u)))

    def xdr_size(self) -> int:
        """Return the encoded size in bytes."""
        if self.handle is None:
            return 4
        return 8 + _padded(len(self.handle.data))


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
class Sattr3:
    """sattr3 (RFC 1813 §2.6): attributes to set; None means "don't set"."""

    mode: int | None = None
    uid: int | None = None
    gid: int | None = None
    size: int | None = None
    atime: SetTime = DONT_CHANGE
    mtime: SetTime = DONT_CHANGE

    def pack(self, p: Packer) -> None:
        """Append the six optional settings."""
        p.pack_optional(self.mode, p.pack_uint)
        p.pack_optional(self.uid, p.pack_uint)
        p.pack_optional(self.gid, p.pack_uint)
        p.pack_optional(self.size, p.pack_uhyper)
        self.atime.pack(p)
        self.mtime.pack(p)

    @classmethod
    def unpack(cls, u: Unpacker) -> Sattr3:
        """Read the six optional settings."""
        return cls(
            u.unpack_optional(u.unpack_uint),
            u.unpack_optional(u.unpack_uint),
            u.unpack_optional(u.unpack_uint),
            u.unpack_optional(u.unpack_uhyper),
            SetTime.unpack(u),
            SetTime.unpack(u),
        )


@dataclass(frozen=True)
class Sattrguard3:
    """sattrguard3 (RFC 1813 §3.3.2): apply SETATTR only if ctime still equals this."""

    obj_ctime: Nfstime3 | None = None

    def pack(self, p: Packer) -> None:
        """Append the optional ctime."""
        p.pack_optional(self.obj_ctime, lambda t: t.pack(p))

    @classmethod
    def unpack(cls, u: Unpacker) -> Sattrguard3:
        """Read the optional ctime."""
        return cls(u.unpack_optional(lambda: Nfstime3.unpack(u)))


@dataclass(frozen=True)
class DirOpArgs3:
    """diropargs3 (RFC 1813 §2.6): a directory handle and a name in it."""

    dir: NfsFh3
    name: str

    def pack(self, p: Packer) -> None:
        """Append handle and name."""
        self.dir.pack(p)
        p.pack_string(self.name, MAX_NAME_BYTES)

    @classmethod
    def unpack(cls, u: Unpacker) -> DirOpArgs3:
        """Read handle and name."""
        return cls(NfsFh3.unpack(u), u.unpack_string(MAX_NAME_BYTES))


@dataclass(frozen=True)
class CreateHow3:
    """createhow3 (RFC 1813 §3.3.8): initial attributes, or an 8-byte verifier for EXCLUSIVE."""

    mode: Createmode3
    obj_attributes: Sattr3 | None = None
    verf: bytes | None = None

    def pack(self, p: Packer) -> None:
        """Append the mode and its arm."""
        p.pack_enum(self.mode)
        if self.mode == Createmode3.EXCLUSIVE:
            p.pack_fopaque(NFS3_CREATEVERFSIZE, self.verf if self.verf is not None else b"")
        else:
            (self.obj_attributes or Sattr3()).pack(p)

    @classmethod
    def unpack(cls, u: Unpacker) -> CreateHow3:
        """Read the mode and its arm."""
        mode = u.unpack_enum(Createmode3)
        if mode == Createmode3.EXCLUSIVE:
            return cls(mode, verf=u.unpack_fopaque(NFS3_CREATEVERFSIZE))
        return cls(mode, obj_attributes=Sattr3.unpack(u))


@dataclass(frozen=True)
class Symlinkdata3:
    """symlinkdata3 (RFC 1813 §3.3.10)."""

    symlink_attributes: Sattr3
    symlink_data: str

    def pack(self, p: Packer) -> None:
        """Append attributes and target path."""
        self.symlink_attributes.pack(p)
        p.pack_string(self.symlink_data, MAX_PATH_BYTES)

    @classmethod
    def unpack(cls, u: Unpacker) -> Symlinkdata3:
        """Read attributes and target path."""
        return cls(Sattr3.unpack(u), u.unpack_string(MAX_PATH_BYTES))


@dataclass(frozen=True)
class Mknoddata3:
    """mknoddata3 (RFC 1813 §3.3.11): a file type with its attributes and device numbers."""

    type: Ftype3
    attributes: Sattr3 | None = None
    spec: Specdata3 | None = None

    def pack(self, p: Packer) -> None:
        """Append the type and its arm."""
        p.pack_enum(self.type)
        if self.type in (Ftype3.NF3CHR, Ftype3.NF3BLK):
            (self.attributes or Sattr3()).pack(p)
            (self.spec or Specdata3()).pack(p)
        elif self.type in (Ftype3.NF3SOCK, Ftype3.NF3FIFO):
            (self.attributes or Sattr3()).pack(p)

    @classmethod
    def unpack(cls, u: Unpacker) -> Mknoddata3:
        """Read the type and its arm."""
        ftype = u.unpack_enum(Ftype3)
        if ftype in (Ftype3.NF3CHR, Ftype3.NF3BLK):
            return cls(ftype, Sattr3.unpack(u), Specdata3.unpack(u))
        if ftype in (Ftype3.NF3SOCK, Ftype3.NF3FIFO):
            return cls(ftype, Sattr3.unpack(u))
        return cls(ftype)


def _padded(n: int) -> int:
    return (n + 3) & ~3


def _name_size(name: str) -> int:
    return 4 + _padded(len(name.encode("utf-8", "surrogateescape")))


def _pack_status(p: Packer, status: Nfsstat3) -> None:
    p.pack_enum(status)


def _pack_res(p: Packer, status: Nfsstat3, resok: Packable | None, resfail: Packable) -> None:
    p.pack_enum(status)
    if status == Nfsstat3.NFS3_OK:
        if resok is None:
            raise XdrError("NFS3_OK result without resok")
        resok.pack(p)
    else:
        resfail.pack(p)


def _is_ok(u: Unpacker) -> tuple[Nfsstat3, bool]:
    status = u.unpack_enum(Nfsstat3)
    return status, status == Nfsstat3.NFS3_OK


# ================================================================ arguments (§3.3)


@dataclass(frozen=True)
class Getattr3Args:
    """GETATTR3args (RFC 1813 §3.3.1)."""

    object: NfsFh3

    def pack(self, p: Packer) -> None:
        """Append the arguments."""
        self.object.pack(p)

    @classmethod
    def unpack(cls, u: Unpacker) -> Getattr3Args:
        """Read the arguments."""
        return cls(NfsFh3.unpack(u))


@dataclass(frozen=True)
class Setattr3Args:
    """SETATTR3args (RFC 1813 §3.3.2)."""

    object: NfsFh3
    new_attributes: Sattr3
    guard: Sattrguard3 = Sattrguard3()

    def pack(self, p: Packer) -> None:
        """Append the arguments."""
        self.object.pack(p)
        self.new_attributes.pack(p)
        self.guard.pack(p)

    @classmethod
    def unpack(cls, u: Unpacker) -> Setattr3Args:
        """Read the arguments."""
        return cls(NfsFh3.unpack(u), Sattr3.unpack(u), Sattrguard3.unpack(u))


@dataclass(frozen=True)
class Lookup3Args:
    """LOOKUP3args (RFC 1813 §3.3.3)."""

    what: DirOpArgs3

    def pack(self, p: Packer) -> None:
        """Append the arguments."""
        self.what.pack(p)

    @classmethod
    def unpack(cls, u: Unpacker) -> Lookup3Args:
        """Read the arguments."""
        return cls(DirOpArgs3.unpack(u))


@dataclass(frozen=True)
class Access3Args:
    """ACCESS3args (RFC 1813 §3.3.4)."""

    object: NfsFh3
    access: int

    def pack(self, p: Packer) -> None:
        """Append the arguments."""
        self.object.pack(p)
        p.pack_uint(self.access)

    @classmethod
    def unpack(cls, u: Unpacker) -> Access3Args:
        """Read the arguments."""
        return cls(NfsFh3.unpack(u), u.unpack_uint())


@dataclass(frozen=True)
class Readlink3Args:
    """READLINK3args (RFC 1813 §3.3.5)."""

    symlink: NfsFh3

    def pack(self, p: Packer) -> None:
        """Append the arguments."""
        self.symlink.pack(p)

    @classmethod
    def unpack(cls, u: Unpacker) -> Readlink3Args:
        """Read the arguments."""
        return cls(NfsFh3.unpack(u))


@dataclass(frozen=True)
class Read3Args:
    """READ3args (RFC 1813 §3.3.6)."""

    file: NfsFh3
    offset: int
    count: int

    def pack(self, p: Packer) -> None:
        """Append the arguments."""
        self.file.pack(p)
        p.pack_uhyper(self.offset)
        p.pack_uint(self.count)

    @classmethod
    def unpack(cls, u: Unpacker) -> Read3Args:
        """Read the arguments."""
        return cls(NfsFh3.unpack(u), u.unpack_uhyper(), u.unpack_uint())


@dataclass(frozen=True)
class Write3Args:
    """WRITE3args (RFC 1813 §3.3.7)."""

    file: NfsFh3
    offset: int
    count: int
    stable: StableHow
    data: bytes

    def pack(self, p: Packer) -> None:
        """Append the arguments."""
        self.file.pack(p)
        p.pack_uhyper(self.offset)
        p.pack_uint(self.count)
        p.pack_enum(self.stable)
        p.pack_opaque(self.data)

    @classmethod
    def unpack(cls, u: Unpacker) -> Write3Args:
        """Read the arguments."""
        return cls(
            NfsFh3.unpack(u),
            u.unpack_uhyper(),
            u.unpack_uint(),
            u.unpack_enum(StableHow),
            u.unpack_opaque(),
        )


@dataclass(frozen=True)
class Create3Args:
    """CREATE3args (RFC 1813 §3.3.8)."""

    where: DirOpArgs3
    how: CreateHow3

    def pack(self, p: Packer) -> None:
        """Append the arguments."""
        self.where.pack(p)
        self.how.pack(p)

    @classmethod
    def unpack(cls, u: Unpacker) -> Create3Args:
        """Read the arguments."""
        return cls(DirOpArgs3.unpack(u), CreateHow3.unpack(u))


@dataclass(frozen=True)
class Mkdir3Args:
    """MKDIR3args (RFC 1813 §3.3.9)."""

    where: DirOpArgs3
    attributes: Sattr3

    def pack(self, p: Packer) -> None:
        """Append the arguments."""
        self.where.pack(p)
        self.attributes.pack(p)

    @classmethod
    def unpack(cls, u: Unpacker) -> Mkdir3Args:
        """Read the arguments."""
        return cls(DirOpArgs3.unpack(u), Sattr3.unpack(u))


@dataclass(frozen=True)
class Symlink3Args:
    """SYMLINK3args (RFC 1813 §3.3.10)."""

    where: DirOpArgs3
    symlink: Symlinkdata3

    def pack(self, p: Packer) -> None:
        """Append the arguments."""
        self.where.pack(p)
        self.symlink.pack(p)

    @classmethod
    def unpack(cls, u: Unpacker) -> Symlink3Args:
        """Read the arguments."""
        return cls(DirOpArgs3.unpack(u), Symlinkdata3.unpack(u))


@dataclass(frozen=True)
class Mknod3Args:
    """MKNOD3args (RFC 1813 §3.3.11)."""

    where: DirOpArgs3
    what: Mknoddata3

    def pack(self, p: Packer) -> None:
        """Append the arguments."""
        self.where.pack(p)
        self.what.pack(p)

    @classmethod
    def unpack(cls, u: Unpacker) -> Mknod3Args:
        """Read the arguments."""
        return cls(DirOpArgs3.unpack(u), Mknoddata3.unpack(u))


@dataclass(frozen=True)
class Remove3Args:
    """REMOVE3args (RFC 1813 §3.3.12)."""

    object: DirOpArgs3

    def pack(self, p: Packer) -> None:
        """Append the arguments."""
        self.object.pack(p)

    @classmethod
    def unpack(cls, u: Unpacker) -> Remove3Args:
        """Read the arguments."""
        return cls(DirOpArgs3.unpack(u))


@dataclass(frozen=True)
class Rmdir3Args:
    """RMDIR3args (RFC 1813 §3.3.13)."""

    object: DirOpArgs3

    def pack(self, p: Packer) -> None:
        """Append the arguments."""
        self.object.pack(p)

    @classmethod
    def unpack(cls, u: Unpacker) -> Rmdir3Args:
        """Read the arguments."""
        return cls(DirOpArgs3.unpack(u))


@dataclass(frozen=True)
class Rename3Args:
    """RENAME3args (RFC 1813 §3.3.14); `from_` is the RFC's ``from``."""

    from_: DirOpArgs3
    to: DirOpArgs3

    def pack(self, p: Packer) -> None:
        """Append the arguments."""
        self.from_.pack(p)
        self.to.pack(p)

    @classmethod
    def unpack(cls, u: Unpacker) -> Rename3Args:
        """Read the arguments."""
        return cls(DirOpArgs3.unpack(u), DirOpArgs3.unpack(u))


@dataclass(frozen=True)
class Link3Args:
    """LINK3args (RFC 1813 §3.3.15)."""

    file: NfsFh3
    link: DirOpArgs3

    def pack(self, p: Packer) -> None:
        """Append the arguments."""
        self.file.pack(p)
        self.link.pack(p)

    @classmethod
    def unpack(cls, u: Unpacker) -> Link3Args:
        """Read the arguments."""
        return cls(NfsFh3.unpack(u), DirOpArgs3.unpack(u))


@dataclass(frozen=True)
class Readdir3Args:
    """READDIR3args (RFC 1813 §3.3.16)."""

    dir: NfsFh3
    cookie: int = 0
    cookieverf: bytes = ZERO_VERF
    count: int = 4096

    def pack(self, p: Packer) -> None:
        """Append the arguments."""
        self.dir.pack(p)
        p.pack_uhyper(self.cookie)
        p.pack_fopaque(NFS3_COOKIEVERFSIZE, self.cookieverf)
        p.pack_uint(self.count)

    @classmethod
    def unpack(cls, u: Unpacker) -> Readdir3Args:
        """Read the arguments."""
        return cls(
            NfsFh3.unpack(u),
            u.unpack_uhyper(),
            u.unpack_fopaque(NFS3_COOKIEVERFSIZE),
            u.unpack_uint(),
        )


@dataclass(frozen=True)
class Readdirplus3Args:
    """READDIRPLUS3args (RFC 1813 §3.3.17)."""

    dir: NfsFh3
    cookie: int = 0
    cookieverf: bytes = ZERO_VERF
    dircount: int = 4096
    maxcount: int = 32768

    def pack(self, p: Packer) -> None:
        """Append the arguments."""
        self.dir.pack(p)
        p.pack_uhyper(self.cookie)
        p.pack_fopaque(NFS3_COOKIEVERFSIZE, self.cookieverf)
        p.pack_uint(self.dircount)
        p.pack_uint(self.maxcount)

    @classmethod
    def unpack(cls, u: Unpacker) -> Readdirplus3Args:
        """Read the arguments."""
        return cls(
            NfsFh3.unpack(u),
            u.unpack_uhyper(),
            u.unpack_fopaque(NFS3_COOKIEVERFSIZE),
            u.unpack_uint(),
            u.unpack_uint(),
        )


@dataclass(frozen=True)
class Fsstat3Args:
    """FSSTAT3args (RFC 1813 §3.3.18)."""

    fsroot: NfsFh3

    def pack(self, p: Packer) -> None:
        """Append the arguments."""
        self.fsroot.pack(p)

    @classmethod
    def unpack(cls, u: Unpacker) -> Fsstat3Args:
        """Read the arguments."""
        return cls(NfsFh3.unpack(u))


@dataclass(frozen=True)
class Fsinfo3Args:
    """FSINFO3args (RFC 1813 §3.3.19)."""

    fsroot: NfsFh3

    def pack(self, p: Packer) -> None:
        """Append the arguments."""
        self.fsroot.pack(p)

    @classmethod
    def unpack(cls, u: Unpacker) -> Fsinfo3Args:
        """Read the arguments."""
        return cls(NfsFh3.unpack(u))


@dataclass(frozen=True)
class Pathconf3Args:
    """PATHCONF3args (RFC 1813 §3.3.20)."""

    object: NfsFh3

    def pack(self, p: Packer) -> None:
        """Append the arguments."""
        self.object.pack(p)

    @classmethod
    def unpack(cls, u: Unpacker) -> Pathconf3Args:
        """Read the arguments."""
        return cls(NfsFh3.unpack(u))


@dataclass(frozen=True)
class Commit3Args:
    """COMMIT3args (RFC 1813 §3.3.21)."""

    file: NfsFh3
    offset: int = 0
    count: int = 0

    def pack(self, p: Packer) -> None:
        """Append the arguments."""
        self.file.pack(p)
        p.pack_uhyper(self.offset)
        p.pack_uint(self.count)

    @classmethod
    def unpack(cls, u: Unpacker) -> Commit3Args:
        """Read the arguments."""
        return cls(NfsFh3.unpack(u), u.unpack_uhyper(), u.unpack_uint())


# ================================================================ results (§3.3)


@dataclass(frozen=True)
class Getattr3ResOk:
    """GETATTR3resok (RFC 1813 §3.3.1)."""

    obj_attributes: Fattr3

    def pack(self, p: Packer) -> None:
        """Append the result."""
        self.obj_attributes.pack(p)

    @classmethod
    def unpack(cls, u: Unpacker) -> Getattr3ResOk:
        """Read the result."""
        return cls(Fattr3.unpack(u))


@dataclass(frozen=True)
class Getattr3Res:
    """GETATTR3res (RFC 1813 §3.3.1); the failure arm is void."""

    status: Nfsstat3
    resok: Getattr3ResOk | None = None

    def pack(self, p: Packer) -> None:
        """Append the result."""
        _pack_res(p, self.status, self.resok, VOID)

    @classmethod
    def unpack(cls, u: Unpacker) -> Getattr3Res:
        """Read the result."""
        status, ok = _is_ok(u)
        return cls(status, Getattr3ResOk.unpack(u)) if ok else cls(status)


@dataclass(frozen=True)
class Setattr3Res:
    """SETATTR3res (RFC 1813 §3.3.2); both arms carry obj_wcc."""

    status: Nfsstat3
    obj_wcc: WccData = NO_WCC

    def pack(self, p: Packer) -> None:
        """Append the result."""
        _pack_status(p, self.status)
        self.obj_wcc.pack(p)

    @classmethod
    def unpack(cls, u: Unpacker) -> Setattr3Res:
        """Read the result."""
        return cls(u.unpack_enum(Nfsstat3), WccData.unpack(u))


@dataclass(frozen=True)
class Lookup3ResOk:
    """LOOKUP3resok (RFC 1813 §3.3.3)."""

    object: NfsFh3
    obj_attributes: PostOpAttr = NO_ATTR
    dir_attributes: PostOpAttr = NO_ATTR

    def pack(self, p: Packer) -> None:
        """Append the result."""
        self.object.pack(p)
        self.obj_attributes.pack(p)
        self.dir_attributes.pack(p)

    @classmethod
    def unpack(cls, u: Unpacker) -> Lookup3ResOk:
        """Read the result."""
        return cls(NfsFh3.unpack(u), PostOpAttr.unpack(u), PostOpAttr.unpack(u))


@dataclass(frozen=True)
class Lookup3Res:
    """LOOKUP3res (RFC 1813 §3.3.3); resfail is dir_attributes."""

    status: Nfsstat3
    resok: Lookup3ResOk | None = None
    resfail: PostOpAttr = NO_ATTR

    def pack(self, p: Packer) -> None:
        """Append the result."""
        _pack_res(p, self.status, self.resok, self.resfail)

    @classmethod
    def unpack(cls, u: Unpacker) -> Lookup3Res:
        """Read the result."""
        status, ok = _is_ok(u)
        if ok:
            return cls(status, Lookup3ResOk.unpack(u))
        return cls(status, resfail=PostOpAttr.unpack(u))


@dataclass(frozen=True)
class Access3ResOk:
    """ACCESS3resok (RFC 1813 §3.3.4)."""

    obj_attributes: PostOpAttr
    access: int

    def pack(self, p: Packer) -> None:
        """Append the result."""
        self.obj_attributes.pack(p)
        p.pack_uint(self.access)

    @classmethod
    def unpack(cls, u: Unpacker) -> Access3ResOk:
        """Read the result."""
        return cls(PostOpAttr.unpack(u), u.unpack_uint())


@dataclass(frozen=True)
class Access3Res:
    """ACCESS3res (RFC 1813 §3.3.4); resfail is obj_attributes."""

    status: Nfsstat3
    resok: Access3ResOk | None = None
    resfail: PostOpAttr = NO_ATTR

    def pack(self, p: Packer) -> None:
        """Append the result."""
        _pack_res(p, self.status, self.resok, self.resfail)

    @classmethod
    def unpack(cls, u: Unpacker) -> Access3Res:
        """Read the result."""
        status, ok = _is_ok(u)
        if ok:
            return cls(status, Access3ResOk.unpack(u))
        return cls(status, resfail=PostOpAttr.unpack(u))


@dataclass(frozen=True)
class Readlink3ResOk:
    """READLINK3resok (RFC 1813 §3.3.5)."""

    symlink_attributes: PostOpAttr
    data: str

    def pack(self, p: Packer) -> None:
        """Append the result."""
        self.symlink_attributes.pack(p)
        p.pack_string(self.data, MAX_PATH_BYTES)

    @classmethod
    def unpack(cls, u: Unpacker) -> Readlink3ResOk:
        """Read the result."""
        return cls(PostOpAttr.unpack(u), u.unpack_string(MAX_PATH_BYTES))


@dataclass(frozen=True)
class Readlink3Res:
    """READLINK3res (RFC 1813 §3.3.5); resfail is symlink_attributes."""

    status: Nfsstat3
    resok: Readlink3ResOk | None = None
    resfail: PostOpAttr = NO_ATTR

    def pack(self, p: Packer) -> None:
        """Append the result."""
        _pack_res(p, self.status, self.resok, self.resfail)

    @classmethod
    def unpack(cls, u: Unpacker) -> Readlink3Res:
        """Read the result."""
        status, ok = _is_ok(u)
        if ok:
            return cls(status, Readlink3ResOk.unpack(u))
        return cls(status, resfail=PostOpAttr.unpack(u))


@dataclass(frozen=True)
class Read3ResOk:
    """READ3resok (RFC 1813 §3.3.6). `data` may be a memoryview (sent without a copy)."""

    file_attributes: PostOpAttr
    count: int
    eof: bool
    data: bytes | memoryview

    def pack(self, p: Packer) -> None:
        """Append the result."""
        self.file_attributes.pack(p)
        p.pack_uint(self.count)
        p.pack_bool(self.eof)
        p.pack_opaque(self.data)

    @classmethod
    def unpack(cls, u: Unpacker) -> Read3ResOk:
        """Read the result."""
        return cls(PostOpAttr.unpack(u), u.unpack_uint(), u.unpack_bool(), u.unpack_opaque())


@dataclass(frozen=True)
class Read3Res:
    """READ3res (RFC 1813 §3.3.6); resfail is file_attributes."""

    status: Nfsstat3
    resok: Read3ResOk | None = None
    resfail: PostOpAttr = NO_ATTR

    def pack(self, p: Packer) -> None:
        """Append the result."""
        _pack_res(p, self.status, self.resok, self.resfail)

    @classmethod
    def unpack(cls, u: Unpacker) -> Read3Res:
        """Read the result."""
        status, ok = _is_ok(u)
        if ok:
            return cls(status, Read3ResOk.unpack(u))
        return cls(status, resfail=PostOpAttr.unpack(u))


@dataclass(frozen=True)
class Write3ResOk:
    """WRITE3resok (RFC 1813 §3.3.7)."""

    file_wcc: WccData
    count: int
    committed: StableHow
    verf: bytes

    def pack(self, p: Packer) -> None:
        """Append the result."""
        self.file_wcc.pack(p)
        p.pack_uint(self.count)
        p.pack_enum(self.committed)
        p.pack_fopaque(NFS3_WRITEVERFSIZE, self.verf)

    @classmethod
    def unpack(cls, u: Unpacker) -> Write3ResOk:
        """Read the result."""
        return cls(
            WccData.unpack(u),
            u.unpack_uint(),
            u.unpack_enum(StableHow),
            u.unpack_fopaque(NFS3_WRITEVERFSIZE),
        )


@dataclass(frozen=True)
class Write3Res:
    """WRITE3res (RFC 1813 §3.3.7); resfail is file_wcc."""

    status: Nfsstat3
    resok: Write3ResOk | None = None
    resfail: WccData = NO_WCC

    def pack(self, p: Packer) -> None:
        """Append the result."""
        _pack_res(p, self.status, self.resok, self.resfail)

    @classmethod
    def unpack(cls, u: Unpacker) -> Write3Res:
        """Read the result."""
        status, ok = _is_ok(u)
        if ok:
            return cls(status, Write3ResOk.unpack(u))
        return cls(status, resfail=WccData.unpack(u))


@dataclass(frozen=True)
class Create3ResOk:
    """CREATE3resok (RFC 1813 §3.3.8); also MKDIR3resok, SYMLINK3resok, MKNOD3resok."""

    obj: PostOpFh3
    obj_attributes: PostOpAttr
    dir_wcc: WccData

    def pack(self, p: Packer) -> None:
        """Append the result."""
        self.obj.pack(p)
        self.obj_attributes.pack(p)
        self.dir_wcc.pack(p)

    @classmethod
    def unpack(cls, u: Unpacker) -> Create3ResOk:
        """Read the result."""
        return cls(PostOpFh3.unpack(u), PostOpAttr.unpack(u), WccData.unpack(u))


@dataclass(frozen=True)
class Create3Res:
    """CREATE3res (RFC 1813 §3.3.8); resfail is dir_wcc. Also MKDIR3res, SYMLINK3res, MKNOD3res."""

    status: Nfsstat3
    resok: Create3ResOk | None = None
    resfail: WccData = NO_WCC

    def pack(self, p: Packer) -> None:
        """Append the result."""
        _pack_res(p, self.status, self.resok, self.resfail)

    @classmethod
    def unpack(cls, u: Unpacker) -> Create3Res:
        """Read the result."""
        status, ok = _is_ok(u)
        if ok:
            return cls(status, Create3ResOk.unpack(u))
        return cls(status, resfail=WccData.unpack(u))


Mkdir3Res = Create3Res
"""MKDIR3res (RFC 1813 §3.3.9): the same shape as CREATE3res."""
Symlink3Res = Create3Res
"""SYMLINK3res (RFC 1813 §3.3.10): the same shape as CREATE3res."""
Mknod3Res = Create3Res
"""MKNOD3res (RFC 1813 §3.3.11): the same shape as CREATE3res."""


@dataclass(frozen=True)
class Remove3Res:
    """REMOVE3res (RFC 1813 §3.3.12); also RMDIR3res (§3.3.13). Both arms carry dir_wcc."""

    status: Nfsstat3
    dir_wcc: WccData = NO_WCC

    def pack(self, p: Packer) -> None:
        """Append the result."""
        _pack_status(p, self.status)
        self.dir_wcc.pack(p)

    @classmethod
    def unpack(cls, u: Unpacker) -> Remove3Res:
        """Read the result."""
        return cls(u.unpack_enum(Nfsstat3), WccData.unpack(u))


Rmdir3Res = Remove3Res
"""RMDIR3res (RFC 1813 §3.3.13): the same shape as REMOVE3res."""


@dataclass(frozen=True)
class Rename3Res:
    """RENAME3res (RFC 1813 §3.3.14); both arms carry fromdir_wcc and todir_wcc."""

    status: Nfsstat3
    fromdir_wcc: WccData = NO_WCC
    todir_wcc: WccData = NO_WCC

    def pack(self, p: Packer) -> None:
        """Append the result."""
        _pack_status(p, self.status)
        self.fromdir_wcc.pack(p)
        self.todir_wcc.pack(p)

    @classmethod
    def unpack(cls, u: Unpacker) -> Rename3Res:
        """Read the result."""
        return cls(u.unpack_enum(Nfsstat3), WccData.unpack(u), WccData.unpack(u))


@dataclass(frozen=True)
class Link3Res:
    """LINK3res (RFC 1813 §3.3.15); both arms carry file_attributes and linkdir_wcc."""

    status: Nfsstat3
    file_attributes: PostOpAttr = NO_ATTR
    linkdir_wcc: WccData = NO_WCC

    def pack(self, p: Packer) -> None:
        """Append the result."""
        _pack_status(p, self.status)
        self.file_attributes.pack(p)
        self.linkdir_wcc.pack(p)

    @classmethod
    def unpack(cls, u: Unpacker) -> Link3Res:
        """Read the result."""
        return cls(u.unpack_enum(Nfsstat3), PostOpAttr.unpack(u), WccData.unpack(u))


@dataclass(frozen=True)
class Entry3:
    """entry3 (RFC 1813 §3.3.16)."""

    fileid: int
    name: str
    cookie: int

    def pack(self, p: Packer) -> None:
        """Append the entry (without the list's value-follows flag)."""
        p.pack_uhyper(self.fileid)
        p.pack_string(self.name, MAX_NAME_BYTES)
        p.pack_uhyper(self.cookie)

    @classmethod
    def unpack(cls, u: Unpacker) -> Entry3:
        """Read the entry."""
        return cls(u.unpack_uhyper(), u.unpack_string(MAX_NAME_BYTES), u.unpack_uhyper())

    def xdr_size(self) -> int:
        """Return the encoded size, including the list's 4-byte value-follows flag."""
        return 4 + 8 + _name_size(self.name) + 8


@dataclass(frozen=True)
class Dirlist3:
    """dirlist3 (RFC 1813 §3.3.16)."""

    entries: tuple[Entry3, ...]
    eof: bool

    def pack(self, p: Packer) -> None:
        """Append the entry list and eof."""
        p.pack_list(self.entries, lambda e: e.pack(p))
        p.pack_bool(self.eof)

    @classmethod
    def unpack(cls, u: Unpacker) -> Dirlist3:
        """Read the entry list and eof."""
        return cls(tuple(u.unpack_list(lambda: Entry3.unpack(u))), u.unpack_bool())


@dataclass(frozen=True)
class Readdir3ResOk:
    """READDIR3resok (RFC 1813 §3.3.16)."""

    dir_attributes: PostOpAttr
    cookieverf: bytes
    reply: Dirlist3

    def pack(self, p: Packer) -> None:
        """Append the result."""
        self.dir_attributes.pack(p)
        p.pack_fopaque(NFS3_COOKIEVERFSIZE, self.cookieverf)
        self.reply.pack(p)

    @classmethod
    def unpack(cls, u: Unpacker) -> Readdir3ResOk:
        """Read the result."""
        return cls(PostOpAttr.unpack(u), u.unpack_fopaque(NFS3_COOKIEVERFSIZE), Dirlist3.unpack(u))


@dataclass(frozen=True)
class Readdir3Res:
    """READDIR3res (RFC 1813 §3.3.16); resfail is dir_attributes."""

    status: Nfsstat3
    resok: Readdir3ResOk | None = None
    resfail: PostOpAttr = NO_ATTR

    def pack(self, p: Packer) -> None:
        """Append the result."""
        _pack_res(p, self.status, self.resok, self.resfail)

    @classmethod
    def unpack(cls, u: Unpacker) -> Readdir3Res:
        """Read the result."""
        status, ok = _is_ok(u)
        if ok:
            return cls(status, Readdir3ResOk.unpack(u))
        return cls(status, resfail=PostOpAttr.unpack(u))


@dataclass(frozen=True)
class Entryplus3:
    """entryplus3 (RFC 1813 §3.3.17)."""

    fileid: int
    name: str
    cookie: int
    name_attributes: PostOpAttr = NO_ATTR
    name_handle: PostOpFh3 = PostOpFh3()

    def pack(self, p: Packer) -> None:
        """Append the entry (without the list's value-follows flag)."""
        p.pack_uhyper(self.fileid)
        p.pack_string(self.name, MAX_NAME_BYTES)
        p.pack_uhyper(self.cookie)
        self.name_attributes.pack(p)
        self.name_handle.pack(p)

    @classmethod
    def unpack(cls, u: Unpacker) -> Entryplus3:
        """Read the entry."""
        return cls(
            u.unpack_uhyper(),
            u.unpack_string(MAX_NAME_BYTES),
            u.unpack_uhyper(),
            PostOpAttr.unpack(u),
            PostOpFh3.unpack(u),
        )

    def dir_size(self) -> int:
        """Return the size counted against dircount: flag, fileid, name and cookie."""
        return 4 + 8 + _name_size(self.name) + 8

    def xdr_size(self) -> int:
        """Return the full encoded size, including the list's value-follows flag."""
        return self.dir_size() + self.name_attributes.xdr_size() + self.name_handle.xdr_size()


@dataclass(frozen=True)
class Dirlistplus3:
    """dirlistplus3 (RFC 1813 §3.3.17)."""

    entries: tuple[Entryplus3, ...]
    eof: bool

    def pack(self, p: Packer) -> None:
        """Append the entry list and eof."""
        p.pack_list(self.entries, lambda e: e.pack(p))
        p.pack_bool(self.eof)

    @classmethod
    def unpack(cls, u: Unpacker) -> Dirlistplus3:
        """Read the entry list and eof."""
        return cls(tuple(u.unpack_list(lambda: Entryplus3.unpack(u))), u.unpack_bool())


@dataclass(frozen=True)
class Readdirplus3ResOk:
    """READDIRPLUS3resok (RFC 1813 §3.3.17)."""

    dir_attributes: PostOpAttr
    cookieverf: bytes
    reply: Dirlistplus3

    def pack(self, p: Packer) -> None:
        """Append the result."""
        self.dir_attributes.pack(p)
        p.pack_fopaque(NFS3_COOKIEVERFSIZE, self.cookieverf)
        self.reply.pack(p)

    @classmethod
    def unpack(cls, u: Unpacker) -> Readdirplus3ResOk:
        """Read the result."""
        return cls(
            PostOpAttr.unpack(u), u.unpack_fopaque(NFS3_COOKIEVERFSIZE), Dirlistplus3.unpack(u)
        )


@dataclass(frozen=True)
class Readdirplus3Res:
    """READDIRPLUS3res (RFC 1813 §3.3.17); resfail is dir_attributes."""

    status: Nfsstat3
    resok: Readdirplus3ResOk | None = None
    resfail: PostOpAttr = NO_ATTR

    def pack(self, p: Packer) -> None:
        """Append the result."""
        _pack_res(p, self.status, self.resok, self.resfail)

    @classmethod
    def unpack(cls, u: Unpacker) -> Readdirplus3Res:
        """Read the result."""
        status, ok = _is_ok(u)
        if ok:
            return cls(status, Readdirplus3ResOk.unpack(u))
        return cls(status, resfail=PostOpAttr.unpack(u))


_FSSTAT: Final = struct.Struct(">QQQQQQI")


@dataclass(frozen=True)
class Fsstat3ResOk:
    """FSSTAT3resok (RFC 1813 §3.3.18)."""

    obj_attributes: PostOpAttr
    tbytes: int
    fbytes: int
    abytes: int
    tfiles: int
    ffiles: int
    afiles: int
    invarsec: int

    def pack(self, p: Packer) -> None:
        """Append the result."""
        self.obj_attributes.pack(p)
        p.pack_struct(
            _FSSTAT,
            self.tbytes,
            self.fbytes,
            self.abytes,
            self.tfiles,
            self.ffiles,
            self.afiles,
            self.invarsec,
        )

    @classmethod
    def unpack(cls, u: Unpacker) -> Fsstat3ResOk:
        """Read the result."""
        attrs = PostOpAttr.unpack(u)
        v = u.unpack_struct(_FSSTAT)
        return cls(attrs, v[0], v[1], v[2], v[3], v[4], v[5], v[6])


@dataclass(frozen=True)
class Fsstat3Res:
    """FSSTAT3res (RFC 1813 §3.3.18); resfail is obj_attributes."""

    status: Nfsstat3
    resok: Fsstat3ResOk | None = None
    resfail: PostOpAttr = NO_ATTR

    def pack(self, p: Packer) -> None:
        """Append the result."""
        _pack_res(p, self.status, self.resok, self.resfail)

    @classmethod
    def unpack(cls, u: Unpacker) -> Fsstat3Res:
        """Read the result."""
        status, ok = _is_ok(u)
        if ok:
            return cls(status, Fsstat3ResOk.unpack(u))
        return cls(status, resfail=PostOpAttr.unpack(u))


_FSINFO: Final = struct.Struct(">IIIIIIIQIII")


@dataclass(frozen=True)
class Fsinfo3ResOk:
    """FSINFO3resok (RFC 1813 §3.3.19)."""

    obj_attributes: PostOpAttr
    rtmax: int
    rtpref: int
    rtmult: int
    wtmax: int
    wtpref: int
    wtmult: int
    dtpref: int
    maxfilesize: int
    time_delta: Nfstime3
    properties: int

    def pack(self, p: Packer) -> None:
        """Append the result."""
        self.obj_attributes.pack(p)
        p.pack_struct(
            _FSINFO,
            self.rtmax,
            self.rtpref,
            self.rtmult,
            self.wtmax,
            self.wtpref,
            self.wtmult,
            self.dtpref,
            self.maxfilesize,
            self.time_delta.seconds,
            self.time_delta.nseconds,
            self.properties,
        )

    @classmethod
    def unpack(cls, u: Unpacker) -> Fsinfo3ResOk:
        """Read the result."""
        attrs = PostOpAttr.unpack(u)
        v = u.unpack_struct(_FSINFO)
        return cls(
            attrs, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], Nfstime3(v[8], v[9]), v[10]
        )


@dataclass(frozen=True)
class Fsinfo3Res:
    """FSINFO3res (RFC 1813 §3.3.19); resfail is obj_attributes."""

    status: Nfsstat3
    resok: Fsinfo3ResOk | None = None
    resfail: PostOpAttr = NO_ATTR

    def pack(self, p: Packer) -> None:
        """Append the result."""
        _pack_res(p, self.status, self.resok, self.resfail)

    @classmethod
    def unpack(cls, u: Unpacker) -> Fsinfo3Res:
        """Read the result."""
        status, ok = _is_ok(u)
        if ok:
            return cls(status, Fsinfo3ResOk.unpack(u))
        return cls(status, resfail=PostOpAttr.unpack(u))


@dataclass(frozen=True)
class Pathconf3ResOk:
    """PATHCONF3resok (RFC 1813 §3.3.20)."""

    obj_attributes: PostOpAttr
    linkmax: int
    name_max: int
    no_trunc: bool
    chown_restricted: bool
    case_insensitive: bool
    case_preserving: bool

    def pack(self, p: Packer) -> None:
        """Append the result."""
        self.obj_attributes.pack(p)
        p.pack_uint(self.linkmax)
        p.pack_uint(self.name_max)
        p.pack_bool(self.no_trunc)
        p.pack_bool(self.chown_restricted)
        p.pack_bool(self.case_insensitive)
        p.pack_bool(self.case_preserving)

    @classmethod
    def unpack(cls, u: Unpacker) -> Pathconf3ResOk:
        """Read the result."""
        return cls(
            PostOpAttr.unpack(u),
            u.unpack_uint(),
            u.unpack_uint(),
            u.unpack_bool(),
            u.unpack_bool(),
            u.unpack_bool(),
            u.unpack_bool(),
        )


@dataclass(frozen=True)
class Pathconf3Res:
    """PATHCONF3res (RFC 1813 §3.3.20); resfail is obj_attributes."""

    status: Nfsstat3
    resok: Pathconf3ResOk | None = None
    resfail: PostOpAttr = NO_ATTR

    def pack(self, p: Packer) -> None:
        """Append the result."""
        _pack_res(p, self.status, self.resok, self.resfail)

    @classmethod
    def unpack(cls, u: Unpacker) -> Pathconf3Res:
        """Read the result."""
        status, ok = _is_ok(u)
        if ok:
            return cls(status, Pathconf3ResOk.unpack(u))
        return cls(status, resfail=PostOpAttr.unpack(u))


@dataclass(frozen=True)
class Commit3ResOk:
    """COMMIT3resok (RFC 1813 §3.3.21)."""

    file_wcc: WccData
    verf: bytes

    def pack(self, p: Packer) -> None:
        """Append the result."""
        self.file_wcc.pack(p)
        p.pack_fopaque(NFS3_WRITEVERFSIZE, self.verf)

    @classmethod
    def unpack(cls, u: Unpacker) -> Commit3ResOk:
        """Read the result."""
        return cls(WccData.unpack(u), u.unpack_fopaque(NFS3_WRITEVERFSIZE))


@dataclass(frozen=True)
class Commit3Res:
    """COMMIT3res (RFC 1813 §3.3.21); resfail is file_wcc."""

    status: Nfsstat3
    resok: Commit3ResOk | None = None
    resfail: WccData = NO_WCC

    def pack(self, p: Packer) -> None:
        """Append the result."""
        _pack_res(p, self.status, self.resok, self.resfail)

    @classmethod
    def unpack(cls, u: Unpacker) -> Commit3Res:
        """Read the result."""
        status, ok = _is_ok(u)
        if ok:
            return cls(status, Commit3ResOk.unpack(u))
        return cls(status, resfail=WccData.unpack(u))


# ================================================================ file handles

FH_MAGIC: Final = b"PXL1"
_FH: Final = struct.Struct(">4sQ8s")
FH_SIZE: Final = _FH.size


class HandleCodec:
    """Map `FileId` <-> nfs_fh3: ``FH_MAGIC`` + fileid (u64) + the Vfs generation (8 bytes).

    The handle carries no boot verifier of its own: the Vfs's `generation`
    decides how long a handle stays valid (per boot, or across restarts).
    """

    def __init__(self, vfs: Vfs) -> None:
        self._vfs = vfs

    def encode(self, fid: FileId) -> NfsFh3:
        """Return the handle of `fid`.

        Raises:
            NfsError: NFS3ERR_STALE if the Vfs does not know `fid`;
                NFS3ERR_SERVERFAULT if its generation is not 8 bytes.
        """
        gen = self._vfs.generation(fid)
        if len(gen) != 8:
            raise NfsError(Nfsstat3.NFS3ERR_SERVERFAULT, "Vfs generation must be 8 bytes")
        return NfsFh3(_FH.pack(FH_MAGIC, fid, gen))

    def decode(self, fh: NfsFh3) -> FileId:
        """Return the `FileId` of a handle the client sent.

        Raises:
            NfsError: NFS3ERR_BADHANDLE if it is not one of our handles;
                NFS3ERR_STALE if its generation is no longer current.
        """
        data = fh.data
        if len(data) != FH_SIZE or data[:4] != FH_MAGIC:
            raise NfsError(Nfsstat3.NFS3ERR_BADHANDLE)
        _, raw_id, gen = _FH.unpack(data)
        fid = FileId(raw_id)
        try:
            current = self._vfs.generation(fid)
        except NfsError as err:
            raise NfsError(Nfsstat3.NFS3ERR_STALE) from err
        if current != gen:
            raise NfsError(Nfsstat3.NFS3ERR_STALE)
        return fid


# ================================================================ the service


@dataclass(frozen=True)
class Nfs3Limits:
    """Transfer sizes advertised by FSINFO (RFC 1813 §3.3.19)."""

    rtmax: int = 1 << 20
    rtpref: int = 1 << 20
    rtmult: int = 4096
    wtmax: int = 1 << 20
    wtpref: int = 1 << 20
    wtmult: int = 4096
    dtpref: int = 64 * 1024
    max_readdir_entries: int = 16384
    """An upper bound on the entries asked from `Vfs.readdir` for one reply."""


DEFAULT_LIMITS: Final = Nfs3Limits()


class Nfs3Service:
    """NFSv3 bound to one `Vfs`, with the per-boot write verifier.

    Args:
        vfs: the file system.
        handles: the handle codec (shared with MOUNT); one over `vfs` by default.
        write_verifier: 8 bytes returned by WRITE and COMMIT; a new random value
            per service instance (per server boot) by default, so a client resends
            UNSTABLE data a restarted server never committed.
        limits: FSINFO sizes.
    """

    def __init__(
        self,
        vfs: Vfs,
        *,
        handles: HandleCodec | None = None,
        write_verifier: bytes | None = None,
        limits: Nfs3Limits = DEFAULT_LIMITS,
    ) -> None:
        self.vfs = vfs
        self.handles = handles if handles is not None else HandleCodec(vfs)
        self.write_verifier = (
            write_verifier if write_verifier is not None else secrets.token_bytes(8)
        )
        if len(self.write_verifier) != NFS3_WRITEVERFSIZE:
            raise ValueError("write_verifier must be 8 bytes")
        self.limits = limits

    def rpc_program(self) -> RpcProgram:
        """Return the NFS program (100003 v3) with every procedure of `NFS3_PROCEDURES`."""
        return RpcProgram(
            NFS_PROGRAM,
            NFS_V3,
            {int(num): self._bind(proc) for num, proc in NFS3_PROCEDURES.items()},
        )

    def _bind(self, proc: Procedure[Any, Any]) -> RpcProcedure[Any]:
        run = proc.run

        def bound(args: Any, ctx: CallContext) -> Packable:
            with calling(ctx):
                result: Packable = run(self, args, ctx)
            return result

        return RpcProcedure(proc.name, proc.decode, bound)

    # -- helpers shared by the procedures

    def verifier(self) -> bytes:
        """Return the WRITE/COMMIT verifier: the Vfs's own if it has ``write_verifier()``
        (it changes it when it loses staged data, so clients resend), else this service's.
        """
        own = getattr(self.vfs, "write_verifier", None)
        if own is not None:
            verf: bytes = own()
            return verf
        return self.write_verifier

    def fid(self, fh: NfsFh3) -> FileId:
        """Decode a handle (NfsError BADHANDLE / STALE)."""
        return self.handles.decode(fh)

    def attrs(self, fid: FileId) -> Fattr3 | None:
        """Return the attributes of `fid`, or None if the Vfs cannot give them."""
        try:
            return self.vfs.getattr(fid)
        except NfsError:
            return None

    def post_op(self, fid: FileId) -> PostOpAttr:
        """Return post_op_attr for `fid` (empty if unavailable)."""
        return PostOpAttr(self.attrs(fid))

    def pre_op(self, fid: FileId) -> PreOpAttr:
        """Return pre_op_attr for `fid` (empty if unavailable)."""
        attrs = self.attrs(fid)
        return PreOpAttr(attrs.wcc_attr() if attrs is not None else None)

    def wcc(self, fid: FileId, before: PreOpAttr) -> WccData:
        """Return wcc_data from `before` and the current attributes."""
        return WccData(before, self.post_op(fid))

    def check_writable(self) -> None:
        """Raise NFS3ERR_ROFS on a read-only Vfs."""
        if self.vfs.capabilities().read_only:
            raise NfsError(Nfsstat3.NFS3ERR_ROFS)

    def check_name(self, name: str) -> None:
        """Raise NFS3ERR_NAMETOOLONG for a name over the Vfs's name_max bytes."""
        if len(name.encode("utf-8", "surrogateescape")) > self.vfs.capabilities().name_max:
            raise NfsError(Nfsstat3.NFS3ERR_NAMETOOLONG)


def _status(err: NfsError) -> Nfsstat3:
    """Return the status to send for `err` (SERVERFAULT for a bogus one)."""
    status = err.status
    try:
        status = Nfsstat3(int(status))
    except ValueError:
        return Nfsstat3.NFS3ERR_SERVERFAULT
    if status == Nfsstat3.NFS3_OK:
        return Nfsstat3.NFS3ERR_SERVERFAULT
    return status


OK: Final = Nfsstat3.NFS3_OK


# ================================================================ procedures (§3.3)


def nfsproc3_null(s: Nfs3Service, args: Void, ctx: CallContext) -> Void:
    """NULL (RFC 1813 §3.3.0): do nothing."""
    return VOID


def nfsproc3_getattr(s: Nfs3Service, args: Getattr3Args, ctx: CallContext) -> Getattr3Res:
    """GETATTR (RFC 1813 §3.3.1)."""
    try:
        return Getattr3Res(OK, Getattr3ResOk(s.vfs.getattr(s.fid(args.object))))
    except NfsError as err:
        return Getattr3Res(_status(err))


def nfsproc3_setattr(s: Nfs3Service, args: Setattr3Args, ctx: CallContext) -> Setattr3Res:
    """SETATTR (RFC 1813 §3.3.2): the guard compares ctime before calling the Vfs."""
    try:
        fid = s.fid(args.object)
    except NfsError as err:
        return Setattr3Res(_status(err))
    current = s.attrs(fid)
    before = PreOpAttr(current.wcc_attr() if current is not None else None)
    try:
        s.check_writable()
        guard = args.guard.obj_ctime
        if guard is not None and (current is None or current.ctime != guard):
            raise NfsError(Nfsstat3.NFS3ERR_NOT_SYNC)
        after = s.vfs.setattr(fid, args.new_attributes, ctx)
        return Setattr3Res(OK, WccData(before, PostOpAttr(after)))
    except NfsError as err:
        return Setattr3Res(_status(err), s.wcc(fid, before))


def nfsproc3_lookup(s: Nfs3Service, args: Lookup3Args, ctx: CallContext) -> Lookup3Res:
    """LOOKUP (RFC 1813 §3.3.3)."""
    try:
        dir_id = s.fid(args.what.dir)
    except NfsError as err:
        return Lookup3Res(_status(err))
    try:
        s.check_name(args.what.name)
        fid = s.vfs.lookup(dir_id, args.what.name, ctx)
        return Lookup3Res(
            OK, Lookup3ResOk(s.handles.encode(fid), s.post_op(fid), s.post_op(dir_id))
        )
    except NfsError as err:
        return Lookup3Res(_status(err), resfail=s.post_op(dir_id))


def nfsproc3_access(s: Nfs3Service, args: Access3Args, ctx: CallContext) -> Access3Res:
    """ACCESS (RFC 1813 §3.3.4): the Vfs grants; a read-only Vfs never grants changes."""
    try:
        fid = s.fid(args.object)
    except NfsError as err:
        return Access3Res(_status(err))
    try:
        granted = s.vfs.access(fid, args.access, ctx) & args.access
        if s.vfs.capabilities().read_only:
            granted &= ~(ACCESS3_MODIFY | ACCESS3_EXTEND | ACCESS3_DELETE)
        return Access3Res(OK, Access3ResOk(s.post_op(fid), granted))
    except NfsError as err:
        return Access3Res(_status(err), resfail=s.post_op(fid))


def nfsproc3_readlink(s: Nfs3Service, args: Readlink3Args, ctx: CallContext) -> Readlink3Res:
    """READLINK (RFC 1813 §3.3.5): symbolic links are not supported (NFS3ERR_NOTSUPP)."""
    try:
        fid = s.fid(args.symlink)
    except NfsError as err:
        return Readlink3Res(_status(err))
    return Readlink3Res(Nfsstat3.NFS3ERR_NOTSUPP, resfail=s.post_op(fid))


def nfsproc3_read(s: Nfs3Service, args: Read3Args, ctx: CallContext) -> Read3Res:
    """READ (RFC 1813 §3.3.6): at most rtmax bytes; the data is sent without a copy."""
    try:
        fid = s.fid(args.file)
    except NfsError as err:
        return Read3Res(_status(err))
    try:
        data, eof = s.vfs.read(fid, args.offset, min(args.count, s.limits.rtmax), ctx)
        return Read3Res(OK, Read3ResOk(s.post_op(fid), len(data), eof, data))
    except NfsError as err:
        return Read3Res(_status(err), resfail=s.post_op(fid))


def nfsproc3_write(s: Nfs3Service, args: Write3Args, ctx: CallContext) -> Write3Res:
    """WRITE (RFC 1813 §3.3.7): writes `count` bytes of the data (INVAL if fewer were sent)."""
    try:
        fid = s.fid(args.file)
    except NfsError as err:
        return Write3Res(_status(err))
    before = s.pre_op(fid)
    try:
        s.check_writable()
        data = args.data
        if args.count > len(data):
            raise NfsError(Nfsstat3.NFS3ERR_INVAL, "WRITE count exceeds the data sent")
        if args.count < len(data):
            data = data[: args.count]
        count, committed = s.vfs.write(fid, args.offset, data, args.stable, ctx)
        return Write3Res(OK, Write3ResOk(s.wcc(fid, before), count, committed, s.verifier()))
    except NfsError as err:
        return Write3Res(_status(err), resfail=s.wcc(fid, before))


def nfsproc3_create(s: Nfs3Service, args: Create3Args, ctx: CallContext) -> Create3Res:
    """CREATE (RFC 1813 §3.3.8): UNCHECKED, GUARDED or EXCLUSIVE (with verifier)."""
    try:
        dir_id = s.fid(args.where.dir)
    except NfsError as err:
        return Create3Res(_status(err))
    before = s.pre_op(dir_id)
    try:
        s.check_writable()
        s.check_name(args.where.name)
        how = args.how
        if how.mode == Createmode3.EXCLUSIVE:
            fid = s.vfs.create_exclusive(dir_id, args.where.name, how.verf or ZERO_VERF, ctx)
        else:
            fid = s.vfs.create(
                dir_id,
                args.where.name,
                how.obj_attributes or Sattr3(),
                ctx,
                guarded=how.mode == Createmode3.GUARDED,
            )
        return Create3Res(
            OK,
            Create3ResOk(PostOpFh3(s.handles.encode(fid)), s.post_op(fid), s.wcc(dir_id, before)),
        )
    except NfsError as err:
        return Create3Res(_status(err), resfail=s.wcc(dir_id, before))


def nfsproc3_mkdir(s: Nfs3Service, args: Mkdir3Args, ctx: CallContext) -> Create3Res:
    """MKDIR (RFC 1813 §3.3.9)."""
    try:
        dir_id = s.fid(args.where.dir)
    except NfsError as err:
        return Create3Res(_status(err))
    before = s.pre_op(dir_id)
    try:
        s.check_writable()
        s.check_name(args.where.name)
        fid = s.vfs.mkdir(dir_id, args.where.name, args.attributes, ctx)
        return Create3Res(
            OK,
            Create3ResOk(PostOpFh3(s.handles.encode(fid)), s.post_op(fid), s.wcc(dir_id, before)),
        )
    except NfsError as err:
        return Create3Res(_status(err), resfail=s.wcc(dir_id, before))


def nfsproc3_symlink(s: Nfs3Service, args: Symlink3Args, ctx: CallContext) -> Create3Res:
    """SYMLINK (RFC 1813 §3.3.10): not supported (NFS3ERR_NOTSUPP)."""
    try:
        dir_id = s.fid(args.where.dir)
    except NfsError as err:
        return Create3Res(_status(err))
    return Create3Res(Nfsstat3.NFS3ERR_NOTSUPP, resfail=s.wcc(dir_id, s.pre_op(dir_id)))


def nfsproc3_mknod(s: Nfs3Service, args: Mknod3Args, ctx: CallContext) -> Create3Res:
    """MKNOD (RFC 1813 §3.3.11): not supported (NFS3ERR_NOTSUPP)."""
    try:
        dir_id = s.fid(args.where.dir)
    except NfsError as err:
        return Create3Res(_status(err))
    return Create3Res(Nfsstat3.NFS3ERR_NOTSUPP, resfail=s.wcc(dir_id, s.pre_op(dir_id)))


def nfsproc3_remove(s: Nfs3Service, args: Remove3Args, ctx: CallContext) -> Remove3Res:
    """REMOVE (RFC 1813 §3.3.12)."""
    try:
        dir_id = s.fid(args.object.dir)
    except NfsError as err:
        return Remove3Res(_status(err))
    before = s.pre_op(dir_id)
    try:
        s.check_writable()
        s.vfs.remove(dir_id, args.object.name, ctx)
        return Remove3Res(OK, s.wcc(dir_id, before))
    except NfsError as err:
        return Remove3Res(_status(err), s.wcc(dir_id, before))


def nfsproc3_rmdir(s: Nfs3Service, args: Rmdir3Args, ctx: CallContext) -> Remove3Res:
    """RMDIR (RFC 1813 §3.3.13)."""
    try:
        dir_id = s.fid(args.object.dir)
    except NfsError as err:
        return Remove3Res(_status(err))
    before = s.pre_op(dir_id)
    try:
        s.check_writable()
        s.vfs.rmdir(dir_id, args.object.name, ctx)
        return Remove3Res(OK, s.wcc(dir_id, before))
    except NfsError as err:
        return Remove3Res(_status(err), s.wcc(dir_id, before))


def nfsproc3_rename(s: Nfs3Service, args: Rename3Args, ctx: CallContext) -> Rename3Res:
    """RENAME (RFC 1813 §3.3.14)."""
    try:
        from_dir = s.fid(args.from_.dir)
        to_dir = s.fid(args.to.dir)
    except NfsError as err:
        return Rename3Res(_status(err))
    from_before = s.pre_op(from_dir)
    to_before = s.pre_op(to_dir)
    try:
        s.check_writable()
        s.check_name(args.to.name)
        s.vfs.rename(from_dir, args.from_.name, to_dir, args.to.name, ctx)
        status = OK
    except NfsError as err:
        status = _status(err)
    return Rename3Res(status, s.wcc(from_dir, from_before), s.wcc(to_dir, to_before))


def nfsproc3_link(s: Nfs3Service, args: Link3Args, ctx: CallContext) -> Link3Res:
    """LINK (RFC 1813 §3.3.15): hard links are not supported (NFS3ERR_NOTSUPP)."""
    try:
        fid = s.fid(args.file)
        dir_id = s.fid(args.link.dir)
    except NfsError as err:
        return Link3Res(_status(err))
    return Link3Res(Nfsstat3.NFS3ERR_NOTSUPP, s.post_op(fid), s.wcc(dir_id, s.pre_op(dir_id)))


_MIN_ENTRY_SIZE: Final = 4 + 8 + 8 + 8
"""The smallest entry3 on the wire: flag, fileid, 1-4 byte name, cookie."""
_DIRLIST_FIXED: Final = 4 + 8 + 4 + 4
"""status + cookieverf + end-of-list flag + eof (post_op_attr added separately)."""


def _check_cookie(cookie: int, sent: bytes, current: bytes) -> None:
    # A zero verifier from the client is accepted (RFC 1813 §3.3.16 lets clients
    # that got none send zeros); otherwise it must be the listing's.
    if cookie != 0 and sent != ZERO_VERF and sent != current:
        raise NfsError(Nfsstat3.NFS3ERR_BAD_COOKIE)


def nfsproc3_readdir(s: Nfs3Service, args: Readdir3Args, ctx: CallContext) -> Readdir3Res:
    """READDIR (RFC 1813 §3.3.16).

    The whole READDIR3res (status included) stays within `count` bytes; entries
    are cut at the first that does not fit (eof is then FALSE). If not even one
    entry fits: NFS3ERR_TOOSMALL.
    """
    try:
        dir_id = s.fid(args.dir)
    except NfsError as err:
        return Readdir3Res(_status(err))
    try:
        dir_attr = s.post_op(dir_id)
        budget = args.count - _DIRLIST_FIXED - dir_attr.xdr_size()
        max_entries = max(1, min(budget // _MIN_ENTRY_SIZE + 1, s.limits.max_readdir_entries))
        page = s.vfs.readdir(dir_id, after=args.cookie, max_entries=max_entries, ctx=ctx)
        _check_cookie(args.cookie, args.cookieverf, page.cookieverf)
        entries: list[Entry3] = []
        used = 0
        for e in page.entries:
            entry = Entry3(e.fileid, e.name, e.cookie)
            size = entry.xdr_size()
            if used + size > budget:
                break
            entries.append(entry)
            used += size
        if page.entries and not entries:
            raise NfsError(Nfsstat3.NFS3ERR_TOOSMALL)
        eof = page.eof and len(entries) == len(page.entries)
        return Readdir3Res(
            OK, Readdir3ResOk(dir_attr, page.cookieverf, Dirlist3(tuple(entries), eof))
        )
    except NfsError as err:
        return Readdir3Res(_status(err), resfail=s.post_op(dir_id))


def nfsproc3_readdirplus(
    s: Nfs3Service, args: Readdirplus3Args, ctx: CallContext
) -> Readdirplus3Res:
    """READDIRPLUS (RFC 1813 §3.3.17).

    Entries stop at the first one that would make the fileid/name/cookie bytes
    (with list flags) exceed `dircount`, or the whole READDIRPLUS3res exceed
    `maxcount`. If not even one entry fits: NFS3ERR_TOOSMALL.
    """
    try:
        dir_id = s.fid(args.dir)
    except NfsError as err:
        return Readdirplus3Res(_status(err))
    try:
        dir_attr = s.post_op(dir_id)
        budget = args.maxcount - _DIRLIST_FIXED - dir_attr.xdr_size()
        plus_min = _MIN_ENTRY_SIZE + 4 + FATTR3_SIZE + 8 + FH_SIZE
        max_entries = max(
            1,
            min(
                args.dircount // _MIN_ENTRY_SIZE + 1,
                budget // plus_min + 1,
                s.limits.max_readdir_entries,
            ),
        )
        page = s.vfs.readdir(dir_id, after=args.cookie, max_entries=max_entries, ctx=ctx)
        _check_cookie(args.cookie, args.cookieverf, page.cookieverf)
        entries: list[Entryplus3] = []
        used = used_dir = 0
        for e in page.entries:
            try:
                handle = PostOpFh3(s.handles.encode(e.fileid))
            except NfsError:  # removed meanwhile: list it without handle and attributes
                handle = PostOpFh3()
            entry = Entryplus3(e.fileid, e.name, e.cookie, s.post_op(e.fileid), handle)
            dsize = entry.dir_size()
            size = entry.xdr_size()
            if used_dir + dsize > args.dircount or used + size > budget:
                break
            entries.append(entry)
            used += size
            used_dir += dsize
        if page.entries and not entries:
            raise NfsError(Nfsstat3.NFS3ERR_TOOSMALL)
        eof = page.eof and len(entries) == len(page.entries)
        return Readdirplus3Res(
            OK,
            Readdirplus3ResOk(dir_attr, page.cookieverf, Dirlistplus3(tuple(entries), eof)),
        )
    except NfsError as err:
        return Readdirplus3Res(_status(err), resfail=s.post_op(dir_id))


def nfsproc3_fsstat(s: Nfs3Service, args: Fsstat3Args, ctx: CallContext) -> Fsstat3Res:
    """FSSTAT (RFC 1813 §3.3.18)."""
    try:
        fid = s.fid(args.fsroot)
    except NfsError as err:
        return Fsstat3Res(_status(err))
    try:
        st = s.vfs.fsstat(fid)
        return Fsstat3Res(
            OK,
            Fsstat3ResOk(
                s.post_op(fid),
                st.tbytes,
                st.fbytes,
                st.abytes,
                st.tfiles,
                st.ffiles,
                st.afiles,
                st.invarsec,
            ),
        )
    except NfsError as err:
        return Fsstat3Res(_status(err), resfail=s.post_op(fid))


def nfsproc3_fsinfo(s: Nfs3Service, args: Fsinfo3Args, ctx: CallContext) -> Fsinfo3Res:
    """FSINFO (RFC 1813 §3.3.19): 1 MiB reads and writes; no links or symlinks."""
    try:
        fid = s.fid(args.fsroot)
    except NfsError as err:
        return Fsinfo3Res(_status(err))
    caps = s.vfs.capabilities()
    lim = s.limits
    return Fsinfo3Res(
        OK,
        Fsinfo3ResOk(
            s.post_op(fid),
            rtmax=lim.rtmax,
            rtpref=lim.rtpref,
            rtmult=lim.rtmult,
            wtmax=lim.wtmax,
            wtpref=lim.wtpref,
            wtmult=lim.wtmult,
            dtpref=lim.dtpref,
            maxfilesize=caps.max_file_size,
            time_delta=Nfstime3.from_ns(caps.time_delta_ns),
            properties=FSF3_HOMOGENEOUS | FSF3_CANSETTIME,
        ),
    )


def nfsproc3_pathconf(s: Nfs3Service, args: Pathconf3Args, ctx: CallContext) -> Pathconf3Res:
    """PATHCONF (RFC 1813 §3.3.20)."""
    try:
        fid = s.fid(args.object)
    except NfsError as err:
        return Pathconf3Res(_status(err))
    caps = s.vfs.capabilities()
    return Pathconf3Res(
        OK,
        Pathconf3ResOk(
            s.post_op(fid),
            linkmax=1,
            name_max=caps.name_max,
            no_trunc=True,
            chown_restricted=True,
            case_insensitive=caps.case_insensitive,
            case_preserving=True,
        ),
    )


def nfsproc3_commit(s: Nfs3Service, args: Commit3Args, ctx: CallContext) -> Commit3Res:
    """COMMIT (RFC 1813 §3.3.21): the Vfs applies staged UNSTABLE writes."""
    try:
        fid = s.fid(args.file)
    except NfsError as err:
        return Commit3Res(_status(err))
    before = s.pre_op(fid)
    try:
        s.check_writable()
        s.vfs.commit(fid, args.offset, args.count, ctx)
        return Commit3Res(OK, Commit3ResOk(s.wcc(fid, before), s.verifier()))
    except NfsError as err:
        return Commit3Res(_status(err), resfail=s.wcc(fid, before))


# ================================================================ the procedure table

A = TypeVar("A")
R = TypeVar("R", bound=Packable)


@dataclass(frozen=True)
class Procedure(Generic[A, R]):
    """An NFSv3 procedure: its RFC name, argument decoder and implementation."""

    name: str
    decode: Callable[[Unpacker], A]
    run: Callable[[Nfs3Service, A, CallContext], R]


NFS3_PROCEDURES: Final[dict[NfsProc3, Procedure[Any, Any]]] = {
    NfsProc3.NFSPROC3_NULL: Procedure("NFSPROC3_NULL", Void.unpack, nfsproc3_null),
    NfsProc3.NFSPROC3_GETATTR: Procedure("NFSPROC3_GETATTR", Getattr3Args.unpack, nfsproc3_getattr),
    NfsProc3.NFSPROC3_SETATTR: Procedure("NFSPROC3_SETATTR", Setattr3Args.unpack, nfsproc3_setattr),
    NfsProc3.NFSPROC3_LOOKUP: Procedure("NFSPROC3_LOOKUP", Lookup3Args.unpack, nfsproc3_lookup),
    NfsProc3.NFSPROC3_ACCESS: Procedure("NFSPROC3_ACCESS", Access3Args.unpack, nfsproc3_access),
    NfsProc3.NFSPROC3_READLINK: Procedure(
        "NFSPROC3_READLINK", Readlink3Args.unpack, nfsproc3_readlink
    ),
    NfsProc3.NFSPROC3_READ: Procedure("NFSPROC3_READ", Read3Args.unpack, nfsproc3_read),
    NfsProc3.NFSPROC3_WRITE: Procedure("NFSPROC3_WRITE", Write3Args.unpack, nfsproc3_write),
    NfsProc3.NFSPROC3_CREATE: Procedure("NFSPROC3_CREATE", Create3Args.unpack, nfsproc3_create),
    NfsProc3.NFSPROC3_MKDIR: Procedure("NFSPROC3_MKDIR", Mkdir3Args.unpack, nfsproc3_mkdir),
    NfsProc3.NFSPROC3_SYMLINK: Procedure("NFSPROC3_SYMLINK", Symlink3Args.unpack, nfsproc3_symlink),
    NfsProc3.NFSPROC3_MKNOD: Procedure("NFSPROC3_MKNOD", Mknod3Args.unpack, nfsproc3_mknod),
    NfsProc3.NFSPROC3_REMOVE: Procedure("NFSPROC3_REMOVE", Remove3Args.unpack, nfsproc3_remove),
    NfsProc3.NFSPROC3_RMDIR: Procedure("NFSPROC3_RMDIR", Rmdir3Args.unpack, nfsproc3_rmdir),
    NfsProc3.NFSPROC3_RENAME: Procedure("NFSPROC3_RENAME", Rename3Args.unpack, nfsproc3_rename),
    NfsProc3.NFSPROC3_LINK: Procedure("NFSPROC3_LINK", Link3Args.unpack, nfsproc3_link),
    NfsProc3.NFSPROC3_READDIR: Procedure("NFSPROC3_READDIR", Readdir3Args.unpack, nfsproc3_readdir),
    NfsProc3.NFSPROC3_READDIRPLUS: Procedure(
        "NFSPROC3_READDIRPLUS", Readdirplus3Args.unpack, nfsproc3_readdirplus
    ),
    NfsProc3.NFSPROC3_FSSTAT: Procedure("NFSPROC3_FSSTAT", Fsstat3Args.unpack, nfsproc3_fsstat),
    NfsProc3.NFSPROC3_FSINFO: Procedure("NFSPROC3_FSINFO", Fsinfo3Args.unpack, nfsproc3_fsinfo),
    NfsProc3.NFSPROC3_PATHCONF: Procedure(
        "NFSPROC3_PATHCONF", Pathconf3Args.unpack, nfsproc3_pathconf
    ),
    NfsProc3.NFSPROC3_COMMIT: Procedure("NFSPROC3_COMMIT", Commit3Args.unpack, nfsproc3_commit),
}
"""Every NFSv3 procedure by number (RFC 1813 §3): the explicit dispatch table."""
