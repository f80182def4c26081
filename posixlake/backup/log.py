"""The Delta log of a backed-up table, read by delta-rs.

A backup needs, for each data file, the version that adds it and the one that removes
it. The log entries up to the pinned version, wherever they are (the table, or the
backups of a chain for entries the table has cleaned up), are copied into a scratch
folder with their modification times, and delta-rs reads them there
(:func:`posixlake.delta.table_files`). Nothing here parses log entries.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable, Mapping

from posixlake.backup.transfer import parallel_map
from posixlake.delta import LOG_DIR, TableFiles, log_entry_version, table_files

__all__ = ["LogFiles", "log_keys_of", "read_log"]

LogFiles = TableFiles
"""What the log says about the files of each version (see :class:`posixlake.delta.TableFiles`)."""


def log_keys_of(keys: Iterable[str], version: int) -> dict[str, int]:
    """Return the ``_delta_log`` entries among ``keys`` (paths in a table) up to ``version``.

    Returns:
        each entry's key and the version it belongs to.
    """
    out: dict[str, int] = {}
    for key in keys:
        if key.startswith(LOG_DIR + "/") and key.count("/") == 1:
            v = log_entry_version(key.rsplit("/", 1)[-1])
            if v is not None and v <= version:
                out[key] = v
    return out


def read_log(
    log_keys: Mapping[str, int],
    version: int,
    read: Callable[[str], bytes],
    workers: int,
    *,
    modified: Mapping[str, float | None] | None = None,
    where: str,
    walk_from: int | None = None,
) -> LogFiles:
    """Return the files of every version up to ``version`` that the entries ``log_keys`` rebuild.

    Args:
        log_keys: the log entries (keys inside the table) and their versions.
        version: the pinned version.
        read: returns the bytes of a key (may raise, e.g. BackupCorrupted).
        workers: parallel reads.
        modified: each entry's modification time (kept on the copies: delta-rs falls
            back on it for commits without a timestamp).
        where: names the log in error messages.
        walk_from: see :func:`posixlake.delta.table_files` (an incremental backup walks
            only the versions after its base).

    Raises:
        DeltaLakeError: the entries cannot be replayed up to ``version``.
        InvalidOperation: a version references a file outside the table's folder.
    """
    times = modified or {}
    with tempfile.TemporaryDirectory(prefix="posixlake-log-") as scratch:
        os.mkdir(os.path.join(scratch, LOG_DIR))

        def fetch(key: str) -> None:
            path = os.path.join(scratch, *key.split("/"))
            with open(path, "wb") as f:
                f.write(read(key))
            stamp = times.get(key)
            if stamp is not None:
                os.utime(path, (stamp, stamp))

        parallel_map(fetch, sorted(log_keys), workers)
        return table_files(
            scratch,
            version,
            [key.rsplit("/", 1)[-1] for key in log_keys],
            what=where,
            walk_from=walk_from,
        )
