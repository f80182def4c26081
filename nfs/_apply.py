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
import pyarrow.compute as pc

from nfs._staging import Base, read_all
from posixlake import DatabaseOps
from posixlake.csvcodec import parse_csv
from posixlake.errors import DuplicateKeyError

__all__ = [
    "Applied",
    "appended_lines",
    "apply_content",
    "apply_lines",
    "arrow_schema",
    "committed_write",
    "header_of",
    "loaded_version",
    "partition_columns",
    "same_bytes",
    "table_identity",
]

logger = logging.getLogger(__name__)

_LF: Final = 0x0A
WRITE_TAG: Final = "posixlake.nfs_write"
"""The commit metadata key that names the staged NFS write a commit applied."""

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


def header_of(base: Base) -> bytes:
    """Return the first line of ``base`` (with its LF), or all of it when it has none."""
    head = bytes(read_all(base, 0, 4096))
    end = head.find(b"\n")
    if end < 0:
        return bytes(read_all(base))
    return head[: end + 1]


def _insert_lines(db: DatabaseOps, extra: memoryview, header: bytes) -> Applied:
    # ``cat more.csv >> data.csv`` appends a header line again: it is not a row
    if header and bytes(extra[: len(header)]) == header:
        extra = extra[len(header) :]
    rows = parse_csv(extra, arrow_schema(db), header="none")
    if rows.num_rows == 0:
        return Applied("unchanged", None)
    try:
        done = db.insert(rows)
    except DuplicateKeyError as err:
        try:
            rows = _not_yet_there(db, rows)
        except pa.ArrowException:  # columns a join cannot compare (nested): as it was
            raise err from None
        if rows.num_rows == 0:
            return Applied("unchanged", None)
        done = db.insert(rows)  # DuplicateKeyError again: a key held with other values
    return Applied("insert", done.version, inserted=rows.num_rows)


def _not_yet_there(db: DatabaseOps, rows: pa.Table) -> pa.Table:
    """Drop appended rows the keyed table already holds exactly (a resent append).

    A client may resend an append the server already committed: a retransmission after a
    lost reply, or a page that holds its own earlier line. Identical rows are not new;
    a row whose key holds other values is still a DuplicateKeyError. Reads the table:
    only on this (rare) path.
    """
    current = db.to_arrow()
    cols = rows.column_names
    fresh = rows.join(current.select(cols), keys=cols, join_type="left anti")
    return fresh.select(cols)


def _repeated_keys(table: pa.Table, key: list[str]) -> pa.Table:
    """Return the distinct key tuples that occur more than once in ``table``."""
    if table.num_rows == 0:
        return table.select(key).slice(0, 0)
    counts = table.select(key).group_by(key).aggregate([([], "count_all")])
    repeated = counts.filter(pc.greater(counts["count_all"], 1))
    return repeated.select(key)


def _describe_keys(keys: pa.Table, limit: int = 10) -> str:
    rows = keys.slice(0, limit).to_pylist()
    text = ", ".join(" / ".join(f"{name}={value!r}" for name, value in row.items()) for row in rows)
    more = keys.num_rows - limit
    return text + (f" and {more} more" if more > 0 else "")


def _without_keys(table: pa.Table, keys: pa.Table, key: list[str]) -> pa.Table:
    if keys.num_rows == 0:
        return table
    return table.join(keys, keys=key, join_type="left anti").select(table.column_names)


def _with_keys(table: pa.Table, keys: pa.Table, key: list[str]) -> pa.Table:
    if keys.num_rows == 0:
        return table.slice(0, 0)
    return table.join(keys, keys=key, join_type="left semi").select(table.column_names)


def _diff_keyed(db: DatabaseOps, old: pa.Table, new: pa.Table, key: list[str]) -> Applied:
    """Apply base -> content by key onto the current version: last commit wins per key.

    Each key the content inserts, updates or deletes is deleted from the current version
    and the content's row (if any) inserted, in one MERGE; keys the content leaves as
    they were in the base are not touched, so what others committed to them survives.
    Keys the base holds more than once (two processes once inserted the same key) are
    replaced by the content's row, which repairs them. Raises DuplicateKeyError, naming
    them, when the content itself repeats keys.
    """
    from nfs.diff import diff_rows

    repeated_new = _repeated_keys(new, key)
    if repeated_new.num_rows:
        raise DuplicateKeyError(f"data.csv repeats key(s): {_describe_keys(repeated_new)}")
    repaired = _repeated_keys(old, key)
    if repaired.num_rows:
        logger.warning(
            "data.csv: the base version holds repeated key(s) %s; the write replaces them",
            _describe_keys(repaired),
        )
    diff = diff_rows(_without_keys(old, repaired, key), new, key=key)
    if diff.is_empty and repaired.num_rows == 0:
        return Applied("unchanged", None)
    rewritten = pa.concat_tables([diff.inserts, diff.updates])
    deleted_keys = diff.deletes.select(key)
    gone = pa.concat_tables([deleted_keys, repaired.cast(deleted_keys.schema)])
    # one row per key (a MERGE source must not repeat a key): the base's row of each
    # deleted or repaired key, and each rewritten row (deletes any current row of its key)
    delete = pa.concat_tables([_dedup(old, gone, key), _without_keys(rewritten, gone, key)])
    done = db.replace_rows(delete=delete, insert=rewritten, key=key)
    deleted, inserted = done
    updated = min(diff.updates.num_rows, deleted)
    return Applied(
        "diff",
        done.version,
        inserted=max(0, inserted - updated),
        updated=updated,
        deleted=max(0, deleted - updated),
    )


