"""Finding the Delta tables under a lake root: a local directory or an object-store prefix.

A table is a directory (prefix) holding ``_delta_log/``. The search does not descend into a
table (a table nested in another table's directory is not shown), skips names starting
with ``.`` and ``_`` (hidden directories, ``_posixlake``, ``_delta_log`` itself) and shows
only directories with a table below them.

Cost: locally one ``scandir`` per directory down to the tables (not into them); on S3 and
Azure one recursive listing of every object under the root (the object stores list keys,
not directories), i.e. proportional to the objects of the lake, data files included. The
lake caches the result (see :class:`nfs.lake.lakefs.LakeFs`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from posixlake.storage import is_local, normalize_uri, open_store

__all__ = ["DELTA_LOG", "discover_tables", "is_table"]

logger = logging.getLogger(__name__)

DELTA_LOG = "_delta_log"


def _hidden(name: str) -> bool:
    return name.startswith((".", "_"))


def is_table(uri: str, storage_options: Mapping[str, str] | None = None) -> bool:
    """Return whether ``uri`` itself is a Delta table (it holds ``_delta_log/``)."""
    if is_local(uri):
        return os.path.isdir(os.path.join(normalize_uri(uri), DELTA_LOG))
    return open_store(uri, storage_options).has_any(DELTA_LOG + "/")


def discover_tables(root: str, storage_options: Mapping[str, str] | None = None) -> list[str]:
    """Return the ``/``-separated paths, relative to ``root``, of the tables under it (sorted).

    Raises:
        PosixLakeError: the object store cannot be listed (NetworkError, StorageError...).
        OSError: the local root cannot be listed.
    """
    if is_local(root):
        return sorted(_local_tables(normalize_uri(root)))
    found: set[str] = set()
    for entry in open_store(root, storage_options).list():
        parts = entry.key.split("/")
        if DELTA_LOG not in parts[:-1]:
            continue
        table = parts[: parts.index(DELTA_LOG)]
        if table and not any(_hidden(p) for p in table):
            found.add("/".join(table))
    # a table inside another table's directory is part of that table's files
    return sorted(t for t in found if not any(t.startswith(o + "/") for o in _parents(t, found)))


def _parents(table: str, found: set[str]) -> list[str]:
    parts = table.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts)) if "/".join(parts[:i]) in found]


def _local_tables(root: str) -> list[str]:
    out: list[str] = []
    stack = [""]
    while stack:
        rel = stack.pop()
        here = os.path.join(root, rel) if rel else root
        try:
            with os.scandir(here) as it:
                # links are not followed (as `find`): one back up the lake would loop
                dirs = [
                    e.name for e in it if e.is_dir(follow_symlinks=False) and not _hidden(e.name)
                ]
        except (FileNotFoundError, NotADirectoryError):  # removed while listing
            continue
        except PermissionError as err:  # e.g. a root-owned lost+found: not a table
            logger.warning("lake %s: cannot list %s: %s", root, here, err)
            continue
        for name in dirs:
            child = f"{rel}/{name}" if rel else name
            if os.path.isdir(os.path.join(root, child, DELTA_LOG)):
                out.append(child)
            else:
                stack.append(child)
    return out
