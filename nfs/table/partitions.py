"""A partitioned table's ``/partitions`` tree: Hive-style directories over one version's files.

``/partitions/<col>=<value>/.../data.csv`` (nested in partition-column order, ``data.csv``
in the innermost directories only) shows the rows of one partition: the table's header
(partition columns included, so ``cat partitions/*/data.csv`` holds the table's rows and
a row means the same in either file) followed by the segments of that partition's data
files, the very segments the table's ``data.csv`` is made of (:mod:`nfs.table.segments`).
The directories come from the add actions' partition values; no data file is read to
list them, and reading one partition reads (renders) only its files.

Names are escaped the way Spark, Hive and Delta escape partition paths
(``ExternalCatalogUtils.escapePathName``: ``%XX`` for ``"#%'*/:=?\\{[]^``, DEL and control
characters), and a NULL or empty value is Hive's ``__HIVE_DEFAULT_PARTITION__``. A value
that is literally ``__HIVE_DEFAULT_PARTITION__`` has its first ``_`` escaped (``%5F``), so
every directory name stands for one value (:func:`unescape_path_name` reverses
:func:`escape_path_name`).

Ids: ``/partitions`` is :data:`PARTITIONS_ID`; a partition directory is
:data:`PARTITION_BASE` plus twice a 62-bit hash of its path, its ``data.csv`` that plus
one: the same ids after a restart, for as long as the partition exists.

This module is pure (names, ids, the tree of one plan); :mod:`nfs.table.partfiles` serves it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from nfs.protocol.vfs import FileId

if TYPE_CHECKING:  # the one use: a type (access.py imports this module without pyarrow)
    from nfs.table.segments import Plan

__all__ = [
    "HIVE_DEFAULT_PARTITION",
    "PARTITIONS",
    "PARTITIONS_ID",
    "PARTITION_BASE",
    "Node",
    "PartitionTree",
    "build_tree",
    "escape_path_name",
    "is_partition_entry",
    "is_partition_file",
    "parse_partition_dir",
    "partition_dir_name",
    "partition_id",
    "unescape_path_name",
]

PARTITIONS: Final = "partitions"
PARTITIONS_ID: Final = FileId(7)
"""/partitions (shown only for a partitioned table)."""
PARTITION_BASE: Final = 1 << 63
"""Partition directories and their data.csv have ids from here up (above the scratch ids)."""
HIVE_DEFAULT_PARTITION: Final = "__HIVE_DEFAULT_PARTITION__"
"""The directory value of a NULL (or empty) partition value, as Hive and Spark write it."""

_ESCAPED: Final = frozenset("\"#%'*/:=?\\{[]^\x7f") | frozenset(chr(c) for c in range(0x20))
"""Spark's ``ExternalCatalogUtils.charToEscape`` (NUL added: no NFS name holds it)."""
_ESCAPE_RE: Final = re.compile(r"%([0-9A-Fa-f]{2})")


def escape_path_name(text: str) -> str:
    """Escape ``text`` for a partition path the way Spark/Hive/Delta do (``%XX``)."""
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in text)


def unescape_path_name(name: str) -> str:
    """Reverse :func:`escape_path_name` (any ``%XX`` is decoded, as Spark's unescape does)."""
    return _ESCAPE_RE.sub(lambda m: chr(int(m.group(1), 16)), name)


def partition_dir_name(column: str, value: str | None) -> str:
    """The directory name of ``column`` = ``value`` (a value as the Delta log stores it)."""
    if value is None or value == "":
        shown = HIVE_DEFAULT_PARTITION
    elif value == HIVE_DEFAULT_PARTITION:
        shown = "%5F" + escape_path_name(value[1:])
    else:
        shown = escape_path_name(value)
    return f"{escape_path_name(column)}={shown}"


