"""The text of ``/schema.sql``: a CREATE TABLE statement for the table (Spark SQL types)."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

__all__ = ["create_table_sql", "sql_type"]

_NAMES: dict[pa.DataType, str] = {
    pa.int8(): "TINYINT",
    pa.int16(): "SMALLINT",
    pa.int32(): "INT",
    pa.int64(): "BIGINT",
    pa.float16(): "FLOAT",
    pa.float32(): "FLOAT",
    pa.float64(): "DOUBLE",
    pa.string(): "STRING",
    pa.large_string(): "STRING",
    pa.binary(): "BINARY",
    pa.large_binary(): "BINARY",
    pa.bool_(): "BOOLEAN",
    pa.date32(): "DATE",
    pa.date64(): "DATE",
}


def _ident(name: str) -> str:
    if name.isidentifier() and name.isascii():
        return name
    return "`" + name.replace("`", "``") + "`"


def sql_type(t: pa.DataType) -> str:
    """Return the Spark SQL spelling of an Arrow type (``BIGINT``, ``ARRAY<STRING>``...)."""
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision},{t.scale})"
    if pa.types.is_timestamp(t):
        return "TIMESTAMP" if t.tz is not None else "TIMESTAMP_NTZ"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"ARRAY<{sql_type(t.value_type)}>"
    if pa.types.is_map(t):
        return f"MAP<{sql_type(t.key_type)}, {sql_type(t.item_type)}>"
    if pa.types.is_struct(t):
        inner = ", ".join(f"{_ident(f.name)}: {sql_type(f.type)}" for f in t)
        return f"STRUCT<{inner}>"
    for known, name in _NAMES.items():
        if t == known:
            return name
    return str(t).upper()


def create_table_sql(
    schema: pa.Schema,
    *,
    primary_key: str | Sequence[str] | None = (),
    partition_by: Sequence[str] = (),
    name: str = "data",
) -> str:
    """Return ``CREATE TABLE name (...)`` for ``schema``, one column per line, ending in LF."""
    lines = [
        f"  {_ident(f.name)} {sql_type(f.type)}{'' if f.nullable else ' NOT NULL'}" for f in schema
    ]
    if isinstance(primary_key, str):  # DatabaseOps.primary_key() gives a single key as str
        primary_key = [primary_key]
    if primary_key:
        lines.append(f"  PRIMARY KEY ({', '.join(_ident(k) for k in primary_key)})")
    text = f"CREATE TABLE {_ident(name)} (\n" + ",\n".join(lines) + "\n)"
    if partition_by:
        text += f"\nPARTITIONED BY ({', '.join(_ident(c) for c in partition_by)})"
    return text + ";\n"
