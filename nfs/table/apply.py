"""Turn the new content of ``data.csv`` into ONE Delta transaction.

Glue between the CSV codec, the row diff and :class:`~posixlake.DatabaseOps`:

- empty content: delete every row (of the partition, for a partition's file: a `Scope`);
- the content the writer started from plus whole new lines: INSERT those lines;
- anything else: parse the whole file (it must start with the header), diff it against
  the rows of the version the writer started from — by primary key (inserts, updates,
  deletes), or without a key as a multiset of whole rows — and commit that diff with
  ``DatabaseOps.replace_rows`` (one delta-rs MERGE) on the current version, so rows that
  others committed meanwhile survive.

A partition's ``data.csv`` (:mod:`nfs.table.partitions`) is the same with a `Scope`: its
rows are the partition's, every row written must hold the partition's values
(InvalidOperation, naming the row, else), and its base and deletes are the partition's.

Errors are the posixlake ones (``CsvFormatError`` is a ``SerializationError``); the NFS
status mapping lives in :mod:`nfs.table.tablefs`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from nfs.table.region import (
    Region,
    changed_pieces,
    changed_regions,
    common_prefix,
    header_of,
    same_bytes,
)
from nfs.table.staging import Base, BytesBase, read_all
from posixlake.csvcodec import CsvFormatError, parse_csv
from posixlake.database import DatabaseOps
from posixlake.delta import quote_ident
from posixlake.errors import DuplicateKeyError, InvalidOperation
from posixlake.sql import sql_literal

__all__ = [
    "Applied",
    "KeyReader",
    "Scope",
    "apply_content",
    "apply_lines",
    "arrow_schema",
    "change_budget",
    "committed_write",
    "header_of",
    "loaded_version",
    "partition_columns",
    "same_bytes",
    "table_identity",
]

logger = logging.getLogger(__name__)

_LF: Final = 0x0A
_QUOTE: Final = b'"'
_CHUNK: Final = 4 << 20
"""Bytes compared (and copied out of a staging) at a time: memory stays bounded."""
_SCAN: Final = 64 << 10
WRITE_TAG: Final = "posixlake.nfs_write"
"""The commit metadata key that names the staged NFS write a commit applied."""

Kind = Literal["unchanged", "insert", "diff", "empty"]


class KeyReader(Protocol):
    """Reads a version's rows by key without reading the whole version."""

    def rows_with_keys(self, version: int, keys: pa.Table) -> pa.Table | None:
        """Return the rows of ``version`` with a key of ``keys`` (None: not available)."""
        ...

    def repeated_keys(self, version: int, key: Sequence[str]) -> pa.Table | None:
        """Return the keys ``version`` holds more than once (None: not available)."""
        ...


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


@dataclass(frozen=True)
class Scope:
    """The rows one file holds: a partition's ``data.csv`` holds the rows whose partition
    columns have that partition's values.

    Attributes:
        name: the file, for messages (``partitions/region=eu/data.csv``).
        values: each partition column and the partition's value of it (None: NULL), as
            the add actions hold it (typed).
    """

    name: str
    values: tuple[tuple[str, object], ...]

    def _matches(self, rows: pa.Table, column: str, value: object) -> pa.ChunkedArray:
        col = rows.column(column)
        if value is None:  # the NULL partition; Delta stores an empty string as NULL too
            ok = pc.is_null(col)
            if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
                ok = pc.or_(ok, pc.fill_null(pc.equal(col, ""), False))
            return ok
        return pc.fill_null(pc.equal(col, pa.scalar(value, col.type)), False)

    def check(self, rows: pa.Table) -> None:
        """Refuse rows of another partition (InvalidOperation naming the first one)."""
        for column, value in self.values:
            ok = self._matches(rows, column, value)
            if pc.all(ok).as_py() is False:
                at = pc.index(ok, False).as_py()
                got = rows.column(column)[at].as_py()
                raise InvalidOperation(
                    f"{self.name}: a row written there has {column}={got!r}, but this "
                    f"partition's file holds only rows with {column}={value!r} (row "
                    f"{at + 1} of those written); write it to its own partition's data.csv "
                    "or to /data/data.csv"
                )

    def rows_of(self, table: pa.Table) -> pa.Table:
        """The rows of ``table`` in this partition."""
        for column, value in self.values:
            table = table.filter(self._matches(table, column, value))
        return table

    def predicate(self, schema: pa.Schema) -> str:
        """A SQL predicate true for this partition's rows (for `DatabaseOps.delete_rows_where`)."""
        parts = []
        for column, value in self.values:
            ident = quote_ident(column)
            if value is None:
                parts.append(f"{ident} IS NULL")
            else:
                parts.append(f"{ident} = {sql_literal(value, column, schema.field(column))}")
        return " AND ".join(parts)


