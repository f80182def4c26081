"""NFSv3 procedure results: the ``XXX3resok`` and ``XXX3res`` of RFC 1813 §3.3.

A result union ``XXX3res`` (`XdrResult`) has `status`, `resok` (set when status is
NFS3_OK) and `resfail` (the failure arm); where the RFC's resok and resfail carry the
same fields (SETATTR, REMOVE, RMDIR, RENAME, LINK) the fields are flat. The resok
structs declare their fields' codecs (`nfs.protocol.nfs3.codec`).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Self

from nfs.protocol.nfs3.codec import (
    BOOL,
    UHYPER,
    UINT,
    XdrStruct,
    enum_of,
    fopaque,
    list_of,
    opaque,
    string,
)
from nfs.protocol.nfs3.types import (
    MAX_NAME_BYTES,
    MAX_PATH_BYTES,
    NFS3_COOKIEVERFSIZE,
    NFS3_WRITEVERFSIZE,
    NO_ATTR,
    NO_FH,
    NO_WCC,
    Fattr3,
    NfsFh3,
    Nfsstat3,
    Nfstime3,
    PostOpAttr,
    PostOpFh3,
    StableHow,
    WccData,
    padded,
)
from nfs.protocol.xdr import FileSlice, Packer, Pieces, Unpacker, XdrError

__all__ = [
    "Access3Res",
    "Access3ResOk",
    "Commit3Res",
    "Commit3ResOk",
    "Create3Res",
    "Create3ResOk",
    "Dirlist3",
    "Dirlistplus3",
    "Entry3",
    "Entryplus3",
    "Fsinfo3Res",
    "Fsinfo3ResOk",
    "Fsstat3Res",
    "Fsstat3ResOk",
    "Getattr3Res",
    "Getattr3ResOk",
    "Link3Res",
    "Lookup3Res",
    "Lookup3ResOk",
    "Mkdir3Res",
    "Mknod3Res",
    "Pathconf3Res",
    "Pathconf3ResOk",
    "Read3Res",
    "Read3ResOk",
    "Readdir3Res",
    "Readdir3ResOk",
    "Readdirplus3Res",
    "Readdirplus3ResOk",
    "Readlink3Res",
    "Readlink3ResOk",
    "Remove3Res",
    "Rename3Res",
    "Rmdir3Res",
    "Setattr3Res",
    "Symlink3Res",
    "Write3Res",
    "Write3ResOk",
    "XdrResult",
]

STATUS = enum_of(Nfsstat3)
COOKIEVERF = fopaque(NFS3_COOKIEVERFSIZE)
WRITEVERF = fopaque(NFS3_WRITEVERFSIZE)


class XdrResult:
    """Base of an ``XXX3res`` union: `status`, then `resok` if NFS3_OK, else `resfail`.

    A subclass is a frozen dataclass with the fields ``status``, ``resok`` and (unless
    the failure arm is void) ``resfail``, and sets `ARMS` to the two arms' unpackers.
    """

    status: Nfsstat3
    resok: Any
    ARMS: ClassVar[tuple[Callable[[Unpacker], Any], Callable[[Unpacker], Any] | None]]

    def pack(self, p: Packer) -> None:
        """Append the status and its arm."""
        p.pack_enum(self.status)
        if self.status == Nfsstat3.NFS3_OK:
            if self.resok is None:
                raise XdrError("NFS3_OK result without resok")
            self.resok.pack(p)
        elif self.ARMS[1] is not None:
            getattr(self, "resfail").pack(p)  # noqa: B009 - absent where the arm is void

    @classmethod
    def unpack(cls, u: Unpacker) -> Self:
        """Read the status and its arm."""
        new: Callable[..., Self] = cls
        status = u.unpack_enum(Nfsstat3)
        ok, fail = cls.ARMS
        if status == Nfsstat3.NFS3_OK:
            return new(status, ok(u))
        return new(status) if fail is None else new(status, resfail=fail(u))


@dataclass(frozen=True)
class Getattr3ResOk(XdrStruct):
    """GETATTR3resok (RFC 1813 §3.3.1)."""

    obj_attributes: Fattr3
    XDR = (Fattr3,)


@dataclass(frozen=True)
class Getattr3Res(XdrResult):
    """GETATTR3res (RFC 1813 §3.3.1); the failure arm is void."""

    status: Nfsstat3
    resok: Getattr3ResOk | None = None
    ARMS = (Getattr3ResOk.unpack, None)


@dataclass(frozen=True)
class Setattr3Res(XdrStruct):
    """SETATTR3res (RFC 1813 §3.3.2); both arms carry obj_wcc."""

    status: Nfsstat3
    obj_wcc: WccData = NO_WCC
    XDR = (STATUS, WccData)


@dataclass(frozen=True)
class Lookup3ResOk(XdrStruct):
    """LOOKUP3resok (RFC 1813 §3.3.3)."""

    object: NfsFh3
    obj_attributes: PostOpAttr = NO_ATTR
    dir_attributes: PostOpAttr = NO_ATTR
    XDR = (NfsFh3, PostOpAttr, PostOpAttr)


@dataclass(frozen=True)
class Lookup3Res(XdrResult):
    """LOOKUP3res (RFC 1813 §3.3.3); resfail is dir_attributes."""

    status: Nfsstat3
    resok: Lookup3ResOk | None = None
    resfail: PostOpAttr = NO_ATTR
    ARMS = (Lookup3ResOk.unpack, PostOpAttr.unpack)


@dataclass(frozen=True)
class Access3ResOk(XdrStruct):
    """ACCESS3resok (RFC 1813 §3.3.4)."""

    obj_attributes: PostOpAttr
    access: int
    XDR = (PostOpAttr, UINT)


@dataclass(frozen=True)
class Access3Res(XdrResult):
    """ACCESS3res (RFC 1813 §3.3.4); resfail is obj_attributes."""

    status: Nfsstat3
    resok: Access3ResOk | None = None
    resfail: PostOpAttr = NO_ATTR
    ARMS = (Access3ResOk.unpack, PostOpAttr.unpack)


@dataclass(frozen=True)
class Readlink3ResOk(XdrStruct):
    """READLINK3resok (RFC 1813 §3.3.5)."""

    symlink_attributes: PostOpAttr
    data: str
    XDR = (PostOpAttr, string(MAX_PATH_BYTES))


@dataclass(frozen=True)
class Readlink3Res(XdrResult):
    """READLINK3res (RFC 1813 §3.3.5); resfail is symlink_attributes."""

    status: Nfsstat3
    resok: Readlink3ResOk | None = None
    resfail: PostOpAttr = NO_ATTR
    ARMS = (Readlink3ResOk.unpack, PostOpAttr.unpack)


_COUNT_EOF: Final = struct.Struct(">II")


@dataclass(frozen=True)
class Read3ResOk(XdrStruct):
    """READ3resok (RFC 1813 §3.3.6). `data` may be a memoryview, `Pieces` or a `FileSlice`
    (sent without a copy); it unpacks as bytes."""

    file_attributes: PostOpAttr
    count: int
    eof: bool
    data: bytes | memoryview | Pieces | FileSlice
    XDR = (PostOpAttr, UINT, BOOL, opaque())

    def pack(self, p: Packer) -> None:
        """Append the fields (by hand: every READ; `XDR` is the same layout)."""
        self.file_attributes.pack(p)
        p.pack_struct(_COUNT_EOF, self.count, 1 if self.eof else 0)
        p.pack_opaque(self.data)


@dataclass(frozen=True)
class Read3Res(XdrResult):
    """READ3res (RFC 1813 §3.3.6); resfail is file_attributes."""

    status: Nfsstat3
    resok: Read3ResOk | None = None
    resfail: PostOpAttr = NO_ATTR
    ARMS = (Read3ResOk.unpack, PostOpAttr.unpack)


@dataclass(frozen=True)
class Write3ResOk(XdrStruct):
    """WRITE3resok (RFC 1813 §3.3.7)."""

    file_wcc: WccData
    count: int
    committed: StableHow
    verf: bytes
    XDR = (WccData, UINT, enum_of(StableHow), WRITEVERF)


@dataclass(frozen=True)
class Write3Res(XdrResult):
    """WRITE3res (RFC 1813 §3.3.7); resfail is file_wcc."""

    status: Nfsstat3
    resok: Write3ResOk | None = None
    resfail: WccData = NO_WCC
    ARMS = (Write3ResOk.unpack, WccData.unpack)


@dataclass(frozen=True)
class Create3ResOk(XdrStruct):
    """CREATE3resok (RFC 1813 §3.3.8); also MKDIR3resok, SYMLINK3resok, MKNOD3resok."""

    obj: PostOpFh3
    obj_attributes: PostOpAttr
    dir_wcc: WccData
    XDR = (PostOpFh3, PostOpAttr, WccData)


@dataclass(frozen=True)
class Create3Res(XdrResult):
    """CREATE3res (RFC 1813 §3.3.8); resfail is dir_wcc. Also MKDIR3res, SYMLINK3res, MKNOD3res."""

    status: Nfsstat3
    resok: Create3ResOk | None = None
    resfail: WccData = NO_WCC
    ARMS = (Create3ResOk.unpack, WccData.unpack)


Mkdir3Res = Create3Res
"""MKDIR3res (RFC 1813 §3.3.9): the same shape as CREATE3res."""
Symlink3Res = Create3Res
"""SYMLINK3res (RFC 1813 §3.3.10): the same shape as CREATE3res."""
Mknod3Res = Create3Res
"""MKNOD3res (RFC 1813 §3.3.11): the same shape as CREATE3res."""


@dataclass(frozen=True)
class Remove3Res(XdrStruct):
    """REMOVE3res (RFC 1813 §3.3.12); also RMDIR3res (§3.3.13). Both arms carry dir_wcc."""

    status: Nfsstat3
    dir_wcc: WccData = NO_WCC
    XDR = (STATUS, WccData)


Rmdir3Res = Remove3Res
"""RMDIR3res (RFC 1813 §3.3.13): the same shape as REMOVE3res."""


@dataclass(frozen=True)
class Rename3Res(XdrStruct):
    """RENAME3res (RFC 1813 §3.3.14); both arms carry fromdir_wcc and todir_wcc."""

    status: Nfsstat3
    fromdir_wcc: WccData = NO_WCC
    todir_wcc: WccData = NO_WCC
    XDR = (STATUS, WccData, WccData)


@dataclass(frozen=True)
class Link3Res(XdrStruct):
    """LINK3res (RFC 1813 §3.3.15); both arms carry file_attributes and linkdir_wcc."""

    status: Nfsstat3
    file_attributes: PostOpAttr = NO_ATTR
    linkdir_wcc: WccData = NO_WCC
    XDR = (STATUS, PostOpAttr, WccData)


def _name_size(name: str) -> int:
    return 4 + padded(len(name.encode("utf-8", "surrogateescape")))


@dataclass(frozen=True)
class Entry3(XdrStruct):
    """entry3 (RFC 1813 §3.3.16); packed without the list's value-follows flag."""

    fileid: int
    name: str
    cookie: int
    XDR = (UHYPER, string(MAX_NAME_BYTES), UHYPER)

    def xdr_size(self) -> int:
        """Return the encoded size, including the list's 4-byte value-follows flag."""
        return 4 + 8 + _name_size(self.name) + 8


