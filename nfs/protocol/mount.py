"""MOUNT version 3 (RFC 1813 Appendix I): hand out the root file handle.

The export is ``/``; ``/share`` (the original project's export path) is an alias
of it. MNT also accepts any directory below the export (``/data``,
``/share/data``), because libnfs clients mount the parent directory of the file
they open; the reply is that directory's NFSv3 handle. A missing path gets
MNT3ERR_NOENT, a path through or to a non-directory MNT3ERR_NOTDIR.

Sans-IO: the mount list kept for DUMP is in memory, per service instance.
"""

from __future__ import annotations

import enum
import threading
from dataclasses import dataclass
from typing import Final

from nfs.protocol.nfs3 import Fattr3, Ftype3, NfsFh3, Nfsstat3
from nfs.protocol.nfs3.handles import HandleCodec
from nfs.protocol.rpc import VOID, AuthFlavor, CallContext, RpcProcedure, RpcProgram, Void
from nfs.protocol.vfs import FileId, NfsError, Vfs
from nfs.protocol.xdr import Packer, Unpacker

__all__ = [
    "EXPORT_ALIASES",
    "MNTPATHLEN",
    "MOUNT_PROGRAM",
    "MOUNT_V3",
    "DirPath",
    "ExportNode",
    "Exports",
    "MountBody",
    "MountList",
    "MountProc3",
    "MountRes3",
    "MountRes3Ok",
    "MountService",
    "Mountstat3",
]

MOUNT_PROGRAM: Final = 100005
MOUNT_V3: Final = 3
MNTPATHLEN: Final = 1024
MNTNAMLEN: Final = 255
FHSIZE3: Final = 64

EXPORT_ALIASES: Final = ("/share",)
"""Paths that name the export root, besides "/"."""


class Mountstat3(enum.IntEnum):
    """mountstat3 (RFC 1813 §I.5.4)."""

    MNT3_OK = 0
    MNT3ERR_PERM = 1
    MNT3ERR_NOENT = 2
    MNT3ERR_IO = 5
    MNT3ERR_ACCES = 13
    MNT3ERR_NOTDIR = 20
    MNT3ERR_INVAL = 22
    MNT3ERR_NAMETOOLONG = 63
    MNT3ERR_NOTSUPP = 10004
    MNT3ERR_SERVERFAULT = 10006


class MountProc3(enum.IntEnum):
    """MOUNT v3 procedure numbers (RFC 1813 §I.5)."""

    MOUNTPROC3_NULL = 0
    MOUNTPROC3_MNT = 1
    MOUNTPROC3_DUMP = 2
    MOUNTPROC3_UMNT = 3
    MOUNTPROC3_UMNTALL = 4
    MOUNTPROC3_EXPORT = 5


@dataclass(frozen=True)
class DirPath:
    """dirpath (RFC 1813 §I.5.2): the argument of MNT and UMNT."""

    path: str

    def pack(self, p: Packer) -> None:
        """Append the path (at most 1024 bytes)."""
        p.pack_string(self.path, MNTPATHLEN)

    @classmethod
    def unpack(cls, u: Unpacker) -> DirPath:
        """Read the path; a longer one raises `XdrError` (GARBAGE_ARGS)."""
        return cls(u.unpack_string(MNTPATHLEN))


@dataclass(frozen=True)
class MountRes3Ok:
    """mountres3_ok (RFC 1813 §I.5.4): the handle and the accepted auth flavors."""

    fhandle: bytes
    auth_flavors: tuple[int, ...]

    def pack(self, p: Packer) -> None:
        """Append the handle and the flavor list."""
        p.pack_opaque(self.fhandle, FHSIZE3)
        p.pack_array(self.auth_flavors, p.pack_int)

    @classmethod
    def unpack(cls, u: Unpacker) -> MountRes3Ok:
        """Read the handle and the flavor list."""
        return cls(u.unpack_opaque(FHSIZE3), tuple(u.unpack_array(u.unpack_int, 64)))


