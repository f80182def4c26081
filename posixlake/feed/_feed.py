"""ChangeFeed: the commits of a table as they land, one :class:`ChangeBatch` per version."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from types import TracebackType

from posixlake.delta import DeltaLog
from posixlake.errors import InvalidOperation, VersionError
from posixlake.feed._read import ChangeBatch, ChangeReader
from posixlake.feed._watch import Waiter, make_waiter
from posixlake.storage import is_local
from posixlake.types import CommitInfo

__all__ = ["ChangeFeed", "open_feed"]


class ChangeFeed:
    """The changes of every commit of one table from a version on, as they land.

    Iterate it (``for batch in feed``) or ``async for batch in feed``; each
    :class:`ChangeBatch` is one version, in order, each exactly once. Iteration waits
    for the next commit (inotify on a local ``_delta_log/``, polling with backoff on
    object stores) and ends only when :meth:`close` is called (from any thread). A
    consumer that stores the last version it handled resumes with
    ``db.subscribe(from_version=last + 1)``.

    Commits of any writer count: this process, other processes, NFS, Spark, delta-rs.

    Attributes:
        next_version: the version the next batch will be.
    """

    def __init__(
        self,
        log: DeltaLog,
        *,
        from_version: int | None,
        waiter: Waiter,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._log = log
        self._waiter = waiter
        self._reader = ChangeReader(log)
        self._clock = clock
        self._generation = log.generation
        self._infos: dict[int, CommitInfo] = {}
        self._closed = threading.Event()
        self._latest = log.refresh()
        if from_version is None:
            from_version = self._latest + 1
        elif isinstance(from_version, bool) or not isinstance(from_version, int):
            raise VersionError(f"from_version must be an int, not {type(from_version).__name__}")
        elif from_version < 0:
            raise VersionError(f"from_version must be 0 or more, not {from_version}")
        self.next_version = from_version
        self.delivered_at: float | None = None
        self.last_commit_lag_seconds: float | None = None

    # -- state ---------------------------------------------------------------------

    @property
    def uri(self) -> str:
        """The table's location."""
        return self._log.uri

    @property
    def latest_version(self) -> int:
        """The newest version the feed has seen in the log."""
        return self._latest

    @property
    def lag_versions(self) -> int:
        """Versions committed but not yet delivered (as of the last look at the log)."""
        return max(0, self._latest - self.next_version + 1)

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def close(self) -> None:
        """End the iteration (a waiting ``next`` returns at once). Thread-safe."""
        self._closed.set()
        self._waiter.close()

    def __enter__(self) -> ChangeFeed:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- one step ------------------------------------------------------------------

    def _info(self, version: int) -> CommitInfo:
        info = self._infos.pop(version, None)
        if info is not None:
            return info
        for entry in self._log.history(self._latest - version + 1):
            if entry.version >= version:
                self._infos[entry.version] = entry
        info = self._infos.pop(version, None)
        if info is None:
            raise self._reader.expired(version, VersionError(f"no commit {version} in the log"))
        return info

    def step(self) -> ChangeBatch | None:
        """Return the next batch if its commit has landed, else None (never waits).

        Raises:
            ChangesExpired: its changes are gone (VACUUM, log cleanup).
            InvalidOperation: the table was replaced under the feed (a restore onto its
                path): its version numbers mean other content now.
        """
        if self.closed:
            return None
        self._latest = self._log.refresh()
        if self._log.generation != self._generation:
            raise InvalidOperation(
                f"the table at {self._log.uri} was replaced (restored onto its path): "
                "its versions mean other content now; subscribe again"
            )
        if self._latest < self.next_version:
            return None
        batch = self._reader.read(self._info(self.next_version))
        self.next_version += 1
        self._waiter.reset()
        now = self._clock()
        self.delivered_at = now
        self.last_commit_lag_seconds = max(0.0, now - batch.timestamp.timestamp())
        return batch

    def available(self) -> Iterator[ChangeBatch]:
        """Yield the batches of the commits that have landed, without waiting for more."""
        while True:
            batch = self.step()
            if batch is None:
                return
            yield batch

    # -- iteration -----------------------------------------------------------------

    def __iter__(self) -> Iterator[ChangeBatch]:
        return self

    def __next__(self) -> ChangeBatch:
        while not self.closed:
            batch = self.step()
            if batch is not None:
                return batch
            if not self._waiter.wait():
                break
        raise StopIteration

    def __aiter__(self) -> AsyncIterator[ChangeBatch]:
        return self

    async def __anext__(self) -> ChangeBatch:
        while not self.closed:
            batch = await asyncio.to_thread(self.step)
            if batch is not None:
                return batch
            if not await self._waiter.wait_async():
                break
        raise StopAsyncIteration


def open_feed(
    uri: str,
    storage_options: Mapping[str, str] | None,
    *,
    from_version: int | None = None,
    min_interval: float = 0.1,
    max_interval: float = 5.0,
    sleep: Callable[[float], None] | None = None,
    async_sleep: Callable[[float], Awaitable[None]] | None = None,
    clock: Callable[[], float] = time.time,
) -> ChangeFeed:
    """Open a feed on the table at ``uri`` with a log handle of its own.

    Local tables are watched with inotify (unless ``sleep``/``async_sleep`` are given,
    which select polling); object stores are polled every ``min_interval`` seconds,
    doubling to ``max_interval`` while nothing is committed.

    Raises:
        NotFound: no table at ``uri``. VersionError: a negative ``from_version``.
    """
    # the watch exists before the feed's first look at the log: no commit slips between
    waiter = make_waiter(
        uri,
        local=is_local(uri),
        min_interval=min_interval,
        max_interval=max_interval,
        sleep=sleep,
        async_sleep=async_sleep,
    )
    try:
        log = DeltaLog.open(uri, storage_options)
        return ChangeFeed(log, from_version=from_version, waiter=waiter, clock=clock)
    except BaseException:
        waiter.close()
        raise
