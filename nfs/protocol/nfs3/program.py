"""The NFSv3 dispatch table (RFC 1813 §3): procedure number -> decoder and implementation.

`NFS3_PROCEDURES` is the explicit table; `nfs3_program(service)` binds it to one
`Nfs3Service` as the RPC program 100003 v3 for `nfs.protocol.rpc.Dispatcher`, each call served
under `nfs.protocol.vfs.calling` (so the Vfs knows the caller); the nowait implementations
pass the caller to the Vfs themselves.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar

from nfs.protocol.nfs3 import args as a
from nfs.protocol.nfs3 import procedures as p
from nfs.protocol.nfs3.codec import direct_unpacker
from nfs.protocol.nfs3.service import Nfs3Service
from nfs.protocol.nfs3.types import NFS_PROGRAM, NFS_V3, NfsProc3
from nfs.protocol.rpc import CallContext, Packable, RpcProcedure, RpcProgram, Void
from nfs.protocol.vfs import calling
from nfs.protocol.xdr import Unpacker

__all__ = ["NFS3_PROCEDURES", "Procedure", "nfs3_program"]

A = TypeVar("A")
R = TypeVar("R", bound=Packable)


@dataclass(frozen=True)
class Procedure(Generic[A, R]):
    """An NFSv3 procedure: its RFC name, argument decoder and implementation, and
    optionally an implementation that answers only when it need not wait (None: not
    now), which the transport may run on its event loop."""

    name: str
    decode: Callable[[Unpacker], A]
    run: Callable[[Nfs3Service, A, CallContext], R]
    run_nowait: Callable[[Nfs3Service, A, CallContext], R | None] | None = None


NFS3_PROCEDURES: Final[dict[NfsProc3, Procedure[Any, Any]]] = {
    NfsProc3.NFSPROC3_NULL: Procedure(
        "NFSPROC3_NULL", Void.unpack, p.nfsproc3_null, p.nfsproc3_null_nowait
    ),
    NfsProc3.NFSPROC3_GETATTR: Procedure(
        "NFSPROC3_GETATTR", a.Getattr3Args.unpack, p.nfsproc3_getattr, p.nfsproc3_getattr_nowait
    ),
    NfsProc3.NFSPROC3_SETATTR: Procedure(
        "NFSPROC3_SETATTR", a.Setattr3Args.unpack, p.nfsproc3_setattr
    ),
    NfsProc3.NFSPROC3_LOOKUP: Procedure(
        "NFSPROC3_LOOKUP", a.Lookup3Args.unpack, p.nfsproc3_lookup, p.nfsproc3_lookup_nowait
    ),
    NfsProc3.NFSPROC3_ACCESS: Procedure(
        "NFSPROC3_ACCESS", a.Access3Args.unpack, p.nfsproc3_access, p.nfsproc3_access_nowait
    ),
    NfsProc3.NFSPROC3_READLINK: Procedure(
        "NFSPROC3_READLINK", a.Readlink3Args.unpack, p.nfsproc3_readlink
    ),
    NfsProc3.NFSPROC3_READ: Procedure(
        "NFSPROC3_READ", a.Read3Args.unpack, p.nfsproc3_read, p.nfsproc3_read_nowait
    ),
    NfsProc3.NFSPROC3_WRITE: Procedure("NFSPROC3_WRITE", a.Write3Args.unpack, p.nfsproc3_write),
    NfsProc3.NFSPROC3_CREATE: Procedure("NFSPROC3_CREATE", a.Create3Args.unpack, p.nfsproc3_create),
    NfsProc3.NFSPROC3_MKDIR: Procedure("NFSPROC3_MKDIR", a.Mkdir3Args.unpack, p.nfsproc3_mkdir),
    NfsProc3.NFSPROC3_SYMLINK: Procedure(
        "NFSPROC3_SYMLINK", a.Symlink3Args.unpack, p.nfsproc3_symlink
    ),
    NfsProc3.NFSPROC3_MKNOD: Procedure("NFSPROC3_MKNOD", a.Mknod3Args.unpack, p.nfsproc3_mknod),
    NfsProc3.NFSPROC3_REMOVE: Procedure("NFSPROC3_REMOVE", a.Remove3Args.unpack, p.nfsproc3_remove),
    NfsProc3.NFSPROC3_RMDIR: Procedure("NFSPROC3_RMDIR", a.Rmdir3Args.unpack, p.nfsproc3_rmdir),
    NfsProc3.NFSPROC3_RENAME: Procedure("NFSPROC3_RENAME", a.Rename3Args.unpack, p.nfsproc3_rename),
    NfsProc3.NFSPROC3_LINK: Procedure("NFSPROC3_LINK", a.Link3Args.unpack, p.nfsproc3_link),
    NfsProc3.NFSPROC3_READDIR: Procedure(
        "NFSPROC3_READDIR", a.Readdir3Args.unpack, p.nfsproc3_readdir
    ),
    NfsProc3.NFSPROC3_READDIRPLUS: Procedure(
        "NFSPROC3_READDIRPLUS", a.Readdirplus3Args.unpack, p.nfsproc3_readdirplus
    ),
    NfsProc3.NFSPROC3_FSSTAT: Procedure("NFSPROC3_FSSTAT", a.Fsstat3Args.unpack, p.nfsproc3_fsstat),
    NfsProc3.NFSPROC3_FSINFO: Procedure(
        "NFSPROC3_FSINFO", a.Fsinfo3Args.unpack, p.nfsproc3_fsinfo, p.nfsproc3_fsinfo_nowait
    ),
    NfsProc3.NFSPROC3_PATHCONF: Procedure(
        "NFSPROC3_PATHCONF",
        a.Pathconf3Args.unpack,
        p.nfsproc3_pathconf,
        p.nfsproc3_pathconf_nowait,
    ),
    NfsProc3.NFSPROC3_COMMIT: Procedure(
        "NFSPROC3_COMMIT", a.Commit3Args.unpack, p.nfsproc3_commit, p.nfsproc3_commit_nowait
    ),
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
    run_nowait = proc.run_nowait

    def bound(args: Any, ctx: CallContext) -> Packable:
        with calling(ctx):
            result: Packable = run(service, args, ctx)
        return result

    # a nowait implementation hands the caller to the Vfs's *_nowait methods itself
    # (nfs.protocol.vfs.NowaitVfs): no calling() context, no wrapper frame
    return RpcProcedure(
        proc.name,
        direct_unpacker(proc.decode),
        bound,
        functools.partial(run_nowait, service) if run_nowait is not None else None,
    )
