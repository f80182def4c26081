"""The names of a TableFs's tree: LOOKUP, READDIR, CREATE, MKDIR, REMOVE, RMDIR, RENAME.

Owns: the table's fixed entries (``/data/data.csv``, ``/schema.sql``, ``/changes.csv``,
``/versions/<N>`` with its ``data.csv`` and ``changes.csv``, and a partitioned table's
``/partitions``, whose tree :mod:`nfs.table.partfiles` serves) merged with the scratch
area's, what may be created, removed or renamed where (the table's own entries stay;
``/versions`` is read-only, and so is the ``/partitions`` tree itself: its directories
hold scratch files, and a partition's data.csv is written as data.csv is), and the
version each scratch file was made at. Removing a data.csv and renaming a file onto it
are writes: they go to the write rules (:mod:`nfs.table.writes`).
"""

from __future__ import annotations

from nfs.protocol.nfs3 import Nfsstat3, Sattr3
from nfs.protocol.rpc import CallContext
from nfs.protocol.vfs import (
    DirEntry,
    DirPage,
    FileId,
    NfsError,
)
from nfs.table.partfiles import PartitionFiles
from nfs.table.partitions import (
    PARTITIONS,
    PARTITIONS_ID,
    is_partition_entry,
    is_partition_file,
)
from nfs.table.reads import Reads
from nfs.table.staging import BytesBase
from nfs.table.state import (
    CHANGES_CSV,
    CHANGES_ID,
    COOKIE_OFFSET,
    DATA_CSV,
    DATA_CSV_ID,
    DATA_DIR_ID,
    ROOT_ID,
    ROOT_STATIC,
    SCHEMA_ID,
    VERSION_BASE,
    VERSION_CHANGES_BASE,
    VERSIONS_ID,
    TableState,
    is_changes,
    status_error,
    version_of,
)
from nfs.table.writers import WriterKey
from nfs.table.writes import WriteRules

__all__ = ["Names"]


