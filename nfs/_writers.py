"""Who writes ``data.csv``: writers, their stagings, what each client was shown.

The rules these records serve are in :mod:`nfs.tableview` (module docstring) and
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

from nfs._journal import JournalFile
from nfs._staging import Base, Staging, read_all
from nfs.rpc import CallContext

__all__ = ["Bounded", "ClientPages", "Shadows", "Writer", "WriterKey"]

logger = logging.getLogger(__name__)

_LOCAL: Final = "local"
_PUT_CHUNK: Final = 4 << 20
_SYNC_PUT: Final = 16 << 20  # larger shadows are written in the background
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

    @classmethod
    def of(cls, ctx: CallContext) -> WriterKey:
        """Return the writer that makes the call ``ctx``."""
        return cls(ctx.peer or _LOCAL, ctx.uid, ctx.gid)

    def __str__(self) -> str:
        return f"{self.peer} uid={self.uid} gid={self.gid}"


@dataclass
class Writer:
    """One writer's pending content of ``data.csv``.

    Attributes:
        key: who writes.
        staging: the content as this writer wrote it, over its base.
        write_id: names the Delta commit that applies it (and its journal file).
        journal: the durable record of the staging (None until the first operation).
        settled: the last operation was a FILE_SYNC WRITE that left a complete rewrite
            (on a line boundary): applied when this writer goes on to anything else.
    """

    key: WriterKey
    staging: Staging
    write_id: str = field(default_factory=lambda: secrets.token_hex(12))
    journal: JournalFile | None = None
    settled: bool = False


class Bounded(Generic[_K, _V]):
    """A dict that forgets its least recently set entries past ``limit`` (per-client state)."""

    def __init__(self, limit: int) -> None:
        """Keep at most ``limit`` entries."""
        self._limit = limit
        self._items: OrderedDict[_K, _V] = OrderedDict()

    def set(self, key: _K, value: _V) -> None:
        """Set ``key``, making it the most recent."""
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self._limit:
            self._items.popitem(last=False)

    def get(self, key: _K) -> _V | None:
        """Return the value of ``key`` or None."""
        return self._items.get(key)

    def pop(self, key: _K) -> _V | None:
        """Remove and return the value of ``key`` (None if absent)."""
        return self._items.pop(key, None)


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


class ClientPages:
    """Each client's page of data.csv after its last append: the base it appended to plus
    the lines it wrote. With a stale base no version was ever those bytes, yet the
    client's next page-widened append resends them (see ``TableFs._base_for``).

    The last ``limit`` clients' pages are kept in memory and in ``directory``, one small
    file per client written atomically (not fsynced: like the shadows, a presentation aid
    for matching), so a restarted server still matches them.
    """

    def __init__(self, directory: Path, limit: int) -> None:
        """Use ``directory`` (created 0700)."""
        self._dir = directory
        self._limit = limit
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._pages: Bounded[str, tuple[int, Staging]] = Bounded(limit)

    def _path(self, peer: str) -> Path:
        return self._dir / (hashlib.sha256(peer.encode()).hexdigest()[:24] + ".page")

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
        path = self._path(peer)
        tmp = path.with_suffix(f".{threading.get_ident()}.tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(json.dumps(head).encode() + b"\n")
                f.write(data)
            os.replace(tmp, path)
            files = sorted(self._dir.glob("*.page"), key=lambda p: p.stat().st_mtime_ns)
            for old in files[: -self._limit]:
                old.unlink(missing_ok=True)
        except OSError:
            logger.warning("could not keep the page of %s", peer, exc_info=True)
            tmp.unlink(missing_ok=True)
            path.unlink(missing_ok=True)  # an older page must not come back at a restart

    def get(self, peer: str, presented: Callable[[int], Base | None]) -> tuple[int, Staging] | None:
        """Return ``(version, page)`` of ``peer``, or None; ``presented(v)``: the bytes
        of version ``v`` as shown (a page kept on disk is rebuilt over them, and dropped
        when they are not what they were)."""
        got = self._pages.get(peer)
        if got is not None:
            return got
        try:
            raw = self._path(peer).read_bytes()
            line, _, data = raw.partition(b"\n")
            head = json.loads(line)
            if head["peer"] != peer:
                return None
            version, base_version = int(head["version"]), int(head["base_version"])
            base_size, low = int(head["base_size"]), int(head["low"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        base = presented(base_version)
        if base is None or base.size != base_size or not 0 <= low <= base_size:
            return None
        page = Staging(base, base_version=base_version, touched=0.0, mtime=0.0)
        page.write(low, data, touched=0.0, mtime=0.0)
        self._pages.set(peer, (version, page))
        return version, page

    def forget(self, peer: str) -> None:
        """Forget ``peer``'s page."""
        self._pages.pop(peer)
        self._path(peer).unlink(missing_ok=True)

    def clear(self) -> None:
        """Forget every page (the table was replaced)."""
        self._pages = Bounded(self._limit)
        for path in self._dir.glob("*.page"):
            path.unlink(missing_ok=True)
