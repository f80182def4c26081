"""The open tables of a lake: one table face per table, opened on first use, in an LRU.

:class:`OpenTables` opens a table (through the lake's `TableOpener`) when a call needs
it and keeps at most ``max_open`` open: past the bound the least recently used table is
closed once it has no call in flight, no staged write, and no call for ``keep_open``
seconds, or past twice the bound whatever its last call (a table with staged or
unfinished writes is never evicted; the bound is then exceeded, with a log line). One
opener of a table at a time, and none while it closes. It also holds what outlives an
open face: each table's map of inner ids (:class:`~nfs.lake.ids.InnerIds`), the
data.csv / schema.sql handle generations kept across reopenings, the tables the server
may not open (until the next listing), and the retired verifiers that keep the lake's
write verifier from going back. See docs/design.md, "The lake".
"""

from __future__ import annotations

import hashlib
import logging
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final

from nfs.lake.ids import InnerIds, PartitionIds, lake_id
from nfs.lake.state import LakeState
from nfs.protocol.nfs3 import Nfsstat3
from nfs.protocol.vfs import FileId, NfsError, Vfs
from nfs.table.partitions import PARTITION_BASE
from nfs.table.state import DATA_CSV_ID, SCHEMA_ID, nfs_error
from nfs.table.tablefs import ROOT_ID, TableFs
from posixlake.errors import AuthenticationError, NotFound, PermissionDenied, PosixLakeError

if TYPE_CHECKING:
    from posixlake import DatabaseOps

__all__ = [
    "DEFAULT_KEEP_OPEN",
    "DEFAULT_MAX_OPEN",
    "LakeTable",
    "OpenTables",
    "TableOpener",
    "partition_map",
]

logger = logging.getLogger(__name__)

DEFAULT_MAX_OPEN: Final = 64
"""Tables kept open at most (beyond it, idle ones are closed, least recently used first)."""
DEFAULT_KEEP_OPEN: Final = 30.0
"""A table used less than this many seconds ago is not closed to make room."""
KEPT_GENERATIONS: Final = frozenset({DATA_CSV_ID, SCHEMA_ID})
"""The table-face files whose handle generation the lake keeps across an eviction."""


@dataclass
class LakeTable:
    """One open table of a lake, as a `TableOpener` returns it.

    Attributes:
        fs: the table face.
        vfs: what calls go to: ``fs`` itself or a wrapper of it (per-user access).
        db: the table the face shows (the HTTP control plane's figures and API);
            None for an opener that does not give it.
    """

    fs: TableFs
    vfs: Vfs | None = None
    db: DatabaseOps | None = None

    @property
    def target(self) -> Vfs:
        """The Vfs calls go to."""
        return self.vfs if self.vfs is not None else self.fs


TableOpener = Callable[[str], LakeTable]
"""Opens the table at a path relative to the lake root (PosixLakeError if it cannot)."""


@dataclass
class _KeptGens:
    """The data.csv / schema.sql handle generations a lake keeps for one table's slot."""

    table_gen: bytes
    face: weakref.ref[LakeTable]
    """The open table whose generations ``seen`` are (a change under it: a replacement)."""
    seen: dict[int, bytes] = field(default_factory=dict)
    kept: dict[int, bytes] = field(default_factory=dict)


@dataclass
class _Open:
    table: LakeTable
    verifier: bytes
    active: int = 0
    last_used: float = 0.0


def partition_map(state_dir: Path, table: str) -> Path:
    """Where the lake keeps the numbers of ``table``'s partitions (see `PartitionIds`)."""
    digest = hashlib.sha256(table.encode("utf-8", "surrogatepass")).hexdigest()[:20]
    return state_dir / "partitions" / f"{digest}.json"


def verifier_of(vfs: Vfs) -> bytes:
    """The write verifier of a table's Vfs (empty if it has none)."""
    own = getattr(vfs, "write_verifier", None)
    return bytes(own()) if callable(own) else b""