# -- what the NFS face needs of a table ----------------------------------------------------


def loaded_version(db: DatabaseOps) -> int:
    """Return the version ``db`` has loaded, without listing the log (its own writes move it)."""
    return db.loaded_version


def arrow_schema(db: DatabaseOps) -> pa.Schema:
    """Return the table's stored Arrow schema."""
    return db.arrow_schema


def table_identity(db: DatabaseOps) -> bytes:
    """Return bytes that name the table for good: its Delta table id."""
    return db.table_id.encode()


def partition_columns(db: DatabaseOps) -> list[str]:
    """Return the table's partition columns."""
    return db.partition_columns


def _insert_lines(
    db: DatabaseOps,
    content: Base,
    start: int,
    header: bytes,
    keys: KeyReader | None,
    scope: Scope | None = None,
) -> Applied:
    """Insert the whole lines of ``content`` from ``start`` on (one commit)."""
    added = content.size - start
    if added > change_budget():  # read and parsed whole: refused before anything is read
        raise InvalidOperation(
            f"data.csv: the {added:,} bytes appended are more than the NFS face parses in "
            f"one commit ({change_budget():,} bytes: 1/16 of this machine's memory); load "
            "them with posixlake insert TABLE FILE instead"
        )
    extra = _without_header(read_all(content, start), header)
    rows = parse_csv(extra, arrow_schema(db), header="none")
    if scope is not None:
        scope.check(rows)
    if rows.num_rows == 0:
        return Applied("unchanged", None)
    try:
        done = db.insert(rows)
    except DuplicateKeyError as err:
        try:
            rows = _not_yet_there(db, rows, keys)
        except pa.ArrowException:  # columns a join cannot compare (nested): as it was
            raise err from None
        if rows.num_rows == 0:
            return Applied("unchanged", None)
        done = db.insert(rows)  # DuplicateKeyError again: a key held with other values
    return Applied("insert", done.version, inserted=rows.num_rows)


_BOM: Final = b"\xef\xbb\xbf"


def _without_header(extra: memoryview, header: bytes) -> memoryview:
    """``extra`` without a leading header line: ``cat more.csv >> data.csv`` appends
    more.csv's header again, which is not a row. That line may end in CRLF where the
    base's ends in LF (or the other way), and may start with a UTF-8 byte order mark."""
    name = header.rstrip(b"\r\n")
    if not name:
        return extra
    at = len(_BOM) if bytes(extra[: len(_BOM)]) == _BOM else 0
    if bytes(extra[at : at + len(name)]) != name:
        return extra
    end = at + len(name)
    for newline in (b"\n", b"\r\n"):
        if bytes(extra[end : end + len(newline)]) == newline:
            return extra[end + len(newline) :]
    return extra


def _not_yet_there(db: DatabaseOps, rows: pa.Table, keys: KeyReader | None) -> pa.Table:
    """Drop appended rows the keyed table already holds exactly (a resent append).

    A client may resend an append the server already committed: a retransmission after a
    lost reply, or a page that holds its own earlier line. Identical rows are not new;
    a row whose key holds other values is still a DuplicateKeyError. Reads the table's
    rows with the appended keys (``keys``), or else the whole table.
    """
    key = list(db.key_columns or ())
    found = None
    if keys is not None and key:
        wanted = rows.select(key).group_by(key).aggregate([])
        found = keys.rows_with_keys(db.version, wanted)
    cols = rows.column_names
    current = db.to_arrow() if found is None else found.select(cols).cast(rows.schema)
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
    from nfs.table.diff import diff_rows

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


