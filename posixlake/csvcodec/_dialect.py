"""CSV files in other dialects: a delimiter, quote, NULL marker, encoding or no header.

posixlake's own CSV (the module docstring of :mod:`posixlake.csvcodec`) is UTF-8, comma
separated, ``"``-quoted, with a header, NULL an empty unquoted field. A file written
otherwise (``;``-separated exports, Latin-1, ``NA`` for NULL, no header line) is first
rewritten into that form by :func:`to_canonical_csv`, field by field and without reading
any value as a type: the table's types (or the inference of ``create_from_csv``) read the
result exactly as they read posixlake's CSV.
"""

from __future__ import annotations

import codecs
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv

from posixlake.csvcodec._common import CsvFormatError
from posixlake.csvcodec._render import render_csv

__all__ = ["CsvOptions", "to_canonical_csv", "write_canonical_files"]


@dataclass(frozen=True)
class CsvOptions:
    """How a CSV input is written (the defaults are posixlake's own CSV).

    Attributes:
        delimiter: the field separator, one character (``";"``, ``"\\t"``, ``"|"``).
        quote: the quote character, one character, or ``""`` for none.
        null: a field that means NULL besides the empty unquoted field (``"NA"``,
            ``"\\\\N"``, ``"NULL"``); a quoted one is text.
        encoding: the text encoding of the input (``"latin-1"``, ``"utf-16"``...).
        header: whether the first line names the columns; without one, columns are the
            table's in order (insert), or ``column0``, ``column1``... (create).
    """

    delimiter: str = ","
    quote: str = '"'
    null: str = ""
    encoding: str = "utf-8"
    header: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.delimiter, str) or len(self.delimiter) != 1:
            raise CsvFormatError(f"the CSV delimiter must be one character, not {self.delimiter!r}")
        if not isinstance(self.quote, str) or len(self.quote) > 1:
            raise CsvFormatError(
                f"the CSV quote must be one character (or empty for none), not {self.quote!r}"
            )
        if self.quote and self.quote == self.delimiter:
            raise CsvFormatError("the CSV quote and delimiter must differ")
        if self.delimiter in "\r\n" or (self.quote and self.quote in "\r\n"):
            raise CsvFormatError("the CSV delimiter and quote cannot be line breaks")
        if not isinstance(self.null, str) or "\n" in self.null or "\r" in self.null:
            raise CsvFormatError(f"the CSV NULL marker must be text on one line: {self.null!r}")
        try:
            codecs.lookup(self.encoding)
        except (LookupError, TypeError) as err:
            raise CsvFormatError(f"unknown text encoding {self.encoding!r}") from err

    @classmethod
    def coerce(cls, value: CsvOptions | Mapping[str, Any] | None) -> CsvOptions:
        """Accept CsvOptions, a mapping of its fields, or None (the defaults).

        Raises:
            CsvFormatError: an unknown option or a bad value.
        """
        if value is None:
            return cls()
        if isinstance(value, CsvOptions):
            return value
        if isinstance(value, Mapping):
            known = {f.name for f in fields(cls)}
            unknown = sorted(set(value) - known)
            if unknown:
                raise CsvFormatError(
                    f"unknown CSV option(s) {unknown}: use {', '.join(sorted(known))}"
                )
            return cls(**dict(value))
        raise CsvFormatError(
            f"csv_options must be CsvOptions or a dict, not {type(value).__name__}"
        )

    @property
    def is_default(self) -> bool:
        """Whether these are posixlake's own CSV rules (no rewrite needed)."""
        return (
            self.delimiter == ","
            and self.quote == '"'
            and not self.null
            and self.header
            and codecs.lookup(self.encoding).name == "utf-8"
        )


def to_canonical_csv(
    data: bytes | str, options: CsvOptions, *, columns: Sequence[str] | None = None
) -> bytes:
    """Rewrite CSV written with ``options`` as posixlake's CSV (UTF-8, header, ``,``).

    Every field stays text: only quoting, separators, the encoding and NULLs change.

    Args:
        data: the CSV (bytes in ``options.encoding``, or text).
        options: how ``data`` is written.
        columns: the column names when ``options.header`` is false (else ``column0``...).

    Raises:
        CsvFormatError: the input does not decode, a row has another number of fields,
            or without a header ``columns`` does not match the fields.
    """
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    encoding = "utf-8" if isinstance(data, str) else options.encoding
    if not raw.strip():
        if options.header or not columns:
            return b""
        return render_csv(pa.table({c: pa.array([], pa.string()) for c in columns}))
    parse = pacsv.ParseOptions(
        delimiter=options.delimiter,
        quote_char=options.quote or False,
        newlines_in_values=True,
    )
    try:
        probe = pacsv.open_csv(
            io.BytesIO(raw),
            read_options=pacsv.ReadOptions(autogenerate_column_names=True, encoding=encoding),
            parse_options=parse,
        )
        width = len(probe.schema)
        probe.close()
        generated = [f"f{i}" for i in range(width)]
        table = pacsv.read_csv(
            io.BytesIO(raw),
            read_options=pacsv.ReadOptions(column_names=generated, encoding=encoding),
            parse_options=parse,
            convert_options=pacsv.ConvertOptions(
                column_types=dict.fromkeys(generated, pa.string()),
                null_values=["", options.null] if options.null else [""],
                strings_can_be_null=True,
                quoted_strings_can_be_null=False,
            ),
        )
    except (pa.ArrowInvalid, UnicodeDecodeError) as err:
        raise CsvFormatError(f"cannot read the CSV ({_described(options)}): {err}") from err
    if options.header:
        names = [str(v) if v is not None else "" for v in table.slice(0, 1).to_pylist()[0].values()]
        table = table.slice(1)
    elif columns is not None:
        if len(columns) != width:
            raise CsvFormatError(
                f"the CSV has {width} field(s) a row, the table {len(columns)} column(s) "
                f"({', '.join(columns)})"
            )
        names = list(columns)
    else:
        names = [f"column{i}" for i in range(width)]
    return render_csv(table.rename_columns(names))


def _described(options: CsvOptions) -> str:
    parts = [f"delimiter {options.delimiter!r}", f"quote {options.quote!r}"]
    if options.encoding.lower().replace("_", "-") not in ("utf-8", "utf8"):
        parts.append(f"encoding {options.encoding}")
    return ", ".join(parts)


def write_canonical_files(paths: Sequence[str], options: CsvOptions, directory: str) -> list[str]:
    """Rewrite CSV files written with ``options`` as posixlake's CSV into ``directory``.

    Returns:
        The new files, in the order of ``paths``.

    Raises:
        CsvFormatError: as :func:`to_canonical_csv`. OSError: a file cannot be read.
    """
    import os

    out = []
    for i, path in enumerate(paths):
        with open(path, "rb") as fh:
            raw = fh.read()
        try:
            canonical = to_canonical_csv(raw, options)
        except CsvFormatError as err:
            raise CsvFormatError(f"{path}: {err}") from err
        target = os.path.join(directory, f"{i:06d}.csv")
        with open(target, "wb") as fh:
            fh.write(canonical)
        out.append(target)
    return out
