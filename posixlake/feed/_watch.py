"""Waiting for the next commit: inotify on a local ``_delta_log/``, polling with backoff
elsewhere.

A :class:`Waiter` is told nothing about versions: it returns when a commit MAY have
landed, and the feed then asks the log (one ``stat`` of the next commit file for a local
table). So a spurious wake-up costs a stat, and a missed event costs at most
``recheck_seconds``: inotify does not see commits written by another machine to a
network file system, and a ``_delta_log`` replaced by a restore is another directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import select
import threading
from collections.abc import Awaitable, Callable
from typing import Final, Protocol

__all__ = ["InotifyWaiter", "PollingWaiter", "Waiter", "make_waiter"]

logger = logging.getLogger(__name__)

#: a local watch still re-checks the log this often (missed events, a replaced directory)
RECHECK_SECONDS: Final = 30.0


class Waiter(Protocol):
    """Blocks until a commit may have landed. ``reset`` after a commit was seen."""

    def wait(self) -> bool:
        """Block until something may have changed; return False once closed."""

    async def wait_async(self) -> bool:
        """The same on the running event loop (never blocks the loop)."""

    def reset(self) -> None:
        """Note that a commit was just found (polling starts again at its fastest)."""

    def close(self) -> None:
        """Wake every waiter (they return False) and release the watch. Thread-safe."""


class _Wakeable:
    """A self-pipe that wakes a waiter on close, and closes its descriptors once no one
    waits any more (the last waiter, or close itself)."""

    def __init__(self) -> None:
        self._wake_r, self._wake_w = os.pipe()
        self._closed = False
        self._waiting = 0
        self._released = False
        self._state = threading.Lock()

    def _enter(self) -> bool:
        with self._state:
            if self._closed:
                return False
            self._waiting += 1
            return True

    def _leave(self) -> bool:
        with self._state:
            self._waiting -= 1
            if self._closed and not self._waiting:
                self._release()
            return not self._closed

    def _release(self) -> None:
        if self._released:
            return
        self._released = True
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._release_more()

    def _release_more(self) -> None:
        pass

    def close(self) -> None:
        with self._state:
            if self._closed:
                return
            self._closed = True
            with contextlib.suppress(OSError):
                os.write(self._wake_w, b"x")
            if not self._waiting:
                self._release()


class PollingWaiter(_Wakeable):
    """Wake up after a delay that doubles while nothing changes (object stores).

    Args:
        min_interval / max_interval: the first and the longest delay, in seconds.
        sleep / async_sleep: injected for tests (``time.sleep`` / ``asyncio.sleep``).
    """

    def __init__(
        self,
        *,
        min_interval: float = 0.1,
        max_interval: float = 5.0,
        sleep: Callable[[float], None] | None = None,
        async_sleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        if not 0 < min_interval <= max_interval:
            raise ValueError("need 0 < min_interval <= max_interval")
        self.min_interval = min_interval
        self.max_interval = max_interval
        self.interval = min_interval
        self._sleep = sleep
        self._async_sleep = async_sleep
        super().__init__()

    def _next_delay(self) -> float:
        delay = self.interval
        self.interval = min(self.max_interval, self.interval * 2)
        return delay

    def wait(self) -> bool:
        if not self._enter():
            return False
        try:
            delay = self._next_delay()
            if self._sleep is not None:
                self._sleep(delay)
            else:
                select.select([self._wake_r], [], [], delay)
        finally:
            alive = self._leave()
        return alive

    async def wait_async(self) -> bool:
        if not self._enter():
            return False
        try:
            delay = self._next_delay()
            if self._async_sleep is not None:
                await self._async_sleep(delay)
            else:
                await _readable_or_timeout(self._wake_r, delay)
        finally:
            alive = self._leave()
        return alive

    def reset(self) -> None:
        self.interval = self.min_interval


class InotifyWaiter(_Wakeable):
    """Wake up when an entry of a local ``_delta_log/`` is created or renamed into place.

    The watch is set up in the constructor, before the feed first reads the log, so a
    commit between that read and :meth:`wait` is not missed (its event is queued).

    Raises:
        OSError: inotify is not available (not Linux, or out of watches).
    """

    def __init__(self, log_dir: str, *, recheck_seconds: float = RECHECK_SECONDS) -> None:
        from inotify_simple import INotify, flags

        self._flags = flags
        self._log_dir = log_dir
        self._inotify = INotify(nonblocking=True)
        self._mask = (
            flags.CREATE | flags.MOVED_TO | flags.CLOSE_WRITE | flags.DELETE_SELF | flags.MOVE_SELF
        )
        self._inotify.add_watch(log_dir, self._mask)
        self._recheck = recheck_seconds
        super().__init__()

    def _release_more(self) -> None:
        with contextlib.suppress(OSError):
            self._inotify.close()

    def _drain(self) -> None:
        try:
            events = self._inotify.read(timeout=0)
        except (BlockingIOError, OSError):
            return
        if any(e.mask & (self._flags.DELETE_SELF | self._flags.MOVE_SELF) for e in events):
            # the directory was replaced (a restore): watch the new one, if any
            with contextlib.suppress(OSError):
                self._inotify.add_watch(self._log_dir, self._mask)

    def wait(self) -> bool:
        if not self._enter():
            return False
        try:
            fd = self._inotify.fileno()
            ready, _, _ = select.select([fd, self._wake_r], [], [], self._recheck)
            if fd in ready:
                self._drain()
        finally:
            alive = self._leave()
        return alive

    async def wait_async(self) -> bool:
        if not self._enter():
            return False
        loop = asyncio.get_running_loop()
        woken = asyncio.Event()
        fds = (self._inotify.fileno(), self._wake_r)
        try:
            for fd in fds:
                loop.add_reader(fd, woken.set)
            try:
                await _event_or_timeout(woken, self._recheck)
            finally:
                for fd in fds:
                    loop.remove_reader(fd)
            self._drain()
        finally:
            alive = self._leave()
        return alive

    def reset(self) -> None:
        pass


async def _readable_or_timeout(fd: int, timeout: float) -> None:
    loop = asyncio.get_running_loop()
    woken = asyncio.Event()
    loop.add_reader(fd, woken.set)
    try:
        await _event_or_timeout(woken, timeout)
    finally:
        loop.remove_reader(fd)


async def _event_or_timeout(event: asyncio.Event, timeout: float) -> None:
    """Wait until ``event`` is set or ``timeout`` seconds pass.

    Not ``asyncio.wait_for``: on Python 3.11 it swallows a cancellation that arrives
    once the event is set but before the waiting task resumes, and a change stream whose
    client went away (aiohttp cancels its handler) then waited on for ever.
    """
    timer = asyncio.get_running_loop().call_later(timeout, event.set)
    try:
        await event.wait()
    finally:
        timer.cancel()


def make_waiter(
    uri: str,
    *,
    local: bool,
    min_interval: float = 0.1,
    max_interval: float = 5.0,
    sleep: Callable[[float], None] | None = None,
    async_sleep: Callable[[float], Awaitable[None]] | None = None,
) -> Waiter:
    """Return an inotify waiter for a local table (polling where inotify fails)."""
    if local and sleep is None and async_sleep is None:
        try:
            return InotifyWaiter(os.path.join(uri, "_delta_log"))
        except (OSError, ImportError) as err:
            logger.info("no inotify watch on %s (%s): polling", uri, err)
    return PollingWaiter(
        min_interval=min_interval,
        max_interval=max_interval,
        sleep=sleep,
        async_sleep=async_sleep,
    )
