"""`MemoryFs`: a complete in-memory POSIX-like file system implementing `Vfs`.

Directories and regular files with offsets, sizes, mode / uid / gid, three
timestamps (from an injected clock), POSIX rename, exclusive create with a
verifier, and permission checks against the caller's AUTH_SYS credentials (root
may do anything; as knfsd does, a file's owner may read and write it whatever
its mode).

It serves the tests, and is built to be embedded as the scratch area of another
Vfs (TableFs): ids come from an `IdAllocator` that can be shared or given its
own range, the root id is chosen by the embedder (so the two trees can share
directory ids), and `add_dir` / `add_file` / `pop_file` / `contains` work below
the NFS layer. All methods are thread-safe (one lock).

Files are sparse: a size set by SETATTR (or a write far past the end) costs no
memory until bytes are written there, and a quota bounds the sum of the file
sizes (NFS3ERR_DQUOT beyond it; FSSTAT reports the quota). `nfs.table.scratchfs.ScratchFs`
is the same file system kept on disk: it overrides the storage hooks (``_load_data``,
``_store_data``, ``_resize_data``, ``_forget_data``, ``_dirty``, ``_save``, ``_sync``).
"""

from __future__ import annotations

import bisect

from nfs.protocol.fstree import (
    _COOKIE_BASE,
    _COOKIE_DOT,
    _COOKIE_DOTDOT,
    _R,
    _W,
    _X,
    DEFAULT_QUOTA_BYTES,
    DEFAULT_QUOTA_FILES,
    ROOT_ID,
    FsTree,
    IdAllocator,
    Node,
    changes,
    err,
)
from nfs.protocol.nfs3 import Fattr3, Ftype3, Nfsstat3, Sattr3, StableHow, TimeHow
from nfs.protocol.rpc import CallContext
from nfs.protocol.vfs import (
    DirEntry,
    DirPage,
    FileId,
    FsStat,
    NfsError,
    VfsCapabilities,
    posix_access,
)

__all__ = ["DEFAULT_QUOTA_BYTES", "DEFAULT_QUOTA_FILES", "ROOT_ID", "IdAllocator", "MemoryFs"]


