"""The asyncio transport: NFSv3 + MOUNT (+ optional portmap) on one TCP port.

`NfsServer` runs an event loop in a background thread. Per connection it feeds
the bytes to a `RecordReader` and runs each record through
``await asyncio.to_thread(dispatcher.handle_parts, record, conn)``, so calls run
concurrently (the client matches replies by xid, so they may go back in any
order). A reply is written as its record-marking header plus the dispatcher's
buffers, so READ data is not copied on the way out. This is the only module of
`nfs` that imports asyncio; everything below it is sans-IO.

Example:
    >>> from nfs.memfs import MemoryFs
    >>> with NfsServer(MemoryFs(), 0) as server:   # doctest: +SKIP
    ...     print(server.port)
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Final, Self, cast

from nfs.mount import MountService
from nfs.nfs3 import DEFAULT_LIMITS, HandleCodec, Nfs3Limits, Nfs3Service
from nfs.portmap import PortmapService
from nfs.record import DEFAULT_MAX_RECORD_SIZE, RecordError, RecordReader, encode_record_parts
from nfs.rpc import ConnectionContext, Dispatcher
from nfs.vfs import Vfs

__all__ = ["NfsServer", "build_dispatcher", "make_vfs"]

logger = logging.getLogger(__name__)

_READ_SIZE: Final = 1 << 20
_STREAM_LIMIT: Final = 4 << 20


def make_vfs(vfs_or_db: object) -> Vfs:
    """Return `vfs_or_db` if it is a `Vfs`, else a ``nfs.tableview.TableFs`` over it.

    Args:
        vfs_or_db: a `Vfs`, or a posixlake ``DatabaseOps`` (TableFs is imported lazily).
    """
    if isinstance(vfs_or_db, Vfs):
        return vfs_or_db
    module = importlib.import_module("nfs.tableview")
    table_fs = cast(Callable[[object], Vfs], module.TableFs)
    return table_fs(vfs_or_db)


def build_dispatcher(
    vfs: Vfs,
    *,
    portmap_port: Callable[[], int] | None = None,
    write_verifier: bytes | None = None,
    limits: Nfs3Limits = DEFAULT_LIMITS,
) -> Dispatcher:
    """Wire NFSv3 and MOUNT v3 (and the port mapper if `portmap_port` is given) over `vfs`.

    Args:
        vfs: the file system to serve.
        portmap_port: returns the port to advertise; None leaves the port mapper out.
        write_verifier: WRITE/COMMIT verifier; random per call (per boot) by default.
        limits: FSINFO sizes.
    """
    handles = HandleCodec(vfs)
    nfs = Nfs3Service(vfs, handles=handles, write_verifier=write_verifier, limits=limits)
    dispatcher = Dispatcher([nfs.rpc_program(), MountService(vfs, handles).rpc_program()])
    if portmap_port is not None:
        dispatcher.register(PortmapService(portmap_port).rpc_program())
    return dispatcher


class NfsServer:
    """Serve a `Vfs` (or a posixlake database) over NFSv3 on 127.0.0.1.

    Args:
        vfs_or_db: a `Vfs`, or a ``DatabaseOps`` (wrapped in ``nfs.tableview.TableFs``).
        port: TCP port for MOUNT and NFS (and portmap); 0 picks a free one, see `port`.
        host: the address to listen on.
        portmapper: also answer port mapper v2 (program 100000) on `port`.
        portmap_port: with `portmapper`, also listen on this port (e.g. 111).
        workers: threads running calls concurrently.
        max_in_flight: calls per connection in progress before reading pauses.
        limits: FSINFO sizes (1 MiB reads and writes by default).
        autostart: start serving in the constructor, as the original project's
            ``NfsServer(db, port)`` did; with False, call `start` (or use ``with``).

    Raises:
        OSError: with ``autostart``, the port cannot be bound.

    Attributes:
        ready: set once the server accepts connections; cleared by `shutdown`.
        vfs: the file system served.
        dispatcher: the sans-IO RPC core.
    """

    def __init__(
        self,
        vfs_or_db: object,
        port: int = 0,
        host: str = "127.0.0.1",
        *,
        portmapper: bool = False,
        portmap_port: int | None = None,
        workers: int = 16,
        max_in_flight: int = 64,
        limits: Nfs3Limits = DEFAULT_LIMITS,
        autostart: bool = True,
    ) -> None:
        self.vfs = make_vfs(vfs_or_db)
        self.host = host
        self._requested_port = port
        self._portmap_port = portmap_port if portmapper else None
        self._workers = workers
        self._max_in_flight = max_in_flight
        self._max_record = max(DEFAULT_MAX_RECORD_SIZE, limits.wtmax + 64 * 1024)
        self.dispatcher = build_dispatcher(
            self.vfs, portmap_port=(lambda: self.port) if portmapper else None, limits=limits
        )
        self.ready = threading.Event()
        self._started = threading.Event()
        self._startup_error: OSError | None = None
        self._port: int | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()
        self._closed = False
        self._close_lock = threading.Lock()
        if autostart:  # the original project's NfsServer(db, port) serves at once
            self.start()

    # ------------------------------------------------------------ public API

    @property
    def port(self) -> int:
        """The bound TCP port (after `start`).

        Raises:
            RuntimeError: if the server has not started.
        """
        if self._port is None:
            raise RuntimeError("NfsServer not started")
        return self._port

    def nfs_url(self, path: str = "/") -> str:
        """Return a libnfs URL for `path` on this server (for nfs-cat, nfs-ls, nfs-cp).

        libnfs mounts the parent directory of the file; for a file directly in
        the root that is the empty path, which libnfs 4.0 only handles with
        ``auto-traverse-mounts=0`` (we have a single export, nothing to traverse).
        """
        if not path.startswith("/"):
            path = "/" + path
        return (
            f"nfs://{self.host}{path}?version=3&nfsport={self.port}&mountport={self.port}"
            "&auto-traverse-mounts=0"
        )

    def get_mount_command(self, mount_point: str, *, platform: str = sys.platform) -> list[str]:
        """Return the command (argv) that mounts this server's export at ``mount_point``.

        MOUNT and NFS share one port, so no portmapper is needed; there is no lock
        service (``nolock``) and, on Linux, no NFSACL (``noacl``).
        """
        port = self.port
        if platform == "darwin":
            opts = f"vers=3,tcp,port={port},mountport={port},nolocks,resvport"
        else:
            opts = f"vers=3,proto=tcp,port={port},mountport={port},mountproto=tcp,nolock,noacl"
        return ["sudo", "mount", "-t", "nfs", "-o", opts, f"{self.host}:/", mount_point]

    def is_ready(self) -> bool:
        """Return whether the server accepts connections."""
        return self.ready.is_set()

    def start(self, timeout: float = 10.0) -> Self:
        """Start the loop thread and wait until the socket listens.

        Raises:
            OSError: if the port cannot be bound.
            TimeoutError: if the server is not up within `timeout` seconds.
            RuntimeError: if already started.
        """
        if self._thread is not None:
            if self._closed:
                raise RuntimeError("NfsServer was shut down; make a new one")
            return self  # already serving (started by the constructor)
        self._thread = threading.Thread(target=self._run, name="nfs-server", daemon=True)
        self._thread.start()
        if not self._started.wait(timeout):
            raise TimeoutError("NfsServer did not start")
        if self._startup_error is not None:
            self._thread.join()
            raise self._startup_error
        return self

    def shutdown(self, timeout: float = 30.0) -> None:
        """Stop listening, close connections, wait for running calls, then close the Vfs.

        Calls ``vfs.close()`` (or else ``vfs.flush()``) once, if the Vfs has it.
        Idempotent.
        """
        thread = self._thread
        loop = self._loop
        stop = self._stop
        if thread is not None and thread.is_alive() and loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(stop.set)
            thread.join(timeout)
        self.ready.clear()
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        for name in ("close", "flush"):
            hook = getattr(self.vfs, name, None)
            if callable(hook):
                hook()
                break

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.shutdown()

    # ------------------------------------------------------------ the loop thread

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        executor = ThreadPoolExecutor(max_workers=self._workers, thread_name_prefix="nfs-call")
        loop.set_default_executor(executor)
        try:
            loop.run_until_complete(self._main())
        finally:
            self._started.set()  # in case _main failed before setting it
            loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        servers: list[asyncio.Server] = []
        try:
            server = await asyncio.start_server(
                self._serve_connection, self.host, self._requested_port, limit=_STREAM_LIMIT
            )
            servers.append(server)
            if self._portmap_port is not None:
                servers.append(
                    await asyncio.start_server(
                        self._serve_connection, self.host, self._portmap_port, limit=_STREAM_LIMIT
                    )
                )
        except OSError as err:
            for s in servers:
                s.close()
            self._startup_error = err
            self._started.set()
            return
        self._port = int(server.sockets[0].getsockname()[1])
        logger.debug("NFS server listening on %s:%d", self.host, self._port)
        self.ready.set()
        self._started.set()
        await self._stop.wait()
        for s in servers:
            s.close()
        for writer in list(self._writers):
            writer.close()  # its reader sees EOF: the connection task ends by itself
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        for s in servers:
            await s.wait_closed()

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        if self._stop is None or self._stop.is_set():
            writer.close()
            return
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        self._writers.add(writer)
        peer = writer.get_extra_info("peername")
        conn = ConnectionContext(f"{peer[0]}:{peer[1]}" if peer else None)
        records = RecordReader(self._max_record)
        write_lock = asyncio.Lock()
        slots = asyncio.Semaphore(self._max_in_flight)
        calls: set[asyncio.Task[None]] = set()
        try:
            while True:
                data = await reader.read(_READ_SIZE)
                if not data:
                    break
                for record in records.feed(data):
                    await slots.acquire()
                    call = asyncio.create_task(self._call(record, conn, writer, write_lock, slots))
                    calls.add(call)
                    call.add_done_callback(calls.discard)
        except RecordError as err:
            logger.warning("closing connection from %s: %s", conn.peer, err)
        except ConnectionError:
            logger.debug("connection from %s reset", conn.peer)
        finally:
            self._writers.discard(writer)
            if calls:  # let running calls finish (their replies go out if still possible)
                await asyncio.gather(*calls, return_exceptions=True)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
            self._connections.discard(task)

    async def _call(
        self,
        record: bytes,
        conn: ConnectionContext,
        writer: asyncio.StreamWriter,
        write_lock: asyncio.Lock,
        slots: asyncio.Semaphore,
    ) -> None:
        try:
            parts = await asyncio.to_thread(self.dispatcher.handle_parts, record, conn)
            if parts is None:
                return
            framed = _coalesce(encode_record_parts(parts))
            async with write_lock:
                if writer.is_closing():
                    return
                for buf in framed:
                    writer.write(buf)
                await writer.drain()
        except ConnectionError:
            logger.debug("connection from %s lost before a reply", conn.peer)
        finally:
            slots.release()


def _coalesce(
    parts: Sequence[bytes | bytearray | memoryview],
) -> list[bytes | bytearray | memoryview]:
    """Merge the small buffers of a reply (record mark included) into few write calls."""
    out: list[bytes | bytearray | memoryview] = []
    small: list[bytes | bytearray | memoryview] = []
    for part in parts:
        if len(part) >= 16 * 1024:
            if small:
                out.append(b"".join(small))
                small = []
            out.append(part)
        else:
            small.append(part)
    if small:
        out.append(b"".join(small))
    return out
