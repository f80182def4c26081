"""Row writes: insert, merge, update, delete, truncate, replace rows; schema changes.

Each is one Delta commit (none when nothing changes) and returns what it did: a
:class:`~posixlake.result.WriteResult` (the rows, and the version its commit made),
:class:`~posixlake.types.MergeMetrics` or :class:`~posixlake.result.ReplaceResult`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

import pyarrow.compute as pc

from posixlake._convert import csv_changes, to_arrow
from posixlake._merge import (
    OP_COLUMN,
    check_primary_key_after,
    duplicate_keys,
    existing_mask,
    prepare_merge_source,
)
from posixlake._metrics import timed
from posixlake._ops.args import columns_arg, mapping_arg, sql_literal
from posixlake._ops.core import PRIMARY_KEY_PROPERTY, TableCore, counted
from posixlake.delta import quote_ident
from posixlake.engines.local import format_of, source_paths
from posixlake.errors import (
    DuplicateKeyError,
    InvalidOperation,
    QueryError,
    SchemaError,
)
from posixlake.result import ReplaceResult, WriteResult
from posixlake.types import MergeMetrics, check_declared

__all__ = ["WriteOps"]


class WriteOps(TableCore):
    """The row writes and schema changes of :class:`~posixlake.database.DatabaseOps`."""

    @counted
    @timed("insert")
    def insert(
        self, data: Any, *, upsert: bool = False, schema_mode: Literal["merge"] | None = None
    ) -> WriteResult:
        """Insert rows in one commit; return how many rows were written, and the version.

        Args:
            data: a dict (one row, or a columnar dict of lists), a list of dicts, JSON text
                (object, array or JSON lines), CSV text with a header, a pyarrow Table or
                RecordBatch, a pandas or polars DataFrame, any ``__arrow_c_stream__`` object,
                the path of a CSV or Parquet file (a directory, or a list of them); with the
                Spark engine also a Spark DataFrame, and files are read by a Spark job.
            upsert: with a primary key, update rows whose key exists instead of failing.
            schema_mode: ``"merge"`` adds the columns of ``data`` the table lacks (nullable,
                typed from the data) in the same commit; older rows read NULL there.

        Raises:
            SerializationError: malformed JSON or CSV. SchemaError: unknown column, missing
                NOT NULL column, wrong type. DuplicateKeyError: a key exists (or repeats).

        Returns:
            A :class:`WriteResult`: equal to the row count, with ``.version`` the version
            committed (None for no rows).
        """
        self._authorize("write", "insert")
        if schema_mode is not None:
            return self._insert_evolving(data, schema_mode=schema_mode, upsert=upsert)
        external = getattr(self._engine, "insert_external", None)
        # the engine tells what it takes (a Spark DataFrame has __arrow_c_stream__ too);
        # an upsert is a merge, and its rows go through Arrow
        if (
            external is not None
            and not upsert
            and getattr(self._engine, "accepts", lambda d: False)(data)
        ):
            with self._write("INSERT"):
                outcome = external(
                    self._log, data, key=self.key_columns, metadata=self._metadata("INSERT")
                )
            self._keys.invalidate()
            self._counters.bump(inserts=1, rows_written=outcome.rows)
            return WriteResult(outcome.rows, outcome.version)
        paths = source_paths(data)
        if paths is not None:  # CSV / Parquet files, on an engine that reads them for us
            fmt, files = format_of(paths)
            table = self._engine.read_files(files, fmt=fmt, schema=self._schema)
            if table is None:
                raise InvalidOperation(f"engine {self._engine.name} cannot read files")
        else:
            table = to_arrow(data, self._schema)
        if table.num_rows == 0:
            return WriteResult(0, None)
        check_declared(table, self._declared)
        return WriteResult(table.num_rows, self._append(table, operation="INSERT", upsert=upsert))

    def _insert_evolving(self, data: Any, *, schema_mode: str, upsert: bool) -> WriteResult:
        """Insert rows that may bring new columns (see :mod:`posixlake._evolve`)."""
        from posixlake._evolve import evolved_schema, new_fields

        if schema_mode != "merge":
            raise InvalidOperation(f"schema_mode must be 'merge' or None, not {schema_mode!r}")
        if upsert:
            raise InvalidOperation("insert: schema_mode='merge' and upsert=True do not combine")
        if source_paths(data) is not None or getattr(self._engine, "accepts", lambda d: False)(
            data
        ):
            raise InvalidOperation(
                "insert: schema_mode='merge' takes rows in memory (dicts, JSON, Arrow, pandas, "
                "polars); for files or a Spark DataFrame, add_columns first, then insert"
            )
        fresh = new_fields(data, self._schema)
        table = to_arrow(data, evolved_schema(self._schema, fresh))
        if table.num_rows == 0:
            return WriteResult(0, None)
        version = self._append(table, operation="INSERT", schema_mode="merge" if fresh else None)
        return WriteResult(table.num_rows, version)

    def add_columns(self, columns: Any) -> int:
        """Add nullable columns in one commit; existing rows read NULL there.

        Args:
            columns: ``{"name": "Type"}`` (our type strings), a list of :class:`Field`
                or pyarrow fields, or a pyarrow schema.

        Returns:
            The new table version.

        Raises:
            SchemaError: a column exists already, or an unknown type.
        """
        from posixlake._evolve import declared_fields

        self._authorize("admin", "add_columns")
        fields = declared_fields(columns)
        with self._write("ADD COLUMNS"):
            return self._log.add_columns(fields)

    def rename_column(self, old: str, new: str) -> int:
        """Rename a column in one metadata-only commit (column-mapped tables).

        Data files are not touched; older versions keep the old name.

        Returns:
            The new table version.

        Raises:
            InvalidOperation: the table has no column mapping (the Delta table feature
                ``columnMapping``), or ``old`` is a partition or primary-key column.
            NotFound: no column ``old``. SchemaError: ``new`` names another column.
        """
        from posixlake.delta._schema import rename_column

        self._authorize("admin", "rename_column")
        with self._write("RENAME COLUMN"):
            return rename_column(
                self._log,
                old,
                new,
                metadata=self._metadata("RENAME COLUMN"),
                guarded=self._guarded_columns(),
            )

    def drop_columns(self, names: str | Sequence[str]) -> int:
        """Drop columns in one metadata-only commit (column-mapped tables).

        Returns:
            The new table version.

        Raises:
            InvalidOperation: no column mapping, a partition or primary-key column, or
                every column named. NotFound: an unknown column.
        """
        from posixlake.delta._schema import drop_columns

        self._authorize("admin", "drop_columns")
        cols = [names] if isinstance(names, str) else list(names)
        with self._write("DROP COLUMNS"):
            return drop_columns(
                self._log,
                cols,
                metadata=self._metadata("DROP COLUMNS"),
                guarded=self._guarded_columns(),
            )

    def _guarded_columns(self) -> dict[str, str]:
        """Return the columns table properties name, each with what names it."""
        out = {c: "named in posixlake.declaredTypes" for c in self._declared}
        out.update({c: "in the primary key" for c in self.key_columns})
        return out

    @counted
    @timed("merge")
    def merge(
        self, rows: Any, key: str | Sequence[str] | None = None, *, strict: bool = False
    ) -> MergeMetrics:
        """Apply INSERT / UPDATE / DELETE rows (each with ``_op``) in ONE commit.

        Rows are matched on ``key`` (the primary key by default). DELETE rows need only
        the key. UPDATE rows set the columns the input carries; others keep their values.
        In CSV text a row carries its non-empty fields, and ``\\N`` sets NULL.
        An UPDATE or DELETE of a missing key, or an INSERT of an existing key, is counted
        in ``rows_skipped`` (with ``strict=True`` it raises and nothing is committed).
        ``rows_inserted``, ``rows_updated`` and ``rows_deleted`` count table rows: on a key
        the table holds more than once (no primary key), one UPDATE row updates each of
        them; ``rows_skipped`` counts merge rows (see :class:`MergeMetrics`).

        Raises:
            InvalidOperation: no key; a key twice in the input; skipped rows with ``strict``.
            SerializationError / SchemaError: malformed or mistyped rows.
        """
        self._authorize("write", "merge")
        if not key:
            self._log.refresh()  # the primary key another handle set counts
        key_cols = columns_arg(key, "merge key") if key else self.key_columns
        if not key_cols:
            raise InvalidOperation("merge needs a key: pass key= or set a primary key")
        rows = csv_changes(rows, self._schema)  # CSV: empty field = no change, \N = NULL
        source = prepare_merge_source(rows, self._schema, key_cols)
        check_declared(source.table, self._declared)
        n_total = source.table.num_rows
        if source.count("DELETE"):
            self._authorize("delete", "merge")
        if n_total == 0:
            return MergeMetrics(0, 0, 0, 0, None)
        with self._write("MERGE"):
            # refused by the table's protocol or properties before anything is read
            self._log.check_write(
                "merge", rewrites=bool(source.count("UPDATE") or source.count("DELETE"))
            )
            exists = existing_mask(source.table, self._keys.get(self._log, key_cols), key_cols)
            op = source.table[OP_COLUMN]
            applies = pc.if_else(pc.equal(op, "INSERT"), pc.invert(exists), exists)
            skipped = n_total - int(pc.sum(applies).as_py() or 0)
            if skipped and strict:
                bad = (
                    source.table.filter(pc.invert(applies))
                    .select([*key_cols, OP_COLUMN])
                    .to_pylist()[:5]
                )
                raise InvalidOperation(
                    f"merge: {skipped} row(s) do not apply (missing or existing keys): {bad}"
                )
            todo = source.table.filter(applies)
            if todo.num_rows == 0:
                return MergeMetrics(0, 0, 0, skipped, None)
            pk = self.key_columns
            if pk and list(pk) != list(key_cols):
                check_primary_key_after(
                    self._log.read_columns(list(dict.fromkeys([*key_cols, *pk]))),
                    todo,
                    key_cols,
                    pk,
                )
            before = self._log.version
            outcome = self._engine.merge(
                self._log, todo, key_cols, metadata=self._metadata("MERGE")
            )
            todo_op = todo[OP_COLUMN]
            self._keys.merged(
                before,
                outcome.version,
                todo.filter(pc.equal(todo_op, "DELETE")).select(key_cols),
                todo.filter(pc.equal(todo_op, "INSERT")).select(key_cols),
                key_cols,
            )
        self._counters.bump(
            merges=1, rows_written=outcome.inserted + outcome.updated, rows_deleted=outcome.deleted
        )
        # the engine counts table rows (a key the table holds twice updates two rows);
        # skipped counts merge rows, those found not to apply above
        return MergeMetrics(
            outcome.inserted, outcome.updated, outcome.deleted, skipped, outcome.version
        )

    @counted
    @timed("delete")
    def delete_rows_where(self, predicate: str) -> WriteResult:
        """Delete the rows matching a SQL predicate in one commit; return how many.

        No commit is made when nothing matches (``.version`` is then None).

        Raises:
            QueryError: the predicate is empty or invalid.
        """
        self._authorize("delete", "delete")
        if not isinstance(predicate, str) or not predicate.strip():
            raise QueryError(
                "delete needs a SQL predicate, e.g. \"id = 3\" (use 'true' for all rows)"
            )
        with self._write("DELETE"):
            outcome = self._engine.delete(self._log, predicate, metadata=self._metadata("DELETE"))
            if outcome.version is not None:
                self._keys.invalidate()
        self._counters.bump(deletes=1, rows_deleted=outcome.rows)
        return WriteResult(outcome.rows, outcome.version)

    @counted
    def truncate(self) -> WriteResult:
        """Delete every row in one commit, whatever the engine; return how many.

        Nothing is rewritten: the commit removes every data file (delta-rs, no Spark
        job). No commit is made when the table is already empty.
        """
        self._authorize("delete", "truncate")
        with self._write("TRUNCATE"):
            rows, version = self._log.delete(None, metadata=self._metadata("TRUNCATE"))
            if version is not None:
                self._keys.invalidate()
        self._counters.bump(deletes=1, rows_deleted=rows)
        return WriteResult(rows, version)

    @counted
    @timed("update")
    def update(
        self,
        predicate: str | None,
        values: Mapping[str, Any] | str | None = None,
        *,
        expressions: Mapping[str, str] | None = None,
    ) -> WriteResult:
        """Set columns on the rows matching ``predicate`` (all rows with None), in one commit.

        Args:
            predicate: SQL predicate, or None for every row.
            values: column -> Python value (type-checked against the column), or the
                same as JSON object text.
            expressions: column -> SQL expression (e.g. ``{"qty": "qty + 1"}``).

        Returns:
            How many rows were updated, with ``.version`` (None: no commit, none matched).

        Raises:
            SchemaError: unknown column or a value of the wrong type.
            InvalidOperation: an update of a primary-key column.
            SerializationError: ``values`` is not a mapping (or malformed JSON object text).
            QueryError: an invalid predicate or expression.
        """
        self._authorize("write", "update")
        if predicate is not None and (not isinstance(predicate, str) or not predicate.strip()):
            raise QueryError("update: the predicate must be SQL text, or None for every row")
        values = mapping_arg(values, "values")
        expressions = mapping_arg(expressions, "expressions")
        for col, expr in expressions.items():
            if not isinstance(expr, str) or not expr.strip():
                raise QueryError(f"update: the expression for {col!r} must be SQL text")
        schema = self._schema
        sets: dict[str, str] = {}
        for col, value in (values or {}).items():
            if col not in schema.names:
                raise SchemaError(f"update: unknown column {col!r}")
            sets[quote_ident(col)] = sql_literal(value, col, schema.field(col))
        for col, expr in (expressions or {}).items():
            if col not in schema.names:
                raise SchemaError(f"update: unknown column {col!r}")
            sets[quote_ident(col)] = expr
        if not sets:
            raise InvalidOperation("update needs values or expressions")
        key = self.key_columns
        touched = set(values or {}) | set(expressions or {})
        if key and touched & set(key):
            raise InvalidOperation(
                f"update cannot change primary key column(s) {sorted(touched & set(key))}; use merge"
            )
        with self._write("UPDATE"):
            outcome = self._engine.update(
                self._log, predicate, sets, metadata=self._metadata("UPDATE")
            )
        self._counters.bump(updates=1, rows_written=outcome.rows)
        return WriteResult(outcome.rows, outcome.version)

    @counted
    def replace_rows(
        self,
        *,
        delete: Any,
        insert: Any,
        key: str | Sequence[str] | None = None,
        require_present: bool = False,
    ) -> ReplaceResult:
        """Delete the rows ``delete`` names and insert ``insert``, in ONE commit (delta-rs).

        Without ``key``, rows are whole rows compared on every column (NULL equals NULL)
        and each row of ``delete`` removes one occurrence. With ``key``, a row of
        ``delete`` removes the row with its key (an update is a delete plus an insert).
        A row to delete that is not in the table is skipped, unless ``require_present``
        (whole rows only): then the write fails with ConcurrentChange, committing nothing.
        No commit when nothing changes. Rows in memory are committed directly, whatever
        the engine.

        Returns:
            ``(rows deleted, rows inserted)`` as a :class:`ReplaceResult`, whose
            ``.version`` is the version committed (None when nothing changed).

        Raises:
            SerializationError / SchemaError: malformed or mistyped rows.
            DuplicateKeyError: with a primary key, an inserted key repeats or stays taken.
            ConcurrentChange: ``require_present`` and a row to delete is gone.
        """
        from posixlake.delta import replace_rows

        self._authorize("write", "replace_rows")
        dele, ins = to_arrow(delete, self._schema), to_arrow(insert, self._schema)
        check_declared(ins, self._declared)
        if dele.num_rows:
            self._authorize("delete", "replace_rows")
        if dele.num_rows == 0 and ins.num_rows == 0:
            return ReplaceResult(0, 0, None)
        match = [key] if isinstance(key, str) else list(key or [])
        for k in match:
            if k not in self._schema.names:
                raise SchemaError(f"replace_rows: key column {k!r} is not in the table")
        pk = self.key_columns
        with self._write("REPLACE ROWS"):
            if pk and ins.num_rows:
                dups = duplicate_keys(ins, pk)
                # keys this write deletes are free; only the others are looked up (an
                # update of rows reads no key of the table)
                rest = ins.filter(pc.invert(existing_mask(ins, dele.select(pk), pk)))
                taken = (
                    rest.num_rows > 0
                    and pc.any(existing_mask(rest, self._keys.get(self._log, pk), pk)).as_py()
                )
                if dups or taken:
                    raise DuplicateKeyError(
                        f"replace_rows: inserted keys repeat or exist: {dups[:5]}"
                    )
            done = replace_rows(
                self._log,
                delete=dele,
                insert=ins,
                key=match or None,
                metadata=self._metadata("REPLACE ROWS"),
                require_present=require_present,
            )
            self._keys.invalidate()
        self._counters.bump(rows_written=done.inserted, rows_deleted=done.deleted)
        return ReplaceResult(done.deleted, done.inserted, done.version)

    @counted
    def set_primary_key(self, column_name: str | Sequence[str] | None) -> None:
        """Set (or with None/empty, remove) the primary key; existing rows must be unique.

        Args:
            column_name: a column, ``"a, b"`` or a list of columns for a composite key.

        Raises:
            SchemaError: unknown column. InvalidOperation: existing duplicates or NULL keys.
        """
        self._authorize("admin", "set_primary_key")
        cols = columns_arg(column_name, "primary key") if column_name else []
        for c in cols:
            if c not in self._schema.names:
                raise SchemaError(f"primary key column {c!r} is not in the table")
        with self._write("SET PRIMARY KEY"):
            if cols:
                current = self._log.read_columns(cols)
                for c in cols:
                    if current[c].null_count:
                        raise InvalidOperation(
                            f"column {c!r} has NULLs: it cannot be part of a primary key"
                        )
                dups = duplicate_keys(current, cols)
                if dups:
                    raise InvalidOperation(f"existing rows repeat key(s) {dups[:5]}")
            self._log.set_configuration({PRIMARY_KEY_PROPERTY: ",".join(cols)})
            self._keys.invalidate()
