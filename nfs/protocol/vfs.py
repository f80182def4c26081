"""The `Vfs` protocol: what the NFSv3 server needs from a file system.

Modelled on the nfsserve crate's `vfs.rs` trait. The server works on ids
(`FileId`), never on paths; a file handle on the wire is a fixed prefix, the
`FileId` and an 8-byte *generation* the Vfs supplies (`Vfs.generation`), so a Vfs
decides when an old handle becomes stale (see `nfs.protocol.nfs3.handles.HandleCodec`).

Every method that can fail raises `NfsError(status)` with an RFC 1813 status;
the NFS procedure puts that status in its reply (with the wcc / post-op
attributes the RFC defines for it). Any other exception is a bug: the RPC
dispatcher logs it and answers SYSTEM_ERR.

Calls arrive concurrently from several threads; an implementation must be
thread-safe. Methods that act for a user take the `CallContext`, whose `cred`
carries the AUTH_SYS uid, gid and groups, so the Vfs can enforce permissions.

A Vfs may also have ``close()`` (or ``flush()``): `nfs.protocol.server.NfsServer` calls it
once at shutdown, after the last call has finished. A Vfs that stages writes may have
``write_verifier() -> bytes``: WRITE and COMMIT replies carry it instead of the service's
per-boot verifier, so the Vfs can change it when it loses staged data. A Vfs may answer
cheap calls on the transport's event loop (`NowaitVfs`: ``*_nowait`` methods that
return None unless the answer needs no waiting).

The wire types used here (`Fattr3`, `Sattr3`, `Nfsstat3`, `StableHow`) live in
`nfs.protocol.nfs3.types`, below this module; the NFS procedures (`nfs.protocol.nfs3.procedures`) sit above it.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Final, NewType, Protocol, runtime_checkable

from nfs.protocol.nfs3.types import Fattr3, FileSlice, Nfsstat3, Pieces, Sattr3, StableHow
from nfs.protocol.rpc import CallContext

__all__ = [
    "ACCESS3_DELETE",
    "ACCESS3_EXECUTE",
    "ACCESS3_EXTEND",
    "ACCESS3_LOOKUP",
    "ACCESS3_MODIFY",
    "ACCESS3_READ",
    "BOUNDED_PEER_PREFIX",
    "DirEntry",
    "DirPage",
    "EditBounds",
    "FileId",
    "FsStat",
    "MountAware",
    "NfsError",
    "NowaitVfs",
    "Vfs",
    "VfsCapabilities",
    "calling",
    "current_caller",
    "posix_access",
]

_CALLER: ContextVar[CallContext | None] = ContextVar("posixlake_nfs_caller", default=None)


def current_caller() -> CallContext | None:
    """Return the context of the NFS call this thread is serving (None outside a call).

    Vfs methods without a context argument (``getattr``, ``fsstat``) use it to answer per
    caller, e.g. a writer sees the size of its own staged content.
    """
    return _CALLER.get()


class _Calling:
    """The context manager of `calling` (a class: cheaper than a generator per call)."""

    __slots__ = ("_ctx", "_token")

    def __init__(self, ctx: CallContext) -> None:
        self._ctx = ctx
        self._token: Token[CallContext | None] | None = None

    def __enter__(self) -> None:
        self._token = _CALLER.set(self._ctx)

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _CALLER.reset(self._token)


def calling(ctx: CallContext) -> AbstractContextManager[None]:
    """Serve one call as ``ctx`` (see :func:`current_caller`); the NFS service wraps each call."""
    return _Calling(ctx)


FileId = NewType("FileId", int)
"""A file's number, unique within the Vfs (fattr3.fileid); a u64."""

# ACCESS3 bits (RFC 1813 §3.3.4)
ACCESS3_READ: Final = 0x0001
ACCESS3_LOOKUP: Final = 0x0002
ACCESS3_MODIFY: Final = 0x0004
ACCESS3_EXTEND: Final = 0x0008
ACCESS3_DELETE: Final = 0x0010
ACCESS3_EXECUTE: Final = 0x0020


