"""Copies that hash every byte, on a pool of threads, with shared progress."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from typing import Final, TypeVar

from posixlake.backup.manifest import BackupCorrupted

__all__ = [
    "DEFAULT_WORKERS",
    "Meter",
    "Progress",
    "hashed",
    "parallel_map",
]

_T = TypeVar("_T")
_R = TypeVar("_R")

DEFAULT_WORKERS: Final = 4

Progress = Callable[[int, int], None]
"""``progress(done_bytes, total_bytes)``; called from worker threads, one call at a time."""


class Meter:
    """Shared progress counter (thread-safe), calling ``progress`` one call at a time."""

    def __init__(self, total: int, progress: Progress | None) -> None:
        self.total = total
        self.done = 0
        self._progress = progress
        self._lock = threading.Lock()
        if progress is not None:
            progress(0, total)

    def add(self, n: int) -> None:
        """Count ``n`` more bytes done and report them."""
        with self._lock:
            self.done += n
            if self._progress is not None:
                self._progress(self.done, self.total)


def hashed(
    chunks: Iterable[bytes],
    *,
    expect_sha: str | None,
    expect_size: int | None,
    where: str,
    meter: Meter | None,
    digest_out: list[str] | None = None,
) -> Iterator[bytes]:
    """Pass chunks through, hashing; raise BackupCorrupted before the end on a mismatch."""
    h = hashlib.sha256()
    size = 0
    for chunk in chunks:
        h.update(chunk)
        size += len(chunk)
        if meter is not None:
            meter.add(len(chunk))
        if expect_size is not None and size > expect_size:
            raise BackupCorrupted(
                f"{where}: corrupted (larger than the {expect_size} bytes expected)"
            )
        yield chunk
    digest = h.hexdigest()
    if expect_size is not None and size != expect_size:
        raise BackupCorrupted(f"{where}: corrupted ({size} bytes, {expect_size} expected)")
    if expect_sha is not None and digest != expect_sha:
        raise BackupCorrupted(f"{where}: corrupted (SHA-256 mismatch)")
    if digest_out is not None:
        digest_out.append(digest)


def parallel_map(fn: Callable[[_T], _R], items: Sequence[_T], workers: int) -> list[_R]:
    """Return ``[fn(x) for x in items]`` computed on a thread pool; raise the first error."""
    if workers <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="posixlake-backup") as pool:
        futures: list[Future[_R]] = [pool.submit(fn, x) for x in items]
        _done, pending = wait(futures, return_when=FIRST_EXCEPTION)
        for fut in pending:
            fut.cancel()
        wait(futures)
        for fut in futures:
            err = None if fut.cancelled() else fut.exception()
            if err is not None:
                raise err
        return [fut.result() for fut in futures]
