"""A table made by writing ``data.csv`` into a new lake directory: its staged bytes, their
journal, the table's types inferred from them, and the one commit that creates it.

``mkdir lake/sales && cp rows.csv lake/sales/data.csv`` (or ``mkdir -p lake/sales/data``
and ``lake/sales/data/data.csv``) stages the bytes for their writer
(the client's address and AUTH_SYS identity, as for a table's ``data.csv``); a COMMIT or
a FILE_SYNC WRITE makes them durable (the journal of :mod:`nfs.table.journal`, one file
per staging in ``<lake state>/new-tables/``, fsynced before the reply). The edit ends at
the NFSv4 CLOSE, or over NFSv3 when its writer has been quiet for ``idle_seconds`` after
a COMMIT (or FILE_SYNC) with content ending in a line feed: then the columns' types are
inferred from every value (:func:`posixlake.csvcodec.read_csv_infer`: a type only when no
value changes what it says; ``007`` stays text) and the table is created with its rows in
ONE commit (version 0 holds them), its commit tagged with the staging's write id
(``posixlake.nfs_write``), so a restarted server knows it was made.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pyarrow as pa
import pyarrow.parquet as pq

from nfs.protocol.nfs3 import Nfsstat3, StableHow
from nfs.protocol.rpc import CallContext
from nfs.protocol.vfs import BOUNDED_PEER_PREFIX, NfsError
from nfs.table.apply import change_budget
from nfs.table.journal import JournalDir, JournalFile, JournalHeader, Recovered, read_journal
from posixlake.csvcodec import CsvFormatError, read_csv_infer
from posixlake.database import DatabaseOps
from posixlake.delta import DeltaLog, WrittenFile, create_with_files, file_stats
from posixlake.errors import AlreadyExists, PosixLakeError, SchemaError, TableExists
from posixlake.storage import join_uri, storage_options_for, table_filesystem
from posixlake.types import delta_schema

__all__ = [
    "CHECK_AT_COMMIT",
    "DATA_CSV",
    "WRITE_TAG",
    "NewRows",
    "RowsCreator",
    "RowsJournal",
    "infer_rows",
    "rows_table_creator",
]

logger = logging.getLogger(__name__)

DATA_CSV: Final = "data.csv"
WRITE_TAG: Final = "posixlake.nfs_write"
"""The commit metadata key holding the write id (the table face's, ``nfs.table.apply``)."""
CHECK_AT_COMMIT: Final = 1 << 20
"""Content up to this size is parsed at each COMMIT, so ``cp`` of bad CSV fails there."""
_TABLE_ID_PREFIX: Final = "new-table:"
_IN_DATA_PREFIX: Final = "new-table-data:"
"""The journal of a ``<new>/data/data.csv`` (the other: ``<new>/data.csv``)."""


@dataclass(frozen=True)
class RowsCreator:
    """Makes tables from rows under a lake root (see :func:`rows_table_creator`).

    Attributes:
        create: creates the table at a path (relative to the root) holding these rows in
            one commit tagged with the write id (AlreadyExists if a table is there).
        made_by: whether the table at a path was made by that write id (None: no table).
    """

    create: Callable[[str, pa.Table, str], None]
    made_by: Callable[[str, str], bool | None]
    max_bytes: int = field(default_factory=change_budget)
    """The largest data.csv staged (held in memory, then parsed whole): 1/16 of the
    machine's memory, as for an NFS edit's changed rows (``nfs.table.apply``)."""


def infer_rows(data: bytes | bytearray) -> pa.Table:
    """Return the rows of CSV bytes with their types inferred losslessly.

    Raises:
        NfsError: NFS3ERR_INVAL for malformed CSV, an empty or bad header, or no content.
    """
    try:
        return read_csv_infer(bytes(data))
    except (CsvFormatError, SchemaError) as err:
        raise NfsError(Nfsstat3.NFS3ERR_INVAL, f"data.csv: {err}") from err


@dataclass
class NewRows:
    """The staged ``data.csv`` of a new table: one writer's bytes and their journal."""

    peer: str
    uid: int
    gid: int
    write_id: str
    journal: JournalFile | None
    data: bytearray = field(default_factory=bytearray)
    last_write: float = 0.0
    synced: bool = False
    """A COMMIT or FILE_SYNC came after the last write (the writer flushed: close())."""
    made: bool = False
    """The table was made from these rows (the writer's calls go to it now)."""
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    """Serializes the writer's calls with the making of the table."""
    filled: list[tuple[int, int]] = field(default_factory=list)
    """The byte ranges WRITEs filled, merged and sorted (a hole: a WRITE still on its way,
    or a truncation that extended the file)."""

    @property
    def complete(self) -> bool:
        """Whether every byte was written (no hole)."""
        return not self.data or self.filled == [(0, len(self.data))]

    def put(self, offset: int, data: bytes) -> None:
        """Stage the bytes of a WRITE (no journal: see :meth:`write`)."""
        if len(self.data) < offset:
            self.data.extend(bytes(offset - len(self.data)))
        self.data[offset : offset + len(data)] = data
        if data:
            self._fill(offset, offset + len(data))

    def cut(self, size: int) -> None:
        """Stage a truncation to ``size`` (an extension is a hole until written)."""
        del self.data[size:]
        self.data.extend(bytes(size - len(self.data)))
        self.filled = [(a, min(b, size)) for a, b in self.filled if a < size]

    def _fill(self, start: int, end: int) -> None:
        merged: list[tuple[int, int]] = []
        for a, b in sorted([*self.filled, (start, end)]):
            if merged and a <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], b))
            else:
                merged.append((a, b))
        self.filled = merged

    @property
    def bounded(self) -> bool:
        """An NFSv4 writer: its edit ends at its CLOSE only."""
        return self.peer.startswith(BOUNDED_PEER_PREFIX)

    def owned_by(self, ctx: CallContext) -> bool:
        """Return whether ``ctx`` is this staging's writer."""
        return (ctx.peer or "", ctx.uid, ctx.gid) == (self.peer, self.uid, self.gid)

    def write(self, offset: int, data: bytes, stable: StableHow, now: float) -> None:
        """Journal then stage a WRITE; FILE_SYNC / DATA_SYNC fsync the journal first."""
        if self.journal is not None:
            self.journal.write(offset, data)
        self.put(offset, data)
        self.last_write = now
        self.synced = False
        if stable != StableHow.UNSTABLE:
            self.sync()

    def truncate(self, size: int, now: float) -> None:
        """Journal then stage a truncation (or extension with zeros) to ``size``."""
        if self.journal is not None:
            self.journal.truncate(size)
        self.cut(size)
        self.last_write = now
        self.synced = False

    def sync(self) -> None:
        """Make the staged bytes durable (the journal fsynced)."""
        if self.journal is not None:
            self.journal.sync()
        self.synced = True

    def check(self) -> None:
        """Refuse content that cannot make a table (parsed when at most 1 MiB).

        Raises:
            NfsError: NFS3ERR_INVAL.
        """
        if len(self.data) <= CHECK_AT_COMMIT and self.complete and self.data.endswith(b"\n"):
            infer_rows(self.data)

    def done(self, now: float, idle: float) -> bool:
        """Return whether an NFSv3 writer is done: flushed, quiet for ``idle`` seconds,
        its content whole lines with no hole (never at a truncation alone, mid-line or
        before a WRITE still on its way)."""
        return (
            not self.bounded
            and self.synced
            and now - self.last_write >= idle
            and self.complete
            and self.data.endswith(b"\n")
        )

    def drop(self) -> None:
        """Delete the journal (the table is made, or the bytes are refused)."""
        if self.journal is not None:
            self.journal.discard()
            self.journal = None


