"""WriteBuffer: rows collected by ``insert_buffered`` until they are committed together.

Decisions the tests pin:

- Rows are validated when they are buffered (a bad row raises there and is not buffered),
  so a flush cannot fail on bad input. A plain dict row whose values have exactly the
  column types is kept as a dict and converted to Arrow with the other such rows at flush
  time (one conversion for the batch instead of one per row).
- With a primary key, the keys waiting in the buffer count as taken: buffering the same key
  twice raises ``DuplicateKeyError`` at the second call, not at the flush.
- A flush whose commit fails puts the rows back (nothing is lost) and raises. A flush
  that finds buffered keys taken by another writer raises :class:`BufferedKeysTaken`
  with those rows (``err.rejected``) and keeps the others buffered: one taken key does
  not wedge the buffer.
- Rows still buffered when the interpreter exits (normal end, ``sys.exit``, an uncaught
  exception, SIGTERM while rows are buffered and no other handler is installed) or when
  the handle is garbage
  collected are flushed then; rows that cannot be flushed are reported loudly (an ERROR
  log record and a ResourceWarning), never dropped silently. Only ``durable=True``
  buffering survives a crash (kill -9, power loss): see :mod:`posixlake._wal`.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import signal
import threading
import warnings
import weakref
from collections.abc import Callable, Iterable
from types import FrameType
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

import pyarrow as pa

from posixlake._convert import quick_row
from posixlake.errors import DuplicateKeyError, InvalidOperation

if TYPE_CHECKING:
    from posixlake._wal import WriteAheadFile

__all__ = [
    "DEFAULT_BUFFER_ROWS",
    "BufferedKeysTaken",
    "Buffering",
    "WriteBuffer",
    "arm_sigterm",
    "disarm_sigterm_if_idle",
    "parse_row",
    "report_unflushed",
    "track",
]

logger = logging.getLogger(__name__)

DEFAULT_BUFFER_ROWS = 1000

_Chunk: TypeAlias = "pa.Table | list[dict[str, Any]]"


class WriteBuffer:
    """Validated batches and rows waiting for one commit.

    Args:
        max_rows: flush automatically once this many rows are buffered.

    Raises:
        InvalidOperation: ``max_rows`` is not a positive integer.
    """

    def __init__(self, max_rows: int = DEFAULT_BUFFER_ROWS) -> None:
        if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
            raise InvalidOperation(
                f"buffer_rows must be an integer of at least 1, not {max_rows!r}"
            )
        self.max_rows = max_rows
        self._chunks: list[_Chunk] = []
        self._rows = 0
        self._keys: set[Any] = set()
        self._lock = threading.Lock()
        #: the write-ahead file of durable buffering (None: the buffer is memory only)
        self.wal: WriteAheadFile | None = None

    def add(self, table: pa.Table, *, keys: Iterable[Any] = ()) -> bool:
        """Buffer ``table`` (with its primary-key values); return whether it is time to flush."""
        with self._lock:
            if table.num_rows:
                self._chunks.append(table)
                self._rows += table.num_rows
                self._keys.update(keys)
            return self._rows >= self.max_rows

    def add_row(self, row: dict[str, Any], *, key: Any = None) -> bool:
        """Buffer one validated dict row; return whether it is time to flush."""
        with self._lock:
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
            chunks, self._chunks, self._rows = self._chunks, [], 0
            keys, self._keys = self._keys, set()
        try:
            tables = [convert(c) if isinstance(c, list) else c for c in chunks]
        except BaseException:
            with self._lock:
                self._chunks[:0] = chunks
                self._rows += sum(len(c) if isinstance(c, list) else c.num_rows for c in chunks)
                self._keys.update(keys)
            raise
        return (pa.concat_tables(tables) if len(tables) > 1 else tables[0]), keys

    def peek(self, convert: Callable[[list[dict[str, Any]]], pa.Table]) -> pa.Table | None:
        """Return everything buffered as one table, leaving it buffered (None: empty)."""
        with self._lock:
            chunks = list(self._chunks)
        if not chunks:
            return None
        tables = [convert(c) if isinstance(c, list) else c for c in chunks]
        return pa.concat_tables(tables) if len(tables) > 1 else tables[0]

    def put_back(self, table: pa.Table, keys: Iterable[Any] = ()) -> None:
        """Return a taken table to the front of the buffer (its commit failed)."""
        with self._lock:
            self._chunks.insert(0, table)
            self._rows += table.num_rows
            self._keys.update(keys)

    @property
    def keys(self) -> set[Any]:
        """Primary-key values of the buffered rows (do not modify)."""
        return self._keys

    @property
    def rows(self) -> int:
        """How many rows are buffered."""
        return self._rows


class BufferedKeysTaken(DuplicateKeyError):
    """A flush found buffered keys that another writer committed first.

    The other buffered rows stay buffered (the next flush commits them).

    Attributes:
        rejected: the buffered rows whose keys were taken; they are no longer buffered.
    """

    def __init__(self, message: str, rejected: pa.Table) -> None:
        super().__init__(message)
        self.rejected = rejected


def parse_row(data: object, schema: pa.Schema) -> dict[str, Any] | None:
    """Return ``data`` as one dict row that certainly converts to ``schema``, else None.

    Also takes the text of ONE JSON object, or of an array holding one object
    (``insert_buffered_json(json.dumps([row]))``): it is parsed here and the row joins the other dict rows, converted to Arrow in one pass at
    flush. Anything else returns None (the caller converts it with ``to_arrow``).
    """
    if type(data) is str and data[:1] in "[{" and data[-1:] in "]}":
        try:
            value = json.loads(data)
        except ValueError:
            return None  # to_arrow raises the precise SerializationError
        if type(value) is list and len(value) == 1:
            value = value[0]  # a one-row JSON array, as the original's callers send
        return quick_row(value, schema)
    return quick_row(data, schema)


# -- rows buffered at exit ---------------------------------------------------------------


class Buffering(Protocol):
    """What the exit hooks need of a table handle (``DatabaseOps``' buffered part)."""

    @property
    def buffered_rows(self) -> int: ...

    @property
    def _closed(self) -> bool: ...

    def _flush_at_exit(self, why: str) -> None: ...


_live: weakref.WeakSet[Buffering] = weakref.WeakSet()
_hooks_lock = threading.Lock()
_hooks_installed = False


def track(db: Buffering) -> None:
    """Flush ``db``'s buffer at interpreter exit (see :func:`arm_sigterm` for SIGTERM)."""
    global _hooks_installed
    _live.add(db)
    if _hooks_installed:
        return
    with _hooks_lock:
        if not _hooks_installed:
            atexit.register(_flush_all_at_exit)
            _hooks_installed = True


_sigterm_installed = False


def arm_sigterm() -> None:
    """Make SIGTERM a normal exit (so buffered rows are flushed) while rows are buffered.

    Called when rows are buffered. Installed only from the main thread, only while
    SIGTERM has its default action (an application's own handler is left alone), and not
    when ``$POSIXLAKE_NO_SIGTERM_HANDLER`` is set: it raises ``SystemExit(143)`` so that
    ``finally`` blocks and exit handlers run. :func:`disarm_sigterm_if_idle` puts the
    default action back once no open handle holds buffered rows.
    """
    global _sigterm_installed
    if _sigterm_installed or os.environ.get("POSIXLAKE_NO_SIGTERM_HANDLER"):
        return
    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers can only be set from the main thread
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
        _sigterm_installed = True


def disarm_sigterm_if_idle() -> None:
    """Restore SIGTERM's default action when no open handle holds buffered rows."""
    global _sigterm_installed
    if not _sigterm_installed or threading.current_thread() is not threading.main_thread():
        return
    if any(db.buffered_rows and not db._closed for db in list(_live)):
        return
    if signal.getsignal(signal.SIGTERM) is _exit_on_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _sigterm_installed = False


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    del frame
    raise SystemExit(128 + signum)


def _flush_all_at_exit() -> None:
    for db in list(_live):
        db._flush_at_exit("interpreter exit")


def report_unflushed(
    uri: str, rows: int, why: str, err: BaseException | None, *, kept: str
) -> None:
    """Say loudly that ``rows`` buffered rows of ``uri`` could not be committed."""
    message = (
        f"posixlake: {rows} buffered row(s) of {uri} were NOT committed at {why}"
        + (f": {err}" if err is not None else "")
        + f"; {kept}"
    )
    logger.error(message)
    warnings.warn(message, ResourceWarning, stacklevel=2)
