"""Finding the Delta tables under a lake root: a local directory or an object-store prefix.

A table is a directory (prefix) holding ``_delta_log/``. The search does not descend into a
table (a table nested in another table's directory is not shown), skips names starting
with ``.`` and ``_`` (hidden directories, ``_posixlake``, ``_delta_log`` itself) and shows
only directories with a table below them.

Cost: one listing per directory down to the tables, never into them.

- Locally one ``scandir`` per directory, and a ``stat`` of ``<child>/_delta_log`` per
  subdirectory.
- On S3 and Azure, per directory that is not a table one delimiter listing of its direct
  children (``list-type=2&delimiter=/`` / ``comp=list&delimiter=/``: the "directories"
  under it and its own objects, through delta-rs' object store as a pyarrow file system,
  :func:`posixlake.storage.table_filesystem`), and per child directory one probe of at
  most one object under ``<child>/_delta_log/`` (:meth:`ObjectStore.has_any`), run
  concurrently. A table's data files and log are never listed: the requests grow with
  the tables and prefixes of the lake, not with their files. (A lake of many small
  tables can take more requests than one recursive listing of every object would; it
  never takes more as the tables grow.)

The lake caches the result (see :class:`nfs.lake.lakefs.LakeFs`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Final

import pyarrow.fs as pafs

from posixlake.storage import is_local, normalize_uri, open_store, table_filesystem

__all__ = ["DELTA_LOG", "PROBE_THREADS", "discover_tables", "is_table"]

logger = logging.getLogger(__name__)

DELTA_LOG: Final = "_delta_log"
PROBE_THREADS: Final = 16
"""Concurrent ``_delta_log/`` probes of one object-store directory's children."""


def _hidden(name: str) -> bool:
    return name.startswith((".", "_"))


def is_table(uri: str, storage_options: Mapping[str, str] | None = None) -> bool:
    """Return whether ``uri`` itself is a Delta table (it holds ``_delta_log/``)."""
    if is_local(uri):
        return os.path.isdir(os.path.join(normalize_uri(uri), DELTA_LOG))
    return open_store(uri, storage_options).has_any(DELTA_LOG)


def discover_tables(root: str, storage_options: Mapping[str, str] | None = None) -> list[str]:
    """Return the ``/``-separated paths, relative to ``root``, of the tables under it (sorted).

    Raises:
        PosixLakeError: the object store cannot be listed (NetworkError, StorageError...).
        OSError: the local root cannot be listed (or an object-store listing fails in
            the pyarrow file system).
    """
    if is_local(root):
        return sorted(_local_tables(normalize_uri(root)))
    return sorted(_remote_tables(root, storage_options))


def _remote_tables(root: str, storage_options: Mapping[str, str] | None) -> list[str]:
    fs = table_filesystem(root, storage_options)
    store = open_store(root, storage_options)
    out: list[str] = []
    pending = [""]
    with ThreadPoolExecutor(PROBE_THREADS, thread_name_prefix="lake-discovery") as pool:
        while pending:
            children: list[str] = []
            for rel in pending:  # one delimiter listing per directory that is not a table
                selector = pafs.FileSelector(rel, allow_not_found=True, recursive=False)
                for info in fs.get_file_info(selector):
                    name = info.path.rstrip("/").rpartition("/")[2]
                    if info.type == pafs.FileType.Directory and not _hidden(name):
                        children.append(f"{rel}/{name}" if rel else name)
            probes = pool.map(lambda c: store.has_any(f"{c}/{DELTA_LOG}"), children)
            pending = []
            for child, table in zip(children, probes, strict=True):
                (out if table else pending).append(child)
    return out


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
