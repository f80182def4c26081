"""WriteBuffer: rows collected by ``insert_buffered`` until they are committed together."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pyarrow as pa

__all__ = ["DEFAULT_BUFFER_ROWS", "WriteBuffer"]

DEFAULT_BUFFER_ROWS = 1000


class WriteBuffer:
    """Converted batches waiting for one commit.

    Batches are validated before they enter the buffer, so a flush cannot fail on bad
    input. ``clock`` is injected (as aioquic takes ``now``) so tests can age a buffer.

    Args:
        max_rows: flush automatically once this many rows are buffered.
        clock: monotonic seconds.
    """

    def __init__(
        self, max_rows: int = DEFAULT_BUFFER_ROWS, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if max_rows < 1:
            raise ValueError("max_rows must be at least 1")
        self.max_rows = max_rows
        self._clock = clock
        self._batches: list[pa.Table] = []
        self._rows = 0
        self._since: float | None = None
        self._lock = threading.Lock()

    def add(self, table: pa.Table) -> bool:
        """Buffer ``table``; return whether the buffer is now full (time to flush)."""
        with self._lock:
            if table.num_rows:
                if self._since is None:
                    self._since = self._clock()
                self._batches.append(table)
                self._rows += table.num_rows
            return self._rows >= self.max_rows

    def take(self) -> pa.Table | None:
        """Remove and return everything buffered as one table (None when empty)."""
        with self._lock:
            if not self._batches:
                return None
            batches, self._batches, self._rows, self._since = self._batches, [], 0, None
        return pa.concat_tables(batches) if len(batches) > 1 else batches[0]

    def put_back(self, table: pa.Table) -> None:
        """Return a taken table to the front of the buffer (its commit failed)."""
        with self._lock:
            self._batches.insert(0, table)
            self._rows += table.num_rows
            if self._since is None:
                self._since = self._clock()

    @property
    def rows(self) -> int:
        """How many rows are buffered."""
        return self._rows

    def age(self) -> float:
        """Seconds since the oldest buffered row arrived (0.0 when empty)."""
        since = self._since
        return 0.0 if since is None else self._clock() - since
