"""The attributes of a TableFs's files: ids, handle generations, sizes, times, modes, access.

Owns: GETATTR (data.csv per caller: a writer sees its staged content), SETATTR (a size on
data.csv stages a truncation through the write rules; the table's other files refuse
changes), ACCESS by the table's permissions, FSSTAT of the scratch area, handle
generations across restarts. See :mod:`nfs.table.tablefs` for the tree.
"""

from __future__ import annotations

from nfs.protocol.nfs3 import Fattr3, Ftype3, Nfsstat3, Nfstime3, Sattr3, Specdata3
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
from nfs.table.changes import Changes
from nfs.table.partfiles import PartitionFiles
from nfs.table.partitions import PARTITIONS_ID, is_partition_entry
from nfs.table.reads import Reads
from nfs.table.state import (
    CHANGES_ID,
    DATA_CSV_ID,
    DATA_DIR_ID,
    DIR_MODE,
    DIR_SIZE,
    FILE_MODE,
    RO_DIR_MODE,
    ROOT_ID,
    RW_MODE,
    SCHEMA_ID,
    SCRATCH_BASE,
    VERSIONS_ID,
    TableState,
    is_changes,
    status_error,
    version_changes_of,
    version_of,
)
from nfs.table.writers import WriterKey
from nfs.table.writes import WriteRules

__all__ = ["Attributes"]


