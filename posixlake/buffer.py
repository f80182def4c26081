"""WriteBuffer: rows collected by ``insert_buffered`` until they are committed together.

Decisions the tests pin:

- Rows are validated when they are buffered (a bad row raises there and is not buffered),
  so a flush cannot fail on bad input. A plain dict row whose values have exactly the
  column types is kept as a dict and converted to Arrow with the other such rows at flush
  time (one conversion for the batch instead of one per row).
- With a primary key, the keys waiting in the buffer count as taken: buffering the same key
  twice raises ``DuplicateKeyError`` at the second call, not at the flush.
- A flush whose commit fails puts the rows back (nothing is lost) and raises.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeAlias

import pyarrow as pa

from posixlake.errors import InvalidOperation

__all__ = ["DEFAULT_BUFFER_ROWS", "WriteBuffer"]

DEFAULT_BUFFER_ROWS = 1000

_Chunk: TypeAlias = "pa.Table | list[dict[str, Any]]"


class WriteBuffer:
    """Validated batches and rows waiting for one commit.

    ``clock`` is injected (as aioquic takes ``now``) so tests can age a buffer.

    Args:
        max_rows: flush automatically once this many rows are buffered.
        clock: monotonic seconds.

    Raises:
        InvalidOperation: ``max_rows`` is not a positive integer.
    """

    def __init__(
        self, max_rows: int = DEFAULT_BUFFER_ROWS, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
            raise InvalidOperation(
                f"buffer_rows must be an integer of at least 1, not {max_rows!r}"
            )
        self.max_rows = max_rows
        self._clock = clock
        self._chunks: list[_Chunk] = []
        self._rows = 0
        self._since: float | None = None
        self._keys: set[Any] = set()
        self._lock = threading.Lock()

    def _start(self) -> None:
        if self._since is None:
            self._since = self._clock()

    def add(self, table: pa.Table, *, keys: Iterable[Any] = ()) -> bool:
        """Buffer ``table`` (with its primary-key values); return whether it is time to flush."""
        with self._lock:
            if table.num_rows:
                self._start()
                self._chunks.append(table)
                self._rows += table.num_rows
                self._keys.update(keys)
            return self._rows >= self.max_rows

    def add_row(self, row: dict[str, Any], *, key: Any = None) -> bool:
        """Buffer one validated dict row; return whether it is time to flush."""
        with self._lock:
            self._start()
            last = self._chunks[-1] if self._chunks else None
            if isinstance(last, list):
                last.append(row)
            else:
                self._chunks.append([row])
            self._rows += 1
            if key is not None:
                self._keys.add(key)
            return self._rows >= self.max_rows

    def take(
        self, convert: Callable[[list[dict[str, Any]]], pa.Table]
    ) -> tuple[pa.Table, set[Any]] | None:
        """Remove and return everything buffered as one table, with its keys (None: empty).

        Args:
            convert: turns buffered dict rows into a table of the table's schema.
        """
        with self._lock:
            if not self._chunks:
                return None
            chunks, self._chunks, self._rows, self._since = self._chunks, [], 0, None
            keys, self._keys = self._keys, set()
        try:
            tables = [convert(c) if isinstance(c, list) else c for c in chunks]
        except BaseException:
            with self._lock:
                self._chunks[:0] = chunks
                self._rows += sum(len(c) if isinstance(c, list) else c.num_rows for c in chunks)
                self._keys.update(keys)
                self._start()
            raise
        return (pa.concat_tables(tables) if len(tables) > 1 else tables[0]), keys

    def put_back(self, table: pa.Table, keys: Iterable[Any] = ()) -> None:
        """Return a taken table to the front of the buffer (its commit failed)."""
        with self._lock:
            self._chunks.insert(0, table)
            self._rows += table.num_rows
            self._keys.update(keys)
            self._start()

    @property
    def keys(self) -> set[Any]:
        """Primary-key values of the buffered rows (do not modify)."""
        return self._keys

    @property
    def rows(self) -> int:
        """How many rows are buffered."""
        return self._rows

    def age(self) -> float:
        """Seconds since the oldest buffered row arrived (0.0 when empty)."""
        since = self._since
        return 0.0 if since is None else self._clock() - since
