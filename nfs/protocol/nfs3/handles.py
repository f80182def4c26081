"""NFSv3 file handles (RFC 1813 §2.5 nfs_fh3): `FileId` <-> handle, per `Vfs`.

A handle is ``b"PXL1"`` + FileId (u64) + the Vfs's 8-byte generation, 20 bytes.
Another length or prefix is NFS3ERR_BADHANDLE; a generation that no longer matches
(or an id the Vfs does not know) is NFS3ERR_STALE. MOUNT and NFS share one codec.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Final

from nfs.protocol.nfs3.types import NfsFh3, Nfsstat3
from nfs.protocol.vfs import FileId, NfsError, Vfs

__all__ = ["FH_MAGIC", "FH_SIZE", "HandleCodec"]

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
        self._generation_nowait: Callable[[FileId], bytes | None] | None = getattr(
            vfs, "generation_nowait", None
        )

    def encode(self, fid: FileId) -> NfsFh3:
        """Return the handle of `fid`.

        Raises:
            NfsError: NFS3ERR_STALE if the Vfs does not know `fid`;
                NFS3ERR_SERVERFAULT if its generation is not 8 bytes.
        """
        return self.encode_with(fid, self._vfs.generation(fid))

    def encode_with(self, fid: FileId, gen: bytes) -> NfsFh3:
        """Return the handle of `fid` whose generation is `gen` (the Vfs's, just asked).

        Raises:
            NfsError: NFS3ERR_SERVERFAULT if `gen` is not 8 bytes.
        """
        if len(gen) != 8:
            raise NfsError(Nfsstat3.NFS3ERR_SERVERFAULT, "Vfs generation must be 8 bytes")
        return NfsFh3(_FH.pack(FH_MAGIC, fid, gen))

    def decode_nowait(self, fh: NfsFh3) -> FileId | None:
        """`decode` if the Vfs gives the generation without waiting
        (``generation_nowait``: `nfs.protocol.vfs.NowaitVfs`); None otherwise, and for
        a handle `decode` would refuse."""
        generation_nowait = self._generation_nowait
        data = fh.data
        if generation_nowait is None or len(data) != FH_SIZE or data[:4] != FH_MAGIC:
            return None
        _, raw_id, gen = _FH.unpack(data)
        fid = FileId(raw_id)
        current = generation_nowait(fid)
        return fid if current is not None and current == gen else None

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
