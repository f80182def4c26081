"""DeltaLog: the only code that writes a Delta table.

Every commit, conflict retry, optimize and vacuum goes through here (reads, time travel
and history through its base, :class:`~posixlake.delta._table.LoadedTable`); nothing else
writes ``_delta_log/``. delta-rs errors are translated into the posixlake error tree in
:func:`~posixlake.delta._translate.translate`, once. Each write returns the version its
own commit made (None when it made none); lost commit races are retried under the one
policy of :mod:`posixlake.delta._retry`.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Literal, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, QueryBuilder, write_deltalake

from posixlake.delta._arrow import _has_timestamps, _in_ns_range, plain_types
from posixlake.delta._decimal_parts import (
    DML_HINT,
    INSERT_HINT,
    check_partitions,
    check_rows,
    decimal_partitions,
    refuse_hive_null,
)
from posixlake.delta._features import (
    QUERY_CONFIG,
    check_writable,
    file_commit_blockers,
    int96_out_of_range,
)
from posixlake.delta._table import CHECKPOINT_INTERVAL, COMMIT_OPERATION_KEY, LoadedTable
from posixlake.delta._translate import NS_RANGE, _translated, quote_ident, translate
from posixlake.errors import (
    CommitConflict,
    DivisionByZero,
    PosixLakeError,
    QueryError,
    SchemaError,
    ValueOutOfRange,
    VersionNotFound,
)

# re-exported: modules written against the single-module log import them from here
__all__ = [
    "CHECKPOINT_INTERVAL",
    "COMMIT_OPERATION_KEY",
    "DeltaLog",
    "_translated",
    "plain_types",
    "quote_ident",
    "translate",
]


#: the key of the predicate among the SQL texts of a DML
_PREDICATE: Final = "\0predicate"


def _arrow_type_name(t: pa.DataType) -> str | None:
    """Return ``arrow_cast``'s name of a numeric column type (None for other types)."""
    names = {pa.int8(): "Int8", pa.int16(): "Int16", pa.int32(): "Int32", pa.int64(): "Int64"}
    if t in names:
        return names[t]
    if pa.types.is_decimal(t):
        return f"Decimal128({t.precision}, {t.scale})"
    return None


_T = TypeVar("_T")


