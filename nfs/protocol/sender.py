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

No asyncio here: ``nfs.protocol.server`` wires the callbacks to its loop.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import ipaddress
import select
import socket
import threading
from collections.abc import Callable, Sequence
from typing import Final

__all__ = ["IOV_MAX", "LOOPBACK_CONGESTION", "ReplySender", "unpaced_on_loopback"]

IOV_MAX: Final = 1024
"""Buffers per ``sendmsg`` (the Linux limit)."""

LOOPBACK_CONGESTION: Final = (b"cubic", b"reno")
"""Congestion controls asked for on a loopback connection, first one Linux takes."""


def unpaced_on_loopback(sock: socket.socket) -> bytes | None:
    """Give a TCP connection from this machine a congestion control that does not pace.

    Where the machine's default is BBR (common on cloud images), a loopback connection
    is paced by the kernel's internal pacing (``lo`` has no ``fq`` qdisc) at BBR's
    estimate of the path, which a request-reply stream of 1 MiB READs keeps well below
    what loopback carries: measured here, warm ``nfs-cat`` of 425 MB at 2.65 GB/s paced
    and 3.04 GB/s with cubic, the same server in alternating runs. There is no network
    on loopback to be fair to, so the connection asks for cubic (or reno) instead. A
    remote peer, or a system that refuses, keeps the machine's choice.

    Returns:
        The congestion control set, or None if the connection is left as it was.
    """
    option = getattr(socket, "TCP_CONGESTION", None)
    if option is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return None
    try:
        host = sock.getpeername()[0]
    except OSError:
        return None
    if not _is_loopback(host):
        return None
    for name in LOOPBACK_CONGESTION:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, option, name)
        except OSError:
            continue
        return name
    return None


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
        self._queue: collections.deque[list[memoryview]] = collections.deque()
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
        self, buffers: Sequence[bytes | bytearray | memoryview], *, wait: float | None = None
    ) -> bool:
        """Queue one reply and, unless another thread is sending, send the queue now.

        Blocks for at most about `wait` seconds (default: the attribute) per stall of
        the socket, then hands over (see ``on_blocked``); the event loop passes 0.

        Returns:
            True if the queue is sent (or dropped: after a socket error, or after
            `shutdown`), False if bytes remain queued (another thread or the loop
            sends them).
        """
        views = [memoryview(b).cast("B") for b in buffers if len(b)]
        size = sum(v.nbytes for v in views)
        with self._lock:
            if self.error is not None or self._closing:
                return True
            self._queue.append(views)
            self._queued += size
            if self._busy:
                return False
            self._busy = True
        if self._drain(self.wait if wait is None else wait):
            return True
        self._on_blocked()
        return False

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

    def _send_some(self, head: list[memoryview]) -> int:
        """One ``sendmsg`` of the head reply's buffers; drop what went out of ``head``."""
        n = self._sock.sendmsg(head[:IOV_MAX])
        sent = n
        while n:
            first = head[0]
            if n >= first.nbytes:
                n -= first.nbytes
                del head[0]
            else:
                head[0] = first[n:]
                n = 0
        return sent