def _dedup(old: pa.Table, keys: pa.Table, key: list[str]) -> pa.Table:
    """One row of ``old`` per key of ``keys`` (a MERGE source must not repeat a key)."""
    rows = _with_keys(old, keys, key)
    if rows.num_rows == 0:
        return rows
    first = (
        rows.append_column("__i", pa.array(range(rows.num_rows), pa.int64()))
        .group_by(key)
        .aggregate([("__i", "min")])
    )
    return rows.take(first["__i_min"])


def _diff(db: DatabaseOps, new: pa.Table, base_version: int) -> Applied:
    """Apply the change from ``base_version`` to ``new`` onto the current version (3-way).

    ``replace_rows`` commits the rows in memory directly, whatever the table's engine (a
    Spark MERGE would cost seconds for a one-row change). With a primary key see
    :func:`_diff_keyed`; without one, the multiset difference is applied and every row it
    removes must still be there (else ConcurrentChange: another writer changed that row,
    and applying both edits would leave two versions of it).
    """
    from nfs.diff import diff_rows

    old = db.to_arrow(version=base_version)
    if not new.schema.equals(old.schema, check_metadata=False):
        new = new.cast(old.schema)
    key = db.key_columns
    if key:
        return _diff_keyed(db, old, new, list(key))
    diff = diff_rows(old, new, key=None)
    if diff.is_empty:
        return Applied("unchanged", None)
    done = db.replace_rows(delete=diff.deletes, insert=diff.inserts, require_present=True)
    return Applied("diff", done.version, inserted=done.inserted, deleted=done.deleted)


def apply_content(
    db: DatabaseOps,
    content: memoryview,
    *,
    base_version: int,
    base: Base,
    write_id: str | None = None,
) -> Applied:
    """Commit ``content`` as the new ``data.csv`` of ``db`` (at most one commit).

    Args:
        db: the table.
        content: the whole new file.
        base_version: the version the writer started from (its rows are the diff base).
        base: the bytes of ``data.csv`` the writer started from.
        write_id: stored in the commit's metadata as ``posixlake.nfs_write`` (see
            :func:`committed_write`).

    Raises:
        CsvFormatError: bad content (wrong header, column count, value).
        SchemaError / DuplicateKeyError / InvalidOperation: rows the table refuses.
        PermissionDenied: the user may not write (or delete).
        PosixLakeError: any other failure.
    """
    tags = {WRITE_TAG: write_id} if write_id else {}
    with db.commit_tags(tags):
        return _apply(db, content, base_version=base_version, base=base)


def apply_lines(
    db: DatabaseOps, extra: memoryview, *, header: bytes, write_id: str | None = None
) -> Applied:
    """Insert the whole lines ``extra`` that a writer added after its base (one commit).

    ``header``: the base's header line; ``extra`` starting with it again (``cat more.csv
    >> data.csv``) skips it.
    """
    tags = {WRITE_TAG: write_id} if write_id else {}
    with db.commit_tags(tags):
        return _insert_lines(db, extra, header)


def committed_write(db: DatabaseOps, write_id: str, since: int) -> int | None:
    """Return the version whose commit carries ``write_id`` after ``since``, if any."""
    current = db.version
    if current <= since:
        return None
    for info in db.history(current - since):
        if info.version > since and info.tags.get(WRITE_TAG) == write_id:
            return info.version
    return None


def _apply(db: DatabaseOps, content: memoryview, *, base_version: int, base: Base) -> Applied:
    if len(content) == 0:
        done = db.truncate()  # delta-rs directly; no commit when the table is empty
        return Applied("empty", done.version, deleted=done.rows)
    n = base.size
    if len(content) >= n and n > 0:
        prefix = read_all(base)
        if same_bytes(content[:n], prefix):
            if len(content) == n:
                return Applied("unchanged", None)
            extra = appended_lines(content, prefix)
            if extra is not None:
                return _insert_lines(db, extra, header_of(base))
    new = parse_csv(content, arrow_schema(db), header="require")
    return _diff(db, new, base_version)
