"""The durable journal of staged ``data.csv`` writes (one file per writer's staging).

A reply of FILE_SYNC to a WRITE, OK to a COMMIT or to a SETATTR of ``data.csv`` promises
that the bytes survive a server crash. Until they are in a Delta commit, they are here:
every WRITE and truncation of a staging is appended to that staging's journal file, and
the file is fsynced before such a reply (a FILE_SYNC append that begins its staging and is
committed in the same call has no journal: its reply promises the commit). The next :class:`~nfs.table.tablefs.TableFs` for the
same table recovers the files it finds (see :meth:`JournalDir.recover`): a staging whose
Delta commit had already been made (its write id is in the commit's metadata) is
removed, any other is restored for its writer, who may go on writing.

File format (``<write id>.wal``): the magic ``PLNFSJ1\\n`` or ``PLNFSJ2\\n``, then
records, each::

    kind (1 byte)  number (u64, big-endian)  length (u32)  data (length bytes)  crc32 (u32)

where the CRC covers kind, number, length and data. Kinds: ``H`` the header (data is
JSON: :class:`JournalHeader`), ``W`` a write (number = offset), ``T`` a truncation
(number = size), and in a ``PLNFSJ2`` journal only, ``B`` a write of bytes equal to the
base's (number = offset; data = the base offset (u64), the length (u64), a seed (u32) and
the CRC-32 of those base bytes continuing that seed (u32), big-endian; the seed lets the
one pass over the bytes also sum the edit's digest, `nfs.table.writers.EditDigest`): a rewrite that equals its base but for a row
journals that row, not the gigabytes around it. A journal is ``PLNFSJ1`` until its
first ``B`` record, which turns the magic to ``PLNFSJ2`` before it is written: a server
of an earlier release, which knows no ``B``, refuses such a journal (``*.bad``) instead
of reading it as ending at its first ``B`` record. Recovery checks each ``B`` record's
CRC against the base it rebuilds (the bytes the journal kept, else the rendering of the
base version): a base that is not byte for byte the same sets the journal aside
(``*.failed``, its writer gets EIO), as one whose base version cannot be shown again
(see :mod:`nfs.table.recovery`). A record cut short or with a bad CRC ends the journal
there (a torn tail: the crash came before its fsync, so no reply promised it).

A staging whose base no rendering can show again (a *shadow*: the bytes a writer wrote,
shown back to it, CRLF line ends or its own quoting) keeps those bytes beside its
journal, ``<write id>.base`` (a hard link to the shadow's file, or a copy), fsynced with
the journal's first fsync: recovery needs only this directory, never the shadows (which
are a cache). A staging based on a client's page (its base plus the lines it appended,
bytes no version ever was) keeps that page the same way, ``<write id>.page``: the version
under it, and the bytes the client wrote over it (plus ``.base`` when that version was
shown as a shadow); never ``pages-journal/``.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import mmap
import os
import struct
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import BinaryIO, Final, Literal

from isal import isal_zlib

from posixlake.storage import fsync_dir

__all__ = [
    "BaseSpan",
    "JournalDir",
    "JournalFile",
    "JournalHeader",
    "JournalOp",
    "KeptBase",
    "KeptPage",
    "Recovered",
]

logger = logging.getLogger(__name__)

_crc32: Final = isal_zlib.crc32
"""CRC-32 as zlib computes it (the same values), with ISA-L's carry-less multiply: a
rewrite of gigabytes passes through it once, at several times zlib's speed."""
_MAGIC: Final = b"PLNFSJ1\n"
_MAGIC_BASE: Final = b"PLNFSJ2\n"
"""The magic of a journal holding ``B`` records (earlier releases refuse it)."""
_HEAD: Final = struct.Struct(">cQI")
_SPAN: Final = struct.Struct(">QQII")  # a B record's data: base offset, length, seed, CRC
_CRC: Final = struct.Struct(">I")
_SUFFIX: Final = ".wal"
_BASE: Final = ".base"
_PAGE: Final = ".page"


@dataclass(frozen=True)
class JournalHeader:
    """Who staged what, on which base.

    Attributes:
        write_id: the id the Delta commit of this staging carries in its metadata.
        table_id: the Delta table id (a journal of another table is never applied).
        base_version: the version the writer's content is based on.
        base_size: the size of the base content (checked again at recovery).
        peer: the client's address; uid / gid: its AUTH_SYS identity.
        started: when the staging began (ns, increasing across server restarts; 0 in the
            journals of earlier releases): journals are recovered in this order, the order
            a server applies idle stagings in.
        part: the file staged: "" for ``/data/data.csv``, else the partition's path
            below ``/partitions`` (its rows only; see `nfs.table.writers.WriterKey.part`).
    """

    write_id: str
    table_id: str
    base_version: int
    base_size: int
    peer: str
    uid: int
    gid: int
    started: int = 0
    part: str = ""