class RowsJournal:
    """The journals of new tables' ``data.csv`` (``<lake state>/new-tables``), or none
    (``state_dir`` None: the bytes stay in memory and a COMMIT promises nothing more)."""

    def __init__(self, state_dir: Path | None) -> None:
        self._dir = JournalDir(state_dir / "new-tables") if state_dir is not None else None

    def start(self, path: str, ctx: CallContext, now: float, *, in_data: bool) -> NewRows:
        """Begin the staging of ``path``'s data.csv (``in_data``: its data/data.csv) for
        the caller."""
        write_id = uuid.uuid4().hex
        journal = None
        if self._dir is not None:
            header = JournalHeader(
                write_id=write_id,
                table_id=(_IN_DATA_PREFIX if in_data else _TABLE_ID_PREFIX) + path,
                base_version=-1,
                base_size=0,
                peer=ctx.peer or "",
                uid=ctx.uid,
                gid=ctx.gid,
                started=time.time_ns(),
            )
            journal = self._dir.create(header)
        return NewRows(ctx.peer or "", ctx.uid, ctx.gid, write_id, journal, last_write=now)

    def recover(self) -> list[tuple[str, bool, Recovered]]:
        """Return the journals an earlier server left, with their table paths and whether
        they were written as data/data.csv."""
        if self._dir is None:
            return []
        found = []
        for name in sorted(p.name for p in self._dir.path.glob("*.wal")):
            rec = read_journal(self._dir.path / name)
            if rec is None:
                continue
            for prefix in (_TABLE_ID_PREFIX, _IN_DATA_PREFIX):
                if rec.header.table_id.startswith(prefix):
                    path = rec.header.table_id.removeprefix(prefix)
                    found.append((path, prefix == _IN_DATA_PREFIX, rec))
        return found

    def restore(self, rec: Recovered, now: float) -> NewRows:
        """Stage a recovered journal again for its writer (who may go on writing)."""
        assert self._dir is not None
        head = rec.header
        rows = NewRows(
            head.peer, head.uid, head.gid, head.write_id, self._dir.reopen(rec), last_write=now
        )
        for op in rec.ops:
            if op.kind == "W":
                rows.put(op.number, bytes(op.data))
            elif op.kind == "T":
                rows.cut(op.number)
            else:  # the caller sets such a journal aside first (NewTables.recover)
                raise ValueError(f"a {op.kind} record in a new table's journal")
        rows.synced = True  # what the journal holds is what was promised
        return rows

    def set_aside(self, rec: Recovered, why: str) -> None:
        """Keep a journal that will not be applied as ``*.failed``, logged."""
        assert self._dir is not None
        self._dir.set_aside(rec, why)

    def close(self) -> None:
        """Unlock the directory (journals stay for the next start)."""
        if self._dir is not None:
            self._dir.release()