class MemoryFs(FsTree):
    """An in-memory file system (see the module docstring).

    The constructor is `nfs.protocol.fstree.FsTree`'s (clock, ids, root_id, root_mode, root_uid,
    root_gid, fsid, max_file_size, quota_bytes, quota_files, read_only, generation).
    """

    # ------------------------------------------------------------ Vfs

    def capabilities(self) -> VfsCapabilities:
        """Return the static properties (see `Vfs.capabilities`)."""
        return self._capabilities

    def root_dir(self) -> FileId:
        """Return the root directory's id."""
        return self._root

    def generation(self, fid: FileId) -> bytes:
        """Return this instance's generation (NFS3ERR_STALE for an unknown id)."""
        if fid not in self._nodes:
            raise err(Nfsstat3.NFS3ERR_STALE)
        return self._generation

    def getattr(self, fid: FileId) -> Fattr3:
        """Return the attributes of `fid` (O(1))."""
        with self._lock:
            return self._attrs(self._node(fid))

    @changes
    def setattr(self, fid: FileId, attrs: Sattr3, ctx: CallContext) -> Fattr3:
        """Apply the set fields of `attrs` (see `Vfs.setattr`)."""
        with self._lock:
            node = self._node(fid)
            cred = ctx.cred
            is_owner = cred.uid in (0, node.uid)
            if attrs.mode is not None and not is_owner:
                raise err(Nfsstat3.NFS3ERR_PERM)
            if attrs.uid is not None and attrs.uid != node.uid and cred.uid != 0:
                raise err(Nfsstat3.NFS3ERR_PERM)
            if (
                attrs.gid is not None
                and attrs.gid != node.gid
                and not (cred.uid == 0 or (cred.uid == node.uid and cred.in_group(attrs.gid)))
            ):
                raise err(Nfsstat3.NFS3ERR_PERM)
            if attrs.size is not None:
                if node.is_dir:
                    raise err(Nfsstat3.NFS3ERR_ISDIR)
                self._require(node, ctx, _W, owner_override=True)
            for how in (attrs.atime.how, attrs.mtime.how):
                if how == TimeHow.SET_TO_CLIENT_TIME and not is_owner:
                    raise err(Nfsstat3.NFS3ERR_PERM)
                if how == TimeHow.SET_TO_SERVER_TIME and not is_owner:
                    self._require(node, ctx, _W)

            now = self._now()
            if attrs.size is not None:
                changed = attrs.size != node.size
                self._set_size(node, attrs.size)
                if changed:
                    node.mtime = now
            if attrs.mode is not None:
                node.mode = attrs.mode & 0o7777
            if attrs.uid is not None:
                node.uid = attrs.uid
            if attrs.gid is not None:
                node.gid = attrs.gid
            for which, st in (("atime", attrs.atime), ("mtime", attrs.mtime)):
                if st.how == TimeHow.SET_TO_SERVER_TIME:
                    setattr(node, which, now)
                elif st.how == TimeHow.SET_TO_CLIENT_TIME and st.time is not None:
                    setattr(node, which, st.time.to_ns())
            node.ctime = now
            node.verifier = None
            self._dirty(node)
            return self._attrs(node)

    def lookup(self, dir_id: FileId, name: str, ctx: CallContext) -> FileId:
        """Return the id of `name` in `dir_id` (see `Vfs.lookup`)."""
        with self._lock:
            parent = self._dir(dir_id)
            self._require(parent, ctx, _X)
            if name in ("", "."):
                return dir_id
            if name == "..":
                return parent.parent
            fid = parent.children.get(name)
            if fid is None:
                raise err(Nfsstat3.NFS3ERR_NOENT)
            return fid

    def access(self, fid: FileId, mask: int, ctx: CallContext) -> int:
        """Grant ACCESS3 bits from the mode bits (see `posix_access`)."""
        with self._lock:
            node = self._node(fid)
            return posix_access(
                mask, mode=node.mode, uid=node.uid, gid=node.gid, is_dir=node.is_dir, ctx=ctx
            )

    def read(self, fid: FileId, offset: int, count: int, ctx: CallContext) -> tuple[bytes, bool]:
        """Return up to `count` bytes at `offset` and whether they reach EOF (a copy)."""
        with self._lock:
            node = self._node(fid)
            if node.is_dir:
                raise err(Nfsstat3.NFS3ERR_ISDIR)
            self._require(node, ctx, _R, owner_override=True)
            size = node.size
            if offset >= size:
                return b"", True
            end = min(size, offset + count)
            return self._load_data(node, offset, end), end >= size

    @changes
    def write(
        self, fid: FileId, offset: int, data: bytes, stable: StableHow, ctx: CallContext
    ) -> tuple[int, StableHow]:
        """Write `data` at `offset`; memory has no cache, so `stable` is echoed back."""
        with self._lock:
            node = self._node(fid)
            if node.is_dir:
                raise err(Nfsstat3.NFS3ERR_ISDIR)
            self._require(node, ctx, _W, owner_override=True)
            end = offset + len(data)
            if end > self._max_file_size:
                raise err(Nfsstat3.NFS3ERR_FBIG)
            old_size = node.size
            if end > old_size:
                self._set_size(node, end)
            try:
                self._store_data(node, offset, data)
            except NfsError:
                self._set_size(node, old_size)
                raise
            now = self._now()
            node.mtime = now
            node.ctime = now
            self._dirty(node, data_only=True)
            if stable != StableHow.UNSTABLE:
                self._sync(node)
            return len(data), stable

    @changes
    def commit(self, fid: FileId, offset: int, count: int, ctx: CallContext) -> None:
        """Make the file's writes durable (in memory: nothing to do; checks `fid` exists)."""
        with self._lock:
            self._sync(self._node(fid))

    @changes
    def create(
        self, dir_id: FileId, name: str, attrs: Sattr3, ctx: CallContext, *, guarded: bool
    ) -> FileId:
        """Create a regular file, UNCHECKED or GUARDED (see `Vfs.create`)."""
        with self._lock:
            parent = self._dir(dir_id)
            existing = parent.children.get(name)
            if existing is not None:
                self._require(parent, ctx, _X)
                if guarded:
                    raise err(Nfsstat3.NFS3ERR_EXIST)
                node = self._nodes[existing]
                if node.is_dir:
                    raise err(Nfsstat3.NFS3ERR_ISDIR)
                if attrs.size is not None:
                    self.setattr(existing, Sattr3(size=attrs.size), ctx)
                return existing
            self._require(parent, ctx, _W | _X)
            self._check_new_name(name)
            node = self._new_node(
                parent,
                name,
                Ftype3.NF3REG,
                0o644 if attrs.mode is None else attrs.mode,
                ctx.uid,
                ctx.gid,
                None,
            )
            if attrs.uid is not None or attrs.gid is not None or attrs.size:
                self.setattr(node.fid, Sattr3(uid=attrs.uid, gid=attrs.gid, size=attrs.size), ctx)
            self._apply_times(node, attrs)
            return node.fid

    def _apply_times(self, node: Node, attrs: Sattr3) -> None:
        for which, st in (("atime", attrs.atime), ("mtime", attrs.mtime)):
            if st.how == TimeHow.SET_TO_CLIENT_TIME and st.time is not None:
                setattr(node, which, st.time.to_ns())
        self._dirty(node)

    @changes
    def create_exclusive(
        self, dir_id: FileId, name: str, verifier: bytes, ctx: CallContext
    ) -> FileId:
        """Create a regular file exclusively, idempotent for the same verifier."""
        with self._lock:
            parent = self._dir(dir_id)
            existing = parent.children.get(name)
            if existing is not None:
                self._require(parent, ctx, _X)
                node = self._nodes[existing]
                if node.verifier is not None and node.verifier == verifier:
                    return existing
                raise err(Nfsstat3.NFS3ERR_EXIST)
            self._require(parent, ctx, _W | _X)
            self._check_new_name(name)
            node = self._new_node(parent, name, Ftype3.NF3REG, 0o600, ctx.uid, ctx.gid, None)
            node.verifier = bytes(verifier)
            self._dirty(node)
            return node.fid

    @changes
    def mkdir(self, dir_id: FileId, name: str, attrs: Sattr3, ctx: CallContext) -> FileId:
        """Create a directory (see `Vfs.mkdir`)."""
        with self._lock:
            parent = self._dir(dir_id)
            if name in parent.children or name in (".", ".."):
                self._require(parent, ctx, _X)
                raise err(Nfsstat3.NFS3ERR_EXIST)
            self._require(parent, ctx, _W | _X)
            self._check_new_name(name)
            node = self._new_node(
                parent,
                name,
                Ftype3.NF3DIR,
                0o755 if attrs.mode is None else attrs.mode,
                ctx.uid,
                ctx.gid,
                None,
            )
            if attrs.uid is not None or attrs.gid is not None:
                self.setattr(node.fid, Sattr3(uid=attrs.uid, gid=attrs.gid), ctx)
            self._apply_times(node, attrs)
            return node.fid

    @changes
    def remove(self, dir_id: FileId, name: str, ctx: CallContext) -> None:
        """Remove a non-directory (see `Vfs.remove`)."""
        with self._lock:
            parent = self._dir(dir_id)
            self._require(parent, ctx, _W | _X)
            if name in (".", ".."):
                raise err(Nfsstat3.NFS3ERR_ISDIR)
            node = self._child(parent, name)
            if node.is_dir:
                raise err(Nfsstat3.NFS3ERR_ISDIR)
            self._drop(parent, name, node, self._now())

    @changes
    def rmdir(self, dir_id: FileId, name: str, ctx: CallContext) -> None:
        """Remove an empty directory (see `Vfs.rmdir`)."""
        with self._lock:
            parent = self._dir(dir_id)
            self._require(parent, ctx, _W | _X)
            if name == ".":
                raise err(Nfsstat3.NFS3ERR_INVAL)
            if name == "..":
                raise err(Nfsstat3.NFS3ERR_NOTEMPTY)
            node = self._child(parent, name)
            if not node.is_dir:
                raise err(Nfsstat3.NFS3ERR_NOTDIR)
            if node.children:
                raise err(Nfsstat3.NFS3ERR_NOTEMPTY)
            self._drop(parent, name, node, self._now())

    @changes
    def rename(
        self,
        from_dir: FileId,
        from_name: str,
        to_dir: FileId,
        to_name: str,
        ctx: CallContext,
    ) -> None:
        """Rename atomically, replacing a compatible target (see `Vfs.rename`)."""
        with self._lock:
            src_parent = self._dir(from_dir)
            dst_parent = self._dir(to_dir)
            if from_name in ("", ".", "..") or to_name in ("", ".", ".."):
                raise err(Nfsstat3.NFS3ERR_INVAL)
            if "/" in to_name or "\0" in to_name:
                raise err(Nfsstat3.NFS3ERR_INVAL)
            self._require(src_parent, ctx, _W | _X)
            self._require(dst_parent, ctx, _W | _X)
            src_id = src_parent.children.get(from_name)
            if src_id is None:
                raise err(Nfsstat3.NFS3ERR_NOENT)
            src = self._nodes[src_id]
            if src.is_dir:
                # the target directory must not be src or below it
                cur = dst_parent
                while True:
                    if cur.fid == src.fid:
                        raise err(Nfsstat3.NFS3ERR_INVAL, "cannot move a directory into itself")
                    if cur.fid == self._root or cur.parent == cur.fid:
                        break
                    cur = self._nodes[cur.parent]
            now = self._now()
            dst_id = dst_parent.children.get(to_name)
            if dst_id is not None:
                if dst_id == src_id:
                    return
                dst = self._nodes[dst_id]
                if src.is_dir and not dst.is_dir:
                    raise err(Nfsstat3.NFS3ERR_NOTDIR)
                if not src.is_dir and dst.is_dir:
                    raise err(Nfsstat3.NFS3ERR_ISDIR)
                if dst.is_dir and dst.children:
                    raise err(Nfsstat3.NFS3ERR_NOTEMPTY)
                self._drop(dst_parent, to_name, dst, now)
            del src_parent.children[from_name]
            dst_parent.children[to_name] = src_id
            if src.is_dir:
                src_parent.subdirs -= 1
                dst_parent.subdirs += 1
            src.parent = dst_parent.fid
            src.name = to_name
            src.ctime = now
            self._dirty(src)
            self._touch_dir(src_parent, now)
            self._touch_dir(dst_parent, now)

    def readdir(self, dir_id: FileId, *, after: int, max_entries: int, ctx: CallContext) -> DirPage:
        """List entries after a cookie: ".", "..", then children by id (cookie = id + 2).

        Cookies survive changes to the directory, so the cookieverf is constant
        for this instance.
        """
        with self._lock:
            node = self._dir(dir_id)
            self._require(node, ctx, _R)
            entries: list[DirEntry] = []
            if after < _COOKIE_DOT:
                entries.append(DirEntry(dir_id, ".", _COOKIE_DOT))
            if after < _COOKIE_DOTDOT:
                entries.append(DirEntry(node.parent, "..", _COOKIE_DOTDOT))
            children = sorted((fid, name) for name, fid in node.children.items())
            start = bisect.bisect_right(children, after - _COOKIE_BASE, key=lambda c: c[0])
            room = max(0, max_entries - len(entries))
            entries.extend(
                DirEntry(fid, name, fid + _COOKIE_BASE)
                for fid, name in children[start : start + room + 1]
            )
            eof = len(entries) <= max_entries
            return DirPage(tuple(entries[:max_entries]), eof, self._cookieverf)

    def fsstat(self, fid: FileId) -> FsStat:
        """Return usage against the quotas: total = quota, free = quota - sum of sizes."""
        with self._lock:
            self._node(fid)
            free = max(0, self._quota_bytes - self._bytes_used)
            ffree = max(0, self._quota_files - len(self._nodes))
            return FsStat(self._quota_bytes, free, free, self._quota_files, ffree, ffree, 0)
