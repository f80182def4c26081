"""Who writes ``data.csv``: writers, their stagings, what each client was shown.

The rules these records serve are in :mod:`nfs.table.tablefs` (module docstring) and
docs/nfs-writes.md. Pure bookkeeping: no I/O, no clock (times come from the caller).
"""

from __future__ import annotations

import hashlib
import json
import logging
import mmap
import os
import secrets
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Generic, TypeVar

from isal import isal_zlib

from nfs.protocol.rpc import CallContext
from nfs.table.journal import JournalFile
from nfs.table.staging import Base, Staging, read_all

__all__ = [
    "Bounded",
    "ClientPages",
    "Coverage",
    "ReadViews",
    "Shadows",
    "Torn",
    "Writer",
    "WriterKey",
    "peer_of",
    "slot_of",
]

logger = logging.getLogger(__name__)

_LOCAL: Final = "local"
_PUT_CHUNK: Final = 4 << 20
_SYNC_PUT: Final = 1 << 20  # larger shadows are written in the background
_K = TypeVar("_K")
_V = TypeVar("_V")


@dataclass(frozen=True)
class WriterKey:
    """A writer of ``data.csv``: one client (its address) as one AUTH_SYS identity.

    The Linux client keeps its source port across reconnects, and libnfs tools open a
    connection each, so the address with the port tells clients apart.
    """

    peer: str
    uid: int
    gid: int
    part: str = ""
    """The file written: "" for ``/data/data.csv``, else a partition's path below
    ``/partitions`` (``region=eu/day=2024-01-01``): one client's edits of two files are
    two stagings."""

    @classmethod
    def of(cls, ctx: CallContext, part: str = "") -> WriterKey:
        """Return the writer that makes the call ``ctx`` (of the file ``part``)."""
        return cls(ctx.peer or _LOCAL, ctx.uid, ctx.gid, part)

    @property
    def slot(self) -> str:
        """The key of what this client read and holds of its file (`ReadViews`, pages,
        its own last edit): the peer, with the partition's path for a partition's file."""
        return slot_of(self.peer, self.part)

    def __str__(self) -> str:
        text = f"{self.peer} uid={self.uid} gid={self.gid}"
        return f"{text} partition={self.part}" if self.part else text


def slot_of(peer: str, part: str) -> str:
    """The key of what ``peer`` read and holds of the file ``part`` (see `WriterKey.slot`)."""
    return f"{peer}\0{part}" if part else peer


def peer_of(slot: str) -> str:
    """The client address of a slot (`slot_of`'s ``peer``)."""
    return slot.partition("\0")[0]