class Attributes:
    """Ids, attributes, SETATTR, ACCESS and FSSTAT of the table's tree."""

    def __init__(
        self,
        state: TableState,
        reads: Reads,
        rules: WriteRules,
        changes: Changes,
        parts: PartitionFiles,
    ) -> None:
        self._s = state
        self._reads = reads
        self._rules = rules
        self._changes = changes
        self._parts = parts
        self._data_csv: tuple[tuple[object, ...], Fattr3] | None = None
        self._dirs: dict[FileId, tuple[tuple[object, ...], Fattr3]] = {}
        """The attributes last built for / and /data, and what they were built from."""
        self._partitioned: tuple[int, int, bool] | None = None
        """(version, table generation, whether / lists partitions), from the last full
        GETATTR of /: the partition columns are read under the table handle's lock."""

    def capabilities(self) -> VfsCapabilities:
        """Return the static properties (read-only for a user without "write")."""
        return VfsCapabilities(read_only=self._s.read_only, max_file_size=1 << 40)

    def root_dir(self) -> FileId:
        """Return the root's id (1)."""
        return ROOT_ID

    def generation(self, fid: FileId) -> bytes:
        """Return the handle generation of ``fid``.

        Directories keep their handles for good, ``/versions/<N>`` and its files while
        the table is the same one (a table restored onto the path has other versions); ``data.csv`` and ``schema.sql`` across a restart only while the table has
        not changed since the previous boot began; ``changes.csv`` while it is the same
        log (same table, same first version: see :mod:`nfs.table.changes`); scratch
        entries per boot only; /partitions entries while the partition exists (its
        data.csv as data.csv).

        Raises:
            NfsError: NFS3ERR_STALE for an unknown id.
        """
        if fid in (ROOT_ID, DATA_DIR_ID, VERSIONS_ID):
            return self._s.table_gen
        if fid in (DATA_CSV_ID, SCHEMA_ID):
            return self._s.file_gen
        if fid == CHANGES_ID:
            with self._s.lock:
                return self._changes.generation()
        n = version_changes_of(fid)
        if n is not None:
            with self._s.lock:
                self._reads.check_version(n)
                return self._s.versions_gen
        ver = version_of(fid)
        if ver is not None:
            with self._s.lock:
                self._reads.check_version(ver[0])
                return self._s.versions_gen
        if self.is_scratch(fid):
            return self._s.scratch.generation(fid)
        if is_partition_entry(fid):
            with self._s.lock:
                return self._parts.generation(fid)
        raise status_error(Nfsstat3.NFS3ERR_STALE)

    def generation_nowait(self, fid: FileId) -> bytes | None:
        """`generation` of the directories, data.csv and schema.sql (no lock: fixed ids);
        None for the others."""
        if fid in (ROOT_ID, DATA_DIR_ID, VERSIONS_ID):
            return self._s.table_gen
        if fid in (DATA_CSV_ID, SCHEMA_ID):
            return self._s.file_gen
        return None

    def of_nowait(self, fid: FileId, version: int) -> Fattr3 | None:
        """`of` for /, /data, /versions and data.csv at a settled ``version``
        (`Reads.settled_locked`: no writer, so the same for every caller), with the table
        lock held; None for other files, or when an answer needs the table handle or a
        rendering."""
        if fid == DATA_CSV_ID:
            size = self._reads.data_csv_size_nowait_locked(version)
            return None if size is None else self.data_csv_attrs(version, size)
        if fid == DATA_DIR_ID:
            return self.mixed_dir_attrs(fid, version, False)
        if fid == ROOT_ID:
            known = self._partitioned
            if known is None or known[:2] != (version, self._s.generation):
                return None
            return self.mixed_dir_attrs(fid, version, known[2])
        if fid == VERSIONS_ID:
            return self.dir_attrs(fid, RO_DIR_MODE, self._reads.commit_time(version))
        return None

    def dir_attrs(self, fid: FileId, mode: int, mtime: Nfstime3, nlink: int = 2) -> Fattr3:
        return Fattr3(
            type=Ftype3.NF3DIR,
            mode=mode,
            nlink=nlink,
            uid=0,
            gid=0,
            size=DIR_SIZE,
            used=DIR_SIZE,
            rdev=Specdata3(),
            fsid=self._s.fsid,
            fileid=fid,
            atime=mtime,
            mtime=mtime,
            ctime=mtime,
        )

    def file_attrs(self, fid: FileId, mode: int, size: int, mtime: Nfstime3) -> Fattr3:
        return Fattr3(
            type=Ftype3.NF3REG,
            mode=mode,
            nlink=1,
            uid=0,
            gid=0,
            size=size,
            used=(size + 511) & ~511,
            rdev=Specdata3(),
            fsid=self._s.fsid,
            fileid=fid,
            atime=mtime,
            mtime=mtime,
            ctime=mtime,
        )

    def of(self, fid: FileId, ctx: CallContext) -> Fattr3:
        if fid in (ROOT_ID, DATA_DIR_ID):
            return self.mixed_dir_attrs(fid)
        if fid == DATA_CSV_ID:
            mode = FILE_MODE if self._s.read_only else RW_MODE
            w = self._s.writers.get(WriterKey.of(ctx))
            if w is not None:
                st = w.staging
                return self.file_attrs(fid, mode, st.size, Nfstime3.from_seconds(st.mtime))
            version = self._reads.version()
            size = self._reads.presented(version).size
            known = self._partitioned
            if known is None or known[:2] != (version, self._s.generation):
                # / is answered on the event loop (`of_nowait`) from this: after a
                # commit, the GETATTR or WRITE of data.csv comes first, then a LOOKUP
                self._partitioned = (version, self._s.generation, self._parts.shown())
            return self.data_csv_attrs(version, size)
        if fid == SCHEMA_ID:
            version = self._reads.version()
            return self.file_attrs(
                fid, 0o444, len(self._reads.schema_bytes()), self._reads.commit_time(version)
            )
        if fid == VERSIONS_ID:
            return self.dir_attrs(fid, RO_DIR_MODE, self._reads.commit_time(self._reads.version()))
        if is_changes(fid):
            size, mtime = self._changes.size_and_time(fid)
            return self.file_attrs(fid, 0o444, size, mtime)
        ver = version_of(fid)
        if ver is not None:
            n, is_file = ver
            self._reads.check_version(n)
            if is_file:
                size = self._reads.rendering(n).size
                return self.file_attrs(fid, 0o444, size, self._reads.commit_time(n))
            return self.dir_attrs(fid, RO_DIR_MODE, self._reads.commit_time(n))
        if fid == PARTITIONS_ID and self._parts.shown():
            # without its tree: a table not readable file by file still has the directory
            return self.dir_attrs(fid, RO_DIR_MODE, self._reads.commit_time(self._reads.version()))
        if is_partition_entry(fid):
            node = self._parts.node(fid)
            if node.is_file:
                mode = FILE_MODE if self._s.read_only else RW_MODE
                staged = self._parts.staged_size(fid, ctx)
                if staged is not None:  # the caller writes it: its own content
                    return self.file_attrs(fid, mode, staged[0], Nfstime3.from_seconds(staged[1]))
                mtime = self._reads.commit_time(self._reads.version())
                return self.file_attrs(fid, mode, self._parts.rendering(fid).size, mtime)
            mtime = self._reads.commit_time(self._reads.version())
            return self.mixed_partition_dir(fid, mtime, 2 + len(node.children))
        return self._s.scratch.getattr(fid)

    def mixed_partition_dir(self, fid: FileId, mtime: Nfstime3, nlink: int) -> Fattr3:
        """A partition directory: its data.csv (or sub-partitions) and, in a writable
        share, the scratch files made there (``sed -i``'s temporary file)."""
        mode = RO_DIR_MODE if self._s.read_only or fid == PARTITIONS_ID else DIR_MODE
        made = self._parts.scratch_dir(fid, make=False)
        if made is not None:  # files made there change its mtime
            inner = self._s.scratch.getattr(made)
            mtime = max(inner.mtime, mtime, key=Nfstime3.to_ns)
        return self.dir_attrs(fid, mode, mtime, nlink)

    def mixed_dir_attrs(
        self, fid: FileId, version: int | None = None, partitioned: bool | None = None
    ) -> Fattr3:
        """The attributes of / or /data: the scratch directory's, with the table's commit
        time; ``version`` and ``partitioned`` (/ only) when known, else looked up."""
        inner = self._s.scratch.getattr(fid)
        if version is None:
            version = self._reads.version()
        table_time = self._reads.commit_time(version)
        if fid == ROOT_ID and partitioned is None:
            partitioned = self._parts.shown()
            self._partitioned = (version, self._s.generation, partitioned)
        # + /versions and /partitions
        nlink = inner.nlink + ((2 if partitioned else 1) if fid == ROOT_ID else 0)
        fsid = self._s.fsid
        # inner: the scratch tree gives the same object while it is unchanged
        key = (inner, table_time, nlink, fsid)
        last = self._dirs.get(fid)
        if last is not None and last[0] == key:
            return last[1]
        mtime = max(inner.mtime, table_time, key=Nfstime3.to_ns)
        ctime = max(inner.ctime, table_time, key=Nfstime3.to_ns)
        attrs = Fattr3(
            type=Ftype3.NF3DIR,
            mode=inner.mode,
            nlink=nlink,
            uid=inner.uid,
            gid=inner.gid,
            size=inner.size,
            used=inner.used,
            rdev=inner.rdev,
            fsid=fsid,
            fileid=fid,
            atime=mtime,
            mtime=mtime,
            ctime=ctime,
        )
        self._dirs[fid] = (key, attrs)
        return attrs

    def data_csv_attrs(self, version: int, size: int) -> Fattr3:
        """The attributes of data.csv showing ``version`` as ``size`` bytes (not a writer's);
        the last ones are kept (every GETATTR, LOOKUP, ACCESS and READ reply carries them)."""
        mode = FILE_MODE if self._s.read_only else RW_MODE
        mtime = self._reads.commit_time(version)
        key = (version, size, mode, mtime, self._s.fsid)
        last = self._data_csv
        if last is not None and last[0] == key:
            return last[1]
        attrs = self.file_attrs(DATA_CSV_ID, mode, size, mtime)
        self._data_csv = (key, attrs)
        return attrs

    def setattr(self, fid: FileId, attrs: Sattr3, ctx: CallContext) -> Fattr3:
        """Set attributes: a size on data.csv stages a truncation, its mode, owner and times
        are accepted and ignored (``touch``, ``cp -p``); schema.sql, the change files and
        /versions refuse any change (NFS3ERR_ROFS); scratch entries behave as POSIX.
        """
        if fid == DATA_CSV_ID:
            if attrs.size is not None:
                self._rules.writable()
                self._rules.truncate(attrs.size, ctx)
            return self.of(fid, ctx)
        if fid in (SCHEMA_ID, VERSIONS_ID) or version_of(fid) is not None or is_changes(fid):
            if attrs != Sattr3():
                raise status_error(Nfsstat3.NFS3ERR_ROFS, "read-only")
            return self.of(fid, ctx)
        if is_partition_entry(fid):
            node = self._parts.node(fid)
            if node.is_file:  # as data.csv: a size stages a truncation of this partition
                if attrs.size is not None:
                    self._rules.writable()
                    self._rules.truncate(attrs.size, ctx, self._parts.part_of(fid))
                return self.of(fid, ctx)
            if attrs.size is not None:
                raise status_error(Nfsstat3.NFS3ERR_ISDIR)
            return self.of(fid, ctx)
        if fid in (ROOT_ID, DATA_DIR_ID):
            if attrs.size is not None:
                raise status_error(Nfsstat3.NFS3ERR_ISDIR)
            return self.of(fid, ctx)
        return self._s.scratch.setattr(fid, attrs, ctx)

    def access(self, fid: FileId, mask: int, ctx: CallContext) -> int:
        """Grant ACCESS3 bits: the table's files by the table's permissions, scratch by mode bits."""
        auth = self._s.db.authorizer
        read = ACCESS3_READ if auth.allows("read") else 0
        write = 0 if self._s.read_only else (ACCESS3_MODIFY | ACCESS3_EXTEND)
        if fid in (ROOT_ID, DATA_DIR_ID):
            self._s.scratch.getattr(fid)
            granted = ACCESS3_READ | ACCESS3_LOOKUP
            if not self._s.read_only:
                granted |= ACCESS3_MODIFY | ACCESS3_EXTEND | ACCESS3_DELETE
            return mask & granted
        if fid == DATA_CSV_ID:
            return mask & (read | write)
        if fid == SCHEMA_ID:
            return mask & ACCESS3_READ
        if is_changes(fid):
            return mask & read
        if fid == VERSIONS_ID:
            return mask & (ACCESS3_READ | ACCESS3_LOOKUP)
        ver = version_of(fid)
        if ver is not None:
            self._reads.check_version(ver[0])
            return mask & (read if ver[1] else (ACCESS3_READ | ACCESS3_LOOKUP))
        if fid == PARTITIONS_ID and self._parts.shown():
            return mask & (ACCESS3_READ | ACCESS3_LOOKUP)
        if is_partition_entry(fid):
            node = self._parts.node(fid)
            if node.is_file:
                return mask & (read | write)
            granted = ACCESS3_READ | ACCESS3_LOOKUP
            if not self._s.read_only and fid != PARTITIONS_ID:  # scratch files there
                granted |= ACCESS3_MODIFY | ACCESS3_EXTEND | ACCESS3_DELETE
            return mask & granted
        return self._s.scratch.access(fid, mask, ctx)

    def access_nowait(self, fid: FileId, mask: int, ctx: CallContext) -> int | None:
        """`access` of /, /data, /versions, data.csv and schema.sql (nothing there waits
        but the table lock, which the caller holds); None for the others."""
        if fid in (ROOT_ID, DATA_DIR_ID, VERSIONS_ID, DATA_CSV_ID, SCHEMA_ID):
            return self.access(fid, mask, ctx)
        return None

    def fsstat(self, fid: FileId) -> FsStat:
        """Return the scratch area's usage against its quota (the table's files not counted)."""
        return self._s.scratch.fsstat(ROOT_ID)

    def is_scratch(self, fid: FileId) -> bool:
        return fid >= SCRATCH_BASE and self._s.scratch.contains(fid)
