"""What DatabaseOps returns: QueryResult for queries, WriteResult / ReplaceResult for writes."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, overload

import pyarrow as pa

from posixlake._convert import json_value

__all__ = ["QueryResult", "ReplaceResult", "RestoreResult", "Row", "WriteResult"]


class Row(tuple[Any, ...]):
    """One result row: a tuple in column order whose ``values`` maps column -> value.

    ``row.values["cnt"]`` is how the original project's rows are read; ``a, b = row`` and
    ``row[0]`` work as for any tuple, and a Row equals the plain tuple of its values.
    """

    _columns: tuple[str, ...]

    def __new__(cls, values: Iterable[Any], columns: Sequence[str]) -> Row:
        row = super().__new__(cls, values)
        row._columns = tuple(columns)
        return row

    @property
    def values(self) -> dict[str, Any]:
        """The row as a dict of column name -> Python value (the original's ``Row.values``)."""
        return dict(zip(self._columns, self, strict=True))

    def __repr__(self) -> str:
        return f"Row(values={self.values!r})"


class QueryResult:
    """The rows of a query, held as a pyarrow Table.

    Iterating and indexing yield :class:`Row` values (tuples with ``.values``); ``len``
    is the row count.
    """

    __slots__ = ("_table",)

    def __init__(self, table: pa.Table) -> None:
        self._table = table

    def arrow(self) -> pa.Table:
        """Return the rows as a pyarrow Table."""
        return self._table

    def df(self) -> Any:
        """Return the rows as a pandas DataFrame (needs pandas)."""
        return self._table.to_pandas()

    def pl(self) -> Any:
        """Return the rows as a polars DataFrame (needs polars)."""
        import polars

        return polars.from_arrow(self._table)

    def to_pylist(self) -> list[dict[str, Any]]:
        """Return the rows as a list of dicts."""
        rows: list[dict[str, Any]] = self._table.to_pylist()
        return rows

    def fetchall(self) -> list[tuple[Any, ...]]:
        """Return all rows as tuples (:class:`Row` values), in column order."""
        rows: list[tuple[Any, ...]] = list(self.rows())
        return rows

    def rows(self) -> list[Row]:
        """Return all rows as :class:`Row` values (tuples with ``.values``)."""
        names = self.columns
        columns = [col.to_pylist() for col in self._table.columns]
        return [Row(r, names) for r in zip(*columns, strict=True)] if columns else []

    def fetchone(self) -> Row | None:
        """Return the first row as a :class:`Row`, or None when there are no rows."""
        if self._table.num_rows == 0:
            return None
        return Row((col[0].as_py() for col in self._table.columns), self.columns)

    def scalar(self) -> Any:
        """Return the first column of the first row (None when empty)."""
        row = self.fetchone()
        return row[0] if row else None

    def to_json(self) -> str:
        """Return the rows as a JSON array of objects (dates ISO, bytes base64, NaN null)."""
        return json.dumps(
            [{k: json_value(v) for k, v in row.items()} for row in self._table.to_pylist()]
        )

    def show(self, limit: int = 20) -> str:
        """Print (and return) the first ``limit`` rows as an aligned text table."""
        text = format_table(self._table, limit=limit)
        print(text)
        return text

    @property
    def columns(self) -> list[str]:
        """Column names."""
        return [str(name) for name in self._table.column_names]

    @property
    def schema(self) -> pa.Schema:
        """The result's Arrow schema."""
        return self._table.schema

    def __len__(self) -> int:
        return int(self._table.num_rows)

    def __iter__(self) -> Iterator[Row]:
        return iter(self.rows())

    @overload
    def __getitem__(self, index: int) -> Row: ...

    @overload
    def __getitem__(self, index: slice) -> list[Row]: ...

    def __getitem__(self, index: int | slice) -> Row | list[Row]:
        """Return row ``index`` (negative counts from the end), or a list for a slice.

        Raises:
            IndexError: no such row.
        """
        if isinstance(index, slice):
            return self.rows()[index]
        n = self._table.num_rows
        i = index + n if index < 0 else index
        if not 0 <= i < n:
            raise IndexError(f"row {index} out of range ({n} rows)")
        return Row((col[i].as_py() for col in self._table.columns), self.columns)

    def __repr__(self) -> str:
        return f"QueryResult({self._table.num_rows} rows x {self._table.num_columns} columns)"


def _cell(value: Any) -> str:
    if value is None:
        return "NULL"
    v = json_value(value)
    return v if isinstance(v, str) else json.dumps(v)


def format_table(table: pa.Table, *, limit: int | None = None) -> str:
    """Render rows as an aligned, boxed text table (for ``show`` and the CLI)."""
    shown = table if limit is None else table.slice(0, limit)
    headers = table.column_names
    rows = [[_cell(v) for v in row.values()] for row in shown.to_pylist()]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    sep = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    lines = [
        sep,
        "| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |",
        sep,
    ]
    lines += [
        "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in rows
    ]
    lines.append(sep)
    if limit is not None and table.num_rows > limit:
        lines.append(f"({table.num_rows} rows, {limit} shown)")
    else:
        lines.append(f"({table.num_rows} row{'s' if table.num_rows != 1 else ''})")
    return "\n".join(lines)


class WriteResult(int):
    """What a write did: the rows it wrote (or deleted), and the version it committed.

    An ``int`` subclass equal to the row count, so code written for the original project
    (``assert db.insert(rows) == 3``, ``total += db.delete_rows_where(...)``) keeps
    working; arithmetic gives plain ints and ``json.dumps`` writes the count.

    Attributes:
        rows: the row count (``int(result)``).
        version: the version the write committed, or None when it made no commit (an
            empty insert, a predicate matching nothing, rows only buffered). It comes
            from the commit itself, so it is right when other writers commit meanwhile.
    """

    version: int | None

    def __new__(cls, rows: int, version: int | None) -> WriteResult:
        self = super().__new__(cls, rows)
        object.__setattr__(self, "version", version)
        return self

    @property
    def rows(self) -> int:
        """The row count, as a plain int."""
        return int(self)

    @property
    def committed(self) -> bool:
        """Whether the write made a commit."""
        return self.version is not None

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"WriteResult is immutable (cannot set {name!r})")

    def __getnewargs__(self) -> tuple[int, int | None]:  # type: ignore[override]
        return (int(self), self.version)

    def __repr__(self) -> str:
        return f"WriteResult(rows={int(self)}, version={self.version})"

    def __str__(self) -> str:
        return int.__repr__(self)  # print() and f-strings show the count, as for an int