@dataclass(frozen=True)
class Dirlist3(XdrStruct):
    """dirlist3 (RFC 1813 §3.3.16)."""

    entries: tuple[Entry3, ...]
    eof: bool
    XDR = (list_of(Entry3), BOOL)


@dataclass(frozen=True)
class Readdir3ResOk(XdrStruct):
    """READDIR3resok (RFC 1813 §3.3.16)."""

    dir_attributes: PostOpAttr
    cookieverf: bytes
    reply: Dirlist3
    XDR = (PostOpAttr, COOKIEVERF, Dirlist3)


@dataclass(frozen=True)
class Readdir3Res(XdrResult):
    """READDIR3res (RFC 1813 §3.3.16); resfail is dir_attributes."""

    status: Nfsstat3
    resok: Readdir3ResOk | None = None
    resfail: PostOpAttr = NO_ATTR
    ARMS = (Readdir3ResOk.unpack, PostOpAttr.unpack)


@dataclass(frozen=True)
class Entryplus3(XdrStruct):
    """entryplus3 (RFC 1813 §3.3.17); packed without the list's value-follows flag."""

    fileid: int
    name: str
    cookie: int
    name_attributes: PostOpAttr = NO_ATTR
    name_handle: PostOpFh3 = NO_FH
    XDR = (UHYPER, string(MAX_NAME_BYTES), UHYPER, PostOpAttr, PostOpFh3)

    def dir_size(self) -> int:
        """Return the size counted against dircount: flag, fileid, name and cookie."""
        return 4 + 8 + _name_size(self.name) + 8

    def xdr_size(self) -> int:
        """Return the full encoded size, including the list's value-follows flag."""
        return self.dir_size() + self.name_attributes.xdr_size() + self.name_handle.xdr_size()