class Names:
    """The namespace of the table's tree, merged with the scratch area."""

    def __init__(
        self, state: TableState, reads: Reads, rules: WriteRules, parts: PartitionFiles
    ) -> None:
        self._s = state
        self._reads = reads
        self._rules = rules
        self._parts = parts

    def lookup(self, dir_id: FileId, name: str, ctx: CallContext) -> FileId:
        """Return the id of ``name`` in ``dir_id``."""
        if dir_id == ROOT_ID and name in ROOT_STATIC:
            return ROOT_STATIC[name]
        if dir_id == ROOT_ID and name == PARTITIONS and self._parts.shown():
            return PARTITIONS_ID
        if is_partition_entry(dir_id):
            try:
                return self._parts.lookup(dir_id, name)
            except NfsError as err:
                made = self._parts.scratch_dir(dir_id, make=False)
                if err.status != Nfsstat3.NFS3ERR_NOENT or made is None or name in ("", "..", "."):
                    raise
                return self._s.scratch.lookup(made, name, ctx)  # a file made there
        if dir_id == DATA_DIR_ID and name == DATA_CSV:
            return DATA_CSV_ID
        if dir_id == VERSIONS_ID:
            if name in ("", "."):
                return VERSIONS_ID
            if name == "..":
                return ROOT_ID
            if not (name.isascii() and name.isdigit()) or len(name) > 18:
                raise status_error(Nfsstat3.NFS3ERR_NOENT)
            if name != str(int(name)) or int(name) > self._reads.version():
                raise status_error(Nfsstat3.NFS3ERR_NOENT)
            return FileId(VERSION_BASE + 2 * int(name))
        ver = version_of(dir_id)
        if ver is not None:
            n, is_file = ver
            self._reads.check_version(n)
            if is_file:
                raise status_error(Nfsstat3.NFS3ERR_NOTDIR)
            if name in ("", "."):
                return dir_id
            if name == "..":
                return VERSIONS_ID
            if name == DATA_CSV:
                return FileId(dir_id + 1)
            if name == CHANGES_CSV:
                return FileId(VERSION_CHANGES_BASE + n)
            raise status_error(Nfsstat3.NFS3ERR_NOENT)
        if dir_id in (DATA_CSV_ID, SCHEMA_ID, CHANGES_ID) or is_changes(dir_id):
            raise status_error(Nfsstat3.NFS3ERR_NOTDIR)
        return self._s.scratch.lookup(dir_id, name, ctx)

    def readdir(self, dir_id: FileId, *, after: int, max_entries: int, ctx: CallContext) -> DirPage:
        """List a directory: the table's entries merged, in cookie order, with scratch ones."""
        if is_partition_entry(dir_id):
            return self.partition_readdir(dir_id, after, max_entries, ctx)
        if dir_id == VERSIONS_ID:
            latest = self._reads.version()
            names = [(1, VERSIONS_ID, "."), (2, ROOT_ID, "..")] + [
                (3 + n, FileId(VERSION_BASE + 2 * n), str(n)) for n in range(latest + 1)
            ]
            return self.page(names, after, max_entries)
        ver = version_of(dir_id)
        if ver is not None:
            n, is_file = ver
            self._reads.check_version(n)
            if is_file:
                raise status_error(Nfsstat3.NFS3ERR_NOTDIR)
            names = [
                (1, dir_id, "."),
                (2, VERSIONS_ID, ".."),
                (3, FileId(dir_id + 1), DATA_CSV),
                (4, FileId(VERSION_CHANGES_BASE + n), CHANGES_CSV),
            ]
            return self.page(names, after, max_entries)
        if dir_id in (DATA_CSV_ID, SCHEMA_ID) or is_changes(dir_id):
            raise status_error(Nfsstat3.NFS3ERR_NOTDIR)
        page = self._s.scratch.readdir(dir_id, after=after, max_entries=max_entries, ctx=ctx)
        if dir_id == ROOT_ID and self._parts.shown():  # the scratch files of /partitions'
            # directories are under the scratch area's "partitions", never listed here
            page = DirPage(
                tuple(e for e in page.entries if e.name != PARTITIONS),
                page.eof,
                page.cookieverf,
            )
        extra: list[tuple[int, FileId, str]] = []
        if dir_id == ROOT_ID:
            extra = [(fid + COOKIE_OFFSET, fid, n) for n, fid in ROOT_STATIC.items()]
            if self._parts.shown():
                extra.append((PARTITIONS_ID + COOKIE_OFFSET, PARTITIONS_ID, PARTITIONS))
        elif dir_id == DATA_DIR_ID:
            extra = [(DATA_CSV_ID + COOKIE_OFFSET, DATA_CSV_ID, DATA_CSV)]
        extra = [e for e in extra if e[0] > after]
        if not extra:
            return page
        merged = sorted(
            [(e.cookie, e.fileid, e.name) for e in page.entries] + extra, key=lambda e: e[0]
        )
        if not page.eof and page.entries:
            last = page.entries[-1].cookie
            merged = [e for e in merged if e[0] <= last]
        out = merged[:max_entries]
        eof = page.eof and len(merged) <= max_entries
        return DirPage(
            tuple(DirEntry(fid, name, cookie) for cookie, fid, name in out),
            eof,
            page.cookieverf,
        )

    def partition_readdir(
        self, dir_id: FileId, after: int, max_entries: int, ctx: CallContext
    ) -> DirPage:
        """A partition directory: its tree entries (small cookies), then the scratch files
        made there (cookies from the scratch ids up)."""
        tree = self._parts.readdir(dir_id, after=after, max_entries=max_entries)
        made = self._parts.scratch_dir(dir_id, make=False)
        if not tree.eof or made is None:
            return tree
        left = max_entries - len(tree.entries)
        if left <= 0:
            return DirPage(tree.entries, False)
        page = self._s.scratch.readdir(made, after=after, max_entries=left, ctx=ctx)
        files = tuple(e for e in page.entries if e.name not in (".", ".."))
        return DirPage(tree.entries + files, page.eof, page.cookieverf)

    @staticmethod
    def page(names: list[tuple[int, FileId, str]], after: int, max_entries: int) -> DirPage:
        rest = [e for e in names if e[0] > after]
        out = rest[:max_entries]
        return DirPage(
            tuple(DirEntry(fid, name, cookie) for cookie, fid, name in out),
            len(rest) <= max_entries,
        )

    def static_child(self, dir_id: FileId, name: str) -> FileId | None:
        """The id of a table entry (not scratch) named ``name`` in ``dir_id``, if any."""
        if is_partition_entry(dir_id):
            return self._parts.node(dir_id).children.get(name)
        if dir_id == ROOT_ID:
            if name == "data":
                return DATA_DIR_ID
            if name == PARTITIONS and self._parts.shown():
                return PARTITIONS_ID
            return ROOT_STATIC.get(name)
        if dir_id == DATA_DIR_ID and name == DATA_CSV:
            return DATA_CSV_ID
        return None

    def in_versions(self, dir_id: FileId) -> bool:
        """Whether ``dir_id`` is in the read-only tree /versions (STALE: a partition
        directory gone)."""
        if is_partition_entry(dir_id):
            self._parts.node(dir_id)  # STALE if gone
        return dir_id == VERSIONS_ID or version_of(dir_id) is not None

    def made_in(self, dir_id: FileId) -> FileId:
        """The scratch directory a file made in ``dir_id`` goes to (a partition
        directory's own: ROFS for /partitions itself)."""
        if is_partition_entry(dir_id):
            if self._s.read_only:
                raise status_error(Nfsstat3.NFS3ERR_ROFS, "the user may not write this table")
            made = self._parts.scratch_dir(dir_id, make=True)
            assert made is not None
            return made
        return dir_id

    def scratch_of(self, dir_id: FileId) -> FileId:
        """The scratch directory of ``dir_id``, where its files made by clients are
        (NOENT: a partition directory where none was made)."""
        if is_partition_entry(dir_id):
            made = self._parts.scratch_dir(dir_id, make=False)
            if made is None:
                raise status_error(Nfsstat3.NFS3ERR_NOENT)
            return made
        return dir_id

    def editable(self, fid: FileId | None) -> bool:
        """Whether ``fid`` is a data.csv (the table's or a partition's)."""
        return fid == DATA_CSV_ID or (fid is not None and is_partition_file(fid))

    def create(
        self, dir_id: FileId, name: str, attrs: Sattr3, ctx: CallContext, *, guarded: bool
    ) -> FileId:
        """Create a scratch file; UNCHECKED on data.csv opens it (a size stages a truncation)."""
        if self.in_versions(dir_id):
            raise status_error(Nfsstat3.NFS3ERR_ROFS)
        static = self.static_child(dir_id, name)
        if static is not None:
            # GUARDED on data.csv opens it like UNCHECKED: libnfs (nfs-cp) creates its
            # target GUARDED, and data.csv always exists, so it could never be replaced.
            if guarded and not self.editable(static):
                raise status_error(Nfsstat3.NFS3ERR_EXIST)
            if not self.editable(static) and static not in (SCHEMA_ID, CHANGES_ID):
                raise status_error(Nfsstat3.NFS3ERR_ISDIR)
            if attrs.size is not None:
                if static in (SCHEMA_ID, CHANGES_ID):
                    raise status_error(Nfsstat3.NFS3ERR_ROFS)
                self._rules.writable()
                self._rules.truncate(attrs.size, ctx, self.part_of(static))
            return static
        fid = self._s.scratch.create(self.made_in(dir_id), name, attrs, ctx, guarded=guarded)
        self._s.scratch_base.setdefault(fid, self._reads.version())
        return fid

    def create_exclusive(
        self, dir_id: FileId, name: str, verifier: bytes, ctx: CallContext
    ) -> FileId:
        """Create a scratch file exclusively (mkstemp, cp): it remembers the table version."""
        if self.in_versions(dir_id):
            raise status_error(Nfsstat3.NFS3ERR_ROFS)
        if self.static_child(dir_id, name) is not None:
            raise status_error(Nfsstat3.NFS3ERR_EXIST)
        fid = self._s.scratch.create_exclusive(self.made_in(dir_id), name, verifier, ctx)
        self._s.scratch_base.setdefault(fid, self._reads.version())
        return fid

    def mkdir(self, dir_id: FileId, name: str, attrs: Sattr3, ctx: CallContext) -> FileId:
        """Create a scratch directory (not in /versions, nor in /partitions)."""
        if self.in_versions(dir_id):
            raise status_error(Nfsstat3.NFS3ERR_ROFS)
        self._parts.refuse(dir_id)
        if self.static_child(dir_id, name) is not None:
            raise status_error(Nfsstat3.NFS3ERR_EXIST)
        return self._s.scratch.mkdir(dir_id, name, attrs, ctx)

    def remove(self, dir_id: FileId, name: str, ctx: CallContext) -> None:
        """Remove a scratch file; removing data.csv deletes every row (one commit)."""
        if self.in_versions(dir_id):
            raise status_error(Nfsstat3.NFS3ERR_ROFS)
        static = self.static_child(dir_id, name)
        if self.editable(static):
            # every row of the file goes in one commit (a partition's: that partition's)
            assert static is not None
            part = self.part_of(static)
            self._rules.writable()
            own = self._s.writers.get(WriterKey.of(ctx, part))
            if own is not None:
                self._s.drop(own)
            face = self._rules.face(part)
            self._rules.apply(BytesBase(b""), face.version(), BytesBase(b""), face=face)
            return
        if static in (SCHEMA_ID, CHANGES_ID):
            raise status_error(Nfsstat3.NFS3ERR_ACCES, f"{name} is read-only")
        if static is not None:
            if is_partition_entry(static):
                self._parts.refuse(static)
            raise status_error(Nfsstat3.NFS3ERR_ISDIR)
        dir_id = self.scratch_of(dir_id)
        fid = self.lookup_scratch(dir_id, name, ctx)
        self._s.scratch.remove(dir_id, name, ctx)
        if fid is not None:
            self._s.scratch_base.pop(fid, None)

    def part_of(self, fid: FileId | None) -> str:
        """The ``part`` of a data.csv (see `WriteRules.target`): "" for the table's."""
        return "" if fid is None or fid == DATA_CSV_ID else self._parts.part_of(fid)

    def lookup_scratch(self, dir_id: FileId, name: str, ctx: CallContext) -> FileId | None:
        try:
            return self._s.scratch.lookup(dir_id, name, ctx)
        except NfsError:
            return None

    def rmdir(self, dir_id: FileId, name: str, ctx: CallContext) -> None:
        """Remove an empty scratch directory (the table's own directories stay)."""
        if self.in_versions(dir_id):
            raise status_error(Nfsstat3.NFS3ERR_ROFS)
        self._parts.refuse(dir_id)
        static = self.static_child(dir_id, name)
        if static in (DATA_DIR_ID, VERSIONS_ID, PARTITIONS_ID):
            raise status_error(Nfsstat3.NFS3ERR_ACCES, "the table's directories cannot be removed")
        if static is not None:
            raise status_error(Nfsstat3.NFS3ERR_NOTDIR)
        self._s.scratch.rmdir(dir_id, name, ctx)

    def rename(
        self,
        from_dir: FileId,
        from_name: str,
        to_dir: FileId,
        to_name: str,
        ctx: CallContext,
    ) -> None:
        """Rename scratch entries as POSIX does; a file renamed onto data.csv overwrites the table.

        The overwrite is diffed against the version the table had when the file was
        created (``sed -i`` creates its temporary file, reads data.csv, writes, renames).
        """
        if self.in_versions(from_dir) or self.in_versions(to_dir):
            raise status_error(Nfsstat3.NFS3ERR_ROFS)
        src_static = self.static_child(from_dir, from_name)
        dst_static = self.static_child(to_dir, to_name)
        if src_static is not None:
            if src_static == dst_static:
                return
            raise status_error(Nfsstat3.NFS3ERR_ACCES, "the table's own entries cannot be moved")
        from_dir = self.scratch_of(from_dir)
        if self.editable(dst_static):
            assert dst_static is not None
            self._rules.rename_onto_table(from_dir, from_name, ctx, self.part_of(dst_static))
            return
        if dst_static is not None:
            raise status_error(Nfsstat3.NFS3ERR_ACCES, "the table's own entries cannot be replaced")
        to_dir = self.made_in(to_dir)
        replaced = self.lookup_scratch(to_dir, to_name, ctx)
        self._s.scratch.rename(from_dir, from_name, to_dir, to_name, ctx)
        if replaced is not None and not self._s.scratch.contains(replaced):
            self._s.scratch_base.pop(replaced, None)