class ReplaceResult(tuple[int, int]):
    """What ``replace_rows`` did: ``(deleted, inserted)``, plus the version it committed.

    A 2-tuple (``deleted, inserted = db.replace_rows(...)`` and ``== (1, 2)`` work), with
    ``.deleted``, ``.inserted`` and ``.version`` (None when no commit was made).
    """

    version: int | None

    def __new__(cls, deleted: int, inserted: int, version: int | None) -> ReplaceResult:
        self = super().__new__(cls, (deleted, inserted))
        object.__setattr__(self, "version", version)
        return self

    @property
    def deleted(self) -> int:
        """Rows deleted."""
        return self[0]

    @property
    def inserted(self) -> int:
        """Rows inserted."""
        return self[1]

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"ReplaceResult is immutable (cannot set {name!r})")

    def __getnewargs__(self) -> tuple[int, int, int | None]:
        return (self[0], self[1], self.version)

    def __repr__(self) -> str:
        return f"ReplaceResult(deleted={self[0]}, inserted={self[1]}, version={self.version})"


@dataclass(frozen=True)
class RestoreResult:
    """What ``restore_version`` did.

    Attributes:
        restored: the version the table now equals.
        version: the version the restore committed (None: the table was at ``restored``
            already, nothing was committed).
        files_removed: data files the commit removed (added after ``restored``).
        files_restored: data files the commit added back (removed after ``restored``).
    """

    restored: int
    version: int | None
    files_removed: int = 0
    files_restored: int = 0

    @property
    def committed(self) -> bool:
        """Whether the restore made a commit."""
        return self.version is not None
