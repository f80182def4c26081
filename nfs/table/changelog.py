"""ChangeLog: the bytes of a growing ``changes.csv``, an append-only file fed by a change feed.

A :class:`ChangeLog` renders the change batches of a :class:`posixlake.feed.ChangeFeed`
(``db.subscribe``), one commit after the other, as CSV in the contract of
:mod:`posixlake.csvcodec`: one header line
``_commit_version,_commit_timestamp,_change_type,<columns>``, then one line per changed
row (:meth:`posixlake.feed.ChangeBatch.to_table`). It only ever appends: bytes once
written never change, so a client that has read a prefix keeps a true prefix.

The bytes live in an anonymous file in the server's state directory (deleted when closed,
never read after a restart): memory stays bounded however long the server runs.

It knows nothing of NFS: :mod:`nfs.table.changes` serves it (attributes, READ, when to
catch up) and decides what to do when it cannot grow (:class:`LogEnded`).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from pathlib import Path
from typing import Final

import pyarrow as pa

from posixlake.csvcodec import iter_render_csv, render_csv
from posixlake.feed import ChangeBatch, ChangeFeed

__all__ = ["LEAD_COLUMNS", "ChangeLog", "LogEnded", "header_of"]

LEAD_COLUMNS: Final = ("_commit_version", "_commit_timestamp", "_change_type")
"""The columns before the table's own in every change CSV."""


class LogEnded(Exception):
    """The log cannot take the next commit: its columns differ from the header's.

    Attributes:
        version: the commit that did not fit.
    """

    def __init__(self, message: str, version: int) -> None:
        super().__init__(message)
        self.version = version


def header_of(columns: list[str]) -> bytes:
    """Return the CSV header line of a change CSV whose table has ``columns``."""
    names = [*LEAD_COLUMNS, *columns]
    return render_csv(pa.table({n: pa.array([], pa.string()) for n in names}))


def render_batch(batch: ChangeBatch, *, header: bool) -> bytes:
    """Return one commit's changes as CSV lines (with the header line if asked)."""
    return b"".join(iter_render_csv(batch.to_table(), header=header))


class ChangeLog:
    """An append-only CSV of the commits a feed delivers, from ``feed.next_version`` on.

    Not thread-safe: the owner serialises calls (TableFs holds its table lock).

    Args:
        feed: the feed (owned: :meth:`close` closes it); its ``next_version`` is the
            first commit shown.
        columns: the table's columns when the log starts (the header's).
        directory: where the anonymous spill file lives.
    """

    def __init__(self, feed: ChangeFeed, columns: list[str], directory: Path) -> None:
        self._feed = feed
        self.start = feed.next_version
        self.columns = list(columns)
        directory.mkdir(parents=True, exist_ok=True)
        # owned for the log's life (closed by close())
        self._file = tempfile.TemporaryFile(dir=directory, prefix="changes-")  # noqa: SIM115
        self._guard = threading.Lock()  # only against close() racing a read
        self.size = 0
        try:
            self.append(header_of(self.columns))
        except BaseException:
            self._file.close()
            raise
        self.last_version = self.start - 1
        """The newest commit whose changes are in the file (``start - 1``: none yet)."""

    @property
    def next_version(self) -> int:
        return self._feed.next_version

    def catch_up(self, until: int) -> list[int]:
        """Append the changes of every commit up to ``until`` that has landed.

        Returns:
            The versions appended (possibly none).

        Raises:
            LogEnded: a commit's columns differ from the header's (nothing of it appended).
            ChangesExpired: a commit's changes can no longer be read.
            OSError: the file could not be written (that commit's changes are not in it,
                and the feed has passed it: the log cannot go on).
            PosixLakeError: the table cannot be read (the table replaced under the feed:
                InvalidOperation).
        """
        done: list[int] = []
        while self._feed.next_version <= until:
            version = self._feed.next_version
            batch = self._feed.step()
            if batch is None:
                break
            table_columns = batch.to_table().column_names[len(LEAD_COLUMNS) :]
            if table_columns != self.columns:
                raise LogEnded(
                    f"version {version} has the columns {table_columns}, changes.csv "
                    f"{self.columns}",
                    version,
                )
            self.append(render_batch(batch, header=False))
            self.last_version = version
            done.append(version)
        return done

    def append(self, data: bytes) -> None:
        """Write ``data`` at the end (all of it, or the size stays and OSError is raised)."""
        fd = self._file.fileno()
        view = memoryview(data)
        done = 0
        try:
            while done < len(view):
                done += os.pwrite(fd, view[done:], self.size + done)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, self.size)
            raise
        self.size += len(data)

    def read(self, offset: int, count: int) -> tuple[bytes, bool]:
        """Return up to ``count`` bytes at ``offset`` and whether they reach the end."""
        size = self.size
        if offset >= size:
            return b"", True
        want = min(count, size - offset)
        with self._guard:
            data = os.pread(self._file.fileno(), want, offset)
        return data, offset + len(data) >= size

    def close(self) -> None:
        """Close the feed and delete the file."""
        self._feed.close()
        with self._guard:
            self._file.close()
