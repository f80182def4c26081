"""Reading CSV text into records and string columns: the record scanner (which locates
a malformed record by line), the header check, and Arrow's CSV reader for the body."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

import pyarrow as pa
import pyarrow.csv as pacsv

from posixlake.csvcodec._common import _BOM, CsvFormatError, CsvSource, HeaderMode
from posixlake.csvcodec._render import _header_line

__all__ = []


@dataclass(frozen=True)
class _Record:
    """One CSV record as the scanner sees it."""

    line: int  # line where the record starts
    fields: list[tuple[bytes, bool]]  # (raw value, was quoted)
    end: int  # offset just past the record's line terminator
    next_line: int  # line where the next record starts

    @property
    def blank(self) -> bool:
        return len(self.fields) == 1 and not self.fields[0][1] and not self.fields[0][0]


_EOL_RE: Final = re.compile(rb"[\r\n]")
_UNQUOTED_RE: Final = re.compile(rb"[^,\r\n]*")
_QUOTED_RE: Final = re.compile(rb'"([^"]*(?:""[^"]*)*)"')


def _line_breaks(raw: bytes) -> int:
    return raw.count(b"\n") + raw.count(b"\r") - raw.count(b"\r\n")


def _scan(data: bytes | memoryview, pos: int, line: int) -> Iterator[_Record]:
    """Yield the records of ``data`` from ``pos``, the way Arrow's CSV reader splits them.

    CR, LF and CRLF end lines. A quote opens a quoted field only at the start of a
    field; text after the closing quote, up to the next delimiter, is appended
    literally (as Arrow does). Only used to check headers and to explain errors.

    Raises:
        CsvFormatError: A quoted field is never closed.
    """
    size = len(data)
    while pos < size:
        start_line = line
        eol = _EOL_RE.search(data, pos)
        stop = size if eol is None else eol.start()
        segment = bytes(data[pos:stop])
        fields: list[tuple[bytes, bool]]
        if b'"' not in segment:
            fields = [(value, False) for value in segment.split(b",")]
            pos = stop
        else:
            fields = []
            while True:
                if data[pos : pos + 1] == b'"':
                    quoted = _QUOTED_RE.match(data, pos)
                    if quoted is None:
                        raise CsvFormatError(
                            f"line {start_line}: unterminated quote: a quoted field opened "
                            "on this line is never closed",
                            line=start_line,
                        )
                    raw = quoted.group(1)
                    line += _line_breaks(raw)
                    tail = _UNQUOTED_RE.match(data, quoted.end())
                    assert tail is not None  # the pattern matches the empty string
                    fields.append((raw.replace(b'""', b'"') + tail.group(), True))
                    pos = tail.end()
                else:
                    plain = _UNQUOTED_RE.match(data, pos)
                    assert plain is not None  # the pattern matches the empty string
                    fields.append((plain.group(), False))
                    pos = plain.end()
                if data[pos : pos + 1] != b",":
                    break
                pos += 1
        if data[pos : pos + 2] == b"\r\n":
            pos += 2
        elif pos < size:
            pos += 1
        line += 1
        yield _Record(start_line, fields, pos, line)


def _as_bytes(data: CsvSource) -> bytes | memoryview:
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, bytearray):
        return memoryview(data)
    return data


def _decode(raw: bytes, line: int, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise CsvFormatError(
            f"line {line}, {what}: invalid UTF-8 ({err.reason} at byte {err.start}): {raw[:60]!r}",
            line=line,
        ) from err


def _header_text(names: Sequence[str]) -> str:
    return _header_line(names).decode("utf-8").rstrip("\n")


@dataclass(frozen=True)
class _Body:
    """The data part of a CSV input: where it starts and on which line."""

    data: bytes | memoryview
    start: int
    line: int
    names: list[str] | None  # the header names, when there was a header


def _split_header(data: bytes | memoryview, header: HeaderMode) -> _Body:
    start = 3 if data[:3] == _BOM else 0
    if header == "none":
        return _Body(data, start, 1, None)
    first = next(_scan(data, start, 1), None)
    if first is None:
        return _Body(data, start, 1, [])
    names = [_decode(raw, 1, "header") for raw, _ in first.fields]
    return _Body(data, first.end, first.next_line, names)


def _empty_strings(names: list[str]) -> pa.Table:
    return pa.table({name: pa.array([], pa.string()) for name in names})


def _read_strings(body: _Body, count: int) -> pa.Table:
    """Read the body with Arrow, every column as string, NULL for empty unquoted fields.

    Raises:
        CsvFormatError: The body is malformed (wrong field count, bad quote, bad UTF-8).
    """
    names = [f"c{i}" for i in range(count)]
    if body.start >= len(body.data):
        return _empty_strings(names)
    if len(body.data) - body.start <= _SMALL_BODY:
        small = _small_strings(body, names)
        if small is not None:
            return small
    buffer = pa.py_buffer(body.data).slice(body.start)
    try:
        table = pacsv.read_csv(
            pa.BufferReader(buffer),  # type: ignore[arg-type, unused-ignore]  # a NativeFile is a file
            read_options=pacsv.ReadOptions(column_names=names),
            parse_options=pacsv.ParseOptions(newlines_in_values=True, ignore_empty_lines=count > 1),
            convert_options=pacsv.ConvertOptions(
                column_types=dict.fromkeys(names, pa.string()),
                null_values=[""],
                strings_can_be_null=True,
                quoted_strings_can_be_null=False,
            ),
        )
    except pa.ArrowInvalid as err:
        if "Empty CSV file" in str(err):  # only blank lines
            return _empty_strings(names)
        raise _locate_malformed(body, count, err) from err
    if _count_quotes(body.data, body.start) % 2:
        # Arrow reads a quote left open at the end of the input as closed there. An odd
        # number of quote characters is the cheap sign of it; the scanner confirms.
        for _ in _scan(body.data, body.start, body.line):
            pass
    return table


_SMALL_BODY: Final = 4096
"""Bodies up to this size (an appended line) may be split without Arrow's reader, whose
start costs 0.1-0.8 ms (its threads) where splitting a line costs microseconds."""


def _small_strings(body: _Body, names: list[str]) -> pa.Table | None:
    """`_read_strings` of a small body with no quote and no CR, split in Python; None
    when it is anything else (a quote, a CR, invalid UTF-8, a wrong field count: Arrow
    reads it, and explains a failure). The same table as Arrow gives: an empty field is
    NULL, and blank lines are skipped when there is more than one column."""
    raw = bytes(body.data[body.start :])
    if b'"' in raw or b"\r" in raw:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the last line's terminator
    count = len(names)
    columns: list[list[str | None]] = [[] for _ in names]
    for line in lines:
        if not line and count > 1:
            continue  # a blank line
        fields = line.split(",")
        if len(fields) != count:
            return None
        for column, field in zip(columns, fields, strict=True):
            column.append(field or None)
    if not columns[0]:
        return None  # only blank lines: Arrow's "empty file", handled there
    return pa.table({n: pa.array(c, pa.string()) for n, c in zip(names, columns, strict=True)})


def _count_quotes(data: bytes | memoryview, start: int) -> int:
    """Count the ``"`` bytes of ``data[start:]`` (C speed; bounded copies for views)."""
    if isinstance(data, bytes):
        return data.count(b'"', start)
    owner = data.obj
    if isinstance(owner, bytes | bytearray) and len(owner) == data.nbytes:
        return owner.count(b'"', start)
    step = 16 << 20
    return sum(
        data[offset : offset + step].tobytes().count(b'"')
        for offset in range(start, len(data), step)
    )


def _data_records(body: _Body, count: int) -> Iterator[_Record]:
    """Yield the records that Arrow turns into rows (blank lines skipped if count > 1)."""
    for record in _scan(body.data, body.start, body.line):
        if count > 1 and record.blank:
            continue
        yield record


def _locate_malformed(body: _Body, count: int, err: Exception) -> CsvFormatError:
    """Find the first malformed record to explain an Arrow parse error."""
    names = body.names
    for record in _data_records(body, count):
        if len(record.fields) != count:
            expected = f"{count} fields" + (f" ({_header_text(names)})" if names else "")
            return CsvFormatError(
                f"line {record.line}: expected {expected}, got {len(record.fields)}",
                line=record.line,
            )
        for raw, _ in record.fields:
            _decode(raw, record.line, "field")
    return CsvFormatError(f"malformed CSV: {err}")


def _row_line(body: _Body, count: int, row: int) -> int:
    """Return the line where data row ``row`` (0-based) starts."""
    for index, record in enumerate(_data_records(body, count)):
        if index == row:
            return record.line
    return body.line + row
