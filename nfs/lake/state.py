"""The one state object of a :class:`~nfs.lake.lakefs.LakeFs`, and the lake's fixed names.

:class:`LakeState` declares and sets what the lake's parts share: the root, the table
slots, the clocks, the lake's lock and the directories made at the lake level that are
not tables yet (:class:`NewTable`). The parts (:mod:`nfs.lake.tables`,
:mod:`nfs.lake.listing`, :mod:`nfs.lake.newtables`) hold it; the new-table maps are
changed by :mod:`nfs.lake.newtables` only (the listing reads them, and marks the ones a
listing shows made). See docs/design.md, "The lake".
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from nfs.lake.ids import SlotMap, path_hash
from nfs.lake.newrows import DATA_CSV, NewRows
from nfs.protocol.nfs3 import Fattr3, Ftype3, Nfstime3, Specdata3
from nfs.protocol.vfs import FileId
from nfs.table.tablefs import ROOT_ID

__all__ = [
    "DIR_MODE",
    "DIR_SIZE",
    "LAKE_ROOT",
    "SCHEMA_SQL",
    "TABLE_ROOT_LOCAL",
    "LakeState",
    "NewTable",
    "lake_attrs",
]

LAKE_ROOT: Final = 1
"""The local id of the lake root."""
DIR_MODE: Final = 0o555
DIR_SIZE: Final = 4096
TABLE_ROOT_LOCAL: Final = int(ROOT_ID)
"""The packed id of a table face's root (its fixed id 1 packs to itself)."""
SCHEMA_SQL: Final = "schema.sql"


def lake_attrs(
    fid: FileId, fsid: int, *, mode: int, mtime: Nfstime3, nlink: int = 2, size: int | None = None
) -> Fattr3:
    """The attributes of an entry the lake itself shows (owned by root; one time for
    atime, mtime and ctime): a directory, or with ``size`` a regular file."""
    is_dir = size is None
    shown = DIR_SIZE if size is None else size
    return Fattr3(
        type=Ftype3.NF3DIR if is_dir else Ftype3.NF3REG,
        mode=mode,
        nlink=nlink,
        uid=0,
        gid=0,
        size=shown,
        used=shown if is_dir else (shown + 511) & ~511,
        rdev=Specdata3(),
        fsid=fsid,
        fileid=fid,
        atime=mtime,
        mtime=mtime,
        ctime=mtime,
    )


@dataclass
class NewTable:
    """A directory made at the lake level (MKDIR), not a table yet: ``schema.sql`` written
    into it creates the table. Kept in memory only (an empty one is gone after a restart)."""

    path: str
    dir_local: int
    file_local: int
    mtime: Nfstime3
    schema: bytearray | None = None
    created: bool = False
    rows: NewRows | None = None
    """The staged data.csv (a table made from its rows), instead of schema.sql."""
    data_local: int = 0
    """The ``data/`` directory made in it (0: none): data.csv may be written there too."""
    in_data: bool = False
    """The staged data.csv is ``data/data.csv`` (else ``data.csv`` at the top)."""

    def names_in(self, local: int) -> tuple[str, ...]:
        """The entries of the directory ``local`` (the new directory or its data/)."""
        if local == self.data_local:
            return (DATA_CSV,) if self.rows is not None and self.in_data else ()
        top = () if self.file_name is None or self.in_data else (self.file_name,)
        return (*top, "data") if self.data_local else top

    def id_of(self, local: int, name: str) -> int | None:
        """The local id of ``name`` in the directory ``local`` (None: no such entry)."""
        if name not in self.names_in(local):
            return None
        return self.data_local if name == "data" and local == self.dir_local else self.file_local

    @property
    def file_name(self) -> str | None:
        """The one file in the directory: schema.sql, data.csv, or None yet."""
        if self.rows is not None:
            return DATA_CSV
        return SCHEMA_SQL if self.schema is not None else None

    @property
    def size(self) -> int:
        """The size of its file."""
        return len(self.rows.data if self.rows is not None else self.schema or b"")

    def read(self, offset: int, count: int) -> bytes:
        """Return ``count`` bytes of its file from ``offset`` (a copy of those only)."""
        data = self.rows.data if self.rows is not None else self.schema or b""
        return bytes(data[offset : offset + count])


@dataclass
class LakeState:
    """What a lake's parts share (see the module docstring).

    Attributes:
        root: the lake root (a local directory or an object-store URI).
        slots: the table slots (paths <-> the slot in every id of the table's files).
        state_dir: the lake's own state directory (None: in memory).
        clock: monotonic seconds; wallclock: seconds since the epoch.
        fsid: the lake's file system id, in every attribute it returns.
        lock: guards the open tables and the new tables (held briefly).
        refresh_lock: one listing (or change of the listing) at a time.
        new: the new tables not made yet, by path.
        new_ids: every new table (made or not) by the local ids of its directories and file.
    """

    root: str
    state_dir: Path | None
    clock: Callable[[], float]
    wallclock: Callable[[], float]
    slots: SlotMap = field(init=False)
    fsid: int = field(init=False)
    lock: threading.Lock = field(default_factory=threading.Lock)
    refresh_lock: threading.RLock = field(default_factory=threading.RLock)
    new: dict[str, NewTable] = field(default_factory=dict)
    new_ids: dict[int, NewTable] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.slots = SlotMap(self.state_dir / "slots.json" if self.state_dir else None)
        self.fsid = path_hash("lake-fsid", self.root) >> 1

    def now(self) -> Nfstime3:
        """The wall-clock time now, as NFS time."""
        return Nfstime3.from_seconds(self.wallclock())

    def new_of(self, local: int) -> NewTable | None:
        """The new table whose directory or file ``local`` is, else None."""
        with self.lock:
            return self.new_ids.get(local)
