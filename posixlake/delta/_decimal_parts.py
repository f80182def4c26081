"""Negative decimal partition values, which delta-rs writes into the log wrongly.

delta-rs (1.6) renders a decimal partition value as its integer part, a dot and its
fraction, each with its own sign: -1.50 becomes ``-1.-50`` and -0.50 ``0.-50``. It commits
that text, and from then on no reader (delta-rs' own included) can load the table
(``Failed to parse value '-1.-50' as 'decimal(10,2)'``). Values whose fraction is zero
(-1.00) and all other values are written right. Every delta-rs write that adds a file
to such a partition does it: an insert, and the rewrite of a file there by DELETE,
UPDATE, MERGE or OPTIMIZE. Such writes are refused before delta-rs runs; tables that
other writers made with such partitions read correctly, and the Spark engine's own
copy-on-write DML and bulk inserts (whose partition values we render) write them right.

Also here: the one string partition value no writer can store as itself,
``__HIVE_DEFAULT_PARTITION__`` (:func:`refuse_hive_null`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from decimal import InvalidOperation as DecimalError
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from posixlake.errors import InvalidOperation

__all__ = [
    "DML_HINT",
    "HIVE_NULL",
    "INSERT_HINT",
    "check_partitions",
    "check_rows",
    "decimal_partitions",
    "is_misrendered",
    "refuse_hive_null",
]


def is_misrendered(value: Decimal) -> bool:
    """Return whether delta-rs renders this partition value wrongly (negative, fraction != 0)."""
    return value < 0 and value != value.to_integral_value()


def decimal_partitions(schema: pa.Schema, partition_columns: Sequence[str]) -> list[str]:
    """Return the partition columns of decimal type with a scale (the only ones at risk)."""
    return [
        c
        for c in partition_columns
        if c in schema.names
        and pa.types.is_decimal(schema.field(c).type)
        and schema.field(c).type.scale > 0
    ]


def _refuse(what: str, column: str, value: Decimal, where: str, hint: str) -> InvalidOperation:
    return InvalidOperation(
        f"{what}: {where} the negative decimal partition value {value} of column "
        f"{column!r}, which delta-rs would write into the Delta log as an unreadable "
        f"value (-1.50 as '-1.-50'), breaking the table for every reader; nothing was "
        f"written. {hint}"
    )


#: what to do instead of an insert of rows in memory
INSERT_HINT: Final = (
    "Insert them from files or a Spark DataFrame with the Spark engine (whose partition "
    "values are written right)"
)
#: what to do instead of delta-rs DML
DML_HINT: Final = (
    "Use engine='spark' for this write (its copy-on-write DML writes these partitions right)"
)


def check_rows(
    table: pa.Table, columns: Sequence[str], *, what: str, hint: str = INSERT_HINT
) -> None:
    """Refuse rows that would create a partition delta-rs cannot name.

    Args:
        table: the rows delta-rs is about to write.
        columns: the at-risk partition columns (:func:`decimal_partitions`).
        hint: what the user can do instead (:data:`INSERT_HINT`, :data:`DML_HINT`).

    Raises:
        InvalidOperation: a value of such a column is negative with a fraction.
    """
    for col in columns:
        if col not in table.column_names:
            continue
        for value in pc.unique(table.column(col)).to_pylist():
            if value is not None and is_misrendered(value):
                raise _refuse(
                    what,
                    col,
                    value,
                    "the rows hold",
                    hint,
                )


def check_partitions(
    partitions: Iterable[Mapping[str, str | None]], columns: Sequence[str], *, what: str
) -> None:
    """Refuse a delta-rs rewrite of a table that has a partition delta-rs cannot name.

    Args:
        partitions: the table's active partitions (``DeltaTable.partitions()``).
        columns: the at-risk partition columns (:func:`decimal_partitions`).

    Raises:
        InvalidOperation: an active partition value is negative with a fraction.
    """
    for part in partitions:
        for col in columns:
            text = part.get(col)
            if text is None:
                continue
            try:
                value = Decimal(text)
            except DecimalError:
                continue
            if is_misrendered(value):
                raise _refuse(
                    what,
                    col,
                    value,
                    "the table has a partition with",
                    DML_HINT,
                )


HIVE_NULL: Final = "__HIVE_DEFAULT_PARTITION__"
"""The partition value every Delta and Hive reader reads as NULL (delta-rs writes the
string as NULL in the log): a string partition value that cannot be stored."""


def refuse_hive_null(values: pa.ChunkedArray | pa.Array, column: str, what: str) -> None:
    """Refuse new rows whose string partition value is :data:`HIVE_NULL`.

    Raises:
        InvalidOperation: such a value (it would read back as NULL).
    """
    if not pa.types.is_string(values.type):  # string_view from DataFusion, large_string
        values = values.cast(pa.string())
    if pc.any(pc.equal(values, HIVE_NULL)).as_py():
        raise InvalidOperation(
            f"{what}: partition column {column!r} holds the value {HIVE_NULL!r}, which "
            "Delta readers read as NULL (it names the NULL partition): use another value, "
            "or NULL"
        )
