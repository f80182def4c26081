"""The NFSv3 service state and the helpers every procedure shares (RFC 1813 §3.3).

`Nfs3Service` binds one `Vfs` to its handle codec, the per-boot write verifier and the
FSINFO limits; the procedures (`nfs.protocol.nfs3.procedures`) take it as their first argument,
and `nfs.protocol.nfs3.program.nfs3_program` serves them as RPC program 100003 v3.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from nfs.protocol.nfs3.handles import HandleCodec
from nfs.protocol.nfs3.types import (
    NFS3_WRITEVERFSIZE,
    Fattr3,
    NfsFh3,
    Nfsstat3,
    PostOpAttr,
    PreOpAttr,
    WccData,
)
from nfs.protocol.rpc import CallContext
from nfs.protocol.vfs import FileId, MountAware, NfsError, Vfs

__all__ = ["DEFAULT_LIMITS", "OK", "Nfs3Limits", "Nfs3Service", "nfs3_status"]


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
        self.mount_aware: MountAware | None = vfs if isinstance(vfs, MountAware) else None
        """The Vfs if it hears of mounts (an NFSv3 NULL); checked once here, since a
        runtime protocol check costs more than the rest of a NULL call."""
        self.mount_aware_nowait: Callable[[CallContext], bool] | None = (
            getattr(vfs, "client_mounted_nowait", None) if self.mount_aware else None
        )
        """Its ``client_mounted_nowait`` (`nfs.protocol.vfs.NowaitVfs`), if it has one."""

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


def nfs3_status(err: NfsError) -> Nfsstat3:
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
