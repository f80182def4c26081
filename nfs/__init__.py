"""posixlake's NFS face: a protocol library and the table face built on it.

- `nfs.protocol`: the NFSv3 protocol library, which knows nothing of tables: wire types
  and RPC (`xdr`, `record`, `rpcauth`, `rpc`, `drc`), MOUNT v3 and the port mapper, the
  NFSv3 procedures (`nfs3/`), the `Vfs` interface a file system implements (`vfs`; the
  example `memfs.MemoryFs`), the protocol stack (`serving`) and the asyncio transport
  (`server.NfsServer`, given a Vfs or a Vfs factory).
- `nfs.table`: the Vfs that shows a posixlake table as CSV files (`tablefs.TableFs`) and
  turns edits into Delta transactions; it imports the protocol and posixlake's public
  names, and the protocol never imports it.

Imports point one way; tests/nfs/test_layering.py holds the map. ``import nfs`` loads
neither asyncio nor posixlake: `NfsServer` (the original project's ``NfsServer(db, port)``,
``nfs.table.server.TableNfsServer``) is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from nfs.protocol.vfs import FileId, NfsError, Vfs

if TYPE_CHECKING:
    from nfs.table.server import TableNfsServer as NfsServer

__all__ = ["FileId", "NfsError", "NfsServer", "Vfs"]


def __getattr__(name: str) -> Any:
    if name == "NfsServer":
        from nfs.table.server import TableNfsServer

        return TableNfsServer
    raise AttributeError(f"module 'nfs' has no attribute {name!r}")
