"""The write side of one NFS connection: replies sent by the thread that made them.

A reply (its record mark and buffers, a READ's data a view of the mapped segment) is
sent with ``sendmsg`` by the worker thread that ran the call, as soon as it is ready: no
hop back to the event loop, no copy into a transport buffer. A synchronous client
(``nfs-cat``: one 1 MiB READ at a time) waits for nothing else.

Replies go out whole and in the order they are queued. One thread at a time sends (the
*sender*): a worker that finds another one sending queues its reply and returns, and the
sender sends it next. A sender that finds the socket full waits for it a little
(`ReplySender.wait`); past that, it hands the queue over to the event loop (the
``on_blocked`` callback), which goes on sending when the socket is writable
(:meth:`ReplySender.resume`), so a client that does not read holds no worker thread.

READ data given as a `nfs.protocol.xdr.FileSlice` (a range of a segment file) is sent
with ``os.sendfile`` from the file after the reply's header (sent with ``MSG_MORE``, so
the two leave as one stream of full segments): the kernel passes the page cache's pages
to the socket, and the server neither copies the bytes nor faults its mapping of them
in. Where ``sendfile`` is refused (a file system or socket without it), the slice's view
is sent with ``sendmsg`` instead, as any other buffer.

No asyncio here: ``nfs.protocol.server`` wires the callbacks to its loop.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import functools
import ipaddress
import os
import select
import socket
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final, cast

from nfs.protocol.xdr import FileSlice

__all__ = [
    "IOV_MAX",
    "LOOPBACK_CONGESTION",
    "ReplySender",
    "unpaced_on_loopback",
]

IOV_MAX: Final = 1024
"""Buffers per ``sendmsg`` (the Linux limit)."""

_NO_SENDFILE: Final = frozenset(
    {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EOVERFLOW}
)
"""``sendfile`` errors that mean "not here": the view is sent instead."""

LOOPBACK_CONGESTION: Final = (b"cubic", b"reno")
"""Congestion controls asked for on a loopback connection, first one Linux takes."""


def unpaced_on_loopback(sock: socket.socket, *, host: str | None = None) -> bytes | None:
    """Give a TCP connection from this machine a congestion control that does not pace.

    Where the machine's default is BBR (common on cloud images), a loopback connection
    is paced by the kernel's internal pacing (``lo`` has no ``fq`` qdisc) at BBR's
    estimate of the path, which a request-reply stream of 1 MiB READs keeps well below
    what loopback carries: measured here, warm ``nfs-cat`` of 425 MB at 2.65 GB/s paced
    and 3.04 GB/s with cubic, the same server in alternating runs. There is no network
    on loopback to be fair to, so the connection asks for cubic (or reno) instead. A
    remote peer, or a system that refuses, keeps the machine's choice.

    Args:
        sock: the server's side of the connection.
        host: the peer's address, if the caller has it (else it is asked for).

    Returns:
        The congestion control set, or None if the connection is left as it was.
    """
    option = getattr(socket, "TCP_CONGESTION", None)
    if option is None or not _from_loopback(sock, host):
        return None
    for name in LOOPBACK_CONGESTION:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, option, name)
        except OSError:
            continue
        return name
    return None


def _from_loopback(sock: socket.socket, host: str | None) -> bool:
    """Whether ``sock`` is an IP connection from this machine (``host``: the peer's IP
    address if the caller has it, else it is asked for)."""
    if host is None:
        if sock.family not in (socket.AF_INET, socket.AF_INET6):
            return False
        try:
            host = sock.getpeername()[0]
        except OSError:
            return False
    return _is_loopback(host)


@functools.lru_cache(maxsize=256)
def _is_loopback(host: str) -> bool:
    """Whether ``host`` (a peer address as the socket gives it) is this machine."""
    try:
        address = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


class ReplySender:
    """Send a connection's replies from any thread, whole and in order.

    Args:
        sock: the connection's socket (non-blocking). Its owner closes it, once no
            thread sends (`idle`) and none will (no call of the connection runs).
        on_blocked: called, from the sending thread, when the socket stayed full for
            `wait` seconds: the caller must then call `resume` whenever the socket is
            writable (from one thread) until it returns True.
        on_room: called, from the sending thread, when the bytes queued drop to
            `low_water` or below after `want_room` was called.
        wait: how long a worker thread waits for a full socket before handing over.
        low_water: see `on_room`.

    Attributes:
        error: the error that ended sending (the rest is dropped), if any.
    """

    __slots__ = (
        "_busy",
        "_closing",
        "_lock",
        "_on_blocked",
        "_on_room",
        "_poll",
        "_queue",
        "_queued",
        "_sendfile",
        "_sock",
        "_want_room",
        "error",
        "low_water",
        "wait",
    )

    def __init__(
        self,
        sock: socket.socket,
        *,
        on_blocked: Callable[[], None],
        on_room: Callable[[], None],
        wait: float = 0.05,
        low_water: int = 64 * 1024,
    ) -> None:
        self._sock = sock
        self._on_blocked = on_blocked
        self._on_room = on_room
        self.wait = wait
        self.low_water = low_water
        self._lock = threading.Lock()
        self._queue: collections.deque[list[memoryview | FileSlice]] = collections.deque()
        self._sendfile = hasattr(os, "sendfile")
        self._queued = 0
        self._busy = False
        self._closing = False
        self._want_room = False
        self._poll = select.poll()
        self._poll.register(sock.fileno(), select.POLLOUT)
        self.error: OSError | None = None

    @property
    def queued_bytes(self) -> int:
        """Bytes of replies queued and not yet sent."""
        return self._queued

    @property
    def idle(self) -> bool:
        """Whether nothing is queued and no thread is sending."""
        return not self._busy

    def send(
        self,
        buffers: Sequence[bytes | bytearray | memoryview | FileSlice],
        *,
        wait: float | None = None,
    ) -> bool:
        """Queue one reply and, unless another thread is sending, send the queue now.

        A `FileSlice` is sent from its file (``os.sendfile``) where that works, else as
        its view; the caller keeps it (and its file) alive by handing it over.

        Blocks for at most about `wait` seconds (default: the attribute) per stall of
        the socket, then hands over (see ``on_blocked``); the event loop passes 0.

        Returns:
            True if the queue is sent (or dropped: after a socket error, or after
            `shutdown`), False if bytes remain queued (another thread or the loop
            sends them).
        """
        with self._lock:
            if self.error is not None or self._closing:
                return True
            direct = not self._busy and not self._queue
            if direct:
                self._busy = True  # this thread is the sender now
            else:
                self._enqueue(buffers)
                if self._busy:
                    return False
                self._busy = True
        if direct:
            for b in buffers:
                if isinstance(b, FileSlice):
                    with self._lock:
                        self._enqueue(buffers)
                    break
            else:  # the common case: nothing queued, the socket takes the whole reply
                if TYPE_CHECKING:  # no FileSlice in it
                    plain = cast("Sequence[bytes | bytearray | memoryview]", buffers)
                else:  # (no cast() call per reply)
                    plain = buffers
                if self._send_whole(plain):
                    return True
        if self._drain(self.wait if wait is None else wait):
            return True
        self._on_blocked()
        return False

    def _enqueue(self, buffers: Sequence[bytes | bytearray | memoryview | FileSlice]) -> None:
        """Queue one reply at the tail (the caller holds the lock)."""
        views: list[memoryview | FileSlice] = [
            b if isinstance(b, FileSlice) else memoryview(b).cast("B") for b in buffers if len(b)
        ]
        self._queue.append(views)
        self._queued += sum(len(v) if isinstance(v, FileSlice) else v.nbytes for v in views)

    def _send_whole(self, buffers: Sequence[bytes | bytearray | memoryview]) -> bool:
        """One ``sendmsg`` of a reply found with nothing queued (this thread the sender).

        Returns:
            True if it went out whole (or the connection failed) and no other reply was
            queued meanwhile: sending is released. False: what is left of it is at the
            head of the queue (other replies behind it), for `_drain`.
        """
        try:
            sent = self._sock.sendmsg(buffers) if len(buffers) <= IOV_MAX else 0
        except BlockingIOError:
            sent = 0
        except OSError as err:
            with self._lock:
                self.error = err
                self._queue.clear()
                self._queued = 0
            return False  # _drain releases sending (and tells a want_room waiter)
        total = 0
        for b in buffers:
            total += len(b) if type(b) is bytes else memoryview(b).nbytes
        with self._lock:
            if sent < total:
                left = [memoryview(b).cast("B") for b in buffers]
                while sent:
                    if sent >= left[0].nbytes:
                        sent -= left.pop(0).nbytes
                    else:
                        left[0] = left[0][sent:]
                        sent = 0
                rest: list[memoryview | FileSlice] = [v for v in left if v.nbytes]
                self._queue.appendleft(rest)
                self._queued += sum(v.nbytes for v in left)
                return False
            if self._queue:  # replies queued by other threads while this one was sent
                return False
            self._busy = False
            notify = self._want_room
            self._want_room = False
        if notify:
            self._on_room()
        return True

    def resume(self) -> bool:
        """Send what the socket takes now (the loop, after ``on_blocked``, when writable).

        Returns:
            True when the queue is empty and sending is released: stop watching.
        """
        return self._drain(0.0)

    def abort(self) -> None:
        """Drop what is queued and stop sending: only when no worker thread is sending
        (the loop owns sending after ``on_blocked`` and has stopped watching)."""
        with self._lock:
            self._queue.clear()
            self._queued = 0
            self._busy = False
            self._closing = True

    def shutdown(self) -> None:
        """End the connection now (any thread): the client sees it closed, and the
        replies not sent yet are dropped. The owner closes the socket later."""
        with self._lock:
            self._closing = True
            self._queue.clear()
            self._queued = 0
            notify = self._want_room
            self._want_room = False
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        if notify:
            self._on_room()

    def want_room(self) -> bool:
        """Ask for ``on_room`` once the queue is at `low_water` or below.

        Returns:
            True if it already is (no callback will come for this request).
        """
        with self._lock:
            if self._queued <= self.low_water or self.error is not None:
                return True
            self._want_room = True
            return False

    # -- the sending thread

    def _drain(self, wait: float) -> bool:
        """Send the queue (this thread is the sender); False if the socket stays full."""
        while True:
            with self._lock:
                while self._queue and not self._queue[0]:
                    self._queue.popleft()
                if not self._queue or self.error is not None:
                    self._busy = False
                    notify = self._want_room
                    self._want_room = False
                    done = True
                else:
                    head = self._queue[0]
                    done = False
            if done:
                if notify:
                    self._on_room()
                return True
            try:
                sent = self._send_some(head)
            except BlockingIOError:
                if wait <= 0 or not self._poll.poll(int(wait * 1000)):
                    return False
                continue
            except OSError as err:
                with self._lock:
                    self.error = err
                    self._queue.clear()
                    self._queued = 0
                continue
            with self._lock:
                self._queued = max(0, self._queued - sent)
                notify = self._want_room and self._queued <= self.low_water
                if notify:
                    self._want_room = False
            if notify:
                self._on_room()

    def _send_some(self, head: list[memoryview | FileSlice]) -> int:
        """One ``sendmsg`` of the head reply's buffers up to its next `FileSlice`, or one
        ``sendfile`` of the slice at its head; drop what went out of ``head``."""
        first = head[0]
        if isinstance(first, FileSlice):
            n = self._send_file(first)
            if n < 0:  # no sendfile here: the view, as any buffer
                head[0] = first.view
                return 0
            if n >= len(first):
                del head[0]
            else:
                head[0] = FileSlice(first.view[n:], first.file, first.offset + n)
            return n
        views: list[memoryview] = []
        for b in head[:IOV_MAX]:
            if isinstance(b, FileSlice):
                break
            views.append(b)
        more = len(views) < len(head)  # a file's bytes follow: no short segment now
        n = self._sock.sendmsg(views, (), socket.MSG_MORE if more else 0)
        sent = n
        while n:
            view = views[0]
            if n >= view.nbytes:
                n -= view.nbytes
                del views[0], head[0]
            else:
                head[0] = view[n:]
                n = 0
        return sent

    def _send_file(self, part: FileSlice) -> int:
        """``sendfile`` of ``part``: the bytes sent, or -1 if it cannot be sent that way.

        Raises:
            BlockingIOError: the socket is full.
            OSError: the connection failed.
        """
        if not self._sendfile:
            return -1
        try:
            n = os.sendfile(self._sock.fileno(), part.file.fileno(), part.offset, len(part))
        except OSError as err:
            if err.errno not in _NO_SENDFILE:
                raise
            self._sendfile = False
            return -1
        if n == 0:  # the file is shorter than its mapping says: let the view tell
            return -1
        return n