@dataclass(frozen=True)
class MountRes3:
    """mountres3 (RFC 1813 §I.5.4)."""

    fhs_status: Mountstat3
    mountinfo: MountRes3Ok | None = None

    def pack(self, p: Packer) -> None:
        """Append the status and, for MNT3_OK, the result."""
        p.pack_enum(self.fhs_status)
        if self.fhs_status == Mountstat3.MNT3_OK:
            (self.mountinfo or MountRes3Ok(b"", ())).pack(p)

    @classmethod
    def unpack(cls, u: Unpacker) -> MountRes3:
        """Read the status and, for MNT3_OK, the result."""
        status = u.unpack_enum(Mountstat3)
        if status == Mountstat3.MNT3_OK:
            return cls(status, MountRes3Ok.unpack(u))
        return cls(status)


@dataclass(frozen=True)
class MountBody:
    """mountbody (RFC 1813 §I.5.5): one entry of the mount list."""

    hostname: str
    directory: str

    def pack(self, p: Packer) -> None:
        """Append host and directory."""
        p.pack_string(self.hostname, MNTNAMLEN)
        p.pack_string(self.directory, MNTPATHLEN)

    @classmethod
    def unpack(cls, u: Unpacker) -> MountBody:
        """Read host and directory."""
        return cls(u.unpack_string(MNTNAMLEN), u.unpack_string(MNTPATHLEN))


@dataclass(frozen=True)
class MountList:
    """mountlist (RFC 1813 §I.5.5): the DUMP result, a linked list of `MountBody`."""

    entries: tuple[MountBody, ...] = ()

    def pack(self, p: Packer) -> None:
        """Append the list."""
        p.pack_list(self.entries, lambda e: e.pack(p))

    @classmethod
    def unpack(cls, u: Unpacker) -> MountList:
        """Read the list."""
        return cls(tuple(u.unpack_list(lambda: MountBody.unpack(u))))


@dataclass(frozen=True)
class ExportNode:
    """exportnode (RFC 1813 §I.5.6): an exported directory and the groups allowed."""

    dir: str
    groups: tuple[str, ...] = ()

    def pack(self, p: Packer) -> None:
        """Append the directory and its group list."""
        p.pack_string(self.dir, MNTPATHLEN)
        p.pack_list(self.groups, lambda g: p.pack_string(g, MNTNAMLEN))

    @classmethod
    def unpack(cls, u: Unpacker) -> ExportNode:
        """Read the directory and its group list."""
        return cls(
            u.unpack_string(MNTPATHLEN),
            tuple(u.unpack_list(lambda: u.unpack_string(MNTNAMLEN))),
        )


@dataclass(frozen=True)
class Exports:
    """exports (RFC 1813 §I.5.6): the EXPORT result."""

    entries: tuple[ExportNode, ...] = ()

    def pack(self, p: Packer) -> None:
        """Append the list."""
        p.pack_list(self.entries, lambda e: e.pack(p))

    @classmethod
    def unpack(cls, u: Unpacker) -> Exports:
        """Read the list."""
        return cls(tuple(u.unpack_list(lambda: ExportNode.unpack(u))))


_NFS_TO_MOUNT: Final = {
    Nfsstat3.NFS3ERR_PERM: Mountstat3.MNT3ERR_PERM,
    Nfsstat3.NFS3ERR_NOENT: Mountstat3.MNT3ERR_NOENT,
    Nfsstat3.NFS3ERR_STALE: Mountstat3.MNT3ERR_NOENT,
    Nfsstat3.NFS3ERR_IO: Mountstat3.MNT3ERR_IO,
    Nfsstat3.NFS3ERR_ACCES: Mountstat3.MNT3ERR_ACCES,
    Nfsstat3.NFS3ERR_NOTDIR: Mountstat3.MNT3ERR_NOTDIR,
    Nfsstat3.NFS3ERR_INVAL: Mountstat3.MNT3ERR_INVAL,
    Nfsstat3.NFS3ERR_NAMETOOLONG: Mountstat3.MNT3ERR_NAMETOOLONG,
    Nfsstat3.NFS3ERR_NOTSUPP: Mountstat3.MNT3ERR_NOTSUPP,
}

