"""Operation counters and latency windows behind ``DatabaseOps.get_metrics``."""

from __future__ import annotations

import contextlib
import functools
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, ParamSpec, TypeVar

from posixlake.types import Metrics, Percentiles

if TYPE_CHECKING:
    from posixlake.delta._retry import Contention

__all__ = ["WINDOW", "Counters", "percentiles", "timed"]

#: latency samples kept per operation (the most recent ones)
WINDOW: Final = 4096

_P = ParamSpec("_P")
_R = TypeVar("_R")


def percentiles(samples: list[float], count: int) -> Percentiles:
    """Return nearest-rank p50/p90/p99/max of ``samples`` (``count``: calls measured)."""
    if not samples:
        return Percentiles(count, 0.0, 0.0, 0.0, 0.0)
    ordered = sorted(samples)
    n = len(ordered)

    def rank(p: float) -> float:
        return ordered[min(n - 1, max(0, math.ceil(p * n) - 1))]

    return Percentiles(count, rank(0.50), rank(0.90), rank(0.99), ordered[-1])


class Counters:
    """Operation counters of one DatabaseOps, with per-operation latency windows."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self.started = clock()
        self.lock = threading.Lock()
        self.counts: dict[str, int] = dict.fromkeys(
            (
                "queries",
                "inserts",
                "merges",
                "deletes",
                "updates",
                "rows_written",
                "rows_deleted",
                "commits",
                "errors",
            ),
            0,
        )
        self.commit_ms_total = 0.0
        self.commit_ms_last = 0.0
        self.query_ms_total = 0.0
        self.query_ms_max = 0.0
        self._samples: dict[str, deque[float]] = {}
        self._calls: dict[str, int] = {}

    @property
    def clock(self) -> Callable[[], float]:
        """The monotonic clock the figures are measured with (seconds)."""
        return self._clock

    def bump(self, **deltas: int) -> None:
        with self.lock:
            for k, v in deltas.items():
                self.counts[k] += v

    def failed(self, err: BaseException) -> None:
        """Count a failed call once, however many layers the error passes through."""
        if getattr(err, "_posixlake_counted", False):
            return
        with contextlib.suppress(AttributeError):  # a type that refuses attributes
            err._posixlake_counted = True  # type: ignore[attr-defined]
        self.bump(errors=1)

    def query(self, started: float) -> None:
        """Count a successful query that began at ``started`` (the clock's time)."""
        ms = (self._clock() - started) * 1000
        with self.lock:
            self.counts["queries"] += 1
            self.query_ms_total += ms
            self.query_ms_max = max(self.query_ms_max, ms)

    def observe(self, operation: str, ms: float) -> None:
        """Record one call of ``operation`` that took ``ms`` milliseconds."""
        with self.lock:
            window = self._samples.get(operation)
            if window is None:
                window = self._samples[operation] = deque(maxlen=WINDOW)
            window.append(ms)
            self._calls[operation] = self._calls.get(operation, 0) + 1

    def commit(self, started: float) -> None:
        ms = (self._clock() - started) * 1000
        with self.lock:
            self.counts["commits"] += 1
            self.commit_ms_total += ms
            self.commit_ms_last = ms
        self.observe("commit", ms)

    def snapshot(
        self,
        contention: Contention | None = None,
        *,
        buffered_rows: int = 0,
        table_reloads: int = 0,
    ) -> Metrics:
        with self.lock:
            c = dict(self.counts)
            avg = self.commit_ms_total / c["commits"] if c["commits"] else 0.0
            latency = {
                op: percentiles(list(window), self._calls[op])
                for op, window in sorted(self._samples.items())
            }
            last = self.commit_ms_last
            avg_query = self.query_ms_total / c["queries"] if c["queries"] else 0.0
            max_query = self.query_ms_max
        return Metrics(
            queries=c["queries"],
            inserts=c["inserts"],
            merges=c["merges"],
            deletes=c["deletes"],
            updates=c["updates"],
            rows_written=c["rows_written"],
            rows_deleted=c["rows_deleted"],
            commits=c["commits"],
            errors=c["errors"],
            avg_commit_latency_ms=avg,
            last_commit_latency_ms=last,
            uptime_seconds=self._clock() - self.started,
            avg_query_latency_ms=avg_query,
            max_query_latency_ms=max_query,
            commit_conflicts=contention.conflicts if contention else 0,
            commit_retries=contention.retries if contention else 0,
            commits_given_up=contention.gave_up if contention else 0,
            buffered_rows=buffered_rows,
            table_reloads=table_reloads,
            latency_ms=latency,
        )


def timed(operation: str) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """Decorate a DatabaseOps method: record its wall time under ``operation``.

    Failed calls are measured too (an error is a response the caller waited for). Wall
    time comes from ``time.perf_counter`` (the injected clock drives uptime and commit
    latency, which tests pin).
    """

    def wrap(method: Callable[_P, _R]) -> Callable[_P, _R]:
        @functools.wraps(method)
        def inner(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            counters: Counters = getattr(args[0], "_counters")  # noqa: B009 - self
            started = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                counters.observe(operation, (time.perf_counter() - started) * 1000)

        return inner

    return wrap
