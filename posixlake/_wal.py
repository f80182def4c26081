"""The write-ahead files of ``insert_buffered(..., durable=True)``.

Rows buffered durably are appended to a local file and fsynced before
``insert_buffered`` returns. The flush commits them with a Delta application transaction
(a ``txn`` action ``(app id, version)`` written in the same commit), then empties the
file. A process that dies in between leaves the file; the next ``DatabaseOps.open`` of
the table finds it (its lock is free), asks the log for that app id's version, and either
empties the file (the commit happened) or commits its rows (it did not). So a row is
committed once.

Slots keep the number of app ids bounded (delta-rs never expires ``txn`` actions): a
writer takes the first free ``slot-<k>.wal`` (an ``flock``), whose app id is
``posixlake.buffer.<host>.<k>``, and commits it as the version after the one the log
holds. A slot file that is not empty and not locked belongs to a dead writer and is left
for the replay; slot files are never deleted (someone may be about to lock one), only
emptied.

Format: a JSON header line ``{"format", "table_id", "app_id", "version"}``, then frames
``b"PLW1" | u32 length | u32 crc32 | payload`` (payload: one Arrow IPC stream). A torn
last frame (a crash mid-write) ends the file: the call that wrote it had not returned.

Where: ``<table>/_posixlake_wal/`` for a local table (not copied by backups, ignored by
Delta readers and VACUUM: its name starts with ``_``); for object stores a local folder,
``$POSIXLAKE_WAL_DIR`` or ``~/.local/state/posixlake/wal``, one subfolder per table URI.
Files are 0600, folders 0700.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import socket
import struct
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Final

import pyarrow as pa
import pyarrow.ipc as ipc

from posixlake.errors import IoError
from posixlake.storage import is_local
from posixlake.storage.local import fsync_dir

__all__ = [
    "APP_PREFIX",
    "MAX_SLOTS",
    "WAL_DIR",
    "Recovered",
    "WriteAheadFile",
    "recover",
    "wal_dir",
]

logger = logging.getLogger(__name__)

WAL_DIR: Final = "_posixlake_wal"
APP_PREFIX: Final = "posixlake.buffer."
#: concurrent durable writers per table and machine
MAX_SLOTS: Final = 256
_MAGIC: Final = b"PLW1"
_FRAME: Final = struct.Struct(">4sII")


def wal_dir(uri: str, storage_options: Mapping[str, str] | None = None) -> str:
    """Return the folder of the write-ahead files of the table at ``uri``."""
    del storage_options  # one folder per URI, whatever the credentials
    if is_local(uri):
        return os.path.join(uri, WAL_DIR)
    base = os.environ.get("POSIXLAKE_WAL_DIR") or os.path.join(
        os.path.expanduser("~"), ".local", "state", "posixlake", "wal"
    )
    return os.path.join(base, hashlib.sha256(uri.encode()).hexdigest()[:24])


def _app_id(slot: int) -> str:
    host = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]
    return f"{APP_PREFIX}{host}.{slot}"


def _frame(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    payload: bytes = sink.getvalue().to_pybytes()
    return _FRAME.pack(_MAGIC, len(payload), zlib.crc32(payload)) + payload


def _lock(path: str) -> int | None:
    """Open and lock ``path`` (created if missing); None when a live process holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    try:
        same = os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        same = False
    if not same:  # replaced by a rewrite between our open and our lock
        os.close(fd)
        return None
    return fd


def _empty(fd: int) -> None:
    os.ftruncate(fd, 0)
    os.fsync(fd)


