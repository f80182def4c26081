"""Turn the new content of ``data.csv`` into ONE Delta transaction.

Glue between the CSV codec, the row diff and :class:`~posixlake.DatabaseOps`:

- empty content: delete every row;
- the content the writer started from plus whole new lines: INSERT those lines;
- anything else: parse the whole file (it must start with the header), diff it against
  the rows of the version the writer started from — by primary key (inserts, updates,
  deletes), or without a key as a multiset of whole rows — and commit that diff with
  ``DatabaseOps.replace_rows`` (one delta-rs MERGE) on the current version, so rows that
  others committed meanwhile survive.

Errors are the posixlake ones (``CsvFormatError`` is a ``SerializationError``); the NFS
status mapping lives in :mod:`nfs.tableview`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Final, Literal

import pyarrow as pa

from posixlake import DatabaseOps
from posixlake.csvcodec import parse_csv

__all__ = [
    "Applied",
    "appended_lines",
    "apply_content",
    "arrow_schema",
    "loaded_version",
    "partition_columns",
    "same_bytes",
    "table_identity",
]

logger = logging.getLogger(__name__)

_LF: Final = 0x0A

Kind = Literal["unchanged", "insert", "diff", "empty"]


@dataclass(frozen=True)
class Applied:
    """What one apply did.

    Attributes:
        kind: ``unchanged`` (no commit), ``insert`` (append fast path), ``diff``
            (overwrite), ``empty`` (all rows deleted).
        version: the version committed, or None when nothing was committed.
        inserted: rows inserted.
        updated: rows updated (tables with a primary key).
        deleted: rows deleted.
    """

    kind: Kind
    version: int | None
    inserted: int = 0
    updated: int = 0
    deleted: int = 0


# -- adapters onto DatabaseOps internals (candidates for public DatabaseOps API) ------------


def loaded_version(db: DatabaseOps) -> int:
    """Return the version ``db`` has loaded, without listing the log (its own writes move it)."""
    log = getattr(db, "_log", None)
    return int(log.version) if log is not None else db.version


def arrow_schema(db: DatabaseOps) -> pa.Schema:
    """Return the table's stored Arrow schema."""
    log = getattr(db, "_log", None)
    if log is not None:
        schema: pa.Schema = log.arrow_schema
        return schema
    return db.schema.to_arrow()


def table_identity(db: DatabaseOps) -> bytes:
    """Return bytes that name the table for good: its Delta table id (else its URI)."""
    log = getattr(db, "_log", None)
    try:
        ident = str(log.table.metadata().id) if log is not None else db.uri
    except AttributeError:
        ident = db.uri
    return ident.encode()


def partition_columns(db: DatabaseOps) -> list[str]:
    """Return the table's partition columns."""
    log = getattr(db, "_log", None)
    return list(log.partition_columns) if log is not None else []


def same_bytes(a: memoryview | bytes, b: memoryview | bytes) -> bool:
    """Compare two byte strings at memcmp speed (a memoryview ``==`` goes byte by byte)."""
    return len(a) == len(b) and bool(pa.py_buffer(a).equals(pa.py_buffer(b)))


def appended_lines(content: memoryview, base: memoryview) -> memoryview | None:
    """Return the bytes ``content`` adds after ``base`` when it only adds whole lines.

    ``base`` must be non-empty and end with LF (a rendering always does), and ``content``
    must start with it and be longer. Returns None otherwise.
    """
    n = len(base)
    if n == 0 or len(content) <= n or base[n - 1] != _LF:
        return None
    if not same_bytes(content[:n], base):
        return None
    return content[n:]


def _header_of(base: memoryview) -> bytes:
    end = bytes(base[:4096]).find(b"\n")
    if end < 0:
        return bytes(base)
    return bytes(base[: end + 1])


def _insert_lines(db: DatabaseOps, extra: memoryview, header: bytes) -> Applied:
    # ``cat more.csv >> data.csv`` appends a header line again: it is not a row
    if header and bytes(extra[: len(header)]) == header:
        extra = extra[len(header) :]
    rows = parse_csv(extra, arrow_schema(db), header="none")
    if rows.num_rows == 0:
        return Applied("unchanged", None)
    before = db.version
    db.insert(rows)
    after = db.version
    return Applied("insert", after if after != before else None, inserted=rows.num_rows)


def _diff(db: DatabaseOps, new: pa.Table, base_version: int) -> Applied:
    """Diff ``new`` against ``base_version`` and commit it with ``replace_rows`` (delta-rs).

    ``replace_rows`` commits the rows in memory directly, whatever the table's engine (a
    Spark MERGE would cost seconds for a one-row change). With a primary key, an update
    is the old row's key deleted and the new row inserted in the same MERGE.
    """
    from nfs.diff import diff_rows

    old = db.to_arrow(version=base_version)
    if not new.schema.equals(old.schema, check_metadata=False):
        new = new.cast(old.schema)
    key = db.primary_key()
    diff = diff_rows(old, new, key=key or None)
    if diff.is_empty:
        return Applied("unchanged", None)
    before = db.version
    if key:
        gone = pa.concat_tables([diff.deletes.select(key), diff.updates.select(key)])
        delete = old.join(gone, keys=key, join_type="left semi").select(old.column_names)
        insert = pa.concat_tables([diff.inserts, diff.updates])
        deleted, inserted = db.replace_rows(delete=delete, insert=insert, key=key)
        updated = min(diff.updates.num_rows, deleted)
        after = db.version
        return Applied(
            "diff",
            after if after != before else None,
            inserted=inserted - updated,
            updated=updated,
            deleted=deleted - updated,
        )
    deleted, inserted = db.replace_rows(delete=diff.deletes, insert=diff.inserts)
    after = db.version
    return Applied("diff", after if after != before else None, inserted=inserted, deleted=deleted)


def apply_content(
    db: DatabaseOps,
    content: memoryview,
    *,
    base_version: int,
    base_content: memoryview,
) -> Applied:
    """Commit ``content`` as the new ``data.csv`` of ``db`` (at most one commit).

    Args:
        db: the table.
        content: the whole new file.
        base_version: the version the writer started from (its rows are the diff base).
        base_content: the bytes of ``data.csv`` the writer started from.

    Raises:
        CsvFormatError: bad content (wrong header, column count, value).
        SchemaError / DuplicateKeyError / InvalidOperation: rows the table refuses.
        PermissionDenied: the user may not write (or delete).
        PosixLakeError: any other failure.
    """
    if len(content) == 0:
        before = db.version
        deleted = db.truncate()  # delta-rs directly; no commit when the table is empty
        after = db.version
        return Applied("empty", after if after != before else None, deleted=deleted)
    if same_bytes(content, base_content):
        return Applied("unchanged", None)
    extra = appended_lines(content, base_content)
    if extra is not None:
        return _insert_lines(db, extra, _header_of(base_content))
    new = parse_csv(content, arrow_schema(db), header="require")
    return _diff(db, new, base_version)