class NfsError(Exception):
    """A failure with an NFSv3 status (RFC 1813 §2.6), e.g. ``NfsError(Nfsstat3.NFS3ERR_NOENT)``.

    Attributes:
        status: the `nfs.protocol.nfs3.Nfsstat3` the client receives.
    """

    def __init__(self, status: Nfsstat3, message: str = "") -> None:
        super().__init__(message or status.name)
        self.status = status


@dataclass(frozen=True)
class DirEntry:
    """One directory entry as `Vfs.readdir` returns it.

    Attributes:
        fileid: the entry's id (for "." the directory, for ".." its parent).
        name: the entry name.
        cookie: the position to resume after this entry; non-zero, and strictly
            increasing along a listing.
    """

    fileid: FileId
    name: str
    cookie: int


@dataclass(frozen=True)
class DirPage:
    """A page of `Vfs.readdir`.

    Attributes:
        entries: in cookie order.
        eof: True when no entry follows the last one.
        cookieverf: 8 bytes; a cookie is only valid with the cookieverf of the
            listing that produced it (RFC 1813 §3.3.16). Constant for a Vfs whose
            cookies survive changes to the directory.
    """

    entries: tuple[DirEntry, ...]
    eof: bool
    cookieverf: bytes = bytes(8)


@dataclass(frozen=True)
class FsStat:
    """File system usage for FSSTAT (RFC 1813 §3.3.18); sizes in bytes."""

    tbytes: int = 1 << 40
    fbytes: int = 1 << 39
    abytes: int = 1 << 39
    tfiles: int = 1 << 20
    ffiles: int = 1 << 19
    afiles: int = 1 << 19
    invarsec: int = 0


@dataclass(frozen=True)
class VfsCapabilities:
    """Static properties of a Vfs (FSINFO / PATHCONF, RFC 1813 §3.3.19-20).

    Attributes:
        read_only: every modifying procedure answers NFS3ERR_ROFS without
            calling the Vfs, and ACCESS never grants MODIFY, EXTEND or DELETE.
        max_file_size: FSINFO maxfilesize.
        name_max: the longest name in bytes; longer ones get NFS3ERR_NAMETOOLONG.
        time_delta_ns: the granularity of the times the Vfs stores.
        case_insensitive: PATHCONF case_insensitive.
    """

    read_only: bool = False
    max_file_size: int = (1 << 63) - 1
    name_max: int = 255
    time_delta_ns: int = 1
    case_insensitive: bool = False


BOUNDED_PEER_PREFIX: Final = "nfs4:"
"""A `CallContext.peer` that starts with this is a client that tells when its edits end
(NFSv4: OPEN ... CLOSE). A Vfs that stages writes applies such a caller's edit only at
`EditBounds.finish` (or drops it at `EditBounds.discard`), never on its own (an idle
period, a FILE_SYNC WRITE)."""


@runtime_checkable
class EditBounds(Protocol):
    """What a Vfs that stages writes offers a protocol that knows when an edit ends."""

    def finish(self, fid: FileId, ctx: CallContext) -> object:
        """Apply the caller's staged edit of ``fid`` now (NFSv4 CLOSE of the open that wrote).

        Raises:
            NfsError: the edit was refused (NFS3ERR_INVAL) or failed (NFS3ERR_IO).
        """
        ...

    def discard(self, fid: FileId, ctx: CallContext) -> bool:
        """Drop the caller's staged edit of ``fid`` unapplied, with its journal (the
        client's lease expired); whether there was one."""
        ...


@runtime_checkable
class MountAware(Protocol):
    """What a Vfs that keeps per-client state (keyed by `CallContext.peer`) hears of mounts."""

    def client_mounted(self, ctx: CallContext) -> None:
        """An NFSv3 NULL call on the connection ``ctx.connection``: a client mounting.

        libnfs tools (``nfs-cat``, ``nfs-cp``: one process, one connection each) and the
        Linux client at mount time ping with NULL first; the Linux client's reconnect
        (which keeps its source port, and its page cache) does not. libnfs binds a
        reserved port, which a later process can get again: state kept for that address
        from another connection then belongs to a process that is gone. Must not raise.
        """
        ...