def parse_partition_dir(name: str) -> tuple[str, str | None]:
    """Return (column, value) of a directory name (None: the NULL partition).

    Raises:
        ValueError: ``name`` is not ``<col>=<value>``.
    """
    column, sep, value = name.partition("=")
    if not sep or not column:
        raise ValueError(f"not a partition directory name: {name!r}")
    if value == HIVE_DEFAULT_PARTITION:
        return unescape_path_name(column), None
    return unescape_path_name(column), unescape_path_name(value)


def partition_id(path: Sequence[str], *, file: bool = False) -> FileId:
    """The id of the partition directory at ``path`` (its names below /partitions), or of
    its data.csv with ``file``."""
    digest = hashlib.sha256("\0".join(path).encode("utf-8", "surrogatepass")).digest()
    h = int.from_bytes(digest[:8], "big") >> 2  # 62 bits
    return FileId(PARTITION_BASE + 2 * h + (1 if file else 0))


def is_partition_entry(fid: int) -> bool:
    """Whether ``fid`` is /partitions, a partition directory or a partition's data.csv."""
    return fid == PARTITIONS_ID or fid >= PARTITION_BASE


def is_partition_file(fid: int) -> bool:
    """Whether ``fid`` is a partition's data.csv (table rows: read needs "read")."""
    return fid >= PARTITION_BASE and fid & 1 == 1


@dataclass(frozen=True)
class Node:
    """One directory of the tree, or a partition's data.csv.

    Attributes:
        fid: its id.
        path: its names below /partitions (``()`` for /partitions itself).
        parent: the id of the directory holding it.
        children: name -> id of the entries in it, sorted by name (empty for a file).
        files: for a leaf directory and its data.csv, the indexes of the partition's data
            files in the plan (segment order).
        is_file: a data.csv.
    """

    fid: FileId
    path: tuple[str, ...]
    parent: FileId
    children: Mapping[str, FileId] = field(default_factory=dict)
    files: tuple[int, ...] = ()
    is_file: bool = False


@dataclass(frozen=True)
class PartitionTree:
    """The /partitions tree of one version.

    Attributes:
        version: the table version.
        plan: its files in segment order (the segments a partition's data.csv is made of).
        nodes: every directory and data.csv by id.
    """

    version: int
    plan: Plan
    nodes: Mapping[FileId, Node]


def build_tree(version: int, plan: Plan, root_parent: FileId) -> PartitionTree:
    """Group ``plan``'s files by their partition values into the /partitions tree.

    Files whose values escape to the same names (NULL and the empty string) share a
    directory. Only the add actions' partition values are used (no data file is read).

    Raises:
        RuntimeError: two paths hash to one id (not expected in 2**62).
    """
    snapshot = plan.snapshot
    columns = snapshot.partition_columns
    leaves: dict[tuple[str, ...], list[int]] = {}
    for i, f in enumerate(plan.files):
        values = f.serialized_partition_values(snapshot.schema)
        path = tuple(partition_dir_name(c, values.get(c)) for c in columns)
        leaves.setdefault(path, []).append(i)
    children: dict[tuple[str, ...], set[str]] = {(): set()}
    for path in leaves:
        for depth in range(len(path)):
            children.setdefault(path[:depth], set()).add(path[depth])
            children.setdefault(path[: depth + 1], set())
    nodes: dict[FileId, Node] = {}
    for path, names in children.items():
        fid = PARTITIONS_ID if not path else partition_id(path)
        parent = (
            root_parent
            if not path
            else (PARTITIONS_ID if len(path) == 1 else partition_id(path[:-1]))
        )
        kids = {n: partition_id((*path, n)) for n in sorted(names)}
        files = tuple(leaves.get(path, ())) if path else ()
        if path and len(path) == len(columns):
            data = partition_id(path, file=True)
            kids = {"data.csv": data}
            nodes[data] = Node(data, path, fid, files=files, is_file=True)
        if fid in nodes:
            raise RuntimeError(f"partition ids collide: {path!r}")
        nodes[fid] = Node(fid, path, parent, kids, files)
    return PartitionTree(version, plan, nodes)
