"""The /partitions tree of a TableFs: LOOKUP, READDIR, attributes and READ of its entries.

Owns: the tree of the version shown (rebuilt when the version or the table changes, from
the add actions: see :mod:`nfs.table.partitions`) and the renderings of the partitions
read lately (a partition's data.csv is the header plus its files' cached segments).
The partition files are read-only: a write, truncation, create, remove or rename there is
NFS3ERR_ROFS (edit the table's ``/data/data.csv``). See docs/design.md, "The tree".
"""

from __future__ import annotations

from typing import Final

from nfs.protocol.nfs3 import Nfsstat3
from nfs.protocol.vfs import DirEntry, DirPage, FileId
from nfs.table.partitions import (
    PARTITIONS_ID,
    Node,
    PartitionTree,
    build_tree,
    is_partition_entry,
)
from nfs.table.reads import Reads
from nfs.table.segstore import SegmentedRendering
from nfs.table.state import ROOT_ID, TableState, nfs_error, status_error
from nfs.table.writers import Bounded
from posixlake.errors import PosixLakeError

__all__ = ["KEEP_PARTITION_RENDERINGS", "READ_ONLY_MESSAGE", "PartitionFiles"]

KEEP_PARTITION_RENDERINGS: Final = 64
"""Renderings of partitions kept (each is a list of mapped segments: cheap)."""
READ_ONLY_MESSAGE: Final = (
    "the partition files are read-only: edit /data/data.csv (rows of any partition)"
)


class PartitionFiles:
    """/partitions of the version shown (see the module docstring)."""

    def __init__(self, state: TableState, reads: Reads) -> None:
        self._s = state
        self._reads = reads
        self._tree: tuple[bytes, PartitionTree] | None = None
        self._renderings: Bounded[tuple[bytes, int, FileId], SegmentedRendering] = Bounded(
            KEEP_PARTITION_RENDERINGS
        )

    def shown(self) -> bool:
        """Whether the table is partitioned (then / lists ``partitions``)."""
        try:
            return bool(self._s.db.partition_columns)
        except PosixLakeError as err:
            raise nfs_error(err) from err

    def tree(self) -> PartitionTree:
        """The tree of the version shown (listed from the add actions once per version)."""
        version = self._reads.version()
        gen = self._s.table_gen + self._s.file_gen
        if self._tree is not None and self._tree[0] == gen and self._tree[1].version == version:
            return self._tree[1]
        if not self.shown():
            raise status_error(Nfsstat3.NFS3ERR_STALE, "the table is not partitioned")
        try:
            plan = self._s.segmenter.plan(version)
        except PosixLakeError as err:
            raise nfs_error(err) from err
        if plan is None:
            raise status_error(
                Nfsstat3.NFS3ERR_NOTSUPP,
                "partitions: the table's files cannot be read one by one (deletion vectors "
                "or column mapping); read /data/data.csv",
            )
        tree = build_tree(version, plan, ROOT_ID)
        self._tree = (gen, tree)
        return tree

    def node(self, fid: FileId) -> Node:
        """The entry ``fid`` of the current tree (STALE: not there now)."""
        got = self.tree().nodes.get(fid)
        if got is None:
            raise status_error(Nfsstat3.NFS3ERR_STALE, "no such partition at this version")
        return got

    def lookup(self, dir_id: FileId, name: str) -> FileId:
        node = self.node(dir_id)
        if node.is_file:
            raise status_error(Nfsstat3.NFS3ERR_NOTDIR)
        if name in ("", "."):
            return dir_id
        if name == "..":
            return node.parent
        got = node.children.get(name)
        if got is None:
            raise status_error(Nfsstat3.NFS3ERR_NOENT)
        return got

    def readdir(self, dir_id: FileId, *, after: int, max_entries: int) -> DirPage:
        node = self.node(dir_id)
        if node.is_file:
            raise status_error(Nfsstat3.NFS3ERR_NOTDIR)
        names = [(1, dir_id, "."), (2, node.parent, "..")] + [
            (3 + i, fid, name) for i, (name, fid) in enumerate(node.children.items())
        ]
        rest = [e for e in names if e[0] > after]
        out = rest[:max_entries]
        return DirPage(
            tuple(DirEntry(fid, name, cookie) for cookie, fid, name in out),
            len(rest) <= max_entries,
        )

    def rendering(self, fid: FileId) -> SegmentedRendering:
        """The bytes of a partition's data.csv at the version shown (its segments only)."""
        node = self.node(fid)
        if not node.is_file:
            raise status_error(Nfsstat3.NFS3ERR_ISDIR)
        tree = self.tree()
        key = (self._s.table_gen + self._s.file_gen, tree.version, fid)
        got = self._renderings.get(key)
        if got is None:
            try:
                got = self._s.segmenter.rendering(tree.version, tree.plan, node.files)
            except PosixLakeError as err:
                raise nfs_error(err) from err
            self._renderings.set(key, got)
        return got

    def read(self, fid: FileId, offset: int, count: int) -> tuple[bytes | memoryview, bool]:
        if not self._s.db.authorizer.allows("read"):
            raise status_error(Nfsstat3.NFS3ERR_ACCES, "the user may not read this table")
        return self.rendering(fid).read(offset, count)

    @staticmethod
    def refuse(fid: FileId) -> None:
        """Refuse a change in the tree (NFS3ERR_ROFS), if ``fid`` is in it."""
        if is_partition_entry(fid):
            raise status_error(Nfsstat3.NFS3ERR_ROFS, READ_ONLY_MESSAGE)

    def generation(self, fid: FileId) -> bytes:
        """Directories keep their handles while they exist; data.csv as /data/data.csv."""
        if fid == PARTITIONS_ID and self.shown():
            return self._s.table_gen
        node = self.node(fid)
        return self._s.file_gen if node.is_file else self._s.table_gen
