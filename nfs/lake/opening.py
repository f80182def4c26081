"""Opening a lake's tables as table faces: the `TableOpener` the CLI gives `LakeFs`."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from nfs.lake.create import TableSpec
from nfs.lake.tables import LakeTable
from nfs.protocol.vfs import Vfs
from nfs.table.tablefs import TableFs, default_state_dir
from posixlake.database import DatabaseOps
from posixlake.errors import AlreadyExists, NotFound
from posixlake.storage import join_uri, open_store, storage_options_for

__all__ = ["lake_state_dir", "table_creator", "tablefs_opener"]


def lake_state_dir(root: str, state_dir: str | Path | None = None) -> Path:
    """Return where a lake's server keeps its state: ``state_dir/lake-<hash of root>``, or
    by default what ``nfs.table.tablefs.default_state_dir`` gives for ``lake:ROOT``."""
    if state_dir is None:
        return default_state_dir(f"lake:{root}")
    digest = hashlib.sha256(root.encode()).hexdigest()[:20]
    return Path(state_dir) / f"lake-{digest}"


def tablefs_opener(
    root: str,
    *,
    state_dir: Path,
    storage: Any = None,
    credentials: tuple[str, str] | None = None,
    engine: Mapping[str, Any] | None = None,
    tablefs: Mapping[str, Any] | None = None,
    wrap: Callable[[DatabaseOps, TableFs], Vfs] | None = None,
) -> Callable[[str], LakeTable]:
    """Return an opener of the tables under ``root``: ``DatabaseOps.open`` then a `TableFs`.

    Args:
        root: the lake root.
        state_dir: the lake's state directory; each table's journal goes in
            ``tables/<hash of its path>`` under it.
        storage: the storage configuration of the root (applies to every table).
        credentials: ``(user, password)`` to open tables that have users with.
        engine: ``DatabaseOps.open``'s engine keywords.
        tablefs: `TableFs` keywords (read_only, idle_seconds, segment_cache...).
        wrap: wraps a table's face (per-user access); the face itself by default.
    """

    def open_table(path: str) -> LakeTable:
        db = DatabaseOps.open(
            join_uri(root, path), storage=storage, credentials=credentials, **dict(engine or {})
        )
        digest = hashlib.sha256(path.encode()).hexdigest()[:20]
        fs = TableFs(db, state_dir=state_dir / "tables" / digest, **dict(tablefs or {}))
        if wrap is None:
            return LakeTable(fs, db=db)
        try:
            return LakeTable(fs, wrap(db, fs), db)
        except BaseException:
            fs.close()
            raise

    return open_table


def table_creator(
    root: str,
    *,
    storage: Any = None,
    engine: Mapping[str, Any] | None = None,
) -> Callable[[str, TableSpec], None]:
    """Return a creator of tables under ``root`` (``DatabaseOps.create``, one commit), for
    a ``schema.sql`` written into a new directory of the lake."""

    def create(path: str, spec: TableSpec) -> None:
        uri = join_uri(root, path)
        if _holds_files(uri, storage):
            # not a table (the lake would show it), but not empty either: its files would
            # become untracked files of the new table (which a VACUUM deletes)
            raise AlreadyExists(f"{uri} already holds files that are not a table")
        with DatabaseOps.create(
            uri,
            spec.schema,
            primary_key=list(spec.primary_key) or None,
            partition_by=list(spec.partition_by) or None,
            storage=storage,
            **dict(engine or {}),
        ):
            pass

    return create


def _holds_files(uri: str, storage: Any) -> bool:
    try:
        return open_store(uri, storage_options_for(uri, storage)).has_any("")
    except NotFound:
        return False
