"""posixlake's NFSv3 server: a sans-IO protocol core over a `Vfs`, and an asyncio transport.

Layers (each imports only those before it; tests/nfs/test_layering.py holds the map):
`nfs.xdr`, `nfs.record` (pure) -> `nfs.rpcauth`, `nfs.rpc` -> the NFSv3 wire types
(`nfs.nfs3`: codec, types, args, results) -> `nfs.vfs` (the protocol a file system
implements; `nfs.memfs.MemoryFs` is one) -> the NFSv3 procedures (`nfs.nfs3.handles`,
`service`, `procedures`, `program`), `nfs.mount`, `nfs.portmap` -> `nfs._serving` (the
protocol stack) -> `nfs.server` (the only asyncio code). `nfs.tableview` implements the
Vfs over a posixlake table.

`NfsServer` is imported lazily, so ``import nfs`` does not load asyncio.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nfs.vfs import FileId, NfsError, Vfs

if TYPE_CHECKING:
    from nfs.server import NfsServer

__all__ = ["FileId", "NfsError", "NfsServer", "Vfs"]


def __getattr__(name: str) -> Any:
    if name == "NfsServer":
        from nfs.server import NfsServer

        return NfsServer
    raise AttributeError(f"module 'nfs' has no attribute {name!r}")