@dataclass(frozen=True)
class BaseSpan:
    """Bytes a write laid down that are its staging's base bytes ``[offset, offset +
    length)``, and their CRC-32 continuing ``seed`` (recovery checks it against the base
    it rebuilds)."""

    offset: int
    length: int
    seed: int
    crc: int


@dataclass(frozen=True)
class JournalOp:
    """One staged operation: a write of ``data`` at ``number`` (``B``: of the base bytes
    ``span``), or a truncation to ``number``."""

    kind: Literal["W", "T", "B"]
    number: int
    data: bytes | memoryview = b""
    at: int = field(default=-1, compare=False)
    """Where ``data`` lies in the journal file (-1: not known)."""
    span: BaseSpan | None = None
    """A ``B`` record's base bytes."""


@dataclass(frozen=True)
class KeptBase:
    """The base bytes a staging's journal keeps (a shadow: no rendering shows them again).

    Attributes:
        size: their length.
        file: returns a file holding exactly these bytes, never changed in place (the
            shadow's), to link; None when there is none.
        chunks: the bytes, in order: written out when there is no file to link.
    """

    size: int
    file: Callable[[], Path | None]
    chunks: Callable[[], Iterable[bytes | memoryview]]


@dataclass(frozen=True)
class KeptPage:
    """A client's page a staging is based on: ``data`` written at ``low`` over the bytes
    of version ``version`` (``size`` of them, as that client was shown them)."""

    version: int
    size: int
    low: int
    data: bytes


