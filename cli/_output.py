"""How the CLI prints rows: box tables for people; CSV, JSON, JSON lines or Markdown for
programs and documents.

On a terminal a box table is cut the way DuckDB cuts it: at most ``--max-rows`` rows
(40 by default: the first and last 20, with a line saying how many are left out) and
values longer than ``--max-width`` characters end in ``…``. Piped (stdout not a
terminal) or with ``--max-rows 0`` every row is printed and no value is cut. In a box,
control characters are shown escaped (a newline as ``\\n``), so one row stays one line.

CSV and JSON lines are written batch by batch: memory stays that of one batch of text,
whatever the row count.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import IO, Any, Final, TypeVar

import click
import pyarrow as pa
import pyarrow.compute as pc

from cli._common import to_jsonable

__all__ = [
    "DEFAULT_MAX_ROWS",
    "DEFAULT_MAX_WIDTH",
    "FORMATS",
    "output_options",
    "write_rows",
]

FORMATS: Final = ("table", "csv", "json", "jsonl", "markdown")
DEFAULT_MAX_ROWS: Final = 40
DEFAULT_MAX_WIDTH: Final = 40
_BATCH_ROWS: Final = 8192
_ESCAPES: Final = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_CONTROL: Final = {i: f"\\x{i:02x}" for i in range(32) if chr(i) not in _ESCAPES}
_TABLE: Final = str.maketrans({**{ord(k): v for k, v in _ESCAPES.items()}, **_CONTROL})

F = TypeVar("F", bound=Callable[..., Any])


def output_options(func: F) -> F:
    """Add ``--format``, ``--max-rows`` and ``--max-width`` (for commands that print rows)."""
    func = click.option(
        "--max-width",
        type=click.IntRange(min=0),
        default=None,
        help=f"In a table on a terminal, cut longer values with … (default "
        f"{DEFAULT_MAX_WIDTH}; 0: never).",
    )(func)
    func = click.option(
        "--max-rows",
        type=click.IntRange(min=0),
        default=None,
        help=f"In a table on a terminal, show at most N rows: the first and last half "
        f"(default {DEFAULT_MAX_ROWS}; 0: all). Piped output and the other formats have "
        "every row.",
    )(func)
    return click.option(
        "--format",
        "-f",
        "fmt",
        type=click.Choice(FORMATS, case_sensitive=False),
        default="table",
        show_default=True,
        help="Output format: a box table, csv (with header), json (one array of objects), "
        "jsonl (one object a line) or markdown.",
    )(func)


def write_rows(
    table: pa.Table,
    fmt: str,
    *,
    max_rows: int | None = None,
    max_width: int | None = None,
    out: IO[bytes] | None = None,
    terminal: bool | None = None,
) -> None:
    """Print ``table`` on stdout (or ``out``) in ``fmt``.

    Args:
        table: the rows.
        fmt: one of :data:`FORMATS`.
        max_rows: rows of a box table (0: all; None: 40 on a terminal, else all).
        max_width: characters of a box cell (0: no limit; None: 40 on a terminal, else none).
        out: where to write (default: stdout's bytes).
        terminal: whether ``out`` is a terminal (default: ask stdout).
    """
    stream: IO[bytes] = out if out is not None else sys.stdout.buffer
    if terminal is None:
        terminal = sys.stdout.isatty()
    fmt = fmt.lower()
    if fmt == "csv":
        from posixlake.csvcodec import iter_render_csv

        for chunk in iter_render_csv(table):
            stream.write(chunk)
    elif fmt == "jsonl":
        for line in _json_objects(table):
            stream.write(line.encode("utf-8") + b"\n")
    elif fmt == "json":
        stream.write(b"[")
        for i, line in enumerate(_json_objects(table)):
            stream.write((b", " if i else b"") + line.encode("utf-8"))
        stream.write(b"]\n")
    elif fmt == "markdown":
        for line in _markdown(table):
            stream.write(line.encode("utf-8") + b"\n")
    else:
        rows = max_rows if max_rows is not None else (DEFAULT_MAX_ROWS if terminal else 0)
        width = max_width if max_width is not None else (DEFAULT_MAX_WIDTH if terminal else 0)
        for line in box_lines(table, max_rows=rows, max_width=width):
            stream.write(line.encode("utf-8") + b"\n")
    stream.flush()


# -- values as text ----------------------------------------------------------------------


def _json_value(value: Any) -> Any:
    """A JSON value: times ISO 8601 with ``Z`` for UTC and every digit they hold."""
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
            return {str(k): _json_value(v) for k, v in value}  # a map
        return [_json_value(v) for v in value]
    return to_jsonable(value)


def _float_texts(column: pa.ChunkedArray[Any] | pa.Array[Any]) -> pa.Array[Any]:
    """Floats as their shortest round-trip text, a whole number with ``.0`` (``1.0``)."""
    text = pc.cast(column, pa.string())
    whole = pc.match_substring_regex(text, r"^-?\d+$")
    return pc.if_else(whole, pc.binary_join_element_wise(text, ".0", ""), text)


def _json_texts(column: pa.ChunkedArray[Any] | pa.Array[Any]) -> pa.Array[Any]:
    """Each value of a column as JSON text (``null`` for NULL), vectorized where exact."""
    t = column.type
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        text = pc.cast(column, pa.string())
    elif pa.types.is_floating(t):  # shortest round-trip text; NaN and infinities: null
        text = _float_texts(column)
        text = pc.if_else(pc.is_finite(column), text, pa.scalar(None, pa.string()))
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        text = pa.array(
            [None if v is None else json.dumps(v, ensure_ascii=False) for v in column.to_pylist()],
            pa.string(),
        )
    else:  # decimals, times, binary, nested: as Python writes them
        text = pa.array(
            [
                None if v is None else json.dumps(_json_value(v), ensure_ascii=False)
                for v in column.to_pylist()
            ],
            pa.string(),
        )
    return pc.fill_null(text, "null")


def _json_objects(table: pa.Table) -> Iterator[str]:
    """Yield one JSON object per row (keys in column order)."""
    keys = [json.dumps(str(n), ensure_ascii=False) for n in table.column_names]
    if not keys:
        yield from ("{}" for _ in range(table.num_rows))
        return
    for batch in table.to_batches(max_chunksize=_BATCH_ROWS):
        parts: list[Any] = []
        for i, (key, col) in enumerate(zip(keys, batch.columns, strict=True)):
            parts += [("{" if i == 0 else ", ") + key + ": ", _json_texts(col)]
        parts.append("}")
        yield from pc.binary_join_element_wise(*parts, "").to_pylist()


def _cell(value: Any) -> str:
    """A value as shown in a table: NULL, ISO times, JSON for nested values."""
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return value
    v = _json_value(value)
    if isinstance(v, str):
        return v
    return json.dumps(v, ensure_ascii=False)


def _shown(text: str, width: int) -> str:
    """Escape control characters; cut to ``width`` characters (0: no cut) with …."""
    text = text.translate(_TABLE)
    if width and len(text) > width:
        return text[: max(width - 1, 0)] + "…"
    return text


_CONTROL_RE: Final = "[\x00-\x1f]"


def _cell_texts(column: pa.ChunkedArray[Any] | pa.Array[Any], width: int) -> pa.Array[Any]:
    """Each value of a column as a table shows it: escaped, cut to ``width`` (0: no cut).

    Numbers, booleans, dates and text are rendered by Arrow (vectorized); times, binary
    and nested values as :func:`_cell` writes them.
    """
    t = column.type
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        text = column.cast(pa.string())
    elif pa.types.is_floating(t):
        text = pc.replace_substring(_float_texts(column), "nan", "NaN")
    elif (
        pa.types.is_integer(t)
        or pa.types.is_boolean(t)
        or pa.types.is_decimal(t)
        or pa.types.is_date(t)
    ):
        text = pc.cast(column, pa.string())
    else:
        text = pa.array([None if v is None else _cell(v) for v in column.to_pylist()], pa.string())
    text = pc.fill_null(text, "NULL")
    if pc.any(pc.match_substring_regex(text, _CONTROL_RE)).as_py():
        text = pa.array([v.translate(_TABLE) for v in text.to_pylist()], pa.string())
    if width:
        long = pc.greater(pc.utf8_length(text), width)
        if pc.any(long).as_py():
            cut = pc.binary_join_element_wise(
                pc.utf8_slice_codeunits(text, 0, max(width - 1, 0)), "…", ""
            )
            text = pc.if_else(long, cut, text)
    return text


def _widest(text: pa.Array[Any]) -> int:
    return int(pc.max(pc.utf8_length(text)).as_py() or 0) if len(text) else 0


# -- box tables --------------------------------------------------------------------------


def box_lines(table: pa.Table, *, max_rows: int = 0, max_width: int = 0) -> Iterator[str]:
    """Yield the lines of a box table of ``table``.

    Args:
        max_rows: show at most this many rows, the first and last half, with a line
            of … between them (0: all).
        max_width: cut longer values with … (0: never).
    """
    n = table.num_rows
    head = tail = 0
    if max_rows and n > max_rows:
        head = (max_rows + 1) // 2
        tail = max_rows - head
        parts = [table.slice(0, head), table.slice(n - tail, tail)]
    else:
        parts = [table]
    headers = [_shown(str(h), max_width) for h in table.column_names]
    texts = [[_cell_texts(col, max_width) for col in part.columns] for part in parts]
    widths = [max([len(h)] + [_widest(cols[i]) for cols in texts]) for i, h in enumerate(headers)]
    sep = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    yield sep
    yield line(headers)
    yield sep
    for i, (part, cols) in enumerate(zip(parts, texts, strict=True)):
        if i:
            yield line(["…" for _ in widths])
        if not cols:
            continue
        padded = [pc.utf8_rpad(c, width=w, padding=" ") for c, w in zip(cols, widths, strict=True)]
        joined: list[Any] = ["| "]
        for j, c in enumerate(padded):
            joined += [c, " | " if j < len(padded) - 1 else " |"]
        rendered = pc.binary_join_element_wise(*joined, "")
        for start in range(0, part.num_rows, _BATCH_ROWS):
            yield from rendered.slice(start, _BATCH_ROWS).to_pylist()
    yield sep
    if len(parts) > 1:
        yield (
            f"({n:,} rows, {max_rows:,} shown: the first {head:,} and the last {tail:,}; "
            "--max-rows 0 shows all)"
        )
    else:
        yield f"({n:,} row{'s' if n != 1 else ''})"


# -- Markdown --------------------------------------------------------------------------------


def _md(text: str) -> str:
    return text.translate(_TABLE).replace("|", "\\|")


def _markdown(table: pa.Table) -> Iterator[str]:
    names = [_md(str(n)) for n in table.column_names]
    yield "| " + " | ".join(names) + " |"
    yield "|" + "|".join("---" for _ in names) + "|"
    if not names:
        return
    for batch in table.to_batches(max_chunksize=_BATCH_ROWS):
        cols = [pc.replace_substring(_cell_texts(c, 0), "|", "\\|") for c in batch.columns]
        joined: list[Any] = ["| "]
        for j, c in enumerate(cols):
            joined += [c, " | " if j < len(cols) - 1 else " |"]
        yield from pc.binary_join_element_wise(*joined, "").to_pylist()
