"""Copy-on-write DELETE, UPDATE and MERGE of :class:`~posixlake.engines.spark.SparkEngine`:
Spark jobs rewrite the touched files, delta-rs commits removes and adds as one
transaction. See docs/design.md."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from functools import reduce
from typing import Any, Final
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc

from posixlake.delta import DeltaLog
from posixlake.delta._snapshot import DataFile, Snapshot
from posixlake.engines.base import MergeOutcome, WriteOutcome
from posixlake.engines.local import LocalEngine
from posixlake.engines.spark._core import SparkCore, _unquote, rows_per_file
from posixlake.engines.spark._frames import (
    FILE_COL,
    column,
    snapshot_frame,
    write_frame,
)
from posixlake.engines.spark._io import (
    WriteSpec,
)
from posixlake.engines.spark._session import (
    quiet,
    spark_errors,
    spark_value_error,
    translate_spark_error,
)
from posixlake.engines.spark._types import arrow_schema_to_spark, arrow_to_spark
from posixlake.errors import (
    DivisionByZero,
    PosixLakeError,
    QueryError,
    SchemaError,
    ValueOutOfRange,
)

__all__ = ["DELTA_RS_MAX_ROWS", "SparkDml", "in_place", "prune"]

logger = logging.getLogger("posixlake.engines.spark._engine")


class SparkDml(SparkCore):
    """DELETE, UPDATE and MERGE as Spark jobs."""

    def delete(
        self, log: DeltaLog, predicate: str | None, *, metadata: Mapping[str, Any]
    ) -> WriteOutcome:
        """Delete matching rows (copy-on-write of the touched files) in one commit.

        On tables whose features only delta-rs writes correctly (deletion vectors, column
        mapping, a change data feed...), delta-rs runs the DELETE (same result, one commit).
        """
        from pyspark.sql import functions as F

        log.check_write("delete", rewrites=True)  # before any Spark job
        features = self._delta_rs_only(log, rewrites=True)
        if features:
            logger.info("delete: delta-rs writes tables with %s", ", ".join(features))
            return LocalEngine().delete(log, predicate, metadata=metadata)
        small = in_place(log, predicate)
        if small is not None:
            logger.info("delete: delta-rs deletes in place (a small change: %s)", small[0])
            return LocalEngine().delete(log, small[0], metadata=metadata)
        pred = predicate if predicate is not None and predicate.strip() else "true"

        def attempt(n: int) -> WriteOutcome:
            snap, touched = self._touched(log, pred, "delete")
            if not touched:
                return WriteOutcome(0, None)
            files = [f for f, _ in touched.values()]
            keep = F.expr(f"NOT coalesce(({pred}), false)")
            spec, written = self._rewrite(log, snap, files, lambda df: df.where(keep), "delete")
            version = self._commit(
                log, snap, spec, written, files, n, metadata=metadata, operation="DELETE"
            )
            return WriteOutcome(sum(c for _, c in touched.values()), version)

        return self._attempts(log, "delete", attempt)

    def update(
        self,
        log: DeltaLog,
        predicate: str | None,
        updates: Mapping[str, str],
        *,
        metadata: Mapping[str, Any],
    ) -> WriteOutcome:
        """Set columns to SQL expressions on matching rows (copy-on-write) in one commit.

        On tables whose features only delta-rs writes correctly, delta-rs runs the UPDATE.
        """
        from pyspark.sql import functions as F

        log.check_write("update", rewrites=True)  # before any Spark job
        features = self._delta_rs_only(log, rewrites=True)
        if features:
            logger.info("update: delta-rs writes tables with %s", ", ".join(features))
            return LocalEngine().update(log, predicate, updates, metadata=metadata)

        pred = predicate if predicate is not None and predicate.strip() else "true"
        sets = {_unquote(k): v for k, v in updates.items()}
        schema = log.arrow_schema
        unknown = [c for c in sets if c not in schema.names]
        if unknown:
            raise SchemaError(f"update: unknown column(s) {unknown}")
        small = in_place(log, predicate, updates)
        if small is not None:
            logger.info("update: delta-rs updates in place (a small change: %s)", small[0])
            return LocalEngine().update(log, small[0], small[1], metadata=metadata)

        self._check_expressions(log, pred, sets, schema)

        def transform(df: Any) -> Any:
            hit = F.coalesce(F.expr(pred), F.lit(False))
            cols = [
                F.when(hit, F.expr(sets[f.name]).cast(arrow_to_spark(f.type)))
                .otherwise(column(f.name))
                .alias(f.name)
                if f.name in sets
                else column(f.name)
                for f in schema
            ]
            return df.select(*cols)

        def attempt(n: int) -> WriteOutcome:
            snap, touched = self._touched(log, pred, "update")
            if not touched:
                return WriteOutcome(0, None)
            files = [f for f, _ in touched.values()]
            spec, written = self._rewrite(log, snap, files, transform, "update")
            version = self._commit(
                log, snap, spec, written, files, n, metadata=metadata, operation="UPDATE"
            )
            return WriteOutcome(sum(c for _, c in touched.values()), version)

        try:
            return self._attempts(log, "update", attempt)
        except (ValueOutOfRange, DivisionByZero) as err:
            raise self._blame(log, pred, sets, schema, err) from err

    def _blame(
        self,
        log: DeltaLog,
        predicate: str,
        sets: Mapping[str, str],
        schema: pa.Schema,
        err: ValueOutOfRange | DivisionByZero,
    ) -> PosixLakeError:
        """Return ``err`` naming the column whose SET expression failed (found by
        evaluating each on the matching rows), or ``err`` when none fails alone."""
        from pyspark.sql import functions as F

        frame, _ = self.frame(log)
        hit = frame.where(F.coalesce(F.expr(predicate), F.lit(False)))
        for c, expr in sets.items():
            value = F.expr(expr).cast(arrow_to_spark(schema.field(c).type))
            try:
                with quiet():
                    hit.select(F.max(value)).collect()
            except spark_errors() as probe:
                found = spark_value_error(str(probe), what="update", column=c, expression=expr)
                if found is not None:
                    return found
        return err

    def _touched(
        self, log: DeltaLog, predicate: str, what: str
    ) -> tuple[Snapshot, dict[str, tuple[DataFile, int]]]:
        """Return the snapshot and, per file with matching rows, the file and the count.

        The Spark job reads only the files whose min/max statistics admit a match of the
        predicate's integer equalities (see :func:`prune`); all files otherwise.
        """

        snap = self.snapshot(log)
        files = prune(log, snap, predicate)
        if files is None:
            return super()._touched(log, predicate, what)
        if not files:
            return snap, {}
        try:
            frame, resolve = snapshot_frame(self.spark, snap, files=files, with_file=True)
        except spark_errors() as err:
            raise translate_spark_error(err, what=what) from err
        return snap, rows_per_file(frame, resolve, predicate, what)

    def _check_expressions(
        self, log: DeltaLog, predicate: str, sets: Mapping[str, str], schema: pa.Schema
    ) -> None:
        """Analyse the predicate and SET expressions; refuse text into number/boolean columns.

        Raises:
            QueryError: invalid SQL, or an expression whose type cannot be stored.
        """
        from pyspark.sql import functions as F
        from pyspark.sql import types as st

        frame, _ = self.frame(log)
        names = list(sets)
        try:
            analysed = frame.select(
                F.expr(predicate).alias("__p"),
                *[F.expr(sets[c]).alias(f"__e{i}") for i, c in enumerate(names)],
            ).schema
        except spark_errors() as err:
            raise translate_spark_error(err, what="update") from err
        for i, c in enumerate(names):
            got = analysed[f"__e{i}"].dataType
            want = schema.field(c).type
            text = isinstance(got, st.StringType | st.VarcharType | st.CharType)
            if text and (
                pa.types.is_integer(want)
                or pa.types.is_floating(want)
                or pa.types.is_decimal(want)
                or pa.types.is_boolean(want)
            ):
                raise QueryError(
                    f"update: column {c!r} is {want}, but {sets[c]!r} is text; cast it explicitly"
                )

    def merge(
        self, log: DeltaLog, source: pa.Table, key: Sequence[str], *, metadata: Mapping[str, Any]
    ) -> MergeOutcome:
        """Apply the ``_op`` rows of ``source`` by ``key`` (copy-on-write) in one commit.

        Same semantics as the local engine's MERGE: a matched UPDATE row sets the columns
        the source carries (where its ``SET_PREFIX`` mask, if any, is true), a matched
        DELETE row deletes, an unmatched INSERT row inserts; other rows do nothing.
        """
        from pyspark.sql import functions as F

        from posixlake._merge import OP_COLUMN, SET_PREFIX

        if source.num_rows == 0:
            return MergeOutcome(0, 0, 0, None)
        ops = set(source.column(OP_COLUMN).to_pylist())
        log.check_write("merge", rewrites=bool(ops - {"INSERT"}))  # before any Spark job
        features = self._delta_rs_only(log, rewrites=True)
        if features:
            logger.info("merge: delta-rs writes tables with %s", ", ".join(features))
            return LocalEngine().merge(log, source, key, metadata=metadata)
        schema = log.arrow_schema
        data_cols = [
            c for c in source.column_names if c != OP_COLUMN and not c.startswith(SET_PREFIX)
        ]
        masks = {c[len(SET_PREFIX) :]: c for c in source.column_names if c.startswith(SET_PREFIX)}
        set_cols = [c for c in data_cols if c not in key]
        alias = {c: f"__posixlake_s{i}" for i, c in enumerate(source.column_names)}
        renamed = source.rename_columns([alias[c] for c in source.column_names])
        spark = self.spark
        try:
            with quiet():
                src = spark.createDataFrame(renamed, schema=arrow_schema_to_spark(renamed.schema))
        except spark_errors() as err:
            raise translate_spark_error(err, what="merge") from err
        op = F.col(alias[OP_COLUMN])
        matched_ops = ["UPDATE", "DELETE"] if set_cols else ["DELETE"]
        ud = src.where(op.isin(*matched_ops))
        ins = src.where(op == F.lit("INSERT"))
        cond = reduce(lambda a, b: a & b, [column(k) == F.col(alias[k]) for k in key])

        def rewrite(df: Any) -> Any:
            joined = df.join(F.broadcast(ud), cond, "left")
            joined = joined.where(op.isNull() | (op != F.lit("DELETE")))
            is_update = F.coalesce(op == F.lit("UPDATE"), F.lit(False))
            cols = []
            for f in schema:
                if f.name in set_cols:
                    setter = is_update
                    if f.name in masks:
                        setter = setter & F.coalesce(F.col(alias[masks[f.name]]), F.lit(False))
                    cols.append(
                        F.when(setter, F.col(alias[f.name])).otherwise(column(f.name)).alias(f.name)
                    )
                else:
                    cols.append(column(f.name))
            return joined.select(*cols)

        def inserts(target: Any) -> Any:
            keys = target.select(*[column(k) for k in key])
            fresh = ins.join(keys, cond, "left_anti")
            cols = [
                F.col(alias[f.name]).alias(f.name)
                if f.name in data_cols
                else F.lit(None).cast(arrow_to_spark(f.type)).alias(f.name)
                for f in schema
            ]
            return fresh.select(*cols)

        def attempt(n: int) -> MergeOutcome:
            snap = self.snapshot(log)
            target, resolve = self.frame(log, with_file=True)
            try:
                hits = (
                    target.join(F.broadcast(ud), cond, "inner")
                    .groupBy(F.col(FILE_COL), op.alias("op"))
                    .count()
                )
                new = (
                    inserts(target)
                    .groupBy()
                    .count()
                    .select(
                        F.lit(None).cast("string").alias(FILE_COL),
                        F.lit("INSERT").alias("op"),
                        "count",
                    )
                )
                with quiet():
                    rows = hits.unionByName(new).collect()
            except spark_errors() as err:
                raise translate_spark_error(err, what="merge") from err
            counts = {"INSERT": 0, "UPDATE": 0, "DELETE": 0}
            touched: dict[str, DataFile] = {}
            for file_value, kind, count in rows:
                counts[kind] += int(count)
                if file_value is not None:
                    f = resolve(file_value)
                    touched[f.path] = f
            if not any(counts.values()):
                return MergeOutcome(0, 0, 0, None)
            spec = WriteSpec.new(log.uri, log.storage_options, snap.schema, snap.partition_columns)
            try:
                parts = []
                if touched:
                    sub, _ = snapshot_frame(spark, snap, files=list(touched.values()))
                    parts.append(rewrite(sub))
                if counts["INSERT"]:
                    parts.append(inserts(target))
                out = reduce(lambda a, b: a.unionByName(b), parts)
            except spark_errors() as err:
                raise translate_spark_error(err, what="merge") from err
            written = [w for w, _ in write_frame(out, spec, what="merge")]
            version = self._commit(
                log,
                snap,
                spec,
                written,
                list(touched.values()),
                n,
                metadata=metadata,
                strict=bool(counts["INSERT"]),
                operation="MERGE",
            )
            return MergeOutcome(counts["INSERT"], counts["UPDATE"], counts["DELETE"], version)

        return self._attempts(log, "merge", attempt)


# -- small DML on delta-rs ----------------------------------------------------------------

#: a DELETE / UPDATE whose statistics leave at most this many rows to rewrite, and whose
#: predicate and values evaluate the same in Spark SQL and delta-rs (see _InPlace), is
#: run by delta-rs in place: a Spark job for it would cost more than the rewrite
DELTA_RS_MAX_ROWS = 1_000_000

_INTEGER_SQL: Final = {
    pa.int8(): "TINYINT",
    pa.int16(): "SMALLINT",
    pa.int32(): "INT",
    pa.int64(): "BIGINT",
}
_DIGITS: Final = re.compile(r"[0-9]+")
_NOT_EXACT = object()  # a predicate part that statistics cannot decide


class _InPlace:
    """The part of Spark SQL that delta-rs (DataFusion) evaluates with the same result.

    Columns of integer, string and boolean type (matched case-insensitively, as Spark
    does); integer literals in the column type's range, string literals without quotes or
    backslashes (Spark reads ``'a''b'`` and ``'\\n'`` otherwise than DataFusion), TRUE /
    FALSE; comparisons, IN, BETWEEN, IS [NOT] NULL, AND, OR, NOT. Rendered again with
    quoted names for delta-rs. Anything else (functions, arithmetic, casts, floats,
    decimals, dates...) keeps the DML on Spark.
    """

    def __init__(self, schema: pa.Schema, partition_columns: Sequence[str]) -> None:
        self._by_lower: dict[str, list[pa.Field]] = {}
        for f in schema:
            self._by_lower.setdefault(f.name.lower(), []).append(f)
        self._partitions = set(partition_columns)

    def field(self, node: Any) -> pa.Field | None:
        from sqlglot import exp

        if not isinstance(node, exp.Column) or node.table:
            return None
        found = self._by_lower.get(node.name.lower(), [])
        if len(found) != 1 or '"' in found[0].name:
            return None
        t = found[0].type
        if t in _INTEGER_SQL or pa.types.is_string(t) or pa.types.is_boolean(t):
            return found[0]
        return None

    def literal(self, node: Any, field: pa.Field) -> str | None:
        """Render ``node`` as a literal of ``field``'s type, or None."""
        from sqlglot import exp

        t = field.type
        negative = isinstance(node, exp.Neg)
        if negative:
            node = node.this
        if isinstance(node, exp.Literal) and not node.is_string and t in _INTEGER_SQL:
            if not _DIGITS.fullmatch(node.this):
                return None
            value = -int(node.this) if negative else int(node.this)
            bits = t.bit_width
            return str(value) if -(2 ** (bits - 1)) <= value < 2 ** (bits - 1) else None
        if negative:
            return None
        if isinstance(node, exp.Literal) and node.is_string and pa.types.is_string(t):
            text = str(node.this)
            return None if "'" in text or "\\" in text else f"'{text}'"
        if isinstance(node, exp.Boolean) and pa.types.is_boolean(t):
            return "TRUE" if node.this else "FALSE"
        return None

    def predicate(self, node: Any) -> str | None:
        """Render a boolean expression for delta-rs, or None when it is outside the subset."""
        from sqlglot import exp

        if isinstance(node, exp.Paren):
            inner = self.predicate(node.this)
            return None if inner is None else f"({inner})"
        if isinstance(node, exp.And | exp.Or):
            left, right = self.predicate(node.this), self.predicate(node.expression)
            if left is None or right is None:
                return None
            return f"({left}) {'AND' if isinstance(node, exp.And) else 'OR'} ({right})"
        if isinstance(node, exp.Not):
            inner = self.predicate(node.this)
            return None if inner is None else f"NOT ({inner})"
        if isinstance(node, exp.Boolean):
            return "TRUE" if node.this else "FALSE"
        field = self.field(node)
        if field is not None:
            return _quote(field.name) if pa.types.is_boolean(field.type) else None
        ops = {exp.EQ: "=", exp.NEQ: "<>", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}
        op = ops.get(type(node))
        if op is not None:
            left, right = node.this, node.expression
            field = self.field(left)
            if field is None:  # literal op column
                left, right = right, left
                field = self.field(left)
                op = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}.get(op, op)
            value = self.literal(right, field) if field is not None else None
            if field is None or value is None:
                return None
            return f"{_quote(field.name)} {op} {value}"
        if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
            field = self.field(node.this)
            return None if field is None else f"{_quote(field.name)} IS NULL"
        if isinstance(node, exp.In) and not node.args.get("query"):
            field = self.field(node.this)
            if field is None or not node.expressions:
                return None
            values = [self.literal(v, field) for v in node.expressions]
            if any(v is None for v in values):
                return None
            return f"{_quote(field.name)} IN ({', '.join(str(v) for v in values)})"
        if isinstance(node, exp.Between):
            field = self.field(node.this)
            if field is None:
                return None
            low, high = (
                self.literal(node.args["low"], field),
                self.literal(node.args["high"], field),
            )
            if low is None or high is None:
                return None
            return f"{_quote(field.name)} BETWEEN {low} AND {high}"
        return None

    def value(self, column: str, text: str) -> tuple[str, str] | None:
        """Render a SET value (a literal as ``sql_literal`` writes it) for delta-rs, or None."""
        from sqlglot import exp

        node = _parse(text)
        field = self.field(exp.column(column)) if node is not None else None
        if field is None or field.name in self._partitions:
            return None
        if isinstance(node, exp.Null):
            return (_quote(field.name), "NULL") if field.nullable else None
        if isinstance(node, exp.Cast) and field.type in _INTEGER_SQL:  # TryCast too
            if node.to.sql(dialect="spark").upper() != _INTEGER_SQL[field.type]:
                return None
            node = node.this
        rendered = self.literal(node, field)
        return None if rendered is None else (_quote(field.name), rendered)

    def candidates(self, node: Any, actions: pa.Table) -> pa.Array | None:
        """Return which files' statistics admit a match of ``node`` (None: all may)."""
        mask = self._admits(node, actions)
        return None if mask is _NOT_EXACT else mask

    def candidate_rows(self, node: Any, actions: pa.Table) -> int:
        """Rows of the files whose statistics admit rows matching ``node`` (all if unsure)."""
        rows = actions.column("num_records") if "num_records" in actions.column_names else None
        if rows is None or rows.null_count:
            return -1  # unknown
        mask = self._admits(node, actions)
        if mask is _NOT_EXACT:
            return int(pc.sum(rows).as_py() or 0)
        return int(pc.sum(rows.filter(mask)).as_py() or 0)

    def _admits(self, node: Any, actions: pa.Table) -> Any:
        from sqlglot import exp

        if isinstance(node, exp.Paren):
            return self._admits(node.this, actions)
        if isinstance(node, exp.And | exp.Or):
            left, right = self._admits(node.this, actions), self._admits(node.expression, actions)
            if isinstance(node, exp.And):
                return (
                    right
                    if left is _NOT_EXACT
                    else left
                    if right is _NOT_EXACT
                    else pc.and_(left, right)
                )
            if left is _NOT_EXACT or right is _NOT_EXACT:
                return _NOT_EXACT
            return pc.or_(left, right)
        if isinstance(node, exp.EQ):
            left, right = node.this, node.expression
            if self.field(left) is None:
                left, right = right, left
            field = self.field(left)
            if field is None or field.type not in _INTEGER_SQL or field.name in self._partitions:
                return _NOT_EXACT
            value = self.literal(right, field)
            low, high = f"min.{field.name}", f"max.{field.name}"
            if value is None or low not in actions.column_names or high not in actions.column_names:
                return _NOT_EXACT
            v = pa.scalar(int(value), actions.column(low).type)
            lo, hi = actions.column(low), actions.column(high)
            return pc.fill_null(pc.and_(pc.less_equal(lo, v), pc.greater_equal(hi, v)), True)
        return _NOT_EXACT