@dataclass(frozen=True)
class Dirlistplus3(XdrStruct):
    """dirlistplus3 (RFC 1813 §3.3.17)."""

    entries: tuple[Entryplus3, ...]
    eof: bool
    XDR = (list_of(Entryplus3), BOOL)


@dataclass(frozen=True)
class Readdirplus3ResOk(XdrStruct):
    """READDIRPLUS3resok (RFC 1813 §3.3.17)."""

    dir_attributes: PostOpAttr
    cookieverf: bytes
    reply: Dirlistplus3
    XDR = (PostOpAttr, COOKIEVERF, Dirlistplus3)


@dataclass(frozen=True)
class Readdirplus3Res(XdrResult):
    """READDIRPLUS3res (RFC 1813 §3.3.17); resfail is dir_attributes."""

    status: Nfsstat3
    resok: Readdirplus3ResOk | None = None
    resfail: PostOpAttr = NO_ATTR
    ARMS = (Readdirplus3ResOk.unpack, PostOpAttr.unpack)


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
        return cls(attrs, *u.unpack_struct(_FSSTAT))


@dataclass(frozen=True)
class Fsstat3Res(XdrResult):
    """FSSTAT3res (RFC 1813 §3.3.18); resfail is obj_attributes."""

    status: Nfsstat3
    resok: Fsstat3ResOk | None = None
    resfail: PostOpAttr = NO_ATTR
    ARMS = (Fsstat3ResOk.unpack, PostOpAttr.unpack)


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
class Fsinfo3Res(XdrResult):
    """FSINFO3res (RFC 1813 §3.3.19); resfail is obj_attributes."""

    status: Nfsstat3
    resok: Fsinfo3ResOk | None = None
    resfail: PostOpAttr = NO_ATTR
    ARMS = (Fsinfo3ResOk.unpack, PostOpAttr.unpack)


