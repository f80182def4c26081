"""Buffered inserts: validated now, committed together by a flush.

Rows wait in the handle's :class:`~posixlake.buffer.WriteBuffer` (and, with
``durable=True``, in a write-ahead file that the next open of the table replays exactly
once) until :meth:`BufferedOps.flush`, ``buffer_rows``, :meth:`BufferedOps.close`, the end
of a ``with`` block, interpreter exit or garbage collection.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from posixlake import buffer as buffer_mod
from posixlake._convert import to_arrow
from posixlake._keys import key_values
from posixlake._metrics import timed
from posixlake._ops.core import FLUSH_ID_KEY, TableCore, logger
from posixlake.buffer import BufferedKeysTaken, parse_row
from posixlake.errors import DuplicateKeyError, PosixLakeError
from posixlake.result import WriteResult

__all__ = ["BufferedOps"]


class BufferedOps(TableCore):
    """The buffered inserts of :class:`~posixlake.database.DatabaseOps`, and ``close``."""

    def insert_buffered(self, data: Any, *, durable: bool = False) -> WriteResult:
        """Validate rows and buffer them; flush in one commit at ``buffer_rows`` rows.

        Buffered rows are not visible to queries until they are flushed (by :meth:`flush`,
        by reaching ``buffer_rows``, by :meth:`close`, by leaving a ``with`` block, at
        interpreter exit or when the handle is garbage collected).

        Args:
            data: as :meth:`insert`; one dict row or the JSON text of one object is the
                fast path (parsed now, converted with the other rows at flush).
            durable: also append the rows to a local write-ahead file, fsynced before
                this returns, so that they survive a crash: the next :meth:`open` of the
                table commits them (exactly once). From the first durable call until
                the next flush, the whole buffer is written ahead.

        Returns:
            How many rows were accepted (bad rows raise here and are not buffered), with
            ``.version`` the version of the flush they triggered, or None (only buffered).

        Raises:
            SerializationError / SchemaError: as :meth:`insert`.
            DuplicateKeyError: a key the table holds, or one already in the buffer.
            IoError: ``durable`` and the write-ahead file cannot be written.
        """
        self._authorize("write", "insert_buffered")
        buffer_mod.arm_sigterm()
        schema = self._schema
        key = self.key_columns
        row = parse_row(data, schema)
        with self._log.lock:
            if durable and self._buffer.wal is None:
                self._start_write_ahead()
            wal = self._buffer.wal
            if row is not None:
                key_value = None
                if key:
                    key_value = row[key[0]] if len(key) == 1 else tuple(row[k] for k in key)
                    self._keys.check_values(self._log, [key_value], key, self._buffer.keys)
                if wal is not None:
                    wal.append(to_arrow([row], schema))
                full = self._buffer.add_row(row, key=key_value)
                accepted = 1
            else:
                table = to_arrow(data, schema)
                values: list[Any] = []
                if key and table.num_rows:
                    values = self._keys.check_new(self._log, table, key, self._buffer.keys)
                if wal is not None and table.num_rows:
                    wal.append(table)
                full = self._buffer.add(table, keys=values)
                accepted = table.num_rows
        if full:
            return WriteResult(accepted, self.flush().version)
        return WriteResult(accepted, None)

    @timed("flush")
    def flush(self) -> WriteResult:
        """Commit buffered rows (one commit); return how many rows were written, and the version.

        Raises:
            BufferedKeysTaken: (a DuplicateKeyError) another writer committed buffered
                keys meanwhile: those rows leave the buffer (``err.rejected``), the
                others stay buffered for the next flush.
            PosixLakeError: any other commit error leaves every row buffered.
        """
        if self._buffer.rows:
            self._authorize("write", "flush")
        with self._log.lock:
            taken = self._buffer.take(lambda rows: to_arrow(rows, self._schema))
            if taken is None:
                return WriteResult(0, None)
            table, keys = taken
            wal = self._buffer.wal
            before, flush_id = self._log.version, uuid.uuid4().hex
            try:
                version = self._append(
                    table,
                    operation="INSERT BUFFERED",
                    app_transaction=(wal.app_id, wal.version) if wal is not None else None,
                    extra_metadata={FLUSH_ID_KEY: flush_id},
                )
            except DuplicateKeyError as err:
                self._reject_taken(table, keys, err)
            except PosixLakeError:
                self._buffer.put_back(table, keys)
                raise
            except BaseException:
                # interrupted (SIGTERM's SystemExit, KeyboardInterrupt): the rows stay
                # buffered, for the exit flush, unless the commit happened
                if not self._flush_landed(before, flush_id):
                    self._buffer.put_back(table, keys)
                raise
            if wal is not None:
                wal.discard()
                self._buffer.wal = None
        if not self._buffer.rows:
            buffer_mod.disarm_sigterm_if_idle()
        return WriteResult(table.num_rows, version)

    def _reject_taken(self, table: pa.Table, keys: set[Any], err: DuplicateKeyError) -> None:
        """Split a flush that hit taken keys: keep the free rows buffered, raise for the rest."""
        key = self.key_columns
        ok, rejected = (
            (table, table.slice(0, 0)) if not key else self._keys.split_taken(self._log, table, key)
        )
        if not rejected.num_rows:
            self._buffer.put_back(table, keys)
            raise err
        if ok.num_rows:
            self._buffer.put_back(ok, key_values(ok, key))
        if self._buffer.wal is not None:
            self._buffer.wal.rewrite(ok)
        taken = key_values(rejected, key)
        raise BufferedKeysTaken(
            f"{rejected.num_rows} buffered row(s) have keys another writer committed first "
            f"({taken[:5]}): they left the buffer (see err.rejected); the other "
            f"{ok.num_rows} stay buffered",
            rejected,
        ) from err

    def _flush_landed(self, before: int, flush_id: str) -> bool:
        """Return whether the flush tagged ``flush_id`` committed after version ``before``."""
        try:
            self._log.refresh()
            return self._log.committed_with(FLUSH_ID_KEY, flush_id, after=before)
        except PosixLakeError as err:
            logger.error("cannot tell whether an interrupted flush committed: %s", err)
            return False  # keep the rows: a keyed table refuses them a second time

    def _start_write_ahead(self) -> None:
        """Take a write-ahead slot and write the rows already buffered to it."""
        from posixlake._wal import WriteAheadFile, wal_dir

        self._log.refresh()
        wal = WriteAheadFile(
            wal_dir(self._log.uri, self._log.storage_options),
            table_id=self._log.table_id,
            next_version=lambda app_id: (self._log.transaction_version(app_id) or 0) + 1,
        )
        pending = self._buffer.peek(lambda rows: to_arrow(rows, self._schema))
        if pending is not None and pending.num_rows:
            wal.append(pending)
        self._buffer.wal = wal

    def _replay_write_ahead(self) -> None:
        """Commit rows that a process which died left in write-ahead files (exactly once)."""
        from posixlake._wal import recover, wal_dir

        for rec in recover(wal_dir(self._log.uri, self._log.storage_options)):
            done = False
            try:
                if rec.rows is None or rec.app_id is None:
                    done = True  # nothing was acknowledged
                elif (self._log.transaction_version(rec.app_id) or 0) >= rec.version:
                    done = True  # committed before the crash
                elif rec.table_id not in (None, self._log.table_id):
                    logger.error(
                        "write-ahead file %s belongs to another table (id %s, this is %s): "
                        "kept, not replayed",
                        rec.path,
                        rec.table_id,
                        self._log.table_id,
                    )
                else:
                    self._auth.check("write", "replay buffered rows")
                    self._replay_rows(rec.rows, (rec.app_id, rec.version), rec.keep_rejected)
                    done = True
                    logger.warning(
                        "committed %d buffered row(s) that a crashed process left in %s",
                        rec.rows.num_rows,
                        rec.path,
                    )
            except PosixLakeError as err:
                logger.error("cannot replay write-ahead file %s (kept): %s", rec.path, err)
            finally:
                rec.release(done=done)

    def _replay_rows(
        self, rows: pa.Table, txn: tuple[str, int], keep: Callable[[pa.Table], str]
    ) -> None:
        key = self.key_columns
        try:
            self._append(rows, operation="INSERT BUFFERED", app_transaction=txn)
        except DuplicateKeyError:
            if not key:
                raise
            ok, rejected = self._keys.split_taken(self._log, rows, key)
            if ok.num_rows:
                self._append(ok, operation="INSERT BUFFERED", app_transaction=txn)
            where = keep(rejected)
            logger.error(
                "%d replayed buffered row(s) have keys committed meanwhile; saved in %s",
                rejected.num_rows,
                where,
            )

    @property
    def buffered_rows(self) -> int:
        """Rows waiting in the insert buffer."""
        return self._buffer.rows

    def close(self) -> None:
        """Flush buffered rows and release the engine. Further calls raise.

        Raises:
            BufferedKeysTaken: buffered rows whose keys another writer took (the other
                rows are committed first).
            PosixLakeError: the flush failed; the rows are reported again, loudly, at
                exit (durably buffered rows stay in their write-ahead file).
        """
        if self._closed:
            return
        try:
            try:
                self.flush()
            except BufferedKeysTaken:
                if self._buffer.rows:
                    self.flush()
                raise
        except PosixLakeError:
            self._unflushed_reported = True  # the caller got the error: no second report
            raise
        finally:
            self._table.closed = True
            buffer_mod.disarm_sigterm_if_idle()

    def _flush_at_exit(self, why: str) -> None:
        """Flush what is still buffered at exit or finalization; report what cannot be."""
        rows = self._buffer.rows
        if not rows:
            return
        wal = self._buffer.wal
        kept = (
            f"they are kept in the write-ahead file {wal.path} and the next open of the "
            "table commits them"
            if wal is not None
            else "they are lost (use insert_buffered(..., durable=True) to keep them)"
        )
        if self._closed:
            if not self._unflushed_reported:
                buffer_mod.report_unflushed(self._log.uri, rows, why, None, kept=kept)
            return
        try:
            self.flush()
        except BufferedKeysTaken as err:
            buffer_mod.report_unflushed(
                self._log.uri, err.rejected.num_rows, why, err, kept="their keys were taken"
            )
            self._flush_at_exit(why)
        except PosixLakeError as err:
            buffer_mod.report_unflushed(self._log.uri, rows, why, err, kept=kept)

    def __del__(self) -> None:
        buffer = getattr(self, "_buffer", None)
        if buffer is not None and buffer.rows:
            self._flush_at_exit("garbage collection of its DatabaseOps")
