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
  ``/versions`` ids, the ``/versions/<N>/changes.csv`` ids and the scratch ids. Any other
  id the table face may hand out is given a number per boot (class 7): its handles do not
  survive a restart (they are answered NFS3ERR_STALE, never wrong data).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
from pathlib import Path
from typing import Final

from nfs.protocol.vfs import FileId
from nfs.table.state import SCRATCH_BASE, VERSION_BASE, VERSION_CHANGES_BASE

__all__ = [
    "LOCAL_BITS",
    "MAX_SLOT",
    "InnerIds",
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
_DYNAMIC: Final = 7


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


class InnerIds:
    """The packing of one table's ids into ``LOCAL_BITS`` (thread-safe).

    The per-boot numbers of class 7 are kept per table for the life of the LakeFs.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._to_local: dict[int, int] = {}
        self._to_inner: dict[int, int] = {}

    def local(self, inner: int) -> int:
        """Return the packed id of the table face's ``inner`` id."""
        for cls in range(len(_RANGES) - 1, -1, -1):
            base = _RANGES[cls]
            if base <= inner and inner - base <= _OFFSET_MASK:
                return cls << _CLASS_SHIFT | (inner - base)
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
        """Return the table face's id of a packed id (None: unknown this boot)."""
        cls, offset = local >> _CLASS_SHIFT, local & _OFFSET_MASK
        if cls < len(_RANGES):
            return FileId(_RANGES[cls] + offset)
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
        self._path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._path.with_name(self._path.name + ".tmp")
        with open(tmp, "w") as fh:
            json.dump(self._slots, fh, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self._path)