@dataclass(frozen=True)
class Pathconf3ResOk(XdrStruct):
    """PATHCONF3resok (RFC 1813 §3.3.20)."""

    obj_attributes: PostOpAttr
    linkmax: int
    name_max: int
    no_trunc: bool
    chown_restricted: bool
    case_insensitive: bool
    case_preserving: bool
    XDR = (PostOpAttr, UINT, UINT, BOOL, BOOL, BOOL, BOOL)


@dataclass(frozen=True)
class Pathconf3Res(XdrResult):
    """PATHCONF3res (RFC 1813 §3.3.20); resfail is obj_attributes."""

    status: Nfsstat3
    resok: Pathconf3ResOk | None = None
    resfail: PostOpAttr = NO_ATTR
    ARMS = (Pathconf3ResOk.unpack, PostOpAttr.unpack)


@dataclass(frozen=True)
class Commit3ResOk(XdrStruct):
    """COMMIT3resok (RFC 1813 §3.3.21)."""

    file_wcc: WccData
    verf: bytes
    XDR = (WccData, WRITEVERF)


@dataclass(frozen=True)
class Commit3Res(XdrResult):
    """COMMIT3res (RFC 1813 §3.3.21); resfail is file_wcc."""

    status: Nfsstat3
    resok: Commit3ResOk | None = None
    resfail: WccData = NO_WCC
    ARMS = (Commit3ResOk.unpack, WccData.unpack)