class NowaitVfs(Protocol):
    """Optional methods of a Vfs that answer without waiting, for the transport's event loop.

    The server answers a lone call of a synchronous client (``nfs-cat``: NULL, MNT,
    FSINFO, GETATTR, LOOKUP, ACCESS, GETATTR, READ, one at a time) on its event loop
    when the Vfs can, which saves two thread switches per call. Each method either
    gives what its blocking counterpart would give now, with the same effects, or
    returns None with no effect (then the server runs the full call on a worker thread):
    it never waits for a lock held elsewhere and does no IO. A Vfs has any subset of
    them (``getattr(vfs, "getattr_nowait", None)``); failures are left to the full path.
    They are given the caller (``ctx``) and are not run under `calling`.
    """

    def generation_nowait(self, fid: FileId) -> bytes | None:
        """`Vfs.generation`, or None."""
        ...

    def getattr_nowait(self, fid: FileId, ctx: CallContext) -> Fattr3 | None:
        """`Vfs.getattr` for the caller ``ctx``, or None."""
        ...

    def lookup_nowait(self, dir_id: FileId, name: str, ctx: CallContext) -> FileId | None:
        """`Vfs.lookup` when ``name`` exists, or None."""
        ...

    def access_nowait(self, fid: FileId, mask: int, ctx: CallContext) -> int | None:
        """`Vfs.access`, or None."""
        ...

    def commit_nowait(self, fid: FileId, offset: int, count: int, ctx: CallContext) -> bool:
        """True if `Vfs.commit` would do nothing now (it is then not run); else False."""
        ...

    def client_mounted_nowait(self, ctx: CallContext) -> bool:
        """`MountAware.client_mounted` if that needs no waiting: True when done (then it
        is not run), False with no effect. A MountAware Vfs without it has its NULL
        calls run on a worker."""
        ...

    def read_nowait(
        self, fid: FileId, offset: int, count: int, ctx: CallContext
    ) -> tuple[bytes | memoryview | Pieces | FileSlice, bool, Fattr3] | None:
        """`Vfs.read` plus the attributes GETATTR gives now, or None; data that spans
        several buffers may come as `Pieces` (sent without joining them), data that is a
        range of a file as a `FileSlice` (sent from the file where the transport can)."""
        ...


