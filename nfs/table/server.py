"""`TableNfsServer`: the protocol's `NfsServer` over a posixlake table.

The original project's ``NfsServer(db, port)`` (``posixlake.NfsServer``, loaded lazily)
took the database itself; this is that signature on top of the protocol library's
server, which is given a `Vfs` and knows nothing of tables. A `Vfs` passed as `db` is
served as it is; anything else is a ``DatabaseOps``, shown as a `TableFs`.
"""

from __future__ import annotations

from typing import Any, cast

from nfs.protocol.server import NfsServer
from nfs.protocol.vfs import Vfs
from nfs.table.tablefs import TableFs
from posixlake.database import DatabaseOps

__all__ = ["TableNfsServer", "table_vfs"]


def table_vfs(db: object) -> Vfs:
    """Return `db` if it is a `Vfs`, else a `TableFs` over the ``DatabaseOps`` `db`."""
    if isinstance(db, Vfs):
        return db
    return TableFs(cast(DatabaseOps, db))


class TableNfsServer(NfsServer):
    """`NfsServer` whose first argument is a posixlake ``DatabaseOps`` (or any `Vfs`).

    Args:
        db: the table to serve (the original project's keyword name,
            ``NfsServer(db=..., port=...)``), or a `Vfs`.
        port: TCP port for MOUNT and NFS; 0 picks a free one.
        host: the address to listen on.
        **options: the keyword options of `NfsServer`.
    """

    def __init__(self, db: object, port: int = 0, host: str = "127.0.0.1", **options: Any) -> None:
        super().__init__(table_vfs(db), port, host, **options)
