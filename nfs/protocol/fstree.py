"""The file tree under `nfs.protocol.memfs.MemoryFs` (and so `nfs.table.scratchfs.ScratchFs`).

Nodes, ids, quotas, permission checks and the storage hooks a subclass overrides to
keep the bytes elsewhere, plus the helpers an embedding Vfs (TableFs) and the tests
use below the NFS layer (`FsTree.add_dir`, `add_file`, `put`, `pop_file`, ...).
`MemoryFs` adds the `Vfs` methods on top.
"""

from __future__ import annotations

import functools
import itertools
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Concatenate, Final, ParamSpec, TypedDict, TypeVar

from nfs.protocol.nfs3 import Fattr3, Ftype3, Nfsstat3, Nfstime3, Specdata3
from nfs.protocol.rpc import CallContext
from nfs.protocol.vfs import FileId, NfsError, VfsCapabilities

__all__ = [
    "DEFAULT_QUOTA_BYTES",
    "DEFAULT_QUOTA_FILES",
    "ROOT_ID",
    "FsOptions",
    "FsTree",
    "IdAllocator",
    "Node",
    "changes",
    "err",
]

_R: Final = 4
_W: Final = 2
_X: Final = 1
_DIR_SIZE: Final = 4096
_COOKIE_DOT: Final = 1
_COOKIE_DOTDOT: Final = 2
_COOKIE_BASE: Final = 2
"""A child's readdir cookie is its FileId + 2 (ids start at 1, so cookies 1 and 2 stay free)."""


ROOT_ID: Final = FileId(1)
"""The default root directory id."""

DEFAULT_QUOTA_BYTES: Final = 1 << 30
"""The sum of file sizes a MemoryFs holds at most by default (1 GiB)."""
DEFAULT_QUOTA_FILES: Final = 1 << 20
"""Files and directories at most, by default."""


class IdAllocator:
    """Hand out `FileId`s in increasing order from `start` (thread-safe).

    Share one allocator between several file systems to keep their ids apart,
    or give each its own range (e.g. ``IdAllocator(1 << 48)`` for scratch files).

    Raises:
        NfsError: NFS3ERR_NOSPC from `__call__` once `stop` is reached.
    """

    def __init__(self, start: int = 1, stop: int = 1 << 64) -> None:
        if not 0 < start < stop:
            raise ValueError("need 0 < start < stop")
        self._counter = itertools.count(start)
        self._next = start
        self._stop = stop
        self._lock = threading.Lock()

    @property
    def start(self) -> int:
        """The next id this allocator would hand out."""
        return self._next

    def advance_past(self, used: int) -> None:
        """Never hand out `used` or anything below it (ids persisted by an earlier run)."""
        with self._lock:
            if used >= self._next:
                self._next = used + 1
                self._counter = itertools.count(self._next)

    def __call__(self) -> FileId:
        """Return a new id."""
        with self._lock:
            value = next(self._counter)
            self._next = value + 1
        if value >= self._stop:
            raise NfsError(Nfsstat3.NFS3ERR_NOSPC, "file ids exhausted")
        return FileId(value)


@dataclass(eq=False)
class Node:
    fid: FileId
    type: Ftype3
    mode: int
    uid: int
    gid: int
    atime: int
    mtime: int
    ctime: int
    parent: FileId
    name: str = ""
    size: int = 0
    data: bytearray = field(default_factory=bytearray)
    """The file's bytes up to the last one written; zeros follow up to `size`."""
    children: dict[str, FileId] = field(default_factory=dict)
    subdirs: int = 0
    verifier: bytes | None = None
    attrs_memo: tuple[tuple[int, ...], Fattr3] | None = field(default=None, repr=False)
    """The attributes last built for it and what they were built from (`FsTree._attrs`)."""

    @property
    def is_dir(self) -> bool:
        return self.type == Ftype3.NF3DIR


def err(status: Nfsstat3, message: str = "") -> NfsError:
    return NfsError(status, message)


_P = ParamSpec("_P")
_Ret = TypeVar("_Ret")
_Fs = TypeVar("_Fs", bound="FsTree")


def changes(method: Callable[Concatenate[_Fs, _P], _Ret]) -> Callable[Concatenate[_Fs, _P], _Ret]:
    """Run a changing call under the lock, then `_save` what it changed (even on error)."""

    @functools.wraps(method)
    def wrapper(self: _Fs, /, *args: _P.args, **kwargs: _P.kwargs) -> _Ret:
        with self._lock:
            try:
                return method(self, *args, **kwargs)
            finally:
                self._save()

    return wrapper


