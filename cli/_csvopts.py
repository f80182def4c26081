"""The CSV dialect flags of ``insert`` and ``create --from-csv``: ``--delimiter``,
``--quote``, ``--null``, ``--encoding``, ``--no-header`` (posixlake.csvcodec.CsvOptions)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

__all__ = ["csv_dialect_options", "csv_options_of"]

F = TypeVar("F", bound=Callable[..., Any])

_ESCAPED = {"\\t": "\t", "tab": "\t", "TAB": "\t"}


def _char(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    value = _ESCAPED.get(value, value)
    if param.name == "quote" and value == "":
        return value
    if len(value) != 1:
        raise click.BadParameter(
            f"{value!r} is not one character (a tab is '\\t')", ctx=ctx, param=param
        )
    return value


def csv_dialect_options(func: F) -> F:
    """Add the CSV dialect flags; the command receives ``csv_dialect`` (a dict)."""
    options = [
        click.option(
            "--delimiter",
            "--sep",
            "delimiter",
            metavar="CHAR",
            callback=_char,
            help="CSV field separator (default ','; '\\t' for tabs).",
        ),
        click.option(
            "--quote",
            "quote",
            metavar="CHAR",
            callback=_char,
            help="CSV quote character (default '\"'; '' for none).",
        ),
        click.option(
            "--null",
            "null",
            metavar="TEXT",
            help="CSV fields equal to TEXT are NULL (an empty field always is), e.g. NA or '\\N'.",
        ),
        click.option(
            "--encoding",
            "encoding",
            metavar="NAME",
            help="Text encoding of the CSV (default utf-8; e.g. latin-1, utf-16).",
        ),
        click.option(
            "--no-header",
            "no_header",
            is_flag=True,
            help="The CSV has no header line: fields are the table's columns in order "
            "(create: column0, column1...).",
        ),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def csv_options_of(
    delimiter: str | None,
    quote: str | None,
    null: str | None,
    encoding: str | None,
    no_header: bool,
) -> dict[str, Any] | None:
    """Return the ``csv_options`` for the flags given (None when none was).

    Raises:
        click.BadParameter: an unknown encoding.
    """
    out: dict[str, Any] = {}
    if delimiter is not None:
        out["delimiter"] = delimiter
    if quote is not None:
        out["quote"] = quote
    if null is not None:
        out["null"] = null
    if encoding is not None:
        import codecs

        try:
            codecs.lookup(encoding)
        except LookupError as err:
            raise click.BadParameter(
                f"unknown encoding {encoding!r}", param_hint="--encoding"
            ) from err
        out["encoding"] = encoding
    if no_header:
        out["header"] = False
    return out or None
