"""posixlake's NFSv3 server: a sans-IO protocol core over a `Vfs`, and an asyncio transport.

Layers (imports point down): `nfs.xdr` and `nfs.record` (pure) -> `nfs.rpc` ->
`nfs.mount`, `nfs.nfs3`, `nfs.portmap` -> `nfs.vfs` (the protocol a file system
implements; `nfs.memfs.MemoryFs` is one) -> `nfs.server` (the only asyncio code).

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