AUTH_FLAVORS: Final = (int(AuthFlavor.AUTH_SYS), int(AuthFlavor.AUTH_NONE))


class MountService:
    """MOUNT v3 over a `Vfs` (RFC 1813 Appendix I).

    Args:
        vfs: the exported file system; its root is the export.
        handles: the handle codec shared with `nfs.protocol.nfs3.service.Nfs3Service`.
        aliases: more names of the export root (``/share`` by default).
    """

    def __init__(
        self,
        vfs: Vfs,
        handles: HandleCodec | None = None,
        *,
        aliases: tuple[str, ...] = EXPORT_ALIASES,
    ) -> None:
        self.vfs = vfs
        self.handles = handles if handles is not None else HandleCodec(vfs)
        self.aliases = tuple(a.rstrip("/") for a in aliases)
        self._lock = threading.Lock()
        self._mounts: list[MountBody] = []

    def rpc_program(self) -> RpcProgram:
        """Return the MOUNT program (100005 v3)."""
        return RpcProgram(
            MOUNT_PROGRAM,
            MOUNT_V3,
            {
                MountProc3.MOUNTPROC3_NULL: RpcProcedure(
                    "MOUNTPROC3_NULL", Void.unpack, self.null, self.null
                ),
                MountProc3.MOUNTPROC3_MNT: RpcProcedure(
                    "MOUNTPROC3_MNT", DirPath.unpack, self.mnt, self.mnt_nowait
                ),
                MountProc3.MOUNTPROC3_DUMP: RpcProcedure("MOUNTPROC3_DUMP", Void.unpack, self.dump),
                MountProc3.MOUNTPROC3_UMNT: RpcProcedure(
                    "MOUNTPROC3_UMNT", DirPath.unpack, self.umnt
                ),
                MountProc3.MOUNTPROC3_UMNTALL: RpcProcedure(
                    "MOUNTPROC3_UMNTALL", Void.unpack, self.umntall
                ),
                MountProc3.MOUNTPROC3_EXPORT: RpcProcedure(
                    "MOUNTPROC3_EXPORT", Void.unpack, self.export
                ),
            },
        )

    # -- path resolution

    def _components(self, path: str) -> list[str]:
        parts = [p for p in path.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise NfsError(Nfsstat3.NFS3ERR_ACCES, "'..' in a mount path")
        return parts

    def _walk(self, parts: list[str], ctx: CallContext) -> FileId:
        fid = self.vfs.root_dir()
        for part in parts:
            fid = self.vfs.lookup(fid, part, ctx)
        if self.vfs.getattr(fid).type != Ftype3.NF3DIR:
            raise NfsError(Nfsstat3.NFS3ERR_NOTDIR)
        return fid

    def resolve(self, path: str, ctx: CallContext) -> FileId:
        """Return the directory a mount path names.

        An alias prefix (``/share``) is tried first, then the path as it is.

        Raises:
            NfsError: NFS3ERR_NOENT, NFS3ERR_NOTDIR, NFS3ERR_ACCES.
        """
        parts = self._components(path)
        for alias in self.aliases:
            alias_parts = self._components(alias)
            if alias_parts and parts[: len(alias_parts)] == alias_parts:
                try:
                    return self._walk(parts[len(alias_parts) :], ctx)
                except NfsError as err:
                    if err.status != Nfsstat3.NFS3ERR_NOENT:
                        raise
        return self._walk(parts, ctx)

    def _walk_nowait(self, parts: list[str], ctx: CallContext) -> tuple[FileId, bytes] | None:
        """`_walk` and the handle generation of the directory, if the Vfs answers them
        without waiting (`nfs.protocol.vfs.NowaitVfs`); None otherwise."""
        lookup = getattr(self.vfs, "lookup_nowait", None)
        attrs = getattr(self.vfs, "getattr_nowait", None)
        generation = getattr(self.vfs, "generation_nowait", None)
        if lookup is None or attrs is None or generation is None:
            return None
        fid: FileId | None = self.vfs.root_dir()
        for part in parts:
            if fid is None:
                return None
            fid = lookup(fid, part, ctx)
        if fid is None:
            return None
        got: Fattr3 | None = attrs(fid, ctx)
        gen: bytes | None = generation(fid)
        if got is None or got.type != Ftype3.NF3DIR or gen is None:
            return None
        return fid, gen

    def _resolve_nowait(self, path: str, ctx: CallContext) -> tuple[FileId, bytes] | None:
        """`resolve` when the Vfs answers without waiting and the path exists; else None."""
        parts = [p for p in path.split("/") if p not in ("", ".")]
        if ".." in parts:
            return None
        for alias in self.aliases:
            alias_parts = self._components(alias)
            if alias_parts and parts[: len(alias_parts)] == alias_parts:
                return None  # the full path tries the alias first, then the path as it is
        return self._walk_nowait(parts, ctx)

    # -- procedures

    def null(self, args: Void, ctx: CallContext) -> Void:
        """MOUNTPROC3_NULL (§I.5.1): do nothing."""
        return VOID

    def mnt(self, args: DirPath, ctx: CallContext) -> MountRes3:
        """MOUNTPROC3_MNT (§I.5.2): return the handle of the export or a directory in it."""
        try:
            fid = self.resolve(args.path, ctx)
            fh: NfsFh3 = self.handles.encode(fid)
        except NfsError as err:
            return MountRes3(_NFS_TO_MOUNT.get(err.status, Mountstat3.MNT3ERR_SERVERFAULT))
        self._record(args.path, ctx)
        return MountRes3(Mountstat3.MNT3_OK, MountRes3Ok(fh.data, AUTH_FLAVORS))

    def mnt_nowait(self, args: DirPath, ctx: CallContext) -> MountRes3 | None:
        """MNT without waiting, if the Vfs can (`nfs.protocol.vfs.NowaitVfs`) and the path
        exists; None otherwise (then `mnt` runs). The same reply and mount record."""
        got = self._resolve_nowait(args.path, ctx)
        if got is None:
            return None
        fh = self.handles.encode_with(*got)
        self._record(args.path, ctx)
        return MountRes3(Mountstat3.MNT3_OK, MountRes3Ok(fh.data, AUTH_FLAVORS))

    def _record(self, path: str, ctx: CallContext) -> None:
        host = ctx.cred.machinename or (ctx.peer or "").rsplit(":", 1)[0]
        with self._lock:
            entry = MountBody(host[:MNTNAMLEN], path)
            if entry not in self._mounts:
                self._mounts.append(entry)

    def dump(self, args: Void, ctx: CallContext) -> MountList:
        """MOUNTPROC3_DUMP (§I.5.3): the mounts recorded by MNT (and not UMNT'ed)."""
        with self._lock:
            return MountList(tuple(self._mounts))

    def umnt(self, args: DirPath, ctx: CallContext) -> Void:
        """MOUNTPROC3_UMNT (§I.5.4): forget this host's mount of that path."""
        host = ctx.cred.machinename or (ctx.peer or "").rsplit(":", 1)[0]
        with self._lock:
            self._mounts = [
                m for m in self._mounts if not (m.hostname == host and m.directory == args.path)
            ]
        return VOID

    def umntall(self, args: Void, ctx: CallContext) -> Void:
        """MOUNTPROC3_UMNTALL (§I.5.5): forget all of this host's mounts."""
        host = ctx.cred.machinename or (ctx.peer or "").rsplit(":", 1)[0]
        with self._lock:
            self._mounts = [m for m in self._mounts if m.hostname != host]
        return VOID

    def export(self, args: Void, ctx: CallContext) -> Exports:
        """MOUNTPROC3_EXPORT (§I.5.6): "/" and its aliases, open to everyone."""
        return Exports(tuple(ExportNode(d) for d in ("/", *self.aliases)))
