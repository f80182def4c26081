"""``schema.sql`` written into a new directory of a lake: the CREATE TABLE it holds.

The text is what the table face's ``schema.sql`` shows (``nfs.table.schema_sql``: Spark SQL
types, ``NOT NULL``, a ``PRIMARY KEY (...)`` line, ``PARTITIONED BY (...)``), parsed with
sqlglot's Spark dialect, so a table's ``schema.sql`` copied into a new directory makes a
table with the same schema, key and partitioning. The table name in the statement is
ignored (the directory names the table).
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from posixlake.errors import SchemaError

__all__ = ["TableSpec", "parse_create_table"]

_T = exp.DType
_SIMPLE: dict[exp.DType, pa.DataType] = {
    _T.TINYINT: pa.int8(),
    _T.SMALLINT: pa.int16(),
    _T.INT: pa.int32(),
    _T.BIGINT: pa.int64(),
    _T.FLOAT: pa.float32(),
    _T.DOUBLE: pa.float64(),
    _T.TEXT: pa.string(),
    _T.VARCHAR: pa.string(),
    _T.BINARY: pa.binary(),
    _T.BOOLEAN: pa.bool_(),
    _T.DATE: pa.date32(),
    _T.TIMESTAMPTZ: pa.timestamp("us", tz="UTC"),
    _T.TIMESTAMP: pa.timestamp("us", tz="UTC"),
    _T.TIMESTAMPNTZ: pa.timestamp("us"),
}


@dataclass(frozen=True)
class TableSpec:
    """A table to create: its schema, primary key columns and partition columns."""

    schema: pa.Schema
    primary_key: tuple[str, ...] = ()
    partition_by: tuple[str, ...] = ()


def _type(node: exp.DataType) -> pa.DataType:
    kind = node.this
    if kind in _SIMPLE:
        return _SIMPLE[kind]
    args = node.expressions
    if kind == _T.DECIMAL:
        if len(args) != 2:
            raise SchemaError(f"DECIMAL needs a precision and a scale: {node.sql('spark')}")
        precision, scale = (int(a.this.this) for a in args)
        if not 1 <= precision <= 38 or not 0 <= scale <= precision:
            raise SchemaError(f"unsupported {node.sql('spark')}")
        return pa.decimal128(precision, scale)
    if kind == _T.ARRAY and len(args) == 1:
        return pa.list_(_type(args[0]))
    if kind == _T.MAP and len(args) == 2:
        return pa.map_(_type(args[0]), _type(args[1]))
    if kind == _T.STRUCT:
        return pa.struct([_field(a) for a in args])
    raise SchemaError(f"unsupported column type {node.sql('spark')}")


def _field(col: exp.Expression) -> pa.Field:
    if not isinstance(col, exp.ColumnDef) or not isinstance(col.args.get("kind"), exp.DataType):
        raise SchemaError(f"not a column definition: {col.sql('spark')}")
    nullable = not any(
        isinstance(c.args.get("kind"), exp.NotNullColumnConstraint)
        for c in col.args.get("constraints") or []
    )
    return pa.field(col.name, _type(col.args["kind"]), nullable=nullable)


def parse_create_table(text: str) -> TableSpec:
    """Return the table a ``CREATE TABLE`` statement describes.

    Raises:
        SchemaError: not exactly one CREATE TABLE statement with columns, an unsupported
            type or clause, or a key or partition column that is not a column.
    """
    try:
        statements = [s for s in sqlglot.parse(text, read="spark") if s is not None]
    except SqlglotError as err:
        raise SchemaError(f"schema.sql is not a CREATE TABLE statement: {err}") from err
    if len(statements) != 1:
        raise SchemaError("schema.sql must hold exactly one CREATE TABLE statement")
    create = statements[0]
    if (
        not isinstance(create, exp.Create)
        or str(create.args.get("kind", "")).upper() != "TABLE"
        or not isinstance(create.this, exp.Schema)
    ):
        raise SchemaError("schema.sql must be CREATE TABLE name (column type, ...)")
    fields: list[pa.Field] = []
    key: list[str] = []
    for item in create.this.expressions:
        if isinstance(item, exp.PrimaryKey):
            key.extend(e.name for e in item.expressions)
        else:
            fields.append(_field(item))
    if not fields:
        raise SchemaError("CREATE TABLE needs at least one column")
    partition: list[str] = []
    props = create.args.get("properties")
    for prop in props.expressions if props is not None else []:
        if isinstance(prop, exp.PartitionedByProperty):
            cols = prop.this.expressions if isinstance(prop.this, exp.Schema) else [prop.this]
            partition.extend(c.name for c in cols)
        else:
            raise SchemaError(f"unsupported clause in schema.sql: {prop.sql('spark')}")
    names = {f.name for f in fields}
    if len(names) != len(fields):
        raise SchemaError("a column is named twice in schema.sql")
    for what, cols in (("PRIMARY KEY", key), ("PARTITIONED BY", partition)):
        missing = [c for c in cols if c not in names]
        if missing:
            raise SchemaError(f"{what} names no column: {', '.join(missing)}")
    return TableSpec(pa.schema(fields), tuple(key), tuple(partition))