class WriteAheadFile:
    """One slot's write-ahead file, locked by this process until it is emptied."""

    def __init__(self, directory: str, *, table_id: str, next_version: Callable[[str], int]):
        """Take the first free slot in ``directory`` (made 0700 if missing).

        Args:
            directory: the table's write-ahead folder.
            table_id: the Delta ``metaData`` id of the table.
            next_version: returns the version to commit app id ``app_id`` as (the log's
                version of it plus one).

        Raises:
            IoError: no slot is free, or the file cannot be written.
        """
        self.directory = directory
        self.table_id = table_id
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
            for slot in range(MAX_SLOTS):
                path = os.path.join(directory, f"slot-{slot}.wal")
                fd = _lock(path)
                if fd is None:
                    continue
                if os.fstat(fd).st_size:  # a dead writer's rows: left for the replay
                    os.close(fd)
                    continue
                self.path, self._fd = path, fd
                self.app_id = _app_id(slot)
                self.version = next_version(self.app_id)
                os.write(fd, self._header())
                os.fsync(fd)
                fsync_dir(directory)
                return
        except OSError as err:
            raise IoError(f"cannot create a write-ahead file in {directory}: {err}") from err
        raise IoError(f"all {MAX_SLOTS} write-ahead slots of {directory} are in use")

    def _header(self) -> bytes:
        doc = {
            "format": 1,
            "table_id": self.table_id,
            "app_id": self.app_id,
            "version": self.version,
        }
        return json.dumps(doc).encode() + b"\n"

    def append(self, table: pa.Table) -> None:
        """Append ``table``'s rows and fsync before returning.

        Raises:
            IoError: the write or fsync failed (the rows must not be reported buffered).
        """
        try:
            os.lseek(self._fd, 0, os.SEEK_END)
            os.write(self._fd, _frame(table))
            os.fsync(self._fd)
        except OSError as err:
            raise IoError(f"write-ahead file {self.path}: {err}") from err

    def rewrite(self, table: pa.Table | None) -> None:
        """Replace the content with ``table`` (rows that stay buffered), atomically.

        The new file is locked before it takes the slot's name, so no replay can take it.
        """
        tmp = self.path + ".tmp"
        try:
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)
            body = _frame(table) if table is not None and table.num_rows else b""
            os.write(fd, self._header() + body)
            os.fsync(fd)
            os.replace(tmp, self.path)
            fsync_dir(self.directory)
        except OSError as err:
            raise IoError(f"write-ahead file {self.path}: {err}") from err
        os.close(self._fd)
        self._fd = fd

    def discard(self) -> None:
        """Empty the file and free the slot: its rows are committed."""
        try:
            _empty(self._fd)
        except OSError as err:  # committed already: the replay will see the app version
            logger.warning("cannot empty write-ahead file %s: %s", self.path, err)
        finally:
            os.close(self._fd)


@dataclass
class Recovered:
    """Rows of a write-ahead file whose writer is gone, locked by us until released."""

    path: str
    app_id: str | None
    version: int
    table_id: str | None
    rows: pa.Table | None
    fd: int

    def release(self, *, done: bool) -> None:
        """Free the slot; ``done``: its rows are committed (or there were none): empty it."""
        try:
            if done:
                _empty(self.fd)
        finally:
            os.close(self.fd)

    def keep_rejected(self, rows: pa.Table) -> str:
        """Save rows that could not be committed beside the file; return the path."""
        n = 0
        while os.path.exists(out := f"{self.path[: -len('.wal')]}.rejected-{n}.arrow"):
            n += 1
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(_frame(rows)[_FRAME.size :])
        return out


def _read(path: str) -> tuple[dict[str, object], pa.Table | None]:
    with open(path, "rb") as f:
        data = f.read()
    nl = data.find(b"\n")
    if nl < 0:
        return {}, None  # empty, or a torn header: nothing was ever acknowledged
    try:
        header = json.loads(data[:nl])
    except ValueError:
        return {}, None
    tables: list[pa.Table] = []
    at = nl + 1
    while at + _FRAME.size <= len(data):
        magic, length, crc = _FRAME.unpack_from(data, at)
        payload = data[at + _FRAME.size : at + _FRAME.size + length]
        if magic != _MAGIC or len(payload) != length or zlib.crc32(payload) != crc:
            logger.warning("write-ahead file %s: torn frame at byte %d ignored", path, at)
            break
        tables.append(ipc.open_stream(pa.py_buffer(payload)).read_all())
        at += _FRAME.size + length
    head = header if isinstance(header, dict) else {}
    if not tables:
        return head, None
    return head, pa.concat_tables(tables, promote_options="permissive")


def recover(directory: str) -> Iterator[Recovered]:
    """Yield the non-empty write-ahead files in ``directory`` that no live process holds."""
    try:
        names = sorted(os.listdir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as err:  # e.g. another user's table: nothing we may replay
        logger.warning("cannot look for write-ahead files in %s: %s", directory, err)
        return
    for name in names:
        if not (name.startswith("slot-") and name.endswith(".wal")):
            continue
        path = os.path.join(directory, name)
        try:
            if not os.path.getsize(path):
                continue
            fd = _lock(path)
        except OSError as err:
            logger.warning("cannot open write-ahead file %s: %s", path, err)
            continue
        if fd is None:
            continue  # its writer is alive
        header, rows = _read(path)
        app_id = header.get("app_id")
        version = header.get("version")
        table_id = header.get("table_id")
        yield Recovered(
            path,
            app_id if isinstance(app_id, str) else None,
            version if isinstance(version, int) else 0,
            table_id if isinstance(table_id, str) else None,
            rows,
            fd,
        )
