"""Copy-on-write DELETE, UPDATE and MERGE of :class:`~posixlake.engines.spark.SparkEngine`:
Spark jobs rewrite the touched files, delta-rs commits removes and adds as one
transaction. See docs/design.md."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from functools import reduce
from typing import Any

import pyarrow as pa

from posixlake.delta import DeltaLog
from posixlake.delta._snapshot import DataFile
from posixlake.engines.base import MergeOutcome, WriteOutcome
from posixlake.engines.local import LocalEngine
from posixlake.engines.spark._core import SparkCore, _unquote
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

__all__ = ["SparkDml"]

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
