"""PathOps: path-based calls on a :class:`~nfs.protocol.vfs.Vfs` (a
:class:`~nfs.table.tablefs.TableFs`), for tests and in-process callers."""

from __future__ import annotations

from typing import Protocol

from nfs.protocol.nfs3 import Fattr3, Nfsstat3, Sattr3, StableHow
from nfs.protocol.rpc import CallContext
from nfs.protocol.vfs import FileId, NfsError, Vfs

__all__ = ["PathOps", "ViewFs"]


class ViewFs(Vfs, Protocol):
    """A Vfs whose attributes depend on the caller (a TableFs: each writer sees its own)."""

    def getattr(self, fid: FileId, ctx: CallContext | None = None) -> Fattr3:
        """Return the attributes of ``fid`` as ``ctx`` sees them."""
        ...

    def finish(self, fid: FileId, ctx: CallContext) -> object:
        """Apply the caller's staged edit of ``fid`` now (it is done); raise its error."""
        ...


class PathOps:
    """Path-based calls on a Vfs (``"/data/data.csv"`` of a TableFs), as one caller.

    Errors are :class:`~nfs.protocol.vfs.NfsError`, as over NFS.
    """

    def __init__(self, fs: ViewFs, ctx: CallContext | None = None) -> None:
        """Act on ``fs`` as ``ctx`` (root by default)."""
        self.fs = fs
        self.ctx = ctx if ctx is not None else CallContext.local()

    def resolve(self, path: str) -> FileId:
        """Return the id at ``path``."""
        fid = self.fs.root_dir()
        for part in path.split("/"):
            if part:
                fid = self.fs.lookup(fid, part, self.ctx)
        return fid

    def _parent(self, path: str) -> tuple[FileId, str]:
        head, _, name = path.rstrip("/").rpartition("/")
        return self.resolve(head or "/"), name

    def getattr(self, path: str) -> Fattr3:
        """Return the attributes at ``path`` (as this caller sees them)."""
        return self.fs.getattr(self.resolve(path), self.ctx)

    def readdir(self, path: str) -> list[str]:
        """Return the names in a directory, in listing order, without "." and ".."."""
        fid = self.resolve(path)
        names: list[str] = []
        after = 0
        while True:
            page = self.fs.readdir(fid, after=after, max_entries=64, ctx=self.ctx)
            names += [e.name for e in page.entries if e.name not in (".", "..")]
            if page.eof or not page.entries:
                return names
            after = page.entries[-1].cookie

    def read_file(self, path: str, *, offset: int = 0, count: int | None = None) -> bytes:
        """Return the bytes of a file (all of it, or ``count`` bytes at ``offset``)."""
        fid = self.resolve(path)
        out = bytearray()
        pos = offset
        while count is None or len(out) < count:
            want = 1 << 20 if count is None else min(1 << 20, count - len(out))
            data, eof = self.fs.read(fid, pos, want, self.ctx)
            out += data
            pos += len(data)
            if eof or not data:
                break
        return bytes(out)

    def write_file(
        self,
        path: str,
        data: bytes,
        *,
        offset: int = 0,
        stable: StableHow = StableHow.FILE_SYNC,
        truncate: bool = False,
        commit: bool = True,
        finish: bool | None = None,
    ) -> int:
        """Write ``data`` at ``offset`` (creating the file; ``truncate`` empties it first).

        ``commit`` then sends COMMIT, as a client's ``close()`` does (durable; lines bad on
        their own are refused), and ``finish`` says the edit is done, as an NFSv4 CLOSE
        (or, over NFSv3, the writer's idle period) does: for data.csv that is when the
        new content is applied (its error is raised here). ``finish`` defaults to ``commit``.
        """
        try:
            fid = self.resolve(path)
        except NfsError as err:
            if err.status != Nfsstat3.NFS3ERR_NOENT:
                raise
            parent, name = self._parent(path)
            fid = self.fs.create(parent, name, Sattr3(mode=0o644), self.ctx, guarded=False)
        if truncate:
            self.fs.setattr(fid, Sattr3(size=0), self.ctx)
        count, _ = self.fs.write(fid, offset, data, stable, self.ctx)
        if commit:
            self.fs.commit(fid, 0, 0, self.ctx)
        if commit if finish is None else finish:
            self.fs.finish(fid, self.ctx)
        return count

    def finish(self, path: str) -> None:
        """Say the caller's edit of ``path`` is done: its staged content is applied now."""
        self.fs.finish(self.resolve(path), self.ctx)

    def truncate(self, path: str, size: int = 0) -> None:
        """Set the size of a file."""
        self.fs.setattr(self.resolve(path), Sattr3(size=size), self.ctx)

    def commit(self, path: str) -> None:
        """COMMIT a file's unstable writes."""
        self.fs.commit(self.resolve(path), 0, 0, self.ctx)

    def remove_file(self, path: str) -> None:
        """Remove a file."""
        parent, name = self._parent(path)
        self.fs.remove(parent, name, self.ctx)

    def rename(self, src: str, dst: str) -> None:
        """Rename ``src`` to ``dst``."""
        a, an = self._parent(src)
        b, bn = self._parent(dst)
        self.fs.rename(a, an, b, bn, self.ctx)

    def mkdir(self, path: str, mode: int = 0o755) -> FileId:
        """Create a directory."""
        parent, name = self._parent(path)
        return self.fs.mkdir(parent, name, Sattr3(mode=mode), self.ctx)

    def rmdir(self, path: str) -> None:
        """Remove an empty directory."""
        parent, name = self._parent(path)
        self.fs.rmdir(parent, name, self.ctx)
