"""`ScratchFs`: the scratch area on local disk, durable across server restarts.

The same file system as `nfs.protocol.memfs.MemoryFs` (POSIX permissions, rename, exclusive
create, sparse files, a quota; the same embedding interface TableFs uses:
``add_dir(..., fid=...)``, ``contains``, ``read_all``, ``pop_file``), with its state in
a directory chosen by the server::

    <directory>/meta.sqlite3        the tree: one row per file or directory
    <directory>/objects/<fid hex>   a regular file's bytes (sparse: holes cost no disk)
    <directory>/lock                locked (lockf) by the process using the directory

A restart is a new instance on the same directory: names, contents, modes, owners,
times and file ids come back, and so do file handles, because the generation is
stored too (unless one is passed in). Ids are never reused (the allocator starts past
the largest id ever stored), so a handle to a removed file stays stale.

Durability, as NFSv3 wants it (RFC 1813 §3.3.7, §3.3.21):
- every namespace or attribute change (CREATE, MKDIR, REMOVE, RMDIR, RENAME, SETATTR)
  is one SQLite transaction with ``synchronous=FULL`` before the call returns;
- a FILE_SYNC / DATA_SYNC WRITE and a COMMIT fsync the file (and, the first time,
  the ``objects`` directory) and store its times; an UNSTABLE write is in the page
  cache until COMMIT (the NFS layer answers UNSTABLE, and a new write verifier after
  a restart makes the client resend it);
- a file's size is its object's length, so a crash never leaves size and bytes apart.

The quota counts file sizes (a hole counts: what a client may read back is what it
uses), is enforced on WRITE and SETATTR with NFS3ERR_DQUOT, and FSSTAT reports it,
capped by the free space of the disk below. A disk that fills up anyway gives
NFS3ERR_NOSPC. File descriptors are opened per call, never kept.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final, Unpack

from nfs.protocol.fstree import ROOT_ID, FsOptions, IdAllocator, Node
from nfs.protocol.memfs import MemoryFs
from nfs.protocol.nfs3 import Ftype3, Nfsstat3
from nfs.protocol.vfs import FileId, FsStat, NfsError

__all__ = ["DEFAULT_SCRATCH_QUOTA_BYTES", "ScratchFs"]

DEFAULT_SCRATCH_QUOTA_BYTES: Final = 4 << 30
"""The sum of scratch file sizes at most by default (4 GiB)."""

_FORMAT: Final = 1
_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS nodes (
    fid INTEGER PRIMARY KEY,
    parent INTEGER NOT NULL,
    name BLOB NOT NULL,
    type INTEGER NOT NULL,
    mode INTEGER NOT NULL,
    uid INTEGER NOT NULL,
    gid INTEGER NOT NULL,
    atime INTEGER NOT NULL,
    mtime INTEGER NOT NULL,
    ctime INTEGER NOT NULL,
    verifier BLOB
);
"""
_UPSERT: Final = "INSERT OR REPLACE INTO nodes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
_SPACE_ERRNOS: Final = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def _name_bytes(name: str) -> bytes:
    return name.encode("utf-8", "surrogateescape")


def _io_error(err: OSError) -> NfsError:
    if err.errno in _SPACE_ERRNOS:
        return NfsError(Nfsstat3.NFS3ERR_NOSPC, f"scratch disk full: {err.strerror}")
    return NfsError(Nfsstat3.NFS3ERR_IO, f"scratch storage: {err.strerror or err}")


