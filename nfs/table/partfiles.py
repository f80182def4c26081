"""The /partitions tree of a TableFs: LOOKUP, READDIR, attributes and READ of its entries.

Owns: the tree of the version shown (rebuilt when the version or the table changes, from
the add actions: see :mod:`nfs.table.partitions`) and the renderings of the partitions
read lately (a partition's data.csv is the header plus its files' cached segments).
A partition's data.csv is written as ``/data/data.csv`` is, under the same rules
(:mod:`nfs.table.writes`: per-writer staging, journal, one commit), limited to that
partition's rows: :class:`PartitionFace` is what the rules see of it (its bytes at a
version, the `~nfs.table.apply.Scope` of its rows). Each partition directory also holds
scratch files (``sed -i``'s temporary file, renamed onto its data.csv). See
docs/design.md, "The tree", and docs/nfs-writes.md, "Partition files".
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

import pyarrow as pa

from nfs.protocol.nfs3 import Nfsstat3
from nfs.protocol.rpc import CallContext
from nfs.protocol.vfs import DirEntry, DirPage, FileId, NfsError
from nfs.table.apply import Scope
from nfs.table.partitions import (
    PARTITIONS_ID,
    Node,
    PartitionTree,
    build_tree,
    is_partition_entry,
    parse_partition_dir,
    partition_id,
)
from nfs.table.reads import Reads
from nfs.table.segstore import SegmentedRendering
from nfs.table.staging import Base
from nfs.table.state import ROOT_ID, TableState, nfs_error, status_error
from nfs.table.writers import Bounded, WriterKey
from posixlake.errors import PosixLakeError

__all__ = [
    "KEEP_PARTITION_RENDERINGS",
    "READ_ONLY_MESSAGE",
    "PartitionFace",
    "PartitionFiles",
    "part_file",
]

KEEP_PARTITION_RENDERINGS: Final = 64
"""Renderings of partitions kept (each is a list of mapped segments: cheap)."""
READ_ONLY_MESSAGE: Final = "the /partitions tree is made of the table's partitions"
_ROOT: Final = CallContext.local()
_KEEP_TREES: Final = 8
"""Trees of older versions kept (a write's base may be one)."""


def part_file(part: str) -> FileId:
    """The id of the data.csv of the partition at ``part`` (its path below /partitions)."""
    return partition_id(tuple(part.split("/")), file=True)


class PartitionFiles:
    """/partitions of the version shown (see the module docstring)."""

    def __init__(self, state: TableState, reads: Reads) -> None:
        self._s = state
        self._reads = reads
        self._tree: tuple[bytes, PartitionTree] | None = None
        self._renderings: Bounded[tuple[bytes, int, FileId], SegmentedRendering] = Bounded(
            KEEP_PARTITION_RENDERINGS
        )
        self._older: Bounded[tuple[bytes, int], PartitionTree] = Bounded(_KEEP_TREES)

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

    def tree_at(self, version: int) -> PartitionTree:
        """The tree of ``version`` (the one shown, or an older one: a write's base)."""
        gen = self._s.table_gen + self._s.file_gen
        if self._tree is not None and self._tree[0] == gen and self._tree[1].version == version:
            return self._tree[1]
        got = self._older.get((gen, version))
        if got is None:
            try:
                plan = self._s.segmenter.plan(version)
            except PosixLakeError as err:
                raise nfs_error(err) from err
            if plan is None:
                raise status_error(Nfsstat3.NFS3ERR_NOTSUPP, "partitions: not file by file")
            got = build_tree(version, plan, ROOT_ID)
            self._older.set((gen, version), got)
        return got

    def rendering_at(self, version: int, part: str) -> SegmentedRendering:
        """The bytes of the data.csv of the partition at ``part`` at ``version``
        (NOENT: no such partition then)."""
        fid = part_file(part)
        tree = self.tree_at(version)
        node = tree.nodes.get(fid)
        if node is None:
            raise status_error(Nfsstat3.NFS3ERR_NOENT, f"no partition {part} at v{version}")
        key = (self._s.table_gen + self._s.file_gen, version, fid)
        got = self._renderings.get(key)
        if got is None:
            try:
                got = self._s.segmenter.rendering(version, tree.plan, node.files)
            except PosixLakeError as err:
                raise nfs_error(err) from err
            self._renderings.set(key, got)
        return got

    def part_of(self, fid: FileId) -> str:
        """The path below /partitions of a partition's data.csv (STALE: not there now)."""
        node = self.node(fid)
        if not node.is_file:
            raise status_error(Nfsstat3.NFS3ERR_ISDIR)
        return "/".join(node.path)

    def scope(self, part: str) -> Scope:
        """The rows of the partition at ``part`` (its values, typed, from the add actions
        of the version shown; STALE: no such partition now)."""
        tree = self.tree()
        node = tree.nodes.get(part_file(part))
        name = f"partitions/{part}/data.csv"
        snapshot = tree.plan.snapshot
        if node is not None and node.files:
            values = tree.plan.files[node.files[0]].partition_values
            return Scope(name, tuple((c, values.get(c)) for c in snapshot.partition_columns))
        # gone since (its rows deleted by others): its values from its names
        typed: list[tuple[str, object]] = []
        try:
            for dir_name in part.split("/"):
                column, value = parse_partition_dir(dir_name)
                kind = snapshot.schema.field(column).type
                typed.append(
                    (column, None if value is None else pa.scalar(value).cast(kind).as_py())
                )
        except (ValueError, KeyError, pa.ArrowException) as err:
            raise status_error(Nfsstat3.NFS3ERR_STALE, f"no partition {part}") from err
        return Scope(name, tuple(typed))

    def scratch_dir(self, fid: FileId, *, make: bool) -> FileId | None:
        """The scratch directory of the partition directory ``fid``: the files a client
        creates there (``sed -i``'s temporary file) live in the scratch area, under
        ``partitions/<its path>`` (scratch ids; the scratch root's ``partitions`` is never
        listed: /partitions is). Made with ``make`` (ROFS for /partitions itself), else
        None while none was made."""
        node = self.node(fid)
        if node.is_file or fid == PARTITIONS_ID:
            if make:
                raise status_error(Nfsstat3.NFS3ERR_ROFS, READ_ONLY_MESSAGE)
            return None
        scratch = self._s.scratch
        at = ROOT_ID
        for name in ("partitions", *node.path):
            try:
                at = scratch.lookup(at, name, _ROOT)
            except NfsError as err:
                if err.status != Nfsstat3.NFS3ERR_NOENT or not make:
                    if make:
                        raise
                    return None
                at = scratch.add_dir(at, name, mode=0o777)
        return at

    def face(self, part: str) -> PartitionFace:
        """What the write rules see of the partition's data.csv at ``part``."""
        return PartitionFace(self, self._reads, part)

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

    def read(
        self, fid: FileId, offset: int, count: int, ctx: CallContext
    ) -> tuple[bytes | memoryview, bool]:
        """READ a partition's data.csv: the caller's own staged content while it writes
        it, else the partition at the version shown (what the caller READ is recorded:
        the base of its next edit, as for /data/data.csv)."""
        if not self._s.db.authorizer.allows("read"):
            raise status_error(Nfsstat3.NFS3ERR_ACCES, "the user may not read this table")
        part = self.part_of(fid)
        key = WriterKey.of(ctx, part)
        w = self._s.writers.get(key)
        if w is not None:
            return w.staging.read(offset, count)
        tree = self.tree()
        got = self.rendering(fid).read(offset, count)
        self._s.views.record(key.slot, tree.version, offset, offset + len(got[0]), got[1])
        self._s.own.pop(key.slot)
        return got

    def staged_size(self, fid: FileId, ctx: CallContext) -> tuple[int, float] | None:
        """The size and mtime of the caller's staged content of this partition's
        data.csv, if it writes it."""
        w = self._s.writers.get(WriterKey.of(ctx, self.part_of(fid)))
        return None if w is None else (w.staging.size, w.staging.mtime)

    @staticmethod
    def refuse(fid: FileId) -> None:
        """Refuse a change of the tree itself (NFS3ERR_ROFS), if ``fid`` is in it."""
        if is_partition_entry(fid):
            raise status_error(Nfsstat3.NFS3ERR_ROFS, READ_ONLY_MESSAGE)

    def generation(self, fid: FileId) -> bytes:
        """Directories keep their handles while they exist; data.csv as /data/data.csv."""
        if fid == PARTITIONS_ID and self.shown():
            return self._s.table_gen
        node = self.node(fid)
        return self._s.file_gen if node.is_file else self._s.table_gen


class PartitionFace:
    """What the write rules see of one partition's data.csv (an `~nfs.table.reads.EditFace`):
    its bytes at a version (its files' segments), its rows' `Scope`; no shadows (its
    bytes are always a rendering)."""

    def __init__(self, parts: PartitionFiles, reads: Reads, part: str) -> None:
        self._parts = parts
        self._reads = reads
        self._part = part

    @property
    def part(self) -> str:
        return self._part

    @property
    def scope(self) -> Scope:
        return self._parts.scope(self._part)

    def version(self) -> int:
        return self._reads.version()

    def presented(self, version: int) -> Base:
        return self._parts.rendering_at(version, self._part)

    def presented_or_none(self, version: int) -> Base | None:
        try:
            return self.presented(version)
        except NfsError:
            return None

    def seen_versions(self) -> Iterator[tuple[int, Base]]:
        return iter(())  # its versions are rendered on demand from cached segments

    def stamp_of(self, version: int) -> int:
        return self._reads.stamp_of(version)