class Coverage:
    """Which bytes of a staging hold data: its base's, or ones a WRITE sent.

    The Linux client sends WRITEs in parallel and they arrive out of order; a WRITE past
    the end leaves a range no WRITE has filled yet (a *hole*, read as zeros). Content
    with a hole is never applied: the missing WRITE is still on its way. A truncation
    that extends the file fills with zeros on purpose (ftruncate) and is no hole.
    """

    def __init__(self, base_size: int) -> None:
        """Start with the base's bytes ``[0, base_size)`` present."""
        self._ranges: list[tuple[int, int]] = [(0, base_size)] if base_size else []
        self._written: list[tuple[int, int]] = []
        self._size = base_size

    @staticmethod
    def _add(ranges: list[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
        if lo >= hi:
            return ranges
        out: list[tuple[int, int]] = []
        for a, b in ranges:
            if b < lo or a > hi:
                out.append((a, b))
            else:
                lo, hi = min(lo, a), max(hi, b)
        out.append((lo, hi))
        return sorted(out)

    def write(self, offset: int, count: int) -> None:
        """A WRITE of ``count`` bytes at ``offset``."""
        self._ranges = self._add(self._ranges, offset, offset + count)
        self._written = self._add(self._written, offset, offset + count)
        self._size = max(self._size, offset + count)

    def truncate(self, size: int) -> None:
        """A truncation to ``size`` (cut, or extend with zeros)."""
        if size >= self._size:
            self._ranges = self._add(self._ranges, self._size, size)
            self._written = self._add(self._written, self._size, size)
        else:
            self._ranges = [(a, min(b, size)) for a, b in self._ranges if a < size]
            self._written = [(a, min(b, size)) for a, b in self._written if a < size]
        self._size = size

    @staticmethod
    def _gaps(ranges: list[tuple[int, int]], size: int) -> list[tuple[int, int]]:
        out, at = [], 0
        for a, b in ranges:
            if a > at:
                out.append((at, a))
            at = max(at, b)
        if at < size:
            out.append((at, size))
        return out

    def holes(self) -> list[tuple[int, int]]:
        """Return the ranges of ``[0, size)`` that no WRITE (nor the base) has filled."""
        return self._gaps(self._ranges, self._size)

    def all_written(self) -> bool:
        """Whether WRITEs (or truncations) gave every byte: none is the base's any more."""
        return not self._gaps(self._written, self._size)


class EditDigest:
    """A checksum of the bytes a staging's WRITEs laid over its base, and their range.

    It names an edit across server restarts (commit metadata ``posixlake.nfs_edit``): a
    client resends its WRITEs after the write verifier changes, and a resend of an edit
    a crashed server had committed has the same range and bytes. Kept as the WRITEs
    arrive when they arrive in order (no second pass over the bytes at apply); any
    other order is summed from the staging when asked.
    """

    def __init__(self) -> None:
        """Start with nothing written."""
        self.lo = -1
        self.hi = -1
        self.crc = 0
        self.running = True

    def seed(self, offset: int) -> int | None:
        """The CRC a WRITE at ``offset`` continues (0 for the first), or None when the
        sum is not kept running past it (see :meth:`write`)."""
        if self.lo < 0:
            return 0
        return self.crc if self.running and offset == self.hi else None

    def write(self, offset: int, data: bytes | memoryview, *, crc: int | None = None) -> None:
        """Note a WRITE of ``data`` at ``offset`` (``crc``: the CRC-32 of ``data``
        continuing :meth:`seed`, when the caller summed it: not summed twice)."""
        if self.lo < 0:
            self.lo, self.hi = offset, offset + len(data)
            self.crc = isal_zlib.crc32(data) if crc is None else crc
        elif self.running and offset == self.hi:
            self.hi += len(data)
            self.crc = isal_zlib.crc32(data, self.crc) if crc is None else crc
        else:
            self.running = False

    def truncate(self, size: int) -> None:
        """Note a truncation (one before any WRITE, to 0, keeps the running sum)."""
        if self.lo >= 0 or size != 0:
            self.running = False

    def of(self, staging: Staging) -> tuple[int, int, int] | None:
        """Return ``(lo, hi, crc)`` of the bytes written over the base (None: nothing)."""
        if staging.overlay_size == 0:
            return None
        lo, hi = staging.overlay_range()
        if self.running and (self.lo, self.hi) == (lo, hi):
            return lo, hi, self.crc
        crc = 0
        for pos in range(lo, hi, _PUT_CHUNK):
            crc = isal_zlib.crc32(staging.read(pos, min(_PUT_CHUNK, hi - pos))[0], crc)
        return lo, hi, crc


@dataclass
class Writer:
    """One writer's pending content of ``data.csv``.

    Attributes:
        key: who writes.
        staging: the content as this writer wrote it, over its base.
        write_id: names the Delta commit that applies it (and its journal file).
        journal: the durable record of the staging (None until the first operation).
        flushed: the last operation was a COMMIT or a FILE_SYNC WRITE (the client
            flushed: its close() or fsync()): content ending mid-line may apply then,
            its last line a record.
        coverage: which bytes are present (content with a hole never applies).
        digest: names the edit across restarts (see :class:`EditDigest`).
        checked: the size of the content when its lines were last checked (a COMMIT).
        resend_check: the writer's first staging since the server started: it may be
            a resend of an edit an earlier boot committed (see ``WriteRules._resent``).
    """

    key: WriterKey
    staging: Staging
    write_id: str = field(default_factory=lambda: secrets.token_hex(12))
    journal: JournalFile | None = None
    flushed: bool = False
    coverage: Coverage = field(init=False)
    digest: EditDigest = field(default_factory=EditDigest)
    checked: int = -1
    resend_check: bool = False

    def __post_init__(self) -> None:
        self.coverage = Coverage(self.staging.size)

    def note_write(self, offset: int, data: bytes | memoryview, *, crc: int | None = None) -> None:
        """Keep the coverage and the digest up to date with a WRITE (``crc``: see
        `EditDigest.write`)."""
        self.coverage.write(offset, len(data))
        self.digest.write(offset, data, crc=crc)

    def note_truncate(self, size: int) -> None:
        """Keep the coverage and the digest up to date with a truncation."""
        self.coverage.truncate(size)
        self.digest.truncate(size)


@dataclass(frozen=True)
class Torn:
    """A client's READs of data.csv came from several versions (oldest first)."""

    versions: tuple[int, ...]


class ReadViews:
    """What each client's READs of data.csv returned: per byte range, the version.

    The base of a client's rewrite is the content it holds, and that comes from its READs
    only: a GETATTR, LOOKUP or ACCESS shows attributes, never bytes (every open sends a
    close-to-open GETATTR; a LOOKUP can come between ``sed``'s read and its RENAME). A
    READ that reaches the end of the file also ends the client's view there. Ranges of
    one version merge; a client whose ranges come from several versions is :class:`Torn`.
    """

    _MAX_RANGES: Final = 64

    def __init__(self, limit: int) -> None:
        """Remember the last ``limit`` clients."""
        self._views: Bounded[str, list[tuple[int, int, int]]] = Bounded(limit, peer_of)

    def record(self, peer: str, version: int, offset: int, end: int, eof: bool) -> None:
        """Note that ``peer`` READ bytes ``[offset, end)`` of ``version`` (``eof``: the end)."""
        ranges = self._views.get(peer) or []
        if eof:
            ranges = [(a, min(b, offset), v) for a, b, v in ranges if a < offset]
        out = [(a, b, v) for a, b, v in ranges if b <= offset or a >= end]
        for a, b, v in ranges:
            if a < offset < b:
                out.append((a, offset, v))
            if a < end < b and not eof:
                out.append((end, b, v))
        out.append((offset, end, version))
        out.sort()
        merged: list[tuple[int, int, int]] = []
        for a, b, v in out:
            if merged and merged[-1][2] == v and merged[-1][1] >= a:
                merged[-1] = (merged[-1][0], max(b, merged[-1][1]), v)
            elif a < b:
                merged.append((a, b, v))
        if len(merged) > self._MAX_RANGES:  # only ranges of several versions stay apart
            merged = merged[: self._MAX_RANGES // 2] + merged[-self._MAX_RANGES // 2 :]
        self._views.set(peer, merged)

    def base(self, peer: str) -> int | Torn | None:
        """Return the version ``peer`` read, :class:`Torn`, or None (it read nothing)."""
        ranges = self._views.get(peer)
        if not ranges:
            return None
        versions = sorted({v for _a, _b, v in ranges})
        return versions[0] if len(versions) == 1 else Torn(tuple(versions))

    def forget(self, peer: str) -> None:
        """Forget what ``peer`` (a slot) read: a client process that is gone."""
        self._views.pop(peer)

    def slots(self) -> list[str]:
        """The slots whose reads are remembered."""
        return self._views.key_list()

    def slots_of(self, peer: str) -> list[str]:
        """The slots of the client address ``peer`` whose reads are remembered."""
        return self._views.keys_of(peer)

    def wrote(self, peer: str, version: int) -> None:
        """``peer``'s own edit made ``version``: what it holds now is that edit's content
        (the whole of ``version`` when the table became exactly that)."""
        self._views.set(peer, [(0, 1 << 62, version)])


class Bounded(Generic[_K, _V]):
    """A dict that forgets its least recently set entries past ``limit`` (per-client state).

    With ``group`` (a key's client address), the keys of one client are found without
    a walk over all of them (`keys_of`): a libnfs process' mount asks on every call.
    """

    def __init__(self, limit: int, group: Callable[[_K], str] | None = None) -> None:
        """Keep at most ``limit`` entries."""
        self._limit = limit
        self._items: OrderedDict[_K, _V] = OrderedDict()
        self._group = group
        self._groups: dict[str, set[_K]] = {}

    def set(self, key: _K, value: _V) -> None:
        """Set ``key``, making it the most recent."""
        self._items[key] = value
        self._items.move_to_end(key)
        if self._group is not None:
            self._groups.setdefault(self._group(key), set()).add(key)
        while len(self._items) > self._limit:
            old, _ = self._items.popitem(last=False)
            self._ungroup(old)

    def get(self, key: _K) -> _V | None:
        """Return the value of ``key`` or None."""
        return self._items.get(key)

    def pop(self, key: _K) -> _V | None:
        """Remove and return the value of ``key`` (None if absent)."""
        if key not in self._items:
            return None
        self._ungroup(key)
        return self._items.pop(key)

    def _ungroup(self, key: _K) -> None:
        if self._group is None:
            return
        name = self._group(key)
        keys = self._groups.get(name)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._groups[name]

    def key_list(self) -> list[_K]:
        """The keys, least recently set first."""
        return list(self._items)

    def keys_of(self, group: str) -> list[_K]:
        """The keys in ``group`` (a Bounded made without ``group`` has none)."""
        return list(self._groups.get(group, ()))


class Shadows:
    """data.csv as writers wrote it, per version they produced, kept on disk.

    While the table is exactly what a writer wrote, the server shows that writer's bytes
    (its page cache holds them); a stale page-widened append from it later must be matched
    against them, also after a restart. Files ``<version>-<commit stamp>.csv`` under
    ``directory`` (the stamp tells a version of a table restored under the same id from
    the version that was shadowed), the ``keep`` newest, written atomically, mapped when
    read. A presentation cache: losing it costs matching, never data — so a large one is
    written by a background thread (its reply does not wait for the disk), served from
    the content it was given until then.
    """

    def __init__(self, directory: Path, keep: int) -> None:
        """Use ``directory`` (created 0700)."""
        self._dir = directory
        self._keep = keep
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._views: dict[tuple[int, int], memoryview] = {}
        self._kept = {(v, stamp) for v, stamp, _ in self._files()}  # no syscall per READ
        self._pending: dict[tuple[int, int], tuple[Base, threading.Thread]] = {}
        self._lock = threading.Lock()

    def _files(self) -> list[tuple[int, int, Path]]:
        out = []
        for path in self._dir.glob("*.csv"):
            version, _, stamp = path.stem.partition("-")
            if version.isdigit() and stamp.isdigit():
                out.append((int(version), int(stamp), path))
        return sorted(out)

    def holds_any(self) -> bool:
        """Whether any version has a shadow (kept or being written): most tables have
        none, and a READ then asks no more."""
        return bool(self._kept)

    def versions(self) -> list[tuple[int, int]]:
        """Return the (version, stamp) pairs with a shadow, oldest first."""
        with self._lock:
            return sorted(self._kept)

    def put(self, version: int, stamp: int, content: Base) -> None:
        """Keep ``content`` as the bytes shown for ``version`` (drops the oldest past keep).

        ``content`` must not change afterwards. Written chunk by chunk and mapped back
        when read: a large content is not held in memory twice.
        """
        memo = (version, stamp)
        with self._lock:
            self._views.pop(memo, None)
            self._kept.add(memo)
        if content.size <= _SYNC_PUT:
            self._write(memo, content)
            return
        thread = threading.Thread(
            target=self._write, args=(memo, content), name="posixlake-shadow", daemon=True
        )
        with self._lock:
            self._pending[memo] = (content, thread)
        thread.start()

    def _write(self, memo: tuple[int, int], content: Base) -> None:
        version, stamp = memo
        path = self._dir / f"{version}-{stamp}.csv"
        tmp = path.with_suffix(f".{threading.get_ident()}.tmp")
        try:
            with open(tmp, "wb") as f:
                for pos in range(0, content.size, _PUT_CHUNK):
                    f.write(read_all(content, pos, pos + _PUT_CHUNK))
            os.replace(tmp, path)
        except OSError:
            logger.warning("could not keep the shadow of version %d", version, exc_info=True)
            tmp.unlink(missing_ok=True)
            with self._lock:
                self._kept.discard(memo)
                self._pending.pop(memo, None)
            return
        with self._lock:
            self._pending.pop(memo, None)
            self._views.pop(memo, None)  # mapped from the file when read next
            for v, old_stamp, old in self._files()[: -self._keep]:
                self._views.pop((v, old_stamp), None)
                self._kept.discard((v, old_stamp))
                old.unlink(missing_ok=True)

    def flush(self) -> None:
        """Wait for the shadows being written."""
        while True:
            with self._lock:
                threads = [t for _, t in self._pending.values()]
            if not threads:
                return
            for t in threads:
                t.join()

    def get(self, version: int, stamp: int) -> memoryview | None:
        """Return the bytes shown for ``version`` committed at ``stamp``, or None."""
        with self._lock:
            view = self._views.get((version, stamp))
            if view is not None or (version, stamp) not in self._kept:
                return view
            pending = self._pending.get((version, stamp))
            if pending is not None:  # still being written: from the content (a copy)
                view = self._views[(version, stamp)] = read_all(pending[0])
                return view
        path = self._dir / f"{version}-{stamp}.csv"
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size == 0:
                    view = memoryview(b"")
                else:
                    view = memoryview(mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ))
        except FileNotFoundError:
            with self._lock:
                self._kept.discard((version, stamp))
            return None
        with self._lock:
            self._views[(version, stamp)] = view
        return view

    def file(self, version: int, stamp: int) -> Path | None:
        """Return the file of the shadow of ``version`` committed at ``stamp`` once written
        (never changed in place: a journal links it as its base), or None."""
        with self._lock:
            pending = self._pending.get((version, stamp))
        if pending is not None:
            pending[1].join()
        with self._lock:
            if (version, stamp) not in self._kept:
                return None
        path = self._dir / f"{version}-{stamp}.csv"
        return path if path.exists() else None

    def clear(self) -> None:
        """Forget every shadow (the table was replaced)."""
        self.flush()
        with self._lock:
            self._views.clear()
            self._kept.clear()
            for _v, _stamp, path in self._files():
                path.unlink(missing_ok=True)


_SPOILED: Final = b"\0"
"""Written over a page file's first byte before it is rewritten: not a JSON head."""


def _pwrite_all(fd: int, data: bytes) -> None:
    done = 0
    while done < len(data):
        done += os.pwrite(fd, memoryview(data)[done:], done)


class ClientPages:
    """Each client's page of data.csv after its last append: the base it appended to plus
    the lines it wrote. With a stale base no version was ever those bytes, yet the
    client's next page-widened append resends them (see ``WriteRules.base_for``).

    The last ``limit`` clients' pages are kept in memory and in ``directory``, one small
    file per client (not fsynced: like the shadows, a presentation aid for matching), so
    a restarted server still matches them. A client's file is rewritten in place: its
    first byte is spoiled, then the new page is written over it with its length and
    CRC-32 in its head line, then the file is cut to size. A file left half-written (a
    crash in between) fails its check and is not used; creating a file per append
    costs more than the append's own rendering on some file systems (about 0.3 ms on
    ext4 here), and a rename over the old file makes ext4 (auto_da_alloc) write it out.

    A file's name is a digest of the client's address, then one of the slot
    (``<address>-<slot>.page``), so the files of one address (its ``data.csv`` and its
    partition files) are found by name, an earlier boot's too, without reading any.
    Files named by the slot alone (``<slot>.page``, before this scheme) are still read,
    and removed with their slot.
    """

    def __init__(self, directory: Path, limit: int) -> None:
        """Use ``directory`` (created 0700)."""
        self._dir = directory
        self._limit = limit
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._pages: Bounded[str, tuple[int, Staging]] = Bounded(limit, peer_of)
        self._write_lock = threading.Lock()  # one writer of the files at a time
        # the page files there (names), and by client address: forgetting a client that
        # has none (every libnfs process' mount) costs no unlink and no walk
        self._files: set[str] = set()
        self._by_address: dict[str, set[str]] = {}
        for path in directory.glob("*.page"):
            self._known(path.name)

    @staticmethod
    def _digest(text: str, size: int) -> str:
        return hashlib.sha256(text.encode()).hexdigest()[:size]

    def _path(self, peer: str) -> Path:
        """The file of slot ``peer``: named by its address, then by the slot."""
        return self._dir / f"{self._digest(peer_of(peer), 12)}-{self._digest(peer, 24)}.page"

    def _legacy_path(self, peer: str) -> Path:
        """The file of slot ``peer`` as an earlier version named it (by the slot alone)."""
        return self._dir / (self._digest(peer, 24) + ".page")

    def _known(self, name: str) -> None:
        self._files.add(name)
        address, dash, _ = name.partition("-")
        if dash:
            self._by_address.setdefault(address, set()).add(name)

    def _unlink(self, name: str) -> None:
        (self._dir / name).unlink(missing_ok=True)
        self._files.discard(name)
        address, dash, _ = name.partition("-")
        names = self._by_address.get(address) if dash else None
        if names is not None:
            names.discard(name)
            if not names:
                del self._by_address[address]

    def put(self, peer: str, version: int, page: Staging) -> None:
        """Remember ``page`` (content that extends its base) as ``peer``'s, after the
        append that made ``version``."""
        page = page.flattened()
        self._pages.set(peer, (version, page))  # in memory first: the file may fail
        low, data = page.overlay()
        head = {
            "peer": peer,
            "version": version,
            "base_version": page.base_version,
            "base_size": page.base.size,
            "low": low,
        }
        head["length"] = len(data)
        head["crc"] = isal_zlib.crc32(data)
        content = json.dumps(head).encode() + b"\n" + data
        path = self._path(peer)
        try:
            with self._write_lock:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
                try:
                    # the older page is spoiled first: a crash before the new one is
                    # whole leaves no page for this client (matched less well), never
                    # the older one
                    os.pwrite(fd, _SPOILED, 0)
                    _pwrite_all(fd, content)
                    os.ftruncate(fd, len(content))
                finally:
                    os.close(fd)
            legacy = self._legacy_path(peer).name
            if legacy in self._files:  # an older page of this slot must not come back
                self._unlink(legacy)
            self._known(path.name)
            if len(self._files) > self._limit:  # the directory's listing: no walk below it
                files = sorted(self._dir.glob("*.page"), key=lambda p: p.stat().st_mtime_ns)
                for old in files[: -self._limit]:
                    self._unlink(old.name)
        except OSError:
            logger.warning("could not keep the page of %s", peer, exc_info=True)
            self._unlink(path.name)  # an older page must not come back at a restart

    def get(self, peer: str, presented: Callable[[int], Base | None]) -> tuple[int, Staging] | None:
        """Return ``(version, page)`` of ``peer``, or None; ``presented(v)``: the bytes
        of version ``v`` as shown (a page kept on disk is rebuilt over them, and dropped
        when they are not what they were)."""
        got = self._pages.get(peer)
        if got is not None:
            return got
        try:
            try:
                raw = self._path(peer).read_bytes()
            except FileNotFoundError:
                raw = self._legacy_path(peer).read_bytes()
            line, _, data = raw.partition(b"\n")
            head = json.loads(line)
            if head["peer"] != peer:
                return None
            version, base_version = int(head["version"]), int(head["base_version"])
            base_size, low = int(head["base_size"]), int(head["low"])
            # a page written in place carries its length and CRC (a file an earlier
            # version renamed into place has neither: it was written whole)
            if "crc" in head and (
                int(head["length"]) != len(data) or int(head["crc"]) != isal_zlib.crc32(data)
            ):
                return None
        except (OSError, ValueError, KeyError, TypeError):
            return None
        base = presented(base_version)
        if base is None or base.size != base_size or not 0 <= low <= base_size:
            return None
        page = Staging(base, base_version=base_version, touched=0.0, mtime=0.0)
        page.write(low, data, touched=0.0, mtime=0.0)
        self._pages.set(peer, (version, page))
        return version, page

    def forget_client(self, peer: str) -> None:
        """Forget the pages of every slot of the client address ``peer``: those held in
        memory, and every file of that address on disk (an earlier boot's too; a file
        named by the slot alone, before names carried the address, goes with its
        ``data.csv`` slot only)."""
        for slot in self._pages.keys_of(peer):
            self.forget(slot)
        self.forget(peer)
        if self._by_address:  # a digest costs more than the rest: only with files to find
            for name in list(self._by_address.get(self._digest(peer_of(peer), 12), ())):
                self._unlink(name)

    def has_files_of(self, peer: str) -> bool:
        """Whether `forget_client` of the address ``peer`` would remove a file (IO)."""
        if not self._files:
            return False
        if self._by_address and self._digest(peer_of(peer), 12) in self._by_address:
            return True
        # the rest are named by the slot alone (every other name is in _by_address)
        slots = [*self._pages.keys_of(peer), peer]
        return any(self._legacy_path(slot).name in self._files for slot in slots)

    def forget(self, peer: str) -> None:
        """Forget ``peer``'s page."""
        self._pages.pop(peer)
        if self._files:  # names are digests: made only when there are files to look for
            for name in (self._path(peer).name, self._legacy_path(peer).name):
                if name in self._files:
                    self._unlink(name)

    def clear(self) -> None:
        """Forget every page (the table was replaced)."""
        self._pages = Bounded(self._limit, peer_of)
        for path in self._dir.glob("*.page"):
            path.unlink(missing_ok=True)
        self._files.clear()
        self._by_address.clear()
