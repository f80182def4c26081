"""The asyncio transport: NFSv3, NFSv4.0 + MOUNT (+ optional portmap) on one TCP port.

`NfsServer` runs an event loop in a background thread that accepts connections
and reads them: a reader callback per connection feeds the bytes to a
`RecordReader` and queues each record for the worker threads, which run
``dispatcher.handle_parts``, so calls run concurrently (the client matches
replies by xid, so they may go back in any order). The worker sends the reply
itself (`nfs.protocol.sender.ReplySender`: ``sendmsg`` of the record mark and the
dispatcher's buffers, so READ data is not copied on the way out, and a
synchronous client waits for no hop back to the loop); the loop takes over the
sending only while a client does not read. A connection is read no further while
it has ``max_in_flight`` calls running, its replies back up, or it is over its
memory budget. This is the only module of `nfs` that imports asyncio; everything
below it is sans-IO.

Example:
    >>> from nfs.protocol.memfs import MemoryFs
    >>> with NfsServer(MemoryFs(), 0) as server:   # doctest: +SKIP
    ...     print(server.port)
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import errno
import logging
import queue
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Final, Self

from nfs.protocol.nfs3.service import DEFAULT_LIMITS, Nfs3Limits
from nfs.protocol.nfs4.state import Nfs4State
from nfs.protocol.record import (
    DEFAULT_MAX_RECORD_SIZE,
    LAST_FRAGMENT,
    RecordError,
    RecordReader,
    encode_record_parts,
    record_mark,
)
from nfs.protocol.rpc import ConnectionContext, CredentialPolicy
from nfs.protocol.sender import ReplySender, unpaced_on_loopback
from nfs.protocol.serving import (
    DEFAULT_RESOURCES,
    ResourceLimits,
    ServerStats,
    build_dispatcher,
    default_max_connections,
    make_vfs,
    mount_command,
    nfs_url,
    unmount_command,
)
from nfs.protocol.vfs import Vfs
from nfs.protocol.xdr import FileSlice, Part

if sys.platform != "win32":  # uvloop (libuv) does not run on Windows
    import uvloop

__all__ = [
    "NfsServer",
    "ResourceLimits",
    "ServerStats",
    "build_dispatcher",
    "default_max_connections",
    "make_vfs",
]

logger = logging.getLogger(__name__)

_READ_SIZE: Final = 256 * 1024
_LAST_MARK: Final = struct.Struct(">I")
"""A record mark (`record_mark`), packed in line for a small reply."""
_SMALL_REPLY: Final = 4096
"""A reply of at most this many bytes in one buffer is copied behind its record mark."""
_LISTENER_OPTIONS_INHERITED: Final = sys.platform == "linux"
"""Whether an accepted TCP socket has its listener's TCP_NODELAY and congestion control
(Linux: the connection's socket is a copy of the listener's, and keeps a congestion
control set on the listener with setsockopt)."""
_RESOURCE_ERRNOS: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_ACCEPT_BACKOFF_MIN: Final = 0.05
_ACCEPT_BACKOFF_MAX: Final = 2.0
_ACCEPT_WARN_INTERVAL: Final = 600


class _Conn:
    """One client connection: the loop thread reads it, worker threads run its calls.

    ``running``, ``in_flight``, ``held`` and ``last_active`` change under the server's
    counter lock (workers end calls); the rest belongs to the loop thread.
    """

    __slots__ = (
        "closed",
        "context",
        "drained",
        "ending",
        "gone",
        "held",
        "in_flight",
        "last_active",
        "pending",
        "reading",
        "records",
        "room",
        "running",
        "sender",
        "sock",
        "waiter",
    )

    def __init__(
        self,
        sock: socket.socket,
        context: ConnectionContext,
        records: RecordReader,
        now: float,
        sender: ReplySender,
    ) -> None:
        self.sock = sock  # non-blocking; closed by `_forget`, after its calls
        self.context = context
        self.records = records
        self.sender = sender
        self.room: list[asyncio.Future[None]] = []  # waiting for the replies queued to shrink
        self.drained: list[asyncio.Future[None]] = []  # waiting for the loop to finish sending
        self.waiter: asyncio.Future[None] | None = None  # the loop, waiting for a call to end
        self.gone: list[asyncio.Future[None]] = []  # waiting for it to be closed
        self.ending = False  # reading ended (EOF, an error, `close`): it is being closed
        self.pending: collections.deque[bytes] = collections.deque()  # records not yet run
        self.reading = False  # the loop watches the socket for reading
        self.running = 0  # calls queued or running
        self.held = 0
        self.in_flight = 0
        self.last_active = now
        self.closed = False

    def close(self) -> None:
        """End the connection: the client sees it closed now (replies not sent yet are
        dropped); the loop sees EOF and closes the socket after the calls."""
        self.closed = True
        self.sender.shutdown()


class NfsServer:
    """Serve a `Vfs` over NFSv3 on 127.0.0.1.

    Args:
        vfs: the file system to serve, or a factory making it (see `make_vfs`). A
            posixlake table is served by ``nfs.table.server.TableNfsServer``.
        port: TCP port for MOUNT and NFS (and portmap); 0 picks a free one, see `port`.
        host: the address to listen on.
        portmapper: also answer port mapper v2 (program 100000) on `port`.
        portmap_port: with `portmapper`, also listen on this port (e.g. 111).
        workers: threads running calls concurrently.
        max_in_flight: calls per connection in progress before reading pauses.
        limits: FSINFO sizes (1 MiB reads and writes by default).
        resources: connection and memory bounds (see `ResourceLimits`).
        credential_policy: applied to each call's AUTH_SYS identity (see
            ``nfs.protocol.identity.IdentityPolicy``); None trusts the credentials as sent.
        autostart: start serving in the constructor, as the original project's
            ``NfsServer(db, port)`` did; with False, call `start` (or use ``with``).
        nfs4_state: the NFSv4 clients, opens and leases (``nfs.protocol.nfs4.state.Nfs4State``:
            its clock and lease); a new one by default.

    Raises:
        OSError: with ``autostart``, the port cannot be bound.
        ValueError: inconsistent `resources`.

    Attributes:
        ready: set once the server accepts connections; cleared by `shutdown`.
        vfs: the file system served.
        dispatcher: the sans-IO RPC core.
    """

    def __init__(
        self,
        vfs: Vfs | Callable[[], Vfs],
        port: int = 0,
        host: str = "127.0.0.1",
        *,
        portmapper: bool = False,
        portmap_port: int | None = None,
        workers: int = 16,
        max_in_flight: int = 64,
        limits: Nfs3Limits = DEFAULT_LIMITS,
        resources: ResourceLimits = DEFAULT_RESOURCES,
        credential_policy: CredentialPolicy | None = None,
        autostart: bool = True,
        nfs4_state: Nfs4State | None = None,
    ) -> None:
        self.vfs = make_vfs(vfs)
        self.host = host
        self._requested_port = port
        self._portmap_port = portmap_port if portmapper else None
        self._workers = workers
        self._max_in_flight = max_in_flight
        self._max_record = max(DEFAULT_MAX_RECORD_SIZE, limits.wtmax + 64 * 1024)
        self.resources = resources
        self._max_connections = resources.connection_cap()
        self._unpaced_listeners: set[socket.socket] = set()
        """Listeners whose connections inherit their congestion control (`_listen`)."""
        if resources.max_connection_bytes < self._max_record + _READ_SIZE:
            raise ValueError(
                f"max_connection_bytes must be at least {self._max_record + _READ_SIZE} "
                "(one largest record and one read)"
            )
        if resources.max_buffered_bytes < resources.max_connection_bytes:
            raise ValueError("max_buffered_bytes must be at least max_connection_bytes")
        if resources.idle_timeout <= 0:
            raise ValueError("idle_timeout must be positive")
        self.dispatcher = build_dispatcher(
            self.vfs,
            portmap_port=(lambda: self.port) if portmapper else None,
            limits=limits,
            credential_policy=credential_policy,
            nfs4_state=nfs4_state,
        )
        self.ready = threading.Event()
        self._started = threading.Event()
        self._startup_error: OSError | None = None
        self._port: int | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._room: asyncio.Condition | None = None
        self._connections: dict[_Conn, asyncio.Task[None] | None] = {}
        """The open connections, each with the task that finishes closing it, if it
        needed one (calls still running or replies still going out when reading ended)."""
        self._all_gone: list[asyncio.Future[None]] = []  # waiting for no connection
        self._counters = dataclasses.asdict(ServerStats())
        self._stats_lock = threading.RLock()  # also guards the _Conn counters
        self._stats_changed = threading.Condition(self._stats_lock)  # (entered by its lock)
        self._stats_waiters = 0  # callers in wait_stats (no one to wake: no notify)
        self._work: queue.SimpleQueue[tuple[bytes, _Conn] | None] = queue.SimpleQueue()
        self._background: set[asyncio.Task[None]] = set()
        self._read_buf = bytearray(_READ_SIZE)  # the loop's, for every connection
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
        """Return a libnfs URL for `path` on this server (see `nfs.protocol.serving.nfs_url`)."""
        return nfs_url(self.host, self.port, path)

    def get_port(self) -> int:
        """Return the bound TCP port (the original project's name for `port`)."""
        return self.port

    def get_mount_command(self, mount_point: str, *, platform: str = sys.platform) -> list[str]:
        """Return the command (argv) that mounts this server's export at ``mount_point``.

        See `nfs.protocol.serving.mount_command` (Linux, macOS, and Windows with the port mapper).
        """
        return mount_command(self.host, self.port, mount_point, platform=platform)

    def get_unmount_command(self, mount_point: str, *, platform: str = sys.platform) -> list[str]:
        """Return the command (argv) that unmounts ``mount_point`` (see `get_mount_command`)."""
        return unmount_command(mount_point, platform=platform)

    def is_ready(self) -> bool:
        """Return whether the server accepts connections."""
        return self.ready.is_set()

    def stats(self) -> ServerStats:
        """Return the current counters (see `ServerStats`)."""
        with self._stats_lock:
            return ServerStats(**self._counters)

    def wait_stats(
        self, predicate: Callable[[ServerStats], bool], timeout: float
    ) -> ServerStats | None:
        """Wait until `predicate` holds for the counters (they change as clients act).

        Returns:
            The counters that satisfied `predicate`, or None after `timeout` seconds.
        """
        with self._stats_lock:
            self._stats_waiters += 1
            try:
                if self._stats_changed.wait_for(
                    lambda: predicate(ServerStats(**self._counters)), timeout
                ):
                    return ServerStats(**self._counters)
                return None
            finally:
                self._stats_waiters -= 1

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

    # ------------------------------------------------------------ counters

    def _count(self, **changes: int) -> None:
        """Add to counters and wake `wait_stats` callers."""
        with self._stats_lock:
            self._count_locked(changes)

    def _count_locked(self, changes: dict[str, int]) -> None:
        counters = self._counters
        for name, delta in changes.items():
            counters[name] += delta
        if self._stats_waiters:
            self._stats_changed.notify_all()

    def _hold(self, conn: _Conn, *, calls: int = 0, nbytes: int = 0) -> None:
        """Add `calls` and `nbytes` to those of `conn` in progress; recount the bytes it
        holds (unfinished record + calls in progress)."""
        with self._stats_lock:
            self._hold_locked(conn, calls, nbytes)

    def _hold_locked(self, conn: _Conn, calls: int, nbytes: int) -> None:
        conn.running += calls
        conn.in_flight += nbytes
        held = conn.records.pending + conn.in_flight
        if held != conn.held:
            self._count_locked({"buffered_bytes": held - conn.held})
            conn.held = held

    def _has_room(self, conn: _Conn) -> bool:
        return (
            conn.closed
            or (self._stop is not None and self._stop.is_set())
            or (
                conn.held < self.resources.max_connection_bytes
                and self._counters["buffered_bytes"] < self.resources.max_buffered_bytes
            )
        )

    async def _wait_for_room(self, conn: _Conn) -> None:
        """Wait until `conn` may buffer another read (its calls finish, others' do)."""
        if self._has_room(conn):
            return
        room = self._room
        assert room is not None
        self._count(paused_connections=1)
        try:
            async with room:
                await room.wait_for(lambda: self._has_room(conn))
        finally:
            self._count(paused_connections=-1)

    async def _room_changed(self) -> None:
        room = self._room
        if room is not None:
            async with room:
                room.notify_all()

    # ------------------------------------------------------------ the loop thread

    def _run(self) -> None:
        loop = _new_event_loop()
        self._loop = loop
        workers = [
            threading.Thread(target=self._work_loop, name=f"nfs-call_{i}", daemon=True)
            for i in range(self._workers)
        ]
        for worker in workers:
            worker.start()
        try:
            loop.run_until_complete(self._main())
        finally:
            self._started.set()  # in case _main failed before setting it
            for _ in workers:
                self._work.put(None)
            for worker in workers:
                worker.join()
            loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()

    def _listen(self, port: int) -> socket.socket:
        """Bind and listen (non-blocking) on ``host:port``."""
        infos = socket.getaddrinfo(
            self.host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
        family, _, _, _, address = infos[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            if _LISTENER_OPTIONS_INHERITED:
                # what every connection needs, set once: Linux copies a listener's
                # TCP_NODELAY, and a congestion control set on it, to each connection it
                # accepts (no syscalls per connection); on loopback, every connection is
                # from this machine (`unpaced_on_loopback`)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                if unpaced_on_loopback(sock, host=str(address[0])) is not None:
                    self._unpaced_listeners.add(sock)
            sock.listen(128)
            sock.setblocking(False)
        except OSError:
            self._unpaced_listeners.discard(sock)
            sock.close()
            raise
        return sock

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        self._room = asyncio.Condition()
        listeners: list[socket.socket] = []
        try:
            listeners.append(self._listen(self._requested_port))
            if self._portmap_port is not None:
                listeners.append(self._listen(self._portmap_port))
        except OSError as err:
            for s in listeners:
                s.close()
            self._unpaced_listeners.clear()
            self._startup_error = err
            self._started.set()
            return
        self._port = int(listeners[0].getsockname()[1])
        logger.debug("NFS server listening on %s:%d", self.host, self._port)
        accepting = [asyncio.create_task(self._accept_loop(s)) for s in listeners]
        reaper = asyncio.create_task(self._reap_idle())
        self.ready.set()
        self._started.set()
        await self._stop.wait()
        for task in [*accepting, reaper]:
            task.cancel()
        await asyncio.gather(*accepting, reaper, return_exceptions=True)
        for s in listeners:
            s.close()
        self._unpaced_listeners.clear()
        for conn in list(self._connections):
            conn.close()  # its reader sees EOF: the connection is closed after its calls
        await self._room_changed()
        while self._connections:
            waiting = asyncio.get_running_loop().create_future()
            self._all_gone.append(waiting)
            await waiting

    async def _accept_loop(self, listener: socket.socket) -> None:
        """Accept connections; on EMFILE and the like, log once and back off.

        The listener's reader callback (`_acceptable`) accepts and serves connections
        itself, as long as it is registered: no future, no reader added and removed per
        connection. It hands this coroutine what needs waiting: an accept that failed
        for lack of resources (back off, close an idle connection), and a connection
        accepted at the connection cap (close an idle one to make room, or refuse it).
        """
        loop = asyncio.get_running_loop()
        fd = listener.fileno()
        failures = 0
        warned_at = -float("inf")
        delay = _ACCEPT_BACKOFF_MIN
        stop = self._stop
        assert stop is not None
        while not stop.is_set():
            handed: asyncio.Future[tuple[socket.socket | None, OSError | None]]
            handed = loop.create_future()
            accepted = [0]  # connections the callback accepted meanwhile
            loop.add_reader(fd, self._acceptable, listener, handed, accepted)
            try:
                sock, err = await handed
            finally:
                loop.remove_reader(fd)
            if failures and accepted[0]:
                logger.debug("accepting NFS connections again after %d failed accepts", failures)
                failures = 0
                delay = _ACCEPT_BACKOFF_MIN
            if err is not None:
                if failures == 0 and loop.time() - warned_at >= _ACCEPT_WARN_INTERVAL:
                    warned_at = loop.time()
                    logger.warning(
                        "cannot accept NFS connections: %s; closing idle connections and "
                        "retrying with backoff (not logged again for %d s)",
                        err.strerror or err,
                        _ACCEPT_WARN_INTERVAL,
                    )
                failures += 1
                await self._evict_idle()  # frees a descriptor if some connection is idle
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)
                delay = min(delay * 2, _ACCEPT_BACKOFF_MAX)
                continue
            assert sock is not None
            if len(self._connections) >= self._max_connections and not await self._evict_idle():
                self._count(refused_connections=1)
                logger.debug("connection refused: %d connections, all busy", self._max_connections)
                sock.close()
                continue
            self._start_connection(sock, loop, unpaced=listener in self._unpaced_listeners)

    def _acceptable(
        self,
        listener: socket.socket,
        handed: asyncio.Future[tuple[socket.socket | None, OSError | None]],
        accepted: list[int],
    ) -> None:
        """The listener's reader callback: accept a connection and serve it; hand
        `_accept_loop` a failure for lack of resources or a connection past the cap
        (``accepted[0]`` counts the connections accepted).

        One accept per call: the loop watches the listener level-triggered, so it calls
        again while connections wait, and a lone connect costs no second accept that
        fails (an exception raised and caught per connection)."""
        if handed.done():
            return
        try:
            sock, address = listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as err:
            self._count(accept_errors=1)
            if err.errno not in _RESOURCE_ERRNOS:
                logger.debug("accept failed: %s", err)
                return
            handed.set_result((None, err))
            return
        accepted[0] += 1
        if len(self._connections) >= self._max_connections:
            handed.set_result((sock, None))
            return
        self._start_connection(
            sock, asyncio.get_running_loop(), address, unpaced=listener in self._unpaced_listeners
        )

    def _start_connection(
        self,
        sock: socket.socket,
        loop: asyncio.AbstractEventLoop,
        address: object = None,
        *,
        unpaced: bool = False,
    ) -> None:
        """Serve an accepted connection: read it until it ends (`_end`).

        No task per connection: the loop's reader callback serves it, and `_end` closes
        it at once when nothing of it runs or waits to be sent (a task finishes the
        others). ``address``: the peer's, as ``accept`` gave it (None: asked for);
        ``unpaced``: it has its listener's TCP options (`_listen`).
        """
        stop = self._stop
        if stop is None or stop.is_set():
            sock.close()
            return
        try:
            conn = self._connect(sock, loop, address, unpaced=unpaced)
        except OSError as err:
            logger.debug("cannot set up a connection: %s", err)
            sock.close()
            return
        self._connections[conn] = None
        self._count(connections=1)
        self._read_on(conn)
        # a client's first call, sent as soon as it connected, is often here already
        self._readable(conn)

    def _connect(
        self,
        sock: socket.socket,
        loop: asyncio.AbstractEventLoop,
        address: object = None,
        *,
        unpaced: bool = False,
    ) -> _Conn:
        """Set up an accepted connection: its record reader and its `ReplySender`.

        The socket is not handed to an asyncio transport: the loop reads it (a reader
        callback, `_readable`), worker threads send on it, and it is closed only once no
        call of the connection runs (so a worker never sends on a reused descriptor).
        ``unpaced``: its listener's TCP options are its own already (`_listen`).
        """
        sock.setblocking(False)
        peer: tuple[str, int] | None = None
        if address is None:
            with contextlib.suppress(OSError):
                address = sock.getpeername()
        if isinstance(address, tuple):  # an IP connection: (host, port[, flow, scope])
            peer = (address[0], address[1])
            if not _LISTENER_OPTIONS_INHERITED:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if not unpaced:
                unpaced_on_loopback(sock, host=peer[0])
        fd = sock.fileno()

        def writable() -> None:  # the loop sends while the client is slow to read
            if sender.resume():
                loop.remove_writer(fd)
                _resolve(conn.drained)

        def watch() -> None:
            if not sender.idle:
                loop.add_writer(fd, writable)

        def room() -> None:
            _resolve(conn.room)

        def on_blocked() -> None:
            loop.call_soon_threadsafe(watch)

        def on_room() -> None:
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(room)

        sender = ReplySender(sock, on_blocked=on_blocked, on_room=on_room)
        conn = _Conn(
            sock,
            ConnectionContext(f"{peer[0]}:{peer[1]}" if peer else None),
            RecordReader(self._max_record, max_fragments=self.resources.max_fragments),
            loop.time(),
            sender,
        )
        return conn

    async def _evict_idle(self) -> bool:
        """Close the connection idle the longest (no call in progress); whether one was."""
        idle = [c for c in self._connections if not c.closed and not c.running]
        if not idle:
            return False
        victim = min(idle, key=lambda c: c.last_active)
        logger.debug("closing idle connection from %s to make room", victim.context.peer)
        victim.close()
        # the room is there once its socket is closed: accepting on before that would
        # hold a descriptor per evicted connection through a burst of connects
        await self._room_changed()  # one paused for room sees that it is closed
        if victim in self._connections:
            gone = asyncio.get_running_loop().create_future()
            victim.gone.append(gone)
            await gone
        self._count(evicted_connections=1)
        await self._room_changed()
        return True

    async def _reap_idle(self) -> None:
        """Close connections idle for `ResourceLimits.idle_timeout` (until stopped)."""
        loop = asyncio.get_running_loop()
        timeout = self.resources.idle_timeout
        stop = self._stop
        assert stop is not None
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), min(max(timeout / 4, 0.01), 30.0))
            now = loop.time()
            for conn in list(self._connections):
                if conn.closed or conn.running:
                    continue
                if now - conn.last_active >= timeout:
                    logger.debug("closing connection from %s: idle", conn.context.peer)
                    conn.close()
                    self._count(idle_closed=1)
            await self._room_changed()

    def _end(self, conn: _Conn) -> None:
        """Reading `conn` ended (EOF, an error, `_Conn.close`): close it now if none of
        its calls runs and nothing waits to be sent (a synchronous client that hung
        up), else let a task wait for its calls and its replies and then close it."""
        self._read_off(conn)
        if conn.ending:
            return
        conn.ending = True
        conn.closed = True
        with self._stats_lock:
            quiet = conn.running == 0
        if quiet and conn.sender.idle:
            self._release(conn)
            self._forget(conn)
        else:
            self._connections[conn] = asyncio.create_task(self._finish(conn))

    async def _finish(self, conn: _Conn) -> None:
        """Close `conn` once its calls have ended (their replies go out if still
        possible) and the loop has sent what a slow client had not read yet."""
        try:
            await self._until(conn, lambda: conn.running == 0)
            self._release(conn)
            await self._finish_sending(conn)
        finally:
            self._forget(conn)

    def _release(self, conn: _Conn) -> None:
        """Drop what `conn` holds (records not run, a partial record) from the budget,
        and wake a connection waiting for room (none of its calls runs any more)."""
        conn.pending.clear()
        if conn.held:
            self._count(buffered_bytes=-conn.held)
        conn.held = conn.in_flight = 0
        if self._counters["paused_connections"]:
            task = asyncio.create_task(self._room_changed())
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    def _forget(self, conn: _Conn) -> None:
        """Close `conn`'s socket (no thread sends on it any more) and forget it."""
        conn.sock.close()
        if self._connections.pop(conn, False) is not False:
            self._count(connections=-1)
        _resolve(conn.gone)
        if not self._connections:
            _resolve(self._all_gone)

    def _read_on(self, conn: _Conn) -> None:
        if not conn.reading:
            asyncio.get_running_loop().add_reader(conn.sock.fileno(), self._readable, conn)
            conn.reading = True

    def _read_off(self, conn: _Conn) -> None:
        if conn.reading:
            asyncio.get_running_loop().remove_reader(conn.sock.fileno())
            conn.reading = False

    def _readable(self, conn: _Conn) -> None:
        """The loop's reader callback: read, cut records, hand them to the workers."""
        buf = self._read_buf
        try:
            n = conn.sock.recv_into(buf)
        except (BlockingIOError, InterruptedError):
            return
        except ConnectionError:
            logger.debug("connection from %s reset", conn.context.peer)
            self._end(conn)
            return
        except OSError as err:
            logger.debug("connection from %s failed: %s", conn.context.peer, err)
            self._end(conn)
            return
        if not n:
            self._end(conn)
            return
        try:
            with memoryview(buf)[:n] as data:
                records = conn.records.feed(data)  # copies what it keeps
        except RecordError as err:
            logger.warning("closing connection from %s: %s", conn.context.peer, err)
            self._end(conn)
            return
        completed = bool(records)
        if len(records) == 1 and not conn.pending:
            # a lone call (a synchronous client; the worker that answered its last call
            # may still be counting it as running): answered here if it needs no waiting
            parts = self.dispatcher.handle_parts_nowait(records[0], conn.context, files=True)
            if parts is not None:
                self._answered_here(conn, n, parts)
                return
        with self._stats_lock:
            self._count_locked({"received_bytes": n})
            if completed:  # a half-sent record is no activity
                conn.last_active = time.monotonic()  # the loop's clock
            self._hold_locked(conn, 0, sum(map(len, records)))
        conn.pending.extend(records)
        self._dispatch(conn)
        if not self._may_read(conn):
            self._pause_reading(conn)

    def _answered_here(self, conn: _Conn, received: int, parts: list[Part]) -> None:
        """Send the reply of a call answered on the loop (`received`: the bytes read).

        The connection's bookkeeping is done before the reply goes out, and nothing but
        the budget check after: a synchronous client sends its next call as soon as it
        has the reply, and that call then finds the loop waiting for it, not still
        counting the last one.
        """
        counters = self._counters
        with self._stats_lock:
            counters["received_bytes"] += received
            conn.last_active = time.monotonic()  # the loop's clock
            held = conn.records.pending + conn.in_flight  # a partial record read with it
            if held != conn.held:
                counters["buffered_bytes"] += held - conn.held
                conn.held = held
            if self._stats_waiters:
                self._stats_changed.notify_all()
            budget = (
                held < self.resources.max_connection_bytes
                and counters["buffered_bytes"] < self.resources.max_buffered_bytes
            )
        only = parts[0] if len(parts) == 1 else None
        if type(only) is bytes and len(only) <= _SMALL_REPLY:  # `_framed`'s first case, in line
            framed: list[bytes | bytearray | memoryview | FileSlice] = [
                _LAST_MARK.pack(len(only) | LAST_FRAGMENT) + only
            ]
        else:
            framed = _framed(parts)
        sent = conn.sender.send(framed, wait=0.0)
        if not (sent and budget) and not self._may_read(conn):
            self._pause_reading(conn)

    def _pause_reading(self, conn: _Conn) -> None:
        """Read `conn` no further until `_resume_reading` finds it may be read."""
        self._read_off(conn)
        task = asyncio.create_task(self._resume_reading(conn))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _dispatch(self, conn: _Conn) -> None:
        """Hand `conn`'s records to the workers, up to ``max_in_flight`` calls at once."""
        pending = conn.pending
        room = self._max_in_flight - conn.running
        if not pending or room <= 0:
            return
        batch = [pending.popleft() for _ in range(min(room, len(pending)))]
        self._hold(conn, calls=len(batch))
        for record in batch:
            self._work.put((record, conn))

    def _may_read(self, conn: _Conn) -> bool:
        """Whether `conn` may be read now: no record waits for a call slot, its replies
        are going out, and its bytes fit the budgets."""
        return (
            not conn.pending
            and conn.sender.queued_bytes <= conn.sender.low_water
            and conn.held < self.resources.max_connection_bytes
            and self._counters["buffered_bytes"] < self.resources.max_buffered_bytes
        )

    async def _resume_reading(self, conn: _Conn) -> None:
        """Wait until `conn` may be read again (calls end, replies go out, budgets have
        room), then read it again; end it if it was closed meanwhile."""
        loop = asyncio.get_running_loop()
        stop = self._stop
        assert stop is not None
        while not conn.closed and not stop.is_set() and not self._may_read(conn):
            if conn.pending:
                await self._until(conn, lambda: conn.running < self._max_in_flight or conn.closed)
                self._dispatch(conn)
            elif conn.sender.queued_bytes > conn.sender.low_water:
                if not conn.sender.want_room():
                    # the client does not read its replies: read no more calls until
                    # they go out (as asyncio's drain() would)
                    waiting = loop.create_future()
                    conn.room.append(waiting)
                    await waiting
            else:
                await self._wait_for_room(conn)
        if conn.closed or stop.is_set():
            self._end(conn)
        else:
            self._read_on(conn)

    async def _until(self, conn: _Conn, done: Callable[[], bool]) -> None:
        """Wait until `done()` holds; it turns true only when a call of `conn` ends."""
        loop = asyncio.get_running_loop()
        while True:
            with self._stats_lock:
                if done():
                    return
                waiting = conn.waiter = loop.create_future()
            try:
                await waiting
            finally:
                conn.waiter = None

    async def _finish_sending(self, conn: _Conn) -> None:
        """Let the loop send what a slow client has not read yet (unless stopping)."""
        sender = conn.sender
        stop = self._stop
        if not sender.idle and stop is not None and not stop.is_set():
            done = asyncio.get_running_loop().create_future()
            conn.drained.append(done)
            stopping = asyncio.create_task(stop.wait())
            await asyncio.wait([done, stopping], return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
        if not sender.idle:  # stopping: the loop is the sender (no call runs any more)
            asyncio.get_running_loop().remove_writer(conn.sock.fileno())
            sender.abort()

    # ------------------------------------------------------------ the worker threads

    def _work_loop(self) -> None:
        """Run calls until told to stop (a worker thread)."""
        loop = self._loop
        assert loop is not None
        while True:
            item = self._work.get()
            if item is None:
                return
            record, conn = item
            try:
                parts = self.dispatcher.handle_parts(record, conn.context, files=True)
                if parts is not None:  # handle_parts never raises
                    conn.sender.send(_framed(parts))
            except Exception:  # the transport's boundary: a bug must not end a worker
                logger.exception("a call from %s failed in the transport", conn.context.peer)
            finally:
                with self._stats_lock:
                    self._hold_locked(conn, -1, -len(record))
                    conn.last_active = time.monotonic()  # the loop's clock
                    wake = conn.waiter is not None or self._counters["paused_connections"] > 0
                if wake:
                    with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                        loop.call_soon_threadsafe(self._call_ended, conn)

    def _call_ended(self, conn: _Conn) -> None:
        """A call of `conn` ended (the loop thread): wake whoever waits for that."""
        waiter = conn.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        if self._counters["paused_connections"]:
            task = asyncio.create_task(self._room_changed())
            self._background.add(task)
            task.add_done_callback(self._background.discard)


def _framed(parts: list[Part]) -> list[bytes | bytearray | memoryview | FileSlice]:
    """A reply's buffers behind its record mark (READ data from a file kept as a
    `FileSlice`, which the sender sends with ``sendfile``); a small reply in one
    buffer is sent as one, its mark in front."""
    if len(parts) == 1:
        only = parts[0]
        if type(only) is bytes and len(only) <= _SMALL_REPLY:
            return [_LAST_MARK.pack(len(only) | LAST_FRAGMENT) + only]
    plain = [p for p in parts if not isinstance(p, FileSlice)]
    if len(plain) == len(parts):
        return [*encode_record_parts(plain)]
    total = sum(len(p) if isinstance(p, FileSlice) else memoryview(p).nbytes for p in parts)
    return [record_mark(total), *parts]


def _new_event_loop() -> asyncio.AbstractEventLoop:
    """The server's event loop: uvloop's where it runs (not on Windows), else asyncio's.

    Every call of a synchronous client (``nfs-cat``: one call at a time) costs the loop
    a reader callback, and an answer on the loop or a hand-off to a worker and back;
    libuv's loop runs those callbacks, ``call_soon_threadsafe`` and tasks with less
    Python per step than asyncio's selector loop.
    """
    if sys.platform == "win32":
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _resolve(waiting: list[asyncio.Future[None]]) -> None:
    """Wake the futures in `waiting` (and empty it)."""
    for fut in waiting:
        if not fut.done():
            fut.set_result(None)
    waiting.clear()
