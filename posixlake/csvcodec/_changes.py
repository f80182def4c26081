"""Reading a CSV of changes (an ``_op`` column) into merge rows with explicit intent.

In a change file an empty field means "no value given": an UPDATE row leaves that
column as it is (an INSERT row leaves it NULL, a DELETE row needs only the key). NULL
must be asked for with a marker, ``\\N`` by default, as PostgreSQL's ``COPY ... CSV``
and MySQL's ``LOAD DATA`` write it. The marker is recognised by its text, quoted or not;
to store the text ``\\N`` itself, choose another marker.
"""

from __future__ import annotations

from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc

from posixlake.csvcodec._common import CsvFormatError, CsvSource, _choose
from posixlake.csvcodec._parse import _convert_field
from posixlake.csvcodec._scan import _as_bytes, _header_text, _read_strings, _split_header
from posixlake.errors import SchemaError

__all__ = ["DEFAULT_NULL_MARKER", "OP_COLUMN", "read_changes_csv"]

DEFAULT_NULL_MARKER: Final = "\\N"
OP_COLUMN: Final = "_op"


def read_changes_csv(
    data: CsvSource, schema: pa.Schema, *, null_marker: str = DEFAULT_NULL_MARKER
) -> list[dict[str, Any]]:
    """Read a CSV of changes into rows for ``DatabaseOps.merge``, one dict per line.

    Each row carries ``_op`` and the columns whose field is not empty; a field holding
    ``null_marker`` is ``None`` (set NULL); other fields are parsed as their column's
    type (as :func:`parse_csv` does). So ``UPDATE,3,,1.50,,`` sets only the fourth
    column, and ``UPDATE,3,\\N,,,`` sets only the second one, to NULL.

    Args:
        data: CSV text with a header line naming ``_op`` and columns of ``schema``.
        schema: The table's Arrow schema (its columns' types).
        null_marker: The field text that means NULL (not empty).

    Returns:
        The rows, in file order.

    Raises:
        CsvFormatError: Malformed CSV, no ``_op`` column, or a value that does not parse
            as its column's type (naming the line, column and value).
        SchemaError: A header column that is not in the table, or an empty marker.
    """
    if not null_marker:
        raise SchemaError("the NULL marker cannot be empty: an empty field means 'no change'")
    body = _split_header(_as_bytes(data), "require")
    names = body.names or []
    if not names:
        raise CsvFormatError("empty CSV: no header line with column names", line=1)
    if OP_COLUMN not in names:
        raise CsvFormatError(
            f"line 1: a change file needs an {OP_COLUMN} column (INSERT, UPDATE or DELETE), "
            f"got {_header_text(names)}",
            line=1,
        )
    unknown = [n for n in names if n != OP_COLUMN and n not in schema.names]
    if unknown:
        raise SchemaError(
            f"column(s) {', '.join(map(repr, unknown))} are not in the table "
            f"(its columns are {', '.join(schema.names)})"
        )
    if len(set(names)) != len(names):
        raise CsvFormatError(f"line 1: a column is named twice in {_header_text(names)}", line=1)
    raw = _read_strings(body, len(names))
    columns: dict[str, list[Any]] = {}
    given: dict[str, list[bool]] = {}
    for index, name in enumerate(names):
        text = raw.column(index)
        if name == OP_COLUMN:
            columns[name] = text.to_pylist()
            given[name] = [True] * len(text)
            continue
        marker = pc.fill_null(pc.equal(text, pa.scalar(null_marker)), False)
        field = schema.field(name).with_nullable(True)
        values = _convert_field(_choose(marker, None, text), field, body, len(names))
        columns[name] = values.to_pylist()
        given[name] = pc.or_(pc.is_valid(text), marker).to_pylist()
    rows: list[dict[str, Any]] = []
    for row in range(raw.num_rows):
        rows.append({n: columns[n][row] for n in names if given[n][row]})
    return rows