class ScratchFs(MemoryFs):
    """A `MemoryFs` kept on disk in `directory` (see the module docstring).

    Args:
        directory: the state directory (created if missing, mode 0700).
        clock: seconds since the epoch, for timestamps.
        ids: where new ids come from; advanced past every stored id.
        root_id: the root directory's id (must match the stored one).
        root_mode, root_uid, root_gid: the root's permissions when the store is new.
        fsid: fattr3.fsid.
        max_file_size: writes or truncations beyond it fail with NFS3ERR_FBIG.
        quota_bytes: the sum of file sizes at most (NFS3ERR_DQUOT beyond it).
        quota_files: files and directories at most.
        read_only: report a read-only file system.
        generation: the 8 bytes in every handle; by default one stored with the
            store, so handles survive restarts. Passing a per-boot value makes them
            stale at each restart.

    The options after `clock` are `nfs.protocol.fstree.FsOptions`, as for `MemoryFs`, with
    other defaults: ``max_file_size=1 << 40``, ``quota_bytes=DEFAULT_SCRATCH_QUOTA_BYTES``.

    Raises:
        OSError: the directory cannot be created; BlockingIOError if another process
            uses it.
        ValueError: the store was made with another root id, or a newer format.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        clock: Callable[[], float] = time.time,
        **options: Unpack[FsOptions],
    ) -> None:
        options.setdefault("max_file_size", 1 << 40)
        options.setdefault("quota_bytes", DEFAULT_SCRATCH_QUOTA_BYTES)
        root_id = options.get("root_id", ROOT_ID)
        ids = options.get("ids")
        self.directory = Path(directory)
        self._objects = self.directory / "objects"
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._objects.mkdir(exist_ok=True, mode=0o700)
        self._lock_fd = os.open(self.directory / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            # a POSIX record lock belongs to the process: another server process on the
            # same directory is refused, a new instance in this process (a restart in
            # a test, after a simulated crash) is not
            fcntl.lockf(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(self._lock_fd)
            if err.errno in (errno.EACCES, errno.EAGAIN):
                raise BlockingIOError(
                    errno.EAGAIN, f"{self.directory} is in use by another process"
                ) from err
            raise
        self._db = sqlite3.connect(
            self.directory / "meta.sqlite3", check_same_thread=False, isolation_level=None
        )
        self._meta_dirty: set[FileId] = set()
        self._data_dirty: set[FileId] = set()
        self._dropped: set[FileId] = set()
        self._entries_synced: set[FileId] = set()
        self._max_id = 0
        """The largest id ever stored (removed files' included), so it is never reused."""
        self._closed = False
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
            stored = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
            if stored and int(stored["format"]) > _FORMAT:
                raise ValueError(f"{directory}: scratch format {stored['format']} is newer")
            if stored and int(stored["root"]) != root_id:
                raise ValueError(f"{directory}: made with root id {stored['root']}, not {root_id}")
            stored_gen = bytes(stored["generation"]) if stored else secrets.token_bytes(8)
            if options.get("generation") is None:
                options["generation"] = stored_gen
            super().__init__(clock, **options)
            if stored:
                self._max_id = int(stored.get("max_id", 0))
                self._load(ids)
            else:
                with self._transaction() as db:
                    db.executemany(
                        "INSERT INTO meta VALUES (?, ?)",
                        [
                            ("format", str(_FORMAT)),
                            ("root", str(root_id)),
                            ("generation", stored_gen),
                        ],
                    )
                    db.execute(_UPSERT, self._row(self._nodes[root_id]))
        except BaseException:
            self._db.close()
            os.close(self._lock_fd)
            raise

    # ------------------------------------------------------------ loading and saving

    def _load(self, ids: IdAllocator | None) -> None:
        nodes: dict[FileId, Node] = {}
        for row in self._db.execute("SELECT * FROM nodes"):
            fid, parent, name, ftype, mode, uid, gid, atime, mtime, ctime, verifier = row
            node = Node(
                FileId(fid),
                Ftype3(ftype),
                mode,
                uid,
                gid,
                atime,
                mtime,
                ctime,
                FileId(parent),
                bytes(name).decode("utf-8", "surrogateescape"),
                verifier=None if verifier is None else bytes(verifier),
            )
            nodes[node.fid] = node
        if self._root not in nodes:
            raise ValueError(f"{self.directory}: the scratch store has no root")
        used = 0
        for node in nodes.values():
            if node.fid == self._root:
                continue
            parent = nodes.get(node.parent)
            if parent is None or not parent.is_dir:  # cannot happen with transactions
                raise ValueError(f"{self.directory}: {node.fid} has no parent directory")
            parent.children[node.name] = node.fid
            if node.is_dir:
                parent.subdirs += 1
            else:
                with contextlib.suppress(FileNotFoundError):
                    node.size = os.stat(self._path(node.fid)).st_size
                used += node.size
        # objects of files whose removal was committed but not yet unlinked
        for entry in os.scandir(self._objects):
            try:
                fid = FileId(int(entry.name, 16))
            except ValueError:
                continue
            owner = nodes.get(fid)
            if owner is None or owner.is_dir:
                os.unlink(entry.path)
        self._nodes = nodes
        self._bytes_used = used
        self._max_id = max(self._max_id, *nodes)
        allocator = ids if ids is not None else self._ids
        allocator.advance_past(self._max_id)

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    @staticmethod
    def _row(node: Node) -> tuple[object, ...]:
        return (
            node.fid,
            node.parent,
            _name_bytes(node.name),
            int(node.type),
            node.mode,
            node.uid,
            node.gid,
            node.atime,
            node.mtime,
            node.ctime,
            node.verifier,
        )

    def _path(self, fid: FileId) -> Path:
        return self._objects / f"{fid:016x}"

    # ------------------------------------------------------------ MemoryFs storage hooks

    def _load_data(self, node: Node, offset: int, end: int) -> bytes:
        want = end - offset
        try:
            fd = os.open(self._path(node.fid), os.O_RDONLY)
        except FileNotFoundError:
            return bytes(want)
        except OSError as err:
            raise _io_error(err) from err
        try:
            chunks: list[bytes] = []
            got = 0
            while got < want:
                chunk = os.pread(fd, want - got, offset + got)
                if not chunk:
                    break
                chunks.append(chunk)
                got += len(chunk)
        except OSError as err:
            raise _io_error(err) from err
        finally:
            os.close(fd)
        data = b"".join(chunks)
        return data + bytes(want - len(data))

    def _store_data(self, node: Node, offset: int, data: bytes) -> None:
        try:
            fd = os.open(self._path(node.fid), os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                view = memoryview(data)
                done = 0
                while done < len(view):
                    done += os.pwrite(fd, view[done:], offset + done)
            finally:
                os.close(fd)
        except OSError as err:
            raise _io_error(err) from err

    def _resize_data(self, node: Node, size: int) -> None:
        try:
            fd = os.open(self._path(node.fid), os.O_WRONLY | os.O_CREAT, 0o600)
            try:
                os.ftruncate(fd, size)  # extending makes a hole
            finally:
                os.close(fd)
        except OSError as err:
            raise _io_error(err) from err

    def _forget_data(self, node: Node) -> None:
        self._dropped.add(node.fid)
        self._meta_dirty.discard(node.fid)
        self._data_dirty.discard(node.fid)

    def _dirty(self, node: Node, *, data_only: bool = False) -> None:
        (self._data_dirty if data_only else self._meta_dirty).add(node.fid)

    def _save(self) -> None:
        if not (self._meta_dirty or self._dropped):
            return
        self._write_rows(self._meta_dirty | self._data_dirty)
        for fid in self._dropped:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._path(fid))
            self._entries_synced.discard(fid)
        self._dropped.clear()

    def _write_rows(self, fids: set[FileId]) -> None:
        rows = [self._row(self._nodes[f]) for f in fids if f in self._nodes]
        top = max((int(f) for f in fids if f in self._nodes), default=0)
        with self._transaction() as db:
            if self._dropped:
                db.executemany("DELETE FROM nodes WHERE fid = ?", [(f,) for f in self._dropped])
            db.executemany(_UPSERT, rows)
            if top > self._max_id:
                db.execute("INSERT OR REPLACE INTO meta VALUES ('max_id', ?)", (str(top),))
        self._max_id = max(self._max_id, top)
        self._meta_dirty.difference_update(fids)
        self._data_dirty.difference_update(fids)

    def _sync(self, node: Node) -> None:
        if node.is_dir:
            return
        path = self._path(node.fid)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            fd = -1  # never written: nothing to sync
        except OSError as err:
            raise _io_error(err) from err
        if fd >= 0:
            try:
                os.fsync(fd)
            except OSError as err:
                raise _io_error(err) from err
            finally:
                os.close(fd)
            if node.fid not in self._entries_synced:
                dir_fd = os.open(self._objects, os.O_RDONLY)
                try:
                    os.fsync(dir_fd)
                finally:
                    os.close(dir_fd)
                self._entries_synced.add(node.fid)
        if node.fid in self._data_dirty or node.fid in self._meta_dirty:
            self._write_rows({node.fid})

    def _used(self, node: Node, size: int) -> int:
        return (size + 511) & ~511

    # ------------------------------------------------------------ Vfs and lifecycle

    def fsstat(self, fid: FileId) -> FsStat:
        """Return usage against the quota, capped by the free space of the disk."""
        quota = super().fsstat(fid)
        try:
            disk = os.statvfs(self._objects)
        except OSError:
            return quota
        avail = disk.f_bavail * disk.f_frsize
        return FsStat(
            quota.tbytes,
            min(quota.fbytes, disk.f_bfree * disk.f_frsize),
            min(quota.abytes, avail),
            quota.tfiles,
            quota.ffiles,
            quota.afiles,
            quota.invarsec,
        )

    def add_dir(
        self,
        parent: FileId,
        name: str,
        *,
        mode: int = 0o755,
        uid: int = 0,
        gid: int = 0,
        fid: FileId | None = None,
    ) -> FileId:
        """Create a directory without permission checks (see `MemoryFs.add_dir`).

        Re-adding a directory with a chosen `fid` that a previous run stored under
        the same name returns it unchanged, so an embedder's fixed directories
        (TableFs's ``/data``) are made the same way on every start.
        """
        with self._lock:
            if fid is not None:
                existing = self._nodes.get(fid)
                if (
                    existing is not None
                    and existing.is_dir
                    and existing.parent == parent
                    and existing.name == name
                    and self._nodes[parent].children.get(name) == fid
                ):
                    return fid
            return super().add_dir(parent, name, mode=mode, uid=uid, gid=gid, fid=fid)

    def flush(self) -> None:
        """Store the times of files written UNSTABLE since their last COMMIT."""
        with self._lock:
            if self._data_dirty and not self._closed:
                self._write_rows(set(self._data_dirty))

    def close(self) -> None:
        """Flush, then release the directory (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self.flush()
            self._closed = True
            self._db.close()
            os.close(self._lock_fd)
