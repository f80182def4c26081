"""Which files each version of a table needs, as delta-rs reads the log.

Backups copy every data file that some version of the table uses, and must know for
each file the version that adds it and the one that removes it (to restore the table as
of an older version, and to say which versions a vacuumed file makes unrestorable).
:func:`table_files` asks delta-rs for the snapshot of every version from the oldest one
the log can rebuild up to the pinned one, and compares consecutive snapshots (one
delta-rs load per version, a few milliseconds each). Log entries themselves are never
parsed here: :func:`log_entry_version` only reads their file names
(``_delta_log/<20-digit version>.json``, checkpoints, CRCs).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import unquote

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from posixlake.errors import DeltaLakeError, InvalidOperation
from posixlake.storage import check_key

__all__ = [
    "LOG_DIR",
    "FileSpan",
    "TableFiles",
    "is_commit",
    "log_entry_version",
    "replay_start",
    "table_files",
]

LOG_DIR: Final = "_delta_log"

_COMMIT: Final = re.compile(r"^(\d{20})\.json$")
_LOG_FILE: Final = re.compile(
    r"^(?:(\d{20})\.json|(\d{20})\.crc|(\d{20})\.checkpoint(?:\.\d{10}\.\d{10})?\.parquet"
    r"|(\d{20})\.checkpoint\.[0-9A-Za-z-]+\.(?:json|parquet)|\d{20}\.(\d{20})\.compacted\.json)$"
)
_CHECKPOINT: Final = re.compile(r"^(\d{20})\.checkpoint(?:\.(\d{10})\.(\d{10}))?\.parquet$")


def log_entry_version(name: str) -> int | None:
    """Return the version a ``_delta_log`` file name belongs to (None: not a log entry).

    Commits, CRCs, classic and multi-part checkpoints, v2 checkpoints and compacted
    commits (their last version) count; ``_last_checkpoint`` and anything else do not.
    """
    m = _LOG_FILE.match(name)
    if not m:
        return None
    return int(next(g for g in m.groups() if g is not None))


def is_commit(name: str) -> bool:
    """Return whether ``name`` is a commit file (``<20-digit version>.json``)."""
    return _COMMIT.match(name) is not None


def replay_start(names: Iterable[str], version: int) -> int:
    """Return the version from which a log holding the entries ``names`` rebuilds ``version``.

    0 when every commit up to ``version`` is there; else the newest complete checkpoint
    followed by every commit up to ``version``.

    Raises:
        DeltaLakeError: the commit of ``version`` is missing, or commits are missing and
            no checkpoint covers them.
    """
    names = list(names)
    commits = {int(m.group(1)) for n in names if (m := _COMMIT.match(n)) is not None}
    commits = {v for v in commits if v <= version}
    if version not in commits:
        raise DeltaLakeError(f"the Delta log has no entry for version {version}")
    if all(v in commits for v in range(version + 1)):
        return 0
    parts: dict[int, list[int]] = {}
    for n in names:
        m = _CHECKPOINT.match(n)
        if m and int(m.group(1)) <= version:
            parts.setdefault(int(m.group(1)), []).append(int(m.group(3) or 1))
    usable = [
        c
        for c, counts in parts.items()
        if len(counts) == counts[0] and all(v in commits for v in range(c + 1, version + 1))
    ]
    if not usable:
        raise DeltaLakeError(
            f"the Delta log cannot be replayed up to version {version}: commits are missing "
            "and no checkpoint covers them"
        )
    return max(usable)


@dataclass
class FileSpan:
    """The versions that use one data file: from ``added`` up to before ``removed``."""

    size: int
    added: int
    removed: int | None = None


@dataclass
class TableFiles:
    """The data files of every version from ``min_version`` to ``version``, and the metadata."""

    version: int
    min_version: int
    """The oldest version the log rebuilds; files only older versions used are unknown."""
    files: dict[str, FileSpan] = field(default_factory=dict)
    """Data files by path inside the table (unquoted, ``/``-separated)."""
    timestamps: dict[int, int] = field(default_factory=dict)
    """Commit times (epoch ms) of the versions whose commit the log still holds."""
    table_id: str | None = None
    schema_json: str | None = None
    """The table schema at ``version``, as Delta schema JSON."""
    partition_columns: tuple[str, ...] = ()
    column_mapping: bool = False
    deletion_vectors: bool = False
    """The table's protocol allows deletion vectors (which may live in files of their own)."""