def _diff(db: DatabaseOps, new: pa.Table, old: pa.Table) -> Applied:
    """Apply the change from ``old`` (rows of the base) to ``new`` onto the current version.

    ``replace_rows`` commits the rows in memory directly, whatever the table's engine (a
    Spark MERGE would cost seconds for a one-row change). With a primary key see
    :func:`_diff_keyed`; without one, the multiset difference is applied and every row it
    removes must still be there (else ConcurrentChange: another writer changed that row,
    and applying both edits would leave two versions of it).
    """
    from nfs.table.diff import diff_rows

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
    content: Base | memoryview | bytes,
    *,
    base_version: int,
    base: Base,
    write_id: str | None = None,
    keys: KeyReader | None = None,
    scope: Scope | None = None,
) -> Applied:
    """Commit ``content`` as the new ``data.csv`` of ``db`` (at most one commit).

    Args:
        db: the table.
        content: the whole new file (read by range: a staging is not copied whole).
        base_version: the version the writer started from (its rows are the diff base).
        base: the bytes of ``data.csv`` the writer started from.
        keys: reads a version's rows by key (e.g. :class:`nfs.table.segments.Segmenter`);
            lets a keyed rewrite read only the region it changed.
        write_id: stored in the commit's metadata as ``posixlake.nfs_write`` (see
            :func:`committed_write`).
        scope: the content is one partition's file (its base that partition's rows).

    Raises:
        CsvFormatError: bad content (wrong header, column count, value).
        SchemaError / DuplicateKeyError / InvalidOperation: rows the table refuses.
        PermissionDenied: the user may not write (or delete).
        PosixLakeError: any other failure.
    """
    tags = {WRITE_TAG: write_id} if write_id else {}
    source = BytesBase(content) if isinstance(content, bytes | memoryview) else content
    with db.commit_tags(tags):
        return _apply(db, source, base_version, base, keys, scope)


def apply_lines(
    db: DatabaseOps,
    content: Base,
    start: int,
    *,
    header: bytes,
    write_id: str | None = None,
    keys: KeyReader | None = None,
    scope: Scope | None = None,
) -> Applied:
    """Insert the whole lines a writer added after its base: ``content`` from ``start``
    on (one commit).

    ``header``: the base's header line; added lines starting with it again (``cat
    more.csv >> data.csv``) skip it. Past `change_budget` bytes, InvalidOperation.
    ``keys``: as for `apply_content` (a resent append reads only the rows of its keys).
    ``scope``: the lines were written to one partition's file (rows of others: refused).
    """
    tags = {WRITE_TAG: write_id} if write_id else {}
    with db.commit_tags(tags):
        return _insert_lines(db, content, start, header, keys, scope)


def committed_write(db: DatabaseOps, write_id: str, since: int) -> int | None:
    """Return the version whose commit carries ``write_id`` after ``since``, if any."""
    current = db.version
    if current <= since:
        return None
    for info in db.history(current - since):
        if info.version > since and info.tags.get(WRITE_TAG) == write_id:
            return info.version
    return None


def _apply(
    db: DatabaseOps,
    content: Base,
    base_version: int,
    base: Base,
    keys: KeyReader | None,
    scope: Scope | None = None,
) -> Applied:
    if content.size == 0:
        if scope is not None:  # the partition's rows, at the current version
            done = db.delete_rows_where(scope.predicate(arrow_schema(db)))
        else:
            done = db.truncate()  # delta-rs directly; no commit when the table is empty
        return Applied("empty", done.version, deleted=done.rows)
    n = base.size
    same, quotes = common_prefix(content, base)
    if same == n == content.size:
        return Applied("unchanged", None)
    if same == n and n > 0 and read_all(base, n - 1, n)[0] == _LF:
        # the base plus whole lines: an INSERT of those lines
        return _insert_lines(db, content, n, header_of(base), keys, scope)
    regions = changed_regions(content, base, same, quotes)
    if regions is not None:
        try:
            applied = _apply_regions(db, content, base, base_version, regions, keys, scope)
        except CsvFormatError as err:
            if content.size > change_budget():  # too large to parse whole for line numbers
                raise CsvFormatError(f"{err} (in a changed part of data.csv)") from err
            applied = None  # reported by the whole parse, with the file's line numbers
        if applied is not None:
            return applied
    if content.size > change_budget():
        raise InvalidOperation(
            "data.csv: this rewrite must be parsed whole (its header line changed, or the "
            "table's files cannot be read by key: deletion vectors, column mapping), and at "
            f"{content.size:,} bytes it is more than the NFS face parses in one commit "
            f"({change_budget():,} bytes: 1/16 of this machine's memory); use posixlake "
            "update, merge or add_columns instead"
        )
    new = parse_csv(read_all(content), arrow_schema(db), header="require")
    old = db.to_arrow(version=base_version)
    if scope is not None:
        scope.check(new)
        old = scope.rows_of(old)
    return _diff(db, new, old)


