"""Operation counters behind ``DatabaseOps.get_metrics``."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

from posixlake.types import Metrics

__all__ = ["Counters"]


class Counters:
    """Operation counters behind :meth:`DatabaseOps.get_metrics`."""

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

    def commit(self, started: float) -> None:
        ms = (self._clock() - started) * 1000
        with self.lock:
            self.counts["commits"] += 1
            self.commit_ms_total += ms
            self.commit_ms_last = ms

    def snapshot(self) -> Metrics:
        with self.lock:
            c = dict(self.counts)
            avg = self.commit_ms_total / c["commits"] if c["commits"] else 0.0
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
                last_commit_latency_ms=self.commit_ms_last,
                uptime_seconds=self._clock() - self.started,
                avg_query_latency_ms=self.query_ms_total / c["queries"] if c["queries"] else 0.0,
                max_query_latency_ms=self.query_ms_max,
            )
