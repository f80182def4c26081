"""A table's files as a pyarrow file system, on any backend delta-rs reaches.

Used by whatever reads or writes a table's data files directly, outside delta-rs'
scan: the Spark engine's executors and the NFS face's per-file renderings.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import pyarrow.fs as pafs

from posixlake.storage.common import is_local, normalize_uri

__all__ = ["table_filesystem"]


def table_filesystem(
    uri: str, storage_options: Mapping[str, str] | None, *, mapped: bool = False
) -> pafs.FileSystem:
    """Return a pyarrow file system rooted at the table (paths are relative to the root).

    A local table is a sub-tree of the local file system; a remote one goes through
    delta-rs' object store (its storage options: credentials, endpoint, ...).

    ``mapped``: a local file opened for reading is memory-mapped, so what a reader takes
    from it is a view of the page cache, not a copy into fresh memory. Only for data
    files (Delta never changes one in place) read for a short while: a file truncated
    under a mapping faults the process that reads past its new end.
    """
    if is_local(uri):
        root = normalize_uri(uri)
        os.makedirs(root, exist_ok=True)
        return pafs.SubTreeFileSystem(root, pafs.LocalFileSystem(use_mmap=mapped))
    from deltalake.fs import DeltaStorageHandler

    return pafs.PyFileSystem(DeltaStorageHandler(uri, dict(storage_options or {})))
