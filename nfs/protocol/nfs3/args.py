"""NFSv3 procedure arguments: the ``XXX3args`` of RFC 1813 §3.3, with their sub-types.

Each is a frozen dataclass whose `XDR` table lists its fields' codecs in wire order
(see `nfs.protocol.nfs3.codec`); the unions `CreateHow3` and `Mknoddata3` are hand-written.
"""

from __future__ import annotations

from dataclasses import dataclass

from nfs.protocol.nfs3.codec import UHYPER, UINT, XdrStruct, enum_of, fopaque, opaque, string
from nfs.protocol.nfs3.types import (
    MAX_PATH_BYTES,
    NFS3_COOKIEVERFSIZE,
    NFS3_CREATEVERFSIZE,
    NO_GUARD,
    ZERO_VERF,
    Createmode3,
    DirOpArgs3,
    Ftype3,
    NfsFh3,
    Sattr3,
    Sattrguard3,
    Specdata3,
    StableHow,
)
from nfs.protocol.xdr import Packer, Unpacker

__all__ = [
    "Access3Args",
    "Commit3Args",
    "Create3Args",
    "CreateHow3",
    "Fsinfo3Args",
    "Fsstat3Args",
    "Getattr3Args",
    "Link3Args",
    "Lookup3Args",
    "Mkdir3Args",
    "Mknod3Args",
    "Mknoddata3",
    "Pathconf3Args",
    "Read3Args",
    "Readdir3Args",
    "Readdirplus3Args",
    "Readlink3Args",
    "Remove3Args",
    "Rename3Args",
    "Rmdir3Args",
    "Setattr3Args",
    "Symlink3Args",
    "Symlinkdata3",
    "Write3Args",
]

COOKIEVERF = fopaque(NFS3_COOKIEVERFSIZE)


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
class Symlinkdata3(XdrStruct):
    """symlinkdata3 (RFC 1813 §3.3.10)."""

    symlink_attributes: Sattr3
    symlink_data: str
    XDR = (Sattr3, string(MAX_PATH_BYTES))


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


@dataclass(frozen=True)
class Getattr3Args(XdrStruct):
    """GETATTR3args (RFC 1813 §3.3.1)."""

    object: NfsFh3
    XDR = (NfsFh3,)


@dataclass(frozen=True)
class Setattr3Args(XdrStruct):
    """SETATTR3args (RFC 1813 §3.3.2)."""

    object: NfsFh3
    new_attributes: Sattr3
    guard: Sattrguard3 = NO_GUARD
    XDR = (NfsFh3, Sattr3, Sattrguard3)


@dataclass(frozen=True)
class Lookup3Args(XdrStruct):
    """LOOKUP3args (RFC 1813 §3.3.3)."""

    what: DirOpArgs3
    XDR = (DirOpArgs3,)


@dataclass(frozen=True)
class Access3Args(XdrStruct):
    """ACCESS3args (RFC 1813 §3.3.4)."""

    object: NfsFh3
    access: int
    XDR = (NfsFh3, UINT)


@dataclass(frozen=True)
class Readlink3Args(XdrStruct):
    """READLINK3args (RFC 1813 §3.3.5)."""

    symlink: NfsFh3
    XDR = (NfsFh3,)


@dataclass(frozen=True)
class Read3Args(XdrStruct):
    """READ3args (RFC 1813 §3.3.6)."""

    file: NfsFh3
    offset: int
    count: int
    XDR = (NfsFh3, UHYPER, UINT)


@dataclass(frozen=True)
class Write3Args(XdrStruct):
    """WRITE3args (RFC 1813 §3.3.7)."""

    file: NfsFh3
    offset: int
    count: int
    stable: StableHow
    data: bytes
    XDR = (NfsFh3, UHYPER, UINT, enum_of(StableHow), opaque())


@dataclass(frozen=True)
class Create3Args(XdrStruct):
    """CREATE3args (RFC 1813 §3.3.8)."""

    where: DirOpArgs3
    how: CreateHow3
    XDR = (DirOpArgs3, CreateHow3)


@dataclass(frozen=True)
class Mkdir3Args(XdrStruct):
    """MKDIR3args (RFC 1813 §3.3.9)."""

    where: DirOpArgs3
    attributes: Sattr3
    XDR = (DirOpArgs3, Sattr3)


@dataclass(frozen=True)
class Symlink3Args(XdrStruct):
    """SYMLINK3args (RFC 1813 §3.3.10)."""

    where: DirOpArgs3
    symlink: Symlinkdata3
    XDR = (DirOpArgs3, Symlinkdata3)


@dataclass(frozen=True)
class Mknod3Args(XdrStruct):
    """MKNOD3args (RFC 1813 §3.3.11)."""

    where: DirOpArgs3
    what: Mknoddata3
    XDR = (DirOpArgs3, Mknoddata3)


@dataclass(frozen=True)
class Remove3Args(XdrStruct):
    """REMOVE3args (RFC 1813 §3.3.12)."""

    object: DirOpArgs3
    XDR = (DirOpArgs3,)


@dataclass(frozen=True)
class Rmdir3Args(XdrStruct):
    """RMDIR3args (RFC 1813 §3.3.13)."""

    object: DirOpArgs3
    XDR = (DirOpArgs3,)


@dataclass(frozen=True)
class Rename3Args(XdrStruct):
    """RENAME3args (RFC 1813 §3.3.14); `from_` is the RFC's ``from``."""

    from_: DirOpArgs3
    to: DirOpArgs3
    XDR = (DirOpArgs3, DirOpArgs3)


@dataclass(frozen=True)
class Link3Args(XdrStruct):
    """LINK3args (RFC 1813 §3.3.15)."""

    file: NfsFh3
    link: DirOpArgs3
    XDR = (NfsFh3, DirOpArgs3)


@dataclass(frozen=True)
class Readdir3Args(XdrStruct):
    """READDIR3args (RFC 1813 §3.3.16)."""

    dir: NfsFh3
    cookie: int = 0
    cookieverf: bytes = ZERO_VERF
    count: int = 4096
    XDR = (NfsFh3, UHYPER, COOKIEVERF, UINT)


@dataclass(frozen=True)
class Readdirplus3Args(XdrStruct):
    """READDIRPLUS3args (RFC 1813 §3.3.17)."""

    dir: NfsFh3
    cookie: int = 0
    cookieverf: bytes = ZERO_VERF
    dircount: int = 4096
    maxcount: int = 32768
    XDR = (NfsFh3, UHYPER, COOKIEVERF, UINT, UINT)


@dataclass(frozen=True)
class Fsstat3Args(XdrStruct):
    """FSSTAT3args (RFC 1813 §3.3.18)."""

    fsroot: NfsFh3
    XDR = (NfsFh3,)


@dataclass(frozen=True)
class Fsinfo3Args(XdrStruct):
    """FSINFO3args (RFC 1813 §3.3.19)."""

    fsroot: NfsFh3
    XDR = (NfsFh3,)


@dataclass(frozen=True)
class Pathconf3Args(XdrStruct):
    """PATHCONF3args (RFC 1813 §3.3.20)."""

    object: NfsFh3
    XDR = (NfsFh3,)


@dataclass(frozen=True)
class Commit3Args(XdrStruct):
    """COMMIT3args (RFC 1813 §3.3.21)."""

    file: NfsFh3
    offset: int = 0
    count: int = 0
    XDR = (NfsFh3, UHYPER, UINT)
