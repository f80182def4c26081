"""Types between Delta, Arrow and Spark.

The Delta schema string is Spark's own StructType JSON, so a snapshot's Spark schema is
``StructType.fromJson`` of it: exact types (byte/short/int/long, float/double,
decimal(p,s), date, timestamp, timestamp_ntz, binary, array, map, struct).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from posixlake.errors import SchemaError

__all__ = ["arrow_to_spark", "physical_spark_schema", "quote", "spark_schema", "spark_to_arrow"]


def quote(name: str) -> str:
    """Quote a column name for Spark SQL (backticks)."""
    return "`" + name.replace("`", "``") + "`"


def spark_schema(delta_schema_json: str, *, exclude: Sequence[str] = ()) -> Any:
    """Return the Spark StructType of a Delta schema (JSON), without ``exclude`` columns."""
    from pyspark.sql.types import StructType

    raw = json.loads(delta_schema_json)
    raw["fields"] = [_strip_metadata(f) for f in raw["fields"] if f["name"] not in exclude]
    return StructType.fromJson(raw)


def physical_spark_schema(delta_schema_json: str, *, exclude: Sequence[str] = ()) -> Any:
    """Return the Spark StructType of a column-mapped Delta schema with its *physical*
    names (nested fields included), as the data files store them; ``exclude`` names
    logical columns to leave out."""
    from pyspark.sql.types import StructType

    raw = json.loads(delta_schema_json)
    raw["fields"] = [_physical(f) for f in raw["fields"] if f["name"] not in exclude]
    return StructType.fromJson(raw)


def _physical(f: dict[str, Any]) -> dict[str, Any]:
    name = (f.get("metadata") or {}).get("delta.columnMapping.physicalName") or f["name"]
    return {**f, "name": name, "type": _physical_type(f["type"]), "metadata": {}}


def _physical_type(t: Any) -> Any:
    if not isinstance(t, dict):
        return t
    if t.get("type") == "struct":
        return {**t, "fields": [_physical(f) for f in t["fields"]]}
    if t.get("type") == "array":
        return {**t, "elementType": _physical_type(t["elementType"])}
    if t.get("type") == "map":
        return {
            **t,
            "keyType": _physical_type(t["keyType"]),
            "valueType": _physical_type(t["valueType"]),
        }
    return t


def _strip_metadata(f: dict[str, Any]) -> dict[str, Any]:
    """Drop Delta's column metadata (generation expressions, invariants) from a field."""
    return {**f, "metadata": {}}


def arrow_to_spark(t: pa.DataType) -> Any:
    """Return the Spark type of an Arrow (Delta-compatible) type.

    Raises:
        SchemaError: no Spark equivalent.
    """
    from pyspark.sql import types as st

    simple: list[tuple[Any, Any]] = [
        (pa.types.is_int8, st.ByteType),
        (pa.types.is_int16, st.ShortType),
        (pa.types.is_int32, st.IntegerType),
        (pa.types.is_int64, st.LongType),
        (pa.types.is_float32, st.FloatType),
        (pa.types.is_float64, st.DoubleType),
        (pa.types.is_boolean, st.BooleanType),
        (pa.types.is_date32, st.DateType),
    ]
    for check, cls in simple:
        if check(t):
            return cls()
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return st.StringType()
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return st.BinaryType()
    if pa.types.is_decimal(t):
        return st.DecimalType(t.precision, t.scale)
    if pa.types.is_timestamp(t):
        return st.TimestampType() if t.tz is not None else st.TimestampNTZType()
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return st.ArrayType(arrow_to_spark(t.value_type), t.value_field.nullable)
    if pa.types.is_map(t):
        return st.MapType(
            arrow_to_spark(t.key_type), arrow_to_spark(t.item_type), t.item_field.nullable
        )
    if pa.types.is_struct(t):
        return st.StructType(
            [
                st.StructField(
                    t.field(i).name, arrow_to_spark(t.field(i).type), t.field(i).nullable
                )
                for i in range(t.num_fields)
            ]
        )
    raise SchemaError(f"Spark has no type for {t}")


def arrow_schema_to_spark(schema: pa.Schema) -> Any:
    """Return the Spark StructType of an Arrow schema."""
    from pyspark.sql import types as st

    return st.StructType(
        [st.StructField(f.name, arrow_to_spark(f.type), f.nullable) for f in schema]
    )


def spark_to_arrow(t: Any) -> pa.DataType:
    """Return the Arrow type Spark uses for a Spark type (as in ``toArrow``).

    Raises:
        SchemaError: a type Delta cannot store (intervals, variants...).
    """
    from pyspark.sql import types as st

    table: list[tuple[Any, pa.DataType]] = [
        (st.ByteType, pa.int8()),
        (st.ShortType, pa.int16()),
        (st.IntegerType, pa.int32()),
        (st.LongType, pa.int64()),
        (st.FloatType, pa.float32()),
        (st.DoubleType, pa.float64()),
        (st.BooleanType, pa.bool_()),
        (st.DateType, pa.date32()),
        (st.StringType, pa.string()),
        (st.BinaryType, pa.binary()),
        (st.TimestampNTZType, pa.timestamp("us")),
        (st.TimestampType, pa.timestamp("us", tz="UTC")),
    ]
    for cls, arrow in table:
        if type(t) is cls:
            return arrow
    if isinstance(t, st.CharType | st.VarcharType):
        return pa.string()
    if isinstance(t, st.DecimalType):
        return pa.decimal128(t.precision, t.scale)
    if isinstance(t, st.ArrayType):
        return pa.list_(pa.field("element", spark_to_arrow(t.elementType), t.containsNull))
    if isinstance(t, st.MapType):
        return pa.map_(
            spark_to_arrow(t.keyType),
            pa.field("value", spark_to_arrow(t.valueType), t.valueContainsNull),
        )
    if isinstance(t, st.StructType):
        return pa.struct(
            [pa.field(f.name, spark_to_arrow(f.dataType), f.nullable) for f in t.fields]
        )
    if isinstance(t, st.NullType):
        return pa.null()
    raise SchemaError(f"Delta Lake cannot store the Spark type {t.simpleString()}")


def spark_schema_to_arrow(schema: Any) -> pa.Schema:
    """Return the Arrow schema of a Spark StructType."""
    return pa.schema(
        [pa.field(f.name, spark_to_arrow(f.dataType), f.nullable) for f in schema.fields]
    )