class FsOptions(TypedDict, total=False):
    """The keyword options of `FsTree` (and `MemoryFs`, `ScratchFs`), for ``**options``."""

    ids: IdAllocator | None
    root_id: FileId
    root_mode: int
    root_uid: int
    root_gid: int
    fsid: int
    max_file_size: int
    quota_bytes: int
    quota_files: int
    read_only: bool
    generation: bytes | None


class FsTree:
    """The tree under `MemoryFs`: nodes, quotas, storage hooks and the embedding helpers.

    Args:
        clock: seconds since the epoch, for timestamps (injected in tests).
        ids: where new ids come from; a private ``IdAllocator(root_id + 1)`` by default.
        root_id: the root directory's id.
        root_mode, root_uid, root_gid: the root directory's permissions.
        fsid: fattr3.fsid.
        max_file_size: writes or truncations beyond it fail with NFS3ERR_FBIG.
        quota_bytes: the sum of file sizes at most (NFS3ERR_DQUOT beyond it).
        quota_files: files and directories at most (NFS3ERR_DQUOT beyond it).
        read_only: report a read-only file system (the NFS layer then refuses changes).
        generation: the 8 bytes embedded in every handle; random per instance by
            default, so handles from another instance are stale.
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.time,
        *,
        ids: IdAllocator | None = None,
        root_id: FileId = ROOT_ID,
        root_mode: int = 0o755,
        root_uid: int = 0,
        root_gid: int = 0,
        fsid: int = 1,
        max_file_size: int = 1 << 32,
        quota_bytes: int = DEFAULT_QUOTA_BYTES,
        quota_files: int = DEFAULT_QUOTA_FILES,
        read_only: bool = False,
        generation: bytes | None = None,
    ) -> None:
        self._clock = clock
        self._ids = ids if ids is not None else IdAllocator(root_id + 1)
        self._lock = threading.RLock()
        self._nodes: dict[FileId, Node] = {}
        self._root = root_id
        self._fsid = fsid
        self._max_file_size = max_file_size
        self._quota_bytes = quota_bytes
        self._quota_files = quota_files
        self._read_only = read_only
        self._generation = generation if generation is not None else secrets.token_bytes(8)
        if len(self._generation) != 8:
            raise ValueError("generation must be 8 bytes")
        self._cookieverf = secrets.token_bytes(8)
        self._capabilities = VfsCapabilities(read_only=read_only, max_file_size=max_file_size)
        self._bytes_used = 0
        now = self._now()
        self._nodes[root_id] = Node(
            root_id, Ftype3.NF3DIR, root_mode & 0o7777, root_uid, root_gid, now, now, now, root_id
        )

    # ------------------------------------------------------------ internals

    def _now(self) -> int:
        return round(self._clock() * 1_000_000_000)

    # ------------------------------------------------------------ storage hooks
    # MemoryFs keeps bytes in node.data; nfs.table.scratchfs.ScratchFs overrides these to
    # keep them (and the metadata) on disk. Each runs under the lock.

    def _load_data(self, node: Node, offset: int, end: int) -> bytes:
        """Return the bytes [offset, end) of a file, ``end <= node.size`` (holes read 0)."""
        stored = min(end, len(node.data))
        with memoryview(node.data) as view:
            data = bytes(view[offset:stored]) if offset < stored else b""
        return data + bytes(end - offset - len(data))

    def _store_data(self, node: Node, offset: int, data: bytes) -> None:
        """Write `data` at `offset` (the size already covers it)."""
        if offset > len(node.data):
            node.data.extend(bytes(offset - len(node.data)))
        node.data[offset : offset + len(data)] = data

    def _resize_data(self, node: Node, size: int) -> None:
        """Cut or extend a file's bytes to `size` (extending adds a hole)."""
        if size < len(node.data):
            del node.data[size:]

    def _forget_data(self, node: Node) -> None:
        """A file left the tree: drop its bytes."""
        node.data = bytearray()

    def _dirty(self, node: Node, *, data_only: bool = False) -> None:
        """`node`'s metadata changed (``data_only``: only size and times, by a WRITE)."""

    def _save(self) -> None:
        """Persist the changes of the call that just ran (end of every changing call)."""

    def _sync(self, node: Node) -> None:
        """Make `node`'s bytes and metadata durable (FILE_SYNC writes, COMMIT)."""

    def _node(self, fid: FileId) -> Node:
        node = self._nodes.get(fid)
        if node is None:
            raise err(Nfsstat3.NFS3ERR_STALE, f"no file {fid}")
        return node

    def _dir(self, fid: FileId) -> Node:
        node = self._node(fid)
        if not node.is_dir:
            raise err(Nfsstat3.NFS3ERR_NOTDIR)
        return node

    def _child(self, parent: Node, name: str) -> Node:
        fid = parent.children.get(name)
        if fid is None:
            raise err(Nfsstat3.NFS3ERR_NOENT)
        return self._nodes[fid]

    @staticmethod
    def _may(node: Node, ctx: CallContext, bits: int, *, owner_override: bool = False) -> bool:
        cred = ctx.cred
        if cred.uid == 0:
            return True
        if cred.uid == node.uid:
            if owner_override:
                return True
            have = (node.mode >> 6) & 7
        elif cred.in_group(node.gid):
            have = (node.mode >> 3) & 7
        else:
            have = node.mode & 7
        return have & bits == bits

    def _require(
        self, node: Node, ctx: CallContext, bits: int, *, owner_override: bool = False
    ) -> None:
        if not self._may(node, ctx, bits, owner_override=owner_override):
            raise err(Nfsstat3.NFS3ERR_ACCES)

    @staticmethod
    def _check_new_name(name: str) -> None:
        if name in (".", ".."):
            raise err(Nfsstat3.NFS3ERR_EXIST)
        if not name or "/" in name or "\0" in name:
            raise err(Nfsstat3.NFS3ERR_INVAL, f"bad name {name!r}")

    def _touch_dir(self, node: Node, now: int) -> None:
        node.mtime = now
        node.ctime = now
        self._dirty(node)

    def _new_node(
        self,
        parent: Node,
        name: str,
        ftype: Ftype3,
        mode: int,
        uid: int,
        gid: int,
        fid: FileId | None,
    ) -> Node:
        if fid is not None and fid in self._nodes:
            raise ValueError(f"file id {fid} already in use")
        if len(self._nodes) >= self._quota_files:
            raise err(Nfsstat3.NFS3ERR_DQUOT, "file quota exceeded")
        if fid is None:
            fid = self._ids()
        now = self._now()
        node = Node(fid, ftype, mode & 0o7777, uid, gid, now, now, now, parent.fid, name)
        self._nodes[fid] = node
        parent.children[name] = fid
        if ftype == Ftype3.NF3DIR:
            parent.subdirs += 1
        self._touch_dir(parent, now)
        self._dirty(node)
        return node

    def _set_size(self, node: Node, size: int) -> None:
        if size > self._max_file_size:
            raise err(Nfsstat3.NFS3ERR_FBIG)
        old = node.size
        if size > old and self._bytes_used + size - old > self._quota_bytes:
            raise err(Nfsstat3.NFS3ERR_DQUOT, "scratch quota exceeded")
        if size != old:
            self._resize_data(node, size)
            node.size = size
            self._bytes_used += size - old

    def _drop(self, parent: Node, name: str, node: Node, now: int) -> None:
        del parent.children[name]
        if node.is_dir:
            parent.subdirs -= 1
        self._bytes_used -= node.size
        del self._nodes[node.fid]
        self._forget_data(node)
        self._touch_dir(parent, now)

    def _attrs(self, node: Node) -> Fattr3:
        """The attributes of ``node``; the same (immutable) object as last time while
        nothing they show has changed (a GETATTR of a directory builds none)."""
        if node.is_dir:
            size = _DIR_SIZE
            nlink = 2 + node.subdirs
        else:
            size = node.size
            nlink = 1
        used = self._used(node, size)
        key = (
            node.type,
            node.mode,
            nlink,
            node.uid,
            node.gid,
            size,
            used,
            node.atime,
            node.mtime,
            node.ctime,
        )
        memo = node.attrs_memo
        if memo is not None and memo[0] == key:
            return memo[1]
        attrs = Fattr3(
            type=node.type,
            mode=node.mode,
            nlink=nlink,
            uid=node.uid,
            gid=node.gid,
            size=size,
            used=used,
            rdev=Specdata3(),
            fsid=self._fsid,
            fileid=node.fid,
            atime=Nfstime3.from_ns(node.atime),
            mtime=Nfstime3.from_ns(node.mtime),
            ctime=Nfstime3.from_ns(node.ctime),
        )
        node.attrs_memo = (key, attrs)
        return attrs

    def _used(self, node: Node, size: int) -> int:
        """fattr3.used: the bytes a file occupies (a hole occupies none)."""
        return (min(size, len(node.data)) + 511) & ~511 if not node.is_dir else size

    # ------------------------------------------------------------ embedding and test helpers

    def contains(self, fid: FileId) -> bool:
        """Return whether `fid` belongs to this file system."""
        return fid in self._nodes

    @changes
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
        """Create a directory without permission checks (`fid` chooses its id).

        Raises:
            NfsError: NFS3ERR_EXIST, NFS3ERR_NOTDIR, NFS3ERR_STALE.
            ValueError: if `fid` is already in use.
        """
        with self._lock:
            p = self._dir(parent)
            if name in p.children:
                raise err(Nfsstat3.NFS3ERR_EXIST)
            self._check_new_name(name)
            return self._new_node(p, name, Ftype3.NF3DIR, mode, uid, gid, fid).fid

    @changes
    def add_file(
        self,
        parent: FileId,
        name: str,
        data: bytes = b"",
        *,
        mode: int = 0o644,
        uid: int = 0,
        gid: int = 0,
        fid: FileId | None = None,
    ) -> FileId:
        """Create a regular file with `data`, without permission checks.

        Raises:
            NfsError: NFS3ERR_EXIST, NFS3ERR_NOTDIR, NFS3ERR_FBIG, NFS3ERR_STALE.
            ValueError: if `fid` is already in use.
        """
        with self._lock:
            p = self._dir(parent)
            if name in p.children:
                raise err(Nfsstat3.NFS3ERR_EXIST)
            self._check_new_name(name)
            if len(data) > self._max_file_size:
                raise err(Nfsstat3.NFS3ERR_FBIG)
            if self._bytes_used + len(data) > self._quota_bytes:
                raise err(Nfsstat3.NFS3ERR_DQUOT, "scratch quota exceeded")
            node = self._new_node(p, name, Ftype3.NF3REG, mode, uid, gid, fid)
            self._set_size(node, len(data))
            self._store_data(node, 0, data)
            return node.fid

    def resolve(self, path: str) -> FileId:
        """Return the id at an absolute path like ``/a/b.txt`` (no permission checks).

        Raises:
            NfsError: NFS3ERR_NOENT or NFS3ERR_NOTDIR.
        """
        with self._lock:
            fid = self._root
            for part in path.split("/"):
                if part in ("", "."):
                    continue
                node = self._dir(fid)
                if part == "..":
                    fid = node.parent
                    continue
                child = node.children.get(part)
                if child is None:
                    raise err(Nfsstat3.NFS3ERR_NOENT, path)
                fid = child
            return fid

    @changes
    def put(
        self, path: str, data: bytes, *, mode: int = 0o644, uid: int = 0, gid: int = 0
    ) -> FileId:
        """Create or replace the file at `path` with `data`, creating parent directories."""
        with self._lock:
            parts = [p for p in path.split("/") if p]
            if not parts:
                raise err(Nfsstat3.NFS3ERR_INVAL, "empty path")
            fid = self._root
            for part in parts[:-1]:
                node = self._dir(fid)
                child = node.children.get(part)
                fid = child if child is not None else self.add_dir(fid, part, uid=uid, gid=gid)
            parent = self._dir(fid)
            existing = parent.children.get(parts[-1])
            if existing is not None:
                node = self._nodes[existing]
                if node.is_dir:
                    raise err(Nfsstat3.NFS3ERR_ISDIR)
                self._set_size(node, 0)
                self._set_size(node, len(data))
                self._store_data(node, 0, data)
                node.mtime = node.ctime = self._now()
                self._dirty(node)
                return existing
            return self.add_file(fid, parts[-1], data, mode=mode, uid=uid, gid=gid)

    def read_all(self, fid: FileId) -> bytes:
        """Return the whole content of a regular file.

        Raises:
            NfsError: NFS3ERR_ISDIR, NFS3ERR_STALE.
        """
        with self._lock:
            node = self._node(fid)
            if node.is_dir:
                raise err(Nfsstat3.NFS3ERR_ISDIR)
            return self._load_data(node, 0, node.size)

    def get(self, path: str) -> bytes:
        """Return the content of the file at `path`."""
        return self.read_all(self.resolve(path))

    def listdir(self, fid: FileId) -> list[str]:
        """Return the names in a directory, sorted ("." and ".." excluded)."""
        with self._lock:
            return sorted(self._dir(fid).children)

    def parent_of(self, fid: FileId) -> FileId:
        """Return the parent directory of a directory (the root's is the root).

        Raises:
            NfsError: NFS3ERR_NOTDIR for a file (files do not record their parent).
        """
        with self._lock:
            return self._dir(fid).parent

    @changes
    def pop_file(self, dir_id: FileId, name: str) -> tuple[FileId, bytes]:
        """Remove a regular file and return its id and content (no permission checks).

        For an embedding Vfs that moves a scratch file onto one of its own (for
        example a RENAME of an editor's temporary file onto a table file).

        Raises:
            NfsError: NFS3ERR_NOENT, NFS3ERR_ISDIR, NFS3ERR_NOTDIR.
        """
        with self._lock:
            parent = self._dir(dir_id)
            node = self._child(parent, name)
            if node.is_dir:
                raise err(Nfsstat3.NFS3ERR_ISDIR)
            data = self._load_data(node, 0, node.size)
            self._drop(parent, name, node, self._now())
            return node.fid, data
