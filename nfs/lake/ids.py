"""File ids of a lake: a table slot in the high bits, the table's own id in the low bits.

A lake FileId (a u64) is ``slot << LOCAL_BITS | local``:

- slot 0 holds the lake's own directories: the root is local 1; a prefix directory is
  local ``hash(path)`` (40 bits, never 0 or 1; probed on the rare collision, in path order);
- slot 1 .. ``MAX_SLOT`` is one table. A table's first-choice slot is a hash of its path
  relative to the root; a collision takes the next free slot. The assignment is recorded
  in ``slots.json`` in the lake's state directory and reloaded at start, so a table keeps
  its slot (and every handle into it stays valid) across restarts while that file is
  kept; the slot of a removed table is kept too (a table made again at the same path gets
  it back; its old handles are stale by the table's own generation);
- local is the table face's own id (:mod:`nfs.table.state`), packed into ``LOCAL_BITS``:
  a 3-bit class and a 37-bit offset into that class's range: the fixed ids, the
  ``/versions`` ids, the ``/versions/<N>/changes.csv`` ids and the scratch ids;
- a ``/partitions`` directory's id (``PARTITION_BASE`` + twice a 62-bit hash of its path,
  +1 for its ``data.csv``: 64 bits, too wide to pack) is class 4 with twice a small number
  (+1 for its data.csv): the number the table's :class:`PartitionIds` gives it, kept in
  ``partitions/<hash of the table's path>.json`` in the lake's state directory, written
  and fsynced before the id is handed out, so a partition's handles survive a restart
  while the partition exists. A number is never given to two partitions: a map file
  that is missing, damaged or another table's is dropped whole and the table's partition
  handles get a new epoch in their generation (every old one is then NFS3ERR_STALE,
  never another partition's);
- any other id the table face may hand out is given a number per boot (class 7): its
  handles do not survive a restart (they are answered NFS3ERR_STALE, never wrong data).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from nfs.protocol.vfs import FileId
from nfs.table.partitions import PARTITION_BASE
from nfs.table.state import SCRATCH_BASE, VERSION_BASE, VERSION_CHANGES_BASE
from posixlake.storage import fsync_dir

__all__ = [
    "LOCAL_BITS",
    "MAX_SLOT",
    "InnerIds",
    "PartitionIds",
    "SlotMap",
    "lake_id",
    "path_hash",
    "split_id",
]

logger = logging.getLogger(__name__)

LOCAL_BITS: Final = 40
SLOT_BITS: Final = 64 - LOCAL_BITS
MAX_SLOT: Final = (1 << SLOT_BITS) - 1
_LOCAL_MASK: Final = (1 << LOCAL_BITS) - 1
_CLASS_SHIFT: Final = 37
_OFFSET_MASK: Final = (1 << _CLASS_SHIFT) - 1
_RANGES: Final = (0, VERSION_BASE, VERSION_CHANGES_BASE, SCRATCH_BASE)
"""The start of each packed class of table-face ids (class = index)."""
_PARTITION: Final = 4
"""The class of a partition directory (2n) and its data.csv (2n + 1)."""
_DYNAMIC: Final = 7
MAX_PARTITION_NUMBER: Final = _OFFSET_MASK >> 1
_U64: Final = (1 << 64) - 1


def path_hash(*parts: str) -> int:
    """Return a stable 64-bit hash of ``parts`` (sha256, not Python's per-process hash)."""
    digest = hashlib.sha256("\0".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big")


def lake_id(slot: int, local: int) -> FileId:
    """Return the lake id of ``local`` in ``slot``."""
    return FileId(slot << LOCAL_BITS | local)


def split_id(fid: int) -> tuple[int, int]:
    """Return ``(slot, local)`` of a lake id."""
    return fid >> LOCAL_BITS, fid & _LOCAL_MASK


def _fsync_write(path: Path, text: str) -> None:
    """Replace ``path`` by ``text`` atomically and durably (a temporary file, fsynced, renamed
    over it, then the directory fsynced)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


class PartitionIds:
    """The small numbers of one table's ``/partitions`` directories (thread-safe).

    A partition directory's table-face id (``PARTITION_BASE`` and up, even) gets the next
    number 1, 2, ... the first time the lake hands it out; the map is saved (atomically,
    fsynced) before :meth:`numbers` returns, so an id a client holds is in the file. Its
    ``epoch`` (random, saved with it) goes into the handles' generation: a map dropped
    because it is missing, unreadable, malformed, or another table's starts a new epoch,
    so the handles numbered by the dropped one are stale instead of naming whichever
    partition gets their number next.

    Args:
        path: the JSON file (None: kept in memory, the numbers per boot).
        table: the table's path relative to the lake root (recorded and checked).
    """

    def __init__(self, path: Path | None, table: str) -> None:
        self._path = path
        self._table = table
        self._lock = threading.Lock()
        self._numbers: dict[int, int] = {}
        self._ids: dict[int, int] = {}
        self.epoch = secrets.token_bytes(8)
        if path is None or not path.exists():
            return
        try:
            raw = json.loads(path.read_text())
            epoch, numbers = self._parse(raw)
        except (ValueError, OSError) as err:
            logger.warning(
                "%s dropped (%s): the partition handles of %s from before are stale",
                path,
                err,
                table,
            )
            return
        self.epoch = epoch
        self._numbers = numbers
        self._ids = {n: fid for fid, n in numbers.items()}

    def _parse(self, raw: object) -> tuple[bytes, dict[int, int]]:
        if not isinstance(raw, dict) or raw.get("table") != self._table:
            raise ValueError(f"not the partition map of {self._table!r}")
        epoch, ids = raw.get("epoch"), raw.get("ids")
        if not isinstance(epoch, str) or len(epoch) != 16 or not isinstance(ids, dict):
            raise ValueError("no epoch or ids")
        numbers: dict[int, int] = {}
        seen: set[int] = set()
        for key, n in ids.items():
            fid = int(key)  # ValueError: not a number
            ok = PARTITION_BASE <= fid <= _U64 and fid % 2 == 0 and str(fid) == key
            if not ok or type(n) is not int or not 1 <= n <= MAX_PARTITION_NUMBER or n in seen:
                raise ValueError(f"entry {key!r}: {n!r}")
            numbers[fid] = n
            seen.add(n)
        return bytes.fromhex(epoch), numbers

    def numbers(self, dirs: Iterable[int]) -> list[int]:
        """Return the number of each partition directory id in ``dirs``, giving the new
        ones the next numbers (saved before returning: one write for them all).

        Raises:
            OverflowError: more than ``MAX_PARTITION_NUMBER`` partitions ever seen.
            OSError: the map cannot be saved (no number is then given).
        """
        with self._lock:
            wanted = list(dirs)
            new = [d for d in dict.fromkeys(wanted) if d not in self._numbers]
            if new:
                first = max(self._ids, default=0) + 1
                if first + len(new) - 1 > MAX_PARTITION_NUMBER:
                    raise OverflowError("too many partitions in one table")
                numbers = dict(self._numbers)
                numbers.update((d, first + i) for i, d in enumerate(new))
                self._save(numbers)  # before any of them is handed out
                self._numbers = numbers
                self._ids.update((n, d) for d, n in numbers.items())
            return [self._numbers[d] for d in wanted]

    def dir_of(self, number: int) -> int | None:
        """The partition directory id of ``number`` (None: none has it, in this epoch)."""
        with self._lock:
            return self._ids.get(number)

    def _save(self, numbers: dict[int, int]) -> None:
        if self._path is None:
            return
        body = {
            "table": self._table,
            "epoch": self.epoch.hex(),
            "ids": {str(d): n for d, n in sorted(numbers.items(), key=lambda kv: kv[1])},
        }
        _fsync_write(self._path, json.dumps(body))


class InnerIds:
    """The packing of one table's ids into ``LOCAL_BITS`` (thread-safe).

    Partition ids are numbered by ``partitions`` (kept across restarts with a state
    directory); the per-boot numbers of class 7 are kept per table for the life of the
    LakeFs.
    """

    def __init__(self, partitions: PartitionIds | None = None) -> None:
        self._lock = threading.Lock()
        self._to_local: dict[int, int] = {}
        self._to_inner: dict[int, int] = {}
        self.partitions = partitions if partitions is not None else PartitionIds(None, "")

    def prepare(self, inners: Iterable[int]) -> None:
        """Number the partition ids among ``inners`` at once (one save of the map for a
        READDIR page, instead of one per entry)."""
        dirs = [i & ~1 for i in inners if i >= PARTITION_BASE]
        if dirs:
            self.partitions.numbers(dirs)

    def local(self, inner: int) -> int:
        """Return the packed id of the table face's ``inner`` id."""
        for cls in range(len(_RANGES) - 1, -1, -1):
            base = _RANGES[cls]
            if base <= inner and inner - base <= _OFFSET_MASK:
                return cls << _CLASS_SHIFT | (inner - base)
        if inner >= PARTITION_BASE:
            (n,) = self.partitions.numbers([inner & ~1])
            return _PARTITION << _CLASS_SHIFT | (2 * n + (inner & 1))
        with self._lock:
            got = self._to_local.get(inner)
            if got is None:
                got = _DYNAMIC << _CLASS_SHIFT | (len(self._to_local) + 1)
                if got & _OFFSET_MASK == 0:  # 2^37 ids of this kind in one boot
                    raise OverflowError("too many unpackable table ids")
                self._to_local[inner] = got
                self._to_inner[got] = inner
            return got

    def inner(self, local: int) -> FileId | None:
        """Return the table face's id of a packed id (None: unknown, from an earlier
        server or an earlier partition map)."""
        cls, offset = local >> _CLASS_SHIFT, local & _OFFSET_MASK
        if cls < len(_RANGES):
            return FileId(_RANGES[cls] + offset)
        if cls == _PARTITION:
            d = self.partitions.dir_of(offset >> 1)
            return None if d is None else FileId(d + (offset & 1))
        with self._lock:
            got = self._to_inner.get(local)
        return None if got is None else FileId(got)


class SlotMap:
    """Which table (path relative to the lake root) has which slot, kept in ``slots.json``.

    Args:
        path: the JSON file (None: kept in memory only, for tests and read-only state).
    """

    def __init__(self, path: Path | None) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._slots: dict[str, int] = {}
        self._tables: dict[int, str] = {}
        raw: object = {}
        if path is not None and path.exists():
            try:
                raw = json.loads(path.read_text())
            except (ValueError, OSError) as err:
                logger.warning("%s unreadable, slots assigned afresh: %s", path, err)
        if not isinstance(raw, dict):
            logger.warning("%s is not a JSON object, slots assigned afresh", path)
            raw = {}
        for table, slot in sorted(raw.items()):
            ok = type(slot) is int and 1 <= slot <= MAX_SLOT and slot not in self._tables
            if not ok:  # damaged: that table gets a slot afresh (its old handles are stale)
                logger.warning("%s: slot %r of %r dropped", path, slot, table)
                continue
            self._slots[str(table)] = slot
            self._tables[slot] = str(table)

    def slot_of(self, table: str) -> int | None:
        """Return the slot of ``table`` if it has one."""
        with self._lock:
            return self._slots.get(table)

    def table_of(self, slot: int) -> str | None:
        """Return the table of ``slot`` (it may no longer exist)."""
        with self._lock:
            return self._tables.get(slot)

    def assign(self, tables: list[str]) -> None:
        """Give every table in ``tables`` a slot (in path order), saving the file if any
        was new."""
        with self._lock:
            new = False
            for table in sorted(tables):
                if table in self._slots:
                    continue
                slot = path_hash("table", table) % MAX_SLOT + 1
                while slot in self._tables:  # a collision: the next free slot
                    slot = slot % MAX_SLOT + 1
                self._slots[table] = slot
                self._tables[slot] = table
                new = True
            if new:
                self._save()

    def _save(self) -> None:
        if self._path is None:
            return
        _fsync_write(self._path, json.dumps(self._slots, sort_keys=True))