def change_budget() -> int:
    """The bytes of changed rows (old and new) one rewrite may parse: 1/16 of the
    machine's memory (their Arrow rows, the diff and the MERGE take about ten times as
    much); a larger change is refused instead of running the server out of memory."""
    try:
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        memory = 8 << 30
    return max(64 << 20, memory // 16)


def _apply_regions(
    db: DatabaseOps,
    content: Base,
    base: Base,
    base_version: int,
    regions: list[Region],
    keys: KeyReader | None,
    scope: Scope | None = None,
) -> Applied | None:
    """Apply a rewrite from the rows of its changed regions alone (None: cannot).

    Rows outside the regions are the base's on both sides, so they cancel out of an
    unkeyed (multiset) diff. With a primary key, the base rows outside the regions whose
    keys the regions hold, or that the base repeats, are read (``keys``) and added to
    both sides, so the diff sees each such key whole — a content that repeats a key still
    fails, a repeated key of the base is still repaired — and reads no other rows. When
    the base repeats no key (the usual case, known per data file), only the keys the
    regions add are looked up.
    Raises CsvFormatError (the caller parses the whole file to report it).
    """
    schema = arrow_schema(db)
    parse_csv(header_of(base), schema, header="require")  # the base shows today's columns
    olds, news = [], []
    budget, used = change_budget(), 0
    for region in regions:
        for before, after in changed_pieces(content, base, region):
            used += len(before) + len(after)
            if used > budget:  # the rows in memory would be ten times as many bytes
                raise InvalidOperation(
                    f"data.csv: this rewrite changes more than {budget:,} bytes of rows "
                    "(1/16 of this machine's memory), more than the NFS face applies in "
                    "one commit; use posixlake update or merge for changes this large"
                )
            olds.append(parse_csv(before, schema, header="none"))
            news.append(parse_csv(after, schema, header="none"))
    if not olds:  # no row changed (the regions' bytes are the same records)
        olds = news = [parse_csv(b"", schema, header="none")]
    old, new = pa.concat_tables(olds), pa.concat_tables(news)
    if scope is not None:  # rows outside the regions are the base's: the partition's
        scope.check(new)
    key = list(db.key_columns or ())
    if not key:
        return _diff(db, new, old)
    if keys is None:
        return None
    repeated = keys.repeated_keys(base_version, key)
    if repeated is None:
        return None
    if repeated.num_rows == 0:
        # each key of the base is in one row: a key of the region's old rows is nowhere
        # else, so only the keys the region adds can be held outside it
        touched = new.select(key).join(old.select(key), keys=key, join_type="left anti")
    else:
        key_schema = old.select(key).schema
        touched = pa.concat_tables([old.select(key), new.select(key), repeated.cast(key_schema)])
    touched = touched.group_by(key).aggregate([])
    if touched.num_rows == 0:
        return _diff(db, new, old)
    found = keys.rows_with_keys(base_version, touched)
    if found is None:
        return None
    outside = _outside(found.select(schema.names).cast(schema), old, key)
    if outside.num_rows:
        old = pa.concat_tables([old, outside])
        new = pa.concat_tables([new, outside])
    return _diff(db, new, old)


def _outside(found: pa.Table, region: pa.Table, key: list[str]) -> pa.Table:
    """Return the rows of ``found`` that ``region`` does not account for.

    ``found``: the base's rows with some keys; ``region``: the base rows the region holds
    (a sub-multiset of the base). Rows are matched whole first (which copy of a repeated
    key the region holds matters), then by key (a value that does not compare equal to
    itself, NaN).
    """
    if found.num_rows == 0:
        return found
    names = found.column_names
    rows_in = [_hashable(r) for r in region.select(names).to_pylist()]
    whole: dict[object, int] = {}
    by_key: dict[object, int] = {}
    for row in rows_in:
        whole[row] = whole.get(row, 0) + 1
    found_rows = [_hashable(r) for r in found.to_pylist()]
    index = [names.index(k) for k in key]
    unmatched: list[int] = []
    for i, row in enumerate(found_rows):
        if whole.get(row, 0) > 0:
            whole[row] -= 1
        else:
            unmatched.append(i)
    for row, left in whole.items():  # region rows no found row equalled
        assert isinstance(row, tuple)
        k = tuple(row[j] for j in index)
        by_key[k] = by_key.get(k, 0) + left
    keep: list[int] = []
    for i in unmatched:
        row = found_rows[i]
        assert isinstance(row, tuple)
        k = tuple(row[j] for j in index)
        if by_key.get(k, 0) > 0:
            by_key[k] -= 1
        else:
            keep.append(i)
    return found.take(pa.array(keep, pa.int64()))


def _hashable(value: object) -> object:
    """A hashable stand-in for a row or value of ``to_pylist`` (lists and dicts nest)."""
    if isinstance(value, dict):
        return tuple(_hashable(v) for v in value.values())
    if isinstance(value, list):
        return ("[]", *(_hashable(v) for v in value))
    return value