@runtime_checkable
class Vfs(Protocol):
    """A file system served over NFSv3, addressed by `FileId`.

    Errors are `NfsError`; the statuses listed per method are the expected ones,
    and any RFC 1813 status may be used where it fits (NFS3ERR_IO for a backend
    failure, NFS3ERR_ACCES for a permission check, NFS3ERR_ROFS for a read-only
    user, NFS3ERR_STALE for an id that no longer exists).
    """

    def capabilities(self) -> VfsCapabilities:
        """Return the static properties. Cheap; called on many procedures."""
        ...

    def root_dir(self) -> FileId:
        """Return the id of the exported root directory. Cheap, never fails."""
        ...

    def generation(self, fid: FileId) -> bytes:
        """Return the 8-byte generation of `fid`, embedded in its file handle.

        Called on every handle the client sends: must be cheap (no IO). A handle
        whose generation differs from the current one gets NFS3ERR_STALE; to keep
        handles valid across server restarts, derive it from something stable
        (e.g. the table identity and version) instead of a per-boot value.

        Raises:
            NfsError: NFS3ERR_STALE if `fid` does not exist (any status raised
                here is answered as NFS3ERR_STALE).
        """
        ...

    def getattr(self, fid: FileId) -> Fattr3:
        """Return the attributes of `fid`. Must be cheap: it runs on almost every call.

        Raises:
            NfsError: NFS3ERR_STALE if `fid` does not exist.
        """
        ...

    def setattr(self, fid: FileId, attrs: Sattr3, ctx: CallContext) -> Fattr3:
        """Apply the fields of `attrs` that are set (mode, uid, gid, size, times).

        A size change truncates or zero-extends a regular file. SET_TO_SERVER_TIME
        uses the Vfs clock. Clears a pending exclusive-create verifier.

        Returns:
            The attributes after the change.

        Raises:
            NfsError: NFS3ERR_PERM (chown / chmod by a non-owner), NFS3ERR_ACCES,
                NFS3ERR_ISDIR (size on a directory), NFS3ERR_FBIG, NFS3ERR_STALE.
        """
        ...

    def lookup(self, dir_id: FileId, name: str, ctx: CallContext) -> FileId:
        """Return the id of `name` in directory `dir_id` ("." and ".." included).

        Raises:
            NfsError: NFS3ERR_NOENT, NFS3ERR_NOTDIR (dir_id is not a directory),
                NFS3ERR_ACCES (no search permission), NFS3ERR_STALE.
        """
        ...

    def access(self, fid: FileId, mask: int, ctx: CallContext) -> int:
        """Return the subset of ACCESS3_* bits in `mask` the caller is granted.

        `posix_access` computes it from mode bits. Must not fail for permission
        reasons: deny by clearing bits.

        Raises:
            NfsError: NFS3ERR_STALE.
        """
        ...

    def read(
        self, fid: FileId, offset: int, count: int, ctx: CallContext
    ) -> tuple[bytes | memoryview, bool]:
        """Read up to `count` bytes at `offset`.

        Cost: proportional to `count`. An immutable `bytes` (or a memoryview of
        one) may be returned without copying; the server sends it as is.

        Returns:
            (data, eof): eof is True when the data reaches the end of the file.
            Reading at or past the end returns (b"", True).

        Raises:
            NfsError: NFS3ERR_ISDIR, NFS3ERR_INVAL (not a regular file),
                NFS3ERR_ACCES, NFS3ERR_STALE.
        """
        ...

    def write(
        self, fid: FileId, offset: int, data: bytes, stable: StableHow, ctx: CallContext
    ) -> tuple[int, StableHow]:
        """Write `data` at `offset` (zero-filling any gap).

        `stable` is the client's request: UNSTABLE data may be held until
        `commit`; DATA_SYNC / FILE_SYNC data must be durable before returning.

        Returns:
            (count, committed): bytes written, and how durably (at least `stable`).

        Raises:
            NfsError: NFS3ERR_ISDIR, NFS3ERR_INVAL, NFS3ERR_FBIG, NFS3ERR_NOSPC,
                NFS3ERR_ACCES, NFS3ERR_STALE.
        """
        ...

    def commit(self, fid: FileId, offset: int, count: int, ctx: CallContext) -> None:
        """Make UNSTABLE writes in [offset, offset + count) durable (count 0: to EOF).

        Raises:
            NfsError: NFS3ERR_IO or NFS3ERR_INVAL if the staged data cannot be
                applied (the client then reports the error to the writer).
        """
        ...

    def create(
        self, dir_id: FileId, name: str, attrs: Sattr3, ctx: CallContext, *, guarded: bool
    ) -> FileId:
        """Create a regular file (CREATE UNCHECKED or GUARDED, RFC 1813 §3.3.8).

        The owner is the caller (unless `attrs` sets uid/gid and the caller may).
        If `name` exists: GUARDED fails with NFS3ERR_EXIST; UNCHECKED returns the
        existing regular file, applying only `attrs.size` (a truncation).

        Raises:
            NfsError: NFS3ERR_EXIST, NFS3ERR_NOTDIR, NFS3ERR_ACCES, NFS3ERR_ISDIR
                (UNCHECKED on an existing directory), NFS3ERR_STALE.
        """
        ...

    def create_exclusive(
        self, dir_id: FileId, name: str, verifier: bytes, ctx: CallContext
    ) -> FileId:
        """Create a regular file exclusively (CREATE EXCLUSIVE, RFC 1813 §3.3.8).

        The 8-byte `verifier` is stored with the new file until its next setattr.
        If `name` exists with the same verifier this is a retransmission: return
        it. The client follows up with SETATTR (mode, times).

        Raises:
            NfsError: NFS3ERR_EXIST (exists with another verifier), NFS3ERR_NOTDIR,
                NFS3ERR_ACCES, NFS3ERR_STALE.
        """
        ...

    def mkdir(self, dir_id: FileId, name: str, attrs: Sattr3, ctx: CallContext) -> FileId:
        """Create a directory.

        Raises:
            NfsError: NFS3ERR_EXIST, NFS3ERR_NOTDIR, NFS3ERR_ACCES, NFS3ERR_STALE.
        """
        ...

    def remove(self, dir_id: FileId, name: str, ctx: CallContext) -> None:
        """Remove a non-directory entry.

        Raises:
            NfsError: NFS3ERR_NOENT, NFS3ERR_ISDIR, NFS3ERR_ACCES, NFS3ERR_STALE.
        """
        ...

    def rmdir(self, dir_id: FileId, name: str, ctx: CallContext) -> None:
        """Remove an empty directory.

        Raises:
            NfsError: NFS3ERR_NOENT, NFS3ERR_NOTDIR, NFS3ERR_NOTEMPTY,
                NFS3ERR_INVAL ("." or ".."), NFS3ERR_ACCES, NFS3ERR_STALE.
        """
        ...

    def rename(
        self,
        from_dir: FileId,
        from_name: str,
        to_dir: FileId,
        to_name: str,
        ctx: CallContext,
    ) -> None:
        """Rename atomically, replacing an existing target (POSIX rename(2)).

        Raises:
            NfsError: NFS3ERR_NOENT (no source), NFS3ERR_ISDIR / NFS3ERR_NOTDIR
                (type mismatch with the target), NFS3ERR_NOTEMPTY (target is a
                non-empty directory), NFS3ERR_INVAL (a directory into itself),
                NFS3ERR_XDEV, NFS3ERR_ACCES, NFS3ERR_STALE.
        """
        ...

    def readdir(self, dir_id: FileId, *, after: int, max_entries: int, ctx: CallContext) -> DirPage:
        """List up to `max_entries` entries whose cookie is greater than `after`.

        Deterministic: the same directory state and arguments give the same page.
        `after` = 0 starts the listing; otherwise it is a cookie returned earlier.
        The listing includes "." and "..". The server trims the page to the
        client's byte limits and resumes from the last cookie it sent.

        Cost: O(entries in the directory) at most.

        Raises:
            NfsError: NFS3ERR_NOTDIR, NFS3ERR_BAD_COOKIE (unknown cookie),
                NFS3ERR_ACCES, NFS3ERR_STALE.
        """
        ...

    def fsstat(self, fid: FileId) -> FsStat:
        """Return usage figures for the file system holding `fid`. Cheap."""
        ...


