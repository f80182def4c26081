"""``posixlake tail``: print a table's changes, and follow them as commits land (``-f``)."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import IO, TYPE_CHECKING, Final

import click

from cli._common import open_table, storage_options, table_argument, user_option

if TYPE_CHECKING:
    import pyarrow as pa

    from posixlake.feed import ChangeBatch

__all__ = ["COMMANDS", "write_batch"]

TAIL_FORMATS: Final = ("csv", "jsonl")


class _Printer:
    """Writes batches in one format; CSV repeats its header when the columns change."""

    def __init__(self, fmt: str, out: IO[bytes]) -> None:
        self.fmt = fmt
        self.out = out
        self._columns: list[str] | None = None

    def write(self, batch: ChangeBatch) -> None:
        table = batch.to_table()
        if self.fmt == "csv":
            from posixlake.csvcodec import iter_render_csv

            header = table.column_names != self._columns
            self._columns = table.column_names
            if table.num_rows == 0 and not header:
                return
            for chunk in iter_render_csv(table, header=header):
                self.out.write(chunk)
            self.out.flush()
        else:
            write_batch(table, self.out)


def write_batch(table: pa.Table, out: IO[bytes]) -> None:
    """Write change rows as JSON lines (one object a row) and flush."""
    from cli._output import write_rows

    write_rows(table, "jsonl", out=out, terminal=False)


@click.command()
@table_argument
@click.option(
    "-f",
    "--follow",
    is_flag=True,
    help="Keep running and print each commit's changes as it lands (Ctrl-C ends).",
)
@click.option(
    "--from-version",
    type=click.IntRange(0),
    default=None,
    help="Start with this version's changes (default: the latest commit's).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(TAIL_FORMATS, case_sensitive=False),
    default="csv",
    show_default=True,
    help="csv: a header `_commit_version,_commit_timestamp,_change_type,<columns>` "
    "(repeated when the columns change), then a line per row; jsonl: an object per row.",
)
@storage_options
@user_option
def tail(table: str, follow: bool, from_version: int | None, fmt: str) -> None:
    """Print the rows the table's commits changed; -f follows new commits.

    Without --from-version, the latest commit's rows; with -f, then every commit's as it
    lands, until Ctrl-C (exit 0) or the reader of a pipe goes away (exit 0, quietly).

    \b
    Each row carries _commit_version, _commit_timestamp (UTC), and _change_type: insert,
    update_preimage, update_postimage or delete. Commits from any writer count (this
    API, NFS, Spark, delta-rs, other processes). The rows come from the table's change
    data feed when it records one, else from the files a commit removed and added.
    To resume after version N, use --from-version N+1.

    \b
    Examples:
      posixlake tail /data/sales
      posixlake tail -f /data/sales --format jsonl
      posixlake tail /data/sales --from-version 10
    """
    out = sys.stdout.buffer
    printer = _Printer(fmt.lower(), out)
    try:
        with open_table(table) as db:
            start = from_version if from_version is not None else db.version
            feed = db.subscribe(from_version=start)
        with feed:
            for batch in feed.available():
                printer.write(batch)
            if follow:
                for batch in feed:
                    printer.write(batch)
    except KeyboardInterrupt:
        return
    except BrokenPipeError:
        # the reader went away (`| head`): stop quietly; stdout can no longer be flushed
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, out.fileno())
        return


COMMANDS: Final[list[click.Command]] = [tail]
