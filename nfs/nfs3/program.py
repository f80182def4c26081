"""The NFSv3 dispatch table (RFC 1813 §3): procedure number -> decoder and implementation.

`NFS3_PROCEDURES` is the explicit table; `nfs3_program(service)` binds it to one
`Nfs3Service` as the RPC program 100003 v3 for `nfs.rpc.Dispatcher`, each call served
under `nfs.vfs.calling` (so the Vfs knows the caller).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from nfs.nfs3.args import (
    Access3Args,
    Commit3Args,
    Create3Args,
    Fsinfo3Args,
    Fsstat3Args,
    Getattr3Args,
    Link3Args,
    Lookup3Args,
    Mkdir3Args,
    Mknod3Args,
    Pathconf3Args,
    Read3Args,
    Readdir3Args,
    Readdirplus3Args,
    Readlink3Args,
    Remove3Args,
    Rename3Args,
    Rmdir3Args,
    Setattr3Args,
    Symlink3Args,
    Write3Args,
)
from nfs.nfs3.procedures import (
    nfsproc3_access,
    nfsproc3_commit,
    nfsproc3_create,
    nfsproc3_fsinfo,
    nfsproc3_fsstat,
    nfsproc3_getattr,
    nfsproc3_link,
    nfsproc3_lookup,
    nfsproc3_mkdir,
    nfsproc3_mknod,
    nfsproc3_null,
    nfsproc3_pathconf,
    nfsproc3_read,
    nfsproc3_readdir,
    nfsproc3_readdirplus,
    nfsproc3_readlink,
    nfsproc3_remove,
    nfsproc3_rename,
    nfsproc3_rmdir,
    nfsproc3_setattr,
    nfsproc3_symlink,
    nfsproc3_write,
)
from nfs.nfs3.service import Nfs3Service
from nfs.nfs3.types import NFS_PROGRAM, NFS_V3, NfsProc3
from nfs.rpc import CallContext, Packable, RpcProcedure, RpcProgram, Void
from nfs.vfs import calling
from nfs.xdr import Unpacker

__all__ = ["NFS3_PROCEDURES", "Procedure", "nfs3_program"]

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


def nfs3_program(service: Nfs3Service) -> RpcProgram:
    """Return the NFS program (100003 v3) serving every procedure of `NFS3_PROCEDURES`."""
    return RpcProgram(
        NFS_PROGRAM,
        NFS_V3,
        {int(num): _bind(service, proc) for num, proc in NFS3_PROCEDURES.items()},
    )


def _bind(service: Nfs3Service, proc: Procedure[Any, Any]) -> RpcProcedure[Any]:
    run = proc.run

    def bound(args: Any, ctx: CallContext) -> Packable:
        with calling(ctx):
            result: Packable = run(service, args, ctx)
        return result

    return RpcProcedure(proc.name, proc.decode, bound)
