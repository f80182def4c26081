"""The attributes :class:`~nfs.table.tablefs.TableFs` gives its files and directories: ids,
handles' generations, sizes and times per caller, modes and access (see
:mod:`nfs.table.tablefs` for the tree). See docs/design.md."""

from __future__ import annotations

from nfs.protocol.nfs3 import (
    Fattr3,
    Ftype3,
    Nfsstat3,
    Nfstime3,
    Sattr3,
    Specdata3,
)
from nfs.protocol.rpc import CallContext
from nfs.protocol.vfs import (
    ACCESS3_DELETE,
    ACCESS3_EXTEND,
    ACCESS3_LOOKUP,
    ACCESS3_MODIFY,
    ACCESS3_READ,
    FileId,
    FsStat,
    VfsCapabilities,
)
from nfs.table.state import (
    _DIR_SIZE,
    _FILE_MODE,
    _RO_DIR_MODE,
    _RW_MODE,
    _VERSION_BASE,
    _VERSION_END,
    DATA_CSV_ID,
    DATA_DIR_ID,
    ROOT_ID,
    SCHEMA_ID,
    SCRATCH_BASE,
    VERSIONS_ID,
    _caller,
    _err,
)
from nfs.table.writers import WriterKey
from nfs.table.writes import WriteRules

__all__ = ["TableAttrs"]