def _quote(name: str) -> str:
    return f'"{name}"'


def _parse(text: str) -> Any:
    import sqlglot
    from sqlglot.errors import ParseError

    try:
        return sqlglot.parse_one(text, read="spark")
    except ParseError:
        return None


def prune(log: DeltaLog, snap: Snapshot, predicate: str) -> list[DataFile] | None:
    """Return the files of ``snap`` whose statistics admit rows matching ``predicate``.

    Only integer equalities (``id = 5``, under AND / OR) are decided, from the exact
    min/max statistics of the add actions; None when nothing can be ruled out this way
    (the Spark job reads every file) or the log is not at the snapshot's version.
    """
    node = _parse(predicate)
    if node is None or log.version != snap.version:
        return None
    actions = log.add_actions()
    mask = _InPlace(log.arrow_schema, log.partition_columns).candidates(node, actions)
    if mask is None:
        return None
    kept = {unquote(p) for p in actions.column("path").filter(mask).to_pylist()}
    return [f for f in snap.files if f.path in kept]


def in_place(
    log: DeltaLog, predicate: str | None, sets: Mapping[str, str] | None = None
) -> tuple[str, dict[str, str]] | None:
    """Return the predicate (and SET values) for delta-rs when it can run this DML in place.

    That is: the predicate and values are in :class:`_InPlace`'s subset (so they evaluate
    the same), and the files the statistics leave hold at most :data:`DELTA_RS_MAX_ROWS`
    rows (a small change). None: Spark runs it.
    """
    text = predicate if predicate is not None and predicate.strip() else "true"
    node = _parse(text)
    if node is None:
        return None
    subset = _InPlace(log.arrow_schema, log.partition_columns)
    rendered = subset.predicate(node)
    if rendered is None:
        return None
    updates: dict[str, str] = {}
    for name, value in (sets or {}).items():
        pair = subset.value(_unquote(name), value)
        if pair is None:
            return None
        updates[pair[0]] = pair[1]
    rows = subset.candidate_rows(node, log.add_actions())
    if rows < 0 or rows > DELTA_RS_MAX_ROWS:
        return None
    return rendered, updates