class OpenTables:
    """The LRU of a lake's open tables (see the module docstring).

    Args:
        state: the lake's shared state (its lock, slots and clock).
        opener: opens one table (a path relative to the root) as a `LakeTable`.
        max_open: tables kept open at most.
        keep_open: a table used this recently is not closed to make room.
        boot: this server's boot token, for the write verifier.
    """

    def __init__(
        self,
        state: LakeState,
        opener: TableOpener,
        *,
        max_open: int,
        keep_open: float,
        boot: bytes,
    ) -> None:
        if max_open < 1:
            raise ValueError("max_open must be at least 1")
        self._state = state
        self._lock = state.lock
        self._opener = opener
        self._max_open = max_open
        self._keep_open = keep_open
        self._boot = boot
        self._open: OrderedDict[int, _Open] = OrderedDict()
        self._opening: dict[int, threading.Lock] = {}
        self._ids: dict[int, InnerIds] = {}
        self._refused: set[int] = set()
        self._file_gens: dict[int, _KeptGens] = {}
        self._retired = 0
        self._closed = False
        self.opened = 0
        """Tables opened since start (for tests and metrics)."""

    # ------------------------------------------------------------ ids

    def inner_ids(self, slot: int) -> InnerIds:
        """The map between the table's own ids and the local ids of the lake's (its
        partitions' numbers kept in the lake's state directory: see :mod:`nfs.lake.ids`)."""
        with self._lock:
            ids = self._ids.get(slot)
            if ids is None:
                table = self._state.slots.table_of(slot)
                where = self._state.state_dir
                kept = None if where is None or table is None else partition_map(where, table)
                ids = self._ids[slot] = InnerIds(PartitionIds(kept, table or ""))
            return ids

    def out(self, slot: int, inner: int) -> FileId:
        """The lake's id of the table's file ``inner`` (NFS3ERR_IO: a partition's number
        could not be saved)."""
        try:
            return lake_id(slot, self.inner_ids(slot).local(inner))
        except OSError as err:
            raise NfsError(Nfsstat3.NFS3ERR_IO, f"cannot save a partition's id: {err}") from err

    def out_nowait(self, slot: int, inner: int) -> FileId | None:
        """`out`, or None for a ``/partitions`` entry (numbering one may save the map)."""
        return None if inner >= PARTITION_BASE else self.out(slot, inner)

    def prepare(self, slot: int, inners: Iterable[int]) -> None:
        """Number the partitions among ``inners`` with one save (a READDIR page)."""
        try:
            self.inner_ids(slot).prepare(inners)
        except OSError as err:
            raise NfsError(Nfsstat3.NFS3ERR_IO, f"cannot save a partition's id: {err}") from err

    def inner(self, slot: int, local: int) -> FileId:
        """The table's own id of the lake's ``local`` (STALE: a handle of an earlier server)."""
        inner = self.inner_ids(slot).inner(local)
        if inner is None:
            raise NfsError(Nfsstat3.NFS3ERR_STALE, "a handle of an earlier server")
        return inner

    # ------------------------------------------------------------ use

    @contextmanager
    def using(self, slot: int, path: str) -> Iterator[LakeTable]:
        """The table at ``path`` (slot ``slot``), open for the duration of one call."""
        entry = self._acquire(slot, path)
        try:
            yield entry.table
        finally:
            with self._lock:
                entry.active -= 1
                entry.last_used = self._state.clock()
        self._evict()

    @contextmanager
    def if_open(self, slot: int) -> Iterator[LakeTable | None]:
        """The table of ``slot`` for one call if it is open now, else None (opens nothing)."""
        with self._lock:
            entry = self._open.get(slot)
            if entry is not None:
                entry.active += 1
        if entry is None:
            yield None
            return
        try:
            yield entry.table
        finally:
            with self._lock:
                entry.active -= 1
                entry.last_used = self._state.clock()

    def is_open(self, slot: int) -> bool:
        """Whether the table of ``slot`` is open now."""
        with self._lock:
            return slot in self._open

    def is_refused(self, slot: int) -> bool:
        """Whether the server may not open the table of ``slot`` (until the next listing)."""
        return slot in self._refused

    def forget_refused(self) -> None:
        """Try every table again (a new listing: permissions may have changed)."""
        self._refused.clear()

    def open_tables(self) -> dict[str, TableFs]:
        """Return the table faces open now, by table path."""
        return {path: t.fs for path, t in self.open_entries().items()}

    def open_entries(self) -> dict[str, LakeTable]:
        """Return the tables open now, by table path."""
        with self._lock:
            items = list(self._open.items())
        return {self._state.slots.table_of(slot) or "?": e.table for slot, e in items}

    def _acquire(self, slot: int, path: str) -> _Open:
        with self._lock:
            if self._closed:
                raise NfsError(Nfsstat3.NFS3ERR_IO, "the lake is closed")
            if slot in self._refused:  # tried again after the next listing, not per call
                raise NfsError(Nfsstat3.NFS3ERR_ACCES, f"{path}: the server may not open it")
            entry = self._open.get(slot)
            if entry is not None:
                entry.active += 1
                self._open.move_to_end(slot)
                return entry
            opening = self._opening.setdefault(slot, threading.Lock())
        with opening:  # one opener of a table at a time, and none while it closes
            with self._lock:
                entry = self._open.get(slot)
                if entry is not None:
                    entry.active += 1
                    self._open.move_to_end(slot)
                    return entry
            try:
                table = self._opener(path)
            except (AuthenticationError, PermissionDenied) as err:
                self._refused.add(slot)
                raise NfsError(Nfsstat3.NFS3ERR_ACCES, f"{path}: {err}") from err
            except NotFound as err:
                raise NfsError(Nfsstat3.NFS3ERR_STALE, f"{path}: {err}") from err
            except PosixLakeError as err:
                raise nfs_error(err) from err
            except OSError as err:
                raise NfsError(Nfsstat3.NFS3ERR_IO, f"{path}: {err}") from err
            entry = _Open(table, verifier_of(table.target), active=1, last_used=self._state.clock())
            with self._lock:
                closed = self._closed
                if not closed:
                    self._open[slot] = entry
                    self.opened += 1
            if closed:  # the server stopped while this table opened
                self._close_table(slot, entry)
                raise NfsError(Nfsstat3.NFS3ERR_IO, "the lake is closed")
            logger.info("opened table %s", path)
            return entry

    # ------------------------------------------------------------ closing

    def _evict(self) -> None:
        """Close least recently used idle tables while more than ``max_open`` are open.

        A table used less than ``keep_open`` seconds ago stays while at most twice
        ``max_open`` are open; past that (a scan reading every table of a large lake) the
        least recently used go too, so that the open tables (file descriptors, timer
        threads) stay bounded whatever the lake's size. Never one with a call in flight
        or a staged write.
        """
        while True:
            with self._lock:
                if len(self._open) <= self._max_open:
                    return
                now = self._state.clock()
                crowded = len(self._open) > 2 * self._max_open
                candidates = [
                    (slot, e)
                    for slot, e in self._open.items()
                    if e.active == 0 and (crowded or now - e.last_used >= self._keep_open)
                ]
            if not any(self._close_idle(slot, e) for slot, e in candidates):
                logger.debug(
                    "%d tables open (bound %d): none idle", len(self._open), self._max_open
                )
                return

    def _close_idle(self, slot: int, e: _Open) -> bool:
        """Close the table of ``slot`` if it is still ``e``, idle, without staged writes.

        Holds the slot's opening lock throughout: a call arriving meanwhile waits for the
        close and then opens the table again (never a second face beside the closing one:
        it would take a second journal directory and a second scratch lock). The table
        leaves the LRU before its staged writes are counted, so no write can slip in
        between the count and the close.
        """
        with self._opening_lock(slot):
            with self._lock:
                if self._open.get(slot) is not e or e.active:
                    return False  # used meanwhile
                del self._open[slot]
            if e.table.fs.stats().staged_writers:
                with self._lock:  # back, still the least recently used
                    self._open[slot] = e
                    self._open.move_to_end(slot, last=False)
                return False
            self._close_table(slot, e)
            return True

    def _opening_lock(self, slot: int) -> threading.Lock:
        with self._lock:
            return self._opening.setdefault(slot, threading.Lock())

    def close_gone(self, tables: frozenset[str]) -> None:
        """Close the idle open tables that are not among ``tables`` (a new listing)."""
        with self._lock:
            gone = [
                (slot, e)
                for slot, e in self._open.items()
                if e.active == 0 and self._state.slots.table_of(slot) not in tables
            ]
        for slot, e in gone:
            with self._opening_lock(slot):  # as in _close_idle: no open during the close
                with self._lock:
                    if self._open.get(slot) is not e or e.active:
                        continue
                    del self._open[slot]
                self._close_table(slot, e)

    def _close_table(self, slot: int, e: _Open) -> None:
        if verifier_of(e.table.target) != e.verifier:
            # it lost staged data: the lake's verifier must not go back to what its
            # writers hold once the table is no longer open (evicted, gone, stopped)
            with self._lock:
                self._retired += 1
        close = getattr(e.table.target, "close", None)
        (close if callable(close) else e.table.fs.close)()
        logger.info("closed table %s", self._state.slots.table_of(slot))

    def close(self) -> int:
        """Close every open table (none opens after); return their staged writes kept in
        the journals for the next start (see `TableFs.close`)."""
        with self._lock:
            self._closed = True
            entries = list(self._open.items())
            self._open.clear()
        unfinished = 0
        for slot, e in entries:
            self._close_table(slot, e)
            unfinished += e.table.fs.unfinished_at_close
        return unfinished

    # ------------------------------------------------------------ generations, verifier

    def write_verifier(self) -> bytes:
        """Return one WRITE/COMMIT verifier for the lake: new per boot, and whenever the
        verifier of an open table changes (it lost staged data)."""
        digest = hashlib.sha256(self._boot)
        with self._lock:
            entries = list(self._open.items())
            digest.update(self._retired.to_bytes(8, "big"))
        for slot, e in entries:
            now = verifier_of(e.table.target)
            if now != e.verifier:
                digest.update(slot.to_bytes(8, "big") + now)
        return digest.digest()[:8]

    def generation(self, slot: int, path: str, inner: FileId) -> bytes:
        """Return the handle generation of the table's file ``inner``.

        The table face gives data.csv and schema.sql (and each partition's data.csv) a
        generation fixed at its start (the table's version then), for the life of a
        single-table server, and a new one if the table is replaced under it (a
        restore). A lake closes and reopens its tables (the LRU), so it keeps the first
        generation of this boot across reopenings, while the table is the same table
        and no open face of it saw it replaced. (Scratch files' generations are per
        face: never kept, as their ids are handed out again.) A ``/partitions`` entry's
        also carries the epoch of the table's partition map (:class:`PartitionIds`): the
        handles numbered by a map that was dropped are stale.
        """
        if inner >= PARTITION_BASE:  # numbered by the table's partition map: its epoch too
            epoch = self.inner_ids(slot).partitions.epoch
            gen = self._generation(slot, path, inner)
            return hashlib.sha256(gen + epoch).digest()[:8]
        return self._generation(slot, path, inner)

    def generation_nowait(self, slot: int, inner: FileId, table: LakeTable) -> bytes | None:
        """`generation` of a file of the open ``table`` (slot ``slot``) if that needs no
        waiting and changes nothing: the face's ``generation_nowait`` answers, and the
        generation kept for the file is already settled for this face; else None (then
        call `generation`). Never for a ``/partitions`` entry (its map's epoch)."""
        nowait = getattr(table.target, "generation_nowait", None)
        if nowait is None or inner >= PARTITION_BASE:
            return None
        gen: bytes | None = nowait(inner)
        if gen is None:
            return None
        if inner not in KEPT_GENERATIONS:
            data_gen: bytes | None = nowait(DATA_CSV_ID)
            if data_gen is None:
                return None
            if gen != data_gen:
                return gen
        table_gen: bytes | None = nowait(ROOT_ID)
        if table_gen is None:
            return None
        with self._lock:
            kept = self._file_gens.get(slot)
            if (
                kept is None
                or kept.table_gen != table_gen
                or kept.face() is not table
                or kept.seen.get(inner) != gen
            ):
                return None  # `generation` would note something: let it
            return kept.kept.get(inner)

    def _generation(self, slot: int, path: str, inner: FileId) -> bytes:
        with self.using(slot, path) as t:
            gen = t.target.generation(inner)
            # data.csv, schema.sql and a partition's data.csv: what data.csv's generation is
            if inner not in KEPT_GENERATIONS and gen != t.target.generation(DATA_CSV_ID):
                return gen
            table_gen = t.target.generation(ROOT_ID)
        with self._lock:
            kept = self._file_gens.get(slot)
            face = None if kept is None else kept.face()
            other = kept is None or kept.table_gen != table_gen  # another table at the path
            replaced = kept is not None and face is t and kept.seen.get(inner, gen) != gen
            if kept is None or other or replaced:
                kept = self._file_gens[slot] = _KeptGens(table_gen, weakref.ref(t))
            elif face is not t:  # reopened: what the new face says is its own start
                kept.face, kept.seen = weakref.ref(t), {}
            kept.seen[inner] = gen
            return kept.kept.setdefault(inner, gen)
