"""Row writes: insert, merge, update, delete, truncate, replace rows; schema changes.

Each is one Delta commit (none when nothing changes) and returns what it did: a
:class:`~posixlake.result.WriteResult` (the rows, and the version its commit made),
:class:`~posixlake.types.MergeMetrics` or :class:`~posixlake.result.ReplaceResult`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, cast

import pyarrow as pa
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
from posixlake._ops.args import as_of as as_of_point
from posixlake._ops.args import columns_arg, mapping_arg, sql_literal
from posixlake._ops.core import PRIMARY_KEY_PROPERTY, TableCore, counted
from posixlake.delta import quote_ident
from posixlake.engines.local import format_of, source_paths
from posixlake.errors import (
    DuplicateKeyError,
    InvalidOperation,
    IoError,
    QueryError,
    SchemaError,
    SerializationError,
    VersionError,
)
from posixlake.result import QueryResult, ReplaceResult, RestoreResult, WriteResult
from posixlake.types import MergeMetrics, check_declared

if TYPE_CHECKING:
    from posixlake.csvcodec import CsvOptions
    from posixlake.sql import SqlTable

__all__ = ["WriteOps"]


class WriteOps(TableCore):
    """The row writes and schema changes of :class:`~posixlake.database.DatabaseOps`."""

    @counted
    @timed("insert")
    def insert(
        self,
        data: Any,
        *,
        upsert: bool = False,
        schema_mode: Literal["merge"] | None = None,
        csv_options: CsvOptions | Mapping[str, Any] | None = None,
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
            csv_options: how CSV ``data`` (text, bytes, or CSV file paths) is written when
                it is not posixlake's own CSV: a :class:`~posixlake.csvcodec.CsvOptions`
                or a dict of its fields, e.g. ``{"delimiter": ";", "null": "NA",
                "encoding": "latin-1", "header": False}`` (without a header the fields
                are the table's columns in order).

        Raises:
            SerializationError: malformed JSON or CSV. SchemaError: unknown column, missing
                NOT NULL column, wrong type. DuplicateKeyError: a key exists (or repeats).

        Returns:
            A :class:`WriteResult`: equal to the row count, with ``.version`` the version
            committed (None for no rows).
        """
        self._authorize("write", "insert")
        if csv_options is not None:
            from posixlake.csvcodec import CsvOptions

            data = self._csv_in_dialect(data, CsvOptions.coerce(csv_options))
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

    def _csv_in_dialect(self, data: Any, options: CsvOptions) -> Any:
        """Return CSV written with ``options`` (text, bytes or file paths) as rows to insert.

        Raises:
            SerializationError: ``data`` is not CSV text or CSV files; a malformed file.
        """
        from posixlake.csvcodec import to_canonical_csv

        if options.is_default:
            return data
        columns = None if options.header else list(self._schema.names)
        paths = source_paths(data)
        if paths is None and isinstance(data, str | bytes | bytearray):
            text = data if isinstance(data, str) else bytes(data)
            start = text.lstrip()[:1]
            if start in ("[", "{", b"[", b"{") and options.delimiter not in ("[", "{"):
                raise SerializationError(
                    "insert: csv_options were given but the data is JSON, not CSV"
                )
            return to_canonical_csv(text, options, columns=columns)
        if paths is None:
            raise SerializationError(
                "insert: csv_options apply to CSV text, bytes or .csv files, "
                f"not {type(data).__name__}"
            )
        fmt, files = format_of(paths)
        if fmt != "csv":
            raise SerializationError("insert: csv_options apply to CSV files, not Parquet")
        tables = []
        for path in files:
            try:
                with open(path, "rb") as fh:
                    raw = fh.read()
            except OSError as err:
                raise IoError(f"cannot read {path}: {err.strerror}") from err
            tables.append(to_arrow(to_canonical_csv(raw, options, columns=columns), self._schema))
        return pa.concat_tables(tables) if tables else self._schema.empty_table()

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

    def sql(self, statement: str) -> QueryResult:
        """Run one SQL statement: a query, or UPDATE / DELETE / INSERT INTO / MERGE INTO.

        Written as Delta users write it (Spark SQL on the Spark engine; the same grammar
        with DataFusion's quoting on the local engine); the table is ``data``. Each write
        is one commit through the same call as its Python form: ``UPDATE`` is
        :meth:`update`, ``DELETE`` :meth:`delete_rows_where`, ``INSERT INTO ... VALUES``
        / ``SELECT`` :meth:`insert` (values typed by the table's schema), and
        ``MERGE INTO data USING (...) AS s ON data.id = s.id WHEN MATCHED ... WHEN NOT
        MATCHED ...`` :meth:`merge`. A query may travel in time
        (``FROM data VERSION AS OF 3``, ``TIMESTAMP AS OF '...'``).

        Returns:
            The rows of a query; for a write one row, as Databricks gives it:
            ``num_affected_rows``, ``num_updated_rows`` / ``num_deleted_rows`` /
            ``num_inserted_rows``, and ``version`` (the version committed, NULL when none).

        Raises:
            QueryError: SQL that does not parse, names another table than ``data``, or a
                clause without an equivalent here (the message names it); and what the
                matching Python call raises.
        """
        from posixlake.sql import run_statement

        return run_statement(cast("SqlTable", self), statement)  # a DatabaseOps: reads too

    @counted
    def restore_version(
        self,
        version: int | None = None,
        *,
        as_of: datetime | int | float | str | None = None,
    ) -> RestoreResult:
        """Make the table equal to an earlier version, in ONE commit (rollback in place).

        The same as deltalake's ``DeltaTable.restore`` and Databricks' ``RESTORE TABLE ...
        TO VERSION AS OF``: the commit removes the files added since and re-adds the files
        removed since, and puts back that version's schema and properties; history shows
        it as ``RESTORE``, and the versions in between stay readable. (``restore`` rebuilds
        a table from a backup.)

        Args:
            version: the version to go back to.
            as_of: or the point in time (a datetime, epoch milliseconds or ISO text): the
                latest version committed at or before it.

        Raises:
            InvalidOperation: neither or both of ``version`` and ``as_of``; a version
                before users were turned on (it would turn them off).
            VersionError: no such version, or a time before the table existed.
            NotFound: a data file of that version was removed by VACUUM.
        """
        self._authorize("write", "restore_version")
        if (version is None) == (as_of is None):
            raise InvalidOperation("restore_version needs a version or as_of=, not both")
        if version is not None and (isinstance(version, bool) or not isinstance(version, int)):
            raise VersionError(f"version must be an int, not {type(version).__name__}")
        self._authorize("delete", "restore_version")
        with self._write("RESTORE"):
            if version is not None:
                target = version
            else:
                assert as_of is not None
                target = self._log.version_at(as_of_point(as_of))
            snap = self._log.at(target)
            from posixlake.security import AUTH_PROPERTY

            if self._log.configuration.get(AUTH_PROPERTY) and not snap.configuration.get(
                AUTH_PROPERTY
            ):
                raise InvalidOperation(
                    f"cannot restore version {target}: users were turned on after it, and "
                    "a restore would turn them off"
                )
            metrics, committed = self._log.restore(target, metadata=self._metadata("RESTORE"))
            self._keys.invalidate()
        return RestoreResult(
            target,
            committed,
            int(metrics.get("numRemovedFile", 0) or 0),
            int(metrics.get("numRestoredFile", 0) or 0),
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