def rows_table_creator(
    root: str, *, storage: Any = None, max_bytes: int | None = None
) -> RowsCreator:
    """Return a creator of tables under ``root`` from rows, in ONE commit: a Parquet file
    written under the table's directory, then version 0 made with it (delta-rs'
    create with add actions), tagged with the write id."""

    def create(path: str, rows: pa.Table, write_id: str) -> None:
        uri = join_uri(root, path)
        options: Mapping[str, str] | None = storage_options_for(uri, storage)
        if DeltaLog.exists(uri, options):
            raise TableExists(f"a Delta table already exists at {uri}")
        schema = delta_schema(rows.schema)
        rows = rows.cast(schema)
        fs = table_filesystem(uri, options)
        adds: list[WrittenFile] = []
        name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
        if rows.num_rows:
            collected: list[pq.FileMetaData] = []
            with fs.open_output_stream(name) as out:
                pq.write_table(rows, out, compression="snappy", metadata_collector=collected)
            size = fs.get_file_info(name).size
            adds.append(
                WrittenFile(name, int(size), {}, rows.num_rows, file_stats(collected[0], schema))
            )
        try:
            create_with_files(
                uri,
                schema,
                adds,
                storage_options=options,
                metadata={"posixlake.operation": "CREATE FROM CSV (NFS)", WRITE_TAG: write_id},
            )
        except BaseException:
            if adds:
                try:
                    fs.delete_file(name)
                except OSError as err:
                    logger.warning("cannot remove %s/%s: %s", uri, name, err)
            raise

    def made_by(path: str, write_id: str) -> bool | None:
        uri = join_uri(root, path)
        if not DeltaLog.exists(uri, storage_options_for(uri, storage)):
            return None
        with DatabaseOps.open(uri, storage=storage, engine="local") as db:
            history = db.history(1 + db.version)
        return any(info.tags.get(WRITE_TAG) == write_id for info in history)

    if max_bytes is None:
        return RowsCreator(create, made_by)
    return RowsCreator(create, made_by, max_bytes)


def create_rows(creator: RowsCreator, path: str, rows: NewRows) -> None:
    """Create ``path`` from ``rows`` (inferred), then drop their journal.

    Raises:
        NfsError: NFS3ERR_INVAL (bad CSV), NFS3ERR_EXIST (a table is there), else the
            status of the storage error.
    """
    if not rows.complete:
        raise NfsError(
            Nfsstat3.NFS3ERR_INVAL, f"{path}/{DATA_CSV} has a range no WRITE filled (a hole)"
        )
    table = infer_rows(rows.data)
    try:
        creator.create(path, table, rows.write_id)
    except AlreadyExists as err:
        raise NfsError(Nfsstat3.NFS3ERR_EXIST, f"{path}: {err}") from err
    except PosixLakeError as err:
        from nfs.table.state import nfs_error

        raise nfs_error(err) from err
    rows.drop()
