"""fattr3 -> fattr4 and fattr4 -> sattr3: NFSv4 attributes over a `Vfs` that speaks v3.

The Vfs gives `Fattr3`; `attr_values` builds the requested NFSv4 attributes from it (RFC
7530 §5), `sattr_of` turns the settable ones of a SETATTR / OPEN / CREATE into `Sattr3`.
Owners are numeric strings (``"1000"``), as the Linux client sends and accepts them
under AUTH_SYS (``nfs4_disable_idmapping``).

The ``change`` attribute (§5.8.1.4) is the ctime in nanoseconds mixed with the size: the
Vfs gives every version of ``data.csv`` the commit time as its ctime, and two versions
committed within the same nanosecond with the same size would share it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final

from nfs.protocol.nfs3.types import Fattr3, Nfstime3, Sattr3, SetTime, TimeHow
from nfs.protocol.nfs4.types import (
    ATTR_CODECS,
    Fattr4Id,
    Fsid4,
    NfsFtype4,
    Nfsstat4,
    Nfstime4,
    SetTime4,
    Specdata4,
    bitmap_of,
)
from nfs.protocol.vfs import FsStat, VfsCapabilities

__all__ = [
    "SETTABLE",
    "SUPPORTED",
    "AttrError",
    "attr_values",
    "change_of",
    "sattr_of",
]

A = Fattr4Id
WRITE_ONLY: Final = frozenset({A.TIME_ACCESS_SET, A.TIME_MODIFY_SET})
SETTABLE: Final = frozenset(
    {A.SIZE, A.MODE, A.OWNER, A.OWNER_GROUP, A.TIME_ACCESS_SET, A.TIME_MODIFY_SET}
)
SUPPORTED: Final = frozenset(int(a) for a in ATTR_CODECS)
SUPPORTED_BITMAP: Final = bitmap_of(SUPPORTED)
_FS_ATTRS: Final = frozenset(
    {
        A.FILES_AVAIL,
        A.FILES_FREE,
        A.FILES_TOTAL,
        A.SPACE_AVAIL,
        A.SPACE_FREE,
        A.SPACE_TOTAL,
    }
)


class AttrError(Exception):
    """An attribute cannot be set (INVAL, ATTRNOTSUPP, BADOWNER)."""

    def __init__(self, status: Nfsstat4, message: str = "") -> None:
        super().__init__(message or status.name)
        self.status = status


def change_of(attrs: Fattr3) -> int:
    """The change attribute of a file with these attributes (see the module docstring)."""
    ns = attrs.ctime.seconds * 1_000_000_000 + attrs.ctime.nseconds
    return (ns ^ (attrs.size << 1)) & 0xFFFFFFFFFFFFFFFF


def _time(t: Nfstime3) -> Nfstime4:
    return Nfstime4(t.seconds, t.nseconds)


def attr_values(
    want: Iterable[int],
    attrs: Fattr3,
    *,
    handle: bytes,
    caps: VfsCapabilities,
    fsstat: Callable[[], FsStat],
    lease_seconds: int,
    maxread: int,
    maxwrite: int,
) -> dict[int, Any]:
    """Return the attributes of ``want`` this server supports, from the v3 attributes.

    Unsupported and write-only attributes are left out (the reply's mask says which
    were sent, RFC 7530 §15.1.4 GETATTR). ``fsstat`` is called only if a space or
    file-count attribute is asked for.
    """
    out: dict[int, Any] = {}
    stat: FsStat | None = None
    for bit in want:
        if bit not in SUPPORTED or bit in WRITE_ONLY:
            continue
        if bit in _FS_ATTRS and stat is None:
            stat = fsstat()
        out[bit] = _value(bit, attrs, handle, caps, stat, lease_seconds, maxread, maxwrite)
    return out


def _value(
    bit: int,
    a: Fattr3,
    handle: bytes,
    caps: VfsCapabilities,
    stat: FsStat | None,
    lease: int,
    maxread: int,
    maxwrite: int,
) -> Any:
    if bit == A.SUPPORTED_ATTRS:
        return SUPPORTED_BITMAP
    if bit == A.TYPE:
        return NfsFtype4(int(a.type))
    if bit == A.FH_EXPIRE_TYPE:
        return 0  # FH4_PERSISTENT
    if bit == A.CHANGE:
        return change_of(a)
    if bit == A.SIZE:
        return a.size
    if bit in (A.LINK_SUPPORT, A.SYMLINK_SUPPORT, A.NAMED_ATTR, A.CASE_INSENSITIVE):
        return bit == A.CASE_INSENSITIVE and caps.case_insensitive
    if bit == A.FSID:
        return Fsid4(a.fsid, 0)
    if bit in (A.UNIQUE_HANDLES, A.CANSETTIME, A.CASE_PRESERVING, A.CHOWN_RESTRICTED):
        return True
    if bit in (A.HOMOGENEOUS, A.NO_TRUNC):
        return True
    if bit == A.LEASE_TIME:
        return lease
    if bit == A.RDATTR_ERROR:
        return 0
    if bit == A.ACLSUPPORT:
        return 0
    if bit == A.FILEHANDLE:
        return handle
    if bit in (A.FILEID, A.MOUNTED_ON_FILEID):
        return a.fileid
    if bit in _FS_ATTRS:
        assert stat is not None
        fs: dict[int, int] = {
            A.FILES_AVAIL: stat.afiles,
            A.FILES_FREE: stat.ffiles,
            A.FILES_TOTAL: stat.tfiles,
            A.SPACE_AVAIL: stat.abytes,
            A.SPACE_FREE: stat.fbytes,
            A.SPACE_TOTAL: stat.tbytes,
        }
        return fs[bit]
    if bit == A.MAXFILESIZE:
        return caps.max_file_size
    if bit == A.MAXLINK:
        return 1
    if bit == A.MAXNAME:
        return caps.name_max
    if bit == A.MAXREAD:
        return maxread
    if bit == A.MAXWRITE:
        return maxwrite
    if bit == A.MODE:
        return a.mode & 0o7777
    if bit == A.NUMLINKS:
        return a.nlink
    if bit == A.OWNER:
        return str(a.uid)
    if bit == A.OWNER_GROUP:
        return str(a.gid)
    if bit == A.RAWDEV:
        return Specdata4(a.rdev.specdata1, a.rdev.specdata2)
    if bit == A.SPACE_USED:
        return a.used
    if bit == A.TIME_ACCESS:
        return _time(a.atime)
    if bit == A.TIME_DELTA:
        return Nfstime4(0, caps.time_delta_ns)
    if bit == A.TIME_METADATA:
        return _time(a.ctime)
    if bit == A.TIME_MODIFY:
        return _time(a.mtime)
    raise AssertionError(f"attribute {bit} has no value")  # pragma: no cover


def _id_of(owner: str) -> int:
    """A numeric owner string (RFC 7530 §5.9 allows them under AUTH_SYS)."""
    if not owner.isdigit() or len(owner) > 10 or int(owner) > 0xFFFFFFFF:
        raise AttrError(Nfsstat4.NFS4ERR_BADOWNER, f"owner {owner!r} is not a numeric id")
    return int(owner)


def _set_time(t: SetTime4) -> SetTime:
    if t.time is None:
        return SetTime(TimeHow.SET_TO_SERVER_TIME)
    if t.time.seconds < 0 or t.time.seconds > 0xFFFFFFFF:
        raise AttrError(Nfsstat4.NFS4ERR_INVAL, "time out of the range the server stores")
    return SetTime(TimeHow.SET_TO_CLIENT_TIME, Nfstime3(t.time.seconds, t.time.nseconds))


def sattr_of(values: dict[int, Any]) -> Sattr3:
    """Return the `Sattr3` of settable NFSv4 attributes.

    Raises:
        AttrError: INVAL for a read-only attribute, BADOWNER for a non-numeric owner.
    """
    for bit in values:
        if bit not in SETTABLE:
            raise AttrError(Nfsstat4.NFS4ERR_INVAL, f"attribute {bit} is read-only")
    kw: dict[str, Any] = {}
    if A.MODE in values:
        kw["mode"] = values[A.MODE] & 0o7777
    if A.OWNER in values:
        kw["uid"] = _id_of(values[A.OWNER])
    if A.OWNER_GROUP in values:
        kw["gid"] = _id_of(values[A.OWNER_GROUP])
    if A.SIZE in values:
        kw["size"] = values[A.SIZE]
    if A.TIME_ACCESS_SET in values:
        kw["atime"] = _set_time(values[A.TIME_ACCESS_SET])
    if A.TIME_MODIFY_SET in values:
        kw["mtime"] = _set_time(values[A.TIME_MODIFY_SET])
    return Sattr3(**kw)