@dataclass(frozen=True)
class Recovered:
    """A journal found at start: its header and operations, in order."""

    header: JournalHeader
    ops: tuple[JournalOp, ...]
    path: Path
    valid: int = -1
    """The length of its records that are whole (past it: a torn tail); -1: not known."""
    mapped: mmap.mmap | None = field(default=None, compare=False, repr=False)
    """The mapping the ops' data views (see :meth:`release`)."""

    def release(self, op: JournalOp) -> None:
        """Let the mapped pages of ``op``'s data go (it was staged: read from the file
        again when needed), so recovering a journal of gigabytes keeps RSS bounded."""
        if self.mapped is None or op.at < 0 or not op.data:
            return
        page = mmap.PAGESIZE
        lo = op.at // page * page
        hi = min(len(self.mapped), -(-(op.at + len(op.data)) // page) * page)
        if hi > lo:
            self.mapped.madvise(mmap.MADV_DONTNEED, lo, hi - lo)

    def kept_base(self) -> memoryview | None:
        """The base bytes the journal kept (see `KeptBase`), mapped; None if it kept none
        (for a staging based on a page: the bytes under the page)."""
        return _map(self.path.with_suffix(_BASE))

    def kept_page(self) -> KeptPage | None:
        """The page the journal kept (see `KeptPage`); None if it kept none."""
        try:
            raw = self.path.with_suffix(_PAGE).read_bytes()
            line, _, data = raw.partition(b"\n")
            head = json.loads(line)
            return KeptPage(int(head["version"]), int(head["size"]), int(head["low"]), data)
        except (OSError, ValueError, KeyError, TypeError):
            return None


def _map(path: Path) -> memoryview | None:
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                return memoryview(b"")
            return memoryview(mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ))
    except FileNotFoundError:
        return None


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _keep_base(base: KeptBase, target: Path) -> None:
    """Put ``base`` at ``target`` (a hard link to its file, else a copy) and fsync it."""
    target.unlink(missing_ok=True)
    source = base.file()
    linked = False
    if source is not None:
        try:
            if source.stat().st_size == base.size:
                os.link(source, target)
                linked = True
        except OSError:  # another file system, no hard links: copy
            linked = False
    if not linked:
        tmp = target.with_suffix(f".{threading.get_ident()}.tmp")
        try:
            with open(tmp, "wb") as f:
                for chunk in base.chunks():
                    f.write(chunk)
            os.replace(tmp, target)
        except OSError:
            tmp.unlink(missing_ok=True)
            raise
    _fsync_file(target)


def _keep_page(page: KeptPage, target: Path) -> None:
    """Write ``page`` at ``target`` (atomically) and fsync it."""
    tmp = target.with_suffix(f".{threading.get_ident()}.tmp")
    head = {"version": page.version, "size": page.size, "low": page.low}
    try:
        with open(tmp, "wb") as f:
            f.write(json.dumps(head).encode() + b"\n")
            f.write(page.data)
        os.replace(tmp, target)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_file(target)


def _record(kind: bytes, number: int, data: bytes | memoryview) -> list[bytes | memoryview]:
    """One record as the buffers to write: header, data (not copied), CRC."""
    head = _HEAD.pack(kind, number, len(data))
    crc = _crc32(data, _crc32(head))
    return [head, data, _CRC.pack(crc)]


def _write_all(f: BinaryIO, buffers: list[bytes | memoryview]) -> None:
    """Write ``buffers`` whole, in one ``writev`` when the file takes them (a short write,
    as a nearly full disk gives, goes on with the rest: a record is never left torn
    behind a reply that counted it written; an error is raised)."""
    fd = f.fileno()
    views = [memoryview(b).cast("B") for b in buffers if len(b)]
    while views:
        n = os.writev(fd, views)
        while n:
            if n >= views[0].nbytes:
                n -= views[0].nbytes
                del views[0]
            else:
                views[0] = views[0][n:]
                n = 0


class JournalFile:
    """The append-only journal of one staging (not thread-safe: the caller locks)."""

    def __init__(
        self,
        path: Path,
        header: JournalHeader,
        *,
        reopen: bool = False,
        base: KeptBase | None = None,
        page: KeptPage | None = None,
    ) -> None:
        """Create ``path`` (which must not exist) with ``header``; nothing is synced yet.

        With ``reopen``, append to the existing journal at ``path`` (after recovery).
        ``base``: base bytes to keep beside the journal (``<write id>.base``), put there
        and fsynced at the first :meth:`sync`, before the journal itself; ``page``: the
        same for a client's page (``<write id>.page``; ``base`` then holds what is under
        it, if a shadow).
        """
        self.path = path
        self.header = header
        self._base = base
        self._page = page
        if reopen:
            self._f: BinaryIO | None = open(path, "a+b", buffering=0)  # noqa: SIM115
            self._synced_once = True
            self._dirty = False
            self._spans = os.pread(self._f.fileno(), len(_MAGIC_BASE), 0) == _MAGIC_BASE
            return
        # unbuffered: what a WRITE put here survives a kill -9 of the server; fsync (at a
        # reply that promises it) makes it survive a power loss too; readable: a staging
        # reads its written bytes back from their records (`staging.Source`)
        self._f = open(path, "x+b", buffering=0)  # noqa: SIM115 - held open until discard
        os.chmod(path, 0o600)
        _write_all(self._f, [_MAGIC, *_record(b"H", 0, json.dumps(asdict(header)).encode())])
        self._synced_once = False
        self._dirty = True
        self._spans = False  # PLNFSJ1 until the first B record

    def _file(self) -> BinaryIO:
        if self._f is None:
            # closed, or given up after a failed write it could not cut off again
            raise OSError(errno.EIO, f"journal {self.path.name} is closed")
        return self._f

    def fileno(self) -> int:
        """The journal's descriptor (readable: a staging reads its records through a
        duplicate, `nfs.table.staging.Source`)."""
        return self._file().fileno()

    def write(self, offset: int, data: bytes | memoryview) -> tuple[int, int]:
        """Record a write (buffered; :meth:`sync` makes it durable).

        Returns:
            where the record holds ``data``: the journal's descriptor (readable) and the
            offset, as a staging reads them back (`nfs.table.staging.Source`); valid while
            the journal is open (a duplicate of the descriptor, after).
        """
        at = self._append(_record(b"W", offset, data))
        return self.fileno(), at + _HEAD.size

    def write_pieces(
        self,
        offset: int,
        data: bytes | memoryview,
        pieces: Sequence[tuple[int, int, int]],
        *,
        seed: int = 0,
    ) -> tuple[list[tuple[int, int] | None], int]:
        """Record a write of ``data`` at ``offset`` in pieces, all or none (buffered): per
        ``(start, end, base offset)`` of ``data``, a ``B`` record of bytes equal to the
        base's at that offset (when it is not -1; the caller compared them), else a ``W``
        record of the bytes.

        The first ``B`` record turns the journal's magic to ``PLNFSJ2`` first (earlier
        releases refuse such a journal rather than misread it).

        Returns:
            per piece, where a ``W`` record holds its bytes (as :meth:`write`), or None;
            and the CRC-32 of ``data`` continuing ``seed`` (summed once, with the ``B``
            records' CRCs).
        """
        view = memoryview(data).cast("B")
        buffers: list[bytes | memoryview] = []
        places: list[int | None] = []
        size = 0
        crc = seed
        for start, end, base_at in pieces:
            piece = view[start:end]
            if base_at >= 0:
                after = _crc32(piece, crc)
                span = _SPAN.pack(base_at, end - start, crc, after)
                record = _record(b"B", offset + start, span)
                places.append(None)
                crc = after
            else:
                record = _record(b"W", offset + start, piece)
                places.append(size + _HEAD.size)
                crc = _crc32(piece, crc)
            buffers += record
            size += sum(len(b) for b in record)
        if not self._spans and any(base_at >= 0 for _s, _e, base_at in pieces):
            self._set_magic(_MAGIC_BASE)
        at = self._append(buffers)
        fd = self.fileno()
        return [None if p is None else (fd, at + p) for p in places], crc

    def _set_magic(self, magic: bytes) -> None:
        """Overwrite the magic (with a descriptor of its own: a reopened journal's is
        O_APPEND, where pwrite appends)."""
        self._file()
        fd = os.open(self.path, os.O_WRONLY)
        try:
            if os.pwrite(fd, magic, 0) != len(magic):
                raise OSError(errno.EIO, f"journal {self.path.name}: short write of its magic")
        finally:
            os.close(fd)
        self._spans = True
        self._dirty = True

    def truncate(self, size: int) -> None:
        """Record a truncation (buffered)."""
        self._append(_record(b"T", size, b""))

    def _append(self, buffers: list[bytes | memoryview]) -> int:
        """Append one record whole and return where it starts, or raise OSError with the
        journal as it was: the part of a record a failing write left is cut off again, so
        records appended later (the client retrying) are not read as lying behind a torn
        one."""
        f = self._file()
        fd = f.fileno()
        end = os.lseek(fd, 0, os.SEEK_END)
        try:
            _write_all(f, buffers)
        except OSError:
            try:
                os.ftruncate(fd, end)
                os.lseek(fd, end, os.SEEK_SET)
            except OSError:
                self._f = None  # cannot be repaired: refuse any further record
                f.close()
            raise
        self._dirty = True
        return end

    def sync(self) -> None:
        """Make every recorded operation durable (flush + fsync; the directory once)."""
        f = self._file()
        if not self._dirty:
            return
        if self._base is not None:  # what recovery needs besides the journal, first
            _keep_base(self._base, self.path.with_suffix(_BASE))
            self._base = None
        if self._page is not None:
            _keep_page(self._page, self.path.with_suffix(_PAGE))
            self._page = None
        os.fsync(f.fileno())
        if not self._synced_once:
            fsync_dir(self.path.parent)
            self._synced_once = True
        self._dirty = False

    def close(self) -> None:
        """Sync and close the file, keeping it for the next start."""
        if self._f is not None:
            self.sync()
            self._f.close()
            self._f = None

    def discard(self) -> None:
        """Close and delete the file (its content is committed, or given up)."""
        if self._f is not None:
            self._f.close()
            self._f = None
        self.path.unlink(missing_ok=True)
        self.path.with_suffix(_BASE).unlink(missing_ok=True)
        self.path.with_suffix(_PAGE).unlink(missing_ok=True)


def _read_records(data: bytes | memoryview) -> Iterator[tuple[bytes, int, memoryview, int]]:
    """The whole records of a journal: kind, number, data (a view) and where it lies."""
    view = memoryview(data)
    pos = len(_MAGIC)
    while pos + _HEAD.size + _CRC.size <= len(view):
        kind, number, length = _HEAD.unpack_from(view, pos)
        end = pos + _HEAD.size + length
        if end + _CRC.size > len(view):
            return
        body = view[pos + _HEAD.size : end]
        (crc,) = _CRC.unpack_from(view, end)
        if _crc32(body, _crc32(view[pos : pos + _HEAD.size])) != crc:
            return
        yield kind, number, body, pos + _HEAD.size
        pos = end + _CRC.size


def _valid_length(data: bytes | memoryview) -> int:
    pos = len(_MAGIC)
    for _kind, _number, body, _at in _read_records(data):
        pos += _HEAD.size + len(body) + _CRC.size
    return pos


def read_journal(path: Path) -> Recovered | None:
    """Parse one journal file; None when it has no valid header (or is not a journal).

    The file is mapped, not read into memory: the ops' data are views of the mapping
    (with where they lie: a recovered staging reads them from the file), and the pages
    the CRC check touched are let go again (`Recovered.release` for those staged later).
    """
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < len(_MAGIC):
            return None
        mm = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
    magic = mm[: len(_MAGIC)]
    if magic not in (_MAGIC, _MAGIC_BASE):
        mm.close()
        return None
    header: JournalHeader | None = None
    ops: list[JournalOp] = []
    valid = len(_MAGIC)
    for kind, number, body, at in _read_records(memoryview(mm)):
        if header is None:
            if kind != b"H":
                return None
            try:
                header = JournalHeader(**json.loads(bytes(body)))
            except (ValueError, TypeError):
                return None
        elif kind == b"W":
            ops.append(JournalOp("W", number, body, at))
        elif kind == b"T":
            ops.append(JournalOp("T", number))
        elif kind == b"B" and magic == _MAGIC_BASE and len(body) == _SPAN.size:
            offset, length, seed, crc = _SPAN.unpack(body)
            ops.append(JournalOp("B", number, span=BaseSpan(offset, length, seed, crc)))
        else:
            break
        valid = at + len(body) + _CRC.size
    if header is None:
        return None
    mm.madvise(mmap.MADV_DONTNEED)  # checked: the views fault their pages in again
    return Recovered(header, tuple(ops), path, valid, mm)


_SLOTS: Final = 64


class JournalDir:
    """The directory of one server's journals for a table (created 0700 if missing).

    A server locks its directory (``flock`` on ``.lock``, released by the OS if it dies):
    the first free one of ``<root>``, ``<root>-1``, ``<root>-2``, ... So two servers of one
    table on one machine never take over each other's live journals, and a restarted
    server recovers what the previous one in that slot left.
    """

    def __init__(self, root: Path) -> None:
        """Lock the first free slot directory under ``root`` (created with its parents).

        Raises:
            OSError: no directory could be created or locked.
        """
        for slot in range(_SLOTS):
            path = root if slot == 0 else root.with_name(f"{root.name}-{slot}")
            path.mkdir(parents=True, exist_ok=True, mode=0o700)
            fd = os.open(path / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self.path = path
            self._lock_fd: int | None = fd
            return
        raise OSError(f"every journal directory under {root} is in use")

    def release(self) -> None:
        """Unlock the directory (its journals stay for the next server)."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def create(
        self, header: JournalHeader, *, base: KeptBase | None = None, page: KeptPage | None = None
    ) -> JournalFile:
        """Start the journal of a new staging (keeping ``base`` and ``page`` beside it:
        `KeptBase`, `KeptPage`)."""
        path = self.path / f"{header.write_id}{_SUFFIX}"
        return JournalFile(path, header, base=base, page=page)

    def recover(self, table_id: str) -> list[Recovered]:
        """Return the journals of ``table_id`` left by an earlier server, in the order their
        stagings began (journals without that order: by their last write, first).

        A file that is not a readable journal, or belongs to another table, is renamed
        ``*.bad`` (kept for a human, never applied) and logged.
        """
        found: list[tuple[int, int, Recovered]] = []
        for suffix in (_BASE, _PAGE):  # a base or page whose journal is gone
            for kept in self.path.glob(f"*{suffix}"):
                if not kept.with_suffix(_SUFFIX).exists():
                    kept.unlink(missing_ok=True)
        for path in sorted(self.path.glob(f"*{_SUFFIX}")):
            rec = read_journal(path)
            if rec is None or rec.header.table_id != table_id:
                why = "unreadable" if rec is None else "of another table"
                logger.error("nfs journal %s is %s: kept as .bad, not applied", path, why)
                path.rename(path.with_suffix(".bad"))
                continue
            found.append((rec.header.started, path.stat().st_mtime_ns, rec))
        found.sort(key=lambda item: item[:2])
        return [rec for *_, rec in found]

    def reopen(self, rec: Recovered) -> JournalFile:
        """Go on appending to a recovered journal (its torn tail, if any, cut off first)."""
        valid = rec.valid
        if valid < 0:
            with open(rec.path, "rb") as f:
                valid = _valid_length(f.read())
        with open(rec.path, "r+b") as f:
            f.truncate(valid)
        return JournalFile(rec.path, rec.header, reopen=True)

    def set_aside(self, rec: Recovered, why: str) -> None:
        """Keep a journal that cannot be applied as ``*.failed`` (for a human), logging why."""
        logger.error("nfs journal %s not applied (%s): kept as .failed", rec.path, why)
        rec.path.rename(rec.path.with_suffix(".failed"))
        for suffix in (_BASE, _PAGE):
            kept = rec.path.with_suffix(suffix)
            if kept.exists():
                kept.rename(rec.path.with_suffix(f".failed-{suffix[1:]}"))