def _data_key(raw: str, where: str) -> str:
    if "://" in raw or raw.startswith("/"):
        raise InvalidOperation(
            f"{where}: the table references a file outside its folder ({raw}); "
            "backups of shallow clones are not supported"
        )
    return check_key(unquote(raw))


def _live(dt: DeltaTable, where: str, keys: dict[str, str]) -> dict[str, int]:
    """Return the data files of the loaded version and their sizes (``keys`` caches paths)."""
    actions = pa.table(dt.get_add_actions(flatten=False))
    paths = actions.column("path").to_pylist()
    sizes = actions.column("size_bytes").to_pylist()
    out: dict[str, int] = {}
    for raw, size in zip(paths, sizes, strict=True):
        key = keys.get(raw)
        if key is None:
            key = keys[raw] = _data_key(str(raw), where)
        out[key] = int(size or 0)
    return out


def table_files(
    uri: str,
    version: int,
    log_names: Iterable[str],
    *,
    storage_options: Mapping[str, str] | None = None,
    what: str | None = None,
    walk_from: int | None = None,
) -> TableFiles:
    """Return which data files each version of the table at ``uri`` uses, up to ``version``.

    Args:
        uri: the table (it may hold only its ``_delta_log``: data files are not read).
        version: the last version to look at (later log entries are ignored).
        log_names: the file names in the table's ``_delta_log`` folder (they decide from
            which version the log can be replayed, see :func:`replay_start`).
        storage_options: delta-rs options for ``uri``.
        what: names the log in error messages (default: ``uri``).
        walk_from: compare snapshots from this version on only (when it is after the
            oldest rebuildable one): the caller knows the files of the versions before
            it, and a file live at it is reported as added at it.

    Raises:
        DeltaLakeError: the log cannot be read or replayed up to ``version``.
        InvalidOperation: a version references a file outside the table's folder.
    """
    start = replay_start(log_names, version)
    out = TableFiles(version=version, min_version=start)
    first = start if walk_from is None else min(max(start, walk_from), version)
    where = what or f"{uri}/{LOG_DIR}"
    try:
        dt = DeltaTable(uri, version=first, storage_options=dict(storage_options or {}))
        live: dict[str, int] = {}
        keys: dict[str, str] = {}
        for v in range(first, version + 1):
            if v > first:
                dt.load_as_version(v)
            current = _live(dt, where, keys)
            for key, size in current.items():
                if key not in live:
                    out.files[key] = FileSpan(size, v)
            for key in live.keys() - current.keys():
                out.files[key].removed = v
            live = current
        history: list[dict[str, Any]] = dt.history()
        meta = dt.metadata()
        schema_json = dt.schema().to_json()
        protocol = dt.protocol()
    except (DeltaError, OSError, pa.ArrowException) as err:
        raise DeltaLakeError(f"{where}: unreadable Delta log ({err})") from err
    for entry in history:
        stamp, at = entry.get("timestamp"), entry.get("version")
        if isinstance(stamp, int) and isinstance(at, int) and at <= version:
            out.timestamps[at] = stamp
    out.table_id = str(meta.id) if meta.id else None
    out.schema_json = schema_json
    out.partition_columns = tuple(str(c) for c in meta.partition_columns)
    mode = (meta.configuration or {}).get("delta.columnMapping.mode", "none")
    out.column_mapping = mode not in (None, "none")
    features = set(protocol.reader_features or ()) | set(protocol.writer_features or ())
    out.deletion_vectors = "deletionVectors" in features
    return out