class TableAttrs(WriteRules):
    """Ids, attributes, SETATTR, ACCESS and FSSTAT of the table's tree."""

    # ------------------------------------------------------------ ids

    @staticmethod
    def _version_of(fid: FileId) -> tuple[int, bool] | None:
        """(N, is_file) for /versions/<N> ids, else None."""
        if _VERSION_BASE <= fid < _VERSION_END:
            n, is_file = divmod(fid - _VERSION_BASE, 2)
            return n, bool(is_file)
        return None

    def _check_version(self, n: int) -> None:
        if n > self._version():
            raise _err(Nfsstat3.NFS3ERR_STALE, f"no version {n}")

    def _is_scratch(self, fid: FileId) -> bool:
        return fid >= SCRATCH_BASE and self._scratch.contains(fid)

    # ------------------------------------------------------------ Vfs: attributes

    def capabilities(self) -> VfsCapabilities:
        """Return the static properties (read-only for a user without "write")."""
        return VfsCapabilities(read_only=self._read_only, max_file_size=1 << 40)

    def root_dir(self) -> FileId:
        """Return the root's id (1)."""
        return ROOT_ID

    def generation(self, fid: FileId) -> bytes:
        """Return the handle generation of ``fid``.

        Directories and the immutable ``/versions/<N>/data.csv`` keep their handles for
        good; ``data.csv`` and ``schema.sql`` across a restart only while the table has
        not changed since the previous boot began; scratch entries per boot only.

        Raises:
            NfsError: NFS3ERR_STALE for an unknown id.
        """
        if fid in (ROOT_ID, DATA_DIR_ID, VERSIONS_ID):
            return self._table_gen
        if fid in (DATA_CSV_ID, SCHEMA_ID):
            return self._file_gen
        ver = self._version_of(fid)
        if ver is not None:
            with self._lock:
                self._check_version(ver[0])
            return self._table_gen
        if self._is_scratch(fid):
            return self._scratch.generation(fid)
        raise _err(Nfsstat3.NFS3ERR_STALE)

    def _dir_attrs(self, fid: FileId, mode: int, mtime: Nfstime3, nlink: int = 2) -> Fattr3:
        return Fattr3(
            type=Ftype3.NF3DIR,
            mode=mode,
            nlink=nlink,
            uid=0,
            gid=0,
            size=_DIR_SIZE,
            used=_DIR_SIZE,
            rdev=Specdata3(),
            fsid=self._fsid,
            fileid=fid,
            atime=mtime,
            mtime=mtime,
            ctime=mtime,
        )

    def _file_attrs(self, fid: FileId, mode: int, size: int, mtime: Nfstime3) -> Fattr3:
        return Fattr3(
            type=Ftype3.NF3REG,
            mode=mode,
            nlink=1,
            uid=0,
            gid=0,
            size=size,
            used=(size + 511) & ~511,
            rdev=Specdata3(),
            fsid=self._fsid,
            fileid=fid,
            atime=mtime,
            mtime=mtime,
            ctime=mtime,
        )

    def getattr(self, fid: FileId, ctx: CallContext | None = None) -> Fattr3:
        """Return the attributes; data.csv sizes are exact (its rendering is cached per version).

        data.csv is answered per caller (``ctx``, else the NFS call being served): a
        writer sees its staged content, anyone else the current version (which is then
        what that client was shown: see :meth:`_base_for`).
        """
        with self._lock:
            caller = _caller(ctx)
            self._poll_locked()
            return self._getattr(fid, caller)

    def _mixed_dir_attrs(self, fid: FileId) -> Fattr3:
        inner = self._scratch.getattr(fid)
        table_time = self._commit_time(self._version())
        mtime = max(inner.mtime, table_time, key=Nfstime3.to_ns)
        ctime = max(inner.ctime, table_time, key=Nfstime3.to_ns)
        nlink = inner.nlink + (1 if fid == ROOT_ID else 0)  # + /versions
        return Fattr3(
            type=Ftype3.NF3DIR,
            mode=inner.mode,
            nlink=nlink,
            uid=inner.uid,
            gid=inner.gid,
            size=inner.size,
            used=inner.used,
            rdev=inner.rdev,
            fsid=self._fsid,
            fileid=fid,
            atime=mtime,
            mtime=mtime,
            ctime=ctime,
        )

    def _data_csv_attrs(self, version: int, size: int) -> Fattr3:
        """The attributes of data.csv showing ``version`` as ``size`` bytes (not a writer's)."""
        mode = _FILE_MODE if self._read_only else _RW_MODE
        return self._file_attrs(DATA_CSV_ID, mode, size, self._commit_time(version))

    def _getattr(self, fid: FileId, ctx: CallContext) -> Fattr3:
        if fid in (ROOT_ID, DATA_DIR_ID):
            return self._mixed_dir_attrs(fid)
        if fid == DATA_CSV_ID:
            mode = _FILE_MODE if self._read_only else _RW_MODE
            w = self._writers.get(WriterKey.of(ctx))
            if w is not None:
                st = w.staging
                return self._file_attrs(fid, mode, st.size, Nfstime3.from_seconds(st.mtime))
            version = self._version()
            size = self._presented(version).size
            return self._data_csv_attrs(version, size)
        if fid == SCHEMA_ID:
            version = self._version()
            return self._file_attrs(
                fid, 0o444, len(self._schema_bytes()), self._commit_time(version)
            )
        if fid == VERSIONS_ID:
            return self._dir_attrs(fid, _RO_DIR_MODE, self._commit_time(self._version()))
        ver = self._version_of(fid)
        if ver is not None:
            n, is_file = ver
            self._check_version(n)
            if is_file:
                size = self._rendering(n).size
                return self._file_attrs(fid, 0o444, size, self._commit_time(n))
            return self._dir_attrs(fid, _RO_DIR_MODE, self._commit_time(n))
        return self._scratch.getattr(fid)

    def setattr(self, fid: FileId, attrs: Sattr3, ctx: CallContext) -> Fattr3:
        """Set attributes: a size on data.csv stages a truncation, its mode, owner and times
        are accepted and ignored (``touch``, ``cp -p``); schema.sql and /versions refuse any
        change (NFS3ERR_ROFS); scratch entries behave as POSIX.
        """
        with self._lock:
            self._poll_locked()
            if fid == DATA_CSV_ID:
                if attrs.size is not None:
                    self._writable()
                    self._truncate(attrs.size, ctx)
                return self._getattr(fid, ctx)
            if fid in (SCHEMA_ID, VERSIONS_ID) or self._version_of(fid) is not None:
                if attrs != Sattr3():
                    raise _err(Nfsstat3.NFS3ERR_ROFS, "read-only")
                return self._getattr(fid, ctx)
            if fid in (ROOT_ID, DATA_DIR_ID):
                if attrs.size is not None:
                    raise _err(Nfsstat3.NFS3ERR_ISDIR)
                return self._getattr(fid, ctx)
            return self._scratch.setattr(fid, attrs, ctx)

    def access(self, fid: FileId, mask: int, ctx: CallContext) -> int:
        """Grant ACCESS3 bits: the table's files by the table's permissions, scratch by mode bits."""
        with self._lock:
            auth = self._db.authorizer
            read = ACCESS3_READ if auth.allows("read") else 0
            write = 0 if self._read_only else (ACCESS3_MODIFY | ACCESS3_EXTEND)
            if fid in (ROOT_ID, DATA_DIR_ID):
                self._scratch.getattr(fid)
                granted = ACCESS3_READ | ACCESS3_LOOKUP
                if not self._read_only:
                    granted |= ACCESS3_MODIFY | ACCESS3_EXTEND | ACCESS3_DELETE
                return mask & granted
            if fid == DATA_CSV_ID:
                return mask & (read | write)
            if fid == SCHEMA_ID:
                return mask & ACCESS3_READ
            if fid == VERSIONS_ID:
                return mask & (ACCESS3_READ | ACCESS3_LOOKUP)
            ver = self._version_of(fid)
            if ver is not None:
                self._check_version(ver[0])
                return mask & (read if ver[1] else (ACCESS3_READ | ACCESS3_LOOKUP))
            return self._scratch.access(fid, mask, ctx)

    def fsstat(self, fid: FileId) -> FsStat:
        """Return the scratch area's usage against its quota (the table's files not counted)."""
        return self._scratch.fsstat(ROOT_ID)