class DeltaLog(LoadedTable):
    """One Delta table, kept loaded, and its writes. Thread-safe: operations hold an
    internal lock. Use :meth:`create` or :meth:`open`; :meth:`at` gives a read-only
    snapshot."""

    def set_configuration(self, properties: Mapping[str, str]) -> int:
        """Set table properties in one commit; return the new version."""
        self._check_writable()
        with self._lock, _translated("set table properties"):
            self._dt.alter.set_table_properties(dict(properties), raise_if_not_exists=False)
            return self._dt.version()

    def check_write(self, what: str, *, rewrites: bool) -> None:
        """Refuse at once a write the table's protocol or properties forbid (before any
        Spark job or rewrite): a writer feature delta-rs cannot write, or a change of rows
        in an append-only table (``rewrites``).

        Raises:
            UnsupportedTableFeature: naming the feature as the Delta protocol spells it.
        """
        with self._lock:
            features = self._dt.protocol().writer_features
        check_writable(self.configuration, features, what=what, rewrites=rewrites)

    def _count_at(self, version: int) -> int:
        """Return the number of rows of ``version`` (deletion vectors applied)."""
        with _translated(f"count rows of version {version}"):
            dt = DeltaTable(self.uri, version=version, storage_options=self.storage_options)
            reader = QueryBuilder(dict(QUERY_CONFIG)).register("t", dt)
            table = pa.table(reader.execute("SELECT count(*) AS n FROM t").read_all())
        return int(table.column(0)[0].as_py())

    def _unproven_files(self) -> list[str]:
        """Return the active files whose statistics do not show every top-level timestamp
        within the nanosecond range (those files' footers must be looked at)."""

        schema = self.arrow_schema
        columns = [f.name for f in schema if pa.types.is_timestamp(f.type)]
        nested = any(_has_timestamps(pa.schema([f])) for f in schema if f.name not in columns)
        with self._lock, _translated("list files"):
            actions = pa.table(self._dt.get_add_actions(flatten=True))
        paths = [urllib.parse.unquote(p) for p in actions.column("path").to_pylist()]
        if nested:
            return paths
        names = set(actions.column_names)
        proven = [True] * len(paths)
        rows = actions.column("num_records").to_pylist() if "num_records" in names else None
        for c in columns:
            if c in self.partition_columns:
                continue  # partition values live in the log, not in the files
            lo = actions.column(f"min.{c}").to_pylist() if f"min.{c}" in names else None
            hi = actions.column(f"max.{c}").to_pylist() if f"max.{c}" in names else None
            nulls = (
                actions.column(f"null_count.{c}").to_pylist()
                if f"null_count.{c}" in names
                else None
            )
            for i in range(len(paths)):
                all_null = (
                    nulls is not None
                    and rows is not None
                    and nulls[i] is not None
                    and nulls[i] == rows[i]
                )
                if all_null:
                    continue
                low = lo[i] if lo is not None else None
                high = hi[i] if hi is not None else None
                if low is None or high is None or not (_in_ns_range(low) and _in_ns_range(high)):
                    proven[i] = False
        return [p for p, ok in zip(paths, proven, strict=True) if not ok]

    def _check_rewrite_safe(self, what: str) -> None:
        """Refuse a delta-rs rewrite of files it would read wrongly.

        delta-rs' DML and OPTIMIZE read INT96 timestamps as nanoseconds: a value outside
        1677-2262 (Spark's 9999-12-31, 0001-01-01) would be silently rewritten as another
        date. Such files are refused (the Spark engine rewrites them correctly).

        Raises:
            UnsupportedTableFeature: naming the files.
        """
        from posixlake.errors import UnsupportedTableFeature

        schema = self.arrow_schema
        risky = decimal_partitions(schema, self.partition_columns)
        if risky:
            check_partitions(self._dt.partitions(), risky, what=what)
        if not _has_timestamps(schema):
            return
        bad = int96_out_of_range(self.uri, self.storage_options, schema, self._unproven_files())
        if bad:
            with self._lock:
                schema_json = self._dt.schema().to_json()
            blockers = file_commit_blockers(self.configuration, schema_json, rewrites=True)
            if blockers:
                # the Spark engine hands such tables to delta-rs: it cannot help either
                hint = (
                    "neither engine can: the Spark engine rewrites such files right, but "
                    f"the table's Delta feature(s) {', '.join(blockers)} need delta-rs' own "
                    "writer. Remove them for this write (checkConstraints: "
                    "DeltaTable(path).alter.drop_constraint(name)), write with "
                    "engine='spark', then restore them (alter.add_constraint)"
                )
            else:
                hint = (
                    "use engine='spark' for this write (Spark reads INT96 right and "
                    "rewrites the files in microseconds)"
                )
            raise UnsupportedTableFeature(
                f"{what}: {len(bad)} data file(s) store INT96 timestamps outside 1677-2262 "
                f"(e.g. {bad[0]}), which delta-rs' {what} would rewrite as wrong dates; "
                f"{hint}",
                ("int96Timestamps", *blockers),
            )

    def blank_partitions(self, rows: pa.Table, what: str) -> pa.Table:
        """Return ``rows`` with empty strings in string partition columns as NULL.

        The Delta protocol stores a partition value ``""`` as NULL (delta-rs would write
        ``""``, which Spark, delta-rs' own ``to_pyarrow_table`` and other readers read as
        NULL): posixlake writes the NULL they read.

        Raises:
            SchemaError: an empty string in a NOT NULL partition column.
            InvalidOperation: the string ``__HIVE_DEFAULT_PARTITION__`` (delta-rs would
                write it as NULL).
        """
        schema = self.arrow_schema
        for col in self.partition_columns:
            if col not in rows.column_names or not pa.types.is_string(schema.field(col).type):
                continue
            values = rows.column(col)
            refuse_hive_null(values, col, what)
            blank = pc.equal(values, "")
            if not pc.any(blank).as_py():
                continue
            if not schema.field(col).nullable:
                raise SchemaError(
                    f"{what}: column {col!r} is a NOT NULL partition column, and Delta "
                    "stores an empty partition value as NULL: give it a non-empty value"
                )
            nulls = pa.nulls(len(values), values.type)
            fixed = pc.if_else(pc.fill_null(blank, False), nulls, values)
            rows = rows.set_column(rows.column_names.index(col), rows.field(col), fixed)
        return rows

    def check_new_rows(self, rows: pa.Table, what: str, *, dml: bool = False) -> None:
        """Refuse rows whose partition values delta-rs would write wrongly.

        Raises:
            InvalidOperation: see :mod:`posixlake.delta._decimal_parts`.
        """
        risky = decimal_partitions(self.arrow_schema, self.partition_columns)
        if risky:
            check_rows(rows, risky, what=what, hint=DML_HINT if dml else INSERT_HINT)

    def _check_updated_partitions(self, predicate: str | None, updates: Mapping[str, str]) -> None:
        """Refuse an UPDATE that would set a decimal partition column to a value delta-rs
        writes wrongly, or a string one to ``__HIVE_DEFAULT_PARTITION__`` (delta-rs writes
        it as NULL): the new values are computed by a query first."""
        schema = self.arrow_schema
        risky = decimal_partitions(schema, self.partition_columns)
        strings = [c for c in self.partition_columns if pa.types.is_string(schema.field(c).type)]
        exprs = {
            c: updates[quote_ident(c)] for c in [*risky, *strings] if quote_ident(c) in updates
        }
        if not exprs:
            return
        where = f" WHERE {predicate}" if predicate else ""
        select = ", ".join(f"{e} AS {quote_ident(c)}" for c, e in exprs.items())
        with _translated("update", query=True):
            reader = QueryBuilder(dict(QUERY_CONFIG)).register("t", self._dt)
            values = pa.table(reader.execute(f"SELECT DISTINCT {select} FROM t{where}").read_all())
        for c in strings:
            if c in exprs:
                refuse_hive_null(values.column(c), c, "update")
        decimals = [c for c in risky if c in exprs]
        if decimals:
            check_rows(values.select(decimals), decimals, what="update", hint=DML_HINT)

    def _typeof(self, expressions: Sequence[str]) -> list[str] | None:
        """Return DataFusion's type of each SQL expression over this table (None when the
        table has no row to type them on, or they do not plan: then the SQL goes to
        delta-rs as written, and delta-rs reports what is wrong with it)."""
        select = ", ".join(f"arrow_typeof({e}) AS t{i}" for i, e in enumerate(expressions))
        try:
            with _translated("type expressions", query=True):
                reader = QueryBuilder(dict(QUERY_CONFIG)).register("t", self._dt)
                table = pa.table(reader.execute(f"SELECT {select} FROM t LIMIT 1").read_all())
        except QueryError:
            return None
        if table.num_rows == 0:
            return None
        return [str(table.column(i)[0].as_py()) for i in range(table.num_columns)]

    def _exact(
        self, what: str, run: Callable[[Mapping[str, str]], _T], texts: Mapping[str, str]
    ) -> _T:
        """Run a DML whose SQL texts (SET expressions and predicate) DataFusion evaluates,
        with values exact or an error (see :mod:`posixlake.delta._sqlvalues`).

        Integer arithmetic is checked; timestamp literals past 2262 (which DataFusion
        types as nanoseconds) are rewritten in microseconds when DataFusion refuses them.
        """
        # sqlglot (~0.1 s to import) only for DML: queries on the Spark engine never need it
        from posixlake.delta._sqlvalues import (
            checked_arithmetic,
            microsecond_timestamps,
            null_blanks,
        )

        blanks = self.empty_string_partitions()
        if blanks:  # '' partition values another writer left are NULL (the protocol)
            texts = {k: null_blanks(v, blanks) or v for k, v in texts.items()}
        checked = checked_arithmetic(texts, self._typeof)
        texts = {**texts, **checked}
        try:
            with _translated(what, query=True):
                return run(texts)
        except ValueOutOfRange as err:
            if NS_RANGE not in str(err):
                raise
            schema = self.arrow_schema
            fixed = {k: microsecond_timestamps(v, schema) or v for k, v in texts.items()}
            if fixed == texts:
                raise
            with _translated(what, query=True):
                return run(fixed)

    def _blame(
        self,
        err: ValueOutOfRange | DivisionByZero,
        predicate: str | None,
        updates: Mapping[str, str],
    ) -> PosixLakeError:
        """Return ``err`` naming the column whose SET expression failed (found by
        evaluating each on the rows of ``predicate``), or ``err`` when none does alone."""
        from posixlake.delta._sqlvalues import checked_arithmetic

        where = f" WHERE {predicate}" if predicate else ""
        schema = self.arrow_schema
        for quoted, expr in updates.items():
            column = quoted[1:-1].replace('""', '"') if quoted.startswith('"') else quoted
            if column not in schema.names:
                continue
            text = {column: expr, **checked_arithmetic({column: expr}, self._typeof)}[column]
            target = _arrow_type_name(schema.field(column).type)
            value = f"arrow_cast({text}, '{target}')" if target else text
            try:
                with _translated("update", query=True):
                    reader = QueryBuilder(dict(QUERY_CONFIG)).register("t", self._dt)
                    pa.table(reader.execute(f"SELECT max({value}) AS v FROM t{where}").read_all())
            except (ValueOutOfRange, DivisionByZero) as probe:
                reason = str(probe).removeprefix("update: ")
                return type(probe)(f"update: column {column!r} = {expr}: {reason}", column)
        return err

    def append(
        self,
        data: pa.Table,
        *,
        metadata: Mapping[str, Any] | None = None,
        schema_mode: Literal["merge"] | None = None,
        app_transaction: tuple[str, int] | None = None,
    ) -> int:
        """Append ``data`` as one commit; return the new version (retried on conflicts).

        Args:
            schema_mode: ``"merge"`` adds the columns of ``data`` that the table lacks
                (nullable) in the same commit.
            app_transaction: ``(app id, version)`` recorded in the same commit (a Delta
                ``txn`` action), so a replay can tell that these rows were committed.
        """
        self._check_writable()
        self.check_write("append", rewrites=False)
        data = self.blank_partitions(data, "append")
        self.check_new_rows(data, "append")
        props = self._props(metadata, app_transaction=app_transaction)
        with self._lock:

            def attempt() -> int:
                write_deltalake(
                    self._dt,
                    data,
                    mode="append",
                    schema_mode=schema_mode,
                    commit_properties=props,
                )
                return int(self._dt.version())  # the version this commit made

            return self._retrying("append", attempt)

    def add_columns(self, fields: Sequence[pa.Field]) -> int:
        """Add nullable columns in one commit; return the new version.

        Raises:
            SchemaError: a column exists, or a type Delta cannot store.
        """
        from deltalake import Field as DeltaField
        from deltalake import Schema as DeltaSchema

        self._check_writable()
        existing = set(self.arrow_schema.names)
        clash = [f.name for f in fields if f.name in existing]
        if clash:
            raise SchemaError(f"add columns: column(s) {clash} exist already")
        with self._lock:
            with _translated("add columns"):
                delta = DeltaSchema.from_arrow(pa.schema([f.with_nullable(True) for f in fields]))
                new = [DeltaField.from_json(f.to_json()) for f in delta.fields]

            def attempt() -> int:
                self._dt.alter.add_columns(new, commit_properties=self._props(None))
                return int(self._dt.version())

            return self._retrying("add columns", attempt)

    def append_checked(
        self,
        data: pa.Table,
        *,
        check: Callable[[list[str] | None], None],
        metadata: Mapping[str, Any] | None = None,
        schema_mode: Literal["merge"] | None = None,
        app_transaction: tuple[str, int] | None = None,
    ) -> int:
        """Append ``data`` as one commit that is never rebased blindly over another commit.

        The commit is tried on the loaded version only. When another writer committed
        first, the log moves forward and ``check`` sees what changed before the next
        attempt: the table-relative paths of the data files added since (or None when
        files were also removed, or the table is partitioned: then ``check`` must look
        at the whole table). ``check`` raises (e.g. DuplicateKeyError) to abandon the
        append; otherwise it is retried within the bounds of :attr:`retry`.

        Returns:
            The committed version.

        Raises:
            CommitConflict: still conflicting at the policy's bound. Whatever ``check`` raises.
        """
        self._check_writable()
        self.check_write("append", rewrites=False)
        data = self.blank_partitions(data, "append")
        self.check_new_rows(data, "append")
        props = self._props(metadata, app_transaction=app_transaction, strict=True)

        def attempt(_n: int) -> int:
            with _translated("append"):
                write_deltalake(
                    self._dt, data, mode="append", schema_mode=schema_mode, commit_properties=props
                )
                return int(self._dt.version())  # the version this commit made

        def recheck(_err: CommitConflict) -> None:
            with _translated("refresh table"):
                before = self._dt._table.get_add_file_sizes()
                self._dt.update_incremental()
                after = self._dt._table.get_add_file_sizes()
            if self._read_table_id() != self._table_id:
                self._reload("its metaData id changed")
                check(None)
            elif self.partition_columns or any(p not in after for p in before):
                check(None)
            else:
                check([p for p in after if p not in before])

        with self._lock:
            return self.retry.run("append", attempt, strict=True, on_conflict=recheck)

    def delete(
        self, predicate: str | None, *, metadata: Mapping[str, Any] | None = None
    ) -> tuple[int, int | None]:
        """Delete rows matching ``predicate`` (all rows when None) in one commit.

        Returns:
            (rows deleted, new version or None when nothing matched and nothing was committed)
        """
        self._check_writable()
        with self._lock:

            def attempt() -> tuple[dict[str, Any], int | None]:
                def run(texts: Mapping[str, str]) -> tuple[dict[str, Any], int | None]:
                    pred = texts.get(_PREDICATE)
                    return self._committed(
                        lambda: self._dt.delete(pred, commit_properties=self._props(metadata))
                    )

                texts = {} if predicate is None else {_PREDICATE: predicate}
                return self._exact("delete", run, texts)

            self.check_write("delete", rewrites=True)
            if predicate is not None:
                self._check_rewrite_safe("delete")
            result, version = self._retrying("delete", attempt, query=True)
            if version is None:
                return 0, None
            reported = result.get("num_deleted_rows")
            with_dvs = "deletionVectors" in set(self._dt.protocol().reader_features or ())
            if (
                reported is None
                or (not reported and result.get("num_removed_files"))
                or (with_dvs and result.get("num_removed_files"))
            ):
                # delta-rs counts the rows of files a partition predicate removes whole
                # from their statistics: a file without numRecords counts 0, and a file
                # with a deletion vector counts its deleted rows again; count instead
                rows = self._count_at(version - 1) - self._count_at(version)
            else:
                rows = int(reported)
            return rows, version

    def update(
        self,
        predicate: str | None,
        updates: Mapping[str, str],
        *,
        metadata: Mapping[str, Any] | None = None,
    ) -> tuple[int, int | None]:
        """Set columns to SQL expressions where ``predicate`` holds, in one commit.

        Returns:
            (rows updated, new version or None when nothing was committed)
        """
        self._check_writable()
        with self._lock:

            def attempt() -> tuple[dict[str, Any], int | None]:
                def run(texts: Mapping[str, str]) -> tuple[dict[str, Any], int | None]:
                    sets = {c: e for c, e in texts.items() if c != _PREDICATE}
                    return self._committed(
                        lambda: self._dt.update(
                            updates=sets,
                            predicate=texts.get(_PREDICATE),
                            commit_properties=self._props(metadata),
                        )
                    )

                texts = dict(updates)
                schema = self.arrow_schema
                for c in self.partition_columns:
                    # an empty partition value is NULL (see blank_partitions)
                    q = quote_ident(c)
                    if q in texts and pa.types.is_string(schema.field(c).type):
                        texts[q] = f"NULLIF(({texts[q]}), '')"
                if predicate is not None:
                    texts[_PREDICATE] = predicate
                return self._exact("update", run, texts)

            self.check_write("update", rewrites=True)
            self._check_rewrite_safe("update")
            self._check_updated_partitions(predicate, updates)
            try:
                result, version = self._retrying("update", attempt, query=True)
            except (ValueOutOfRange, DivisionByZero) as err:
                raise self._blame(err, predicate, updates) from err
            return int(result.get("num_updated_rows", 0) or 0), version

    def merge_ops(
        self,
        source: pa.Table,
        key: Sequence[str],
        *,
        op_column: str = "_op",
        metadata: Mapping[str, Any] | None = None,
    ) -> tuple[int, int, int, int | None]:
        """Apply INSERT / UPDATE / DELETE rows of ``source`` (by ``op_column``) in one commit.

        Returns:
            (inserted, updated, deleted, new version or None when nothing changed)
        """
        self._check_writable()
        from posixlake._merge import SET_PREFIX

        source = self.blank_partitions(source, "merge")

        data_cols = [
            c for c in source.column_names if c != op_column and not c.startswith(SET_PREFIX)
        ]
        predicate = " AND ".join(f"t.{quote_ident(k)} = s.{quote_ident(k)}" for k in key)
        op = f"s.{quote_ident(op_column)}"

        def assign(c: str) -> str:
            mask = SET_PREFIX + c
            if mask in source.column_names:
                return f"CASE WHEN s.{quote_ident(mask)} THEN s.{quote_ident(c)} ELSE t.{quote_ident(c)} END"
            return f"s.{quote_ident(c)}"

        set_cols = {quote_ident(c): assign(c) for c in data_cols if c not in key}
        all_cols = {quote_ident(c): f"s.{quote_ident(c)}" for c in data_cols}
        with self._lock:

            def merge() -> dict[str, Any]:
                merger = self._dt.merge(
                    source,
                    predicate,
                    source_alias="s",
                    target_alias="t",
                    commit_properties=self._props(metadata),
                )
                if set_cols:
                    merger = merger.when_matched_update(
                        updates=set_cols, predicate=f"{op} = 'UPDATE'"
                    )
                merger = merger.when_matched_delete(predicate=f"{op} = 'DELETE'")
                merger = merger.when_not_matched_insert(
                    updates=all_cols, predicate=f"{op} = 'INSERT'"
                )
                return merger.execute()

            ops = set(source.column(op_column).to_pylist()) if source.num_rows else set()
            self.check_write("merge", rewrites=bool(ops - {"INSERT"}))
            self._check_rewrite_safe("merge")
            self.check_new_rows(source, "merge", dml=True)
            result, version = self._retrying("merge", lambda: self._committed(merge))
            return (
                int(result.get("num_target_rows_inserted", 0) or 0),
                int(result.get("num_target_rows_updated", 0) or 0),
                int(result.get("num_target_rows_deleted", 0) or 0),
                version,
            )

    def restore(
        self, version: int, *, metadata: Mapping[str, Any] | None = None
    ) -> tuple[dict[str, Any], int | None]:
        """Make the table equal to ``version`` in ONE commit (delta-rs' RESTORE).

        The commit removes the files added since and re-adds the files removed since
        (deletion vectors as they were), and puts back that version's schema and
        properties; no data file is rewritten. History shows it as ``RESTORE``.

        Returns:
            delta-rs' metrics (``numRemovedFile``, ``numRestoredFile``) and the version
            committed (None when ``version`` is the current one: nothing to do).

        Raises:
            VersionError: no such version. NotFound: a file the version needs was removed
                by VACUUM.
        """
        self._check_writable()
        with self._lock:
            latest = self.refresh()
            if version < 0 or version > latest:
                raise VersionNotFound(
                    f"version {version} does not exist (the table has versions 0..{latest})"
                )
            if version == latest:
                return {}, None

            def attempt() -> tuple[dict[str, Any], int | None]:
                return self._committed(
                    lambda: self._dt.restore(version, commit_properties=self._props(metadata))
                )

            return self._retrying("restore", attempt)

    def compact(
        self,
        *,
        target_size: int | None = None,
        partition_filters: list[tuple[str, str, Any]] | None = None,
    ) -> tuple[dict[str, Any], int | None]:
        """Run OPTIMIZE (bin-packing compaction); return delta-rs metrics and the new version."""
        self._check_writable()
        with self._lock:

            def attempt() -> tuple[dict[str, Any], int | None]:
                return self._committed(
                    lambda: self._dt.optimize.compact(
                        partition_filters=partition_filters,
                        target_size=target_size,
                        commit_properties=self._props(None),
                    )
                )

            self._check_rewrite_safe("optimize")
            return self._retrying("optimize", attempt)

    def z_order(
        self,
        columns: Sequence[str],
        *,
        target_size: int | None = None,
        partition_filters: list[tuple[str, str, Any]] | None = None,
    ) -> tuple[dict[str, Any], int | None]:
        """Run Z-ORDER on ``columns``; return delta-rs metrics and the new version."""
        self._check_writable()
        with self._lock:

            def attempt() -> tuple[dict[str, Any], int | None]:
                return self._committed(
                    lambda: self._dt.optimize.z_order(
                        list(columns),
                        partition_filters=partition_filters,
                        target_size=target_size,
                        commit_properties=self._props(None),
                    )
                )

            self._check_rewrite_safe("z-order")
            return self._retrying("z-order", attempt)

    def vacuum(
        self, retention_hours: int | None, *, dry_run: bool, enforce_retention_duration: bool
    ) -> list[str]:
        """Delete (or list, with ``dry_run``) files no longer referenced and older than the retention.

        Returns:
            The table-relative paths of the files deleted (or that would be). delta-rs
            lists every expired tombstone, also files an earlier vacuum already deleted;
            those are left out, and when nothing is left no vacuum is committed.
        """
        self._check_writable()
        from posixlake.storage import open_store

        with self._lock, _translated("vacuum"):
            listed = self._dt.vacuum(
                retention_hours=retention_hours,
                dry_run=True,
                enforce_retention_duration=enforce_retention_duration,
            )
            store = open_store(self.uri, self.storage_options)
            present = [p for p in (self._relative(f) for f in listed) if store.exists(p)]
            if present and not dry_run:
                self._dt.vacuum(
                    retention_hours=retention_hours,
                    dry_run=False,
                    enforce_retention_duration=enforce_retention_duration,
                )
            return present