def posix_access(
    mask: int, *, mode: int, uid: int, gid: int, is_dir: bool, ctx: CallContext
) -> int:
    """Grant ACCESS3 bits from POSIX mode bits (owner, group, other; root gets all but exec).

    Args:
        mask: the ACCESS3_* bits asked for.
        mode: the file's mode (permission bits are used).
        uid: the file's owner.
        gid: the file's group.
        is_dir: directories map LOOKUP/DELETE to x/w; files map EXECUTE to x.
        ctx: the caller.

    Returns:
        The granted subset of `mask`.
    """
    cred = ctx.cred
    if cred.uid == 0:
        # root may do anything, but execute a file only if some x bit is set
        if not is_dir and not mode & 0o111:
            return mask & ~ACCESS3_EXECUTE
        return mask
    if cred.uid == uid:
        bits = (mode >> 6) & 7
    elif cred.in_group(gid):
        bits = (mode >> 3) & 7
    else:
        bits = mode & 7
    granted = 0
    if bits & 4:
        granted |= ACCESS3_READ
    if bits & 2:
        granted |= ACCESS3_MODIFY | ACCESS3_EXTEND
        if is_dir:
            granted |= ACCESS3_DELETE
    if bits & 1:
        granted |= ACCESS3_LOOKUP if is_dir else ACCESS3_EXECUTE
    return mask & granted
